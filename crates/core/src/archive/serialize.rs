//! [`write_tree`]: a directory as a deterministic GNU tar stream.
//!
//! Headers are built by hand (on top of `tar::Header` for field encoding)
//! rather than with `tar::Builder`, because the builder normalizes paths and
//! link targets (drops `.`, rejects `..`, strips the trailing `/`), and a
//! backup must store symlink targets verbatim and directories with their `/`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, Metadata, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tar::{EntryType, Header};

use super::{Selection, TreeStats};
use crate::error::{Error, IoContext, Result};

/// The tar block size: headers and padded data are multiples of it.
pub(super) const BLOCK: usize = 512;
/// Size of the header's name and linkname fields. Names this long or longer
/// go into GNU long-name records, so the fields always hold a NUL-terminated
/// prefix that any reader can cope with.
const NAME_FIELD: usize = 100;
/// Copy buffer for file contents: large enough to keep syscalls cheap, small
/// enough to never matter for memory.
const COPY_BUF: usize = 256 * 1024;

/// Type flags of the entries this writer emits.
pub(super) const REGULAR: u8 = b'0';
pub(super) const HARDLINK: u8 = b'1';
pub(super) const SYMLINK: u8 = b'2';
pub(super) const CHAR_DEVICE: u8 = b'3';
pub(super) const BLOCK_DEVICE: u8 = b'4';
pub(super) const DIRECTORY: u8 = b'5';
pub(super) const FIFO: u8 = b'6';
/// Largest device major or minor number the 8-byte octal header fields hold.
const MAX_DEVICE_NUMBER: u32 = 0o7_777_777;

/// The header fields taken from a file's metadata.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attrs {
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    /// Seconds since the epoch; earlier times are clamped to 0 because the
    /// header encoding used here is unsigned.
    pub mtime: u64,
}

impl Attrs {
    fn of(meta: &Metadata) -> Attrs {
        Attrs {
            mode: meta.mode() & 0o7777,
            uid: u64::from(meta.uid()),
            gid: u64::from(meta.gid()),
            mtime: u64::try_from(meta.mtime()).unwrap_or(0),
        }
    }
}

/// Write `root` (a directory) as a deterministic tar stream into `out`.
/// `on_bytes(n)` is called as `n` more bytes of file content are written (for
/// progress bars); the calls add up to [`TreeStats::bytes`].
///
/// Symlinks are never followed below `root` (`root` itself may be one). An
/// unreadable file or directory is an error naming its path; sockets and
/// files that vanish during the walk are listed in
/// [`TreeStats::skipped`]. The format is described in the module docs.
pub fn write_tree(
    root: &Path,
    out: &mut dyn Write,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<TreeStats> {
    write_tree_selected(root, &Selection::default(), out, on_bytes)
}

/// [`write_tree`] leaving out what `selection` excludes. Files and
/// directories that cannot be read (permission denied) are left out too and
/// listed in [`TreeStats::unreadable`]: the stream is then incomplete, which
/// the caller reports.
pub fn write_tree_selected(
    root: &Path,
    selection: &Selection,
    out: &mut dyn Write,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<TreeStats> {
    let meta = fs::metadata(root).ctx(|| format!("cannot read {}", root.display()))?;
    if !meta.is_dir() {
        return Err(Error::invalid(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let mut w = TreeWriter {
        root,
        root_dev: meta.dev(),
        selection,
        out: BufWriter::with_capacity(64 * 1024, out),
        on_bytes,
        stats: TreeStats::default(),
        first_path: HashMap::new(),
        header: Vec::with_capacity(4 * BLOCK),
        buf: vec![0; COPY_BUF],
    };
    // Paths still to write, last one first, so that `pop` walks the tree in
    // order without recursion (deep trees must not overflow a thread's stack).
    let mut pending = w.children(&[])?;
    while let Some(rel) = pending.pop() {
        if let Some(children) = w.entry(&rel)? {
            pending.extend(children);
        }
    }
    let finish = |e| {
        Error::io(
            format!("cannot write the tar stream of {}", root.display()),
            e,
        )
    };
    w.out.write_all(&[0; 2 * BLOCK]).map_err(finish)?;
    w.out.flush().map_err(finish)?;
    Ok(w.stats)
}

struct TreeWriter<'a, 'o> {
    root: &'a Path,
    /// The root's file system, for `--one-file-system`.
    root_dev: u64,
    selection: &'a Selection,
    out: BufWriter<&'o mut dyn Write>,
    on_bytes: &'a mut dyn FnMut(u64),
    stats: TreeStats,
    /// Stream path of the first regular file seen for each multiply linked
    /// (device, inode): later paths become hard links to it.
    first_path: HashMap<(u64, u64), Vec<u8>>,
    /// Scratch space for the header records of one entry.
    header: Vec<u8>,
    buf: Vec<u8>,
}

impl TreeWriter<'_, '_> {
    fn abs(&self, rel: &[u8]) -> PathBuf {
        if rel.is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(OsStr::from_bytes(rel))
        }
    }

    /// The children of directory `rel`, as relative paths in reverse stream
    /// order. Siblings sort by their stream name (a directory's with its
    /// trailing `/`), which makes the whole stream sorted by path bytes.
    fn children(&self, rel: &[u8]) -> Result<Vec<Vec<u8>>> {
        let dir = self.abs(rel);
        let cannot = |e| Error::io(format!("cannot read {}", dir.display()), e);
        let mut kids = Vec::new();
        for entry in fs::read_dir(&dir).map_err(cannot)? {
            let entry = entry.map_err(cannot)?;
            let name = entry.file_name();
            let is_dir = entry
                .file_type()
                .ctx(|| format!("cannot read {}", entry.path().display()))?
                .is_dir();
            let mut path = Vec::with_capacity(rel.len() + name.len() + 2);
            if !rel.is_empty() {
                path.extend_from_slice(rel);
                path.push(b'/');
            }
            path.extend_from_slice(name.as_bytes());
            if self.selection.excludes(&path, is_dir) {
                continue;
            }
            let mut key = name.into_vec();
            if is_dir {
                key.push(b'/');
            }
            kids.push((key, path));
        }
        kids.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        Ok(kids.into_iter().map(|(_, path)| path).collect())
    }

    /// Write one path; for a directory, return its children.
    fn entry(&mut self, rel: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        let abs = self.abs(rel);
        let meta = match fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.skip(rel, "vanished during the backup");
                return Ok(None);
            }
            Err(e) => return Err(Error::io(format!("cannot read {}", abs.display()), e)),
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            if self.selection.skips_dir(&abs) {
                return Ok(None);
            }
            // Another file system's mount point is stored, empty.
            let cross = self.selection.one_file_system && meta.dev() != self.root_dev;
            let children = if cross {
                Ok(Vec::new())
            } else {
                self.children(rel)
            };
            let children = match children {
                Ok(c) => c,
                Err(Error::Io { source, .. })
                    if source.kind() == io::ErrorKind::PermissionDenied =>
                {
                    self.unreadable(rel, &source);
                    Vec::new()
                }
                Err(e) => return Err(e),
            };
            let mut name = rel.to_vec();
            name.push(b'/');
            self.put_header(&abs, DIRECTORY, &name, b"", Attrs::of(&meta), 0)?;
            self.stats.dirs += 1;
            return Ok(Some(children));
        }
        if ft.is_symlink() {
            let target = fs::read_link(&abs).ctx(|| format!("cannot read {}", abs.display()))?;
            let target = target.into_os_string().into_vec();
            self.put_header(&abs, SYMLINK, rel, &target, Attrs::of(&meta), 0)?;
            self.stats.symlinks += 1;
        } else if ft.is_file() {
            self.file(rel, &abs, &meta)?;
        } else if ft.is_fifo() {
            self.put_header(&abs, FIFO, rel, b"", Attrs::of(&meta), 0)?;
            self.stats.specials += 1;
        } else if ft.is_char_device() || ft.is_block_device() {
            let kind = if ft.is_char_device() {
                CHAR_DEVICE
            } else {
                BLOCK_DEVICE
            };
            let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
            if major > MAX_DEVICE_NUMBER || minor > MAX_DEVICE_NUMBER {
                self.skip(
                    rel,
                    "device number too large for the tar header (not stored)",
                );
            } else {
                self.header.clear();
                encode_device(&mut self.header, kind, rel, Attrs::of(&meta), major, minor);
                self.out
                    .write_all(&self.header)
                    .map_err(|e| write_error(&abs, e))?;
                self.stats.specials += 1;
            }
        } else {
            let what = if ft.is_socket() {
                "socket"
            } else {
                "unknown file type"
            };
            self.skip(rel, &format!("{what} (not stored)"));
        }
        Ok(None)
    }

    fn file(&mut self, rel: &[u8], abs: &Path, meta: &Metadata) -> Result<()> {
        let inode = (meta.dev(), meta.ino());
        if meta.nlink() > 1 {
            if let Some(first) = self.first_path.get(&inode) {
                let first = first.clone();
                self.put_header(abs, HARDLINK, rel, &first, Attrs::of(meta), 0)?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        // O_NONBLOCK: should the path have been swapped for a fifo since the
        // directory was listed, opening it must not hang the backup.
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(abs);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.skip(rel, "vanished during the backup");
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                self.unreadable(rel, &e);
                return Ok(());
            }
            Err(e) => return Err(Error::io(format!("cannot read {}", abs.display()), e)),
        };
        let fmeta = file
            .metadata()
            .ctx(|| format!("cannot read {}", abs.display()))?;
        if !fmeta.is_file() {
            self.skip(rel, "changed type during the backup");
            return Ok(());
        }
        // The size seen now is the size stored, whatever happens to the file
        // while it is copied: the header is already written by then.
        let size = fmeta.len();
        self.put_header(abs, REGULAR, rel, b"", Attrs::of(&fmeta), size)?;
        match copy_exactly(&mut file, &mut self.out, size, &mut self.buf, self.on_bytes) {
            Ok(()) => {}
            Err(CopyError::Read(e)) => {
                return Err(Error::io(format!("cannot read {}", abs.display()), e))
            }
            Err(CopyError::Write(e)) => return Err(write_error(abs, e)),
        }
        self.out
            .write_all(&[0; BLOCK][..padding(size)])
            .map_err(|e| write_error(abs, e))?;
        self.stats.files += 1;
        self.stats.bytes += size;
        if meta.nlink() > 1 {
            self.first_path.insert(inode, rel.to_vec());
        }
        Ok(())
    }

    fn put_header(
        &mut self,
        abs: &Path,
        kind: u8,
        name: &[u8],
        link: &[u8],
        attrs: Attrs,
        size: u64,
    ) -> Result<()> {
        self.header.clear();
        encode_header(&mut self.header, kind, name, link, attrs, size);
        self.out
            .write_all(&self.header)
            .map_err(|e| write_error(abs, e))
    }

    /// A path the backup could not read: left out and reported, so the
    /// backup is known to be incomplete.
    fn unreadable(&mut self, rel: &[u8], e: &io::Error) {
        self.stats.unreadable.push(format!(
            "{}: {}",
            String::from_utf8_lossy(&self.abs(rel).into_os_string().into_vec()),
            e
        ));
    }

    fn skip(&mut self, rel: &[u8], reason: &str) {
        self.stats
            .skipped
            .push(format!("{}: {reason}", String::from_utf8_lossy(rel)));
    }
}

fn write_error(abs: &Path, e: io::Error) -> Error {
    Error::io(
        format!("cannot write {} into the tar stream", abs.display()),
        e,
    )
}

/// Zero bytes that pad `size` bytes of data to a whole block.
pub(super) fn padding(size: u64) -> usize {
    (BLOCK - (size % BLOCK as u64) as usize) % BLOCK
}

/// Append the header records of one entry to `out`: a GNU `L` record for a
/// long name, a `K` record for a long link target, then the entry's header.
pub(super) fn encode_header(
    out: &mut Vec<u8>,
    kind: u8,
    name: &[u8],
    link: &[u8],
    attrs: Attrs,
    size: u64,
) {
    if name.len() >= NAME_FIELD {
        encode_long(out, b'L', name);
    }
    if link.len() >= NAME_FIELD {
        encode_long(out, b'K', link);
    }
    let h = header(kind, name, link, attrs, size);
    out.extend_from_slice(h.as_bytes());
}

/// Append the header records of a character or block device: [`encode_header`]
/// plus the device numbers, which only device entries carry (other entries
/// keep zero fields, so their bytes do not change).
pub(super) fn encode_device(
    out: &mut Vec<u8>,
    kind: u8,
    name: &[u8],
    attrs: Attrs,
    major: u32,
    minor: u32,
) {
    if name.len() >= NAME_FIELD {
        encode_long(out, b'L', name);
    }
    let mut h = header(kind, name, b"", attrs, 0);
    let gnu = h.as_gnu_mut().expect("a GNU header");
    gnu.set_device_major(major);
    gnu.set_device_minor(minor);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
}

fn header(kind: u8, name: &[u8], link: &[u8], attrs: Attrs, size: u64) -> Header {
    let mut h = Header::new_gnu();
    copy_field(&mut h.as_old_mut().name, name);
    copy_field(&mut h.as_old_mut().linkname, link);
    h.set_mode(attrs.mode);
    h.set_uid(attrs.uid);
    h.set_gid(attrs.gid);
    h.set_mtime(attrs.mtime);
    h.set_size(size);
    h.set_entry_type(EntryType::new(kind));
    h.set_cksum();
    h
}

/// A GNU long-name (`L`) or long-link (`K`) record holding `value` plus a NUL,
/// with fixed metadata so it never varies between runs.
fn encode_long(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    let mut h = Header::new_gnu();
    copy_field(&mut h.as_old_mut().name, b"././@LongLink");
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(value.len() as u64 + 1);
    h.set_entry_type(EntryType::new(kind));
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(value);
    out.push(0);
    out.resize(out.len().next_multiple_of(BLOCK), 0);
}

/// Copy as much of `value` as fits; the rest is in a long-name record.
fn copy_field(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field[..n].copy_from_slice(&value[..n]);
}

pub(super) enum CopyError {
    Read(io::Error),
    Write(io::Error),
}

/// Copy exactly `size` bytes from `src` to `dst`, whatever `src` holds: if it
/// ends early the rest is zeros, if it has more the excess is not read. This
/// keeps the stream consistent with a header written before the copy.
pub(super) fn copy_exactly(
    src: &mut dyn Read,
    dst: &mut dyn Write,
    size: u64,
    buf: &mut [u8],
    on_bytes: &mut dyn FnMut(u64),
) -> std::result::Result<(), CopyError> {
    let mut left = size;
    let mut eof = false;
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = if eof {
            buf[..want].fill(0);
            want
        } else {
            match src.read(&mut buf[..want]) {
                Ok(0) => {
                    eof = true;
                    continue;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(CopyError::Read(e)),
            }
        };
        dst.write_all(&buf[..n]).map_err(CopyError::Write)?;
        on_bytes(n as u64);
        left -= n as u64;
    }
    Ok(())
}
