//! The on-disk index's summary vector (DDFS): a Bloom filter over every data
//! fingerprint indexed, so a chunk it has never seen is known new without
//! touching the disk. Blocked: the bits of one key lie in one 64-byte block
//! (one cache line per query), at 12 bits per key when full (~0.5 % false
//! positives, each costing a probe of every run, never a wrong answer: at 8
//! bits per key the ~3 % of new chunks probed dominated the disk index's
//! run searches on a version series).
//!
//! Keys are only added: a removed fingerprint stays a (harmless) false
//! positive until the filter is rebuilt from the runs.

use crate::fingerprint::Fingerprint;
use crate::zerobuf::ZeroBuf;

/// Bits set per key.
const K: u32 = 7;
/// Bits per key at the filter's capacity.
pub const BITS_PER_KEY: usize = 12;

pub struct Bloom {
    /// 8 words (512 bits) per block; on huge pages when large (each query
    /// is a random access: with 4 KiB pages, a page walk each).
    words: ZeroBuf<u64>,
    blocks: u64,
    /// Keys it is sized for.
    capacity: usize,
}

#[inline]
fn hashes(fp: &Fingerprint) -> (u64, u64) {
    let w = |i: usize| u64::from_le_bytes(fp.0[i * 8..i * 8 + 8].try_into().unwrap());
    // Short trace fingerprints are zero-padded: fold every word in.
    let a = (w(0) ^ w(1).rotate_left(23) ^ w(2).rotate_left(41) ^ w(3).rotate_left(7))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let b = (a ^ (a >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (a, b ^ (b >> 32))
}

impl Bloom {
    /// A filter for `capacity` keys at [`BITS_PER_KEY`].
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1024);
        let blocks = (capacity * BITS_PER_KEY).div_ceil(512) as u64;
        Bloom {
            words: ZeroBuf::zeroed(blocks as usize * 8),
            blocks,
            capacity,
        }
    }

    /// The filter's bits, to be kept in a file (`super::runset`).
    pub fn words(&self) -> &[u64] {
        self.words.as_slice()
    }

    /// A filter for `capacity` keys with these bits, if they are its size.
    pub fn from_words(capacity: usize, words: &[u64]) -> Option<Self> {
        let capacity = capacity.max(1024);
        let blocks = (capacity * BITS_PER_KEY).div_ceil(512) as u64;
        (words.len() as u64 == blocks * 8).then(|| Bloom {
            words: ZeroBuf::from_slice(words),
            blocks,
            capacity,
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// The bytes a filter for `capacity` keys takes (before building it).
    pub fn bytes_for(capacity: usize) -> usize {
        (capacity.max(1024) * BITS_PER_KEY).div_ceil(512) * 64
    }

    #[inline]
    fn block(&self, a: u64) -> usize {
        ((a as u128 * self.blocks as u128) >> 64) as usize * 8
    }

    pub fn insert(&mut self, fp: &Fingerprint) {
        let (a, b) = hashes(fp);
        let at = self.block(a);
        self.set(at, b);
    }

    /// Insert every key of `keys`, each block prefetched a few keys ahead
    /// (a rebuild's inserts are independent cache misses: overlapped, they
    /// cost a fraction of one each).
    pub fn insert_all(&mut self, keys: impl Iterator<Item = Fingerprint>) {
        const AHEAD: usize = 16;
        let mut ring = [(0usize, 0u64); AHEAD];
        let mut n = 0usize;
        for fp in keys {
            let (a, b) = hashes(&fp);
            let at = self.block(a);
            self.prefetch_block(at);
            let slot = &mut ring[n % AHEAD];
            if n >= AHEAD {
                let (pat, pb) = *slot;
                self.set(pat, pb);
            }
            *slot = (at, b);
            n += 1;
        }
        for i in n.saturating_sub(AHEAD)..n {
            let (at, b) = ring[i % AHEAD];
            self.set(at, b);
        }
    }

    #[inline]
    fn set(&mut self, at: usize, mut b: u64) {
        for _ in 0..K {
            let bit = (b & 511) as usize;
            self.words.as_mut_slice()[at + bit / 64] |= 1 << (bit % 64);
            b >>= 9;
        }
    }

    #[inline]
    fn prefetch_block(&self, at: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an in-bounds address; prefetching never faults.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.words.as_ptr().add(at).cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }

    /// False: certainly never inserted.
    #[inline]
    pub fn may_contain(&self, fp: &Fingerprint) -> bool {
        let (a, mut b) = hashes(fp);
        let at = self.block(a);
        let mut all = true;
        for _ in 0..K {
            let bit = (b & 511) as usize;
            all &= self.words.as_slice()[at + bit / 64] & (1 << (bit % 64)) != 0;
            b >>= 9;
        }
        all
    }

    /// Hint that `fp` will be queried soon.
    #[inline]
    pub fn prefetch(&self, fp: &Fingerprint) {
        self.prefetch_block(self.block(hashes(fp).0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashAlgo;

    /// The prefetching bulk insert sets exactly the bits of one-by-one
    /// inserts, for fewer keys than its look-ahead and for many more.
    #[test]
    fn insert_all_equals_inserts() {
        for n in [0u32, 5, 16, 17, 5000] {
            let keys: Vec<Fingerprint> = (0..n)
                .map(|i| HashAlgo::Blake3.hash(&i.to_le_bytes()))
                .collect();
            let mut one = Bloom::new(4096);
            keys.iter().for_each(|k| one.insert(k));
            let mut bulk = Bloom::new(4096);
            bulk.insert_all(keys.iter().copied());
            assert!(one.words.as_slice() == bulk.words.as_slice(), "{n} keys");
        }
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let n = 100_000u32;
        let mut b = Bloom::new(n as usize);
        for i in 0..n {
            b.insert(&HashAlgo::Blake3.hash(&i.to_le_bytes()));
        }
        for i in 0..n {
            assert!(b.may_contain(&HashAlgo::Blake3.hash(&i.to_le_bytes())));
        }
        let fp = (n..2 * n)
            .filter(|i| b.may_contain(&HashAlgo::Blake3.hash(&i.to_le_bytes())))
            .count();
        // ~2.5 % expected for a blocked filter at 8 bits per key.
        assert!(fp < n as usize / 25, "{fp} false positives");
        assert!(b.memory_bytes() <= n as usize * BITS_PER_KEY / 8 + 64);
        assert_eq!(b.memory_bytes(), Bloom::bytes_for(n as usize));
        // Short (zero-padded) fingerprints spread as well.
        let mut s = Bloom::new(n as usize);
        for i in 0..n {
            s.insert(&crate::Fingerprint::from_slice(&i.to_be_bytes()).unwrap());
        }
        let fp = (n..2 * n)
            .filter(|i| s.may_contain(&crate::Fingerprint::from_slice(&i.to_be_bytes()).unwrap()))
            .count();
        assert!(fp < n as usize / 25, "{fp} false positives (short keys)");
    }
}
