//! The MFDedup layout: the paper's worked examples (Figs. 2/5, 8, 10),
//! data-mode round trips on several chains, a property test against a
//! reference model, and crash sweeps of backup + arrange and of forget.

use crate::common::{bytes, fp, mem, mutate};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tessera_core::backend::{FaultyStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::layout::LayoutKind;
use tessera_core::{
    BackupId, BackupOptions, Fingerprint, HashAlgo, InitOptions, Repository, RestoreOptions, Writer,
};

const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// The size of a letter's chunk in the trace scenarios (distinct per letter,
/// so byte counts name the letters).
fn size(l: char) -> u32 {
    1000 + (l as u32 - 'A' as u32)
}

fn init_mf(backend: Arc<dyn ObjectStore>, trace: bool, chunker: ChunkerConfig) {
    Repository::init_layout(
        backend,
        &InitOptions {
            hash: HashAlgo::Blake3,
            chunker,
            container_size: 64 * 1024,
            trace,
            ..Default::default()
        },
        LayoutKind::Mfdedup,
    )
    .unwrap();
}

fn trace_repo() -> (Arc<tessera_core::backend::MemoryStore>, Writer) {
    let b = mem();
    init_mf(b.clone(), true, ChunkerConfig::default());
    let w = Repository::open_writer(b.clone(), "test").unwrap();
    (b, w)
}

fn opts(chain: &str, arrange: bool, kind: SourceKind) -> BackupOptions {
    let mut o = BackupOptions::new(chain, kind);
    o.chain = Some(chain.to_string());
    o.arrange = arrange;
    o
}

/// Back up the letters of `content` (a trace) on `chain`.
fn trace_backup(w: &mut Writer, chain: &str, content: &str, arrange: bool) -> BackupId {
    let chunks: Vec<_> = content.chars().map(|l| Ok((fp(l), size(l)))).collect();
    w.backup_trace(&opts(chain, arrange, SourceKind::Trace), chunks)
        .unwrap()
        .backup
        .id
}

/// The letters stored in each category of `chain`, by place:
/// "V<m>:(n,m)" for archived, "A:(n,m)" active, "P:(n,n)" pending.
fn layout(repo: &Repository, chain: &str) -> BTreeMap<String, String> {
    let names: BTreeMap<Fingerprint, char> = LETTERS.chars().map(|l| (fp(l), l)).collect();
    let state = tessera_core::layout::mfdedup::MfState::of(repo.manifest()).unwrap();
    let c = state.chain(chain).unwrap();
    let letters = |cat: &tessera_core::layout::mfdedup::Category| -> String {
        let mut out = BTreeSet::new();
        for &p in &cat.parts {
            let (_, meta) = repo.store().read_meta(p).unwrap();
            out.extend(meta.iter().map(|m| names[&m.fp]));
        }
        out.into_iter().collect()
    };
    let mut out = BTreeMap::new();
    for v in &c.volumes {
        for cat in &v.categories {
            assert_eq!(cat.end, v.version);
            out.insert(
                format!("V{}:({},{})", v.version, cat.start, cat.end),
                letters(cat),
            );
        }
    }
    for cat in &c.active {
        out.insert(format!("A:({},{})", cat.start, cat.end), letters(cat));
    }
    for cat in &c.pending {
        out.insert(format!("P:({},{})", cat.start, cat.end), letters(cat));
    }
    out
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn restore_ok(repo: &Repository, id: BackupId) -> tessera_core::RestoreReport {
    let b = repo.manifest().backup(id).unwrap().clone();
    repo.restore_to(&b, &mut Vec::new(), &RestoreOptions::default(), &mut |_| {})
        .unwrap()
}

/// Fig. 8: the AVAR workflow on three versions, step by step
/// (① dedup V1, ② dedup V2, ③ arrange V1, ④ dedup V3, ⑤ arrange V2).
#[test]
fn fig8_avar_workflow_step_by_step() {
    let (_b, mut w) = trace_repo();
    // ① V1 = A B C D: its unique chunks are the new category Cat.(1,1).
    trace_backup(&mut w, "s", "ABCD", false);
    assert_eq!(layout(&w, "s"), map(&[("P:(1,1)", "ABCD")]));
    w.arrange(None).unwrap(); // the first version needs no split
    assert_eq!(layout(&w, "s"), map(&[("A:(1,1)", "ABCD")]));
    // ② V2 = A B E F (C D gone; E F new; A repeated inside V2).
    trace_backup(&mut w, "s", "ABEFA", false);
    assert_eq!(
        layout(&w, "s"),
        map(&[("A:(1,1)", "ABCD"), ("P:(2,2)", "EF")])
    );
    // ③ arranging V1 against V2's table: C D archived in Volume 1.
    w.arrange(None).unwrap();
    assert_eq!(
        layout(&w, "s"),
        map(&[("V1:(1,1)", "CD"), ("A:(1,2)", "AB"), ("A:(2,2)", "EF")])
    );
    // ④ V3 = A E G, ⑤ arranging V2: B → Cat.(1,2), F → Cat.(2,2) in Volume 2.
    trace_backup(&mut w, "s", "AEG", false);
    w.arrange(None).unwrap();
    let fig5 = map(&[
        ("V1:(1,1)", "CD"),
        ("V2:(1,2)", "B"),
        ("V2:(2,2)", "F"),
        ("A:(1,3)", "A"),
        ("A:(2,3)", "E"),
        ("A:(3,3)", "G"),
    ]);
    assert_eq!(layout(&w, "s"), fig5);
    // Fig. 2/5: the same three versions arranged after each backup give
    // the same flattened layout (n(n+1)/2 = 6 categories at most).
    let (_b2, mut w2) = trace_repo();
    for v in ["ABCD", "ABEFA", "AEG"] {
        trace_backup(&mut w2, "s", v, true);
    }
    assert_eq!(layout(&w2, "s"), fig5);
    // Restoring V1 reads Volume 1 and the prefix Cat.(1,·) of each later
    // place: CD, B, A — exactly its bytes, no read amplification.
    let ids: Vec<_> = w2.backups().iter().map(|b| b.id).collect();
    let r = restore_ok(&w2, ids[0]);
    let m = r.mfdedup.clone().unwrap();
    assert_eq!(r.data_container_bytes_read, r.restored_bytes);
    assert_eq!((m.categories, m.volumes, m.seeks), (3, 2, 3));
    // V2 has A twice: its chunks are read once (read amplification < 1).
    let r = restore_ok(&w2, ids[1]);
    assert!(r.read_amplification < 1.0, "{r:?}");
    let m = r.mfdedup.unwrap();
    assert_eq!((m.categories, m.volumes), (4, 1));
}

/// NDF stores a skip duplicate again: B (in V1, not in V2, again in V3).
#[test]
fn skip_duplicates_are_stored_again() {
    let (_b, mut w) = trace_repo();
    for v in ["AB", "A", "AB"] {
        trace_backup(&mut w, "s", v, true);
    }
    assert_eq!(
        layout(&w, "s"),
        map(&[("V1:(1,1)", "B"), ("A:(1,3)", "A"), ("A:(3,3)", "B")])
    );
    // Another chain never deduplicates against this one.
    trace_backup(&mut w, "t", "AB", true);
    assert_eq!(layout(&w, "t"), map(&[("A:(1,1)", "AB")]));
    for b in w.backups().to_vec() {
        restore_ok(&w, b.id);
    }
}

fn fig10_repo() -> (
    Arc<tessera_core::backend::MemoryStore>,
    Writer,
    Vec<BackupId>,
) {
    let (b, mut w) = trace_repo();
    let ids: Vec<_> = ["ABCD", "ABEF", "AEGH", "AGI"]
        .iter()
        .map(|v| trace_backup(&mut w, "s", v, true))
        .collect();
    assert_eq!(
        layout(&w, "s"),
        map(&[
            ("V1:(1,1)", "CD"),
            ("V2:(1,2)", "B"),
            ("V2:(2,2)", "F"),
            ("V3:(2,3)", "E"),
            ("V3:(3,3)", "H"),
            ("A:(1,4)", "A"),
            ("A:(3,4)", "G"),
            ("A:(4,4)", "I"),
        ])
    );
    (b, w, ids)
}

fn stored(w: &Repository) -> u64 {
    w.stats().chains.iter().map(|c| c.stored_bytes).sum()
}

/// Fig. 10: four versions; forgetting V1 deletes Volume 1 whole.
#[test]
fn fig10_forgetting_the_oldest_deletes_its_volume() {
    let (b, mut w, ids) = fig10_repo();
    let before = stored(&w);
    let space = w.forget_space(&ids[..1]).unwrap();
    assert_eq!(space.data_bytes, (size('C') + size('D')) as u64);
    assert_eq!(space.volumes_deleted, 1);
    let (_, freed) = w.forget_freeing(&ids[..1]).unwrap();
    assert_eq!(freed.data_bytes, space.data_bytes);
    assert_eq!(before - stored(&w), space.data_bytes);
    assert!(!layout(&w, "s").contains_key("V1:(1,1)"));
    for id in &ids[1..] {
        restore_ok(&w, *id);
    }
    // Nothing unlisted is left behind, and a reopened repository agrees.
    drop(w);
    tessera_core::lock::break_lock(&*b).unwrap();
    let w = Repository::open_writer(b, "test").unwrap();
    assert!(w.leftovers().objects.is_empty(), "{:?}", w.leftovers());
    for id in &ids[1..] {
        restore_ok(&w, *id);
    }
}

/// Fig. 10 / §4.6: forgetting V2 and V3 (V1 and V4 retained) frees exactly
/// Cat.(2,2), Cat.(2,3) and Cat.(3,3), the sizes the headers list.
#[test]
fn fig10_forgetting_middle_versions_frees_the_inside_categories() {
    let (_b, mut w, ids) = fig10_repo();
    let space = w.forget_space(&ids[1..3]).unwrap();
    let cats: BTreeSet<_> = space.categories.iter().map(|c| (c.start, c.end)).collect();
    assert_eq!(cats, BTreeSet::from([(2, 2), (2, 3), (3, 3)]));
    assert_eq!(space.data_bytes, (size('F') + size('E') + size('H')) as u64);
    // Volume 3 held only Cat.(2,3) and Cat.(3,3): it goes whole.
    assert_eq!(space.volumes_deleted, 1);
    let before = stored(&w);
    w.forget(&ids[1..3]).unwrap();
    assert_eq!(before - stored(&w), space.data_bytes);
    assert_eq!(
        layout(&w, "s"),
        map(&[
            ("V1:(1,1)", "CD"),
            ("V2:(1,2)", "B"),
            ("A:(1,4)", "A"),
            ("A:(3,4)", "G"),
            ("A:(4,4)", "I"),
        ])
    );
    restore_ok(&w, ids[0]);
    restore_ok(&w, ids[3]);
}

/// Forgetting an arranged version of a chain that is behind frees its
/// archived categories without arranging (arranging may stay behind);
/// forgetting an unarranged one arranges first.
#[test]
fn forget_leaves_arranging_behind_when_it_can() {
    let (_b, mut w) = trace_repo();
    let ids: Vec<_> = ["ABCD", "ABEF", "AEGH"]
        .iter()
        .map(|v| trace_backup(&mut w, "s", v, true))
        .collect();
    let late = trace_backup(&mut w, "s", "AGI", false);
    let space = w.forget_space(&ids[..1]).unwrap();
    assert!(space.unarranged.is_empty());
    assert_eq!(space.data_bytes, (size('C') + size('D')) as u64);
    w.forget(&ids[..1]).unwrap();
    assert_eq!(w.stats().chains[0].behind, 1);
    restore_ok(&w, late);
    // The newest arranged version goes: the chain is arranged first.
    assert_eq!(w.forget_space(&ids[2..3]).unwrap().unarranged, ["s"]);
    w.forget(&ids[2..3]).unwrap();
    assert_eq!(w.stats().chains[0].behind, 0);
    restore_ok(&w, ids[1]);
    restore_ok(&w, late);
}

/// Forgetting the newest version frees its active categories; the next
/// backup stores those chunks again instead of deduplicating against them.
#[test]
fn forgetting_the_newest_version_then_backing_up() {
    let (_b, mut w) = trace_repo();
    let a = trace_backup(&mut w, "s", "AB", true);
    let b = trace_backup(&mut w, "s", "ABC", true);
    let space = w.forget_space(&[b]).unwrap();
    assert_eq!(space.data_bytes, size('C') as u64);
    w.forget(&[b]).unwrap();
    assert_eq!(layout(&w, "s"), map(&[("A:(1,2)", "AB")]));
    let c = trace_backup(&mut w, "s", "ABC", true);
    assert_eq!(layout(&w, "s"), map(&[("A:(1,3)", "AB"), ("A:(3,3)", "C")]));
    restore_ok(&w, a);
    restore_ok(&w, c);
    w.forget(&[a, c]).unwrap();
    assert!(layout(&w, "s").is_empty());
    assert_eq!(stored(&w), 0);
}

fn data_repo() -> (Arc<tessera_core::backend::MemoryStore>, Writer) {
    let b = mem();
    init_mf(
        b.clone(),
        false,
        ChunkerConfig::Fastcdc {
            min: 512,
            avg: 2048,
            max: 8192,
        },
    );
    let w = Repository::open_writer(b.clone(), "test").unwrap();
    (b, w)
}

fn data_backup(w: &mut Writer, chain: &str, data: &[u8], arrange: bool) -> BackupId {
    w.backup_reader(
        &opts(chain, arrange, SourceKind::Stream),
        &mut &data[..],
        &mut |_| {},
    )
    .unwrap()
    .backup
    .id
}

fn restored(repo: &Repository, id: BackupId) -> Vec<u8> {
    let b = repo.manifest().backup(id).unwrap().clone();
    let mut out = Vec::new();
    let r = repo
        .restore_to(&b, &mut out, &RestoreOptions::default(), &mut |_| {})
        .unwrap();
    assert!(r.mfdedup.unwrap().buffered);
    let mut f = tempfile::tempfile().unwrap();
    repo.restore_to_file(&b, &mut f, &RestoreOptions::default(), &mut |_| {})
        .unwrap();
    let mut direct = Vec::new();
    use std::io::{Read, Seek};
    f.rewind().unwrap();
    f.read_to_end(&mut direct).unwrap();
    assert_eq!(direct, out);
    out
}

/// Data mode: two chains, arranging skipped and caught up, forgets of the
/// oldest and a middle version; every retained version restores exactly,
/// and check finds nothing wrong.
#[test]
fn data_mode_round_trips_on_two_chains() {
    let (b, mut w) = data_repo();
    let mut versions: Vec<(BackupId, Vec<u8>)> = Vec::new();
    let (mut x, mut y) = (bytes(1, 120_000), bytes(2, 90_000));
    for i in 0..6u64 {
        x = mutate(&x, 10 + i, 3000);
        y = mutate(&y, 20 + i, 2000);
        versions.push((data_backup(&mut w, "x", &x, i % 3 != 1), x.clone()));
        versions.push((data_backup(&mut w, "y", &y, true), y.clone()));
    }
    // Arranging fell behind on x: restores still work (reading more).
    for (id, data) in &versions {
        assert_eq!(&restored(&w, *id), data);
    }
    w.arrange(None).unwrap();
    assert!(w.stats().chains.iter().all(|c| c.behind == 0));
    let x_ids: Vec<_> = versions.iter().step_by(2).map(|v| v.0).collect();
    w.forget(&[x_ids[0], x_ids[3]]).unwrap();
    versions.retain(|v| v.0 != x_ids[0] && v.0 != x_ids[3]);
    for (id, data) in &versions {
        assert_eq!(&restored(&w, *id), data);
    }
    let report = w.check(&Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // Reopened: the recipe index is rebuilt from the recipe containers.
    drop(w);
    tessera_core::lock::break_lock(&*b).unwrap();
    let r = Repository::open(b.clone()).unwrap();
    for (id, data) in &versions {
        assert_eq!(&restored(&r, *id), data);
        // Salvage reads in order, finding chunks through the layout's `Locator`.
        let entry = r.manifest().backup(*id).unwrap().clone();
        let mut out = Vec::new();
        r.restore_damaged_to(&entry, &mut out, &mut |_| {}).unwrap();
        assert_eq!(&out, data);
    }
}

// ---- property test against a reference model ----

/// The reference model of one chain: which physical chunk (fingerprint,
/// first version of its run) each version references, run by run.
#[derive(Default, Clone)]
struct ModelChain {
    /// version → (block id → run start) of the chunks it references.
    versions: BTreeMap<u32, BTreeMap<u8, u32>>,
    /// Runs: (block, start) → end (the newest version referencing it).
    runs: BTreeMap<(u8, u32), u32>,
    /// The previous version's chunks still stored: block → run start.
    prev: BTreeMap<u8, u32>,
    next: u32,
    retained: BTreeSet<u32>,
}

impl ModelChain {
    fn backup(&mut self, blocks: &[u8]) -> u32 {
        self.next += 1;
        let v = self.next;
        let mut refs = BTreeMap::new();
        for &b in blocks {
            let start = match refs.get(&b) {
                Some(&s) => s,
                None => match self.prev.get(&b) {
                    Some(&s) => s,
                    None => v,
                },
            };
            refs.insert(b, start);
            self.runs.insert((b, start), v);
        }
        self.prev = refs.clone();
        self.versions.insert(v, refs);
        self.retained.insert(v);
        v
    }
    fn live(&self, start: u32, end: u32) -> bool {
        self.retained.range(start..=end).next().is_some()
    }
    /// Forget version v: the runs with no retained version are freed (and
    /// leave the previous-version table).
    fn forget(&mut self, v: u32) -> u64 {
        self.retained.remove(&v);
        let dead: Vec<_> = self
            .runs
            .iter()
            .filter(|(&(_, s), &e)| !self.live(s, e))
            .map(|(&k, _)| k)
            .collect();
        let mut freed = 0;
        for k in dead {
            self.runs.remove(&k);
            freed += block_len(k.0) as u64;
            self.prev.retain(|b, s| (*b, *s) != k);
        }
        freed
    }
    fn stored(&self) -> u64 {
        self.runs.keys().map(|k| block_len(k.0) as u64).sum()
    }
}

const BLOCK: usize = 1024;

fn block_len(_b: u8) -> usize {
    BLOCK
}

fn block(b: u8) -> Vec<u8> {
    bytes(500 + b as u64, BLOCK)
}

#[derive(Clone, Debug)]
enum Op {
    Backup {
        chain: u8,
        blocks: Vec<u8>,
        arrange: bool,
    },
    Arrange,
    Forget {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..2, prop::collection::vec(0u8..24, 1..14), any::<bool>())
            .prop_map(|(chain, blocks, arrange)| Op::Backup { chain, blocks, arrange }),
        1 => Just(Op::Arrange),
        2 => (0usize..100).prop_map(|pick| Op::Forget { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random backups on two chains (fixed-size chunks, so the model knows
    /// every fingerprint), arranges (some skipped), forgets of any retained
    /// version: restores are byte-exact, no live chunk is lost, the stored
    /// bytes match the model's physical chunks, and forget frees exactly
    /// what its dry run said.
    #[test]
    fn layout_matches_reference_model(ops in prop::collection::vec(op(), 1..24)) {
        let backend = mem();
        init_mf(backend.clone(), false, ChunkerConfig::Fixed { size: BLOCK as u32 });
        let mut w = Repository::open_writer(backend.clone(), "test").unwrap();
        let mut model = [ModelChain::default(), ModelChain::default()];
        let mut live: Vec<(BackupId, u8, u32, Vec<u8>)> = Vec::new();
        for op in ops {
            match op {
                Op::Backup { chain, blocks, arrange } => {
                    let data: Vec<u8> = blocks.iter().flat_map(|&b| block(b)).collect();
                    let name = format!("c{chain}");
                    let id = data_backup(&mut w, &name, &data, arrange);
                    let v = model[chain as usize].backup(&blocks);
                    live.push((id, chain, v, data));
                }
                Op::Arrange => {
                    w.arrange(None).unwrap();
                }
                Op::Forget { pick } => {
                    if live.is_empty() {
                        continue;
                    }
                    let (id, chain, v, _) = live.remove(pick % live.len());
                    // Dry-run answers are exact unless forget must arrange
                    // first (then it says so); half the time arranging is
                    // left behind.
                    if pick % 2 == 0 {
                        w.arrange(None).unwrap();
                    }
                    let predicted = w.forget_space(&[id]).unwrap();
                    let before: u64 = w.stats().chains.iter().map(|c| c.stored_bytes).sum();
                    let (_, freed) = w.forget_freeing(&[id]).unwrap();
                    let after: u64 = w.stats().chains.iter().map(|c| c.stored_bytes).sum();
                    if predicted.unarranged.is_empty() {
                        prop_assert_eq!(predicted.data_bytes, freed.data_bytes);
                    }
                    prop_assert_eq!(before - after, freed.data_bytes);
                    prop_assert_eq!(model[chain as usize].forget(v), freed.data_bytes);
                }
            }
            for (c, m) in model.iter().enumerate() {
                let stored = w
                    .stats()
                    .chains
                    .iter()
                    .find(|s| s.name == format!("c{c}"))
                    .map_or(0, |s| s.stored_bytes);
                prop_assert_eq!(stored, m.stored());
            }
        }
        for (id, _, _, data) in &live {
            prop_assert_eq!(&restored(&w, *id), data);
        }
        drop(w);
        tessera_core::lock::break_lock(&*backend).unwrap();
        let w = Repository::open_writer(backend, "test").unwrap();
        prop_assert!(w.leftovers().objects.is_empty(), "{:?}", w.leftovers());
    }
}

// ---- crash sweeps ----

/// Fail the backend at every mutating operation of `op` (and lose what was
/// not synced): the reopened repository holds backups `before` or `after`
/// (ids), each restoring byte for byte (backup n holds version n − 1),
/// also once arranging has caught up.
fn crash_sweep(
    op: impl Fn(&mut Writer, &[u8]) -> tessera_core::Result<()>,
    before: &[u64],
    after: &[u64],
) {
    let v: Vec<Vec<u8>> = (0..3u64)
        .scan(bytes(7, 60_000), |d, i| {
            *d = mutate(d, 30 + i, 2000);
            Some(d.clone())
        })
        .collect();
    let setup = || {
        let (b, mut w) = data_repo();
        data_backup(&mut w, "s", &v[0], true);
        data_backup(&mut w, "s", &v[1], false);
        w.close().unwrap();
        b
    };
    let inner = setup();
    let counting = Arc::new(FaultyStore::new(inner.clone(), None));
    let mut w = Repository::open_writer(counting.clone(), "test").unwrap();
    let base = counting.ops();
    op(&mut w, &v[2]).unwrap();
    w.close().unwrap();
    let total = counting.ops();
    assert!(total > base + 2);
    for n in (base + 1)..=total {
        for loss in [false, true] {
            let inner = setup();
            let failing = Arc::new(if loss {
                FaultyStore::with_lost_unsynced(inner.clone(), Some(n))
            } else {
                FaultyStore::new(inner.clone(), Some(n))
            });
            let result = Repository::open_writer(failing.clone(), "test").and_then(|mut w| {
                op(&mut w, &v[2])?;
                w.close()
            });
            assert!(
                failing.has_failed() || result.is_ok(),
                "fail_at {n}: {result:?}"
            );
            drop(result);
            tessera_core::lock::break_lock(&*inner).unwrap();
            let mut w = Repository::open_writer(inner.clone(), "test")
                .unwrap_or_else(|e| panic!("fail_at {n}: reopen failed: {e}"));
            let ids: Vec<u64> = w.backups().iter().map(|b| b.id.0).collect();
            assert!(
                ids == before || ids == after,
                "fail_at {n} loss {loss}: {ids:?}"
            );
            for round in ["as found", "after arranging"] {
                for b in w.backups().to_vec() {
                    let want = &v[(b.id.0 - 1) as usize];
                    assert_eq!(&restored(&w, b.id), want, "fail_at {n} loss {loss} {round}");
                }
                w.arrange(None).unwrap();
            }
            let report = w.check(&Default::default()).unwrap();
            assert!(
                report.problems.is_empty(),
                "fail_at {n}: {:?}",
                report.problems
            );
        }
    }
}

#[test]
fn crash_sweep_backup_and_arrange() {
    crash_sweep(
        |w, data| {
            w.backup_reader(
                &opts("s", true, SourceKind::Stream),
                &mut &data[..],
                &mut |_| {},
            )
            .map(|_| ())
        },
        &[1, 2],
        &[1, 2, 3],
    );
}

#[test]
fn crash_sweep_forget_oldest() {
    crash_sweep(|w, _| w.forget(&[BackupId(1)]).map(|_| ()), &[1, 2], &[2]);
}

/// The newest version: its chain is arranged first, its active categories
/// freed and its NDF table rewritten.
#[test]
fn crash_sweep_forget_newest() {
    crash_sweep(|w, _| w.forget(&[BackupId(2)]).map(|_| ()), &[1, 2], &[1]);
}

/// MFDedup places a version's chunks by the versions of its chain that
/// reference them, so a clone of another version's root is refused.
#[test]
fn mfdedup_refuses_a_fastcopy() {
    let (_b, mut w) = trace_repo();
    let id = trace_backup(&mut w, "c", "ABC", true);
    let err = w.clone_backup(id, None).unwrap_err().to_string();
    assert!(err.contains("cannot clone"), "{err}");
    assert_eq!(w.backups().len(), 1);
}
