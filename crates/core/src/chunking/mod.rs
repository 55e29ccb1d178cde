//! Content-defined and fixed-size chunking behind one trait.
//!
//! A [`Chunker`] is a pure cut-point function: given bytes that begin at a
//! chunk boundary it returns the length of the next chunk. Keeping chunkers
//! stateless lets the ingest pipeline stream any input through a bounded
//! buffer (it only needs `max_size` bytes of look-ahead) and makes chunk
//! boundaries independent of how the input was split into reads.

use serde::{Deserialize, Serialize};

mod chunker;
mod fastcdc;
mod fixed;
mod rabin;

#[cfg(test)]
mod tests;

pub use self::chunker::Chunker;
pub use self::fastcdc::FastCdc;
pub use self::fixed::FixedSize;
pub use self::rabin::Rabin;

/// Which chunking algorithm, with its size parameters in bytes.
/// Serialized into the repository config so every backup of a repository
/// chunks the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "kebab-case")]
pub enum ChunkerConfig {
    /// FastCDC with normalized chunking (normalization level 2).
    Fastcdc { min: u32, avg: u32, max: u32 },
    /// Rabin fingerprint over a 48-byte sliding window.
    Rabin { min: u32, avg: u32, max: u32 },
    /// Fixed-size blocks.
    Fixed { size: u32 },
}

impl Default for ChunkerConfig {
    fn default() -> Self {
        ChunkerConfig::Fastcdc {
            min: 2 * 1024,
            avg: 8 * 1024,
            max: 64 * 1024,
        }
    }
}

impl ChunkerConfig {
    /// Named presets: `gccdf` (1/4/32 KiB, as the GCCDF artifact),
    /// `mfdedup` and `default` (2/8/64 KiB).
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "default" | "mfdedup" => Some(Self::default()),
            "gccdf" => Some(ChunkerConfig::Fastcdc {
                min: 1024,
                avg: 4096,
                max: 32 * 1024,
            }),
            _ => None,
        }
    }

    /// Check the parameters; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            ChunkerConfig::Fastcdc { min, avg, max } | ChunkerConfig::Rabin { min, avg, max } => {
                if !(min >= 64 && min <= avg && avg <= max) {
                    return Err(format!(
                        "chunk sizes must satisfy 64 <= min <= avg <= max (got {min}/{avg}/{max})"
                    ));
                }
                if !avg.is_power_of_two() {
                    return Err(format!(
                        "average chunk size must be a power of two (got {avg})"
                    ));
                }
                if max > 16 * 1024 * 1024 {
                    return Err(format!(
                        "maximum chunk size must be at most 16 MiB (got {max})"
                    ));
                }
                Ok(())
            }
            ChunkerConfig::Fixed { size } => {
                if size == 0 || size > 16 * 1024 * 1024 {
                    Err(format!(
                        "fixed chunk size must be in 1..=16 MiB (got {size})"
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Build the chunker. Panics only if `validate` would fail.
    pub fn build(&self) -> Box<dyn Chunker> {
        match *self {
            ChunkerConfig::Fastcdc { min, avg, max } => {
                Box::new(FastCdc::new(min as usize, avg as usize, max as usize))
            }
            ChunkerConfig::Rabin { min, avg, max } => {
                Box::new(Rabin::new(min as usize, avg as usize, max as usize))
            }
            ChunkerConfig::Fixed { size } => Box::new(FixedSize::new(size as usize)),
        }
    }

    /// Parse a spec such as `fastcdc`, `fastcdc:2k/8k/64k`, `rabin:1k/8k/64k`,
    /// `fixed:8k`, or a preset name (`gccdf`, `mfdedup`, `default`).
    pub fn parse(spec: &str) -> Result<Self, String> {
        if let Some(p) = Self::preset(spec) {
            return Ok(p);
        }
        let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
        let sizes: Vec<u32> = if params.is_empty() {
            vec![]
        } else {
            params
                .split('/')
                .map(parse_size)
                .collect::<Result<_, _>>()?
        };
        let cfg = match (name, sizes.as_slice()) {
            ("fastcdc", []) => Self::default(),
            ("fastcdc", [min, avg, max]) => ChunkerConfig::Fastcdc { min: *min, avg: *avg, max: *max },
            ("rabin", []) => ChunkerConfig::Rabin { min: 2048, avg: 8192, max: 65536 },
            ("rabin", [min, avg, max]) => ChunkerConfig::Rabin { min: *min, avg: *avg, max: *max },
            ("fixed", []) => ChunkerConfig::Fixed { size: 8192 },
            ("fixed", [size]) => ChunkerConfig::Fixed { size: *size },
            _ => {
                return Err(format!(
                    "bad chunker '{spec}': expected fastcdc[:MIN/AVG/MAX], rabin[:MIN/AVG/MAX], fixed[:SIZE], gccdf or mfdedup"
                ))
            }
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn describe(&self) -> String {
        match *self {
            ChunkerConfig::Fastcdc { min, avg, max } => format!("fastcdc:{min}/{avg}/{max}"),
            ChunkerConfig::Rabin { min, avg, max } => format!("rabin:{min}/{avg}/{max}"),
            ChunkerConfig::Fixed { size } => format!("fixed:{size}"),
        }
    }
}

impl std::str::FromStr for ChunkerConfig {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s)
    }
}

/// Parse a size that fits 32 bits (chunk and container sizes), in any of
/// [`crate::units::parse_bytes`]'s spellings.
pub fn parse_size(s: &str) -> Result<u32, String> {
    crate::units::ByteSize(parse_bytes(s)?).to_u32(s)
}

pub use crate::units::parse_bytes;

/// Split a whole buffer into chunk lengths (tests, benchmarks).
pub fn chunk_all(chunker: &dyn Chunker, data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let n = chunker.cut(rest, true);
        out.push(n);
        pos += n;
    }
    out
}
