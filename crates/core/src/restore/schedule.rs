//! The restore scheduler: walks a backup's recipe, finds each chunk's
//! container in the index, and runs the cache policy on container ids
//! ahead of the data. Its output is a stream of [`Op`]s in recipe order;
//! each container read is requested from the [loaders](super::loader) as
//! soon as it is planned, so reads are in flight before the assembler
//! needs them.
//!
//! The policies are exactly those a sequential restore would apply (the
//! same [`Lru`]/[`Opt`] decisions, the same FAA windows), so the containers
//! read, and every metric, are those of the papers' restore — unless the
//! containers the policy keeps exceed the memory ceiling, where
//! [`Holding`] frees some and they are read again if used again.

use super::future::{Future, Needed};
use super::hold::{Ahead, Holding, Room};
use super::loader::{Budget, Buffers, Loaded, Loaders, Permit, Permits};
use crate::cache::CacheSpec;
use crate::cache::{faa, Access, Lru, Opt, OPT_WINDOW};
use crate::catalog::BackupEntry;
use crate::container::{ChunkKind, ContainerId};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::recipe::RecipeEntry;
use crate::restore::options::RestoreOptions;
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

/// Ops per message to the assembler.
const BATCH: usize = 1024;

/// Containers the LRU restore has the store prefetch ahead of their first
/// use ([`Loaders::prefetch`]): into the page cache, outside the memory
/// ceiling. Why: under the ceiling few reads are in flight, and a restore
/// from a cold cache waited on the disk for each new container in turn
/// (`lab bench`: 0.64 s at 48 MiB against 0.34 s with room for 1 GiB).
const PREFETCH_AHEAD: usize = 8;

/// One step for the assembler, in recipe order.
pub(crate) enum Op {
    /// Container `0` leaves the cache.
    Evict(ContainerId),
    /// Container `0` is not read from again: its memory can go, though
    /// the cache policy still counts it as cached (so the reads, and every
    /// metric, are those of the policy).
    Release(ContainerId),
    /// Container `0` is cut to the chunks named in `1` (fingerprint
    /// prefixes, `restore/future.rs`), which hold `2` bytes of the budget
    /// from now on; the rest of its bytes go back.
    Trim(ContainerId, Vec<u64>, u64),
    /// Trimmed container `0` lets chunk `1` (`2` bytes) go: used for the
    /// last time.
    Drop(ContainerId, crate::fingerprint::Fingerprint, u64),
    /// Container `0` enters the cache; it arrives on `1` and holds `2`
    /// bytes of the memory budget until it is freed.
    Load(ContainerId, Loaded, u64),
    /// The next chunk, from a cached container.
    Chunk(RecipeEntry, ContainerId),
    /// An FAA window, assembled from its containers and written whole.
    Window(Window),
}

/// One forward-assembly window.
pub(crate) struct Window {
    /// The window's chunks and where each goes in the area.
    pub entries: Vec<(RecipeEntry, u64)>,
    /// Per container, in order of first use: the entries it supplies,
    /// where it arrives and the budget bytes it holds until freed.
    pub containers: Vec<(ContainerId, Vec<usize>, Loaded, u64)>,
    /// Bytes the window fills.
    pub filled: u64,
}

/// What the scheduler hands the assembler.
pub(crate) type Batch = Result<Vec<Op>>;

/// The scheduler's outputs: ops to the assembler, reads to the loaders.
pub(crate) struct Scheduler {
    ops: SyncSender<Batch>,
    batch: Vec<Op>,
    loaders: Loaders,
    permits: Permits,
    budget: Arc<Budget>,
    /// The policy's containers held under the memory ceiling.
    hold: Holding,
    /// The LRU restore's knowledge of each container's uses, and the
    /// position of the chunk being planned: what the ceiling spills by.
    future: Option<Future>,
    at: u64,
    /// Stored bytes of each data container (the catalog's), what a read
    /// takes of the budget.
    sizes: HashMap<ContainerId, u64>,
    /// What a container missing from the catalog is taken to hold.
    default_size: u64,
    /// Reads in planned order, to count seeks deterministically (the
    /// loaders finish them in any order).
    seeks: SeekCounter,
    /// Where an evicted container that will be read again is announced,
    /// so that its mapping is kept for that read ([`Buffers`]).
    spares: Buffers,
}

/// Data-container reads that do not follow the previous read in id order
/// (the first read, any jump forward or back, a re-read): the sequential
/// runs a disk would read, MFDedup's seek number (§5.4) for containers.
/// Ids are allocated in write order, so consecutive ids are written one
/// after the other.
#[derive(Default)]
pub(crate) struct SeekCounter {
    /// The id read last, plus one (0: none yet).
    next: u64,
    pub(crate) seeks: u64,
}

impl SeekCounter {
    pub(crate) fn read(&mut self, id: ContainerId) {
        if self.next == 0 || self.next != id.0 {
            self.seeks += 1;
        }
        self.next = id.0 + 1;
    }
}

/// The assembler stopped (it reports why); the scheduler just ends.
struct Stopped;

impl Scheduler {
    pub(crate) fn new(
        repo: &Context,
        ops: SyncSender<Batch>,
        loaders: Loaders,
        permits: Permits,
        budget: Arc<Budget>,
        memory: u64,
        spares: Buffers,
    ) -> Self {
        let sizes = repo
            .manifest
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Data)
            .map(|c| (c.id, c.object_bytes))
            .collect();
        Scheduler {
            ops,
            batch: Vec::with_capacity(BATCH),
            loaders,
            permits,
            budget,
            hold: Holding::new(memory),
            future: None,
            at: 0,
            sizes,
            default_size: repo.manifest.config.container_size as u64,
            seeks: SeekCounter::default(),
            spares,
        }
    }

    /// Evict `v` from the cache; announced to [`Buffers`] if the restore
    /// will read it again.
    fn evict(&mut self, v: ContainerId) -> std::result::Result<(), Stopped> {
        if self
            .future
            .as_ref()
            .is_some_and(|f| f.used_after(v, self.at))
        {
            self.spares.want(v);
        }
        self.push(Op::Evict(v))
    }

    /// Stored bytes of container `id`.
    fn size(&self, id: ContainerId) -> u64 {
        self.sizes.get(&id).copied().unwrap_or(self.default_size)
    }

    /// Plan the whole restore; an error goes to the assembler. Returns the
    /// seeks of the reads planned ([`SeekCounter`]).
    pub(crate) fn run(
        mut self,
        repo: &Context,
        backup: &BackupEntry,
        opts: &RestoreOptions,
    ) -> u64 {
        match self.plan(repo, backup, opts) {
            Ok(()) => {
                let _ = self.flush();
            }
            Err(PlanError::Stopped(Stopped)) => {}
            Err(PlanError::Failed(e)) => {
                // Ops already planned come first, so the assembler restores
                // up to the failure before reporting it.
                if self.flush().is_ok() {
                    let _ = self.ops.send(Err(e));
                }
            }
        }
        self.seeks.seeks
    }

    fn push(&mut self, op: Op) -> std::result::Result<(), Stopped> {
        self.batch.push(op);
        if self.batch.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::result::Result<(), Stopped> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.ops.send(Ok(full)).map_err(|_| Stopped)
    }

    /// Take a read permit. When none is free, the assembler must first see
    /// the ops planned so far (it returns permits as it consumes them).
    fn permit(&mut self) -> std::result::Result<(), Stopped> {
        match self.permits.try_take() {
            Permit::Granted => Ok(()),
            Permit::Closed => Err(Stopped),
            Permit::Exhausted => {
                self.flush()?;
                if self.permits.wait() {
                    Ok(())
                } else {
                    Err(Stopped)
                }
            }
        }
    }

    /// Take `n` bytes of the memory budget, waiting (after showing the
    /// assembler the ops so far, which free containers) if they do not fit.
    fn take_bytes(&mut self, n: u64) -> std::result::Result<(), Stopped> {
        if self.budget.try_take(n) {
            return Ok(());
        }
        self.flush()?;
        if self.budget.take(n) {
            Ok(())
        } else {
            Err(Stopped)
        }
    }

    /// Read `id` into the cache: free spilled containers if the ceiling
    /// needs it, take a permit and the bytes, request the read.
    fn load(&mut self, id: ContainerId) -> std::result::Result<(), Stopped> {
        let n = self.size(id);
        let at = self.at;
        let room = match self.future.as_mut().filter(|f| f.knows_next()) {
            Some(future) => self.hold.make_room(n, Some(&mut At { future, at })),
            None => self.hold.make_room(n, None),
        };
        for r in room {
            match r {
                Room::Trim(v, Needed { prefixes, bytes }) => {
                    self.push(Op::Trim(v, prefixes, bytes))?
                }
                Room::Spill(v) => self.evict(v)?,
            }
        }
        self.permit()?;
        self.take_bytes(n)?;
        self.seeks.read(id);
        let loaded = self.loaders.request(id).ok_or(Stopped)?;
        self.hold.insert(id, n);
        self.push(Op::Load(id, loaded, n))
    }

    fn plan(
        &mut self,
        repo: &Context,
        backup: &BackupEntry,
        opts: &RestoreOptions,
    ) -> std::result::Result<(), PlanError> {
        let bid = backup.id;
        let mut recipes = repo.recipe_reader(8)?;
        let root = backup.root_fp()?;
        let mut walker = recipes
            .entries(root, backup.root_level)
            .map_err(|e| e.in_backup(bid, None))?;
        // The next recipe entry with the container holding its copy;
        // `offset` is where it starts in the backup, for messages.
        let mut log = 0;
        let mut next = |offset: u64| -> Result<Option<(RecipeEntry, ContainerId)>> {
            let Some(e) = walker.next().map_err(|e| e.in_backup(bid, Some(offset)))? else {
                return Ok(None);
            };
            // The copy this backup's own ingest chose, wherever GC moved it.
            let id = repo
                .locate_data_near(&mut log, &e.fp, e.copy)
                .ok_or_else(|| {
                    Error::corrupt(
                        format!("backup {bid}"),
                        format!(
                            "chunk {} (copy {}) at offset {offset} is not in the index",
                            e.fp.to_hex(),
                            e.copy
                        ),
                    )
                })?;
            Ok(Some((e, id)))
        };
        let mut offset = 0u64;
        match opts.cache {
            CacheSpec::Lru(n) => {
                if knows_future(opts, repo.manifest.config.trace) {
                    self.future = Some(future_uses(repo, backup)?);
                }
                let mut lru = Lru::new(n);
                self.at = 0;
                while let Some((e, id)) = next(offset)? {
                    offset += e.size;
                    if let Some(f) = self.future.as_mut() {
                        for &(_, p) in f.prefetch_due(self.at, PREFETCH_AHEAD) {
                            self.loaders.prefetch(p);
                        }
                    }
                    self.access(lru.access(id), id)?;
                    let (fp, size) = (e.fp, e.size);
                    self.push(Op::Chunk(e, id))?;
                    let last = self.future.as_ref().is_some_and(|f| f.is_last(id, self.at));
                    if last && self.hold.remove(id) {
                        self.push(Op::Release(id))?;
                    } else if self.hold.is_trimmed(id)
                        && self
                            .future
                            .as_mut()
                            .is_some_and(|f| f.chunk_done(id, self.at))
                    {
                        self.hold.shrink(id, size);
                        self.push(Op::Drop(id, fp, size))?;
                    }
                    self.at += 1;
                }
            }
            CacheSpec::Opt(n) => {
                let mut opt = Opt::new(n);
                let mut window = VecDeque::new();
                let mut ahead = 0u64;
                let mut done = false;
                loop {
                    while !done && window.len() < OPT_WINDOW {
                        match next(ahead)? {
                            Some((e, id)) => {
                                ahead += e.size;
                                opt.announce(id);
                                window.push_back((e, id));
                            }
                            None => done = true,
                        }
                    }
                    let Some((e, id)) = window.pop_front() else {
                        break;
                    };
                    self.access(opt.access(id), id)?;
                    self.push(Op::Chunk(e, id))?;
                }
            }
            CacheSpec::Faa(n) => {
                let area = faa::area_bytes(n, repo.manifest.config.container_size as u64);
                let mut pending = next(offset)?;
                while pending.is_some() {
                    let start = offset;
                    let mut entries = Vec::new();
                    let mut order: Vec<(ContainerId, Vec<usize>)> = Vec::new();
                    let mut slot: HashMap<ContainerId, usize> = HashMap::new();
                    let mut filled = 0u64;
                    while let Some((e, id)) = pending.take() {
                        if !faa::fits(filled, e.size, area) {
                            pending = Some((e, id));
                            break;
                        }
                        let k = *slot.entry(id).or_insert_with(|| {
                            order.push((id, Vec::new()));
                            order.len() - 1
                        });
                        order[k].1.push(entries.len());
                        entries.push((e, filled));
                        filled += e.size;
                        pending = next(start + filled)?;
                    }
                    offset += filled;
                    self.window(entries, order, filled)?;
                }
            }
        }
        Ok(())
    }

    /// Turn one cache decision into ops (and a read): a miss reads, and a
    /// hit on a container the ceiling spilled reads it again.
    fn access(&mut self, access: Access, id: ContainerId) -> std::result::Result<(), Stopped> {
        match access {
            Access::Miss { evict } => {
                if let Some(v) = evict {
                    if self.hold.remove(v) {
                        self.evict(v)?;
                    }
                }
                self.load(id)
            }
            Access::Hit if self.hold.hit(id) => self.load(id),
            Access::Hit => Ok(()),
        }
    }

    /// Hand over an FAA window, then request its containers in order. The
    /// window goes first: it may need more reads than there are permits,
    /// and the assembler returns them only as it works through the window.
    fn window(
        &mut self,
        entries: Vec<(RecipeEntry, u64)>,
        order: Vec<(ContainerId, Vec<usize>)>,
        filled: u64,
    ) -> std::result::Result<(), Stopped> {
        let mut replies = Vec::with_capacity(order.len());
        let mut containers = Vec::with_capacity(order.len());
        for (id, idx) in order {
            let (reply, loaded) = std::sync::mpsc::sync_channel(1);
            let n = self.size(id);
            replies.push((id, reply, n));
            containers.push((id, idx, loaded, n));
        }
        self.push(Op::Window(Window {
            entries,
            containers,
            filled,
        }))?;
        self.flush()?;
        for (id, reply, n) in replies {
            self.permit()?;
            self.take_bytes(n)?;
            self.seeks.read(id);
            self.loaders.forward(id, reply).ok_or(Stopped)?;
        }
        Ok(())
    }
}

/// Whether the restore walks the recipe first to learn each container's
/// uses ([`future_uses`]): the LRU restore does, but not in trace mode,
/// which holds no bytes and so has nothing to free.
pub(crate) fn knows_future(opts: &RestoreOptions, trace: bool) -> bool {
    matches!(opts.cache, CacheSpec::Lru(_)) && !trace
}

/// Each data container's uses by `backup` ([`Future`]), from a first walk
/// of its recipe: after its last use the LRU restore releases a container's
/// memory, and the ceiling spills the container needed furthest ahead.
/// Why: an LRU cache of 32 containers holds 128 MiB of opened containers
/// through a restore, most of them never read from again (a restore of a
/// 2.2 GB tree peaked at 2.4× restic's memory).
fn future_uses(repo: &Context, backup: &BackupEntry) -> Result<Future> {
    let bid = backup.id;
    let mut recipes = repo.recipe_reader(8)?;
    let mut walker = recipes
        .entries(backup.root_fp()?, backup.root_level)
        .map_err(|e| e.in_backup(bid, None))?;
    // A chunk the index misses is reported by the second walk.
    let mut log = 0;
    Future::from_walk(std::iter::from_fn(|| {
        match walker.next().map_err(|e| e.in_backup(bid, None)) {
            Ok(Some(e)) => Some(Ok(repo
                .locate_data_near(&mut log, &e.fp, e.copy)
                .map(|id| (id, e.fp, u32::try_from(e.size).unwrap_or(u32::MAX))))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }))
}

/// The restore's future as seen from position `at`.
struct At<'a> {
    future: &'a mut Future,
    at: u64,
}

impl Ahead for At<'_> {
    fn next_use(&mut self, id: ContainerId) -> u64 {
        self.future.next_after(id, self.at)
    }
    fn still_needed(&mut self, id: ContainerId) -> Option<Needed> {
        self.future.needed_after(id, self.at)
    }
}

/// Why planning ended early.
enum PlanError {
    Stopped(Stopped),
    Failed(Error),
}

impl From<Stopped> for PlanError {
    fn from(s: Stopped) -> Self {
        PlanError::Stopped(s)
    }
}

impl From<Error> for PlanError {
    fn from(e: Error) -> Self {
        PlanError::Failed(e)
    }
}
