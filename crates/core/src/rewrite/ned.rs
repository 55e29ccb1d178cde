//! NED (Nam et al., as the SMR paper describes and compares it): per
//! segment, a container's utilization is the bytes of the segment's chunks
//! it holds over the bytes stored in it; duplicates whose containers all
//! fall below the threshold are rewritten. Like Capping it counts a chunk in
//! every container holding a copy (it does not see redundancy among
//! containers, which is what SMR fixes).

use crate::container::ContainerId;
use crate::rewrite::policy::{decide_by_selection, RewritePolicy, Segment};
use std::collections::HashMap;

pub struct Ned {
    pub threshold: f64,
    /// Chunk bytes stored in each live data container.
    stored: HashMap<ContainerId, u64>,
}

impl Ned {
    pub fn new(threshold: f64, stored: HashMap<ContainerId, u64>) -> Self {
        Ned { threshold, stored }
    }
}

/// The containers whose utilization by `seg` reaches `threshold`, most
/// utilized first (ties to the older container). A container of unknown
/// size counts as fully utilized: it can only be one this backup sealed,
/// which holds the stream's own recent chunks.
pub fn ned_select(
    seg: &Segment,
    stored: &HashMap<ContainerId, u64>,
    threshold: f64,
) -> Vec<ContainerId> {
    let mut referenced: HashMap<ContainerId, u64> = HashMap::new();
    for c in &seg.chunks {
        for &id in &c.containers {
            *referenced.entry(id).or_default() += c.len as u64;
        }
    }
    let mut kept: Vec<(f64, ContainerId)> = referenced
        .into_iter()
        .map(|(id, bytes)| {
            let u = match stored.get(&id) {
                Some(&s) if s > 0 => bytes as f64 / s as f64,
                _ => 1.0,
            };
            (u, id)
        })
        .filter(|&(u, _)| u >= threshold)
        .collect();
    kept.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    kept.into_iter().map(|(_, id)| id).collect()
}

impl RewritePolicy for Ned {
    fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>> {
        decide_by_selection(seg, &ned_select(seg, &self.stored, self.threshold))
    }

    fn sealed(&mut self, id: ContainerId, chunk_bytes: u64) {
        self.stored.insert(id, chunk_bytes);
    }
}
