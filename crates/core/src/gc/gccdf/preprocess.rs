//! Preprocessor (GCCDF §5.2): for one segment of GC-involved containers,
//! load the valid chunks into the GC cache and gather the involved backups
//! from the RRT.

use crate::catalog::BackupId;
use crate::container::{ChunkKind, ChunkMeta, ChunkSource, ContainerId};
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use crate::gc::mark::Mark;
use crate::index::{CopyNo, CopySet};
use std::time::Instant;

/// The valid chunks of one segment, in their old order. Data mode copies the
/// chunks out so the containers can be dropped: a chunk stored alone as its
/// stored bytes (compressed and sealed as they are: the sweep writes them
/// unchanged), a chunk of a larger frame as its plain bytes (the sweep
/// reorders chunks by ownership, so frames are made anew); trace mode
/// keeps metadata.
#[derive(Default)]
pub struct GcCache {
    pub fps: Vec<Fingerprint>,
    /// The live copies each cached chunk stands for (one, almost always).
    pub copies: Vec<Vec<CopyNo>>,
    pub lens: Vec<u32>,
    /// Each chunk's entry in the container it came from.
    pub metas: Vec<ChunkMeta>,
    starts: Vec<usize>,
    /// Whether chunk `i`'s bytes in `data` are its stored ones.
    stored: Vec<bool>,
    data: Vec<u8>,
    /// Logical bytes of the cached chunks (equal in data and trace mode).
    pub logical: u64,
}

impl GcCache {
    pub fn len(&self) -> usize {
        self.fps.len()
    }
    pub fn is_empty(&self) -> bool {
        self.fps.is_empty()
    }
    /// Chunk `i`, as the sweep writes it.
    pub fn source(&self, i: usize) -> ChunkSource<'_> {
        if self.data.is_empty() {
            return ChunkSource::Stored(&[]);
        }
        let start = self.starts[i];
        let end = self.starts.get(i + 1).copied().unwrap_or(self.data.len());
        match self.stored[i] {
            true => ChunkSource::Stored(&self.data[start..end]),
            false => ChunkSource::Plain(&self.data[start..end]),
        }
    }
}

/// Read the segment's containers and keep their live chunks not yet placed.
/// Returns the cache and the seconds spent reading.
pub fn load_segment(
    repo: &Context,
    mark: &Mark,
    segment: &[ContainerId],
    placed: &mut CopySet,
) -> Result<(GcCache, f64)> {
    let mut cache = GcCache::default();
    let mut secs = 0.0;
    let mut copies = Vec::new();
    for &id in segment {
        let t = Instant::now();
        let c = repo.store.read_stored(id)?;
        secs += t.elapsed().as_secs_f64();
        for m in &c.meta {
            mark.take_live_copies(&repo.index, ChunkKind::Data, &m.fp, id, placed, &mut copies);
            if !copies.is_empty() {
                cache.copies.push(std::mem::take(&mut copies));
                let (b, stored) = match m.alone() {
                    true => (c.stored(m), true),
                    false => (c.bytes(m), false),
                };
                cache.starts.push(cache.data.len());
                cache.stored.push(stored);
                cache.data.extend_from_slice(b);
                cache.metas.push(*m);
                cache.fps.push(m.fp);
                cache.lens.push(m.len);
                cache.logical += m.len as u64;
            }
        }
    }
    Ok((cache, secs))
}

/// Involved backups of a segment (union of its containers' RRT entries),
/// newest first, as the analyzer checks them.
pub fn involved_backups(mark: &Mark, segment: &[ContainerId]) -> Vec<BackupId> {
    let mut b: Vec<BackupId> = segment
        .iter()
        .filter_map(|id| mark.rrt.get(id))
        .flatten()
        .copied()
        .collect();
    b.sort_unstable_by(|a, b| b.cmp(a));
    b.dedup();
    b
}
