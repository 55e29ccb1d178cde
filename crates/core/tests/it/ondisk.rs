//! The on-disk index (`init --index disk`) against the in-memory one as the
//! model: every query answers the same after any sequence of changes, and
//! the same backups, rewrites, forgets and GCs through both give identical
//! containers (hence recipes) and index segments, byte for byte.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use tessera_core::backend::{KeyKind, MemoryStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::check::{CheckOptions, ReadData};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::ChunkKind;
use tessera_core::gc::{GcOptions, GcStrategy, MarkSpec};
use tessera_core::index::disk::DiskConfig;
use tessera_core::index::{CopyNo, DataCursor, Index, IndexEntry, IndexKind};
use tessera_core::layout::LayoutKind;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{BackupOptions, ContainerId, Fingerprint, HashAlgo, InitOptions};
use tessera_core::{Repository, RestoreOptions, Writer};

use crate::common::bytes;

fn base() -> std::path::PathBuf {
    std::env::temp_dir().join("tessera-it-ondisk")
}

/// Tiny runs and cache: every path (flush, merge, Bloom rebuild, cache
/// eviction, list invalidation) runs within a few dozen operations.
const TINY: DiskConfig = DiskConfig {
    flush_at: 3,
    cache_containers: 2,
    background_merges: true,
};

fn fp(i: u8) -> Fingerprint {
    HashAlgo::Blake3.hash(&[i])
}

#[derive(Debug, Clone)]
enum IxOp {
    Insert(u8, CopyNo, u64, bool),
    Remove(u8, bool),
    RemoveCopy(u8, CopyNo),
    SetState(u8, Vec<(CopyNo, u64)>),
    Stream(Vec<u8>),
}

fn ix_op() -> impl Strategy<Value = IxOp> {
    prop_oneof![
        6 => (0u8..40, prop_oneof![4 => Just(0 as CopyNo), 1 => 1 as CopyNo..4], 0u64..12, any::<bool>())
            .prop_map(|(f, c, at, recipe)| IxOp::Insert(f, c, at, recipe)),
        1 => (0u8..40, any::<bool>()).prop_map(|(f, r)| IxOp::Remove(f, r)),
        1 => (0u8..40, 0 as CopyNo..4).prop_map(|(f, c)| IxOp::RemoveCopy(f, c)),
        1 => (0u8..40, proptest::collection::btree_map(0 as CopyNo..4, 0u64..12, 0..3))
            .prop_map(|(f, m)| IxOp::SetState(f, m.into_iter().collect())),
        2 => proptest::collection::vec(0u8..48, 1..30).prop_map(IxOp::Stream),
    ]
}

/// Every answer the index gives about fingerprints 0..48.
fn answers(ix: &Index) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..48 {
        let f = fp(i);
        out.push(format!(
            "{i}: data {:?} recipe {:?} list {:?} next {:?} newest {} copies {:?} c0..3 {:?} has {} {}",
            ix.get(ChunkKind::Data, &f),
            ix.get(ChunkKind::Recipe, &f),
            ix.copy_list(&f).iter().collect::<Vec<_>>(),
            ix.next_copy(&f),
            ix.newest_copy(&f),
            ix.copies(&f),
            (0..4).map(|c| ix.get_copy(ChunkKind::Data, &f, c)).collect::<Vec<_>>(),
            ix.contains(ChunkKind::Data, &f),
            ix.contains(ChunkKind::Recipe, &f),
        ));
    }
    let mut entries: Vec<IndexEntry> = ix.entries().collect();
    tessera_core::index::sort_entries(&mut entries);
    let mut fps: Vec<Fingerprint> = ix.data_fingerprints().collect();
    fps.sort();
    out.push(format!(
        "len {:?} extra {} first-only {} entries {:?} fps {:?}",
        ix.len(),
        ix.extra_copies(),
        ix.first_copies_only(),
        entries,
        fps
    ));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// The in-memory index is the model: the on-disk one answers every
    /// query the same after every operation.
    #[test]
    fn disk_index_answers_as_the_memory_index(ops in proptest::collection::vec(ix_op(), 1..80)) {
        let mut mem = Index::default();
        let mut disk = Index::on_disk(&base(), TINY).unwrap();
        prop_assert_eq!(disk.kind(), IndexKind::Disk);
        for op in ops {
            match op {
                IxOp::Insert(f, copy, at, recipe) => {
                    let e = IndexEntry {
                        fp: fp(f),
                        container: ContainerId(at),
                        kind: if recipe { ChunkKind::Recipe } else { ChunkKind::Data },
                        copy: if recipe { 0 } else { copy },
                    };
                    mem.insert(e).unwrap();
                    disk.insert(e).unwrap();
                }
                IxOp::Remove(f, recipe) => {
                    let k = if recipe { ChunkKind::Recipe } else { ChunkKind::Data };
                    mem.remove(k, &fp(f)).unwrap();
                    disk.remove(k, &fp(f)).unwrap();
                }
                IxOp::RemoveCopy(f, c) => {
                    mem.remove_copy(ChunkKind::Data, &fp(f), c).unwrap();
                    disk.remove_copy(ChunkKind::Data, &fp(f), c).unwrap();
                }
                IxOp::SetState(f, s) => {
                    let s: Vec<_> = s.into_iter().map(|(c, at)| (c, ContainerId(at))).collect();
                    mem.set_data_state(fp(f), s.clone()).unwrap();
                    disk.set_data_state(fp(f), s).unwrap();
                }
                IxOp::Stream(seq) => {
                    // A stream of lookups with cursors (the backup path).
                    let (mut cm, mut cd) = (DataCursor::default(), DataCursor::default());
                    for i in seq {
                        let (a, b) = (mem.contains_data_seq(&mut cm, &fp(i)), disk.contains_data_seq(&mut cd, &fp(i)));
                        prop_assert_eq!(a, b, "stream lookup of {}", i);
                    }
                }
            }
            prop_assert_eq!(answers(&mem), answers(&disk));
        }
    }
}

fn init(backend: Arc<dyn ObjectStore>, index: IndexKind, trace: bool) -> Writer {
    Repository::init_indexed(
        backend.clone(),
        &InitOptions {
            hash: HashAlgo::Blake3,
            chunker: ChunkerConfig::Fastcdc {
                min: 512,
                avg: 2048,
                max: 8192,
            },
            container_size: 16 * 1024,
            trace,
            ..Default::default()
        },
        LayoutKind::Containers,
        index,
    )
    .unwrap();
    let mut w = Repository::open_writer(backend, "test").unwrap();
    if index == IndexKind::Disk {
        w.tune_disk_index(TINY).unwrap();
    }
    w
}

/// Every container and index segment, by name.
fn objects(store: &dyn ObjectStore) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for kind in [KeyKind::Container, KeyKind::IndexSegment] {
        for k in store.list(kind).unwrap() {
            out.insert(k.name(), store.get(&k).unwrap());
        }
    }
    out
}

/// Version `v` of a stream: blocks of a shared pool, shuffled per version.
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
    Gc(GcStrategy, MarkSpec),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let spec = prop_oneof![
        Just(RewriteSpec::None),
        (1usize..4).prop_map(|level| RewriteSpec::Capping { level }),
        (1usize..4).prop_map(|level| RewriteSpec::Smr { level }),
        Just(RewriteSpec::parse("har:0.5:1").unwrap()),
    ];
    prop_oneof![
        4 => (0u64..12, spec).prop_map(|(v, s)| Op::Backup(v, s)),
        1 => (0usize..8).prop_map(Op::Forget),
        2 => (prop_oneof![Just(GcStrategy::Naive), Just(GcStrategy::Gccdf)],
              prop_oneof![Just(MarkSpec::Logical), Just(MarkSpec::Physical), Just(MarkSpec::PhysicalPlus)])
            .prop_map(|(s, m)| Op::Gc(s, m)),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Backups with rewriting (Capping, SMR, HAR: every live copy seen),
    /// forgets, GCs and reopens through both indexes leave byte-identical
    /// containers and index segments, and `check` passes on the disk one.
    #[test]
    fn same_operations_same_repository(ops in proptest::collection::vec(op(), 1..12)) {
        let (bm, bd): (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>) =
            (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
        let mut m = init(bm.clone(), IndexKind::Memory, false);
        let mut d = init(bd.clone(), IndexKind::Disk, false);
        let mut kept: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            for (w, is_disk) in [(&mut m, false), (&mut d, true)] {
                match &op {
                    Op::Backup(v, rewrite) => {
                        let opts = BackupOptions {
                            rewrite: *rewrite,
                            segment_bytes: Some(32 * 1024),
                            ..BackupOptions::new(format!("v{v}"), SourceKind::Stream)
                        };
                        let rep = w.backup_reader(&opts, &mut &version(*v)[..], &mut |_| {}).unwrap();
                        if is_disk {
                            kept.insert(rep.backup.id.0, *v);
                        }
                    }
                    Op::Forget(i) => {
                        let ids: Vec<_> = w.backups().iter().map(|b| b.id).collect();
                        if let Some(&id) = ids.get(i % ids.len().max(1)) {
                            w.forget(&[id]).unwrap();
                            if is_disk {
                                kept.remove(&id.0);
                            }
                        }
                    }
                    Op::Gc(strategy, mark) => {
                        w.gc(&GcOptions { strategy: *strategy, mark: *mark, segment_containers: 4, split_threshold: 3, ..GcOptions::default() }).unwrap();
                    }
                    Op::Reopen => {}
                }
            }
            if let Op::Reopen = op {
                m.close().unwrap();
                d.close().unwrap();
                m = Repository::open_writer(bm.clone(), "test").unwrap();
                d = Repository::open_writer(bd.clone(), "test").unwrap();
                d.tune_disk_index(TINY).unwrap();
            }
            prop_assert!(objects(&*bm) == objects(&*bd), "objects differ after {:?}", op);
            let mut em: Vec<IndexEntry> = m.index().unwrap().entries().collect();
            let mut ed: Vec<IndexEntry> = d.index().unwrap().entries().collect();
            tessera_core::index::sort_entries(&mut em);
            tessera_core::index::sort_entries(&mut ed);
            prop_assert_eq!(em, ed);
            let report = d.check(&CheckOptions { read_data: ReadData::All }).unwrap();
            prop_assert!(report.ok(), "{:?}", report.problems);
        }
        for b in d.backups().to_vec() {
            let mut out = Vec::new();
            d.restore_to(&b, &mut out, &RestoreOptions::default(), &mut |_| {}).unwrap();
            prop_assert!(out == version(kept[&b.id.0]));
        }
    }
}

/// A trace-mode version series (the benchmark's path: upstream recipes,
/// cursor lookups) gives identical objects through both indexes, and the
/// on-disk index answers most duplicates from its locality cache.
#[test]
fn trace_series_is_identical_and_hits_the_cache() {
    let (bm, bd): (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>) =
        (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
    let mut m = init(bm.clone(), IndexKind::Memory, true);
    let mut d = init(bd.clone(), IndexKind::Disk, true);
    d.tune_disk_index(DiskConfig {
        flush_at: 500,
        cache_containers: 8,
        ..DiskConfig::default()
    })
    .unwrap();
    let chunk = |i: u64| (HashAlgo::Blake3.hash(&i.to_le_bytes()), 2048u32);
    let mut live: Vec<u64> = (0..3000).collect();
    let mut next = 3000;
    for v in 0..6 {
        // 2 % of the chunks change per version.
        for (j, c) in live.iter_mut().enumerate() {
            if (j as u64 * 31 + v).is_multiple_of(50) {
                *c = next;
                next += 1;
            }
        }
        for w in [&mut m, &mut d] {
            let opts = BackupOptions::new(format!("s{v}"), SourceKind::Trace);
            w.backup_trace(&opts, live.iter().map(|&i| Ok(chunk(i))))
                .unwrap();
        }
    }
    assert!(objects(&*bm) == objects(&*bd));
    let counts = d.index().unwrap().disk_counts().unwrap();
    // Versions 1..5 look up ~14 100 duplicates. A container holds 8
    // chunks: one run probe loads its list, the other 7 hit at the cursor
    // or in the cache (7/8 = 12 300) — or in the overlay, when a
    // background flush had not yet been installed (timing decides how
    // many: none of them is a run probe).
    assert!(
        counts.cursor + counts.cache + counts.overlay > 12_000,
        "{counts:?} (most duplicates should hit the locality cache)"
    );
    assert!(counts.run_probes < 2_200, "{counts:?}");
    let report = d.check(&CheckOptions::default()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

/// The on-disk index's directory replaced by a regular file under an open
/// writer (as root a permission change would not stop the writes): the
/// next backup fails with one line naming the index file it could not
/// create, nothing panics, nothing is published, and a writer opened again
/// (with a new index directory) backs up and restores as before.
#[test]
fn a_backup_over_a_broken_disk_index_fails_naming_the_file() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let mut w = init(store.clone(), IndexKind::Disk, false);
    w.tune_disk_index(DiskConfig {
        background_merges: false,
        ..TINY
    })
    .unwrap();
    let opts = |v: u64| BackupOptions::new(format!("v{v}"), SourceKind::Stream);
    w.backup_reader(&opts(0), &mut &version(0)[..], &mut |_| {})
        .unwrap();
    let dir = w.index().unwrap().disk_dir().unwrap().to_path_buf();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    let err = w
        .backup_reader(&opts(1), &mut &version(1)[..], &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("on-disk index {}/", dir.display())),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    assert_eq!(w.backups().len(), 1);
    w.close().unwrap();
    std::fs::remove_file(&dir).unwrap();
    let mut w = Repository::open_writer(store, "test").unwrap();
    w.backup_reader(&opts(1), &mut &version(1)[..], &mut |_| {})
        .unwrap();
    for (b, v) in w.backups().to_vec().iter().zip([0, 1]) {
        let mut out = Vec::new();
        w.restore_to(b, &mut out, &RestoreOptions::default(), &mut |_| {})
            .unwrap();
        assert!(out == version(v));
    }
    let report = w.check(&CheckOptions::default()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
