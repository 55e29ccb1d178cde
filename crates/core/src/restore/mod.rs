//! Restore: walk a backup's recipe tree and copy its chunks out of their
//! containers, reading whole containers through a cache (the container is the
//! unit of I/O, so containers read is the cost that fragmentation raises).
//!
//! Every container read is verified (checksums) and counted; the report gives
//! read amplification (container bytes read / bytes restored) and speed factor
//! (MB restored per container read), the papers' restore metrics.
//!
//! Three stages run at once: the planner (`plan.rs`) walks the recipe and runs
//! the cache policy on container ids, the loaders (`loader.rs`) read and verify
//! the containers it decides to read (several in flight), and the caller's
//! thread, the assembler, copies chunks out of them in recipe order. The
//! decisions are those of a sequential restore with the same cache, so the
//! metrics do not depend on the pipeline.

use crate::archive::ExtractReport;
use crate::catalog::{BackupEntry, SourceKind};
use crate::container::{format::object_name, ChunkKind, ChunkMeta, Container, ContainerId};
use crate::error::{Error, IoContext, ObjectRef, Result};
use crate::fingerprint::Fingerprint;
use crate::metrics::{mb_per_s, read_amplification, speed_factor};
use crate::recipe::{self, RecipeChunk, RecipeEntry};
use crate::repo::Repository;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

pub mod cache;
mod loader;
mod plan;

pub use cache::LruCache;
use loader::{receive, Buffers, Loaders};
use plan::{Op, Planner};

/// Threads reading containers. Reads mostly wait on the disk or copy out of
/// the page cache, so a few more than the cores keep the disk's queue full.
const LOADERS: usize = 4;
/// Loaded containers that may wait for the assembler beyond the cache
/// itself: the read-ahead depth, and its memory (8 × 4 MiB by default).
const READ_AHEAD: usize = 8;

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

/// Where `e` is in container `c`, checked against the recipe.
fn chunk_meta(c: &Container, e: &RecipeEntry, bid: u64, offset: u64) -> Result<ChunkMeta> {
    let meta = *c.find(&e.fp).ok_or_else(|| {
        Error::corrupt(
            object_name(c.id()),
            format!("does not hold chunk {}", e.fp.to_hex()),
        )
        .in_backup(bid, Some(offset))
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

/// The planner sent a chunk of a container it never loaded: a bug, reported
/// as an error rather than a panic.
fn unplanned(id: ContainerId, bid: u64, offset: u64) -> Error {
    Error::io(
        format!("restore of backup {bid} at offset {offset}"),
        std::io::Error::other(format!(
            "{} was used before it was read (restore planner bug)",
            object_name(id)
        )),
    )
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
            .ok_or_else(|| Error::missing(ObjectRef::RecipeChunk(*fp)))?;
        let c = cache.get(id, |id| self.store.read(id))?;
        let bytes = c
            .chunk(fp)
            .ok_or_else(|| Error::corrupt(object_name(id), format!("does not hold {name}")))?;
        if self.manifest.config.hash.hash(bytes) != *fp {
            return Err(Error::corrupt(
                ObjectRef::RecipeChunk(*fp),
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
        // Three stages: the planner walks the recipe and decides the cache
        // (on this repository's index), the loaders read and verify the
        // containers it asks for, and this thread copies chunks out of them
        // into `out`. The cache decisions, and so the metrics, are those of
        // a sequential restore.
        let trace = self.manifest.config.trace;
        let (offset, chunks) = std::thread::scope(|scope| {
            // Made here so that an early return drops this thread's ends
            // and a planner blocked on either stops.
            let (ops, planned) = sync_channel::<plan::Batch>(4);
            let (permits, permit_return) = loader::permits(READ_AHEAD);
            let buffers = Buffers::default();
            let loaders = Loaders::spawn(scope, &self.store, LOADERS, &buffers)?;
            let planner = Planner::new(ops, loaders, permits);
            std::thread::Builder::new()
                .name("tessera-plan".into())
                .spawn_scoped(scope, move || planner.run(self, backup, opts))
                .ctx(|| "cannot start the restore planner thread".into())?;
            // The containers the cache holds (and those being filled in).
            let mut cached: HashMap<ContainerId, Container> = HashMap::new();
            let mut area = Vec::new();
            let mut offset = 0u64;
            let mut chunks = 0u64;
            for batch in planned {
                for op in batch? {
                    match op {
                        Op::Evict(id) => {
                            if let Some(c) = cached.remove(&id) {
                                buffers.give(c);
                            }
                        }
                        Op::Load(id, loaded) => {
                            let c = receive(&loaded).map_err(|e| e.in_backup(bid, Some(offset)))?;
                            permit_return.give_back();
                            cached.insert(id, c);
                        }
                        Op::Chunk(e, id) => {
                            let c = cached.get(&id).ok_or_else(|| unplanned(id, bid, offset))?;
                            let meta = chunk_meta(c, &e, bid, offset)?;
                            if !trace {
                                out.write_all(c.bytes(&meta))
                                    .ctx(|| "cannot write restored data".into())?;
                            }
                            offset += e.size;
                            chunks += 1;
                        }
                        Op::Window(w) => {
                            // Every byte of the area is overwritten below.
                            if !trace {
                                area.resize(w.filled as usize, 0);
                            }
                            for (_, idx, loaded) in &w.containers {
                                let first = offset + w.entries[idx[0]].1;
                                let c =
                                    receive(loaded).map_err(|e| e.in_backup(bid, Some(first)))?;
                                permit_return.give_back();
                                for &i in idx {
                                    let (e, at) = &w.entries[i];
                                    let meta = chunk_meta(&c, e, bid, offset + at)?;
                                    if !trace {
                                        let at = *at as usize;
                                        area[at..at + e.size as usize]
                                            .copy_from_slice(c.bytes(&meta));
                                    }
                                }
                                buffers.give(c);
                            }
                            if !trace {
                                out.write_all(&area)
                                    .ctx(|| "cannot write restored data".into())?;
                            }
                            offset += w.filled;
                            chunks += w.entries.len() as u64;
                        }
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
        self.restore_into_selected(backup, target, opts, &[], progress)
    }

    /// [`restore_into`](Self::restore_into) only the entries at or below
    /// the `include` paths of a directory backup (everything when empty).
    /// The whole stream is still restored (recipes are read in order); only
    /// the extraction is partial. Includes that match nothing are listed in
    /// [`ExtractReport::unmatched`].
    pub fn restore_into_selected(
        &self,
        backup: &BackupEntry,
        target: &Path,
        opts: &RestoreOptions,
        include: &[String],
        progress: &mut dyn FnMut(u64),
    ) -> Result<(RestoreReport, ExtractReport)> {
        // Refuse a bad path before restoring anything.
        crate::archive::include_paths(include)?;
        let (restored, extracted) = into_directory(
            backup,
            target,
            include,
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

impl Repository {
    /// The entries of a backup (`tessera ls`): a directory backup's tar
    /// entries in stream order; a file or stream backup is one file named
    /// after its source. The backup is restored (to a pipe) to read them,
    /// so a damaged backup fails as its restore would.
    pub fn list_entries(
        &self,
        backup: &BackupEntry,
        visit: &mut dyn FnMut(crate::archive::Listed) -> Result<()>,
    ) -> Result<()> {
        match backup.source {
            SourceKind::Trace => Err(Error::invalid(format!(
                "backup {} is a fingerprint trace: it has no files to list",
                backup.id
            ))),
            SourceKind::File | SourceKind::Stream => visit(crate::archive::Listed {
                path: file_name(backup).to_string_lossy().into_owned(),
                kind: "file",
                size: backup.logical_bytes,
                mode: 0o644,
                mtime: backup.time,
                link: None,
            }),
            SourceKind::Tree => {
                let (mut reader, writer) = std::io::pipe().ctx(|| "cannot create a pipe".into())?;
                std::thread::scope(|scope| {
                    let producer = std::thread::Builder::new()
                        .name("tessera-list".into())
                        .spawn_scoped(scope, move || {
                            let mut w = std::io::BufWriter::with_capacity(1 << 20, writer);
                            let opts = RestoreOptions::default();
                            self.restore_to(backup, &mut w, &opts, &mut |_| {})
                        })
                        .ctx(|| "cannot start the restore thread".into())?;
                    let listed = crate::archive::list(&mut reader, visit);
                    if listed.is_ok() {
                        // The second end-of-archive block (and anything a
                        // hostile stream adds) must not fail the producer.
                        let _ = std::io::copy(&mut reader, &mut std::io::sink());
                    }
                    // Otherwise stop the producer: its writes now fail.
                    drop(reader);
                    let restored = producer
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p));
                    match (restored, listed) {
                        // Damage explains the broken stream the lister saw.
                        (Err(e @ (Error::Corrupt { .. } | Error::MissingObject(_))), _) => Err(e),
                        (_, Err(e)) => Err(e),
                        (Err(e), Ok(())) => Err(e),
                        (Ok(_), Ok(())) => Ok(()),
                    }
                })
            }
        }
    }
}

/// The file a file or stream backup restores to: its source's name.
fn file_name(backup: &BackupEntry) -> std::ffi::OsString {
    Path::new(&backup.name)
        .file_name()
        .map(|s| s.to_os_string())
        .unwrap_or_else(|| format!("backup-{}", backup.id).into())
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
    include: &[String],
    produce: impl FnOnce(&mut dyn Write) -> Result<R>,
    restored_bytes: impl Fn(&R) -> u64,
) -> Result<(Result<R>, Result<ExtractReport>)> {
    match backup.source {
        SourceKind::Trace => Err(Error::invalid(format!(
            "backup {} is a fingerprint trace: it has no bytes to restore into a directory",
            backup.id
        ))),
        SourceKind::File | SourceKind::Stream if !include.is_empty() => {
            Err(Error::invalid(format!(
                "backup {} is a single {}: only a directory backup has paths to include",
                backup.id,
                if backup.source == SourceKind::File {
                    "file"
                } else {
                    "stream"
                }
            )))
        }
        SourceKind::File | SourceKind::Stream => {
            let base = file_name(backup);
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
            let include = include.to_vec();
            let extractor = std::thread::Builder::new()
                .name("tessera-extract".into())
                .spawn(move || {
                    let r = crate::archive::extract_selected(&mut reader, &dir, &include);
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

impl std::str::FromStr for CacheSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s)
    }
}
