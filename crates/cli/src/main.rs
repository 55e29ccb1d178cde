//! `tessera`: the command-line tool over `tessera-core`.
//!
//! Every error ends the process with one line on stderr (`error: …`) and a
//! non-zero status; a panic is turned into such a line too, never a backtrace.

mod args;
mod cmd;
mod filter;
mod ui;

use clap::Parser;
use std::process::ExitCode;

/// At most one glibc malloc arena per core. glibc's default allows eight
/// per core, and a restore's sixteen threads then each keep freed buffers in
/// an arena of their own that no other thread reuses: a settled restore of a
/// 2.3 GB system tree peaked at 162 MB with them and 143 MB with two arenas
/// on two cores, in the same time (docs/LAB.md, "Malloc arenas"). Threads
/// beyond the cores never allocate at the same moment anyway.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets a tunable; it runs before any thread starts.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error: {msg}{at} (please report this)");
    }));
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match args::bad_value(&e) {
            // A bad option value is an error like any other: one line, status 1.
            Some(bad) => {
                eprintln!("error: {bad}");
                return ExitCode::from(1);
            }
            None => e.exit(),
        },
    };
    match std::panic::catch_unwind(|| cmd::run(cli)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("error: {}", ui::one_line(&e));
            ExitCode::from(1)
        }
        Err(_) => ExitCode::from(101),
    }
}
