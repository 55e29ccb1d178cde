//! Frees ahead of their op: a container the scheduler evicts, spills or
//! releases gives its memory back as soon as the assembler has copied out
//! the last chunk it was planned to supply, not when the assembler reaches
//! the op in recipe order.
//!
//! Why: under the memory ceiling the scheduler, planning ahead of the
//! assembler, frees a held container to make room for its next read and
//! waits for the bytes. Given back in recipe order, the bytes come only
//! when the assembler has caught up with the scheduler: every read then
//! waits for the one before it to be used, and the loaders no longer run
//! ahead (`lab bench`'s stream restored at half the speed without a
//! ceiling; ARCHITECTURE.md, "Restore memory"). The container freed is
//! usually one whose planned chunks the assembler has passed already (the
//! one needed furthest ahead, or least recently used), so its bytes can go
//! the moment the op is received.
//!
//! The ops stay in order; this only counts, per container, the chunk ops
//! received and not yet carried out, and tells the assembler when a
//! container whose eviction it has received has none left before that op.

use super::schedule::Op;
use crate::container::ContainerId;
use std::collections::{HashMap, HashSet};

/// What the assembler may do ahead of the op that asks it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ahead {
    /// Free the container (an eviction, a spill or a release).
    Free(ContainerId),
    /// Trim the container to these chunks (`Op::Trim`).
    Trim(ContainerId, Vec<u64>, u64),
}

/// An op received whose container still supplies queued chunks first.
enum Due {
    Free,
    Trim(Vec<u64>, u64),
}

/// The assembler's count of what its queued ops still need.
#[derive(Default)]
pub(crate) struct EarlyFrees {
    /// Chunk ops received and not yet carried out, per container.
    pending: HashMap<ContainerId, u32>,
    /// Containers whose eviction (or trim) is received and not yet done:
    /// how many of their chunk ops come before it.
    due: HashMap<ContainerId, (u32, Due)>,
    /// Freed ahead of an eviction not yet carried out.
    gone: HashSet<ContainerId>,
    /// Trimmed ahead of a trim op not yet carried out.
    trimmed: HashSet<ContainerId>,
    /// Containers freed and trimmed ahead so far.
    ahead: (u64, u64),
}

impl EarlyFrees {
    /// `op` was queued. Returns what can be done now of it: an eviction or
    /// a trim with no chunk of its container queued before it.
    pub(crate) fn received(&mut self, op: &Op) -> Option<Ahead> {
        // One op ahead at a time per container: a second one queued before
        // the first is done (the container read again in between) is
        // carried out in order.
        // (A container trimmed ahead may still be freed ahead.)
        let busy = |f: &Self, id: &ContainerId| f.due.contains_key(id) || f.gone.contains(id);
        let (id, due) = match op {
            Op::Chunk(_, id) => {
                *self.pending.entry(*id).or_default() += 1;
                return None;
            }
            Op::Evict(id) | Op::Release(id) if !busy(self, id) => (*id, Due::Free),
            Op::Trim(id, prefixes, kept) if !busy(self, id) && !self.trimmed.contains(id) => {
                (*id, Due::Trim(prefixes.clone(), *kept))
            }
            _ => return None,
        };
        match self.pending.get(&id).copied().unwrap_or(0) {
            0 => Some(self.now(id, due)),
            k => {
                self.due.insert(id, (k, due));
                None
            }
        }
    }

    fn now(&mut self, id: ContainerId, due: Due) -> Ahead {
        match due {
            Due::Free => {
                self.ahead.0 += 1;
                self.gone.insert(id);
                Ahead::Free(id)
            }
            Due::Trim(prefixes, kept) => {
                self.ahead.1 += 1;
                self.trimmed.insert(id);
                Ahead::Trim(id, prefixes, kept)
            }
        }
    }

    /// A chunk op of `id` was carried out. Returns what can be done now:
    /// that was its container's last chunk before an op received.
    pub(crate) fn chunk_done(&mut self, id: ContainerId) -> Option<Ahead> {
        if let Some(k) = self.pending.get_mut(&id) {
            *k -= 1;
            if *k == 0 {
                self.pending.remove(&id);
            }
        }
        let (k, _) = self.due.get_mut(&id)?;
        *k -= 1;
        if *k > 0 {
            return None;
        }
        let (_, due) = self.due.remove(&id).expect("due");
        Some(self.now(id, due))
    }

    /// Whether `id` was freed ahead of an eviction not yet carried out (an
    /// op on it before that eviction, a trim or a dropped chunk, has
    /// nothing left to act on).
    pub(crate) fn is_gone(&self, id: ContainerId) -> bool {
        self.gone.contains(&id)
    }

    /// The eviction (or release) of `id` is carried out: whether it was
    /// done ahead.
    pub(crate) fn evicted(&mut self, id: ContainerId) -> bool {
        self.gone.remove(&id)
    }

    /// Containers freed and trimmed ahead of their op so far.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn done_ahead(&self) -> (u64, u64) {
        self.ahead
    }

    /// The trim of `id` is carried out: whether it was done ahead.
    pub(crate) fn trim_reached(&mut self, id: ContainerId) -> bool {
        self.trimmed.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Fingerprint;
    use crate::recipe::RecipeEntry;

    const A: ContainerId = ContainerId(1);
    const B: ContainerId = ContainerId(2);

    fn chunk(id: ContainerId) -> Op {
        let e = RecipeEntry {
            fp: Fingerprint([0; 32]),
            size: 1,
            copy: 0,
        };
        Op::Chunk(e, id)
    }

    #[test]
    fn a_container_goes_after_its_last_queued_chunk_before_its_eviction() {
        let mut f = EarlyFrees::default();
        assert_eq!(f.received(&chunk(A)), None);
        assert_eq!(f.received(&chunk(B)), None);
        assert_eq!(f.received(&chunk(A)), None);
        // B's eviction waits for its one queued chunk, A's for its two.
        assert_eq!(f.received(&Op::Evict(B)), None);
        assert_eq!(f.received(&Op::Release(A)), None);
        // A chunk of A queued after its release does not hold it back.
        assert_eq!(f.received(&chunk(A)), None);
        assert_eq!(f.chunk_done(A), None);
        assert!(!f.is_gone(A));
        assert_eq!(f.chunk_done(B), Some(Ahead::Free(B)));
        assert!(f.is_gone(B));
        assert_eq!(f.chunk_done(A), Some(Ahead::Free(A)));
        assert!(f.evicted(B));
        assert!(f.evicted(A));
        assert!(!f.is_gone(A));
        // The chunk after the release counts no more toward a free.
        assert_eq!(f.chunk_done(A), None);
        // With nothing of it queued, an eviction frees at once.
        assert_eq!(f.received(&Op::Evict(A)), Some(Ahead::Free(A)));
        // A second eviction before the first is carried out waits its turn.
        assert_eq!(f.received(&Op::Evict(A)), None);
        assert!(f.evicted(A));
        assert!(!f.evicted(A), "the second one frees in order");
    }

    #[test]
    fn a_trim_goes_ahead_too_and_an_eviction_after_it_waits_for_the_trimmed_chunks() {
        let mut f = EarlyFrees::default();
        let trim = || Op::Trim(A, vec![7], 3);
        // Nothing of A queued: trimmed at once.
        assert_eq!(f.received(&trim()), Some(Ahead::Trim(A, vec![7], 3)));
        // Its kept chunk is used, then A is spilled: freed after that use.
        assert_eq!(f.received(&chunk(A)), None);
        assert_eq!(f.received(&Op::Evict(A)), None);
        assert!(f.trim_reached(A), "the trim op finds it done");
        assert!(!f.trim_reached(A));
        assert_eq!(f.chunk_done(A), Some(Ahead::Free(A)));
        assert!(f.evicted(A));
        // A trim behind a queued chunk waits for it; an eviction received
        // meanwhile is carried out in order.
        assert_eq!(f.received(&chunk(A)), None);
        assert_eq!(f.received(&trim()), None);
        assert_eq!(f.received(&Op::Evict(A)), None);
        assert_eq!(f.chunk_done(A), Some(Ahead::Trim(A, vec![7], 3)));
        assert!(f.trim_reached(A));
        assert!(!f.evicted(A), "freed in order");
    }
}
