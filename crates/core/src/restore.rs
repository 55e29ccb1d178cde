//! Restore: walk a backup's recipe tree and copy its chunks out of their
//! containers, reading whole containers through a cache (the container is the
//! unit of I/O, so containers read is the cost that fragmentation raises).
//!
//! Every container read is verified (checksums) and counted; the report gives
//! read amplification (container bytes read / bytes restored) and speed factor
//! (MB restored per container read), the papers' restore metrics.

use crate::archive::ExtractReport;
use crate::catalog::{BackupEntry, SourceKind};
use crate::container::{format::object_name, ChunkKind, ChunkMeta, Container, ContainerId};
use crate::error::{Error, IoContext, Result};
use crate::fingerprint::Fingerprint;
use crate::metrics::{mb_per_s, read_amplification, speed_factor};
use crate::recipe::{self, RecipeChunk, RecipeWalker};
use crate::repo::Repository;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::Instant;

/// Restore parameters.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// How data containers are cached while the recipe is walked.
    pub cache: CacheSpec,
}

/// A restore cache, as named on the command line (`lru:32`, `opt:32`,
/// `faa:32`); the number is the cache size in containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "containers", rename_all = "lowercase")]
pub enum CacheSpec {
    /// Least recently used whole containers.
    Lru(usize),
    /// Belady replacement over the recipe's future references (look-ahead window).
    Opt(usize),
    /// Forward assembly area of (containers − 1) × container size.
    Faa(usize),
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec::Lru(32)
    }
}

impl CacheSpec {
    /// Parse `lru:N`, `opt:N` or `faa:N` (a bare number means `lru:N`).
    pub fn parse(spec: &str) -> std::result::Result<Self, String> {
        let (kind, n) = spec.split_once(':').unwrap_or(("lru", spec));
        let n = match n.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(format!(
                    "bad cache size in '{spec}': expected a positive number of containers"
                ))
            }
        };
        match kind.to_ascii_lowercase().as_str() {
            "lru" => Ok(CacheSpec::Lru(n)),
            "opt" => Ok(CacheSpec::Opt(n)),
            "faa" => Ok(CacheSpec::Faa(n)),
            _ => Err(format!(
                "unknown restore cache '{spec}' (expected lru:N, opt:N or faa:N)"
            )),
        }
    }

    /// Size in containers.
    pub fn containers(&self) -> usize {
        match *self {
            CacheSpec::Lru(n) | CacheSpec::Opt(n) | CacheSpec::Faa(n) => n,
        }
    }
}

impl std::fmt::Display for CacheSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheSpec::Lru(n) => write!(f, "lru:{n}"),
            CacheSpec::Opt(n) => write!(f, "opt:{n}"),
            CacheSpec::Faa(n) => write!(f, "faa:{n}"),
        }
    }
}

/// What a restore did.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    pub backup_id: u64,
    pub restored_bytes: u64,
    pub chunks: u64,
    pub data_containers_read: u64,
    pub data_container_bytes_read: u64,
    pub recipe_containers_read: u64,
    pub read_amplification: f64,
    pub speed_factor: f64,
    pub cache_containers: usize,
    pub seconds: f64,
    pub throughput_mb_s: f64,
}

/// One chunk to restore: its container (kept alive while queued) and where
/// in it the chunk is.
struct Piece {
    container: Arc<Container>,
    meta: ChunkMeta,
}

/// Least-recently-used cache of whole containers.
pub struct LruCache {
    capacity: usize,
    clock: u64,
    items: HashMap<ContainerId, (Arc<Container>, u64)>,
}

impl LruCache {
    pub fn new(capacity: usize) -> Self {
        LruCache {
            capacity: capacity.max(1),
            clock: 0,
            items: HashMap::new(),
        }
    }

    /// The container, from the cache or loaded with `load` (evicting the
    /// least recently used one when full).
    pub fn get(
        &mut self,
        id: ContainerId,
        load: impl FnOnce(ContainerId) -> Result<Container>,
    ) -> Result<Arc<Container>> {
        self.clock += 1;
        if let Some((c, stamp)) = self.items.get_mut(&id) {
            *stamp = self.clock;
            return Ok(c.clone());
        }
        let c = Arc::new(load(id)?);
        if self.items.len() >= self.capacity {
            if let Some(victim) = self
                .items
                .iter()
                .min_by_key(|(_, (_, s))| *s)
                .map(|(k, _)| *k)
            {
                self.items.remove(&victim);
            }
        }
        self.items.insert(id, (c.clone(), self.clock));
        Ok(c)
    }
}

/// Name the backup (and offset) in an error about one of its objects.
fn in_backup(e: Error, backup: u64, offset: Option<u64>) -> Error {
    let at = match offset {
        Some(o) => format!(" at offset {o}"),
        None => String::new(),
    };
    match e {
        Error::Corrupt { object, reason } => Error::Corrupt {
            object: format!("{object} (needed by backup {backup}{at})"),
            reason,
        },
        Error::MissingObject(o) => {
            Error::MissingObject(format!("{o} (needed by backup {backup}{at})"))
        }
        other => other,
    }
}

impl Repository {
    /// Load a recipe chunk by fingerprint through `cache`, verifying its
    /// fingerprint and decoding it.
    pub(crate) fn load_recipe_chunk(
        &self,
        cache: &mut LruCache,
        fp: &Fingerprint,
    ) -> Result<RecipeChunk> {
        let name = format!("recipe chunk {}", fp.to_hex());
        let id = self
            .index
            .get(ChunkKind::Recipe, fp)
            .ok_or_else(|| Error::MissingObject(name.clone()))?;
        let c = cache.get(id, |id| self.store.read(id))?;
        let bytes = c
            .chunk(fp)
            .ok_or_else(|| Error::corrupt(object_name(id), format!("does not hold {name}")))?;
        if self.manifest.config.hash.hash(bytes) != *fp {
            return Err(Error::corrupt(
                name,
                "content does not match its fingerprint",
            ));
        }
        recipe::decode(bytes, &name)
    }

    /// Restore a backup's byte stream into `out` (nothing is written in trace
    /// mode, where only the I/O is accounted).
    pub fn restore_to(
        &self,
        backup: &BackupEntry,
        out: &mut dyn Write,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<RestoreReport> {
        let started = Instant::now();
        let before = self.metrics.snapshot();
        let bid = backup.id;
        // Two stages: a reader thread walks the recipe and reads, verifies and
        // caches containers; this thread copies chunks to `out`. The cache
        // decisions (and so the metrics) are those of a sequential restore.
        let (tx, rx) = sync_channel::<Result<Vec<Piece>>>(4);
        let (offset, chunks) = std::thread::scope(|scope| {
            scope.spawn(move || {
                if let Err(e) = self.read_pieces(backup, opts, &tx) {
                    let _ = tx.send(Err(e));
                }
            });
            let mut offset = 0u64;
            let mut chunks = 0u64;
            for batch in rx {
                for p in batch? {
                    if !p.container.header.trace {
                        out.write_all(p.container.bytes(&p.meta))
                            .ctx(|| "cannot write restored data".into())?;
                    }
                    offset += p.meta.len as u64;
                    chunks += 1;
                }
                progress(offset);
            }
            Ok::<_, Error>((offset, chunks))
        })?;
        out.flush().ctx(|| "cannot write restored data".into())?;
        progress(offset);
        if offset != backup.logical_bytes {
            return Err(Error::corrupt(
                format!("backup {bid}"),
                format!(
                    "recipe restores {offset} bytes, catalog says {}",
                    backup.logical_bytes
                ),
            ));
        }
        let io = self.metrics.snapshot().since(&before);
        let secs = started.elapsed().as_secs_f64();
        Ok(RestoreReport {
            backup_id: bid,
            restored_bytes: offset,
            chunks,
            data_containers_read: io.data_containers_read,
            data_container_bytes_read: io.data_container_bytes_read,
            recipe_containers_read: io.recipe_containers_read,
            read_amplification: read_amplification(io.data_container_bytes_read, offset),
            speed_factor: speed_factor(offset, io.data_containers_read),
            cache_containers: opts.cache.containers(),
            seconds: secs,
            throughput_mb_s: mb_per_s(offset, secs),
        })
    }

    /// The reader stage of [`restore_to`](Self::restore_to): every chunk of
    /// the backup in order, with its (verified) container, in batches.
    fn read_pieces(
        &self,
        backup: &BackupEntry,
        opts: &RestoreOptions,
        tx: &SyncSender<Result<Vec<Piece>>>,
    ) -> Result<()> {
        const BATCH: usize = 1024;
        let bid = backup.id;
        let mut recipes = LruCache::new(8);
        // Only LRU is implemented so far; OPT and FAA arrive with the rewriting work.
        if !matches!(opts.cache, CacheSpec::Lru(_)) {
            return Err(Error::invalid(format!(
                "restore cache {} is not implemented yet (use lru:N)",
                opts.cache
            )));
        }
        let mut data = LruCache::new(opts.cache.containers());
        let root = backup.root_fp()?;
        let mut walker = RecipeWalker::new(root, backup.root_level, |fp, _| {
            self.load_recipe_chunk(&mut recipes, fp)
        })
        .map_err(|e| in_backup(e, bid, None))?;
        let mut offset = 0u64;
        let mut batch = Vec::with_capacity(BATCH);
        while let Some(e) = walker.next().map_err(|e| in_backup(e, bid, Some(offset)))? {
            let id = self.index.get(ChunkKind::Data, &e.fp).ok_or_else(|| {
                Error::corrupt(
                    format!("backup {bid}"),
                    format!(
                        "chunk {} at offset {offset} is not in the index",
                        e.fp.to_hex()
                    ),
                )
            })?;
            let c = data
                .get(id, |id| self.store.read(id))
                .map_err(|err| in_backup(err, bid, Some(offset)))?;
            let meta = *c.find(&e.fp).ok_or_else(|| {
                Error::corrupt(
                    format!(
                        "{} (needed by backup {bid} at offset {offset})",
                        object_name(id)
                    ),
                    format!("does not hold chunk {}", e.fp.to_hex()),
                )
            })?;
            if meta.len as u64 != e.size {
                return Err(Error::corrupt(
                    format!("backup {bid}"),
                    format!(
                        "chunk at offset {offset} has size {} in its container, {} in the recipe",
                        meta.len, e.size
                    ),
                ));
            }
            offset += e.size;
            batch.push(Piece { container: c, meta });
            if batch.len() == BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                if tx.send(Ok(full)).is_err() {
                    return Ok(()); // the writer stopped; it reports why
                }
            }
        }
        if !batch.is_empty() {
            let _ = tx.send(Ok(batch));
        }
        Ok(())
    }

    /// Restore a backup into a directory: a tree backup is extracted (unsafe
    /// entries refused and listed), a file or stream backup becomes one file
    /// named after its source.
    pub fn restore_into(
        &self,
        backup: &BackupEntry,
        target: &Path,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(RestoreReport, ExtractReport)> {
        match backup.source {
            SourceKind::Tree => self.restore_tree(backup, target, opts, progress),
            SourceKind::Trace => Err(Error::invalid(format!(
                "backup {} is a fingerprint trace: it has no bytes to restore into a directory",
                backup.id
            ))),
            SourceKind::File | SourceKind::Stream => {
                let base = Path::new(&backup.name)
                    .file_name()
                    .map(|s| s.to_os_string())
                    .unwrap_or_else(|| format!("backup-{}", backup.id).into());
                std::fs::create_dir_all(target)
                    .ctx(|| format!("cannot create {}", target.display()))?;
                let path = target.join(base);
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .ctx(|| format!("cannot create {}", path.display()))?;
                let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut f);
                let report = self.restore_to(backup, &mut w, opts, progress)?;
                drop(w);
                f.sync_all()
                    .ctx(|| format!("cannot write {}", path.display()))?;
                let ext = ExtractReport {
                    files: 1,
                    bytes: report.restored_bytes,
                    ..Default::default()
                };
                Ok((report, ext))
            }
        }
    }

    fn restore_tree(
        &self,
        backup: &BackupEntry,
        target: &Path,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(RestoreReport, ExtractReport)> {
        let (mut reader, writer) = std::io::pipe().ctx(|| "cannot create a pipe".into())?;
        let dir = target.to_path_buf();
        let extractor = std::thread::Builder::new()
            .name("tessera-extract".into())
            .spawn(move || {
                let r = crate::archive::extract(&mut reader, &dir);
                // Drain, so the restore side never blocks on a full pipe.
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
                r
            })
            .ctx(|| "cannot start the extraction thread".into())?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, writer);
        let restored = self.restore_to(backup, &mut w, opts, progress);
        drop(w);
        let extracted = extractor
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        // An extraction error explains a broken pipe better than the pipe error.
        let ext = extracted?;
        Ok((restored?, ext))
    }
}
