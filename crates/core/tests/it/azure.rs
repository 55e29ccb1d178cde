//! The Azure Blob backend on a real Azurite (see `azure_azurite` for the
//! harness): the backend contract, conditional writes, a full backup /
//! forget / gc / check / restore cycle that matches a local repository,
//! `init` creating a missing container, and faults (server killed in the
//! middle of a backup, a restore and a GC; connections reset; wrong
//! credentials; a missing container), each a one-line error with no
//! committed backup lost and the next run succeeding.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tessera_core::backend::contract::{check_contract, check_key_validation};
use tessera_core::backend::{
    list_all, AzureStore, CachedStore, CountingStore, KeyKind, LocalStore, ObjectKey, ObjectStore,
};
use tessera_core::check::CheckOptions;
use tessera_core::container::format::is_recipe_container;
use tessera_core::gc::GcOptions;
use tessera_core::{BackupId, Repository, Writer};

use crate::azure_azurite::{endpoint, options, Azurite, ACCOUNT, CONTAINER};
use crate::common::{assert_one_line, backup, bytes, init_remote, mutate, restore};
use crate::s3_minio::{folder, Op, ResetProxy, Trigger};

fn azure(a: &Azurite, test: &str) -> Arc<AzureStore> {
    Arc::new(AzureStore::open(&a.location(&folder(test)), a.options()).unwrap())
}

fn writer(b: Arc<dyn ObjectStore>) -> Writer {
    Repository::open_writer(b, "test").unwrap()
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
fn azure_backend_contract() {
    let Some(a) = Azurite::start() else { return };
    check_contract(&*azure(&a, "contract"));
    check_key_validation(&*azure(&a, "keys"));
    let cache = tempfile::tempdir().unwrap();
    check_contract(&CachedStore::new(
        azure(&a, "cached"),
        cache.path().join("c"),
        is_recipe_container,
    ));
    // Another prefix in the same container is another repository.
    let x = azure(&a, "a");
    let y = azure(&a, "b");
    x.put(&ObjectKey::IndexSegment(1), b"a").unwrap();
    x.barrier().unwrap();
    assert!(y.list(KeyKind::IndexSegment).unwrap().is_empty());
    assert_eq!(x.list(KeyKind::IndexSegment).unwrap().len(), 1);
}

#[test]
fn azure_conditional_writes_have_exactly_one_winner() {
    let Some(a) = Azurite::start() else { return };
    let store = azure(&a, "race");
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
    let g = ObjectKey::Manifest(tessera_core::backend::Generation(1 << 40));
    assert!(store.put_if_absent(&g, b"one").unwrap());
    assert!(!store.put_if_absent(&g, b"two").unwrap());
    assert_eq!(store.get(&g).unwrap(), b"one");
}

/// Backups, a forget and a GC made the same way on a local and an Azure
/// repository: the same objects byte for byte (manifests and the config
/// aside), the same `check`, every kept backup restoring.
#[test]
fn azure_backup_forget_gc_check_restore_matches_local() {
    let Some(a) = Azurite::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(&dir.path().join("r")).unwrap());
    let remote: Arc<dyn ObjectStore> = azure(&a, "cycle");
    let v1 = bytes(7, 700_000);
    let v2 = mutate(&v1, 8, 5000);
    let v3 = bytes(9, 300_000);
    let mut ids = Vec::new();
    for b in [&local, &remote] {
        init_remote(b.clone());
        let mut w = writer(b.clone());
        let i1 = backup(&mut w, "s", &v1).unwrap();
        let i2 = backup(&mut w, "s", &v2).unwrap();
        let i3 = backup(&mut w, "t", &v3).unwrap();
        w.forget(&[i1, i3]).unwrap();
        let gc = w.gc(&GcOptions::default()).unwrap();
        assert!(gc.reclaimed_containers > 0, "{gc:?}");
        w.close().unwrap();
        ids.push((i1, i2, i3));
    }
    assert_eq!(ids[0], ids[1]);
    let report = |b: &Arc<dyn ObjectStore>| {
        let r = Repository::open(b.clone()).unwrap();
        assert_eq!(r.backups().len(), 1);
        assert_eq!(restore(&r, ids[0].1).unwrap(), v2);
        let c = r
            .check(&CheckOptions {
                read_data: tessera_core::check::ReadData::All,
            })
            .unwrap();
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
        if !matches!(key.kind(), Some(KeyKind::Manifest | KeyKind::Config)) {
            assert!(
                local.get(&key).unwrap() == remote.get(&key).unwrap(),
                "{key}"
            );
        }
    }
}

#[test]
fn azure_wrong_credentials_and_missing_container_are_one_line_errors() {
    let Some(a) = Azurite::start() else { return };
    let mut wrong = a.options();
    // A well-formed key that is not the account's.
    wrong.access_key = Some("bm90LXRoZS1rZXktbm90LXRoZS1rZXktbm90LXRoZS1rZXk=".into());
    let e = AzureStore::open(&a.location("x"), wrong).unwrap_err();
    assert_one_line(&e, &["access denied", &a.endpoint()]);

    let missing = format!("azure:{ACCOUNT}/no-such-container/repo");
    let e = AzureStore::open(&missing, a.options()).unwrap_err();
    assert_one_line(&e, &["container 'no-such-container' does not exist"]);

    let e = tessera_core::backend::open("azure:https://x/y", is_recipe_container)
        .err()
        .unwrap();
    assert_one_line(&e, &["bad Azure location"]);

    a.stop();
    let e = AzureStore::open(&a.location("x"), a.options()).unwrap_err();
    assert_one_line(&e, &["cannot reach", &a.endpoint()]);
}

/// `init` on a container that does not exist creates it, says so, and the
/// repository in it works; the next opening finds it there.
#[test]
fn azure_init_creates_a_missing_container() {
    let Some(a) = Azurite::start() else { return };
    let location = format!("azure:{ACCOUNT}/made-by-init/repo");
    assert!(AzureStore::open(&location, a.options()).is_err());
    let (store, created) = AzureStore::open_creating(&location, a.options()).unwrap();
    assert!(created, "the container was missing");
    store.check_conditional_writes().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let v1 = bytes(21, 300 << 10);
    let id = committed(store.clone(), &v1);
    let (again, created) = AzureStore::open_creating(&location, a.options()).unwrap();
    assert!(!created, "it exists now");
    intact(Arc::new(again), id, &v1);
    let (other, created) =
        AzureStore::open_creating(&format!("azure:{ACCOUNT}/made-by-init/other"), a.options())
            .unwrap();
    assert!(!created);
    assert!(other.list(KeyKind::Manifest).unwrap().is_empty());
}

#[test]
fn azure_server_killed_mid_backup_restore_and_gc() {
    let Some(a) = Azurite::start() else { return };
    let a = Arc::new(a);
    let loc = a.location(&folder("stop"));
    let open = || AzureStore::open(&loc, a.options()).unwrap();
    let plain = || -> Arc<dyn ObjectStore> { Arc::new(open()) };
    let v1 = bytes(11, 600_000);
    let id1 = committed(plain(), &v1);
    // Azurite writes its own metadata to disk every 5 s: a SIGKILL sooner
    // loses what it had acknowledged, a loss of the emulator's, not ours.
    let settle = || std::thread::sleep(Duration::from_secs(6));
    settle();

    // Backup: the server dies at the 3rd upload.
    let stopper = a.clone();
    let trig = Arc::new(
        Trigger::new(
            open(),
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
    assert_one_line(&e, &[&a.endpoint()]);
    a.resume();
    // The same writer goes on once the server is back.
    let id2 = backup(&mut w, "s", &v2).unwrap();
    w.close().unwrap();
    intact(plain(), id1, &v1);
    intact(plain(), id2, &v2);
    settle();

    // Restore: the server dies at the 2nd read of a container.
    let stopper = a.clone();
    let trig = Arc::new(
        Trigger::new(
            open(),
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
    assert_one_line(&e, &[&a.endpoint()]);
    a.resume();
    assert_eq!(restore(&r, id2).unwrap(), v2);

    // GC: the server dies at its first delete (after the sweep's copies).
    let mut w = writer(plain());
    w.forget(&[id1]).unwrap();
    w.close().unwrap();
    settle();
    let stopper = a.clone();
    let trig = Arc::new(
        Trigger::new(
            open(),
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
    assert_one_line(&e, &[&a.endpoint()]);
    a.resume();
    w.gc(&GcOptions::default()).unwrap();
    w.close().unwrap();
    intact(plain(), id2, &v2);
    let r = Repository::open(plain()).unwrap();
    assert_eq!(r.backups().len(), 1);
}

#[test]
fn azure_connection_resets_are_retried_or_reported_never_lost() {
    let Some(a) = Azurite::start() else { return };
    // Every connection resets after 64 KiB: a 200 KB upload never arrives,
    // and the barrier says so.
    let proxy = ResetProxy::start(a.port, 64 * 1024);
    let through = options(&endpoint(proxy.port));
    let loc = a.location(&folder("reset"));
    let store = AzureStore::open(&loc, through.clone()).unwrap();
    let big = bytes(5, 200_000);
    store.put(&ObjectKey::IndexSegment(1), &big).unwrap();
    let e = store.barrier().unwrap_err();
    assert_one_line(&e, &["did not all arrive"]);
    assert!(proxy.resets.load(Ordering::Relaxed) > 0);
    assert!(store.get(&ObjectKey::IndexSegment(1)).is_err());

    // Once the connections stop resetting, the same store works again.
    proxy.armed.store(false, Ordering::Relaxed);
    store.put(&ObjectKey::IndexSegment(1), &big).unwrap();
    store.barrier().unwrap();
    assert_eq!(store.get(&ObjectKey::IndexSegment(1)).unwrap(), big);

    // A backup through a proxy that resets every connection after 100 KB
    // is retried to success, byte for byte.
    let proxy = ResetProxy::start(a.port, 100 * 1024);
    let mut patient = options(&endpoint(proxy.port));
    patient.transfer.max_retries = 10;
    patient.transfer.retry_timeout = Duration::from_secs(30);
    let store: Arc<dyn ObjectStore> =
        Arc::new(AzureStore::open(&a.location(&folder("reset-backup")), patient).unwrap());
    init_remote(store.clone());
    let mut w = writer(store.clone());
    let data = bytes(6, 1_500_000);
    let id = backup(&mut w, "s", &data).unwrap();
    assert!(proxy.resets.load(Ordering::Relaxed) > 0);
    w.close().unwrap();
    intact(store, id, &data);
}

/// Requests and bytes of a backup are counted on Azure as anywhere.
#[test]
fn azure_requests_are_counted() {
    let Some(a) = Azurite::start() else { return };
    let counted = Arc::new(CountingStore::new(azure(&a, "count")));
    init_remote(counted.clone());
    let mut w = writer(counted.clone());
    let before = counted.counters();
    backup(&mut w, "s", &bytes(3, 500_000)).unwrap();
    w.close().unwrap();
    let io = counted.counters().since(&before);
    assert!(io.puts > 0 && io.put_bytes > 400_000, "{io:?}");
    assert!(!CONTAINER.is_empty());
}
