//! [`extract`]: restore a tar stream into a directory, treating it as hostile.
//!
//! The stream is parsed here, with `tar::Header` only decoding fields, instead
//! of through `tar::Archive`, so that every limit is ours: long names and PAX
//! records are size-capped before they are read into memory, entry data is
//! always streamed, and a stream that stops before its end-of-archive marker
//! is an error rather than a silently shorter restore.
//!
//! Nothing is ever resolved through a path string. The target directory is
//! opened once, and every entry is created relative to a directory handle
//! reached from it one component at a time with `O_NOFOLLOW | O_DIRECTORY`,
//! then with the `*at` calls that do not follow a final symlink (`O_EXCL`
//! creation, `mkdirat`, `symlinkat`, `linkat` without `AT_SYMLINK_FOLLOW`,
//! `mknodat`, `AT_SYMLINK_NOFOLLOW` for owners and times). So a symlink
//! anywhere in the target, stored or already there, is never followed, and
//! symlinks themselves are restored exactly as stored: absolute, climbing
//! with `..`, or dangling.
//!
//! Safety rules, each refusing one entry (recorded in the report) and moving on:
//! * paths must be relative, non-empty and free of `..` and NUL bytes;
//! * nothing is created below a symlink, below a refused entry, or below a
//!   path that is not a directory;
//! * nothing existing is overwritten (existing directories are merged into);
//! * hard links may only point at a regular file this extraction created;
//! * owners, setuid and setgid bits, and device nodes are restored only when
//!   running as root (numeric ids, as `tar --numeric-owner`); otherwise a
//!   device is refused and the other entries get the running user as owner.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::fs::{self, File, Permissions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

use filetime::FileTime;
use tar::Header;

use super::input::{Copied, Input, Shared};
use super::meta::Xattr;
use super::parts::{write_sparse, Parts};
use super::report::{ExtractReport, Refused};
use super::serialize::{
    padding, BLOCK, BLOCK_DEVICE, CHAR_DEVICE, DIRECTORY, FIFO, HARDLINK, PAX_XATTR, REGULAR,
    SYMLINK,
};
use super::xattr;
use crate::error::{Error, IoContext, Result};

/// The object named in corruption errors.
const STREAM: &str = "tar stream";
/// Largest GNU long name or long link accepted: far above any usable path,
/// small enough that a hostile size cannot exhaust memory.
const MAX_LONG_NAME: u64 = 64 * 1024;
/// Largest PAX extended header accepted, for the same reason (room for
/// many extended attributes of up to 64 KiB each).
const MAX_PAX: u64 = 8 * 1024 * 1024;
/// Bytes written at once, and the size of a large file's pieces.
const COPY_BUF: usize = 256 * 1024;
/// Files up to this size are read whole and handed to a writer thread;
/// larger ones are handed to a writer too, their data following in
/// [`COPY_BUF`] pieces (bounded memory).
const POOLED_FILE: u64 = 1 << 20;
/// Pieces of a large file read ahead of its writer at most. Why: the
/// parsing thread copies the next pieces out of the stream while the
/// writer's `write` calls (the kernel's half of the work) run on another
/// core; a short queue is enough to keep both busy.
const PIECES_AHEAD: usize = 2;
/// Files queued for the writers, per writer: the read-ahead.
const QUEUED_PER_WRITER: usize = 16;
/// Files handed to a writer at once (fewer if they reach [`BATCH_BYTES`]).
/// Why: a writer taking files one at a time from a full queue woke the
/// parsing thread for each, a system-call round trip per file.
const BATCH_FILES: usize = 8;
const BATCH_BYTES: u64 = 256 << 10;
/// Bytes of file data queued for the writers at most (beyond one file):
/// the queue's memory. Once the restore ahead of the extraction got
/// faster, the writers' queue stayed full, and 32 queued files of up to
/// [`POOLED_FILE`] each could hold 32 MiB.
const QUEUED_BYTES: u64 = 2 << 20;
/// Capacity of the small files' buffers kept for reuse at most, and how
/// many: the queue's bytes again, at most.
const SPARE_BYTES: u64 = QUEUED_BYTES;
const SPARE_BUFFERS: usize = 64;

/// Extract a tar stream into `target`, which is created if missing.
///
/// `target` may already hold files: existing directories are merged into and
/// every other existing path is left alone (the entry is refused with
/// "already exists"). Unsafe or unsupported entries are refused one by one and
/// listed in [`ExtractReport::refused`]; everything else is restored with its
/// permission bits and mtime, and when running as root with its numeric owner
/// (otherwise setuid and setgid bits are cleared and device nodes refused).
/// Runs of zeros become holes. A malformed or truncated stream is an error;
/// what was extracted before it stays on disk.
pub fn extract(input: &mut dyn Read, target: &Path) -> Result<ExtractReport> {
    extract_selected(input, target, &[])
}

/// [`extract`] only the entries at or below the `include` paths (all when
/// empty), with the directories leading to them. An include that matches
/// no entry is listed in [`ExtractReport::unmatched`].
pub fn extract_selected(
    input: &mut dyn Read,
    target: &Path,
    include: &[String],
) -> Result<ExtractReport> {
    extract_with(
        &mut BufReader::with_capacity(COPY_BUF, input),
        target,
        include,
        1,
    )
}

/// [`extract_selected`] from a buffered stream (read from in place: a
/// small file's bytes are copied once, into what its writer gets), with
/// `writers` threads creating and writing the regular files while this
/// thread parses the stream; a large file's writer gets its data piece
/// by piece as it is read. The restored tree, and the report, are those
/// of one writer.
pub fn extract_with(
    input: &mut dyn BufRead,
    target: &Path,
    include: &[String],
    writers: usize,
) -> Result<ExtractReport> {
    extract_as(
        &mut Copied(input),
        target,
        include,
        running_as_root(),
        writers,
    )
}

/// [`extract_with`] from an [`Input`] that may hand a file's bytes to its
/// writer without a copy (a restore's stream of blocks).
pub fn extract_from(
    input: &mut dyn Input,
    target: &Path,
    include: &[String],
    writers: usize,
) -> Result<ExtractReport> {
    extract_as(input, target, include, running_as_root(), writers)
}

/// [`extract_with`], restoring owners, setuid/setgid bits and device
/// nodes only if `as_root` (so that tests run the unprivileged rules as root).
pub(super) fn extract_as(
    input: &mut dyn Input,
    target: &Path,
    include: &[String],
    as_root: bool,
    writers: usize,
) -> Result<ExtractReport> {
    let select = if include.is_empty() {
        None
    } else {
        let paths = include_paths(include)?;
        Some(Selection {
            matched: vec![false; paths.len()],
            paths,
            names: include.to_vec(),
        })
    };
    fs::create_dir_all(target).ctx(|| format!("cannot create {}", target.display()))?;
    let mut stream = Stream {
        inner: input,
        pos: 0,
    };
    // The target itself is the caller's choice: a symlink to it is followed.
    let root = open_at(
        libc::AT_FDCWD,
        &cstr(target.as_os_str().as_bytes()),
        DIR_FLAGS,
        0,
    )
    .ctx(|| format!("cannot open {}", target.display()))?;
    std::thread::scope(|scope| {
        let mut x = Extractor {
            root_path: target.to_path_buf(),
            root: Arc::new(root),
            open: Vec::new(),
            as_root,
            report: ExtractReport::default(),
            seq: 0,
            notes: Vec::new(),
            files: HashSet::new(),
            refused: HashSet::new(),
            dirs: HashMap::new(),
            buf: Vec::new(),
            select,
            pool: FileCreators::spawn(scope, writers),
        };
        while let Some(entry) = next_entry(&mut stream)? {
            let mut data = (&mut stream).take(entry.size);
            if x.selected(&entry) {
                x.entry(&entry, &mut data)?;
            }
            x.seq += 1;
            // Whatever the entry did not consume (refused entries, unexpected
            // data on a link) is skipped, then the block padding.
            let rest = data.limit();
            stream.skip(rest)?;
            stream.skip(padding(entry.size) as u64)?;
        }
        x.finish()
    })
}

/// List the entries of a tar stream (`tessera ls`): each is passed to
/// `visit` in stream order, its data skipped. The stream is parsed as
/// [`extract`] parses it, with the same limits and errors.
pub fn list(input: &mut dyn Read, visit: &mut dyn FnMut(Listed) -> Result<()>) -> Result<()> {
    list_with_offsets(input, &mut |l, _| visit(l))
}

/// [`list`], also giving the stream offset of each entry's data (a file's
/// contents lie there, unless it is a GNU sparse entry).
pub(crate) fn list_with_offsets(
    input: &mut dyn Read,
    visit: &mut dyn FnMut(Listed, u64) -> Result<()>,
) -> Result<()> {
    let mut buffered = BufReader::with_capacity(COPY_BUF, input);
    let mut stream = Stream {
        inner: &mut buffered,
        pos: 0,
    };
    while let Some(e) = next_entry(&mut stream)? {
        let kind = match e.kind {
            REGULAR | b'\0' | b'7' => "file",
            DIRECTORY => "dir",
            SYMLINK => "symlink",
            HARDLINK => "hardlink",
            FIFO => "fifo",
            CHAR_DEVICE => "chardev",
            BLOCK_DEVICE => "blockdev",
            _ => "other",
        };
        let has_link = e.kind == SYMLINK || e.kind == HARDLINK;
        let data = stream.pos;
        visit(
            Listed {
                path: String::from_utf8_lossy(&e.path).into_owned(),
                kind,
                size: if kind == "file" { e.size } else { 0 },
                mode: e.mode & 0o7777,
                mtime: u64::try_from(e.mtime.0).unwrap_or(0),
                link: has_link.then(|| String::from_utf8_lossy(&e.link).into_owned()),
            },
            data,
        )?;
        stream.skip(e.size + padding(e.size) as u64)?;
    }
    Ok(())
}

/// One entry of a tar stream, as [`list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    /// As stored (directories end in `/`), lossily decoded as UTF-8.
    pub path: String,
    /// `file`, `dir`, `symlink`, `hardlink`, `fifo`, `chardev`, `blockdev`
    /// or `other`.
    pub kind: &'static str,
    /// Content bytes (files only).
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, unix seconds.
    pub mtime: u64,
    /// Symlink target or hard-link source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// `--include` paths as components; an absolute, empty or `..` path is an
/// error (it could never name an entry that extraction would restore).
pub fn include_paths(include: &[String]) -> Result<Vec<Vec<Vec<u8>>>> {
    include
        .iter()
        .map(|i| match components(i.as_bytes()) {
            Ok(c) if !c.is_empty() => Ok(c.iter().map(|c| c.to_vec()).collect()),
            Ok(_) => Err(Error::invalid(format!("--include {i:?}: empty path"))),
            Err(reason) => Err(Error::invalid(format!("--include {i:?}: {reason}"))),
        })
        .collect()
}

/// The input, counting bytes so that errors can say where the stream broke.
struct Stream<'a> {
    inner: &'a mut dyn Input,
    pos: u64,
}

/// An entry's data: the stream, limited to the entry's size.
type Data<'s, 'a> = std::io::Take<&'s mut Stream<'a>>;

/// A file's next bytes as the input holds them: in one of its buffers, or
/// the end of one and the start of the next (`parts.rs` says why).
enum Shares {
    One(Shared),
    Two(Shared, Shared),
}

impl Shares {
    fn parts(&self) -> Parts<'_> {
        match self {
            Shares::One(a) => Parts::one(a),
            Shares::Two(a, b) => Parts::two(a, b),
        }
    }
}

/// What [`share`] took: the bytes shared, or copied after all.
enum Taken {
    Shared(Shares),
    Copied(Vec<u8>),
}

/// The next `n` bytes of an entry's data without a copy, if the input can
/// hand them out so ([`Input::share`]).
fn share_one(data: &mut Data, n: usize) -> Option<Shared> {
    if n as u64 > data.limit() {
        return None;
    }
    let s = data.get_mut().inner.share(n)?;
    data.get_mut().pos += n as u64;
    data.set_limit(data.limit() - n as u64);
    Some(s)
}

/// The next `n` bytes of the data of file `shown` without a copy: from one
/// of the input's buffers or straddling two. `None`, nothing consumed, if
/// the input does not share; copied if it shared only the first part (its
/// next buffer was shorter than the rest: a flush, or a truncated stream).
fn share(data: &mut Data, n: usize, shown: &str) -> Result<Option<Taken>> {
    if let Some(s) = share_one(data, n) {
        return Ok(Some(Taken::Shared(Shares::One(s))));
    }
    let avail = data.fill_buf().map_or(0, <[u8]>::len);
    if avail == 0 || avail >= n {
        return Ok(None);
    }
    let Some(head) = share_one(data, avail) else {
        return Ok(None);
    };
    if let Some(tail) = share_one(data, n - avail) {
        return Ok(Some(Taken::Shared(Shares::Two(head, tail))));
    }
    let mut bytes = Vec::with_capacity(n);
    bytes.extend_from_slice(&head);
    bytes.resize(n, 0);
    read_file_data(data, &mut bytes[avail..], shown)?;
    Ok(Some(Taken::Copied(bytes)))
}

impl Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// In place, so that a small file's bytes go straight from the input's
/// buffer into the one its writer gets.
impl BufRead for Stream<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.pos += n as u64;
    }
}

fn read_error(e: io::Error) -> Error {
    Error::io("cannot read the tar stream", e)
}

/// The next `size` bytes of the data of file `shown`, copied once out of
/// the input's buffer into `bytes` (emptied first, not zeroed); a
/// stream that ends first is corrupt (truncated), not a short file.
fn read_file_whole(
    data: &mut dyn BufRead,
    mut bytes: Vec<u8>,
    size: usize,
    shown: &str,
) -> Result<Vec<u8>> {
    bytes.clear();
    while bytes.len() < size {
        let got = match data.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e)),
        };
        if got.is_empty() {
            return Err(Error::corrupt(
                STREAM,
                format!("truncated in the data of {shown}"),
            ));
        }
        let k = got.len().min(size - bytes.len());
        bytes.extend_from_slice(&got[..k]);
        data.consume(k);
    }
    Ok(bytes)
}

/// Fill `buf` with the next bytes of the data of file `shown`; a stream
/// that ends first is corrupt (truncated), not a short file.
fn read_file_data(data: &mut dyn Read, buf: &mut [u8], shown: &str) -> Result<()> {
    data.read_exact(buf).map_err(|err| {
        if err.kind() == io::ErrorKind::UnexpectedEof {
            Error::corrupt(STREAM, format!("truncated in the data of {shown}"))
        } else {
            read_error(err)
        }
    })
}

impl Stream<'_> {
    /// Fill `buf` as far as the input allows; returns the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_error(e)),
            }
        }
        Ok(got)
    }

    /// Pass over `n` bytes in place (nothing copied).
    fn skip(&mut self, mut n: u64) -> Result<()> {
        while n > 0 {
            let got = match self.inner.fill_buf() {
                Ok(b) => b.len(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_error(e)),
            };
            if got == 0 {
                return Err(truncated(self.pos));
            }
            let k = got.min(usize::try_from(n).unwrap_or(usize::MAX));
            self.inner.consume(k);
            self.pos += k as u64;
            n -= k as u64;
        }
        Ok(())
    }

    /// Read the (size-capped) data of an extension record and its padding.
    fn read_record(&mut self, size: u64) -> Result<Vec<u8>> {
        let mut data = vec![0; size as usize];
        if self.fill(&mut data)? < data.len() {
            return Err(truncated(self.pos));
        }
        self.skip(padding(size) as u64)?;
        Ok(data)
    }
}

fn truncated(pos: u64) -> Error {
    Error::corrupt(STREAM, format!("truncated: the stream ends at byte {pos}"))
}

fn bad_header(offset: u64, reason: impl std::fmt::Display) -> Error {
    Error::corrupt(STREAM, format!("bad header at byte {offset}: {reason}"))
}

/// One entry with its extension records (long names, PAX) applied.
struct Entry {
    kind: u8,
    path: Vec<u8>,
    link: Vec<u8>,
    size: u64,
    mode: u32,
    /// Seconds (negative before 1970) and nanoseconds.
    mtime: (i64, u32),
    /// Numeric owner, when the header's field decodes.
    uid: Option<u64>,
    gid: Option<u64>,
    /// Device numbers of a character or block device entry.
    device: Option<(u32, u32)>,
    /// Extended attributes (PAX `SCHILY.xattr.*`), in stream order.
    xattrs: Vec<Xattr>,
}

/// The PAX keys this reader honours; others are ignored.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
    mtime: Option<(i64, u32)>,
    uid: Option<u64>,
    gid: Option<u64>,
    xattrs: Vec<Xattr>,
}

/// Read the next entry's header(s). `None` at the end-of-archive marker; an
/// error if the stream ends before it.
fn next_entry(s: &mut Stream) -> Result<Option<Entry>> {
    let mut long_name: Option<Vec<u8>> = None;
    let mut long_link: Option<Vec<u8>> = None;
    let mut pax: Option<Pax> = None;
    loop {
        let offset = s.pos;
        let mut h = Header::new_old();
        let got = s.fill(h.as_mut_bytes())?;
        if got == 0 {
            return Err(Error::corrupt(
                STREAM,
                format!(
                    "truncated: the stream ends at byte {offset} without an end-of-archive marker"
                ),
            ));
        }
        if got < BLOCK {
            return Err(truncated(s.pos));
        }
        let bytes = h.as_bytes();
        if bytes.iter().all(|b| *b == 0) {
            if long_name.is_some() || long_link.is_some() || pax.is_some() {
                return Err(bad_header(
                    offset,
                    "end-of-archive marker after an extension record",
                ));
            }
            return Ok(None);
        }
        let sum: u32 = bytes[..148]
            .iter()
            .chain(&bytes[156..])
            .map(|b| u32::from(*b))
            .sum::<u32>()
            + 8 * u32::from(b' ');
        match h.cksum() {
            Ok(stored) if stored == sum => {}
            _ => return Err(bad_header(offset, "checksum mismatch (not a tar header)")),
        }
        let size = h.entry_size().map_err(|e| bad_header(offset, e))?;
        let kind = h.as_old().linkflag[0];
        match kind {
            b'L' | b'K' => {
                if size > MAX_LONG_NAME {
                    return Err(bad_header(
                        offset,
                        format!("long name of {size} bytes (limit {MAX_LONG_NAME})"),
                    ));
                }
                let mut value = s.read_record(size)?;
                if let Some(nul) = value.iter().position(|b| *b == 0) {
                    value.truncate(nul);
                }
                let slot = if kind == b'L' {
                    &mut long_name
                } else {
                    &mut long_link
                };
                if slot.replace(value).is_some() {
                    return Err(bad_header(offset, "two long names for one entry"));
                }
            }
            b'x' => {
                if size > MAX_PAX {
                    return Err(bad_header(
                        offset,
                        format!("PAX header of {size} bytes (limit {MAX_PAX})"),
                    ));
                }
                let data = s.read_record(size)?;
                let parsed = parse_pax(&data).map_err(|r| bad_header(offset, r))?;
                if pax.replace(parsed).is_some() {
                    return Err(bad_header(offset, "two PAX headers for one entry"));
                }
            }
            // Global PAX defaults: nothing this reader uses.
            b'g' => s.skip(size + padding(size) as u64)?,
            _ => {
                let pax = pax.unwrap_or_default();
                let path = pax
                    .path
                    .or(long_name)
                    .unwrap_or_else(|| h.path_bytes().into_owned());
                let link = pax
                    .linkpath
                    .or(long_link)
                    .or_else(|| h.link_name_bytes().map(|l| l.into_owned()))
                    .unwrap_or_default();
                let mode = h.mode().map_err(|e| bad_header(offset, e))?;
                let mtime = match pax.mtime {
                    Some(t) => t,
                    None => {
                        let t = h.mtime().map_err(|e| bad_header(offset, e))?;
                        (i64::try_from(t).unwrap_or(i64::MAX), 0)
                    }
                };
                if kind == b'S' {
                    skip_sparse_maps(s, &h)?;
                }
                // Foreign streams may leave these fields blank: then the
                // owner is not restored, and a device is refused.
                let device = match kind {
                    CHAR_DEVICE | BLOCK_DEVICE => h
                        .device_major()
                        .ok()
                        .flatten()
                        .zip(h.device_minor().ok().flatten()),
                    _ => None,
                };
                return Ok(Some(Entry {
                    kind,
                    path,
                    link,
                    size: pax.size.unwrap_or(size),
                    mode,
                    mtime,
                    uid: pax.uid.or_else(|| h.uid().ok()),
                    gid: pax.gid.or_else(|| h.gid().ok()),
                    device,
                    xattrs: pax.xattrs,
                }));
            }
        }
    }
}

/// GNU sparse entries may be followed by extra blocks of sparse maps before
/// their data; consume them so the stream stays aligned (the entry itself is
/// refused).
fn skip_sparse_maps(s: &mut Stream, h: &Header) -> Result<()> {
    let mut more = h.as_gnu().is_some_and(|g| g.is_extended());
    let mut block = [0u8; BLOCK];
    while more {
        if s.fill(&mut block)? < BLOCK {
            return Err(truncated(s.pos));
        }
        // After 21 sparse descriptors of 24 bytes comes the "is extended" flag.
        more = block[21 * 24] == 1;
    }
    Ok(())
}

/// Parse PAX records (`<len> <key>=<value>\n`).
fn parse_pax(mut data: &[u8]) -> std::result::Result<Pax, String> {
    let bad = || "malformed PAX record".to_string();
    let mut pax = Pax::default();
    while !data.is_empty() && data[0] != 0 {
        let sp = data.iter().position(|b| *b == b' ').ok_or_else(bad)?;
        let len: usize = std::str::from_utf8(&data[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        if len <= sp + 1 || len > data.len() || data[len - 1] != b'\n' {
            return Err(bad());
        }
        let record = &data[sp + 1..len - 1];
        let eq = record.iter().position(|b| *b == b'=').ok_or_else(bad)?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => pax.path = Some(value.to_vec()),
            b"linkpath" => pax.linkpath = Some(value.to_vec()),
            b"size" => pax.size = Some(parse_decimal(value).ok_or_else(bad)?),
            b"uid" => pax.uid = Some(parse_decimal(value).ok_or_else(bad)?),
            b"gid" => pax.gid = Some(parse_decimal(value).ok_or_else(bad)?),
            b"mtime" => pax.mtime = Some(parse_time(value).ok_or_else(bad)?),
            _ if key.starts_with(PAX_XATTR) => {
                let name = unescape_xattr(&key[PAX_XATTR.len()..]).ok_or_else(bad)?;
                pax.xattrs.push((name, value.to_vec()));
            }
            _ => {}
        }
        data = &data[len..];
    }
    Ok(pax)
}

fn parse_decimal(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A PAX time: decimal seconds, optionally negative, with an optional
/// fraction (digits past nanoseconds are dropped), as (seconds, nanoseconds)
/// with the nanoseconds counted forward from the seconds.
pub(super) fn parse_time(v: &[u8]) -> Option<(i64, u32)> {
    let (negative, v) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    let mut parts = v.splitn(2, |b| *b == b'.');
    let whole = parts.next()?;
    let frac = parts.next().unwrap_or_default();
    if whole.is_empty() || !whole.iter().chain(frac).all(u8::is_ascii_digit) {
        return None;
    }
    let secs = i128::from(parse_decimal(whole)?);
    let mut nanos = 0i128;
    for i in 0..9 {
        nanos = nanos * 10 + frac.get(i).map_or(0, |d| i128::from(d - b'0'));
    }
    let mut total = secs * 1_000_000_000 + nanos;
    if negative {
        total = -total;
    }
    let secs = i64::try_from(total.div_euclid(1_000_000_000)).ok()?;
    Some((secs, total.rem_euclid(1_000_000_000) as u32))
}

/// An extended attribute name from a PAX key, `%XX` escapes decoded (GNU
/// tar escapes `%` and `=`). Empty names and NUL bytes are refused.
fn unescape_xattr(key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(key.len());
    let mut i = 0;
    while i < key.len() {
        if key[i] == b'%' {
            let hex = std::str::from_utf8(key.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(key[i]);
            i += 1;
        }
    }
    (!out.is_empty() && !out.contains(&0)).then_some(out)
}

/// Split a stream path into its normal components, or say why it is unsafe.
/// `.` and empty components are dropped; an empty result means the root.
fn components(path: &[u8]) -> std::result::Result<Vec<&[u8]>, &'static str> {
    if path.is_empty() {
        return Err("empty path");
    }
    if path[0] == b'/' {
        return Err("absolute path");
    }
    if path.contains(&0) {
        return Err("path contains a NUL byte");
    }
    let mut out = Vec::new();
    for c in path.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("path contains `..`"),
            _ => out.push(c),
        }
    }
    Ok(out)
}

fn join(comps: &[&[u8]]) -> Vec<u8> {
    comps.join(&b'/')
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The outcome of a safety check: `Err` carries the refusal reason.
type Check<T> = std::result::Result<T, String>;

/// Directory handles used only as the base of `*at` calls: `O_PATH` needs no
/// read permission on them.
#[cfg(any(target_os = "linux", target_os = "android"))]
const DIR_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const DIR_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY;

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// What a directory gets once nothing more is created in it.
struct DirMeta {
    mode: u32,
    mtime: (i64, u32),
    owner: Option<(u64, u64)>,
    /// Set last too: a default ACL set earlier would shape what is
    /// created inside.
    xattrs: Vec<Xattr>,
}

struct Extractor {
    /// The target, for messages.
    root_path: PathBuf,
    /// The target, opened once: every entry is created relative to it.
    root: Arc<OwnedFd>,
    /// Directories opened along the previous entry's parents, from the root
    /// down: consecutive entries of a sorted stream share most of them. This
    /// extraction never removes or replaces anything, so a name opened once
    /// keeps naming the same directory. Shared with the writers.
    open: Vec<(Vec<u8>, Arc<OwnedFd>)>,
    /// Whether owners, setuid/setgid bits and device nodes are restored.
    as_root: bool,
    report: ExtractReport,
    /// The entry being extracted, counted in stream order.
    seq: u64,
    /// Refusals, tagged with their entry's `seq`: writers finish out of
    /// order, the report lists them in stream order.
    notes: Vec<(u64, Refused)>,
    /// Regular files created by this extraction: the only hard link targets.
    files: HashSet<Vec<u8>>,
    /// Refused paths: nothing is created below them.
    refused: HashSet<Vec<u8>>,
    /// Directories and their metadata, applied once their contents exist.
    dirs: HashMap<Vec<u8>, DirMeta>,
    buf: Vec<u8>,
    /// `--include`: which entries to restore (all without one).
    select: Option<Selection>,
    /// Writer threads for small regular files; none with one writer.
    pool: Option<FileCreators>,
}

/// What a restored regular file gets after its data.
struct FileMeta {
    owner: Option<(u64, u64)>,
    xattrs: Vec<Xattr>,
    /// Permission bits, already limited by [`Extractor::mode_bits`].
    mode: u32,
    mtime: (i64, u32),
}

/// A regular file for a writer thread.
struct FileJob {
    seq: u64,
    /// The directory it is created in, opened by the parsing thread.
    dir: Arc<OwnedFd>,
    name: CString,
    key: Vec<u8>,
    shown: String,
    path: PathBuf,
    size: u64,
    data: FileData,
    meta: FileMeta,
}

/// A file's bytes as its writer gets them.
enum FileData {
    /// Read whole (a small file): counted in the writers' queue.
    Whole(Vec<u8>),
    /// A small file's bytes as the input holds them (no copy), counted
    /// in the queue as [`FileData::Whole`].
    Shared(Shares),
    /// A large file's, following piece by piece while the parsing thread
    /// reads them.
    Pieces(Pieces),
}

/// A writer's answer: restored (with notes on what it could not give the
/// file), refused, or an error that stops the extraction.
struct FileDone {
    seq: u64,
    key: Vec<u8>,
    shown: String,
    size: u64,
    /// Bytes it held in the writers' queue.
    held: u64,
    /// A small file's buffer, written: back for the next small file.
    spare: Vec<u8>,
    outcome: Result<Check<Vec<Refused>>>,
}

/// Where [`write_file`] takes a file's bytes from, in the pieces it asks
/// for (each [`COPY_BUF`] long but the last, so that every piece starts at
/// a multiple of it and every aligned zero block is seen whole: a hole).
trait Source {
    /// The next `want` bytes of file `shown`.
    fn next(&mut self, want: usize, shown: &str) -> Result<Parts<'_>>;
}

/// Bytes read from a stream into one buffer (the one-writer extraction).
struct ReadSource<'a> {
    data: &'a mut dyn Read,
    buf: &'a mut Vec<u8>,
}

impl Source for ReadSource<'_> {
    fn next(&mut self, want: usize, shown: &str) -> Result<Parts<'_>> {
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        read_file_data(self.data, &mut self.buf[..want], shown)?;
        Ok(Parts::one(&self.buf[..want]))
    }
}

/// A small file's bytes, all there: written from where they are.
impl Source for Parts<'_> {
    fn next(&mut self, want: usize, shown: &str) -> Result<Parts<'_>> {
        self.take(want)
            .ok_or_else(|| Error::corrupt(STREAM, format!("truncated in the data of {shown}")))
    }
}

/// A large file's pieces, sent by the parsing thread as it reads them;
/// each one copied and written goes back to it for reuse.
struct Pieces {
    next: Receiver<Piece>,
    spent: Sender<Vec<u8>>,
    current: Option<Piece>,
}

/// A piece of a large file: copied out of the stream, or shared with it
/// when it lies in the input's buffers ([`Input::share`]), one or two.
enum Piece {
    Copied(Vec<u8>),
    Shared(Shares),
}

impl Source for Pieces {
    fn next(&mut self, want: usize, shown: &str) -> Result<Parts<'_>> {
        if let Some(Piece::Copied(spent)) = self.current.take() {
            // The parsing thread may be done with pieces: then it is freed.
            let _ = self.spent.send(spent);
        }
        // The parsing thread stopped before the end (a broken stream,
        // reported there): this file is incomplete.
        let piece = self
            .next
            .recv()
            .map_err(|_| Error::corrupt(STREAM, format!("truncated in the data of {shown}")))?;
        let bytes = match self.current.insert(piece) {
            Piece::Copied(v) => Parts::one(v),
            Piece::Shared(s) => s.parts(),
        };
        if bytes.len() != want {
            return Err(Error::io(
                format!("cannot write {shown}"),
                io::Error::other("a piece of unexpected size (extraction bug)"),
            ));
        }
        Ok(bytes)
    }
}

/// The writer threads and what they have not answered yet.
///
/// Why: creating a file and giving it its metadata costs more system calls
/// than writing its data; with many small files one thread spends the
/// restore in the kernel while the other cores idle. The parsing thread
/// still decides everything (paths, refusals, parents opened without
/// following symlinks); a writer only creates one new name in a directory
/// handle it is given. Any later entry whose name, or a parent's name, is a
/// file still being written waits for the writers first, as do hard links
/// to it and the directories' metadata at the end: so every check sees what
/// a one-writer extraction would see.
struct FileCreators {
    jobs: SyncSender<Vec<FileJob>>,
    /// Files not yet handed over: sent as one batch.
    unsent: Vec<FileJob>,
    unsent_bytes: u64,
    done: Receiver<FileDone>,
    /// Keys of the files queued or being written.
    pending: HashSet<Vec<u8>>,
    /// Their bytes (a large file's pieces apart).
    queued: u64,
    /// Large files' pieces back from their writers, for the next pieces.
    spent: Sender<Vec<u8>>,
    spares: Receiver<Vec<u8>>,
    /// Small files' buffers back from their writers, for the next small
    /// files (at most [`SPARE_BYTES`] of capacity), and their capacity.
    /// Why: a buffer allocated here and freed on a writer's thread cost a
    /// cross-thread malloc and free, and fresh pages, per file.
    buffers: Vec<Vec<u8>>,
    buffer_bytes: u64,
}

impl FileCreators {
    /// `writers` threads in `scope`, or none (everything is written by the
    /// parsing thread) for one writer or if no thread can be started.
    fn spawn<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        writers: usize,
    ) -> Option<Self> {
        if writers <= 1 {
            return None;
        }
        let (jobs, queue) =
            sync_channel::<Vec<FileJob>>((writers * QUEUED_PER_WRITER / BATCH_FILES).max(1));
        let (answer, done) = channel::<FileDone>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        for _ in 0..writers {
            let queue = Arc::clone(&queue);
            let answer: Sender<FileDone> = answer.clone();
            let spawned = std::thread::Builder::new()
                .name("tessera-write".into())
                .spawn_scoped(scope, move || {
                    loop {
                        // Hold the lock only to take a batch.
                        let batch = match queue.lock() {
                            Ok(q) => q.recv(),
                            Err(_) => return,
                        };
                        let Ok(batch) = batch else { return };
                        for job in batch {
                            let write = |source: &mut dyn Source| {
                                write_file(
                                    job.dir.as_raw_fd(),
                                    &job.name,
                                    &job.path,
                                    &job.shown,
                                    job.size,
                                    source,
                                    &job.meta,
                                )
                            };
                            let (held, whole, outcome) = match job.data {
                                FileData::Whole(bytes) => {
                                    let outcome = write(&mut Parts::one(&bytes));
                                    (job.size, bytes, outcome)
                                }
                                FileData::Shared(shared) => {
                                    (job.size, Vec::new(), write(&mut shared.parts()))
                                }
                                // A large file's remaining pieces are not
                                // waited for: the parsing thread stops
                                // sending once they are dropped here.
                                FileData::Pieces(mut p) => (0, Vec::new(), write(&mut p)),
                            };
                            let reply = FileDone {
                                seq: job.seq,
                                key: job.key,
                                shown: job.shown,
                                size: job.size,
                                held,
                                spare: whole,
                                outcome,
                            };
                            // The parsing thread stopped (an error): nobody waits.
                            let _ = answer.send(reply);
                        }
                    }
                });
            if spawned.is_ok() {
                started += 1;
            }
        }
        let (spent, spares) = channel();
        (started > 0).then(|| FileCreators {
            jobs,
            unsent: Vec::new(),
            unsent_bytes: 0,
            done,
            pending: HashSet::new(),
            queued: 0,
            spent,
            spares,
            buffers: Vec::new(),
            buffer_bytes: 0,
        })
    }

    /// A buffer for a small file of `size` bytes: the smallest spare one
    /// it fits in, or a new one.
    fn buffer(&mut self, size: usize) -> Vec<u8> {
        let best = self
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= size)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut b = self.buffers.swap_remove(i);
                self.buffer_bytes -= b.capacity() as u64;
                b.clear();
                b
            }
            None => Vec::with_capacity(size),
        }
    }

    /// Keep a written file's buffer for reuse, if there is room.
    fn keep(&mut self, buf: Vec<u8>) {
        let cap = buf.capacity() as u64;
        if cap > 0 && self.buffers.len() < SPARE_BUFFERS && self.buffer_bytes + cap <= SPARE_BYTES {
            self.buffer_bytes += cap;
            self.buffers.push(buf);
        }
    }

    /// Hand the files not yet handed over to the writers.
    fn send(&mut self) -> Result<()> {
        if self.unsent.is_empty() {
            return Ok(());
        }
        self.unsent_bytes = 0;
        let batch = std::mem::replace(&mut self.unsent, Vec::with_capacity(BATCH_FILES));
        self.jobs.send(batch).map_err(|_| {
            Error::io(
                "cannot write the restored files",
                io::Error::other("the writer threads stopped"),
            )
        })
    }

    /// Whether `key` or one of its parents is a file not yet written.
    fn blocks(&self, key: &[u8]) -> bool {
        !self.pending.is_empty()
            && (self.pending.contains(key)
                || key
                    .iter()
                    .enumerate()
                    .any(|(i, b)| *b == b'/' && self.pending.contains(&key[..i])))
    }
}

/// The paths a partial restore asks for, as components.
struct Selection {
    paths: Vec<Vec<Vec<u8>>>,
    matched: Vec<bool>,
    /// As given, for the report.
    names: Vec<String>,
}

impl Extractor {
    /// Whether an entry is restored: without a selection all are; with one,
    /// those at or below an included path, and the directories above one.
    /// Entries with unusable paths go to `entry`, which refuses them.
    fn selected(&mut self, e: &Entry) -> bool {
        let Some(sel) = self.select.as_mut() else {
            return true;
        };
        let Ok(comps) = components(&e.path) else {
            return true;
        };
        let mut keep = false;
        for (inc, matched) in sel.paths.iter().zip(sel.matched.iter_mut()) {
            if comps.len() >= inc.len() && comps.iter().zip(inc).all(|(a, b)| *a == &b[..]) {
                *matched = true;
                keep = true;
            } else if e.kind == DIRECTORY
                && comps.len() < inc.len()
                && comps.iter().zip(inc).all(|(a, b)| *a == &b[..])
            {
                keep = true;
            }
        }
        keep
    }

    fn abs(&self, key: &[u8]) -> PathBuf {
        self.root_path.join(OsStr::from_bytes(key))
    }

    fn refuse(&mut self, shown: &str, key: Option<Vec<u8>>, reason: impl Into<String>) {
        if let Some(key) = key {
            self.refused.insert(key);
        }
        self.notes.push((
            self.seq,
            Refused {
                path: shown.to_string(),
                reason: reason.into(),
            },
        ));
    }

    /// Take the writers' answers: all of them (`wait`), or those ready.
    fn collect(&mut self, wait: bool) -> Result<()> {
        self.collect_until(wait, u64::MAX)
    }

    /// Take the writers' answers: all of them (`wait`), or those ready,
    /// waiting for more while over `queued` bytes are still queued.
    fn collect_until(&mut self, wait: bool, queued: u64) -> Result<()> {
        let Some(pool) = self.pool.as_mut() else {
            return Ok(());
        };
        if wait || pool.queued > queued {
            // Answers are waited for below: what they wait on must be sent.
            pool.send()?;
        }
        let mut answers = Vec::new();
        while !pool.pending.is_empty() {
            let next = if wait || pool.queued > queued {
                pool.done.recv().ok()
            } else {
                pool.done.try_recv().ok()
            };
            let Some(mut d) = next else { break };
            pool.pending.remove(&d.key);
            pool.queued -= d.held;
            pool.keep(std::mem::take(&mut d.spare));
            answers.push(d);
        }
        if wait && !pool.pending.is_empty() {
            return Err(Error::io(
                "cannot write the restored files",
                io::Error::other("a writer thread stopped"),
            ));
        }
        let mut failed = None;
        for d in answers {
            match d.outcome {
                Ok(Ok(notes)) => {
                    self.notes.extend(notes.into_iter().map(|n| (d.seq, n)));
                    self.files.insert(d.key);
                    self.report.files += 1;
                    self.report.bytes += d.size;
                }
                Ok(Err(reason)) => {
                    self.refused.insert(d.key);
                    self.notes.push((
                        d.seq,
                        Refused {
                            path: d.shown,
                            reason,
                        },
                    ));
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Wait for the writers if `key` (or a parent) is a file they have not
    /// written yet.
    fn settle(&mut self, key: &[u8]) -> Result<()> {
        if self.pool.as_ref().is_some_and(|p| p.blocks(key)) {
            self.collect(true)?;
        }
        Ok(())
    }

    fn entry(&mut self, e: &Entry, data: &mut Data) -> Result<()> {
        let shown = lossy(&e.path);
        let comps = match components(&e.path) {
            Ok(c) => c,
            Err(reason) => {
                self.refuse(&shown, None, reason);
                return Ok(());
            }
        };
        if comps.is_empty() {
            // "./": the target itself, which this extraction does not alter.
            if e.kind != DIRECTORY {
                self.refuse(&shown, None, "empty path");
            }
            return Ok(());
        }
        let key = join(&comps);
        // A file still being written under this name or a parent's: wait,
        // so that the checks below see it as one writer would have left it.
        self.settle(&key)?;
        if let Err(reason) = self.check_ancestors(&comps) {
            self.refuse(&shown, Some(key), reason);
            return Ok(());
        }
        let outcome = match e.kind {
            REGULAR | 0 | b'7' if e.path.ends_with(b"/") => {
                Err("file entry with a directory path".to_string())
            }
            REGULAR | 0 | b'7' => self.file(e, &comps, &key, &shown, data)?,
            DIRECTORY => self.dir(e, &comps, &key)?,
            SYMLINK => self.symlink(e, &comps, &shown)?,
            HARDLINK => self.hardlink(e, &comps)?,
            FIFO | CHAR_DEVICE | BLOCK_DEVICE => self.special(e, &comps, &shown)?,
            b'S' => Err("GNU sparse files are not supported".into()),
            k => Err(format!(
                "unsupported entry type {:?}",
                char::from(k).escape_default().to_string()
            )),
        };
        if let Err(reason) = outcome {
            self.refuse(&shown, Some(key), reason);
        }
        Ok(())
    }

    /// Refuse anything below a refused entry.
    fn check_ancestors(&self, comps: &[&[u8]]) -> Check<()> {
        if self.refused.is_empty() {
            return Ok(());
        }
        for i in 1..comps.len() {
            let parent = join(&comps[..i]);
            if self.refused.contains(&parent) {
                return Err(format!("parent {} was refused", lossy(&parent)));
            }
        }
        Ok(())
    }

    /// The directory handle an entry is created in: its parents are opened
    /// one by one without following symlinks (missing ones are created), so
    /// a parent that is a symlink or not a directory refuses the entry.
    fn parent(&mut self, comps: &[&[u8]]) -> Result<Check<RawFd>> {
        let parents = &comps[..comps.len() - 1];
        let keep = self
            .open
            .iter()
            .zip(parents)
            .take_while(|((name, _), c)| name == *c)
            .count();
        self.open.truncate(keep);
        for (i, c) in parents.iter().enumerate().skip(keep) {
            let at = self.current();
            let name = cstr(c);
            let mut opened = open_at(at, &name, DIR_FLAGS | libc::O_NOFOLLOW, 0);
            if matches!(&opened, Err(e) if e.kind() == io::ErrorKind::NotFound) {
                // A stream normally lists directories before their contents;
                // one that does not gets default directories.
                match mkdir_at(at, &name, 0o755) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        let path = self.abs(&join(&comps[..=i]));
                        return Err(Error::io(format!("cannot create {}", path.display()), e));
                    }
                }
                opened = open_at(at, &name, DIR_FLAGS | libc::O_NOFOLLOW, 0);
            }
            match opened {
                Ok(fd) => self.open.push((c.to_vec(), Arc::new(fd))),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                    let what = if lstat_at(at, &name).is_ok_and(|m| is_type(&m, libc::S_IFLNK)) {
                        "is a symlink"
                    } else {
                        "is not a directory"
                    };
                    return Ok(Err(format!("parent {} {what}", lossy(&join(&comps[..=i])))));
                }
                Err(e) => {
                    let path = self.abs(&join(&comps[..=i]));
                    return Err(Error::io(format!("cannot open {}", path.display()), e));
                }
            }
        }
        Ok(Ok(self.current()))
    }

    /// The deepest directory opened by [`Self::parent`].
    fn current(&self) -> RawFd {
        self.open
            .last()
            .map_or(self.root.as_raw_fd(), |(_, fd)| fd.as_raw_fd())
    }

    /// [`Self::current`], for a writer thread to hold.
    fn current_shared(&self) -> Arc<OwnedFd> {
        Arc::clone(self.open.last().map_or(&self.root, |(_, fd)| fd))
    }

    /// Permission bits to apply: setuid and setgid only with the owner.
    fn mode_bits(&self, mode: u32) -> u32 {
        if self.as_root {
            mode & 0o7777
        } else {
            mode & 0o1777
        }
    }

    /// The numeric owner to restore, if any.
    fn owner(&self, e: &Entry) -> Option<(u64, u64)> {
        if self.as_root {
            e.uid.zip(e.gid)
        } else {
            None
        }
    }

    /// Extended attributes a restored entry did not get (an unsupported file
    /// system, `trusted.*` without root, …): reported, as a refused owner.
    fn xattr_failures(&mut self, shown: &str, failed: Vec<(String, io::Error)>) {
        if let Some(n) = xattr_note(shown, failed) {
            self.notes.push((self.seq, n));
        }
    }

    /// Give an entry just created in `at` (a symlink, a special file) its
    /// owner, unless it has it already (created by root, usually): a chown
    /// is a journalled inode update, a stat is not.
    fn chown_new(&mut self, shown: &str, owner: Option<(u64, u64)>, at: RawFd, name: &CStr) {
        let owner = owner.filter(|&o| lstat_at(at, name).map_or(true, |m| !owned_by(&m, o)));
        self.chown(shown, owner, |u, g| chown_at(at, name, u, g));
    }

    /// Give a restored entry its owner with `chown`; a failure is reported
    /// (the entry stays) rather than stopping the restore.
    fn chown(
        &mut self,
        shown: &str,
        owner: Option<(u64, u64)>,
        chown: impl FnOnce(libc::uid_t, libc::gid_t) -> io::Result<()>,
    ) {
        if let Some(n) = chown_note(shown, owner, chown) {
            self.notes.push((self.seq, n));
        }
    }

    fn file(
        &mut self,
        e: &Entry,
        comps: &[&[u8]],
        key: &[u8],
        shown: &str,
        data: &mut Data,
    ) -> Result<Check<()>> {
        let at = match self.parent(comps)? {
            Ok(fd) => fd,
            Err(r) => return Ok(Err(r)),
        };
        let path = self.abs(key);
        let name = cstr(comps[comps.len() - 1]);
        let meta = FileMeta {
            owner: self.owner(e),
            xattrs: e.xattrs.clone(),
            mode: self.mode_bits(e.mode),
            mtime: e.mtime,
        };
        if self.pool.is_some() && e.size <= POOLED_FILE {
            // Room for it in the queue first (one file always fits).
            self.collect_until(false, QUEUED_BYTES.saturating_sub(e.size))?;
            let bytes = match share(data, e.size as usize, shown)? {
                Some(Taken::Shared(shared)) => FileData::Shared(shared),
                Some(Taken::Copied(bytes)) => FileData::Whole(bytes),
                None => {
                    let pool = self.pool.as_mut().expect("checked above");
                    let buf = pool.buffer(e.size as usize);
                    FileData::Whole(read_file_whole(data, buf, e.size as usize, shown)?)
                }
            };
            let job = FileJob {
                seq: self.seq,
                dir: self.current_shared(),
                name,
                key: key.to_vec(),
                shown: shown.to_string(),
                path,
                size: e.size,
                data: bytes,
                meta,
            };
            let pool = self.pool.as_mut().expect("checked above");
            pool.pending.insert(job.key.clone());
            pool.queued += e.size;
            pool.unsent_bytes += e.size;
            pool.unsent.push(job);
            if pool.unsent.len() >= BATCH_FILES || pool.unsent_bytes >= BATCH_BYTES {
                pool.send()?;
            }
            self.collect(false)?;
            return Ok(Ok(()));
        }
        if self.pool.is_some() {
            let dir = self.current_shared();
            let seq = self.seq;
            let pool = self.pool.as_mut().expect("checked above");
            let (send, next) = sync_channel(PIECES_AHEAD);
            let job = FileJob {
                seq,
                dir,
                name,
                key: key.to_vec(),
                shown: shown.to_string(),
                path,
                size: e.size,
                data: FileData::Pieces(Pieces {
                    next,
                    spent: pool.spent.clone(),
                    current: None,
                }),
                meta,
            };
            pool.pending.insert(job.key.clone());
            // Handed over at once (after the small files before it): its
            // writer starts on the first piece.
            pool.unsent.push(job);
            pool.send()?;
            let mut left = e.size;
            while left > 0 {
                let want = COPY_BUF.min(usize::try_from(left).unwrap_or(usize::MAX));
                let piece = match share(data, want, shown)? {
                    Some(Taken::Shared(shared)) => Piece::Shared(shared),
                    Some(Taken::Copied(bytes)) => Piece::Copied(bytes),
                    None => {
                        let mut piece = pool.spares.try_recv().unwrap_or_default();
                        piece.resize(want, 0);
                        read_file_data(data, &mut piece, shown)?;
                        Piece::Copied(piece)
                    }
                };
                // Its writer stopped (refused, or failed): the rest of its
                // data is passed over, and the answer says why.
                if send.send(piece).is_err() {
                    break;
                }
                left -= want as u64;
            }
            drop(send);
            self.collect(false)?;
            return Ok(Ok(()));
        }
        let mut source = ReadSource {
            data,
            buf: &mut self.buf,
        };
        let written = write_file(at, &name, &path, shown, e.size, &mut source, &meta)?;
        match written {
            Ok(notes) => {
                self.notes.extend(notes.into_iter().map(|n| (self.seq, n)));
                self.files.insert(key.to_vec());
                self.report.files += 1;
                self.report.bytes += e.size;
                Ok(Ok(()))
            }
            Err(reason) => Ok(Err(reason)),
        }
    }

    fn dir(&mut self, e: &Entry, comps: &[&[u8]], key: &[u8]) -> Result<Check<()>> {
        let at = match self.parent(comps)? {
            Ok(fd) => fd,
            Err(r) => return Ok(Err(r)),
        };
        let name = cstr(comps[comps.len() - 1]);
        // Owner-only until the end, so that a read-only directory can still
        // be filled and nobody else sees a half-restored one.
        match mkdir_at(at, &name, 0o700) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                if !lstat_at(at, &name).is_ok_and(|m| is_type(&m, libc::S_IFDIR)) {
                    return Ok(Err("already exists".into()));
                }
            }
            Err(err) => {
                let path = self.abs(key);
                return Err(Error::io(format!("cannot create {}", path.display()), err));
            }
        }
        let meta = DirMeta {
            mode: self.mode_bits(e.mode),
            mtime: e.mtime,
            owner: self.owner(e),
            xattrs: e.xattrs.clone(),
        };
        self.dirs.insert(key.to_vec(), meta);
        self.report.dirs += 1;
        Ok(Ok(()))
    }

    /// A symlink, with its target exactly as stored: it is never followed
    /// here, so where it points does not matter.
    fn symlink(&mut self, e: &Entry, comps: &[&[u8]], shown: &str) -> Result<Check<()>> {
        if e.link.is_empty() {
            return Ok(Err("empty symlink target".into()));
        }
        if e.link.contains(&0) {
            return Ok(Err("symlink target contains a NUL byte".into()));
        }
        let at = match self.parent(comps)? {
            Ok(fd) => fd,
            Err(r) => return Ok(Err(r)),
        };
        let name = cstr(comps[comps.len() - 1]);
        let path = self.abs(&join(comps));
        match symlink_at(&cstr(&e.link), at, &name) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(Err("already exists".into()))
            }
            Err(err) => return Err(Error::io(format!("cannot create {}", path.display()), err)),
        }
        self.chown_new(shown, self.owner(e), at, &name);
        let failed = xattr::set_at(at, &name, &e.xattrs);
        self.xattr_failures(shown, failed);
        times_at(at, &name, e.mtime)
            .ctx(|| format!("cannot set the mtime of {}", path.display()))?;
        self.report.symlinks += 1;
        Ok(Ok(()))
    }

    fn hardlink(&mut self, e: &Entry, comps: &[&[u8]]) -> Result<Check<()>> {
        let target = match components(&e.link) {
            Ok(t) if !t.is_empty() => t,
            Ok(_) => return Ok(Err("empty hard link target".into())),
            Err(reason) => return Ok(Err(format!("hard link target: {reason}"))),
        };
        self.settle(&join(&target))?;
        if !self.files.contains(&join(&target)) {
            if self.select.is_some() {
                // Its data is stored with the first path of the inode.
                return Ok(Err(format!(
                    "a hard link to {0}, which the --include paths leave out (include {0} too)",
                    lossy(&e.link)
                )));
            }
            return Ok(Err(format!(
                "hard link target {} is not a file extracted earlier",
                lossy(&e.link)
            )));
        }
        // The target's directory stays open while the link's is reached.
        let from = match self.parent(&target)? {
            Ok(fd) => dup(fd).ctx(|| "cannot duplicate a descriptor".into())?,
            Err(r) => return Ok(Err(r)),
        };
        let at = match self.parent(comps)? {
            Ok(fd) => fd,
            Err(r) => return Ok(Err(r)),
        };
        let from_name = cstr(target[target.len() - 1]);
        match link_at(
            from.as_raw_fd(),
            &from_name,
            at,
            &cstr(comps[comps.len() - 1]),
        ) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(Err("already exists".into()))
            }
            Err(err) => {
                let path = self.abs(&join(comps));
                return Err(Error::io(format!("cannot create {}", path.display()), err));
            }
        }
        self.report.hardlinks += 1;
        Ok(Ok(()))
    }

    /// A fifo, or a device node when running as root.
    fn special(&mut self, e: &Entry, comps: &[&[u8]], shown: &str) -> Result<Check<()>> {
        let (format, what) = match e.kind {
            FIFO => (libc::S_IFIFO, "fifo"),
            CHAR_DEVICE => (libc::S_IFCHR, "character device"),
            _ => (libc::S_IFBLK, "block device"),
        };
        let dev = if e.kind == FIFO {
            0
        } else if !self.as_root {
            return Ok(Err(format!("{what}s are restored only by root")));
        } else if let Some((major, minor)) = e.device {
            libc::makedev(major, minor)
        } else {
            return Ok(Err(format!("{what} without device numbers")));
        };
        let at = match self.parent(comps)? {
            Ok(fd) => fd,
            Err(r) => return Ok(Err(r)),
        };
        let name = cstr(comps[comps.len() - 1]);
        let path = self.abs(&join(comps));
        match mknod_at(at, &name, format | 0o600, dev) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(Err("already exists".into()))
            }
            // Root without CAP_MKNOD, as in many containers.
            Err(err) if err.raw_os_error() == Some(libc::EPERM) => {
                return Ok(Err(format!("cannot create the {what}: {err}")))
            }
            Err(err) => return Err(Error::io(format!("cannot create {}", path.display()), err)),
        }
        self.chown_new(shown, self.owner(e), at, &name);
        let failed = xattr::set_at(at, &name, &e.xattrs);
        self.xattr_failures(shown, failed);
        // Just created by mknodat, which never follows or replaces a
        // symlink: following the name here reaches that node.
        chmod_at(at, &name, self.mode_bits(e.mode))
            .ctx(|| format!("cannot set the permissions of {}", path.display()))?;
        times_at(at, &name, e.mtime)
            .ctx(|| format!("cannot set the mtime of {}", path.display()))?;
        self.report.specials += 1;
        Ok(Ok(()))
    }

    /// Give directories their owner, mode and mtime, deepest first, now that
    /// nothing more is created inside them.
    fn finish(mut self) -> Result<ExtractReport> {
        self.collect(true)?;
        // Directory notes come after every entry's.
        self.seq = u64::MAX;
        if let Some(sel) = self.select.take() {
            self.report.unmatched = sel
                .names
                .into_iter()
                .zip(sel.matched)
                .filter(|(_, m)| !m)
                .map(|(n, _)| n)
                .collect();
        }
        let mut dirs: Vec<_> = std::mem::take(&mut self.dirs).into_iter().collect();
        // Descending order puts every directory after all paths below it.
        dirs.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        for (key, meta) in dirs {
            let comps: Vec<&[u8]> = key.split(|b| *b == b'/').collect();
            let path = self.abs(&key);
            let at = match self.parent(&comps)? {
                Ok(fd) => fd,
                Err(r) => {
                    self.refuse(&lossy(&key), None, r);
                    continue;
                }
            };
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            let dir = open_at(at, &cstr(comps[comps.len() - 1]), flags, 0)
                .map(File::from)
                .ctx(|| format!("cannot open {}", path.display()))?;
            let fd = dir.as_raw_fd();
            // As for symlinks: an owner it has already is not set again.
            let owner = meta
                .owner
                .filter(|&o| fstat(fd).map_or(true, |m| !owned_by(&m, o)));
            self.chown(&lossy(&key), owner, |u, g| {
                // SAFETY: `fd` is an open descriptor owned by `dir`.
                cvt(unsafe { libc::fchown(fd, u, g) })
            });
            let failed = xattr::set_fd(fd, &meta.xattrs);
            self.xattr_failures(&lossy(&key), failed);
            filetime::set_file_handle_times(&dir, None, Some(file_time(meta.mtime)))
                .ctx(|| format!("cannot set the mtime of {}", path.display()))?;
            dir.set_permissions(Permissions::from_mode(meta.mode))
                .ctx(|| format!("cannot set the permissions of {}", path.display()))?;
        }
        // Stable: one entry's notes keep their order.
        self.notes.sort_by_key(|(seq, _)| *seq);
        self.report.refused = self.notes.into_iter().map(|(_, n)| n).collect();
        Ok(self.report)
    }
}

/// Create the regular file `name` in directory `at` with `size` bytes from
/// `data`, zero blocks left as holes, then its owner, extended attributes,
/// mode and mtime. Refused if the name exists; what the file could not be
/// given (owner, attributes) comes back as notes.
fn write_file(
    at: RawFd,
    name: &CStr,
    path: &Path,
    shown: &str,
    size: u64,
    data: &mut dyn Source,
    meta: &FileMeta,
) -> Result<Check<Vec<Refused>>> {
    // O_EXCL never follows or replaces whatever is already there. Created
    // with its permission bits (not setuid, setgid or sticky): usually the
    // umask leaves them as they are, and no chmod is needed below. Its
    // directory is still owner-only (`Extractor::dir`), and a descriptor
    // opened by the creating call writes whatever the mode.
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    let mut file = match open_at(at, name, flags, (meta.mode & 0o777) as libc::mode_t) {
        Ok(fd) => File::from(fd),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            return Ok(Err("already exists".into()))
        }
        Err(err) => return Err(Error::io(format!("cannot create {}", path.display()), err)),
    };
    let mut written = 0u64;
    let mut holes = false;
    while written < size {
        let want = COPY_BUF.min(usize::try_from(size - written).unwrap_or(usize::MAX));
        let piece = data.next(want, shown)?;
        holes |= write_sparse(&mut file, piece, written)
            .ctx(|| format!("cannot write {}", path.display()))?;
        written += want as u64;
    }
    if holes {
        // A hole at the end is only a seek: the length makes it real.
        file.set_len(size)
            .ctx(|| format!("cannot write {}", path.display()))?;
    }
    // Owner, extended attributes, mode and mtime through the open
    // descriptor, after the last write, in this order because chown
    // clears setuid, setgid and file capabilities (`security.capability`).
    // An owner and a mode the file already has (as created: the running
    // user, the umask or a default ACL left the bits alone) are not set
    // again: chown and chmod each cost a journalled inode update (together
    // 3.4 % of a restore's CPU in a profile), where one fstat tells.
    let fd = file.as_raw_fd();
    let now = fstat(fd).ctx(|| format!("cannot stat {}", path.display()))?;
    let owned = meta.owner.is_none_or(|o| owned_by(&now, o));
    let mut notes = Vec::new();
    if !owned {
        notes.extend(chown_note(shown, meta.owner, |u, g| {
            // SAFETY: `fd` is an open descriptor owned by `file`.
            cvt(unsafe { libc::fchown(fd, u, g) })
        }));
    }
    notes.extend(xattr_note(shown, xattr::set_fd(fd, &meta.xattrs)));
    if !owned || now.st_mode & 0o7777 != meta.mode {
        file.set_permissions(Permissions::from_mode(meta.mode))
            .ctx(|| format!("cannot set the permissions of {}", path.display()))?;
    }
    filetime::set_file_handle_times(&file, None, Some(file_time(meta.mtime)))
        .ctx(|| format!("cannot set the mtime of {}", path.display()))?;
    Ok(Ok(notes))
}

/// Give an entry its owner with `chown`; a failure becomes a note (the
/// entry stays) rather than stopping the restore.
/// Whether `m` has the owner `(uid, gid)`.
fn owned_by(m: &libc::stat, (uid, gid): (u64, u64)) -> bool {
    (u64::from(m.st_uid), u64::from(m.st_gid)) == (uid, gid)
}

fn chown_note(
    shown: &str,
    owner: Option<(u64, u64)>,
    chown: impl FnOnce(libc::uid_t, libc::gid_t) -> io::Result<()>,
) -> Option<Refused> {
    let (uid, gid) = owner?;
    let result = match (libc::uid_t::try_from(uid), libc::gid_t::try_from(gid)) {
        (Ok(u), Ok(g)) => chown(u, g).map_err(|e| e.to_string()),
        _ => Err("out of range".into()),
    };
    result.err().map(|err| Refused {
        path: shown.to_string(),
        reason: format!("restored, but not its owner {uid}:{gid}: {err}"),
    })
}

/// Extended attributes an entry did not get (an unsupported file system,
/// `trusted.*` without root, …), as a note.
fn xattr_note(shown: &str, failed: Vec<(String, io::Error)>) -> Option<Refused> {
    if failed.is_empty() {
        return None;
    }
    let list: Vec<String> = failed
        .iter()
        .map(|(name, err)| format!("{name} ({err})"))
        .collect();
    Some(Refused {
        path: shown.to_string(),
        reason: format!(
            "restored, but not its extended attributes {}",
            list.join(", ")
        ),
    })
}

fn file_time((secs, nsec): (i64, u32)) -> FileTime {
    FileTime::from_unix_time(secs, nsec)
}

// ---------------------------------------------------------------- syscalls
//
// Thin wrappers over the `*at` calls: each takes a directory descriptor and
// one path component, so nothing is ever resolved through a path string.

/// A path component or symlink target as a C string. Paths with NUL bytes
/// are refused before getting here.
fn cstr(bytes: &[u8]) -> CString {
    CString::new(bytes).expect("NUL bytes are refused earlier")
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn is_type(m: &libc::stat, format: libc::mode_t) -> bool {
    m.st_mode & libc::S_IFMT == format
}

fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `name` is NUL-terminated; the result is checked.
        let fd = unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                libc::c_uint::from(mode),
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor just returned by openat, owned by no one else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The status of open descriptor `fd`.
fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is valid for writing a stat; it is read only on success.
    cvt(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl on a descriptor; the result is checked.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned by fcntl, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn lstat_at(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is written by fstatat on success, which is checked.
    cvt(unsafe {
        libc::fstatat(
            dir,
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat succeeded.
    Ok(unsafe { st.assume_init() })
}

fn mkdir_at(dir: RawFd, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mkdirat(dir, name.as_ptr(), mode) })
}

fn symlink_at(target: &CStr, dir: RawFd, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) })
}

/// A hard link; without `AT_SYMLINK_FOLLOW` a symlink source is not followed.
fn link_at(from_dir: RawFd, from: &CStr, dir: RawFd, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    cvt(unsafe { libc::linkat(from_dir, from.as_ptr(), dir, name.as_ptr(), 0) })
}

fn mknod_at(dir: RawFd, name: &CStr, mode: libc::mode_t, dev: libc::dev_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mknodat(dir, name.as_ptr(), mode, dev) })
}

fn chown_at(dir: RawFd, name: &CStr, uid: libc::uid_t, gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::fchownat(dir, name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
}

fn chmod_at(dir: RawFd, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::fchmodat(dir, name.as_ptr(), mode as libc::mode_t, 0) })
}

/// Set the access and modification times of `name` itself, never of what
/// a symlink there points to.
fn times_at(dir: RawFd, name: &CStr, (secs, nsec): (i64, u32)) -> io::Result<()> {
    let t = libc::timespec {
        tv_sec: libc::time_t::try_from(secs).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(nsec),
    };
    // SAFETY: `name` is NUL-terminated and `times` holds two timespecs.
    cvt(unsafe {
        libc::utimensat(
            dir,
            name.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}
