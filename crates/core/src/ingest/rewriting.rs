//! Ingest with a rewrite policy: a buffered segment is decided at once,
//! then its chunks are stored and referenced in stream order. The segment
//! may interleave several streams (an interleaved group): each chunk goes
//! to its own stream's recipe and counts.

use super::options::Counts;
use super::sink::Sink;
use crate::container::{ChunkKind, ContainerId};
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpMap};
use crate::index::CopyNo;
use crate::recipe::RecipeBuilder;
use crate::rewrite::{Rewriter, Segment, SegmentChunk};

/// What the second pass of a segment does with a fingerprint.
enum Plan {
    /// Not stored anywhere (or in no live container): write copy 0, or the
    /// next copy.
    New,
    /// Held by the open container (written earlier in this backup): reference that copy.
    Free(CopyNo),
    /// A duplicate in sealed containers: the policy's decision `k`, and the
    /// copy number of each container the policy was offered.
    Dup(usize, Vec<CopyNo>),
    /// Already handled earlier in this segment: the copy referenced.
    Done(CopyNo),
}

/// Where one stream's chunks of a segment go: its recipe, and its counts
/// (`None`: the sink's own, a single backup's).
pub(super) struct StreamOut<'a> {
    pub recipe: &'a mut RecipeBuilder,
    pub counts: Option<&'a mut Counts>,
}

impl StreamOut<'_> {
    /// Make this stream's counts the sink's (and back again: it swaps).
    #[inline]
    fn swap_counts(&mut self, sink: &mut Sink) {
        if let Some(c) = self.counts.as_deref_mut() {
            std::mem::swap(c, &mut sink.counts);
        }
    }
}

impl Sink {
    /// [`flush_segment`](Self::flush_segment) of a single backup: its
    /// recipe, the sink's own counts.
    pub(super) fn flush_own_segment(&mut self, recipe: &mut RecipeBuilder) -> Result<()> {
        self.flush_segment(&mut [StreamOut {
            recipe,
            counts: None,
        }])
    }

    /// Decide and store the buffered segment (no-op without rewriting);
    /// `outs[k]` receives the chunks of stream `k`.
    pub(super) fn flush_segment(&mut self, outs: &mut [StreamOut<'_>]) -> Result<()> {
        let Some(mut rw) = self.rw.take() else {
            return Ok(());
        };
        let r = if rw.entries.is_empty() {
            Ok(())
        } else {
            // A segment counts for every stream it holds chunks of.
            let mut seen = vec![false; outs.len()];
            for e in &rw.entries {
                seen[e.3] = true;
            }
            for (o, _) in outs.iter_mut().zip(&seen).filter(|(_, &s)| s) {
                o.swap_counts(self);
                self.counts.segments += 1;
                o.swap_counts(self);
            }
            self.segment(&mut rw, outs)
        };
        // Containers sealed while the segment was stored are dedup targets
        // for the policy and later segments too.
        for (id, bytes) in self.sealed_mid_segment.drain(..) {
            rw.sealed(id, bytes);
        }
        rw.clear();
        self.rw = Some(rw);
        r
    }

    /// One segment: collect its distinct duplicates with every live copy,
    /// let the policy decide, then store and reference chunks in stream
    /// order. A chunk is written at most once per segment. The recipe names
    /// the copy each chunk is read from: the one the policy chose, or the
    /// new copy a rewrite stored (the next copy number).
    fn segment(&mut self, rw: &mut Rewriter, outs: &mut [StreamOut<'_>]) -> Result<()> {
        let open = self.writer.open(ChunkKind::Data);
        let mut plan: FpMap<Plan> = FpMap::default();
        let mut seg = Segment::default();
        for &(fp, len, _, stream) in &rw.entries {
            if plan.contains_key(&fp) {
                continue;
            }
            let copies = self.index.copy_list(&fp);
            let in_open = open.and_then(|o| copies.in_container(o).next_back());
            let p = match in_open {
                _ if copies.is_empty() => Plan::New,
                Some(n) => Plan::Free(n),
                None => {
                    let (nos, cs) = rw.live_copies(copies);
                    if cs.is_empty() {
                        Plan::New
                    } else {
                        seg.chunks.push(SegmentChunk {
                            len,
                            containers: cs,
                            stream,
                        });
                        Plan::Dup(seg.chunks.len() - 1, nos)
                    }
                }
            };
            plan.insert(fp, p);
        }
        let decisions = rw.decide(&seg);
        debug_assert_eq!(decisions.len(), seg.chunks.len());
        for k in 0..rw.entries.len() {
            let (fp, len, off, stream) = rw.entries[k];
            let out = &mut outs[stream];
            out.swap_counts(self);
            let r = self.segment_chunk(rw, &seg, &decisions, &mut plan, (fp, len, off, stream));
            let r = r.and_then(|copy| out.recipe.push(fp, len, copy, self));
            out.swap_counts(self);
            r?;
        }
        Ok(())
    }

    /// Store or reference one chunk of a decided segment; the copy its
    /// recipe names.
    fn segment_chunk(
        &mut self,
        rw: &mut Rewriter,
        seg: &Segment,
        decisions: &[Option<ContainerId>],
        plan: &mut FpMap<Plan>,
        (fp, len, off, stream): (Fingerprint, u32, usize, usize),
    ) -> Result<CopyNo> {
        {
            let p = plan.get_mut(&fp).expect("planned");
            let (copy, used) = match std::mem::replace(p, Plan::Done(0)) {
                Plan::Done(n) => (n, None),
                Plan::Free(n) => (n, None),
                Plan::Dup(k, nos) => {
                    let chosen = decisions[k].and_then(|c| {
                        seg.chunks[k]
                            .containers
                            .iter()
                            .position(|&x| x == c)
                            .map(|i| (nos[i], c))
                    });
                    match (chosen, self.index.next_copy(&fp)) {
                        (Some((n, c)), _) => {
                            self.deduplicated(
                                ChunkKind::Data,
                                fp,
                                n,
                                len,
                                rw.chunk_bytes(len, off),
                                Some(c),
                            )?;
                            (n, Some(c))
                        }
                        (None, Some(n)) => {
                            self.counts.rewritten_bytes += len as u64;
                            self.counts.rewritten_chunks += 1;
                            (n, Some(self.store_new(rw, fp, n, len, off)?))
                        }
                        // No copy number left: read the preferred copy.
                        (None, None) => {
                            let c = seg.chunks[k].containers[0];
                            self.deduplicated(
                                ChunkKind::Data,
                                fp,
                                nos[0],
                                len,
                                rw.chunk_bytes(len, off),
                                Some(c),
                            )?;
                            (nos[0], Some(c))
                        }
                    }
                }
                Plan::New => {
                    let n = self.index.next_copy(&fp).unwrap_or(0);
                    (n, Some(self.store_new(rw, fp, n, len, off)?))
                }
            };
            *p = Plan::Done(copy);
            if let Some(c) = used {
                rw.referenced(stream, fp, c, len);
            }
            self.counts.logical += len as u64;
            self.counts.chunks += 1;
            Ok(copy)
        }
    }

    /// Store copy `copy` of a segment chunk (new, or a rewritten duplicate)
    /// and count it.
    fn store_new(
        &mut self,
        rw: &Rewriter,
        fp: Fingerprint,
        copy: CopyNo,
        len: u32,
        off: usize,
    ) -> Result<ContainerId> {
        let c = self.store(ChunkKind::Data, fp, copy, len, rw.chunk_bytes(len, off))?;
        // Not yet counted in `logical`: that is where this chunk starts.
        self.counts.stored_new(self.counts.logical, len);
        Ok(c)
    }
}
