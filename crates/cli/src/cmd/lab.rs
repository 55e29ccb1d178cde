//! `tessera lab …`.

use crate::args::LabCommand;
use anyhow::Result;
use std::process::ExitCode;

pub fn run(cmd: LabCommand) -> Result<ExitCode> {
    match cmd {
        LabCommand::Bench { dir, size, json } => super::bench::run(&dir, &size, json.json),
        LabCommand::Demo { .. } => {
            anyhow::bail!(
                "lab demo is not available yet: the lab's experiment runner has not landed"
            )
        }
    }
}
