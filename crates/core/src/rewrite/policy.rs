//! The contract between ingest and a rewrite policy: the [`Segment`] a
//! policy is shown (its distinct duplicate chunks and the containers holding
//! them), the [`RewritePolicy`] trait, the [`decide_by_selection`] rule the
//! container-selecting policies share, and the naive [`NoRewrite`]. A file
//! of its own so the policies (Capping, NED, SMR, HAR) depend on the
//! contract, not on the folder's `mod.rs` that re-exports them.

use crate::container::ContainerId;

/// Default ingest segment, in containers of data: 5, i.e. the 20 MiB
/// segment Capping, NED and SMR recommend with their 4 MiB containers. A
/// rewrite level counts containers per segment, so the segment scales with
/// the container size to keep a level's meaning: `capping:20` allows 20
/// containers per 5 containers of data at 128 KiB as at 4 MiB (a fixed
/// 20 MiB segment at 256 KiB containers made every level 16× tighter).
pub const DEFAULT_SEGMENT_CONTAINERS: u64 = 5;

/// The default ingest segment of a repository whose containers hold
/// `container_size` bytes.
pub fn default_segment_bytes(container_size: u64) -> u64 {
    DEFAULT_SEGMENT_CONTAINERS * container_size.max(1)
}

/// One distinct duplicate chunk of a segment, as the policy sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentChunk {
    /// Chunk length in bytes.
    pub len: u32,
    /// Every live, sealed container holding a copy, the index's preferred
    /// (most recently referenced) copy first. Rewriting makes copies, so one
    /// chunk can have several; SMR needs all of them to see redundancy.
    pub containers: Vec<ContainerId>,
    /// Which stream of an interleaved group the chunk came from (first
    /// occurrence; 0 for a single backup): HAR keeps a history per chain.
    pub stream: usize,
}

/// The distinct duplicate chunks of one ingest segment (unique chunks and
/// chunks already in the open container are not the policy's business).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub chunks: Vec<SegmentChunk>,
}

/// Decides, per segment, which duplicates are deduplicated and which are
/// written again.
pub trait RewritePolicy: Send {
    /// For each chunk of `seg` (same order), `Some(container)` to reference
    /// that copy, `None` to rewrite it.
    fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>>;
    /// The backup sealed data container `id` holding `chunk_bytes` of
    /// chunks (it may be referenced by later segments).
    fn sealed(&mut self, _id: ContainerId, _chunk_bytes: u64) {}
}

/// Reference each chunk's copy in the earliest-selected container holding
/// it; rewrite chunks no selected container holds.
pub fn decide_by_selection(seg: &Segment, selected: &[ContainerId]) -> Vec<Option<ContainerId>> {
    let rank: std::collections::HashMap<ContainerId, usize> =
        selected.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    seg.chunks
        .iter()
        .map(|c| {
            c.containers
                .iter()
                .filter_map(|id| rank.get(id).map(|&r| (r, *id)))
                .min()
                .map(|(_, id)| id)
        })
        .collect()
}

/// Deduplicates everything (the naive baseline, as a policy).
pub struct NoRewrite;

impl RewritePolicy for NoRewrite {
    fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>> {
        seg.chunks
            .iter()
            .map(|c| c.containers.first().copied())
            .collect()
    }
}
