//! Container caches: LRU, OPT (Belady with look-ahead) and the forward
//! assembly area. Restore runs them on its data containers; GC, check and
//! salvage keep recipe containers in an [`LruCache`]. Each policy is usable
//! on bare container ids, so read counts can be checked on hand-made recipes.

mod access;
pub mod faa;
pub mod lru;
pub mod opt;

pub use access::Access;
pub use faa::{area_bytes, faa_reads};
pub use lru::{Lru, LruCache};
pub use opt::{Opt, OPT_WINDOW};

use serde::Serialize;

/// A restore cache, as named on the command line (`lru:32`, `opt:32`,
/// `faa:32`); the number is the cache size in containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "containers", rename_all = "lowercase")]
pub enum CacheSpec {
    /// Least recently used whole containers.
    Lru(usize),
    /// Belady replacement over the recipe's future references (look-ahead window).
    Opt(usize),
    /// Forward assembly area of (containers − 1) × container size.
    Faa(usize),
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec::Lru(32)
    }
}

impl CacheSpec {
    /// Parse `lru:N`, `opt:N` or `faa:N` (a bare number means `lru:N`).
    pub fn parse(spec: &str) -> std::result::Result<Self, String> {
        let (kind, n) = spec.split_once(':').unwrap_or(("lru", spec));
        let n = match n.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(format!(
                    "bad cache size in '{spec}': expected a positive number of containers"
                ))
            }
        };
        match kind.to_ascii_lowercase().as_str() {
            "lru" => Ok(CacheSpec::Lru(n)),
            "opt" => Ok(CacheSpec::Opt(n)),
            "faa" => Ok(CacheSpec::Faa(n)),
            _ => Err(format!(
                "unknown restore cache '{spec}' (expected lru:N, opt:N or faa:N)"
            )),
        }
    }

    /// Size in containers.
    pub fn containers(&self) -> usize {
        match *self {
            CacheSpec::Lru(n) | CacheSpec::Opt(n) | CacheSpec::Faa(n) => n,
        }
    }
}

impl std::fmt::Display for CacheSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheSpec::Lru(n) => write!(f, "lru:{n}"),
            CacheSpec::Opt(n) => write!(f, "opt:{n}"),
            CacheSpec::Faa(n) => write!(f, "faa:{n}"),
        }
    }
}

impl std::str::FromStr for CacheSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s)
    }
}

/// Containers an LRU cache of `n` reads for the reference string `refs`.
pub fn lru_reads<K: Copy + Eq + std::hash::Hash>(refs: &[K], n: usize) -> u64 {
    let mut c = Lru::new(n);
    refs.iter()
        .filter(|&&id| c.access(id) != Access::Hit)
        .count() as u64
}

/// Containers an OPT cache of `n` reads with a look-ahead of `window` references.
pub fn opt_reads<K: Copy + Eq + std::hash::Hash>(refs: &[K], n: usize, window: usize) -> u64 {
    let mut reads = 0;
    let mut c = Opt::new(n);
    let mut ahead = 0;
    for (i, &id) in refs.iter().enumerate() {
        while ahead < refs.len() && ahead < i + window.max(1) {
            c.announce(refs[ahead]);
            ahead += 1;
        }
        if c.access(id) != Access::Hit {
            reads += 1;
        }
    }
    reads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_made_recipes_have_known_read_counts() {
        // 1 2 3 1 2 3 … with room for 2: LRU always misses, OPT keeps one.
        let cyc: Vec<u64> = (0..12).map(|i| i % 3).collect();
        assert_eq!(lru_reads(&cyc, 2), 12);
        // Belady: 3 compulsory misses, then one miss every other reference.
        assert_eq!(opt_reads(&cyc, 2, 100), 7);
        assert_eq!(opt_reads(&cyc, 3, 100), 3);
        assert_eq!(lru_reads(&cyc, 3), 3);
        // The textbook string with 3 frames: OPT 9 faults, LRU 12.
        let s = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1];
        assert_eq!(opt_reads(&s, 3, 100), 9);
        assert_eq!(lru_reads(&s, 3), 12);
        // No look-ahead beyond the current reference: OPT degrades to LRU.
        assert_eq!(opt_reads(&cyc, 2, 1), 12);
    }

    #[test]
    fn faa_reads_each_container_once_per_window() {
        // Sizes 1; area 4: windows [1 2 1 2] [3 1 3 1] → 2 + 2 reads.
        let refs = [
            (1, 1),
            (2, 1),
            (1, 1),
            (2, 1),
            (3, 1),
            (1, 1),
            (3, 1),
            (1, 1),
        ];
        assert_eq!(faa_reads(&refs, 4), 4);
        assert_eq!(faa_reads(&refs, 8), 3);
        assert_eq!(faa_reads(&refs, 1), 8);
        // A chunk larger than the area gets a window of its own.
        assert_eq!(faa_reads(&[(1, 10), (1, 1), (2, 1)], 4), 3);
        assert_eq!(area_bytes(1, 4), 4);
        assert_eq!(area_bytes(3, 4), 8);
    }
}
