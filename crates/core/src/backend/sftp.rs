//! A repository in a directory on an SFTP server: `sftp:[USER@]HOST[:PORT]/PATH`
//! through the system's `ssh` (so the user's `~/.ssh/config`, agent and
//! keys apply, as with restic), and any rclone remote through `rclone
//! serve sftp --stdio` (see `rclone.rs`). The protocol is in
//! `sftp_session.rs`; this is the store on top of it.
//!
//! - **Publishing** is as on a local disk: `put` writes a hidden temporary
//!   file next to the final name, syncs it (`fsync@openssh.com` where the
//!   server has it) and renames it over the name (`posix-rename@openssh.com`,
//!   atomic), so a reader sees the old object, the new one or nothing.
//!   `put_if_absent` links the synced temporary to the name
//!   (`hardlink@openssh.com`), which fails if the name exists: atomic on
//!   the server, so two writers cannot both take the lock. A server without
//!   hard links (rclone) gets a check then a rename instead, which is not
//!   atomic against a second writer: its lock is advisory (documented).
//! - **Transfers** are written behind, as on the cloud stores: `put`
//!   returns once the upload is queued, at most
//!   [`TransferOptions::max_in_flight`] run at once over the one
//!   connection, each with many requests in flight; `barrier` waits for all
//!   and fails if any failed, so no manifest is published over an object
//!   that did not arrive.
//! - **A lost connection** (the server or `ssh` gone) is opened again and
//!   the request repeated, with exponential backoff, within the retry
//!   limits; refused credentials and unknown hosts are not retried.

use super::cloud::TransferOptions;
use super::local::{validate_key, validate_prefix};
use super::sftp_session::{
    Attrs, Session, SftpError, SftpResult, FX_NO_SUCH_FILE, OPEN_CREATE, OPEN_EXCLUSIVE, OPEN_READ,
    OPEN_TRUNCATE, OPEN_WRITE,
};
use super::store::{keys_of, ObjectStore};
use crate::error::{Error, ObjectRef, Result};
use crate::object_key::{KeyKind, ObjectKey};
use std::collections::{HashMap, HashSet, VecDeque};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Distinguishes temporary names of this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How to reach the server: a command whose stdin and stdout speak SFTP.
#[derive(Clone, Debug)]
pub struct Transport {
    pub program: String,
    pub args: Vec<String>,
    /// `SFTP` or `rclone`: the first word of every error.
    pub service: &'static str,
    /// What to check when the server refuses us.
    pub credentials_hint: &'static str,
    /// Whether the server's `hardlink@openssh.com` links (rclone's
    /// advertises it, answers OK and links nothing).
    pub hard_links: bool,
}

impl Transport {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args);
        c
    }
}

/// An `sftp:` location, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SftpLocation {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    /// The repository's directory on the server: absolute, or relative to
    /// the login directory (written `/~/PATH` in the location).
    pub path: String,
}

impl SftpLocation {
    /// Parse `sftp:[USER@]HOST[:PORT]/PATH` (or `sftp://…`). `PATH` is
    /// absolute (`sftp:me@box/srv/repo` is `/srv/repo`); `/~/PATH` is
    /// relative to the login directory.
    pub fn parse(location: &str) -> Result<SftpLocation> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "bad SFTP location '{location}': {why} (expected sftp:[USER@]HOST[:PORT]/PATH)"
            ))
        };
        let rest = location
            .strip_prefix("sftp://")
            .or_else(|| location.strip_prefix("sftp:"))
            .ok_or_else(|| bad("no sftp: scheme"))?;
        let (authority, path) = rest.split_once('/').ok_or_else(|| bad("no path"))?;
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) if !u.is_empty() => (Some(u.to_string()), h),
            Some(_) => return Err(bad("empty user")),
            None => (None, authority),
        };
        let (host, port) = match hostport.split_once(':') {
            Some((h, p)) => (
                h,
                Some(
                    p.parse::<u16>()
                        .map_err(|_| bad("the port is not a number"))?,
                ),
            ),
            None => (hostport, None),
        };
        if host.is_empty() || host.starts_with('-') {
            return Err(bad("no host"));
        }
        let path = path.trim_start_matches('/');
        let path = match path.strip_prefix('~') {
            Some(home) if home.is_empty() || home.starts_with('/') => {
                let p = home.trim_matches('/');
                if p.is_empty() { "." } else { p }.to_string()
            }
            _ if path.trim_end_matches('/').is_empty() => return Err(bad("no path")),
            _ => format!("/{}", path.trim_end_matches('/')),
        };
        Ok(SftpLocation {
            user,
            host: host.to_string(),
            port,
            path,
        })
    }

    /// `ssh [TESSERA_SSH_ARGS] [-p PORT] [-l USER] HOST -s sftp`: the
    /// user's ssh configuration, agent and keys decide the rest.
    pub fn transport(&self) -> Transport {
        let mut args = env_words("TESSERA_SSH_ARGS");
        if let Some(p) = self.port {
            args.extend(["-p".to_string(), p.to_string()]);
        }
        if let Some(u) = &self.user {
            args.extend(["-l".to_string(), u.clone()]);
        }
        // No terminal, no forwarding: the connection carries SFTP only.
        args.extend(["-T", "-x", "-a", "-s", "--"].map(String::from));
        args.extend([self.host.clone(), "sftp".into()]);
        Transport {
            program: std::env::var("TESSERA_SSH").unwrap_or_else(|_| "ssh".into()),
            args,
            service: "SFTP",
            credentials_hint: "the ssh user, keys and agent, and ~/.ssh/config",
            hard_links: true,
        }
    }
}

/// A variable's words (split at whitespace), none when unset.
pub(crate) fn env_words(var: &str) -> Vec<String> {
    std::env::var(var)
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// Uploads queued or running, in the order they were started.
#[derive(Default)]
struct Uploads {
    pending: HashMap<String, (u64, Arc<Vec<u8>>)>,
    running: VecDeque<(String, u64, JoinHandle<Result<()>>)>,
    next_seq: u64,
    failed: Option<String>,
}

/// What the store shares with its upload threads.
struct Inner {
    transport: Transport,
    /// The repository's directory on the server (no trailing slash; empty
    /// for the root of an rclone remote, whose names are `/NAME`).
    root: String,
    display: String,
    transfer: TransferOptions,
    session: Mutex<Option<Arc<Session>>>,
    /// Directories known to exist (no `mkdir` before each upload).
    dirs: Mutex<HashSet<String>>,
}

/// A repository in a directory reached over SFTP.
pub struct SftpStore {
    inner: Arc<Inner>,
    uploads: Mutex<Uploads>,
}

impl std::fmt::Debug for SftpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SftpStore")
            .field("location", &self.inner.display)
            .finish()
    }
}

/// Messages of a transport that mean asking again cannot help.
const HOPELESS: &[&str] = &[
    "Permission denied",
    "Host key verification failed",
    "Could not resolve hostname",
    "didn't find section in config file",
    "cannot run",
    "Bad configuration option",
    "Failed to create file system",
];

impl Inner {
    fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.root)
    }

    /// The current connection, opened if there is none.
    fn session(&self) -> SftpResult<Arc<Session>> {
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = s.as_ref().filter(|s| s.is_open()) {
            return Ok(open.clone());
        }
        *s = None;
        // A password or passphrase typed on a terminal takes its time.
        // SAFETY: isatty only inspects a descriptor.
        let interactive = unsafe { libc::isatty(0) } == 1;
        let patience = if interactive {
            Duration::from_secs(300)
        } else {
            self.transfer.connect_timeout.max(Duration::from_secs(30))
        };
        let new = Arc::new(Session::start(self.transport.command(), patience)?);
        *s = Some(new.clone());
        Ok(new)
    }

    /// Run `f` on the connection; a lost connection is opened again and
    /// `f` repeated, with backoff, within the retry limits.
    fn retried<T>(
        &self,
        op: &str,
        name: &str,
        f: impl Fn(&Session) -> SftpResult<T>,
    ) -> std::result::Result<T, (SftpError, Error)> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            let r = self.session().and_then(|s| f(&s));
            match r {
                Err(SftpError::Lost(why))
                    if attempt < self.transfer.max_retries
                        && started.elapsed() + delay < self.transfer.retry_timeout
                        && !HOPELESS.iter().any(|h| why.contains(h)) =>
                {
                    attempt += 1;
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Ok(v) => return Ok(v),
                Err(e) => {
                    let err = self.error(op, name, &e);
                    return Err((e, err));
                }
            }
        }
    }

    /// [`retried`](Self::retried), for callers that need only the error.
    fn run<T>(&self, op: &str, name: &str, f: impl Fn(&Session) -> SftpResult<T>) -> Result<T> {
        self.retried(op, name, f).map_err(|(_, e)| e)
    }

    /// A one-line error for a request that failed.
    fn error(&self, op: &str, name: &str, e: &SftpError) -> Error {
        let t = &self.transport;
        let detail = super::cloud::one_line(&e.to_string());
        let hint = match e {
            SftpError::Lost(why) if why.contains("Permission denied") => {
                format!("access denied (check {}): {detail}", t.credentials_hint)
            }
            SftpError::Lost(_) => format!("cannot reach the server (is it running?): {detail}"),
            SftpError::Status { code: 3, .. } => {
                format!("access denied (check the permissions of the directory): {detail}")
            }
            _ => detail,
        };
        let what = if name.is_empty() {
            op.to_string()
        } else {
            format!("{op} {name}")
        };
        Error::io(
            format!("{} {what} at {}", t.service, self.display),
            std::io::Error::other(hint),
        )
    }

    /// Create `dir` and its missing parents under the root.
    fn make_dirs(&self, s: &Session, dir: &str) -> SftpResult<()> {
        if self.dirs.lock().map(|d| d.contains(dir)).unwrap_or(false) {
            return Ok(());
        }
        let mut at = if dir.starts_with('/') {
            "/".to_string()
        } else {
            String::new()
        };
        for part in dir.split('/').filter(|p| !p.is_empty() && *p != ".") {
            if !at.is_empty() && !at.ends_with('/') {
                at.push('/');
            }
            at.push_str(part);
            if let Err(e) = s.mkdir(&at) {
                // Existing (any error where a directory stands is fine).
                match s.stat(&at) {
                    Ok(a) if a.is_dir() => {}
                    _ => return Err(e),
                }
            }
        }
        if let Ok(mut d) = self.dirs.lock() {
            d.insert(dir.to_string());
        }
        Ok(())
    }

    /// Write `data` to a fresh temporary beside `name`, synced; returns its
    /// path. The temporary is removed if writing fails.
    fn write_temp(&self, s: &Session, name: &str, data: &[u8]) -> SftpResult<String> {
        let path = self.path(name);
        let (dir, file) = path.rsplit_once('/').unwrap_or((".", &path));
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = format!("{dir}/.{file}.{}.{n}.tmp", std::process::id());
        let flags = OPEN_WRITE | OPEN_CREATE | OPEN_TRUNCATE | OPEN_EXCLUSIVE;
        let handle = match s.open(&tmp, flags) {
            Err(e) if e.is_status(FX_NO_SUCH_FILE) => {
                self.make_dirs(s, dir)?;
                s.open(&tmp, flags)?
            }
            other => other?,
        };
        let written = s.write_all(&handle, data).and_then(|()| {
            if s.has_extension("fsync@openssh.com") {
                s.fsync(&handle)
            } else {
                Ok(())
            }
        });
        let closed = s.close(&handle);
        if let Err(e) = written.and(closed) {
            let _ = s.remove(&tmp);
            return Err(e);
        }
        Ok(tmp)
    }

    /// Upload an object: a synced temporary renamed over its name.
    fn upload(&self, name: &str, data: &[u8]) -> Result<()> {
        self.run("PUT", name, |s| {
            let tmp = self.write_temp(s, name, data)?;
            let path = self.path(name);
            let renamed = if s.has_extension("posix-rename@openssh.com") {
                s.extended_paths("posix-rename@openssh.com", &tmp, &path)
            } else {
                // Version 3's rename may refuse an existing name.
                s.rename(&tmp, &path).or_else(|e| match s.stat(&path) {
                    Ok(_) => s.remove(&path).and_then(|()| s.rename(&tmp, &path)),
                    Err(_) => Err(e),
                })
            };
            if renamed.is_err() {
                let _ = s.remove(&tmp);
            }
            renamed
        })
    }

    /// Create `name` only if it does not exist; true if this call did.
    fn create_only(&self, name: &str, data: &[u8]) -> Result<bool> {
        let path = self.path(name);
        self.run("PUT (if absent)", name, |s| {
            let exists = |s: &Session| -> SftpResult<Option<bool>> {
                // A retried request whose first attempt arrived finds its
                // own object: that is success, not a conflict.
                match read_file(s, &path) {
                    Ok(Some(existing)) => Ok(Some(existing == data)),
                    Ok(None) => Ok(None),
                    Err(e) => Err(e),
                }
            };
            let hardlink = self.transport.hard_links && s.has_extension("hardlink@openssh.com");
            if !hardlink {
                if let Some(ours) = exists(s)? {
                    return Ok(ours);
                }
            }
            let tmp = self.write_temp(s, name, data)?;
            let linked = if hardlink {
                s.extended_paths("hardlink@openssh.com", &tmp, &path)
            } else {
                s.rename(&tmp, &path)
            };
            let _ = s.remove(&tmp);
            match linked {
                Ok(()) => Ok(true),
                Err(e @ SftpError::Lost(_)) => Err(e),
                Err(e) => match exists(s)? {
                    Some(ours) => Ok(ours),
                    None => Err(e),
                },
            }
        })
    }

    /// Every file under `dir` (relative to the root), recursively, with
    /// its relative name; a missing `dir` has none.
    fn walk(&self, s: &Session, dir: &str, out: &mut Vec<String>) -> SftpResult<()> {
        let entries = match s.read_dir(&self.path(dir)) {
            Err(e) if e.is_status(FX_NO_SUCH_FILE) => return Ok(()),
            other => other?,
        };
        for (name, attrs) in entries {
            let rel = format!("{dir}/{name}");
            if attrs.is_dir() {
                self.walk(s, &rel, out)?;
            } else {
                out.push(rel);
            }
        }
        Ok(())
    }
}

/// A whole file, or `None` if it does not exist (or is a directory).
fn read_file(s: &Session, path: &str) -> SftpResult<Option<Vec<u8>>> {
    let handle = match s.open(path, OPEN_READ) {
        Err(e) if e.is_status(FX_NO_SUCH_FILE) => return Ok(None),
        other => other?,
    };
    let got = (|| {
        let attrs: Attrs = s.fstat(&handle)?;
        if attrs.is_dir() {
            return Ok(None);
        }
        let size = attrs.size.unwrap_or(u64::MAX >> 1);
        s.read(&handle, 0, size).map(Some)
    })();
    s.close_read(&handle);
    got
}

impl SftpStore {
    /// Open the repository at an `sftp:` location; fails in one line if
    /// the server cannot be reached, refuses us, or has no such directory.
    pub fn open(location: &str, transfer: TransferOptions) -> Result<SftpStore> {
        let loc = SftpLocation::parse(location)?;
        Self::with_transport(loc.transport(), loc.path, location, transfer, false)
    }

    /// [`open`](Self::open), creating the directory (and its parents).
    pub fn create(location: &str, transfer: TransferOptions) -> Result<SftpStore> {
        let loc = SftpLocation::parse(location)?;
        Self::with_transport(loc.transport(), loc.path, location, transfer, true)
    }

    /// A store at `root` on the server `transport` reaches; connects now
    /// and checks (or, with `create`, makes) the directory.
    pub fn with_transport(
        transport: Transport,
        root: String,
        display: &str,
        transfer: TransferOptions,
        create: bool,
    ) -> Result<SftpStore> {
        let inner = Arc::new(Inner {
            transport,
            root: root.trim_end_matches('/').to_string(),
            display: display.to_string(),
            transfer,
            session: Mutex::new(None),
            dirs: Mutex::new(HashSet::new()),
        });
        let store = SftpStore {
            inner: inner.clone(),
            uploads: Mutex::new(Uploads::default()),
        };
        let root = if inner.root.is_empty() {
            "/".to_string()
        } else {
            inner.root.clone()
        };
        // The first connection is not retried: a refusal is the answer.
        let session = inner
            .session()
            .map_err(|e| inner.error("connect", "", &e))?;
        if create {
            inner
                .make_dirs(&session, &root)
                .map_err(|e| inner.error("MKDIR", &root, &e))?;
        }
        match session.stat(&root) {
            Ok(a) if a.is_dir() => Ok(store),
            Ok(_) => Err(Error::invalid(format!(
                "{}: {root} is not a directory",
                inner.display
            ))),
            Err(e) if e.is_status(FX_NO_SUCH_FILE) => {
                Err(Error::NoRepository(inner.display.clone().into()))
            }
            Err(e) => Err(inner.error("STAT", &root, &e)),
        }
    }

    fn name(key: &ObjectKey) -> Result<String> {
        let name = key.name();
        validate_key(&name)?;
        Ok(name)
    }

    fn uploads(&self) -> MutexGuard<'_, Uploads> {
        self.uploads.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending(&self, name: &str) -> Option<Arc<Vec<u8>>> {
        self.uploads().pending.get(name).map(|(_, b)| b.clone())
    }

    /// Wait for the uploads of `which` (all, or one key's).
    fn wait(&self, which: Option<&str>) {
        let picked: Vec<_> = {
            let mut u = self.uploads();
            let (picked, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut u.running)
                .into_iter()
                .partition(|(n, _, _)| which.is_none_or(|w| w == n));
            u.running = kept;
            picked.into_iter().collect()
        };
        for (name, seq, handle) in picked {
            self.finished(name, seq, handle);
        }
    }

    fn finished(&self, name: String, seq: u64, handle: JoinHandle<Result<()>>) {
        let failure = match handle.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "{} PUT {name}: the upload panicked",
                self.service()
            )),
        };
        let mut u = self.uploads();
        if u.pending.get(&name).is_some_and(|(s, _)| *s == seq) {
            u.pending.remove(&name);
        }
        if let Some(f) = failure {
            u.failed.get_or_insert(f);
        }
    }

    fn service(&self) -> &'static str {
        self.inner.transport.service
    }

    /// Queue an upload, waiting for the oldest while too many run.
    fn queue(&self, name: String, data: Arc<Vec<u8>>) -> Result<()> {
        self.wait(Some(&name));
        let inner = self.inner.clone();
        let (n, d) = (name.clone(), data.clone());
        let handle = std::thread::Builder::new()
            .name("tessera-sftp-put".into())
            .spawn(move || inner.upload(&n, &d))
            .map_err(|e| Error::io("cannot start an upload thread", e))?;
        let oldest = {
            let mut u = self.uploads();
            let seq = u.next_seq;
            u.next_seq += 1;
            u.pending.insert(name.clone(), (seq, data));
            u.running.push_back((name, seq, handle));
            if u.running.len() > self.inner.transfer.max_in_flight {
                u.running.pop_front()
            } else {
                None
            }
        };
        if let Some((name, seq, handle)) = oldest {
            self.finished(name, seq, handle);
        }
        Ok(())
    }

    fn truncated(key: &ObjectKey, offset: u64, len: u64, size: u64) -> Error {
        Error::corrupt(
            ObjectRef::Stored(key.clone()),
            format!(
                "truncated: wanted {len} bytes at offset {offset}, but the object has {size} bytes"
            ),
        )
    }

    fn missing(key: &ObjectKey) -> Error {
        Error::missing(ObjectRef::Stored(key.clone()))
    }
}

impl ObjectStore for SftpStore {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        let name = Self::name(key)?;
        if let Some(b) = self.pending(&name) {
            return Ok(b.to_vec());
        }
        let path = self.inner.path(&name);
        self.inner
            .run("GET", &name, |s| read_file(s, &path))?
            .ok_or_else(|| Self::missing(key))
    }

    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        let name = Self::name(key)?;
        if let Some(b) = self.pending(&name) {
            let size = b.len() as u64;
            return match offset.checked_add(len) {
                Some(end) if end <= size => Ok(b[offset as usize..end as usize].to_vec()),
                _ => Err(Self::truncated(key, offset, len, size)),
            };
        }
        let Some(end) = offset.checked_add(len).filter(|_| len > 0) else {
            let size = self.size(key)?;
            return match offset.checked_add(len) {
                Some(end) if end <= size => Ok(Vec::new()),
                _ => Err(Self::truncated(key, offset, len, size)),
            };
        };
        let path = self.inner.path(&name);
        let got = self.inner.run("GET (range)", &name, |s| {
            let handle = match s.open(&path, OPEN_READ) {
                Err(e) if e.is_status(FX_NO_SUCH_FILE) => return Ok(None),
                other => other?,
            };
            let r = s.read(&handle, offset, len);
            s.close_read(&handle);
            r.map(Some)
        })?;
        match got {
            None => Err(Self::missing(key)),
            Some(b) if b.len() as u64 == len => Ok(b),
            Some(_) => {
                let size = self.size(key)?;
                debug_assert!(end > size);
                Err(Self::truncated(key, offset, len, size))
            }
        }
    }

    fn size(&self, key: &ObjectKey) -> Result<u64> {
        let name = Self::name(key)?;
        if let Some(b) = self.pending(&name) {
            return Ok(b.len() as u64);
        }
        let path = self.inner.path(&name);
        match self.inner.retried("STAT", &name, |s| s.stat(&path)) {
            Ok(a) if a.is_dir() => Err(Self::missing(key)),
            Ok(a) => Ok(a.size.unwrap_or(0)),
            Err((e, _)) if e.is_status(FX_NO_SUCH_FILE) => Err(Self::missing(key)),
            Err((_, err)) => Err(err),
        }
    }

    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        let name = Self::name(key)?;
        self.queue(name, Arc::new(data.to_vec()))
    }

    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        let name = Self::name(key)?;
        self.queue(name, Arc::new(data))
    }

    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        let name = Self::name(key)?;
        self.wait(Some(&name));
        self.inner.create_only(&name, data)
    }

    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        let prefix = kind.prefix();
        validate_prefix(prefix)?;
        self.wait(None);
        if kind.is_single() {
            let key = ObjectKey::parse(prefix);
            return match self.size(&key) {
                Ok(_) => Ok(vec![key]),
                Err(Error::MissingObject(_)) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
        }
        let dir = prefix.trim_end_matches('/');
        let mut names = self.inner.run("LIST", prefix, |s| {
            let mut out = Vec::new();
            self.inner.walk(s, dir, &mut out)?;
            Ok(out)
        })?;
        // Temporaries of unfinished puts are hidden names.
        names.retain(|n| !n.split('/').any(|c| c.starts_with('.')));
        names.sort();
        Ok(keys_of(kind, names))
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let name = Self::name(key)?;
        self.wait(Some(&name));
        let path = self.inner.path(&name);
        match self.inner.retried("DELETE", &name, |s| s.remove(&path)) {
            Ok(()) => Ok(()),
            Err((e, _)) if e.is_status(FX_NO_SUCH_FILE) => Ok(()),
            Err((_, err)) => Err(err),
        }
    }

    /// Every upload since the last barrier has arrived (each synced on the
    /// server where it offers `fsync@openssh.com`), or the first failure
    /// is reported.
    fn barrier(&self) -> Result<()> {
        self.wait(None);
        match self.uploads().failed.take() {
            Some(f) => Err(Error::io(
                format!("uploads to {} did not all arrive", self.inner.display),
                std::io::Error::other(f),
            )),
            None => Ok(()),
        }
    }

    fn location(&self) -> String {
        self.inner.display.clone()
    }

    /// Remove the temporaries of interrupted puts, anywhere under the root.
    fn clean_interrupted(&self) -> Result<usize> {
        self.wait(None);
        let inner = &self.inner;
        inner.run("clean", "temporaries", |s| {
            let mut removed = 0;
            for kind in KeyKind::ALL {
                let prefix = kind.prefix();
                if kind.is_single() {
                    continue;
                }
                let mut all = Vec::new();
                inner.walk(s, prefix.trim_end_matches('/'), &mut all)?;
                for rel in all {
                    let file = rel.rsplit('/').next().unwrap_or("");
                    if file.starts_with('.') && file.ends_with(".tmp") {
                        match s.remove(&inner.path(&rel)) {
                            Ok(()) => removed += 1,
                            Err(e) if e.is_status(FX_NO_SUCH_FILE) => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
            // Those of the single names live in the root itself.
            let root = if inner.root.is_empty() {
                "/"
            } else {
                &inner.root
            };
            for (file, attrs) in s.read_dir(root)? {
                if !attrs.is_dir() && file.starts_with('.') && file.ends_with(".tmp") {
                    match s.remove(&inner.path(&file)) {
                        Ok(()) => removed += 1,
                        Err(e) if e.is_status(FX_NO_SUCH_FILE) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Ok(removed)
        })
    }
}

impl Drop for SftpStore {
    fn drop(&mut self) {
        // Uploads nobody waited for are not durable by the contract, but
        // let them finish rather than cut them off mid-transfer.
        self.wait(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let l = SftpLocation::parse("sftp:me@box:2222/srv/repo/").unwrap();
        assert_eq!(l.user.as_deref(), Some("me"));
        assert_eq!(l.host, "box");
        assert_eq!(l.port, Some(2222));
        assert_eq!(l.path, "/srv/repo");
        let l = SftpLocation::parse("sftp:box/~/backups").unwrap();
        assert_eq!((l.user, l.port, l.path.as_str()), (None, None, "backups"));
        assert_eq!(SftpLocation::parse("sftp:box/~").unwrap().path, ".");
        assert_eq!(SftpLocation::parse("sftp://box//abs").unwrap().path, "/abs");
        for bad in [
            "sftp:box",
            "sftp:box/",
            "sftp:@box/x",
            "sftp:box:port/x",
            "sftp:/x",
            "sftp:-oProxyCommand=x/y",
        ] {
            let e = SftpLocation::parse(bad).unwrap_err().to_string();
            assert!(e.contains("bad SFTP location"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_ssh_command_names_port_user_and_the_subsystem() {
        let l = SftpLocation::parse("sftp:me@box:2222/srv").unwrap();
        let args = l.transport().args;
        let tail: Vec<&str> = args.iter().map(String::as_str).rev().take(3).collect();
        assert_eq!(tail, ["sftp", "box", "--"]);
        assert!(args.contains(&"-s".to_string()));
        let joined = args.join(" ");
        assert!(
            joined.contains("-p 2222") && joined.contains("-l me"),
            "{joined}"
        );
    }
}
