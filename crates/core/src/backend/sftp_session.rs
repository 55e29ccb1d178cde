//! The SFTP protocol, version 3 (draft-ietf-secsh-filexfer-02, the version
//! OpenSSH's `sftp-server` and `rclone serve sftp` speak), over the stdin
//! and stdout of a child process: `ssh HOST -s sftp` or `rclone serve sftp
//! --stdio`, as restic does. The child does the transport (ssh reads the
//! user's `~/.ssh/config`, agent and keys; rclone reaches any remote), so
//! this module is only the file protocol.
//!
//! One [`Session`] is shared by many threads: requests carry ids, a reader
//! thread hands each reply to the thread waiting for its id, so transfers
//! run in parallel on one connection, and a transfer keeps many reads or
//! writes in flight (the protocol is latency-bound otherwise).

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FXP_INIT: u8 = 1;
const FXP_VERSION: u8 = 2;
const FXP_OPEN: u8 = 3;
const FXP_CLOSE: u8 = 4;
const FXP_READ: u8 = 5;
const FXP_WRITE: u8 = 6;
const FXP_FSTAT: u8 = 8;
const FXP_OPENDIR: u8 = 11;
const FXP_READDIR: u8 = 12;
const FXP_REMOVE: u8 = 13;
const FXP_MKDIR: u8 = 14;
const FXP_STAT: u8 = 17;
const FXP_RENAME: u8 = 18;
const FXP_STATUS: u8 = 101;
const FXP_HANDLE: u8 = 102;
const FXP_DATA: u8 = 103;
const FXP_NAME: u8 = 104;
const FXP_ATTRS: u8 = 105;
const FXP_EXTENDED: u8 = 200;

/// Open flags.
pub(crate) const OPEN_READ: u32 = 0x01;
pub(crate) const OPEN_WRITE: u32 = 0x02;
pub(crate) const OPEN_CREATE: u32 = 0x08;
pub(crate) const OPEN_TRUNCATE: u32 = 0x10;
pub(crate) const OPEN_EXCLUSIVE: u32 = 0x20;

/// Status codes.
const FX_OK: u32 = 0;
const FX_EOF: u32 = 1;
pub(crate) const FX_NO_SUCH_FILE: u32 = 2;
pub(crate) const FX_PERMISSION_DENIED: u32 = 3;

const ATTR_SIZE: u32 = 0x1;
const ATTR_UIDGID: u32 = 0x2;
const ATTR_PERMISSIONS: u32 = 0x4;
const ATTR_ACMODTIME: u32 = 0x8;
const ATTR_EXTENDED: u32 = 0x8000_0000;

/// Bytes per READ or WRITE request: every server takes 32 KiB.
const CHUNK: usize = 32 << 10;
/// Requests of one transfer in flight at once (2 MiB).
const WINDOW: usize = 64;
/// The largest reply we accept (a READDIR of many names is the largest).
const MAX_PACKET: usize = 4 << 20;

/// Why a request failed.
#[derive(Debug, Clone)]
pub(crate) enum SftpError {
    /// The server answered with a status other than OK.
    Status { code: u32, message: String },
    /// The connection is gone (the child exited, the pipe broke): the
    /// request may or may not have been carried out. The text is what the
    /// child said last on stderr, if anything.
    Lost(String),
    /// The server sent something this client does not understand.
    Protocol(String),
}

impl SftpError {
    pub(crate) fn is_status(&self, code: u32) -> bool {
        matches!(self, SftpError::Status { code: c, .. } if *c == code)
    }
}

impl std::fmt::Display for SftpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SftpError::Status { code, message } => {
                let name = match *code {
                    FX_EOF => "end of file",
                    FX_NO_SUCH_FILE => "no such file",
                    FX_PERMISSION_DENIED => "permission denied",
                    4 => "failure",
                    5 => "bad message",
                    8 => "operation unsupported",
                    _ => "error",
                };
                if message.is_empty() || message.eq_ignore_ascii_case(name) {
                    write!(f, "{name} (status {code})")
                } else {
                    write!(f, "{name} (status {code}): {message}")
                }
            }
            SftpError::Lost(why) if why.is_empty() => write!(f, "connection lost"),
            SftpError::Lost(why) => write!(f, "connection lost: {why}"),
            SftpError::Protocol(why) => write!(f, "protocol error: {why}"),
        }
    }
}

pub(crate) type SftpResult<T> = std::result::Result<T, SftpError>;

/// File attributes, as far as the store needs them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Attrs {
    pub size: Option<u64>,
    pub permissions: Option<u32>,
}

impl Attrs {
    pub(crate) fn is_dir(&self) -> bool {
        self.permissions.is_some_and(|p| p & 0o170000 == 0o040000)
    }
}

/// A reply: its type and the bytes after its id.
struct Reply {
    kind: u8,
    body: Vec<u8>,
}

/// Replies not yet delivered, by request id.
#[derive(Default)]
struct Waiting {
    replies: HashMap<u32, Sender<Reply>>,
    /// The connection ended; later requests fail at once.
    closed: bool,
}

/// The last lines the child wrote on stderr (its reason for exiting).
#[derive(Default)]
struct Stderr {
    lines: Vec<String>,
    done: bool,
}

/// One connection to an SFTP server through a child process.
pub(crate) struct Session {
    child: Mutex<Child>,
    writer: Mutex<Option<BufWriter<ChildStdin>>>,
    waiting: Arc<Mutex<Waiting>>,
    stderr: Arc<(Mutex<Stderr>, std::sync::Condvar)>,
    next_id: AtomicU32,
    extensions: Vec<String>,
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s);
}

/// A cursor over a reply's bytes.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> SftpResult<&'a [u8]> {
        if self.b.len() < n {
            return Err(SftpError::Protocol("short packet".into()));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn u32(&mut self) -> SftpResult<u32> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn u64(&mut self) -> SftpResult<u64> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    fn string(&mut self) -> SftpResult<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn attrs(&mut self) -> SftpResult<Attrs> {
        let flags = self.u32()?;
        let mut a = Attrs::default();
        if flags & ATTR_SIZE != 0 {
            a.size = Some(self.u64()?);
        }
        if flags & ATTR_UIDGID != 0 {
            self.take(8)?;
        }
        if flags & ATTR_PERMISSIONS != 0 {
            a.permissions = Some(self.u32()?);
        }
        if flags & ATTR_ACMODTIME != 0 {
            self.take(8)?;
        }
        if flags & ATTR_EXTENDED != 0 {
            for _ in 0..self.u32()? {
                self.string()?;
                self.string()?;
            }
        }
        Ok(a)
    }
}

/// A status reply as a result.
fn status(body: &[u8]) -> SftpResult<()> {
    let mut c = Cursor { b: body };
    let code = c.u32()?;
    if code == FX_OK {
        return Ok(());
    }
    let message = c
        .string()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .unwrap_or_default();
    Err(SftpError::Status { code, message })
}

/// A reply that must be a status.
fn expect_status(r: Reply) -> SftpResult<()> {
    match r.kind {
        FXP_STATUS => status(&r.body),
        k => Err(SftpError::Protocol(format!("unexpected reply {k}"))),
    }
}

fn read_packet(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_PACKET {
        return Err(std::io::Error::other(format!("bad packet length {len}")));
    }
    let mut p = vec![0u8; len];
    r.read_exact(&mut p)?;
    Ok(p)
}

impl Session {
    /// Start `command` (its stdin and stdout become the connection) and
    /// exchange versions; fails with what the child said if it exits
    /// first (refused credentials, unknown host, missing remote).
    pub(crate) fn start(mut command: Command, timeout: Duration) -> SftpResult<Session> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                let program = command.get_program().to_string_lossy().into_owned();
                SftpError::Lost(format!("cannot run {program}: {e}"))
            })?;
        let mut stdin = BufWriter::new(child.stdin.take().expect("piped"));
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let stderr = Arc::new((Mutex::new(Stderr::default()), std::sync::Condvar::new()));
        {
            let stderr = stderr.clone();
            std::thread::Builder::new()
                .name("tessera-sftp-err".into())
                .spawn(move || collect_stderr(stderr_pipe, &stderr))
                .map_err(|e| SftpError::Lost(format!("cannot start a thread: {e}")))?;
        }
        let mut session = Session {
            child: Mutex::new(child),
            writer: Mutex::new(None),
            waiting: Arc::new(Mutex::new(Waiting::default())),
            stderr,
            next_id: AtomicU32::new(1),
            extensions: Vec::new(),
        };
        let mut hello = Vec::new();
        put_u32(&mut hello, 5);
        hello.push(FXP_INIT);
        put_u32(&mut hello, 3);
        // The version exchange happens on this thread, with a watchdog
        // that kills a child that neither answers nor exits (a password
        // prompt nobody will answer).
        let (done_tx, done_rx) = channel::<()>();
        let pid = session.child.lock().map(|c| c.id()).unwrap_or(0);
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(timeout) {
                // SAFETY: signalling our own child, which we have not
                // reaped yet (its pid cannot have been reused).
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        });
        let mut reader = BufReader::with_capacity(256 << 10, stdout);
        let version = stdin
            .write_all(&hello)
            .and_then(|()| stdin.flush())
            .and_then(|()| read_packet(&mut reader));
        drop(done_tx);
        let version = match version {
            Ok(v) => v,
            Err(_) => return Err(SftpError::Lost(session.last_words())),
        };
        if version.first() != Some(&FXP_VERSION) {
            return Err(SftpError::Protocol("no SFTP version reply".into()));
        }
        let mut c = Cursor { b: &version[1..] };
        let v = c.u32()?;
        if v < 3 {
            return Err(SftpError::Protocol(format!("server speaks SFTP {v}")));
        }
        while !c.b.is_empty() {
            let name = c.string()?;
            c.string()?;
            session
                .extensions
                .push(String::from_utf8_lossy(name).into_owned());
        }
        *session.writer.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(stdin);
        let waiting = session.waiting.clone();
        std::thread::Builder::new()
            .name("tessera-sftp".into())
            .spawn(move || dispatch(reader, &waiting))
            .map_err(|e| SftpError::Lost(format!("cannot start a thread: {e}")))?;
        Ok(session)
    }

    /// Whether the server offers an `@openssh.com` extension.
    pub(crate) fn has_extension(&self, name: &str) -> bool {
        self.extensions.iter().any(|e| e == name)
    }

    /// Whether the connection still stands.
    pub(crate) fn is_open(&self) -> bool {
        !self.waiting.lock().map(|w| w.closed).unwrap_or(true)
    }

    /// What the child said before it went away (waiting a moment for its
    /// stderr to close), as one line.
    fn last_words(&self) -> String {
        let (lock, cv) = &*self.stderr;
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
        while !s.done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = cv
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let mut words = s.lines.join("; ");
        if words.is_empty() {
            if let Ok(Some(st)) = self.child.lock().map(|mut c| c.try_wait().ok().flatten()) {
                words = format!("the server process exited ({st})");
            }
        }
        words
    }

    /// Send a request; its reply arrives on the receiver.
    fn send(&self, kind: u8, payload: &[u8]) -> SftpResult<Receiver<Reply>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = channel();
        {
            let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if w.closed {
                drop(w);
                return Err(SftpError::Lost(self.last_words()));
            }
            w.replies.insert(id, tx);
        }
        let mut head = Vec::with_capacity(9);
        put_u32(&mut head, (payload.len() + 5) as u32);
        head.push(kind);
        put_u32(&mut head, id);
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let sent = match writer.as_mut() {
            Some(w) => w
                .write_all(&head)
                .and_then(|()| w.write_all(payload))
                .and_then(|()| w.flush()),
            None => Err(std::io::Error::other("closed")),
        };
        drop(writer);
        if sent.is_err() {
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .replies
                .remove(&id);
            return Err(SftpError::Lost(self.last_words()));
        }
        Ok(rx)
    }

    fn receive(&self, rx: Receiver<Reply>) -> SftpResult<Reply> {
        rx.recv().map_err(|_| SftpError::Lost(self.last_words()))
    }

    fn call(&self, kind: u8, payload: &[u8]) -> SftpResult<Reply> {
        let rx = self.send(kind, payload)?;
        self.receive(rx)
    }

    fn call_status(&self, kind: u8, payload: &[u8]) -> SftpResult<()> {
        expect_status(self.call(kind, payload)?)
    }

    fn two_paths(a: &str, b: &str) -> Vec<u8> {
        let mut p = Vec::new();
        put_str(&mut p, a.as_bytes());
        put_str(&mut p, b.as_bytes());
        p
    }

    fn handle_reply(r: Reply) -> SftpResult<Vec<u8>> {
        match r.kind {
            FXP_HANDLE => Ok(Cursor { b: &r.body }.string()?.to_vec()),
            FXP_STATUS => status(&r.body).and(Err(SftpError::Protocol("no handle".into()))),
            k => Err(SftpError::Protocol(format!("unexpected reply {k}"))),
        }
    }

    /// Open a file; the handle must be [`close`](Self::close)d.
    pub(crate) fn open(&self, path: &str, flags: u32) -> SftpResult<Vec<u8>> {
        let mut p = Vec::new();
        put_str(&mut p, path.as_bytes());
        put_u32(&mut p, flags);
        put_u32(&mut p, 0);
        Self::handle_reply(self.call(FXP_OPEN, &p)?)
    }

    pub(crate) fn close(&self, handle: &[u8]) -> SftpResult<()> {
        let mut p = Vec::new();
        put_str(&mut p, handle);
        self.call_status(FXP_CLOSE, &p)
    }

    /// Close a handle that was only read, without waiting for the answer
    /// (nothing depends on it; a ranged read costs two round trips, not
    /// three).
    pub(crate) fn close_read(&self, handle: &[u8]) {
        let mut p = Vec::new();
        put_str(&mut p, handle);
        let _ = self.send(FXP_CLOSE, &p);
    }

    /// Write all of `data` from offset 0, [`WINDOW`] requests in flight.
    pub(crate) fn write_all(&self, handle: &[u8], data: &[u8]) -> SftpResult<()> {
        let mut inflight = std::collections::VecDeque::new();
        let mut first_err = None;
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            let mut p = Vec::with_capacity(chunk.len() + handle.len() + 16);
            put_str(&mut p, handle);
            put_u64(&mut p, (i * CHUNK) as u64);
            put_str(&mut p, chunk);
            inflight.push_back(self.send(FXP_WRITE, &p)?);
            if inflight.len() >= WINDOW {
                if let Some(rx) = inflight.pop_front() {
                    if let Err(e) = self.receive(rx).and_then(expect_status) {
                        first_err.get_or_insert(e);
                        break;
                    }
                }
            }
        }
        for rx in inflight {
            if let Err(e) = self.receive(rx).and_then(expect_status) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Read `len` bytes at `offset`, [`WINDOW`] requests in flight; fewer
    /// bytes only when the file ends first.
    pub(crate) fn read(&self, handle: &[u8], offset: u64, len: u64) -> SftpResult<Vec<u8>> {
        let mut out = Vec::with_capacity(usize::try_from(len.min(1 << 30)).unwrap_or(0));
        let end = offset.saturating_add(len);
        let mut next = offset; // the next offset to ask for
        let mut inflight: std::collections::VecDeque<(u64, u32, Receiver<Reply>)> =
            Default::default();
        let ask = |at: u64, n: u32| -> SftpResult<Receiver<Reply>> {
            let mut p = Vec::new();
            put_str(&mut p, handle);
            put_u64(&mut p, at);
            put_u32(&mut p, n);
            self.send(FXP_READ, &p)
        };
        loop {
            while inflight.len() < WINDOW && next < end {
                let n = (end - next).min(CHUNK as u64) as u32;
                inflight.push_back((next, n, ask(next, n)?));
                next += u64::from(n);
            }
            let Some((at, n, rx)) = inflight.pop_front() else {
                return Ok(out);
            };
            let r = self.receive(rx)?;
            match r.kind {
                FXP_DATA => {
                    let data = Cursor { b: &r.body }.string()?;
                    debug_assert_eq!(at, offset + out.len() as u64);
                    out.extend_from_slice(data);
                    if (data.len() as u32) < n {
                        // A short read: ask again from where it stopped,
                        // dropping the requests after it.
                        let resume = at + data.len() as u64;
                        for (_, _, rx) in inflight.drain(..) {
                            let _ = self.receive(rx);
                        }
                        if data.is_empty() {
                            return Ok(out);
                        }
                        next = resume;
                    }
                }
                FXP_STATUS => {
                    status(&r.body).or_else(
                        |e| {
                            if e.is_status(FX_EOF) {
                                Ok(())
                            } else {
                                Err(e)
                            }
                        },
                    )?;
                    // End of file.
                    for (_, _, rx) in inflight.drain(..) {
                        let _ = self.receive(rx);
                    }
                    return Ok(out);
                }
                k => return Err(SftpError::Protocol(format!("unexpected reply {k}"))),
            }
        }
    }

    fn attrs_reply(r: Reply) -> SftpResult<Attrs> {
        match r.kind {
            FXP_ATTRS => Cursor { b: &r.body }.attrs(),
            FXP_STATUS => status(&r.body).and(Err(SftpError::Protocol("no attributes".into()))),
            k => Err(SftpError::Protocol(format!("unexpected reply {k}"))),
        }
    }

    /// The attributes of a path (following symbolic links).
    pub(crate) fn stat(&self, path: &str) -> SftpResult<Attrs> {
        let mut p = Vec::new();
        put_str(&mut p, path.as_bytes());
        Self::attrs_reply(self.call(FXP_STAT, &p)?)
    }

    pub(crate) fn fstat(&self, handle: &[u8]) -> SftpResult<Attrs> {
        let mut p = Vec::new();
        put_str(&mut p, handle);
        Self::attrs_reply(self.call(FXP_FSTAT, &p)?)
    }

    /// The entries of a directory (without `.` and `..`).
    pub(crate) fn read_dir(&self, path: &str) -> SftpResult<Vec<(String, Attrs)>> {
        let mut p = Vec::new();
        put_str(&mut p, path.as_bytes());
        let handle = Self::handle_reply(self.call(FXP_OPENDIR, &p)?)?;
        let mut out = Vec::new();
        let listed = (|| loop {
            let mut p = Vec::new();
            put_str(&mut p, &handle);
            let r = self.call(FXP_READDIR, &p)?;
            match r.kind {
                FXP_NAME => {
                    let mut c = Cursor { b: &r.body };
                    for _ in 0..c.u32()? {
                        let name = String::from_utf8_lossy(c.string()?).into_owned();
                        c.string()?;
                        let attrs = c.attrs()?;
                        if name != "." && name != ".." {
                            out.push((name, attrs));
                        }
                    }
                }
                FXP_STATUS => match status(&r.body) {
                    Err(e) if e.is_status(FX_EOF) => return Ok(()),
                    Err(e) => return Err(e),
                    Ok(()) => return Err(SftpError::Protocol("OK ends a listing".into())),
                },
                k => return Err(SftpError::Protocol(format!("unexpected reply {k}"))),
            }
        })();
        let closed = self.close(&handle);
        listed?;
        closed?;
        Ok(out)
    }

    pub(crate) fn remove(&self, path: &str) -> SftpResult<()> {
        let mut p = Vec::new();
        put_str(&mut p, path.as_bytes());
        self.call_status(FXP_REMOVE, &p)
    }

    pub(crate) fn mkdir(&self, path: &str) -> SftpResult<()> {
        let mut p = Vec::new();
        put_str(&mut p, path.as_bytes());
        put_u32(&mut p, 0);
        self.call_status(FXP_MKDIR, &p)
    }

    /// The protocol's rename: version 3 says it fails when `to` exists
    /// (OpenSSH keeps that, by a hard link); some servers replace `to`.
    pub(crate) fn rename(&self, from: &str, to: &str) -> SftpResult<()> {
        self.call_status(FXP_RENAME, &Self::two_paths(from, to))
    }

    /// An `@openssh.com` request with two paths (`posix-rename`, `hardlink`).
    pub(crate) fn extended_paths(&self, name: &str, a: &str, b: &str) -> SftpResult<()> {
        let mut p = Vec::new();
        put_str(&mut p, name.as_bytes());
        p.extend_from_slice(&Self::two_paths(a, b));
        self.call_status(FXP_EXTENDED, &p)
    }

    /// `fsync@openssh.com`: the file's data reaches the server's disk.
    pub(crate) fn fsync(&self, handle: &[u8]) -> SftpResult<()> {
        let mut p = Vec::new();
        put_str(&mut p, b"fsync@openssh.com");
        put_str(&mut p, handle);
        self.call_status(FXP_EXTENDED, &p)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Closing stdin ends the server; a child that lingers is killed.
        drop(self.writer.lock().map(|mut w| w.take()));
        if let Ok(mut c) = self.child.lock() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => return,
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The reader thread: hand each reply to its waiter until the stream ends,
/// then fail every waiter (their senders are dropped).
fn dispatch(mut reader: impl Read, waiting: &Mutex<Waiting>) {
    while let Ok(packet) = read_packet(&mut reader) {
        if packet.len() < 5 {
            break;
        }
        let id = u32::from_be_bytes([packet[1], packet[2], packet[3], packet[4]]);
        let tx = waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replies
            .remove(&id);
        if let Some(tx) = tx {
            let _ = tx.send(Reply {
                kind: packet[0],
                body: packet[5..].to_vec(),
            });
        }
    }
    let mut w = waiting.lock().unwrap_or_else(|p| p.into_inner());
    w.closed = true;
    w.replies.clear();
}

/// Keep the child's last few stderr lines (its reason for failing).
fn collect_stderr(pipe: impl Read, shared: &(Mutex<Stderr>, std::sync::Condvar)) {
    use std::io::BufRead;
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        let line = line.trim().to_string();
        // rclone's note that it runs without a configuration file is no reason.
        if line.is_empty() || line.contains("Config file") && line.contains("not found") {
            continue;
        }
        let mut s = shared.0.lock().unwrap_or_else(|p| p.into_inner());
        s.lines.push(line);
        if s.lines.len() > 3 {
            s.lines.remove(0);
        }
    }
    shared.0.lock().unwrap_or_else(|p| p.into_inner()).done = true;
    shared.1.notify_all();
}
