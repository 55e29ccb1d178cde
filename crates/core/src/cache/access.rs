//! [`Access`]: what a cache policy decides for one reference, hit or miss
//! (and what the miss evicts), as the LRU and OPT policies return it. In a
//! file of its own so the policies do not depend on the folder's `mod.rs`.

use crate::container::ContainerId;

/// What a cache policy decided for one reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access<K = ContainerId> {
    /// The container is cached.
    Hit,
    /// The container must be read; it replaces `evict` when the cache is full.
    Miss { evict: Option<K> },
}
