//! Garbage collection: mark → select → sweep (copy-forward), with GCCDF's
//! ownership-based reordering of live chunks as an optional sweep.
//!
//! See `physical-gc-fast17.md` §2–3.1 (mark–sweep) and `gccdf-eurosys25.md`
//! §4–5 (GCCDF). Like every mutation, GC writes its new containers and index
//! first, publishes a new manifest generation, and only then deletes the
//! containers it reclaimed.
//!
//! A GC is a [`GcPlan`] (mark + select, what `--dry-run` reports) carried
//! out by [`Writer::gc_with`](crate::Writer::gc_with). The mark is a [`Marker`]: the logical
//! mark today; the physical (PGC) and focused (FGC) marks implement the same
//! trait and reach the sweep through [`Repository::plan_gc_marked`].

pub mod bloom;
pub mod gccdf;
pub mod mark;
pub mod online;
pub mod select;
pub mod sweep;

pub use mark::{LogicalMark, Mark, MarkSpec, Marker, PhysicalMark, VcSpec};
pub use select::Selection;

use crate::backend::Generation;
use crate::container::ContainerId;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fgc::RefGraphState;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::time::Instant;

/// How the sweep orders the live chunks it copies forward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GcStrategy {
    /// Copy live chunks forward in their old order (the papers' baseline).
    #[default]
    Naive,
    /// Cluster live chunks by ownership and pack similar clusters together.
    Gccdf,
}

impl GcStrategy {
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "naive" => Ok(GcStrategy::Naive),
            "gccdf" => Ok(GcStrategy::Gccdf),
            _ => Err(format!(
                "unknown gc strategy '{s}' (expected naive or gccdf)"
            )),
        }
    }
}

impl fmt::Display for GcStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GcStrategy::Naive => "naive",
            GcStrategy::Gccdf => "gccdf",
        })
    }
}

/// GC parameters.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// The sweep: naive copy-forward or GCCDF.
    pub strategy: GcStrategy,
    /// The mark: logical today; physical, physical+ and focused plug in here.
    pub mark: MarkSpec,
    /// GC-involved containers processed together (GCCDF's segment, S).
    pub segment_containers: usize,
    /// Containers whose liveness (live bytes / bytes) is at or above this
    /// are left alone; 1.0 selects every container holding a dead chunk
    /// (the artifact's "threshold 0": migrate on any invalid byte).
    pub liveness_threshold: f64,
    /// Report what would be done without changing the repository.
    pub dry_run: bool,
    /// GCCDF: a leaf of the ownership tree is split by a backup only if at
    /// least this many of its chunks are referenced by it (artifact: 200 in
    /// 4 MiB containers). 0 = scaled with the containers:
    /// [`SPLIT_FRACTION`] of the mean chunks per data container.
    pub split_threshold: usize,
    /// The VC table: exact set, Bloom filter or perfect-hash vector.
    pub vc: VcSpec,
    /// GCCDF: false-positive rate of the per-backup ownership Bloom
    /// filters; 0 = exact fingerprint sets.
    pub ownership_fp_rate: f64,
    /// The focused mark: virtual-file size of the reference graph (FGC's
    /// granularity); `None` keeps the recorded graph's. Another size than
    /// the recorded one rebuilds the graph from every recipe.
    pub fgc_granularity: Option<u64>,
    /// Physical marks: budget (bytes) for the live vector of data chunks;
    /// above it the mark samples and runs two passes (FAST'17 §3.1.2).
    pub memory_limit: Option<u64>,
    /// Copy phase: at most this many container bytes read per second.
    pub max_read_rate: Option<u64>,
    /// Copy phase: at most this many container bytes written per second.
    pub max_write_rate: Option<u64>,
    /// Logical mark: walk shared recipe subtrees again for every backup
    /// (the paper's LGC) instead of skipping those already marked.
    pub walk_shared_subtrees: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            strategy: GcStrategy::Naive,
            mark: MarkSpec::Logical,
            segment_containers: 100,
            liveness_threshold: 1.0,
            dry_run: false,
            split_threshold: 0,
            vc: VcSpec::Exact,
            ownership_fp_rate: 0.01,
            fgc_granularity: None,
            memory_limit: None,
            max_read_rate: None,
            max_write_rate: None,
            walk_shared_subtrees: false,
        }
    }
}

/// GCCDF's split threshold as a share of the chunks a container holds: the
/// paper's 200 of the ~512 chunks of a 4 MiB container (the artifact's
/// chunker, expected 4 KiB with min/4 and max×8, averages ~8 KiB). A
/// threshold of 200 in 256 KiB containers (~32 chunks) would never split a
/// leaf, so GCCDF would degrade to naive order.
pub const SPLIT_FRACTION: f64 = 200.0 / 512.0;

impl GcOptions {
    /// The split threshold in chunks for `repo`'s containers: the option,
    /// or when it is 0, [`SPLIT_FRACTION`] of the mean chunks per data
    /// container (at least 1).
    pub fn split_threshold_for(&self, repo: &Context) -> usize {
        if self.split_threshold > 0 {
            return self.split_threshold;
        }
        let (n, chunks) = repo
            .manifest
            .containers
            .iter()
            .filter(|c| c.kind == crate::container::ChunkKind::Data)
            .fold((0u64, 0u64), |(n, k), c| (n + 1, k + c.chunks as u64));
        let mean = if n == 0 {
            0.0
        } else {
            chunks as f64 / n as f64
        };
        ((mean * SPLIT_FRACTION).round() as usize).max(1)
    }

    /// Check the parameters; the error says what is wrong.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.segment_containers == 0 {
            return Err("segment size must be at least 1 container".into());
        }
        if !(0.0..=1.0).contains(&self.liveness_threshold) {
            return Err(format!(
                "liveness threshold must be between 0 and 1 (got {})",
                self.liveness_threshold
            ));
        }
        for (what, p) in [
            ("VC", self.vc.fp_rate()),
            ("ownership", self.ownership_fp_rate),
        ] {
            if !(0.0..0.5).contains(&p) {
                return Err(format!(
                    "{what} false-positive rate must be in [0, 0.5) (got {p})"
                ));
            }
        }
        for (what, r) in [("read", self.max_read_rate), ("write", self.max_write_rate)] {
            if r == Some(0) {
                return Err(format!("the maximum {what} rate must be above 0"));
            }
        }
        if self.memory_limit == Some(0) {
            return Err("the memory limit must be above 0".into());
        }
        Ok(())
    }
}

/// Time, I/O and memory of one GC phase (FAST'17's phases: analysis,
/// enumeration per recipe level, select, copy). Container reads are whole
/// containers; metadata reads touch only a container's chunk list.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseReport {
    pub phase: String,
    pub seconds: f64,
    /// Logical container bytes read (data and recipe).
    pub bytes_read: u64,
    pub containers_read: u64,
    pub metadata_reads: u64,
    pub metadata_bytes: u64,
    /// The phase's own tables (estimated).
    pub memory_bytes: u64,
}

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

/// How long a GC waits for readers (restore, ls, check) that may read
/// containers it reclaimed before deleting them; after it, they are left
/// for the next writer that opens alone (leftovers meanwhile).
pub const READER_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl GcOptions {
    /// The physical mark (PGC, or PGC+ with `plus`) with these options.
    pub fn physical_marker(&self, plus: bool) -> PhysicalMark {
        PhysicalMark {
            plus,
            vc: self.vc,
            owners_fp_rate: (self.strategy == GcStrategy::Gccdf).then_some(self.ownership_fp_rate),
            memory_limit: self.memory_limit,
            liveness_threshold: self.liveness_threshold,
        }
    }

    /// The logical mark with these options, with the RRT and ownership
    /// filters GCCDF's sweep needs.
    pub fn marker(&self) -> LogicalMark {
        LogicalMark {
            vc: self.vc,
            owners_fp_rate: (self.strategy == GcStrategy::Gccdf).then_some(self.ownership_fp_rate),
            walk_shared: self.walk_shared_subtrees,
        }
    }
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

/// [`Writer::gc`](crate::Writer::gc): online, so backups in other
/// processes keep running (see [`online`]): under the GC lock, announce a
/// marking run, plan on the newest generation, cut off (announce the
/// reclaimed containers, resurrect what backups recorded), sweep and
/// commit.
pub(crate) fn gc(repo: &mut Context, opts: &GcOptions) -> Result<GcReport> {
    if opts.dry_run {
        let plan = plan_gc(repo, opts)?;
        return gc_with(repo, plan);
    }
    let mut run = repo.gc_begin(opts)?;
    repo.gc_cutoff(&mut run)?;
    repo.gc_finish(run)
}

/// [`Repository::plan_gc`](crate::Repository::plan_gc).
pub(crate) fn plan_gc(repo: &Context, opts: &GcOptions) -> Result<GcPlan> {
    match opts.mark {
        MarkSpec::Logical => plan_gc_marked(repo, opts, &opts.marker()),
        MarkSpec::Physical => plan_gc_marked(repo, opts, &opts.physical_marker(false)),
        // PGC+'s dynamic duplicate removal is a feature of the naive
        // copy phase; under GCCDF's sweep its unique-liveness selection lost
        // chunks (a gc_rewrite proptest case), so there it marks as PGC.
        MarkSpec::PhysicalPlus if opts.strategy == GcStrategy::Gccdf => {
            plan_gc_marked(repo, opts, &opts.physical_marker(false))
        }
        MarkSpec::PhysicalPlus => plan_gc_marked(repo, opts, &opts.physical_marker(true)),
        MarkSpec::Focused => {
            let marker = mark::FocusedMark {
                vc: opts.vc,
                granularity: opts.fgc_granularity,
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
    let clock = mark::physical::Clock::start(repo, "enumeration");
    let mut mark = marker.mark(repo)?;
    let mut phases = std::mem::take(&mut mark.phases);
    if phases.is_empty() {
        // A mark that reports itself as one phase (the logical walk).
        phases.push(clock.stop(repo, mark.memory_bytes as usize));
    }
    let mut clock = mark::physical::Clock::start(repo, "select");
    let selection = select::select(repo, &mark, opts.liveness_threshold, &mut clock)?;
    phases.push(clock.stop(repo, 0));
    let mark_seconds = started.elapsed().as_secs_f64();
    let mark_bytes_read = repo
        .metrics
        .snapshot()
        .since(&io0)
        .recipe_container_bytes_read;
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
        phases,
    })
}

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
    let clock = mark::physical::Clock::start(repo, "copy");
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
    // live copy of the same chunk (PGC+ sent both to one stored chunk): the
    // container stays, so only the entry goes.
    let aliases: HashSet<(crate::Fingerprint, crate::index::CopyNo)> = repo
        .index
        .entries()
        .filter(|e| {
            e.kind == crate::container::ChunkKind::Data && !reclaimed.contains(&e.container)
        })
        // Only where the mark is exact for the container: sampling's second
        // pass marked its focus alone.
        .filter(|e| mark.focus.as_ref().is_none_or(|f| f.contains(&e.container)))
        .filter(|e| !mark.is_valid(&e.fp, e.copy))
        .filter(|e| {
            repo.index
                .copy_list(&e.fp)
                .in_container(e.container)
                .any(|n| n != e.copy && mark.is_valid(&e.fp, n))
        })
        .map(|e| (e.fp, e.copy))
        .collect();
    drop(mark);
    let t = Instant::now();
    sweep::commit(repo, &reclaimed, &produced, &moved, &aliases, next_id)?;
    r.publish_seconds = t.elapsed().as_secs_f64();
    r.total_seconds += started.elapsed().as_secs_f64();
    Ok(r)
}

impl std::str::FromStr for GcStrategy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryStore;
    use crate::catalog::{BackupId, SourceKind};
    use crate::chunking::ChunkerConfig;
    use crate::container::ChunkKind;
    use crate::index::IndexEntry;
    use crate::repo::{container_entry, Repository, Writer};
    use crate::{BackupOptions, InitOptions, RestoreOptions};
    use std::sync::Arc;

    fn restore(repo: &Repository, id: BackupId) -> Vec<u8> {
        let b = repo.manifest.backup(id).unwrap().clone();
        let mut out = Vec::new();
        repo.restore_to(&b, &mut out, &RestoreOptions::default(), &mut |_| {})
            .unwrap();
        out
    }

    /// Copy 0 of three chunks is moved to a new container (as a GC
    /// would): the chunks left at its old place are no copy any backup
    /// reads, so they are dead, and GC keeps exactly the moved ones.
    #[test]
    fn stale_copies_left_by_rewriting_are_dead() {
        let marks = [
            MarkSpec::Logical,
            MarkSpec::Physical,
            MarkSpec::PhysicalPlus,
        ];
        for (strategy, mark) in [GcStrategy::Naive, GcStrategy::Gccdf]
            .into_iter()
            .flat_map(|s| marks.map(|m| (s, m)))
        {
            let mut repo = small_repo();
            let data: Vec<u8> = (0..60_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect();
            let opts = BackupOptions::new("v", SourceKind::Stream);
            let id = repo
                .backup_reader(&opts, &mut &data[..], &mut |_| {})
                .unwrap()
                .backup
                .id;
            let stored0 = repo.stats().stored_data_bytes;
            // Rewrite: copy the first 3 chunks of the first data container
            // into a new container and point the index at the copies.
            let first = repo.manifest.containers[0];
            assert_eq!(first.kind, ChunkKind::Data);
            let c = repo.store.read(first.id).unwrap();
            let copies: Vec<_> = c.meta[..3].to_vec();
            let mut bytes = Vec::new();
            let mut entries = Vec::new();
            let mut off = 0;
            for m in &copies {
                bytes.extend_from_slice(c.bytes(m));
                entries.push(crate::container::ChunkMeta { offset: off, ..*m });
                off += m.len;
            }
            let mut next = repo.manifest.clone();
            let new_id = next.next_container_id;
            next.next_container_id = new_id.next();
            let obj = repo
                .store
                .write(new_id, ChunkKind::Data, &entries, &bytes)
                .unwrap();
            next.containers
                .push(container_entry(new_id, ChunkKind::Data, 3, off as u64, obj));
            let moved: Vec<_> = copies
                .iter()
                .map(|m| IndexEntry {
                    fp: m.fp,
                    container: new_id,
                    kind: ChunkKind::Data,
                    copy: 0,
                })
                .collect();
            repo.write_segment(&mut next, &moved).unwrap();
            crate::publish::publish(repo.cx_mut(), next, &[]).unwrap();
            for e in &moved {
                repo.index.insert(*e);
            }
            assert_eq!(restore(&repo, id), data);
            let stored = repo.stats().stored_data_bytes;

            let r = repo
                .gc(&GcOptions {
                    strategy,
                    mark,
                    ..Default::default()
                })
                .unwrap();
            assert_eq!(r.mark, mark.to_string());
            assert_eq!(r.involved_containers, 1, "only the stale copies' container");
            assert_eq!(r.reclaimed_containers, 1);
            assert_eq!(r.moved_chunks as u32, first.chunks - 3);
            assert_eq!(repo.stats().stored_data_bytes, stored - off as u64);
            assert_eq!(
                stored - off as u64,
                stored0,
                "one copy each, as before the rewrite"
            );
            assert!(repo.manifest.containers.iter().any(|c| c.id == new_id));
            for m in &copies {
                assert_eq!(repo.index.get(ChunkKind::Data, &m.fp), Some(new_id));
            }
            assert_eq!(restore(&repo, id), data);
        }
    }

    /// A writable in-memory repository of small chunks and containers.
    fn small_repo() -> Writer {
        let b = Arc::new(MemoryStore::new());
        Repository::init(
            b.clone(),
            &InitOptions {
                chunker: ChunkerConfig::Fastcdc {
                    min: 256,
                    avg: 1024,
                    max: 4096,
                },
                container_size: 16 * 1024,
                ..Default::default()
            },
        )
        .unwrap();
        Repository::open_writer(b, "t").unwrap()
    }

    fn two_versions() -> (Writer, BackupId, Vec<u8>) {
        let mut repo = small_repo();
        let v1: Vec<u8> = (0..200_000u64 / 32)
            .flat_map(|i| crate::HashAlgo::Blake3.hash(&i.to_le_bytes()).0)
            .collect();
        let mut v2 = v1.clone();
        v2[150_000..150_100].fill(7);
        let mut ids = Vec::new();
        for v in [&v1, &v2, &v2] {
            let opts = BackupOptions::new("v", SourceKind::Stream);
            let r = repo.backup_reader(&opts, &mut &v[..], &mut |_| {}).unwrap();
            ids.push(r.backup.id);
        }
        repo.forget(&[ids[0]]).unwrap();
        (repo, ids[1], v2)
    }

    /// The default split threshold scales with the chunks per container;
    /// an explicit one is kept.
    #[test]
    fn split_threshold_scales_with_containers() {
        let (repo, _, _) = two_versions();
        let data: Vec<_> = repo
            .manifest
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Data)
            .collect();
        let mean = data.iter().map(|c| c.chunks as f64).sum::<f64>() / data.len() as f64;
        let auto = GcOptions::default().split_threshold_for(&repo);
        assert_eq!(auto, ((mean * 200.0 / 512.0).round() as usize).max(1));
        assert!(auto < 200, "16 KiB containers hold ~16 chunks: {auto}");
        let fixed = GcOptions {
            split_threshold: 7,
            ..Default::default()
        };
        assert_eq!(fixed.split_threshold_for(&repo), 7);
    }

    #[test]
    fn throttle_delay_keeps_the_average_rate() {
        use std::time::Duration;
        let d = |bytes, ms| sweep::Throttle::delay(1000, bytes, Duration::from_millis(ms));
        assert_eq!(d(500, 0), Duration::from_millis(500));
        assert_eq!(d(500, 200), Duration::from_millis(300));
        assert_eq!(d(500, 900), Duration::ZERO, "behind schedule: no wait");
        let mut unlimited = sweep::Throttle::new(None);
        unlimited.consume(u64::MAX / 2);
        assert_eq!(unlimited.slept_seconds(), 0.0);
    }

    /// A plan is what a dry run reports; carrying it out reclaims it.
    #[test]
    fn plan_then_execute_is_gc() {
        let (mut repo, id, v2) = two_versions();
        let opts = GcOptions::default();
        let plan = repo.plan_gc(&opts).unwrap();
        let dry = repo
            .gc(&GcOptions {
                dry_run: true,
                ..opts.clone()
            })
            .unwrap();
        let planned = plan.report();
        assert_eq!(planned.involved_containers, dry.involved_containers);
        assert_eq!(planned.reclaimed_containers, dry.reclaimed_containers);
        // The naive mark skips the second, identical backup's whole tree.
        assert!(plan.mark.walk.skipped_subtrees >= 1, "{:?}", plan.mark.walk);
        let r = repo.gc_with(plan).unwrap();
        assert_eq!(r.reclaimed_containers, dry.reclaimed_containers);
        assert!(r.reclaimed_containers > 0, "{dry:?}");
        assert_eq!(restore(&repo, id), v2);
        // A plan made on an older generation is refused.
        let stale = repo.plan_gc(&opts).unwrap();
        repo.forget(&[id]).unwrap();
        let err = repo.gc_with(stale).unwrap_err().to_string();
        assert!(err.contains("plan again"), "{err}");
        // GCCDF needs every backup in full: nothing is skipped.
        let plan = repo
            .plan_gc(&GcOptions {
                strategy: GcStrategy::Gccdf,
                ..opts
            })
            .unwrap();
        assert_eq!(plan.mark.walk.skipped_subtrees, 0);
    }
}
