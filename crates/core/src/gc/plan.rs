//! Mark and select, what a GC would do before it does it: the [`GcPlan`]
//! that `gc --dry-run` reports and `run::gc_with` carries out.

use super::mark::{self, Mark, MarkSpec, Marker};
use super::options::{GcOptions, GcStrategy};
use super::phase::{PhaseClock, PhaseReport};
use super::report::GcReport;
use super::select::{self, Selection};
use crate::backend::Generation;
use crate::container::ContainerId;
use crate::context::Context;
use crate::error::{Error, Result};
use std::collections::HashSet;
use std::time::Instant;

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
    /// Whole containers mark and select read, the seeks among them, and
    /// the metadata sections they read.
    pub mark_containers_read: u64,
    pub mark_seeks: u64,
    pub mark_metadata_reads: u64,
    /// Data fingerprints in the index when marked (the live vector's keys).
    pub data_fingerprints: u64,
}

/// `bytes` in bits per key (0 without keys).
fn bits_per(bytes: u64, keys: u64) -> f64 {
    if keys == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / keys as f64
    }
}

impl GcPlan {
    /// The liveness array the mark filled: the focused mark's correlative
    /// array (its final table lists only the dead chunks), else the VC.
    fn liveness_array_bytes(&self) -> u64 {
        match &self.mark.fgc {
            Some(f) if !f.fell_back => f.liveness_array_bytes,
            _ => self.mark.valid.memory_bytes() as u64,
        }
    }

    /// The report of the plan alone: what a dry run prints. A GC that
    /// sweeps adds the sweep's figures to it.
    pub fn report(&self) -> GcReport {
        let sel = &self.selection;
        let involved = sel.involved.len() as u64;
        let reclaimed = (sel.empty.len() + sel.copy.len()) as u64;
        let mut r = GcReport {
            strategy: self.options.strategy,
            mark: self.options.mark.to_string(),
            mark_ran: match &self.mark.fgc {
                Some(f) if f.fell_back => MarkSpec::Logical.to_string(),
                _ => self.options.mark.to_string(),
            },
            focus: self
                .mark
                .fgc
                .as_ref()
                .map(|f| super::report::FocusReport {
                    fell_back: f.fell_back,
                    focus_estimate_bytes: f.focus_estimate_bytes,
                    full_estimate_bytes: f.full_estimate_bytes,
                    focus_estimate_entry_bytes: f.focus_estimate_entry_bytes,
                    full_estimate_entry_bytes: f.full_estimate_entry_bytes,
                    correlative_backups: f.correlative_backups as u64,
                    liveness_array_bytes: f.liveness_array_bytes,
                    base_map_bytes: f.base_map_bytes,
                    graph_bytes: f.graph_bytes,
                })
                .unwrap_or_default(),
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
            mark_containers_read: self.mark_containers_read,
            mark_seeks: self.mark_seeks,
            mark_metadata_reads: self.mark_metadata_reads,
            chunk_queries: self.mark.chunk_queries,
            liveness_array_bytes: self.liveness_array_bytes(),
            live_vector_bits_per_fp: bits_per(self.liveness_array_bytes(), self.data_fingerprints),
            lp_vector_bits_per_fp: self
                .mark
                .lp_vector
                .map_or(0.0, |(bytes, keys)| bits_per(bytes, keys)),
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

/// [`Repository::plan_gc`](crate::Repository::plan_gc).
pub(crate) fn plan_gc(repo: &Context, opts: &GcOptions) -> Result<GcPlan> {
    match opts.mark {
        MarkSpec::Logical => plan_gc_marked(repo, opts, &opts.marker()),
        MarkSpec::Physical => plan_gc_marked(repo, opts, &opts.physical_marker(false)),
        // PGC+'s dynamic duplicate removal is a feature of the naive
        // copy phase; under GCCDF's sweep its unique-liveness selection lost
        // chunks (a gc_rewrite proptest case), so there it marks as PGC.
        // CMA copies nothing, so it needs exact liveness, not PGC+'s
        // estimate (which calls a container holding only older live copies
        // empty, leaving the copy phase to save them).
        MarkSpec::PhysicalPlus if opts.strategy != GcStrategy::Naive => {
            plan_gc_marked(repo, opts, &opts.physical_marker(false))
        }
        MarkSpec::PhysicalPlus => plan_gc_marked(repo, opts, &opts.physical_marker(true)),
        MarkSpec::Focused => {
            let marker = mark::FocusedMark {
                vc: opts.vc,
                granularity: opts.fgc_granularity,
                fallback: opts.focus_fallback,
                keeps_graph: !opts.dry_run,
                owners_fp_rate: (opts.strategy == GcStrategy::Gccdf)
                    .then_some(opts.ownership_fp_rate),
            };
            plan_gc_marked(repo, opts, &marker)
        }
    }
}

/// [`Repository::plan_gc_marked`](crate::Repository::plan_gc_marked).
pub(crate) fn plan_gc_marked(
    repo: &Context,
    opts: &GcOptions,
    marker: &dyn Marker,
) -> Result<GcPlan> {
    opts.validate().map_err(Error::invalid)?;
    let started = Instant::now();
    let io0 = repo.metrics.snapshot();
    let clock = PhaseClock::start(repo, "enumeration");
    let mut mark = marker.mark(repo)?;
    let mut phases = std::mem::take(&mut mark.phases);
    if phases.is_empty() {
        // A mark that reports itself as one phase (the logical walk).
        phases.push(clock.stop(repo, mark.memory_bytes as usize));
    }
    let mut clock = PhaseClock::start(repo, "select");
    let selection = select::select(repo, &mark, select::Keep::of(opts), &mut clock)?;
    phases.push(clock.stop(repo, 0));
    let mark_seconds = started.elapsed().as_secs_f64();
    let io = repo.metrics.snapshot().since(&io0);
    let mark_bytes_read = io.recipe_container_bytes_read;
    let reclaimed: HashSet<_> = selection
        .empty
        .iter()
        .chain(&selection.copy)
        .chain(&selection.recipe_empty)
        .chain(&selection.recipe_copy)
        .copied()
        .collect();
    let reclaimed_logical_bytes = repo
        .manifest
        .containers
        .iter()
        .filter(|c| reclaimed.contains(&c.id))
        .map(|c| c.logical_bytes)
        .sum();
    Ok(GcPlan {
        options: opts.clone(),
        generation: repo.manifest.generation,
        mark,
        selection,
        reclaimed,
        reclaimed_logical_bytes,
        mark_seconds,
        mark_bytes_read,
        container_size: repo.manifest.config.container_size as u64,
        mark_metadata_reads: phases.iter().map(|p| p.metadata_reads).sum(),
        phases,
        mark_containers_read: io.recipe_containers_read + io.data_containers_read,
        mark_seeks: io.container_seeks,
        data_fingerprints: repo.index.len().0 as u64,
    })
}
