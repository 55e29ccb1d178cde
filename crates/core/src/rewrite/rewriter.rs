//! The ingest side of rewriting: the buffered segment, the data containers a
//! duplicate may be deduplicated against, the policy and HAR's bookkeeping.
//! Ingest's sink asks it which copies a duplicate has and tells it what it
//! sealed and referenced; the decisions themselves are the policy's.

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
    /// The segment's chunk bytes (data mode) and (fingerprint, len, offset).
    buf: Vec<u8>,
    pub(crate) entries: Vec<(Fingerprint, u32, usize)>,
    logical: u64,
    /// Sealed data containers a chunk may be deduplicated against.
    live: HashSet<ContainerId>,
    /// HAR bookkeeping (absent for other policies).
    har: Option<HarUse>,
}

impl Rewriter {
    /// The rewriter of a backup with `spec` on a repository at `manifest`,
    /// or `None` without rewriting.
    pub(crate) fn new(
        spec: &RewriteSpec,
        segment_bytes: u64,
        manifest: &Manifest,
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
        let history = super::har::SparseHistory::of(manifest)?;
        let sparse = inherited_sparse(&history.0, &live);
        Ok(Some(Rewriter {
            policy: spec.policy(&sparse, || {
                data().map(|c| (c.id, c.logical_bytes)).collect()
            }),
            segment_bytes: segment_bytes.max(1),
            trace: manifest.config.trace,
            buf: Vec::new(),
            entries: Vec::new(),
            logical: 0,
            live,
            har: match *spec {
                RewriteSpec::Har { threshold, limit } => Some(HarUse::new(threshold, limit)),
                _ => None,
            },
        }))
    }

    /// Buffer a chunk; true when the segment is full.
    #[inline]
    pub(crate) fn push(&mut self, fp: Fingerprint, len: u32, bytes: &[u8]) -> bool {
        self.buf.extend_from_slice(bytes);
        self.entries.push((fp, len, self.buf.len() - bytes.len()));
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

    /// The backup referenced `fp` in `container` (HAR counts it).
    #[inline]
    pub(crate) fn referenced(&mut self, fp: Fingerprint, container: ContainerId, len: u32) {
        if let Some(h) = &mut self.har {
            h.referenced(fp, container, len);
        }
    }

    /// HAR: the sparse list for the next backup; `None` for other policies.
    pub(crate) fn next_sparse(&self, capacity: u64) -> Option<Vec<ContainerId>> {
        self.har.as_ref().map(|h| h.sparse(capacity))
    }
}
