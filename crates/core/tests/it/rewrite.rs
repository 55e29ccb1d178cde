//! Rewriting against fragmentation, end to end: the worked example of
//! `smr-rewriting.md` (Fig. 3 and Fig. 6), HAR history across reopen, and a
//! property test that every policy restores every backup byte for byte.

use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tessera_core::backend::{MemoryStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::{ChunkKind, ContainerId};
use tessera_core::index::CopyCensus;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::BackupId;
use tessera_core::{BackupOptions, BackupReport, Fingerprint, Repository, RestoreOptions, Writer};

use crate::common;
use common::{bytes, fp, init_blake3, open_new};

/// Fig. 3: every chunk is one letter of 1000 bytes, a container holds 5.
const CHUNK: u32 = 1000;

fn trace_repo() -> Writer {
    let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    open_new(b, ChunkerConfig::default(), 5 * CHUNK, true)
}

fn backup_letters(repo: &mut Writer, letters: &str, rewrite: RewriteSpec) -> BackupReport {
    // Versions of one source: one chain (HAR's history is per chain).
    let opts = BackupOptions {
        rewrite,
        chain: Some("letters".into()),
        ..BackupOptions::new(letters, SourceKind::Trace)
    };
    repo.backup_trace(&opts, letters.chars().map(|c| Ok((fp(c), CHUNK))))
        .unwrap()
}

fn containers_read(repo: &Repository, id: BackupId) -> u64 {
    let b = repo.manifest().backup(id).unwrap().clone();
    repo.restore_to(
        &b,
        &mut std::io::sink(),
        &RestoreOptions::default(),
        &mut |_| {},
    )
    .unwrap()
    .data_containers_read
}

/// The container of the newest copy of `letter` (what dedup references).
fn at(repo: &Repository, letter: char) -> ContainerId {
    repo.index()
        .unwrap()
        .get(ChunkKind::Data, &fp(letter))
        .unwrap()
}

/// The container backup `id` reads `letter` from (its own copy).
fn reads(repo: &Repository, id: BackupId, letter: char) -> ContainerId {
    let b = repo.manifest().backup(id).unwrap().clone();
    let homes = repo.chunk_homes(&b).unwrap();
    let (_, c) = homes.iter().find(|(e, _)| e.fp == fp(letter)).unwrap();
    *c
}

/// The distinct containers a backup reads, per backup.
fn read_sets(repo: &Repository) -> Vec<(BackupId, Vec<ContainerId>)> {
    repo.backups()
        .iter()
        .map(|b| {
            let mut cs: Vec<_> = repo
                .chunk_homes(b)
                .unwrap()
                .into_iter()
                .map(|(_, c)| c)
                .collect();
            cs.sort();
            cs.dedup();
            (b.id, cs)
        })
        .collect()
}

/// Stream 1 fills I = A–E, II = F–J, III = K–M. Stream 2 references I (5),
/// II (F G) and III (3) plus unique N O P: both schemes keep I and III and
/// rewrite F G next to N O P in IV. Stream 3 is A B C, F–J, O P and unique
/// Q R S.
/// Each backup keeps reading the containers its own ingest chose, whatever
/// later backups rewrite: checked after the third stream.
fn paper_example(level_spec: RewriteSpec) -> (Writer, [BackupReport; 3], [ContainerId; 4]) {
    let mut repo = trace_repo();
    let r1 = backup_letters(&mut repo, "ABCDEFGHIJKLM", level_spec);
    let (c1, c2, c3) = (at(&repo, 'A'), at(&repo, 'F'), at(&repo, 'K'));
    assert_eq!(at(&repo, 'E'), c1);
    assert_eq!(at(&repo, 'J'), c2);
    assert_ne!(c1, c2);
    let r2 = backup_letters(&mut repo, "ABCDEFGNOPKLM", level_spec);
    assert_eq!(
        (r2.rewritten_chunks, r2.new_chunks),
        (2, 5),
        "F G rewritten"
    );
    let c4 = at(&repo, 'N');
    assert_eq!(at(&repo, 'F'), c4, "newest copy of F is in IV");
    assert_eq!(at(&repo, 'P'), c4);
    // F and G now have a copy in II and one in IV (SMR paper, Fig. 4).
    let census = repo.index().unwrap().copy_census();
    assert_eq!((census.chunks, census.redundant_chunks), (16, 2));
    let before = read_sets(&repo);
    assert_eq!(containers_read(&repo, r1.backup.id), 3);
    assert_eq!(containers_read(&repo, r2.backup.id), 3, "I, III and IV");
    let r3 = backup_letters(&mut repo, "ABCFGHIJOPQRS", level_spec);
    // The first two backups read what they read before the third.
    assert_eq!(&read_sets(&repo)[..2], &before[..]);
    assert_eq!(reads(&repo, r1.backup.id, 'F'), c2);
    assert_eq!(reads(&repo, r2.backup.id, 'F'), c4);
    assert_eq!(containers_read(&repo, r1.backup.id), 3);
    assert_eq!(containers_read(&repo, r2.backup.id), 3);
    (repo, [r1, r2, r3], [c1, c2, c3, c4])
}

#[test]
fn paper_fig3_capping_selects_ii_and_iv() {
    let (repo, [_, _, r3], [i, ii, _, iv]) = paper_example(RewriteSpec::Capping { level: 2 });
    // 7 deduplicated (F G H I J against II, O P against IV); A B C rewritten.
    assert_eq!(r3.rewritten_chunks, 3);
    assert_eq!(r3.new_chunks, 6);
    assert_eq!(r3.stored_bytes, 6 * CHUNK as u64);
    assert_eq!(r3.backup.new_bytes, 6 * CHUNK as u64);
    let b3 = r3.backup.id;
    for c in ['A', 'B', 'C'] {
        assert_ne!(reads(&repo, b3, c), i, "{c} rewritten");
    }
    for c in ['F', 'G', 'H', 'I', 'J'] {
        assert_eq!(reads(&repo, b3, c), ii);
    }
    assert_eq!((reads(&repo, b3, 'O'), reads(&repo, b3, 'P')), (iv, iv));
    // Restoring the third stream reads II, IV, V and VI.
    assert_eq!(containers_read(&repo, r3.backup.id), 4);
    // A B C (I and V) and F G (II and IV) are stored twice each.
    assert_eq!(
        repo.index().unwrap().copy_census(),
        CopyCensus {
            chunks: 19,
            redundant_chunks: 5,
            extra_copies: 5
        }
    );
}

#[test]
fn paper_fig6_smr_selects_i_and_ii() {
    let (repo, [_, r2, r3], [i, ii, _, iv]) = paper_example(RewriteSpec::Smr { level: 2 });
    // 8 deduplicated (A B C against I, F–J against II); only O P rewritten.
    assert_eq!(r3.rewritten_chunks, 2);
    assert_eq!(r3.new_chunks, 5);
    let b3 = r3.backup.id;
    for c in ['A', 'B', 'C'] {
        assert_eq!(reads(&repo, b3, c), i);
    }
    for c in ['F', 'G', 'H', 'I', 'J'] {
        assert_eq!(reads(&repo, b3, c), ii, "{c} read from II, not IV");
    }
    // The second backup still reads its own copies of F and G, in IV.
    assert_eq!(reads(&repo, r2.backup.id, 'F'), iv);
    let v = reads(&repo, b3, 'O');
    let at3 = |c| reads(&repo, b3, c);
    assert!(v != iv && at3('P') == v && at3('Q') == v && at3('S') == v);
    // Restoring the third stream reads I, II and V.
    assert_eq!(containers_read(&repo, r3.backup.id), 3);
    // Only F G (II and IV) and O P (IV and V) are stored twice: fewer
    // redundant copies than Capping's five.
    assert_eq!(
        repo.index().unwrap().copy_census(),
        CopyCensus {
            chunks: 19,
            redundant_chunks: 4,
            extra_copies: 4
        }
    );
}

#[test]
fn naive_dedup_reads_more_containers_on_the_example() {
    let (repo, [_, r2, r3], _) = {
        let mut repo = trace_repo();
        let a = backup_letters(&mut repo, "ABCDEFGHIJKLM", RewriteSpec::None);
        let b = backup_letters(&mut repo, "ABCDEFGNOPKLM", RewriteSpec::None);
        let c = backup_letters(&mut repo, "ABCFGHIJOPQRS", RewriteSpec::None);
        (repo, [a, b, c], ())
    };
    assert_eq!(r2.rewritten_chunks + r3.rewritten_chunks, 0);
    // I, II, IV (N O P) and the new one.
    assert_eq!(containers_read(&repo, r3.backup.id), 4);
    let census = repo.index().unwrap().copy_census();
    assert_eq!((census.chunks, census.redundant_chunks), (19, 0));
}

#[test]
fn har_history_survives_reopen() {
    let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    init_blake3(b.clone(), ChunkerConfig::default(), 5 * CHUNK, true);
    let har = RewriteSpec::parse("har:0.5:1").unwrap();
    let ii;
    {
        let mut repo = Repository::open_writer(b.clone(), "test").unwrap();
        let r1 = backup_letters(&mut repo, "ABCDEFGHIJKLM", har);
        // I, II full; III 3/5 used: nothing sparse.
        assert_eq!(r1.sparse_containers, 0);
        ii = at(&repo, 'F');
        // Uses only F G of II (2/5 < 0.5): II becomes sparse.
        let r2 = backup_letters(&mut repo, "ABCDEFGNOPKLM", har);
        assert_eq!(r2.rewritten_chunks, 0);
        assert_eq!(
            tessera_core::rewrite::HarHistory::of(repo.manifest())
                .unwrap()
                .chain("letters")
                .to_vec(),
            vec![ii]
        );
        repo.close().unwrap();
    }
    let mut repo = Repository::open_writer(b, "test").unwrap();
    assert_eq!(
        tessera_core::rewrite::HarHistory::of(repo.manifest())
            .unwrap()
            .chain("letters")
            .to_vec(),
        vec![ii]
    );
    // With the default cap (5 % of the referenced bytes) the same history
    // is trimmed away: II holds 2 of the backup's 13 chunks.
    {
        let b2: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let mut r = open_new(b2, ChunkerConfig::default(), 5 * CHUNK, true);
        let capped = RewriteSpec::parse("har").unwrap();
        backup_letters(&mut r, "ABCDEFGHIJKLM", capped);
        backup_letters(&mut r, "ABCDEFGNOPKLM", capped);
        assert!(tessera_core::rewrite::HarHistory::of(r.manifest())
            .unwrap()
            .chain("letters")
            .to_vec()
            .is_empty());
    }
    // The next HAR backup rewrites every duplicate held only in II.
    let r3 = backup_letters(&mut repo, "ABCFGHIJOPQRS", har);
    assert_eq!(r3.rewritten_chunks, 5);
    for c in ['F', 'G', 'H', 'I', 'J'] {
        assert_ne!(reads(&repo, r3.backup.id, c), ii);
    }
    // A non-HAR backup leaves the history alone; HAR ignores dead ids.
    let before = tessera_core::rewrite::HarHistory::of(repo.manifest())
        .unwrap()
        .chain("letters")
        .to_vec();
    backup_letters(&mut repo, "ABC", RewriteSpec::None);
    assert_eq!(
        tessera_core::rewrite::HarHistory::of(repo.manifest())
            .unwrap()
            .chain("letters")
            .to_vec(),
        before
    );
}

/// Next version: an overwrite, an insertion, a deletion and a moved block,
/// so later versions reference scattered old containers.
fn mutate(base: &[u8], seed: u64) -> Vec<u8> {
    let mut v = base.to_vec();
    let n = v.len().max(1);
    let at = (seed as usize).wrapping_mul(7919) % n;
    let end = (at + 1500).min(v.len());
    if at < end {
        v[at..end].copy_from_slice(&bytes(seed ^ 1, end - at));
    }
    let ins = (seed as usize).wrapping_mul(104_729) % (v.len() + 1);
    v.splice(ins..ins, bytes(seed ^ 2, 3000));
    let del = (seed as usize).wrapping_mul(1_299_709) % v.len();
    let moved: Vec<u8> = v.drain(del..(del + 4000).min(v.len())).collect();
    let to = (seed as usize).wrapping_mul(31) % (v.len() + 1);
    v.splice(to..to, moved);
    v
}

fn policies() -> Vec<RewriteSpec> {
    [
        "none",
        "capping:1",
        "capping:3",
        "smr:1",
        "smr:3",
        "ned:0.3",
        "ned:0.9",
        "har:0.5",
        "har:0.9",
    ]
    .iter()
    .map(|s| RewriteSpec::parse(s).unwrap())
    .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any sequence of backups under any mix of policies restores byte for
    /// byte; with one segment per backup no backup stores a chunk twice;
    /// stored bytes account every copy.
    #[test]
    fn every_policy_restores_every_backup(
        seed in any::<u64>(),
        size in 20_000usize..80_000,
        picks in prop::collection::vec(0usize..7, 2..6),
        big_segment in any::<bool>(),
    ) {
        let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let mut repo = open_new(
            b,
            ChunkerConfig::Fastcdc { min: 256, avg: 1024, max: 4096 },
            8 * 1024,
            false,
        );
        let segment_bytes = Some(if big_segment { 1 << 30 } else { 6 * 1024 });
        let mut versions = vec![bytes(seed, size)];
        let mut ids = Vec::new();
        let mut stored = 0u64;
        let mut own_reads: Vec<(BackupId, Vec<ContainerId>)> = Vec::new();
        for (k, &p) in picks.iter().enumerate() {
            if k > 0 {
                let next = mutate(versions.last().unwrap(), seed.wrapping_add(k as u64));
                versions.push(next);
            }
            let data = versions.last().unwrap();
            let first_new = repo.manifest().next_container_id;
            let opts = BackupOptions {
                rewrite: policies()[p],
                segment_bytes,
                ..BackupOptions::new(format!("v{k}"), SourceKind::Stream)
            };
            let rep = repo.backup_reader(&opts, &mut &data[..], &mut |_| {}).unwrap();
            prop_assert_eq!(rep.logical_bytes, data.len() as u64);
            prop_assert!(rep.rewritten_bytes <= rep.stored_bytes);
            prop_assert_eq!(rep.backup.new_bytes, rep.stored_bytes);
            stored += rep.stored_bytes;
            ids.push(rep.backup.id);
            // What this backup's data containers hold.
            let mut held: HashMap<Fingerprint, usize> = HashMap::new();
            let mut logical = 0u64;
            for c in repo.manifest().containers.iter()
                .filter(|c| c.id >= first_new && c.kind == ChunkKind::Data)
            {
                let cont = repo.store().read(c.id).unwrap();
                let mut in_one = HashSet::new();
                for m in &cont.meta {
                    prop_assert!(in_one.insert(m.fp), "container holds a chunk twice");
                    *held.entry(m.fp).or_default() += 1;
                    logical += m.len as u64;
                }
            }
            prop_assert_eq!(logical, rep.stored_bytes);
            if big_segment {
                prop_assert!(held.values().all(|&n| n == 1), "a segment stored a chunk twice");
            }
            // Earlier backups still read exactly the containers their own
            // ingest wrote or referenced, whatever this one rewrote.
            let now = read_sets(&repo);
            prop_assert_eq!(&now[..own_reads.len()], &own_reads[..]);
            own_reads = now;
        }
        prop_assert_eq!(repo.stats().stored_data_bytes, stored);
        for (id, v) in ids.iter().zip(&versions) {
            for cache in ["lru:2", "opt:2", "faa:2", "faa:5", "lru:64"] {
                let b = repo.manifest().backup(*id).unwrap().clone();
                let mut out = Vec::new();
                let opts = RestoreOptions { cache: tessera_core::restore::CacheSpec::parse(cache).unwrap(), ..Default::default() };
                repo.restore_to(&b, &mut out, &opts, &mut |_| {}).unwrap();
                prop_assert!(out == *v, "backup {} differs under {}", id, cache);
            }
        }
    }
}

/// The property test only means something if policies do rewrite: on
/// fragmented versions each rewriting policy stores copies, naive none, and
/// the rewriting policies read no more containers than naive for the last
/// version.
#[test]
fn policies_rewrite_fragmented_versions() {
    let mut reads = Vec::new();
    for spec in ["none", "capping:2", "smr:2", "ned:0.5", "har:0.5"] {
        let mut repo = small_repo(Arc::new(MemoryStore::new()));
        let mut v = bytes(7, 200_000);
        let mut rewritten = 0;
        let mut last = BackupId(0);
        for k in 0..8u64 {
            let opts = BackupOptions {
                rewrite: RewriteSpec::parse(spec).unwrap(),
                segment_bytes: Some(32 * 1024),
                chain: Some("v".into()),
                ..BackupOptions::new(format!("v{k}"), SourceKind::Stream)
            };
            let r = repo.backup_reader(&opts, &mut &v[..], &mut |_| {}).unwrap();
            rewritten += r.rewritten_chunks;
            last = r.backup.id;
            v = mutate(&v, 1000 + k);
        }
        if spec == "none" {
            assert_eq!(rewritten, 0);
        } else {
            assert!(rewritten > 0, "{spec} rewrote nothing");
        }
        reads.push((spec, containers_read(&repo, last)));
    }
    let naive = reads[0].1;
    for &(spec, r) in &reads[1..] {
        assert!(r <= naive, "{spec}: {r} containers read vs {naive} naive");
    }
}

/// The index's entries (every copy), for comparison.
fn index_state(repo: &Repository) -> Vec<(Fingerprint, u16, ContainerId, bool)> {
    let mut v: Vec<_> = repo
        .index()
        .unwrap()
        .entries()
        .map(|e| (e.fp, e.copy, e.container, e.kind == ChunkKind::Data))
        .collect();
    v.sort();
    v
}

/// A rewriting backup that fails at any backend operation leaves the
/// in-memory index exactly as it was (re-pointed and rewritten chunks
/// included), and the repository still restores.
#[test]
fn failed_rewriting_backup_restores_the_index_exactly() {
    use tessera_core::backend::FaultyStore;
    let versions: Vec<Vec<u8>> = (0..4u64)
        .scan(bytes(3, 60_000), |v, k| {
            let cur = v.clone();
            *v = mutate(v, 50 + k);
            Some(cur)
        })
        .collect();
    let setup = || {
        let inner = Arc::new(MemoryStore::new());
        let mut repo = small_repo(inner.clone());
        for (k, v) in versions[..3].iter().enumerate() {
            let opts = BackupOptions {
                rewrite: RewriteSpec::Smr { level: 1 },
                segment_bytes: Some(16 * 1024),
                ..BackupOptions::new(format!("v{k}"), SourceKind::Stream)
            };
            repo.backup_reader(&opts, &mut &v[..], &mut |_| {}).unwrap();
        }
        repo.close().unwrap();
        inner
    };
    let last = |repo: &mut Writer| {
        let opts = BackupOptions {
            rewrite: RewriteSpec::Capping { level: 1 },
            segment_bytes: Some(16 * 1024),
            ..BackupOptions::new("v3", SourceKind::Stream)
        };
        repo.backup_reader(&opts, &mut &versions[3][..], &mut |_| {})
    };
    let counting = Arc::new(FaultyStore::new(setup(), None));
    let mut repo = Repository::open_writer(counting.clone(), "test").unwrap();
    let base = counting.ops();
    let rep = last(&mut repo).unwrap();
    assert!(rep.rewritten_chunks > 0);
    let total = counting.ops();
    for n in (base + 1)..=total {
        let failing = Arc::new(FaultyStore::new(setup(), Some(n)));
        let mut repo = Repository::open_writer(failing.clone(), "test").unwrap();
        let before = index_state(&repo);
        if last(&mut repo).is_err() {
            assert_eq!(index_state(&repo), before, "fail at {n}");
            drop(repo);
            let inner: Arc<dyn ObjectStore> = failing.inner().clone();
            let repo = Repository::open(inner).unwrap();
            for (k, b) in repo.backups().iter().enumerate() {
                let mut out = Vec::new();
                repo.restore_to(b, &mut out, &RestoreOptions::default(), &mut |_| {})
                    .unwrap();
                assert!(out == versions[k]);
            }
        }
    }
}

/// Ingest throughput of each policy relative to no rewriting, on a
/// generated series of versions (memory backend, default chunking, 4 MiB
/// containers): each version moves a quarter of the previous one's 256 KiB
/// blocks elsewhere and replaces 5 % with new data, so segments reference
/// many old containers. Also the last version's restore under each cache.
/// Best of two runs per policy (the machine is shared). Run by hand:
/// `cargo test --release -p tessera-core --test it -- --ignored --nocapture rewrite::bench`
#[test]
#[ignore = "benchmark; run by hand in release mode"]
fn bench_ingest_throughput_per_policy() {
    const SIZE: usize = 96 << 20;
    const BLOCK: usize = 256 << 10;
    const VERSIONS: u64 = 6;
    let mut versions = vec![bytes(11, SIZE)];
    for k in 1..VERSIONS {
        let prev = versions.last().unwrap();
        let mut blocks: Vec<Vec<u8>> = prev.chunks(BLOCK).map(|b| b.to_vec()).collect();
        let n = blocks.len();
        let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as usize
        };
        for _ in 0..n / 4 {
            let (a, b) = (rnd() % n, rnd() % n);
            blocks.swap(a, b);
        }
        for e in 0..n / 20 {
            let i = rnd() % n;
            blocks[i] = bytes(k * 10_000 + e as u64, BLOCK);
        }
        versions.push(blocks.concat());
    }
    let logical: usize = versions.iter().map(|v| v.len()).sum();
    let mut base = 0.0;
    for spec in [
        "none",
        "capping:5",
        "capping:20",
        "smr:5",
        "smr:20",
        "har:0.5",
    ] {
        let mut best = f64::MAX;
        let mut result = None;
        for _ in 0..2 {
            let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
            init_blake3(b.clone(), ChunkerConfig::default(), 4 << 20, false);
            let mut repo = Repository::open_writer(b, "bench").unwrap();
            let started = std::time::Instant::now();
            let mut rewritten = 0;
            for (k, v) in versions.iter().enumerate() {
                let opts = BackupOptions {
                    rewrite: RewriteSpec::parse(spec).unwrap(),
                    ..BackupOptions::new(format!("v{k}"), SourceKind::Stream)
                };
                rewritten += repo
                    .backup_reader(&opts, &mut &v[..], &mut |_| {})
                    .unwrap()
                    .rewritten_bytes;
            }
            best = best.min(started.elapsed().as_secs_f64());
            result = Some((repo, rewritten));
        }
        let (repo, rewritten) = result.unwrap();
        let mb_s = logical as f64 / 1e6 / best;
        if spec == "none" {
            base = mb_s;
        }
        print!(
            "{spec:>10}: ingest {mb_s:6.1} MB/s ({:5.1} % of none), rewritten {:6.1} MB, dedup ratio {:.2}",
            100.0 * mb_s / base,
            rewritten as f64 / 1e6,
            repo.stats().dedup_ratio
        );
        let last = repo.backups().last().unwrap().clone();
        for cache in ["lru:32", "opt:32", "faa:32"] {
            let opts = RestoreOptions {
                cache: tessera_core::restore::CacheSpec::parse(cache).unwrap(),
                ..Default::default()
            };
            let r = repo
                .restore_to(&last, &mut std::io::sink(), &opts, &mut |_| {})
                .unwrap();
            print!(
                " | {cache} {} reads, sf {:.2}, {:.0} MB/s",
                r.data_containers_read, r.speed_factor, r.throughput_mb_s
            );
        }
        println!();
    }
}

/// Every copy of a chunk stays known to the index across reopen and index
/// compaction, so SMR keeps seeing redundancy among containers.
#[test]
fn older_copies_survive_reopen_and_compaction() {
    let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    init_blake3(b.clone(), ChunkerConfig::default(), 5 * CHUNK, true);
    let capping = RewriteSpec::Capping { level: 2 };
    let (ii, iv);
    {
        let mut repo = Repository::open_writer(b.clone(), "test").unwrap();
        backup_letters(&mut repo, "ABCDEFGHIJKLM", capping);
        ii = at(&repo, 'H');
        backup_letters(&mut repo, "ABCDEFGNOPKLM", capping);
        iv = at(&repo, 'N');
        assert_eq!(at(&repo, 'F'), iv);
        assert_eq!(repo.index().unwrap().copies(&fp('F')), &[ii]);
        assert_eq!(repo.index().unwrap().newest_copy(&fp('F')), 1);
        // Enough backups for the index segments to be compacted into one.
        for k in 0..40u32 {
            let c = char::from_u32(0x100 + k).unwrap();
            backup_letters(&mut repo, &c.to_string(), RewriteSpec::None);
        }
        assert!(repo.manifest().index_segments.len() < 40);
        repo.close().unwrap();
    }
    let mut repo = Repository::open_writer(b, "test").unwrap();
    assert_eq!(at(&repo, 'F'), iv);
    assert_eq!(repo.index().unwrap().copies(&fp('F')), &[ii]);
    assert_eq!(
        repo.index().unwrap().get_copy(ChunkKind::Data, &fp('F'), 0),
        Some(ii),
        "copy 0 of F, which the first backup reads"
    );
    let first = repo.backups()[0].id;
    assert_eq!(reads(&repo, first, 'F'), ii);
    // And the third stream still comes out as in Fig. 6.
    let r3 = backup_letters(&mut repo, "ABCFGHIJOPQRS", RewriteSpec::Smr { level: 2 });
    assert_eq!(r3.rewritten_chunks, 2);
    assert_eq!(containers_read(&repo, r3.backup.id), 3);
}

/// A data repository of 1 KiB chunks in 8 KiB containers: small versions
/// span many containers.
fn small_repo(b: Arc<dyn ObjectStore>) -> Writer {
    open_new(
        b,
        ChunkerConfig::Fastcdc {
            min: 256,
            avg: 1024,
            max: 4096,
        },
        8 * 1024,
        false,
    )
}

/// GC is per copy. On Fig. 6's repository (SMR): forgetting the first two
/// backups kills copy 1 of F and G in IV although their copy 0 in II lives
/// on (the third backup reads it); IV goes, the third backup still reads
/// I's surviving chunks where GC moved them and F–J from II. Forgetting only
/// the third instead keeps both copies of F, across GC and reopen.
#[test]
fn gc_keeps_exactly_the_copies_retained_backups_read() {
    use tessera_core::gc::{GcOptions, GcStrategy};
    for strategy in [GcStrategy::Naive, GcStrategy::Gccdf] {
        let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let mut repo = open_new(b.clone(), ChunkerConfig::default(), 5 * CHUNK, true);
        let smr = RewriteSpec::Smr { level: 2 };
        let r1 = backup_letters(&mut repo, "ABCDEFGHIJKLM", smr);
        let (i, ii) = (at(&repo, 'A'), at(&repo, 'F'));
        let r2 = backup_letters(&mut repo, "ABCDEFGNOPKLM", smr);
        let iv = at(&repo, 'N');
        let r3 = backup_letters(&mut repo, "ABCFGHIJOPQRS", smr);
        let v = reads(&repo, r3.backup.id, 'O');
        let gc = |repo: &mut Writer| {
            repo.gc(&GcOptions {
                strategy,
                ..GcOptions::default()
            })
            .unwrap()
        };

        // Forget the third: V (its O P copies and Q R S) is dead; both
        // copies of F stay, each read by its own backup.
        {
            let b2: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
            let mut other = open_new(b2.clone(), ChunkerConfig::default(), 5 * CHUNK, true);
            backup_letters(&mut other, "ABCDEFGHIJKLM", smr);
            backup_letters(&mut other, "ABCDEFGNOPKLM", smr);
            let third = backup_letters(&mut other, "ABCFGHIJOPQRS", smr);
            let before = read_sets(&other)[..2].to_vec();
            other.forget(&[third.backup.id]).unwrap();
            let r = gc(&mut other);
            assert_eq!(r.reclaimed_containers, 1, "{strategy}: V only");
            assert_eq!(r.moved_chunks, 0);
            other.close().unwrap();
            let other = Repository::open(b2).unwrap();
            assert_eq!(read_sets(&other), before, "{strategy}");
            assert_eq!(
                other.index().unwrap().copy_list(&fp('F')).len(),
                2,
                "both copies of F"
            );
        }

        repo.forget(&[r1.backup.id, r2.backup.id]).unwrap();
        let produced_from = repo.manifest().next_container_id;
        let r = gc(&mut repo);
        // The forgotten backups read I–IV. I keeps A B C (moved); II is
        // whole (skipped); III and IV are dead.
        assert_eq!(r.involved_containers, 4, "{strategy}: I–IV");
        assert_eq!(r.skipped_containers, 1, "{strategy}: II");
        assert_eq!(r.reclaimed_containers, 3, "{strategy}");
        assert_eq!(r.moved_chunks, 3, "{strategy}: A B C");
        repo.close().unwrap();
        let repo = Repository::open(b).unwrap();
        let ids: Vec<_> = repo.manifest().containers.iter().map(|c| c.id).collect();
        assert!(!ids.contains(&iv) && !ids.contains(&i), "{strategy}");
        let b3 = r3.backup.id;
        for c in ['A', 'B', 'C'] {
            assert!(
                reads(&repo, b3, c) >= produced_from,
                "{strategy}: {c} moved"
            );
        }
        for c in ['F', 'G', 'H', 'I', 'J'] {
            assert_eq!(reads(&repo, b3, c), ii, "{strategy}");
        }
        assert_eq!(reads(&repo, b3, 'P'), v);
        // Copy 1 of F (in IV) is gone; copy 0 (in II) is F's only copy.
        let f: Vec<_> = repo.index().unwrap().copy_list(&fp('F')).iter().collect();
        assert_eq!(f, vec![(0, ii)], "{strategy}");
        assert_eq!(containers_read(&repo, b3), 3, "{strategy}");
    }
}

/// A data container sealed in the middle of a segment is a dedup target for
/// the policy and for later segments of the same backup (it was once lost:
/// its chunks were stored again as if new).
#[test]
fn a_container_sealed_mid_segment_is_deduplicated_against() {
    for spec in ["capping:2", "smr:2", "ned:0.5", "har:0.5"] {
        let mut repo = trace_repo();
        let opts = BackupOptions {
            rewrite: RewriteSpec::parse(spec).unwrap(),
            segment_bytes: Some(7 * CHUNK as u64),
            ..BackupOptions::new("x", SourceKind::Trace)
        };
        // Segment 1 (A–G) seals A–E mid-segment; segment 2 repeats them.
        let r = repo
            .backup_trace(&opts, "ABCDEFGABCDEXY".chars().map(|c| Ok((fp(c), CHUNK))))
            .unwrap();
        assert_eq!((r.new_chunks, r.rewritten_chunks), (9, 0), "{spec}");
        assert_eq!(containers_read(&repo, r.backup.id), 2, "{spec}");
    }
}

/// A level means containers per segment of 5 containers of data (the SMR
/// paper's 20 MB at 4 MB containers), so the default segment scales with
/// the container size and a level rewrites the same share of one chunk
/// stream at 4 MiB and at 256 KiB containers. (With a fixed 20 MiB
/// segment, capping:3 at 256 KiB kept 3 of 80 containers per segment and
/// rewrote 96 % of the duplicates instead of 40 %.)
#[test]
fn a_level_rewrites_the_same_share_at_any_container_size() {
    const C: u32 = 8192;
    let v1: Vec<Fingerprint> = (0..25_600u32).map(|i| common::fp_n(i as u64)).collect();
    let share = |container_size: u32| {
        let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let mut r = open_new(b, ChunkerConfig::default(), container_size, true);
        let opts = BackupOptions::new("v1", SourceKind::Trace);
        r.backup_trace(&opts, v1.iter().map(|f| Ok((*f, C))))
            .unwrap();
        // The next version starts 37 chunks in: segments straddle containers.
        let opts = BackupOptions {
            rewrite: RewriteSpec::parse("capping:3").unwrap(),
            ..BackupOptions::new("v2", SourceKind::Trace)
        };
        let rep = r
            .backup_trace(&opts, v1[37..].iter().map(|f| Ok((*f, C))))
            .unwrap();
        rep.rewritten_bytes as f64 / rep.logical_bytes as f64
    };
    let (big, small) = (share(4 << 20), share(256 << 10));
    assert!(big > 0.3 && big < 0.5, "4 MiB: {big}");
    assert!(
        (small / big - 1.0).abs() < 0.1,
        "4 MiB: {big}, 256 KiB: {small}"
    );
}
