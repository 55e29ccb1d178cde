//! Restore caches (LRU, OPT, FAA): read counts on hand-made recipes, end to
//! end and simulated, and OPT never reading more containers than LRU.

use crate::common;

use common::{bytes, fp, open_new, repo_with_stream};
use proptest::prelude::*;
use std::sync::Arc;
use tessera_core::backend::{MemoryStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::ContainerId;
use tessera_core::restore::cache::{faa_reads, lru_reads, opt_reads};
use tessera_core::restore::CacheSpec;
use tessera_core::{BackupOptions, Repository, RestoreOptions, Writer};

const CHUNK: u32 = 4096;

/// A trace repository whose containers hold one chunk each: a restore
/// reads exactly the reference string of the recipe.
fn repo_with(streams: &[&str]) -> Writer {
    let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let mut repo = open_new(b, ChunkerConfig::default(), CHUNK, true);
    for s in streams {
        let opts = BackupOptions::new(*s, SourceKind::Trace);
        repo.backup_trace(&opts, s.chars().map(|c| Ok((fp(c), CHUNK))))
            .unwrap();
    }
    repo
}

fn reads(repo: &Repository, backup: usize, cache: &str) -> u64 {
    let b = repo.backups()[backup].clone();
    let opts = RestoreOptions {
        cache: CacheSpec::parse(cache).unwrap(),
        ..Default::default()
    };
    let r = repo
        .restore_to(&b, &mut std::io::sink(), &opts, &mut |_| {})
        .unwrap();
    assert_eq!(r.restored_bytes, b.logical_bytes);
    assert!(r.speed_factor > 0.0 && r.read_amplification > 0.0);
    r.data_containers_read
}

#[test]
fn cyclic_recipe_known_read_counts() {
    // Backup 2 references containers A B C A B C … (12 chunks).
    let repo = repo_with(&["ABC", "ABCABCABCABC"]);
    assert_eq!(reads(&repo, 1, "lru:2"), 12);
    assert_eq!(reads(&repo, 1, "opt:2"), 7);
    assert_eq!(reads(&repo, 1, "lru:3"), 3);
    assert_eq!(reads(&repo, 1, "opt:3"), 3);
    // FAA area = (n − 1) containers: windows of 2, 3 and 6 chunks.
    assert_eq!(reads(&repo, 1, "faa:3"), 12);
    assert_eq!(reads(&repo, 1, "faa:4"), 12);
    assert_eq!(reads(&repo, 1, "faa:7"), 6);
    assert_eq!(reads(&repo, 1, "faa:13"), 3);
}

#[test]
fn textbook_reference_string() {
    // Belady's example: 3 frames, OPT 9 faults, LRU 12.
    let s = "70120304230321201701";
    let repo = repo_with(&["01234567", s]);
    assert_eq!(reads(&repo, 1, "opt:3"), 9);
    assert_eq!(reads(&repo, 1, "lru:3"), 12);
    let ids: Vec<ContainerId> = s.bytes().map(|b| ContainerId(b as u64)).collect();
    assert_eq!(opt_reads(&ids, 3, usize::MAX), 9);
    assert_eq!(lru_reads(&ids, 3), 12);
    let sized: Vec<(ContainerId, u64)> = ids.iter().map(|&i| (i, 1)).collect();
    assert_eq!(faa_reads(&sized, 20), 6);
    assert_eq!(faa_reads(&sized, 5), 4 + 4 + 4 + 3);
}

proptest! {
    #[test]
    fn opt_never_reads_more_than_lru(
        refs in prop::collection::vec(0u64..12, 0..300),
        n in 1usize..8,
    ) {
        let opt = opt_reads(&refs, n, usize::MAX);
        let lru = lru_reads(&refs, n);
        prop_assert!(opt <= lru, "opt {} > lru {}", opt, lru);
        // Every policy reads each distinct container at least once.
        let distinct = refs.iter().collect::<std::collections::HashSet<_>>().len() as u64;
        prop_assert!(opt >= distinct);
        let sized: Vec<(u64, u64)> = refs.iter().map(|&i| (i, 1)).collect();
        prop_assert!(faa_reads(&sized, u64::MAX) == distinct);
    }

    #[test]
    fn opt_restore_never_reads_more_than_lru(
        refs in prop::collection::vec(0u8..10, 1..120),
        n in 1usize..6,
    ) {
        let s: String = refs.iter().map(|&i| (b'a' + i) as char).collect();
        let repo = repo_with(&["abcdefghij", &s]);
        let opt = reads(&repo, 1, &format!("opt:{n}"));
        let lru = reads(&repo, 1, &format!("lru:{n}"));
        prop_assert!(opt <= lru);
        let ids: Vec<ContainerId> = refs.iter().map(|&i| ContainerId(i as u64)).collect();
        prop_assert_eq!(lru, lru_reads(&ids, n));
        prop_assert_eq!(opt, opt_reads(&ids, n, usize::MAX));
    }
}

/// Restore throughput of one 256 MiB stream under each cache (memory
/// backend: the CPU cost of the pipeline). Run by hand:
/// `cargo test --release -p tessera-core --test it -- --ignored --nocapture restore_cache::`
#[test]
#[ignore = "benchmark; run by hand in release mode"]
fn bench_restore_throughput_per_cache() {
    let data = bytes(0x1234, 256 << 20);
    let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let (repo, entry) = repo_with_stream(b, ChunkerConfig::default(), 4 << 20, &data);
    for cache in ["lru:32", "opt:32", "faa:32", "faa:8"] {
        let opts = RestoreOptions {
            cache: CacheSpec::parse(cache).unwrap(),
            ..Default::default()
        };
        let mut best = 0f64;
        for _ in 0..5 {
            let r = repo
                .restore_to(&entry, &mut std::io::sink(), &opts, &mut |_| {})
                .unwrap();
            best = best.max(r.throughput_mb_s);
        }
        println!("restore {cache} best of 5: {best:.0} MB/s");
    }
}

fn seeks(repo: &Repository, backup: usize, cache: &str) -> u64 {
    let b = repo.backups()[backup].clone();
    let opts = RestoreOptions {
        cache: CacheSpec::parse(cache).unwrap(),
        ..Default::default()
    };
    repo.restore_to(&b, &mut std::io::sink(), &opts, &mut |_| {})
        .unwrap()
        .seeks
}

/// A seek is a read that does not follow the previous read in id order:
/// containers written one after the other and read in that order are one
/// run; every jump, forward or back, and every re-read starts another.
#[test]
fn seeks_count_sequential_runs_of_container_reads() {
    let repo = repo_with(&["ABCDEF", "DEFABC", "FEDCBA", "ACE", "ABAB"]);
    for cache in ["lru:10", "opt:10", "faa:13"] {
        assert_eq!(seeks(&repo, 0, cache), 1, "{cache}");
        assert_eq!(seeks(&repo, 1, cache), 2, "{cache}");
        assert_eq!(seeks(&repo, 2, cache), 6, "{cache}");
        assert_eq!(seeks(&repo, 3, cache), 3, "{cache}");
        assert_eq!(seeks(&repo, 4, cache), 1, "{cache}");
    }
    // One container cached: A B A B reads four times, B follows A each time.
    assert_eq!(reads(&repo, 4, "lru:1"), 4);
    assert_eq!(seeks(&repo, 4, "lru:1"), 2);
}

/// Under a memory ceiling of about two containers, an LRU restore that
/// comes back to one chunk of each of five containers reads each container
/// once: the held containers are trimmed to the chunk they will still
/// supply instead of being freed whole and read again (`restore/hold.rs`).
/// Plain, and compressed and encrypted (chunks copied out of opened
/// frames); byte for byte, with every read counted by the backend.
#[test]
fn a_ceiling_trims_containers_to_the_chunks_still_needed_instead_of_reading_them_again() {
    use tessera_core::{CipherKind, Compression, InitOptions, KdfParams, Password, SealOptions};
    const PIECE: usize = 4096;
    for sealed in [false, true] {
        // Five containers of four chunks each, then chunk 0 of each again.
        let piece = |n: usize| -> Vec<u8> {
            match sealed {
                // Text-like, so that compression has frames to open.
                true => format!("piece {n} ").repeat(PIECE).as_bytes()[..PIECE].to_vec(),
                false => bytes(n as u64 + 1, PIECE),
            }
        };
        let mut data = Vec::new();
        for n in 0..20 {
            data.extend(piece(n));
        }
        for n in (0..20).step_by(4) {
            data.extend(piece(n));
        }
        let backend: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let opts = InitOptions {
            hash: tessera_core::HashAlgo::Blake3,
            chunker: ChunkerConfig::Fixed { size: PIECE as u32 },
            container_size: 4 * PIECE as u32,
            trace: false,
            ..Default::default()
        };
        let pw = || Password::new("trim");
        let seal = SealOptions {
            compression: if sealed {
                Compression::Auto
            } else {
                Compression::Off
            },
            encryption: sealed.then(|| (pw(), KdfParams::INSECURE_FAST)),
            cipher: CipherKind::default(),
        };
        Repository::init_sealed(backend.clone(), &opts, &seal).unwrap();
        let mut repo = Repository::open_writer_with(backend, "test", &|| Ok(pw())).unwrap();
        let id = common::backup(&mut repo, "s", &data).unwrap();
        let b = repo.manifest().backup(id).unwrap().clone();
        let containers = repo.stats().data_containers as u64;
        assert_eq!(containers, 5, "sealed {sealed}: four chunks per container");
        let one = repo
            .manifest()
            .containers
            .iter()
            .map(|c| c.object_bytes)
            .max()
            .unwrap();
        // Room for two containers (and the frames' eighth).
        let memory = (2 * one + one / 2) * 8 / 7;
        let ropts = RestoreOptions {
            cache: CacheSpec::parse("lru:64").unwrap(),
            memory,
        };
        let mut out = Vec::new();
        let r = repo.restore_to(&b, &mut out, &ropts, &mut |_| {}).unwrap();
        assert!(out == data, "sealed {sealed}: restored bytes differ");
        assert_eq!(r.data_containers_read, containers, "sealed {sealed}");
        // Below one container, trimming is not room enough: containers are
        // read again, and the bytes are still right.
        let tiny = RestoreOptions { memory: 1, ..ropts };
        let mut out = Vec::new();
        let r = repo.restore_to(&b, &mut out, &tiny, &mut |_| {}).unwrap();
        assert!(out == data, "sealed {sealed}, 1-byte ceiling");
        assert!(r.data_containers_read > containers, "sealed {sealed}");
    }
}
