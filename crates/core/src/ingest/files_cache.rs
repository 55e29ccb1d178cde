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

use std::collections::HashMap;
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

/// One file as the cache knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cached {
    pub id: FileId,
    pub chunks: Vec<(Fingerprint, u32)>,
}

/// A loaded cache: what the previous backup recorded.
#[derive(Debug, Default)]
pub(crate) struct FilesCache {
    /// Unix seconds at the start of the backup that wrote it.
    pub started: u64,
    pub files: HashMap<Vec<u8>, Cached>,
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

impl FilesCache {
    /// The cache at `path`, or an empty one if it is missing or fails its
    /// checks.
    pub(crate) fn load(path: &Path) -> FilesCache {
        fs::read(path)
            .ok()
            .and_then(|b| Self::decode(&b))
            .unwrap_or_default()
    }

    /// The cached chunks of `path` if `id` shows the file unchanged since
    /// the cache was written (and not racily so).
    pub(crate) fn lookup(&self, path: &[u8], id: &FileId) -> Option<&[(Fingerprint, u32)]> {
        let c = self.files.get(path)?;
        let racy = |t: (i64, i64)| t.0 >= 0 && t.0 as u64 >= self.started;
        (c.id == *id && !racy(id.mtime) && !racy(id.ctime)).then_some(&c.chunks[..])
    }

    /// Drop the files some of whose chunks the index no longer holds (a GC
    /// removed them) or whose chunks do not add up to their size.
    pub(crate) fn retain_indexed(&mut self, index: &Index) {
        self.files.retain(|_, c| {
            c.chunks.iter().map(|&(_, n)| u64::from(n)).sum::<u64>() == c.id.size
                && c.chunks
                    .iter()
                    .all(|(fp, _)| index.contains(ChunkKind::Data, fp))
        });
    }

    fn decode(b: &[u8]) -> Option<FilesCache> {
        let body = b.get(..b.len().checked_sub(32)?)?;
        if blake3::hash(body).as_bytes() != &b[body.len()..] || !body.starts_with(MAGIC) {
            return None;
        }
        let mut r = Reader {
            b: body,
            pos: MAGIC.len(),
        };
        let started = r.u64()?;
        let mut files = HashMap::new();
        while r.pos < body.len() {
            let n = r.u32()? as usize;
            let path = r.take(n)?.to_vec();
            let id = FileId {
                dev: r.u64()?,
                ino: r.u64()?,
                size: r.u64()?,
                mtime: (r.u64()? as i64, r.u64()? as i64),
                ctime: (r.u64()? as i64, r.u64()? as i64),
            };
            let k = r.u32()? as usize;
            let mut chunks = Vec::with_capacity(k.min(body.len() / (FP_LEN + 4)));
            for _ in 0..k {
                let fp = Fingerprint::from_slice(r.take(FP_LEN)?)?;
                chunks.push((fp, r.u32()?));
            }
            files.insert(path, Cached { id, chunks });
        }
        Some(FilesCache { started, files })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
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

/// Builds the cache a backup leaves for the next one.
pub(crate) struct CacheBuilder {
    body: Vec<u8>,
}

impl CacheBuilder {
    pub(crate) fn new(started: u64) -> Self {
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&started.to_le_bytes());
        CacheBuilder { body }
    }

    pub(crate) fn push(&mut self, path: &[u8], id: &FileId, chunks: &[(Fingerprint, u32)]) {
        let b = &mut self.body;
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
    }

    /// Write the cache to `path` (atomically: a temporary file renamed).
    pub(crate) fn write(self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let sum = blake3::hash(&self.body);
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&self.body)?;
        f.write_all(sum.as_bytes())?;
        drop(f);
        fs::rename(&tmp, path)
    }
}
