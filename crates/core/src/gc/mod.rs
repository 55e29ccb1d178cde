//! Garbage collection: mark → select → sweep (copy-forward), with GCCDF's
//! ownership-based reordering of live chunks as an optional sweep.
//!
//! See `physical-gc-fast17.md` §2–3.1 (mark–sweep) and `gccdf-eurosys25.md`
//! §4–5 (GCCDF). Like every mutation, GC writes its new containers and index
//! first, publishes a new manifest generation, and only then deletes the
//! containers it reclaimed.

pub mod bloom;
pub mod gccdf;
pub mod mark;
pub mod select;
pub mod sweep;

use crate::container::ChunkKind;
use crate::error::{Error, Result};
use crate::fingerprint::FpSet;
use crate::repo::Repository;
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
    pub strategy: GcStrategy,
    /// GC-involved containers processed together (GCCDF's segment, S).
    pub segment_containers: usize,
    /// Containers whose liveness (live bytes / bytes) is at or above this
    /// are left alone; 1.0 selects every container holding a dead chunk
    /// (the artifact's "threshold 0": migrate on any invalid byte).
    pub liveness_threshold: f64,
    /// Report what would be done without changing the repository.
    pub dry_run: bool,
    /// GCCDF: a leaf of the ownership tree is split by a backup only if at
    /// least this many of its chunks are referenced by it (artifact: 200).
    pub split_threshold: usize,
    /// False-positive rate of the VC table's Bloom filter; 0 = exact set.
    pub vc_fp_rate: f64,
    /// The VC table as a perfect-hash vector over the index's data
    /// fingerprints (physical GC): exact for stored chunks, ~4 bits each.
    pub vc_phv: bool,
    /// GCCDF: false-positive rate of the per-backup ownership Bloom
    /// filters; 0 = exact fingerprint sets.
    pub ownership_fp_rate: f64,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            strategy: GcStrategy::Naive,
            segment_containers: 100,
            liveness_threshold: 1.0,
            dry_run: false,
            split_threshold: 200,
            vc_fp_rate: 0.0,
            vc_phv: false,
            ownership_fp_rate: 0.01,
        }
    }
}

impl GcOptions {
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
            ("VC", self.vc_fp_rate),
            ("ownership", self.ownership_fp_rate),
        ] {
            if !(0.0..0.5).contains(&p) {
                return Err(format!(
                    "{what} false-positive rate must be in [0, 0.5) (got {p})"
                ));
            }
        }
        if self.vc_phv && self.vc_fp_rate > 0.0 {
            return Err("the VC table is a perfect-hash vector or a Bloom filter, not both".into());
        }
        Ok(())
    }
}

/// What a GC did. Container counts and bytes are of data containers (the
/// papers' figures); recipe containers are reported in `recipe_*`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    pub strategy: GcStrategy,
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
}

impl Repository {
    /// Reclaim the space of chunks no retained backup references: mark,
    /// select, sweep (naive copy-forward or GCCDF reordering), then publish
    /// a new generation before deleting the old containers.
    pub fn gc(&mut self, opts: &GcOptions) -> Result<GcReport> {
        self.require_writer()?;
        opts.validate().map_err(Error::invalid)?;
        let started = Instant::now();
        let mut r = GcReport {
            strategy: opts.strategy,
            dry_run: opts.dry_run,
            ..Default::default()
        };
        let io0 = self.metrics.snapshot();
        let owners = (opts.strategy == GcStrategy::Gccdf).then_some(opts.ownership_fp_rate);
        let mark = mark::mark(self, opts.vc_fp_rate, opts.vc_phv, owners)?;
        let sel = select::select(self, &mark, opts.liveness_threshold)?;
        r.mark_seconds = started.elapsed().as_secs_f64();
        r.mark_bytes_read = self
            .metrics
            .snapshot()
            .since(&io0)
            .recipe_container_bytes_read;
        r.mark_memory_bytes = mark.memory_bytes;
        r.involved_containers = sel.involved.len() as u64;
        r.involved_bytes = sel.involved.iter().map(|c| c.logical_bytes).sum();
        r.deleted_without_copy = sel.empty.len() as u64;
        r.reclaimed_containers = (sel.empty.len() + sel.copy.len()) as u64;
        r.skipped_containers = r.involved_containers - r.reclaimed_containers;
        r.recipe_involved_containers = sel.recipe_involved.len() as u64;
        r.recipe_reclaimed_containers = (sel.recipe_empty.len() + sel.recipe_copy.len()) as u64;
        let reclaimed: HashSet<_> = sel
            .empty
            .iter()
            .chain(&sel.copy)
            .chain(&sel.recipe_empty)
            .chain(&sel.recipe_copy)
            .copied()
            .collect();
        let size = self.manifest.config.container_size as u64;
        let freed: u64 = self
            .manifest
            .containers
            .iter()
            .filter(|c| reclaimed.contains(&c.id))
            .map(|c| c.logical_bytes)
            .sum();
        if opts.dry_run || reclaimed.is_empty() {
            if !opts.dry_run && !self.manifest.forgotten.is_empty() {
                // Nothing to reclaim, but the deletions are now accounted for.
                let mut next = self.manifest.clone();
                next.forgotten.clear();
                self.publish(next, &[])?;
            }
            if opts.dry_run {
                r.produced_containers = sel.copy_live_bytes.div_ceil(size);
                r.reclaimed_bytes = freed.saturating_sub(sel.copy_live_bytes);
            }
            r.peak_memory_bytes = mark.memory_bytes;
            r.total_seconds = started.elapsed().as_secs_f64();
            return Ok(r);
        }

        let io1 = self.metrics.snapshot();
        let mut stats = sweep::SweepStats::default();
        let next_id = self.manifest.next_container_id;
        let mut data = sweep::Packer::new(self, ChunkKind::Data, next_id);
        match opts.strategy {
            GcStrategy::Naive => {
                let mut placed = FpSet::default();
                let live = |fp: &_| mark.valid.contains(fp);
                sweep::copy_forward(
                    self,
                    ChunkKind::Data,
                    &sel.copy,
                    live,
                    &mut data,
                    &mut placed,
                    &mut stats,
                )?;
            }
            GcStrategy::Gccdf => sweep::gccdf_sweep(
                self,
                &mark,
                &sel.copy,
                opts.segment_containers,
                opts.split_threshold,
                &mut data,
                &mut stats,
            )?,
        }
        let mut recipe = sweep::Packer::new(self, ChunkKind::Recipe, data.next_id);
        let mut placed = FpSet::default();
        let mut rstats = sweep::SweepStats::default();
        sweep::copy_forward(
            self,
            ChunkKind::Recipe,
            &sel.recipe_copy,
            |fp| mark.valid_recipe.contains(fp),
            &mut recipe,
            &mut placed,
            &mut rstats,
        )?;
        let io = self.metrics.snapshot().since(&io1);
        r.bytes_read = io.data_container_bytes_read;
        r.bytes_written = io.data_container_bytes_written;
        r.produced_containers = data.produced.len() as u64;
        r.recipe_produced_containers = recipe.produced.len() as u64;
        r.sweep_read_seconds = stats.read_seconds + rstats.read_seconds;
        r.sweep_write_seconds = data.write_seconds + recipe.write_seconds;
        r.analyze_seconds = stats.analyze_seconds;
        r.moved_chunks = stats.moved_chunks + rstats.moved_chunks;
        r.segments = stats.segments;
        r.gc_cache_peak_bytes = stats.cache_peak_bytes;
        r.tree_peak_bytes = stats.tree_peak_bytes;
        r.peak_memory_bytes = mark.memory_bytes + stats.cache_peak_bytes + stats.tree_peak_bytes;
        let written: u64 = data
            .produced
            .iter()
            .chain(&recipe.produced)
            .map(|c| c.logical_bytes)
            .sum();
        r.reclaimed_bytes = freed.saturating_sub(written);
        let produced: Vec<_> = data
            .produced
            .iter()
            .chain(&recipe.produced)
            .copied()
            .collect();
        let moved: Vec<_> = data.moved.iter().chain(&recipe.moved).copied().collect();
        let next_id = recipe.next_id;
        drop(mark);
        let t = Instant::now();
        sweep::commit(self, &reclaimed, &produced, &moved, next_id)?;
        r.publish_seconds = t.elapsed().as_secs_f64();
        r.total_seconds = started.elapsed().as_secs_f64();
        Ok(r)
    }
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
    use crate::catalog::SourceKind;
    use crate::chunking::ChunkerConfig;
    use crate::index::IndexEntry;
    use crate::repo::container_entry;
    use crate::{BackupOptions, InitOptions, RestoreOptions};
    use std::sync::Arc;

    fn restore(repo: &Repository, id: u64) -> Vec<u8> {
        let b = repo.manifest.backup(id).unwrap().clone();
        let mut out = Vec::new();
        repo.restore_to(&b, &mut out, &RestoreOptions::default(), &mut |_| {})
            .unwrap();
        out
    }

    /// A rewritten chunk has two copies; the index names the newer one. The
    /// older copy is dead even though a retained backup references the
    /// chunk, and GC must keep exactly the newer copy.
    #[test]
    fn stale_copies_left_by_rewriting_are_dead() {
        for strategy in [GcStrategy::Naive, GcStrategy::Gccdf] {
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
            let mut repo = Repository::open_writer(b, "t").unwrap();
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
            next.next_container_id += 1;
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
                })
                .collect();
            repo.write_segment(&mut next, &moved).unwrap();
            repo.publish(next, &[]).unwrap();
            for e in &moved {
                repo.index.insert(*e);
            }
            assert_eq!(restore(&repo, id), data);
            let stored = repo.stats().stored_data_bytes;

            let r = repo
                .gc(&GcOptions {
                    strategy,
                    ..Default::default()
                })
                .unwrap();
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
}
