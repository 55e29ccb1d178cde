//! Garbage collection: naive mark–sweep and GCCDF, against a reference
//! model, under crashes, and on layouts where ownership clustering must pay.

use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use tessera_core::backend::{list_all, FaultyStore, KeyKind, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::{ChunkKind, ContainerId};
use tessera_core::gc::{GcOptions, GcReport, GcStrategy, MarkSpec, VcSpec};
use tessera_core::recipe::{self, RecipeWalker};
use tessera_core::rewrite::RewriteSpec;
use tessera_core::BackupId;
use tessera_core::{
    BackupOptions, Fingerprint, HashAlgo, InitOptions, Repository, RestoreOptions, Writer,
};

use crate::common;
use common::{backup, bytes, init_blake3, mem, restore, trace_of};

/// A new version of `base`: an overwrite, an insertion and a deletion.
fn mutate(base: &[u8], seed: u64) -> Vec<u8> {
    common::mutate(base, seed, 4000)
}

fn init_small(b: Arc<dyn ObjectStore>, trace: bool) {
    init_blake3(
        b,
        ChunkerConfig::Fastcdc {
            min: 256,
            avg: 1024,
            max: 4096,
        },
        16 * 1024,
        trace,
    );
}

/// Data containers read to restore every retained backup (each restore on
/// its own, unbounded cache so each container counts once per backup).
fn containers_read(repo: &Repository) -> u64 {
    let opts = RestoreOptions {
        cache: tessera_core::restore::CacheSpec::Lru(100_000),
        memory: u64::MAX,
    };
    repo.backups()
        .iter()
        .map(|b| {
            repo.restore_to(b, &mut std::io::sink(), &opts, &mut |_| {})
                .unwrap()
                .data_containers_read
        })
        .sum()
}

/// What the retained backups reference: data chunk copies (fingerprint,
/// copy) and recipe chunks.
fn referenced(repo: &Repository) -> (HashSet<(Fingerprint, u16)>, HashSet<Fingerprint>) {
    let (mut data, mut recipes) = (HashSet::new(), HashSet::new());
    for b in repo.backups() {
        let mut w = RecipeWalker::new(b.root_fp().unwrap(), b.root_level, |fp, _| {
            recipes.insert(*fp);
            let c = repo.index().unwrap().get(ChunkKind::Recipe, fp).unwrap();
            let c = repo.store().read(c)?;
            recipe::decode(c.chunk(fp).unwrap(), "t")
        })
        .unwrap();
        while let Some(e) = w.next().unwrap() {
            data.insert((e.fp, e.copy));
        }
    }
    (data, recipes)
}

/// After a GC with full selection and an exact VC: every chunk stored is a
/// live copy — one the index places there and a retained backup's recipe
/// names — and the index holds no other copy.
fn assert_only_live_chunks(repo: &Repository) {
    let (data, recipes) = referenced(repo);
    for c in &repo.manifest().containers {
        let got = repo.store().read(c.id).unwrap();
        for m in &got.meta {
            let live = match c.kind {
                ChunkKind::Data => repo
                    .index()
                    .unwrap()
                    .copy_list(&m.fp)
                    .in_container(c.id)
                    .any(|n| data.contains(&(m.fp, n))),
                ChunkKind::Recipe => {
                    assert_eq!(
                        repo.index().unwrap().get(c.kind, &m.fp),
                        Some(c.id),
                        "stale copy"
                    );
                    recipes.contains(&m.fp)
                }
            };
            assert!(live, "container {} holds dead {:?}", c.id, m.fp);
        }
    }
    // A dead copy stays indexed only as an alias: its container holds a
    // live copy of the same chunk (GC keeps such entries, cca1a47; they go
    // with the container).
    let index = repo.index().unwrap();
    for e in index.entries() {
        if e.kind == ChunkKind::Data {
            let alias = index
                .copy_list(&e.fp)
                .in_container(e.container)
                .any(|n| n != e.copy && data.contains(&(e.fp, n)));
            assert!(
                alias || data.contains(&(e.fp, e.copy)),
                "dead copy {e:?} indexed"
            );
        }
    }
}

fn gc(repo: &mut Writer, strategy: GcStrategy) -> GcReport {
    repo.gc(&GcOptions {
        strategy,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn naive_gc_reclaims_forgotten_data_and_keeps_the_rest() {
    for strategy in [GcStrategy::Naive, GcStrategy::Gccdf] {
        let b = mem();
        init_small(b.clone(), false);
        let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
        let v1 = bytes(1, 200_000);
        let v2 = mutate(&v1, 2);
        let v3 = bytes(3, 100_000);
        let id1 = backup(&mut repo, "v1", &v1).unwrap();
        let id2 = backup(&mut repo, "v2", &v2).unwrap();
        let id3 = backup(&mut repo, "v3", &v3).unwrap();
        let before = repo.stats();
        // Nothing forgotten: nothing to do, nothing published.
        let r = gc(&mut repo, strategy);
        assert_eq!((r.involved_containers, r.reclaimed_containers), (0, 0));
        assert_eq!(repo.manifest().generation, before.generation);

        repo.forget(&[id1, id3]).unwrap();
        let before_gc = repo.manifest().clone();
        let before_gc_next_id = before_gc.next_container_id;
        let r = gc(&mut repo, strategy);
        let after = repo.stats();
        assert!(r.reclaimed_containers > 0);
        assert_eq!(
            r.reclaimed_containers + r.skipped_containers,
            r.involved_containers
        );
        // v3 shared nothing: its containers are dropped unread.
        assert!(r.deleted_without_copy >= 100_000 / 16_384, "{r:?}");
        assert!(r.recipe_reclaimed_containers > 0);
        assert_eq!(
            after.stored_data_bytes,
            v2.len() as u64,
            "exactly v2's chunks remain"
        );
        assert!(r.reclaimed_bytes >= before.stored_data_bytes - after.stored_data_bytes);
        // What the sweep wrote is exactly the new data containers.
        let first_new = before_gc_next_id;
        let new: Vec<_> = repo
            .manifest()
            .containers
            .iter()
            .filter(|c| c.id >= first_new && c.kind == ChunkKind::Data)
            .collect();
        assert_eq!(new.len() as u64, r.produced_containers);
        assert!(r.produced_containers > 0);
        assert_eq!(
            r.bytes_written,
            new.iter().map(|c| c.logical_bytes).sum::<u64>()
        );
        // Each reclaimed container still holding live chunks was read once.
        let kept: HashSet<ContainerId> = repo.manifest().containers.iter().map(|c| c.id).collect();
        let reclaimed_bytes: u64 = before_gc
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Data && !kept.contains(&c.id))
            .map(|c| c.logical_bytes)
            .sum();
        assert_eq!(
            r.bytes_read,
            reclaimed_bytes - deleted_bytes(&before_gc, &repo, r.deleted_without_copy)
        );
        assert_eq!(restore(&repo, id2).unwrap(), v2);
        assert_only_live_chunks(&repo);
        assert_eq!(after.index_segments, 1, "one segment supersedes the others");
        assert_eq!(
            after.index.unwrap().data_entries as u64,
            repo.manifest()
                .containers
                .iter()
                .filter(|c| c.kind == ChunkKind::Data)
                .map(|c| c.chunks as u64)
                .sum::<u64>()
        );
        repo.close().unwrap();
        // Reopened from the new index segment: same content, no leftovers.
        let repo = Repository::open_writer(b.clone(), "t").unwrap();
        assert!(repo.leftovers().objects.is_empty());
        assert_eq!(restore(&repo, id2).unwrap(), v2);
        assert_eq!(
            b.list(KeyKind::Container).unwrap().len(),
            repo.manifest().containers.len()
        );
        let mut repo = repo;
        // Forgetting everything leaves an empty store.
        repo.forget(&[id2]).unwrap();
        gc(&mut repo, strategy);
        assert!(repo.manifest().containers.is_empty());
        assert!(b.list(KeyKind::Container).unwrap().is_empty());
        assert_eq!(repo.index().unwrap().len(), (0, 0));
    }
}

/// Logical bytes of the `count` newest data containers GC removed: in the
/// scenario below those are the forgotten v3's, which share nothing and so
/// are deleted without being read.
fn deleted_bytes(before: &tessera_core::catalog::Manifest, after: &Repository, count: u64) -> u64 {
    let kept: HashSet<ContainerId> = after.manifest().containers.iter().map(|c| c.id).collect();
    let gone: Vec<_> = before
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data && !kept.contains(&c.id))
        .collect();
    assert!(gone.len() as u64 >= count);
    // v3's containers are the newest and share nothing: they are the empty ones.
    gone.iter()
        .rev()
        .take(count as usize)
        .map(|c| c.logical_bytes)
        .sum()
}

/// CMA (Destor's container-marker GC, mfdedup-tos.md §5): exactly the
/// containers none of whose chunks a retained backup references are
/// deleted, nothing is read or copied, a container with a live chunk
/// among dead ones stays whole, and every retained backup restores.
#[test]
fn cma_deletes_exactly_the_fully_dead_containers_and_copies_nothing() {
    for mark in [
        MarkSpec::Logical,
        MarkSpec::Physical,
        MarkSpec::PhysicalPlus,
        MarkSpec::Focused,
    ] {
        let b = mem();
        init_small(b.clone(), false);
        let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
        let v1 = bytes(1, 200_000);
        // v2 shares a 6 KB run from the middle of v1 (a few chunks of one
        // or two of v1's containers) and v3 a later version of v2.
        let mut v2 = v1[100_000..106_000].to_vec();
        v2.extend_from_slice(&bytes(2, 60_000));
        let v3 = mutate(&v2, 3);
        let id1 = backup(&mut repo, "a", &v1).unwrap();
        let id2 = backup(&mut repo, "b", &v2).unwrap();
        let id3 = backup(&mut repo, "c", &v3).unwrap();
        if mark == MarkSpec::Focused {
            repo.rebuild_refgraph(0).unwrap();
        }
        repo.forget(&[id1]).unwrap();
        let before: BTreeMap<ContainerId, _> = repo
            .manifest()
            .containers
            .iter()
            .map(|c| (c.id, *c))
            .collect();
        // Expected independently of the mark: a container is dead iff none
        // of its chunks is a copy a retained recipe names.
        let (data, recipes) = referenced(&repo);
        let mut dead = HashSet::new();
        let mut mixed = 0;
        for c in before.values() {
            let got = repo.store().read(c.id).unwrap();
            let live = got
                .meta
                .iter()
                .filter(|m| match c.kind {
                    ChunkKind::Data => repo
                        .index()
                        .unwrap()
                        .copy_list(&m.fp)
                        .in_container(c.id)
                        .any(|n| data.contains(&(m.fp, n))),
                    ChunkKind::Recipe => recipes.contains(&m.fp),
                })
                .count();
            if live == 0 {
                dead.insert(c.id);
            } else if live < got.meta.len() && c.kind == ChunkKind::Data {
                mixed += 1;
            }
        }
        assert!(mixed >= 1, "the scenario needs a partly live container");
        assert!(dead.len() >= 5, "and fully dead ones: {dead:?}");
        let written0 = repo.metrics().snapshot();
        let r = repo
            .gc(&GcOptions {
                strategy: GcStrategy::Cma,
                mark,
                ..Default::default()
            })
            .unwrap();
        let io = repo.metrics().snapshot().since(&written0);
        assert_eq!(r.strategy, GcStrategy::Cma);
        assert_eq!(r.produced_containers, 0, "{mark}");
        assert_eq!(r.recipe_produced_containers, 0, "{mark}");
        assert_eq!(r.moved_chunks, 0, "{mark}");
        assert_eq!(r.bytes_written, 0, "{mark}");
        assert_eq!(io.data_container_bytes_written, 0, "{mark}");
        assert_eq!(io.data_container_bytes_read, 0, "{mark}: nothing is copied");
        assert!(r.skipped_containers >= mixed, "{r:?}");
        let after: BTreeMap<ContainerId, _> = repo
            .manifest()
            .containers
            .iter()
            .map(|c| (c.id, *c))
            .collect();
        let gone: HashSet<ContainerId> = before
            .keys()
            .filter(|id| !after.contains_key(id))
            .copied()
            .collect();
        assert_eq!(gone, dead, "{mark}: exactly the fully dead containers");
        // Every kept container is the same object, dead chunks included.
        for (id, c) in &after {
            assert_eq!(before.get(id), Some(c), "{mark}: container {id} changed");
        }
        for id in &gone {
            assert!(repo.store().read(*id).is_err(), "{id} still stored");
        }
        assert_eq!(restore(&repo, id2).unwrap(), v2, "{mark}");
        assert_eq!(restore(&repo, id3).unwrap(), v3, "{mark}");
        let c = repo.check(&Default::default()).unwrap();
        assert!(c.ok(), "{:?}", c.problems);
        // The garbage CMA left is what a perfect GC then reclaims.
        let r = gc(&mut repo, GcStrategy::Naive);
        assert!(r.reclaimed_containers >= mixed, "{r:?}");
        assert_only_live_chunks(&repo);
        assert_eq!(restore(&repo, id2).unwrap(), v2);
        assert_eq!(restore(&repo, id3).unwrap(), v3);
    }
}

/// Fastcopy (physical-gc-fast17.md §5.1): a clone shares its source's
/// recipe root, writes no chunk, restores exactly, and keeps the source's
/// chunks live once the source is forgotten and collected, under every
/// mark (the focused one with a recorded graph, which the clone drops and
/// the focused GC rebuilds).
#[test]
fn a_clone_writes_no_data_and_outlives_its_source() {
    for mark in [
        MarkSpec::Logical,
        MarkSpec::Physical,
        MarkSpec::PhysicalPlus,
        MarkSpec::Focused,
    ] {
        let b = mem();
        init_small(b.clone(), false);
        let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
        let v1 = bytes(11, 150_000);
        let v2 = bytes(12, 50_000);
        let id1 = backup(&mut repo, "a", &v1).unwrap();
        let id2 = backup(&mut repo, "b", &v2).unwrap();
        if mark == MarkSpec::Focused {
            repo.rebuild_refgraph(0).unwrap();
        }
        let containers = repo.manifest().containers.clone();
        let entries = repo.index().unwrap().len();
        let io0 = repo.metrics().snapshot();
        let c = repo.clone_backup(id1, Some("copy of a")).unwrap();
        let io = repo.metrics().snapshot().since(&io0);
        assert_eq!(io.data_container_bytes_written, 0);
        assert_eq!(io.data_container_bytes_read, 0, "no data read");
        assert_eq!(io.recipe_container_bytes_written, 0);
        assert_eq!(repo.manifest().containers, containers, "no container");
        assert_eq!(repo.index().unwrap().len(), entries, "no index entry");
        let src = repo.manifest().backup(id1).unwrap().clone();
        assert_eq!(
            (c.name.as_str(), c.new_bytes, c.new_chunks),
            ("copy of a", 0, 0)
        );
        assert_eq!((&c.root, c.root_level), (&src.root, src.root_level));
        assert_eq!((c.logical_bytes, c.chunks), (src.logical_bytes, src.chunks));
        assert_eq!(c.meta.parent, Some(id1));
        assert!(c.id > id2);
        assert_eq!(restore(&repo, c.id).unwrap(), v1);
        // Forget the source and collect: the clone keeps every chunk.
        repo.forget(&[id1]).unwrap();
        let stored = repo.stats().stored_data_bytes;
        let r = repo
            .gc(&GcOptions {
                mark,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(r.reclaimed_containers, 0, "{mark}: {r:?}");
        assert_eq!(repo.stats().stored_data_bytes, stored, "{mark}");
        assert_eq!(restore(&repo, c.id).unwrap(), v1, "{mark}");
        assert_eq!(restore(&repo, id2).unwrap(), v2, "{mark}");
        // A forgotten backup cannot be cloned.
        let err = repo.clone_backup(id1, None).unwrap_err().to_string();
        assert!(err.contains("no snapshot"), "{err}");
        // Forgetting the clone too makes v1's chunks garbage.
        repo.forget(&[c.id]).unwrap();
        let r = repo
            .gc(&GcOptions {
                mark,
                ..Default::default()
            })
            .unwrap();
        assert!(r.reclaimed_containers > 0, "{mark}: {r:?}");
        assert_eq!(restore(&repo, id2).unwrap(), v2, "{mark}");
        let ck = repo.check(&Default::default()).unwrap();
        assert!(ck.ok(), "{mark}: {:?}", ck.problems);
    }
}

/// A batch of clones is one manifest generation; each clone restores its
/// source exactly, and a GC after the doubling reclaims nothing and keeps
/// the physical size: the logical mark that walks shared subtrees again
/// makes twice the chunk queries, the physical mark the same number.
#[test]
fn a_batch_of_clones_is_one_generation_and_doubles_only_the_logical_walk() {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let v1 = bytes(21, 80_000);
    let v2 = mutate(&v1, 22);
    let ids = [
        backup(&mut repo, "a", &v1).unwrap(),
        backup(&mut repo, "b", &v2).unwrap(),
    ];
    let queries = |repo: &Writer, mark: MarkSpec| {
        repo.plan_gc(&GcOptions {
            mark,
            walk_shared_subtrees: true,
            dry_run: true,
            ..Default::default()
        })
        .unwrap()
        .report()
        .chunk_queries
    };
    let (logical, physical) = (
        queries(&repo, MarkSpec::Logical),
        queries(&repo, MarkSpec::Physical),
    );
    let generation = repo.manifest().generation;
    let stored = repo.stats().stored_data_bytes;
    let clones = repo.clone_backups(&ids, None).unwrap();
    assert_eq!(
        repo.manifest().generation,
        generation.next(),
        "one generation"
    );
    assert_eq!(clones.len(), 2);
    assert_eq!(restore(&repo, clones[0].id).unwrap(), v1);
    assert_eq!(restore(&repo, clones[1].id).unwrap(), v2);
    assert_eq!(queries(&repo, MarkSpec::Logical), 2 * logical);
    assert_eq!(queries(&repo, MarkSpec::Physical), physical);
    let r = gc(&mut repo, GcStrategy::Naive);
    assert_eq!(r.reclaimed_containers, 0);
    assert_eq!(repo.stats().stored_data_bytes, stored);
    // A missing source refuses the whole batch.
    repo.forget(&[ids[0]]).unwrap();
    let before = repo.backups().len();
    assert!(repo.clone_backups(&[ids[1], ids[0]], None).is_err());
    assert_eq!(repo.backups().len(), before);
}

/// PGC's live vector as a Bloom filter at FAST'17's 6 bits per
/// fingerprint (`bloom-bits:6`): the report says 6 bits per stored data
/// fingerprint, and the measured false-positive rate over the dead chunks
/// (a deterministic trace: 20,000 live, 20,000 dead) is within 1.5× of
/// (1 − e^(−kn/m))^k for its m = 6 × 40,000 bits and k = 4. The perfect
/// hash vectors report their bits per fingerprint too.
#[test]
fn bloom_live_vector_at_six_bits_meets_its_theoretical_false_positive_rate() {
    let b = mem();
    init_small(b.clone(), true);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let n = 20_000u32;
    let dead: Vec<u32> = (0..n).collect();
    let live: Vec<u32> = (n..2 * n).collect();
    let old = trace_backup(&mut repo, "old", &dead, 1024);
    trace_backup(&mut repo, "new", &live, 1024);
    repo.forget(&[old]).unwrap();
    let vc: VcSpec = "bloom-bits:6".parse().unwrap();
    assert_eq!(vc, VcSpec::BloomBits { bits: 6.0 });
    assert_eq!(vc.to_string(), "bloom-bits:6");
    let plan = repo
        .plan_gc(&GcOptions {
            mark: MarkSpec::Physical,
            vc,
            dry_run: true,
            ..Default::default()
        })
        .unwrap();
    let r = plan.report();
    assert!((r.live_vector_bits_per_fp - 6.0).abs() < 0.01, "{r:?}");
    assert!(r.lp_vector_bits_per_fp > 2.0, "{r:?}");
    assert!(
        live.iter().all(|&i| plan.mark.is_valid(&tfp(i), 0)),
        "false negative"
    );
    let hits = dead
        .iter()
        .filter(|&&i| plan.mark.is_valid(&tfp(i), 0))
        .count();
    let (m, k) = (6.0 * 2.0 * n as f64, 4.0);
    let theory = (1.0f64 - (-k * n as f64 / m).exp()).powf(k);
    let rate = hits as f64 / n as f64;
    assert!(
        rate <= theory * 1.5 && rate >= theory / 1.5,
        "{rate:.5} measured, {theory:.5} in theory ({hits} of {n})"
    );
    // The exact set costs far more per fingerprint; a PHV about 4.4 bits.
    let bits = |mark, vc| {
        repo.plan_gc(&GcOptions {
            mark,
            vc,
            dry_run: true,
            ..Default::default()
        })
        .unwrap()
        .report()
        .live_vector_bits_per_fp
    };
    assert!(bits(MarkSpec::Physical, VcSpec::Exact) > 100.0);
    let phv = bits(MarkSpec::PhysicalPlus, VcSpec::Exact);
    assert!((4.0..5.0).contains(&phv), "{phv}");
}

#[test]
fn dry_run_changes_nothing() {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let v1 = bytes(5, 120_000);
    let id1 = backup(&mut repo, "v1", &v1).unwrap();
    backup(&mut repo, "v2", &mutate(&v1, 6)).unwrap();
    repo.forget(&[id1]).unwrap();
    let objects = list_all(&*b).unwrap();
    let manifest = repo.manifest().clone();
    for strategy in [GcStrategy::Naive, GcStrategy::Gccdf] {
        let r = repo
            .gc(&GcOptions {
                strategy,
                dry_run: true,
                ..Default::default()
            })
            .unwrap();
        assert!(r.dry_run && r.involved_containers > 0 && r.reclaimed_containers > 0);
        assert_eq!(r.bytes_written, 0);
        assert_eq!(list_all(&*b).unwrap(), objects);
        assert_eq!(repo.manifest(), &manifest);
    }
    let real = gc(&mut repo, GcStrategy::Naive);
    assert!(real.produced_containers >= 1);
}

#[test]
fn liveness_threshold_leaves_mostly_live_containers_alone() {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let v1 = bytes(7, 300_000);
    let v2 = mutate(&v1, 8);
    let id1 = backup(&mut repo, "v1", &v1).unwrap();
    let id2 = backup(&mut repo, "v2", &v2).unwrap();
    repo.forget(&[id1]).unwrap();
    let low = repo
        .gc(&GcOptions {
            liveness_threshold: 0.5,
            dry_run: true,
            ..Default::default()
        })
        .unwrap();
    let r = repo
        .gc(&GcOptions {
            liveness_threshold: 0.5,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(low.reclaimed_containers, r.reclaimed_containers);
    // v1's edits made a few containers mostly dead; most stay (highly live).
    assert!(r.reclaimed_containers < r.involved_containers, "{r:?}");
    assert_eq!(restore(&repo, id2).unwrap(), v2);
    // A full GC afterwards finishes the job.
    let full = gc(&mut repo, GcStrategy::Naive);
    assert!(full.reclaimed_containers > 0);
    assert_only_live_chunks(&repo);
    assert_eq!(restore(&repo, id2).unwrap(), v2);
}

#[test]
fn perfect_hash_vc_reclaims_exactly_what_the_exact_set_does() {
    let run = |phv: bool| {
        let b = mem();
        init_small(b.clone(), false);
        let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
        let v1 = bytes(9, 150_000);
        let v2 = mutate(&v1, 10);
        let v3 = mutate(&v2, 11);
        let id1 = backup(&mut repo, "v1", &v1).unwrap();
        let id2 = backup(&mut repo, "v2", &v2).unwrap();
        let id3 = backup(&mut repo, "v3", &v3).unwrap();
        repo.forget(&[id1, id3]).unwrap();
        let r = repo
            .gc(&GcOptions {
                vc: if phv { VcSpec::Phv } else { VcSpec::Exact },
                ..Default::default()
            })
            .unwrap();
        assert_only_live_chunks(&repo);
        assert_eq!(restore(&repo, id2).unwrap(), v2);
        (
            r.reclaimed_containers,
            r.produced_containers,
            repo.stats().stored_data_bytes,
            r.peak_memory_bytes,
        )
    };
    let (exact, phv) = (run(false), run(true));
    assert_eq!((exact.0, exact.1, exact.2), (phv.0, phv.1, phv.2));
    assert!(exact.0 > 0);
    // One table at a time: the spec names exactly one.
    assert_eq!("phv".parse::<VcSpec>(), Ok(VcSpec::Phv));
    assert_eq!(VcSpec::Bloom { fp_rate: 0.01 }.to_string(), "bloom:0.01");
}

#[test]
fn bloom_vc_only_keeps_extra_chunks() {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let v1 = bytes(9, 150_000);
    let v2 = mutate(&v1, 10);
    let id1 = backup(&mut repo, "v1", &v1).unwrap();
    let id2 = backup(&mut repo, "v2", &v2).unwrap();
    repo.forget(&[id1]).unwrap();
    let r = repo
        .gc(&GcOptions {
            vc: VcSpec::Bloom { fp_rate: 0.01 },
            ..Default::default()
        })
        .unwrap();
    assert!(r.reclaimed_containers > 0);
    assert_eq!(restore(&repo, id2).unwrap(), v2);
    assert!(repo.stats().stored_data_bytes >= v2.len() as u64);
}

/// Trace chunk number `n` of the layout scenarios.
fn tfp(n: u32) -> Fingerprint {
    HashAlgo::Blake3.hash(&n.to_le_bytes())
}

fn trace_backup(repo: &mut Writer, name: &str, chunks: &[u32], len: u32) -> BackupId {
    let opts = BackupOptions::new(name, SourceKind::Trace);
    repo.backup_trace(&opts, chunks.iter().map(|&n| Ok((tfp(n), len))))
        .unwrap()
        .backup
        .id
}

/// Data containers' chunk numbers, in container order.
fn layout(repo: &Repository, chunks: u32) -> Vec<Vec<u32>> {
    let mut cs: Vec<_> = repo
        .manifest()
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| c.id)
        .collect();
    cs.sort();
    cs.iter()
        .map(|&id| {
            repo.store()
                .read(id)
                .unwrap()
                .meta
                .iter()
                .map(|m| (1..=chunks).find(|&n| tfp(n) == m.fp).unwrap())
                .collect()
        })
        .collect()
}

/// Fig. 6, end to end in trace mode: a deleted backup D left chunks 1–9 in
/// appearance order, mixed with its own garbage, three to a container.
/// α references 1–9, β 1,2,4,5,7,8, γ 1,5,7. Naive GC keeps layout 1;
/// GCCDF produces layout 2, and restoring every backup reads fewer
/// containers (6 instead of 9).
#[test]
fn fig6_gccdf_layout_groups_ownership_and_reads_fewer_containers() {
    let run = |strategy| {
        let b = mem();
        Repository::init(
            b.clone(),
            &InitOptions {
                hash: HashAlgo::Blake3,
                container_size: 4096,
                trace: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut repo = Repository::open_writer(b, "t").unwrap();
        // 1365 bytes: three chunks fill a 4 KiB container.
        let d = trace_backup(
            &mut repo,
            "D",
            &[1, 2, 100, 3, 4, 101, 5, 6, 102, 7, 8, 103, 9, 104],
            1365,
        );
        trace_backup(&mut repo, "alpha", &[1, 2, 3, 4, 5, 6, 7, 8, 9], 1365);
        trace_backup(&mut repo, "beta", &[1, 2, 4, 5, 7, 8], 1365);
        trace_backup(&mut repo, "gamma", &[1, 5, 7], 1365);
        repo.forget(&[d]).unwrap();
        let r = repo
            .gc(&GcOptions {
                strategy,
                split_threshold: 1,
                ownership_fp_rate: 0.0,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(r.involved_containers, 5, "{r:?}");
        assert_eq!(r.produced_containers, 3);
        (layout(&repo, 200), containers_read(&repo))
    };
    let (naive, naive_reads) = run(GcStrategy::Naive);
    assert_eq!(naive, vec![vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]);
    assert_eq!(naive_reads, 9);
    let (gccdf, gccdf_reads) = run(GcStrategy::Gccdf);
    assert_eq!(gccdf, vec![vec![3, 6, 9], vec![2, 4, 8], vec![1, 5, 7]]);
    assert_eq!(gccdf_reads, 6);
}

/// A bigger interleaved scenario with default options (split threshold 200,
/// Bloom ownership filters, segments of 100): three ownership classes were
/// ingested round-robin by a since-deleted backup; GCCDF must un-mix them.
#[test]
fn gccdf_defaults_read_fewer_containers_than_naive_on_interleaved_ownership() {
    let run = |strategy| {
        let b = mem();
        Repository::init(
            b.clone(),
            &InitOptions {
                hash: HashAlgo::Blake3,
                container_size: 64 * 1024,
                trace: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut repo = Repository::open_writer(b, "t").unwrap();
        // Chunk n has class n % 3; every 10th chunk of D is garbage.
        let d: Vec<u32> = (1..=1800u32)
            .flat_map(|n| {
                if n % 10 == 0 {
                    vec![n, 100_000 + n]
                } else {
                    vec![n]
                }
            })
            .collect();
        let d = trace_backup(&mut repo, "D", &d, 1024);
        let class = |k: u32| {
            (1..=1800u32)
                .filter(move |n| n % 3 <= k)
                .collect::<Vec<_>>()
        };
        trace_backup(&mut repo, "a", &class(2), 1024);
        trace_backup(&mut repo, "b", &class(1), 1024);
        trace_backup(&mut repo, "c", &class(0), 1024);
        repo.forget(&[d]).unwrap();
        let r = gc(&mut repo, strategy);
        assert_only_live_chunks(&repo);
        (containers_read(&repo), r)
    };
    let (naive, rn) = run(GcStrategy::Naive);
    let (gccdf, rg) = run(GcStrategy::Gccdf);
    assert!(gccdf < naive, "gccdf reads {gccdf}, naive {naive}");
    assert_eq!(rn.moved_chunks, rg.moved_chunks);
    assert_eq!(rn.bytes_written, 1800 * 1024);
    assert_eq!(rg.bytes_written, 1800 * 1024, "no chunk stored twice");
    // 1800 KiB live in 64 KiB containers: 29 for naive, at most 3 partial more.
    assert_eq!(rn.produced_containers, 29);
    assert!(rg.produced_containers <= 31, "{rg:?}");
    assert_eq!(rg.segments, 1);
    assert!(rg.tree_peak_bytes > 0 && rg.gc_cache_peak_bytes == 1800 * 1024);
}

/// GC in trace mode produces the same layout as in data mode.
#[test]
fn trace_mode_gc_matches_data_mode() {
    let cfg = ChunkerConfig::Fastcdc {
        min: 256,
        avg: 1024,
        max: 4096,
    };
    let v1 = bytes(31, 150_000);
    let v2 = mutate(&v1, 32);
    let v3 = mutate(&v2, 33);
    let mut out = Vec::new();
    for trace in [false, true] {
        let b = mem();
        init_small(b.clone(), trace);
        let mut repo = Repository::open_writer(b, "t").unwrap();
        let mut ids = Vec::new();
        for v in [&v1, &v2, &v3] {
            ids.push(if trace {
                let opts = BackupOptions::new("v", SourceKind::Stream);
                repo.backup_trace(&opts, trace_of(&cfg, v))
                    .unwrap()
                    .backup
                    .id
            } else {
                backup(&mut repo, "v", v).unwrap()
            });
        }
        repo.forget(&[ids[0]]).unwrap();
        let r = gc(&mut repo, GcStrategy::Gccdf);
        let s = repo.stats();
        out.push((
            r.involved_containers,
            r.produced_containers,
            r.bytes_read,
            r.bytes_written,
            s.data_containers,
            s.stored_data_bytes,
            containers_read(&repo),
        ));
    }
    assert_eq!(out[0], out[1]);
}

#[derive(Clone, Debug)]
enum Op {
    Backup {
        base: Option<usize>,
        seed: u64,
        rewrite: RewriteSpec,
    },
    Forget {
        pick: usize,
    },
    Gc {
        gccdf: bool,
        threshold: f64,
        segment: usize,
        split: usize,
        /// Bloom VC (false positives keep dead chunks) instead of an exact set.
        bloom: bool,
        /// Perfect-hash-vector VC (exact for stored chunks), unless `bloom`.
        phv: bool,
        /// The mark: logical, physical, physical+ or focused.
        mark: MarkSpec,
        /// Physical marks: a live-vector budget small enough to sample.
        sample: bool,
    },
}

/// Mostly no rewriting; else a policy that stores copies of duplicates.
fn rewrite_spec() -> impl Strategy<Value = RewriteSpec> {
    prop_oneof![
        3 => Just(RewriteSpec::None),
        1 => (1usize..3).prop_map(|level| RewriteSpec::Capping { level }),
        1 => (1usize..3).prop_map(|level| RewriteSpec::Smr { level }),
        1 => Just(RewriteSpec::Ned { threshold: 0.6 }),
        1 => Just(RewriteSpec::parse("har:0.6:1").unwrap()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (proptest::option::weighted(0.8, 0usize..8), any::<u64>(), rewrite_spec()).prop_map(|(base, seed, rewrite)| Op::Backup { base, seed, rewrite }),
        3 => (0usize..8).prop_map(|pick| Op::Forget { pick }),
        2 => (any::<bool>(), prop_oneof![2 => Just(1.0), 1 => 0.0f64..1.0], 1usize..6, 1usize..300, proptest::bool::weighted(0.2), proptest::bool::weighted(0.3), prop_oneof![Just(MarkSpec::Logical), Just(MarkSpec::Physical), Just(MarkSpec::PhysicalPlus), Just(MarkSpec::Focused)], proptest::bool::weighted(0.2))
            .prop_map(|(gccdf, threshold, segment, split, bloom, phv, mark, sample)| Op::Gc { gccdf, threshold, segment, split, bloom, phv, mark, sample }),
    ]
}

/// The logical, physical and physical+ marks find the same live data and
/// recipe chunks (exact tables, so the comparison is exact), and the
/// logical and physical marks select the same containers.
fn assert_marks_agree(repo: &Repository, strategy: GcStrategy) {
    let plan = |mark| {
        repo.plan_gc(&GcOptions {
            strategy,
            mark,
            dry_run: true,
            ..Default::default()
        })
        .unwrap()
    };
    let live = |p: &tessera_core::gc::GcPlan| {
        let data: HashSet<(Fingerprint, u16)> = repo
            .index()
            .unwrap()
            .entries()
            .filter(|e| e.kind == ChunkKind::Data && p.mark.is_valid(&e.fp, e.copy))
            .map(|e| (e.fp, e.copy))
            .collect();
        let recipes: HashSet<Fingerprint> = p.mark.valid_recipe.iter().copied().collect();
        (data, recipes)
    };
    let lgc = plan(MarkSpec::Logical);
    let (data, recipes) = referenced(repo);
    assert_eq!(live(&lgc), (data, recipes));
    for mark in [MarkSpec::Physical, MarkSpec::PhysicalPlus] {
        let p = plan(mark);
        assert_eq!(live(&p), live(&lgc), "{mark} mark");
        if mark == MarkSpec::Physical {
            assert_eq!(p.selection.empty, lgc.selection.empty);
            assert_eq!(p.selection.copy, lgc.selection.copy);
            assert_eq!(p.selection.recipe_copy, lgc.selection.recipe_copy);
            assert_eq!(p.selection.recipe_empty, lgc.selection.recipe_empty);
            if strategy == GcStrategy::Gccdf {
                assert_eq!(p.mark.rrt, lgc.mark.rrt, "RRT");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("GC_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96), .. ProptestConfig::default() })]

    /// Any backup / forget / gc sequence keeps every retained backup
    /// restorable byte for byte (also after reopening), and a full GC
    /// leaves only live chunks.
    #[test]
    fn gc_agrees_with_reference_model(ops in proptest::collection::vec(op(), 4..20)) {
        run_gc_model(ops)?;
    }
}

/// The body of `gc_agrees_with_reference_model`, callable with a fixed
/// sequence (the regressions below).
fn run_gc_model(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let mut model: BTreeMap<BackupId, Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Backup {
                base,
                seed,
                rewrite,
            } => {
                let data = match base.and_then(|i| model.values().nth(i % model.len().max(1))) {
                    Some(v) => mutate(v, seed),
                    None => bytes(seed, 20_000 + (seed % 60_000) as usize),
                };
                let opts = BackupOptions {
                    rewrite,
                    segment_bytes: Some(8 * 1024),
                    ..BackupOptions::new("m", SourceKind::Stream)
                };
                let id = repo
                    .backup_reader(&opts, &mut &data[..], &mut |_| {})
                    .unwrap()
                    .backup
                    .id;
                model.insert(id, data);
            }
            Op::Forget { pick } => {
                if let Some(&id) = model.keys().nth(pick % model.len().max(1)) {
                    repo.forget(&[id]).unwrap();
                    model.remove(&id);
                }
            }
            Op::Gc {
                gccdf,
                threshold,
                segment,
                split,
                bloom,
                phv,
                mark,
                sample,
            } => {
                let strategy = if gccdf {
                    GcStrategy::Gccdf
                } else {
                    GcStrategy::Naive
                };
                // Every mark finds the same live set.
                assert_marks_agree(&repo, strategy);
                let focused = mark == MarkSpec::Focused;
                let forgotten = forgotten_chunks(&repo).0;
                if focused {
                    // The focused mark judges the deleted backups'
                    // chunks as the full mark does, and under GCCDF
                    // gives the sweep the same ownership.
                    assert_focused_ownership_agrees(&repo, strategy, segment, split);
                }
                let sample = sample && matches!(mark, MarkSpec::Physical | MarkSpec::PhysicalPlus);
                let r = repo
                    .gc(&GcOptions {
                        strategy,
                        mark,
                        liveness_threshold: threshold,
                        segment_containers: segment,
                        split_threshold: split,
                        vc: if bloom {
                            VcSpec::Bloom { fp_rate: 0.2 }
                        } else if phv {
                            VcSpec::Phv
                        } else {
                            VcSpec::Exact
                        },
                        memory_limit: sample.then_some(2000),
                        ..Default::default()
                    })
                    .unwrap();
                prop_assert!(r.reclaimed_containers <= r.involved_containers);
                if threshold >= 1.0 && !bloom && !sample && !focused {
                    assert_only_live_chunks(&repo);
                    // Nothing is left for a second full GC.
                    let again = repo
                        .gc(&GcOptions {
                            strategy,
                            ..Default::default()
                        })
                        .unwrap();
                    prop_assert_eq!(
                        again.involved_containers + again.recipe_involved_containers,
                        0
                    );
                }
                if threshold >= 1.0 && !bloom && focused {
                    // No dead copy of a deleted backup is left (garbage
                    // from before the deletions waits for a full mark).
                    assert_no_dead_copy_of(&repo, &forgotten);
                }
                repo.close().unwrap();
                repo = Repository::open_writer(b.clone(), "t").unwrap();
                prop_assert!(repo.leftovers().objects.is_empty());
            }
        }
        for (id, data) in &model {
            prop_assert_eq!(&restore(&repo, *id).unwrap(), data);
        }
    }
    Ok(())
}

/// Found by CI after cca1a47 (GC keeps alias entries): SMR rewrote a copy
/// into the container of another copy; after the forget and a full GC the
/// dead copy stayed indexed as an alias of the live one, which
/// `assert_only_live_chunks` must allow (and did not).
#[test]
fn gc_model_keeps_an_alias_of_a_rewritten_copy() {
    let gc = |mark| Op::Gc {
        gccdf: false,
        threshold: 1.0,
        segment: 1,
        split: 1,
        bloom: false,
        phv: false,
        mark,
        sample: false,
    };
    run_gc_model(vec![
        Op::Backup {
            base: None,
            seed: 292869468880769607,
            rewrite: RewriteSpec::None,
        },
        Op::Backup {
            base: None,
            seed: 0,
            rewrite: RewriteSpec::None,
        },
        Op::Backup {
            base: Some(2),
            seed: 0,
            rewrite: RewriteSpec::Smr { level: 1 },
        },
        gc(MarkSpec::PhysicalPlus),
        Op::Forget { pick: 0 },
        Op::Backup {
            base: None,
            seed: 0,
            rewrite: RewriteSpec::None,
        },
        gc(MarkSpec::Logical),
    ])
    .unwrap();
}

/// Fail at every backend operation of a GC in turn; after each crash the
/// repository opens and every retained backup restores exactly.
fn crash_sweep(strategy: GcStrategy, loss: u64) -> u64 {
    let v1 = bytes(41, 120_000);
    let v2 = mutate(&v1, 42);
    let v3 = mutate(&v2, 43);
    let setup = || {
        let inner = mem();
        init_small(inner.clone(), false);
        let mut repo = Repository::open_writer(inner.clone(), "t").unwrap();
        let id1 = backup(&mut repo, "v1", &v1).unwrap();
        backup(&mut repo, "v2", &v2).unwrap();
        backup(&mut repo, "v3", &v3).unwrap();
        repo.forget(&[id1]).unwrap();
        repo.close().unwrap();
        inner
    };
    let op = |repo: &mut Writer| {
        repo.gc(&GcOptions {
            strategy,
            segment_containers: 3,
            split_threshold: 2,
            ..Default::default()
        })
        .map(|_| ())
    };
    let inner = setup();
    let counting = Arc::new(FaultyStore::new(inner.clone(), None));
    let mut repo = Repository::open_writer(counting.clone(), "t").unwrap();
    let base = counting.ops();
    op(&mut repo).unwrap();
    repo.close().unwrap();
    let total = counting.ops();
    for n in (base + 1)..=total {
        let inner = setup();
        let failing = Arc::new(match loss {
            0 => FaultyStore::new(inner.clone(), Some(n)),
            1 => FaultyStore::with_lost_unsynced(inner.clone(), Some(n)),
            seed => FaultyStore::with_partial_loss(inner.clone(), Some(n), seed),
        });
        let result = Repository::open_writer(failing.clone(), "t").and_then(|mut repo| {
            op(&mut repo)?;
            repo.close()
        });
        assert!(
            failing.has_failed() || result.is_ok(),
            "fail_at {n}: {result:?}"
        );
        drop(result);
        tessera_core::lock::break_lock(&*inner).unwrap();
        let mut repo = Repository::open_writer(inner.clone(), "t")
            .unwrap_or_else(|e| panic!("fail_at {n}: reopen failed: {e}"));
        let names: Vec<_> = repo.backups().iter().map(|b| b.name.clone()).collect();
        assert_eq!(names, ["v2", "v3"], "fail_at {n}");
        let check = |repo: &Repository| {
            for b in repo.backups() {
                let want = if b.name == "v2" { &v2 } else { &v3 };
                assert_eq!(
                    &restore(repo, b.id).unwrap(),
                    want,
                    "fail_at {n}: {}",
                    b.name
                );
            }
            assert!(
                repo.find_leftovers().unwrap().is_empty(),
                "fail_at {n}: leftovers"
            );
        };
        check(&repo);
        // A GC after the crash completes the job.
        op(&mut repo).unwrap();
        check(&repo);
        assert_only_live_chunks(&repo);
    }
    total - base
}

#[test]
fn crash_at_every_operation_of_a_naive_gc() {
    for loss in 0..4 {
        assert!(crash_sweep(GcStrategy::Naive, loss) > 5);
    }
}

#[test]
fn crash_at_every_operation_of_a_gccdf_gc() {
    for loss in 0..4 {
        assert!(crash_sweep(GcStrategy::Gccdf, loss) > 5);
    }
}

/// GC throughput benchmark (not a check): a trace-mode series of 20 backups
/// over ~200k chunks (4 KiB chunks, 4 MiB containers, a few hundred
/// containers); the oldest 10 are forgotten, then one GC per strategy on
/// identical repositories, every mark with every sweep. Run with
/// `cargo test -p tessera-core --test it -- --ignored --nocapture gc_throughput`.
#[test]
#[ignore]
fn gc_throughput_benchmark() {
    let build = || {
        let b = mem();
        Repository::init(
            b.clone(),
            &InitOptions {
                hash: HashAlgo::Sha1,
                container_size: 4 << 20,
                trace: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut repo = Repository::open_writer(b, "bench").unwrap();
        let mut version: Vec<u32> = (0..200_000).collect();
        let mut next = 200_000u32;
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut ids = Vec::new();
        for v in 0..20 {
            if v > 0 {
                // 3 % of positions get new chunks, in runs of 20.
                for _ in 0..300 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let at = (x as usize) % (version.len() - 20);
                    for c in &mut version[at..at + 20] {
                        *c = next;
                        next += 1;
                    }
                }
            }
            let opts = BackupOptions::new(format!("v{v}"), SourceKind::Trace);
            let id = repo
                .backup_trace(&opts, version.iter().map(|&n| Ok((tfp(n), 4096))))
                .unwrap()
                .backup
                .id;
            ids.push(id);
        }
        repo.forget(&ids[..10]).unwrap();
        repo
    };
    println!("strategy  mark  involved  GB  produced  total_s  GB/s  mark  analyze  read  write  reads/restore  peak_MB");
    let marks = [
        MarkSpec::Logical,
        MarkSpec::Physical,
        MarkSpec::PhysicalPlus,
    ];
    for (strategy, mark) in [GcStrategy::Naive, GcStrategy::Gccdf]
        .into_iter()
        .flat_map(|s| marks.map(|m| (s, m)))
    {
        let mut repo = build();
        let containers = repo.manifest().containers.len();
        let r = repo
            .gc(&GcOptions {
                strategy,
                mark,
                ..Default::default()
            })
            .unwrap();
        let gb = r.involved_bytes as f64 / 1e9;
        let reads = containers_read(&repo) as f64 / repo.backups().len() as f64;
        println!(
            "{strategy:8} {mark:9} {:4}/{containers}  {gb:.2}  {:4}  {:.3}  {:.2}  {:.3}  {:.3} ({:.0} %)  {:.3}  {:.3}  {reads:.1}  {:.1}",
            r.involved_containers,
            r.produced_containers,
            r.total_seconds,
            gb / r.total_seconds,
            r.mark_seconds,
            r.analyze_seconds,
            100.0 * r.analyze_seconds / r.total_seconds,
            r.sweep_read_seconds,
            r.sweep_write_seconds,
            r.peak_memory_bytes as f64 / 1e6,
        );
        println!(
            "  publish {:.3} s; mark read {:.1} MB of recipe containers; mark tables {:.1} MB, GC cache {:.1} MB, tree {:.1} MB",
            r.publish_seconds,
            r.mark_bytes_read as f64 / 1e6,
            r.mark_memory_bytes as f64 / 1e6,
            r.gc_cache_peak_bytes as f64 / 1e6,
            r.tree_peak_bytes as f64 / 1e6
        );
    }
}

/// Rounds as in GCCDF's methodology, scaled down (not a check): keep
/// ingesting versions, retain the newest 10, each round forget the oldest 2
/// and GC. Prints per-round involved/produced containers and the mean
/// containers read per retained backup restore. Run with
/// `cargo test -p tessera-core --test it -- --ignored --nocapture gc_rounds`.
#[test]
#[ignore]
fn gc_rounds_benchmark() {
    for strategy in [GcStrategy::Naive, GcStrategy::Gccdf] {
        let b = mem();
        Repository::init(
            b.clone(),
            &InitOptions {
                hash: HashAlgo::Sha1,
                container_size: 1 << 20,
                trace: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut repo = Repository::open_writer(b, "bench").unwrap();
        let mut version: Vec<u32> = (0..50_000).collect();
        let mut next = 50_000u32;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut involved, mut produced, mut secs) = (0, 0, 0.0);
        print!("{strategy:6} round: involved/produced, reads per restore:");
        for v in 0..40 {
            if v > 0 {
                // 2 % of positions changed in runs of 10, plus an insertion.
                for _ in 0..100 {
                    let at = (rnd() as usize) % (version.len() - 10);
                    for c in &mut version[at..at + 10] {
                        *c = next;
                        next += 1;
                    }
                }
                let at = (rnd() as usize) % version.len();
                let ins: Vec<u32> = (next..next + 200).collect();
                next += 200;
                version.splice(at..at, ins);
            }
            let opts = BackupOptions::new(format!("v{v}"), SourceKind::Trace);
            repo.backup_trace(&opts, version.iter().map(|&n| Ok((tfp(n), 4096))))
                .unwrap();
            if repo.backups().len() == 12 {
                let old: Vec<BackupId> = repo.backups()[..2].iter().map(|b| b.id).collect();
                repo.forget(&old).unwrap();
                let r = gc(&mut repo, strategy);
                involved += r.involved_containers;
                produced += r.produced_containers;
                secs += r.total_seconds;
                if v % 6 == 1 {
                    let reads = containers_read(&repo) as f64 / repo.backups().len() as f64;
                    print!(
                        "  v{v}: {}/{}, {reads:.1}",
                        r.involved_containers, r.produced_containers
                    );
                }
            }
        }
        let reads = containers_read(&repo) as f64 / repo.backups().len() as f64;
        let s = repo.stats();
        println!(
            "\n  total involved {involved}, produced {produced}, GC {secs:.2} s; final: {} data containers, dedup {:.2}, mean reads per restore {reads:.1}",
            s.data_containers, s.dedup_ratio
        );
    }
}

/// Involved containers are those a deleted backup referenced (the papers'
/// GS list), counted once per GC: a fully live one is involved and skipped,
/// one holding a dead chunk is reclaimed, and the next GC starts afresh.
#[test]
fn involved_counts_what_deleted_backups_referenced_once() {
    let b = mem();
    init_small(b.clone(), true);
    let mut repo = Repository::open_writer(b, "t").unwrap();
    // 16 KiB containers of 4 KiB trace chunks: 4 chunks per container.
    let shared: Vec<u32> = (0..8).collect(); // containers 1, 2
    let a = trace_backup(
        &mut repo,
        "a",
        &[shared.clone(), (100..104).collect()].concat(),
        4096,
    );
    let _keep = trace_backup(&mut repo, "b", &shared, 4096);
    repo.forget(&[a]).unwrap();
    assert_eq!(repo.manifest().forgotten.len(), 1);
    let r = gc(&mut repo, GcStrategy::Naive);
    // a referenced three containers: two still fully live (skipped), one dead.
    assert_eq!(r.involved_containers, 3, "{r:?}");
    assert_eq!(r.reclaimed_containers, 1);
    assert_eq!(r.skipped_containers, 2);
    assert!(repo.manifest().forgotten.is_empty());
    let r = gc(&mut repo, GcStrategy::Naive);
    assert_eq!((r.involved_containers, r.reclaimed_containers), (0, 0));
    // Nothing to reclaim still clears the list.
    let c = trace_backup(&mut repo, "c", &shared, 4096);
    repo.forget(&[c]).unwrap();
    let r = gc(&mut repo, GcStrategy::Gccdf);
    assert_eq!((r.involved_containers, r.reclaimed_containers), (2, 0));
    assert!(repo.manifest().forgotten.is_empty());
}

/// Two live copies of one chunk (one rewritten by HAR or Capping) that lie
/// in different old containers and are both moved by one naive GC land in
/// the same new container: they must share one stored copy there. Writing
/// the chunk twice left a redundant duplicate that made the next full GC
/// find an involved container (a reference-model case).
#[test]
fn live_copies_meeting_in_one_new_container_share_one_stored_copy() {
    type Model = BTreeMap<BackupId, Vec<u8>>;
    fn backup_op(
        repo: &mut Writer,
        model: &mut Model,
        base: Option<usize>,
        seed: u64,
        rewrite: RewriteSpec,
    ) {
        let data = match base.and_then(|i| model.values().nth(i % model.len().max(1))) {
            Some(v) => mutate(v, seed),
            None => bytes(seed, 20_000 + (seed % 60_000) as usize),
        };
        let opts = BackupOptions {
            rewrite,
            segment_bytes: Some(8 * 1024),
            ..BackupOptions::new("m", SourceKind::Stream)
        };
        let id = repo
            .backup_reader(&opts, &mut &data[..], &mut |_| {})
            .unwrap()
            .backup
            .id;
        model.insert(id, data);
    }
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let mut m = Model::new();
    let har = RewriteSpec::parse("har:0.6:1").unwrap();
    backup_op(
        &mut repo,
        &mut m,
        None,
        17724358964799219573,
        RewriteSpec::None,
    );
    backup_op(
        &mut repo,
        &mut m,
        Some(0),
        1586676566674843867,
        RewriteSpec::None,
    );
    backup_op(&mut repo, &mut m, None, 0, RewriteSpec::None);
    backup_op(&mut repo, &mut m, Some(1), 15122686427267813887, har);
    backup_op(
        &mut repo,
        &mut m,
        Some(3),
        3058968042773254616,
        RewriteSpec::Capping { level: 1 },
    );
    for pick in [0usize, 4, 0, 1] {
        let id = *m.keys().nth(pick % m.len()).unwrap();
        repo.forget(&[id]).unwrap();
        m.remove(&id);
    }
    backup_op(&mut repo, &mut m, Some(0), 384496568524292699, har);
    let full = GcOptions {
        strategy: GcStrategy::Naive,
        mark: MarkSpec::Logical,
        liveness_threshold: 1.0,
        ..Default::default()
    };
    repo.gc(&full).unwrap();
    assert_only_live_chunks(&repo);
    for c in &repo.manifest().containers {
        let got = repo.store().read(c.id).unwrap();
        let distinct: HashSet<_> = got.meta.iter().map(|m| m.fp).collect();
        assert_eq!(
            distinct.len(),
            got.meta.len(),
            "container {} stores a chunk twice",
            c.id
        );
    }
    let again = repo.gc(&full).unwrap();
    assert_eq!(
        again.involved_containers + again.recipe_involved_containers,
        0
    );
    for (id, data) in &m {
        assert_eq!(&restore(&repo, *id).unwrap(), data);
    }
}

/// The data chunk copies and recipe fingerprints of the backups forgotten
/// since the last GC: what the focused mark must judge exactly as the full
/// mark does.
fn forgotten_chunks(repo: &Repository) -> (HashSet<(Fingerprint, u16)>, HashSet<Fingerprint>) {
    let (mut data, mut recipes) = (HashSet::new(), HashSet::new());
    for b in &repo.manifest().forgotten {
        let mut w = RecipeWalker::new(b.root_fp().unwrap(), b.root_level, |fp, _| {
            recipes.insert(*fp);
            let c = repo.index().unwrap().get(ChunkKind::Recipe, fp).unwrap();
            let c = repo.store().read(c)?;
            recipe::decode(c.chunk(fp).unwrap(), "t")
        })
        .unwrap();
        while let Some(e) = w.next().unwrap() {
            data.insert((e.fp, e.copy));
        }
    }
    (data, recipes)
}

/// The focused mark `focused` judges every copy and recipe chunk of the
/// forgotten backups as the full mark `full` does.
fn assert_same_verdicts_on_forgotten(
    repo: &Repository,
    full: &tessera_core::gc::Mark,
    focused: &tessera_core::gc::Mark,
) {
    let (data, recipes) = forgotten_chunks(repo);
    for (fp, copy) in &data {
        assert_eq!(
            full.is_valid(fp, *copy),
            focused.is_valid(fp, *copy),
            "data chunk {fp:?} copy {copy}"
        );
    }
    for fp in &recipes {
        assert_eq!(
            full.valid_recipe.contains(fp),
            focused.valid_recipe.contains(fp),
            "recipe chunk {fp:?}"
        );
    }
}

/// Plan a full and a focused GC and check that the focused mark judges
/// every copy and recipe chunk of the forgotten backups as the full mark
/// does, and that its live counts are never below the full mark's.
/// Returns the focused mark's figures.
fn assert_focused_agrees(repo: &Writer) -> tessera_core::gc::mark::FocusStats {
    let full = repo.plan_gc(&GcOptions::default()).unwrap();
    let fm = repo.plan_gc(&focused()).unwrap();
    assert_same_verdicts_on_forgotten(repo, &full.mark, &fm.mark);
    // Live counts only ever err towards live (garbage from before the
    // deletions stays): never below the full mark's, or a container could
    // be dropped unread while it holds a live copy.
    let (fl, ml) = (
        full.mark.live.as_ref().unwrap(),
        fm.mark.live.as_ref().unwrap(),
    );
    for (c, l) in fl {
        let m = ml.get(c).copied().unwrap_or_default();
        assert!(
            m.chunks >= l.chunks && m.bytes >= l.bytes,
            "container {c:?}: focused {m:?} below full {l:?}"
        );
    }
    let stats = fm.mark.fgc.clone().unwrap();
    assert_eq!(
        stats.correlative_backups + stats.skipped_backups,
        repo.backups().len()
    );
    stats
}

fn focused() -> GcOptions {
    GcOptions {
        mark: MarkSpec::Focused,
        focus_fallback: false,
        ..Default::default()
    }
}

#[derive(Clone, Debug)]
enum FocusOp {
    /// A new version of `source`: its last version mutated, with a piece
    /// of another source's last version spliced in (cross-source sharing).
    /// With a rewrite policy (stores copies of duplicates; the backup
    /// then records no graph, and the next focused GC rebuilds it).
    Backup {
        source: usize,
        other: usize,
        seed: u64,
        rewrite: RewriteSpec,
    },
    Forget {
        pick: usize,
    },
    /// `mark`: focused, logical, or physical+ (whose copy phase sends two
    /// live copies of a chunk to one stored chunk).
    Gc {
        mark: MarkSpec,
    },
    /// Rebuild the graph from the recipes, at another granularity.
    Rebuild {
        granularity: usize,
    },
}

const GRANULARITIES: [u64; 3] = [0, 8 * 1024, 40 * 1024];

fn focus_op() -> impl Strategy<Value = FocusOp> {
    prop_oneof![
        6 => (0usize..6, 0usize..6, any::<u64>(), prop_oneof![4 => Just(RewriteSpec::None), 1 => rewrite_spec()])
            .prop_map(|(source, other, seed, rewrite)| FocusOp::Backup { source, other, seed, rewrite }),
        3 => (0usize..16).prop_map(|pick| FocusOp::Forget { pick }),
        3 => prop_oneof![7 => Just(MarkSpec::Focused), 2 => Just(MarkSpec::Logical), 1 => Just(MarkSpec::PhysicalPlus)]
            .prop_map(|mark| FocusOp::Gc { mark }),
        1 => (0usize..3).prop_map(|granularity| FocusOp::Rebuild { granularity }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Many sources with versions and cross-source sharing, some backups
    /// rewriting (chunk copies): before every GC, the focused mark judges
    /// each chunk copy of the deleted backups exactly as the full mark
    /// does; GCs with any mark keep every retained backup restorable.
    #[test]
    fn focused_mark_agrees_with_full_mark(
        granularity in 0usize..3,
        ops in proptest::collection::vec(focus_op(), 6..28),
    ) {
        let b = mem();
        init_small(b.clone(), false);
        let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
        repo.rebuild_refgraph(GRANULARITIES[granularity]).unwrap();
        let mut model: BTreeMap<BackupId, Vec<u8>> = BTreeMap::new();
        let mut last: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
        for op in ops {
            match op {
                FocusOp::Backup { source, other, seed, rewrite } => {
                    let mut data = match last.get(&source) {
                        Some(v) => mutate(v, seed),
                        None => bytes(seed, 20_000 + (seed % 50_000) as usize),
                    };
                    if let Some(o) = last.get(&other).filter(|_| other != source) {
                        let from = (seed as usize) % o.len();
                        let piece = &o[from..o.len().min(from + 12_000)];
                        let at = (seed as usize / 7) % data.len();
                        data.splice(at..at, piece.iter().copied());
                    }
                    let opts = BackupOptions {
                        rewrite,
                        segment_bytes: Some(32 * 1024),
                        ..BackupOptions::new("m", SourceKind::Stream)
                    };
                    let id = repo.backup_reader(&opts, &mut &data[..], &mut |_| {}).unwrap().backup.id;
                    last.insert(source, data.clone());
                    model.insert(id, data);
                }
                FocusOp::Forget { pick } => {
                    if let Some(&id) = model.keys().nth(pick % model.len().max(1)) {
                        repo.forget(&[id]).unwrap();
                        model.remove(&id);
                    }
                }
                FocusOp::Rebuild { granularity } => {
                    repo.rebuild_refgraph(GRANULARITIES[granularity]).unwrap();
                }
                FocusOp::Gc { mark } => {
                    assert_focused_agrees(&repo);
                    let recorded = tessera_core::fgc::RefGraphState::of(repo.manifest()).unwrap().is_some();
                    repo.gc(&GcOptions { mark, ..Default::default() }).unwrap();
                    repo.close().unwrap();
                    repo = Repository::open_writer(b.clone(), "t").unwrap();
                    prop_assert!(repo.leftovers().objects.is_empty());
                    // A focused GC (re)builds the graph; the others keep it.
                    prop_assert_eq!(tessera_core::fgc::RefGraphState::of(repo.manifest()).unwrap().is_some(), recorded || mark == MarkSpec::Focused);
                }
            }
            for (id, data) in &model {
                prop_assert_eq!(&restore(&repo, *id).unwrap(), data);
            }
        }
        let c = repo.check(&Default::default()).unwrap();
        prop_assert!(c.ok(), "{:?}", c.problems);
    }
}

/// A writer, each source's (first, second) backup, every backup's bytes.
type TenSources = (
    Writer,
    Vec<(BackupId, BackupId)>,
    BTreeMap<BackupId, Vec<u8>>,
);

/// A repository recording the reference graph from its start, holding two
/// versions of each of ten unrelated sources (seeds `seed`…`seed + 9`):
/// the writer, each source's (first, second) backup, and every backup's
/// bytes.
fn ten_sources_recording(b: &Arc<tessera_core::backend::MemoryStore>, seed: u64) -> TenSources {
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    repo.rebuild_refgraph(0).unwrap();
    let (mut ids, mut data) = (Vec::new(), BTreeMap::new());
    for s in 0..10u64 {
        let v1 = bytes(seed + s, 60_000);
        let v2 = mutate(&v1, s);
        let a = backup(&mut repo, "s", &v1).unwrap();
        let b2 = backup(&mut repo, "s", &v2).unwrap();
        data.insert(a, v1);
        data.insert(b2, v2);
        ids.push((a, b2));
    }
    (repo, ids, data)
}

/// A focused GC walks only the deleted backup's correlative backups: with
/// ten unrelated sources, forgetting one reads none of the others' recipes,
/// and reclaims exactly what the full mark does.
#[test]
fn focused_gc_walks_only_correlative_backups() {
    let b = mem();
    let (mut repo, ids, _) = ten_sources_recording(&b, 100);
    repo.forget(&[ids[3].0]).unwrap();
    let focus_opts = GcOptions {
        mark: MarkSpec::Focused,
        ..Default::default()
    };
    let fm = repo.plan_gc(&focus_opts).unwrap();
    let full = repo.plan_gc(&GcOptions::default()).unwrap();
    let stats = fm.mark.fgc.clone().unwrap();
    assert_eq!(
        stats.correlative_backups, 1,
        "only source 3's second version"
    );
    assert_eq!(stats.skipped_backups, 18);
    assert!(!stats.rebuilt);
    assert!(
        fm.mark_bytes_read * 4 < full.mark_bytes_read,
        "{} vs {}",
        fm.mark_bytes_read,
        full.mark_bytes_read
    );
    assert_eq!(fm.reclaimed, full.reclaimed);
    drop((fm, full));
    let r = repo.gc(&focus_opts).unwrap();
    assert!(r.reclaimed_containers > 0);
    assert_only_live_chunks(&repo);
    for (i, (a, b2)) in ids.iter().enumerate() {
        if i != 3 {
            restore(&repo, *a).unwrap();
        }
        restore(&repo, *b2).unwrap();
    }
    // Forgetting the base of source 3's chunks moves them to its second
    // version; forgetting that then frees them all.
    repo.forget(&[ids[3].1]).unwrap();
    let r = repo.gc(&focus_opts).unwrap();
    assert!(r.reclaimed_containers > 0);
    assert_only_live_chunks(&repo);
}

/// FGC's graph records interleaved groups (the many-files workload ingests
/// its files in groups): a member that deduplicates against an earlier
/// member of its group gets the edge to it, so forgetting that earlier
/// member keeps the shared chunks. The focused mark uses the recorded
/// graph (no rebuild) and judges as the full mark does.
#[test]
fn focused_mark_trusts_the_graph_of_interleaved_groups() {
    let b = mem();
    init_small(b.clone(), true);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    repo.rebuild_refgraph(0).unwrap();
    let tr = |names: &[&str]| {
        tessera_core::ingest::GroupInput::Trace(
            names
                .iter()
                .map(|n| (HashAlgo::Blake3.hash(n.as_bytes()), 1024))
                .collect(),
        )
    };
    let opts = |n: &str| BackupOptions::new(n, SourceKind::Trace);
    // Dealt round-robin (s1 b1 c1 | a1 s1 s2 | a2 s2): A is the base of
    // s1 and a2, C of s2; B deduplicates against A and C, members of its
    // own group, D against group one.
    let one = repo
        .backup_interleaved(vec![
            (opts("A"), tr(&["s1", "a1", "a2"])),
            (opts("B"), tr(&["b1", "s1", "s2"])),
            (opts("C"), tr(&["c1", "s2"])),
        ])
        .unwrap();
    let two = repo
        .backup_interleaved(vec![(opts("D"), tr(&["d1", "a2"]))])
        .unwrap();
    let a = one[0].backup.id;
    repo.forget(&[a]).unwrap();
    let stats = assert_focused_agrees(&repo);
    assert!(!stats.rebuilt, "the interleaved groups kept the graph");
    // B (s1) and D (a2) are A's correlative backups; C is not.
    assert_eq!(stats.correlative_backups, 2);
    assert_eq!(stats.dead_data_chunks, 1, "only a1 dies");
    repo.gc(&focused()).unwrap();
    assert_only_live_chunks(&repo);
    for id in [one[1].backup.id, one[2].backup.id, two[0].backup.id] {
        restore(&repo, id).unwrap();
    }
}

/// Many small backups share each recipe container (an interleaved group
/// publishes its members' recipes together): a focus of a tenth of them
/// and their correlative backups touches every recipe container. The
/// focused mark walks its focus in recipe-container order, deleted and
/// correlative backups in one pass, so it reads no more recipe bytes than
/// the full mark (before: each pass in backup order, 1.6–1.8× the full
/// mark's reads on `fgc-files`); its estimate, in containers, says the
/// focus covers every recipe container, so with the fallback on and the
/// entries it visits below half the full mark's, it still runs focused.
#[test]
fn focused_mark_reads_no_more_than_the_full_mark_when_small_backups_share_containers() {
    let b = mem();
    init_small(b.clone(), true);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    repo.rebuild_refgraph(0).unwrap();
    let opts = |n: String| BackupOptions::new(&n, SourceKind::Trace);
    let mut ids = Vec::new();
    // More groups than the recipe reader keeps containers (16).
    for group in 0..40 {
        let members = (0..10)
            .map(|i| {
                let n = group * 10 + i;
                // Unique chunks; every third file also holds one of the
                // file before it (an edge in the graph).
                let mut names: Vec<String> = (0..6).map(|c| format!("f{n}-{c}")).collect();
                if n % 3 == 1 {
                    names.push(format!("f{}-0", n - 1));
                }
                let trace = names
                    .iter()
                    .map(|c| (HashAlgo::Blake3.hash(c.as_bytes()), 1024))
                    .collect();
                (
                    opts(format!("file{n}")),
                    tessera_core::ingest::GroupInput::Trace(trace),
                )
            })
            .collect();
        for r in repo.backup_interleaved(members).unwrap() {
            ids.push(r.backup.id);
        }
    }
    let forgotten: Vec<BackupId> = ids.iter().copied().step_by(10).collect();
    repo.forget(&forgotten).unwrap();
    let full = repo.plan_gc(&GcOptions::default()).unwrap();
    let forced = repo.plan_gc(&focused()).unwrap();
    let default = repo
        .plan_gc(&GcOptions {
            mark: MarkSpec::Focused,
            ..Default::default()
        })
        .unwrap();
    assert_same_verdicts_on_forgotten(&repo, &full.mark, &forced.mark);
    assert!(
        forced.mark.memory_bytes < full.mark.memory_bytes,
        "memory: focused {} vs full {}",
        forced.mark.memory_bytes,
        full.mark.memory_bytes
    );
    assert!(
        forced.mark_bytes_read <= full.mark_bytes_read,
        "recipe bytes read: focused {} vs full {}",
        forced.mark_bytes_read,
        full.mark_bytes_read
    );
    let queries = |p: &tessera_core::gc::GcPlan| p.report().chunk_queries;
    assert!(
        queries(&forced) < queries(&full),
        "{} vs {}",
        queries(&forced),
        queries(&full)
    );
    let r = default.report();
    assert_eq!(r.mark_ran, "focused", "{:?}", r.focus);
    assert_eq!(
        r.focus.focus_estimate_bytes, r.focus.full_estimate_bytes,
        "the focus touches every recipe container"
    );
    assert!(r.focus.focus_estimate_entry_bytes * 2 < r.focus.full_estimate_entry_bytes);
    assert_eq!(default.mark_bytes_read, forced.mark_bytes_read);
    assert_eq!(default.reclaimed, full.reclaimed);
    drop((full, forced, default));
    repo.gc(&focused()).unwrap();
    assert_only_live_chunks(&repo);
    for id in ids.iter().filter(|i| !forgotten.contains(i)) {
        restore(&repo, *id).unwrap();
    }
}

/// The focused mark never costs more than the full mark: with ten
/// sources of two versions each, forgetting one version runs the focused
/// mark (fewer recipe bytes read and less memory than the full mark);
/// forgetting most first versions makes the focus (the deleted backups and
/// their correlative second versions) cover most of what the full mark
/// reads, so the full mark runs and the report says so. Both reclaim
/// exactly what the full mark does.
#[test]
fn focused_mark_falls_back_to_the_full_mark_when_its_focus_covers_most() {
    let b = mem();
    let (mut repo, ids, mut data) = ten_sources_recording(&b, 300);
    let focus_opts = GcOptions {
        mark: MarkSpec::Focused,
        ..Default::default()
    };
    // A small focus: one first version.
    repo.forget(&[ids[0].0]).unwrap();
    let fm = repo.plan_gc(&focus_opts).unwrap();
    let full = repo.plan_gc(&GcOptions::default()).unwrap();
    let r = fm.report();
    assert_eq!(
        (r.mark.as_str(), r.mark_ran.as_str()),
        ("focused", "focused")
    );
    assert!(!r.focus.fell_back);
    assert!(
        r.focus.focus_estimate_bytes * 2 < r.focus.full_estimate_bytes,
        "{:?}",
        r.focus
    );
    assert_eq!(r.focus.correlative_backups, 1);
    assert!(r.focus.base_map_bytes > 0 && r.focus.liveness_array_bytes > 0);
    assert!(
        fm.mark_bytes_read < full.mark_bytes_read,
        "recipe bytes read: {} vs {}",
        fm.mark_bytes_read,
        full.mark_bytes_read
    );
    assert!(
        fm.mark.memory_bytes < full.mark.memory_bytes,
        "memory: {} vs {}",
        fm.mark.memory_bytes,
        full.mark.memory_bytes
    );
    assert_eq!(fm.reclaimed, full.reclaimed);
    drop((fm, full));
    let r = repo.gc(&focus_opts).unwrap();
    assert_eq!(r.mark_ran, "focused");
    assert_only_live_chunks(&repo);
    data.remove(&ids[0].0);

    // A focus covering most: eight more first versions.
    let forgotten: Vec<BackupId> = ids[1..9].iter().map(|p| p.0).collect();
    repo.forget(&forgotten).unwrap();
    let fm = repo.plan_gc(&focus_opts).unwrap();
    let full = repo.plan_gc(&GcOptions::default()).unwrap();
    let r = fm.report();
    assert_eq!(
        (r.mark.as_str(), r.mark_ran.as_str()),
        ("focused", "logical")
    );
    assert!(r.focus.fell_back);
    assert!(
        r.focus.focus_estimate_entry_bytes * 2 >= r.focus.full_estimate_entry_bytes
            || r.focus.focus_estimate_bytes > r.focus.full_estimate_bytes,
        "{:?}",
        r.focus
    );
    assert_eq!(
        fm.mark_bytes_read, full.mark_bytes_read,
        "the full mark ran"
    );
    assert_eq!(fm.reclaimed, full.reclaimed);
    drop((fm, full));
    let r = repo.gc(&focus_opts).unwrap();
    assert_eq!(r.mark_ran, "logical");
    assert!(r.reclaimed_containers > 0);
    assert_only_live_chunks(&repo);
    for id in &forgotten {
        data.remove(id);
    }
    for (id, v) in &data {
        assert_eq!(&restore(&repo, *id).unwrap(), v);
    }
    // The graph still describes the repository: a later focused GC (it
    // treats the vertices the full mark left as deleted, so their retained
    // leaves stay in its focus, and here it falls back again) is exact.
    repo.forget(&[ids[9].0]).unwrap();
    let r = repo.gc(&focus_opts).unwrap();
    assert!(r.reclaimed_containers > 0);
    assert_only_live_chunks(&repo);
    data.remove(&ids[9].0);
    for (id, v) in &data {
        assert_eq!(&restore(&repo, *id).unwrap(), v);
    }
}

/// The focused mark is per chunk copy. SMR's worked example
/// (`smr-rewriting.md` Fig. 6, as in `rewrite.rs`): the second backup
/// stores copy 1 of F and G, the third copy 1 of O and P. The graph is
/// rebuilt from those recipes (rewriting backups record none); a fourth
/// backup, recorded without rewriting, reads the newest copies. Each
/// deletion is then judged copy by copy as the full mark judges it: a copy
/// only the deleted backup read is dead although another copy of its
/// fingerprint lives.
#[test]
fn focused_mark_judges_each_chunk_copy() {
    use common::{fp, open_new};
    const CHUNK: u32 = 1000;
    let letters = |repo: &mut Writer, s: &str, rewrite: RewriteSpec| {
        let opts = BackupOptions {
            rewrite,
            ..BackupOptions::new(s, SourceKind::Trace)
        };
        repo.backup_trace(&opts, s.chars().map(|c| Ok((fp(c), CHUNK))))
            .unwrap()
            .backup
            .id
    };
    let b = mem();
    let mut repo = open_new(b.clone(), ChunkerConfig::default(), 5 * CHUNK, true);
    repo.rebuild_refgraph(0).unwrap();
    let smr = RewriteSpec::Smr { level: 2 };
    let r1 = letters(&mut repo, "ABCDEFGHIJKLM", smr);
    let r2 = letters(&mut repo, "ABCDEFGNOPKLM", smr);
    assert!(
        tessera_core::fgc::RefGraphState::of(repo.manifest())
            .unwrap()
            .is_none(),
        "a rewriting backup drops the graph"
    );
    let r3 = letters(&mut repo, "ABCFGHIJOPQRS", smr);
    for c in ['F', 'G', 'O', 'P'] {
        assert_eq!(repo.index().unwrap().copy_list(&fp(c)).len(), 2, "{c}");
    }
    repo.rebuild_refgraph(0).unwrap();
    let r4 = letters(&mut repo, "FGNOXYZ", RewriteSpec::None);
    assert!(
        tessera_core::fgc::RefGraphState::of(repo.manifest())
            .unwrap()
            .is_some(),
        "recorded"
    );
    let reads = |repo: &Writer, id: BackupId, c: char| {
        let b = repo.manifest().backup(id).unwrap().clone();
        let homes = repo.chunk_homes(&b).unwrap();
        homes.iter().find(|(e, _)| e.fp == fp(c)).unwrap().0.copy
    };
    assert_eq!((reads(&repo, r4, 'F'), reads(&repo, r4, 'O')), (1, 1));
    assert_eq!(reads(&repo, r3, 'F'), 0);

    // Forgetting the second backup: copy 0 of O and P (its own, in IV) is
    // dead — the third and fourth read copy 1 — while copy 1 of F and G
    // (also in IV) lives on in the fourth.
    repo.forget(&[r2]).unwrap();
    let stats = assert_focused_agrees(&repo);
    assert_eq!(
        (stats.correlative_backups, stats.dead_data_chunks),
        (1, 2),
        "the fourth backup walked; O and P copy 0 dead"
    );
    let fm = repo.plan_gc(&focused()).unwrap();
    assert!(!fm.mark.is_valid(&fp('O'), 0) && fm.mark.is_valid(&fp('O'), 1));
    assert!(fm.mark.is_valid(&fp('F'), 0) && fm.mark.is_valid(&fp('F'), 1));
    drop(fm);
    repo.gc(&focused()).unwrap();
    assert_only_live_chunks(&repo);

    // Then the first and the fourth: copy 1 of F and G is dead (the third
    // reads copy 0), and so are the fourth's own X Y Z.
    repo.forget(&[r1, r4]).unwrap();
    let stats = assert_focused_agrees(&repo);
    assert!(!stats.rebuilt);
    repo.gc(&focused()).unwrap();
    assert_only_live_chunks(&repo);
    assert_eq!(repo.index().unwrap().copy_list(&fp('F')).len(), 1);
    assert_eq!(reads(&repo, r3, 'F'), 0);
    repo.close().unwrap();
    let repo = Repository::open(b).unwrap();
    let c = repo.check(&Default::default()).unwrap();
    assert!(c.ok(), "{:?}", c.problems);
    assert!(tessera_core::fgc::RefGraphState::of(repo.manifest())
        .unwrap()
        .is_some());
}

/// A stored chunk that PGC+'s copy phase made the home of two copies is
/// dead only when both are. SMR's example again: the second backup stores
/// copy 1 of F and G in IV; after the third is forgotten, a PGC+ GC keeps
/// IV's copies and redirects the first backup's copy 0 of F and G there.
/// Forgetting the second then kills copy 1 but not the stored chunk the
/// first backup reads: IV keeps two live chunks, and the first backup
/// keeps its F and G.
#[test]
fn focused_mark_keeps_a_chunk_two_copies_share() {
    use common::{fp, open_new};
    use tessera_core::gc::mark::Live;
    const CHUNK: u32 = 1000;
    let letters = |repo: &mut Writer, s: &str| {
        let opts = BackupOptions {
            rewrite: RewriteSpec::Smr { level: 2 },
            ..BackupOptions::new(s, SourceKind::Trace)
        };
        repo.backup_trace(&opts, s.chars().map(|c| Ok((fp(c), CHUNK))))
            .unwrap()
            .backup
            .id
    };
    let b = mem();
    let mut repo = open_new(b.clone(), ChunkerConfig::default(), 5 * CHUNK, true);
    let r1 = letters(&mut repo, "ABCDEFGHIJKLM");
    let r2 = letters(&mut repo, "ABCDEFGNOPKLM");
    let iv = repo
        .index()
        .unwrap()
        .get(ChunkKind::Data, &fp('N'))
        .unwrap();
    let r3 = letters(&mut repo, "ABCFGHIJOPQRS");
    repo.forget(&[r3]).unwrap();
    repo.gc(&GcOptions {
        mark: MarkSpec::PhysicalPlus,
        ..Default::default()
    })
    .unwrap();
    // Both copies of F now read one stored chunk (IV's, wherever PGC+
    // put it).
    let f: Vec<_> = repo.index().unwrap().copy_list(&fp('F')).iter().collect();
    let home = f[1].1;
    assert_eq!(f, vec![(0, home), (1, home)], "copy 0 redirected");
    assert!(home >= iv);
    let at_home = repo
        .manifest()
        .containers
        .iter()
        .find(|c| c.id == home)
        .unwrap()
        .chunks;

    repo.forget(&[r2]).unwrap();
    let stats = assert_focused_agrees(&repo);
    assert!(stats.rebuilt, "SMR backups record no graph");
    let fm = repo.plan_gc(&focused()).unwrap();
    assert!(!fm.mark.is_valid(&fp('F'), 1) && fm.mark.is_valid(&fp('F'), 0));
    let dead = at_home as u64 - 2;
    let full = repo.plan_gc(&GcOptions::default()).unwrap();
    assert_eq!(full.mark.live.as_ref().unwrap()[&home].chunks, 2);
    assert_eq!(
        fm.mark.live.as_ref().unwrap()[&home],
        Live {
            chunks: 2,
            bytes: 2 * CHUNK as u64
        },
        "F and G stay live where IV's chunks went ({dead} dead there)"
    );
    drop(full);
    drop(fm);
    let r = repo.gc(&focused()).unwrap();
    assert_eq!(r.moved_chunks, 2, "F and G move");
    // (II still holds the F and G that PGC+ redirected away from:
    // garbage from before the deletion, left for a full mark.)
    let first = repo.manifest().backup(r1).unwrap().clone();
    assert_eq!(repo.chunk_homes(&first).unwrap().len(), 13);
    let c = repo.check(&Default::default()).unwrap();
    assert!(c.ok(), "{:?}", c.problems);
}

/// The MFDedup layout keeps no reference graph (it has no mark-and-sweep
/// GC to focus): rebuilding one is refused by name, a focused GC meets the
/// layout's GC refusal, and backups there record nothing.
#[test]
fn the_reference_graph_is_refused_on_the_mfdedup_layout() {
    use tessera_core::layout::LayoutKind;
    let b = mem();
    Repository::init_layout(
        b.clone(),
        &InitOptions {
            hash: HashAlgo::Blake3,
            chunker: ChunkerConfig::default(),
            container_size: 64 * 1024,
            trace: false,
            ..Default::default()
        },
        LayoutKind::Mfdedup,
    )
    .unwrap();
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let e = repo.rebuild_refgraph(0).unwrap_err().to_string();
    assert!(
        e.contains("reference graph") && e.contains("mfdedup"),
        "{e}"
    );
    let data = bytes(7, 100_000);
    let id = backup(&mut repo, "m", &data).unwrap();
    assert!(tessera_core::fgc::RefGraphState::of(repo.manifest())
        .unwrap()
        .is_none());
    let e = repo.plan_gc(&focused()).err().unwrap().to_string();
    assert!(e.contains("mfdedup"), "{e}");
    assert_eq!(restore(&repo, id).unwrap(), data);
    let refgraph_objects = list_all(&*b)
        .unwrap()
        .iter()
        .filter(|k| k.kind() == Some(KeyKind::RefGraph))
        .count();
    assert_eq!(refgraph_objects, 0);
}

/// In an encrypted repository the graph's segments are sealed like every
/// whole object (nothing of them readable in the store), are recorded
/// from keyed fingerprints, and the focused mark still judges as the full
/// mark does.
#[test]
fn reference_graph_segments_are_sealed() {
    use tessera_core::{KdfParams, Password, SealOptions};
    let b = mem();
    let opts = InitOptions {
        hash: HashAlgo::Blake3,
        chunker: ChunkerConfig::Fastcdc {
            min: 256,
            avg: 1024,
            max: 4096,
        },
        container_size: 16 * 1024,
        trace: false,
        ..Default::default()
    };
    let pw = || Password::new("fgc");
    let seal = SealOptions {
        compression: Default::default(),
        encryption: Some((pw(), KdfParams::INSECURE_FAST)),
        ..Default::default()
    };
    Repository::init_sealed(b.clone(), &opts, &seal).unwrap();
    let mut repo = Repository::open_writer_with(b.clone(), "t", &|| Ok(pw())).unwrap();
    repo.rebuild_refgraph(0).unwrap();
    let v1 = bytes(31, 60_000);
    let v2 = mutate(&v1, 32);
    let v3 = mutate(&v2, 33);
    let ids: Vec<_> = [&v1, &v2, &v3]
        .iter()
        .map(|v| backup(&mut repo, "s", v).unwrap())
        .collect();
    let segments = tessera_core::fgc::RefGraphState::of(repo.manifest())
        .unwrap()
        .unwrap()
        .segments;
    assert!(segments.len() > 1, "one segment per backup");
    for key in &segments {
        let raw = b.get(key).unwrap();
        assert_eq!(raw[0], 1, "{key}: sealed mode");
        assert!(!raw.windows(8).any(|w| w == b"TSRAREFG"), "{key}");
    }
    repo.forget(&[ids[0]]).unwrap();
    let stats = assert_focused_agrees(&repo);
    assert!(!stats.rebuilt, "the sealed segments were read back");
    assert!(stats.correlative_backups >= 1 && stats.dead_data_chunks > 0);
    repo.gc(&focused()).unwrap();
    repo.close().unwrap();
    let repo = Repository::open_with(b, &|| Ok(pw())).unwrap();
    assert_eq!(restore(&repo, ids[1]).unwrap(), v2);
    assert_eq!(restore(&repo, ids[2]).unwrap(), v3);
}

/// After a GC with full selection: no copy the given (deleted) backups
/// named is still stored or indexed unless a retained backup names it, or
/// (an alias) its container also holds a live copy of the chunk: such an
/// entry is kept, as a backup beside the GC may have read it.
fn assert_no_dead_copy_of(repo: &Repository, deleted: &HashSet<(Fingerprint, u16)>) {
    let (data, _) = referenced(repo);
    let index = repo.index().unwrap();
    for e in index.entries() {
        if e.kind == ChunkKind::Data && deleted.contains(&(e.fp, e.copy)) {
            let alias = index
                .copy_list(&e.fp)
                .in_container(e.container)
                .any(|n| n != e.copy && data.contains(&(e.fp, n)));
            assert!(
                alias || data.contains(&(e.fp, e.copy)),
                "dead copy {e:?} indexed"
            );
        }
    }
    for c in &repo.manifest().containers {
        if c.kind != ChunkKind::Data {
            continue;
        }
        for m in &repo.store().read(c.id).unwrap().meta {
            let copies: Vec<u16> = repo
                .index()
                .unwrap()
                .copy_list(&m.fp)
                .in_container(c.id)
                .collect();
            let dead = copies.iter().all(|n| !data.contains(&(m.fp, *n)));
            let deleted_here = copies.iter().any(|n| deleted.contains(&(m.fp, *n)));
            // Indexed somewhere: a copy GC merged into another one may
            // still lie here, unnamed, until a full mark selects this
            // container (copies_merged_by_gc_leave_garbage_the_next_full_gc_reclaims).
            assert!(
                !repo.index().unwrap().copy_list(&m.fp).is_empty(),
                "container {} holds unindexed {:?}",
                c.id,
                m.fp
            );
            assert!(
                !(dead && deleted_here),
                "container {} holds dead {:?}",
                c.id,
                m.fp
            );
        }
    }
}

/// The ownership a plan gives GCCDF's sweep, over containers `ids`:
/// the RRT entries and the clusters, each chunk kept only if `keep` says
/// its copy is live (and its copies filtered likewise), empty clusters
/// dropped.
#[allow(clippy::type_complexity)]
fn ownership_of(
    repo: &Repository,
    plan: &tessera_core::gc::GcPlan,
    ids: &[ContainerId],
    keep: &dyn Fn(&Fingerprint, u16) -> bool,
) -> (
    Vec<(ContainerId, Vec<BackupId>)>,
    Vec<Vec<Vec<(Fingerprint, Vec<u16>)>>>,
) {
    let rrt = ids
        .iter()
        .map(|c| (*c, plan.mark.rrt.get(c).cloned().unwrap_or_default()))
        .collect();
    let clusters = tessera_core::gc::gccdf::clusters(
        repo,
        &plan.mark,
        ids,
        plan.options.segment_containers,
        plan.options.split_threshold_for(repo),
    )
    .unwrap()
    .into_iter()
    .map(|seg| {
        seg.into_iter()
            .map(|leaf| {
                leaf.into_iter()
                    .filter_map(|(fp, copies)| {
                        let copies: Vec<u16> =
                            copies.into_iter().filter(|&n| keep(&fp, n)).collect();
                        (!copies.is_empty()).then_some((fp, copies))
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|l| !l.is_empty())
            .collect()
    })
    .collect();
    (rrt, clusters)
}

/// Plan a full and a focused GC with `strategy` (exact tables): the
/// focused mark judges the deleted backups' copies as the full mark does;
/// under GCCDF, for the containers the focused plan sweeps, both give the
/// same RRT, and the same ownership clusters of the chunks both find live.
/// Where the focused plan also caches no chunk the full mark finds dead
/// (no garbage from before the deletions there), the clusters are equal
/// as they come. Returns the focused plan's statistics.
fn assert_focused_ownership_agrees(
    repo: &Repository,
    strategy: GcStrategy,
    segment: usize,
    split: usize,
) -> tessera_core::gc::mark::FocusStats {
    let opts = |mark| GcOptions {
        strategy,
        mark,
        segment_containers: segment,
        split_threshold: split,
        ownership_fp_rate: 0.0,
        dry_run: true,
        focus_fallback: false,
        ..Default::default()
    };
    let full = repo.plan_gc(&opts(MarkSpec::Logical)).unwrap();
    let fm = repo.plan_gc(&opts(MarkSpec::Focused)).unwrap();
    assert_same_verdicts_on_forgotten(repo, &full.mark, &fm.mark);
    let stats = fm.mark.fgc.clone().unwrap();
    if strategy != GcStrategy::Gccdf {
        return stats;
    }
    let ids = &fm.selection.copy;
    let live = |fp: &Fingerprint, n: u16| full.mark.is_valid(fp, n);
    let (frrt, fclusters) = ownership_of(repo, &full, ids, &live);
    let (mrrt, mclusters) = ownership_of(repo, &fm, ids, &live);
    assert_eq!(mrrt, frrt, "RRT of the swept containers");
    assert_eq!(mclusters, fclusters, "clusters of live chunks");
    let (_, raw) = ownership_of(repo, &fm, ids, &|_, _| true);
    if raw == mclusters {
        assert_eq!(
            ownership_of(repo, &full, ids, &|_, _| true).1,
            raw,
            "clusters"
        );
    }
    stats
}

/// Focused mark with GCCDF's sweep: many sources sharing chunks across
/// sources, a GC that packs chunks of many backups into shared containers,
/// then a few deletions. The focused mark walks only part of the
/// repository, yet gives GCCDF the same RRT and ownership clusters for the
/// swept containers as the full mark, including owners that are not
/// correlative backups (chunks the deleted backups never referenced, in
/// containers an earlier GC packed); then the GC keeps every retained
/// backup byte for byte and the graph stays right for the next one.
#[test]
fn focused_gccdf_clusters_match_full_mark() {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    repo.rebuild_refgraph(0).unwrap();
    let mut model: BTreeMap<BackupId, Vec<u8>> = BTreeMap::new();
    let mut last: Vec<Vec<u8>> = (0..8u64).map(|s| bytes(500 + s, 40_000)).collect();
    let mut ids: Vec<Vec<BackupId>> = vec![Vec::new(); 8];
    for round in 0..4u64 {
        for s in 0..8usize {
            let mut data = mutate(&last[s], round * 8 + s as u64);
            // Cross-source sharing: a piece of the next source.
            let o = &last[(s + 1) % 8];
            let from = (round as usize * 3_000) % (o.len() - 8_000);
            data.extend_from_slice(&o[from..from + 8_000]);
            let id = backup(&mut repo, "s", &data).unwrap();
            ids[s].push(id);
            model.insert(id, data.clone());
            last[s] = data;
        }
        if round == 1 {
            // A first GC packs live chunks of many backups together.
            for s in [0, 4] {
                repo.forget(&[ids[s][0]]).unwrap();
                model.remove(&ids[s][0]);
            }
            repo.gc(&GcOptions {
                strategy: GcStrategy::Gccdf,
                mark: MarkSpec::Focused,
                focus_fallback: false,
                split_threshold: 1,
                ..Default::default()
            })
            .unwrap();
        }
    }
    for s in [2, 5] {
        repo.forget(&[ids[s][1]]).unwrap();
        model.remove(&ids[s][1]);
    }
    let stats = assert_focused_ownership_agrees(&repo, GcStrategy::Gccdf, 4, 1);
    assert!(stats.skipped_backups > 0, "{stats:?}");
    assert!(
        stats.owner_backups > 0,
        "owners beyond the correlative backups: {stats:?}"
    );
    let opts = GcOptions {
        strategy: GcStrategy::Gccdf,
        mark: MarkSpec::Focused,
        segment_containers: 4,
        split_threshold: 1,
        ..Default::default()
    };
    let fm = repo.plan_gc(&opts).unwrap();
    assert!(!fm.selection.copy.is_empty());
    let clusters =
        tessera_core::gc::gccdf::clusters(&repo, &fm.mark, &fm.selection.copy, 4, 1).unwrap();
    assert!(clusters.iter().any(|seg| seg.len() > 2), "ownership splits");
    drop(fm);
    let r = repo.gc(&opts).unwrap();
    assert!(r.reclaimed_containers > 0);
    assert_only_live_chunks(&repo);
    for (id, data) in &model {
        assert_eq!(&restore(&repo, *id).unwrap(), data);
    }
    // The updated graph serves the next focused GCCDF GC as well.
    for s in [1, 6] {
        repo.forget(&[ids[s][2]]).unwrap();
        model.remove(&ids[s][2]);
    }
    assert_focused_ownership_agrees(&repo, GcStrategy::Gccdf, 4, 1);
    repo.gc(&opts).unwrap();
    assert_only_live_chunks(&repo);
    for (id, data) in &model {
        assert_eq!(&restore(&repo, *id).unwrap(), data);
    }
}

/// A copy of a repository's objects (locks and online-GC records left
/// out), to try a deletion on without touching the original.
fn copy_repository(b: &Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    let to = mem();
    for key in list_all(&**b).unwrap() {
        if matches!(
            key.kind(),
            Some(KeyKind::Lock | KeyKind::SharedLock | KeyKind::Gc)
        ) {
            continue;
        }
        to.put(&key, &b.get(&key).unwrap()).unwrap();
    }
    to
}

/// The reference graph a merged publish produced is one the focused mark
/// can trust: on a copy of the repository, forgetting any one retained
/// backup, the focused mark (on the recorded graph, not a rebuilt one)
/// judges every copy of the forgotten backup as the full mark does.
fn assert_graph_serves_every_deletion(b: &Arc<dyn ObjectStore>) {
    let ids: Vec<BackupId> = Repository::open(b.clone())
        .unwrap()
        .backups()
        .iter()
        .map(|e| e.id)
        .collect();
    for id in ids {
        let copy = copy_repository(b);
        let mut w = Repository::open_writer(copy, "t").unwrap();
        assert!(
            tessera_core::fgc::RefGraphState::of(w.manifest())
                .unwrap()
                .is_some(),
            "the graph was dropped"
        );
        w.forget(&[id]).unwrap();
        let stats = assert_focused_agrees(&w);
        assert!(!stats.rebuilt, "backup {id}: graph rebuilt");
    }
}

/// Two writers commit at once (each publish merges with the other's
/// generation, with renumbering), and a focused GC commits while a backup
/// deduplicating against the chunks it finds dead commits (online GC): the
/// reference graph is merged, not dropped, every single deletion is then
/// judged by the focused mark exactly as by the full mark, and focused GCs
/// lose nothing.
#[test]
fn merged_publishes_keep_a_reference_graph_the_focused_mark_can_trust() {
    let b: Arc<dyn ObjectStore> = mem();
    init_small(b.clone(), false);
    let open = || Repository::open_writer(b.clone(), "t").unwrap();
    let mut setup = open();
    setup.rebuild_refgraph(0).unwrap();
    drop(setup);
    let mut model: BTreeMap<BackupId, Vec<u8>> = BTreeMap::new();
    let s1 = bytes(71, 50_000);
    let s2 = bytes(72, 50_000);
    let mut shared = s1[..20_000].to_vec();
    shared.extend_from_slice(&s2[10_000..30_000]);
    // Writers A and B open on one generation; B's publishes merge.
    let mut a = open();
    let mut wb = open();
    for (w, data) in [(0, &s1), (1, &s2), (1, &shared)] {
        let w = if w == 0 { &mut a } else { &mut wb };
        let id = backup(w, "s", data).unwrap();
        model.insert(id, data.clone());
    }
    // A, still on its generation, deduplicates against its own chunks
    // and stores again what B stored meanwhile.
    let a2 = {
        let mut d = mutate(&s1, 1);
        d.extend_from_slice(&s2[..15_000]);
        d
    };
    let id = backup(&mut a, "s", &a2).unwrap();
    model.insert(id, a2.clone());
    assert!(
        tessera_core::fgc::RefGraphState::of(Repository::open(b.clone()).unwrap().manifest())
            .unwrap()
            .is_some(),
        "merged publishes keep the graph"
    );
    assert_graph_serves_every_deletion(&b);

    // Online focused GC: mark, then a backup re-referencing the dead
    // chunks commits, then cutoff and commit (the GC's publish merges).
    let first = *model.keys().next().unwrap();
    a.forget(&[first]).unwrap();
    let gone = model.remove(&first).unwrap();
    let opts = GcOptions {
        mark: MarkSpec::Focused,
        strategy: GcStrategy::Gccdf,
        ..Default::default()
    };
    let mut run = a.gc_begin(&opts).unwrap();
    let again = {
        let mut d = mutate(&gone, 9);
        d.extend_from_slice(&a2[..10_000]);
        d
    };
    let id = backup(&mut wb, "s", &again).unwrap();
    model.insert(id, again);
    a.gc_cutoff(&mut run).unwrap();
    a.gc_finish(run).unwrap();
    drop((a, wb));
    {
        let r = Repository::open(b.clone()).unwrap();
        assert!(
            tessera_core::fgc::RefGraphState::of(r.manifest())
                .unwrap()
                .is_some(),
            "the GC's merge keeps it"
        );
        for (id, data) in &model {
            assert_eq!(&restore(&r, *id).unwrap(), data, "backup {id}");
        }
    }
    assert_graph_serves_every_deletion(&b);

    // And focused GCs on the merged graph lose nothing.
    let mut w = open();
    for _ in 0..2 {
        let id = *model.keys().next().unwrap();
        w.forget(&[id]).unwrap();
        model.remove(&id);
        let stats = assert_focused_agrees(&w);
        assert!(!stats.rebuilt);
        w.gc(&opts).unwrap();
        for (id, data) in &model {
            assert_eq!(&restore(&w, *id).unwrap(), data, "backup {id}");
        }
    }
    let c = w.check(&Default::default()).unwrap();
    assert!(c.ok(), "{:?}", c.problems);
}

/// Every chunk in a data container has an index entry there.
fn assert_all_indexed(repo: &Repository, when: &str) {
    for c in &repo.manifest().containers {
        if c.kind != ChunkKind::Data {
            continue;
        }
        for m in &repo.store().read(c.id).unwrap().meta {
            let copies: Vec<u16> = repo
                .index()
                .unwrap()
                .copy_list(&m.fp)
                .in_container(c.id)
                .collect();
            assert!(
                !copies.is_empty(),
                "{when}: container {} holds unindexed {:?} (index: {:?})",
                c.id,
                m.fp,
                repo.index().unwrap().copy_list(&m.fp)
            );
        }
    }
}

/// Found by `gc_agrees_with_reference_model` (it asserted too much): a GC
/// that keeps one copy of a chunk NED stored twice points the older copy's
/// readers at the kept one even when the older copy's container is not
/// selected (here: a physical+ mark at liveness threshold 0, which selects
/// nothing). The older bytes are then garbage the index no longer names —
/// backups still restore — and the next GC that selects their container
/// (a full mark at threshold 1) reclaims them. A focused mark does not: it
/// judges only the chunks of deleted backups.
#[test]
fn copies_merged_by_gc_leave_garbage_the_next_full_gc_reclaims() {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b.clone(), "t").unwrap();
    let v1 = bytes(
        344311967785698731,
        20_000 + (344311967785698731u64 % 60_000) as usize,
    );
    let v2 = mutate(&v1, 2518235965922553924);
    let v0 = bytes(0, 20_000);
    let versions = [&v1, &v2, &v0, &v0, &v0];
    let mut ids = Vec::new();
    for (i, data) in versions.iter().enumerate() {
        let opts = BackupOptions {
            rewrite: if i == 1 {
                RewriteSpec::Ned { threshold: 0.6 }
            } else {
                RewriteSpec::None
            },
            segment_bytes: Some(8 * 1024),
            ..BackupOptions::new("m", SourceKind::Stream)
        };
        ids.push(
            repo.backup_reader(&opts, &mut &data[..], &mut |_| {})
                .unwrap()
                .backup
                .id,
        );
    }
    assert_all_indexed(&repo, "after the backups");
    let restores_all = |repo: &Repository| {
        for (id, data) in ids.iter().zip(versions) {
            assert_eq!(&restore(repo, *id).unwrap(), data);
        }
    };
    // Stored chunks whose fingerprint is indexed, but not in their container.
    let stale = |repo: &Repository| {
        let mut n = 0;
        for c in repo
            .manifest()
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Data)
        {
            for m in &repo.store().read(c.id).unwrap().meta {
                let list = repo.index().unwrap().copy_list(&m.fp);
                assert!(
                    !list.is_empty(),
                    "container {} holds {:?}, indexed nowhere",
                    c.id,
                    m.fp
                );
                n += usize::from(list.in_container(c.id).next().is_none());
            }
        }
        n
    };
    let gc = |repo: &mut tessera_core::Writer, mark, liveness_threshold| {
        repo.gc(&GcOptions {
            mark,
            liveness_threshold,
            segment_containers: 1,
            split_threshold: 1,
            ..Default::default()
        })
        .unwrap();
    };
    gc(&mut repo, MarkSpec::PhysicalPlus, 0.0);
    restores_all(&repo);
    let left = stale(&repo);
    assert!(left > 0, "the older copies were merged into the kept ones");
    gc(&mut repo, MarkSpec::Focused, 1.0);
    restores_all(&repo);
    assert_eq!(
        stale(&repo),
        left,
        "no deleted backup: the focused mark judges nothing"
    );
    gc(&mut repo, MarkSpec::Logical, 1.0);
    restores_all(&repo);
    assert_all_indexed(&repo, "after a full GC");
}

/// Loading the recorded graph is part of the focused mark's cost. The
/// process that recorded it keeps it and marks focused; a fresh process
/// would read every graph segment first, which here costs more than half of
/// what the full mark reads, so it runs the full mark without loading the
/// graph and reads exactly what the full mark reads (the issue's
/// `/usr/share/doc` case: focused read 2.9× the full mark).
#[test]
fn a_fresh_process_counts_loading_the_graph_and_never_reads_more_than_the_full_mark() {
    let b = mem();
    let (mut repo, ids, _) = ten_sources_recording(&b, 500);
    repo.forget(&[ids[2].0]).unwrap();
    let focus_opts = GcOptions {
        mark: MarkSpec::Focused,
        ..Default::default()
    };
    // The recording process keeps the graph: the focus is small.
    let kept = repo.plan_gc(&focus_opts).unwrap().report();
    assert_eq!(kept.mark_ran, "focused");
    repo.close().unwrap();

    let repo = Repository::open_writer(b, "t").unwrap();
    let fm = repo.plan_gc(&focus_opts).unwrap();
    let full = repo.plan_gc(&GcOptions::default()).unwrap();
    let r = fm.report();
    assert_eq!(r.mark_ran, "logical", "{:?}", r.focus);
    assert!(r.focus.fell_back);
    assert!(
        r.focus.focus_estimate_bytes > kept.focus.focus_estimate_bytes,
        "the graph's segments are counted: {:?} vs {:?}",
        r.focus,
        kept.focus
    );
    assert_eq!(fm.mark_bytes_read, full.mark_bytes_read);
    assert_eq!(fm.reclaimed, full.reclaimed);
}

/// Where no graph is recorded, a focused mark must build it from every
/// recipe: a dry run keeps nothing of it, so it runs the full mark (and
/// reads what the full mark reads); a real focused GC builds the graph and
/// keeps it for the next one.
#[test]
fn a_dry_run_without_a_recorded_graph_runs_the_full_mark() {
    let b = mem();
    init_small(b.clone(), false);
    let mut repo = Repository::open_writer(b, "t").unwrap();
    let mut ids = Vec::new();
    for s in 0..6u64 {
        ids.push(backup(&mut repo, "s", &bytes(700 + s, 40_000)).unwrap());
    }
    repo.forget(&[ids[1]]).unwrap();
    assert!(tessera_core::fgc::RefGraphState::of(repo.manifest())
        .unwrap()
        .is_none());
    let dry = GcOptions {
        mark: MarkSpec::Focused,
        dry_run: true,
        ..Default::default()
    };
    let fm = repo.plan_gc(&dry).unwrap();
    let full = repo
        .plan_gc(&GcOptions {
            dry_run: true,
            ..Default::default()
        })
        .unwrap();
    let r = fm.report();
    assert_eq!(r.mark_ran, "logical");
    assert!(r.focus.fell_back);
    assert_eq!(fm.mark_bytes_read, full.mark_bytes_read);
    assert_eq!(fm.reclaimed, full.reclaimed);
    drop((fm, full));
    let g = repo
        .gc(&GcOptions {
            mark: MarkSpec::Focused,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(g.mark_ran, "focused", "a real GC builds the graph");
    assert!(tessera_core::fgc::RefGraphState::of(repo.manifest())
        .unwrap()
        .is_some());
    assert_only_live_chunks(&repo);
}
