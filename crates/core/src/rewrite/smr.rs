//! SMR (submodular maximization rewriting): per segment, greedily pick at
//! most `level` old containers maximizing the number of *distinct* segment
//! chunks they cover (Algorithm 1), so redundant copies are not counted twice.

use crate::container::ContainerId;
use crate::rewrite::policy::{decide_by_selection, RewritePolicy, Segment};
use std::collections::HashMap;

pub struct Smr {
    pub level: usize,
}

/// Greedy selection: each round adds the container covering the most
/// not-yet-covered chunks; stops after `level` containers or when the
/// marginal gain is 0. Ties go to the older container. Returned in selection
/// order. F(S) = |∪ w(C)| is monotone submodular, so greedy is within
/// (1 − 1/e) of the optimum.
pub fn smr_select(seg: &Segment, level: usize) -> Vec<ContainerId> {
    // container → chunks (indices into seg.chunks) it holds.
    let mut holds: HashMap<ContainerId, Vec<usize>> = HashMap::new();
    for (i, c) in seg.chunks.iter().enumerate() {
        for &id in &c.containers {
            holds.entry(id).or_default().push(i);
        }
    }
    let mut gain: HashMap<ContainerId, usize> =
        holds.iter().map(|(&id, v)| (id, v.len())).collect();
    let mut covered = vec![false; seg.chunks.len()];
    let mut selected = Vec::new();
    while selected.len() < level {
        let best = gain
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&id, &g)| (id, g));
        let Some((id, g)) = best else { break };
        if g == 0 {
            break;
        }
        selected.push(id);
        gain.remove(&id);
        for &i in &holds[&id] {
            if !covered[i] {
                covered[i] = true;
                for other in &seg.chunks[i].containers {
                    if let Some(g) = gain.get_mut(other) {
                        *g -= 1;
                    }
                }
            }
        }
    }
    selected
}

impl RewritePolicy for Smr {
    fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>> {
        decide_by_selection(seg, &smr_select(seg, self.level))
    }
}
