//! A Bloom filter over fingerprints. Fingerprints are uniformly random, so
//! two 64-bit words of the fingerprint give the double-hashing pair; no
//! further hashing is needed. A false positive can only make GC keep (or
//! group) a chunk as if referenced — never drop a live one.

use crate::fingerprint::Fingerprint;

#[derive(Clone, Debug)]
pub struct Bloom {
    bits: Vec<u64>,
    /// Number of bits (a power of two, so positions are masks).
    mask: u64,
    hashes: u32,
}

impl Bloom {
    /// A filter sized for `items` entries at false-positive rate `fp_rate`.
    pub fn new(items: usize, fp_rate: f64) -> Self {
        let p = fp_rate.clamp(1e-9, 0.5);
        let n = items.max(1) as f64;
        let ln2 = std::f64::consts::LN_2;
        let m = (-(n * p.ln()) / (ln2 * ln2)).ceil().max(64.0) as u64;
        let m = m.next_power_of_two();
        let hashes = ((m as f64 / n) * ln2).round().clamp(1.0, 16.0) as u32;
        Bloom {
            bits: vec![0; (m / 64) as usize],
            mask: m - 1,
            hashes,
        }
    }

    fn positions(&self, fp: &Fingerprint) -> impl Iterator<Item = u64> + '_ {
        let h1 = fp.prefix_u64();
        let h2 = u64::from_le_bytes(fp.0[16..24].try_into().unwrap()) | 1;
        (0..self.hashes as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) & self.mask)
    }

    pub fn insert(&mut self, fp: &Fingerprint) {
        let h1 = fp.prefix_u64();
        let h2 = u64::from_le_bytes(fp.0[16..24].try_into().unwrap()) | 1;
        for i in 0..self.hashes as u64 {
            let p = h1.wrapping_add(i.wrapping_mul(h2)) & self.mask;
            self.bits[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    pub fn contains(&self, fp: &Fingerprint) -> bool {
        self.positions(fp)
            .all(|p| self.bits[(p / 64) as usize] & (1 << (p % 64)) != 0)
    }

    pub fn memory_bytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// The filter as bytes: the hash count (u32 LE), then the bit words
    /// (u64 LE each).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + self.bits.len() * 8);
        b.extend_from_slice(&self.hashes.to_le_bytes());
        for w in &self.bits {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// [`to_bytes`](Self::to_bytes) read back; `None` unless it is a
    /// power-of-two number of words with 1–16 hashes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let hashes = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        let words = &b[4..];
        let n = words.len() / 8;
        if !words.len().is_multiple_of(8) || !n.is_power_of_two() || !(1..=16).contains(&hashes) {
            return None;
        }
        let bits: Vec<u64> = words
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .collect();
        Some(Bloom {
            mask: n as u64 * 64 - 1,
            bits,
            hashes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashAlgo;

    #[test]
    fn no_false_negatives_and_rate_near_target() {
        let fp = |i: u32| HashAlgo::Blake3.hash(&i.to_le_bytes());
        let mut b = Bloom::new(10_000, 0.01);
        for i in 0..10_000 {
            b.insert(&fp(i));
        }
        assert!((0..10_000).all(|i| b.contains(&fp(i))));
        let fps = (10_000..110_000).filter(|&i| b.contains(&fp(i))).count();
        // Rounding m up to a power of two only lowers the rate.
        assert!(fps < 1_500, "{fps} false positives in 100k");
    }
}
