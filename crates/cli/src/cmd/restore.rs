//! `tessera restore`.

use super::open_backend;
use crate::args::RepoArg;
use crate::ui;
use anyhow::Result;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_core::archive::ExtractReport;
use tessera_core::restore::CacheSpec;
use tessera_core::{Repository, RestoreOptions, RestoreReport};

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    restore: RestoreReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    extract: Option<ExtractReport>,
}

pub fn restore(
    repo: &RepoArg,
    snapshot: &str,
    target: Option<PathBuf>,
    to_stdout: bool,
    cache: &str,
    json: bool,
) -> Result<ExitCode> {
    let cache = CacheSpec::parse(cache).map_err(|e| anyhow::anyhow!("--cache: {e}"))?;
    let r = Repository::open(open_backend(repo)?)?;
    let backup = r.resolve(snapshot)?.clone();
    let opts = RestoreOptions { cache };
    let pb = ui::progress(Some(backup.logical_bytes), "restore", json || to_stdout);
    let report = if to_stdout {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
        let rep = r.restore_to(&backup, &mut out, &opts, &mut |n| pb.set_position(n))?;
        out.flush()?;
        Report {
            restore: rep,
            extract: None,
        }
    } else {
        let t = target.expect("clap requires a target");
        let (rep, ext) = r.restore_into(&backup, &t, &opts, &mut |n| pb.set_position(n))?;
        Report {
            restore: rep,
            extract: Some(ext),
        }
    };
    pb.finish_and_clear();
    let refused = report.extract.as_ref().map_or(0, |e| e.refused.len());
    if json {
        if to_stdout {
            // stdout carries the data; the report goes to stderr.
            eprintln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            ui::print_json(&report)?;
        }
    } else {
        let s = &report.restore;
        let line = format!(
            "restored backup {} ({cache}): {} in {} chunks from {} containers (read amplification {:.2}, speed factor {:.2} MB/container), {:.2} s, {:.1} MB/s",
            s.backup_id,
            ui::bytes(s.restored_bytes),
            s.chunks,
            s.data_containers_read,
            s.read_amplification,
            s.speed_factor,
            s.seconds,
            s.throughput_mb_s
        );
        if to_stdout {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
        if let Some(e) = &report.extract {
            for x in &e.refused {
                eprintln!("refused {}: {}", x.path, x.reason);
            }
        }
    }
    if refused > 0 {
        eprintln!(
            "error: {refused} entries were refused (unsafe paths); everything else was restored"
        );
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}
