//! Carrying out a GC plan: sweep (naive copy-forward or GCCDF), publish
//! the new generation, then delete the reclaimed containers.

use super::phase::PhaseClock;
use super::plan::GcPlan;
use super::report::GcReport;
use super::sweep;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fgc::RefGraphState;
use std::collections::HashSet;
use std::time::Instant;

/// [`Writer::gc_with`](crate::Writer::gc_with).
pub(crate) fn gc_with(repo: &mut Context, plan: GcPlan) -> Result<GcReport> {
    if plan.generation != repo.manifest.generation {
        return Err(Error::invalid(format!(
            "the GC plan was made on generation {}, the repository is at {}: plan again",
            plan.generation, repo.manifest.generation
        )));
    }
    let started = Instant::now();
    let r = plan.report();
    let dry_run = plan.options.dry_run;
    let mut plan = plan;
    // The focused mark's updated graph goes out with this GC's generation.
    let mut graph_superseded = Vec::new();
    if let (false, Some(graph)) = (dry_run, plan.mark.refgraph.take()) {
        let mut state = RefGraphState::of(&repo.manifest)?.unwrap_or_default();
        graph_superseded = crate::fgc::stage(repo, &mut state, &graph)?;
        repo.staged.put(Some(&state));
    }
    let result = gc_sweep(repo, plan, r, started);
    // A publish took (and cleared) what was staged.
    let published = !std::mem::take(&mut repo.staged).contains::<RefGraphState>();
    if result.is_ok() && published {
        // Best effort: what is left is removed as a leftover by the next writer.
        for key in graph_superseded {
            let _ = repo.objects.delete(&key);
        }
    }
    result
}

fn gc_sweep(
    repo: &mut Context,
    plan: GcPlan,
    mut r: GcReport,
    started: Instant,
) -> Result<GcReport> {
    let dry_run = plan.options.dry_run;
    if dry_run || plan.reclaimed.is_empty() {
        if !dry_run && (!repo.manifest.forgotten.is_empty() || !repo.staged.is_empty()) {
            // Nothing to reclaim, but the deletions are now accounted for.
            let mut next = repo.manifest.clone();
            next.forgotten.clear();
            crate::publish::publish(repo, next, &[])?;
        }
        r.total_seconds += started.elapsed().as_secs_f64();
        return Ok(r);
    }
    let io1 = repo.metrics.snapshot();
    let clock = PhaseClock::start(repo, "copy");
    let swept = sweep::sweep_containers(repo, &plan.mark, &plan.selection, &plan.options)?;
    let mut copy = clock.stop(repo, 0);
    copy.metadata_reads = swept.stats.metadata_reads;
    copy.metadata_bytes = swept.stats.metadata_bytes;
    copy.memory_bytes = swept.stats.cache_peak_bytes + swept.stats.tree_peak_bytes;
    r.phases.push(copy);
    r.throttled_seconds = swept.stats.read_throttle.slept_seconds()
        + swept.data.write_throttle.slept_seconds()
        + swept.recipe.write_throttle.slept_seconds();
    let io = repo.metrics.snapshot().since(&io1);
    r.bytes_read = io.data_container_bytes_read;
    r.bytes_written = io.data_container_bytes_written;
    swept.add_to(&mut r, plan.mark.memory_bytes, plan.reclaimed_logical_bytes);
    let produced = swept.produced();
    let moved: Vec<_> = swept
        .data
        .moved
        .iter()
        .chain(&swept.recipe.moved)
        .copied()
        .collect();
    let next_id = swept.recipe.next_id();
    let GcPlan {
        mark, reclaimed, ..
    } = plan;
    // A dead copy whose index entry names a container that also holds a
    // live copy of the same chunk (PGC+ sent both to one stored chunk)
    // keeps its entry: the bytes stay with the container, and a backup
    // that deduplicated against that copy after the mark (online, in
    // another process) may read it, while the online protocol protects
    // only the reclaimed containers (dropping such "aliases" lost a
    // committed backup's chunk, found by the model test). The entry goes
    // when its container is reclaimed.
    let aliases: HashSet<(crate::fingerprint::Fingerprint, crate::index::CopyNo)> = HashSet::new();
    drop(mark);
    let t = Instant::now();
    sweep::commit(repo, &reclaimed, &produced, &moved, &aliases, next_id)?;
    r.publish_seconds = t.elapsed().as_secs_f64();
    r.total_seconds += started.elapsed().as_secs_f64();
    Ok(r)
}
