//! `tessera check`: verify the repository and list every problem.

use super::open::open_backend;
use crate::args::RepoArg;
use crate::ui;
use anyhow::Result;
use serde::Serialize;
use std::process::ExitCode;
use tessera_core::check::{check_backend_with, CheckOptions, CheckReport, ReadData};

#[derive(Serialize)]
struct Report {
    ok: bool,
    #[serde(flatten)]
    check: CheckReport,
    /// Leftovers removed by `--repair-leftovers`.
    removed_leftovers: Vec<String>,
}

/// `tessera check --rebuild-refgraph`: FGC's reference graph from the recipes.
pub fn rebuild_refgraph(repo: &RepoArg, granularity: u64, json: bool) -> Result<()> {
    let backend = open_backend(repo)?;
    let mut w = super::open::open_writer(repo, backend, "tessera check --rebuild-refgraph")?;
    let g = w.rebuild_refgraph(granularity)?;
    w.close()?;
    if !json {
        println!(
            "rebuilt the reference graph: {} bases, {} edges, virtual files of {}",
            g.data_bases.len() + g.recipe_bases.len(),
            g.edges.len(),
            if granularity == 0 {
                "whole backups".to_string()
            } else {
                format!("{granularity} bytes")
            }
        );
    }
    Ok(())
}

pub fn check(
    repo: &RepoArg,
    read_data: ReadData,
    repair_leftovers: bool,
    json: bool,
) -> Result<ExitCode> {
    let backend = open_backend(repo)?;
    let mut removed = Vec::new();
    if repair_leftovers {
        // A writer removes exactly the objects no manifest lists.
        let w = super::password::open_writer_sweeping(
            repo,
            backend.clone(),
            "tessera check --repair-leftovers",
        )?;
        if let Some(b) = w.broken_lock() {
            eprintln!("note: {}", b.notice());
        }
        removed = w.leftovers().objects.clone();
        w.close()?;
    }
    let check = check_backend_with(backend, &CheckOptions { read_data }, &|| {
        super::password::password(repo).map_err(|e| tessera_core::Error::Key(ui::one_line(&e)))
    })?;
    let ok = check.ok();
    if json {
        ui::print_json(&Report {
            ok,
            check,
            removed_leftovers: removed,
        })?;
    } else {
        let c = &check;
        println!(
            "checked generation {}: {} backups, {} containers{}, {} index entries, {} recipe chunks, {} distinct data chunks referenced",
            c.generation,
            c.backups,
            c.containers,
            if c.data_containers_read > 0 {
                format!(" ({} read whole, {} chunks rehashed)", c.data_containers_read, c.chunks_rehashed)
            } else {
                String::new()
            },
            c.index_entries,
            c.recipe_chunks_checked,
            c.data_chunks_referenced
        );
        for key in &removed {
            println!("removed leftover {key}");
        }
        if !c.leftovers.is_empty() {
            println!(
                "{} leftover objects of an interrupted mutation (removed by the next writer, or now with --repair-leftovers):",
                c.leftovers.len()
            );
            for key in &c.leftovers {
                println!("  {key}");
            }
        }
        for p in &c.problems {
            let mut line = format!("problem: {}: {}", p.object, p.problem);
            if !p.backups.is_empty() {
                let ids: Vec<String> = p.backups.iter().map(|b| b.to_string()).collect();
                line += &format!("; affects backups {}", ids.join(", "));
            }
            println!("{line}");
            for f in &p.files {
                println!("  file {f}");
            }
        }
        if ok {
            println!("no problems found");
        } else {
            println!("{} problems found", c.problems.len());
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
