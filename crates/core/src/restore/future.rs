//! When a restore will use each data container again, from a first walk
//! of the recipe: the LRU restore frees a container after its last use,
//! and the memory ceiling spills the held container needed furthest ahead,
//! or first trims held containers to the chunks they will still supply.
//!
//! Why the next use and not recency: under a ceiling below what the cache
//! policy keeps (uncompressed 4 MiB containers: 48 MiB holds 11 of LRU's
//! 32), spilling the least recently used re-read 1.63× the policy's reads on
//! `lab bench`'s stream; the restore knows its whole future, so it can spill
//! as Belady's OPT would, among the containers it holds. The policy still
//! decides every read the papers' metrics count; only re-reads of spilled
//! containers change.
//!
//! Why trimming: a container the restore comes back to usually supplies a
//! few chunks again (a file that repeats part of another), not its whole
//! 4 MiB. Keeping just those chunks spares the re-read a spill would cost,
//! for a fraction of the memory (`lab bench`'s stream: see ARCHITECTURE.md,
//! "Restore memory").

use crate::container::ContainerId;
use crate::fingerprint::Fingerprint;
use std::collections::{HashMap, HashSet, VecDeque};

/// Recorded positions beyond which only last uses are kept (the spill falls
/// back to recency): 4 Mi positions, 32 MiB, a backup of some 30 GiB at
/// 8 KiB chunks read from a different container at every chunk.
const MAX_RUNS: usize = 4 << 20;

/// One chunk use outside its container's first run: position, a prefix of
/// the fingerprint (a container holds few chunks: a prefix names them
/// closely enough, and a shared prefix only keeps one chunk more), size,
/// and whether no later use of that chunk (prefix) follows in the container.
type Later = (u64, u64, u32, bool);

/// Each container's uses along the recipe, as the starts of its runs
/// (consecutive chunks from one container are one use), and the chunks of
/// its later runs.
#[derive(Default)]
pub(crate) struct Future {
    last: HashMap<ContainerId, u64>,
    /// Run starts not yet passed, in order; `None` once over [`MAX_RUNS`].
    runs: Option<HashMap<ContainerId, VecDeque<u64>>>,
    /// Chunks of each container's runs after its first, in order; `None`
    /// once over [`MAX_RUNS`] (then spills free whole containers). The
    /// first run is always over before a container can be trimmed, so it
    /// is not kept: a restore of a tree without repeats keeps nothing here.
    later: Option<HashMap<ContainerId, VecDeque<Later>>>,
    /// Each container's first use, in order, and how many of them were
    /// passed and handed out for prefetching ([`Self::prefetch_due`]).
    firsts: Vec<(u64, ContainerId)>,
    passed: usize,
    handed: usize,
}

/// The chunks a held container will still supply, and their plain bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Needed {
    /// Fingerprint prefixes ([`prefix`]), each once.
    pub prefixes: Vec<u64>,
    pub bytes: u64,
}

/// The first 8 bytes of `fp`, as [`Future`] records chunks.
pub(crate) fn prefix(fp: &Fingerprint) -> u64 {
    u64::from_le_bytes(fp.0[..8].try_into().expect("8 bytes"))
}

impl Future {
    /// The uses of `ids`, in recipe order (`None`: a chunk the index
    /// misses, reported by the restore's own walk).
    pub(crate) fn from_walk(
        uses: impl Iterator<Item = crate::error::Result<Option<(ContainerId, Fingerprint, u32)>>>,
    ) -> crate::error::Result<Future> {
        let mut last = HashMap::new();
        let mut runs: Option<HashMap<ContainerId, VecDeque<u64>>> = Some(HashMap::new());
        let mut later: Option<HashMap<ContainerId, VecDeque<Later>>> = Some(HashMap::new());
        let (mut recorded, mut recorded_later, mut prev) = (0usize, 0usize, None);
        let mut firsts = Vec::new();
        for (at, u) in uses.enumerate() {
            let Some((id, fp, size)) = u? else {
                prev = None;
                continue;
            };
            let at = at as u64;
            if last.insert(id, at).is_none() {
                firsts.push((at, id));
            }
            if prev != Some(id) {
                if let Some(r) = runs.as_mut() {
                    r.entry(id).or_default().push_back(at);
                    recorded += 1;
                    if recorded > MAX_RUNS {
                        runs = None;
                    }
                }
            }
            // Past its first run: a chunk a trimmed container must keep.
            let first_run = runs.as_ref().is_none_or(|r| r[&id].len() == 1);
            if !first_run {
                if let Some(l) = later.as_mut() {
                    l.entry(id)
                        .or_default()
                        .push_back((at, prefix(&fp), size, false));
                    recorded_later += 1;
                    if recorded_later > MAX_RUNS {
                        later = None;
                    }
                }
            }
            prev = Some(id);
        }
        // Mark each chunk's last use, walking each container's uses back.
        for q in later.iter_mut().flat_map(|l| l.values_mut()) {
            let mut seen = HashSet::new();
            for u in q.iter_mut().rev() {
                u.3 = seen.insert(u.1);
            }
        }
        Ok(Future {
            last,
            runs,
            later,
            firsts,
            passed: 0,
            handed: 0,
        })
    }

    /// Containers to prefetch at position `at`: those of the next `ahead`
    /// first uses after `at`, each handed out once. Positions must not
    /// decrease from call to call.
    pub(crate) fn prefetch_due(&mut self, at: u64, ahead: usize) -> &[(u64, ContainerId)] {
        while self.firsts.get(self.passed).is_some_and(|f| f.0 <= at) {
            self.passed += 1;
        }
        let from = self.handed.max(self.passed);
        let to = (self.passed + ahead).min(self.firsts.len()).max(from);
        self.handed = to;
        &self.firsts[from..to]
    }

    /// Whether the chunk of `id` used at `at` is used for the last time
    /// there (a trimmed container lets it go). Positions must not decrease
    /// from call to call.
    pub(crate) fn chunk_done(&mut self, id: ContainerId, at: u64) -> bool {
        let Some(q) = self.later.as_mut().and_then(|l| l.get_mut(&id)) else {
            return false;
        };
        while q.front().is_some_and(|u| u.0 < at) {
            q.pop_front();
        }
        q.front().is_some_and(|u| u.0 == at && u.3)
    }

    /// The chunks `id` supplies after position `at`, if known. Positions
    /// must not decrease from call to call.
    pub(crate) fn needed_after(&mut self, id: ContainerId, at: u64) -> Option<Needed> {
        // Positions past the limit are not known either.
        self.runs.as_ref()?;
        let Some(q) = self.later.as_mut()?.get_mut(&id) else {
            return Some(Needed {
                prefixes: Vec::new(),
                bytes: 0,
            });
        };
        while q.front().is_some_and(|u| u.0 <= at) {
            q.pop_front();
        }
        let mut seen = HashSet::new();
        let mut needed = Needed {
            prefixes: Vec::new(),
            bytes: 0,
        };
        for &(_, p, size, _) in q.iter() {
            if seen.insert(p) {
                needed.prefixes.push(p);
                needed.bytes += size as u64;
            }
        }
        Some(needed)
    }

    /// Whether position `at` is the last use of `id`.
    pub(crate) fn is_last(&self, id: ContainerId, at: u64) -> bool {
        self.last.get(&id) == Some(&at)
    }

    /// Whether `id` is used after position `at`.
    pub(crate) fn used_after(&self, id: ContainerId, at: u64) -> bool {
        self.last.get(&id).is_some_and(|&l| l > at)
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

    #[test]
    fn prefetch_hands_out_the_next_first_uses_once_each() {
        // Containers 1 1 2 1 3 4 2 5: first uses 1@0 2@2 3@4 4@5 5@7.
        let uses = [1u64, 1, 2, 1, 3, 4, 2, 5]
            .map(|c| Ok(Some((ContainerId(c), Fingerprint([c as u8; 32]), 1))));
        let mut f = Future::from_walk(uses.into_iter()).unwrap();
        let ids = |v: &[(u64, ContainerId)]| v.iter().map(|x| x.1 .0).collect::<Vec<_>>();
        assert_eq!(ids(f.prefetch_due(0, 2)), [2, 3]);
        assert_eq!(ids(f.prefetch_due(1, 2)), Vec::<u64>::new());
        assert_eq!(ids(f.prefetch_due(2, 2)), [4]);
        assert_eq!(ids(f.prefetch_due(6, 2)), [5]);
        assert_eq!(ids(f.prefetch_due(7, 2)), Vec::<u64>::new());
    }

    /// Container ids (0: a chunk the index misses); each position's chunk
    /// is `fp(c)` of size `c` for the char given.
    fn walk_chunks(ids: &[u64], chunks: &str) -> Future {
        Future::from_walk(
            ids.iter()
                .zip(chunks.bytes())
                .map(|(&i, c)| Ok((i != 0).then(|| (ContainerId(i), fp(c), c as u32)))),
        )
        .unwrap()
    }

    fn walk(ids: &[u64]) -> Future {
        walk_chunks(ids, &"a".repeat(ids.len()))
    }

    fn fp(c: u8) -> Fingerprint {
        Fingerprint([c; 32])
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
    fn needed_chunks_are_those_of_later_runs_not_yet_passed() {
        // Positions:          0  1  2  3  4  5  6  7  8
        let mut f = walk_chunks(&[1, 1, 2, 1, 2, 1, 1, 2, 3], "abxbyacby");
        let needed = |f: &mut Future, id: u64, at: u64| f.needed_after(ContainerId(id), at);
        // Container 1 comes back for b, then a and c: b once.
        let n = needed(&mut f, 1, 2).unwrap();
        assert_eq!(
            n.prefixes,
            vec![prefix(&fp(b'b')), prefix(&fp(b'a')), prefix(&fp(b'c'))]
        );
        assert_eq!(n.bytes, b'b' as u64 + b'a' as u64 + b'c' as u64);
        // Past position 4, only a and c are still to come.
        let n = needed(&mut f, 1, 4).unwrap();
        assert_eq!(n.prefixes, vec![prefix(&fp(b'a')), prefix(&fp(b'c'))]);
        // Container 2: y at 4, b at 7 (its first run, x at 2, is not kept).
        assert_eq!(
            needed(&mut f, 2, 3).unwrap().bytes,
            b'y' as u64 + b'b' as u64
        );
        assert_eq!(
            needed(&mut f, 2, 7).unwrap(),
            Needed {
                prefixes: vec![],
                bytes: 0
            }
        );
        // A container used in one run only needs nothing once it is over.
        assert_eq!(needed(&mut f, 3, 8).unwrap().bytes, 0);
    }

    #[test]
    fn a_chunk_is_done_at_its_last_use_in_later_runs() {
        // Positions:          0  1  2  3  4  5  6  7
        let mut f = walk_chunks(&[1, 1, 2, 1, 1, 2, 1, 1], "abxabyab");
        // Container 1's later runs: a b at 3 4, a b at 6 7.
        assert!(!f.chunk_done(ContainerId(1), 3));
        assert!(!f.chunk_done(ContainerId(1), 4));
        assert!(f.chunk_done(ContainerId(1), 6));
        assert!(f.chunk_done(ContainerId(1), 7));
        // Container 2: y at 5 is its only later use.
        assert!(f.chunk_done(ContainerId(2), 5));
        assert!(!f.chunk_done(ContainerId(3), 0));
    }

    #[test]
    fn past_the_recorded_limit_nothing_is_known() {
        let mut f = walk(&[1, 2]);
        f.runs = None;
        assert_eq!(f.needed_after(ContainerId(1), 0), None);
        assert!(!f.knows_next());
    }

    #[test]
    fn an_error_in_the_walk_is_returned() {
        let ids = [
            Ok(Some((ContainerId(1), fp(1), 1))),
            Err(crate::error::Error::corrupt("x", "y")),
        ];
        assert!(Future::from_walk(ids.into_iter()).is_err());
    }
}
