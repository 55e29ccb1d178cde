//! The S3 tests' harness: a real MinIO server on 127.0.0.1, on a free
//! port, with a temporary data directory, started and stopped by the tests;
//! a TCP proxy that resets connections after N bytes; a store wrapper that
//! runs an action (stop the server) at the Nth request.
//!
//! MinIO is found as `$TESSERA_MINIO`, `minio` on `PATH`, `~/go/bin/minio`
//! or `~/.cache/tessera-ci/minio` (`.ci/run` installs it there). Without
//! it the S3 tests say so and pass, unless `TESSERA_REQUIRE_MINIO=1` (set
//! by `.ci/run`), where they fail.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_core::backend::s3::S3Credentials;
use tessera_core::backend::{KeyKind, ObjectKey, ObjectStore, S3Options, S3Store};

pub const USER: &str = "tessera-test";
pub const SECRET: &str = "tessera-test-secret";
pub const BUCKET: &str = "tessera";

/// The MinIO binary, or `None` (after saying why) when the tests may skip.
pub fn minio_binary() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let candidates = std::env::var_os("TESSERA_MINIO")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("PATH").into_iter().flat_map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("minio"))
                .collect::<Vec<_>>()
        }))
        .chain(home.iter().map(|h| h.join("go/bin/minio")))
        .chain(home.iter().map(|h| h.join(".cache/tessera-ci/minio")));
    for c in candidates {
        if c.is_file() {
            return Some(c);
        }
    }
    if std::env::var("TESSERA_REQUIRE_MINIO").as_deref() == Ok("1") {
        panic!(
            "TESSERA_REQUIRE_MINIO=1 but no MinIO binary was found \
             (install: go install github.com/minio/minio@latest)"
        );
    }
    eprintln!(
        "S3 test skipped: MinIO is not installed (set TESSERA_REQUIRE_MINIO=1 to fail instead)"
    );
    None
}

/// A free port on 127.0.0.1 (free when asked; the server binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A MinIO server; stopped (killed) on drop, its data directory removed.
pub struct Minio {
    binary: PathBuf,
    data: tempfile::TempDir,
    pub port: u16,
    child: Mutex<Option<Child>>,
}

impl Minio {
    /// Start a server with the bucket [`BUCKET`], or `None` when MinIO is
    /// missing and may be.
    pub fn start() -> Option<Minio> {
        let binary = minio_binary()?;
        let data = tempfile::Builder::new()
            .prefix("s3fgc-minio-")
            .tempdir()
            .unwrap();
        // A top-level folder of a fresh single-drive server is a bucket.
        std::fs::create_dir_all(data.path().join(BUCKET)).unwrap();
        let m = Minio {
            binary,
            data,
            port: free_port(),
            child: Mutex::new(None),
        };
        m.resume();
        Some(m)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A location in the bucket under a folder of its own.
    pub fn location(&self, prefix: &str) -> String {
        format!("s3:{}/{BUCKET}/{prefix}", self.endpoint())
    }

    /// The server's output, beside its data directory.
    pub fn log_path(&self) -> PathBuf {
        let name = self.data.path().file_name().unwrap().to_string_lossy();
        std::env::temp_dir().join(format!("{name}.log"))
    }

    /// Start (again) on the same port and data; wait until it answers.
    pub fn resume(&self) {
        let mut child = self.child.lock().unwrap();
        assert!(child.is_none(), "already running");
        let console = free_port();
        let log = std::fs::File::create(self.log_path()).ok();
        let mut cmd = Command::new(&self.binary);
        cmd.arg("server")
            .arg("--quiet")
            .arg("--address")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{console}"))
            .arg(self.data.path())
            .env("MINIO_ROOT_USER", USER)
            .env("MINIO_ROOT_PASSWORD", SECRET)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match log {
            Some(f) => cmd.stderr(f),
            None => cmd.stderr(Stdio::null()),
        };
        *child = Some(cmd.spawn().expect("start minio"));
        drop(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.ready() {
                return;
            }
            assert!(Instant::now() < deadline, "MinIO did not start in 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server answers S3 requests on the bucket, writes included: a
    /// restarted MinIO lists before it takes uploads, and a harness that
    /// went on after a listing alone saw its next write fail.
    fn ready(&self) -> bool {
        if TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            return false;
        }
        let Ok(store) = S3Store::open(&self.location("ready"), quick_options()) else {
            return false;
        };
        store.list(KeyKind::Manifest).is_ok()
            && store.put(&ObjectKey::Lock, b"ready").is_ok()
            && store.barrier().is_ok()
            && store.delete(&ObjectKey::Lock).is_ok()
    }

    /// Stop the server at once (SIGKILL, as a crash or a lost machine).
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(self.log_path());
    }
}

/// Options for tests: the test credentials, few and short retries (a
/// stopped server fails a request within a few seconds).
pub fn quick_options() -> S3Options {
    S3Options {
        max_retries: 2,
        retry_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(2),
        credentials: Some(S3Credentials {
            access_key_id: USER.into(),
            secret_access_key: SECRET.into(),
            session_token: None,
        }),
        region: Some("us-east-1".into()),
        ..S3Options::default()
    }
}

/// A unique folder name per test (tests share one server per test).
pub fn folder(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{test}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// A TCP proxy to `target` that resets each connection after `reset_after`
/// bytes (both directions counted) while `armed`; passes everything through
/// otherwise. Runs until dropped.
pub struct ResetProxy {
    pub port: u16,
    pub armed: Arc<AtomicBool>,
    pub resets: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl ResetProxy {
    pub fn start(target: u16, reset_after: u64) -> ResetProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let armed = Arc::new(AtomicBool::new(true));
        let resets = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, r, s) = (armed.clone(), resets.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                            continue;
                        };
                        let limit = if a.load(Ordering::Relaxed) {
                            reset_after
                        } else {
                            u64::MAX
                        };
                        let r = r.clone();
                        std::thread::spawn(move || relay(client, server, limit, r));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        ResetProxy {
            port,
            armed,
            resets,
            stop,
        }
    }

    pub fn location(&self, prefix: &str) -> String {
        format!("s3:http://127.0.0.1:{}/{BUCKET}/{prefix}", self.port)
    }
}

impl Drop for ResetProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copy both ways; after `limit` bytes in total, reset both sides.
fn relay(client: TcpStream, server: TcpStream, limit: u64, resets: Arc<AtomicUsize>) {
    let moved = Arc::new(AtomicU64::new(0));
    let pairs = [
        (client.try_clone().unwrap(), server.try_clone().unwrap()),
        (server.try_clone().unwrap(), client.try_clone().unwrap()),
    ];
    let mut threads = Vec::new();
    for (mut from, mut to) in pairs {
        let moved = moved.clone();
        let resets = resets.clone();
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let before = moved.fetch_add(n as u64, Ordering::Relaxed);
                if before + n as u64 > limit {
                    let keep = limit.saturating_sub(before) as usize;
                    let _ = to.write_all(&buf[..keep]);
                    reset(&from);
                    reset(&to);
                    resets.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        }));
    }
    for t in threads {
        let _ = t.join();
    }
}

/// Close with RST rather than FIN: linger 0, then shut down.
fn reset(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a correctly sized option value.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = s.shutdown(Shutdown::Both);
}

/// A store that runs `action` once, just before its `at`th request of the
/// kinds `counts` selects (1-based, counted once armed), then passes
/// everything through.
pub struct Trigger<B: ObjectStore> {
    pub inner: B,
    armed: AtomicBool,
    seen: AtomicU64,
    at: u64,
    counts: fn(&Op) -> bool,
    action: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// The request a [`Trigger`] sees.
pub enum Op {
    Get,
    Put,
    Delete,
}

impl<B: ObjectStore> Trigger<B> {
    pub fn new(
        inner: B,
        at: u64,
        counts: fn(&Op) -> bool,
        action: Box<dyn FnOnce() + Send>,
    ) -> Self {
        Trigger {
            inner,
            armed: AtomicBool::new(true),
            seen: AtomicU64::new(0),
            at,
            counts,
            action: Mutex::new(Some(action)),
        }
    }

    /// Count nothing until [`arm`](Self::arm) (say, while a repository opens).
    pub fn disarmed(self) -> Self {
        self.armed.store(false, Ordering::Relaxed);
        self
    }

    pub fn arm(&self) {
        self.armed.store(true, Ordering::Relaxed);
    }

    fn tick(&self, op: Op) {
        if self.armed.load(Ordering::Relaxed)
            && (self.counts)(&op)
            && self.seen.fetch_add(1, Ordering::Relaxed) + 1 == self.at
        {
            if let Some(a) = self.action.lock().unwrap().take() {
                a();
            }
        }
    }

    /// Whether the action ran.
    pub fn fired(&self) -> bool {
        self.action.lock().unwrap().is_none()
    }
}

impl<B: ObjectStore> ObjectStore for Trigger<B> {
    fn get(&self, key: &ObjectKey) -> tessera_core::Result<Vec<u8>> {
        self.tick(Op::Get);
        self.inner.get(key)
    }
    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> tessera_core::Result<Vec<u8>> {
        self.tick(Op::Get);
        self.inner.get_range(key, offset, len)
    }
    fn size(&self, key: &ObjectKey) -> tessera_core::Result<u64> {
        self.inner.size(key)
    }
    fn put(&self, key: &ObjectKey, data: &[u8]) -> tessera_core::Result<()> {
        self.tick(Op::Put);
        self.inner.put(key, data)
    }
    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> tessera_core::Result<()> {
        self.tick(Op::Put);
        self.inner.put_owned(key, data)
    }
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> tessera_core::Result<bool> {
        self.tick(Op::Put);
        self.inner.put_if_absent(key, data)
    }
    fn list(&self, kind: KeyKind) -> tessera_core::Result<Vec<ObjectKey>> {
        self.inner.list(kind)
    }
    fn delete(&self, key: &ObjectKey) -> tessera_core::Result<()> {
        self.tick(Op::Delete);
        self.inner.delete(key)
    }
    fn barrier(&self) -> tessera_core::Result<()> {
        self.inner.barrier()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}
