//! [`extract`]: restore a tar stream into a directory, treating it as hostile.
//!
//! The stream is parsed here, with `tar::Header` only decoding fields, instead
//! of through `tar::Archive`, so that every limit is ours: long names and PAX
//! records are size-capped before they are read into memory, entry data is
//! always streamed, and a stream that stops before its end-of-archive marker
//! is an error rather than a silently shorter restore.
//!
//! Safety rules, each refusing one entry (recorded in the report) and moving on:
//! * paths must be relative, non-empty and free of `..`;
//! * nothing is created below a symlink, below a refused entry, or below a
//!   path that is not a directory; every parent inside the target is checked
//!   with `symlink_metadata` before anything is created;
//! * nothing existing is overwritten (existing directories are merged into);
//! * symlinks must be relative and resolve inside the target. They are created
//!   last, after all files and directories, so that no later entry can be
//!   written through one, and are checked again then by resolving them against
//!   what is on disk (following the symlinks already there);
//! * hard links may only point at a regular file this extraction created;
//! * devices, fifos and other special entries are not restored.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use filetime::FileTime;
use tar::Header;

use super::serialize::{padding, BLOCK, DIRECTORY, HARDLINK, REGULAR, SYMLINK};
use super::{ExtractReport, Refused};
use crate::error::{Error, IoContext, Result};

/// The object named in corruption errors.
const STREAM: &str = "tar stream";
/// Largest GNU long name or long link accepted: far above any usable path,
/// small enough that a hostile size cannot exhaust memory.
const MAX_LONG_NAME: u64 = 64 * 1024;
/// Largest PAX extended header accepted, for the same reason.
const MAX_PAX: u64 = 1024 * 1024;
/// Symlinks followed while checking one symlink target: the kernel's limit,
/// past which a path does not resolve at all.
const MAX_SYMLINK_HOPS: u32 = 40;
const COPY_BUF: usize = 256 * 1024;

/// Extract a tar stream into `target`, which is created if missing.
///
/// `target` may already hold files: existing directories are merged into and
/// every other existing path is left alone (the entry is refused with
/// "already exists"). Unsafe or unsupported entries are refused one by one and
/// listed in [`ExtractReport::refused`]; everything else is restored with its
/// permission bits (setuid, setgid and sticky cleared) and mtime. Ownership is
/// not restored. A malformed or truncated stream is an error; what was
/// extracted before it stays on disk.
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
        inner: BufReader::with_capacity(COPY_BUF, input),
        pos: 0,
    };
    let mut x = Extractor {
        root: target.to_path_buf(),
        report: ExtractReport::default(),
        files: HashSet::new(),
        refused: HashSet::new(),
        symlinks: Vec::new(),
        symlink_paths: HashSet::new(),
        dirs: HashMap::new(),
        buf: vec![0; COPY_BUF],
        select,
    };
    while let Some(entry) = next_entry(&mut stream)? {
        let mut data = (&mut stream).take(entry.size);
        if x.selected(&entry) {
            x.entry(&entry, &mut data)?;
        }
        // Whatever the entry did not consume (refused entries, unexpected
        // data on a link) is skipped, then the block padding.
        let rest = data.limit();
        stream.skip(rest)?;
        stream.skip(padding(entry.size) as u64)?;
    }
    x.finish()
}

/// List the entries of a tar stream (`tessera ls`): each is passed to
/// `visit` in stream order, its data skipped. The stream is parsed as
/// [`extract`] parses it, with the same limits and errors.
pub fn list(input: &mut dyn Read, visit: &mut dyn FnMut(Listed) -> Result<()>) -> Result<()> {
    let mut stream = Stream {
        inner: BufReader::with_capacity(COPY_BUF, input),
        pos: 0,
    };
    while let Some(e) = next_entry(&mut stream)? {
        let kind = match e.kind {
            REGULAR | b'\0' | b'7' => "file",
            DIRECTORY => "dir",
            SYMLINK => "symlink",
            HARDLINK => "hardlink",
            _ => "other",
        };
        let has_link = e.kind == SYMLINK || e.kind == HARDLINK;
        visit(Listed {
            path: String::from_utf8_lossy(&e.path).into_owned(),
            kind,
            size: if kind == "file" { e.size } else { 0 },
            mode: e.mode & 0o7777,
            mtime: e.mtime,
            link: has_link.then(|| String::from_utf8_lossy(&e.link).into_owned()),
        })?;
        stream.skip(e.size + padding(e.size) as u64)?;
    }
    Ok(())
}

/// One entry of a tar stream, as [`list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    /// As stored (directories end in `/`), lossily decoded as UTF-8.
    pub path: String,
    /// `file`, `dir`, `symlink`, `hardlink` or `other`.
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
    inner: BufReader<&'a mut dyn Read>,
    pos: u64,
}

impl Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

fn read_error(e: io::Error) -> Error {
    Error::io("cannot read the tar stream", e)
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

    fn skip(&mut self, n: u64) -> Result<()> {
        let copied = io::copy(&mut self.take(n), &mut io::sink()).map_err(read_error)?;
        if copied < n {
            return Err(truncated(self.pos));
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
    mtime: u64,
}

/// The PAX keys this reader honours; others are ignored.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
    mtime: Option<u64>,
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
                    None => h.mtime().map_err(|e| bad_header(offset, e))?,
                };
                if kind == b'S' {
                    skip_sparse_maps(s, &h)?;
                }
                return Ok(Some(Entry {
                    kind,
                    path,
                    link,
                    size: pax.size.unwrap_or(size),
                    mode,
                    mtime,
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
            b"mtime" => {
                // Seconds with an optional fraction; times before 1970 become 0.
                let whole = value.split(|b| *b == b'.').next().unwrap_or_default();
                pax.mtime = Some(if whole.first() == Some(&b'-') {
                    0
                } else {
                    parse_decimal(whole).ok_or_else(bad)?
                });
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

/// Split a stream path into its normal components, or say why it is unsafe.
/// `.` and empty components are dropped; an empty result means the root.
fn components(path: &[u8]) -> std::result::Result<Vec<&[u8]>, &'static str> {
    if path.is_empty() {
        return Err("empty path");
    }
    if path[0] == b'/' {
        return Err("absolute path");
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

/// A symlink whose creation waits until every other entry is on disk.
struct PendingSymlink {
    shown: String,
    key: Vec<u8>,
    link: Vec<u8>,
    mtime: u64,
}

struct Extractor {
    root: PathBuf,
    report: ExtractReport,
    /// Regular files created by this extraction: the only hard link targets.
    files: HashSet<Vec<u8>>,
    /// Refused paths: nothing is created below them.
    refused: HashSet<Vec<u8>>,
    symlinks: Vec<PendingSymlink>,
    symlink_paths: HashSet<Vec<u8>>,
    /// Directories and their (mode, mtime), applied once their contents exist.
    dirs: HashMap<Vec<u8>, (u32, u64)>,
    buf: Vec<u8>,
    /// `--include`: which entries to restore (all without one).
    select: Option<Selection>,
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
        self.root.join(OsStr::from_bytes(key))
    }

    fn refuse(&mut self, shown: &str, key: Option<Vec<u8>>, reason: impl Into<String>) {
        if let Some(key) = key {
            self.refused.insert(key);
        }
        self.report.refused.push(Refused {
            path: shown.to_string(),
            reason: reason.into(),
        });
    }

    fn entry(&mut self, e: &Entry, data: &mut dyn Read) -> Result<()> {
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
        if let Err(reason) = self.check_ancestors(&comps, &key) {
            self.refuse(&shown, Some(key), reason);
            return Ok(());
        }
        let outcome = match e.kind {
            REGULAR | 0 | b'7' if e.path.ends_with(b"/") => {
                Err("file entry with a directory path".to_string())
            }
            REGULAR | 0 | b'7' => self.file(e, &comps, &key, &shown, data)?,
            DIRECTORY => self.dir(e, &comps, &key)?,
            SYMLINK => self.symlink(e, &comps, &key, shown.clone()),
            HARDLINK => self.hardlink(e, &comps)?,
            b'3' => Err("character devices are not restored".into()),
            b'4' => Err("block devices are not restored".into()),
            b'6' => Err("fifos are not restored".into()),
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

    /// Refuse anything below a refused entry or a (pending) symlink, and
    /// anything at the path of a pending symlink.
    fn check_ancestors(&self, comps: &[&[u8]], key: &[u8]) -> Check<()> {
        if self.refused.is_empty() && self.symlink_paths.is_empty() {
            return Ok(());
        }
        for i in 1..comps.len() {
            let parent = join(&comps[..i]);
            if self.refused.contains(&parent) {
                return Err(format!("parent {} was refused", lossy(&parent)));
            }
            if self.symlink_paths.contains(&parent) {
                return Err(format!("parent {} is a symlink", lossy(&parent)));
            }
        }
        if self.symlink_paths.contains(key) {
            return Err("already exists".into());
        }
        Ok(())
    }

    /// Make sure every parent of `comps` inside the target is a real directory
    /// (creating missing ones) and return the entry's full path. Refuses when a
    /// parent is a symlink or not a directory, so nothing is ever written
    /// through a symlink.
    fn prepare(&self, comps: &[&[u8]]) -> Result<Check<PathBuf>> {
        let mut path = self.root.clone();
        let (last, parents) = comps.split_last().expect("non-empty path");
        for (i, c) in parents.iter().enumerate() {
            path.push(OsStr::from_bytes(c));
            match fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Ok(Err(format!(
                        "parent {} is a symlink",
                        lossy(&join(&comps[..=i]))
                    )))
                }
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Ok(Err(format!(
                        "parent {} is not a directory",
                        lossy(&join(&comps[..=i]))
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A stream normally lists directories before their
                    // contents; one that does not gets default directories.
                    DirBuilder::new()
                        .mode(0o755)
                        .create(&path)
                        .ctx(|| format!("cannot create {}", path.display()))?;
                }
                Err(e) => return Err(Error::io(format!("cannot inspect {}", path.display()), e)),
            }
        }
        path.push(OsStr::from_bytes(last));
        Ok(Ok(path))
    }

    fn file(
        &mut self,
        e: &Entry,
        comps: &[&[u8]],
        key: &[u8],
        shown: &str,
        data: &mut dyn Read,
    ) -> Result<Check<()>> {
        let path = match self.prepare(comps)? {
            Ok(p) => p,
            Err(r) => return Ok(Err(r)),
        };
        // O_EXCL never follows or replaces whatever is already there.
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        let mut file = match opened {
            Ok(f) => f,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(Err("already exists".into()))
            }
            Err(err) => return Err(Error::io(format!("cannot create {}", path.display()), err)),
        };
        let mut written = 0u64;
        while written < e.size {
            let n = match data.read(&mut self.buf) {
                Ok(0) => {
                    return Err(Error::corrupt(
                        STREAM,
                        format!("truncated in the data of {shown}"),
                    ))
                }
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(read_error(err)),
            };
            file.write_all(&self.buf[..n])
                .ctx(|| format!("cannot write {}", path.display()))?;
            written += n as u64;
        }
        // Mode and mtime through the open descriptor, after the last write.
        file.set_permissions(Permissions::from_mode(e.mode & 0o777))
            .ctx(|| format!("cannot set the permissions of {}", path.display()))?;
        filetime::set_file_handle_times(&file, None, Some(file_time(e.mtime)))
            .ctx(|| format!("cannot set the mtime of {}", path.display()))?;
        self.files.insert(key.to_vec());
        self.report.files += 1;
        self.report.bytes += e.size;
        Ok(Ok(()))
    }

    fn dir(&mut self, e: &Entry, comps: &[&[u8]], key: &[u8]) -> Result<Check<()>> {
        let path = match self.prepare(comps)? {
            Ok(p) => p,
            Err(r) => return Ok(Err(r)),
        };
        // Owner-only until the end, so that a read-only directory can still
        // be filled and nobody else sees a half-restored one.
        match DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
                if !is_dir {
                    return Ok(Err("already exists".into()));
                }
            }
            Err(err) => return Err(Error::io(format!("cannot create {}", path.display()), err)),
        }
        self.dirs.insert(key.to_vec(), (e.mode & 0o777, e.mtime));
        self.report.dirs += 1;
        Ok(Ok(()))
    }

    /// Check what can be checked now and queue the symlink for the end.
    fn symlink(&mut self, e: &Entry, comps: &[&[u8]], key: &[u8], shown: String) -> Check<()> {
        check_link_text(&e.link, &comps[..comps.len() - 1])?;
        self.symlink_paths.insert(key.to_vec());
        self.symlinks.push(PendingSymlink {
            shown,
            key: key.to_vec(),
            link: e.link.clone(),
            mtime: e.mtime,
        });
        Ok(())
    }

    fn hardlink(&mut self, e: &Entry, comps: &[&[u8]]) -> Result<Check<()>> {
        let target = match components(&e.link) {
            Ok(t) if !t.is_empty() => join(&t),
            Ok(_) => return Ok(Err("empty hard link target".into())),
            Err(reason) => return Ok(Err(format!("hard link target: {reason}"))),
        };
        if !self.files.contains(&target) {
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
        let path = match self.prepare(comps)? {
            Ok(p) => p,
            Err(r) => return Ok(Err(r)),
        };
        match fs::hard_link(self.abs(&target), &path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(Err("already exists".into()))
            }
            Err(err) => return Err(Error::io(format!("cannot create {}", path.display()), err)),
        }
        self.report.hardlinks += 1;
        Ok(Ok(()))
    }

    /// Create the queued symlinks, then give directories their mode and mtime,
    /// deepest first, now that nothing more is created inside them.
    fn finish(mut self) -> Result<ExtractReport> {
        if let Some(sel) = self.select.take() {
            self.report.unmatched = sel
                .names
                .into_iter()
                .zip(sel.matched)
                .filter(|(_, m)| !m)
                .map(|(n, _)| n)
                .collect();
        }
        for link in std::mem::take(&mut self.symlinks) {
            if let Err(reason) = self.create_symlink(&link)? {
                self.refuse(&link.shown, None, reason);
            }
        }
        let mut dirs: Vec<_> = std::mem::take(&mut self.dirs).into_iter().collect();
        let depth = |k: &[u8]| k.iter().filter(|b| **b == b'/').count();
        dirs.sort_by(|a, b| depth(&b.0).cmp(&depth(&a.0)).then_with(|| a.0.cmp(&b.0)));
        for (key, (mode, mtime)) in dirs {
            let path = self.abs(&key);
            // Through a descriptor opened without following a symlink.
            let dir = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(&path)
                .ctx(|| format!("cannot open {}", path.display()))?;
            filetime::set_file_handle_times(&dir, None, Some(file_time(mtime)))
                .ctx(|| format!("cannot set the mtime of {}", path.display()))?;
            dir.set_permissions(Permissions::from_mode(mode))
                .ctx(|| format!("cannot set the permissions of {}", path.display()))?;
        }
        Ok(self.report)
    }

    fn create_symlink(&mut self, link: &PendingSymlink) -> Result<Check<()>> {
        let comps: Vec<&[u8]> = link.key.split(|b| *b == b'/').collect();
        let path = match self.prepare(&comps)? {
            Ok(p) => p,
            Err(r) => return Ok(Err(r)),
        };
        if let Err(reason) = self.resolve_inside(&comps[..comps.len() - 1], &link.link)? {
            return Ok(Err(reason));
        }
        match std::os::unix::fs::symlink(OsStr::from_bytes(&link.link), &path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(Err("already exists".into()))
            }
            Err(err) => return Err(Error::io(format!("cannot create {}", path.display()), err)),
        }
        let t = file_time(link.mtime);
        filetime::set_symlink_file_times(&path, t, t)
            .ctx(|| format!("cannot set the mtime of {}", path.display()))?;
        self.report.symlinks += 1;
        Ok(Ok(()))
    }

    /// Resolve symlink text `link`, found in directory `parent`, against the
    /// files on disk, following symlinks already there, and refuse it if it
    /// leaves the target. Past a component that does not exist the rest is
    /// resolved by text, and a `..` there is refused: whatever later appears
    /// at the missing path could make it climb anywhere.
    fn resolve_inside(&self, parent: &[&[u8]], link: &[u8]) -> Result<Check<()>> {
        let outside = || {
            Err(format!(
                "symlink target {} leaves the target directory",
                lossy(link)
            ))
        };
        let mut at: Vec<Vec<u8>> = parent.iter().map(|c| c.to_vec()).collect();
        let mut todo: VecDeque<Vec<u8>> = link.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
        let mut missing = false;
        let mut hops = 0;
        while let Some(c) = todo.pop_front() {
            match c.as_slice() {
                b"" | b"." => continue,
                b".." if missing => {
                    return Ok(Err(format!(
                        "symlink target {} climbs out of a missing directory",
                        lossy(link)
                    )))
                }
                b".." => {
                    if at.pop().is_none() {
                        return Ok(outside());
                    }
                    continue;
                }
                _ => at.push(c),
            }
            if missing {
                continue;
            }
            let path = self.root.join(OsStr::from_bytes(&at.join(&b'/')));
            match fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        // The kernel gives up here too (ELOOP): a symlink
                        // loop is harmless, and a backup may hold one.
                        return Ok(Ok(()));
                    }
                    let next = fs::read_link(&path)
                        .ctx(|| format!("cannot read {}", path.display()))?
                        .into_os_string()
                        .into_vec();
                    if next.first() == Some(&b'/') {
                        return Ok(outside());
                    }
                    at.pop();
                    for c in next.split(|b| *b == b'/').rev() {
                        todo.push_front(c.to_vec());
                    }
                }
                Ok(m) if m.is_dir() => {}
                // Nothing can be below a file: resolution would fail there.
                Ok(_) => missing = true,
                Err(err)
                    if err.kind() == io::ErrorKind::NotFound
                        || err.raw_os_error() == Some(libc::ENOTDIR) =>
                {
                    missing = true
                }
                Err(err) => {
                    return Err(Error::io(format!("cannot inspect {}", path.display()), err))
                }
            }
        }
        Ok(Ok(()))
    }
}

/// The checks on a symlink's text alone, done when its entry is read so that
/// entries below a bad symlink are refused too: it must be non-empty, relative
/// and, read as a path from `parent`, stay inside the target.
fn check_link_text(link: &[u8], parent: &[&[u8]]) -> Check<()> {
    if link.is_empty() {
        return Err("empty symlink target".into());
    }
    if link[0] == b'/' {
        return Err(format!("symlink target {} is absolute", lossy(link)));
    }
    let mut depth = parent.len();
    for c in link.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                depth = depth.checked_sub(1).ok_or_else(|| {
                    format!("symlink target {} leaves the target directory", lossy(link))
                })?;
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

fn file_time(secs: u64) -> FileTime {
    FileTime::from_unix_time(i64::try_from(secs).unwrap_or(i64::MAX), 0)
}
