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
use crate::recipe::{self, RecipeChunk, RecipeEntry, RecipeWalker};
use crate::repo::Repository;
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Instant;

pub mod cache;

pub use cache::LruCache;
use cache::{faa, OptCache, OPT_WINDOW};

/// Recipe entries looked ahead to hint upcoming containers to the backend
/// (about 16 MiB of 8 KiB chunks): enough for the disk to work while the
/// current containers are copied out, not so far that the page cache drops
/// hinted containers before they are used.
const PREFETCH_WINDOW: usize = 2048;

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
    /// The cache policy used.
    pub cache: CacheSpec,
    pub seconds: f64,
    pub throughput_mb_s: f64,
}

/// One chunk to restore: its container (kept alive while queued) and where
/// in it the chunk is.
struct Piece {
    container: Arc<Container>,
    meta: ChunkMeta,
}

/// What the reader stage hands the writer.
enum Batch {
    /// Chunks in order, still inside their containers (LRU, OPT).
    Pieces(Vec<Piece>),
    /// An assembled window of the output (FAA): bytes (empty in trace
    /// mode), logical length and chunk count.
    Assembled(Vec<u8>, u64, u64),
}

/// Where `e` is in container `c`, checked against the recipe.
fn chunk_meta(c: &Container, e: &RecipeEntry, bid: u64, offset: u64) -> Result<ChunkMeta> {
    let meta = *c.find(&e.fp).ok_or_else(|| {
        Error::corrupt(
            format!(
                "{} (needed by backup {bid} at offset {offset})",
                object_name(c.id())
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
    Ok(meta)
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
        // FAA hands over whole areas: a rendezvous keeps memory at two areas
        // (one assembling, one being written); spent areas come back.
        let depth = if matches!(opts.cache, CacheSpec::Faa(_)) {
            0
        } else {
            4
        };
        let (tx, rx) = sync_channel::<Result<Batch>>(depth);
        let (spent_tx, spent) = sync_channel::<Vec<u8>>(1);
        let (offset, chunks) = std::thread::scope(|scope| {
            scope.spawn(move || {
                if let Err(e) = self.read_pieces(backup, opts, &tx, &spent) {
                    let _ = tx.send(Err(e));
                }
            });
            let mut offset = 0u64;
            let mut chunks = 0u64;
            for batch in rx {
                match batch? {
                    Batch::Pieces(pieces) => {
                        for p in pieces {
                            if !p.container.header.trace {
                                out.write_all(p.container.bytes(&p.meta))
                                    .ctx(|| "cannot write restored data".into())?;
                            }
                            offset += p.meta.len as u64;
                            chunks += 1;
                        }
                    }
                    Batch::Assembled(bytes, len, n) => {
                        out.write_all(&bytes)
                            .ctx(|| "cannot write restored data".into())?;
                        offset += len;
                        chunks += n;
                        let _ = spent_tx.try_send(bytes);
                    }
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
            cache: opts.cache,
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
        tx: &SyncSender<Result<Batch>>,
        spent: &Receiver<Vec<u8>>,
    ) -> Result<()> {
        const BATCH: usize = 1024;
        let bid = backup.id;
        let mut recipes = LruCache::new(8);
        let root = backup.root_fp()?;
        let mut walker = RecipeWalker::new(root, backup.root_level, |fp, _| {
            self.load_recipe_chunk(&mut recipes, fp)
        })
        .map_err(|e| in_backup(e, bid, None))?;
        // The next recipe entry with the container the index sends it to.
        let mut offset = 0u64;
        let mut next = |offset: u64| -> Result<Option<(RecipeEntry, ContainerId)>> {
            let Some(e) = walker.next().map_err(|e| in_backup(e, bid, Some(offset)))? else {
                return Ok(None);
            };
            let id = self.index.get(ChunkKind::Data, &e.fp).ok_or_else(|| {
                Error::corrupt(
                    format!("backup {bid}"),
                    format!(
                        "chunk {} at offset {offset} is not in the index",
                        e.fp.to_hex()
                    ),
                )
            })?;
            Ok(Some((e, id)))
        };
        let load = |id: ContainerId, offset: u64| {
            self.store
                .read(id)
                .map_err(|err| in_backup(err, bid, Some(offset)))
        };
        let mut batch = Vec::with_capacity(BATCH);
        let emit = |p: Piece, batch: &mut Vec<Piece>| -> bool {
            batch.push(p);
            if batch.len() == BATCH {
                let full = std::mem::replace(batch, Vec::with_capacity(BATCH));
                // A closed channel: the writer stopped and reports why.
                return tx.send(Ok(Batch::Pieces(full))).is_ok();
            }
            true
        };
        match opts.cache {
            CacheSpec::Lru(n) => {
                let mut data = LruCache::new(n);
                let mut window = std::collections::VecDeque::new();
                let mut hinted = std::collections::HashSet::new();
                let mut ahead = 0u64;
                let mut done = false;
                loop {
                    while !done && window.len() < PREFETCH_WINDOW {
                        match next(ahead)? {
                            Some((e, id)) => {
                                ahead += e.size;
                                if !data.contains(id) && hinted.insert(id) {
                                    self.store.prefetch(id);
                                }
                                window.push_back((e, id));
                            }
                            None => done = true,
                        }
                    }
                    let Some((e, id)) = window.pop_front() else {
                        break;
                    };
                    // Hint the container entering the prefetch distance.
                    if let Some(&(_, soon)) = window.get(PREFETCH_WINDOW) {
                        if !data.contains(soon) && hinted.insert(soon) {
                            self.store.prefetch(soon);
                        }
                    }
                    let c = data.get(id, |id| {
                        hinted.remove(&id);
                        load(id, offset)
                    })?;
                    let meta = chunk_meta(&c, &e, bid, offset)?;
                    offset += e.size;
                    if !emit(Piece { container: c, meta }, &mut batch) {
                        return Ok(());
                    }
                }
            }
            CacheSpec::Opt(n) => {
                let mut data = OptCache::new(n);
                let mut window = std::collections::VecDeque::new();
                let mut hinted = std::collections::HashSet::new();
                let mut ahead = 0u64;
                let mut done = false;
                loop {
                    while !done && window.len() < OPT_WINDOW {
                        match next(ahead)? {
                            Some((e, id)) => {
                                ahead += e.size;
                                data.announce(id);
                                if window.len() < PREFETCH_WINDOW
                                    && !data.contains(id)
                                    && hinted.insert(id)
                                {
                                    self.store.prefetch(id);
                                }
                                window.push_back((e, id));
                            }
                            None => done = true,
                        }
                    }
                    let Some((e, id)) = window.pop_front() else {
                        break;
                    };
                    let c = data.get(id, |id| {
                        hinted.remove(&id);
                        load(id, offset)
                    })?;
                    let meta = chunk_meta(&c, &e, bid, offset)?;
                    offset += e.size;
                    if !emit(Piece { container: c, meta }, &mut batch) {
                        return Ok(());
                    }
                }
            }
            CacheSpec::Faa(n) => {
                let area = faa::area_bytes(n, self.manifest.config.container_size as u64);
                let trace = self.manifest.config.trace;
                let mut pending = next(offset)?;
                while pending.is_some() {
                    // One window: its entries and, per container in order of
                    // first use, the entries it supplies.
                    let start = offset;
                    let mut entries: Vec<(RecipeEntry, u64)> = Vec::new();
                    let mut by_container: Vec<(ContainerId, Vec<usize>)> = Vec::new();
                    let mut slot: std::collections::HashMap<ContainerId, usize> =
                        std::collections::HashMap::new();
                    let mut filled = 0u64;
                    while let Some((e, id)) = pending.take() {
                        if !faa::fits(filled, e.size, area) {
                            pending = Some((e, id));
                            break;
                        }
                        let k = *slot.entry(id).or_insert_with(|| {
                            by_container.push((id, Vec::new()));
                            by_container.len() - 1
                        });
                        by_container[k].1.push(entries.len());
                        entries.push((e, filled));
                        filled += e.size;
                        pending = next(start + filled)?;
                    }
                    let mut area_buf = if trace {
                        Vec::new()
                    } else {
                        // Every byte of the window is overwritten below.
                        let mut b = spent.try_recv().unwrap_or_default();
                        b.resize(filled as usize, 0);
                        b
                    };
                    for (id, _) in &by_container {
                        self.store.prefetch(*id);
                    }
                    for (id, idx) in &by_container {
                        let c = load(*id, start + entries[idx[0]].1)?;
                        for &i in idx {
                            let (e, at) = &entries[i];
                            let meta = chunk_meta(&c, e, bid, start + at)?;
                            if !trace {
                                let at = *at as usize;
                                area_buf[at..at + e.size as usize].copy_from_slice(c.bytes(&meta));
                            }
                        }
                    }
                    offset += filled;
                    let n = entries.len() as u64;
                    if tx.send(Ok(Batch::Assembled(area_buf, filled, n))).is_err() {
                        return Ok(());
                    }
                }
            }
        }
        if !batch.is_empty() {
            let _ = tx.send(Ok(Batch::Pieces(batch)));
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
        let (restored, extracted) = into_directory(
            backup,
            target,
            |out| self.restore_to(backup, out, opts, progress),
            |r| r.restored_bytes,
        )?;
        match restored {
            // Damage explains the truncated stream the extractor saw; name
            // the files it touches.
            Err(e @ (Error::Corrupt { .. } | Error::MissingObject(_))) => {
                Err(self.explain_damage(backup, e))
            }
            // Otherwise an extraction error explains a broken pipe better
            // than the pipe error.
            restored => {
                let ext = extracted?;
                Ok((restored?, ext))
            }
        }
    }
}

/// Restore into a directory: `produce` writes the backup's byte stream.
/// A directory backup's tar stream is extracted on a second thread (unsafe
/// entries refused and listed); a file or stream backup becomes one file
/// named after its source; a trace has no bytes. Returns what `produce` and
/// the extraction each returned, for the caller to tell which error explains
/// the other.
pub(crate) fn into_directory<R>(
    backup: &BackupEntry,
    target: &Path,
    produce: impl FnOnce(&mut dyn Write) -> Result<R>,
    restored_bytes: impl Fn(&R) -> u64,
) -> Result<(Result<R>, Result<ExtractReport>)> {
    match backup.source {
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
            let report = produce(&mut w)?;
            w.flush()
                .ctx(|| format!("cannot write {}", path.display()))?;
            drop(w);
            f.sync_all()
                .ctx(|| format!("cannot write {}", path.display()))?;
            let ext = ExtractReport {
                files: 1,
                bytes: restored_bytes(&report),
                ..Default::default()
            };
            Ok((Ok(report), Ok(ext)))
        }
        SourceKind::Tree => {
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
            let restored = produce(&mut w);
            drop(w);
            let extracted = extractor
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            Ok((restored, extracted))
        }
    }
}
