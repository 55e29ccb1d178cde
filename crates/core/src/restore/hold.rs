//! Which of the cache policy's containers the restore holds in memory
//! under its ceiling (`RestoreOptions::memory`), as the scheduler plans.
//!
//! Why apart from the policy: the policies (LRU, OPT) count containers, as
//! the papers do, and decide every read the metrics report. A memory
//! ceiling counts bytes. While the containers the policy keeps fit the
//! ceiling, nothing here changes a read. When the next read would not fit,
//! the least recently used held containers are *spilled*: their memory is
//! freed though the policy still counts them as cached, and if the policy
//! hits one again it is read again (a real read, counted like any other).

use crate::container::ContainerId;
use std::collections::{HashMap, HashSet};

/// The containers held and spilled, and their stored bytes.
pub(crate) struct Holding {
    limit: u64,
    bytes: u64,
    /// Access count, for least-recently-used order.
    tick: u64,
    /// Held containers: stored bytes and last access.
    held: HashMap<ContainerId, (u64, u64)>,
    /// Cached by the policy, freed by the ceiling.
    spilled: HashSet<ContainerId>,
}

impl Holding {
    pub(crate) fn new(limit: u64) -> Self {
        Holding {
            limit,
            bytes: 0,
            tick: 0,
            held: HashMap::new(),
            spilled: HashSet::new(),
        }
    }

    /// Containers to free before `n` more bytes are read: the least
    /// recently used held ones, until the rest and `n` fit the ceiling (or
    /// none is left: one container is always allowed). They become spilled.
    pub(crate) fn make_room(&mut self, n: u64) -> Vec<ContainerId> {
        let mut out = Vec::new();
        while !self.held.is_empty() && self.bytes.saturating_add(n) > self.limit {
            let (&v, _) = self
                .held
                .iter()
                .min_by_key(|(_, &(_, last))| last)
                .expect("not empty");
            self.free(v);
            self.spilled.insert(v);
            out.push(v);
        }
        out
    }

    /// `id` (`n` bytes) was read and is held.
    pub(crate) fn insert(&mut self, id: ContainerId, n: u64) {
        self.tick += 1;
        self.spilled.remove(&id);
        if let Some((old, _)) = self.held.insert(id, (n, self.tick)) {
            self.bytes -= old;
        }
        self.bytes += n;
    }

    /// The policy hit `id`: whether it must be read again (spilled).
    pub(crate) fn hit(&mut self, id: ContainerId) -> bool {
        self.tick += 1;
        match self.held.get_mut(&id) {
            Some((_, last)) => {
                *last = self.tick;
                false
            }
            None => self.spilled.contains(&id),
        }
    }

    /// The policy let `id` go (evicted, or released after its last use):
    /// whether its memory is still held, to be freed now.
    pub(crate) fn remove(&mut self, id: ContainerId) -> bool {
        self.spilled.remove(&id);
        self.free(id)
    }

    fn free(&mut self, id: ContainerId) -> bool {
        match self.held.remove(&id) {
            Some((n, _)) => {
                self.bytes -= n;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ContainerId = ContainerId(1);
    const B: ContainerId = ContainerId(2);
    const C: ContainerId = ContainerId(3);

    #[test]
    fn spills_least_recently_used_only_when_over_the_ceiling() {
        let mut h = Holding::new(10);
        assert!(h.make_room(4).is_empty());
        h.insert(A, 4);
        assert!(h.make_room(4).is_empty());
        h.insert(B, 4);
        // A is used again: B is now the least recently used.
        assert!(!h.hit(A));
        assert_eq!(h.make_room(4), vec![B]);
        h.insert(C, 4);
        // The policy hits the spilled B: read again.
        assert!(h.hit(B));
        assert_eq!(h.make_room(4), vec![A]);
        h.insert(B, 4);
        assert!(!h.hit(B));
        // Evicting a spilled container frees nothing; a held one does.
        assert!(!h.remove(A));
        assert!(!h.hit(A), "no longer cached, not spilled");
        assert!(h.remove(C));
    }

    #[test]
    fn a_container_above_the_ceiling_is_held_alone() {
        let mut h = Holding::new(3);
        h.insert(A, 2);
        assert_eq!(h.make_room(5), vec![A]);
        h.insert(B, 5);
        assert_eq!(h.make_room(1), vec![B]);
    }
}
