//! Least-recently-used cache of whole containers.

use crate::container::{Container, ContainerId};
use crate::error::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// Whole containers, evicting the least recently used. Generic over the
/// cached value so cache policies can be simulated on bare container ids.
pub struct LruCache<V = Container> {
    capacity: usize,
    clock: u64,
    items: HashMap<ContainerId, (Arc<V>, u64)>,
}

impl<V> LruCache<V> {
    pub fn new(capacity: usize) -> Self {
        LruCache {
            capacity: capacity.max(1),
            clock: 0,
            items: HashMap::new(),
        }
    }

    /// The container, from the cache or loaded with `load` (evicting the
    /// least recently used one when full).
    pub fn get(
        &mut self,
        id: ContainerId,
        load: impl FnOnce(ContainerId) -> Result<V>,
    ) -> Result<Arc<V>> {
        self.clock += 1;
        if let Some((c, stamp)) = self.items.get_mut(&id) {
            *stamp = self.clock;
            return Ok(c.clone());
        }
        let c = Arc::new(load(id)?);
        if self.items.len() >= self.capacity {
            if let Some(victim) = self
                .items
                .iter()
                .min_by_key(|(_, (_, s))| *s)
                .map(|(k, _)| *k)
            {
                self.items.remove(&victim);
            }
        }
        self.items.insert(id, (c.clone(), self.clock));
        Ok(c)
    }
}
