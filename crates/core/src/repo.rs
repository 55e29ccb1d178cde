//! The repository's API in one place: [`Repository`] (read-only: restore,
//! list, check, plan GC, stats) and [`Writer`] (the same, holding the
//! exclusive lock, plus backup, forget and GC). Each method here is the
//! documented face of an operation implemented in its module (`ingest`,
//! `restore`, `salvage`, `check`, `gc`); this file also holds opening,
//! locking and publishing manifest generations.
//!
//! Crash safety rests on one rule, enforced in `Writer::publish`: new
//! objects are made durable, then the new manifest generation is put
//! (atomically), then — and only then — superseded objects are deleted.
//! Anything a crash leaves behind is not listed by any manifest and is removed
//! by the next writer ([`Repository::open_writer`]).

use crate::archive::ExtractReport;
use crate::backend::{Generation, KeyKind, ObjectKey, ObjectStore};
use crate::catalog::{BackupEntry, BackupId, ContainerEntry, Manifest, RepoConfig};
use crate::check::{CheckOptions, CheckReport};
use crate::chunking::ChunkerConfig;
use crate::clock::now;
use crate::container::{ChunkKind, ContainerId, ContainerStore};
use crate::error::{Error, ObjectRef, Result};
use crate::fingerprint::HashAlgo;
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::gc::{GcOptions, GcPlan, GcReport, Marker};
use crate::index::{decode_segment, encode_segment, sort_entries, Index, IndexEntry};
use crate::ingest::{BackupOptions, BackupReport, GroupInput, Ingest};
use crate::lock::RepoLock;
use crate::metrics::Metrics;
use crate::recipe::reader::RecipeReader;
use crate::restore::{RestoreOptions, RestoreReport};
use crate::salvage::SalvageReport;
use crate::seal::keys::{KdfParams, KeySlot, MasterKey, Password};
use crate::seal::{CipherKind, Compression, Encryption, RepoSeal, SealedStore, Sealer};
use serde::Serialize;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

/// Index segments a manifest may list before they are merged into one.
pub const MAX_SEGMENTS: usize = 32;

/// Parameters fixed at `init`.
#[derive(Clone, Debug)]
pub struct InitOptions {
    pub hash: HashAlgo,
    pub chunker: ChunkerConfig,
    pub container_size: u32,
    pub trace: bool,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            hash: HashAlgo::Blake3,
            chunker: ChunkerConfig::default(),
            container_size: 4 << 20,
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

/// Where the password of an encrypted repository comes from: asked only
/// when the repository turns out to be encrypted.
pub type PasswordSource<'a> = &'a dyn Fn() -> Result<Password>;

/// For repositories opened without a password source.
pub(crate) fn no_password() -> Result<Password> {
    Err(Error::Key(
        "the repository is encrypted: give its password (TESSERA_PASSWORD, --password-file, --password-command, or a terminal prompt)".into(),
    ))
}

/// What a writer found and removed when it opened the repository.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Leftovers {
    pub objects: Vec<String>,
    pub temporaries: usize,
}

pub struct Repository {
    /// Every object read and write goes through here (the lock excepted).
    pub(crate) objects: SealedStore,
    pub(crate) manifest: Manifest,
    pub(crate) index: Index,
    pub(crate) store: ContainerStore,
    pub(crate) metrics: Arc<Metrics>,
    /// Fingerprints of this repository (keyed when encrypted).
    pub(crate) fingerprinter: Fingerprinter,
    /// The unsealed config: format version, encryption, compression.
    pub(crate) seal: RepoSeal,
    /// The master key and the slot that opened it (encrypted repositories).
    pub(crate) key: Option<(Arc<MasterKey>, u64)>,
    /// Worker threads for ingest and restore (0: every core).
    pub(crate) threads: usize,
    /// MFDedup only: data chunk → a category part holding it (for check
    /// and salvage), built on first use and dropped at each publish.
    pub(crate) mf_located: std::sync::OnceLock<crate::fingerprint::FpMap<ContainerId>>,
    /// A writer that joined others: the container and segment ids it
    /// reserved (see [`Repository::open_writer`]); `None` allocates from
    /// the manifest's allocators.
    pub(crate) reserved: Option<Reserved>,
    /// A reader's shared lock ([`Repository::open_reader`]), held while
    /// the handle lives so GC does not delete what it reads.
    pub(crate) reader_lock: Option<RepoLock>,
    /// A writer's lock token (its online-GC records carry it).
    pub(crate) writer_token: Option<String>,
}

/// Id ranges a joining writer reserved: the next id of each to hand out.
#[derive(Debug)]
pub(crate) struct Reserved {
    pub(crate) container: std::sync::atomic::AtomicU64,
    pub(crate) segment: std::sync::atomic::AtomicU64,
}

/// Container ids a joining writer reserves, and how far above the
/// allocator it starts (a writer that opened alone allocates from the
/// manifest's allocator upwards, and uses fewer ids than this in one go).
pub const RESERVE_CONTAINERS: u64 = 1 << 20;
const RESERVE_GAP: u64 = 1 << 24;
/// Index segment ids a joining writer reserves (and their gap).
pub(crate) const RESERVE_SEGMENTS: u64 = 1 << 16;
const RESERVE_SEGMENT_GAP: u64 = 1 << 20;
/// How often opening retries when a newer generation superseded (and
/// deleted) what it was reading.
const OPEN_ATTEMPTS: usize = 50;

/// The repository opened for writing: a [`Repository`] plus the exclusive
/// writer lock. Every mutation (backup, forget, gc) is a method of this
/// type, so the compiler, not a run-time check, keeps read-only handles
/// from mutating; reads go through `Deref`.
pub struct Writer {
    repo: Repository,
    lock: Option<RepoLock>,
    leftovers: Leftovers,
    /// A reference graph a focused GC staged for its publish (and only
    /// its publish: cleared when that ends, published or not).
    pub(crate) staged_refgraph: Option<crate::refgraph::RefGraphState>,
    /// The reference graph as of the segments listed, kept between backups
    /// so each does not load it again.
    pub(crate) refgraph_mem: Option<(Vec<ObjectKey>, crate::refgraph::RefGraph)>,
    /// Directory backups: the files cache to use, if any.
    files_cache: Option<crate::ingest::FilesCacheOptions>,
}

impl std::ops::Deref for Writer {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        &self.repo
    }
}

/// Mutations inside the engine change the catalog and index in place; no
/// public method of [`Repository`] takes `&mut self`, so this grants
/// nothing beyond the writer's own API.
impl std::ops::DerefMut for Writer {
    fn deref_mut(&mut self) -> &mut Repository {
        &mut self.repo
    }
}

/// Summary for `tessera stats`.
#[derive(Clone, Debug, Serialize)]
pub struct RepoStats {
    pub location: String,
    pub generation: Generation,
    pub hash: HashAlgo,
    pub chunker: String,
    pub container_size: u32,
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
    pub index_data_entries: usize,
    pub index_recipe_entries: usize,
    pub index_segments: usize,
    pub index_memory_bytes: usize,
    pub index_bytes_per_entry: f64,
    /// The layout chosen at `init`.
    pub layout: crate::layout::LayoutKind,
    /// MFDedup: each chain's volumes, active categories and trend.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<crate::layout::mfdedup::ChainStats>,
}

/// Newest manifest generation listed by the store, if any.
fn latest_generation(store: &dyn ObjectStore) -> Result<Option<Generation>> {
    Ok(store
        .list(KeyKind::Manifest)?
        .iter()
        .filter_map(ObjectKey::generation)
        .max())
}

/// The newest generation's manifest, retrying when a newer generation
/// superseded and removed it between the listing and the read.
pub(crate) fn read_newest(objects: &SealedStore) -> Result<Manifest> {
    let mut attempt = 0;
    loop {
        let generation = latest_generation(&**objects.store())?
            .ok_or_else(|| Error::NoRepository(objects.location().into()))?;
        let key = ObjectKey::Manifest(generation);
        match objects.get(&key) {
            Ok(b) => return Manifest::decode(&b, ObjectRef::Object(key)),
            Err(Error::MissingObject(_)) if attempt + 1 < OPEN_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
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
        if !index.is_memory() && !layout.is_containers() {
            return Err(Error::invalid(format!(
                "--index {index} is not built for the {layout} layout yet (its NDF index is per version chain); use --index memory"
            )));
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

    /// The repository's unsealed config, read first: it says which format
    /// version and sealing the other objects have. A repository without
    /// one is of format version 1, named as such.
    fn read_seal(backend: &dyn ObjectStore, generation: Generation) -> Result<RepoSeal> {
        let repository = || -> Box<crate::error::Subject> {
            Box::new(
                format!("repository at {}", backend.location())
                    .as_str()
                    .into(),
            )
        };
        match backend.get(&ObjectKey::Config) {
            // The config's version is the repository's: name the repository.
            Ok(b) => RepoSeal::decode(&b).map_err(|e| match e {
                Error::UnsupportedVersion {
                    found, supported, ..
                } => Error::UnsupportedVersion {
                    object: repository(),
                    found,
                    supported,
                },
                e => e,
            }),
            Err(Error::MissingObject(_)) => {
                let m = backend.get(&ObjectKey::Manifest(generation))?;
                match m.get(..12) {
                    Some(h) if h[..8] == *b"TSRAMANI" => Err(Error::UnsupportedVersion {
                        object: repository(),
                        found: u32::from_le_bytes(h[8..12].try_into().unwrap()),
                        supported: crate::catalog::VERSION,
                    }),
                    _ => Err(Error::missing(ObjectRef::Object(ObjectKey::Config))),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Open the master key with a password from `password`: the first key
    /// slot it opens. Returns the key and that slot's id.
    fn unlock(
        backend: &dyn ObjectStore,
        seal: &RepoSeal,
        password: PasswordSource,
    ) -> Result<(MasterKey, u64)> {
        let slots = Self::read_slots(backend)?;
        if slots.is_empty() {
            return Err(Error::Key(format!(
                "the repository at {} is encrypted but has no key slots (keys/ is empty): it cannot be opened",
                backend.location()
            )));
        }
        let password = password()?;
        for slot in &slots {
            if let Some(key) = slot.unwrap(&password, &seal.repo_id)? {
                return Ok((key, slot.id));
            }
        }
        Err(Error::Key(format!(
            "wrong password: it opens none of the {} key slots of the repository at {}",
            slots.len(),
            backend.location()
        )))
    }

    fn read_slots(backend: &dyn ObjectStore) -> Result<Vec<KeySlot>> {
        let mut slots = Vec::new();
        for key in backend.list(KeyKind::KeySlot)? {
            if let ObjectKey::KeySlot(_) = key {
                let b = backend.get(&key)?;
                let slot = KeySlot::decode(&b, &key.name())?;
                if ObjectKey::KeySlot(slot.id) != key {
                    return Err(Error::corrupt(
                        key.name().as_str(),
                        format!("holds key slot {}", slot.id),
                    ));
                }
                slots.push(slot);
            }
        }
        slots.sort_by_key(|s| s.id);
        Ok(slots)
    }

    /// Open for reading; `password` is asked for only if the repository is
    /// encrypted.
    pub fn open_with(backend: Arc<dyn ObjectStore>, password: PasswordSource) -> Result<Self> {
        Self::open_inner(backend, password, None)
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
        if latest_generation(&*backend)?.is_none() {
            return Err(Error::NoRepository(backend.location().into()));
        }
        // Best effort: a read-only store, or a writer holding the
        // exclusive lock, never keeps a reader out.
        let lock = RepoLock::acquire_shared(backend.clone(), command, true).ok();
        let mut repo = Self::open_with(backend, password)?;
        repo.reader_lock = lock;
        Ok(repo)
    }

    /// [`open_with`](Self::open_with); with `bad_segments`, an index
    /// segment that cannot be read is recorded there and skipped (for
    /// `check`, which then reports it and goes on) instead of failing.
    pub(crate) fn open_inner(
        backend: Arc<dyn ObjectStore>,
        password: PasswordSource,
        bad_segments: Option<&mut Vec<(ObjectKey, Error)>>,
    ) -> Result<Self> {
        let generation = latest_generation(&*backend)?
            .ok_or_else(|| Error::NoRepository(backend.location().into()))?;
        let seal = Self::read_seal(&*backend, generation)?;
        let (sealer, key) = match seal.encryption {
            Encryption::None => (Sealer::new(None, seal.compression), None),
            Encryption::Xaes256Gcm | Encryption::Xchacha20Poly1305 => {
                let (master, slot) = Self::unlock(&*backend, &seal, password)?;
                let kind = seal.encryption.cipher().expect("encrypted");
                (
                    Sealer::new(Some(master.cipher(kind)), seal.compression),
                    Some((Arc::new(master), slot)),
                )
            }
        };
        let objects = SealedStore::new(backend, Arc::new(sealer));
        Self::load_retrying(objects, seal, key, bad_segments)
    }

    /// Load the newest generation through `objects`, retrying when a
    /// newer generation superseded and removed what was being read.
    pub(crate) fn load_retrying(
        objects: SealedStore,
        seal: RepoSeal,
        key: Option<(Arc<MasterKey>, u64)>,
        mut bad_segments: Option<&mut Vec<(ObjectKey, Error)>>,
    ) -> Result<Self> {
        let mut attempt = 0;
        loop {
            if let Some(b) = bad_segments.as_deref_mut() {
                b.clear();
            }
            let loaded = Self::load(
                objects.clone(),
                seal.clone(),
                key.clone(),
                bad_segments.as_deref_mut(),
            );
            match loaded {
                Err(Error::MissingObject(_)) if attempt + 1 < OPEN_ATTEMPTS => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(5 * attempt as u64));
                }
                r => return r,
            }
        }
    }

    fn load(
        objects: SealedStore,
        seal: RepoSeal,
        key: Option<(Arc<MasterKey>, u64)>,
        mut bad_segments: Option<&mut Vec<(ObjectKey, Error)>>,
    ) -> Result<Self> {
        let generation = latest_generation(&**objects.store())?
            .ok_or_else(|| Error::NoRepository(objects.location().into()))?;
        let key_name = ObjectKey::Manifest(generation);
        let name = ObjectRef::Object(key_name.clone());
        let manifest = Manifest::decode(&objects.get(&key_name)?, name.clone())?;
        if manifest.generation != generation {
            return Err(Error::corrupt(
                name,
                format!("claims generation {}", manifest.generation),
            ));
        }
        if manifest.config.repo_id != seal.repo_id {
            return Err(Error::corrupt(
                name,
                format!(
                    "belongs to repository {}, the config names {}",
                    manifest.config.repo_id, seal.repo_id
                ),
            ));
        }
        let fingerprinter = match &key {
            Some((master, _)) => {
                Fingerprinter::keyed(manifest.config.hash, &master.fingerprint_key())
            }
            None => manifest.config.hash.into(),
        };
        let mut index = match manifest.config.index {
            crate::index::IndexKind::Memory => Index::default(),
            crate::index::IndexKind::Disk => disk_index(crate::index::disk::DiskConfig::default())?,
        };
        // Entries naming a container the manifest does not list are
        // ignored: a segment merged from a concurrent writer may hold
        // entries of containers a GC reclaimed (docs/FORMAT.md).
        let listed: HashSet<ContainerId> = manifest.containers.iter().map(|c| c.id).collect();
        let filter = manifest.config.layout == crate::layout::LayoutKind::Containers;
        for seg in &manifest.index_segments {
            let name = ObjectRef::Object(seg.clone());
            let read = objects
                .get(seg)
                .map_err(|e| match e {
                    Error::MissingObject(_) => e.about(name.clone()),
                    e => e,
                })
                // The decoder names what it is given; the error names the key.
                .and_then(|bytes| {
                    decode_segment(&bytes, &name.to_string()).map_err(|e| e.about(name))
                });
            let entries = match (read, bad_segments.as_deref_mut()) {
                (Ok(entries), _) => entries,
                (Err(e), Some(bad)) => {
                    bad.push((seg.clone(), e));
                    continue;
                }
                (Err(e), None) => return Err(e),
            };
            for e in entries {
                if !filter || listed.contains(&e.container) {
                    index.insert(e);
                }
            }
        }
        // On disk: the loaded entries become sorted runs before the first lookup.
        index.flush();
        let metrics = Arc::new(Metrics::default());
        let store = ContainerStore::new(
            objects.clone(),
            manifest.config.hash,
            manifest.config.trace,
            metrics.clone(),
        );
        let mut repo = Repository {
            objects,
            manifest,
            index,
            store,
            metrics,
            fingerprinter,
            seal,
            key,
            mf_located: Default::default(),
            reserved: None,
            reader_lock: None,
            writer_token: None,
            threads: 0,
        };
        if repo.manifest.config.layout == crate::layout::LayoutKind::Mfdedup {
            repo.index = crate::layout::mfdedup::recipe_index(&repo)?;
        }
        Ok(repo)
    }

    /// Open for writing. Backups, forgets and GCs run at once from
    /// several processes: a writer that finds no other lock holder takes
    /// the exclusive lock for a moment, removes the leftovers of
    /// interrupted mutations, and keeps a shared lock; one that finds
    /// others takes a shared lock, removes nothing (unlisted objects may be
    /// theirs, in flight), and reserves ranges of container and segment
    /// ids so its objects never collide with theirs. Each publishes by
    /// compare-and-swap and merges on conflict (see [`Writer::publish`]).
    /// The MFDedup layout keeps one writer at a time (exclusive lock).
    pub fn open_writer(backend: Arc<dyn ObjectStore>, command: &str) -> Result<Writer> {
        Self::open_writer_with(backend, command, &no_password)
    }

    /// [`open_writer`](Self::open_writer) with a password source.
    pub fn open_writer_with(
        backend: Arc<dyn ObjectStore>,
        command: &str,
        password: PasswordSource,
    ) -> Result<Writer> {
        if latest_generation(&*backend)?.is_none() {
            return Err(Error::NoRepository(backend.location().into()));
        }
        let mfdedup =
            |r: &Repository| r.manifest.config.layout == crate::layout::LayoutKind::Mfdedup;
        match RepoLock::acquire_brief(backend.clone(), command) {
            Ok(alone) => {
                let mut repo = Self::open_with(backend, password)?;
                let leftovers = repo.remove_leftovers()?;
                let lock = if mfdedup(&repo) {
                    alone.settle()?;
                    alone
                } else {
                    let shared = alone.downgrade(false)?;
                    // Only containers take part in online GC.
                    repo.writer_token = Some(shared.token());
                    shared
                };
                Ok(Writer {
                    repo,
                    lock: Some(lock),
                    leftovers,
                    staged_refgraph: None,
                    refgraph_mem: None,
                    files_cache: None,
                })
            }
            Err(Error::Locked(why)) => {
                let lock = RepoLock::acquire_shared(backend.clone(), command, false)?;
                let mut repo = Self::open_with(backend, password)?;
                if mfdedup(&repo) {
                    return Err(Error::Locked(format!(
                        "the mfdedup layout has one writer at a time: {why}"
                    )));
                }
                repo.writer_token = Some(lock.token());
                let mut w = Writer {
                    repo,
                    lock: Some(lock),
                    leftovers: Leftovers::default(),
                    staged_refgraph: None,
                    refgraph_mem: None,
                    files_cache: None,
                };
                w.reserve_ids()?;
                Ok(w)
            }
            Err(e) => Err(e),
        }
    }

    /// The first container id a new writer of this repository allocates:
    /// the reserved range's next, or the manifest's allocator.
    pub(crate) fn first_container_id(&self) -> ContainerId {
        match &self.reserved {
            Some(r) => ContainerId(r.container.load(std::sync::atomic::Ordering::Relaxed)),
            None => self.manifest.next_container_id,
        }
    }

    /// A writer's containers up to (not including) `next` are allocated:
    /// a reserved range moves on past them.
    pub(crate) fn containers_allocated(&self, next: ContainerId) {
        if let Some(r) = &self.reserved {
            r.container
                .fetch_max(next.0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Objects no manifest lists: what an interrupted mutation left behind.
    pub fn find_leftovers(&self) -> Result<Vec<String>> {
        Ok(self.leftover_keys()?.iter().map(ObjectKey::name).collect())
    }

    /// [`find_leftovers`](Self::find_leftovers) as keys: unlisted containers
    /// and index segments (strays under their prefixes included) and older
    /// manifest generations.
    pub fn leftover_keys(&self) -> Result<Vec<ObjectKey>> {
        let listed: HashSet<ObjectKey> = self
            .manifest
            .containers
            .iter()
            .map(|c| ObjectKey::Container(c.id))
            .chain(self.manifest.index_segments.iter().cloned())
            .chain(self.manifest.mfdedup.keys())
            .chain(
                self.manifest
                    .refgraph
                    .iter()
                    .flat_map(|g| g.segments.iter().cloned()),
            )
            .collect();
        let mut out = Vec::new();
        for kind in [
            KeyKind::Container,
            KeyKind::IndexSegment,
            KeyKind::Volume,
            KeyKind::NdfTable,
            KeyKind::RefGraph,
        ] {
            out.extend(
                self.objects
                    .list(kind)?
                    .into_iter()
                    .filter(|k| !listed.contains(k)),
            );
        }
        let current = self.manifest.generation;
        out.extend(
            self.objects
                .list(KeyKind::Manifest)?
                .into_iter()
                .filter(|k| k.generation().is_some_and(|g| g < current)),
        );
        Ok(out)
    }

    fn remove_leftovers(&self) -> Result<Leftovers> {
        let objects = self.leftover_keys()?;
        for key in &objects {
            self.objects.delete(key)?;
        }
        let temporaries = self.objects.store().clean_interrupted()?;
        if !objects.is_empty() || temporaries > 0 {
            self.objects.barrier()?;
        }
        Ok(Leftovers {
            objects: objects.iter().map(ObjectKey::name).collect(),
            temporaries,
        })
    }

    /// Write the index entries a mutation added as one new segment and return
    /// its key (to be listed in the next manifest).
    pub(crate) fn write_segment(&self, next: &mut Manifest, entries: &[IndexEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let id = match &self.reserved {
            Some(r) => r.segment.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            None => next.next_segment_id,
        };
        next.next_segment_id = next.next_segment_id.max(id + 1);
        let key = ObjectKey::IndexSegment(id);
        self.objects.put(&key, encode_segment(entries))?;
        next.index_segments.push(key);
        Ok(())
    }

    /// When the manifest lists more than [`MAX_SEGMENTS`] index segments,
    /// replace them with one segment holding the whole in-memory index (which
    /// must already include the mutation's entries). Returns the keys the new
    /// manifest supersedes, to delete after publishing.
    pub(crate) fn compact_segments(&self, next: &mut Manifest) -> Result<Vec<ObjectKey>> {
        if next.index_segments.len() <= MAX_SEGMENTS {
            return Ok(Vec::new());
        }
        // Every copy of every chunk (an older copy is still some backup's).
        let (d, r) = self.index.len();
        let mut entries: Vec<IndexEntry> = Vec::with_capacity(d + r + self.index.extra_copies());
        entries.extend(self.index.entries());
        sort_entries(&mut entries);
        let superseded = std::mem::take(&mut next.index_segments);
        self.write_segment(next, &entries)?;
        Ok(superseded)
    }

    /// Where the chunk `fp` of `kind` is found (its newest copy): the one
    /// place the repository's layout answers it (containers today;
    /// MFDedup's categories when that layout is chosen at `init`). A recipe
    /// entry's chunk is located with [`locate_copy`](Self::locate_copy).
    /// (Unused since recipes name copies; kept as the layouts' contract.)
    #[inline]
    #[allow(dead_code)]
    pub(crate) fn locate(&self, kind: ChunkKind, fp: &crate::Fingerprint) -> Option<ContainerId> {
        use crate::layout::{Layout, LayoutKind};
        match self.manifest.config.layout {
            LayoutKind::Containers => crate::layout::ContainerLayout.locate(self, kind, fp),
            LayoutKind::Mfdedup => crate::layout::MfdedupLayout.locate(self, kind, fp),
        }
    }

    /// MFDedup: exactly what forgetting `ids` would free, from the volume
    /// headers (what `forget --dry-run` prints).
    pub fn forget_space(
        &self,
        ids: &[BackupId],
    ) -> Result<crate::layout::mfdedup::forget::ForgetSpace> {
        self.require_mfdedup("forget --dry-run space answers")?;
        crate::layout::mfdedup::forget::forget_space(self, ids)
    }

    /// MFDedup: restore into a file by positional writes (out-of-order
    /// restore, no temporary copy). Other layouts write it in order.
    pub fn restore_to_file(
        &self,
        backup: &BackupEntry,
        file: &mut std::fs::File,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<RestoreReport> {
        match self.manifest.config.layout {
            crate::layout::LayoutKind::Mfdedup => {
                crate::layout::mfdedup::restore::restore_to_file(self, backup, file, opts, progress)
            }
            crate::layout::LayoutKind::Containers => {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
                self.restore_to(backup, &mut w, opts, progress)
            }
        }
    }

    /// MFDedup: each chain's layout (volumes, active categories, trend).
    pub fn chain_stats(&self) -> Vec<crate::layout::mfdedup::ChainStats> {
        crate::layout::mfdedup::chain_stats(&self.manifest)
    }

    fn require_mfdedup(&self, what: &str) -> Result<()> {
        if self.manifest.config.layout != crate::layout::LayoutKind::Mfdedup {
            return Err(Error::invalid(format!(
                "{what} need the mfdedup layout (this repository uses {})",
                self.manifest.config.layout
            )));
        }
        Ok(())
    }

    /// Where copy `copy` of the chunk `fp` is: what a restore, a mark or a
    /// check reads for a recipe entry (each backup reads the copies its own
    /// ingest chose).
    #[inline]
    pub(crate) fn locate_copy(
        &self,
        kind: ChunkKind,
        fp: &crate::Fingerprint,
        copy: crate::index::CopyNo,
    ) -> Option<ContainerId> {
        use crate::layout::{Layout, LayoutKind};
        match self.manifest.config.layout {
            LayoutKind::Containers => {
                crate::layout::ContainerLayout.locate_copy(self, kind, fp, copy)
            }
            // MFDedup never rewrites: every chunk is copy 0.
            LayoutKind::Mfdedup => crate::layout::MfdedupLayout.locate_copy(self, kind, fp, copy),
        }
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    pub fn config(&self) -> &RepoConfig {
        &self.manifest.config
    }
    pub fn backups(&self) -> &[BackupEntry] {
        &self.manifest.backups
    }
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
    /// How this repository computes chunk fingerprints (keyed when
    /// encrypted).
    pub fn fingerprinter(&self) -> &Fingerprinter {
        &self.fingerprinter
    }
    /// Use `n` worker threads for backups and restores (0, the default:
    /// every available core). Layouts and restored bytes do not depend on it.
    pub fn set_threads(&mut self, n: usize) {
        self.threads = n;
    }
    /// Worker threads backups and restores use.
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => crate::ingest::default_threads(),
            n => n,
        }
    }
    /// The unsealed config: format version, encryption, default compression.
    pub fn seal_config(&self) -> &RepoSeal {
        &self.seal
    }
    /// The key slots (`tessera key list`); empty when not encrypted.
    pub fn key_slots(&self) -> Result<Vec<KeySlot>> {
        Self::read_slots(&**self.objects.store())
    }
    /// The key slot whose password opened this handle.
    pub fn key_slot_used(&self) -> Option<u64> {
        self.key.as_ref().map(|(_, id)| *id)
    }
    pub fn index(&self) -> &Index {
        &self.index
    }
    pub fn store(&self) -> &ContainerStore {
        &self.store
    }
    /// The object store underneath the sealing layer.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        self.objects.store()
    }
    /// The sealed view every object read and write goes through.
    pub fn objects(&self) -> &SealedStore {
        &self.objects
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
        let sum = |kind: ChunkKind| -> (usize, u64) {
            m.containers
                .iter()
                .filter(|c| c.kind == kind)
                .fold((0, 0), |(n, b), c| (n + 1, b + c.logical_bytes))
        };
        let (dc, db) = sum(ChunkKind::Data);
        let (rc, rb) = sum(ChunkKind::Recipe);
        let logical: u64 = m.backups.iter().map(|b| b.logical_bytes).sum();
        let (de, re) = self.index.len();
        let mem = self.index.memory_bytes();
        RepoStats {
            location: self.objects.location(),
            generation: m.generation,
            hash: m.config.hash,
            chunker: m.config.chunker.describe(),
            container_size: m.config.container_size,
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
            index_data_entries: de,
            index_recipe_entries: re,
            index_segments: m.index_segments.len(),
            index_memory_bytes: mem,
            index_bytes_per_entry: if de + re == 0 {
                0.0
            } else {
                mem as f64 / (de + re) as f64
            },
            layout: m.config.layout,
            chains: crate::layout::mfdedup::chain_stats(m),
        }
    }

    // Restores, listings, check and GC planning: implemented in their
    // modules (`restore`, `salvage`, `check`, `gc`, `recipe::reader`).

    /// The entries of a backup (`tessera ls`): a directory backup's tar
    /// entries in stream order; a file or stream backup is one file named
    /// after its source. The backup is restored (to a pipe) to read them,
    /// so a damaged backup fails as its restore would.
    pub fn list_entries(
        &self,
        backup: &BackupEntry,
        visit: &mut dyn FnMut(crate::archive::Listed) -> Result<()>,
    ) -> Result<()> {
        crate::restore::list_entries(self, backup, visit)
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
        crate::restore::restore_to(self, backup, out, opts, progress)
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
        crate::restore::restore_into(self, backup, target, opts, progress)
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
        crate::restore::restore_into_selected(self, backup, target, opts, include, progress)
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
        crate::salvage::restore_damaged_to(self, b, out, progress)
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
        crate::salvage::restore_damaged_into(self, b, target, progress)
    }

    /// Mark (with the options' marker) and select: what [`gc`](Writer::gc)
    /// would do. Changes nothing.
    pub fn plan_gc(&self, opts: &GcOptions) -> Result<GcPlan> {
        if self.manifest.config.layout == crate::layout::LayoutKind::Mfdedup {
            return Err(crate::layout::mfdedup::not_gc());
        }
        crate::gc::plan_gc(self, opts)
    }

    /// [`plan_gc`](Self::plan_gc) with another mark: where the physical and
    /// focused marks come in.
    pub fn plan_gc_marked(&self, opts: &GcOptions, marker: &dyn Marker) -> Result<GcPlan> {
        if self.manifest.config.layout == crate::layout::LayoutKind::Mfdedup {
            return Err(crate::layout::mfdedup::not_gc());
        }
        crate::gc::plan_gc_marked(self, opts, marker)
    }

    /// Verify the repository. Errors are only returned for failures of the
    /// check itself (e.g. the backend cannot be listed); everything wrong
    /// with the repository is a [`Problem`](crate::check::Problem) in the report.
    pub fn check(&self, opts: &CheckOptions) -> Result<CheckReport> {
        crate::check::check(self, opts)
    }

    /// A [`RecipeReader`] over this repository keeping up to `containers`
    /// recipe containers.
    pub fn recipe_reader(&self, containers: usize) -> RecipeReader<'_> {
        crate::recipe::reader::recipe_reader(self, containers)
    }

    /// Each data chunk of a backup in order, with the container its copy
    /// is read from (what a restore reads, without reading data).
    pub fn chunk_homes(
        &self,
        b: &BackupEntry,
    ) -> Result<Vec<(crate::recipe::RecipeEntry, ContainerId)>> {
        let mut reader = self.recipe_reader(8);
        let mut w = reader.entries(b.root_fp()?, b.root_level)?;
        let mut out = Vec::with_capacity(b.chunks as usize);
        while let Some(e) = w.next()? {
            let c = self
                .locate_copy(ChunkKind::Data, &e.fp, e.copy)
                .ok_or_else(|| {
                    Error::corrupt(
                        format!("backup {}", b.id),
                        format!(
                            "chunk {} (copy {}) is not in the index",
                            e.fp.to_hex(),
                            e.copy
                        ),
                    )
                })?;
            out.push((e, c));
        }
        Ok(out)
    }
}

impl Writer {
    // Backups and GC: implemented in `ingest` and `gc`.

    /// Run a backup: `feed` writes the backup's bytes (or trace entries) into
    /// the [`Ingest`]; then the recipe is closed, the containers and index
    /// segment written, and a new manifest generation published. On any error
    /// nothing is published and the repository is unchanged.
    pub fn backup_with(
        &mut self,
        opts: &BackupOptions,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<BackupReport> {
        crate::ingest::backup_with(self, opts, feed)
    }

    /// Back up a byte stream (a file, or stdin under a name).
    pub fn backup_reader(
        &mut self,
        opts: &BackupOptions,
        reader: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupReport> {
        crate::ingest::backup_reader(self, opts, reader, progress)
    }

    /// Back up a directory: its files' contents, then their metadata.
    pub fn backup_tree(
        &mut self,
        opts: &BackupOptions,
        root: &std::path::Path,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(BackupReport, crate::archive::TreeStats)> {
        crate::ingest::backup_tree(self, opts, root, progress)
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
        crate::ingest::backup_paths(self, opts, scan, progress)
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
        crate::ingest::backup_paths(self, opts, scan, progress)
    }

    /// Use a files cache for the directory backups of this writer (none by
    /// default): unchanged files are not read again (see
    /// [`crate::ingest::FilesCacheOptions`]).
    pub fn set_files_cache(&mut self, cache: Option<crate::ingest::FilesCacheOptions>) {
        self.files_cache = cache;
    }

    /// The files cache set by [`set_files_cache`](Self::set_files_cache).
    pub fn files_cache(&self) -> Option<&crate::ingest::FilesCacheOptions> {
        self.files_cache.as_ref()
    }

    /// Back up a fingerprint trace: (fingerprint, size) per chunk.
    pub fn backup_trace(
        &mut self,
        opts: &BackupOptions,
        chunks: impl IntoIterator<Item = Result<(Fingerprint, u32)>>,
    ) -> Result<BackupReport> {
        crate::ingest::backup_trace(self, opts, chunks)
    }

    /// Back up every member of `group` interleaved (see the module docs):
    /// one chunk of each member in turn, into shared containers; then one
    /// manifest generation lists them all, in order. All or nothing: on any
    /// error none of them is published.
    pub fn backup_interleaved(
        &mut self,
        group: Vec<(BackupOptions, GroupInput)>,
    ) -> Result<Vec<BackupReport>> {
        crate::ingest::interleave::backup_interleaved(self, group)
    }

    /// Reclaim the space of chunks no retained backup references: mark,
    /// select, sweep (naive copy-forward or GCCDF reordering), then publish
    /// a new generation before deleting the old containers.
    pub fn gc(&mut self, opts: &GcOptions) -> Result<GcReport> {
        if self.manifest.config.layout == crate::layout::LayoutKind::Mfdedup {
            return Err(crate::layout::mfdedup::not_gc());
        }
        crate::gc::gc(self, opts)
    }

    /// Carry out a plan: sweep, publish a new generation, then delete the
    /// reclaimed containers. A dry-run plan changes nothing; a plan with
    /// nothing to reclaim only records that the forgotten backups are done.
    pub fn gc_with(&mut self, plan: GcPlan) -> Result<GcReport> {
        crate::gc::gc_with(self, plan)
    }

    /// Compress the chunks of the following backups with `compression`
    /// instead of the repository's default (`backup --compression`).
    pub fn set_compression(&mut self, compression: Compression) {
        self.repo.store = self.repo.store.with_compression(compression);
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
        if let Some((_, used)) = &mut self.repo.key {
            *used = id;
        }
        let store = self.objects.store();
        store.delete(&ObjectKey::KeySlot(old))?;
        store.barrier()?;
        Ok(id)
    }

    /// Leftovers removed when this writer opened the repository.
    /// Rebuild an on-disk index with other tuning (flush size, cache
    /// size): for tests and benchmarks. Refused on a memory index.
    pub fn tune_disk_index(&mut self, cfg: crate::index::disk::DiskConfig) -> Result<()> {
        if self.repo.manifest.config.index != crate::index::IndexKind::Disk {
            return Err(Error::invalid("the repository's index is not on disk"));
        }
        let mut index = disk_index(cfg)?;
        load_segments(&self.repo.objects, &self.repo.manifest, &mut index)?;
        self.repo.index = index;
        Ok(())
    }

    pub fn leftovers(&self) -> &Leftovers {
        &self.leftovers
    }

    /// The stale lock (of a crashed writer) broken to open this writer, if
    /// any: commands print its one-line notice.
    pub fn broken_lock(&self) -> Option<&crate::lock::BrokenLock> {
        self.lock.as_ref().and_then(|l| l.broken())
    }

    /// Remove backups from the catalog (logical deletion). Their chunks stay
    /// until garbage collection.
    pub fn forget(&mut self, ids: &[BackupId]) -> Result<Vec<BackupEntry>> {
        for id in ids {
            if self.manifest.backup(*id).is_none() {
                return Err(Error::Snapshot(format!(
                    "no snapshot '{id}' (see `tessera snapshots`)"
                )));
            }
        }
        if self.manifest.config.layout == crate::layout::LayoutKind::Mfdedup {
            return crate::layout::mfdedup::forget::forget(self, ids).map(|(gone, _)| gone);
        }
        let mut next = self.manifest.clone();
        let (gone, kept): (Vec<_>, Vec<_>) =
            next.backups.into_iter().partition(|b| ids.contains(&b.id));
        next.backups = kept;
        next.forgotten.extend(gone.iter().cloned());
        self.publish(next, &[])?;
        Ok(gone)
    }

    /// Publish `next` as the new generation: make every new object durable,
    /// put the manifest, then delete what it supersedes.
    pub(crate) fn publish(&mut self, next: Manifest, superseded: &[ObjectKey]) -> Result<()> {
        self.publish_merged(next, superseded).map(drop)
    }

    /// [`publish`](Self::publish), returning the backups `next` added as
    /// they were published: when another writer published first, the
    /// change from our generation to `next` is merged into theirs
    /// ([`crate::catalog::Change`]), which may renumber them.
    pub(crate) fn publish_merged(
        &mut self,
        mut next: Manifest,
        superseded: &[ObjectKey],
    ) -> Result<Vec<BackupEntry>> {
        if let Some(graph) = self.staged_refgraph.take() {
            next.refgraph = Some(graph);
        }
        let change = crate::catalog::Change::between(&self.manifest, &next);
        let known: HashSet<BackupId> = self.manifest.backups.iter().map(|b| b.id).collect();
        let mut added: Vec<BackupEntry> = next
            .backups
            .iter()
            .filter(|b| !known.contains(&b.id))
            .cloned()
            .collect();
        let mut graph = crate::refgraph::GraphMerge::new(self, &next);
        let ours_ids: Vec<BackupId> = added.iter().map(|b| b.id).collect();
        let mut first = Some(next);
        let done = self.commit_with(|newest, ours| match first.take() {
            Some(n) if ours => Ok(n),
            _ => {
                let (mut m, a) = change.apply(newest)?;
                // FGC's reference graph: our delta grafted onto theirs, or
                // theirs onto our rewritten one (see `refgraph::graft`).
                let remap = ours_ids
                    .iter()
                    .zip(&a)
                    .filter(|(o, n)| **o != n.id)
                    .map(|(o, n)| (*o, n.id))
                    .collect();
                graph.merge(newest, &mut m, &remap);
                added = a;
                Ok(m)
            }
        });
        let published = done.is_ok().then(|| self.manifest.clone());
        graph.finish(self, published.as_ref());
        done?;
        for key in superseded {
            self.objects.delete(key)?;
        }
        self.objects.barrier()?;
        Ok(added)
    }

    /// The compare-and-swap loop every publish goes through: `make` turns
    /// the newest generation (`true`: the one this writer holds) into the
    /// next; it is put as `manifests/<g+1>` only if absent, else the newest
    /// is read again and `make` asked again. After a merge the writer's
    /// catalog and index are the newest again. Superseded generations are
    /// removed only when no other writer holds a lock (a writer still
    /// holding an older generation must never find its successor's key
    /// free again); otherwise the next writer to open alone removes them.
    pub(crate) fn commit_with(
        &mut self,
        mut make: impl FnMut(&Manifest, bool) -> Result<Manifest>,
    ) -> Result<()> {
        let mut base: Option<Manifest> = None;
        let mut next = make(&self.manifest, true)?;
        let mut attempts = 0u32;
        loop {
            let from = base.as_ref().unwrap_or(&self.manifest).generation;
            next.generation = from.next();
            self.objects.barrier()?;
            if self
                .objects
                .put_if_absent(&ObjectKey::Manifest(next.generation), next.encode())?
            {
                break;
            }
            attempts += 1;
            if attempts > 1000 {
                return Err(Error::Locked(
                    "could not publish: other writers kept publishing first".into(),
                ));
            }
            let newest = read_newest(&self.objects)?;
            next = make(&newest, false)?;
            base = Some(newest);
        }
        let published = next.generation;
        let merged = base.is_some();
        self.manifest = next;
        self.mf_located = Default::default();
        if merged {
            self.reload()?;
        }
        self.remove_old_generations(published)?;
        Ok(())
    }

    /// Reload the newest catalog and index (after a merged publish the
    /// in-memory index lacks the other writers' entries and may still name
    /// containers a GC reclaimed).
    pub(crate) fn reload(&mut self) -> Result<()> {
        let fresh = Repository::load_retrying(
            self.objects.clone(),
            self.seal.clone(),
            self.key.clone(),
            None,
        )?;
        self.repo.manifest = fresh.manifest;
        self.repo.index = fresh.index;
        self.repo.mf_located = Default::default();
        Ok(())
    }

    /// Delete manifest generations older than `published` if this writer
    /// is the only lock holder (see [`commit_with`](Self::commit_with)).
    fn remove_old_generations(&self, published: Generation) -> Result<()> {
        let mine = self.lock.as_ref().map(|l| l.token());
        let others = crate::lock::shared_holders(&**self.objects.store())?
            .into_iter()
            .any(|(t, _)| Some(&t) != mine.as_ref());
        if others {
            return Ok(());
        }
        for key in self.objects.list(KeyKind::Manifest)? {
            if key.generation().is_some_and(|g| g < published) {
                self.objects.delete(&key)?;
            }
        }
        Ok(())
    }

    /// A joining writer's id ranges: reserved in a generation of their own
    /// (compare-and-swap like any publish), far enough above the
    /// allocators that a writer allocating from them never reaches them.
    fn reserve_ids(&mut self) -> Result<()> {
        let mut range = (0, 0);
        self.commit_with(|newest, _| {
            let mut m = newest.clone();
            let c = m.next_container_id.0 + RESERVE_GAP;
            // One range serves index and reference graph segments (two
            // key spaces), above both counters.
            let graph = m.refgraph.as_ref().map_or(0, |g| g.next_segment);
            let s = m.next_segment_id.max(graph) + RESERVE_SEGMENT_GAP;
            m.next_container_id = ContainerId(c + RESERVE_CONTAINERS);
            m.next_segment_id = s + RESERVE_SEGMENTS;
            if let Some(g) = m.refgraph.as_mut() {
                g.next_segment = s + RESERVE_SEGMENTS;
            }
            range = (c, s);
            Ok(m)
        })?;
        self.repo.reserved = Some(Reserved {
            container: range.0.into(),
            segment: range.1.into(),
        });
        Ok(())
    }

    /// MFDedup: forget `ids`, returning exactly what was freed (the answer
    /// [`forget_space`](Repository::forget_space) gave once arranged).
    pub fn forget_freeing(
        &mut self,
        ids: &[BackupId],
    ) -> Result<(
        Vec<BackupEntry>,
        crate::layout::mfdedup::forget::ForgetSpace,
    )> {
        self.require_mfdedup("space answers")?;
        crate::layout::mfdedup::forget::forget(self, ids)
    }

    /// MFDedup: arrange the chains that fell behind (`--no-arrange`), at
    /// most `limit` versions each.
    pub fn arrange(
        &mut self,
        limit: Option<u32>,
    ) -> Result<Vec<crate::layout::mfdedup::avar::ArrangeReport>> {
        self.require_mfdedup("arranging")?;
        crate::layout::mfdedup::avar::arrange_all(self, limit)
    }

    /// MFDedup: arrange one chain, at most `limit` versions (the lab keeps
    /// arranging a set number of versions behind this way).
    pub fn arrange_chain(
        &mut self,
        chain: &str,
        limit: Option<u32>,
    ) -> Result<crate::layout::mfdedup::avar::ArrangeReport> {
        self.require_mfdedup("arranging")?;
        crate::layout::mfdedup::avar::arrange_chain(self, chain, limit)
    }

    /// MFDedup's `gc`: deletes categories no retained version needs (forget
    /// already did; this finds any a failed forget left) — never copies.
    pub fn mfdedup_gc(&mut self) -> Result<crate::layout::mfdedup::forget::ForgetSpace> {
        self.require_mfdedup("gc by deleting categories")?;
        crate::layout::mfdedup::forget::forget(self, &[]).map(|(_, s)| s)
    }

    /// Release the writer lock (also released on drop).
    pub fn close(mut self) -> Result<()> {
        match self.lock.take() {
            Some(l) => l.release(),
            None => Ok(()),
        }
    }
}

/// Used by ingest to list the containers it wrote.
/// An empty on-disk index under [`index_dir`].
fn disk_index(cfg: crate::index::disk::DiskConfig) -> Result<Index> {
    let base = index_dir();
    Index::on_disk(&base, cfg).map_err(|e| {
        Error::invalid(format!(
            "cannot create the on-disk index under {} ({e}); set TESSERA_INDEX_DIR",
            base.display()
        ))
    })
}

/// Insert the entries of every index segment the manifest lists, in order
/// (a later entry for the same fingerprint, copy and kind wins).
fn load_segments(objects: &SealedStore, manifest: &Manifest, index: &mut Index) -> Result<()> {
    for seg in &manifest.index_segments {
        let name = ObjectRef::Object(seg.clone());
        let bytes = objects.get(seg).map_err(|e| match e {
            Error::MissingObject(_) => e.about(name.clone()),
            e => e,
        })?;
        // The decoder names what it is given; the error names the key.
        let entries = decode_segment(&bytes, &name.to_string()).map_err(|e| e.about(name))?;
        for e in entries {
            index.insert(e);
        }
    }
    // On disk: the loaded entries become sorted runs before the first lookup.
    index.flush();
    Ok(())
}

/// Where an on-disk index keeps its private files while a repository is
/// open: `$TESSERA_INDEX_DIR`, else `index/` in the user's cache directory
/// (`$TESSERA_CACHE_DIR`, `$XDG_CACHE_HOME/tessera`, `~/.cache/tessera`),
/// else the temporary directory.
pub fn index_dir() -> std::path::PathBuf {
    std::env::var_os("TESSERA_INDEX_DIR")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| crate::ingest::FilesCacheOptions::default_dir().map(|d| d.join("index")))
        .unwrap_or_else(std::env::temp_dir)
}

/// Tests' spelling of [`ContainerEntry::new`] (the container writer uses
/// that).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn container_entry(
    id: ContainerId,
    kind: ChunkKind,
    chunks: usize,
    logical_bytes: u64,
    object_bytes: u64,
) -> ContainerEntry {
    ContainerEntry::new(id, kind, chunks, logical_bytes, object_bytes)
}
