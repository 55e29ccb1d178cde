//! Restore: walk a backup's recipe tree and copy its chunks out of their
//! containers, reading whole containers through a cache (the container is the
//! unit of I/O, so containers read is the cost that fragmentation raises).
//!
//! Every container read is verified (checksums) and counted; the report gives
//! read amplification (container bytes read / bytes restored) and speed factor
//! (MB restored per container read), the papers' restore metrics.
//!
//! Three stages run at once: the scheduler (`schedule.rs`) walks the recipe and runs
//! the cache policy on container ids, the loaders (`loader.rs`) read and verify
//! the containers it decides to read (several in flight), and the caller's
//! thread, the assembler, copies chunks out of them in recipe order. The
//! decisions are those of a sequential restore with the same cache, so the
//! metrics do not depend on the pipeline.
//!
//! Memory: containers are held as stored (compressed, sealed) and a frame
//! is opened only when a chunk in it is needed (`frames.rs`); the stored
//! bytes of the containers read and not yet freed, and the opened frames,
//! stay under the restore's memory ceiling ([`RestoreOptions::memory`]).

use crate::archive::ExtractReport;
use crate::catalog::{BackupEntry, BackupId, SourceKind};
use crate::container::{format::object_name, Container, ContainerId, ContainerStore};
use crate::context::Context;
use crate::error::{Error, IoContext, Result};
use crate::metrics::{mb_per_s, read_amplification, speed_factor};
use crate::recipe::RecipeEntry;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

mod early;
mod frames;
mod future;
mod hold;
mod loader;
mod openers;
mod options;
mod pipe;
pub mod range;
mod schedule;
#[cfg(test)]
mod tests;
mod trim;

/// The caches live in [`crate::cache`] (GC and check use them too); these
/// paths stay for callers that name them through restore.
pub use crate::cache::{self, CacheSpec, LruCache};
use early::{Ahead, EarlyFrees};
use frames::OpenFrames;
use loader::{receive, Budget, BudgetReturn, Buffers, Loaders, READ_AHEAD};
use openers::Openers;
pub use options::{
    MfdedupReads, Pipeline, RestoreOptions, RestoreReport, Restorer, DEFAULT_MEMORY,
};
use range::{file_name, single_file_listing};
pub use range::{BackupStream, StreamEntry};
use schedule::{Op, Scheduler};
use trim::Trimmed;

/// Threads reading and opening (decrypting, decompressing) containers
/// beyond the repository's worker threads ([`Repository::threads`]): reads
/// mostly wait on the disk or copy out of the page cache, so a few more
/// than the cores keep the disk's queue full.
const EXTRA_LOADERS: usize = 2;

/// Threads creating and writing a directory restore's files, per worker
/// thread. Why: a writer spends most of its time in file-creating system
/// calls that wait on each other (the directory's lock, the journal), not
/// on a core; with one writer per core a restore of a 2.29 GB system tree
/// left a quarter of both cores idle while its small files were written,
/// and two per core took 0.91× its time (settled pairs, issue 33).
const WRITERS_PER_THREAD: usize = 2;

#[cfg(test)]
thread_local! {
    /// The last restore on this thread, for tests: its budget's ceiling, the
    /// most it held and bytes given back beyond those held, the containers
    /// freed and trimmed ahead of their op, the trims done in place, and the
    /// reads served from kept mappings.
    static LAST: std::cell::Cell<[u64; 7]> = const { std::cell::Cell::new([0; 7]) };
}

/// Ops the assembler takes from the scheduler ahead of the one it carries
/// out, without waiting (beyond them, it takes more as it needs them).
const QUEUED: usize = 8 * 1024;

/// Where `e` is in container `c` (its position in `c.meta`), checked
/// against the recipe.
fn chunk_at(c: &Container, e: &RecipeEntry, bid: BackupId, offset: u64) -> Result<usize> {
    let i = c.position(&e.fp).ok_or_else(|| {
        Error::corrupt(
            object_name(c.id()),
            format!("does not hold chunk {}", e.fp.to_hex()),
        )
        .in_backup(bid, Some(offset))
    })?;
    let meta = c.meta[i];
    if meta.len as u64 != e.size {
        return Err(Error::corrupt(
            format!("backup {bid}"),
            format!(
                "chunk at offset {offset} has size {} in its container, {} in the recipe",
                meta.len, e.size
            ),
        ));
    }
    Ok(i)
}

/// The scheduler sent a chunk of a container it never loaded: a bug, reported
/// as an error rather than a panic.
fn unplanned(id: ContainerId, bid: BackupId, offset: u64) -> Error {
    Error::io(
        format!("restore of backup {bid} at offset {offset}"),
        std::io::Error::other(format!(
            "{} was used before it was read (restore scheduler bug)",
            object_name(id)
        )),
    )
}

/// An op as the assembler queues it: a container read may have arrived
/// already (taken while looking ahead).
enum Step {
    Op(Op),
    Arrived(ContainerId, Result<Arc<Container>>, u64),
    /// The scheduler's error, after the ops it planned.
    Failed(Error),
}

/// The restore's last stage: carries out the scheduler's ops in recipe order,
/// copying chunks out of the loaded containers into `out`. It looks ahead
/// along the ops it has received to have the frames it will need opened
/// on the [`Openers`] meanwhile.
struct Assembler<'a> {
    out: &'a mut dyn Write,
    /// Trace mode: account, write nothing.
    trace: bool,
    bid: BackupId,
    buffers: &'a Buffers,
    permit_return: &'a loader::PermitReturn,
    budget: &'a Budget,
    store: &'a ContainerStore,
    /// The containers the cache holds, as stored, with the budget bytes
    /// each holds.
    cached: HashMap<ContainerId, (Arc<Container>, u64)>,
    /// Containers trimmed to the chunks they still supply, with the budget
    /// bytes each holds.
    trimmed: HashMap<ContainerId, (Trimmed, u64)>,
    /// Trims done in place (`restore/trim.rs`), for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    in_place: u64,
    /// Frames opened lately, and being opened.
    frames: OpenFrames,
    /// Where frames are opened ahead (none: each is opened when needed).
    openers: Option<Openers>,
    /// Plain bytes of frames opened ahead at most.
    look_ahead: usize,
    /// Ops received and not yet carried out.
    queue: VecDeque<Step>,
    /// What the queued ops still need of each container, to free one
    /// ahead of its eviction.
    early: EarlyFrees,
    /// Trims done ahead that failed, reported at their op.
    trim_failed: HashMap<ContainerId, Error>,
    /// How many of `queue`'s first steps were looked at ahead.
    scanned: usize,
    /// The cache as it will be after the scanned steps.
    scan_cached: HashMap<ContainerId, Arc<Container>>,
    /// The ops have all been received.
    ended: bool,
    /// The forward assembly area.
    area: Vec<u8>,
    /// Bytes restored so far.
    offset: u64,
    chunks: u64,
}

impl Assembler<'_> {
    /// Carry out every op the scheduler sends, in order.
    fn run(
        &mut self,
        planned: &Receiver<schedule::Batch>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        loop {
            self.drain(planned);
            self.look_ahead(planned);
            let (step, scanned) = match self.queue.pop_front() {
                Some(step) => {
                    let scanned = self.scanned > 0;
                    self.scanned = self.scanned.saturating_sub(1);
                    (step, scanned)
                }
                None if self.ended => return Ok(()),
                // Nothing to do before the scheduler sends more.
                None => {
                    match planned.recv() {
                        Ok(batch) => self.receive(batch),
                        Err(_) => self.ended = true,
                    }
                    progress(self.offset);
                    continue;
                }
            };
            match step {
                // Not looked at ahead (the look-ahead waited on this very
                // read): what it sees of the cache follows anyway, so the
                // chunks after it are still opened ahead.
                Step::Op(Op::Load(id, loaded, n)) if !scanned => {
                    self.apply(Op::Load(id, loaded, n))?;
                    if let Some((c, _)) = self.cached.get(&id) {
                        self.scan_cached.insert(id, Arc::clone(c));
                    }
                }
                Step::Op(op @ (Op::Evict(_) | Op::Release(_) | Op::Trim(..))) if !scanned => {
                    if let Op::Evict(id) | Op::Release(id) | Op::Trim(id, ..) = &op {
                        self.scan_cached.remove(id);
                    }
                    self.apply(op)?;
                }
                Step::Op(op) => self.apply(op)?,
                Step::Arrived(id, c, n) => {
                    self.permit_return.give_back();
                    let (bid, offset) = (self.bid, self.offset);
                    let c = c.map_err(|e| e.in_backup(bid, Some(offset)))?;
                    self.cached.insert(id, (c, n));
                }
                Step::Failed(e) => return Err(e),
            }
        }
    }

    /// Queue a batch of ops (an error as the op that reports it).
    fn receive(&mut self, batch: schedule::Batch) {
        match batch {
            Ok(ops) => {
                for op in ops {
                    if let Some(a) = self.early.received(&op) {
                        self.ahead(a);
                    }
                    self.queue.push_back(Step::Op(op));
                }
            }
            Err(e) => self.queue.push_back(Step::Failed(e)),
        }
    }

    /// Queue the batches the scheduler has sent, without waiting, while
    /// fewer than [`QUEUED`] ops wait: an eviction among them frees its
    /// container early ([`EarlyFrees`]), and the scheduler may be waiting
    /// for those bytes.
    fn drain(&mut self, planned: &Receiver<schedule::Batch>) {
        while !self.ended && self.queue.len() < QUEUED {
            match planned.try_recv() {
                Ok(batch) => self.receive(batch),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => self.ended = true,
            }
        }
    }

    /// Free or trim a container ahead of the op that asks it: no queued
    /// chunk needs it whole any more ([`EarlyFrees`]). A trim that fails
    /// (a damaged frame) is reported when its op is reached.
    fn ahead(&mut self, a: Ahead) {
        let id = match &a {
            Ahead::Free(id) | Ahead::Trim(id, ..) => *id,
        };
        // The look-ahead, not yet past the op, holds the same container.
        if let (Some((c, _)), Some(s)) = (self.cached.get(&id), self.scan_cached.get(&id)) {
            if Arc::ptr_eq(c, s) {
                self.scan_cached.remove(&id);
            }
        }
        match a {
            Ahead::Free(id) => {
                if let Some((c, n)) = self.cached.remove(&id) {
                    self.free_shared(c, n);
                }
                self.free_trimmed(id);
            }
            Ahead::Trim(id, prefixes, kept) => {
                if let Err(e) = self.trim(id, &prefixes, kept) {
                    self.trim_failed.insert(id, e);
                }
            }
        }
    }

    /// Look at the ops after the ones carried out and have the frames their
    /// chunks need opened, up to [`Self::look_ahead`] bytes ahead. Never
    /// waits: a container read not yet done, or no op received yet, stops
    /// it until the next call (the scheduler may wait for this thread to
    /// free containers before it plans more).
    fn look_ahead(&mut self, planned: &Receiver<schedule::Batch>) {
        if self.openers.is_none() {
            return;
        }
        // At least one frame in flight, however small the budget.
        while self.frames.ahead() == 0 || self.frames.ahead() < self.look_ahead {
            if self.scanned == self.queue.len() {
                if self.ended {
                    return;
                }
                match planned.try_recv() {
                    Ok(batch) => self.receive(batch),
                    Err(TryRecvError::Empty) => return,
                    Err(TryRecvError::Disconnected) => {
                        self.ended = true;
                        return;
                    }
                }
                continue;
            }
            let step = &mut self.queue[self.scanned];
            match step {
                Step::Op(Op::Load(id, loaded, n)) => {
                    let c = match loaded.try_recv() {
                        Ok(c) => c,
                        Err(TryRecvError::Empty) => return,
                        Err(TryRecvError::Disconnected) => receive(loaded),
                    };
                    // Its permit goes back when it is applied, as before the
                    // look-ahead: the read-ahead depth stays the scheduler's.
                    let c = c.map(Arc::new);
                    if let Ok(c) = &c {
                        self.scan_cached.insert(*id, Arc::clone(c));
                    }
                    *step = Step::Arrived(*id, c, *n);
                }
                // A trimmed container's chunks need no opening.
                Step::Op(Op::Evict(id) | Op::Release(id) | Op::Trim(id, ..)) => {
                    self.scan_cached.remove(id);
                }
                Step::Op(Op::Chunk(e, id)) => {
                    if let (Some(c), Some(openers)) = (self.scan_cached.get(id), &self.openers) {
                        // A chunk it does not hold is reported when applied.
                        if let Some(i) = c.position(&e.fp) {
                            self.frames.request(c, i, openers);
                        }
                    }
                }
                // Windows open their frames when applied.
                Step::Op(Op::Window(_) | Op::Drop(..)) | Step::Arrived(..) | Step::Failed(_) => {}
            }
            self.scanned += 1;
        }
    }

    fn apply(&mut self, op: Op) -> Result<()> {
        let (bid, offset) = (self.bid, self.offset);
        match op {
            // Released earlier, an evicted container is gone already.
            Op::Evict(id) | Op::Release(id) => {
                if self.early.evicted(id) {
                    return Ok(());
                }
                if let Some((c, n)) = self.cached.remove(&id) {
                    self.free_shared(c, n);
                }
                self.free_trimmed(id);
            }
            // Trimmed ahead (or it failed then), or freed ahead: spilled
            // next, nothing to trim.
            Op::Trim(id, ..) if self.early.trim_reached(id) => {
                if let Some(e) = self.trim_failed.remove(&id) {
                    return Err(e);
                }
            }
            Op::Trim(id, ..) if self.early.is_gone(id) => {}
            Op::Trim(id, prefixes, kept) => self.trim(id, &prefixes, kept)?,
            Op::Drop(id, fp, n) => {
                if let Some((chunks, held)) = self.trimmed.get_mut(&id) {
                    if chunks.let_go(&fp) {
                        let n = n.min(*held);
                        *held -= n;
                        self.budget.give(n);
                    }
                }
            }
            Op::Load(id, loaded, n) => {
                let c = receive(&loaded).map_err(|e| e.in_backup(bid, Some(offset)))?;
                self.permit_return.give_back();
                self.cached.insert(id, (Arc::new(c), n));
                // Read again whole (the scheduler spilled it after a trim).
                self.free_trimmed(id);
            }
            Op::Chunk(e, id) => {
                if let Some((chunks, _)) = self.trimmed.get(&id) {
                    let bytes = chunks
                        .chunk(&e.fp)
                        .ok_or_else(|| unplanned(id, bid, offset))?;
                    if !self.trace {
                        if bytes.len() as u64 != e.size {
                            return Err(Error::corrupt(
                                format!("backup {bid}"),
                                format!(
                                    "chunk at offset {offset} has size {} in its container, {} in the recipe",
                                    bytes.len(),
                                    e.size
                                ),
                            ));
                        }
                        self.out
                            .write_all(bytes)
                            .ctx(|| "cannot write restored data".into())?;
                    }
                } else {
                    let (c, _) = self
                        .cached
                        .get(&id)
                        .ok_or_else(|| unplanned(id, bid, offset))?;
                    let i = chunk_at(c, &e, bid, offset)?;
                    if !self.trace {
                        let bytes = self
                            .frames
                            .chunk(c, i, self.store)
                            .map_err(|e| e.in_backup(bid, Some(offset)))?;
                        self.out
                            .write_all(bytes)
                            .ctx(|| "cannot write restored data".into())?;
                    }
                }
                self.offset += e.size;
                self.chunks += 1;
                if let Some(a) = self.early.chunk_done(id) {
                    self.ahead(a);
                }
            }
            Op::Window(w) => self.window(w)?,
        }
        Ok(())
    }

    /// Cut container `id` to its chunks whose fingerprints start with one of
    /// `prefixes` (`restore/trim.rs`: in place, or copied out with their
    /// frames opened and authenticated as any other), holding `kept` bytes
    /// of the budget from now on. The chunks are checked against the recipe
    /// when they are used.
    fn trim(&mut self, id: ContainerId, prefixes: &[u64], kept: u64) -> Result<()> {
        let (bid, offset) = (self.bid, self.offset);
        let Some((c, n)) = self.cached.remove(&id) else {
            return Err(unplanned(id, bid, offset));
        };
        let (cut, spare) = Trimmed::cut(c, prefixes, kept, self.store)
            .map_err(|e| e.in_backup(bid, Some(offset)))?;
        self.in_place += u64::from(cut.in_place());
        self.trimmed.insert(id, (cut, kept));
        // Shared with the look-ahead: its buffer is not reused.
        if let Some(c) = spare.and_then(|c| Arc::try_unwrap(c).ok()) {
            self.buffers.give(c);
        }
        self.budget.give(n.saturating_sub(kept));
        Ok(())
    }

    /// Free trimmed container `id`, if held: its bytes back to the budget,
    /// and a container trimmed in place to [`Buffers`] (its mapping kept
    /// if it will be read again).
    fn free_trimmed(&mut self, id: ContainerId) {
        if let Some((cut, n)) = self.trimmed.remove(&id) {
            if let Some(c) = cut.into_container().and_then(|c| Arc::try_unwrap(c).ok()) {
                self.buffers.give(c);
            }
            self.budget.give(n);
        }
    }

    /// [`Self::free`] for a container the look-ahead may still share (a
    /// frame of it being opened): its buffer is reused only if not.
    fn free_shared(&self, c: Arc<Container>, n: u64) {
        match Arc::try_unwrap(c) {
            Ok(c) => self.free(c, n),
            Err(_) => self.budget.give(n),
        }
    }

    /// A container the assembler is done with: its buffer for the next
    /// read, its bytes back to the budget.
    fn free(&self, c: Container, n: u64) {
        self.buffers.give(c);
        self.budget.give(n);
    }

    /// Fill the area from each of the window's containers in turn, then
    /// write it whole.
    fn window(&mut self, w: schedule::Window) -> Result<()> {
        let (bid, offset) = (self.bid, self.offset);
        // Every byte of the area is overwritten below.
        if !self.trace {
            self.area.resize(w.filled as usize, 0);
        }
        for (_, idx, loaded, n) in &w.containers {
            let first = offset + w.entries[idx[0]].1;
            let c = receive(loaded).map_err(|e| e.in_backup(bid, Some(first)))?;
            self.permit_return.give_back();
            for &k in idx {
                let (e, at) = &w.entries[k];
                let i = chunk_at(&c, e, bid, offset + at)?;
                if !self.trace {
                    let bytes = self
                        .frames
                        .chunk(&c, i, self.store)
                        .map_err(|e| e.in_backup(bid, Some(offset + at)))?;
                    let at = *at as usize;
                    self.area[at..at + e.size as usize].copy_from_slice(bytes);
                }
            }
            self.free(c, *n);
        }
        if !self.trace {
            self.out
                .write_all(&self.area)
                .ctx(|| "cannot write restored data".into())?;
        }
        self.offset += w.filled;
        self.chunks += w.entries.len() as u64;
        Ok(())
    }
}

impl Context {
    /// The three stages: the scheduler walks the recipe and decides the cache
    /// (on this repository's index), the loaders read and verify the
    /// containers it asks for, and this thread, the [`Assembler`], copies
    /// chunks out of them into `out`. The cache decisions, and so the
    /// metrics, are those of a sequential restore. Returns the bytes and
    /// chunks restored and the seeks of the container reads.
    fn run_restore(
        &self,
        backup: &BackupEntry,
        out: &mut dyn Write,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(u64, u64, u64)> {
        std::thread::scope(|scope| {
            // Made here so that an early return drops this thread's ends
            // and a scheduler blocked on either stops.
            let (ops, planned) = sync_channel::<schedule::Batch>(4);
            let (permits, permit_return) = loader::permits(READ_AHEAD);
            let (containers, frames) = opts.split_memory();
            let budget = BudgetReturn(Budget::new(containers));
            // A restore that knows which containers it reads again lets
            // the others' cached pages go once it is done with them.
            let buffers = if schedule::knows_future(opts, self.manifest.config.trace) {
                Buffers::uncaching()
            } else {
                Buffers::default()
            };
            let loaders =
                Loaders::spawn(scope, &self.store, self.threads() + EXTRA_LOADERS, &buffers)?;
            let scheduler = Scheduler::new(
                self,
                ops,
                loaders,
                permits,
                budget.0.clone(),
                containers,
                buffers.clone(),
            );
            let plan = std::thread::Builder::new()
                .name("tessera-plan".into())
                .spawn_scoped(scope, move || scheduler.run(self, backup, opts))
                .ctx(|| "cannot start the restore scheduler thread".into())?;
            let mut a = Assembler {
                out,
                trace: self.manifest.config.trace,
                bid: backup.id,
                buffers: &buffers,
                permit_return: &permit_return,
                budget: &budget.0,
                store: &self.store,
                cached: HashMap::new(),
                trimmed: HashMap::new(),
                in_place: 0,
                frames: OpenFrames::new(frames),
                openers: match self.manifest.config.trace {
                    true => None,
                    false => Openers::spawn(scope, &self.store, self.threads(), &buffers),
                },
                look_ahead: frames / 2,
                queue: VecDeque::new(),
                early: EarlyFrees::default(),
                trim_failed: HashMap::new(),
                scanned: 0,
                scan_cached: HashMap::new(),
                ended: false,
                area: Vec::new(),
                offset: 0,
                chunks: 0,
            };
            let ran = a.run(&planned, progress);
            #[cfg(test)]
            {
                let (limit, peak, over) = budget.0.accounts();
                let (freed, trimmed) = a.early.done_ahead();
                let reused = buffers.reused();
                LAST.with(|l| l.set([limit, peak, over, freed, trimmed, a.in_place, reused]));
            }
            ran?;
            // The scheduler ended (its channel closed); a panic there
            // would have failed the restore above.
            let seeks = plan.join().unwrap_or(0);
            Ok((a.offset, a.chunks, seeks))
        })
    }
}
/// [`Repository::restore_to`](crate::Repository::restore_to).
pub(crate) fn restore_to(
    repo: &Context,
    via: &dyn Restorer,
    backup: &BackupEntry,
    out: &mut dyn Write,
    opts: &RestoreOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<RestoreReport> {
    if let Some(done) = via.restore_to(repo, backup, out, opts, progress) {
        return done;
    }
    let started = Instant::now();
    let before = repo.metrics.snapshot();
    let bid = backup.id;
    // A directory backup: its metadata first, then the contents become
    // the tar stream.
    let (offset, chunks, seeks) = match range::tree_records(repo, backup)? {
        Some((records, content)) => {
            let mut tar = crate::archive::assemble::TarAssembler::new(&mut *out, records, content)?;
            let done = repo.run_restore(backup, &mut tar, opts, progress)?;
            tar.finish()?;
            done
        }
        None => repo.run_restore(backup, out, opts, progress)?,
    };
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
    let io = repo.metrics.snapshot().since(&before);
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
        seeks,
        cache_containers: opts.cache.containers(),
        cache: opts.cache,
        seconds: secs,
        throughput_mb_s: mb_per_s(offset, secs),
        mfdedup: None,
    })
}

/// [`Repository::restore_into_selected`](crate::Repository::restore_into_selected).
/// `explain` adds to a damage error what is damaged (the face passes
/// salvage's tolerant reading).
#[allow(clippy::too_many_arguments)]
pub(crate) fn restore_into_selected(
    repo: &Context,
    via: &dyn Restorer,
    explain: &dyn Fn(Error) -> Error,
    backup: &BackupEntry,
    target: &Path,
    opts: &RestoreOptions,
    include: &[String],
    progress: &mut dyn FnMut(u64),
) -> Result<(RestoreReport, ExtractReport)> {
    // Refuse a bad path before restoring anything.
    crate::archive::include_paths(include)?;
    // A layout that writes a file backup by positional writes (MFDedup)
    // does it in place.
    if via.writes_in_place()
        && include.is_empty()
        && matches!(backup.source, SourceKind::File | SourceKind::Stream)
    {
        std::fs::create_dir_all(target).ctx(|| format!("cannot create {}", target.display()))?;
        let path = target.join(file_name(backup));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .ctx(|| format!("cannot create {}", path.display()))?;
        let r = via.restore_to_file(repo, backup, &f, opts, progress)?;
        f.sync_all()
            .ctx(|| format!("cannot write {}", path.display()))?;
        let ext = ExtractReport {
            files: 1,
            bytes: r.restored_bytes,
            ..Default::default()
        };
        return Ok((r, ext));
    }
    let (restored, extracted) = into_directory_with(
        backup,
        target,
        include,
        |out| restore_to(repo, via, backup, out, opts, progress),
        |r| r.restored_bytes,
        repo.threads() * WRITERS_PER_THREAD,
    )?;
    match restored {
        // Damage explains the truncated stream the extractor saw; name
        // the files it touches.
        Err(e @ (Error::Corrupt { .. } | Error::MissingObject(_))) => Err(explain(e)),
        // Otherwise an extraction error explains a broken pipe better
        // than the pipe error.
        restored => {
            let ext = extracted?;
            Ok((restored?, ext))
        }
    }
}

/// [`Repository::list_entries`](crate::Repository::list_entries).
pub(crate) fn list_entries(
    repo: &Context,
    via: &dyn Restorer,
    backup: &BackupEntry,
    visit: &mut dyn FnMut(crate::archive::Listed) -> Result<()>,
) -> Result<()> {
    match backup.source {
        SourceKind::Trace => Err(Error::invalid(format!(
            "backup {} is a fingerprint trace: it has no files to list",
            backup.id
        ))),
        SourceKind::File | SourceKind::Stream => visit(single_file_listing(backup)),
        SourceKind::Tree if backup.content_bytes.is_some() => {
            let (records, _) = range::tree_records(repo, backup)?.expect("a directory stream");
            for r in &records {
                visit(crate::archive::assemble::listed(r))?;
            }
            Ok(())
        }
        SourceKind::Tree => {
            let (mut reader, writer) = std::io::pipe().ctx(|| "cannot create a pipe".into())?;
            std::thread::scope(|scope| {
                let producer = std::thread::Builder::new()
                    .name("tessera-list".into())
                    .spawn_scoped(scope, move || {
                        let mut w = std::io::BufWriter::with_capacity(1 << 20, writer);
                        let opts = RestoreOptions::default();
                        restore_to(repo, via, backup, &mut w, &opts, &mut |_| {})
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
    into_directory_with(backup, target, include, produce, restored_bytes, 1)
}

/// [`into_directory`], a directory backup's files written by `writers`
/// threads ([`crate::archive::extract_with`]).
fn into_directory_with<R>(
    backup: &BackupEntry,
    target: &Path,
    include: &[String],
    produce: impl FnOnce(&mut dyn Write) -> Result<R>,
    restored_bytes: impl Fn(&R) -> u64,
    writers: usize,
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
            // Two blocks in flight: with the frames opened ahead the
            // assembler keeps the pipe full, and each block is 1 MiB of
            // peak memory.
            let (mut reader, mut w) = pipe::pipe(2);
            let dir = target.to_path_buf();
            let include = include.to_vec();
            let extractor = std::thread::Builder::new()
                .name("tessera-extract".into())
                .spawn(move || {
                    let r = crate::archive::extract_from(&mut reader, &dir, &include, writers);
                    // Drain, so the restore side never blocks on a full pipe.
                    let _ = std::io::copy(&mut reader, &mut std::io::sink());
                    r
                })
                .ctx(|| "cannot start the extraction thread".into())?;
            let restored = produce(&mut w);
            drop(w);
            let extracted = extractor
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            Ok((restored, extracted))
        }
    }
}
