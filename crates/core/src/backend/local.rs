//! A repository in a local directory: one file per object.
//!
//! `put` writes a hidden temporary file next to the final name and renames it
//! over that name, so a reader sees the old object, the new one or nothing,
//! never a partial file. Nothing is fsynced per put: the written files and
//! their directories are remembered, and [`ObjectStore::barrier`] fsyncs them all at
//! once (files first, then directories, so the renames themselves are
//! durable). A crash before `barrier` may lose those objects, which the engine
//! tolerates because no manifest references an object before a `barrier`.

use super::store::{keys_of, ObjectBytes, ObjectStore};
use crate::error::{Error, IoContext, ObjectRef, Result};
use crate::object_key::{KeyKind, ObjectKey};
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Distinguishes temporary names within this process. Global rather than per
/// backend so two handles on the same directory never pick the same name.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Check that `key` is a relative `/`-separated object name that cannot
/// escape the repository or collide with temporary files.
///
/// Components starting with `.` are refused: that covers `.` and `..`, and
/// keeps hidden names free for the temporaries of `put`, which `list` skips.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("invalid object key {key:?}: {why}")));
    if key.is_empty() {
        return bad("empty");
    }
    if key.starts_with('/') {
        return bad("absolute");
    }
    if key.contains('\\') {
        return bad("contains a backslash");
    }
    if key.contains('\0') {
        return bad("contains a NUL byte");
    }
    for component in key.split('/') {
        if component.is_empty() {
            return bad("empty path component");
        }
        if component.starts_with('.') {
            return bad("path component starts with '.'");
        }
    }
    Ok(())
}

/// Check a `list` prefix: its complete components must be valid key
/// components (it may end in the middle of one, or be empty).
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    let dir_part = prefix.rfind('/').map_or("", |i| &prefix[..i]);
    if (!dir_part.is_empty() && validate_key(dir_part).is_err()) || prefix.starts_with('/') {
        return Err(Error::invalid(format!("invalid list prefix {prefix:?}")));
    }
    Ok(())
}

/// `dir` and those of its ancestors that do not exist yet (stopping at
/// `stop`), i.e. the directories `create_dir_all(dir)` would create.
fn missing_ancestors(dir: &Path, stop: Option<&Path>) -> Vec<PathBuf> {
    let mut missing = Vec::new();
    let mut d = dir;
    while Some(d) != stop && !d.as_os_str().is_empty() && !d.exists() {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    missing
}

/// Objects at least this large are mapped by `get_whole` instead of read.
const MAP_MIN: u64 = 1 << 20;

/// Objects at least this large are written behind (containers, index
/// segments); small ones wait for `barrier`.
pub(super) const WRITE_BEHIND_MIN: usize = 256 << 10;
/// How many written-behind objects may still be on their way to disk.
pub(super) const WRITE_BEHIND_DEPTH: usize = 2;

/// Large objects whose write-back has started, oldest first.
///
/// Why: a backup writes hundreds of MB of containers that nobody reads
/// soon. Left in the page cache, every container takes fresh pages (on the
/// reference VM that costs more than chunking and hashing it), and the
/// final fsync waits for all of it at once. Instead each large object's
/// write-back starts as soon as it is written, and once `WRITE_BEHIND_DEPTH`
/// newer ones follow it, we wait for it to reach the disk and drop its
/// pages, which the next containers then reuse. Durability still comes only
/// from `barrier` (fsync of files and directories); this changes when data
/// moves, never what a crash can leave.
#[derive(Default)]
struct WriteBehind {
    files: std::collections::VecDeque<File>,
}

impl WriteBehind {
    /// Start writing `file` back; retire the oldest beyond the depth.
    fn push(&mut self, file: File) {
        start_writeback(&file);
        self.files.push_back(file);
        while self.files.len() > WRITE_BEHIND_DEPTH {
            if let Some(old) = self.files.pop_front() {
                retire(&old);
            }
        }
    }
}

/// Ask the kernel to start writing `file` to disk, without waiting.
fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open descriptor; the call only schedules I/O.
        unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Wait until `file`'s data has been written back, then drop its pages.
/// Failures are ignored: the fsync of `barrier` reports real I/O errors.
fn retire(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let all = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: a valid open descriptor; no memory is passed.
        unsafe {
            libc::sync_file_range(fd, 0, 0, all);
            libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Whether a directory entry name is a temporary file of an unfinished `put`.
fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// Files and directories changed since the last successful `barrier`.
#[derive(Default)]
struct Pending {
    files: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
}

pub struct LocalStore {
    root: PathBuf,
    pending: Mutex<Pending>,
    write_behind: Mutex<WriteBehind>,
    /// Held for the whole of `barrier`, so a second `barrier` cannot return while
    /// the first is still flushing entries it took from `pending`.
    sync_lock: Mutex<()>,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("root", &self.root)
            .finish()
    }
}

impl LocalStore {
    /// Open an existing repository directory.
    pub fn open(root: &Path) -> Result<Self> {
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => Ok(Self::at(root)),
            Ok(_) => Err(Error::invalid(format!(
                "{} is not a directory",
                root.display()
            ))),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                Err(Error::NoRepository(root.to_path_buf()))
            }
            Err(e) => Err(Error::io(
                format!("cannot open repository {}", root.display()),
                e,
            )),
        }
    }

    /// Create the repository directory (and its parents) if needed and open it.
    /// The new directories are made durable by the first `barrier`.
    pub fn create(root: &Path) -> Result<Self> {
        let created = missing_ancestors(root, None);
        fs::create_dir_all(root)
            .ctx(|| format!("cannot create repository directory {}", root.display()))?;
        let backend = Self::open(root)?;
        backend
            .pending()
            .dirs
            .extend(created.iter().map(|d| Self::parent_of(d)));
        Ok(backend)
    }

    fn at(root: &Path) -> Self {
        LocalStore {
            root: root.to_path_buf(),
            pending: Mutex::new(Pending::default()),
            write_behind: Mutex::new(WriteBehind::default()),
            sync_lock: Mutex::new(()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many files and directories the next `barrier` would flush.
    #[cfg(test)]
    pub(crate) fn unsynced_counts(&self) -> (usize, usize) {
        let p = self.pending();
        (p.files.len(), p.dirs.len())
    }

    fn path(&self, key: &ObjectKey) -> Result<PathBuf> {
        let name = key.name();
        validate_key(&name)?;
        Ok(self.root.join(name))
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        // A panic elsewhere cannot leave the sets inconsistent; keep going.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The directory holding `path`; `.` for a bare relative name.
    fn parent_of(path: &Path) -> PathBuf {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Create the directories leading to `dir` and return the parents whose
    /// entries changed, which must be fsynced for the new directories to be
    /// durable.
    fn make_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        // The root is made once, by `create`. Gone now, it was removed
        // while open (an `rm -rf` of the repository): making it again would
        // let this writer publish on top of objects that no longer exist,
        // and the loss would surface only when something reads them.
        if !self.root.is_dir() {
            return Err(Error::io(
                format!(
                    "the repository directory {} was removed while open; not making it again (objects written before are gone)",
                    self.root.display()
                ),
                std::io::Error::from(ErrorKind::NotFound),
            ));
        }
        let missing = missing_ancestors(dir, Some(&self.root));
        fs::create_dir_all(dir).ctx(|| format!("cannot create directory {}", dir.display()))?;
        Ok(missing.iter().map(|m| Self::parent_of(m)).collect())
    }

    fn temp_path(final_path: &Path) -> PathBuf {
        let name = final_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        Self::parent_of(final_path).join(format!(".{name}.{}.{n}.tmp", std::process::id()))
    }

    /// Create a fresh temporary file in the object's directory (creating the
    /// directory on demand) and write `data` to it. Returns the temporary path
    /// and the directories whose entries changed.
    fn write_temp(&self, path: &Path, data: &[u8], fsync: bool) -> Result<(PathBuf, Vec<PathBuf>)> {
        let dir = Self::parent_of(path);
        let tmp = Self::temp_path(path);
        let mut new_dirs = Vec::new();
        let mut file = match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                new_dirs = self.make_dirs(&dir)?;
                OpenOptions::new().write(true).create_new(true).open(&tmp)
            }
            other => other,
        }
        .ctx(|| format!("cannot create {}", tmp.display()))?;
        let written = file
            .write_all(data)
            .and_then(|()| if fsync { file.sync_all() } else { Ok(()) });
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io(format!("cannot write {}", tmp.display()), e));
        }
        if !fsync && data.len() >= WRITE_BEHIND_MIN {
            self.write_behind
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(file);
        }
        Ok((tmp, new_dirs))
    }

    /// Temporary files an interrupted `put` left behind, anywhere under the root.
    pub fn list_temporaries(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        Self::walk(&self.root, &mut |path, name| {
            if is_temporary(name) {
                out.push(path.to_path_buf());
            }
        })?;
        out.sort();
        Ok(out)
    }

    /// Delete the leftovers of interrupted puts; returns how many were
    /// removed. Their directories are made durable by the next `barrier`.
    pub fn remove_temporaries(&self) -> Result<usize> {
        let mut removed = 0;
        for path in self.list_temporaries()? {
            match fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("cannot remove {}", path.display()), e)),
            }
            self.pending().dirs.insert(Self::parent_of(&path));
        }
        Ok(removed)
    }

    /// Visit every non-directory entry under `dir` (recursively) with its
    /// path and file name. A missing `dir` has no entries. Names that are not
    /// UTF-8 cannot be keys or our temporaries and are skipped.
    fn walk(dir: &Path, visit: &mut dyn FnMut(&Path, &str)) -> Result<()> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("cannot list {}", dir.display()), e)),
        };
        for entry in entries {
            let entry = entry.ctx(|| format!("cannot list {}", dir.display()))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let file_type = entry
                .file_type()
                .ctx(|| format!("cannot stat {}", path.display()))?;
            // Follow symlinks only to decide what they point at.
            let is_dir = file_type.is_dir() || (file_type.is_symlink() && path.is_dir());
            if is_dir {
                Self::walk(&path, visit)?;
            } else {
                visit(&path, &name);
            }
        }
        Ok(())
    }

    /// Open an object for reading: its path, the file and its size.
    fn open_object(&self, key: &ObjectKey) -> Result<(PathBuf, File, u64)> {
        let path = self.path(key)?;
        let file = File::open(&path).map_err(|e| Self::missing_or(key, &path, "open", e))?;
        let size = file
            .metadata()
            .ctx(|| format!("cannot stat {}", path.display()))?
            .len();
        Ok((path, file, size))
    }

    /// Read all of `file` (of `size` bytes when opened) into `buf`.
    fn read_whole(
        key: &ObjectKey,
        path: &Path,
        mut file: File,
        size: u64,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        use std::io::Read;
        buf.clear();
        // A hint only: the read takes whatever the file holds by then.
        buf.reserve(usize::try_from(size).unwrap_or(0));
        file.read_to_end(buf)
            .map_err(|e| Self::missing_or(key, path, "read", e))?;
        Ok(())
    }

    fn missing_or(key: &ObjectKey, path: &Path, what: &str, e: std::io::Error) -> Error {
        if e.kind() == ErrorKind::NotFound {
            Error::missing(ObjectRef::Stored(key.clone()))
        } else {
            Error::io(format!("cannot {what} {}", path.display()), e)
        }
    }

    /// Flush `paths` (files or directories) and stop at the first failure,
    /// returning the paths that were not flushed.
    fn fsync_all(paths: Vec<PathBuf>) -> std::result::Result<(), (Error, Vec<PathBuf>)> {
        let mut iter = paths.into_iter();
        while let Some(p) = iter.next() {
            let res = match File::open(&p) {
                Ok(f) => f.sync_all(),
                // Deleted since it was written (files) or removed by hand:
                // nothing is left to make durable.
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = res {
                let mut rest = vec![p.clone()];
                rest.extend(iter);
                return Err((Error::io(format!("cannot fsync {}", p.display()), e), rest));
            }
        }
        Ok(())
    }
}

impl ObjectStore for LocalStore {
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        let path = self.path(key)?;
        let (tmp, new_dirs) = self.write_temp(&path, data, false)?;
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io(
                format!("cannot rename {} to {}", tmp.display(), path.display()),
                e,
            ));
        }
        let mut pending = self.pending();
        pending.dirs.insert(Self::parent_of(&path));
        pending.dirs.extend(new_dirs);
        pending.files.insert(path);
        Ok(())
    }

    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        let path = self.path(key)?;
        fs::read(&path).map_err(|e| Self::missing_or(key, &path, "read", e))
    }

    /// Objects of `MAP_MIN` bytes or more are mapped, not copied: a
    /// restore reads each container once or more and only looks at it, and
    /// on the reference machine the copy out of the page cache was the
    /// restore's largest cost. The mapping is populated at once (the whole
    /// file is read in, here, on the loader thread that asked).
    ///
    /// Objects are immutable and replaced only by rename, and deleting a
    /// mapped file keeps its pages, so a mapping never changes under the
    /// reader. A file truncated in place by someone else while it is mapped
    /// would fault the reader (SIGBUS); nothing in Tessera does that.
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        let (path, file, size) = self.open_object(key)?;
        if size < MAP_MIN {
            let mut buf = reuse;
            Self::read_whole(key, &path, file, size, &mut buf)?;
            return Ok(buf.into());
        }
        // SAFETY: see above; the length is the file's at open, and a shorter
        // file than its header promises is caught by the container decoder.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
            .ctx(|| format!("cannot map {}", path.display()))?;
        Ok(ObjectBytes::mapped(map, file))
    }

    /// `posix_fadvise(WILLNEED)`: the kernel reads the file in the
    /// background, into the page cache (no memory of this process).
    fn prefetch(&self, key: &ObjectKey) {
        use std::os::fd::AsRawFd;
        if let Ok((_, file, _)) = self.open_object(key) {
            // SAFETY: the descriptor is open for the call; the advice
            // changes no data.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED) };
        }
    }

    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        let (path, file, size) = self.open_object(key)?;
        Self::read_whole(key, &path, file, size, buf)
    }

    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        let (path, file, size) = self.open_object(key)?;
        let truncated = || {
            Error::corrupt(
                ObjectRef::Stored(key.clone()),
                format!("truncated: wanted {len} bytes at offset {offset}, but the object has {size} bytes"),
            )
        };
        // Check before allocating: a corrupt header may promise any length.
        match offset.checked_add(len) {
            Some(end) if end <= size => {}
            _ => return Err(truncated()),
        }
        let mut buf = vec![0u8; len as usize];
        match file.read_exact_at(&mut buf, offset) {
            Ok(()) => Ok(buf),
            // Shrunk between the stat and the read.
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => Err(truncated()),
            Err(e) => Err(Error::io(format!("cannot read {}", path.display()), e)),
        }
    }

    fn size(&self, key: &ObjectKey) -> Result<u64> {
        let path = self.path(key)?;
        let meta = fs::metadata(&path).map_err(|e| Self::missing_or(key, &path, "stat", e))?;
        if meta.is_dir() {
            // A directory of objects is not an object.
            return Err(Error::missing(ObjectRef::Stored(key.clone())));
        }
        Ok(meta.len())
    }

    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        // Only the directory named by the prefix's complete components can
        // hold matching keys; walk that one.
        let prefix = kind.prefix();
        if kind.is_single() {
            // One name at the root: no walk of the whole tree.
            let lock = self.root.join(prefix);
            return Ok(if lock.is_file() {
                vec![ObjectKey::parse(prefix)]
            } else {
                Vec::new()
            });
        }
        validate_prefix(prefix)?;
        let dir_part = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        let start = if dir_part.is_empty() {
            self.root.clone()
        } else {
            self.root.join(dir_part)
        };
        let mut keys = Vec::new();
        Self::walk(&start, &mut |path, _name| {
            let Ok(rel) = path.strip_prefix(&self.root) else {
                return;
            };
            let Some(key) = rel.to_str() else {
                return;
            };
            // Skips temporaries and anything else that could not be a key.
            if key.starts_with(prefix) && validate_key(key).is_ok() {
                keys.push(key.to_string());
            }
        })?;
        keys.sort();
        Ok(keys_of(kind, keys))
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let path = self.path(key)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("cannot delete {}", path.display()), e)),
        }
        let mut pending = self.pending();
        pending.files.remove(&path);
        pending.dirs.insert(Self::parent_of(&path));
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        let _serial = self.sync_lock.lock().unwrap_or_else(|p| p.into_inner());
        let taken = std::mem::take(&mut *self.pending());
        let files: Vec<PathBuf> = taken.files.into_iter().collect();
        let dirs: Vec<PathBuf> = taken.dirs.iter().cloned().collect();
        // Files first: a directory entry must not become durable before the
        // data it names.
        if let Err((e, rest)) = Self::fsync_all(files) {
            let mut pending = self.pending();
            pending.files.extend(rest);
            pending.dirs.extend(taken.dirs);
            return Err(e);
        }
        if let Err((e, rest)) = Self::fsync_all(dirs) {
            self.pending().dirs.extend(rest);
            return Err(e);
        }
        Ok(())
    }

    /// Exclusive creation that readers never see half-written: the content is
    /// written and fsynced under a temporary name, then hard-linked to the
    /// final name, which fails if it exists. Filesystems without hard links
    /// fall back to `O_EXCL` creation and writing in place.
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        let path = self.path(key)?;
        let dir = Self::parent_of(&path);
        let (tmp, new_dirs) = self.write_temp(&path, data, true)?;
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        let created = match linked {
            Ok(()) => true,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
            Err(_) => self.create_in_place(&path, data)?,
        };
        if created {
            Self::fsync_all(new_dirs.into_iter().chain([dir]).collect()).map_err(|(e, _)| e)?;
        }
        Ok(created)
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }

    /// Interrupted puts leave hidden temporary files.
    fn clean_interrupted(&self) -> Result<usize> {
        self.remove_temporaries()
    }
}

impl LocalStore {
    /// `put_if_absent` without hard links: `O_EXCL`, write, fsync. A failed
    /// write removes the file so no truncated object remains.
    fn create_in_place(&self, path: &Path, data: &[u8]) -> Result<bool> {
        let mut file = match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(Error::io(format!("cannot create {}", path.display()), e)),
        };
        if let Err(e) = file.write_all(data).and_then(|()| file.sync_all()) {
            let _ = fs::remove_file(path);
            return Err(Error::io(format!("cannot write {}", path.display()), e));
        }
        Ok(true)
    }
}
