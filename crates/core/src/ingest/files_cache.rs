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
//! File: `TSFILES1` | started (u64 LE) | entries | BLAKE3 of all before.
//! Entry: path-len (u32 LE) path | dev ino size mtime-s mtime-ns ctime-s
//! ctime-ns (u64/i64 LE) | chunk count (u32 LE) | (fingerprint, len u32 LE)*.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::archive::FileId;
use crate::container::ChunkKind;
use crate::fingerprint::{Fingerprint, FP_LEN};
use crate::index::Index;

const MAGIC: &[u8; 8] = b"TSFILES1";

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

/// A loaded cache: what the previous backup recorded, kept as the file's
/// bytes with a sorted table of (path hash, entry offset) beside them.
///
/// Why not a map of decoded entries: on a 68,000-file tree that took 27 MB
/// in 200,000 allocations where the file is 16 MB, and an unchanged
/// backup's peak memory is mostly its files cache (issue 33: at or below
/// restic's on every step).
#[derive(Debug, Default)]
pub(crate) struct FilesCache {
    /// Unix seconds at the start of the backup that wrote it.
    pub started: u64,
    /// The cache file without its checksum.
    body: Vec<u8>,
    /// (xxh3 of the path, offset of its entry in `body`), sorted; an entry
    /// dropped by [`FilesCache::retain_indexed`] is gone from here.
    by_path: Vec<(u64, usize)>,
}

/// One entry of a loaded cache, read in place.
struct Entry<'a> {
    path: &'a [u8],
    id: FileId,
    /// `count` × (fingerprint, length u32 LE).
    chunks: &'a [u8],
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

fn path_key(path: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(path)
}

impl FilesCache {
    /// The cache at `path`, or an empty one if it is missing or fails its
    /// checks.
    pub(crate) fn load(path: &Path) -> FilesCache {
        fs::read(path)
            .ok()
            .and_then(Self::decode)
            .unwrap_or_default()
    }

    /// The cached chunks of `path` if `id` shows the file unchanged since
    /// the cache was written (and not racily so).
    pub(crate) fn lookup(&self, path: &[u8], id: &FileId) -> Option<CachedChunks<'_>> {
        let e = self.find(path)?;
        let racy = |t: (i64, i64)| t.0 >= 0 && t.0 as u64 >= self.started;
        (e.id == *id && !racy(id.mtime) && !racy(id.ctime)).then_some(CachedChunks(e.chunks))
    }

    fn find(&self, path: &[u8]) -> Option<Entry<'_>> {
        let key = path_key(path);
        let first = self.by_path.partition_point(|&(k, _)| k < key);
        self.by_path[first..]
            .iter()
            .take_while(|&&(k, _)| k == key)
            .filter_map(|&(_, at)| self.entry(at))
            .find(|e| e.path == path)
    }

    /// The entry at `at` (checked when the cache was decoded).
    fn entry(&self, at: usize) -> Option<Entry<'_>> {
        let mut r = Reader {
            b: &self.body,
            pos: at,
        };
        Self::read_entry(&mut r)
    }

    fn read_entry<'b>(r: &mut Reader<'b>) -> Option<Entry<'b>> {
        let n = r.u32()? as usize;
        let path = r.take(n)?;
        let id = FileId {
            dev: r.u64()?,
            ino: r.u64()?,
            size: r.u64()?,
            mtime: (r.u64()? as i64, r.u64()? as i64),
            ctime: (r.u64()? as i64, r.u64()? as i64),
        };
        let k = r.u32()? as usize;
        let chunks = r.take(k.checked_mul(FP_LEN + 4)?)?;
        Some(Entry { path, id, chunks })
    }

    /// Drop the files some of whose chunks the index no longer holds (a GC
    /// removed them) or whose chunks do not add up to their size.
    pub(crate) fn retain_indexed(&mut self, index: &Index) {
        let body = &self.body;
        self.by_path.retain(|&(_, at)| {
            let mut r = Reader { b: body, pos: at };
            let Some(e) = Self::read_entry(&mut r) else {
                return false;
            };
            let chunks = CachedChunks(e.chunks);
            chunks.iter().map(|(_, n)| u64::from(n)).sum::<u64>() == e.id.size
                && chunks
                    .iter()
                    .all(|(fp, _)| index.contains(ChunkKind::Data, &fp))
        });
    }

    /// Files the cache holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_path.len()
    }

    fn decode(mut b: Vec<u8>) -> Option<FilesCache> {
        let body_len = b.len().checked_sub(32)?;
        if blake3::hash(&b[..body_len]).as_bytes() != &b[body_len..] || !b.starts_with(MAGIC) {
            return None;
        }
        b.truncate(body_len);
        b.shrink_to_fit();
        let mut r = Reader {
            b: &b,
            pos: MAGIC.len(),
        };
        let started = r.u64()?;
        let mut by_path = Vec::new();
        while r.pos < b.len() {
            let at = r.pos;
            let e = Self::read_entry(&mut r)?;
            by_path.push((path_key(e.path), at));
        }
        // A path recorded twice (never written so): the later entry wins,
        // as a map's insert did.
        by_path.sort_by_key(|&(k, at)| (k, std::cmp::Reverse(at)));
        Some(FilesCache {
            started,
            body: b,
            by_path,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
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
    pub(crate) fn file(&mut self, path: &[u8], id: &FileId, from: u64) {
        if self.marks == from + 1 {
            self.out.push(path, id, self.chunks.iter().copied());
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

    fn write(path: &Path, started: u64, files: u64) {
        let mut w = CacheBuilder::create(path, started).unwrap();
        for n in 0..files {
            let p = format!("dir/file-{n}");
            w.push(p.as_bytes(), &id(n), chunks(n).into_iter());
        }
        w.finish().unwrap();
    }

    #[test]
    fn a_written_cache_reads_back_every_file_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("files").join("c");
        write(&path, 10_000, 500);
        let c = FilesCache::load(&path);
        assert_eq!(c.len(), 500);
        assert_eq!(c.started, 10_000);
        for n in 0..500 {
            let p = format!("dir/file-{n}");
            let got: Vec<_> = c
                .lookup(p.as_bytes(), &id(n))
                .expect("cached")
                .iter()
                .collect();
            assert_eq!(got, chunks(n), "file {n}");
            // Another identity (changed file) is not taken.
            let mut other = id(n);
            other.mtime.1 += 1;
            assert!(c.lookup(p.as_bytes(), &other).is_none());
        }
        assert!(c.lookup(b"dir/file-500", &id(500)).is_none());
        assert!(c.lookup(b"dir/file-1x", &id(1)).is_none());
        // Only the finished file is left in the directory.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_racily_clean_file_is_read_again() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        // Written by a backup that started at second 103: file 3's mtime.
        write(&path, 103, 5);
        let c = FilesCache::load(&path);
        assert!(c.lookup(b"dir/file-2", &id(2)).is_some());
        assert!(c.lookup(b"dir/file-3", &id(3)).is_none());
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

    #[test]
    fn an_unfinished_cache_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c");
        write(&path, 1, 3);
        let before = fs::read(&path).unwrap();
        let mut w = CacheBuilder::create(&path, 2).unwrap();
        w.push(b"x", &id(9), chunks(9).into_iter());
        drop(w);
        assert_eq!(fs::read(&path).unwrap(), before, "the old cache stays");
        assert_eq!(
            fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temporary file"
        );
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
        l.file(b"a", &id(0), 0);
        l.mark(); // mark 1
        for c in chunks(1) {
            l.chunk(c.0, c.1);
        }
        l.mark(); // mark 2: file 1 claims mark 1, so it is left out
        l.file(b"b", &id(1), 1);
        l.mark(); // mark 3: an empty file
        l.file(b"e", &id(2), 3);
        l.into_builder().finish().unwrap();
        let c = FilesCache::load(&path);
        assert_eq!(c.len(), 2);
        assert_eq!(c.started, 10_000);
        let got: Vec<_> = c.lookup(b"a", &id(0)).unwrap().iter().collect();
        assert_eq!(got, chunks(0));
        assert!(c.lookup(b"b", &id(1)).is_none());
        assert_eq!(c.lookup(b"e", &id(2)).unwrap().iter().count(), 0);
    }
}
