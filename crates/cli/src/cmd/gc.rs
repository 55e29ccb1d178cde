//! gc, and forget by retention policy (or as a dry run).

use super::open::open_backend;
use crate::args::GcArgs;
use crate::args::RepoArg;
use crate::filter::Filter;
use crate::ui;
use anyhow::{bail, Result};
use serde::Serialize;
use std::process::ExitCode;
use tessera_core::backend::IoCounters;
use tessera_core::catalog::{BackupEntry, BackupId};
use tessera_core::gc::GcReport;
use tessera_core::layout::mfdedup::forget::ForgetSpace;
use tessera_core::retention::{GroupBy, GroupPlan, RetentionPolicy};

#[derive(Serialize)]
struct ForgetReport {
    dry_run: bool,
    forgotten: Vec<BackupEntry>,
    kept: Vec<BackupId>,
    remaining: usize,
    /// Each group's keep/forget split (a retention policy only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<GroupPlan>,
    /// mfdedup layout: exactly what is (or would be) freed, from the
    /// volume headers.
    #[serde(skip_serializing_if = "Option::is_none")]
    freed: Option<ForgetSpace>,
}

/// How `forget` chooses: a policy per group, among the backups the filter
/// selects.
pub struct ForgetBy {
    pub policy: RetentionPolicy,
    pub group_by: GroupBy,
    pub filter: Filter,
    pub dry_run: bool,
}

pub fn forget(repo: &RepoArg, specs: &[String], how: ForgetBy, json: bool) -> Result<ExitCode> {
    let ForgetBy {
        policy,
        group_by,
        filter,
        dry_run,
    } = how;
    if specs.is_empty() && policy.is_empty() {
        bail!("nothing to forget: give backup ids or a retention policy (--keep-last, --keep-daily, --keep-weekly, --keep-monthly, --keep-yearly, --keep-within, --keep-tag)");
    }
    if !specs.is_empty() && !policy.is_empty() {
        bail!("give either backup ids or a retention policy, not both");
    }
    let mut r = super::open::open_writer_lazy(repo, open_backend(repo)?, "tessera forget")?;
    let mut ids = Vec::new();
    let mut groups = Vec::new();
    if policy.is_empty() {
        for s in specs {
            let id = filter.resolve(&r, s)?.id;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    } else {
        let chosen: Vec<BackupEntry> = filter.select(r.backups()).into_iter().cloned().collect();
        groups = policy.apply_grouped(&chosen, group_by);
        ids = groups.iter().flat_map(|g| g.plan.forget.clone()).collect();
    }
    let mf = !r.config().layout.is_containers();
    let mut freed = None;
    let forgotten: Vec<BackupEntry> = if dry_run || ids.is_empty() {
        if mf {
            freed = Some(r.forget_space(&ids)?);
        }
        r.backups()
            .iter()
            .filter(|b| ids.contains(&b.id))
            .cloned()
            .collect()
    } else if mf {
        let (gone, space) = r.forget_freeing(&ids)?;
        freed = Some(space);
        gone
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
        groups,
        freed,
    };
    r.close()?;
    if json {
        ui::print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    if ui::quiet() {
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would forget" } else { "forgot" };
    if report.groups.len() > 1 || (report.groups.len() == 1 && !filter.is_empty()) {
        for g in &report.groups {
            println!(
                "{}: keep {}, forget {}",
                g.group,
                g.plan.keep.len(),
                g.plan.forget.len()
            );
        }
    }
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
    if let Some(f) = &report.freed {
        print_freed(f, dry_run);
        println!(
            "{} backups {}",
            report.remaining,
            if dry_run { "would remain" } else { "remain" }
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} backups {}; run `tessera gc` to reclaim space",
        report.remaining,
        if dry_run { "would remain" } else { "remain" }
    );
    Ok(ExitCode::SUCCESS)
}

/// The space an mfdedup forget frees, category by category.
fn print_freed(f: &ForgetSpace, dry_run: bool) {
    for u in &f.unarranged {
        println!("chain {u} is not fully arranged: forget arranges it first, so the answer below covers only what is arranged (run `tessera arrange` for an exact answer)");
    }
    for c in &f.categories {
        println!(
            "  {} Cat.({},{}) of chain {} ({}): {}",
            if dry_run { "would free" } else { "freed" },
            c.start,
            c.end,
            c.chain,
            match c.volume {
                Some(v) => format!("volume {v}"),
                None => "active".to_string(),
            },
            ui::bytes(c.bytes)
        );
    }
    println!(
        "{} {} of chunks ({} of objects, {} volumes whole) and {} of recipes, copying nothing",
        if dry_run { "would free" } else { "freed" },
        ui::bytes(f.data_bytes),
        ui::bytes(f.data_object_bytes),
        f.volumes_deleted,
        ui::bytes(f.recipe_object_bytes)
    );
}

/// Test hook of online GC across processes: with this set to a directory,
/// `gc` stops at two points of its run until the test lets it go on.
/// After marking and selecting (before its cutoff) it creates `DIR/planned`
/// and waits for `DIR/planned.go`; after its cutoff (reclaimed containers
/// announced, records read) it creates `DIR/cut` and waits for `DIR/cut.go`.
/// So a test makes a backup commit exactly between mark and cutoff (GC
/// then resurrects what it deduplicated) or after the cutoff (the backup
/// then stores its own copies), without depending on timing.
const PAUSE_ENV: &str = "TESSERA_TEST_GC_PAUSE";

/// How long a paused GC waits for the test before it gives up.
const PAUSE_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// [`Writer::gc`](tessera_core::repo::Writer::gc) in its online steps,
/// pausing between them as [`PAUSE_ENV`] says.
fn paused_gc(
    r: &mut tessera_core::repo::Writer,
    opts: &tessera_core::gc::GcOptions,
    dir: &std::path::Path,
) -> Result<GcReport> {
    let pause = |step: &str| -> Result<()> {
        std::fs::write(dir.join(step), b"")?;
        let go = dir.join(format!("{step}.go"));
        let since = std::time::Instant::now();
        while !go.exists() {
            if since.elapsed() > PAUSE_LIMIT {
                bail!("{PAUSE_ENV}: {} did not appear", go.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(())
    };
    let mut run = r.gc_begin(opts)?;
    pause("planned")?;
    r.gc_cutoff(&mut run)?;
    pause("cut")?;
    Ok(r.gc_finish(run)?)
}

pub fn gc(repo: &RepoArg, a: &GcArgs, json: bool) -> Result<ExitCode> {
    let opts = a.options();
    opts.validate().map_err(anyhow::Error::msg)?;
    let backend = open_backend(repo)?;
    let mut r = super::open::open_writer_replacing(repo, backend.clone(), "tessera gc")?;
    if !r.config().layout.is_containers() {
        // MFDedup: forget already deleted whole categories; gc only looks
        // for categories no retained version needs, and never copies.
        let space = if opts.dry_run {
            r.forget_space(&[])?
        } else {
            r.mfdedup_gc()?
        };
        r.close()?;
        if json {
            ui::print_json(&space)?;
        } else {
            println!("mfdedup layout: no mark-and-sweep; forget deletes volumes and categories itself. gc deletes only categories no retained version needs:");
            print_freed(&space, opts.dry_run);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let pb = ui::progress(None, "garbage collection", json);
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    let report = match std::env::var_os(PAUSE_ENV) {
        Some(dir) if !opts.dry_run => paused_gc(&mut r, &opts, std::path::Path::new(&dir)),
        _ => r.gc(&opts).map_err(Into::into),
    };
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
    if ui::quiet() {
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
    if s.mark_ran != s.mark {
        println!(
            "  the focus (~{} of recipe containers, ~{} of recipe entries) cost about as much as the full mark (~{}, ~{}): the {} mark ran instead",
            ui::bytes(s.focus.focus_estimate_bytes),
            ui::bytes(s.focus.focus_estimate_entry_bytes),
            ui::bytes(s.focus.full_estimate_bytes),
            ui::bytes(s.focus.full_estimate_entry_bytes),
            s.mark_ran
        );
    } else if s.mark == "focused" {
        println!(
            "  focused mark ran: ~{} of recipe containers against ~{} for the full mark, {} correlative backups; memory: liveness array {}, graph {} (base map {} besides)",
            ui::bytes(s.focus.focus_estimate_bytes),
            ui::bytes(s.focus.full_estimate_bytes),
            s.focus.correlative_backups,
            ui::bytes(s.focus.liveness_array_bytes),
            ui::bytes(s.focus.graph_bytes),
            ui::bytes(s.focus.base_map_bytes)
        );
    }
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
    if s.resurrections > 0 {
        println!(
            "  resurrected {} dead chunks that concurrent backups deduplicated against ({} records)",
            s.resurrections, s.resurrection_records
        );
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
