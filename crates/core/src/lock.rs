//! The repository writer lock.
//!
//! One writer at a time: the lock is the object [`ObjectKey::Lock`], created
//! with [`ObjectStore::put_if_absent`] so that exactly one of two racing
//! writers gets it. It is not sealed (see [`crate::seal`]): whoever can reach
//! the store must be able to tell who holds it.
//! It records who holds it so that a refused writer can tell the operator
//! whom to wait for, and whether the holder is dead (a stale lock from a
//! crash, broken with `tessera unlock`). Readers take no lock.

use crate::backend::{ObjectKey, ObjectStore};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Who holds the lock.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LockInfo {
    /// User name from `$USER` (or `$LOGNAME`), else `uid <n>`.
    pub owner: String,
    pub pid: u32,
    pub host: String,
    /// Unix seconds when the lock was taken.
    pub time: u64,
    pub command: String,
}

/// The stored form: the info plus a token unique to this acquisition, so a
/// holder releasing its lock can tell it apart from a lock someone else took
/// after breaking its own (same pid, host and second are all possible).
/// Readers of [`LockInfo`] ignore the token.
#[derive(serde::Serialize)]
struct StoredLock<'a> {
    #[serde(flatten)]
    info: &'a LockInfo,
    token: String,
}

/// The exclusive writer lock; removed by [`release`](RepoLock::release) or,
/// best effort, on drop.
pub struct RepoLock {
    backend: Arc<dyn ObjectStore>,
    info: LockInfo,
    /// Exactly what was stored, to recognise our own lock.
    stored: Vec<u8>,
    released: bool,
}

impl std::fmt::Debug for RepoLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoLock")
            .field("location", &self.backend.location())
            .field("info", &self.info)
            .finish()
    }
}

impl RepoLock {
    /// Take the exclusive writer lock, or fail with [`Error::Locked`] saying
    /// who holds it (and whether that holder is gone).
    pub fn acquire(backend: Arc<dyn ObjectStore>, command: &str) -> Result<RepoLock> {
        static ACQUISITIONS: AtomicU64 = AtomicU64::new(0);
        let info = LockInfo {
            owner: current_owner(),
            pid: std::process::id(),
            host: current_host(),
            time: crate::clock::now(),
            command: command.to_string(),
        };
        let token = format!(
            "{}-{}-{}",
            info.pid,
            ACQUISITIONS.fetch_add(1, Ordering::Relaxed),
            crate::clock::now_nanos()
        );
        let stored = serde_json::to_vec(&StoredLock { info: &info, token })
            .map_err(|e| Error::invalid(format!("cannot encode the lock: {e}")))?;
        // A holder may release between our failed create and our read; then
        // simply try again (a few times, to not spin against a flapping lock).
        for _ in 0..3 {
            if backend.put_if_absent(&ObjectKey::Lock, &stored)? {
                return Ok(RepoLock {
                    backend,
                    info,
                    stored,
                    released: false,
                });
            }
            match read_lock(&*backend) {
                Ok(Some(holder)) => return Err(Error::Locked(held_message(&holder))),
                Ok(None) => {}
                Err(Error::Corrupt { reason, .. }) => {
                    return Err(Error::Locked(format!(
                        "repository {} is locked by a corrupt lock ({reason}); \
                         if no other tessera process uses it, run `tessera unlock` to remove the lock",
                        backend.location()
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Locked(format!(
            "repository {} is being locked and unlocked by another process; try again",
            backend.location()
        )))
    }

    /// Who this lock says holds the repository (us).
    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    /// Remove the lock. If it was broken (`tessera unlock`) and possibly
    /// taken by another writer meanwhile, the other writer's lock is left
    /// alone. The removal is synced so a crash cannot bring the lock back.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.remove()
    }

    fn remove(&self) -> Result<()> {
        match self.backend.get(&ObjectKey::Lock) {
            Ok(current) if current == self.stored => {
                self.backend.delete(&ObjectKey::Lock)?;
                self.backend.barrier()
            }
            Ok(_) | Err(Error::MissingObject(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for RepoLock {
    /// A writer that errors out still releases the lock; a failure here
    /// (such as a backend that died) leaves a lock for `tessera unlock`.
    fn drop(&mut self) {
        if !self.released {
            self.released = true;
            let _ = self.remove();
        }
    }
}

/// Read the current lock, if any. `Ok(None)` when unlocked; an unparsable
/// lock is `Error::Corrupt` naming it.
pub fn read_lock(backend: &dyn ObjectStore) -> Result<Option<LockInfo>> {
    let bytes = match backend.get(&ObjectKey::Lock) {
        Ok(b) => b,
        Err(Error::MissingObject(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::corrupt(
            format!("lock {}/{}", backend.location(), ObjectKey::Lock),
            format!("not a valid lock record: {e}"),
        )
    })
}

/// Remove the lock unconditionally (`tessera unlock`); returns what it said,
/// if it could be parsed. The removal is synced.
pub fn break_lock(backend: &dyn ObjectStore) -> Result<Option<LockInfo>> {
    let bytes = match backend.get(&ObjectKey::Lock) {
        Ok(b) => b,
        Err(Error::MissingObject(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    backend.delete(&ObjectKey::Lock)?;
    backend.barrier()?;
    Ok(serde_json::from_slice(&bytes).ok())
}

/// Whether a lock is stale: taken on this host by a process that no longer
/// runs. A lock from another host is never presumed stale, since its process
/// cannot be checked from here.
pub fn is_stale(info: &LockInfo) -> bool {
    info.host == current_host() && !pid_alive(info.pid)
}

fn pid_alive(pid: u32) -> bool {
    // pid 0 and negative values would address process groups, never a holder.
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    // EPERM means it exists but belongs to someone else.
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The one-line refusal shown to a second writer.
fn held_message(info: &LockInfo) -> String {
    let mut msg = format!(
        "repository is locked by {} (pid {} on host {}, since {}, running `{}`)",
        info.owner,
        info.pid,
        info.host,
        crate::clock::format_utc(info.time),
        info.command
    );
    if is_stale(info) {
        msg.push_str(&format!(
            "; the lock is stale (process {} no longer runs on this host): run `tessera unlock` to break it",
            info.pid
        ));
    }
    msg
}

fn current_owner() -> String {
    for var in ["USER", "LOGNAME"] {
        if let Ok(name) = std::env::var(var) {
            if !name.is_empty() {
                return name;
            }
        }
    }
    // SAFETY: getuid cannot fail and has no preconditions.
    format!("uid {}", unsafe { libc::getuid() })
}

fn current_host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{LocalStore, MemoryStore};

    fn mem() -> Arc<dyn ObjectStore> {
        Arc::new(MemoryStore::new())
    }

    fn fake_lock(pid: u32, host: &str) -> Vec<u8> {
        serde_json::to_vec(&LockInfo {
            owner: "alice".into(),
            pid,
            host: host.into(),
            time: 1_795_370_400, // 2026-11-22 18:00:00 UTC
            command: "tessera backup".into(),
        })
        .unwrap()
    }

    /// A pid that surely belongs to no running process: a child we reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn acquire_refuses_second_writer_and_release_allows_another() {
        let b = mem();
        let first = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        let info = read_lock(&*b).unwrap().expect("locked");
        assert_eq!(&info, first.info());
        assert_eq!(info.pid, std::process::id());
        assert_eq!(info.command, "tessera backup");

        let err = RepoLock::acquire(b.clone(), "tessera gc").unwrap_err();
        assert!(matches!(err, Error::Locked(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("repository is locked by "), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("on host {}", current_host())),
            "{msg}"
        );
        assert!(
            msg.contains("running `tessera backup`") && msg.contains(" UTC"),
            "{msg}"
        );
        assert!(!msg.contains("stale") && !msg.contains('\n'), "{msg}");

        first.release().unwrap();
        assert_eq!(read_lock(&*b).unwrap(), None);
        let second = RepoLock::acquire(b.clone(), "tessera gc").unwrap();
        drop(second);
        assert_eq!(read_lock(&*b).unwrap(), None, "drop releases the lock");
    }

    #[test]
    fn lock_works_on_a_local_directory() {
        let dir = tempfile::tempdir().unwrap();
        let b: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(dir.path()).unwrap());
        let held = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        assert!(dir.path().join(ObjectKey::Lock.name()).is_file());
        assert!(RepoLock::acquire(b.clone(), "tessera backup").is_err());
        held.release().unwrap();
        assert!(!dir.path().join(ObjectKey::Lock.name()).exists());
        RepoLock::acquire(b, "tessera backup")
            .unwrap()
            .release()
            .unwrap();
    }

    #[test]
    fn stale_lock_is_reported_with_unlock_hint() {
        let b = mem();
        let pid = dead_pid();
        b.put_if_absent(&ObjectKey::Lock, &fake_lock(pid, &current_host()))
            .unwrap();
        let info = read_lock(&*b).unwrap().unwrap();
        assert!(is_stale(&info));
        let msg = RepoLock::acquire(b.clone(), "tessera backup")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(&format!("pid {pid}")) && msg.contains("stale"),
            "{msg}"
        );
        assert!(msg.contains("tessera unlock"), "{msg}");
        assert!(msg.contains("since 2026-11-22 18:00:00 UTC"), "{msg}");
        // Still locked: breaking a stale lock is the operator's decision.
        assert!(read_lock(&*b).unwrap().is_some());
    }

    #[test]
    fn live_or_foreign_locks_are_not_stale() {
        let mut info: LockInfo =
            serde_json::from_slice(&fake_lock(std::process::id(), &current_host())).unwrap();
        assert!(!is_stale(&info), "our own process is alive");
        info.pid = 1; // init exists (kill may say EPERM, which still means alive)
        assert!(!is_stale(&info));
        info.pid = dead_pid();
        info.host = format!("{}-elsewhere", current_host());
        assert!(!is_stale(&info), "another host's pid cannot be checked");
    }

    #[test]
    fn corrupt_lock_is_reported_and_can_be_broken() {
        let b = mem();
        b.put(&ObjectKey::Lock, b"\x00garbage{").unwrap();
        let err = read_lock(&*b).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("lock"), "{err}");
        let msg = RepoLock::acquire(b.clone(), "tessera backup")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("corrupt") && msg.contains("tessera unlock"),
            "{msg}"
        );
        assert_eq!(break_lock(&*b).unwrap(), None);
        assert_eq!(read_lock(&*b).unwrap(), None);
        RepoLock::acquire(b, "tessera backup").unwrap();
    }

    #[test]
    fn break_lock_returns_the_holder_and_unlocks() {
        let b = mem();
        assert_eq!(break_lock(&*b).unwrap(), None, "nothing to break");
        let held = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        let removed = break_lock(&*b).unwrap().expect("was locked");
        assert_eq!(&removed, held.info());
        assert_eq!(read_lock(&*b).unwrap(), None);
        // Someone else takes the lock; the broken holder must not remove it.
        let other = RepoLock::acquire(b.clone(), "tessera gc").unwrap();
        held.release().unwrap();
        assert_eq!(read_lock(&*b).unwrap().as_ref(), Some(other.info()));
    }
}
