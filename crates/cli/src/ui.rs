//! Terminal output: one-line errors, human sizes, progress bars, JSON.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicI8, Ordering};

/// -1 with `--quiet`, 1 with `--verbose`, else 0.
static VERBOSITY: AtomicI8 = AtomicI8::new(0);

pub fn set_verbosity(quiet: bool, verbose: bool) {
    let v = if quiet {
        -1
    } else if verbose {
        1
    } else {
        0
    };
    VERBOSITY.store(v, Ordering::Relaxed);
}

/// `--quiet`: commands print no summary, only errors and warnings.
pub fn quiet() -> bool {
    VERBOSITY.load(Ordering::Relaxed) < 0
}

/// `--verbose`: commands print details (such as every path left out).
pub fn verbose() -> bool {
    VERBOSITY.load(Ordering::Relaxed) > 0
}

/// An error and its causes on one line.
pub fn one_line(e: &anyhow::Error) -> String {
    // Causes an error already prints (`{context}: {source}`) only once.
    let mut s = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !s.ends_with(&c) {
            s = format!("{s}: {c}");
        }
    }
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `1536` → `1.5 KiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Unix seconds → `2026-11-22 18:00:00` (UTC).
pub fn time(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string()
}

pub fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// A byte progress bar on stderr, drawn only when stderr is a terminal,
/// the output is not JSON and `--quiet` is not given. It is never coloured
/// (so `NO_COLOR` holds trivially).
/// Whether [`progress`] bars are drawn (stderr a terminal, not `--json`
/// or `--quiet`): work that only feeds a bar is skipped otherwise.
pub fn progress_shown(json: bool) -> bool {
    !(json || quiet() || !std::io::stderr().is_terminal())
}

pub fn progress(total: Option<u64>, what: &str, json: bool) -> ProgressBar {
    let pb = match total {
        Some(t) => ProgressBar::new(t),
        None => ProgressBar::no_length(),
    };
    if !progress_shown(json) {
        pb.set_draw_target(ProgressDrawTarget::hidden());
        return pb;
    }
    let style = if total.is_some() {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} {spinner} {bytes} {bytes_per_sec} {elapsed}"
    };
    pb.set_style(
        ProgressStyle::with_template(style)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}
