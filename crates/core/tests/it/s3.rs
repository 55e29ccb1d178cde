//! The S3 backend on a real MinIO server (see `s3_minio` for the harness):
//! the backend contract, conditional writes, a repository that `check`s the
//! same as a local one, the metadata cache, and faults (server stopped in
//! the middle of a backup, a restore and a GC; connections reset after N
//! bytes; wrong credentials; a missing bucket), each a one-line error with
//! no committed backup lost and the next run succeeding.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use tessera_core::backend::contract::{check_contract, check_key_validation};
use tessera_core::backend::{
    list_all, CachedStore, CountingStore, KeyKind, LocalStore, ObjectKey, ObjectStore, S3Store,
};
use tessera_core::check::CheckOptions;
use tessera_core::container::format::is_recipe_container;
use tessera_core::gc::GcOptions;
use tessera_core::{BackupId, Repository, Writer};

use crate::common::{assert_one_line, backup, bytes, init_remote, mutate, restore};
use crate::s3_minio::{folder, quick_options, Minio, Op, ResetProxy, Trigger, BUCKET, USER};

fn s3(m: &Minio, test: &str) -> Arc<S3Store> {
    Arc::new(S3Store::open(&m.location(&folder(test)), quick_options()).unwrap())
}

fn writer(b: Arc<dyn ObjectStore>) -> Writer {
    Repository::open_writer(b, "test").unwrap()
}

#[test]
fn s3_backend_contract() {
    let Some(m) = Minio::start() else { return };
    check_contract(&*s3(&m, "contract"));
    check_key_validation(&*s3(&m, "keys"));
    let cache = tempfile::tempdir().unwrap();
    check_contract(&CachedStore::new(
        s3(&m, "cached"),
        cache.path().join("c"),
        is_recipe_container,
    ));
    // Another prefix in the same bucket is another repository.
    let a = s3(&m, "a");
    let b = s3(&m, "b");
    a.put(&ObjectKey::IndexSegment(1), b"a").unwrap();
    a.barrier().unwrap();
    assert!(b.list(KeyKind::IndexSegment).unwrap().is_empty());
    assert_eq!(a.list(KeyKind::IndexSegment).unwrap().len(), 1);
}

#[test]
fn s3_uploads_written_behind_are_all_durable_after_the_barrier() {
    let Some(m) = Minio::start() else { return };
    let loc = m.location(&folder("behind"));
    let mut opts = quick_options();
    opts.max_in_flight = 3;
    let store = S3Store::open(&loc, opts).unwrap();
    let objects: Vec<Vec<u8>> = (0..20).map(|i| bytes(i, 100_000 + i as usize)).collect();
    for (i, o) in objects.iter().enumerate() {
        store.put(&ObjectKey::IndexSegment(i as u64), o).unwrap();
        // Read-your-writes while the upload may still run.
        assert_eq!(store.get(&ObjectKey::IndexSegment(i as u64)).unwrap(), *o);
    }
    store
        .put(&ObjectKey::IndexSegment(3), b"last put wins")
        .unwrap();
    store.barrier().unwrap();
    drop(store);
    let fresh = S3Store::open(&loc, quick_options()).unwrap();
    assert_eq!(fresh.list(KeyKind::IndexSegment).unwrap().len(), 20);
    for (i, o) in objects.iter().enumerate() {
        let got = fresh.get(&ObjectKey::IndexSegment(i as u64)).unwrap();
        if i == 3 {
            assert_eq!(got, b"last put wins");
        } else {
            assert_eq!(got, *o);
        }
    }
}

#[test]
fn s3_conditional_writes_have_exactly_one_winner() {
    let Some(m) = Minio::start() else { return };
    let store = s3(&m, "race");
    store.check_conditional_writes().unwrap();
    let winners: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                s.spawn(move || {
                    store
                        .put_if_absent(&ObjectKey::Lock, format!("writer {i}").as_bytes())
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(winners.iter().filter(|w| **w).count(), 1, "{winners:?}");
    let holder = winners.iter().position(|w| *w).unwrap();
    assert_eq!(
        store.get(&ObjectKey::Lock).unwrap(),
        format!("writer {holder}").as_bytes()
    );

    // Two writers run at once (shared locks, online GC); a manifest
    // generation is published by compare-and-swap, and one that exists is
    // never overwritten by put_if_absent.
    let loc = m.location(&folder("publish"));
    let a: Arc<dyn ObjectStore> = Arc::new(S3Store::open(&loc, quick_options()).unwrap());
    init_remote(a.clone());
    let w = writer(a.clone());
    let b: Arc<dyn ObjectStore> = Arc::new(S3Store::open(&loc, quick_options()).unwrap());
    let second = Repository::open_writer(b.clone(), "second").unwrap();
    drop(second);
    drop(w);
    let g = ObjectKey::Manifest(tessera_core::backend::Generation(1 << 40));
    assert!(b.put_if_absent(&g, b"one").unwrap());
    assert!(!b.put_if_absent(&g, b"two").unwrap());
    assert_eq!(b.get(&g).unwrap(), b"one");
}

/// Backups made the same way on a local and an S3 repository: the same
/// objects, byte for byte (manifests and the config aside), and
/// `check` reports the same.
#[test]
fn s3_repository_matches_a_local_one() {
    let Some(m) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(&dir.path().join("r")).unwrap());
    let remote: Arc<dyn ObjectStore> = s3(&m, "same");
    let v1 = bytes(7, 700_000);
    let v2 = mutate(&v1, 8, 5000);
    let mut ids = Vec::new();
    for b in [&local, &remote] {
        init_remote(b.clone());
        let mut w = writer(b.clone());
        ids.push((
            backup(&mut w, "s", &v1).unwrap(),
            backup(&mut w, "s", &v2).unwrap(),
        ));
        w.close().unwrap();
    }
    assert_eq!(ids[0], ids[1]);
    let report = |b: &Arc<dyn ObjectStore>| {
        let r = Repository::open(b.clone()).unwrap();
        assert_eq!(restore(&r, ids[0].0).unwrap(), v1);
        assert_eq!(restore(&r, ids[0].1).unwrap(), v2);
        let c = r.check(&CheckOptions::default()).unwrap();
        assert!(c.ok(), "{:?}", c.problems);
        (
            c.backups,
            c.containers,
            c.index_entries,
            c.recipe_chunks_checked,
            c.data_chunks_referenced,
        )
    };
    assert_eq!(report(&local), report(&remote));
    let names = |b: &Arc<dyn ObjectStore>| list_all(&**b).unwrap();
    assert_eq!(names(&local), names(&remote));
    for key in names(&local) {
        // Manifests record times; the config, each repository's own id.
        if !matches!(key.kind(), Some(KeyKind::Manifest | KeyKind::Config)) {
            assert!(
                local.get(&key).unwrap() == remote.get(&key).unwrap(),
                "{key}"
            );
        }
    }
}

/// Metadata objects come from the cache on the second open; a damaged
/// cache file is refetched; a deleted cache only costs refetching.
#[test]
fn s3_metadata_cache_is_verified_and_disposable() {
    let Some(m) = Minio::start() else { return };
    let loc = m.location(&folder("cache"));
    let cache = tempfile::tempdir().unwrap();
    let open = || {
        let counted = Arc::new(CountingStore::new(
            S3Store::open(&loc, quick_options()).unwrap(),
        ));
        let cached = Arc::new(CachedStore::new(
            counted.clone(),
            cache.path().join("c"),
            is_recipe_container,
        ));
        (counted, cached)
    };
    let (_, first) = open();
    init_remote(first.clone());
    let data = bytes(3, 400_000);
    let mut w = writer(first.clone());
    let id = backup(&mut w, "s", &data).unwrap();
    w.close().unwrap();

    let (counted, cached) = open();
    let r = Repository::open(cached.clone()).unwrap();
    assert_eq!(restore(&r, id).unwrap(), data);
    let metadata = |c: &CountingStore<S3Store>| {
        c.counters_of(KeyKind::Manifest).gets + c.counters_of(KeyKind::IndexSegment).gets
    };
    assert!(metadata(&counted) > 0, "first read fills the cache");

    let (counted, cached) = open();
    let r = Repository::open(cached.clone()).unwrap();
    assert_eq!(restore(&r, id).unwrap(), data);
    assert_eq!(metadata(&counted), 0, "served from the cache");
    assert!(cached.counters().hits > 0);

    // Damage every cached file: each is dropped and fetched again.
    for e in std::fs::read_dir(cache.path().join("c")).unwrap() {
        let p = e.unwrap().path();
        let mut b = std::fs::read(&p).unwrap();
        b[0] ^= 0xff;
        std::fs::write(&p, b).unwrap();
    }
    let (counted, cached) = open();
    let r = Repository::open(cached.clone()).unwrap();
    assert_eq!(restore(&r, id).unwrap(), data);
    assert!(cached.counters().damaged > 0);
    assert!(metadata(&counted) > 0);

    std::fs::remove_dir_all(cache.path().join("c")).unwrap();
    let (_, cached) = open();
    let r = Repository::open(cached).unwrap();
    assert_eq!(restore(&r, id).unwrap(), data);
    assert!(r.check(&CheckOptions::default()).unwrap().ok());
}

#[test]
fn s3_wrong_credentials_and_missing_bucket_are_one_line_errors() {
    let Some(m) = Minio::start() else { return };
    let mut wrong = quick_options();
    wrong.credentials.as_mut().unwrap().secret_access_key = "not-the-secret".into();
    let e = S3Store::open(&m.location("x"), wrong).unwrap_err();
    assert_one_line(&e, &["access denied", &m.endpoint()]);

    let nobucket = format!("s3:{}/no-such-bucket/repo", m.endpoint());
    let e = S3Store::open(&nobucket, quick_options()).unwrap_err();
    assert_one_line(&e, &["bucket 'no-such-bucket' does not exist"]);

    let e = tessera_core::backend::open("s3:ftp://host/b", is_recipe_container)
        .err()
        .unwrap();
    assert_one_line(&e, &["bad S3 location"]);

    m.stop();
    let e = S3Store::open(&m.location("x"), quick_options()).unwrap_err();
    assert_one_line(&e, &["cannot reach", &m.endpoint()]);
    assert!(!USER.is_empty() && !BUCKET.is_empty());
}

/// `init` on a bucket that does not exist creates it (issue 34), says so,
/// and the repository in it works; the next opening finds it there.
#[test]
fn s3_init_creates_a_missing_bucket() {
    let Some(m) = Minio::start() else { return };
    let location = format!("s3:{}/made-by-init/repo", m.endpoint());
    assert!(S3Store::open(&location, quick_options()).is_err());
    let (store, created) = S3Store::open_creating(&location, quick_options()).unwrap();
    assert!(created, "the bucket was missing");
    store.check_conditional_writes().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let v1 = bytes(21, 300 << 10);
    let id = committed(store.clone(), &v1);
    let (again, created) = S3Store::open_creating(&location, quick_options()).unwrap();
    assert!(!created, "it exists now");
    intact(Arc::new(again), id, &v1);
    // Another repository in the same (now existing) bucket.
    let (other, created) = S3Store::open_creating(
        &format!("s3:{}/made-by-init/other", m.endpoint()),
        quick_options(),
    )
    .unwrap();
    assert!(!created);
    assert!(other.list(KeyKind::Manifest).unwrap().is_empty());
}

/// A repository on `store` with one committed backup of `v1`.
fn committed(store: Arc<dyn ObjectStore>, v1: &[u8]) -> BackupId {
    init_remote(store.clone());
    let mut w = writer(store);
    let id = backup(&mut w, "s", v1).unwrap();
    w.close().unwrap();
    id
}

/// The committed backup restores and the repository checks clean.
fn intact(store: Arc<dyn ObjectStore>, id: BackupId, data: &[u8]) {
    let r = Repository::open(store).unwrap();
    assert_eq!(restore(&r, id).unwrap(), data);
    let c = r.check(&CheckOptions::default()).unwrap();
    assert!(c.ok(), "{:?}", c.problems);
}

#[test]
fn s3_server_stopped_mid_backup_restore_and_gc() {
    let Some(m) = Minio::start() else { return };
    let m = Arc::new(m);
    let loc = m.location(&folder("stop"));
    let plain =
        || -> Arc<dyn ObjectStore> { Arc::new(S3Store::open(&loc, quick_options()).unwrap()) };
    let v1 = bytes(11, 600_000);
    let id1 = committed(plain(), &v1);

    // Backup: the server dies at the 3rd upload.
    let stopper = m.clone();
    let trig = Arc::new(
        Trigger::new(
            S3Store::open(&loc, quick_options()).unwrap(),
            3,
            |op| matches!(op, Op::Put),
            Box::new(move || stopper.stop()),
        )
        .disarmed(),
    );
    let mut w = writer(trig.clone());
    trig.arm();
    let v2 = bytes(12, 900_000);
    let e = backup(&mut w, "s", &v2).unwrap_err();
    assert!(trig.fired());
    assert_one_line(&e, &[&m.endpoint()]);
    m.resume();
    // The same writer goes on once the server is back.
    let id2 = backup(&mut w, "s", &v2).unwrap();
    w.close().unwrap();
    intact(plain(), id1, &v1);
    intact(plain(), id2, &v2);

    // Restore: the server dies at the 2nd read of a container.
    let stopper = m.clone();
    let trig = Arc::new(
        Trigger::new(
            S3Store::open(&loc, quick_options()).unwrap(),
            2,
            |op| matches!(op, Op::Get),
            Box::new(move || stopper.stop()),
        )
        .disarmed(),
    );
    let r = Repository::open(trig.clone()).unwrap();
    trig.arm();
    let e = restore(&r, id2).unwrap_err();
    assert!(trig.fired());
    assert_one_line(&e, &[&m.endpoint()]);
    m.resume();
    assert_eq!(restore(&r, id2).unwrap(), v2);

    // GC: the server dies at its first delete (after the sweep's copies).
    let mut w = writer(plain());
    w.forget(&[id1]).unwrap();
    w.close().unwrap();
    let stopper = m.clone();
    let trig = Arc::new(
        Trigger::new(
            S3Store::open(&loc, quick_options()).unwrap(),
            1,
            |op| matches!(op, Op::Delete),
            Box::new(move || stopper.stop()),
        )
        .disarmed(),
    );
    let mut w = writer(trig.clone());
    trig.arm();
    let e = w.gc(&GcOptions::default()).unwrap_err();
    assert!(trig.fired());
    assert_one_line(&e, &[&m.endpoint()]);
    m.resume();
    w.gc(&GcOptions::default()).unwrap();
    w.close().unwrap();
    intact(plain(), id2, &v2);
    let r = Repository::open(plain()).unwrap();
    assert_eq!(r.backups().len(), 1);
}

#[test]
fn s3_connection_resets_are_retried_or_reported_never_lost() {
    let Some(m) = Minio::start() else { return };
    // Every connection resets after 64 KiB: a 200 KB upload never arrives,
    // and the barrier says so.
    let proxy = ResetProxy::start(m.port, 64 * 1024);
    let loc = proxy.location(&folder("reset"));
    let store = S3Store::open(&loc, quick_options()).unwrap();
    let big = bytes(5, 200_000);
    store.put(&ObjectKey::IndexSegment(1), &big).unwrap();
    let e = store.barrier().unwrap_err();
    assert_one_line(&e, &["did not all arrive"]);
    assert!(proxy.resets.load(Ordering::Relaxed) > 0);
    // Small requests pass; the lost object is not there.
    assert!(store.get(&ObjectKey::IndexSegment(1)).is_err());

    // Once the connections stop resetting, the same store works again.
    proxy.armed.store(false, Ordering::Relaxed);
    store.put(&ObjectKey::IndexSegment(1), &big).unwrap();
    store.barrier().unwrap();
    assert_eq!(store.get(&ObjectKey::IndexSegment(1)).unwrap(), big);

    // A backup through a proxy that resets its first connections is
    // retried to success, byte for byte.
    let proxy = ResetProxy::start(m.port, 100 * 1024);
    let loc = proxy.location(&folder("reset-backup"));
    let mut patient = quick_options();
    patient.max_retries = 10;
    patient.retry_timeout = std::time::Duration::from_secs(30);
    let store: Arc<dyn ObjectStore> = Arc::new(S3Store::open(&loc, patient).unwrap());
    init_remote(store.clone());
    let mut w = writer(store.clone());
    let data = bytes(6, 1_500_000);
    // Connections reset after 100 KB each while the backup runs: the
    // requests cut off are retried on new connections.
    let id = backup(&mut w, "s", &data).unwrap();
    assert!(proxy.resets.load(Ordering::Relaxed) > 0);
    w.close().unwrap();
    intact(store, id, &data);
}

/// Backup and restore throughput on MinIO against the local backend on the
/// same data, with request counts; and GC traffic, full mark against
/// focused. `TESSERA_S3_BENCH_MB` (default 256) sets the size. Run with
/// `cargo test --release -p tessera-core --test it s3_bench -- --ignored --nocapture`.
#[test]
#[ignore]
fn s3_bench_backup_restore_and_gc_traffic() {
    let Some(m) = Minio::start() else { return };
    let mb: usize = std::env::var("TESSERA_S3_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let v1 = bytes(21, mb << 20);
    let v2 = mutate(&v1, 22, 64 << 10);
    let dir = tempfile::Builder::new()
        .prefix("s3fgc-bench-")
        .tempdir()
        .unwrap();
    let local: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(&dir.path().join("r")).unwrap());
    let remote: Arc<dyn ObjectStore> = s3(&m, "bench");
    for (name, store) in [("local", local), ("minio", remote)] {
        let counted = Arc::new(CountingStore::new(store));
        tessera_core::Repository::init(counted.clone(), &tessera_core::InitOptions::default())
            .unwrap();
        let mut w = writer(counted.clone());
        let t = std::time::Instant::now();
        let id1 = backup(&mut w, "s", &v1).unwrap();
        let secs = t.elapsed().as_secs_f64();
        let io = counted.counters();
        println!(
            "{name}: backup {mb} MiB {:.0} MB/s, {} PUTs ({} MB), {} GETs",
            (mb << 20) as f64 / secs / 1e6,
            io.puts,
            io.put_bytes >> 20,
            io.gets
        );
        let id2 = backup(&mut w, "s", &v2).unwrap();
        w.close().unwrap();
        let before = counted.counters();
        let r = Repository::open(counted.clone()).unwrap();
        let t = std::time::Instant::now();
        assert!(restore(&r, id2).unwrap() == v2);
        let secs = t.elapsed().as_secs_f64();
        let io = counted.counters().since(&before);
        println!(
            "{name}: restore {:.0} MB/s, {} GETs ({} MB)",
            v2.len() as f64 / secs / 1e6,
            io.gets,
            io.get_bytes >> 20
        );
        drop(r);
        let mut w = writer(counted.clone());
        w.forget(&[id1]).unwrap();
        for mark in [
            tessera_core::gc::MarkSpec::Logical,
            tessera_core::gc::MarkSpec::Focused,
        ] {
            let plan = w
                .plan_gc(&GcOptions {
                    mark,
                    ..Default::default()
                })
                .unwrap();
            println!(
                "{name}: gc mark {mark}: {:.3} s, {} KB of recipes read, {} bytes of mark memory",
                plan.mark_seconds,
                plan.mark_bytes_read >> 10,
                plan.mark.memory_bytes
            );
        }
        w.close().unwrap();
    }
}

/// Two writers (two repository handles, each behind its own metadata
/// cache, as on two machines) and an online focused GC on one bucket: the
/// GC's writer warms its cache, marks, the other writer backs up data the
/// GC found dead (its resurrection record and its generation go to the
/// server), and the GC — reading `gc/resurrect/*`, locks and the newest
/// generation through its cache — resurrects the chunks and merges its
/// publish with the other writer's. Every backup restores through either
/// cache; no mutable object or listing is ever cached.
#[test]
fn s3_online_gc_through_the_metadata_cache() {
    use tessera_core::gc::{GcStrategy, MarkSpec};
    let Some(m) = Minio::start() else { return };
    let loc = m.location(&folder("online-cache"));
    let caches = tempfile::tempdir().unwrap();
    let open = |name: &str| {
        let counted = Arc::new(CountingStore::new(
            S3Store::open(&loc, quick_options()).unwrap(),
        ));
        let cached = Arc::new(CachedStore::new(
            counted.clone(),
            caches.path().join(name),
            is_recipe_container,
        ));
        (counted, cached)
    };
    let (_, first) = open("a");
    init_remote(first.clone());
    let (old, kept) = (bytes(41, 300_000), bytes(42, 200_000));
    let (a_count, a) = open("a");
    let mut gcw = writer(a.clone());
    gcw.rebuild_refgraph(0).unwrap();
    let gone = backup(&mut gcw, "old", &old).unwrap();
    let kept_id = backup(&mut gcw, "kept", &kept).unwrap();
    gcw.forget(&[gone]).unwrap();
    // Warm the GC machine's cache with every published metadata object.
    {
        let (_, warm) = open("a");
        let r = Repository::open(warm).unwrap();
        assert_eq!(restore(&r, kept_id).unwrap(), kept);
    }
    let opts = GcOptions {
        mark: MarkSpec::Focused,
        strategy: GcStrategy::Gccdf,
        ..Default::default()
    };
    let mut run = gcw.gc_begin(&opts).unwrap();
    assert!(!run.plan().unwrap().reclaimed.is_empty());
    // Listings taken before the other writer's commit (a cache that kept
    // them would hide its record and its generation).
    let listed = a.list(KeyKind::Gc).unwrap();
    let newest = |s: &CachedStore<Arc<CountingStore<S3Store>>>| {
        s.list(KeyKind::Manifest)
            .unwrap()
            .iter()
            .filter_map(|k| k.generation())
            .max()
    };
    let generation = newest(&a);
    let (_, b) = open("b");
    let mut other = writer(b.clone());
    let again = backup(&mut other, "again", &old).unwrap();
    assert!(a.list(KeyKind::Gc).unwrap().len() > listed.len());
    assert!(newest(&a) > generation);
    let before = a_count.counters_of(KeyKind::Gc);
    gcw.gc_cutoff(&mut run).unwrap();
    assert!(
        run.resurrected() > 0,
        "the record was seen through the cache"
    );
    let r = gcw.gc_finish(run).unwrap();
    assert!(r.resurrections > 0 && r.resurrection_records >= 1);
    let gc_io = a_count.counters_of(KeyKind::Gc).since(&before);
    assert!(gc_io.lists > 0 && gc_io.gets > 0, "{gc_io:?}");
    drop((gcw, other));
    for name in ["a", "b"] {
        let (_, c) = open(name);
        let r = Repository::open(c).unwrap();
        assert!(
            tessera_core::fgc::RefGraphState::of(r.manifest())
                .unwrap()
                .is_some(),
            "graph merged, not dropped"
        );
        assert_eq!(restore(&r, kept_id).unwrap(), kept);
        assert_eq!(restore(&r, again).unwrap(), old);
        assert!(r.manifest().backup(gone).is_none());
        let report = r.check(&CheckOptions::default()).unwrap();
        assert!(report.ok(), "{:?}", report.problems);
    }
    // Only immutable metadata was ever cached.
    for name in ["a", "b"] {
        for e in std::fs::read_dir(caches.path().join(name)).unwrap() {
            let f = e.unwrap().file_name().into_string().unwrap();
            assert!(
                ["manifests-", "index-", "refgraph-", "containers-"]
                    .iter()
                    .any(|p| f.starts_with(p)),
                "cached {f}"
            );
        }
    }
    // The next focused GC on the merged graph keeps both backups.
    let mut w = writer(a.clone());
    w.gc(&opts).unwrap();
    drop(w);
    let (_, c) = open("b");
    let r = Repository::open(c).unwrap();
    assert_eq!(restore(&r, kept_id).unwrap(), kept);
    assert_eq!(restore(&r, again).unwrap(), old);
}
