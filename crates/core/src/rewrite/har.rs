//! HAR, history-aware rewriting (Fu et al., ATC'14): consecutive backups
//! share most of their fragmentation, so containers the previous backup used
//! sparsely are avoided by the next one — duplicates that would reference
//! them are rewritten.

use crate::container::ContainerId;
use crate::fingerprint::{Fingerprint, FpSet};
use crate::rewrite::policy::{RewritePolicy, Segment};
use std::collections::{HashMap, HashSet};

pub struct Har {
    sparse: HashSet<ContainerId>,
}

/// HAR's history in the manifest (section `har_sparse`): the data
/// containers the last HAR backup used sparsely; the next HAR backup
/// rewrites duplicates held only there. Ids of containers that no longer
/// exist are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct SparseHistory(pub Vec<ContainerId>);

impl crate::catalog::Section for SparseHistory {
    const NAME: &'static str = "har_sparse";
}

impl SparseHistory {
    /// The manifest's history (empty when no HAR backup recorded one).
    pub fn of(m: &crate::catalog::Manifest) -> crate::error::Result<Self> {
        Ok(m.sections.get()?.unwrap_or_default())
    }
}

impl Har {
    pub fn new(sparse: &[ContainerId]) -> Self {
        Har {
            sparse: sparse.iter().copied().collect(),
        }
    }
}

impl RewritePolicy for Har {
    /// Reference the first copy outside a sparse container (the index's
    /// preferred copy first); rewrite if every copy is sparse.
    fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>> {
        seg.chunks
            .iter()
            .map(|c| {
                c.containers
                    .iter()
                    .find(|id| !self.sparse.contains(id))
                    .copied()
            })
            .collect()
    }
}

/// Default utilization below which a container is sparse (Destor, HAR).
pub const HAR_THRESHOLD: f64 = 0.5;
/// Default cap on the sparse list: its referenced bytes at most this share
/// of all the bytes the backup referenced (Destor: 5 %; the GCCDF artifact
/// uses 1 %, with threshold 0.7).
pub const HAR_LIMIT: f64 = 0.05;

/// Containers whose utilization by a backup (bytes of distinct chunks it
/// referenced in them / container capacity) is below `threshold`, sorted.
/// If they hold more than `limit` of all the bytes the backup referenced,
/// the most used are dropped from the list until they do not: rewriting
/// them would cost the most and gain the least.
pub fn har_sparse(
    used: &HashMap<ContainerId, u64>,
    capacity: u64,
    threshold: f64,
    limit: f64,
) -> Vec<ContainerId> {
    let mut v: Vec<(u64, ContainerId)> = used
        .iter()
        .filter(|(_, &b)| (b as f64) < threshold * capacity as f64)
        .map(|(&id, &b)| (b, id))
        .collect();
    let total: u64 = used.values().sum();
    let mut sparse: u64 = v.iter().map(|(b, _)| b).sum();
    // Least used first; ties by id, so the list is deterministic.
    v.sort_unstable();
    while sparse as f64 > limit * total as f64 {
        match v.pop() {
            Some((b, _)) => sparse -= b,
            None => break,
        }
    }
    let mut ids: Vec<ContainerId> = v.into_iter().map(|(_, id)| id).collect();
    ids.sort_unstable();
    ids
}

/// The sparse list a backup inherits: the manifest's list (written by the
/// previous HAR backup), without containers GC has since removed.
pub(crate) fn inherited_sparse(
    listed: &[ContainerId],
    live: &HashSet<ContainerId>,
) -> Vec<ContainerId> {
    listed
        .iter()
        .copied()
        .filter(|c| live.contains(c))
        .collect()
}

/// What HAR counts during a backup to mark the next backup's sparse
/// containers.
pub(crate) struct HarUse {
    threshold: f64,
    limit: f64,
    /// Distinct chunks seen so far in this backup.
    seen: FpSet,
    /// Bytes of distinct chunks this backup referenced, per container.
    used: HashMap<ContainerId, u64>,
}

impl HarUse {
    pub(crate) fn new(threshold: f64, limit: f64) -> Self {
        HarUse {
            threshold,
            limit,
            seen: FpSet::default(),
            used: HashMap::new(),
        }
    }

    /// The backup referenced `fp` (of `len` bytes) in `container`; only its
    /// first reference counts.
    pub(crate) fn referenced(&mut self, fp: Fingerprint, container: ContainerId, len: u32) {
        if self.seen.insert(fp) {
            *self.used.entry(container).or_default() += len as u64;
        }
    }

    /// The sparse list for the next backup (the manifest's `har_sparse`).
    pub(crate) fn sparse(&self, capacity: u64) -> Vec<ContainerId> {
        har_sparse(&self.used, capacity, self.threshold, self.limit)
    }
}
