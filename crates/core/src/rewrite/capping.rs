//! Capping (Lillibridge et al., FAST'13): per segment, keep the `level` old
//! containers that hold the most of the segment's chunks, rewrite the rest.

use crate::container::ContainerId;
use crate::rewrite::policy::{decide_by_selection, RewritePolicy, Segment};
use std::collections::HashMap;

pub struct Capping {
    pub level: usize,
}

/// The top `level` containers ranked by how many of the segment's distinct
/// chunks they hold (chunks, as the paper counts, not bytes). A chunk counts
/// for every container holding a copy: Capping does not see redundancy among
/// containers, which is exactly what SMR fixes. Ties go to the older
/// container. Exactly `level` containers at most, never `level + 1`.
pub fn capping_select(seg: &Segment, level: usize) -> Vec<ContainerId> {
    let mut count: HashMap<ContainerId, u64> = HashMap::new();
    for c in &seg.chunks {
        for &id in &c.containers {
            *count.entry(id).or_default() += 1;
        }
    }
    let mut ranked: Vec<(ContainerId, u64)> = count.into_iter().collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(level);
    ranked.into_iter().map(|(id, _)| id).collect()
}

impl RewritePolicy for Capping {
    fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>> {
        decide_by_selection(seg, &capping_select(seg, self.level))
    }
}
