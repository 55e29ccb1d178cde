//! The files cache: what the last directory backup of the same paths into
//! the same repository learnt about each regular file (its identity and its
//! chunks), so that the next backup need not read files that did not change.
//!
//! A file is taken from the cache only if its (device, inode, size, mtime,
//! ctime) are those recorded, it is not racily clean (modified in or after
//! the second the recording backup started, as git's index treats such
//! files), and the index still holds every one of its chunks. The cache is a
//! local file checked by a BLAKE3 sum: a lost, stale or corrupt cache only
//! costs reading the files again.
//!
//! It also holds each file's extended attributes, so an unchanged file
//! costs the walk one `lstat` and no `listxattr` (issue 33): setting or
//! removing an attribute changes the ctime, so a file whose identity
//! matches has the attributes recorded.
//!
//! File: `TSFILES2` | started (u64 LE) | entries | BLAKE3 of all before.
//! Entry: path-len (u32 LE) path | dev ino size mtime-s mtime-ns ctime-s
//! ctime-ns (u64/i64 LE) | attribute count (u32 LE) | (name-len u32 LE,
//! name, value-len u32 LE, value)* | chunk count (u32 LE) | (fingerprint,
//! len u32 LE)*. (`TSFILES1`, without the attributes, is not read: the
//! first backup after it reads the files again.)

use std::fs;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::archive::meta::Xattr;
use crate::archive::FileId;
use crate::fingerprint::{Fingerprint, FP_LEN};
use crate::index::Index;

const MAGIC: &[u8; 8] = b"TSFILES2";

/// Where and how a backup uses the files cache.
#[derive(Clone, Debug)]
pub struct FilesCacheOptions {
    /// The directory holding cache files (one per repository and paths).
    pub dir: PathBuf,
    /// Read every file, trusting nothing in the cache (it is still updated).
    pub force_read: bool,
}

impl FilesCacheOptions {
    /// The user's cache directory: `$TESSERA_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`; None if none is set.
    pub fn default_dir() -> Option<PathBuf> {
        crate::context::cache_dir()
    }
}

/// The previous backup's cache, read as a stream beside the walk: the
/// cache lists files in the order that backup's walk stored them (stream
/// order, sorted by path bytes), so one pass in step with the new walk
/// meets every path it asks for, holding one entry at a time.
///
/// Why not the whole file in memory (with a sorted path table beside
/// it): on a 68,000-file tree that held 19.5 MB through the whole backup,
/// the largest part of an unchanged backup's peak after the index
/// (issue 33: memory at or below restic's on every step).
#[derive(Debug, Default)]
pub(crate) struct FilesCache {
    /// Unix seconds at the start of the backup that wrote it.
    pub started: u64,
    /// The entries, from the first; `None` once exhausted or if the file
    /// is missing or fails its checks.
    entries: Option<EntryStream>,
    /// The entry at the cursor, and its number.
    cur: Option<(OwnedEntry, usize)>,
    /// The entry the cursor last moved past (what `lookup` hands out).
    spent: Option<(OwnedEntry, usize)>,
    /// Which entries may be used (see [`FilesCache::retain_indexed`]);
    /// all while `None`.
    usable: Option<Vec<bool>>,
}

/// One entry, decoded into buffers of its own.
#[derive(Debug, Default)]
struct OwnedEntry {
    path: Vec<u8>,
    id: FileId,
    xattrs: Vec<Xattr>,
    /// `count` × (fingerprint, length u32 LE).
    chunks: Vec<u8>,
}

/// The chunks of a cached file, as (fingerprint, length), in order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CachedChunks<'a>(&'a [u8]);

impl<'a> CachedChunks<'a> {
    pub(crate) fn iter(self) -> impl Iterator<Item = (Fingerprint, u32)> + 'a {
        self.0.chunks_exact(FP_LEN + 4).map(|c| {
            let fp = Fingerprint::from_slice(&c[..FP_LEN]).expect("FP_LEN bytes");
            (fp, u32::from_le_bytes(c[FP_LEN..].try_into().unwrap()))
        })
    }
}

/// The cache file of a repository and a list of backup paths.
pub(crate) fn cache_path(dir: &Path, repo_id: &str, paths: &[PathBuf]) -> PathBuf {
    let mut h = blake3::Hasher::new();
    for p in paths {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
        h.update(std::os::unix::ffi::OsStrExt::as_bytes(abs.as_os_str()));
        h.update(&[0]);
    }
    let key = h.finalize().to_hex();
    let repo: String = repo_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(32)
        .collect();
    dir.join("files")
        .join(format!("{repo}-{}", &key.as_str()[..32]))
}

/// Longest path an entry may hold: far above any usable path, small enough
/// that a damaged length cannot exhaust memory.
const MAX_PATH: usize = 64 * 1024;
/// Largest attribute name and value (Linux's limits).
const MAX_XATTR_NAME: usize = 255;
const MAX_XATTR_VALUE: usize = 64 * 1024;

/// The entries of a checked cache file, read in order.
#[derive(Debug)]
struct EntryStream {
    r: std::io::BufReader<fs::File>,
    /// Bytes of entries left (the checksum excluded).
    left: u64,
    /// Bytes of all entries.
    total: u64,
}

/// Where the first entry starts: after the magic and the start time.
const FIRST_ENTRY: u64 = 16;

impl EntryStream {
    /// Back to the first entry.
    fn rewind(&mut self) -> Option<()> {
        self.r.seek(std::io::SeekFrom::Start(FIRST_ENTRY)).ok()?;
        self.left = self.total;
        Some(())
    }

    /// The next entry into `e`; `None` at the end or on a malformed entry.
    fn next_into(&mut self, e: &mut OwnedEntry) -> Option<()> {
        if self.left == 0 {
            return None;
        }
        let n = self.u32()? as usize;
        if n > MAX_PATH {
            return None;
        }
        self.take_into(n, &mut e.path)?;
        let mut w = [0u64; 7];
        for v in &mut w {
            *v = self.u64()?;
        }
        e.id = FileId {
            dev: w[0],
            ino: w[1],
            size: w[2],
            mtime: (w[3] as i64, w[4] as i64),
            ctime: (w[5] as i64, w[6] as i64),
        };
        let attrs = self.u32()? as usize;
        e.xattrs.truncate(attrs);
        e.xattrs.resize_with(attrs, Default::default);
        for (name, value) in &mut e.xattrs {
            let n = self.u32()? as usize;
            if n > MAX_XATTR_NAME {
                return None;
            }
            self.take_into(n, name)?;
            let n = self.u32()? as usize;
            if n > MAX_XATTR_VALUE {
                return None;
            }
            self.take_into(n, value)?;
        }
        let k = self.u32()? as u64;
        let len = k.checked_mul((FP_LEN + 4) as u64)?;
        if len > self.left {
            return None;
        }
        self.take_into(len as usize, &mut e.chunks)
    }

    fn take_into(&mut self, n: usize, out: &mut Vec<u8>) -> Option<()> {
        if n as u64 > self.left {
            return None;
        }
        out.clear();
        out.resize(n, 0);
        self.r.read_exact(out).ok()?;
        self.left -= n as u64;
        Some(())
    }

    fn u64(&mut self) -> Option<u64> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Some(u64::from_le_bytes(b))
    }

    fn u32(&mut self) -> Option<u32> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Some(u32::from_le_bytes(b))
    }

    fn fill(&mut self, b: &mut [u8]) -> Option<()> {
        if b.len() as u64 > self.left {
            return None;
        }
        self.r.read_exact(b).ok()?;
        self.left -= b.len() as u64;
        Some(())
    }
}

impl FilesCache {
    /// The cache at `path`, or an empty one if it is missing or fails its
    /// checks. Its checksum is verified in a pass over the file first.
    pub(crate) fn load(path: &Path) -> FilesCache {
        Self::open(path).unwrap_or_default()
    }

    fn open(path: &Path) -> Option<FilesCache> {
        let (started, entries) = Self::verified(path)?;
        let mut c = FilesCache {
            started,
            entries: Some(entries),
            cur: None,
            spent: None,
            usable: None,
        };
        c.advance(OwnedEntry::default(), 0);
        Some(c)
    }

    /// A stream over the entries of the cache at `path` if its checksum
    /// and magic hold, with the start time it records.
    fn verified(path: &Path) -> Option<(u64, EntryStream)> {
        let mut f = fs::File::open(path).ok()?;
        let body = f.metadata().ok()?.len().checked_sub(32)?;
        if body < (MAGIC.len() + 8) as u64 {
            return None;
        }
        let mut sum = blake3::Hasher::new();
        let mut head = [0u8; 16];
        let mut buf = vec![0u8; 1 << 16];
        let mut left = body;
        let mut at = 0u64;
        while left > 0 {
            let n = (buf.len() as u64).min(left) as usize;
            f.read_exact(&mut buf[..n]).ok()?;
            if at == 0 {
                head.copy_from_slice(&buf[..16]);
            }
            sum.update(&buf[..n]);
            left -= n as u64;
            at += n as u64;
        }
        let mut want = [0u8; 32];
        f.read_exact(&mut want).ok()?;
        if sum.finalize().as_bytes() != &want || &head[..8] != MAGIC {
            return None;
        }
        let started = u64::from_le_bytes(head[8..16].try_into().ok()?);
        f.seek(std::io::SeekFrom::Start(FIRST_ENTRY)).ok()?;
        Some((
            started,
            EntryStream {
                r: std::io::BufReader::with_capacity(1 << 16, f),
                left: body - FIRST_ENTRY,
                total: body - FIRST_ENTRY,
            },
        ))
    }

    /// Put entry number `n` (reusing `e`'s buffers) at the cursor, or
    /// close the stream at its end.
    fn advance(&mut self, mut e: OwnedEntry, n: usize) {
        let read = self.entries.as_mut().and_then(|s| s.next_into(&mut e));
        if read.is_some() {
            self.cur = Some((e, n));
        } else {
            self.cur = None;
            self.entries = None;
        }
    }

    /// Move the cursor to the next entry; the one it leaves is `spent`.
    fn next(&mut self) {
        let Some((e, n)) = self.cur.take() else {
            return;
        };
        let buffers = self.spent.take().map(|(b, _)| b).unwrap_or_default();
        self.spent = Some((e, n));
        self.advance(buffers, n + 1);
    }

    /// One pass over every entry from the first, asking `keep` of each;
    /// then the cursor is back at the first entry. A malformed entry
    /// empties the cache.
    fn each_entry(&mut self, mut keep: impl FnMut(&OwnedEntry) -> bool) -> Vec<bool> {
        let mut kept = Vec::new();
        let mut e = self.spent.take().map(|(b, _)| b).unwrap_or_default();
        self.cur = None;
        let Some(s) = &mut self.entries else {
            return kept;
        };
        let mut whole = s.rewind().is_some();
        while whole && s.left > 0 {
            match s.next_into(&mut e) {
                Some(()) => kept.push(keep(&e)),
                None => whole = false,
            }
        }
        if whole && s.rewind().is_some() {
            self.advance(e, 0);
        } else {
            self.entries = None;
            kept.clear();
        }
        kept
    }

    /// The cached chunks and extended attributes of `path` if `id` shows
    /// the file unchanged since the cache was written (and not racily so).
    /// Paths are to be asked in the order the walk stores them: the cursor
    /// moves past every entry before `path`, and past `path`'s.
    pub(crate) fn lookup(
        &mut self,
        path: &[u8],
        id: &FileId,
    ) -> Option<(CachedChunks<'_>, &[Xattr])> {
        loop {
            let (e, _) = self.cur.as_ref()?;
            match e.path.as_slice().cmp(path) {
                std::cmp::Ordering::Less => self.next(),
                // Not cached (a new file): the cursor waits for later paths.
                std::cmp::Ordering::Greater => return None,
                std::cmp::Ordering::Equal => break,
            }
        }
        self.next();
        let (e, n) = self.spent.as_ref()?;
        let racy = |t: (i64, i64)| t.0 >= 0 && t.0 as u64 >= self.started;
        let usable = self
            .usable
            .as_ref()
            .is_none_or(|u| u.get(*n) == Some(&true));
        (usable && e.id == *id && !racy(id.mtime) && !racy(id.ctime))
            .then_some((CachedChunks(&e.chunks), e.xattrs.as_slice()))
    }

    /// Leave out the files some of whose chunks the index no longer holds
    /// (a GC removed them) or whose chunks do not add up to their size: a
    /// pass over the cache before the walk (one flag per file is kept).
    /// The chunks are looked up in cache order, which mostly follows the
    /// index's insertion log ([`Index::contains_data_near`]).
    pub(crate) fn retain_indexed(&mut self, index: &Index) {
        let mut log = 0;
        let usable = self.each_entry(|e| {
            let chunks = CachedChunks(&e.chunks);
            chunks.iter().map(|(_, n)| u64::from(n)).sum::<u64>() == e.id.size
                && chunks
                    .iter()
                    .all(|(fp, _)| index.contains_data_near(&mut log, &fp))
        });
        self.usable = Some(usable);
    }

    /// Files the cache holds.
    #[cfg(test)]
    fn len(&mut self) -> usize {
        let usable = self.usable.take();
        let n = self
            .each_entry(|_| true)
            .iter()
            .enumerate()
            .filter(|&(i, _)| usable.as_ref().is_none_or(|u| u[i]))
            .count();
        self.usable = usable;
        n
    }
}
/// Remove the temporary files that backups of `path` killed while writing
/// it left beside it (`<name>.tmp<PID>` of a process that is gone): a
/// crash needs no manual step. A live process's file is its own.
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem()) else {
        return;
    };
    let prefix = format!("{}.tmp", stem.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 0 && !process_alive(pid) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Whether process `pid` exists (signal 0 checks without sending).
fn process_alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 sends nothing; it only checks.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Writes the cache a backup leaves for the next one, straight to a
/// temporary file beside its place (so it takes no memory), renamed into
/// place by [`CacheBuilder::finish`]; dropped unfinished, it removes the
/// temporary file.
pub(crate) struct CacheBuilder {
    file: Option<std::io::BufWriter<fs::File>>,
    sum: blake3::Hasher,
    tmp: PathBuf,
    path: PathBuf,
    /// The entry being encoded (reused).
    entry: Vec<u8>,
    /// The first write error: the rest is skipped, and `finish` reports it.
    failed: Option<std::io::Error>,
}

impl CacheBuilder {
    pub(crate) fn create(path: &Path, started: u64) -> std::io::Result<Self> {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)?;
        remove_stale_temporaries(path);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let file = fs::File::create(&tmp)?;
        let mut w = CacheBuilder {
            file: Some(std::io::BufWriter::with_capacity(1 << 16, file)),
            sum: blake3::Hasher::new(),
            tmp,
            path: path.to_path_buf(),
            entry: Vec::new(),
            failed: None,
        };
        w.entry.extend_from_slice(MAGIC);
        w.entry.extend_from_slice(&started.to_le_bytes());
        w.emit();
        Ok(w)
    }

    pub(crate) fn push(
        &mut self,
        path: &[u8],
        id: &FileId,
        xattrs: &[Xattr],
        chunks: impl ExactSizeIterator<Item = (Fingerprint, u32)>,
    ) {
        let b = &mut self.entry;
        b.extend_from_slice(&(path.len() as u32).to_le_bytes());
        b.extend_from_slice(path);
        for v in [
            id.dev,
            id.ino,
            id.size,
            id.mtime.0 as u64,
            id.mtime.1 as u64,
            id.ctime.0 as u64,
            id.ctime.1 as u64,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(xattrs.len() as u32).to_le_bytes());
        for (name, value) in xattrs {
            b.extend_from_slice(&(name.len() as u32).to_le_bytes());
            b.extend_from_slice(name);
            b.extend_from_slice(&(value.len() as u32).to_le_bytes());
            b.extend_from_slice(value);
        }
        b.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
        for (fp, n) in chunks {
            b.extend_from_slice(&fp.0);
            b.extend_from_slice(&n.to_le_bytes());
        }
        self.emit();
    }

    /// Hash and write the encoded entry.
    fn emit(&mut self) {
        if self.failed.is_none() {
            self.sum.update(&self.entry);
            if let Err(e) = self.file.as_mut().expect("open").write_all(&self.entry) {
                self.failed = Some(e);
            }
        }
        self.entry.clear();
    }

    /// Write the checksum and rename the file into place (atomically).
    pub(crate) fn finish(mut self) -> std::io::Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut f = self.file.take().expect("open");
        f.write_all(self.sum.finalize().as_bytes())?;
        f.into_inner().map_err(|e| e.into_error())?;
        fs::rename(&self.tmp, &self.path)
    }
}

/// The next files cache, learnt while the backup runs: the ingest's worker
/// hands it every data chunk in stream order, its marks (`Ingest::mark`)
/// and each file whose
/// chunks since a mark are to be recorded, and each file goes straight to
/// the [`CacheBuilder`]. Only the chunks since the last mark are held (one
/// file's): holding the whole backup's chunks and the list of its files
/// until it ended took 20 MB on a 68,000-file tree (issue 33).
pub(crate) struct CacheLearner {
    out: CacheBuilder,
    /// Data chunks since the last mark.
    chunks: Vec<(Fingerprint, u32)>,
    /// Marks seen so far.
    marks: u64,
}

impl CacheLearner {
    pub(crate) fn new(out: CacheBuilder) -> Self {
        CacheLearner {
            out,
            chunks: Vec::new(),
            marks: 0,
        }
    }

    /// The next data chunk of the stream.
    pub(crate) fn chunk(&mut self, fp: Fingerprint, len: u32) {
        self.chunks.push((fp, len));
    }

    /// The next mark: chunks from here on belong to what follows it.
    pub(crate) fn mark(&mut self) {
        self.marks += 1;
        self.chunks.clear();
    }

    /// Record `path` as the chunks since mark `from` (numbered from 0), if
    /// no other mark came since (otherwise the file is left out: it is
    /// only read again next time).
    pub(crate) fn file(&mut self, path: &[u8], id: &FileId, xattrs: &[Xattr], from: u64) {
        if self.marks == from + 1 {
            self.out.push(path, id, xattrs, self.chunks.iter().copied());
        }
    }

    /// The cache written so far, to [`CacheBuilder::finish`] once the
    /// backup is committed.
    pub(crate) fn into_builder(self) -> CacheBuilder {
        self.out
    }
}

impl Drop for CacheBuilder {
    fn drop(&mut self) {
        // Unfinished (an error, or `finish` failed before its rename).
        if self.file.take().is_some() || self.tmp.exists() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::HashAlgo;

    fn id(n: u64) -> FileId {
        FileId {
            dev: 1,
            ino: n,
            size: 3 * 1000 + n,
            mtime: (100 + n as i64, 7),
            ctime: (50, 9),
        }
    }

    fn chunks(n: u64) -> Vec<(Fingerprint, u32)> {
        (0..3)
            .map(|i| {
                let fp =
                    HashAlgo::Blake3.hash(&[n.to_le_bytes(), (i as u64).to_le_bytes()].concat());
                (fp, 1000 + if i == 2 { n as u32 } else { 0 })
            })
            .collect()
    }

    /// File `n`'s extended attributes: none for most, one or two for some.
    fn xattrs(n: u64) -> Vec<Xattr> {
        match n % 5 {
            0 => vec![(b"user.a".to_vec(), n.to_le_bytes().to_vec())],
            1 => vec![
                (b"security.selinux".to_vec(), b"x".to_vec()),
                (b"user.empty".to_vec(), Vec::new()),
            ],
            _ => Vec::new(),
        }
    }

    fn write(path: &Path, started: u64, files: u64) {
        let mut w = CacheBuilder::create(path, started).unwrap();
        for n in 0..files {
            w.push(
                name(n).as_bytes(),
                &id(n),
                &xattrs(n),
                chunks(n).into_iter(),
            );
        }
        w.finish().unwrap();
    }

    /// File `n`'s path: in stream order for `n` in order.
    fn name(n: u64) -> String {
        format!("dir/file-{n:04}")
    }

    #[test]
    fn a_written_cache_reads_back_every_file_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("files").join("c");
        write(&path, 10_000, 500);
        let mut c = FilesCache::load(&path);
        assert_eq!(c.len(), 500);
        assert_eq!(c.started, 10_000);
        for n in 0..500 {
            let (got, attrs) = c.lookup(name(n).as_bytes(), &id(n)).expect("cached");
            assert_eq!(attrs, xattrs(n), "file {n}");
            assert_eq!(got.iter().collect::<Vec<_>>(), chunks(n), "file {n}");
        }
        assert!(c.lookup(name(500).as_bytes(), &id(500)).is_none());
        // Another identity (a changed file) is not taken.
        let mut c = FilesCache::load(&path);
        for n in 0..500 {
            let mut other = id(n);
            other.mtime.1 += 1;
            assert!(c.lookup(name(n).as_bytes(), &other).is_none());
        }
        // Only the finished file is left in the directory.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    /// Files gone since the cache was written and files new since are
    /// stepped over: every file still there is found.
    #[test]
    fn deleted_and_new_files_do_not_hide_cached_ones() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        write(&path, 10_000, 100);
        let mut c = FilesCache::load(&path);
        for n in 0..100 {
            // Every third file was deleted: not asked for.
            if n % 3 == 1 {
                continue;
            }
            // A new file sorting between the last one and this one.
            if n > 0 {
                let new = format!("{}x", name(n - 1));
                assert!(c.lookup(new.as_bytes(), &id(n)).is_none());
            }
            assert!(c.lookup(name(n).as_bytes(), &id(n)).is_some(), "file {n}");
        }
        assert!(c.lookup(b"dir/file-9999", &id(9)).is_none());
        assert!(c.lookup(b"zzz", &id(9)).is_none());
    }

    #[test]
    fn a_racily_clean_file_is_read_again() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        // Written by a backup that started at second 103: file 3's mtime.
        write(&path, 103, 5);
        let mut c = FilesCache::load(&path);
        assert!(c.lookup(name(2).as_bytes(), &id(2)).is_some());
        assert!(c.lookup(name(3).as_bytes(), &id(3)).is_none());
    }

    #[test]
    fn a_damaged_or_foreign_cache_is_empty() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        write(&path, 1, 50);
        let good = fs::read(&path).unwrap();
        for at in [0, 9, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            fs::write(&path, &bad).unwrap();
            assert_eq!(FilesCache::load(&path).len(), 0, "flipped byte {at}");
        }
        fs::write(&path, &good[..good.len() - 5]).unwrap();
        assert_eq!(FilesCache::load(&path).len(), 0);
        fs::remove_file(&path).unwrap();
        assert_eq!(FilesCache::load(&path).len(), 0);
    }

    /// A cache of the format before attributes were recorded (checksum
    /// intact) is not used: its files would come back without theirs.
    #[test]
    fn a_cache_without_attributes_is_not_used() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        let mut b = b"TSFILES1".to_vec();
        b.extend_from_slice(&10_000u64.to_le_bytes());
        b.extend_from_slice(&(name(0).len() as u32).to_le_bytes());
        b.extend_from_slice(name(0).as_bytes());
        let i = id(0);
        for v in [i.dev, i.ino, i.size, 100, 7, 50, 9] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        let sum = *blake3::hash(&b).as_bytes();
        b.extend_from_slice(&sum);
        fs::write(&path, &b).unwrap();
        let mut c = FilesCache::load(&path);
        assert_eq!(c.len(), 0);
        assert!(c.lookup(name(0).as_bytes(), &id(0)).is_none());
        // The same entry in this format, with no attributes, is used.
        b.truncate(b.len() - 32 - 4);
        b[..8].copy_from_slice(MAGIC);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        let sum = *blake3::hash(&b).as_bytes();
        b.extend_from_slice(&sum);
        fs::write(&path, &b).unwrap();
        let mut c = FilesCache::load(&path);
        assert_eq!(c.len(), 1);
        let (_, attrs) = c.lookup(name(0).as_bytes(), &id(0)).expect("cached");
        assert!(attrs.is_empty());
    }

    #[test]
    fn an_unfinished_cache_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        write(&path, 1, 3);
        let before = fs::read(&path).unwrap();
        let mut w = CacheBuilder::create(&path, 2).unwrap();
        w.push(b"x", &id(9), &[], chunks(9).into_iter());
        drop(w);
        assert_eq!(fs::read(&path).unwrap(), before, "the old cache stays");
        assert_eq!(
            fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temporary file"
        );
    }

    /// A backup killed while writing the next cache leaves its temporary
    /// file; the next backup of the same paths removes it, but not the
    /// one of a live process (or another cache's).
    #[test]
    fn a_killed_backups_temporary_file_is_removed_by_the_next() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c.cache");
        // A process that has exited: its pid is free (until reused).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = d.path().join(format!("c.tmp{dead}"));
        let live = d.path().join("c.tmp1"); // init: always alive
        let other = d.path().join(format!("other.tmp{dead}"));
        for f in [&stale, &live, &other] {
            fs::write(f, b"partial").unwrap();
        }
        let w = CacheBuilder::create(&path, 1).unwrap();
        w.finish().unwrap();
        assert!(!stale.exists(), "the dead backup's file is removed");
        assert!(live.exists() && other.exists());
        assert!(path.exists());
    }

    /// The sequential check before a backup keeps exactly the files whose
    /// chunks a probe of each finds: with the index's log in cache order,
    /// out of order, with chunks removed (a GC), repeated across files,
    /// and never indexed.
    #[test]
    fn retained_files_are_those_whose_chunks_the_index_holds() {
        use crate::container::{ChunkKind, ContainerId};
        use crate::index::IndexEntry;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        let files = 300;
        write(&path, 10_000, files);
        let mut index = Index::default();
        let add = |index: &mut Index, fp: Fingerprint| {
            index
                .insert(IndexEntry {
                    fp,
                    container: ContainerId(1),
                    kind: ChunkKind::Data,
                    copy: 0,
                })
                .unwrap();
        };
        // Most files in cache order; every 5th one's chunks reversed and
        // indexed later; every 11th never indexed.
        let mut later = Vec::new();
        for n in 0..files {
            let mut c: Vec<Fingerprint> = chunks(n).into_iter().map(|(fp, _)| fp).collect();
            match n {
                n if n % 11 == 4 => continue,
                n if n % 5 == 2 => {
                    c.reverse();
                    later.extend(c);
                }
                _ => c.into_iter().for_each(|fp| add(&mut index, fp)),
            }
        }
        later.into_iter().for_each(|fp| add(&mut index, fp));
        // A GC took one chunk of every 7th file.
        for n in (3..files).step_by(7).filter(|n| n % 11 != 4) {
            index.remove(ChunkKind::Data, &chunks(n)[1].0).unwrap();
        }
        let mut c = FilesCache::load(&path);
        c.retain_indexed(&index);
        let mut kept = 0;
        for n in 0..files {
            let held = chunks(n)
                .iter()
                .all(|(fp, _)| index.contains(ChunkKind::Data, fp));
            assert_eq!(
                c.lookup(name(n).as_bytes(), &id(n)).is_some(),
                held,
                "file {n}"
            );
            kept += held as u64;
        }
        assert!(kept > files / 2 && kept < files, "{kept} of {files} kept");
    }

    /// The learner records each file as the chunks after the mark placed
    /// before it, and leaves out a file whose mark is not the last one.
    #[test]
    fn a_learnt_file_is_the_chunks_since_its_mark() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        let mut l = CacheLearner::new(CacheBuilder::create(&path, 10_000).unwrap());
        // Chunks before the first mark (another file's) are not file 0's.
        l.chunk(chunks(9)[0].0, 5);
        l.mark(); // mark 0
        for c in chunks(0) {
            l.chunk(c.0, c.1);
        }
        l.file(b"a", &id(0), &xattrs(0), 0);
        l.mark(); // mark 1
        for c in chunks(1) {
            l.chunk(c.0, c.1);
        }
        l.mark(); // mark 2: file 1 claims mark 1, so it is left out
        l.file(b"b", &id(1), &xattrs(1), 1);
        l.mark(); // mark 3: an empty file
        l.file(b"e", &id(2), &[], 3);
        l.into_builder().finish().unwrap();
        let mut c = FilesCache::load(&path);
        assert_eq!(c.len(), 2);
        assert_eq!(c.started, 10_000);
        let (got, attrs) = c.lookup(b"a", &id(0)).unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), chunks(0));
        assert_eq!(attrs, xattrs(0));
        assert!(c.lookup(b"b", &id(1)).is_none());
        assert_eq!(c.lookup(b"e", &id(2)).unwrap().0.iter().count(), 0);
    }
}
