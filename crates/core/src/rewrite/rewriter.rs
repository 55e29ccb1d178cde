//! The ingest side of rewriting: the buffered segment, the data containers a
//! duplicate may be deduplicated against, the policy and HAR's bookkeeping.
//! Ingest's sink asks it which copies a duplicate has and tells it what it
//! sealed and referenced; the decisions themselves are the policy's.
//!
//! A rewriter serves one stream (a backup) or several (an interleaved
//! group, whose dealt chunks form one stream of segments, as the GCCDF
//! artifact ingests its baselines): each buffered chunk names its stream,
//! so HAR counts and avoids per chain.

use super::har::{inherited_sparse, HarUse};
use crate::catalog::Manifest;
use crate::container::{ChunkKind, ContainerId};
use crate::fingerprint::Fingerprint;
use crate::index::{CopyList, CopyNo};
use crate::rewrite::policy::{RewritePolicy, Segment};
use crate::rewrite::spec::RewriteSpec;
use std::collections::HashSet;

/// Segment buffering and the rewrite policy of one backup (absent without
/// rewriting, so the naive path stays a straight per-chunk loop).
pub(crate) struct Rewriter {
    policy: Box<dyn RewritePolicy>,
    segment_bytes: u64,
    trace: bool,
    /// The segment's chunk bytes (data mode) and (fingerprint, len,
    /// offset, stream).
    buf: Vec<u8>,
    pub(crate) entries: Vec<(Fingerprint, u32, usize, usize)>,
    logical: u64,
    /// Sealed data containers a chunk may be deduplicated against.
    live: HashSet<ContainerId>,
    /// HAR bookkeeping, one per stream (absent for other policies).
    har: Option<Vec<HarUse>>,
    /// Each stream's chain: the key of its HAR history.
    chains: Vec<String>,
}

impl Rewriter {
    /// The rewriter of a backup (or interleaved group) with `spec` on a
    /// repository at `manifest`, one stream per entry of `chains` (the
    /// chain each stream continues), or `None` without rewriting.
    pub(crate) fn new(
        spec: &RewriteSpec,
        segment_bytes: u64,
        manifest: &Manifest,
        chains: Vec<String>,
    ) -> crate::error::Result<Option<Self>> {
        if *spec == RewriteSpec::None {
            return Ok(None);
        }
        let data = || {
            manifest
                .containers
                .iter()
                .filter(|c| c.kind == ChunkKind::Data)
        };
        let live: HashSet<ContainerId> = data().map(|c| c.id).collect();
        let history = super::har::HarHistory::of(manifest)?;
        let sparse: Vec<Vec<ContainerId>> = chains
            .iter()
            .map(|c| inherited_sparse(history.chain(c), &live))
            .collect();
        Ok(Some(Rewriter {
            policy: spec.policy(sparse, || data().map(|c| (c.id, c.logical_bytes)).collect()),
            segment_bytes: segment_bytes.max(1),
            trace: manifest.config.trace,
            buf: Vec::new(),
            entries: Vec::new(),
            logical: 0,
            live,
            har: match *spec {
                RewriteSpec::Har { threshold, limit } => Some(
                    chains
                        .iter()
                        .map(|_| HarUse::new(threshold, limit))
                        .collect(),
                ),
                _ => None,
            },
            chains,
        }))
    }

    /// Buffer a chunk of stream `stream`; true when the segment is full.
    #[inline]
    pub(crate) fn push(&mut self, stream: usize, fp: Fingerprint, len: u32, bytes: &[u8]) -> bool {
        self.buf.extend_from_slice(bytes);
        self.entries
            .push((fp, len, self.buf.len() - bytes.len(), stream));
        self.logical += len as u64;
        self.logical >= self.segment_bytes
    }

    /// Empty the segment buffer for the next segment.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.entries.clear();
        self.logical = 0;
    }

    /// The bytes of a buffered chunk (empty in trace mode).
    pub(crate) fn chunk_bytes(&self, len: u32, off: usize) -> &[u8] {
        if self.trace {
            &[][..]
        } else {
            &self.buf[off..off + len as usize]
        }
    }

    /// The backup sealed data container `id`: later segments may reference it.
    pub(crate) fn sealed(&mut self, id: ContainerId, chunk_bytes: u64) {
        self.live.insert(id);
        self.policy.sealed(id, chunk_bytes);
    }

    /// The live copies of a duplicate, newest first (the index's preferred
    /// copy, what dedup without rewriting references): their copy numbers
    /// and containers, each container once.
    pub(crate) fn live_copies(&self, copies: CopyList<'_>) -> (Vec<CopyNo>, Vec<ContainerId>) {
        let (mut nos, mut cs) = (Vec::with_capacity(1), Vec::with_capacity(1));
        for (n, x) in copies.iter().rev() {
            if self.live.contains(&x) && !cs.contains(&x) {
                nos.push(n);
                cs.push(x);
            }
        }
        (nos, cs)
    }

    /// Let the policy decide the segment's duplicates.
    pub(crate) fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>> {
        if seg.chunks.is_empty() {
            return Vec::new();
        }
        self.policy.decide(seg)
    }

    /// Stream `stream` referenced `fp` in `container` (HAR counts it).
    #[inline]
    pub(crate) fn referenced(
        &mut self,
        stream: usize,
        fp: Fingerprint,
        container: ContainerId,
        len: u32,
    ) {
        if let Some(h) = self.har.as_mut().and_then(|h| h.get_mut(stream)) {
            h.referenced(fp, container, len);
        }
    }

    /// HAR: each stream's chain and its sparse list for the chain's next
    /// backup; `None` for other policies.
    pub(crate) fn next_sparse(&self, capacity: u64) -> Option<Vec<(&str, Vec<ContainerId>)>> {
        self.har.as_ref().map(|h| {
            self.chains
                .iter()
                .zip(h)
                .map(|(c, h)| (c.as_str(), h.sparse(capacity)))
                .collect()
        })
    }
}
