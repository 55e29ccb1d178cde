//! HAR, history-aware rewriting (Fu et al., ATC'14): consecutive backups
//! share most of their fragmentation, so containers the previous backup used
//! sparsely are avoided by the next one — duplicates that would reference
//! them are rewritten.

use super::{RewritePolicy, Segment};
use crate::container::ContainerId;
use std::collections::{HashMap, HashSet};

pub struct Har {
    sparse: HashSet<ContainerId>,
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

/// Containers whose utilization by a backup (bytes of distinct chunks it
/// referenced in them / container capacity) is below `threshold`, sorted.
pub fn har_sparse(
    used: &HashMap<ContainerId, u64>,
    capacity: u64,
    threshold: f64,
) -> Vec<ContainerId> {
    let mut v: Vec<ContainerId> = used
        .iter()
        .filter(|(_, &b)| (b as f64) < threshold * capacity as f64)
        .map(|(&id, _)| id)
        .collect();
    v.sort_unstable();
    v
}
