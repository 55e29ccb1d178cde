//! OPT: Belady's replacement over a look-ahead window of the recipe's
//! container references. The recipe is known before the restore, so the
//! future is (partly) known; evicting the container needed farthest ahead
//! is optimal for a whole-container cache.

use crate::container::{Container, ContainerId};
use crate::error::Result;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Default look-ahead in recipe entries (Destor's OPT uses 1,000,000).
pub const OPT_WINDOW: usize = 1 << 20;

pub struct OptCache<V = Container> {
    capacity: usize,
    clock: u64,
    /// Cached containers and when they were last used (ties among
    /// containers with no reference in the window fall back to LRU).
    items: HashMap<ContainerId, (Arc<V>, u64)>,
    /// Positions of the announced, not yet consumed references per container.
    future: HashMap<ContainerId, VecDeque<u64>>,
    announced: u64,
}

impl<V> OptCache<V> {
    pub fn new(capacity: usize) -> Self {
        OptCache {
            capacity: capacity.max(1),
            clock: 0,
            items: HashMap::new(),
            future: HashMap::new(),
            announced: 0,
        }
    }

    /// A reference entering the look-ahead window (in recipe order).
    pub fn announce(&mut self, id: ContainerId) {
        self.future.entry(id).or_default().push_back(self.announced);
        self.announced += 1;
    }

    /// The next reference, which must have been announced: the container
    /// from the cache, or loaded, evicting the one used farthest ahead.
    pub fn get(
        &mut self,
        id: ContainerId,
        load: impl FnOnce(ContainerId) -> Result<V>,
    ) -> Result<Arc<V>> {
        self.clock += 1;
        if let Some(q) = self.future.get_mut(&id) {
            q.pop_front();
            if q.is_empty() {
                self.future.remove(&id);
            }
        }
        if let Some((c, stamp)) = self.items.get_mut(&id) {
            *stamp = self.clock;
            return Ok(c.clone());
        }
        let c = Arc::new(load(id)?);
        if self.items.len() >= self.capacity {
            let future = &self.future;
            let victim = self
                .items
                .iter()
                .max_by_key(|(k, (_, stamp))| {
                    let next = future
                        .get(k)
                        .and_then(|q| q.front().copied())
                        .unwrap_or(u64::MAX);
                    (next, std::cmp::Reverse(*stamp))
                })
                .map(|(k, _)| *k);
            if let Some(v) = victim {
                self.items.remove(&v);
            }
        }
        self.items.insert(id, (c.clone(), self.clock));
        Ok(c)
    }
}
