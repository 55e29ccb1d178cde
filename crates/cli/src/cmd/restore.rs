//! `tessera restore`.

use super::open::open_backend;
use crate::args::RepoArg;
use crate::filter::Filter;
use crate::ui;
use anyhow::Result;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_core::archive::ExtractReport;
use tessera_core::backend::IoCounters;
use tessera_core::salvage::SalvageReport;
use tessera_core::{RestoreOptions, RestoreReport};

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    restore: RestoreReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    extract: Option<ExtractReport>,
    /// Backend requests and bytes of the whole command.
    backend: IoCounters,
}

/// Where a restore goes: a directory, or standard output.
pub struct To {
    pub target: Option<PathBuf>,
    pub stdout: bool,
}

pub fn restore(
    repo: &RepoArg,
    snapshot: &str,
    filter: &Filter,
    to: To,
    include: &[String],
    opts: RestoreOptions,
    json: bool,
) -> Result<ExitCode> {
    let (target, to_stdout) = (to.target, to.stdout);
    let backend = open_backend(repo)?;
    let r = super::open::open_repo(repo, backend.clone())?;
    let backup = filter.resolve(&r, snapshot)?.clone();
    let cache = opts.cache;
    let pb = ui::progress(Some(backup.logical_bytes), "restore", json || to_stdout);
    let mut report = if to_stdout {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
        let rep = r.restore_to(&backup, &mut out, &opts, &mut |n| pb.set_position(n))?;
        out.flush()?;
        Report {
            restore: rep,
            extract: None,
            backend: IoCounters::default(),
        }
    } else {
        let t = target.expect("clap requires a target");
        let (rep, ext) =
            r.restore_into_selected(&backup, &t, &opts, include, &mut |n| pb.set_position(n))?;
        Report {
            restore: rep,
            extract: Some(ext),
            backend: IoCounters::default(),
        }
    };
    pb.finish_and_clear();
    report.backend = backend.counters();
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
        let line = match &s.mfdedup {
            Some(m) => format!(
                "{line}\n  mfdedup: {} categories from {} volumes in {} sequential runs, out-of-order{}",
                m.categories,
                m.volumes,
                m.seeks,
                if m.buffered {
                    " (buffered through a temporary file, then written in order)"
                } else {
                    ""
                }
            ),
            None => line,
        };
        if ui::quiet() {
        } else if to_stdout {
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
            "error: {refused} entries were refused (reasons above); everything else was restored"
        );
        return Ok(ExitCode::from(3));
    }
    let unmatched = report
        .extract
        .as_ref()
        .map_or(&[][..], |e| &e.unmatched[..]);
    if !unmatched.is_empty() {
        anyhow::bail!(
            "--include matched nothing in backup {}: {} (see `tessera ls`)",
            report.restore.backup_id,
            unmatched.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `restore --skip-damaged`: everything intact is restored, damaged chunks
/// become zeros, and what is damaged is listed; exit status 3 if anything is.
pub fn restore_damaged(
    repo: &RepoArg,
    snapshot: &str,
    filter: &Filter,
    target: Option<PathBuf>,
    to_stdout: bool,
    json: bool,
) -> Result<ExitCode> {
    let backend = open_backend(repo)?;
    let r = super::open::open_repo(repo, backend.clone())?;
    let backup = filter.resolve(&r, snapshot)?.clone();
    let pb = ui::progress(Some(backup.logical_bytes), "restore", json || to_stdout);
    let (rep, ext) = if to_stdout {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
        let rep = r.restore_damaged_to(&backup, &mut out, &mut |n| pb.set_position(n))?;
        out.flush()?;
        (rep, None)
    } else {
        let t = target.expect("clap requires a target");
        let (rep, ext) = r.restore_damaged_into(&backup, &t, &mut |n| pb.set_position(n))?;
        (rep, Some(ext))
    };
    pb.finish_and_clear();
    if json {
        #[derive(Serialize)]
        struct Salvaged<'a> {
            #[serde(flatten)]
            salvage: &'a SalvageReport,
            #[serde(skip_serializing_if = "Option::is_none")]
            extract: Option<&'a ExtractReport>,
            backend: IoCounters,
        }
        let v = serde_json::to_string_pretty(&Salvaged {
            salvage: &rep,
            extract: ext.as_ref(),
            backend: backend.counters(),
        })?;
        if to_stdout {
            eprintln!("{v}");
        } else {
            println!("{v}");
        }
    } else {
        eprintln!(
            "restored backup {}: {}, of which {} damaged (written as zeros)",
            rep.backup_id,
            ui::bytes(rep.restored_bytes),
            ui::bytes(rep.damaged_bytes)
        );
        for (o, l) in &rep.damaged {
            eprintln!("damaged: bytes {o}..{}", o + l);
        }
        for f in &rep.files {
            eprintln!("damaged file: {f}");
        }
        if let Some(e) = &ext {
            for x in &e.refused {
                eprintln!("refused {}: {}", x.path, x.reason);
            }
        }
    }
    let refused = ext.as_ref().map_or(0, |e| e.refused.len());
    if rep.damaged.is_empty() && refused == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(3))
    }
}

/// `tessera ls`: one line per entry (or, with `--json`, one array).
pub fn ls(repo: &RepoArg, snapshot: &str, long: bool, json: bool) -> Result<ExitCode> {
    let r = super::open::open_repo(repo, open_backend(repo)?)?;
    let backup = r.resolve(snapshot)?.clone();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut entries = Vec::new();
    // A reader that stops early (`tessera ls … | head`) ends the listing
    // quietly, as `ls` does.
    let mut closed = false;
    let listed = r.list_entries(&backup, &mut |e| {
        if json {
            entries.push(e);
            return Ok(());
        }
        let line = if long {
            let kind = match e.kind {
                "dir" => 'd',
                "symlink" => 'l',
                "hardlink" => 'h',
                "file" => '-',
                "fifo" => 'p',
                "chardev" => 'c',
                "blockdev" => 'b',
                _ => '?',
            };
            let link = e.link.as_ref().map_or(String::new(), |l| {
                if e.kind == "symlink" {
                    format!(" -> {l}")
                } else {
                    format!(" => {l}")
                }
            });
            format!(
                "{kind}{} {:>12} {} {}{link}",
                permissions(e.mode),
                e.size,
                ui::time(e.mtime),
                e.path
            )
        } else {
            e.path
        };
        writeln!(out, "{line}").map_err(|err| {
            closed = err.kind() == std::io::ErrorKind::BrokenPipe;
            tessera_core::Error::io("cannot write the listing", err)
        })
    });
    match listed {
        Err(_) if closed => return Ok(ExitCode::SUCCESS),
        other => other?,
    }
    if json {
        drop(out);
        ui::print_json(&entries)?;
    } else if let Err(e) = out.flush() {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `rwxr-xr-x` for permission bits (setuid, setgid and sticky as s, s, t).
fn permissions(mode: u32) -> String {
    let mut s: Vec<char> = "rwxrwxrwx"
        .chars()
        .enumerate()
        .map(|(i, c)| if mode & (1 << (8 - i)) != 0 { c } else { '-' })
        .collect();
    for (bit, at, set) in [(0o4000, 2, 's'), (0o2000, 5, 's'), (0o1000, 8, 't')] {
        if mode & bit != 0 {
            s[at] = if s[at] == '-' {
                set.to_ascii_uppercase()
            } else {
                set
            };
        }
    }
    s.into_iter().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(super::permissions(0o755), "rwxr-xr-x");
        assert_eq!(super::permissions(0o640), "rw-r-----");
        assert_eq!(super::permissions(0o4755), "rwsr-xr-x");
        assert_eq!(super::permissions(0o1777), "rwxrwxrwt");
        assert_eq!(super::permissions(0o2644), "rw-r-Sr--");
    }
}
