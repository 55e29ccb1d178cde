//! OPT: Belady's replacement over a look-ahead window of the recipe's
//! container references. The recipe is known before the restore, so the
//! future is (partly) known; evicting the container needed farthest ahead
//! is optimal for a whole-container cache.

use crate::cache::access::Access;
use crate::container::ContainerId;
use std::collections::{HashMap, VecDeque};

/// Default look-ahead in recipe entries (Destor's OPT uses 1,000,000).
pub const OPT_WINDOW: usize = 1 << 20;

/// The OPT policy on bare container ids. References are announced as they
/// enter the look-ahead window, then accessed in the same order.
pub struct Opt<K = ContainerId> {
    capacity: usize,
    clock: u64,
    /// Cached containers and when they were last used (ties among
    /// containers with no reference in the window fall back to LRU).
    stamps: HashMap<K, u64>,
    /// Positions of the announced, not yet accessed references per container.
    future: HashMap<K, VecDeque<u64>>,
    announced: u64,
}

impl<K: Copy + Eq + std::hash::Hash> Opt<K> {
    pub fn new(capacity: usize) -> Self {
        Opt {
            capacity: capacity.max(1),
            clock: 0,
            stamps: HashMap::new(),
            future: HashMap::new(),
            announced: 0,
        }
    }

    /// Whether `id` is cached (does not count as a use).
    pub fn contains(&self, id: K) -> bool {
        self.stamps.contains_key(&id)
    }

    /// A reference entering the look-ahead window (in recipe order).
    pub fn announce(&mut self, id: K) {
        self.future.entry(id).or_default().push_back(self.announced);
        self.announced += 1;
    }

    /// The next reference, which must have been announced: a hit, or a miss
    /// that evicts (when full) the container used farthest ahead.
    pub fn access(&mut self, id: K) -> Access<K> {
        self.clock += 1;
        if let Some(q) = self.future.get_mut(&id) {
            q.pop_front();
            if q.is_empty() {
                self.future.remove(&id);
            }
        }
        if let Some(stamp) = self.stamps.get_mut(&id) {
            *stamp = self.clock;
            return Access::Hit;
        }
        let mut evict = None;
        if self.stamps.len() >= self.capacity {
            let future = &self.future;
            evict = self
                .stamps
                .iter()
                .max_by_key(|(k, stamp)| {
                    let next = future
                        .get(k)
                        .and_then(|q| q.front().copied())
                        .unwrap_or(u64::MAX);
                    (next, std::cmp::Reverse(**stamp))
                })
                .map(|(k, _)| *k);
            if let Some(v) = evict {
                self.stamps.remove(&v);
            }
        }
        self.stamps.insert(id, self.clock);
        Access::Miss { evict }
    }
}
