//! Rewriting and garbage collection together: rewritten copies, forgets and
//! GCs of either strategy and any mark in any order keep every retained backup restorable
//! byte for byte, and `check` finds nothing wrong after each step.

use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use tessera_core::backend::{MemoryStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::check::{CheckOptions, ReadData};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::gc::{GcOptions, GcStrategy, MarkSpec};
use tessera_core::restore::CacheSpec;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{BackupId, ContainerId};
use tessera_core::{BackupOptions, Repository, RestoreOptions};

use crate::common;
use common::{bytes, open_new};

/// Version `v` of a stream: blocks of a shared pool, shuffled per version,
/// so later versions reference many old containers (fragmentation to fight).
fn version(v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..24u64 {
        let block = (i * 7 + v * 5) % 31;
        let seed = if (i + v).is_multiple_of(6) {
            1000 + v * 100 + i
        } else {
            block
        };
        out.extend_from_slice(&bytes(seed, 6000));
    }
    out
}

#[derive(Debug, Clone)]
enum Op {
    Backup(u64, RewriteSpec),
    Forget(usize),
    Gc(GcStrategy, f64, MarkSpec),
}

fn op() -> impl Strategy<Value = Op> {
    let spec = prop_oneof![
        Just(RewriteSpec::None),
        (1usize..4).prop_map(|level| RewriteSpec::Capping { level }),
        (1usize..4).prop_map(|level| RewriteSpec::Smr { level }),
        (1u32..10).prop_map(|t| RewriteSpec::Ned {
            threshold: t as f64 / 10.0
        }),
        Just(RewriteSpec::parse("har:0.5:1").unwrap()),
    ];
    prop_oneof![
        4 => (0u64..12, spec).prop_map(|(v, s)| Op::Backup(v, s)),
        2 => (0usize..8).prop_map(Op::Forget),
        2 => (prop_oneof![Just(GcStrategy::Naive), Just(GcStrategy::Gccdf)],
              prop_oneof![Just(1.0), Just(0.5)],
              prop_oneof![Just(MarkSpec::Logical), Just(MarkSpec::Physical), Just(MarkSpec::PhysicalPlus)])
            .prop_map(|(s, t, m)| Op::Gc(s, t, m)),
    ]
}

type Home = (tessera_core::Fingerprint, u16, ContainerId);

/// Each retained backup's chunks with the container its copy is read from.
fn homes_of(repo: &Repository) -> BTreeMap<BackupId, Vec<Home>> {
    repo.backups()
        .iter()
        .map(|b| {
            let h = repo.chunk_homes(b).unwrap();
            (
                b.id,
                h.into_iter().map(|(e, c)| (e.fp, e.copy, c)).collect(),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn rewrites_forgets_and_gcs_keep_every_backup(ops in proptest::collection::vec(op(), 1..14)) {
        let backend: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let mut repo = open_new(
            backend.clone(),
            ChunkerConfig::Fastcdc { min: 512, avg: 2048, max: 8192 },
            16 * 1024,
            false,
        );
        let mut model: BTreeMap<BackupId, u64> = BTreeMap::new();
        // Where each retained backup reads each chunk: (fingerprint, copy,
        // container) in stream order, as its own ingest chose.
        let mut homes: BTreeMap<BackupId, Vec<Home>> = BTreeMap::new();
        for op in ops {
            let first_produced = repo.manifest().next_container_id;
            let is_gc = matches!(op, Op::Gc(..));
            // PGC+ removes duplicates: a live older copy's readers may be
            // sent to the kept newer copy of the same chunk, wherever it is.
            let dedups = matches!(op, Op::Gc(GcStrategy::Naive, _, MarkSpec::PhysicalPlus));
            match op {
                Op::Backup(v, rewrite) => {
                    let opts = BackupOptions {
                        rewrite,
                        segment_bytes: Some(32 * 1024),
                        ..BackupOptions::new(format!("v{v}"), SourceKind::Stream)
                    };
                    let rep = repo.backup_reader(&opts, &mut &version(v)[..], &mut |_| {}).unwrap();
                    model.insert(rep.backup.id, v);
                }
                Op::Forget(i) => {
                    if let Some(&id) = model.keys().nth(i % model.len().max(1)) {
                        repo.forget(&[id]).unwrap();
                        model.remove(&id);
                    }
                }
                Op::Gc(strategy, liveness_threshold, mark) => {
                    repo.gc(&GcOptions { strategy, mark, liveness_threshold, segment_containers: 4, split_threshold: 3, ..GcOptions::default() }).unwrap();
                }
            }
            let report = repo.check(&CheckOptions { read_data: ReadData::All }).unwrap();
            prop_assert!(report.ok(), "{:?}", report.problems);
            // No backup is redirected to a copy another backup chose: a
            // backup leaves earlier ones reading what they read; a GC only
            // moves copies, into containers it produced (PGC+ excepted, as
            // said above; `check` and the restores verify its chunks).
            let live: HashSet<ContainerId> = repo.manifest().containers.iter().map(|c| c.id).collect();
            let now = homes_of(&repo);
            for (id, old) in &homes {
                let Some(new) = now.get(id) else { continue }; // forgotten
                prop_assert_eq!(new.len(), old.len());
                for (o, n) in old.iter().zip(new) {
                    prop_assert_eq!((o.0, o.1), (n.0, n.1), "recipes never change");
                    if dedups {
                        continue;
                    }
                    if is_gc && !live.contains(&o.2) {
                        prop_assert!(n.2 >= first_produced, "backup {} moved to {} not by this GC", id, n.2);
                    } else {
                        prop_assert_eq!(o.2, n.2, "backup {} redirected", id);
                    }
                }
            }
            homes = now;
        }
        repo.close().unwrap();
        let repo = Repository::open(backend).unwrap();
        prop_assert_eq!(repo.backups().iter().map(|b| b.id).collect::<Vec<_>>(), model.keys().copied().collect::<Vec<_>>());
        for (&id, &v) in &model {
            for cache in [CacheSpec::Lru(2), CacheSpec::Opt(2), CacheSpec::Faa(3)] {
                let entry = repo.resolve(&id.to_string()).unwrap().clone();
                let mut out = Vec::new();
                repo.restore_to(&entry, &mut out, &RestoreOptions { cache, ..Default::default() }, &mut |_| {}).unwrap();
                prop_assert!(out == version(v), "backup {} (v{}) under {}", id, v, cache);
            }
        }
    }
}
