//! The repository locks: shared for backups, GCs and readers, exclusive
//! only where it must be (`init`, MFDedup writers, removing leftovers).
//!
//! * **Exclusive**: the object [`ObjectKey::Lock`], created with
//!   [`ObjectStore::put_if_absent`] so that exactly one of two racing
//!   acquirers gets it; then the acquirer lists the shared locks and backs
//!   off (removes its own) if a live one exists.
//! * **Shared**: one object per holder, [`ObjectKey::SharedLock`] named by
//!   the acquisition's token; the acquirer writes it, then reads the
//!   exclusive lock and backs off if a live one exists (waiting a while for
//!   a [`brief`](LockInfo::brief) one: a writer removing leftovers).
//!   Write-then-check on both sides means an exclusive and a shared holder
//!   never both proceed (at worst both back off).
//! * **GC**: GCs run one at a time ([`RepoLock::acquire_gc`], the object
//!   `gc/lock`), beside the shared lock every GC also holds.
//!
//! Locks are not sealed (see [`crate::seal`]): whoever can reach the store
//! must be able to tell who holds them.
//!
//! It records who holds it, so that a refused writer can tell the operator
//! whom to wait for, and so that a lock left by a crash (a `kill -9`, an OOM
//! kill, a reboot) never needs a manual step:
//!
//! * A lock taken **on this host** is broken automatically when its holder is
//!   provably dead: its process no longer exists, or its pid now belongs to
//!   another process (the start time in `/proc/PID/stat` differs from the one
//!   recorded in the lock, or, for a lock that did not record it, the process
//!   started after the lock was taken).
//! * A lock from **another host** (or from another pid namespace of this
//!   host name, such as another container) cannot be checked from here. Its holder
//!   rewrites the lock's `refreshed` time every [`REFRESH_EVERY`] while it
//!   runs (a background thread); a lock not refreshed for [`STALE_AFTER`] is
//!   broken automatically, otherwise only `tessera unlock` breaks it.
//!
//! Either way the acquirer learns what it broke ([`RepoLock::broken`]), so
//! the command can say so in one line. The same rules judge every kind of
//! lock: a stale shared lock is broken by the next exclusive acquirer, a
//! stale exclusive one by the next shared acquirer.

use crate::backend::{KeyKind, ObjectKey, ObjectStore};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a running holder rewrites its lock's `refreshed` time.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5 * 60);
/// A lock of another host whose `refreshed` time is older than this is
/// presumed abandoned (six missed refreshes).
pub const STALE_AFTER: Duration = Duration::from_secs(30 * 60);
/// Slack for comparing a process start time (boot time plus clock ticks,
/// which can differ from the wall clock by a second) with the lock's time.
const START_SLACK: u64 = 2;

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
    /// Unix seconds of the holder's last refresh (0 in locks written before
    /// refreshing existed: then `time` counts).
    #[serde(default)]
    pub refreshed: u64,
    /// The holder's start time in clock ticks since boot (field 22 of
    /// `/proc/PID/stat`), to tell the holder from a later process that
    /// reuses its pid. Absent where `/proc` is not available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ticks: Option<u64>,
    /// The holder's pid namespace (`/proc/self/ns/pid`): a holder in
    /// another container of the same host name has pids this process
    /// cannot see, so its lock is judged as another host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<String>,
    /// A shared lock (one of several holders).
    #[serde(default, skip_serializing_if = "is_false")]
    pub shared: bool,
    /// A shared holder that reads containers (restore, ls, check): GC waits
    /// for it before deleting containers it may be reading.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reader: bool,
    /// An exclusive lock held for moments only (a writer removing
    /// leftovers): shared acquirers wait for it instead of failing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub brief: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl LockInfo {
    /// When the holder last showed it was alive.
    pub fn last_seen(&self) -> u64 {
        self.refreshed.max(self.time)
    }
}

/// Why a lock was found to be stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Staleness {
    /// Same host, and no process has the holder's pid.
    ProcessGone,
    /// Same host, and the pid belongs to a process started after the lock.
    PidReused,
    /// Another host, and the lock was not refreshed for [`STALE_AFTER`].
    NotRefreshed,
    /// This very process took it and has dropped it since, but could not
    /// remove it (its backend failed at that moment).
    Abandoned,
}

impl std::fmt::Display for Staleness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Staleness::ProcessGone => f.write_str("its process no longer runs on this host"),
            Staleness::PidReused => f.write_str("its pid now belongs to a process started later"),
            Staleness::NotRefreshed => write!(
                f,
                "it was not refreshed for {} minutes",
                STALE_AFTER.as_secs() / 60
            ),
            Staleness::Abandoned => {
                f.write_str("this process dropped it earlier but could not remove it")
            }
        }
    }
}

/// A stale lock that [`RepoLock::acquire`] removed before taking its own.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BrokenLock {
    pub holder: LockInfo,
    pub why: Staleness,
}

impl BrokenLock {
    /// The one-line notice a command prints.
    pub fn notice(&self) -> String {
        let h = &self.holder;
        format!(
            "broke the stale lock of {} (pid {} on host {}, since {}, running `{}`): {}",
            h.owner,
            h.pid,
            h.host,
            crate::clock::format_utc(h.time),
            h.command,
            self.why
        )
    }
}

/// The stored form: the info plus a token unique to this acquisition, so a
/// holder releasing its lock can tell it apart from a lock someone else took
/// after breaking its own (same pid, host and second are all possible).
/// Readers of [`LockInfo`] ignore the token.
#[derive(serde::Serialize)]
struct StoredLock<'a> {
    #[serde(flatten)]
    info: &'a LockInfo,
    token: &'a str,
}

/// What the holder and its refresh thread share.
struct Held {
    backend: Arc<dyn ObjectStore>,
    /// Where the lock is: [`ObjectKey::Lock`], a shared lock, or `gc/lock`.
    key: ObjectKey,
    info: LockInfo,
    token: String,
    /// Exactly what is stored now, to recognise our own lock.
    stored: Vec<u8>,
}

impl Held {
    fn encode(info: &LockInfo, token: &str) -> Result<Vec<u8>> {
        serde_json::to_vec(&StoredLock { info, token })
            .map_err(|e| Error::invalid(format!("cannot encode the lock: {e}")))
    }

    /// Rewrite the lock with a new `refreshed` time, unless it is no longer
    /// ours (broken by `tessera unlock`, perhaps taken by another writer).
    fn refresh(&mut self, now: u64) -> Result<bool> {
        match self.backend.get(&self.key) {
            Ok(current) if current == self.stored => {}
            Ok(_) | Err(Error::MissingObject(_)) => return Ok(false),
            Err(e) => return Err(e),
        }
        let mut info = self.info.clone();
        info.refreshed = now;
        let stored = Held::encode(&info, &self.token)?;
        self.backend.put(&self.key, &stored)?;
        self.info = info;
        self.stored = stored;
        Ok(true)
    }
}

/// The exclusive writer lock; removed by [`release`](RepoLock::release) or,
/// best effort, on drop. While it is held, a thread refreshes it every
/// [`REFRESH_EVERY`].
pub struct RepoLock {
    held: Arc<Mutex<Held>>,
    broken: Option<BrokenLock>,
    refresher: Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
    released: bool,
}

impl std::fmt::Debug for RepoLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("RepoLock")
            .field("location", &held.backend.location())
            .field("info", &held.info)
            .finish()
    }
}

impl RepoLock {
    /// Take the exclusive lock, breaking a stale one (see the module
    /// docs; [`broken`](Self::broken) tells what was broken), or fail with
    /// [`Error::Locked`] saying who holds it (the exclusive lock or a live
    /// shared one).
    pub fn acquire(backend: Arc<dyn ObjectStore>, command: &str) -> Result<RepoLock> {
        Self::acquire_exclusive(backend, command, false)
    }

    /// [`acquire`](Self::acquire), marked as held for moments only (shared
    /// acquirers wait for it): a writer removing leftovers before it
    /// [`downgrade`](Self::downgrade)s.
    pub fn acquire_brief(backend: Arc<dyn ObjectStore>, command: &str) -> Result<RepoLock> {
        Self::acquire_exclusive(backend, command, true)
    }

    fn acquire_exclusive(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        brief: bool,
    ) -> Result<RepoLock> {
        let mut info = new_info(command);
        info.brief = brief;
        let (held, mut broken) = take_key(backend.clone(), ObjectKey::Lock, info)?;
        let lock = RepoLock::start(held, None);
        // Shared holders wrote their lock before reading ours: any that we
        // do not see now will see ours and back off.
        for key in backend.list(KeyKind::SharedLock)? {
            let Some(holder) = read_holder(&*backend, &key)? else {
                continue;
            };
            match staleness(&holder.info, crate::clock::now()) {
                Some(why) => {
                    holder.remove_if_unchanged(&*backend, &key)?;
                    broken.get_or_insert(BrokenLock {
                        holder: holder.info,
                        why,
                    });
                }
                None => return Err(Error::Locked(held_message(&holder.info))),
            }
        }
        let mut lock = lock;
        lock.broken = broken;
        Ok(lock)
    }

    /// Take a shared lock: backups, GCs and readers (`reader`) hold one at
    /// once. Fails with [`Error::Locked`] while a live exclusive lock is
    /// held (after waiting up to [`BRIEF_WAIT`] for a brief one); breaks a
    /// stale exclusive lock.
    pub fn acquire_shared(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        reader: bool,
    ) -> Result<RepoLock> {
        let mut info = new_info(command);
        info.shared = true;
        info.reader = reader;
        let token = new_token(&info);
        let key = ObjectKey::SharedLock(token.clone());
        let stored = Held::encode(&info, &token)?;
        if !backend.put_if_absent(&key, &stored)? {
            return Err(Error::invalid(format!("lock token {token} taken twice")));
        }
        let lock = RepoLock::start(
            Held {
                backend: backend.clone(),
                key,
                info,
                token,
                stored,
            },
            None,
        );
        let started = std::time::Instant::now();
        let mut broken = None;
        while let Some(holder) = read_holder(&*backend, &ObjectKey::Lock)? {
            match staleness(&holder.info, crate::clock::now()) {
                Some(why) => {
                    holder.remove_if_unchanged(&*backend, &ObjectKey::Lock)?;
                    broken.get_or_insert(BrokenLock {
                        holder: holder.info,
                        why,
                    });
                }
                None if holder.info.brief && started.elapsed() < BRIEF_WAIT => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                None => return Err(Error::Locked(held_message(&holder.info))),
            }
        }
        let mut lock = lock;
        lock.broken = broken;
        Ok(lock)
    }

    /// The GC lock: one GC at a time (each also holds a shared lock).
    pub fn acquire_gc(backend: Arc<dyn ObjectStore>, command: &str) -> Result<RepoLock> {
        let (held, broken) = take_key(backend, ObjectKey::Gc("lock".into()), new_info(command))?;
        Ok(RepoLock::start(held, broken))
    }

    /// Turn an exclusive lock into a shared one (a writer that removed
    /// leftovers alone and now lets others in): the shared lock is written
    /// before the exclusive one goes, so no exclusive acquirer slips in.
    pub fn downgrade(self, reader: bool) -> Result<RepoLock> {
        let (backend, mut info) = {
            let h = self.held.lock().unwrap_or_else(|p| p.into_inner());
            (h.backend.clone(), h.info.clone())
        };
        info.shared = true;
        info.reader = reader;
        info.brief = false;
        let token = new_token(&info);
        let key = ObjectKey::SharedLock(token.clone());
        let stored = Held::encode(&info, &token)?;
        backend.put(&key, &stored)?;
        backend.barrier()?;
        let broken = self.broken.clone();
        let shared = RepoLock::start(
            Held {
                backend,
                key,
                info,
                token,
                stored,
            },
            broken,
        );
        self.release()?;
        Ok(shared)
    }

    /// Keep an exclusive lock taken [`brief`](Self::acquire_brief) for
    /// long after all (an MFDedup writer): shared acquirers stop waiting.
    pub fn settle(&self) -> Result<()> {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        h.info.brief = false;
        let stored = Held::encode(&h.info, &h.token)?;
        h.backend.put(&h.key, &stored)?;
        h.backend.barrier()?;
        h.stored = stored;
        Ok(())
    }

    /// This acquisition's token (names a shared lock; online GC's
    /// resurrection records carry it to tell live writers from gone ones).
    pub fn token(&self) -> String {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .token
            .clone()
    }

    fn start(held: Held, broken: Option<BrokenLock>) -> RepoLock {
        live_tokens().insert(held.token.clone());
        let held = Arc::new(Mutex::new(held));
        let (stop, stopped) = mpsc::channel::<()>();
        let shared = held.clone();
        // Without a thread the lock still works; it just ages like a crashed
        // holder's for other hosts.
        let thread = std::thread::Builder::new()
            .name("tessera-lock-refresh".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(REFRESH_EVERY)
                {
                    let mut h = shared.lock().unwrap_or_else(|p| p.into_inner());
                    // A failed refresh is retried at the next tick; the lock
                    // only looks stale to others after STALE_AFTER.
                    let _ = h.refresh(crate::clock::now());
                }
            })
            .ok();
        RepoLock {
            held,
            broken,
            refresher: thread.map(|t| (stop, t)),
            released: false,
        }
    }

    /// Who this lock says holds the repository (us).
    pub fn info(&self) -> LockInfo {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .info
            .clone()
    }

    /// The stale lock this acquisition broke, if any.
    pub fn broken(&self) -> Option<&BrokenLock> {
        self.broken.as_ref()
    }

    /// Rewrite the lock's `refreshed` time now (the refresh thread does this
    /// every [`REFRESH_EVERY`]). `Ok(false)` if the lock is no longer ours.
    pub fn refresh(&self) -> Result<bool> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refresh(crate::clock::now())
    }

    /// Remove the lock. If it was broken (`tessera unlock`) and possibly
    /// taken by another writer meanwhile, the other writer's lock is left
    /// alone. The removal is synced so a crash cannot bring the lock back.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.stop_refreshing();
        self.remove()
    }

    /// Stop holding the lock without removing it: a writer that could not
    /// put the sweep marker (see [`crate::sweep`]) lets its lock go stale,
    /// so that whoever breaks it puts the marker.
    pub fn abandon(mut self) {
        self.released = true;
        self.stop_refreshing();
    }

    fn stop_refreshing(&mut self) {
        if let Some((stop, thread)) = self.refresher.take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }

    fn remove(&self) -> Result<()> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.backend.get(&held.key) {
            Ok(current) if current == held.stored => {
                held.backend.delete(&held.key)?;
                held.backend.barrier()
            }
            Ok(_) | Err(Error::MissingObject(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for RepoLock {
    /// A writer that errors out still releases the lock; a failure here
    /// (such as a backend that died) leaves a lock that goes stale.
    fn drop(&mut self) {
        self.stop_refreshing();
        if !self.released {
            self.released = true;
            let _ = self.remove();
        }
        let token = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .token
            .clone();
        live_tokens().remove(&token);
    }
}

/// How long a shared acquirer waits for a [`brief`](LockInfo::brief)
/// exclusive lock (a writer removing leftovers) before giving up.
pub const BRIEF_WAIT: Duration = Duration::from_secs(120);

fn new_info(command: &str) -> LockInfo {
    let now = crate::clock::now();
    LockInfo {
        owner: current_owner(),
        pid: std::process::id(),
        host: current_host(),
        time: now,
        command: command.to_string(),
        refreshed: now,
        start_ticks: process_start_ticks(std::process::id()),
        pid_ns: pid_namespace(),
        shared: false,
        reader: false,
        brief: false,
    }
}

/// Tokens of the locks this process holds now: a lock object that names
/// this process but no live token was dropped by it and left behind (its
/// removal failed), so it may be taken over.
fn live_tokens() -> std::sync::MutexGuard<'static, std::collections::HashSet<String>> {
    static LIVE: std::sync::OnceLock<Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Whether the lock object `holder` was left behind by this process.
fn abandoned_here(holder: &Holder) -> bool {
    if holder.info.pid != std::process::id() || holder.info.host != current_host() {
        return false;
    }
    holder
        .token
        .as_ref()
        .is_some_and(|t| !live_tokens().contains(t))
}

/// A lock object as read: who holds it, its acquisition's token (absent
/// in locks written before tokens) and its exact bytes.
struct Holder {
    info: LockInfo,
    token: Option<String>,
    bytes: Vec<u8>,
}

impl Holder {
    /// Remove the stale lock object `key` if it still is exactly the one
    /// judged (if it changed meanwhile, its new holder is judged afresh).
    /// A writer's lock left behind means a crash: the sweep marker goes
    /// first, so the next writer alone removes what it left.
    fn remove_if_unchanged(&self, backend: &dyn ObjectStore, key: &ObjectKey) -> Result<()> {
        if backend.get(key).ok().as_deref() == Some(&self.bytes[..]) {
            if !self.info.reader {
                crate::sweep::mark(backend, &crashed(&self.info))?;
            }
            backend.delete(key)?;
            backend.barrier()?;
        }
        Ok(())
    }
}

/// Read the lock object `key`: `Ok(None)` when there is none (released
/// meanwhile); one that cannot be parsed is [`Error::Locked`] telling the
/// operator to run `tessera unlock`.
fn read_holder(backend: &dyn ObjectStore, key: &ObjectKey) -> Result<Option<Holder>> {
    #[derive(serde::Deserialize)]
    struct Stored {
        #[serde(flatten)]
        info: LockInfo,
        #[serde(default)]
        token: Option<String>,
    }
    let bytes = match backend.get(key) {
        Ok(b) => b,
        Err(Error::MissingObject(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    match serde_json::from_slice::<Stored>(&bytes) {
        Ok(s) => Ok(Some(Holder {
            info: s.info,
            token: s.token,
            bytes,
        })),
        Err(e) => {
            let (what, remove) = match key {
                ObjectKey::SharedLock(_) => (format!("has a corrupt lock {key}"), "it"),
                _ => ("is locked by a corrupt lock".to_string(), "the lock"),
            };
            Err(Error::Locked(format!(
                "repository {} {what} (not a valid lock record: {e}); \
                 if no other tessera process uses it, run `tessera unlock` to remove {remove}",
                backend.location()
            )))
        }
    }
}

fn new_token(info: &LockInfo) -> String {
    static ACQUISITIONS: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        info.pid,
        ACQUISITIONS.fetch_add(1, Ordering::Relaxed),
        crate::clock::now_nanos()
    )
}

/// Create the single lock object `key`, breaking a stale one (the first
/// broken is reported).
fn take_key(
    backend: Arc<dyn ObjectStore>,
    key: ObjectKey,
    info: LockInfo,
) -> Result<(Held, Option<BrokenLock>)> {
    let token = new_token(&info);
    let stored = Held::encode(&info, &token)?;
    let mut broken = None;
    // A holder may release between our failed create and our read; then
    // simply try again (a few times, to not spin against a flapping lock).
    for _ in 0..3 {
        if backend.put_if_absent(&key, &stored)? {
            let held = Held {
                backend,
                key,
                info,
                token,
                stored,
            };
            return Ok((held, broken));
        }
        let Some(holder) = read_holder(&*backend, &key)? else {
            continue;
        };
        let why = staleness(&holder.info, crate::clock::now())
            .or_else(|| abandoned_here(&holder).then_some(Staleness::Abandoned));
        match why {
            Some(why) if broken.is_none() => {
                // If it changed meanwhile, the next round judges the new one.
                holder.remove_if_unchanged(&*backend, &key)?;
                broken = Some(BrokenLock {
                    holder: holder.info,
                    why,
                });
            }
            _ => return Err(Error::Locked(held_message(&holder.info))),
        }
    }
    Err(Error::Locked(format!(
        "repository {} is being locked and unlocked by another process; try again",
        backend.location()
    )))
}

/// The live shared holders (token, info); stale and unreadable ones are
/// left out.
pub fn shared_holders(backend: &dyn ObjectStore) -> Result<Vec<(String, LockInfo)>> {
    let mut out = Vec::new();
    for key in backend.list(KeyKind::SharedLock)? {
        let ObjectKey::SharedLock(token) = &key else {
            continue;
        };
        if let Ok(Some(h)) = read_holder(backend, &key) {
            if !is_stale(&h.info) {
                out.push((token.clone(), h.info));
            }
        }
    }
    Ok(out)
}

fn parse(backend: &dyn ObjectStore, bytes: &[u8]) -> Result<LockInfo> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::corrupt(
            format!("lock {}/{}", backend.location(), ObjectKey::Lock),
            format!("not a valid lock record: {e}"),
        )
    })
}

/// Read the current lock, if any. `Ok(None)` when unlocked; an unparsable
/// lock is `Error::Corrupt` naming it.
pub fn read_lock(backend: &dyn ObjectStore) -> Result<Option<LockInfo>> {
    match backend.get(&ObjectKey::Lock) {
        Ok(b) => parse(backend, &b).map(Some),
        Err(Error::MissingObject(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Why the sweep marker is put for a writer's lock that was broken.
fn crashed(info: &LockInfo) -> String {
    format!(
        "the lock of `{}` (pid {} on host {}) was broken: it may have left objects",
        info.command, info.pid, info.host
    )
}

/// Remove every lock unconditionally (`tessera unlock`: the exclusive
/// lock, the shared ones and the GC lock); returns what the exclusive one
/// said (else the first shared one), if it could be parsed. The removal is
/// synced. A writer's lock among them puts the sweep marker first.
pub fn break_lock(backend: &dyn ObjectStore) -> Result<Option<LockInfo>> {
    let mut keys = vec![ObjectKey::Lock];
    keys.extend(backend.list(KeyKind::SharedLock)?);
    keys.push(ObjectKey::Gc("lock".into()));
    let mut said = None;
    let mut any = false;
    for key in keys {
        let bytes = match backend.get(&key) {
            Ok(b) => b,
            Err(Error::MissingObject(_)) => continue,
            Err(e) => return Err(e),
        };
        let info: Option<LockInfo> = serde_json::from_slice(&bytes).ok();
        if !info.as_ref().is_some_and(|i| i.reader) {
            let why = info.as_ref().map_or_else(
                || format!("an unreadable lock {key} was broken: it may have left objects"),
                crashed,
            );
            crate::sweep::mark(backend, &why)?;
        }
        backend.delete(&key)?;
        any = true;
        if said.is_none() {
            said = info;
        }
    }
    if any {
        backend.barrier()?;
    }
    Ok(said)
}

/// Whether a lock is stale at `now` (unix seconds), and why; `None` while
/// its holder may be alive. See the module docs for the rules.
pub fn staleness(info: &LockInfo, now: u64) -> Option<Staleness> {
    let same_ns = info.pid_ns.is_none() || info.pid_ns == pid_namespace();
    if info.host != current_host() || !same_ns {
        let age = now.saturating_sub(info.last_seen());
        return (age > STALE_AFTER.as_secs()).then_some(Staleness::NotRefreshed);
    }
    if !pid_alive(info.pid) {
        return Some(Staleness::ProcessGone);
    }
    let Some(ticks) = process_start_ticks(info.pid) else {
        return None; // alive, and nothing more can be learned
    };
    let reused = match info.start_ticks {
        Some(recorded) => recorded != ticks,
        None => start_time(ticks).is_some_and(|t| t > info.time + START_SLACK),
    };
    reused.then_some(Staleness::PidReused)
}

/// Whether a lock is stale now (see [`staleness`]).
pub fn is_stale(info: &LockInfo) -> bool {
    staleness(info, crate::clock::now()).is_some()
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
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    // A zombie (killed, not yet reaped by its parent) still answers
    // signal 0 but never refreshes or releases its lock again.
    exists && !is_zombie(pid as u32)
}

/// Whether `/proc` says process `pid` has exited and awaits its parent.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| parse_state(&stat))
        .is_some_and(|state| state == 'Z' || state == 'X')
}

fn parse_state(stat: &str) -> Option<char> {
    // After the name in parentheses: the state letter is field 3.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// This process's pid namespace, as `/proc/self/ns/pid` names it.
fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Field 22 of `/proc/PID/stat`: the process's start in clock ticks since
/// boot. The command name (field 2) may hold spaces and parentheses, so
/// fields are counted after its last `)`.
fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_ticks(&stat)
}

fn parse_start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, so starttime (22) is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Unix seconds of a start time in ticks since boot (`btime` of `/proc/stat`).
fn start_time(ticks: u64) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    Some(btime + ticks / hz)
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
    let same_ns = info.pid_ns.is_none() || info.pid_ns == pid_namespace();
    if info.host != current_host() || !same_ns {
        msg.push_str(&format!(
            "; last refreshed {}, it is broken automatically {} minutes after that, \
             or now with `tessera unlock` if that process is surely gone",
            crate::clock::format_utc(info.last_seen()),
            STALE_AFTER.as_secs() / 60
        ));
    }
    msg
}

/// The user name locks and backups record: `$USER` (or `$LOGNAME`), else `uid <n>`.
pub fn current_owner() -> String {
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

/// This machine's host name, as locks and backups record it.
pub fn current_host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// Wait (up to `limit`) until the readers holding a lock now are gone,
/// before containers they may read are deleted; false if some remain.
pub(crate) fn wait_for_readers(store: &dyn ObjectStore, limit: Duration) -> Result<bool> {
    let waiting: std::collections::HashSet<String> = shared_holders(store)?
        .into_iter()
        .filter(|(_, i)| i.reader)
        .map(|(t, _)| t)
        .collect();
    if waiting.is_empty() {
        return Ok(true);
    }
    let started = std::time::Instant::now();
    loop {
        let still = shared_holders(store)?
            .into_iter()
            .any(|(t, _)| waiting.contains(&t));
        if !still {
            return Ok(true);
        }
        if started.elapsed() >= limit {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{LocalStore, MemoryStore};

    fn mem() -> Arc<dyn ObjectStore> {
        Arc::new(MemoryStore::new())
    }

    fn info(pid: u32, host: &str, time: u64) -> LockInfo {
        LockInfo {
            owner: "alice".into(),
            pid,
            host: host.into(),
            time,
            command: "tessera backup".into(),
            refreshed: 0,
            start_ticks: None,
            pid_ns: None,
            shared: false,
            reader: false,
            brief: false,
        }
    }

    fn put(b: &Arc<dyn ObjectStore>, i: &LockInfo) {
        b.put(&ObjectKey::Lock, &serde_json::to_vec(i).unwrap())
            .unwrap();
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
        assert!(first.broken().is_none());
        let info = read_lock(&*b).unwrap().expect("locked");
        assert_eq!(info, first.info());
        assert_eq!(info.pid, std::process::id());
        assert_eq!(info.command, "tessera backup");
        assert_eq!(info.refreshed, info.time);
        assert_eq!(info.start_ticks, process_start_ticks(std::process::id()));
        assert!(info.start_ticks.is_some(), "/proc is available here");

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
    fn lock_of_a_dead_process_is_broken_with_a_notice() {
        let b = mem();
        let pid = dead_pid();
        let dead = info(pid, &current_host(), 1_795_370_400); // 2026-11-22 18:00:00 UTC
        put(&b, &dead);
        assert_eq!(
            staleness(&dead, crate::clock::now()),
            Some(Staleness::ProcessGone)
        );
        let lock = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        let broken = lock.broken().expect("the dead holder's lock was broken");
        assert_eq!(broken.holder, dead);
        assert_eq!(broken.why, Staleness::ProcessGone);
        let notice = broken.notice();
        assert!(
            notice.starts_with("broke the stale lock of alice (pid ")
                && notice.contains(&format!("pid {pid} on host"))
                && notice.contains("since 2026-11-22 18:00:00 UTC")
                && notice.ends_with("its process no longer runs on this host")
                && !notice.contains('\n'),
            "{notice}"
        );
        assert_eq!(read_lock(&*b).unwrap(), Some(lock.info()), "now ours");
    }

    /// A holder killed and not yet reaped (a zombie) is gone: its lock is
    /// stale, so the next writer does not wait for it (found by the CLI
    /// torture test, whose killed GC stayed a zombie while a backup beside
    /// it waited two minutes for its brief lock).
    #[test]
    fn lock_of_a_zombie_is_stale() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id();
        let now = crate::clock::now();
        let i = info(pid, &current_host(), now);
        assert_eq!(staleness(&i, now), None, "alive");
        child.kill().unwrap();
        // Not reaped: a zombie once the kill is delivered.
        let t0 = std::time::Instant::now();
        while !is_zombie(pid) {
            assert!(t0.elapsed() < Duration::from_secs(10), "never a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(staleness(&i, now), Some(Staleness::ProcessGone));
        child.wait().unwrap();
        assert_eq!(parse_state("12 (a) b) S 1 2"), Some('S'));
    }

    #[test]
    fn lock_of_a_reused_pid_is_broken() {
        let now = crate::clock::now();
        let me = std::process::id();
        let ticks = process_start_ticks(me).unwrap();
        // Same pid, but the holder recorded another start: not us.
        let mut other = info(me, &current_host(), now);
        other.start_ticks = Some(ticks + 1);
        assert_eq!(staleness(&other, now), Some(Staleness::PidReused));
        other.start_ticks = Some(ticks);
        assert_eq!(staleness(&other, now), None, "the very process");
        // An older lock without a start time: this process started (seconds
        // ago) long after a lock taken a day ago, so it cannot be the holder.
        let mut old = info(me, &current_host(), now - 86_400);
        assert_eq!(staleness(&old, now), Some(Staleness::PidReused));
        old.time = now;
        assert_eq!(staleness(&old, now), None, "started before the lock");

        let b = mem();
        let mut reused = info(me, &current_host(), now);
        reused.start_ticks = Some(ticks + 1);
        put(&b, &reused);
        let lock = RepoLock::acquire(b, "tessera gc").unwrap();
        assert_eq!(lock.broken().unwrap().why, Staleness::PidReused);
        assert!(lock.broken().unwrap().notice().ends_with("started later"));
    }

    #[test]
    fn live_locks_are_not_stale() {
        let now = crate::clock::now();
        let mut i = info(std::process::id(), &current_host(), now);
        i.start_ticks = process_start_ticks(i.pid);
        assert_eq!(staleness(&i, now), None, "our own process is alive");
        // init exists (kill may say EPERM, which still means alive) and
        // started before a lock taken now.
        let init = info(1, &current_host(), now);
        assert_eq!(staleness(&init, now), None);
        assert!(!is_stale(&init));
    }

    #[test]
    fn foreign_lock_is_stale_only_when_not_refreshed() {
        let host = format!("{}-elsewhere", current_host());
        let t = 1_795_370_400;
        // Its pid is dead here, but that says nothing about the other host.
        let mut i = info(dead_pid(), &host, t);
        let limit = STALE_AFTER.as_secs();
        assert_eq!(staleness(&i, t + limit), None);
        assert_eq!(staleness(&i, t + limit + 1), Some(Staleness::NotRefreshed));
        i.refreshed = t + 3600;
        assert_eq!(staleness(&i, t + 3600 + limit), None, "refreshed");
        assert_eq!(
            staleness(&i, t + 3601 + limit),
            Some(Staleness::NotRefreshed)
        );

        // A live foreign lock is refused, saying when it would go stale.
        let b = mem();
        let now = crate::clock::now();
        let mut live = info(1234, &host, now);
        live.refreshed = now;
        put(&b, &live);
        let msg = RepoLock::acquire(b.clone(), "tessera backup")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("automatically 30 minutes after") && msg.contains("tessera unlock"),
            "{msg}"
        );
        // An abandoned one is broken.
        let mut abandoned = live.clone();
        abandoned.time = now - 7200;
        abandoned.refreshed = now - limit - 60;
        put(&b, &abandoned);
        let lock = RepoLock::acquire(b, "tessera backup").unwrap();
        assert_eq!(lock.broken().unwrap().holder, abandoned);
        assert!(lock
            .broken()
            .unwrap()
            .notice()
            .ends_with("it was not refreshed for 30 minutes"));
    }

    #[test]
    fn lock_of_another_pid_namespace_is_judged_by_its_refresh() {
        // Same host name, another container: its pid means nothing here.
        let now = crate::clock::now();
        let mut i = info(dead_pid(), &current_host(), now);
        i.pid_ns = Some("pid:[1]".into());
        assert_ne!(i.pid_ns, pid_namespace());
        assert_eq!(staleness(&i, now), None);
        let limit = STALE_AFTER.as_secs();
        assert_eq!(
            staleness(&i, now + limit + 1),
            Some(Staleness::NotRefreshed)
        );
        i.pid_ns = pid_namespace();
        assert_eq!(staleness(&i, now), Some(Staleness::ProcessGone));
        let b = mem();
        let lock = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        assert_eq!(lock.info().pid_ns, pid_namespace());
        assert!(lock.info().pid_ns.is_some());
    }

    #[test]
    fn refresh_rewrites_the_time_and_keeps_the_lock_ours() {
        let b = mem();
        let lock = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        let taken = lock.info().time;
        assert!(lock.held.lock().unwrap().refresh(taken + 600).unwrap());
        let now = read_lock(&*b).unwrap().unwrap();
        assert_eq!((now.time, now.refreshed), (taken, taken + 600));
        assert_eq!(now, lock.info());
        assert!(lock.refresh().unwrap());
        // Broken and taken by another writer: refresh leaves that lock alone.
        break_lock(&*b).unwrap();
        let other = RepoLock::acquire(b.clone(), "tessera gc").unwrap();
        assert!(!lock.refresh().unwrap());
        drop(lock);
        assert_eq!(read_lock(&*b).unwrap(), Some(other.info()));
        other.release().unwrap();
        assert_eq!(read_lock(&*b).unwrap(), None);
    }

    #[test]
    fn start_ticks_are_read_after_the_command_name() {
        let stat =
            "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_ticks(stat), Some(987_654));
        assert_eq!(parse_start_ticks("garbage"), None);
        let mine = process_start_ticks(std::process::id()).unwrap();
        let started = start_time(mine).unwrap();
        let now = crate::clock::now();
        assert!(started <= now + START_SLACK && started + 86_400 > now);
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
    fn corrupt_shared_lock_names_itself_and_is_skipped_by_holder_lists() {
        let b = mem();
        let key = ObjectKey::SharedLock("1-2-3".into());
        b.put(&key, b"{not json").unwrap();
        let msg = RepoLock::acquire(b.clone(), "tessera init")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("locks/1-2-3") && msg.contains("tessera unlock"),
            "{msg}"
        );
        assert!(shared_holders(&*b).unwrap().is_empty());
        let held = RepoLock::acquire_shared(b.clone(), "tessera backup", false).unwrap();
        let holders = shared_holders(&*b).unwrap();
        assert_eq!(holders.len(), 1);
        assert_eq!(holders[0].0, held.token());
        // The token read back is the acquisition's: not abandoned while held.
        let h = read_holder(&*b, &ObjectKey::SharedLock(held.token()))
            .unwrap()
            .unwrap();
        assert_eq!(h.token.as_deref(), Some(&held.token()[..]));
        assert!(!abandoned_here(&h));
    }

    #[test]
    fn break_lock_returns_the_holder_and_unlocks() {
        let b = mem();
        assert_eq!(break_lock(&*b).unwrap(), None, "nothing to break");
        let held = RepoLock::acquire(b.clone(), "tessera backup").unwrap();
        let removed = break_lock(&*b).unwrap().expect("was locked");
        assert_eq!(removed, held.info());
        assert_eq!(read_lock(&*b).unwrap(), None);
        // Someone else takes the lock; the broken holder must not remove it.
        let other = RepoLock::acquire(b.clone(), "tessera gc").unwrap();
        held.release().unwrap();
        assert_eq!(read_lock(&*b).unwrap(), Some(other.info()));
    }
}
