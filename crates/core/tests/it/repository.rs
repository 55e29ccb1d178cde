//! End-to-end behaviour of a repository: round trips, a reference model,
//! corruption detection and crash safety.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use tessera_core::backend::{FaultyStore, LocalStore, ObjectStore};
use tessera_core::backend::{KeyKind, ObjectKey};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::BackupId;
use tessera_core::{
    BackupOptions, Error, HashAlgo, InitOptions, Repository, RestoreOptions, Writer,
};

use crate::common;
use common::{backup, bytes, init_blake3, mem, restore, trace_of};

/// A new version of `base`: a few edits, an insertion and a deletion.
fn mutate(base: &[u8], seed: u64) -> Vec<u8> {
    common::mutate(base, seed, 5000)
}

fn init(backend: Arc<dyn ObjectStore>, hash: HashAlgo, chunker: ChunkerConfig) {
    Repository::init(
        backend,
        &InitOptions {
            hash,
            chunker,
            container_size: 256 * 1024,
            trace: false,
            ..Default::default()
        },
    )
    .unwrap();
}

fn stream(name: &str) -> BackupOptions {
    BackupOptions::new(name, SourceKind::Stream)
}

#[test]
fn second_version_dedups_and_both_restore() {
    let b = mem();
    init(b.clone(), HashAlgo::Blake3, ChunkerConfig::default());
    let mut repo = Repository::open_writer(b.clone(), "test").unwrap();
    let v1 = bytes(1, 3 << 20);
    let v2 = mutate(&v1, 5);
    let mut r1 = &v1[..];
    let rep1 = repo
        .backup_reader(&stream("a"), &mut r1, &mut |_| {})
        .unwrap();
    let mut r2 = &v2[..];
    let rep2 = repo
        .backup_reader(&stream("a"), &mut r2, &mut |_| {})
        .unwrap();
    assert_eq!(
        rep1.stored_bytes,
        v1.len() as u64,
        "random data has no duplicates"
    );
    assert!(
        rep2.stored_bytes < v2.len() as u64 / 10,
        "stored {}",
        rep2.stored_bytes
    );
    assert!(
        rep2.new_recipe_chunks < 10,
        "recipe chunks are shared: {}",
        rep2.new_recipe_chunks
    );
    assert_eq!(restore(&repo, rep1.backup.id).unwrap(), v1);
    assert_eq!(restore(&repo, rep2.backup.id).unwrap(), v2);
    // A reopened repository finds everything through the persisted index.
    repo.close().unwrap();
    let repo = Repository::open(b).unwrap();
    assert_eq!(restore(&repo, BackupId(2)).unwrap(), v2);
    let s = repo.stats();
    assert_eq!(s.backups, 2);
    assert!(s.dedup_ratio > 1.8, "{}", s.dedup_ratio);
}

#[test]
fn empty_and_tiny_streams_round_trip() {
    let b = mem();
    init(b.clone(), HashAlgo::Sha1, ChunkerConfig::default());
    let mut repo = Repository::open_writer(b, "test").unwrap();
    for data in [vec![], vec![7u8], bytes(3, 100)] {
        let id = backup(&mut repo, "x", &data).unwrap();
        assert_eq!(restore(&repo, id).unwrap(), data);
    }
}

#[test]
fn restore_metrics_of_a_fresh_backup() {
    let b = mem();
    init(b.clone(), HashAlgo::Blake3, ChunkerConfig::default());
    let mut repo = Repository::open_writer(b, "test").unwrap();
    let data = bytes(9, 2 << 20);
    let id = backup(&mut repo, "x", &data).unwrap();
    let entry = repo.manifest().backup(id).unwrap().clone();
    let mut out = Vec::new();
    let rep = repo
        .restore_to(&entry, &mut out, &RestoreOptions::default(), &mut |_| {})
        .unwrap();
    // 2 MiB of unique data in 256 KiB containers: 8 or 9 containers, each read once.
    assert!(
        (8..=9).contains(&rep.data_containers_read),
        "{}",
        rep.data_containers_read
    );
    assert!(
        (rep.read_amplification - 1.0).abs() < 1e-9,
        "{}",
        rep.read_amplification
    );
    assert_eq!(rep.restored_bytes, data.len() as u64);
}

fn chunkers() -> Vec<ChunkerConfig> {
    vec![
        ChunkerConfig::Fastcdc {
            min: 512,
            avg: 2048,
            max: 8192,
        },
        ChunkerConfig::Rabin {
            min: 512,
            avg: 2048,
            max: 8192,
        },
        ChunkerConfig::Fixed { size: 3000 },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Random streams round-trip byte for byte under every chunker and fingerprint.
    #[test]
    fn streams_round_trip(seed in any::<u64>(), len in 0usize..300_000, c in 0usize..3, h in 0usize..3) {
        let algo = [HashAlgo::Blake3, HashAlgo::Sha1, HashAlgo::Sha256][h];
        let b = mem();
        init(b.clone(), algo, chunkers()[c]);
        let mut repo = Repository::open_writer(b, "test").unwrap();
        let v1 = bytes(seed, len);
        let v2 = mutate(&v1, seed);
        let id1 = backup(&mut repo, "s", &v1).unwrap();
        let id2 = backup(&mut repo, "s", &v2).unwrap();
        prop_assert_eq!(restore(&repo, id1).unwrap(), v1);
        prop_assert_eq!(restore(&repo, id2).unwrap(), v2);
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Back up a mutation of an existing version (or fresh bytes).
    Backup {
        base: Option<usize>,
        seed: u64,
    },
    Forget {
        pick: usize,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (proptest::option::of(0usize..8), any::<u64>()).prop_map(|(base, seed)| Op::Backup { base, seed }),
        2 => (0usize..8).prop_map(|pick| Op::Forget { pick }),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, .. ProptestConfig::default() })]

    /// Random backup/forget/reopen sequences agree with a map of id → bytes.
    #[test]
    fn agrees_with_reference_model(ops in proptest::collection::vec(op(), 1..12)) {
        let b = mem();
        init(b.clone(), HashAlgo::Blake3, ChunkerConfig::Fastcdc { min: 512, avg: 2048, max: 8192 });
        let mut repo = Repository::open_writer(b.clone(), "test").unwrap();
        let mut model: BTreeMap<BackupId, Vec<u8>> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Backup { base, seed } => {
                    let data = match base.and_then(|i| model.values().nth(i % model.len().max(1))) {
                        Some(v) => mutate(v, seed),
                        None => bytes(seed, (seed % 200_000) as usize),
                    };
                    let id = backup(&mut repo, "m", &data).unwrap();
                    prop_assert!(!model.contains_key(&id), "ids are never reused");
                    model.insert(id, data);
                }
                Op::Forget { pick } => {
                    if let Some(&id) = model.keys().nth(pick % model.len().max(1)) {
                        repo.forget(&[id]).unwrap();
                        model.remove(&id);
                    }
                }
                Op::Reopen => {
                    repo.close().unwrap();
                    repo = Repository::open_writer(b.clone(), "test").unwrap();
                }
            }
            let listed: Vec<BackupId> = repo.backups().iter().map(|b| b.id).collect();
            prop_assert_eq!(listed, model.keys().copied().collect::<Vec<_>>());
            for (id, data) in &model {
                prop_assert_eq!(&restore(&repo, *id).unwrap(), data);
            }
        }
    }
}

#[test]
fn corrupt_or_missing_container_names_container_and_backup() {
    let dir = tempfile::tempdir().unwrap();
    let b: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(dir.path()).unwrap());
    init(b.clone(), HashAlgo::Blake3, ChunkerConfig::default());
    let mut repo = Repository::open_writer(b.clone(), "test").unwrap();
    let data = bytes(4, 1 << 20);
    let id = backup(&mut repo, "x", &data).unwrap();
    repo.close().unwrap();
    let data_container = Repository::open(b.clone())
        .unwrap()
        .manifest()
        .containers
        .iter()
        .find(|c| c.kind == tessera_core::container::ChunkKind::Data)
        .unwrap()
        .id;
    let path = dir
        .path()
        .join(ObjectKey::Container(data_container).to_string());
    let original = std::fs::read(&path).unwrap();
    let name = format!("container {data_container:016x}");

    // A flipped byte in the data section.
    let mut bad = original.clone();
    bad[200] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let err = restore(&Repository::open(b.clone()).unwrap(), id)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&name) && err.contains(&format!("backup {id}")) && err.contains("checksum"),
        "{err}"
    );

    // A truncated container.
    std::fs::write(&path, &original[..original.len() / 2]).unwrap();
    let err = restore(&Repository::open(b.clone()).unwrap(), id)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&name) && err.contains(&format!("backup {id}")),
        "{err}"
    );

    // A deleted container.
    std::fs::remove_file(&path).unwrap();
    let err = restore(&Repository::open(b.clone()).unwrap(), id).unwrap_err();
    assert!(matches!(err, Error::MissingObject(_)), "{err}");
    assert!(err.to_string().contains(&name), "{err}");

    std::fs::write(&path, &original).unwrap();
    assert_eq!(restore(&Repository::open(b).unwrap(), id).unwrap(), data);
}

/// Run `op` against a repository whose backend fails at every possible
/// mutating operation in turn; after each failure the repository must open,
/// hold exactly the committed backups (and perhaps the new one, complete),
/// and restore them byte for byte.
/// `loss`: 0 = process death, 1 = power loss of every unsynced write,
/// 2.. = power loss of a seeded subset of unsynced writes.
fn crash_sweep(
    loss: u64,
    preload: u64,
    allowed: &[&[&str]],
    op: impl Fn(&mut Writer, &[u8]) -> tessera_core::Result<()>,
) -> u64 {
    let v1 = bytes(11, 600_000);
    let v2 = mutate(&v1, 12);
    let setup = || {
        let inner = mem();
        init(
            inner.clone(),
            HashAlgo::Blake3,
            ChunkerConfig::Fastcdc {
                min: 512,
                avg: 2048,
                max: 8192,
            },
        );
        let mut repo = Repository::open_writer(inner.clone(), "test").unwrap();
        for i in 0..preload {
            backup(&mut repo, &format!("p{i}"), &bytes(1000 + i, 20_000)).unwrap();
        }
        backup(&mut repo, "v1", &v1).unwrap();
        repo.close().unwrap();
        inner
    };
    // Count the operation's mutating backend operations.
    let inner = setup();
    let counting = Arc::new(FaultyStore::new(inner.clone(), None));
    let mut repo = Repository::open_writer(counting.clone(), "test").unwrap();
    let base = counting.ops();
    op(&mut repo, &v2).unwrap();
    repo.close().unwrap();
    let total = counting.ops();
    assert!(total > base + 2);
    for n in (base + 1)..=total {
        let inner = setup();
        let failing = Arc::new(match loss {
            0 => FaultyStore::new(inner.clone(), Some(n)),
            1 => FaultyStore::with_lost_unsynced(inner.clone(), Some(n)),
            seed => FaultyStore::with_partial_loss(inner.clone(), Some(n), seed),
        });
        let result = Repository::open_writer(failing.clone(), "test").and_then(|mut repo| {
            op(&mut repo, &v2)?;
            repo.close()
        });
        assert!(
            failing.has_failed() || result.is_ok(),
            "fail_at {n}: {result:?}"
        );
        drop(result);
        // The crashed process left its lock behind: break it as `tessera unlock` would.
        tessera_core::lock::break_lock(&*inner).unwrap();
        let repo = Repository::open_writer(inner.clone(), "test")
            .unwrap_or_else(|e| panic!("fail_at {n}: reopen failed: {e}"));
        let names: Vec<_> = repo
            .backups()
            .iter()
            .map(|b| b.name.clone())
            .filter(|n| !n.starts_with('p'))
            .collect();
        for b in repo.backups() {
            let pre;
            let want = match b.name.strip_prefix('p') {
                Some(i) => {
                    pre = bytes(1000 + i.parse::<u64>().unwrap(), 20_000);
                    &pre
                }
                None if b.name == "v1" => &v1,
                None => &v2,
            };
            assert_eq!(
                &restore(&repo, b.id).unwrap(),
                want,
                "fail_at {n}: backup {}",
                b.id
            );
        }
        assert!(
            repo.find_leftovers().unwrap().is_empty(),
            "fail_at {n}: leftovers remain"
        );
        // What the op may leave: the old state or the new one.
        assert!(
            allowed.iter().any(|a| *a == names),
            "fail_at {n}: {names:?}"
        );
    }
    total - base
}

#[test]
fn crash_at_every_operation_of_a_backup() {
    for lose in 0..8 {
        let ops = crash_sweep(lose, 0, &[&["v1"], &["v1", "v2"]], |repo, v2| {
            backup(repo, "v2", v2).map(|_| ())
        });
        assert!(ops >= 4, "{ops}");
    }
}

#[test]
fn crash_at_every_operation_of_a_forget() {
    for lose in 0..8 {
        crash_sweep(lose, 0, &[&["v1"], &["v1", "v2"], &["v2"]], |repo, v2| {
            backup(repo, "v2", v2)?;
            repo.forget(&[BackupId(1)])?;
            Ok(())
        });
    }
}

#[test]
fn crash_at_every_operation_of_an_interleaved_group() {
    // The whole group or none of it: never some members without the others.
    for lose in 0..8 {
        let ops = crash_sweep(lose, 0, &[&["v1"], &["v1", "v2", "v3"]], |repo, v2| {
            let member = |name: &str| {
                (
                    stream(name),
                    tessera_core::ingest::GroupInput::Bytes(v2.to_vec()),
                )
            };
            repo.backup_interleaved(vec![member("v2"), member("v3")])
                .map(|_| ())
        });
        assert!(ops >= 4, "{ops}");
    }
}

#[test]
fn writer_is_refused_under_an_exclusive_lock_and_unknown_snapshot_is_clear() {
    let b = mem();
    init(b.clone(), HashAlgo::Blake3, ChunkerConfig::default());
    // Writers share the repository (issue 15); the exclusive lock (init,
    // MFDedup writers) keeps them out.
    let second = Repository::open_writer(b.clone(), "tessera backup").unwrap();
    let third = Repository::open_writer(b.clone(), "tessera backup").unwrap();
    drop((second, third));
    let repo = tessera_core::lock::RepoLock::acquire(b.clone(), "tessera init").unwrap();
    let err = Repository::open_writer(b.clone(), "tessera backup")
        .err()
        .unwrap();
    assert!(matches!(err, Error::Locked(_)), "{err}");
    assert!(
        err.to_string().contains(&std::process::id().to_string()),
        "{err}"
    );
    // Readers are not blocked.
    let reader = Repository::open(b.clone()).unwrap();
    let err = reader.resolve("42").unwrap_err().to_string();
    assert!(err.contains("no snapshot '42'"), "{err}");
    repo.release().unwrap();
    Repository::open_writer(b, "again").unwrap();
}

#[test]
fn init_twice_and_open_missing_are_clear_errors() {
    let b = mem();
    assert!(matches!(
        Repository::open(b.clone()),
        Err(Error::NoRepository(_))
    ));
    init(b.clone(), HashAlgo::Blake3, ChunkerConfig::default());
    let err = Repository::init(b, &InitOptions::default()).unwrap_err();
    assert!(matches!(err, Error::RepositoryExists(_)), "{err}");
}

#[test]
fn trace_mode_matches_data_mode_layout() {
    // The same chunks ingested as data and as a trace give the same layout.
    let data_b = mem();
    let trace_b = mem();
    let cfg = ChunkerConfig::Fastcdc {
        min: 512,
        avg: 2048,
        max: 8192,
    };
    init(data_b.clone(), HashAlgo::Blake3, cfg);
    init_blake3(trace_b.clone(), cfg, 256 * 1024, true);
    let mut dr = Repository::open_writer(data_b, "t").unwrap();
    let mut tr = Repository::open_writer(trace_b, "t").unwrap();
    let v1 = bytes(21, 1 << 20);
    let v2 = mutate(&v1, 22);
    for v in [&v1, &v2] {
        let trace = trace_of(&cfg, v);
        let a = backup(&mut dr, "v", v).unwrap();
        let b = tr.backup_trace(&stream("v"), trace).unwrap().backup.id;
        let (ea, eb) = (
            dr.manifest().backup(a).unwrap().clone(),
            tr.manifest().backup(b).unwrap().clone(),
        );
        assert_eq!(ea.root, eb.root, "same recipe tree");
        assert_eq!((ea.new_bytes, ea.chunks), (eb.new_bytes, eb.chunks));
        let ra = dr
            .restore_to(
                &ea,
                &mut Vec::new(),
                &RestoreOptions::default(),
                &mut |_| {},
            )
            .unwrap();
        let mut sink = Vec::new();
        let rb = tr
            .restore_to(&eb, &mut sink, &RestoreOptions::default(), &mut |_| {})
            .unwrap();
        assert!(sink.is_empty(), "trace mode writes no bytes");
        assert_eq!(ra.data_containers_read, rb.data_containers_read);
        assert_eq!(ra.data_container_bytes_read, rb.data_container_bytes_read);
    }
    let (sa, sb) = (dr.stats(), tr.stats());
    assert_eq!(sa.data_containers, sb.data_containers);
    assert_eq!(sa.stored_data_bytes, sb.stored_data_bytes);
    assert!(sb.container_object_bytes < sa.container_object_bytes / 10);
}

#[test]
fn index_segments_are_compacted_and_superseded_ones_deleted() {
    let b = mem();
    init(
        b.clone(),
        HashAlgo::Blake3,
        ChunkerConfig::Fastcdc {
            min: 512,
            avg: 2048,
            max: 8192,
        },
    );
    let mut repo = Repository::open_writer(b.clone(), "test").unwrap();
    let mut versions = Vec::new();
    let mut v = bytes(77, 50_000);
    for i in 0..(tessera_core::repo::MAX_SEGMENTS as u64 + 3) {
        v = mutate(&v, i + 100);
        versions.push((backup(&mut repo, "v", &v).unwrap(), v.clone()));
        let listed = repo.manifest().index_segments.len();
        assert!(
            listed <= tessera_core::repo::MAX_SEGMENTS,
            "{listed} segments listed"
        );
        assert_eq!(
            b.list(KeyKind::IndexSegment).unwrap().len(),
            listed,
            "superseded segments deleted"
        );
    }
    repo.close().unwrap();
    let repo = Repository::open(b).unwrap();
    assert!(repo.manifest().index_segments.len() < 5);
    for (id, data) in versions {
        assert_eq!(restore(&repo, id).unwrap(), data);
    }
}

#[test]
fn crash_at_every_operation_of_a_compacting_backup() {
    // With MAX_SEGMENTS segments listed, the next backup merges them all.
    let preload = tessera_core::repo::MAX_SEGMENTS as u64 - 1;
    for lose in 0..4 {
        crash_sweep(lose, preload, &[&["v1"], &["v1", "v2"]], |repo, v2| {
            let before = repo.manifest().index_segments.len();
            backup(repo, "v2", v2)?;
            assert!(repo.manifest().index_segments.len() < before, "compacted");
            Ok(())
        });
    }
}

/// Everything a tree restore must reproduce, keyed by relative path.
fn snapshot_tree(root: &std::path::Path) -> BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = p.symlink_metadata().unwrap();
            let mode = m.permissions().mode() & 0o777;
            let what = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {mode:o}")
            } else {
                let data = std::fs::read(&p).unwrap();
                format!("file {mode:o} {}", blake3::hash(&data).to_hex())
            };
            out.insert(rel, what);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]

    /// Random directory trees (nested dirs, empty dirs and files, symlinks,
    /// odd modes) round-trip through backup and restore exactly.
    #[test]
    fn directory_trees_round_trip(
        files in proptest::collection::vec(
            ("[a-c]{1,2}(/[a-c]{1,2}){0,3}", 0usize..40_000, any::<u64>(), 0u32..3),
            0..20,
        ),
        links in proptest::collection::vec(("[d-e]{1,3}", "[a-c]{1,2}"), 0..3),
    ) {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir(&src).unwrap();
        for (path, len, seed, mode) in &files {
            let p = src.join(path);
            // A path may collide with an earlier directory or file: skip it.
            if std::fs::create_dir_all(p.parent().unwrap()).is_err() || p.exists() {
                continue;
            }
            if *seed % 5 == 0 {
                std::fs::create_dir(&p).unwrap(); // an empty directory
                continue;
            }
            std::fs::write(&p, bytes(*seed, *len)).unwrap();
            let m = [0o644, 0o600, 0o755][*mode as usize];
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
        }
        for (name, target) in &links {
            let _ = std::os::unix::fs::symlink(target, src.join(name));
        }
        let b: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(&t.path().join("repo")).unwrap());
        init(b.clone(), HashAlgo::Blake3, ChunkerConfig::Fastcdc { min: 512, avg: 2048, max: 8192 });
        let mut repo = Repository::open_writer(b, "test").unwrap();
        let opts = BackupOptions::new("tree", SourceKind::Tree);
        let (rep, _) = repo.backup_tree(&opts, &src, &mut |_| {}).unwrap();
        let out = t.path().join("out");
        let (_, ext) = repo
            .restore_into(&rep.backup, &out, &RestoreOptions::default(), &mut |_| {})
            .unwrap();
        prop_assert!(ext.refused.is_empty(), "{:?}", ext.refused);
        prop_assert_eq!(snapshot_tree(&out), snapshot_tree(&src));
    }
}
