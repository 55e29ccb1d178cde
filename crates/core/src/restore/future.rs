//! When a restore will use each data container again, from a first walk
//! of the recipe: the LRU restore frees a container after its last use,
//! and the memory ceiling spills the held container needed furthest ahead.
//!
//! Why the next use and not recency: under a ceiling below what the cache
//! policy keeps (uncompressed 4 MiB containers: 48 MiB holds 11 of LRU's
//! 32), spilling the least recently used re-read 1.63× the policy's reads on
//! `lab bench`'s stream; the restore knows its whole future, so it can spill
//! as Belady's OPT would, among the containers it holds. The policy still
//! decides every read the papers' metrics count; only re-reads of spilled
//! containers change.

use crate::container::ContainerId;
use std::collections::{HashMap, VecDeque};

/// Recorded positions beyond which only last uses are kept (the spill falls
/// back to recency): 4 Mi positions, 32 MiB, a backup of some 30 GiB at
/// 8 KiB chunks read from a different container at every chunk.
const MAX_RUNS: usize = 4 << 20;

/// Each container's uses along the recipe, as the starts of its runs
/// (consecutive chunks from one container are one use).
#[derive(Default)]
pub(crate) struct Future {
    last: HashMap<ContainerId, u64>,
    /// Run starts not yet passed, in order; `None` once over [`MAX_RUNS`].
    runs: Option<HashMap<ContainerId, VecDeque<u64>>>,
}

impl Future {
    /// The uses of `ids`, in recipe order (`None`: a chunk the index
    /// misses, reported by the restore's own walk).
    pub(crate) fn from_walk(
        ids: impl Iterator<Item = crate::error::Result<Option<ContainerId>>>,
    ) -> crate::error::Result<Future> {
        let mut last = HashMap::new();
        let mut runs: Option<HashMap<ContainerId, VecDeque<u64>>> = Some(HashMap::new());
        let (mut recorded, mut prev) = (0usize, None);
        for (at, id) in ids.enumerate() {
            let Some(id) = id? else {
                prev = None;
                continue;
            };
            let at = at as u64;
            last.insert(id, at);
            if prev != Some(id) {
                if let Some(r) = runs.as_mut() {
                    r.entry(id).or_default().push_back(at);
                    recorded += 1;
                    if recorded > MAX_RUNS {
                        runs = None;
                    }
                }
            }
            prev = Some(id);
        }
        Ok(Future { last, runs })
    }

    /// Whether position `at` is the last use of `id`.
    pub(crate) fn is_last(&self, id: ContainerId, at: u64) -> bool {
        self.last.get(&id) == Some(&at)
    }

    /// Whether next uses are known (else spills go by recency).
    pub(crate) fn knows_next(&self) -> bool {
        self.runs.is_some()
    }

    /// The first use of `id` after position `at` (`u64::MAX`: none, or not
    /// known). Positions must not decrease from call to call.
    pub(crate) fn next_after(&mut self, id: ContainerId, at: u64) -> u64 {
        let Some(q) = self.runs.as_mut().and_then(|r| r.get_mut(&id)) else {
            return u64::MAX;
        };
        while q.front().is_some_and(|&s| s <= at) {
            q.pop_front();
        }
        q.front().copied().unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(ids: &[u64]) -> Future {
        Future::from_walk(ids.iter().map(|&i| Ok((i != 0).then_some(ContainerId(i))))).unwrap()
    }

    #[test]
    fn next_use_is_the_next_run_start() {
        // Positions:    0  1  2  3  4  5  6  7
        let mut f = walk(&[1, 1, 2, 0, 1, 3, 3, 2]);
        assert!(f.knows_next());
        assert!(f.is_last(ContainerId(1), 4) && !f.is_last(ContainerId(1), 1));
        assert!(f.is_last(ContainerId(2), 7));
        assert_eq!(f.next_after(ContainerId(1), 2), 4);
        assert_eq!(f.next_after(ContainerId(2), 2), 7);
        assert_eq!(f.next_after(ContainerId(3), 3), 5);
        assert_eq!(f.next_after(ContainerId(1), 5), u64::MAX);
        assert_eq!(f.next_after(ContainerId(9), 0), u64::MAX);
    }

    #[test]
    fn an_error_in_the_walk_is_returned() {
        let ids = [
            Ok(Some(ContainerId(1))),
            Err(crate::error::Error::corrupt("x", "y")),
        ];
        assert!(Future::from_walk(ids.into_iter()).is_err());
    }
}
