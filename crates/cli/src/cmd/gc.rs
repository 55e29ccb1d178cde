//! gc, and forget by retention policy (or as a dry run).

use super::open_backend;
use crate::args::GcArgs;
use crate::args::RepoArg;
use crate::ui;
use anyhow::{bail, Result};
use serde::Serialize;
use std::process::ExitCode;
use tessera_core::backend::IoCounters;
use tessera_core::catalog::{BackupEntry, BackupId};
use tessera_core::gc::GcReport;
use tessera_core::retention::RetentionPolicy;
use tessera_core::Repository;

#[derive(Serialize)]
struct ForgetReport {
    dry_run: bool,
    forgotten: Vec<BackupEntry>,
    kept: Vec<BackupId>,
    remaining: usize,
}

pub fn forget(
    repo: &RepoArg,
    specs: &[String],
    policy: RetentionPolicy,
    dry_run: bool,
    json: bool,
) -> Result<ExitCode> {
    if specs.is_empty() && policy.is_empty() {
        bail!("nothing to forget: give backup ids or a retention policy (--keep-last, --keep-daily, --keep-weekly, --keep-monthly)");
    }
    if !specs.is_empty() && !policy.is_empty() {
        bail!("give either backup ids or a retention policy, not both");
    }
    let mut r = Repository::open_writer(open_backend(repo)?, "tessera forget")?;
    let mut ids = Vec::new();
    if policy.is_empty() {
        for s in specs {
            let id = r.resolve(s)?.id;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    } else {
        ids = policy.apply(r.backups()).forget;
    }
    let forgotten: Vec<BackupEntry> = if dry_run || ids.is_empty() {
        r.backups()
            .iter()
            .filter(|b| ids.contains(&b.id))
            .cloned()
            .collect()
    } else {
        r.forget(&ids)?
    };
    let report = ForgetReport {
        dry_run,
        kept: r
            .backups()
            .iter()
            .map(|b| b.id)
            .filter(|id| !ids.contains(id))
            .collect(),
        remaining: r.backups().len() - if dry_run { ids.len() } else { 0 },
        forgotten,
    };
    r.close()?;
    if json {
        ui::print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would forget" } else { "forgot" };
    for b in &report.forgotten {
        println!(
            "{verb} backup {} ({}, {}, {})",
            b.id,
            b.name,
            ui::time(b.time),
            ui::bytes(b.logical_bytes)
        );
    }
    if report.forgotten.is_empty() {
        println!("nothing to forget");
    }
    println!(
        "{} backups {}; run `tessera gc` to reclaim space",
        report.remaining,
        if dry_run { "would remain" } else { "remain" }
    );
    Ok(ExitCode::SUCCESS)
}

pub fn gc(repo: &RepoArg, a: &GcArgs, json: bool) -> Result<ExitCode> {
    let opts = a.options();
    opts.validate().map_err(anyhow::Error::msg)?;
    let backend = open_backend(repo)?;
    let mut r = Repository::open_writer(backend.clone(), "tessera gc")?;
    let pb = ui::progress(None, "garbage collection", json);
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    let report = r.gc(&opts);
    pb.finish_and_clear();
    let report = report?;
    r.close()?;
    if json {
        #[derive(Serialize)]
        struct Report<'a> {
            #[serde(flatten)]
            gc: &'a GcReport,
            /// Backend requests and bytes of the whole command.
            backend: IoCounters,
        }
        ui::print_json(&Report {
            gc: &report,
            backend: backend.counters(),
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = &report;
    let verb = if s.dry_run {
        "would reclaim"
    } else {
        "reclaimed"
    };
    println!(
        "{} mark, {} gc{}: {} containers involved ({}), {verb} {} ({} without copying), produced {}",
        s.mark,
        s.strategy,
        if s.dry_run { " (dry run)" } else { "" },
        s.involved_containers,
        ui::bytes(s.involved_bytes),
        s.reclaimed_containers,
        s.deleted_without_copy,
        s.produced_containers
    );
    println!(
        "  freed {}; read {}, wrote {}; recipe containers: {} involved, {} reclaimed, {} produced",
        ui::bytes(s.reclaimed_bytes),
        ui::bytes(s.bytes_read),
        ui::bytes(s.bytes_written),
        s.recipe_involved_containers,
        s.recipe_reclaimed_containers,
        s.recipe_produced_containers
    );
    println!(
        "  time {:.3}s: mark {:.3}s, analyze {:.3}s, sweep read {:.3}s, write {:.3}s; peak memory {}",
        s.total_seconds,
        s.mark_seconds,
        s.analyze_seconds,
        s.sweep_read_seconds,
        s.sweep_write_seconds,
        ui::bytes(s.peak_memory_bytes)
    );
    if s.mark_passes > 1 {
        println!(
            "  {} mark passes: the live vector did not fit --memory-limit, so a sample was marked first",
            s.mark_passes
        );
    }
    if s.skipped_subtrees > 0 {
        println!(
            "  mark skipped {} recipe subtrees already marked ({} of backups)",
            s.skipped_subtrees,
            ui::bytes(s.skipped_bytes)
        );
    }
    if s.throttled_seconds > 0.0 {
        println!("  throttled {:.3}s", s.throttled_seconds);
    }
    for p in &s.phases {
        println!(
            "  {:<22} {:>8.3}s  read {} in {} containers, {} metadata reads ({}); memory {}",
            p.phase,
            p.seconds,
            ui::bytes(p.bytes_read),
            p.containers_read,
            p.metadata_reads,
            ui::bytes(p.metadata_bytes),
            ui::bytes(p.memory_bytes)
        );
    }
    Ok(ExitCode::SUCCESS)
}
