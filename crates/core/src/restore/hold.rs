//! Which of the cache policy's containers the restore holds in memory
//! under its ceiling (`RestoreOptions::memory`), as the scheduler plans.
//!
//! Why apart from the policy: the policies (LRU, OPT) count containers, as
//! the papers do, and decide every read the metrics report. A memory
//! ceiling counts bytes. While the containers the policy keeps fit the
//! ceiling, nothing here changes a read. When the next read would not fit,
//! held containers are first *trimmed* where the restore knows its future
//! (`restore/future.rs`): cut to the chunks they will still supply, which
//! stay held, so no read changes. If that is not room enough, held
//! containers are *spilled*, the one needed furthest ahead first where the
//! restore knows, else the least recently used: their memory is freed
//! though the policy still counts them as cached, and if the policy hits
//! one again it is read again (a real read, counted like any other).

use super::future::Needed;
use crate::container::ContainerId;
use std::collections::{HashMap, HashSet};

/// What the restore knows of its future, for choosing what to free.
pub(crate) trait Ahead {
    /// The position of `id`'s next use (`u64::MAX`: none, or not known).
    fn next_use(&mut self, id: ContainerId) -> u64;
    /// The chunks `id` will still supply, if known.
    fn still_needed(&mut self, id: ContainerId) -> Option<Needed>;
}

/// One way [`Holding::make_room`] frees memory.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// Keep only these chunks of the container (bytes held from now on).
    Trim(ContainerId, Needed),
    /// Free the container; read it again if the policy uses it again.
    Spill(ContainerId),
}

/// A held container: bytes held, last access, and whether it was trimmed.
#[derive(Clone, Copy)]
struct Held {
    bytes: u64,
    last: u64,
    trimmed: bool,
}

/// The containers held and spilled, and their stored bytes.
pub(crate) struct Holding {
    limit: u64,
    bytes: u64,
    /// Access count, for least-recently-used order.
    tick: u64,
    held: HashMap<ContainerId, Held>,
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

    /// What to free before `n` more bytes are read, until the rest and `n`
    /// fit the ceiling (or nothing is left: one container is always
    /// allowed). With `ahead`, held containers are first trimmed, the one
    /// needed furthest ahead first, where that frees memory; then, or
    /// without `ahead`, whole containers are spilled: the one needed
    /// furthest ahead first, as Belady's OPT would, or between equals and
    /// without `ahead` the least recently used.
    pub(crate) fn make_room(&mut self, n: u64, mut ahead: Option<&mut dyn Ahead>) -> Vec<Room> {
        let mut out = Vec::new();
        let over = |h: &Self| !h.held.is_empty() && h.bytes.saturating_add(n) > h.limit;
        if let Some(a) = ahead.as_mut().filter(|_| over(self)) {
            let mut order: Vec<_> = self
                .held
                .iter()
                .filter(|(_, h)| !h.trimmed)
                .map(|(&v, h)| (a.next_use(v), std::cmp::Reverse(h.last), v))
                .collect();
            order.sort_unstable_by(|x, y| y.cmp(x));
            for (_, _, v) in order {
                if !over(self) {
                    break;
                }
                let Some(needed) = a.still_needed(v) else {
                    break;
                };
                let h = self.held.get_mut(&v).expect("held");
                if needed.bytes < h.bytes {
                    self.bytes -= h.bytes - needed.bytes;
                    h.bytes = needed.bytes;
                    h.trimmed = true;
                    out.push(Room::Trim(v, needed));
                }
            }
        }
        while over(self) {
            let v = match ahead.as_mut() {
                Some(a) => {
                    let (_, _, v) = self
                        .held
                        .iter()
                        .map(|(&v, h)| (a.next_use(v), std::cmp::Reverse(h.last), v))
                        .max()
                        .expect("not empty");
                    v
                }
                None => {
                    let (&v, _) = self
                        .held
                        .iter()
                        .min_by_key(|(_, h)| h.last)
                        .expect("not empty");
                    v
                }
            };
            self.free(v);
            self.spilled.insert(v);
            out.push(Room::Spill(v));
        }
        out
    }

    /// `id` (`n` bytes) was read and is held.
    pub(crate) fn insert(&mut self, id: ContainerId, n: u64) {
        self.tick += 1;
        self.spilled.remove(&id);
        let held = Held {
            bytes: n,
            last: self.tick,
            trimmed: false,
        };
        if let Some(old) = self.held.insert(id, held) {
            self.bytes -= old.bytes;
        }
        self.bytes += n;
    }

    /// Whether `id` is held trimmed.
    pub(crate) fn is_trimmed(&self, id: ContainerId) -> bool {
        self.held.get(&id).is_some_and(|h| h.trimmed)
    }

    /// Trimmed `id` let one of its chunks (`n` bytes) go after its last use.
    pub(crate) fn shrink(&mut self, id: ContainerId, n: u64) {
        if let Some(h) = self.held.get_mut(&id).filter(|h| h.trimmed) {
            let n = n.min(h.bytes);
            h.bytes -= n;
            self.bytes -= n;
        }
    }

    /// The policy hit `id`: whether it must be read again (spilled).
    pub(crate) fn hit(&mut self, id: ContainerId) -> bool {
        self.tick += 1;
        match self.held.get_mut(&id) {
            Some(h) => {
                h.last = self.tick;
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
            Some(h) => {
                self.bytes -= h.bytes;
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

    /// A known future: next uses by id, and the bytes each still supplies
    /// (`None`: chunks not known).
    struct Known {
        next: Vec<u64>,
        needed: Option<Vec<u64>>,
    }

    impl Ahead for Known {
        fn next_use(&mut self, id: ContainerId) -> u64 {
            self.next[id.0 as usize]
        }
        fn still_needed(&mut self, id: ContainerId) -> Option<Needed> {
            let bytes = self.needed.as_ref()?[id.0 as usize];
            Some(Needed {
                prefixes: vec![id.0],
                bytes,
            })
        }
    }

    fn spills(r: Vec<Room>) -> Vec<ContainerId> {
        r.into_iter()
            .map(|r| match r {
                Room::Spill(v) => v,
                Room::Trim(v, _) => panic!("{v:?} trimmed"),
            })
            .collect()
    }

    #[test]
    fn spills_least_recently_used_only_when_over_the_ceiling() {
        let mut h = Holding::new(10);
        assert!(h.make_room(4, None).is_empty());
        h.insert(A, 4);
        assert!(h.make_room(4, None).is_empty());
        h.insert(B, 4);
        // A is used again: B is now the least recently used.
        assert!(!h.hit(A));
        assert_eq!(spills(h.make_room(4, None)), vec![B]);
        h.insert(C, 4);
        // The policy hits the spilled B: read again.
        assert!(h.hit(B));
        assert_eq!(spills(h.make_room(4, None)), vec![A]);
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
        let mut next = Known {
            next: vec![0, 10, 50, 20],
            needed: None,
        };
        assert_eq!(spills(h.make_room(4, Some(&mut next))), vec![B]);
        // Never needed again beats any position; then recency breaks ties.
        h.insert(ContainerId(4), 4);
        let mut never = Known {
            next: vec![0, 10, u64::MAX, u64::MAX, u64::MAX],
            needed: None,
        };
        assert_eq!(
            spills(h.make_room(8, Some(&mut never))),
            vec![C, ContainerId(4)]
        );
        assert!(h.hit(B), "spilled: read again");
    }

    #[test]
    fn a_container_above_the_ceiling_is_held_alone() {
        let mut h = Holding::new(3);
        h.insert(A, 2);
        assert_eq!(spills(h.make_room(5, None)), vec![A]);
        h.insert(B, 5);
        assert_eq!(spills(h.make_room(1, None)), vec![B]);
    }

    #[test]
    fn trims_furthest_first_and_spills_only_when_trimming_is_not_enough() {
        let mut h = Holding::new(12);
        h.insert(A, 4);
        h.insert(B, 4);
        h.insert(C, 4);
        // B is needed furthest ahead and still supplies 1 byte of 4: trimming
        // it makes room for 3 more, nothing is spilled.
        let mut k = Known {
            next: vec![0, 10, 50, 20, 5],
            needed: Some(vec![0, 4, 1, 3, 3]),
        };
        assert_eq!(
            h.make_room(3, Some(&mut k)),
            vec![Room::Trim(
                B,
                Needed {
                    prefixes: vec![2],
                    bytes: 1
                }
            )]
        );
        assert!(!h.hit(B), "a trimmed container is not read again");
        h.insert(ContainerId(4), 3);
        // 12 held. 5 more: C (next at 20) is trimmed to 3, A still needs
        // all its 4 bytes; then the one needed furthest ahead, the trimmed
        // B, is spilled, then C.
        assert_eq!(
            h.make_room(5, Some(&mut k)),
            vec![
                Room::Trim(
                    C,
                    Needed {
                        prefixes: vec![3],
                        bytes: 3
                    }
                ),
                Room::Spill(B),
                Room::Spill(C),
            ]
        );
        assert!(h.hit(B), "spilled after trimming: read again");
        // A trimmed container shrinks as its chunks are used for the last
        // time; an untrimmed one does not.
        h.insert(B, 4);
        let before = h.bytes;
        h.shrink(B, 4);
        assert_eq!(h.bytes, before);
        assert_eq!(h.make_room(3, Some(&mut k)).len(), 1, "B trimmed to 1");
        assert!(h.is_trimmed(B));
        h.shrink(B, 1);
        assert_eq!(h.bytes, before - 4);
        // Released, a trimmed container frees what it holds.
        assert!(h.remove(ContainerId(4)));
    }
}
