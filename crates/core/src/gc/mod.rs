//! Garbage collection: mark → select → sweep (copy-forward), with GCCDF's
//! ownership-based reordering of live chunks as an optional sweep.
//!
//! See `physical-gc-fast17.md` §2–3.1 (mark–sweep) and `gccdf-eurosys25.md`
//! §4–5 (GCCDF). Like every mutation, GC writes its new containers and index
//! first, publishes a new manifest generation, and only then deletes the
//! containers it reclaimed.
//!
//! A GC is a [`GcPlan`] (mark + select, what `--dry-run` reports: `plan.rs`)
//! carried out by `run.rs` (sweep, publish, delete). The mark is a
//! [`Marker`]: logical (LGC), physical (PGC/PGC+) or focused (FGC), each in
//! `mark/`, any of them with either sweep (naive or GCCDF). A GC runs online
//! (`online.rs`): backups in other processes go on meanwhile.

pub mod bloom;
pub mod gccdf;
pub mod mark;
pub mod online;
mod options;
pub mod phase;
mod plan;
mod report;
mod run;
pub mod select;
pub mod sweep;

pub use gccdf::plan::Packing;
pub use mark::{LogicalMark, Mark, MarkSpec, Marker, PhysicalMark, VcSpec};
pub use options::{GcOptions, GcStrategy, READER_WAIT, SPLIT_FRACTION};
pub use phase::PhaseReport;
pub use plan::GcPlan;
pub(crate) use plan::{plan_gc, plan_gc_marked};
pub use report::{FocusReport, GcReport};
pub(crate) use run::gc_with;
pub use select::Selection;

use crate::context::Context;
use crate::error::Result;

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
    let mut run = online::begin_run(repo, opts)?;
    online::cutoff_run(repo, &mut run)?;
    online::finish_run(repo, run)
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
                repo.index.insert(*e).unwrap();
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
