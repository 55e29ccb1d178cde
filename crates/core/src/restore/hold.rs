//! Which of the cache policy's containers the restore holds in memory
//! under its ceiling (`RestoreOptions::memory`), as the scheduler plans.
//!
//! Why apart from the policy: the policies (LRU, OPT) count containers, as
//! the papers do, and decide every read the metrics report. A memory
//! ceiling counts bytes. While the containers the policy keeps fit the
//! ceiling, nothing here changes a read. When the next read would not fit,
//! held containers are *spilled*, the one needed furthest ahead first where
//! the restore knows (`restore/future.rs`), else the least recently used:
//! their memory is freed though the policy still counts them as cached, and
//! if the policy hits one again it is read again (a real read, counted like
//! any other).

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

    /// Containers to free before `n` more bytes are read, until the rest
    /// and `n` fit the ceiling (or none is left: one container is always
    /// allowed). They become spilled. With `next_use` (the position of each
    /// container's next use, `u64::MAX` for none), the one needed furthest
    /// ahead goes first, as Belady's OPT would; without it, or between
    /// equals, the least recently used.
    pub(crate) fn make_room(
        &mut self,
        n: u64,
        mut next_use: Option<&mut dyn FnMut(ContainerId) -> u64>,
    ) -> Vec<ContainerId> {
        let mut out = Vec::new();
        while !self.held.is_empty() && self.bytes.saturating_add(n) > self.limit {
            let v = match next_use.as_mut() {
                Some(next) => {
                    let (_, _, v) = self
                        .held
                        .iter()
                        .map(|(&v, &(_, last))| (next(v), std::cmp::Reverse(last), v))
                        .max()
                        .expect("not empty");
                    v
                }
                None => {
                    let (&v, _) = self
                        .held
                        .iter()
                        .min_by_key(|(_, &(_, last))| last)
                        .expect("not empty");
                    v
                }
            };
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
        assert!(h.make_room(4, None).is_empty());
        h.insert(A, 4);
        assert!(h.make_room(4, None).is_empty());
        h.insert(B, 4);
        // A is used again: B is now the least recently used.
        assert!(!h.hit(A));
        assert_eq!(h.make_room(4, None), vec![B]);
        h.insert(C, 4);
        // The policy hits the spilled B: read again.
        assert!(h.hit(B));
        assert_eq!(h.make_room(4, None), vec![A]);
        h.insert(B, 4);
        assert!(!h.hit(B));
        // Evicting a spilled container frees nothing; a held one does.
        assert!(!h.remove(A));
        assert!(!h.hit(A), "no longer cached, not spilled");
        assert!(h.remove(C));
    }

    #[test]
    fn with_next_uses_the_one_needed_furthest_ahead_is_spilled() {
        let mut h = Holding::new(12);
        h.insert(A, 4);
        h.insert(B, 4);
        h.insert(C, 4);
        // A is the least recently used, but needed next; B furthest.
        let mut next = |v: ContainerId| [0, 10, 50, 20][v.0 as usize];
        assert_eq!(h.make_room(4, Some(&mut next)), vec![B]);
        // Never needed again beats any position; then recency breaks ties.
        h.insert(ContainerId(4), 4);
        let mut never = |v: ContainerId| if v == A { 10 } else { u64::MAX };
        assert_eq!(h.make_room(8, Some(&mut never)), vec![C, ContainerId(4)]);
        assert!(h.hit(B), "spilled: read again");
    }

    #[test]
    fn a_container_above_the_ceiling_is_held_alone() {
        let mut h = Holding::new(3);
        h.insert(A, 2);
        assert_eq!(h.make_room(5, None), vec![A]);
        h.insert(B, 5);
        assert_eq!(h.make_room(1, None), vec![B]);
    }
}
