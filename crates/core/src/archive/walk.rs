//! The directory walk of a backup: every entry below the backup paths, in
//! stream order (sorted by path bytes, directories with their trailing `/`,
//! which is a depth-first walk), as [`Record`]s followed by each regular
//! file's contents, handed to a [`TreeOut`] (the ingest's directory stream,
//! or a tar stream).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs::{self, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use super::meta::{Kind, Record};
use super::serialize::{copy_exactly, CopyError};
use super::{Selection, TreeStats};
use crate::error::{Error, IoContext, Result};

/// Copy buffer for file contents.
const COPY_BUF: usize = 256 * 1024;
/// Largest device major or minor number a tar header holds: larger ones are
/// not stored, so that every backup still restores as a tar stream.
const MAX_DEVICE_NUMBER: u32 = 0o7_777_777;

/// What identifies a regular file's contents without reading them (the
/// files cache's key, as git's index and borg's files cache use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl FileId {
    pub(crate) fn of(m: &Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// Where the walk puts the entries: `entry` for every entry in stream
/// order, then for a regular file exactly `size` bytes through `Write`,
/// then `file_end`.
pub(crate) trait TreeOut: Write {
    fn entry(&mut self, r: &Record) -> io::Result<()>;
    fn file_end(&mut self, r: &Record) -> io::Result<()>;
    /// A regular file about to be read: return true if this output supplied
    /// its `entry`, contents and `file_end` itself (the files cache), so the
    /// walk does not read it.
    fn reuse(&mut self, _r: &Record, _id: &FileId) -> io::Result<bool> {
        Ok(false)
    }
}

/// The backup paths as the walk sees them.
enum Roots {
    /// One directory: entries relative to it.
    One(PathBuf),
    /// Several paths: entries under their absolute paths without the
    /// leading `/`. `virt` lists, for each ancestor directory of a backup
    /// path (`""` is `/`), the children to store; `whole` the backup paths.
    Many {
        virt: BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>,
        whole: BTreeSet<Vec<u8>>,
    },
}

/// Walk `paths` (see [`crate::Writer::backup_paths`] for what one and
/// several paths mean) into `out`, leaving out what `selection` excludes.
pub(crate) fn walk(
    paths: &[PathBuf],
    selection: &Selection,
    out: &mut dyn TreeOut,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<TreeStats> {
    let roots = match paths {
        [] => return Err(Error::invalid("nothing to back up: no paths given")),
        [one] => {
            let meta = fs::metadata(one).ctx(|| format!("cannot read {}", one.display()))?;
            if !meta.is_dir() {
                return Err(Error::invalid(format!(
                    "{} is not a directory",
                    one.display()
                )));
            }
            Roots::One(one.clone())
        }
        many => many_roots(many)?,
    };
    let mut w = Walker {
        roots,
        selection,
        out,
        on_bytes,
        stats: TreeStats::default(),
        first_path: HashMap::new(),
        buf: vec![0; COPY_BUF],
    };
    // Paths still to visit, last one first, so that `pop` walks the tree in
    // order without recursion (deep trees must not overflow a thread's
    // stack). Each carries the device of its backup path (for
    // `--one-file-system`), or None above the backup paths.
    let root_dev = match &w.roots {
        Roots::One(p) => Some(fs::metadata(p).map(|m| m.dev()).unwrap_or(0)),
        Roots::Many { .. } => None,
    };
    let mut pending = w.children(&[], root_dev)?;
    while let Some((rel, dev)) = pending.pop() {
        if let Some(children) = w.entry(&rel, dev)? {
            pending.extend(children);
        }
    }
    Ok(w.stats)
}

/// Several backup paths: made absolute (parents resolved, the last
/// component kept as it is, so a symlink is stored as one), nested ones
/// dropped (their parent path stores them).
fn many_roots(paths: &[PathBuf]) -> Result<Roots> {
    let mut abs = BTreeSet::new();
    for p in paths {
        let name = p.file_name();
        let full = match (p.parent(), name) {
            (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
                fs::canonicalize(parent)
                    .ctx(|| format!("cannot read {}", p.display()))?
                    .join(name)
            }
            (_, Some(name)) => std::env::current_dir()
                .ctx(|| "cannot read the current directory".into())?
                .join(name),
            _ => fs::canonicalize(p).ctx(|| format!("cannot read {}", p.display()))?,
        };
        fs::symlink_metadata(&full).ctx(|| format!("cannot read {}", p.display()))?;
        let rel: Vec<u8> = full
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.as_bytes()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(&b'/');
        if rel.is_empty() {
            return Err(Error::invalid(
                "backing up / among several paths is not supported; give / alone",
            ));
        }
        abs.insert(rel);
    }
    let mut whole: BTreeSet<Vec<u8>> = BTreeSet::new();
    for rel in abs {
        let covered = whole
            .iter()
            .any(|w| rel.len() > w.len() && rel.starts_with(w) && rel[w.len()] == b'/');
        if !covered {
            whole.insert(rel);
        }
    }
    let mut virt: BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> = BTreeMap::new();
    for w in &whole {
        let mut parent = Vec::new();
        for c in w.split(|b| *b == b'/') {
            virt.entry(parent.clone()).or_default().insert(c.to_vec());
            if !parent.is_empty() {
                parent.push(b'/');
            }
            parent.extend_from_slice(c);
        }
    }
    Ok(Roots::Many { virt, whole })
}

struct Walker<'a> {
    roots: Roots,
    selection: &'a Selection,
    out: &'a mut dyn TreeOut,
    on_bytes: &'a mut dyn FnMut(u64),
    stats: TreeStats,
    /// Stream path of the first regular file seen for each multiply linked
    /// (device, inode): later paths become hard links to it.
    first_path: HashMap<(u64, u64), Vec<u8>>,
    buf: Vec<u8>,
}

fn write_error(abs: &Path, e: io::Error) -> Error {
    // The ingest's errors (a stopped worker) come back through here.
    Error::io(format!("cannot store {}", abs.display()), e)
}

impl Walker<'_> {
    fn abs(&self, rel: &[u8]) -> PathBuf {
        match &self.roots {
            Roots::One(root) if rel.is_empty() => root.clone(),
            Roots::One(root) => root.join(OsStr::from_bytes(rel)),
            Roots::Many { .. } => {
                let mut p = b"/".to_vec();
                p.extend_from_slice(rel);
                PathBuf::from(std::ffi::OsString::from_vec(p))
            }
        }
    }

    /// An ancestor of the backup paths, not itself one: only the children
    /// leading to them are stored.
    fn virtual_children(&self, rel: &[u8]) -> Option<&BTreeSet<Vec<u8>>> {
        match &self.roots {
            Roots::Many { virt, whole } if !whole.contains(rel) => virt.get(rel),
            _ => None,
        }
    }

    fn is_root(&self, rel: &[u8]) -> bool {
        match &self.roots {
            Roots::One(_) => rel.is_empty(),
            Roots::Many { whole, .. } => whole.contains(rel),
        }
    }

    /// The children of directory `rel`, as (relative path, device of their
    /// backup path) in reverse stream order. Siblings sort by their stream
    /// name (a directory's with its trailing `/`), which makes the whole
    /// stream sorted by path bytes. Excluded children are left out.
    fn children(&self, rel: &[u8], dev: Option<u64>) -> Result<Vec<(Vec<u8>, Option<u64>)>> {
        let join = |name: &[u8]| {
            let mut path = Vec::with_capacity(rel.len() + name.len() + 1);
            if !rel.is_empty() {
                path.extend_from_slice(rel);
                path.push(b'/');
            }
            path.extend_from_slice(name);
            path
        };
        let mut kids = Vec::new();
        if let Some(names) = self.virtual_children(rel) {
            for name in names {
                let path = join(name);
                let abs = self.abs(&path);
                let meta = match fs::symlink_metadata(&abs) {
                    Ok(m) => m,
                    Err(e) => return Err(Error::io(format!("cannot read {}", abs.display()), e)),
                };
                let child_dev = if self.is_root(&path) {
                    Some(meta.dev())
                } else {
                    None
                };
                let mut key = name.clone();
                if meta.is_dir() {
                    key.push(b'/');
                }
                kids.push((key, path, child_dev));
            }
        } else {
            let dir = self.abs(rel);
            let cannot = |e| Error::io(format!("cannot read {}", dir.display()), e);
            for entry in fs::read_dir(&dir).map_err(cannot)? {
                let entry = entry.map_err(cannot)?;
                let name = entry.file_name();
                let is_dir = entry
                    .file_type()
                    .ctx(|| format!("cannot read {}", entry.path().display()))?
                    .is_dir();
                let path = join(name.as_bytes());
                if self.selection.excludes(&path, is_dir) {
                    continue;
                }
                let mut key = name.into_vec();
                if is_dir {
                    key.push(b'/');
                }
                kids.push((key, path, dev));
            }
        }
        kids.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        Ok(kids.into_iter().map(|(_, path, d)| (path, d)).collect())
    }

    fn record(kind: Kind, path: Vec<u8>, meta: &Metadata) -> Record {
        Record {
            kind,
            path,
            mode: meta.mode() & 0o7777,
            uid: u64::from(meta.uid()),
            gid: u64::from(meta.gid()),
            mtime: meta.mtime(),
            mtime_nsec: u32::try_from(meta.mtime_nsec()).unwrap_or(0),
            size: 0,
            link: Vec::new(),
            device: (0, 0),
        }
    }

    /// Store one path; for a directory, return its children.
    #[allow(clippy::type_complexity)]
    fn entry(
        &mut self,
        rel: &[u8],
        dev: Option<u64>,
    ) -> Result<Option<Vec<(Vec<u8>, Option<u64>)>>> {
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
        let below_root = dev.is_some() && !self.is_root(rel);
        if ft.is_dir() {
            if below_root && self.selection.skips_dir(&abs) {
                return Ok(None);
            }
            let mut name = rel.to_vec();
            name.push(b'/');
            let r = Self::record(Kind::Dir, name, &meta);
            self.out.entry(&r).map_err(|e| write_error(&abs, e))?;
            self.stats.dirs += 1;
            let crosses = below_root
                && self.selection.one_file_system
                && dev.is_some_and(|d| d != meta.dev());
            if crosses {
                return Ok(Some(Vec::new()));
            }
            // A directory that cannot be listed is stored empty and
            // reported: the backup is then incomplete, not failed.
            if let Err(e) = fs::read_dir(&abs) {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    self.unreadable(rel, &e);
                    return Ok(Some(Vec::new()));
                }
            }
            return self.children(rel, dev).map(Some);
        }
        if ft.is_symlink() {
            let target = fs::read_link(&abs).ctx(|| format!("cannot read {}", abs.display()))?;
            let mut r = Self::record(Kind::Symlink, rel.to_vec(), &meta);
            r.link = target.into_os_string().into_vec();
            self.out.entry(&r).map_err(|e| write_error(&abs, e))?;
            self.stats.symlinks += 1;
        } else if ft.is_file() {
            self.file(rel, &abs, &meta)?;
        } else if ft.is_fifo() {
            let r = Self::record(Kind::Fifo, rel.to_vec(), &meta);
            self.out.entry(&r).map_err(|e| write_error(&abs, e))?;
            self.stats.specials += 1;
        } else if ft.is_char_device() || ft.is_block_device() {
            let kind = if ft.is_char_device() {
                Kind::CharDevice
            } else {
                Kind::BlockDevice
            };
            let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
            if major > MAX_DEVICE_NUMBER || minor > MAX_DEVICE_NUMBER {
                self.skip(
                    rel,
                    "device number too large for the tar header (not stored)",
                );
            } else {
                let mut r = Self::record(kind, rel.to_vec(), &meta);
                r.device = (major, minor);
                self.out.entry(&r).map_err(|e| write_error(&abs, e))?;
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
                let mut r = Self::record(Kind::Hardlink, rel.to_vec(), meta);
                r.link = first.clone();
                self.out.entry(&r).map_err(|e| write_error(abs, e))?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        let mut r = Self::record(Kind::File, rel.to_vec(), meta);
        r.size = meta.len();
        if self
            .out
            .reuse(&r, &FileId::of(meta))
            .map_err(|e| write_error(abs, e))?
        {
            (self.on_bytes)(r.size);
            self.stored(rel, meta, r.size);
            return Ok(());
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
        // while it is copied: the entry is already recorded by then.
        let mut r = Self::record(Kind::File, rel.to_vec(), &fmeta);
        r.size = fmeta.len();
        self.out.entry(&r).map_err(|e| write_error(abs, e))?;
        match copy_exactly(&mut file, self.out, r.size, &mut self.buf, self.on_bytes) {
            Ok(()) => {}
            Err(CopyError::Read(e)) => {
                return Err(Error::io(format!("cannot read {}", abs.display()), e))
            }
            Err(CopyError::Write(e)) => return Err(write_error(abs, e)),
        }
        self.out.file_end(&r).map_err(|e| write_error(abs, e))?;
        self.stored(rel, meta, r.size);
        Ok(())
    }

    fn stored(&mut self, rel: &[u8], meta: &Metadata, size: u64) {
        self.stats.files += 1;
        self.stats.bytes += size;
        if meta.nlink() > 1 {
            self.first_path
                .insert((meta.dev(), meta.ino()), rel.to_vec());
        }
    }

    /// A path the walk may not read: left out (a directory: stored empty)
    /// and listed, so the caller can report an incomplete backup.
    fn unreadable(&mut self, rel: &[u8], e: &io::Error) {
        self.stats
            .unreadable
            .push(format!("{}: {e}", String::from_utf8_lossy(rel)));
    }

    fn skip(&mut self, rel: &[u8], reason: &str) {
        self.stats
            .skipped
            .push(format!("{}: {reason}", String::from_utf8_lossy(rel)));
    }
}
