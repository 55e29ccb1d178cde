//! A memo of level-1 recipe chunks' fingerprints across the backups of one
//! writer, so that an unchanged stretch of a new version does not hash its
//! recipe leaves again.
//!
//! Recipe chunks are cut by content, so a stretch of data chunks that did
//! not change since the previous backup gives byte-identical leaves (the
//! folder's `mod.rs`). In trace mode the leaves' BLAKE3 was a third of the
//! feeding thread's time (issue 35): at a 2 % change rate most leaves are
//! the previous version's again. The memo finds a leaf by a 64-bit XXH3 of
//! its bytes and answers only when the bytes it kept are *equal*, so a
//! fingerprint it gives is always the hash of exactly those bytes (no
//! collision of the short key can change a recipe); anything else is hashed.
//!
//! The memo keeps the leaves that one of the last [`KEPT`] backups used, in
//! one buffer of their bytes: a backup's start packs those to the front
//! and drops the rest, so an unchanged leaf is neither copied nor kept
//! twice. The bytes are bounded ([`MAX_BYTES`]); past that, leaves are
//! hashed and not kept, which costs speed, never correctness.

use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::ids::IdBuildHasher;
use std::collections::HashMap;

/// Bytes of leaves the memo keeps at most (a 10 GiB version of 8 KiB
/// chunks has ~52 MB of leaves).
pub const MAX_BYTES: usize = 256 << 20;

/// A leaf is kept while one of the last this many backups used it (two: a
/// version and the one before, so a stretch that comes back after one
/// version is still found; lab series back up one source at a time).
pub const KEPT: u32 = 2;

struct Leaf {
    /// Where its bytes are in [`LeafMemo::bytes`].
    start: usize,
    len: usize,
    /// The last backup (counted by [`LeafMemo::next_backup`]) that used it.
    used: u32,
    fp: Fingerprint,
}

/// See the module documentation.
pub struct LeafMemo {
    algo: Fingerprinter,
    /// XXH3-64 of a leaf's bytes → the leaf.
    map: HashMap<u64, Leaf, IdBuildHasher>,
    bytes: Vec<u8>,
    backup: u32,
    cap: usize,
    /// Leaves answered from the memo and leaves hashed (for tests and
    /// reports).
    pub hits: u64,
    pub misses: u64,
}

impl LeafMemo {
    /// A memo of `algo`'s fingerprints (every answer is `algo.hash`).
    pub fn new(algo: Fingerprinter) -> Self {
        Self::with_cap(algo, MAX_BYTES)
    }

    /// With at most `cap` bytes of leaves.
    pub fn with_cap(algo: Fingerprinter, cap: usize) -> Self {
        LeafMemo {
            algo,
            map: HashMap::default(),
            bytes: Vec::new(),
            backup: 0,
            cap,
            hits: 0,
            misses: 0,
        }
    }

    /// The fingerprint of `leaf` (an encoded level-1 recipe chunk): from the
    /// memo where it kept these very bytes, else hashed and kept.
    pub fn fingerprint(&mut self, leaf: &[u8]) -> Fingerprint {
        let key = xxhash_rust::xxh3::xxh3_64(leaf);
        match self.map.get_mut(&key) {
            Some(l) if self.bytes[l.start..l.start + l.len] == *leaf => {
                l.used = self.backup;
                self.hits += 1;
                l.fp
            }
            // Another leaf under the same key stays (the key is only where
            // to look; the bytes decide).
            Some(_) => {
                self.misses += 1;
                self.algo.hash(leaf)
            }
            None => {
                self.misses += 1;
                let fp = self.algo.hash(leaf);
                if self.bytes.len() + leaf.len() <= self.cap {
                    let start = self.bytes.len();
                    self.bytes.extend_from_slice(leaf);
                    let (len, used) = (leaf.len(), self.backup);
                    self.map.insert(
                        key,
                        Leaf {
                            start,
                            len,
                            used,
                            fp,
                        },
                    );
                }
                fp
            }
        }
    }

    /// A new backup starts: drop the leaves none of the last [`KEPT`]
    /// backups used and pack the others to the front of the buffer (in
    /// their order, so each moves down or stays).
    pub fn next_backup(&mut self) {
        let oldest = self.backup.saturating_sub(KEPT - 1);
        self.map.retain(|_, l| l.used >= oldest);
        let mut live: Vec<(usize, u64)> = self.map.iter().map(|(&k, l)| (l.start, k)).collect();
        live.sort_unstable();
        let mut to = 0;
        for (_, key) in live {
            let l = self.map.get_mut(&key).expect("listed above");
            self.bytes.copy_within(l.start..l.start + l.len, to);
            l.start = to;
            to += l.len;
        }
        self.bytes.truncate(to);
        self.backup += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::HashAlgo;

    fn leaf(i: u8, n: usize) -> Vec<u8> {
        (0..n)
            .map(|j| i.wrapping_mul(31).wrapping_add(j as u8))
            .collect()
    }

    #[test]
    fn answers_are_the_hash_of_the_bytes_and_unused_leaves_age_out() {
        let algo = Fingerprinter::from(HashAlgo::Blake3);
        let mut m = LeafMemo::new(algo.clone());
        let (a, b, c) = (leaf(1, 3200), leaf(2, 3200), leaf(3, 40));
        m.next_backup();
        assert_eq!(m.fingerprint(&a), algo.hash(&a));
        assert_eq!(m.fingerprint(&b), algo.hash(&b));
        assert_eq!(m.fingerprint(&a), algo.hash(&a));
        assert_eq!((m.hits, m.misses), (1, 2));
        m.next_backup();
        // `b` was used by the backup before: found, and its bytes stay.
        assert_eq!(m.fingerprint(&b), algo.hash(&b));
        assert_eq!((m.hits, m.misses), (2, 2));
        m.next_backup();
        // `a` (last used two backups ago) is still kept; `c` is new.
        assert_eq!(m.fingerprint(&c), algo.hash(&c));
        assert_eq!(m.bytes.len(), 3200 + 3200 + 40);
        m.next_backup();
        // `a` is gone, packed out of the buffer; `b` and `c` moved down.
        assert_eq!(m.bytes.len(), 3200 + 40);
        assert_eq!(&m.bytes[..3200], &b[..]);
        assert_eq!(&m.bytes[3200..], &c[..]);
        assert_eq!(m.fingerprint(&a), algo.hash(&a));
        assert_eq!(m.fingerprint(&c), algo.hash(&c));
        assert_eq!(m.fingerprint(&b), algo.hash(&b));
        assert_eq!((m.hits, m.misses), (4, 4));
    }

    #[test]
    fn a_key_collision_is_hashed_not_answered() {
        let algo = Fingerprinter::from(HashAlgo::Blake3);
        let mut m = LeafMemo::new(algo.clone());
        let (a, b) = (leaf(1, 100), leaf(2, 100));
        m.fingerprint(&a);
        // Forge a collision: `a`'s leaf filed under `b`'s key.
        let ka = xxhash_rust::xxh3::xxh3_64(&a);
        let l = m.map.remove(&ka).expect("kept");
        m.map.insert(xxhash_rust::xxh3::xxh3_64(&b), l);
        assert_eq!(m.fingerprint(&b), algo.hash(&b));
        assert_eq!(m.fingerprint(&b), algo.hash(&b));
        assert_eq!((m.hits, m.misses), (0, 3));
    }

    #[test]
    fn past_its_bound_it_hashes_and_keeps_nothing() {
        let algo = Fingerprinter::from(HashAlgo::Sha256);
        let mut m = LeafMemo::with_cap(algo.clone(), 150);
        let (a, b) = (leaf(1, 100), leaf(2, 100));
        m.fingerprint(&a);
        m.fingerprint(&b);
        assert_eq!(m.fingerprint(&b), algo.hash(&b));
        assert_eq!(m.fingerprint(&a), algo.hash(&a));
        assert_eq!((m.hits, m.misses), (1, 3));
        assert_eq!(m.bytes.len(), 100);
    }
}
