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

fn main() -> ExitCode {
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
