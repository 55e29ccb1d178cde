//! The directory walk of a backup: every entry below the backup paths, in
//! stream order (sorted by path bytes, directories with their trailing `/`,
//! which is a depth-first walk), as [`Record`]s followed by each regular
//! file's contents, handed to a [`TreeOut`] (the ingest's directory stream,
//! or a tar stream).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use rustix::fs::FileType;

use super::dirfd::{Dir, Stat};
use super::meta::{Kind, Record};
use super::packed::{self, Found};
use super::report::TreeStats;
use super::select::Selection;
use crate::error::{Error, IoContext, Result};

/// Copy buffer for file contents.
const COPY_BUF: usize = 256 * 1024;
/// Largest device major or minor number a tar header holds: larger ones are
/// not stored, so that every backup still restores as a tar stream.
const MAX_DEVICE_NUMBER: u32 = 0o7_777_777;

/// What identifies a regular file's contents without reading them (the
/// files cache's key, as git's index and borg's files cache use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl FileId {
    pub(crate) fn of(m: &Stat) -> FileId {
        FileId {
            dev: m.dev,
            ino: m.ino,
            size: m.size,
            mtime: m.mtime,
            ctime: m.ctime,
        }
    }
}

/// Where the walk puts the entries: `entry` for every entry in stream
/// order, then for a regular file exactly `size` bytes through `Write`,
/// then `file_end`.
pub(crate) trait TreeOut: Write {
    fn entry(&mut self, r: &Record) -> io::Result<()>;
    /// The end of a regular file's contents; `complete` is false when its
    /// record lacks what could not be read (its extended attributes).
    fn file_end(&mut self, r: &Record, complete: bool) -> io::Result<()>;
    /// A regular file about to be read, `r` without its extended
    /// attributes: return true if this output supplied its `entry` (with
    /// the attributes put into `r`), contents and `file_end` itself (the
    /// files cache), so the walk does not read it.
    fn reuse(&mut self, _r: &mut Record, _id: &FileId) -> io::Result<bool> {
        Ok(false)
    }
}

/// The backup paths as the walk sees them.
#[derive(Clone)]
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
    store(
        Scan::start(paths.to_vec(), selection.clone()),
        out,
        on_bytes,
    )
}

/// Entries a scan hands over at once (one channel message).
const SCAN_BATCH: usize = 128;
/// Batches a scan may run ahead of the store (~128 k entries), at most:
/// above what [`SCAN_AHEAD_BYTES`] holds packed, so the bytes bound it.
const SCAN_AHEAD: usize = 1024;
/// Bytes of entries a scan may hold ahead of the store (about 95 k
/// entries of a system tree, packed at ~85 bytes each, `packed.rs`):
/// deep enough to cover the key derivation of an encrypted repository
/// opened while the scan starts, small beside the derivation's own memory
/// (Argon2id, 64 MiB by default), which it coincides with. Counted in
/// batches of [`SCAN_BATCH`] entries.
const SCAN_AHEAD_BYTES: usize = 8 << 20;

/// A batch of a scan's steps: the entries packed one after another
/// (`packed.rs`), and the other steps, each with the number of packed
/// entries before it.
#[derive(Default)]
struct Batch {
    packed: Vec<u8>,
    entries: usize,
    others: Vec<(usize, Scanned)>,
}

impl Batch {
    fn len(&self) -> usize {
        self.entries + self.others.len()
    }
}

/// The bytes of scanned entries handed to the store and not yet stored.
/// The scan waits while the next batch would take them past the bound
/// (unless none are held); a closed budget (the scan was dropped) stops it.
struct Budget {
    /// (bytes held, closed).
    held: std::sync::Mutex<(usize, bool)>,
    freed: std::sync::Condvar,
    limit: usize,
}

impl Budget {
    /// Take `n` bytes, waiting for room; false once closed.
    fn take(&self, n: usize) -> bool {
        let mut g = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while !g.1 && g.0 > 0 && g.0 + n > self.limit {
            g = self.freed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.0 += n;
        !g.1
    }

    fn give(&self, n: usize) {
        let mut g = self.held.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = g.0.saturating_sub(n);
        self.freed.notify_all();
    }

    fn close(&self) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.freed.notify_all();
    }
}

/// What a step held in the channel costs in memory, about (a packed
/// entry costs its bytes).
fn footprint(step: &Scanned) -> usize {
    std::mem::size_of::<Scanned>()
        + match step {
            Scanned::Entry(f) => {
                let xattrs = f
                    .xattrs
                    .as_ref()
                    .and_then(|x| x.as_ref().ok())
                    .map_or(0, |x| {
                        x.iter()
                            .map(|(n, v)| {
                                std::mem::size_of::<super::meta::Xattr>() + n.len() + v.len()
                            })
                            .sum()
                    });
                std::mem::size_of::<Found>()
                    + f.rel.capacity()
                    + f.abs.capacity()
                    + f.link.capacity()
                    + xattrs
            }
            Scanned::Unreadable(rel, _) => rel.capacity() + 64,
            Scanned::Skip(rel, why) => rel.capacity() + why.capacity(),
            Scanned::Failed(_) | Scanned::Done => 64,
        }
}

/// The directory walk of a backup, running on a thread of its own ahead of
/// the store (which reads files and feeds the ingest): listing, `lstat`,
/// extended attributes and symlink targets of what comes next overlap the
/// reading of what comes now, and the walk can start before the
/// repository is open (its key derived). Dropping a scan stops it.
pub struct Scan {
    paths: Vec<PathBuf>,
    rx: Option<Receiver<(Batch, usize)>>,
    budget: std::sync::Arc<Budget>,
    /// The roots, set by the scanner before it sends an entry: the store
    /// makes packed entries' absolute paths with them.
    roots: std::sync::Arc<std::sync::OnceLock<Roots>>,
    thread: Option<JoinHandle<()>>,
}

/// One step of a scan, in stream order.
pub(crate) enum Scanned {
    /// An entry to store.
    Entry(Box<Found>),
    /// A directory that cannot be listed (stored empty), as `unreadable`.
    Unreadable(Vec<u8>, io::Error),
    /// A path left out, with the reason.
    Skip(Vec<u8>, String),
    /// The scan failed here and stopped.
    Failed(Error),
    /// The scan is complete: without it, a closed channel means the scan
    /// thread died, and the stream would be silently short.
    Done,
}

impl Scan {
    /// Start walking `paths` on a new thread, leaving out what `selection`
    /// excludes. Errors (a path that is not there) come out of the store.
    pub fn start(paths: Vec<PathBuf>, selection: Selection) -> Scan {
        Self::start_bounded(paths, selection, SCAN_AHEAD_BYTES)
    }

    /// [`start`](Self::start), holding at most about `ahead` bytes of
    /// entries (and at least one batch) ahead of the store.
    pub(crate) fn start_bounded(paths: Vec<PathBuf>, selection: Selection, ahead: usize) -> Scan {
        let (tx, rx) = sync_channel(SCAN_AHEAD);
        let budget = std::sync::Arc::new(Budget {
            held: std::sync::Mutex::new((0, false)),
            freed: std::sync::Condvar::new(),
            limit: ahead,
        });
        let for_thread = paths.clone();
        let for_scanner = budget.clone();
        let roots = std::sync::Arc::new(std::sync::OnceLock::new());
        let shared_roots = roots.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-scan".into())
            .spawn(move || {
                let mut s = Scanner {
                    roots: Roots::One(PathBuf::new()),
                    shared_roots,
                    selection,
                    batch: Batch::default(),
                    batch_bytes: 0,
                    budget: for_scanner,
                    tx,
                };
                let last = match s.scan(&for_thread) {
                    Ok(()) => Scanned::Done,
                    Err(e) => Scanned::Failed(e),
                };
                let n = s.batch.entries;
                s.batch.others.push((n, last));
                let batch = std::mem::take(&mut s.batch);
                let _ = s.tx.send((batch, 0));
            });
        match thread {
            Ok(t) => Scan {
                paths,
                rx: Some(rx),
                budget,
                roots,
                thread: Some(t),
            },
            Err(e) => {
                // No thread: the store sees the failure at once.
                let (tx, rx) = sync_channel(1);
                let failed = Scanned::Failed(Error::io("cannot start the directory walk", e));
                let batch = Batch {
                    others: vec![(0, failed)],
                    ..Batch::default()
                };
                let _ = tx.send((batch, 0));
                Scan {
                    paths,
                    rx: Some(rx),
                    budget,
                    roots,
                    thread: None,
                }
            }
        }
    }

    /// The backup paths, as given.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

impl Drop for Scan {
    fn drop(&mut self) {
        // A closed channel stops the scanner at its next send, a closed
        // budget while it waits for room.
        self.rx = None;
        self.budget.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The scan's side: the walk itself.
struct Scanner {
    roots: Roots,
    /// [`Scan::roots`].
    shared_roots: std::sync::Arc<std::sync::OnceLock<Roots>>,
    selection: Selection,
    batch: Batch,
    /// The [`footprint`] of the batch's other steps.
    batch_bytes: usize,
    budget: std::sync::Arc<Budget>,
    tx: SyncSender<(Batch, usize)>,
}

/// The store's side: records, file contents, statistics.
struct Store<'a> {
    out: &'a mut dyn TreeOut,
    on_bytes: &'a mut dyn FnMut(u64),
    stats: TreeStats,
    /// Stream path of the first regular file seen for each multiply linked
    /// (device, inode): later paths become hard links to it.
    first_path: HashMap<(u64, u64), Vec<u8>>,
    buf: Vec<u8>,
}

/// Store what `scan` finds into `out`.
pub(crate) fn store(
    mut scan: Scan,
    out: &mut dyn TreeOut,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<TreeStats> {
    let mut st = Store {
        out,
        on_bytes,
        stats: TreeStats::default(),
        first_path: HashMap::new(),
        buf: vec![0; COPY_BUF],
    };
    let Some(rx) = scan.rx.take() else {
        return Err(Error::invalid("this directory walk was already used"));
    };
    let budget = scan.budget.clone();
    let roots = scan.roots.clone();
    let abs = |rel: &[u8]| {
        roots
            .get()
            .map_or_else(|| PathBuf::from(OsStr::from_bytes(rel)), |r| r.abs(rel))
    };
    for (batch, bytes) in rx.iter() {
        // Stored (or failed) once this batch is done: room for the next.
        struct Give<'a>(&'a Budget, usize);
        impl Drop for Give<'_> {
            fn drop(&mut self) {
                self.0.give(self.1);
            }
        }
        let _given = Give(&budget, bytes);
        let mut others = batch.others.into_iter().peekable();
        let mut at = 0;
        for n in 0..=batch.entries {
            while let Some((_, step)) = others.next_if(|(before, _)| *before == n) {
                match step {
                    Scanned::Entry(found) => st.entry(*found)?,
                    Scanned::Unreadable(rel, e) => st.unreadable(&rel, &e),
                    Scanned::Skip(rel, reason) => st.skip(&rel, &reason),
                    Scanned::Failed(e) => return Err(e),
                    Scanned::Done => return Ok(st.stats),
                }
            }
            if n < batch.entries {
                st.entry(packed::unpack(&batch.packed, &mut at, &abs))?;
            }
        }
    }
    Err(Error::invalid("the directory walk stopped unexpectedly"))
}

impl Scanner {
    fn push(&mut self, step: Scanned) -> Result<()> {
        match step {
            Scanned::Entry(f) if packed::packable(&f) => {
                packed::pack(&mut self.batch.packed, &f);
                self.batch.entries += 1;
            }
            step => {
                self.batch_bytes += footprint(&step);
                let n = self.batch.entries;
                self.batch.others.push((n, step));
            }
        }
        if self.batch.len() >= SCAN_BATCH {
            let batch = std::mem::take(&mut self.batch);
            // The packed entries cost their buffer, slack included.
            let bytes = std::mem::take(&mut self.batch_bytes) + batch.packed.capacity();
            let stopped = || Error::invalid("the directory walk was stopped");
            // The store went away (it failed, or was dropped): stop.
            if !self.budget.take(bytes) {
                return Err(stopped());
            }
            self.tx.send((batch, bytes)).map_err(|_| stopped())?;
        }
        Ok(())
    }

    fn scan(&mut self, paths: &[PathBuf]) -> Result<()> {
        self.roots = match paths {
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
        let _ = self.shared_roots.set(self.roots.clone());
        // Paths still to visit, last one first, so that `pop` walks the tree
        // in order without recursion (deep trees must not overflow a
        // thread's stack).
        let (root_dev, root_dir) = match &self.roots {
            Roots::One(p) => {
                let dir = Dir::open_path(p).ctx(|| format!("cannot read {}", p.display()))?;
                (
                    Some(fs::metadata(p).map(|m| m.dev()).unwrap_or(0)),
                    Some(dir),
                )
            }
            Roots::Many { .. } => (None, None),
        };
        let mut pending = self.children(&[], root_dev, root_dir)?;
        while let Some(next) = pending.pop() {
            if let Some(children) = self.entry(next)? {
                pending.extend(children);
            }
        }
        Ok(())
    }
}

/// A path still to visit.
struct Pending {
    /// The stream path (relative, no trailing `/`).
    rel: Vec<u8>,
    /// Where its last component starts in `rel`.
    name_at: usize,
    /// The device of its backup path (for `--one-file-system`), or None
    /// above the backup paths.
    dev: Option<u64>,
    /// Its directory, open (None: it is read by its whole path).
    parent: Option<Rc<Dir>>,
}

/// Directories nested deeper than this give their children no open
/// parent (they are read by whole path): the walk holds a directory open
/// until its last child is visited, one per level of the path it is in,
/// and a tree of any depth must stay within the process's descriptors.
pub(super) const HELD_DIRS: usize = 128;

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

fn write_error(abs: &Path, e: io::Error) -> Error {
    // The ingest's errors (a stopped worker) come back through here.
    Error::io(format!("cannot store {}", abs.display()), e)
}

impl Scanner {
    fn abs(&self, rel: &[u8]) -> PathBuf {
        self.roots.abs(rel)
    }
}

impl Roots {
    /// The absolute path of stream path `rel`.
    fn abs(&self, rel: &[u8]) -> PathBuf {
        match self {
            Roots::One(root) if rel.is_empty() => root.clone(),
            Roots::One(root) => root.join(OsStr::from_bytes(rel)),
            Roots::Many { .. } => {
                let mut p = b"/".to_vec();
                p.extend_from_slice(rel);
                PathBuf::from(std::ffi::OsString::from_vec(p))
            }
        }
    }
}

impl Scanner {
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

    /// The children of directory `rel`, in reverse stream order, each with
    /// the device of its backup path (`dev`, except below the virtual
    /// directories above several backup paths). Siblings sort by their
    /// stream name (a directory's with its trailing `/`), which makes the
    /// whole stream sorted by path bytes. Excluded children are left out.
    /// `dir` is the directory, open (a virtual directory has none).
    fn children(&self, rel: &[u8], dev: Option<u64>, dir: Option<Dir>) -> Result<Vec<Pending>> {
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
        let mut parent = None;
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
                let name_at = path.len() - name.len();
                kids.push((key, path, name_at, child_dev));
            }
        } else {
            let dir_path = || self.abs(rel);
            let dir = dir.ok_or_else(|| {
                Error::invalid(format!("cannot read {}: not open", dir_path().display()))
            })?;
            let listing = dir
                .children()
                .map_err(|e| Error::io(format!("cannot read {}", dir_path().display()), e))?;
            for (name, is_dir) in listing {
                let path = join(&name);
                if self.selection.excludes(&path, is_dir) {
                    continue;
                }
                let name_at = path.len() - name.len();
                let mut key = name;
                if is_dir {
                    key.push(b'/');
                }
                kids.push((key, path, name_at, dev));
            }
            let depth = rel.iter().filter(|b| **b == b'/').count() + 1;
            parent = (depth <= HELD_DIRS).then(|| Rc::new(dir));
        }
        kids.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        Ok(kids
            .into_iter()
            .map(|(_, rel, name_at, dev)| Pending {
                rel,
                name_at,
                dev,
                parent: parent.clone(),
            })
            .collect())
    }

    /// Hand one path over; for a directory, return its children. It is
    /// read by name under its open parent where it has one.
    fn entry(&mut self, p: Pending) -> Result<Option<Vec<Pending>>> {
        let abs = self.abs(&p.rel);
        let parent = p.parent.as_deref();
        // The name under the parent, or the whole path.
        let name: &[u8] = match parent {
            Some(_) => &p.rel[p.name_at..],
            None => abs.as_os_str().as_bytes(),
        };
        let meta = match Stat::at(parent, name) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.push(Scanned::Skip(p.rel, "vanished during the backup".into()))?;
                return Ok(None);
            }
            Err(e) => return Err(Error::io(format!("cannot read {}", abs.display()), e)),
        };
        let ft = meta.file_type();
        let below_root = p.dev.is_some() && !self.is_root(&p.rel);
        if ft == FileType::Directory {
            if below_root && self.selection.skips_dir(&abs) {
                return Ok(None);
            }
            let crosses = below_root
                && self.selection.one_file_system
                && p.dev.is_some_and(|d| d != meta.dev);
            // A mount point left out is not opened (which could mount it).
            let opened = (!crosses).then(|| Dir::open(parent, name, false));
            let xattrs = match &opened {
                Some(Ok(dir)) => super::xattr::read_fd(dir.fd()),
                _ => read_xattrs(&abs),
            };
            let rel = p.rel.clone();
            self.push(Scanned::Entry(Box::new(Found {
                rel: p.rel,
                abs: abs.clone(),
                meta,
                xattrs: Some(xattrs),
                link: Vec::new(),
                device: (0, 0),
            })))?;
            return match opened {
                None => Ok(Some(Vec::new())),
                Some(Ok(dir)) => self.children(&rel, p.dev, Some(dir)).map(Some),
                // A directory that cannot be listed is stored empty and
                // reported: the backup is then incomplete, not failed.
                Some(Err(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                    self.push(Scanned::Unreadable(rel, e))?;
                    Ok(Some(Vec::new()))
                }
                Some(Err(e)) => Err(Error::io(format!("cannot read {}", abs.display()), e)),
            };
        }
        let mut link = Vec::new();
        let mut device = (0, 0);
        match ft {
            FileType::Symlink => {
                link = match parent {
                    Some(dir) => dir.read_link(name),
                    None => fs::read_link(&abs).map(|t| t.into_os_string().into_vec()),
                }
                .ctx(|| format!("cannot read {}", abs.display()))?;
            }
            FileType::CharacterDevice | FileType::BlockDevice => {
                device = (libc::major(meta.rdev), libc::minor(meta.rdev));
                if device.0 > MAX_DEVICE_NUMBER || device.1 > MAX_DEVICE_NUMBER {
                    self.push(Scanned::Skip(
                        p.rel,
                        "device number too large for the tar header (not stored)".into(),
                    ))?;
                    return Ok(None);
                }
            }
            FileType::RegularFile | FileType::Fifo => {}
            _ => {
                let what = if ft == FileType::Socket {
                    "socket"
                } else {
                    "unknown file type"
                };
                self.push(Scanned::Skip(p.rel, format!("{what} (not stored)")))?;
                return Ok(None);
            }
        }
        // A regular file's are read by the store, if it reads the file.
        let xattrs = (ft != FileType::RegularFile).then(|| read_xattrs(&abs));
        self.push(Scanned::Entry(Box::new(Found {
            rel: p.rel,
            abs,
            meta,
            xattrs,
            link,
            device,
        })))?;
        Ok(None)
    }
}

/// The extended attributes of `abs`; a path gone since is taken as having
/// none (the store finds it gone).
fn read_xattrs(abs: &Path) -> io::Result<Vec<super::meta::Xattr>> {
    match super::xattr::read(abs) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        r => r,
    }
}

impl Store<'_> {
    fn record(kind: Kind, path: Vec<u8>, meta: &Stat) -> Record {
        Record {
            kind,
            path,
            mode: meta.mode & 0o7777,
            uid: u64::from(meta.uid),
            gid: u64::from(meta.gid),
            mtime: meta.mtime.0,
            mtime_nsec: u32::try_from(meta.mtime.1).unwrap_or(0),
            size: 0,
            link: Vec::new(),
            device: (0, 0),
            xattrs: Vec::new(),
        }
    }

    /// Extended attributes as read (`None`: not read, none stored); ones
    /// that could not be read make the backup incomplete (reported, as an
    /// unreadable file) and are given as none.
    fn xattrs(
        &mut self,
        rel: &[u8],
        read: Option<io::Result<Vec<super::meta::Xattr>>>,
    ) -> Option<Vec<super::meta::Xattr>> {
        match read.unwrap_or_else(|| Ok(Vec::new())) {
            Ok(x) => Some(x),
            Err(e) => {
                self.stats.unreadable.push(format!(
                    "{}: extended attributes not stored: {e}",
                    String::from_utf8_lossy(rel)
                ));
                None
            }
        }
    }

    /// Store one entry the scan found.
    fn entry(&mut self, mut f: Found) -> Result<()> {
        let ft = f.meta.file_type();
        if ft == FileType::RegularFile {
            return self.file(f);
        }
        let kind = match ft {
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::CharacterDevice => Kind::CharDevice,
            _ => Kind::BlockDevice,
        };
        let mut rel = f.rel.clone();
        if kind == Kind::Dir {
            rel.push(b'/');
        }
        let mut r = Self::record(kind, rel, &f.meta);
        r.xattrs = self.xattrs(&f.rel, f.xattrs.take()).unwrap_or_default();
        r.link = std::mem::take(&mut f.link);
        r.device = f.device;
        self.out.entry(&r).map_err(|e| write_error(&f.abs, e))?;
        match kind {
            Kind::Dir => self.stats.dirs += 1,
            Kind::Symlink => self.stats.symlinks += 1,
            _ => self.stats.specials += 1,
        }
        Ok(())
    }

    fn file(&mut self, f: Found) -> Result<()> {
        let (rel, abs, meta) = (&f.rel, &f.abs, &f.meta);
        let inode = (meta.dev, meta.ino);
        if meta.nlink > 1 {
            if let Some(first) = self.first_path.get(&inode) {
                let mut r = Self::record(Kind::Hardlink, rel.clone(), meta);
                r.link = first.clone();
                self.out.entry(&r).map_err(|e| write_error(abs, e))?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        let mut r = Self::record(Kind::File, rel.clone(), meta);
        r.size = meta.size;
        if self
            .out
            .reuse(&mut r, &FileId::of(meta))
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
        let fmeta = Stat::from(
            &file
                .metadata()
                .ctx(|| format!("cannot read {}", abs.display()))?,
        );
        if !fmeta.is_file() {
            self.skip(rel, "changed type during the backup");
            return Ok(());
        }
        // The size seen now is the size stored, whatever happens to the file
        // while it is copied: the entry is already recorded by then.
        let mut r = Self::record(Kind::File, rel.clone(), &fmeta);
        r.size = fmeta.size;
        // From the open file: its path is not resolved again.
        let xattrs = self.xattrs(rel, Some(super::xattr::read_fd(file.as_fd())));
        let complete = xattrs.is_some();
        r.xattrs = xattrs.unwrap_or_default();
        self.out.entry(&r).map_err(|e| write_error(abs, e))?;
        match copy_exactly(&mut file, self.out, r.size, &mut self.buf, self.on_bytes) {
            Ok(()) => {}
            Err(CopyError::Read(e)) => {
                return Err(Error::io(format!("cannot read {}", abs.display()), e))
            }
            Err(CopyError::Write(e)) => return Err(write_error(abs, e)),
        }
        self.out
            .file_end(&r, complete)
            .map_err(|e| write_error(abs, e))?;
        self.stored(rel, meta, r.size);
        Ok(())
    }

    fn stored(&mut self, rel: &[u8], meta: &Stat, size: u64) {
        self.stats.files += 1;
        self.stats.bytes += size;
        if meta.nlink > 1 {
            self.first_path.insert((meta.dev, meta.ino), rel.to_vec());
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

/// Which side of [`copy_exactly`] failed: the file read or the stream write.
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
