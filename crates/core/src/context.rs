//! The repository's context: what every operation works on once a
//! repository is open — the sealed object store, the newest manifest, the
//! fingerprint index, container access, metrics — plus what publishing a
//! generation needs (id reservation, index segments, the compare-and-swap
//! loop). The modules that implement operations (ingest, restore, gc,
//! check, the layouts) take a `&Context` to read or a `&mut Context` to
//! mutate; only the face ([`crate::repo`]) decides which handle may do
//! which, and holds the locks.
//!
//! Crash safety rests on one rule, kept by [`Context::commit_with`] and
//! [`crate::publish`]: new objects are made durable, then the new manifest
//! generation is put (atomically), then — and only then — superseded
//! objects are deleted. Anything a crash leaves behind is listed by no
//! manifest and is removed by the next writer that opens alone
//! ([`Context::leftover_keys`]).

use crate::backend::{Generation, KeyKind, ObjectKey, ObjectStore};
use crate::catalog::{BackupEntry, Manifest, RepoConfig, Sections};
use crate::container::{ChunkKind, ContainerId, ContainerStore};
use crate::error::{Error, ObjectRef, Result};
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::ids::IdBuildHasher;
use crate::index::kept_table::KeptTable;
use crate::index::runset::{say_rebuilding, Basis, Lag, RunSet};
use crate::index::{
    decode_segment, encode_segment, encode_segment_sorted, CopyNo, DiskLoad, Index, IndexEntry,
    SegmentView,
};
use crate::metrics::Metrics;
use crate::seal::keys::{KeySlot, MasterKey, Password};
use crate::seal::{Encryption, RepoSeal, SealedStore, Sealer};
use serde::Serialize;
use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Index segments a manifest may list before they are merged into one.
pub const MAX_SEGMENTS: usize = 32;

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
/// Where a recipe entry's chunk is read from: the one question every
/// reader (restore, mark, check, salvage) asks of the layout, answered by
/// the layout chosen when the repository opens
/// ([`crate::layout::Layout::locator`]).
pub trait Locator: Send + Sync {
    /// Where copy `copy` of the chunk `fp` of `kind` is (the copy a recipe
    /// entry names; each backup reads the copies its own ingest chose).
    fn locate_copy(
        &self,
        cx: &Context,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId>;
    /// [`locate_copy`](Self::locate_copy) of a data chunk, for the
    /// consecutive entries of one recipe: `log` is where the layout's
    /// index may expect the next one ([`Index::get_copy_near`]).
    fn locate_data_near(
        &self,
        cx: &Context,
        log: &mut usize,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId> {
        let _ = log;
        self.locate_copy(cx, ChunkKind::Data, fp, copy)
    }
    /// This layout's own index, built instead of loading the manifest's
    /// index segments (MFDedup writes none: it indexes recipe chunks from
    /// their containers); `None` loads the segments.
    fn own_index(&self, _cx: &Context) -> Option<Result<Index>> {
        None
    }
}

/// Containers: the index names every copy of every chunk.
pub struct IndexLocator;

impl Locator for IndexLocator {
    #[inline]
    fn locate_copy(
        &self,
        cx: &Context,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId> {
        cx.index.get_copy(kind, fp, copy)
    }
    #[inline]
    fn locate_data_near(
        &self,
        cx: &Context,
        log: &mut usize,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId> {
        cx.index.get_copy_near(log, fp, copy)
    }
}

/// Derived state a technique keeps between operations on one handle (FGC:
/// its reference graph as of the segments listed), by type. Never
/// persisted; each entry checks itself against the manifest before use.
#[derive(Default)]
pub struct Memo(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Memo {
    pub fn put<T: Any + Send + Sync>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Box::new(value));
    }
    pub fn take<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let b = self.0.remove(&TypeId::of::<T>())?;
        b.downcast().ok().map(|b| *b)
    }
    pub fn contains<T: Any + Send + Sync>(&self) -> bool {
        self.0.contains_key(&TypeId::of::<T>())
    }
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }
    pub fn get_mut<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        self.0.get_mut(&TypeId::of::<T>())?.downcast_mut()
    }
}

/// When an opening loads the fingerprint index. Loading it reads every
/// index segment the manifest lists (and, on disk, rebuilds the sorted
/// runs), which grows with the repository: commands that only read the
/// manifest (listing snapshots, forgetting, statistics, keys) open
/// [`Lazy`](IndexLoad::Lazy) and never pay for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IndexLoad {
    /// While opening (what every writer that deduplicates or collects
    /// garbage needs anyway).
    #[default]
    Now,
    /// On first use: the first recipe read, restore, check, GC plan or
    /// backup loads it (from the generation the handle opened).
    Lazy,
    /// While opening, for a GC, which replaces the whole index when it
    /// publishes: the opening keeps no table of what it loads (see
    /// `Context::index_replaced`). Loaded under the opening's lock, as
    /// [`Now`](IndexLoad::Now) is.
    Replaced,
}

/// The context's fingerprint index: loaded while opening, or on first use
/// ([`IndexLoad::Lazy`], through [`Context::need_index`]). It derefs to the
/// [`Index`] for the modules below, which reach it only through an entry
/// point that loaded it (a recipe reader, the face's index-needing
/// methods); reaching an unloaded one is a bug and panics rather than
/// answering "not indexed".
#[derive(Default)]
pub(crate) struct IndexCell {
    cell: std::sync::OnceLock<Index>,
    /// One loader at a time (a mount's threads may all need it at once).
    loading: std::sync::Mutex<()>,
}

impl IndexCell {
    /// The index, if loaded.
    pub(crate) fn if_loaded(&self) -> Option<&Index> {
        self.cell.get()
    }
    pub(crate) fn is_loaded(&self) -> bool {
        self.cell.get().is_some()
    }
    /// Replace the index (loaded from now on).
    pub(crate) fn set(&mut self, index: Index) {
        self.cell = std::sync::OnceLock::from(index);
    }
    /// Take the loaded index out, leaving an empty loaded one (ingest
    /// moves it into its sink and puts it back).
    pub(crate) fn take(&mut self) -> Index {
        std::mem::take(&mut **self)
    }
}

const INDEX_NOT_LOADED: &str =
    "the fingerprint index was used before it was loaded (a missing Context::need_index)";

impl std::ops::Deref for IndexCell {
    type Target = Index;
    fn deref(&self) -> &Index {
        self.cell.get().expect(INDEX_NOT_LOADED)
    }
}

impl std::ops::DerefMut for IndexCell {
    fn deref_mut(&mut self) -> &mut Index {
        self.cell.get_mut().expect(INDEX_NOT_LOADED)
    }
}

pub struct Context {
    /// Every object read and write goes through here (the lock excepted).
    pub(crate) objects: SealedStore,
    pub(crate) manifest: Manifest,
    /// The fingerprint index, loaded now or on first use ([`IndexLoad`]).
    pub(crate) index: IndexCell,
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
    /// The layout's answer to "where is this chunk copy".
    pub(crate) locator: Arc<dyn Locator>,
    /// A writer that joined others: the container and segment ids it
    /// reserved (see [`crate::Repository::open_writer`]); `None` allocates
    /// from the manifest's allocators.
    pub(crate) reserved: Option<Reserved>,
    /// A writer's lock token: its online-GC records carry it (containers
    /// only), and publishing compares it with the other lock holders.
    pub(crate) writer_token: Option<String>,
    /// The token of the lock this writer holds, whatever its kind.
    pub(crate) lock_token: Option<String>,
    /// A writer's: whether it may leave objects no manifest lists (see
    /// [`crate::sweep`]); every object it writes goes through the store
    /// that feeds it.
    pub(crate) unsettled: Option<Arc<crate::sweep::Unsettled>>,
    /// Manifest sections a mutation staged for its publish (and only its
    /// publish: cleared when that ends, published or not).
    pub(crate) staged: Sections,
    pub(crate) memo: Memo,
    /// The objects the manifest's sections list (layout and FGC state),
    /// installed by the face with the layout.
    pub(crate) section_keys: fn(&Manifest) -> Vec<ObjectKey>,
    /// The index this handle loads is about to be replaced whole (a GC
    /// publishes one segment superseding all others, and keeps the table
    /// of that generation then): loading it keeps no in-memory table, so a
    /// GC writes the ~0.8 GB table (at 14 M entries) once, not twice.
    pub(crate) index_replaced: bool,
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
pub(crate) const RESERVE_GAP: u64 = 1 << 24;
/// Index segment ids a joining writer reserves (and their gap).
pub(crate) const RESERVE_SEGMENTS: u64 = 1 << 16;
pub(crate) const RESERVE_SEGMENT_GAP: u64 = 1 << 20;
/// How often opening retries when a newer generation superseded (and
/// deleted) what it was reading.
const OPEN_ATTEMPTS: usize = 50;

/// Newest manifest generation listed by the store, if any.
pub(crate) fn latest_generation(store: &dyn ObjectStore) -> Result<Option<Generation>> {
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

impl Context {
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

    /// Open the newest generation; `password` is asked for only if the
    /// repository is encrypted, and `locator_of` gives the layout's
    /// locator for the manifest read (the face chooses the layout from
    /// it). The index is loaded as `load` says. With `bad_segments`, the
    /// index is loaded now and an index segment that cannot be read is
    /// recorded there and skipped (for `check`, which then reports it and
    /// goes on) instead of failing.
    pub fn open(
        backend: Arc<dyn ObjectStore>,
        password: PasswordSource,
        locator_of: &dyn Fn(&Manifest) -> Arc<dyn Locator>,
        load: IndexLoad,
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
        let load = match bad_segments {
            Some(_) => IndexLoad::Now,
            None => load,
        };
        Self::load_retrying(objects, seal, key, locator_of, load, bad_segments)
    }

    /// Load the newest generation through `objects`, retrying when a
    /// newer generation superseded and removed what was being read.
    pub(crate) fn load_retrying(
        objects: SealedStore,
        seal: RepoSeal,
        key: Option<(Arc<MasterKey>, u64)>,
        locator_of: &dyn Fn(&Manifest) -> Arc<dyn Locator>,
        load: IndexLoad,
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
                locator_of,
                load,
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
        locator_of: &dyn Fn(&Manifest) -> Arc<dyn Locator>,
        load: IndexLoad,
        bad_segments: Option<&mut Vec<(ObjectKey, Error)>>,
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
        let metrics = Arc::new(Metrics::default());
        let store = ContainerStore::new(
            objects.clone(),
            manifest.config.hash,
            manifest.config.trace,
            metrics.clone(),
        )
        .with_frame_size(manifest.config.frame_size);
        let locator = locator_of(&manifest);
        let mut cx = Context {
            objects,
            manifest,
            index: IndexCell::default(),
            store,
            metrics,
            fingerprinter,
            seal,
            key,
            threads: 0,
            locator,
            reserved: None,
            writer_token: None,
            lock_token: None,
            unsettled: None,
            staged: Sections::default(),
            memo: Memo::default(),
            section_keys: |_| Vec::new(),
            index_replaced: load == IndexLoad::Replaced,
        };
        if load != IndexLoad::Lazy {
            let index = cx.build_index(bad_segments)?;
            cx.index.set(index);
        }
        Ok(cx)
    }

    /// The index of this handle's generation: the layout's own, or the
    /// entries of every index segment the manifest lists, in order.
    /// Entries naming a container the manifest does not list are ignored:
    /// a segment merged from a concurrent writer may hold entries of
    /// containers a GC reclaimed (docs/FORMAT.md). An index starts from
    /// what an earlier opening kept (on disk its run set, [`RunSet`]; in
    /// memory its table, [`KeptTable`]) and applies only the segments
    /// listed since; it keeps what it built for the next.
    fn build_index(&self, bad_segments: Option<&mut Vec<(ObjectKey, Error)>>) -> Result<Index> {
        if let Some(own) = self.locator.own_index(self) {
            return own;
        }
        let manifest = &self.manifest;
        let segments = &manifest.index_segments;
        let listed: HashSet<ContainerId, IdBuildHasher> =
            manifest.containers.iter().map(|c| c.id).collect();
        let disk = manifest.config.index == crate::index::IndexKind::Disk;
        // Not for check (it reads every segment to judge it).
        let kept = self.kept_basis().filter(|_| bad_segments.is_none());
        let basis = kept.as_ref().map(KeptBasis::basis);
        let mut report = DiskLoad::default();
        let cfg = crate::index::disk::DiskConfig::default();
        let mut index = match (&kept, &basis) {
            (Some(k), Some(basis)) => match k.load(basis, cfg) {
                Ok((index, held)) => {
                    report.kept_segments = held;
                    index
                }
                Err(reason) => {
                    k.say_rebuilding(&reason);
                    report.rebuilt = Some(reason);
                    match disk {
                        true => disk_index(cfg)?,
                        false => Index::default(),
                    }
                }
            },
            _ if disk => disk_index(cfg)?,
            _ => Index::default(),
        };
        let todo = &segments[report.kept_segments..];
        let applied = self.apply_segments(todo, &listed, &mut index, bad_segments)?;
        // On disk: the loaded entries become sorted runs before the first lookup.
        index.flush()?;
        report.applied_segments = todo.len();
        if let (Some(k), Some(basis)) = (&kept, &basis) {
            let lag = Lag {
                segments: todo.len(),
                entries: applied,
                table: index.len().0,
            };
            // A table about to be replaced is kept after the publish
            // instead (see `keep_index`).
            let replaced = self.index_replaced && k.is_table();
            if !replaced && (report.rebuilt.is_some() || k.worth_saving(&lag)) {
                // What is kept is a cache: failing to save it costs the
                // next opening a rebuild, not this command.
                match k.save(&mut index, basis) {
                    Ok(saved) => report.saved = saved,
                    Err(e) => k.say_rebuilding(&format!("could not keep it: {e}")),
                }
            }
            index.set_disk_load(report);
        } else if disk {
            index.set_disk_load(report);
        }
        Ok(index)
    }

    /// What this handle's repository keeps of its index across openings
    /// (a run set on disk, a table in memory) and what it must stand for
    /// as of this handle's generation; `None` for a repository in memory
    /// (gone with the process) or a layout with an index of its own.
    fn kept_basis(&self) -> Option<KeptBasis> {
        let manifest = &self.manifest;
        let location = self.objects.location();
        if location == "memory" || manifest.config.layout != crate::catalog::LayoutKind::Containers
        {
            return None;
        }
        let mut containers: Vec<u64> = manifest.containers.iter().map(|c| c.id.0).collect();
        containers.sort_unstable();
        let base = index_dir();
        let (repo_id, at) = (&manifest.config.repo_id, &location);
        Some(KeptBasis {
            keeper: match manifest.config.index {
                crate::index::IndexKind::Disk => Keeper::Runs(RunSet::of(&base, repo_id, at)),
                crate::index::IndexKind::Memory => Keeper::Table(KeptTable::of(&base, repo_id, at)),
            },
            base,
            repo_id: manifest.config.repo_id.clone(),
            location,
            generation: manifest.generation.0,
            segments: manifest
                .index_segments
                .iter()
                .map(ObjectKey::name)
                .collect(),
            containers,
        })
    }

    /// Keep this handle's index (the run set on disk, the table in
    /// memory) as of the generation it holds, for a mutation that replaced
    /// every index segment (a GC, a compaction) and published it without
    /// merging: its index is then exactly what the one new segment holds,
    /// and the next opening reuses it instead of rebuilding from that
    /// segment. (A publish that merged reloaded, and so kept, the merged
    /// generation's index.) A cache: failing to keep it costs the next
    /// opening a rebuild.
    ///
    /// An in-memory table is kept only where one is already (a state file
    /// in its directory, of any generation): every opening that builds a
    /// table keeps it, so a directory without one means no opening here
    /// keeps tables (the first command at this location, or a cleared
    /// cache), and writing ~0.8 GB at the end of a GC for no reader would
    /// only slow the GC; the next opening builds and keeps it.
    pub(crate) fn keep_index(&mut self) {
        let Some(k) = self.kept_basis() else {
            return;
        };
        if k.is_table() && !k.kept_here() {
            return;
        }
        let Some(index) = self.index.cell.get_mut() else {
            return;
        };
        if index.kind() != self.manifest.config.index {
            return;
        }
        if let Err(e) = k.save(index, &k.basis()) {
            k.say_rebuilding(&format!("could not keep it: {e}"));
        }
    }

    /// Insert the entries of `segments` (in order) naming a `listed`
    /// container. Segments are fetched and verified on other threads, in
    /// order, while this one inserts their entries in place (no decoded
    /// copy). An index built from nothing is sized once for the chunks the
    /// manifest's containers hold (no rehashing on the way), and its fresh
    /// memory is faulted in on another thread meanwhile. An unreadable
    /// segment fails, or with `bad_segments` is recorded there and skipped.
    /// Returns how many entries the segments held.
    fn apply_segments(
        &self,
        segments: &[ObjectKey],
        listed: &HashSet<ContainerId, IdBuildHasher>,
        index: &mut Index,
        bad_segments: Option<&mut Vec<(ObjectKey, Error)>>,
    ) -> Result<usize> {
        let fresh = index.is_empty();
        if fresh {
            let chunks = |kind: ChunkKind| -> usize {
                let of = self.manifest.containers.iter().filter(|c| c.kind == kind);
                of.map(|c| c.chunks as usize).sum()
            };
            index.reserve_data(chunks(ChunkKind::Data));
            index.reserve_recipe(chunks(ChunkKind::Recipe));
        }
        // A large table's fresh pages are faulted in on a thread of their
        // own while this one fills them (joined when it is done).
        let spare = if fresh { index.spare() } else { Vec::new() };
        let populating = (spare.iter().map(|r| r.bytes).sum::<usize>() >= POPULATE_MIN)
            .then(|| std::thread::spawn(move || crate::zerobuf::populate(&spare)));
        let applied = self.apply_segments_into(segments, listed, index, bad_segments);
        if let Some(p) = populating {
            let _ = p.join();
        }
        applied
    }

    /// [`apply_segments`](Self::apply_segments) once the index is sized.
    fn apply_segments_into(
        &self,
        segments: &[ObjectKey],
        listed: &HashSet<ContainerId, IdBuildHasher>,
        index: &mut Index,
        mut bad_segments: Option<&mut Vec<(ObjectKey, Error)>>,
    ) -> Result<usize> {
        let mut seen = 0;
        let objects = &self.objects;
        let read = |seg: &ObjectKey| -> Result<crate::backend::ObjectBytes> {
            let name = ObjectRef::Object(seg.clone());
            objects
                .get(seg)
                .map_err(|e| match e {
                    Error::MissingObject(_) => e.about(name.clone()),
                    e => e,
                })
                // The verifier names what it is given; the error names the key.
                .and_then(
                    |bytes| match SegmentView::verify(&bytes, &name.to_string()) {
                        Ok(_) => Ok(bytes),
                        Err(e) => Err(e.about(name)),
                    },
                )
        };
        let mut apply =
            |seg: &ObjectKey, read: Result<crate::backend::ObjectBytes>| -> Result<()> {
                let bytes = match (read, bad_segments.as_deref_mut()) {
                    (Ok(bytes), _) => bytes,
                    (Err(e), Some(bad)) => {
                        bad.push((seg.clone(), e));
                        return Ok(());
                    }
                    (Err(e), None) => return Err(e),
                };
                let entries = SegmentView::verified(&bytes);
                seen += entries.len();
                index.reserve_data(entries.len());
                // Entries come grouped by container: one set lookup per group.
                let mut last: Option<(ContainerId, bool)> = None;
                for i in 0..entries.len() {
                    // The bytes of entries further on (a mapped segment is
                    // read across pages the hardware does not prefetch
                    // into), and the slot of an entry a few ahead, start
                    // loading now: inserts into a large table are cache misses.
                    entries.prefetch(i + 32);
                    if i + 8 < entries.len() {
                        let ahead = entries.get(i + 8);
                        index.prefetch(ahead.kind, &ahead.fp);
                    }
                    let e = entries.get(i);
                    let keep = match last {
                        Some((c, keep)) if c == e.container => keep,
                        _ => listed.contains(&e.container),
                    };
                    last = Some((e.container, keep));
                    if keep {
                        index.insert(e)?;
                    }
                }
                Ok(())
            };
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(segments.len());
        if segments.len() < 2 {
            for seg in segments {
                apply(seg, read(seg))?;
            }
            return Ok(seen);
        }
        // Worker w reads segments w, w + workers, ...; each hands them over
        // one at a time, and they are applied round the workers: in order.
        std::thread::scope(|s| {
            let mut from = Vec::with_capacity(workers);
            for w in 0..workers {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                from.push(rx);
                let read = &read;
                s.spawn(move || {
                    for seg in segments.iter().skip(w).step_by(workers) {
                        // Applying stopped (an error): stop reading.
                        if tx.send(read(seg)).is_err() {
                            break;
                        }
                    }
                });
            }
            for (i, seg) in segments.iter().enumerate() {
                let got = from[i % workers]
                    .recv()
                    .expect("each worker sends its segments in turn");
                apply(seg, got)?;
            }
            Ok(())
        })?;
        Ok(seen)
    }

    /// The fingerprint index, loaded now if this handle opened
    /// [`IndexLoad::Lazy`] and nothing loaded it yet. It is the index of
    /// the generation the handle opened: should a newer generation have
    /// superseded (and removed) one of its segments meanwhile, this fails
    /// and asks for the command to be run again rather than mixing
    /// generations.
    pub fn need_index(&self) -> Result<&Index> {
        if let Some(i) = self.index.if_loaded() {
            return Ok(i);
        }
        let _one = self.index.loading.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = self.index.if_loaded() {
            return Ok(i);
        }
        let index = self.build_index(None).map_err(|e| match e {
            // A segment lost from the newest generation is damage; one a
            // newer generation removed is a change under this handle.
            Error::MissingObject(_)
                if latest_generation(&**self.objects.store())
                    .is_ok_and(|g| g.is_some_and(|g| g > self.manifest.generation)) =>
            {
                Error::Locked(format!(
                    "the repository changed since this command opened it (generation {} was superseded: {e}); run it again",
                    self.manifest.generation
                ))
            }
            e => e,
        })?;
        let _ = self.index.cell.set(index);
        Ok(self.index.if_loaded().expect("just loaded"))
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

    /// [`find_leftovers`](Self::find_leftovers) as keys: unlisted containers,
    /// index segments and the objects of the manifest's sections (strays
    /// under their prefixes included) and older manifest generations.
    pub fn leftover_keys(&self) -> Result<Vec<ObjectKey>> {
        let listed: HashSet<ObjectKey> = self
            .manifest
            .containers
            .iter()
            .map(|c| ObjectKey::Container(c.id))
            .chain(self.manifest.index_segments.iter().cloned())
            .chain((self.section_keys)(&self.manifest))
            .collect();
        let mut out = Vec::new();
        for kind in crate::sweep::SWEPT
            .into_iter()
            .filter(|k| *k != KeyKind::Manifest)
        {
            out.extend(
                self.objects
                    .list(kind)?
                    .into_iter()
                    .filter(|k| !listed.contains(k)),
            );
        }
        out.extend(self.old_manifests()?);
        Ok(out)
    }

    /// Manifest generations older than the current one.
    fn old_manifests(&self) -> Result<Vec<ObjectKey>> {
        let current = self.manifest.generation;
        Ok(self
            .objects
            .list(KeyKind::Manifest)?
            .into_iter()
            .filter(|k| k.generation().is_some_and(|g| g < current))
            .collect())
    }

    /// A writer alone: leave for the next writer alone what cannot be
    /// removed now (see [`crate::sweep`]).
    pub(crate) fn leave_leftovers(&self) {
        if let Some(u) = &self.unsettled {
            u.leave();
        }
    }

    /// Remove the manifest generations older than the current one (only a
    /// writer alone may): what writers beside others could not remove.
    /// Listing manifests is cheap, unlike the full sweep.
    pub(crate) fn remove_old_manifests(&self) -> Result<Leftovers> {
        let old = self.old_manifests()?;
        for key in &old {
            self.objects.delete(key)?;
        }
        if !old.is_empty() {
            self.objects.barrier()?;
        }
        Ok(Leftovers {
            objects: old.iter().map(ObjectKey::name).collect(),
            temporaries: 0,
        })
    }

    /// Remove what [`leftover_keys`](Self::leftover_keys) finds and the
    /// store's interrupted temporaries (only a writer alone may).
    pub(crate) fn remove_leftovers(&self) -> Result<Leftovers> {
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
        self.write_encoded_segment(next, encode_segment(entries))
    }

    /// Write an encoded segment (of at least one entry) as the next one.
    pub(crate) fn write_encoded_segment(
        &self,
        next: &mut Manifest,
        segment: Vec<u8>,
    ) -> Result<()> {
        let id = match &self.reserved {
            Some(r) => r.segment.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            None => next.next_segment_id,
        };
        next.next_segment_id = next.next_segment_id.max(id + 1);
        let key = ObjectKey::IndexSegment(id);
        self.objects.put(&key, segment)?;
        next.index_segments.push(key);
        Ok(())
    }

    /// When the manifest lists more than [`MAX_SEGMENTS`] index segments,
    /// replace them with one segment holding the whole in-memory index (which
    /// must already include the mutation's entries). Returns the keys the new
    /// manifest supersedes, to delete after publishing. The segment is
    /// encoded straight from the index and sorted in place, and sealed
    /// without a copy when uncompressed: its bytes are the only copy of
    /// the index made (at the end of a long run it is the memory peak).
    pub(crate) fn compact_segments(&self, next: &mut Manifest) -> Result<Vec<ObjectKey>> {
        if next.index_segments.len() <= MAX_SEGMENTS {
            return Ok(Vec::new());
        }
        // Every copy of every chunk (an older copy is still some backup's):
        // a handle that had not needed its index loads it now.
        self.need_index()?;
        let (d, r) = self.index.len();
        let count = d + r + self.index.extra_copies();
        let superseded = std::mem::take(&mut next.index_segments);
        if count > 0 {
            let segment = encode_segment_sorted(count, self.index.entries());
            self.write_encoded_segment(next, segment)?;
        }
        Ok(superseded)
    }

    /// Where copy `copy` of the chunk `fp` is: what a restore, a mark or a
    /// check reads for a recipe entry (each backup reads the copies its own
    /// ingest chose), as the layout answers it.
    #[inline]
    pub(crate) fn locate_copy(
        &self,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId> {
        self.locator.locate_copy(self, kind, fp, copy)
    }

    /// [`locate_copy`](Self::locate_copy) of the data chunks of one recipe,
    /// in order: `log` starts at 0 and is kept between the calls.
    #[inline]
    pub(crate) fn locate_data_near(
        &self,
        log: &mut usize,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId> {
        self.locator.locate_data_near(self, log, fp, copy)
    }

    /// [`locate_copy`](Self::locate_copy) of a data chunk a recipe of
    /// `backup` names; its absence is the recipe's damage.
    pub(crate) fn locate_data(
        &self,
        backup: crate::ids::BackupId,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Result<ContainerId> {
        self.locate_copy(ChunkKind::Data, fp, copy).ok_or_else(|| {
            Error::corrupt(
                format!("backup {backup}"),
                format!("chunk {} (copy {copy}) is not in the index", fp.to_hex()),
            )
        })
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
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
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
    /// The fingerprint index, loaded first if this handle opened
    /// [`IndexLoad::Lazy`] (see [`need_index`](Self::need_index)).
    pub fn index(&self) -> Result<&Index> {
        self.need_index()
    }
    /// Where this repository's index is kept across openings (the run
    /// set of an on-disk index, [`RunSet`]; the table of an in-memory one,
    /// [`KeptTable`]); `None` for a repository in memory.
    pub fn kept_index_dir(&self) -> Option<std::path::PathBuf> {
        self.kept_basis().map(|k| k.dir().to_path_buf())
    }
    /// Whether this handle has loaded its fingerprint index (commands that
    /// need only the manifest never do).
    pub fn index_loaded(&self) -> bool {
        self.index.is_loaded()
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
        // Everything put so far is listed now, unless a merge may have
        // dropped some of it: then the next writer alone sweeps.
        if let (false, Some(u)) = (merged, &self.unsettled) {
            u.published();
        }
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
        let locator = self.locator.clone();
        // A handle that has not loaded its index yet keeps it for later.
        let load = match self.index.is_loaded() {
            true => IndexLoad::Now,
            false => IndexLoad::Lazy,
        };
        let fresh = Context::load_retrying(
            self.objects.clone(),
            self.seal.clone(),
            self.key.clone(),
            &|_| locator.clone(),
            load,
            None,
        )?;
        self.manifest = fresh.manifest;
        self.index = fresh.index;
        Ok(())
    }

    /// Delete manifest generations older than `published` if this writer
    /// is the only lock holder (see [`commit_with`](Self::commit_with)).
    fn remove_old_generations(&self, published: Generation) -> Result<()> {
        let mine = self.lock_token.as_ref();
        let others = crate::lock::shared_holders(&**self.objects.store())?
            .into_iter()
            .any(|(t, _)| Some(&t) != mine);
        if others {
            return Ok(());
        }
        let listed = self.objects.list(KeyKind::Manifest)?;
        self.check_base_listed(published, &listed)?;
        for key in listed {
            if key.generation().is_some_and(|g| g < published) {
                self.objects.delete(&key)?;
            }
        }
        Ok(())
    }

    /// The generation `published` was built on is still in the store.
    ///
    /// Why: only this function deletes manifests, and only older ones than
    /// a generation just published; `published` went out by
    /// compare-and-swap on top of its base, so no writer had a reason to
    /// delete the base. Its absence means something outside Tessera
    /// removed the repository's objects while this writer had it open (a
    /// script's `rm -rf`): said here, at the publish that finds it, rather
    /// than by the next reader of a lost container. A listing that misses
    /// it is confirmed by a direct request before anything is said.
    fn check_base_listed(&self, published: Generation, listed: &[ObjectKey]) -> Result<()> {
        let Some(base) = published.0.checked_sub(1).map(Generation) else {
            return Ok(());
        };
        if base.0 == 0 || listed.iter().any(|k| k.generation() == Some(base)) {
            return Ok(());
        }
        let key = ObjectKey::Manifest(base);
        match self.objects.store().size(&key) {
            Err(Error::MissingObject(_)) => Err(Error::corrupt(
                format!("repository at {}", self.objects.location()),
                format!(
                    "manifest generation {} (the one generation {} was published on) vanished from the store: something outside Tessera removed this repository's objects while it was open; objects written before may be gone (run `tessera check`)",
                    base.0, published.0
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Rebuild an on-disk index with other tuning (flush size, cache
    /// size): for tests and benchmarks. Refused on a memory index.
    pub fn tune_disk_index(&mut self, cfg: crate::index::disk::DiskConfig) -> Result<()> {
        if self.manifest.config.index != crate::index::IndexKind::Disk {
            return Err(Error::invalid("the repository's index is not on disk"));
        }
        let mut index = disk_index(cfg)?;
        load_segments(&self.objects, &self.manifest, &mut index)?;
        self.index.set(index);
        Ok(())
    }
}

/// Fresh table memory worth faulting in on a helper thread while loading.
const POPULATE_MIN: usize = 64 << 20;

/// What a repository keeps of its index across openings.
enum Keeper {
    /// An on-disk index's run set.
    Runs(RunSet),
    /// An in-memory index's tables.
    Table(KeptTable),
}

/// A repository's kept index ([`Keeper`]) and the generation it is to
/// stand for (owned: [`Basis`] borrows it).
struct KeptBasis {
    /// The index directory the kept index and a table's private files
    /// live in.
    base: std::path::PathBuf,
    keeper: Keeper,
    repo_id: String,
    location: String,
    generation: u64,
    segments: Vec<String>,
    /// Listed container ids, ascending.
    containers: Vec<u64>,
}

impl KeptBasis {
    fn dir(&self) -> &std::path::Path {
        match &self.keeper {
            Keeper::Runs(s) => s.dir(),
            Keeper::Table(t) => t.dir(),
        }
    }
    /// The kept index and how many segments it holds, or why not.
    fn load(
        &self,
        basis: &Basis,
        cfg: crate::index::disk::DiskConfig,
    ) -> std::result::Result<(Index, usize), String> {
        match &self.keeper {
            Keeper::Runs(s) => s.load(basis, &self.base, cfg),
            Keeper::Table(t) => t.load(basis),
        }
    }
    fn save(&self, index: &mut Index, basis: &Basis) -> Result<bool> {
        match &self.keeper {
            Keeper::Runs(s) => s.save(index, basis),
            Keeper::Table(t) => t.save(index, basis),
        }
    }
    fn is_table(&self) -> bool {
        matches!(self.keeper, Keeper::Table(_))
    }
    /// Whether a table is kept in its directory (of any generation; a
    /// run set always counts).
    fn kept_here(&self) -> bool {
        match &self.keeper {
            Keeper::Runs(_) => true,
            Keeper::Table(t) => t.is_kept(),
        }
    }
    fn worth_saving(&self, lag: &Lag) -> bool {
        match &self.keeper {
            Keeper::Runs(_) => lag.worth_saving(),
            Keeper::Table(_) => crate::index::kept_table::worth_saving(lag),
        }
    }
    fn say_rebuilding(&self, reason: &str) {
        match &self.keeper {
            Keeper::Runs(_) => say_rebuilding(reason),
            Keeper::Table(_) => crate::index::kept_table::say_rebuilding(reason),
        }
    }
    fn basis(&self) -> Basis<'_> {
        Basis {
            repo_id: &self.repo_id,
            location: &self.location,
            generation: self.generation,
            segments: &self.segments,
            containers: &self.containers,
        }
    }
}

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
            index.insert(e)?;
        }
    }
    // On disk: the loaded entries become sorted runs before the first lookup.
    index.flush()
}

/// Where an on-disk index keeps its private files while a repository is
/// open: `$TESSERA_INDEX_DIR`, else `index/` in the user's cache directory
/// (`$TESSERA_CACHE_DIR`, `$XDG_CACHE_HOME/tessera`, `~/.cache/tessera`),
/// else the temporary directory.
pub fn index_dir() -> std::path::PathBuf {
    std::env::var_os("TESSERA_INDEX_DIR")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| cache_dir().map(|d| d.join("index")))
        .unwrap_or_else(std::env::temp_dir)
}

/// The user's cache directory for Tessera's private, disposable state (the
/// files cache, the on-disk index): `$TESSERA_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    let env = |k| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = env("TESSERA_CACHE_DIR") {
        return Some(d.into());
    }
    if let Some(d) = env("XDG_CACHE_HOME") {
        return Some(std::path::PathBuf::from(d).join("tessera"));
    }
    env("HOME").map(|h| std::path::PathBuf::from(h).join(".cache").join("tessera"))
}
