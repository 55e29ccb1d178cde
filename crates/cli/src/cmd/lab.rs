//! `tessera lab …`: the lab's demo and benchmark.

use crate::args::LabCommand;
use crate::ui;
use anyhow::Result;
use std::process::ExitCode;

pub fn run(cmd: LabCommand) -> Result<ExitCode> {
    match cmd {
        LabCommand::Demo { dir, json } => {
            let opts = tessera_lab::demo::DemoOptions {
                dir,
                ..Default::default()
            };
            let report = tessera_lab::demo::run_demo(&opts, &mut |msg| {
                if !json {
                    eprintln!("{msg}");
                }
            })?;
            if json {
                ui::print_json(&report)?;
            } else {
                println!("{}", report.render_table());
            }
        }
        LabCommand::Bench { dir, size, json } => {
            let size = tessera_core::chunking::parse_size(&size).map_err(anyhow::Error::msg)?;
            let opts = tessera_lab::bench::BenchOptions {
                dir,
                size: size as u64,
                ..Default::default()
            };
            let report = tessera_lab::bench::run_bench(&opts, &mut |msg| {
                if !json {
                    eprintln!("{msg}");
                }
            })?;
            if json {
                ui::print_json(&report)?;
            } else {
                println!("{}", report.render());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
