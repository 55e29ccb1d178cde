//! Ingest with a rewrite policy: a buffered segment is decided at once,
//! then its chunks are stored and referenced in stream order.

use super::sink::Sink;
use crate::container::{ChunkKind, ContainerId};
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpMap};
use crate::index::DedupIndex;
use crate::layout::{ChunkWriter, Layout};
use crate::recipe::RecipeBuilder;
use crate::rewrite::{Rewriter, Segment, SegmentChunk};

/// What the second pass of a segment does with a fingerprint.
enum Plan {
    /// Not stored anywhere: write it.
    New,
    /// Held by the open container (written earlier in this backup): reference it.
    Free,
    /// A duplicate in sealed containers: the policy's decision `k`.
    Dup(usize),
    /// Already handled earlier in this segment.
    Done,
}

impl<L: Layout> Sink<L> {
    /// Decide and store the buffered segment (no-op without rewriting).
    pub(super) fn flush_segment(&mut self, recipe: &mut RecipeBuilder) -> Result<()> {
        let Some(mut rw) = self.rw.take() else {
            return Ok(());
        };
        let r = if rw.entries.is_empty() {
            Ok(())
        } else {
            self.counts.segments += 1;
            self.segment(&mut rw, recipe)
        };
        rw.clear();
        self.rw = Some(rw);
        r
    }

    /// One segment: collect its distinct duplicates with every live copy,
    /// let the policy decide, then store and reference chunks in stream
    /// order. A chunk is written at most once per segment.
    fn segment(&mut self, rw: &mut Rewriter, recipe: &mut RecipeBuilder) -> Result<()> {
        let open = self.writer.open(ChunkKind::Data);
        let mut plan: FpMap<Plan> = FpMap::default();
        let mut seg = Segment::default();
        for &(fp, len, _) in &rw.entries {
            if plan.contains_key(&fp) {
                continue;
            }
            let p = match self.index.get(ChunkKind::Data, &fp) {
                None => Plan::New,
                Some(c) if Some(c) == open => Plan::Free,
                Some(c) => {
                    let cs = rw.live_copies(&self.index, &fp, c);
                    if cs.is_empty() {
                        Plan::New
                    } else {
                        seg.chunks.push(SegmentChunk {
                            len,
                            containers: cs,
                        });
                        Plan::Dup(seg.chunks.len() - 1)
                    }
                }
            };
            plan.insert(fp, p);
        }
        let decisions = rw.decide(&seg);
        debug_assert_eq!(decisions.len(), seg.chunks.len());
        for k in 0..rw.entries.len() {
            let (fp, len, off) = rw.entries[k];
            let p = plan.get_mut(&fp).expect("planned");
            let used = match std::mem::replace(p, Plan::Done) {
                Plan::Done | Plan::Free => None,
                Plan::Dup(k) => match decisions[k] {
                    Some(c) => {
                        // Later backups restore from the copy this one chose.
                        if self.index.get(ChunkKind::Data, &fp) != Some(c) {
                            self.point(fp, c);
                        }
                        Some(c)
                    }
                    None => {
                        self.counts.rewritten_bytes += len as u64;
                        self.counts.rewritten_chunks += 1;
                        Some(self.store_new(rw, fp, len, off)?)
                    }
                },
                Plan::New => Some(self.store_new(rw, fp, len, off)?),
            };
            if let Some(c) = used {
                rw.referenced(fp, c, len);
            }
            self.counts.logical += len as u64;
            self.counts.chunks += 1;
            recipe.push(fp, len as u64, self)?;
        }
        Ok(())
    }

    /// Store a segment chunk (new, or a rewritten duplicate) and count it.
    fn store_new(
        &mut self,
        rw: &Rewriter,
        fp: Fingerprint,
        len: u32,
        off: usize,
    ) -> Result<ContainerId> {
        let c = self.store(ChunkKind::Data, fp, len, rw.chunk_bytes(len, off))?;
        // Not yet counted in `logical`: that is where this chunk starts.
        self.counts.stored_new(self.counts.logical, len);
        Ok(c)
    }
}
