//! An entry the walk found ([`Found`]), and its packed form: the walk's
//! entries wait for the store (`walk.rs`) packed into bytes, a path, its
//! `lstat` fields as varints, extended attributes, a symlink's target, a
//! device's numbers. The absolute path is not kept: the store makes it
//! again from the relative one.
//!
//! Why: a backup of an encrypted repository derives its key (Argon2id,
//! ~0.25 s of one core) while the walk runs on the other, but the walk
//! holds at most `SCAN_AHEAD_BYTES` of entries the store has not taken
//! yet, and the store takes none before the repository is open. Boxed,
//! an entry of a 77 k-entry `/usr` took ~450 bytes: 8 MiB was a quarter
//! of the tree, and the rest of the walk (~0.2 s of `lstat`s) came after
//! the derivation. Packed, one takes ~85 bytes (6.5 MB for that tree).

use super::dirfd::Stat;
use super::meta::Xattr;
use std::io;
use std::path::PathBuf;

/// An entry the scan found: what the store needs to record it.
#[derive(Debug)]
pub(crate) struct Found {
    pub(super) rel: Vec<u8>,
    pub(super) abs: PathBuf,
    pub(super) meta: Stat,
    /// None for a regular file: the store takes them from the files cache
    /// or reads them from the file it opens.
    pub(super) xattrs: Option<io::Result<Vec<Xattr>>>,
    /// A symlink's target; a device's (major, minor).
    pub(super) link: Vec<u8>,
    pub(super) device: (u32, u32),
}

/// Append `v` as LEB128.
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_i(out: &mut Vec<u8>, v: i64) {
    put(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A cursor over packed bytes. Only [`pack`] writes them, in this process,
/// so a short or malformed buffer is a bug: it panics.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn get(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.buf[self.at];
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return v;
            }
            shift += 7;
        }
    }

    fn get_i(&mut self) -> i64 {
        let v = self.get();
        ((v >> 1) as i64) ^ -((v & 1) as i64)
    }

    fn get_u32(&mut self) -> u32 {
        self.get() as u32
    }

    fn bytes(&mut self) -> Vec<u8> {
        let n = self.get() as usize;
        let b = self.buf[self.at..self.at + n].to_vec();
        self.at += n;
        b
    }
}

/// Whether `f` can be packed: extended attributes that failed to read
/// (an error to report) travel as they are.
pub(super) fn packable(f: &Found) -> bool {
    !matches!(f.xattrs, Some(Err(_)))
}

/// Append `f` (a [`packable`] entry) to `out`.
pub(super) fn pack(out: &mut Vec<u8>, f: &Found) {
    put_bytes(out, &f.rel);
    let m = &f.meta;
    for v in [
        u64::from(m.mode),
        u64::from(m.uid),
        u64::from(m.gid),
        m.size,
    ] {
        put(out, v);
    }
    for v in [m.mtime.0, m.mtime.1, m.ctime.0, m.ctime.1] {
        put_i(out, v);
    }
    for v in [m.dev, m.ino, m.nlink, m.rdev] {
        put(out, v);
    }
    match &f.xattrs {
        Some(Ok(x)) => {
            out.push(1);
            put(out, x.len() as u64);
            for (name, value) in x {
                put_bytes(out, name);
                put_bytes(out, value);
            }
        }
        _ => out.push(0),
    }
    put_bytes(out, &f.link);
    put(out, u64::from(f.device.0));
    put(out, u64::from(f.device.1));
}

/// The entry packed at `*at` in `buf`, its absolute path made by `abs`;
/// `*at` moves past it.
pub(super) fn unpack(buf: &[u8], at: &mut usize, abs: &dyn Fn(&[u8]) -> PathBuf) -> Found {
    let mut r = Reader { buf, at: *at };
    let rel = r.bytes();
    let meta = Stat {
        mode: r.get_u32(),
        uid: r.get_u32(),
        gid: r.get_u32(),
        size: r.get(),
        mtime: (r.get_i(), r.get_i()),
        ctime: (r.get_i(), r.get_i()),
        dev: r.get(),
        ino: r.get(),
        nlink: r.get(),
        rdev: r.get(),
    };
    let xattrs = match r.buf[r.at] {
        0 => {
            r.at += 1;
            None
        }
        _ => {
            r.at += 1;
            let n = r.get() as usize;
            let x: Vec<Xattr> = (0..n).map(|_| (r.bytes(), r.bytes())).collect();
            Some(Ok(x))
        }
    };
    let link = r.bytes();
    let device = (r.get_u32(), r.get_u32());
    *at = r.at;
    Found {
        abs: abs(&rel),
        rel,
        meta,
        xattrs,
        link,
        device,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stat() -> impl Strategy<Value = Stat> {
        (
            (any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>()),
            (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        )
            .prop_map(
                |((mode, uid, gid, size), (a, b, c, d), (dev, ino, nlink, rdev))| Stat {
                    mode,
                    uid,
                    gid,
                    size,
                    mtime: (a, b),
                    ctime: (c, d),
                    dev,
                    ino,
                    nlink,
                    rdev,
                },
            )
    }

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..max)
    }

    fn found() -> impl Strategy<Value = Found> {
        (
            bytes(300),
            stat(),
            proptest::option::of(proptest::collection::vec((bytes(40), bytes(300)), 0..4)),
            bytes(200),
            (any::<u32>(), any::<u32>()),
        )
            .prop_map(|(rel, meta, xattrs, link, device)| Found {
                abs: PathBuf::new(),
                rel,
                meta,
                xattrs: xattrs.map(Ok),
                link,
                device,
            })
    }

    fn same(a: &Found, b: &Found) -> bool {
        let xa = a.xattrs.as_ref().map(|x| x.as_ref().ok().cloned());
        let xb = b.xattrs.as_ref().map(|x| x.as_ref().ok().cloned());
        a.rel == b.rel && a.meta == b.meta && xa == xb && a.link == b.link && a.device == b.device
    }

    proptest! {
        /// Entries packed one after another come back whole and in order,
        /// every field (the extremes of each integer among them), with the
        /// absolute path made from the relative one.
        #[test]
        fn entries_come_back_whole_and_in_order(entries in proptest::collection::vec(found(), 0..20)) {
            let mut buf = Vec::new();
            for f in &entries {
                prop_assert!(packable(f));
                pack(&mut buf, f);
            }
            let abs = |rel: &[u8]| PathBuf::from("/root").join(String::from_utf8_lossy(rel).as_ref());
            let mut at = 0;
            for f in &entries {
                let g = unpack(&buf, &mut at, &abs);
                prop_assert!(same(f, &g));
                prop_assert_eq!(&g.abs, &abs(&f.rel));
            }
            prop_assert_eq!(at, buf.len());
        }
    }

    #[test]
    fn extremes_and_unreadable_xattrs() {
        let mut f = Found {
            abs: PathBuf::new(),
            rel: b"a/b".to_vec(),
            meta: Stat {
                mode: u32::MAX,
                uid: 0,
                gid: u32::MAX,
                size: u64::MAX,
                mtime: (i64::MIN, i64::MAX),
                ctime: (-1, 0),
                dev: u64::MAX,
                ino: 0,
                nlink: 1,
                rdev: u64::MAX,
            },
            xattrs: Some(Ok(vec![(b"user.x".to_vec(), Vec::new())])),
            link: Vec::new(),
            device: (u32::MAX, 0),
        };
        let mut buf = Vec::new();
        pack(&mut buf, &f);
        let g = unpack(&buf, &mut 0, &|_| PathBuf::from("/x"));
        assert!(same(&f, &g));
        f.xattrs = Some(Err(std::io::Error::other("no")));
        assert!(!packable(&f), "an error to report travels boxed");
    }
}
