//! The SFTP backend on a real OpenSSH server: `sshd` started by the tests
//! on 127.0.0.1 with generated keys (see `backend::test_servers`), reached
//! through the system `ssh`. Without OpenSSH the tests say so and pass,
//! unless `TESSERA_REQUIRE_SSHD=1` or `CI=true`.

use std::sync::Arc;
use tessera_core::backend::contract::{check_contract, check_key_validation};
use tessera_core::backend::test_servers::{quick_transfer, Sshd};
use tessera_core::backend::{KeyKind, ObjectKey, ObjectStore, SftpStore};
use tessera_core::check::CheckOptions;
use tessera_core::Repository;

use crate::common::{
    assert_one_line, backup, backup_forget_gc_check_restore, bytes, init_remote, restore,
};
use crate::s3_minio::folder;

/// A store at `path` on the server, created if `create`.
fn store(s: &Sshd, path: &str, create: bool) -> tessera_core::Result<SftpStore> {
    let loc = s.location(path);
    let (t, root) = s.transport(&loc, false);
    SftpStore::with_transport(t, root, &loc, quick_transfer(), create)
}

#[test]
fn sftp_backend_contract() {
    let Some(s) = Sshd::start() else { return };
    let path = folder("contract");
    let b = store(&s, &path, true).unwrap();
    check_contract(&b);
    check_key_validation(&store(&s, &folder("keys"), true).unwrap());
    // Publishing by rename and link leaves no temporaries behind.
    let leftovers: Vec<_> = walk(&s.dir.path().join(&path))
        .into_iter()
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Every file under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

/// Two handles (two ssh connections) race for the lock: exactly one wins
/// each round, since the server links atomically.
#[test]
fn sftp_put_if_absent_has_one_winner() {
    let Some(s) = Sshd::start() else { return };
    let path = folder("race");
    let a = Arc::new(store(&s, &path, true).unwrap());
    let b = Arc::new(store(&s, &path, false).unwrap());
    for round in 0..20u32 {
        let key = ObjectKey::Stray(format!("locks/l{round}"));
        let (ka, kb) = (key.clone(), key.clone());
        let (sa, sb) = (a.clone(), b.clone());
        let ta = std::thread::spawn(move || sa.put_if_absent(&ka, b"a").unwrap());
        let tb = std::thread::spawn(move || sb.put_if_absent(&kb, b"b").unwrap());
        let (wa, wb) = (ta.join().unwrap(), tb.join().unwrap());
        assert!(wa ^ wb, "round {round}: a {wa}, b {wb}");
        let got = a.get(&key).unwrap();
        assert_eq!(got, if wa { b"a" } else { b"b" });
    }
}

#[test]
fn sftp_backup_forget_gc_check_restore() {
    let Some(s) = Sshd::start() else { return };
    let store: Arc<dyn ObjectStore> = Arc::new(store(&s, &folder("cycle"), true).unwrap());
    backup_forget_gc_check_restore(store);
}

/// Wrong key, a missing directory, a server that is not there: each a
/// one-line error, at once (refusals are not retried).
#[test]
fn sftp_refusals_are_one_line_errors() {
    let Some(s) = Sshd::start() else { return };
    let loc = s.location(&folder("refused"));
    let (t, root) = s.transport(&loc, true);
    let started = std::time::Instant::now();
    let e = SftpStore::with_transport(t, root, &loc, quick_transfer(), true).unwrap_err();
    assert_one_line(&e, &["SFTP connect", "access denied", "Permission denied"]);
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());

    let e = store(&s, "no/such/dir", false).unwrap_err();
    assert!(matches!(e, tessera_core::Error::NoRepository(_)), "{e:?}");
    assert_one_line(&e, &["no/such/dir"]);

    s.stop();
    let e = store(&s, &folder("gone"), true).unwrap_err();
    assert_one_line(&e, &["SFTP connect", "cannot reach", "Connection refused"]);
}

/// The server killed (with its sessions) at the 3rd upload of a backup:
/// a one-line error, the committed backup intact after a restart, the
/// same writer going on; nothing is left half-written.
#[test]
fn sftp_server_killed_mid_backup() {
    use crate::s3_minio::{Op, Trigger};
    let Some(s) = Sshd::start() else { return };
    let s = Arc::new(s);
    let path = folder("killed");
    let store0: Arc<dyn ObjectStore> = Arc::new(store(&s, &path, true).unwrap());
    init_remote(store0.clone());
    let v1 = bytes(11, 600_000);
    let mut w = Repository::open_writer(store0.clone(), "test").unwrap();
    let id1 = backup(&mut w, "s", &v1).unwrap();
    w.close().unwrap();

    let stopper = s.clone();
    let trig = Arc::new(
        Trigger::new(
            store(&s, &path, false).unwrap(),
            3,
            |op| matches!(op, Op::Put),
            Box::new(move || stopper.stop()),
        )
        .disarmed(),
    );
    let mut w = Repository::open_writer(trig.clone(), "test").unwrap();
    trig.arm();
    let v2 = bytes(12, 900_000);
    let e = backup(&mut w, "s", &v2).unwrap_err();
    assert!(trig.fired());
    assert_one_line(&e, &["SFTP", "cannot reach"]);
    s.resume();
    let id2 = backup(&mut w, "s", &v2).unwrap();
    w.close().unwrap();
    let r = Repository::open(Arc::new(store(&s, &path, false).unwrap())).unwrap();
    assert_eq!(restore(&r, id1).unwrap(), v1);
    assert_eq!(restore(&r, id2).unwrap(), v2);
    let c = r
        .check(&CheckOptions {
            read_data: tessera_core::check::ReadData::All,
        })
        .unwrap();
    assert!(c.ok(), "{:?}", c.problems);
    // What the killed uploads left are hidden temporaries, which the
    // writer's cleanup removes and listings never show.
    let b = store(&s, &path, false).unwrap();
    b.clean_interrupted().unwrap();
    let names: Vec<String> = walk(&s.dir.path().join(&path));
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    assert!(!b.list(KeyKind::Container).unwrap().is_empty());
}

/// Only the ssh connection dies (the server stays): the store opens a new
/// one and repeats the request; the backup succeeds.
#[test]
fn sftp_lost_connection_is_reopened() {
    let Some(s) = Sshd::start() else { return };
    let path = folder("reconnect");
    let b = store(&s, &path, true).unwrap();
    b.put(&ObjectKey::IndexSegment(1), b"one").unwrap();
    b.barrier().unwrap();
    // Kill this test process's ssh children (the store's connection).
    let me = std::process::id();
    let mut killed = 0;
    for c in tessera_core::backend::test_servers::children_of(me) {
        let cmd = std::fs::read_to_string(format!("/proc/{c}/cmdline")).unwrap_or_default();
        if cmd.contains(&s.port.to_string()) && cmd.contains("sftp") {
            tessera_core::backend::test_servers::kill_tree(c);
            killed += 1;
        }
    }
    assert!(killed >= 1, "no ssh process found");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(b.get(&ObjectKey::IndexSegment(1)).unwrap(), b"one");
    b.put(&ObjectKey::IndexSegment(2), &bytes(3, 3 << 20))
        .unwrap();
    b.barrier().unwrap();
    assert_eq!(b.size(&ObjectKey::IndexSegment(2)).unwrap(), 3 << 20);
}
