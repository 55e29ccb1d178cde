//! [`write_tree`]: a directory as a deterministic GNU tar stream.
//!
//! Headers are built by hand (on top of `tar::Header` for field encoding)
//! rather than with `tar::Builder`, because the builder normalizes paths and
//! link targets (drops `.`, rejects `..`, strips the trailing `/`), and a
//! backup must store symlink targets verbatim and directories with their `/`.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use tar::{EntryType, Header};

use super::meta::{Kind, Record};
use super::report::TreeStats;
use super::walk::TreeOut;
use crate::error::{Error, Result};

/// The tar block size: headers and padded data are multiples of it.
pub(super) const BLOCK: usize = 512;
/// Size of the header's name and linkname fields. Names this long or longer
/// go into GNU long-name records, so the fields always hold a NUL-terminated
/// prefix that any reader can cope with.
const NAME_FIELD: usize = 100;

/// Type flags of the entries this writer emits.
pub(super) const REGULAR: u8 = b'0';
pub(super) const HARDLINK: u8 = b'1';
pub(super) const SYMLINK: u8 = b'2';
pub(super) const CHAR_DEVICE: u8 = b'3';
pub(super) const BLOCK_DEVICE: u8 = b'4';
pub(super) const DIRECTORY: u8 = b'5';
pub(super) const FIFO: u8 = b'6';

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
    let mut tar = TarOut::new(BufWriter::with_capacity(64 * 1024, out));
    let stats = super::walk::walk(
        &[root.to_path_buf()],
        &super::select::Selection::default(),
        &mut tar,
        on_bytes,
    )?;
    tar.finish().map_err(|e| {
        Error::io(
            format!("cannot write the tar stream of {}", root.display()),
            e,
        )
    })?;
    Ok(stats)
}

/// A tar stream made of [`Record`]s and file contents: the walk's output
/// for [`write_tree`], and what a restore turns a directory backup into.
pub(crate) struct TarOut<W: Write> {
    out: W,
    header: Vec<u8>,
}

impl<W: Write> TarOut<W> {
    pub(crate) fn new(out: W) -> Self {
        TarOut {
            out,
            header: Vec::with_capacity(4 * BLOCK),
        }
    }

    /// The end-of-archive marker; returns the output.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0; 2 * BLOCK])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> Write for TarOut<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.out.write(data)
    }
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.out.write_all(data)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl<W: Write> TreeOut for TarOut<W> {
    fn entry(&mut self, r: &Record) -> io::Result<()> {
        self.header.clear();
        encode_record(&mut self.header, r);
        self.out.write_all(&self.header)
    }
    fn file_end(&mut self, r: &Record, _complete: bool) -> io::Result<()> {
        self.out.write_all(&[0; BLOCK][..padding(r.size)])
    }
}

/// The tar header records of `r` (whole-second mtimes, earlier than 1970
/// stored as 0; a device's numbers, which must fit the header), after a
/// PAX record for what the header cannot hold: the exact mtime when it has
/// nanoseconds or is before 1970, and the extended attributes.
pub(crate) fn encode_record(out: &mut Vec<u8>, r: &Record) {
    encode_pax(out, r);
    let attrs = Attrs {
        mode: r.mode,
        uid: r.uid,
        gid: r.gid,
        mtime: u64::try_from(r.mtime).unwrap_or(0),
    };
    match r.kind {
        Kind::File => encode_header(out, REGULAR, &r.path, b"", attrs, r.size),
        Kind::Dir => encode_header(out, DIRECTORY, &r.path, b"", attrs, 0),
        Kind::Symlink => encode_header(out, SYMLINK, &r.path, &r.link, attrs, 0),
        Kind::Hardlink => encode_header(out, HARDLINK, &r.path, &r.link, attrs, 0),
        Kind::Fifo => encode_header(out, FIFO, &r.path, b"", attrs, 0),
        Kind::CharDevice | Kind::BlockDevice => {
            let kind = if r.kind == Kind::CharDevice {
                CHAR_DEVICE
            } else {
                BLOCK_DEVICE
            };
            let (major, minor) = r.device;
            encode_device(out, kind, &r.path, attrs, major, minor)
        }
    }
}

/// PAX key prefix of an extended attribute, as GNU tar and libarchive write
/// them (`tar --xattrs` restores them from `restore --stdout`).
pub(super) const PAX_XATTR: &[u8] = b"SCHILY.xattr.";

/// The PAX extended header (`x`) of `r`, if it needs one.
fn encode_pax(out: &mut Vec<u8>, r: &Record) {
    let exact_time = r.mtime_nsec != 0 || r.mtime < 0;
    if !exact_time && r.xattrs.is_empty() {
        return;
    }
    let mut data = Vec::new();
    if exact_time {
        pax_record(
            &mut data,
            b"mtime",
            pax_time(r.mtime, r.mtime_nsec).as_bytes(),
        );
    }
    for (name, value) in &r.xattrs {
        let mut key = PAX_XATTR.to_vec();
        // As GNU tar: `%` and `=` escaped, so the key ends at the first `=`.
        for &b in name {
            match b {
                b'%' => key.extend_from_slice(b"%25"),
                b'=' => key.extend_from_slice(b"%3D"),
                _ => key.push(b),
            }
        }
        pax_record(&mut data, &key, value);
    }
    let mut h = Header::new_ustar();
    copy_field(&mut h.as_old_mut().name, b"././@PaxHeader");
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(data.len() as u64);
    h.set_entry_type(EntryType::XHeader);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&data);
    out.resize(out.len().next_multiple_of(BLOCK), 0);
}

/// One `<length> <key>=<value>\n` record; the length counts itself.
fn pax_record(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let rest = key.len() + value.len() + 3; // space, `=`, newline
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    out.extend_from_slice(len.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b'=');
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// A time as PAX writes it: decimal seconds with nine fraction digits,
/// negative before 1970 (`-0.25` is a quarter second before the epoch).
pub(super) fn pax_time(secs: i64, nsec: u32) -> String {
    let total = i128::from(secs) * 1_000_000_000 + i128::from(nsec);
    let sign = if total < 0 { "-" } else { "" };
    let abs = total.unsigned_abs();
    format!("{sign}{}.{:09}", abs / 1_000_000_000, abs % 1_000_000_000)
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
