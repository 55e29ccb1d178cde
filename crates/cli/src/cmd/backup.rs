//! `tessera backup`.

use super::open::open_backend;
use crate::args::{RecordArgs, RepoArg, SelectArgs};
use crate::{filter, ui};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_core::archive::{Selection, TreeStats};
use tessera_core::backend::IoCounters;
use tessera_core::catalog::{SnapshotMeta, SourceKind};
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{BackupOptions, BackupReport};

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

/// What to back up: paths (with `--files-from`), stdin, or a trace.
pub struct Source {
    pub paths: Vec<PathBuf>,
    pub stdin_name: Option<String>,
    pub trace_file: Option<PathBuf>,
}

/// The selection `--exclude` and friends describe.
fn selection(a: &SelectArgs) -> Result<Selection> {
    let mut s = Selection {
        one_file_system: a.one_file_system,
        exclude_caches: a.exclude_caches,
        exclude_if_present: a.exclude_if_present.clone(),
        ..Selection::default()
    };
    for p in &a.exclude {
        s.add_exclude(p, false)?;
    }
    for p in &a.iexclude {
        s.add_exclude(p, true)?;
    }
    for f in &a.exclude_file {
        s.add_exclude_file(f, false)?;
    }
    for f in &a.iexclude_file {
        s.add_exclude_file(f, true)?;
    }
    Ok(s)
}

/// The paths of `--files-from` files: one a line, `#` comments and blank
/// lines skipped; `-` reads standard input.
fn files_from(files: &[PathBuf]) -> Result<Vec<PathBuf>> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for f in files {
        let mut text = Vec::new();
        if f.as_os_str() == "-" {
            std::io::stdin().lock().read_to_end(&mut text)?;
        } else {
            text = std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?;
        }
        for line in text.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(line)));
        }
    }
    Ok(out)
}

/// `tessera backup --clone ID`: a fastcopy of backup ID (no data read or
/// written), with the source's host, paths and tags, and the source as
/// its parent.
pub fn clone(repo: &RepoArg, spec: &str, name: Option<&str>, json: bool) -> Result<ExitCode> {
    let mut r = super::open::open_writer(repo, open_backend(repo)?, "tessera backup")?;
    let source = r.resolve(spec)?.id;
    let entry = r.clone_backup(source, name)?;
    r.close()?;
    if json {
        ui::print_json(&entry)?;
    } else if !ui::quiet() {
        println!(
            "backup {} of {}: a clone of backup {source}, {} logical in {} chunks, no data read or written",
            entry.id,
            entry.name,
            ui::bytes(entry.logical_bytes),
            entry.chunks,
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)]
pub fn backup(
    repo: &RepoArg,
    source: Source,
    (rewrite, segment_bytes, compression): (
        RewriteSpec,
        Option<u64>,
        Option<tessera_core::Compression>,
    ),
    select: &SelectArgs,
    record: &RecordArgs,
    (chain, arrange): (Option<String>, bool),
    force_read: bool,
    json: bool,
) -> Result<ExitCode> {
    let Source {
        mut paths,
        stdin_name,
        trace_file,
    } = source;
    paths.extend(files_from(&select.files_from)?);
    if stdin_name.is_none() && trace_file.is_none() && paths.is_empty() {
        bail!("nothing to back up: --files-from listed no paths");
    }
    let selection = selection(select)?;
    // Check the sources before taking the lock, so a typo fails fast.
    for p in &paths {
        std::fs::symlink_metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
    }
    let abs: Vec<String> = paths.iter().map(|p| filter::absolute(p)).collect();
    let mut meta = SnapshotMeta {
        host: record
            .host
            .clone()
            .unwrap_or_else(tessera_core::lock::current_host),
        user: tessera_core::lock::current_owner(),
        paths: abs.clone(),
        tags: filter::tags(&record.tag),
        parent: None,
    };
    if let Some(t) = &trace_file {
        meta.paths = vec![filter::absolute(t)];
    }
    // A directory backup's walk starts now, on a thread of its own, so
    // that it overlaps the opening of the repository (the key derivation
    // of an encrypted one takes ~0.1 s of CPU); so does the progress bar's
    // sizing walk, and only when there is a bar to show.
    let is_tree = stdin_name.is_none()
        && trace_file.is_none()
        && (paths.len() > 1 || std::fs::metadata(&paths[0]).is_ok_and(|m| m.is_dir()));
    let mut scan =
        is_tree.then(|| tessera_core::archive::Scan::start(paths.clone(), selection.clone()));
    let sizing = (is_tree && ui::progress_shown(json)).then(|| {
        let paths = paths.clone();
        std::thread::spawn(move || paths.iter().try_fold(0u64, |t, p| Some(t + tree_size(p)?)))
    });
    let backend = open_backend(repo)?;
    let mut r = super::open::open_writer(repo, backend.clone(), "tessera backup")?;
    if let Some(c) = compression {
        r.set_compression(c);
    }
    r.set_files_cache(
        tessera_core::ingest::FilesCacheOptions::default_dir()
            .map(|dir| tessera_core::ingest::FilesCacheOptions { dir, force_read }),
    );
    let name = match (&stdin_name, &trace_file) {
        (Some(n), _) => n.clone(),
        (_, Some(t)) => t.display().to_string(),
        _ => abs.join(" "),
    };
    // The parent: the newest backup of the same host and paths (or name,
    // for a stream).
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    let mine = sorted(&meta.paths);
    meta.parent = r
        .backups()
        .iter()
        .filter(|b| {
            b.meta.host == meta.host
                && sorted(&b.meta.paths) == mine
                && (!mine.is_empty() || b.name == name)
        })
        .max_by_key(|b| (b.time, b.id))
        .map(|b| b.id);
    let options = |name: String, source| BackupOptions {
        rewrite,
        segment_bytes,
        meta: meta.clone(),
        chain: chain.clone(),
        arrange,
        ..BackupOptions::new(name, source)
    };
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
        let p = &paths[0];
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if paths.len() == 1 && !meta.is_dir() {
            if !selection.is_empty() {
                bail!(
                    "--exclude and the other selection options apply to directories; {} is a file",
                    p.display()
                );
            }
            let pb = ui::progress(Some(meta.len()), "backup", json);
            let mut f = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            let opts = options(name.clone(), SourceKind::File);
            let rep = r.backup_reader(&opts, &mut f, &mut |n| pb.set_position(n))?;
            pb.finish_and_clear();
            Report {
                backup: rep,
                tree: None,
                backend: IoCounters::default(),
            }
        } else {
            let total = sizing.and_then(|t| t.join().ok().flatten());
            let pb = ui::progress(total, "backup", json);
            let opts = options(name.clone(), SourceKind::Tree);
            let scan = scan.take().unwrap_or_else(|| {
                tessera_core::archive::Scan::start(paths.clone(), selection.clone())
            });
            let (rep, tree) = r.backup_scan(&opts, scan, &mut |n| pb.set_position(n))?;
            pb.finish_and_clear();
            Report {
                backup: rep,
                tree: Some(tree),
                backend: IoCounters::default(),
            }
        }
    };
    let leftovers = r.leftovers().objects.len();
    r.close()?;
    report.backend = backend.counters();
    let unreadable = report.tree.as_ref().map_or(0, |t| t.unreadable.len());
    if let Some(t) = &report.tree {
        // Never a silent gap: every path left out unread is named, even
        // with --json or --quiet.
        for u in &t.unreadable {
            eprintln!("warning: cannot read {u} (left out of the backup)");
        }
    }
    if json {
        ui::print_json(&report)?;
    } else if !ui::quiet() {
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
        if ui::verbose() || !b.backup.meta.tags.is_empty() {
            println!(
                "  host {}, tags [{}], parent {}",
                b.backup.meta.host,
                b.backup.meta.tags.join(","),
                b.backup
                    .meta
                    .parent
                    .map_or("none".to_string(), |p| p.to_string())
            );
        }
        println!(
            "  {:.2} s, {:.1} MB/s, root {}",
            b.seconds,
            b.throughput_mb_s,
            &b.backup.root[..16]
        );
        if let Some(mem) = b.ndf_memory_bytes {
            println!(
                "  chain {}: NDF index {} (this and the previous version)",
                b.backup.chain.as_deref().unwrap_or(&b.backup.name),
                ui::bytes(mem)
            );
            match &b.arranged {
                Some(a) => println!(
                    "  arranged {} version(s): read {} of active categories, {} archived into volumes, in {:.2} s",
                    a.steps,
                    ui::bytes(a.read_bytes),
                    ui::bytes(a.archived_bytes),
                    a.seconds
                ),
                None => println!("  not arranged (--no-arrange): run `tessera arrange` to catch up"),
            }
        }
    }
    if unreadable > 0 {
        eprintln!(
            "warning: backup {} is incomplete: {unreadable} paths could not be read (exit status 3)",
            report.backup.backup.id
        );
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}
