//! The repository writer lock.
//!
//! One writer at a time: the lock is the object [`LOCK_KEY`], created with
//! [`Backend::create_new`] so that exactly one of two racing writers gets it.
//! It records who holds it so that a refused writer can tell the operator
//! whom to wait for, and whether the holder is dead (a stale lock from a
//! crash, broken with `tessera unlock`). Readers take no lock.

use crate::backend::Backend;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Key of the lock object.
pub const LOCK_KEY: &str = "lock";

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
    backend: Arc<dyn Backend>,
    key: &'static str,
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
    pub fn acquire(backend: Arc<dyn Backend>, command: &str) -> Result<RepoLock> {
        static ACQUISITIONS: AtomicU64 = AtomicU64::new(0);
        let info = LockInfo {
            owner: current_owner(),
            pid: std::process::id(),
            host: current_host(),
            time: now_secs(),
            command: command.to_string(),
        };
        let token = format!(
            "{}-{}-{}",
            info.pid,
            ACQUISITIONS.fetch_add(1, Ordering::Relaxed),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let stored = serde_json::to_vec(&StoredLock { info: &info, token })
            .map_err(|e| Error::invalid(format!("cannot encode the lock: {e}")))?;
        // A holder may release between our failed create and our read; then
        // simply try again (a few times, to not spin against a flapping lock).
        for _ in 0..3 {
            if backend.create_new(LOCK_KEY, &stored)? {
                return Ok(RepoLock {
                    backend,
                    key: LOCK_KEY,
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
        match self.backend.get(self.key) {
            Ok(current) if current == self.stored => {
                self.backend.delete(self.key)?;
                self.backend.sync()
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
pub fn read_lock(backend: &dyn Backend) -> Result<Option<LockInfo>> {
    let bytes = match backend.get(LOCK_KEY) {
        Ok(b) => b,
        Err(Error::MissingObject(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::corrupt(
            format!("lock {}/{LOCK_KEY}", backend.location()),
            format!("not a valid lock record: {e}"),
        )
    })
}

/// Remove the lock unconditionally (`tessera unlock`); returns what it said,
/// if it could be parsed. The removal is synced.
pub fn break_lock(backend: &dyn Backend) -> Result<Option<LockInfo>> {
    let bytes = match backend.get(LOCK_KEY) {
        Ok(b) => b,
        Err(Error::MissingObject(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    backend.delete(LOCK_KEY)?;
    backend.sync()?;
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
        format_utc(info.time),
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

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `YYYY-MM-DD HH:MM:SS UTC` for unix seconds, without a date crate.
pub(crate) fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01.
///
/// Works in 400-year eras (146 097 days each, the calendar's full cycle)
/// with years starting on March 1st, so the leap day is the last day of a
/// year and month lengths follow a simple linear formula.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    const DAYS_PER_ERA: i64 = 146_097;
    // 1970-01-01 is day 719 468 counted from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(DAYS_PER_ERA);
    let day_of_era = z.rem_euclid(DAYS_PER_ERA); // 0..=146096
                                                 // Years into the era: remove the leap days of every 4th, 100th and 400th
                                                 // year before dividing by 365.
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524
        - day_of_era / (DAYS_PER_ERA - 1))
        / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March: 31,30,31,30,31 repeating, i.e. 153 days per 5 months.
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = era * 400 + year_of_era + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{LocalBackend, MemoryBackend};

    fn mem() -> Arc<dyn Backend> {
        Arc::new(MemoryBackend::new())
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
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(1_795_370_400), "2026-11-22 18:00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(format_utc(4_107_542_400), "2100-03-01 00:00:00 UTC");
        assert_eq!(format_utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
    }

    /// Every day from 1900 to 2400 follows the previous one by the calendar.
    #[test]
    fn civil_days_are_consecutive() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut prev = civil_from_days(-25_567); // 1900-01-01
        assert_eq!(prev, (1900, 1, 1));
        for days in -25_566..157_000 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = prev;
            let expected = if pd < month_len(py, pm) {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, d), expected, "day {days}");
            prev = (y, m, d);
        }
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
        let b: Arc<dyn Backend> = Arc::new(LocalBackend::create(dir.path()).unwrap());
        let held = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        assert!(dir.path().join(LOCK_KEY).is_file());
        assert!(RepoLock::acquire(b.clone(), "tessera backup").is_err());
        held.release().unwrap();
        assert!(!dir.path().join(LOCK_KEY).exists());
        RepoLock::acquire(b, "tessera backup")
            .unwrap()
            .release()
            .unwrap();
    }

    #[test]
    fn stale_lock_is_reported_with_unlock_hint() {
        let b = mem();
        let pid = dead_pid();
        b.create_new(LOCK_KEY, &fake_lock(pid, &current_host()))
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
        b.put(LOCK_KEY, b"\x00garbage{").unwrap();
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
