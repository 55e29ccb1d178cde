//! The rclone backend on Debian's `rclone` with a local remote (see
//! `backend::test_servers`): `rclone serve sftp --stdio`, started by the
//! store. Without rclone the tests say so and pass, unless
//! `TESSERA_REQUIRE_RCLONE=1` or `CI=true`.

use std::sync::Arc;
use tessera_core::backend::contract::{check_contract, check_key_validation};
use tessera_core::backend::test_servers::{children_of, kill_tree, quick_transfer, RcloneRemote};
use tessera_core::backend::{ObjectStore, SftpStore};
use tessera_core::check::CheckOptions;
use tessera_core::Repository;

use crate::common::{
    assert_one_line, backup, backup_forget_gc_check_restore, bytes, init_remote, restore,
};
use crate::s3_minio::folder;

fn store(r: &RcloneRemote, path: &str, create: bool) -> tessera_core::Result<SftpStore> {
    let loc = r.location(path);
    SftpStore::with_transport(
        r.transport(&loc),
        String::new(),
        &loc,
        quick_transfer(),
        create,
    )
}

/// The rclone processes this test process started for `dir`.
fn rclones_for(dir: &std::path::Path) -> Vec<u32> {
    children_of(std::process::id())
        .into_iter()
        .filter(|c| {
            let cmd = std::fs::read_to_string(format!("/proc/{c}/cmdline")).unwrap_or_default();
            cmd.contains("serve") && cmd.contains(&*dir.to_string_lossy())
        })
        .collect()
}

#[test]
fn rclone_backend_contract() {
    let Some(r) = RcloneRemote::new() else { return };
    let b = store(&r, &folder("contract"), true).unwrap();
    check_contract(&b);
    let k = store(&r, &folder("keys"), true).unwrap();
    check_key_validation(&k);
    // One rclone per handle, ended with it.
    assert_eq!(rclones_for(r.dir.path()).len(), 2);
    drop(b);
    assert_eq!(rclones_for(r.dir.path()).len(), 1);
}

#[test]
fn rclone_backup_forget_gc_check_restore() {
    let Some(r) = RcloneRemote::new() else { return };
    let store: Arc<dyn ObjectStore> = Arc::new(store(&r, &folder("cycle"), true).unwrap());
    backup_forget_gc_check_restore(store);
}

/// A remote missing from the configuration, a repository folder that
/// holds no repository, a missing rclone: one-line errors.
#[test]
fn rclone_refusals_are_one_line_errors() {
    let Some(r) = RcloneRemote::new() else { return };
    let loc = "rclone:no-such-remote:x";
    let e = SftpStore::with_transport(r.transport(loc), String::new(), loc, quick_transfer(), true)
        .unwrap_err();
    assert_one_line(&e, &["rclone connect", "no-such-remote"]);

    let store: Arc<dyn ObjectStore> = Arc::new(store(&r, "never/made", false).unwrap());
    let e = Repository::open(store).err().expect("no repository there");
    assert_one_line(&e, &[]);

    let mut t = r.transport(loc);
    t.program = "/nonexistent/rclone".into();
    let e = SftpStore::with_transport(t, String::new(), loc, quick_transfer(), true).unwrap_err();
    assert_one_line(&e, &["rclone connect", "cannot run /nonexistent/rclone"]);
}

/// rclone killed in the middle of a backup's uploads: the store starts
/// it again and repeats the requests; the backup completes and checks.
#[test]
fn rclone_killed_mid_backup_is_restarted() {
    use crate::s3_minio::{Op, Trigger};
    let Some(r) = RcloneRemote::new() else { return };
    let path = folder("killed");
    let dir = r.dir.path().to_path_buf();
    let s0: Arc<dyn ObjectStore> = Arc::new(store(&r, &path, true).unwrap());
    init_remote(s0.clone());
    let v1 = bytes(11, 600_000);
    let mut w = Repository::open_writer(s0.clone(), "test").unwrap();
    let id1 = backup(&mut w, "s", &v1).unwrap();
    w.close().unwrap();
    drop(s0);

    let killed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let k = killed.clone();
    let trig = Arc::new(
        Trigger::new(
            store(&r, &path, false).unwrap(),
            3,
            |op| matches!(op, Op::Put),
            Box::new(move || {
                for pid in rclones_for(&dir) {
                    kill_tree(pid);
                    k.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }),
        )
        .disarmed(),
    );
    let mut w = Repository::open_writer(trig.clone(), "test").unwrap();
    trig.arm();
    let v2 = bytes(12, 900_000);
    let id2 = backup(&mut w, "s", &v2).unwrap();
    assert!(trig.fired());
    assert_eq!(killed.load(std::sync::atomic::Ordering::Relaxed), 1);
    w.close().unwrap();
    let repo = Repository::open(Arc::new(store(&r, &path, false).unwrap())).unwrap();
    assert_eq!(restore(&repo, id1).unwrap(), v1);
    assert_eq!(restore(&repo, id2).unwrap(), v2);
    let c = repo
        .check(&CheckOptions {
            read_data: tessera_core::check::ReadData::All,
        })
        .unwrap();
    assert!(c.ok(), "{:?}", c.problems);
}
