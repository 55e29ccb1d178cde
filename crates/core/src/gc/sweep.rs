//! Sweep: copy live chunks forward into new containers (naive: in their old
//! order), then commit — one new index segment holding the whole index,
//! the new manifest generation, and only then the deletion of the old
//! containers and segments.
//!
//! Liveness is per copy (see [`super::mark`]): a container's chunk is moved
//! for the copies of it that retained backups reference, and each moved
//! copy's index entry is redirected to its new container, so every backup
//! that referenced the copy reads it there (recipes never change). Copies
//! no retained backup references are dropped from the index with their
//! container, even where another copy of the fingerprint lives on.
//!
//! After a PGC+ mark the naive sweep is PGC+'s copy phase ([`copy_backward`]):
//! newest container first, keeping the newest copy of each live chunk and
//! dropping the older ones (dynamic duplicate removal, FAST'17 §3.4.2).
//! `--max-read-rate`/`--max-write-rate` pace the copy ([`Throttle`]).

use super::gccdf::{plan, preprocess};
use super::mark::{FpFilter, Mark};
use super::select::Selection;
use crate::catalog::ContainerEntry;
use crate::container::{
    ChunkKind, ChunkMeta, ChunkSource, ContainerFiller, ContainerId, IdAllocator,
};
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpMap, FpSet};
use crate::gc::options::{GcOptions, GcStrategy};
use crate::index::{encode_segment_sorted, CopyNo, CopySet, IndexEntry};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Paces a stream of bytes to a rate (bytes per second), so a GC does not
/// starve backups and restores of I/O (FAST'17 §3.5's throttling).
#[derive(Debug, Default)]
pub struct Throttle {
    rate: Option<u64>,
    started: Option<Instant>,
    bytes: u64,
    slept: Duration,
}

impl Throttle {
    pub fn new(rate: Option<u64>) -> Self {
        Throttle {
            rate,
            ..Default::default()
        }
    }

    /// How long to wait after `bytes` in all have gone by at `elapsed`,
    /// so the average stays at most `rate`.
    pub fn delay(rate: u64, bytes: u64, elapsed: Duration) -> Duration {
        let due = Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64);
        due.saturating_sub(elapsed)
    }

    /// Count `n` bytes and sleep as long as the rate asks.
    pub fn consume(&mut self, n: u64) {
        let Some(rate) = self.rate else { return };
        let started = *self.started.get_or_insert_with(Instant::now);
        self.bytes += n;
        let d = Self::delay(rate, self.bytes, started.elapsed());
        if !d.is_zero() {
            std::thread::sleep(d);
            self.slept += d;
        }
    }

    pub fn slept_seconds(&self) -> f64 {
        self.slept.as_secs_f64()
    }
}

/// Fills new containers of one kind through the shared [`ContainerFiller`]
/// and records where each moved chunk went.
pub struct Packer {
    kind: ChunkKind,
    writer: ContainerFiller,
    ids: IdAllocator,
    /// Index entries of the copies moved ((fingerprint, copy) → new container).
    pub moved: Vec<IndexEntry>,
    /// Paces the containers written.
    pub write_throttle: Throttle,
    /// The open container and the chunks written into it so far: live
    /// copies of one chunk that lay in different old containers meet here
    /// and share one stored copy (writing it twice would leave a redundant
    /// duplicate that the next GC must clean up).
    open: Option<(ContainerId, FpSet)>,
}

impl Packer {
    pub fn new(repo: &Context, kind: ChunkKind, next_id: ContainerId) -> Self {
        let cfg = &repo.manifest.config;
        Packer {
            kind,
            writer: ContainerFiller::new(
                repo.store.clone(),
                kind,
                cfg.container_size as u64,
                cfg.trace,
            ),
            ids: IdAllocator::new(next_id),
            moved: Vec::new(),
            write_throttle: Throttle::new(None),
            open: None,
        }
    }

    /// Move a chunk (`m` is its entry in its old container) once for its
    /// moved copies `copies` (one, unless several live copies sat in one
    /// container); redirect each. `src` is the chunk as it lies there:
    /// stored bytes move as they are where the frame moves whole (no
    /// decompression, no re-encryption), plain bytes are framed again
    /// otherwise.
    pub fn push_copy(
        &mut self,
        m: &ChunkMeta,
        copies: &[CopyNo],
        src: ChunkSource<'_>,
    ) -> Result<ContainerId> {
        let container = match &self.open {
            Some((id, fps)) if fps.contains(&m.fp) => *id,
            _ => {
                let written = self.writer.written().len();
                let container = self.writer.push_source(&mut self.ids, m, src)?;
                if self.writer.written().len() > written {
                    let n = self.writer.written().last().map_or(0, |c| c.logical_bytes);
                    self.write_throttle.consume(n);
                }
                match &mut self.open {
                    Some((id, fps)) if *id == container => {
                        fps.insert(m.fp);
                    }
                    open => *open = Some((container, FpSet::from_iter([m.fp]))),
                }
                container
            }
        };
        self.moved.extend(copies.iter().map(|&copy| IndexEntry {
            fp: m.fp,
            container,
            kind: self.kind,
            copy,
        }));
        Ok(container)
    }

    /// Write the open container, if any.
    pub fn seal(&mut self) -> Result<()> {
        self.open = None;
        self.writer.seal().map(drop)
    }

    /// The containers written, in order.
    pub fn produced(&self) -> &[ContainerEntry] {
        self.writer.written()
    }

    /// The first id not allocated yet.
    pub fn next_id(&self) -> ContainerId {
        self.ids.next_id()
    }

    pub fn write_seconds(&self) -> f64 {
        self.writer.write_seconds()
    }
}

/// Phase timings and peaks of a sweep.
#[derive(Default)]
pub struct SweepStats {
    pub read_seconds: f64,
    pub analyze_seconds: f64,
    pub cache_peak_bytes: u64,
    pub tree_peak_bytes: u64,
    pub segments: u64,
    pub moved_chunks: u64,
    /// Metadata-only container reads (PGC+'s copy of unselected containers).
    pub metadata_reads: u64,
    pub metadata_bytes: u64,
    /// Paces the containers read.
    pub read_throttle: Throttle,
}

/// Naive copy-forward of the live copies in `ids`, in their old order.
/// `placed` makes each copy move once.
pub fn copy_forward(
    repo: &Context,
    mark: &Mark,
    kind: ChunkKind,
    ids: &[ContainerId],
    packer: &mut Packer,
    placed: &mut CopySet,
    stats: &mut SweepStats,
) -> Result<()> {
    let mut copies = Vec::new();
    for &id in ids {
        let t = Instant::now();
        let c = repo.store.read_stored(id)?;
        stats.read_seconds += t.elapsed().as_secs_f64();
        stats.read_throttle.consume(c.header.logical_len);
        let mut cached = 0;
        for m in &c.meta {
            mark.take_live_copies(&repo.index, kind, &m.fp, id, placed, &mut copies);
            if !copies.is_empty() {
                packer.push_copy(m, &copies, c.source(m))?;
                cached += m.len as u64;
                stats.moved_chunks += 1;
            }
        }
        stats.cache_peak_bytes = stats.cache_peak_bytes.max(cached);
    }
    packer.seal()
}

/// Which live fingerprints PGC+'s copy phase has kept a copy of: the live
/// vector's bits flipped (here a second vector over the same perfect hash,
/// as the mark is shared), or a set for a live vector that is not a PHV.
enum Kept {
    Bits(Vec<u64>),
    Set(FpSet),
}

impl Kept {
    fn contains(&self, valid: &FpFilter, fp: &Fingerprint) -> bool {
        match (self, valid) {
            (Kept::Bits(b), FpFilter::Phv(p)) => {
                p.slot(fp).is_some_and(|i| b[i / 64] & (1 << (i % 64)) != 0)
            }
            (Kept::Set(s), _) => s.contains(fp),
            (Kept::Bits(_), _) => false,
        }
    }
    /// Mark `fp` kept; false if a newer copy was kept already.
    fn insert(&mut self, valid: &FpFilter, fp: &Fingerprint) -> bool {
        match (self, valid) {
            (Kept::Bits(b), FpFilter::Phv(p)) => match p.slot(fp) {
                Some(i) if b[i / 64] & (1 << (i % 64)) == 0 => {
                    b[i / 64] |= 1 << (i % 64);
                    true
                }
                Some(_) => false,
                None => true,
            },
            (Kept::Set(s), _) => s.insert(*fp),
            (Kept::Bits(_), _) => true,
        }
    }
}

/// PGC+'s copy phase (§3.4.2): every data container, newest first. The
/// first live copy met of a chunk is kept — copied forward if
/// its container is selected, left in place (a metadata read) otherwise —
/// and every other copy is dead. Per-backup copies: the live copies of
/// the chunk in older containers are redirected to the kept one (same
/// bytes; the backups that read them now read it), so dynamic duplicate
/// removal never leaves a retained backup without its chunk. Selected
/// containers estimated empty are checked through their metadata and only
/// read if a chunk there is still the newest live copy. Returns the index
/// redirects.
pub fn copy_backward(
    repo: &Context,
    mark: &Mark,
    sel: &Selection,
    packer: &mut Packer,
    stats: &mut SweepStats,
) -> Result<Vec<IndexEntry>> {
    let copy: HashSet<ContainerId> = sel.copy.iter().copied().collect();
    let empty: HashSet<ContainerId> = sel.empty.iter().copied().collect();
    let mut ids: Vec<ContainerId> = repo
        .manifest
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| c.id)
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let mut kept = match &mark.valid {
        FpFilter::Phv(p) => Kept::Bits(vec![0; p.len().div_ceil(64)]),
        _ => Kept::Set(FpSet::default()),
    };
    // Where the kept copy of a chunk with several copies is.
    let mut kept_at: FpMap<ContainerId> = FpMap::default();
    let several = |fp: &Fingerprint| repo.index.copy_list(fp).len() > 1;
    let mut redirects = Vec::new();
    // The live copies `here` of `fp` now read the kept copy.
    let redirect = |fp: &Fingerprint,
                    here: &[CopyNo],
                    kept_at: &FpMap<ContainerId>,
                    out: &mut Vec<IndexEntry>| {
        if let Some(&to) = kept_at.get(fp) {
            out.extend(here.iter().map(|&n| IndexEntry {
                fp: *fp,
                container: to,
                kind: ChunkKind::Data,
                copy: n,
            }));
        }
    };
    let mut here = Vec::new();
    for id in ids {
        let selected = copy.contains(&id);
        if !selected {
            let (h, meta) = repo.store.read_meta(id)?;
            stats.metadata_reads += 1;
            stats.metadata_bytes += crate::container::format::HEADER_LEN as u64 + h.meta_len;
            let dropped = empty.contains(&id);
            let must_read = dropped
                && meta.iter().any(|m| {
                    mark.live_copies_in(&repo.index, &m.fp, id, &mut here);
                    !here.is_empty() && !kept.contains(&mark.valid, &m.fp)
                });
            if !must_read {
                for m in &meta {
                    mark.live_copies_in(&repo.index, &m.fp, id, &mut here);
                    if here.is_empty() {
                        continue;
                    }
                    if !dropped && kept.insert(&mark.valid, &m.fp) {
                        if several(&m.fp) {
                            kept_at.insert(m.fp, id);
                        }
                    } else {
                        // Deleted unread, or an older copy: its readers
                        // read the kept copy.
                        redirect(&m.fp, &here, &kept_at, &mut redirects);
                    }
                }
                continue;
            }
        }
        let t = Instant::now();
        let c = repo.store.read_stored(id)?;
        stats.read_seconds += t.elapsed().as_secs_f64();
        stats.read_throttle.consume(c.header.logical_len);
        let mut cached = 0;
        for m in &c.meta {
            mark.live_copies_in(&repo.index, &m.fp, id, &mut here);
            if here.is_empty() {
                continue;
            }
            if kept.insert(&mark.valid, &m.fp) {
                let to = packer.push_copy(m, &here, c.source(m))?;
                if several(&m.fp) {
                    kept_at.insert(m.fp, to);
                }
                cached += m.len as u64;
                stats.moved_chunks += 1;
            } else {
                redirect(&m.fp, &here, &kept_at, &mut redirects);
            }
        }
        stats.cache_peak_bytes = stats.cache_peak_bytes.max(cached);
    }
    packer.seal()?;
    Ok(redirects)
}

/// GCCDF sweep of the data containers `ids`, segment by segment: cache the
/// valid chunks, cluster them by ownership, write them in the planner's
/// order. Each segment ends its last container, so segments do not mix.
pub fn gccdf_sweep(
    repo: &Context,
    mark: &Mark,
    ids: &[ContainerId],
    opts: &GcOptions,
    packer: &mut Packer,
    stats: &mut SweepStats,
) -> Result<()> {
    let (segment_containers, split_threshold) =
        (opts.segment_containers, opts.split_threshold_for(repo));
    let mut placed = CopySet::default();
    for segment in ids.chunks(segment_containers.max(1)) {
        stats.segments += 1;
        let (cache, secs) = preprocess::load_segment(repo, mark, segment, &mut placed)?;
        stats.read_seconds += secs;
        let read: u64 = repo
            .manifest
            .containers
            .iter()
            .filter(|c| segment.contains(&c.id))
            .map(|c| c.logical_bytes)
            .sum();
        stats.read_throttle.consume(read);
        stats.cache_peak_bytes = stats.cache_peak_bytes.max(cache.logical);
        let t = Instant::now();
        let tree = super::gccdf::segment_tree(mark, &cache, segment, split_threshold);
        let order = plan::migration_order(&tree, opts.packing, stats.segments);
        stats.tree_peak_bytes = stats.tree_peak_bytes.max(tree.memory_bytes());
        drop(tree);
        stats.analyze_seconds += t.elapsed().as_secs_f64();
        for i in order {
            let i = i as usize;
            packer.push_copy(&cache.metas[i], &cache.copies[i], cache.source(i))?;
            stats.moved_chunks += 1;
        }
        packer.seal()?;
    }
    Ok(())
}

/// The containers a sweep other than PGC+'s copy phase must read: the
/// selected ones, plus — after a PGC+ mark, whose selection estimates away
/// chunks that have a newer copy — any container estimated empty that
/// still holds a live copy (per-backup copies: an older copy is live while
/// a retained backup reads it), so no live copy is deleted unread.
fn with_live_empties(repo: &Context, mark: &Mark, sel: &Selection) -> Result<Vec<ContainerId>> {
    let mut ids = sel.copy.clone();
    if mark.dup_counter.is_none() {
        return Ok(ids);
    }
    let mut here = Vec::new();
    for &id in &sel.empty {
        let (_, meta) = repo.store.read_meta(id)?;
        if meta.iter().any(|m| {
            mark.live_copies_in(&repo.index, &m.fp, id, &mut here);
            !here.is_empty()
        }) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// What a container sweep wrote: data containers, then recipe containers.
pub struct Swept {
    pub data: Packer,
    pub recipe: Packer,
    pub stats: SweepStats,
    pub recipe_stats: SweepStats,
}

impl Swept {
    /// Containers written, data then recipe (the order the manifest lists).
    pub fn produced(&self) -> Vec<ContainerEntry> {
        self.data
            .produced()
            .iter()
            .chain(self.recipe.produced())
            .copied()
            .collect()
    }

    /// The sweep's figures in the report; memory peaks on top of the mark's.
    pub fn add_to(
        &self,
        r: &mut super::report::GcReport,
        mark_memory: u64,
        reclaimed_logical_bytes: u64,
    ) {
        let (s, rs) = (&self.stats, &self.recipe_stats);
        r.produced_containers = self.data.produced().len() as u64;
        r.recipe_produced_containers = self.recipe.produced().len() as u64;
        r.sweep_read_seconds = s.read_seconds + rs.read_seconds;
        r.sweep_write_seconds = self.data.write_seconds() + self.recipe.write_seconds();
        r.analyze_seconds = s.analyze_seconds;
        r.moved_chunks = s.moved_chunks + rs.moved_chunks;
        r.segments = s.segments;
        r.gc_cache_peak_bytes = s.cache_peak_bytes;
        r.tree_peak_bytes = s.tree_peak_bytes;
        r.peak_memory_bytes = mark_memory + s.cache_peak_bytes + s.tree_peak_bytes;
        let written: u64 = self.produced().iter().map(|c| c.logical_bytes).sum();
        r.reclaimed_bytes = reclaimed_logical_bytes.saturating_sub(written);
    }
}

/// Copy the live chunks of the selected containers forward: data chunks by
/// `opts.strategy`, then recipe chunks in their old order. Ids continue
/// from the manifest's allocator, data first.
pub fn sweep_containers(
    repo: &Context,
    mark: &Mark,
    sel: &Selection,
    opts: &GcOptions,
) -> Result<Swept> {
    let mut stats = SweepStats {
        read_throttle: Throttle::new(opts.max_read_rate),
        ..Default::default()
    };
    let mut data = Packer::new(repo, ChunkKind::Data, repo.first_container_id());
    data.write_throttle = Throttle::new(opts.max_write_rate);
    match opts.strategy {
        GcStrategy::Naive if mark.dup_counter.is_some() => {
            let redirects = copy_backward(repo, mark, sel, &mut data, &mut stats)?;
            data.moved.extend(redirects);
        }
        GcStrategy::Naive => copy_forward(
            repo,
            mark,
            ChunkKind::Data,
            &sel.copy,
            &mut data,
            &mut CopySet::default(),
            &mut stats,
        )?,
        // CMA: select sent no container to be copied.
        GcStrategy::Cma => debug_assert!(sel.copy.is_empty() && sel.recipe_copy.is_empty()),
        GcStrategy::Gccdf => gccdf_sweep(
            repo,
            mark,
            &with_live_empties(repo, mark, sel)?,
            opts,
            &mut data,
            &mut stats,
        )?,
    }
    let mut recipe = Packer::new(repo, ChunkKind::Recipe, data.next_id());
    recipe.write_throttle = Throttle::new(opts.max_write_rate);
    let mut recipe_stats = SweepStats {
        read_throttle: Throttle::new(opts.max_read_rate),
        ..Default::default()
    };
    copy_forward(
        repo,
        mark,
        ChunkKind::Recipe,
        &sel.recipe_copy,
        &mut recipe,
        &mut CopySet::default(),
        &mut recipe_stats,
    )?;
    Ok(Swept {
        data,
        recipe,
        stats,
        recipe_stats,
    })
}

/// Publish the GC: the index without the copies in reclaimed containers
/// and with the moved copies' new homes — every copy of every chunk, as one
/// segment superseding all others; the manifest without the reclaimed
/// containers and with the produced ones.
pub fn commit(
    repo: &mut Context,
    reclaimed: &HashSet<ContainerId>,
    produced: &[ContainerEntry],
    moved: &[IndexEntry],
    aliases: &HashSet<(crate::fingerprint::Fingerprint, crate::index::CopyNo)>,
    next_id: ContainerId,
) -> Result<()> {
    let key = |e: &IndexEntry| (e.kind == ChunkKind::Recipe, e.fp, e.copy);
    let to: HashMap<_, ContainerId> = moved.iter().map(|e| (key(e), e.container)).collect();
    let mut dropped = Vec::new();
    let (d, r) = repo.index.len();
    // The segment that replaces all others, encoded as the index is walked
    // (no sorted copy of the whole index beside it).
    let mut kept = 0usize;
    let segment = encode_segment_sorted(
        d + r + repo.index.extra_copies(),
        repo.index.entries().filter_map(|e| {
            let e = match to.get(&key(&e)) {
                Some(&c) => IndexEntry { container: c, ..e },
                None if reclaimed.contains(&e.container) => {
                    dropped.push(e);
                    return None;
                }
                None if e.kind == ChunkKind::Data && aliases.contains(&(e.fp, e.copy)) => {
                    dropped.push(e);
                    return None;
                }
                None => e,
            };
            kept += 1;
            Some(e)
        }),
    );
    let mut next = repo.manifest.clone();
    next.containers.retain(|c| !reclaimed.contains(&c.id));
    next.containers.extend_from_slice(produced);
    // A writer that joined others allocates in its reserved range, below
    // the allocator.
    next.next_container_id = next.next_container_id.max(next_id);
    repo.containers_allocated(next_id);
    next.forgotten.clear();
    let superseded = std::mem::take(&mut next.index_segments);
    if kept > 0 {
        repo.write_encoded_segment(&mut next, segment)?;
    }
    let mut gone: Vec<ContainerId> = reclaimed.iter().copied().collect();
    gone.sort_unstable();
    let generation = repo.manifest.generation;
    let published = crate::publish::publish(repo, next, &[]).and_then(|()| {
        // Readers of older generations (restore, ls, check in other
        // processes) may still read the reclaimed containers, and load
        // the superseded index segments (a reader opened before this
        // publish loads its generation's index when it first needs it).
        if crate::lock::wait_for_readers(&**repo.objects.store(), super::options::READER_WAIT)? {
            for key in &superseded {
                repo.objects.delete(key)?;
            }
            for id in &gone {
                repo.objects
                    .delete(&crate::backend::ObjectKey::Container(*id))?;
            }
            repo.objects.barrier()?;
        } else {
            repo.leave_leftovers();
        }
        Ok(())
    });
    // Once the manifest is out, the in-memory index must follow it, even if
    // deleting the superseded objects failed (the next writer removes them).
    // A publish merged with other writers' generations (online GC) has
    // reloaded the index from what was published: our changes are in it,
    // and applying them again would drop the copies a backup stored again
    // of chunks this GC deleted (same fingerprint and copy number).
    let merged = repo.manifest.generation != generation.next();
    let mut follow = Ok(());
    if repo.manifest.generation != generation && !merged {
        // Every change is made even after an on-disk index error (the
        // index then fails every later change); the first error is kept.
        for e in dropped {
            follow = follow.and(repo.index.remove_copy(e.kind, &e.fp, e.copy));
        }
        for e in moved {
            follow = follow.and(repo.index.insert(*e));
        }
    }
    if repo.manifest.generation == generation.next() && follow.is_ok() {
        // Published unmerged: the index now stands for the one segment
        // that replaced all others, and the next opening reuses it rather
        // than rebuilding the runs from that segment.
        repo.keep_index();
    }
    // The publish's own error first: it says whether the GC is out.
    published.and(follow)
}
