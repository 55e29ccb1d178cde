//! `tessera backup`.

use super::open_backend;
use crate::args::RepoArg;
use crate::ui;
use anyhow::{Context, Result};
use serde::Serialize;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_core::archive::TreeStats;
use tessera_core::backend::IoCounters;
use tessera_core::catalog::SourceKind;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{BackupOptions, BackupReport, Repository};

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    backup: BackupReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    tree: Option<TreeStats>,
    /// Backend requests and bytes of the whole command.
    backend: IoCounters,
}

/// Size of a directory's files, for the progress bar's total (best effort).
fn tree_size(path: &std::path::Path) -> Option<u64> {
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).ok()?.flatten() {
            let m = e.path().symlink_metadata().ok()?;
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                total += m.len();
            }
        }
    }
    Some(total)
}

pub fn backup(
    repo: &RepoArg,
    path: Option<PathBuf>,
    stdin_name: Option<String>,
    trace_file: Option<PathBuf>,
    (rewrite, segment_bytes): (RewriteSpec, u64),
    force_read: bool,
    json: bool,
) -> Result<ExitCode> {
    let options = |name: String, source| BackupOptions {
        rewrite,
        segment_bytes,
        ..BackupOptions::new(name, source)
    };
    // Check the source before taking the lock, so a typo fails fast.
    if let Some(p) = &path {
        std::fs::symlink_metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
    }
    let backend = open_backend(repo)?;
    let mut r = Repository::open_writer(backend.clone(), "tessera backup")?;
    r.set_files_cache(
        tessera_core::ingest::FilesCacheOptions::default_dir()
            .map(|dir| tessera_core::ingest::FilesCacheOptions { dir, force_read }),
    );
    let mut report = if let Some(name) = stdin_name {
        let pb = ui::progress(None, "backup", json);
        let opts = options(name, SourceKind::Stream);
        let mut stdin = std::io::stdin().lock();
        let rep = r.backup_reader(&opts, &mut stdin, &mut |n| pb.set_position(n))?;
        pb.finish_and_clear();
        Report {
            backup: rep,
            tree: None,
            backend: IoCounters::default(),
        }
    } else if let Some(t) = trace_file {
        let f = File::open(&t).with_context(|| format!("cannot open {}", t.display()))?;
        let opts = options(t.display().to_string(), SourceKind::Trace);
        let chunks = tessera_core::trace::read_trace(BufReader::new(f), t.display().to_string());
        Report {
            backup: r.backup_trace(&opts, chunks)?,
            tree: None,
            backend: IoCounters::default(),
        }
    } else {
        let p = path.expect("clap requires a path");
        let abs = std::path::absolute(&p).unwrap_or(p.clone());
        let meta = std::fs::metadata(&p).with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            let pb = ui::progress(tree_size(&p), "backup", json);
            let opts = options(abs.display().to_string(), SourceKind::Tree);
            let (rep, tree) = r.backup_tree(&opts, &p, &mut |n| pb.set_position(n))?;
            pb.finish_and_clear();
            Report {
                backup: rep,
                tree: Some(tree),
                backend: IoCounters::default(),
            }
        } else {
            let pb = ui::progress(Some(meta.len()), "backup", json);
            let mut f = File::open(&p).with_context(|| format!("cannot open {}", p.display()))?;
            let opts = options(abs.display().to_string(), SourceKind::File);
            let rep = r.backup_reader(&opts, &mut f, &mut |n| pb.set_position(n))?;
            pb.finish_and_clear();
            Report {
                backup: rep,
                tree: None,
                backend: IoCounters::default(),
            }
        }
    };
    let leftovers = r.leftovers().objects.len();
    r.close()?;
    report.backend = backend.counters();
    if json {
        ui::print_json(&report)?;
    } else {
        let b = &report.backup;
        if leftovers > 0 {
            eprintln!("note: removed {leftovers} leftover objects of an interrupted operation");
        }
        println!(
            "backup {} of {}: {} logical, {} new in {} of {} chunks, {} data + {} recipe containers written",
            b.backup.id,
            b.backup.name,
            ui::bytes(b.logical_bytes),
            ui::bytes(b.stored_bytes),
            b.new_chunks,
            b.chunks,
            b.data_containers_written,
            b.recipe_containers_written,
        );
        if rewrite != RewriteSpec::None {
            println!(
                "  rewrite {rewrite}: {} rewritten in {} chunks over {} segments",
                ui::bytes(b.rewritten_bytes),
                b.rewritten_chunks,
                b.segments,
            );
        }
        if let Some(t) = &report.tree {
            println!(
                "  {} files, {} directories, {} symlinks, {} hard links",
                t.files, t.dirs, t.symlinks, t.hardlinks
            );
            println!(
                "  contents {} ({} new), metadata {} ({} new), {} files from the files cache",
                ui::bytes(b.content_bytes),
                ui::bytes(b.new_content_bytes),
                ui::bytes(b.metadata_bytes),
                ui::bytes(b.new_metadata_bytes),
                b.files_from_cache,
            );
            for s in &t.skipped {
                eprintln!("  skipped {s}");
            }
        }
        println!(
            "  {:.2} s, {:.1} MB/s, root {}",
            b.seconds,
            b.throughput_mb_s,
            &b.backup.root[..16]
        );
    }
    Ok(ExitCode::SUCCESS)
}
