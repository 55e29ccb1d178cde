//! The metadata of a directory backup: one [`Record`] per entry, encoded
//! apart from the file contents so that contents deduplicate whatever
//! happens to names, modes, owners and times.
//!
//! Encoding (all integers LEB128 varints unless said otherwise):
//!
//! ```text
//! "TSMETA1\n"  count
//! names section, per entry:  kind(u8) shared-prefix suffix-len suffix mode uid gid
//!                            [size | link-len link | major minor]
//!                            xattr-count (name-len name value-len value)*
//! times section, per entry:  zigzag(mtime - previous mtime) nanoseconds
//! ```
//!
//! Extended attributes (POSIX ACLs among them, as the `system.posix_acl_*`
//! attributes) sit with the entry they belong to, sorted by name, so an
//! entry whose attributes do not change encodes to the same bytes; an entry
//! without any writes the count 0, as every stream before them did.
//!
//! Paths are prefix-compressed against the previous entry's path; times are
//! a column of their own (deltas), so a tree whose mtimes all change still
//! repeats its names section byte for byte, and the chunker (restarted at
//! each section) deduplicates it.

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"TSMETA1\n";
/// The object named in errors about the metadata.
pub(crate) const SUBJECT: &str = "directory metadata";
/// Longest path or link target accepted when decoding: far above any
/// usable path, small enough that a hostile length cannot exhaust memory.
const MAX_NAME: u64 = 64 * 1024;
/// Longest extended attribute name (Linux's `XATTR_NAME_MAX`).
const MAX_XATTR_NAME: u64 = 255;

/// An extended attribute: its full name (`user.…`, `trusted.…`,
/// `security.…`, `system.posix_acl_access`, …) and value, as the kernel
/// gives them.
pub type Xattr = (Vec<u8>, Vec<u8>);

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file with its contents (the first path of its inode).
    File,
    Dir,
    Symlink,
    /// A later path of a regular file's inode; `link` names the first path.
    Hardlink,
    Fifo,
    CharDevice,
    BlockDevice,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::File => 0,
            Kind::Dir => 1,
            Kind::Symlink => 2,
            Kind::Hardlink => 3,
            Kind::Fifo => 4,
            Kind::CharDevice => 5,
            Kind::BlockDevice => 6,
        }
    }

    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            0 => Kind::File,
            1 => Kind::Dir,
            2 => Kind::Symlink,
            3 => Kind::Hardlink,
            4 => Kind::Fifo,
            5 => Kind::CharDevice,
            6 => Kind::BlockDevice,
            _ => return None,
        })
    }
}

/// One entry of a directory backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    /// Relative, `/`-separated; directories end in `/`.
    pub path: Vec<u8>,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    /// Seconds since the epoch (negative before 1970) and nanoseconds.
    pub mtime: i64,
    pub mtime_nsec: u32,
    /// Content bytes (files only; they follow in the content stream).
    pub size: u64,
    /// Symlink target or hard-link first path.
    pub link: Vec<u8>,
    /// Device numbers (character and block devices).
    pub device: (u32, u32),
    /// Extended attributes, sorted by name (none on hard-link records: the
    /// inode's are on its first path).
    pub xattrs: Vec<Xattr>,
}

/// Encodes records in stream order into the two sections.
#[derive(Default)]
pub(crate) struct MetaEncoder {
    names: Vec<u8>,
    times: Vec<u8>,
    count: u64,
    prev_path: Vec<u8>,
    prev_mtime: i64,
}

impl MetaEncoder {
    pub(crate) fn push(&mut self, r: &Record) {
        let n = &mut self.names;
        n.push(r.kind.code());
        let shared = r
            .path
            .iter()
            .zip(&self.prev_path)
            .take_while(|(a, b)| a == b)
            .count();
        put(n, shared as u64);
        put(n, (r.path.len() - shared) as u64);
        n.extend_from_slice(&r.path[shared..]);
        put(n, u64::from(r.mode));
        put(n, r.uid);
        put(n, r.gid);
        match r.kind {
            Kind::File => put(n, r.size),
            Kind::Symlink | Kind::Hardlink => {
                put(n, r.link.len() as u64);
                n.extend_from_slice(&r.link);
            }
            Kind::CharDevice | Kind::BlockDevice => {
                put(n, u64::from(r.device.0));
                put(n, u64::from(r.device.1));
            }
            Kind::Dir | Kind::Fifo => {}
        }
        put(n, r.xattrs.len() as u64);
        for (name, value) in &r.xattrs {
            put(n, name.len() as u64);
            n.extend_from_slice(name);
            put(n, value.len() as u64);
            n.extend_from_slice(value);
        }
        let delta = r.mtime.wrapping_sub(self.prev_mtime);
        put(&mut self.times, ((delta << 1) ^ (delta >> 63)) as u64);
        put(&mut self.times, u64::from(r.mtime_nsec));
        self.prev_mtime = r.mtime;
        self.prev_path.clear();
        self.prev_path.extend_from_slice(&r.path);
        self.count += 1;
    }

    /// The encoded stream as its two sections (the chunker restarts at the
    /// start of each).
    pub(crate) fn finish(self) -> (Vec<u8>, Vec<u8>) {
        let mut head = Vec::with_capacity(self.names.len() + 18);
        head.extend_from_slice(MAGIC);
        put(&mut head, self.count);
        head.extend_from_slice(&self.names);
        (head, self.times)
    }
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn bad(&self, what: &str) -> Error {
        Error::corrupt(SUBJECT, format!("{what} at byte {}", self.pos))
    }

    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or_else(|| self.bad("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.bad("overlong number"))
    }

    fn u32(&mut self) -> Result<u32> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.bad("number out of range"))
    }

    fn bytes(&mut self, n: u64) -> Result<&[u8]> {
        if n > MAX_NAME {
            return Err(self.bad("name too long"));
        }
        let end = self.pos + n as usize;
        let s = self
            .data
            .get(self.pos..end)
            .ok_or_else(|| self.bad("truncated"))?;
        self.pos = end;
        Ok(s)
    }
}

/// Decode a metadata stream. Malformed input is an error, never a panic;
/// paths must be in strictly increasing order (what the walker writes).
pub fn decode(data: &[u8]) -> Result<Vec<Record>> {
    if data.get(..MAGIC.len()) != Some(MAGIC) {
        return Err(Error::corrupt(SUBJECT, "not a directory metadata stream"));
    }
    let mut c = Cursor {
        data,
        pos: MAGIC.len(),
    };
    let count = c.varint()?;
    // Every record takes at least 7 bytes: a hostile count cannot allocate.
    let mut out = Vec::with_capacity(count.min(data.len() as u64 / 7) as usize);
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let kind = Kind::from_code(c.byte()?).ok_or_else(|| c.bad("unknown entry kind"))?;
        let shared = c.varint()?;
        if shared > prev.len() as u64 {
            return Err(c.bad("bad path prefix"));
        }
        let len = c.varint()?;
        let mut path = prev[..shared as usize].to_vec();
        path.extend_from_slice(c.bytes(len)?);
        if path <= prev && !out.is_empty() || path.is_empty() {
            return Err(c.bad("paths out of order"));
        }
        let mode = c.u32()?;
        let uid = c.varint()?;
        let gid = c.varint()?;
        let mut r = Record {
            kind,
            path,
            mode,
            uid,
            gid,
            mtime: 0,
            mtime_nsec: 0,
            size: 0,
            link: Vec::new(),
            device: (0, 0),
            xattrs: Vec::new(),
        };
        match kind {
            Kind::File => r.size = c.varint()?,
            Kind::Symlink | Kind::Hardlink => {
                let n = c.varint()?;
                r.link = c.bytes(n)?.to_vec();
            }
            Kind::CharDevice | Kind::BlockDevice => r.device = (c.u32()?, c.u32()?),
            Kind::Dir | Kind::Fifo => {}
        }
        let xattrs = c.varint()?;
        for _ in 0..xattrs {
            let n = c.varint()?;
            if n == 0 || n > MAX_XATTR_NAME {
                return Err(c.bad("bad extended attribute name"));
            }
            let name = c.bytes(n)?.to_vec();
            if name.contains(&0) || r.xattrs.last().is_some_and(|(prev, _)| *prev >= name) {
                return Err(c.bad("bad extended attribute name"));
            }
            let n = c.varint()?;
            let value = c.bytes(n)?.to_vec();
            r.xattrs.push((name, value));
        }
        prev.clone_from(&r.path);
        out.push(r);
    }
    let mut mtime = 0i64;
    for r in &mut out {
        let z = c.varint()?;
        let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
        mtime = mtime.wrapping_add(delta);
        r.mtime = mtime;
        r.mtime_nsec = c.u32()?;
        if r.mtime_nsec >= 1_000_000_000 {
            return Err(c.bad("nanoseconds out of range"));
        }
    }
    if c.pos != data.len() {
        return Err(c.bad("trailing bytes"));
    }
    Ok(out)
}
