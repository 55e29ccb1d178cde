//! The repository's face: [`Repository`] (read-only: restore, list,
//! check, plan GC, stats) and [`Writer`] (the same, holding a writer lock,
//! plus backup, forget, GC, keys). Opening chooses the repository's layout
//! once ([`crate::layout::open`]); every other method is one command,
//! delegating to the module that implements it (`ingest`, `restore`,
//! `salvage`, `check`, `gc`, `layout`, `fgc`) over the lower
//! [`Context`], which is all those modules see.
//!
//! Read-only handles cannot mutate: a [`Repository`] derefs to its context
//! for reading only; mutations are methods of [`Writer`].

use crate::archive::ExtractReport;
use crate::backend::{Generation, KeyKind, ObjectKey, ObjectStore};
use crate::catalog::{BackupEntry, BackupId, Manifest, RepoConfig};
use crate::check::{CheckOptions, CheckReport};
use crate::chunking::ChunkerConfig;
use crate::clock::now;
use crate::container::{ChunkKind, ContainerId};
pub use crate::context::IndexLoad;
use crate::context::{
    no_password, Context, Leftovers, PasswordSource, Reserved, RESERVE_CONTAINERS, RESERVE_GAP,
    RESERVE_SEGMENTS, RESERVE_SEGMENT_GAP,
};
use crate::error::{Error, Result};
use crate::fgc::{RefGraph, RefGraphState};
use crate::fingerprint::{Fingerprint, HashAlgo};
use crate::gc::online::OnlineGc;
use crate::gc::{GcOptions, GcPlan, GcReport, Marker};
use crate::ingest::{
    ArrangeReport, BackupOptions, BackupReport, FilesCacheOptions, GroupInput, Ingest,
};
use crate::layout::mfdedup::forget::ForgetSpace;
use crate::layout::mfdedup::{ChainStats, MfdedupLayout};
use crate::layout::Layout;
use crate::lock::RepoLock;
use crate::restore::{RestoreOptions, RestoreReport};
use crate::salvage::SalvageReport;
use crate::seal::keys::{KdfParams, KeySlot, MasterKey, Password};
use crate::seal::{CipherKind, Compression, Encryption, RepoSeal, SealedStore, Sealer};
use serde::Serialize;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

pub use crate::context::MAX_SEGMENTS;

/// Parameters fixed at `init`.
#[derive(Clone, Debug)]
pub struct InitOptions {
    pub hash: HashAlgo,
    pub chunker: ChunkerConfig,
    pub container_size: u32,
    /// Plain bytes per compressed frame (`docs/FORMAT.md`, "Frames").
    pub frame_size: u32,
    pub trace: bool,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            hash: HashAlgo::Blake3,
            chunker: ChunkerConfig::default(),
            container_size: 4 << 20,
            frame_size: crate::catalog::DEFAULT_FRAME_SIZE,
            trace: false,
        }
    }
}

/// How a new repository stores its objects (chosen at `init`; see
/// [`Repository::init_sealed`]).
#[derive(Clone, Debug, Default)]
pub struct SealOptions {
    /// Default compression of chunks (per backup: [`Writer::set_compression`]).
    pub compression: Compression,
    /// Encrypt, with the first key slot's password and KDF parameters.
    pub encryption: Option<(Password, KdfParams)>,
    /// The object cipher when encrypted (XAES-256-GCM by default).
    pub cipher: CipherKind,
}

pub struct Repository {
    cx: Context,
    /// The layout named in the manifest, chosen when the handle opened.
    layout: Box<dyn Layout>,
    /// A reader's shared lock ([`Repository::open_reader`]), held while
    /// the handle lives so GC does not delete what it reads.
    reader_lock: Option<RepoLock>,
}

/// Reads go to the context; nothing there mutates through `&`.
impl std::ops::Deref for Repository {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.cx
    }
}

/// Unit tests of the modules below build repositories by hand through
/// their context.
#[cfg(test)]
impl std::ops::DerefMut for Repository {
    fn deref_mut(&mut self) -> &mut Context {
        &mut self.cx
    }
}

/// The repository opened for writing: a [`Repository`] plus a writer lock.
/// Every mutation (backup, forget, gc) is a method of this type, so the
/// compiler, not a run-time check, keeps read-only handles from mutating;
/// reads go through `Deref`.
pub struct Writer {
    repo: Repository,
    lock: Option<RepoLock>,
    leftovers: Leftovers,
    /// Directory backups: the files cache to use, if any.
    files_cache: Option<FilesCacheOptions>,
}

impl std::ops::Deref for Writer {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        &self.repo
    }
}

/// [`Repository`] has no public method taking `&mut self` but
/// [`set_threads`](Repository::set_threads), so this grants nothing beyond
/// the writer's own API.
impl std::ops::DerefMut for Writer {
    fn deref_mut(&mut self) -> &mut Repository {
        &mut self.repo
    }
}

/// The loaded fingerprint index in [`RepoStats`].
#[derive(Clone, Copy, Debug, Serialize)]
pub struct IndexStats {
    pub data_entries: usize,
    pub recipe_entries: usize,
    pub memory_bytes: usize,
    pub bytes_per_entry: f64,
}

/// Summary for `tessera stats`.
#[derive(Clone, Debug, Serialize)]
pub struct RepoStats {
    pub location: String,
    pub generation: Generation,
    pub hash: HashAlgo,
    pub chunker: String,
    pub container_size: u32,
    pub frame_size: u32,
    pub trace: bool,
    pub backups: usize,
    /// Logical bytes of all listed backups.
    pub logical_bytes: u64,
    pub data_containers: usize,
    pub recipe_containers: usize,
    /// Chunk bytes held in data containers (all copies).
    pub stored_data_bytes: u64,
    pub stored_recipe_bytes: u64,
    /// Bytes of all container objects as stored (headers and metadata included).
    pub container_object_bytes: u64,
    /// Actual deduplication ratio: logical bytes of retained backups / data bytes stored.
    pub dedup_ratio: f64,
    /// Chunk copies stored in data containers, and recipe chunks stored
    /// (the manifest's counts: dead chunks GC has not reclaimed included).
    pub data_chunks: u64,
    pub recipe_chunks: u64,
    pub index_segments: usize,
    /// The index's own figures: only from a handle that loaded it (`stats
    /// --index`), since loading it costs what the rest of `stats` does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexStats>,
    /// The layout chosen at `init`.
    pub layout: crate::layout::LayoutKind,
    /// MFDedup: each chain's volumes, active categories and trend.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<crate::layout::mfdedup::ChainStats>,
}

impl Repository {
    /// Create a repository, neither compressed nor encrypted: publish
    /// generation 1 with an empty catalog.
    pub fn init(backend: Arc<dyn ObjectStore>, opts: &InitOptions) -> Result<()> {
        Self::init_with(
            backend,
            opts,
            crate::layout::LayoutKind::Containers,
            &SealOptions::default(),
        )
    }

    /// [`init`](Self::init) with a chosen layout (`init --layout`).
    pub fn init_layout(
        backend: Arc<dyn ObjectStore>,
        opts: &InitOptions,
        layout: crate::layout::LayoutKind,
    ) -> Result<()> {
        Self::init_with(backend, opts, layout, &SealOptions::default())
    }

    /// [`init_layout`](Self::init_layout) with a chosen data index
    /// (`init --index`).
    pub fn init_indexed(
        backend: Arc<dyn ObjectStore>,
        opts: &InitOptions,
        layout: crate::layout::LayoutKind,
        index: crate::index::IndexKind,
    ) -> Result<()> {
        Self::init_with_index(backend, opts, layout, &SealOptions::default(), index)
    }

    /// Create a repository storing its objects as `seal` says: write the
    /// unsealed config and (encrypted) the first key slot, then publish
    /// generation 1.
    pub fn init_sealed(
        backend: Arc<dyn ObjectStore>,
        opts: &InitOptions,
        seal: &SealOptions,
    ) -> Result<()> {
        Self::init_with(backend, opts, crate::layout::LayoutKind::Containers, seal)
    }

    /// Create a repository of `layout` sealed as `seal` says.
    pub fn init_with(
        backend: Arc<dyn ObjectStore>,
        opts: &InitOptions,
        layout: crate::layout::LayoutKind,
        seal: &SealOptions,
    ) -> Result<()> {
        Self::init_with_index(backend, opts, layout, seal, crate::index::IndexKind::Memory)
    }

    /// [`init_with`](Self::init_with) and a chosen data index (`init --index`).
    pub fn init_with_index(
        backend: Arc<dyn ObjectStore>,
        opts: &InitOptions,
        layout: crate::layout::LayoutKind,
        seal: &SealOptions,
        index: crate::index::IndexKind,
    ) -> Result<()> {
        if !index.is_memory() {
            crate::layout::for_kind(layout).index_on_disk()?;
        }
        opts.chunker.validate().map_err(Error::invalid)?;
        if opts.container_size < 4096 {
            return Err(Error::invalid(format!(
                "container size must be at least 4 KiB (got {})",
                opts.container_size
            )));
        }
        let lock = RepoLock::acquire(backend.clone(), "tessera init")?;
        if latest_generation(&*backend)?.is_some() {
            return Err(Error::RepositoryExists(backend.location().into()));
        }
        let mut repo_id = [0u8; 16];
        let seed = format!(
            "{:?}{}{}",
            std::time::SystemTime::now(),
            std::process::id(),
            backend.location()
        );
        repo_id.copy_from_slice(&blake3::hash(seed.as_bytes()).as_bytes()[..16]);
        let config = RepoConfig {
            repo_id: hex::encode(repo_id),
            hash: opts.hash,
            chunker: opts.chunker,
            container_size: opts.container_size,
            frame_size: opts.frame_size,
            trace: opts.trace,
            created: now(),
            layout,
            index,
        };
        let repo_seal = RepoSeal {
            version: crate::catalog::VERSION,
            repo_id: config.repo_id.clone(),
            encryption: Encryption::from_cipher(seal.encryption.as_ref().map(|_| seal.cipher)),
            compression: seal.compression,
        };
        // Slots left by an interrupted init belong to no repository.
        for key in backend.list(KeyKind::KeySlot)? {
            backend.delete(&key)?;
        }
        let sealer = match &seal.encryption {
            None => Sealer::new(None, seal.compression),
            Some((password, params)) => {
                let master = MasterKey::generate();
                let slot = KeySlot::wrap(&master, password, *params, &repo_seal.repo_id, 1)?;
                backend.put_owned(&ObjectKey::KeySlot(1), slot.encode())?;
                Sealer::new(Some(master.cipher(seal.cipher)), seal.compression)
            }
        };
        backend.put_owned(&ObjectKey::Config, repo_seal.encode())?;
        let mut manifest = Manifest::new(config);
        manifest.generation = Generation(1);
        let objects = SealedStore::new(backend, Arc::new(sealer));
        objects.put(&ObjectKey::Manifest(Generation(1)), manifest.encode())?;
        objects.barrier()?;
        lock.release()
    }

    /// Open for reading. Takes no lock: readers never block writers (see
    /// [`open_reader`](Self::open_reader) for a reader that GC waits for).
    /// A generation superseded and removed by a concurrent writer while it
    /// is being read is retried with the newer one. An encrypted
    /// repository needs [`open_with`](Self::open_with).
    pub fn open(backend: Arc<dyn ObjectStore>) -> Result<Self> {
        Self::open_with(backend, &no_password)
    }

    /// Open for reading; `password` is asked for only if the repository is
    /// encrypted.
    pub fn open_with(backend: Arc<dyn ObjectStore>, password: PasswordSource) -> Result<Self> {
        Self::open_loading(backend, password, IndexLoad::Now)
    }

    /// [`open_with`](Self::open_with), loading the fingerprint index as
    /// `load` says: [`IndexLoad::Lazy`] for a command that may need only
    /// the manifest (the first method that needs the index loads it).
    pub fn open_loading(
        backend: Arc<dyn ObjectStore>,
        password: PasswordSource,
        load: IndexLoad,
    ) -> Result<Self> {
        let (cx, layout) = crate::layout::open(backend, password, load, None)?;
        Ok(Repository {
            cx,
            layout,
            reader_lock: None,
        })
    }

    /// Open for reading holding a shared reader lock: a concurrent GC does
    /// not delete containers while the handle lives (restore, ls, check).
    /// Without a lock (an exclusive holder, a read-only store) it opens
    /// as [`open`](Self::open) does.
    pub fn open_reader(backend: Arc<dyn ObjectStore>, command: &str) -> Result<Self> {
        Self::open_reader_with(backend, command, &no_password)
    }

    /// [`open_reader`](Self::open_reader) with a password source.
    pub fn open_reader_with(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
    ) -> Result<Self> {
        Self::open_reader_loading(backend, command, password, IndexLoad::Now)
    }

    /// [`open_reader_with`](Self::open_reader_with), loading the index as
    /// `load` says (see [`open_loading`](Self::open_loading)).
    pub fn open_reader_loading(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
        load: IndexLoad,
    ) -> Result<Self> {
        if latest_generation(&*backend)?.is_none() {
            return Err(Error::NoRepository(backend.location().into()));
        }
        // Best effort: a read-only store, or a writer holding the
        // exclusive lock, never keeps a reader out.
        let lock = RepoLock::acquire_shared(backend.clone(), command, true).ok();
        let mut repo = Self::open_loading(backend, password, load)?;
        repo.reader_lock = lock;
        Ok(repo)
    }

    /// Open for writing. Backups, forgets and GCs run at once from
    /// several processes: a writer that finds no other lock holder takes
    /// the exclusive lock for a moment, removes the leftovers of
    /// interrupted mutations, and keeps a shared lock; one that finds
    /// others takes a shared lock, removes nothing (unlisted objects may be
    /// theirs, in flight), and reserves ranges of container and segment
    /// ids so its objects never collide with theirs. Each publishes by
    /// compare-and-swap and merges on conflict (see [`crate::publish`]).
    /// A layout without concurrent writers (MFDedup) keeps one writer at a
    /// time (exclusive lock).
    pub fn open_writer(backend: Arc<dyn ObjectStore>, command: &str) -> Result<Writer> {
        Self::open_writer_with(backend, command, &no_password)
    }

    /// [`open_writer`](Self::open_writer) with a password source.
    pub fn open_writer_with(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
    ) -> Result<Writer> {
        Self::open_writer_loading(backend, command, password, IndexLoad::Now)
    }

    /// [`open_writer_with`](Self::open_writer_with), loading the index as
    /// `load` says: [`IndexLoad::Lazy`] for a writer that may only edit
    /// the catalog (forget, keys); its backups, GCs and arranging load it.
    pub fn open_writer_loading(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
        load: IndexLoad,
    ) -> Result<Writer> {
        Self::open_writer_as(backend, command, password, load, false, false)
    }

    /// [`open_writer_with`](Self::open_writer_with) that removes every
    /// object no manifest lists if it opens alone, whatever the sweep
    /// marker says (`check --repair-leftovers`): it lists every object.
    pub fn open_writer_sweeping(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
    ) -> Result<Writer> {
        Self::open_writer_as(backend, command, password, IndexLoad::Lazy, false, true)
    }

    /// Open for writing and keep the exclusive lock: no other writer or GC
    /// joins until this one is dropped (a writer that is refused says who
    /// holds it). Nothing can run beside its backups, so they write no
    /// online-GC records (see [`crate::gc::online`]): that bookkeeping is a
    /// tenth of a trace-mode backup's time. The lab opens its repositories
    /// this way; its own GCs run between backups, as before.
    pub fn open_writer_exclusive(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
    ) -> Result<Writer> {
        Self::open_writer_as(backend, command, password, IndexLoad::Now, true, false)
    }

    fn open_writer_as(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
        load: IndexLoad,
        exclusive: bool,
        sweep: bool,
    ) -> Result<Writer> {
        if latest_generation(&*backend)?.is_none() {
            return Err(Error::NoRepository(backend.location().into()));
        }
        // Every object the writer puts goes through `tracked`, so it can
        // tell at the end whether it may have left any (see crate::sweep).
        let (tracked, unsettled) = crate::sweep::Tracked::wrap(backend.clone());
        match RepoLock::acquire_brief(backend.clone(), command) {
            Ok(alone) => {
                let mut repo = Self::open_loading(tracked, password, load)?;
                repo.cx.unsettled = Some(unsettled);
                let marked = sweep || crate::sweep::marked(&*backend)?.is_some();
                let leftovers = match marked {
                    true => {
                        let l = repo.cx.remove_leftovers()?;
                        crate::sweep::unmark(&*backend)?;
                        l
                    }
                    false => repo.cx.remove_old_manifests()?,
                };
                let lock = if repo.layout.concurrent_writers() && !exclusive {
                    let shared = alone.downgrade(false)?;
                    // Its online-GC records carry the token.
                    repo.cx.writer_token = Some(shared.token());
                    shared
                } else {
                    alone.settle()?;
                    alone
                };
                repo.cx.lock_token = Some(lock.token());
                Ok(Writer {
                    repo,
                    lock: Some(lock),
                    leftovers,
                    files_cache: None,
                })
            }
            Err(Error::Locked(why)) if exclusive => Err(Error::Locked(why)),
            Err(Error::Locked(why)) => {
                let lock = RepoLock::acquire_shared(backend.clone(), command, false)?;
                let mut repo = Self::open_loading(tracked, password, load)?;
                repo.cx.unsettled = Some(unsettled);
                if !repo.layout.concurrent_writers() {
                    return Err(Error::Locked(format!(
                        "the {} layout has one writer at a time: {why}",
                        repo.layout.kind()
                    )));
                }
                repo.cx.writer_token = Some(lock.token());
                repo.cx.lock_token = Some(lock.token());
                let mut w = Writer {
                    repo,
                    lock: Some(lock),
                    leftovers: Leftovers::default(),
                    files_cache: None,
                };
                w.reserve_ids()?;
                Ok(w)
            }
            Err(e) => Err(e),
        }
    }

    /// The layout chosen when this handle opened.
    pub fn layout(&self) -> &dyn Layout {
        &*self.layout
    }

    /// Use `n` worker threads for backups and restores (0, the default:
    /// every available core). Layouts and restored bytes do not depend on it.
    pub fn set_threads(&mut self, n: usize) {
        self.cx.set_threads(n);
    }

    fn mfdedup(&self, what: &str) -> Result<&MfdedupLayout> {
        self.layout.as_any().downcast_ref().ok_or_else(|| {
            Error::invalid(format!(
                "{what} need the mfdedup layout (this repository uses {})",
                self.layout.kind()
            ))
        })
    }

    /// MFDedup: exactly what forgetting `ids` would free, from the volume
    /// headers (what `forget --dry-run` prints).
    pub fn forget_space(&self, ids: &[BackupId]) -> Result<ForgetSpace> {
        self.mfdedup("forget --dry-run space answers")?;
        crate::layout::mfdedup::forget::forget_space(&self.cx, ids)
    }

    /// Restore into a file: by positional writes where the layout restores
    /// so (MFDedup: out-of-order restore, no temporary copy); other layouts
    /// write it in order.
    pub fn restore_to_file(
        &self,
        backup: &BackupEntry,
        file: &mut std::fs::File,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<RestoreReport> {
        let via = self.layout.restorer();
        if via.writes_in_place() {
            return via.restore_to_file(&self.cx, backup, file, opts, progress);
        }
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        self.restore_to(backup, &mut w, opts, progress)
    }

    /// MFDedup: each chain's layout (volumes, active categories, trend).
    pub fn chain_stats(&self) -> Vec<ChainStats> {
        crate::layout::mfdedup::chain_stats(&self.cx.manifest)
    }

    /// Find a backup by `latest`, its numeric id, or a prefix (≥ 4 hex digits)
    /// of its root fingerprint.
    pub fn resolve(&self, spec: &str) -> Result<&BackupEntry> {
        let backups = &self.manifest.backups;
        if spec == "latest" {
            return backups
                .iter()
                .max_by_key(|b| b.id)
                .ok_or_else(|| Error::Snapshot("the repository has no backups".into()));
        }
        if let Ok(id) = spec.parse::<BackupId>() {
            if let Some(b) = self.manifest.backup(id) {
                return Ok(b);
            }
        }
        let lower = spec.to_ascii_lowercase();
        if lower.len() >= 4 && lower.bytes().all(|c| c.is_ascii_hexdigit()) {
            let hits: Vec<_> = backups
                .iter()
                .filter(|b| b.root.starts_with(&lower))
                .collect();
            // Backups of identical content share a root: any of them restores
            // the same bytes, so the newest is taken.
            let same_root = hits.windows(2).all(|w| w[0].root == w[1].root);
            match hits.len() {
                n if n >= 1 && same_root => return Ok(hits.iter().max_by_key(|b| b.id).unwrap()),
                n if n > 1 => {
                    return Err(Error::Snapshot(format!(
                        "snapshot '{spec}' is ambiguous: it matches {n} backups by root"
                    )))
                }
                _ => {}
            }
        }
        Err(Error::Snapshot(format!(
            "no snapshot '{spec}' (see `tessera snapshots`)"
        )))
    }

    pub fn stats(&self) -> RepoStats {
        let m = &self.manifest;
        let sum = |kind: ChunkKind| -> (usize, u64, u64) {
            m.containers
                .iter()
                .filter(|c| c.kind == kind)
                .fold((0, 0, 0), |(n, b, k), c| {
                    (n + 1, b + c.logical_bytes, k + c.chunks as u64)
                })
        };
        let (dc, db, dk) = sum(ChunkKind::Data);
        let (rc, rb, rk) = sum(ChunkKind::Recipe);
        let logical: u64 = m.backups.iter().map(|b| b.logical_bytes).sum();
        let index = self.cx.index.if_loaded().map(|i| {
            let (de, re) = i.len();
            let mem = i.memory_bytes();
            IndexStats {
                data_entries: de,
                recipe_entries: re,
                memory_bytes: mem,
                bytes_per_entry: if de + re == 0 {
                    0.0
                } else {
                    mem as f64 / (de + re) as f64
                },
            }
        });
        RepoStats {
            location: self.objects.location(),
            generation: m.generation,
            hash: m.config.hash,
            chunker: m.config.chunker.describe(),
            container_size: m.config.container_size,
            frame_size: m.config.frame_size,
            trace: m.config.trace,
            backups: m.backups.len(),
            logical_bytes: logical,
            data_containers: dc,
            recipe_containers: rc,
            stored_data_bytes: db,
            stored_recipe_bytes: rb,
            container_object_bytes: m.containers.iter().map(|c| c.object_bytes).sum(),
            dedup_ratio: if db == 0 {
                0.0
            } else {
                logical as f64 / db as f64
            },
            data_chunks: dk,
            recipe_chunks: rk,
            index_segments: m.index_segments.len(),
            index,
            layout: self.layout.kind(),
            chains: crate::layout::mfdedup::chain_stats(m),
        }
    }

    /// The entries of a backup (`tessera ls`): a directory backup's tar
    /// entries in stream order; a file or stream backup is one file named
    /// after its source. The backup is restored (to a pipe) to read them,
    /// so a damaged backup fails as its restore would.
    pub fn list_entries(
        &self,
        backup: &BackupEntry,
        visit: &mut dyn FnMut(crate::archive::Listed) -> Result<()>,
    ) -> Result<()> {
        crate::restore::list_entries(&self.cx, self.layout.restorer(), backup, visit)
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
        crate::restore::restore_to(
            &self.cx,
            self.layout.restorer(),
            backup,
            out,
            opts,
            progress,
        )
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
        let via = self.layout.restorer();
        let explain = |e| crate::salvage::explain_damage(&self.cx, backup, e);
        crate::restore::restore_into_selected(
            &self.cx, via, &explain, backup, target, opts, include, progress,
        )
    }

    /// Restore a backup's byte stream into `out`, writing damaged chunks as
    /// zeros and reporting them. Fails only if the recipe is unreadable or
    /// `out` fails.
    pub fn restore_damaged_to(
        &self,
        b: &BackupEntry,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SalvageReport> {
        crate::salvage::restore_damaged_to(&self.cx, b, out, progress)
    }

    /// Restore a backup into a directory, damaged chunks as zeros: a tree is
    /// extracted (entries whose tar headers were lost are missing), a stream
    /// becomes one file. The report lists what is damaged.
    pub fn restore_damaged_into(
        &self,
        b: &BackupEntry,
        target: &Path,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(SalvageReport, ExtractReport)> {
        crate::salvage::restore_damaged_into(&self.cx, b, target, progress)
    }

    /// Mark (with the options' marker) and select: what [`gc`](Writer::gc)
    /// would do. Changes nothing.
    pub fn plan_gc(&self, opts: &GcOptions) -> Result<GcPlan> {
        self.layout.mark_sweep()?;
        self.cx.need_index()?;
        crate::gc::plan_gc(&self.cx, opts)
    }

    /// [`plan_gc`](Self::plan_gc) with another mark: where the physical and
    /// focused marks come in.
    pub fn plan_gc_marked(&self, opts: &GcOptions, marker: &dyn Marker) -> Result<GcPlan> {
        self.cx.need_index()?;
        self.layout.mark_sweep()?;
        crate::gc::plan_gc_marked(&self.cx, opts, marker)
    }

    /// Verify the repository. Errors are only returned for failures of the
    /// check itself (e.g. the backend cannot be listed); everything wrong
    /// with the repository is a [`Problem`](crate::check::Problem) in the report.
    pub fn check(&self, opts: &CheckOptions) -> Result<CheckReport> {
        self.cx.need_index()?;
        crate::check::check(&self.cx, opts)
    }

    /// Each data chunk of a backup in order, with the container its copy
    /// is read from (what a restore reads, without reading data).
    pub fn chunk_homes(
        &self,
        b: &BackupEntry,
    ) -> Result<Vec<(crate::recipe::RecipeEntry, ContainerId)>> {
        let mut reader = self.recipe_reader(8)?;
        let mut w = reader.entries(b.root_fp()?, b.root_level)?;
        let mut out = Vec::with_capacity(b.chunks as usize);
        while let Some(e) = w.next()? {
            let c = self.locate_data(b.id, &e.fp, e.copy)?;
            out.push((e, c));
        }
        Ok(out)
    }
}

impl Writer {
    /// The context, to mutate (the modules below take it).
    pub(crate) fn cx_mut(&mut self) -> &mut Context {
        &mut self.repo.cx
    }

    /// The context with its index loaded (a writer opened
    /// [`IndexLoad::Lazy`] loads it at its first backup, GC or arranging).
    fn cx_indexed(&mut self) -> Result<&mut Context> {
        self.repo.cx.need_index()?;
        Ok(&mut self.repo.cx)
    }

    /// [`cx_indexed`](Self::cx_indexed) for a GC, which replaces the whole
    /// index when it publishes and keeps the table of that generation
    /// then: an index loaded here keeps no table of its own (see
    /// `Context::index_replaced`).
    fn cx_replacing(&mut self) -> Result<&mut Context> {
        self.repo.cx.index_replaced = true;
        self.cx_indexed()
    }

    /// Run a backup: `feed` writes the backup's bytes (or trace entries) into
    /// the [`Ingest`]; then the recipe is closed, the containers and index
    /// segment written, and a new manifest generation published. On any error
    /// nothing is published and the repository is unchanged.
    pub fn backup_with(
        &mut self,
        opts: &BackupOptions,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<BackupReport> {
        self.repo.cx.need_index()?;
        let Repository { cx, layout, .. } = &mut self.repo;
        crate::ingest::backup_with(cx, layout.backup_hooks(), opts, feed)
    }

    /// Fastcopy: a new backup named `name` (default: the source's) that
    /// shares backup `source`'s recipe root, made without reading data and
    /// writing no chunk (physical-gc-fast17.md §5.1). Refused on MFDedup
    /// and for a backup not retained. See `ingest/fastcopy.rs`.
    pub fn clone_backup(&mut self, source: BackupId, name: Option<&str>) -> Result<BackupEntry> {
        self.repo.layout.fastcopy()?;
        self.cx_mut().clone_backup(source, name)
    }

    /// [`clone_backup`](Self::clone_backup) of each of `sources`, in
    /// order, published as one manifest generation.
    pub fn clone_backups(
        &mut self,
        sources: &[BackupId],
        name: Option<&str>,
    ) -> Result<Vec<BackupEntry>> {
        self.repo.layout.fastcopy()?;
        self.cx_mut().clone_backups(sources, name)
    }

    /// Back up a byte stream (a file, or stdin under a name).
    pub fn backup_reader(
        &mut self,
        opts: &BackupOptions,
        reader: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupReport> {
        self.repo.cx.need_index()?;
        let Repository { cx, layout, .. } = &mut self.repo;
        crate::ingest::backup_reader(cx, layout.backup_hooks(), opts, reader, progress)
    }

    /// Back up a directory: its files' contents, then their metadata.
    pub fn backup_tree(
        &mut self,
        opts: &BackupOptions,
        root: &std::path::Path,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(BackupReport, crate::archive::TreeStats)> {
        self.repo.cx.need_index()?;
        let Repository { cx, layout, .. } = &mut self.repo;
        let cache = self.files_cache.as_ref();
        crate::ingest::backup_tree(cx, layout.backup_hooks(), cache, opts, root, progress)
    }

    /// Back up several paths (directories or files) as one backup, leaving
    /// out what `selection` excludes.
    ///
    /// Contract (issues 13 and 19): one directory path is stored with its
    /// entries relative to it; several paths (directories or not) are
    /// stored under their absolute paths with the leading `/` removed, as
    /// restic does, with the directories leading to them (nested paths are
    /// stored once).
    pub fn backup_paths(
        &mut self,
        opts: &BackupOptions,
        paths: &[std::path::PathBuf],
        selection: &crate::archive::Selection,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(BackupReport, crate::archive::TreeStats)> {
        let scan = crate::archive::Scan::start(paths.to_vec(), selection.clone());
        self.backup_scan(opts, scan, progress)
    }

    /// [`backup_paths`](Self::backup_paths) of a walk already started
    /// ([`crate::archive::Scan::start`]), for instance before this writer
    /// was opened, so that the walk overlaps the key derivation.
    pub fn backup_scan(
        &mut self,
        opts: &BackupOptions,
        scan: crate::archive::Scan,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(BackupReport, crate::archive::TreeStats)> {
        self.repo.cx.need_index()?;
        let Repository { cx, layout, .. } = &mut self.repo;
        let cache = self.files_cache.as_ref();
        crate::ingest::backup_paths(cx, layout.backup_hooks(), cache, opts, scan, progress)
    }

    /// Use a files cache for the directory backups of this writer (none by
    /// default): unchanged files are not read again (see
    /// [`crate::ingest::FilesCacheOptions`]).
    pub fn set_files_cache(&mut self, cache: Option<FilesCacheOptions>) {
        self.files_cache = cache;
    }

    /// The files cache set by [`set_files_cache`](Self::set_files_cache).
    pub fn files_cache(&self) -> Option<&FilesCacheOptions> {
        self.files_cache.as_ref()
    }

    /// Back up a fingerprint trace: (fingerprint, size) per chunk.
    pub fn backup_trace(
        &mut self,
        opts: &BackupOptions,
        chunks: impl IntoIterator<Item = Result<(Fingerprint, u32)>>,
    ) -> Result<BackupReport> {
        self.repo.cx.need_index()?;
        let Repository { cx, layout, .. } = &mut self.repo;
        crate::ingest::backup_trace(cx, layout.backup_hooks(), opts, chunks)
    }

    /// Back up every member of `group` interleaved (see
    /// [`crate::ingest::interleave`]): one chunk of each member in turn,
    /// into shared containers; then one manifest generation lists them all,
    /// in order. All or nothing: on any error none of them is published.
    pub fn backup_interleaved(
        &mut self,
        group: Vec<(BackupOptions, GroupInput)>,
    ) -> Result<Vec<BackupReport>> {
        self.repo.cx.need_index()?;
        let Repository { cx, layout, .. } = &mut self.repo;
        crate::ingest::interleave::backup_interleaved(cx, layout.backup_hooks(), group)
    }

    /// Reclaim the space of chunks no retained backup references: mark,
    /// select, sweep (naive copy-forward or GCCDF reordering), then publish
    /// a new generation before deleting the old containers.
    pub fn gc(&mut self, opts: &GcOptions) -> Result<GcReport> {
        self.layout.mark_sweep()?;
        let cx = match opts.dry_run {
            true => self.cx_indexed()?,
            false => self.cx_replacing()?,
        };
        crate::gc::gc(cx, opts)
    }

    /// Carry out a plan: sweep, publish a new generation, then delete the
    /// reclaimed containers. A dry-run plan changes nothing; a plan with
    /// nothing to reclaim only records that the forgotten backups are done.
    pub fn gc_with(&mut self, plan: GcPlan) -> Result<GcReport> {
        crate::gc::gc_with(self.cx_indexed()?, plan)
    }

    /// Online GC, step 1: take the GC lock, announce a marking run, then
    /// mark and select on the newest generation (see [`crate::gc::online`]).
    pub fn gc_begin(&mut self, opts: &GcOptions) -> Result<OnlineGc> {
        self.layout.mark_sweep()?;
        crate::gc::online::begin_run(self.cx_replacing()?, opts)
    }

    /// Step 2, the cutoff: announce the containers to reclaim, then
    /// resurrect the dead copies concurrent backups recorded.
    pub fn gc_cutoff(&mut self, run: &mut OnlineGc) -> Result<()> {
        crate::gc::online::cutoff_run(self.cx_indexed()?, run)
    }

    /// Step 3: sweep and commit (merging with what others published),
    /// record the run as done, and delete the records of writers gone.
    pub fn gc_finish(&mut self, run: OnlineGc) -> Result<GcReport> {
        crate::gc::online::finish_run(self.cx_indexed()?, run)
    }

    /// Rebuild FGC's reference graph from the recipes (`tessera check
    /// --rebuild-refgraph`) with virtual files of `granularity` bytes (0:
    /// whole backups), and record it from now on.
    pub fn rebuild_refgraph(&mut self, granularity: u64) -> Result<RefGraph> {
        self.layout
            .mark_sweep()
            .map_err(|_| crate::fgc::no_gc_to_focus())?;
        self.repo.cx.need_index()?;
        let (graph, next, superseded) = crate::fgc::rebuild(&self.repo.cx, granularity)?;
        crate::publish::publish(self.cx_mut(), next, &superseded)?;
        Ok(graph)
    }

    /// Compress the chunks of the following backups with `compression`
    /// instead of the repository's default (`backup --compression`).
    pub fn set_compression(&mut self, compression: Compression) {
        let cx = self.cx_mut();
        cx.store = cx.store.with_compression(compression);
    }

    fn master(&self) -> Result<&Arc<MasterKey>> {
        self.key
            .as_ref()
            .map(|(k, _)| k)
            .ok_or_else(|| Error::Key("the repository is not encrypted: it has no keys".into()))
    }

    /// Add a key slot opened by `password`; returns its id.
    pub fn add_key(&mut self, password: &Password, params: KdfParams) -> Result<u64> {
        let master = self.master()?.clone();
        let id = self.key_slots()?.iter().map(|s| s.id).max().unwrap_or(0) + 1;
        let slot = KeySlot::wrap(&master, password, params, &self.seal.repo_id, id)?;
        let store = self.objects.store();
        if !store.put_if_absent(&ObjectKey::KeySlot(id), &slot.encode())? {
            return Err(Error::Key(format!(
                "key slot {id} appeared meanwhile; try again"
            )));
        }
        store.barrier()?;
        Ok(id)
    }

    /// Remove key slot `id`. The last slot, and the slot that opened this
    /// handle, are refused (use [`change_password`](Self::change_password)
    /// for the latter).
    pub fn remove_key(&mut self, id: u64) -> Result<()> {
        self.master()?;
        let slots = self.key_slots()?;
        if !slots.iter().any(|s| s.id == id) {
            return Err(Error::Key(format!(
                "no key slot {id} (see `tessera key list`)"
            )));
        }
        if self.key_slot_used() == Some(id) {
            return Err(Error::Key(format!(
                "key slot {id} is the one this password opened: remove it with another password, or change it with `tessera key passwd`"
            )));
        }
        if slots.len() == 1 {
            return Err(Error::Key("refusing to remove the last key slot".into()));
        }
        let store = self.objects.store();
        store.delete(&ObjectKey::KeySlot(id))?;
        store.barrier()
    }

    /// Replace the slot that opened this handle by one opened by
    /// `password`; returns the new slot's id.
    pub fn change_password(&mut self, password: &Password, params: KdfParams) -> Result<u64> {
        let old = self
            .key_slot_used()
            .ok_or_else(|| Error::Key("the repository is not encrypted: it has no keys".into()))?;
        let id = self.add_key(password, params)?;
        if let Some((_, used)) = &mut self.repo.cx.key {
            *used = id;
        }
        let store = self.objects.store();
        store.delete(&ObjectKey::KeySlot(old))?;
        store.barrier()?;
        Ok(id)
    }

    /// Rebuild an on-disk index with other tuning (flush size, cache
    /// size): for tests and benchmarks. Refused on a memory index.
    pub fn tune_disk_index(&mut self, cfg: crate::index::disk::DiskConfig) -> Result<()> {
        self.cx_mut().tune_disk_index(cfg)
    }

    /// Leftovers removed when this writer opened the repository.
    pub fn leftovers(&self) -> &Leftovers {
        &self.leftovers
    }

    /// The stale lock (of a crashed writer) broken to open this writer, if
    /// any: commands print its one-line notice.
    pub fn broken_lock(&self) -> Option<&crate::lock::BrokenLock> {
        self.lock.as_ref().and_then(|l| l.broken())
    }

    /// Remove backups from the catalog (logical deletion on containers: GC
    /// reclaims their chunks; MFDedup deletes their categories at once).
    pub fn forget(&mut self, ids: &[BackupId]) -> Result<Vec<BackupEntry>> {
        for id in ids {
            if self.manifest.backup(*id).is_none() {
                return Err(Error::Snapshot(format!(
                    "no snapshot '{id}' (see `tessera snapshots`)"
                )));
            }
        }
        let Repository { cx, layout, .. } = &mut self.repo;
        layout.forget(cx, ids)
    }

    /// A joining writer's id ranges: reserved in a generation of their own
    /// (compare-and-swap like any publish), far enough above the
    /// allocators that a writer allocating from them never reaches them.
    fn reserve_ids(&mut self) -> Result<()> {
        let mut range = (0, 0);
        self.cx_mut().commit_with(|newest, _| {
            let mut m = newest.clone();
            let c = m.next_container_id.0 + RESERVE_GAP;
            // One range serves index and FGC graph segments (two key
            // spaces), above both counters.
            let mut graph = RefGraphState::of(&m)?;
            let counter = graph.as_ref().map_or(0, |g| g.next_segment);
            let s = m.next_segment_id.max(counter) + RESERVE_SEGMENT_GAP;
            m.next_container_id = ContainerId(c + RESERVE_CONTAINERS);
            m.next_segment_id = s + RESERVE_SEGMENTS;
            if let Some(g) = graph.as_mut() {
                g.next_segment = s + RESERVE_SEGMENTS;
                RefGraphState::set(&mut m, Some(g));
            }
            range = (c, s);
            Ok(m)
        })?;
        self.cx_mut().reserved = Some(Reserved {
            container: range.0.into(),
            segment: range.1.into(),
        });
        Ok(())
    }

    /// MFDedup: forget `ids`, returning exactly what was freed (the answer
    /// [`forget_space`](Repository::forget_space) gave once arranged).
    pub fn forget_freeing(&mut self, ids: &[BackupId]) -> Result<(Vec<BackupEntry>, ForgetSpace)> {
        self.mfdedup("space answers")?;
        crate::layout::mfdedup::forget::forget(self.cx_indexed()?, ids)
    }

    /// MFDedup: arrange the chains that fell behind (`--no-arrange`), at
    /// most `limit` versions each.
    pub fn arrange(&mut self, limit: Option<u32>) -> Result<Vec<ArrangeReport>> {
        self.mfdedup("arranging")?;
        crate::layout::mfdedup::avar::arrange_all(self.cx_indexed()?, limit)
    }

    /// MFDedup: arrange one chain, at most `limit` versions (the lab keeps
    /// arranging a set number of versions behind this way).
    pub fn arrange_chain(&mut self, chain: &str, limit: Option<u32>) -> Result<ArrangeReport> {
        self.mfdedup("arranging")?;
        crate::layout::mfdedup::avar::arrange_chain(self.cx_indexed()?, chain, limit)
    }

    /// MFDedup's `gc`: deletes categories no retained version needs (forget
    /// already did; this finds any a failed forget left) — never copies.
    pub fn mfdedup_gc(&mut self) -> Result<ForgetSpace> {
        self.mfdedup("gc by deleting categories")?;
        crate::layout::mfdedup::forget::forget(self.cx_indexed()?, &[]).map(|(_, s)| s)
    }

    /// Release the writer lock (also released on drop).
    pub fn close(mut self) -> Result<()> {
        let said = self.say_if_unsettled();
        match (self.lock.take(), said) {
            (Some(l), Ok(())) => l.release(),
            (Some(l), Err(e)) => {
                l.abandon();
                Err(e)
            }
            (None, said) => said,
        }
    }

    /// Before the lock goes: a writer that may have left objects no manifest
    /// lists puts the sweep marker (see [`crate::sweep`]).
    fn say_if_unsettled(&self) -> Result<()> {
        match &self.repo.cx.unsettled {
            Some(u) if !u.is_settled() => crate::sweep::mark(
                &**self.repo.cx.objects.store(),
                &format!(
                    "a writer (pid {}) ended with objects it put unpublished, or left some",
                    std::process::id()
                ),
            ),
            _ => Ok(()),
        }
    }
}

/// A writer dropped without [`close`](Writer::close) (after an error, most
/// often) says what it may have left before its lock goes; if it cannot, the
/// lock is left to go stale, and whoever breaks it says so.
impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(l) = self.lock.take() {
            match self.say_if_unsettled() {
                Ok(()) => drop(l),
                Err(_) => l.abandon(),
            }
        }
    }
}

/// Newest manifest generation listed by the store, if any.
fn latest_generation(store: &dyn ObjectStore) -> Result<Option<Generation>> {
    crate::context::latest_generation(store)
}

/// Tests of the modules below build containers by hand.
#[cfg(test)]
pub(crate) fn container_entry(
    id: ContainerId,
    kind: ChunkKind,
    chunks: usize,
    logical_bytes: u64,
    object_bytes: u64,
) -> crate::catalog::ContainerEntry {
    crate::catalog::ContainerEntry::new(id, kind, chunks, logical_bytes, object_bytes)
}
