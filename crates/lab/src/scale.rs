//! Synthetic fingerprint series for scale runs: chunk identities evolve
//! from version to version without any bytes being generated or hashed, so
//! the lab can feed ~10^8 chunk references to trace mode on a laptop.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tessera_core::units::ByteSize;
use tessera_core::Fingerprint;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ScaleConfig {
    pub seed: u64,
    pub versions: usize,
    /// Logical size of one version.
    pub version_size: ByteSize,
    /// Mean chunk size; sizes vary in [mean/2, 3·mean/2).
    pub chunk_size: ByteSize,
    /// Fraction of a version's chunks replaced by new ones in the next.
    pub change_rate: f64,
}

impl Default for ScaleConfig {
    fn default() -> Self {
        ScaleConfig {
            seed: 1,
            versions: 100,
            version_size: ByteSize(10 << 30),
            chunk_size: ByteSize(8 << 10),
            change_rate: 0.02,
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The series: call [`next_version`](Self::next_version) once per version.
pub struct ScaleSeries {
    cfg: ScaleConfig,
    rng: ChaCha8Rng,
    ids: Vec<u64>,
    next_id: u64,
    started: bool,
}

impl ScaleSeries {
    pub fn new(cfg: &ScaleConfig) -> Self {
        ScaleSeries {
            cfg: cfg.clone(),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            ids: Vec::new(),
            next_id: 0,
            started: false,
        }
    }

    pub fn chunks_per_version(&self) -> usize {
        (self.cfg.version_size.0 / self.cfg.chunk_size.0.max(1)).max(1) as usize
    }

    /// Chunk identities of the next version: changed regions are runs of
    /// 1..=64 chunks replaced by fresh identities.
    pub fn next_version(&mut self) -> &[u64] {
        if !self.started {
            self.started = true;
            let n = self.chunks_per_version() as u64;
            self.ids = (0..n).collect();
            self.next_id = n;
            return &self.ids;
        }
        let n = self.ids.len();
        let mut todo = (n as f64 * self.cfg.change_rate).round() as usize;
        while todo > 0 {
            let run = self.rng.random_range(1..=64usize).min(todo);
            let at = self.rng.random_range(0..n.saturating_sub(run).max(1));
            for slot in &mut self.ids[at..at + run] {
                *slot = self.next_id;
                self.next_id += 1;
            }
            todo -= run;
        }
        &self.ids
    }

    /// Fingerprint and size of a chunk identity (a pure function, so equal
    /// identities are duplicates and different ones never collide in practice).
    pub fn chunk(&self, id: u64) -> (Fingerprint, u32) {
        let mut fp = [0u8; 32];
        let mut h = id ^ self.cfg.seed.rotate_left(17);
        for part in fp.chunks_mut(8) {
            h = mix(h);
            part.copy_from_slice(&h.to_le_bytes());
        }
        let mean = self.cfg.chunk_size.0.max(2);
        // (A mask when the mean is a power of two: the same value, no division.)
        let r = if mean.is_power_of_two() {
            mix(h) & (mean - 1)
        } else {
            mix(h) % mean
        };
        let size = mean / 2 + r;
        (Fingerprint(fp), size as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_rate_and_determinism() {
        let cfg = ScaleConfig {
            versions: 3,
            version_size: ByteSize(80 << 20),
            chunk_size: ByteSize(8 << 10),
            change_rate: 0.05,
            seed: 3,
        };
        let mut s = ScaleSeries::new(&cfg);
        let v0 = s.next_version().to_vec();
        let v1 = s.next_version().to_vec();
        assert_eq!(v0.len(), 10240);
        let changed = v0.iter().zip(&v1).filter(|(a, b)| a != b).count();
        let want = v0.len() as f64 * 0.05;
        // Runs may overlap, so a little less than configured can change.
        assert!(
            (changed as f64) <= want && (changed as f64) > want * 0.8,
            "{changed}"
        );
        let mut t = ScaleSeries::new(&cfg);
        t.next_version();
        assert_eq!(t.next_version(), &v1[..]);
        assert_eq!(s.chunk(5), t.chunk(5));
        assert_ne!(s.chunk(5).0, s.chunk(6).0);
    }
}
