//! Least-recently-used replacement of whole containers.

use crate::cache::access::Access;
use crate::container::{Container, ContainerId};
use crate::error::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// The LRU policy on bare container ids: which references miss and what
/// each miss evicts. A restore runs it ahead of the reads, so the reads can
/// be issued before the chunks are needed.
pub struct Lru<K = ContainerId> {
    capacity: usize,
    clock: u64,
    /// Cached containers and when each was last used.
    stamps: HashMap<K, u64>,
}

impl<K: Copy + Eq + std::hash::Hash> Lru<K> {
    pub fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            clock: 0,
            stamps: HashMap::new(),
        }
    }

    /// Whether `id` is cached (does not count as a use).
    pub fn contains(&self, id: K) -> bool {
        self.stamps.contains_key(&id)
    }

    /// A reference to `id`: a hit, or a miss that brings `id` in and, when
    /// the cache is full, evicts the least recently used container.
    pub fn access(&mut self, id: K) -> Access<K> {
        self.clock += 1;
        if let Some(stamp) = self.stamps.get_mut(&id) {
            *stamp = self.clock;
            return Access::Hit;
        }
        let mut evict = None;
        if self.stamps.len() >= self.capacity {
            // O(capacity) per miss: caches hold tens of containers, and a
            // miss costs a container read.
            evict = self.stamps.iter().min_by_key(|(_, s)| **s).map(|(k, _)| *k);
            if let Some(v) = evict {
                self.stamps.remove(&v);
            }
        }
        self.stamps.insert(id, self.clock);
        Access::Miss { evict }
    }
}

/// Whole containers (or anything loaded per container id) under [`Lru`].
pub struct LruCache<V = Container> {
    policy: Lru,
    items: HashMap<ContainerId, Arc<V>>,
}

impl<V> LruCache<V> {
    pub fn new(capacity: usize) -> Self {
        LruCache {
            policy: Lru::new(capacity),
            items: HashMap::new(),
        }
    }

    /// Whether `id` is cached (does not count as a use).
    pub fn contains(&self, id: ContainerId) -> bool {
        self.items.contains_key(&id)
    }

    /// The container, from the cache or loaded with `load` (evicting the
    /// least recently used one when full). A failed load changes nothing.
    pub fn get(
        &mut self,
        id: ContainerId,
        load: impl FnOnce(ContainerId) -> Result<V>,
    ) -> Result<Arc<V>> {
        let loaded = match self.items.get(&id) {
            Some(_) => None,
            None => Some(Arc::new(load(id)?)),
        };
        match self.policy.access(id) {
            Access::Hit => Ok(self.items[&id].clone()),
            Access::Miss { evict } => {
                if let Some(v) = evict {
                    self.items.remove(&v);
                }
                let c = loaded.expect("a miss is a container not in `items`, loaded above");
                self.items.insert(id, c.clone());
                Ok(c)
            }
        }
    }
}
