//! What a GC plans and what it did.

use super::mark::Mark;
use super::options::{GcOptions, GcStrategy};
use super::phase::PhaseReport;
use super::select::Selection;
use crate::backend::Generation;
use crate::container::ContainerId;
use serde::Serialize;
use std::collections::HashSet;

/// What a GC did. Container counts and bytes are of data containers (the
/// papers' figures); recipe containers are reported in `recipe_*`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    pub strategy: GcStrategy,
    /// The mark run: logical, physical, physical+ or focused.
    pub mark: String,
    /// Mark passes (2 when sampling under `--memory-limit`).
    pub mark_passes: u32,
    /// Recipe subtrees the mark skipped as already marked, and the logical
    /// bytes below them (what walking each backup in full would add).
    pub skipped_subtrees: u64,
    pub skipped_bytes: u64,
    /// Seconds the copy phase slept to keep to `--max-read-rate` and
    /// `--max-write-rate`.
    pub throttled_seconds: f64,
    /// Per phase: time, bytes and containers read, memory.
    pub phases: Vec<PhaseReport>,
    pub dry_run: bool,
    /// Containers a deletion involves: referenced by a backup forgotten
    /// since the last GC, or holding a chunk no retained backup references.
    pub involved_containers: u64,
    /// Involved containers left alone: every chunk still live, or liveness
    /// at or above the threshold.
    pub skipped_containers: u64,
    /// Containers deleted (their live chunks, if any, copied forward).
    pub reclaimed_containers: u64,
    /// New containers written by the sweep (in a dry run: a lower bound,
    /// live bytes / container size).
    pub produced_containers: u64,
    /// Container bytes read by the sweep.
    pub bytes_read: u64,
    /// Container bytes written by the sweep.
    pub bytes_written: u64,
    pub mark_seconds: f64,
    pub analyze_seconds: f64,
    pub sweep_read_seconds: f64,
    pub sweep_write_seconds: f64,
    /// Writing the new index segment and manifest, deleting the old objects.
    pub publish_seconds: f64,
    pub total_seconds: f64,
    /// Mark tables + GC cache + ownership tree (their peaks). The GC cache
    /// counts the chunks' logical bytes, what data mode holds, so trace mode
    /// reports the same figure.
    pub peak_memory_bytes: u64,
    /// Logical bytes of the involved containers (GC throughput's numerator).
    pub involved_bytes: u64,
    /// Involved containers with no live chunk: deleted without being read.
    pub deleted_without_copy: u64,
    /// Logical container bytes freed: reclaimed minus produced.
    pub reclaimed_bytes: u64,
    /// Live chunks copied forward (data and recipe).
    pub moved_chunks: u64,
    /// GCCDF segments processed.
    pub segments: u64,
    /// Recipe container bytes read by mark.
    pub mark_bytes_read: u64,
    pub mark_memory_bytes: u64,
    pub gc_cache_peak_bytes: u64,
    pub tree_peak_bytes: u64,
    pub recipe_involved_containers: u64,
    pub recipe_reclaimed_containers: u64,
    pub recipe_produced_containers: u64,
    /// Online GC: dead chunk copies that concurrent backups deduplicated
    /// against, added to the live set at the cutoff (FAST'17 §3.5).
    pub resurrections: u64,
    /// Online GC: resurrection records read at the cutoff.
    pub resurrection_records: u64,
}

/// Mark and select: what a GC would do, before it does it (`gc --dry-run`
/// reports exactly this). [`Writer::gc_with`](crate::Writer::gc_with) carries it out.
pub struct GcPlan {
    pub options: GcOptions,
    /// The manifest generation planned on: a plan is only carried out on it.
    pub generation: Generation,
    pub mark: Mark,
    pub selection: Selection,
    /// Containers to delete, data and recipe (empty and copied forward).
    pub reclaimed: HashSet<ContainerId>,
    /// Logical bytes of the reclaimed containers.
    pub reclaimed_logical_bytes: u64,
    /// Time of mark and select.
    pub mark_seconds: f64,
    /// Recipe container bytes mark read.
    pub mark_bytes_read: u64,
    /// Logical bytes per container (the dry run's produced estimate).
    pub container_size: u64,
    /// The mark's phases and select.
    pub phases: Vec<PhaseReport>,
}

impl GcPlan {
    /// The report of the plan alone: what a dry run prints. A GC that
    /// sweeps adds the sweep's figures to it.
    pub fn report(&self) -> GcReport {
        let sel = &self.selection;
        let involved = sel.involved.len() as u64;
        let reclaimed = (sel.empty.len() + sel.copy.len()) as u64;
        let mut r = GcReport {
            strategy: self.options.strategy,
            mark: self.options.mark.to_string(),
            mark_passes: self.mark.passes,
            skipped_subtrees: self.mark.walk.skipped_subtrees,
            skipped_bytes: self.mark.walk.skipped_bytes,
            phases: self.phases.clone(),
            dry_run: self.options.dry_run,
            involved_containers: involved,
            involved_bytes: sel.involved.iter().map(|c| c.logical_bytes).sum(),
            deleted_without_copy: sel.empty.len() as u64,
            reclaimed_containers: reclaimed,
            skipped_containers: involved - reclaimed,
            recipe_involved_containers: sel.recipe_involved.len() as u64,
            recipe_reclaimed_containers: (sel.recipe_empty.len() + sel.recipe_copy.len()) as u64,
            mark_seconds: self.mark_seconds,
            mark_bytes_read: self.mark_bytes_read,
            mark_memory_bytes: self.mark.memory_bytes,
            peak_memory_bytes: self.mark.memory_bytes,
            total_seconds: self.mark_seconds,
            ..Default::default()
        };
        if self.options.dry_run {
            // A lower bound: the live bytes in as few containers as hold them.
            r.produced_containers = sel.copy_live_bytes.div_ceil(self.container_size);
            r.reclaimed_bytes = self
                .reclaimed_logical_bytes
                .saturating_sub(sel.copy_live_bytes);
        }
        r
    }
}
