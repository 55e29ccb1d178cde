//! Sweep: copy live chunks forward into new containers (naive: in their old
//! order), then commit — one new index segment holding the whole index,
//! the new manifest generation, and only then the deletion of the old
//! containers and segments.

use super::gccdf::{analyze, plan, preprocess};
use super::mark::Mark;
use crate::catalog::ContainerEntry;
use crate::container::{ChunkKind, ContainerBuilder, ContainerId, ContainerStore};
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpMap, FpSet};
use crate::index::IndexEntry;
use crate::repo::{container_entry, Repository};
use std::collections::HashSet;
use std::time::Instant;

/// Fills new containers of one kind; allocates their ids.
pub struct Packer<'a> {
    store: &'a ContainerStore,
    kind: ChunkKind,
    builder: ContainerBuilder,
    id: ContainerId,
    pub next_id: ContainerId,
    pub produced: Vec<ContainerEntry>,
    /// Index entries of the chunks moved (fingerprint → new container).
    pub moved: Vec<IndexEntry>,
    pub write_seconds: f64,
}

impl<'a> Packer<'a> {
    pub fn new(repo: &'a Repository, kind: ChunkKind, next_id: ContainerId) -> Self {
        let cfg = &repo.manifest.config;
        let trace = cfg.trace && kind == ChunkKind::Data;
        Packer {
            store: &repo.store,
            kind,
            builder: ContainerBuilder::new(kind, cfg.container_size as u64, trace),
            id: 0,
            next_id,
            produced: Vec::new(),
            moved: Vec::new(),
            write_seconds: 0.0,
        }
    }

    pub fn push(&mut self, fp: Fingerprint, len: u32, bytes: &[u8]) -> Result<()> {
        if !self.builder.fits(len as u64) {
            self.seal()?;
        }
        if self.builder.is_empty() {
            self.id = self.next_id;
            self.next_id += 1;
        }
        self.builder.push(fp, len, bytes);
        self.moved.push(IndexEntry {
            fp,
            container: self.id,
            kind: self.kind,
        });
        Ok(())
    }

    /// Write the open container, if any.
    pub fn seal(&mut self) -> Result<()> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let logical = self.builder.logical_len();
        let (entries, framed) = self.builder.take();
        let (object_bytes, buf) = self
            .store
            .write_framed(self.id, self.kind, &entries, framed)?;
        self.builder.recycle(buf);
        self.produced.push(container_entry(
            self.id,
            self.kind,
            entries.len(),
            logical,
            object_bytes,
        ));
        self.write_seconds += t.elapsed().as_secs_f64();
        Ok(())
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
}

/// Naive copy-forward of the live chunks of `ids`, in their old order.
/// `placed` merges duplicates: each fingerprint is written once.
pub fn copy_forward(
    repo: &Repository,
    kind: ChunkKind,
    ids: &[ContainerId],
    live: impl Fn(&Fingerprint) -> bool,
    packer: &mut Packer,
    placed: &mut FpSet,
    stats: &mut SweepStats,
) -> Result<()> {
    for &id in ids {
        let t = Instant::now();
        let c = repo.store.read(id)?;
        stats.read_seconds += t.elapsed().as_secs_f64();
        let mut cached = 0;
        for m in &c.meta {
            if live(&m.fp) && repo.index.get(kind, &m.fp) == Some(id) && placed.insert(m.fp) {
                packer.push(m.fp, m.len, c.bytes(m))?;
                cached += m.len as u64;
                stats.moved_chunks += 1;
            }
        }
        stats.cache_peak_bytes = stats.cache_peak_bytes.max(cached);
    }
    packer.seal()
}

/// GCCDF sweep of the data containers `ids`, segment by segment: cache the
/// valid chunks, cluster them by ownership, write them in the planner's
/// order. Each segment ends its last container, so segments do not mix.
pub fn gccdf_sweep(
    repo: &Repository,
    mark: &Mark,
    ids: &[ContainerId],
    segment_containers: usize,
    split_threshold: usize,
    packer: &mut Packer,
    stats: &mut SweepStats,
) -> Result<()> {
    let mut placed = FpSet::default();
    for segment in ids.chunks(segment_containers.max(1)) {
        stats.segments += 1;
        let (cache, secs) = preprocess::load_segment(repo, mark, segment, &mut placed)?;
        stats.read_seconds += secs;
        stats.cache_peak_bytes = stats.cache_peak_bytes.max(cache.logical);
        let t = Instant::now();
        let backups = preprocess::involved_backups(mark, segment);
        let filters: Vec<_> = backups.iter().map(|b| mark.owners.get(b)).collect();
        let tree = analyze::analyze(cache.len(), filters.len(), split_threshold, |r, c| {
            filters[r].is_some_and(|f| f.contains(&cache.fps[c as usize]))
        });
        let order = plan::migration_order(&tree);
        stats.tree_peak_bytes = stats.tree_peak_bytes.max(tree.memory_bytes());
        drop(tree);
        stats.analyze_seconds += t.elapsed().as_secs_f64();
        for i in order {
            let i = i as usize;
            packer.push(cache.fps[i], cache.lens[i], cache.bytes(i))?;
            stats.moved_chunks += 1;
        }
        packer.seal()?;
    }
    Ok(())
}

/// Publish the GC: the index without entries into reclaimed containers and
/// with the moved chunks' new homes, as one segment superseding all others;
/// the manifest without the reclaimed containers and with the produced ones.
pub fn commit(
    repo: &mut Repository,
    reclaimed: &HashSet<ContainerId>,
    produced: &[ContainerEntry],
    moved: &[IndexEntry],
    next_id: ContainerId,
) -> Result<()> {
    let (mut data, mut recipe) = (FpMap::default(), FpMap::default());
    for e in moved {
        match e.kind {
            ChunkKind::Data => data.insert(e.fp, e.container),
            ChunkKind::Recipe => recipe.insert(e.fp, e.container),
        };
    }
    let mut dropped = Vec::new();
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(repo.index.len().0 + repo.index.len().1);
    for e in repo.index.entries() {
        let to = match e.kind {
            ChunkKind::Data => data.get(&e.fp),
            ChunkKind::Recipe => recipe.get(&e.fp),
        };
        match to {
            Some(&c) => entries.push(IndexEntry { container: c, ..e }),
            None if reclaimed.contains(&e.container) => dropped.push((e.kind, e.fp)),
            None => entries.push(e),
        }
    }
    entries.sort_unstable_by_key(|e| (e.kind == ChunkKind::Recipe, e.fp));
    let mut next = repo.manifest.clone();
    next.containers.retain(|c| !reclaimed.contains(&c.id));
    next.containers.extend_from_slice(produced);
    next.next_container_id = next_id;
    next.forgotten.clear();
    let mut superseded = std::mem::take(&mut next.index_segments);
    repo.write_segment(&mut next, &entries)?;
    let mut gone: Vec<ContainerId> = reclaimed.iter().copied().collect();
    gone.sort_unstable();
    superseded.extend(gone.into_iter().map(crate::backend::ObjectKey::Container));
    let generation = repo.manifest.generation;
    let published = repo.publish(next, &superseded);
    // Once the manifest is out, the in-memory index must follow it, even if
    // deleting the superseded objects failed (the next writer removes them).
    if repo.manifest.generation != generation {
        for (kind, fp) in dropped {
            repo.index.remove(kind, &fp);
        }
        for e in moved {
            repo.index.insert(*e);
        }
    }
    published
}
