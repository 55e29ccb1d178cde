//! Compression of chunks and metadata objects with zstd.
//!
//! A [`Compression`] is chosen at `init` (the repository default) and per
//! backup. Chunks are compressed in frames, runs of consecutive chunks of
//! one container (`docs/FORMAT.md`, "Frames"), so GC copies a live frame's
//! compressed bytes as they are; a frame whose compressed form is not
//! smaller is stored raw ([`Codec::Raw`]), and `auto` does not even try
//! when a cheap estimate (the order-0 entropy of a sample) says the bytes
//! are already compressed or encrypted.

use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::fmt;

/// How a chunk or object is stored, recorded beside it (container entry,
/// object frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Raw,
    Zstd,
}

impl Codec {
    pub fn code(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 1,
        }
    }
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// The compression setting: `off`, `auto` (level 1, incompressible frames
/// skipped by estimate), `fastest` (1), `better` (9), `max` (19), `zstd:N`.
///
/// Why `auto` is level 1: over 256 KiB frames it stores within 1 % of
/// restic's default on a real system tree and costs 0.70x the CPU of level
/// 3, which stores 4 % less (`docs/FORMAT.md`, "Frames: measurements");
/// `better` is there for the smaller store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Compression {
    #[default]
    Off,
    Auto,
    Fastest,
    Better,
    Max,
    Level(i32),
}

/// Bits per byte above which `auto` stores a chunk raw without trying.
const INCOMPRESSIBLE_BITS: f64 = 7.5;

impl Compression {
    /// Every named setting and the extreme levels (for tests and benches).
    pub const NAMED: [Compression; 5] = [
        Compression::Off,
        Compression::Auto,
        Compression::Fastest,
        Compression::Better,
        Compression::Max,
    ];

    /// The zstd level, or `None` when off.
    pub fn level(self) -> Option<i32> {
        match self {
            Compression::Off => None,
            Compression::Auto => Some(1),
            Compression::Fastest => Some(1),
            Compression::Better => Some(9),
            Compression::Max => Some(19),
            Compression::Level(n) => Some(n),
        }
    }

    /// The setting used for metadata objects (manifests, index segments,
    /// container metadata): compressed unless compression is off.
    pub fn for_metadata(self) -> Compression {
        match self {
            Compression::Off => Compression::Off,
            _ => Compression::Auto,
        }
    }

    /// Append `plain`, compressed when that pays, to `out`; returns how it
    /// was stored. Never fails: bytes zstd cannot compress (or a context it
    /// cannot create) are stored raw.
    pub fn compress_into(self, plain: &[u8], out: &mut Vec<u8>) -> Codec {
        let Some(level) = self.level() else {
            out.extend_from_slice(plain);
            return Codec::Raw;
        };
        if plain.len() < 64
            || (self == Compression::Auto && sample_entropy(plain) > INCOMPRESSIBLE_BITS)
        {
            out.extend_from_slice(plain);
            return Codec::Raw;
        }
        let start = out.len();
        let bound = zstd::zstd_safe::compress_bound(plain.len());
        let done = COMPRESSOR.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_none_or(|(l, _)| *l != level) {
                *c = Some((level, zstd::bulk::Compressor::new(level).ok()?));
            }
            let (_, comp) = c.as_mut()?;
            out.reserve(bound);
            let mut cursor = std::io::Cursor::new(&mut *out);
            cursor.set_position(start as u64);
            comp.compress_to_buffer(plain, &mut cursor).ok()
        });
        if done.is_none() || out.len() - start >= plain.len() {
            out.truncate(start);
            out.extend_from_slice(plain);
            return Codec::Raw;
        }
        Codec::Zstd
    }
}

thread_local! {
    /// One compression context per thread and level (creating one costs
    /// more than compressing a small chunk).
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Decompress `stored` into `out`, which must come out exactly `out.len()`
/// bytes long. `Err` carries why, for the caller to name the object.
pub fn decompress_exact(stored: &[u8], out: &mut [u8]) -> std::result::Result<(), String> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let n = d
            .as_mut()
            .unwrap()
            .decompress_to_buffer(stored, out)
            .map_err(|e| format!("undecodable compressed bytes ({e})"))?;
        if n != out.len() {
            return Err(format!("decompressed to {n} bytes, {} expected", out.len()));
        }
        Ok(())
    })
}

/// Order-0 entropy, in bits per byte, of up to 2 KiB sampled from `b` in
/// four evenly spaced runs: the cheap estimate `auto` decides by.
///
/// Why 2 KiB: the histogram was a fifth of the cost of compressing an
/// 8 KiB chunk when it read 16 KiB; 2,048 samples still put random bytes
/// near 7.9 bits (the estimate's bias is ~255 / (2 n ln 2)) and text near
/// 4–5, far on either side of [`INCOMPRESSIBLE_BITS`]. Four interleaved
/// tables keep consecutive equal bytes from waiting on each other's store.
pub fn sample_entropy(b: &[u8]) -> f64 {
    let mut hist = [[0u32; 256]; 4];
    let mut n = 0u32;
    let mut count = |s: &[u8]| {
        let mut quads = s.chunks_exact(4);
        for q in &mut quads {
            hist[0][q[0] as usize] += 1;
            hist[1][q[1] as usize] += 1;
            hist[2][q[2] as usize] += 1;
            hist[3][q[3] as usize] += 1;
        }
        for &x in quads.remainder() {
            hist[0][x as usize] += 1;
        }
        n += s.len() as u32;
    };
    const RUN: usize = 512;
    if b.len() <= 4 * RUN {
        count(b);
    } else {
        let step = (b.len() - RUN) / 3;
        for i in 0..4 {
            count(&b[i * step..i * step + RUN]);
        }
    }
    let n = n as f64;
    (0..256)
        .map(|i| hist[0][i] + hist[1][i] + hist[2][i] + hist[3][i])
        .filter(|&c| c > 0)
        .map(|c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::Off => f.write_str("off"),
            Compression::Auto => f.write_str("auto"),
            Compression::Fastest => f.write_str("fastest"),
            Compression::Better => f.write_str("better"),
            Compression::Max => f.write_str("max"),
            Compression::Level(n) => write!(f, "zstd:{n}"),
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "off" | "none" => Compression::Off,
            "auto" => Compression::Auto,
            "fastest" => Compression::Fastest,
            "better" => Compression::Better,
            "max" => Compression::Max,
            other => {
                let n = other
                    .strip_prefix("zstd:")
                    .and_then(|n| n.parse::<i32>().ok())
                    .filter(|n| (1..=22).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "unknown compression '{s}' (expected off, auto, fastest, better, max or zstd:1..22)"
                        )
                    })?;
                Compression::Level(n)
            }
        })
    }
}

impl From<Compression> for String {
    fn from(c: Compression) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for Compression {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"the quick brown fox "[(i * 7 / 5) % 20])
            .collect()
    }

    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x9e3779b97f4a7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn every_level_round_trips() {
        let mut settings = Compression::NAMED.to_vec();
        settings.extend((1..=22).map(Compression::Level));
        for c in settings {
            for plain in [text(100_000), noise(5000), Vec::new(), text(10)] {
                let mut out = b"prefix".to_vec();
                let codec = c.compress_into(&plain, &mut out);
                assert_eq!(&out[..6], b"prefix");
                let stored = &out[6..];
                match codec {
                    Codec::Raw => assert_eq!(stored, &plain[..]),
                    Codec::Zstd => {
                        assert!(stored.len() < plain.len());
                        let mut back = vec![0; plain.len()];
                        decompress_exact(stored, &mut back).unwrap();
                        assert_eq!(back, plain, "{c}");
                    }
                }
                if c != Compression::Off && plain.len() > 1000 && plain[0] == b't' {
                    assert_eq!(codec, Codec::Zstd, "{c}");
                }
            }
        }
    }

    #[test]
    fn auto_skips_noise_by_estimate() {
        assert!(sample_entropy(&noise(100_000)) > INCOMPRESSIBLE_BITS);
        assert!(sample_entropy(&text(100_000)) < 4.0);
        let mut out = Vec::new();
        assert_eq!(
            Compression::Auto.compress_into(&noise(9000), &mut out),
            Codec::Raw
        );
        // A wrong length or garbage is an error, not a panic.
        let mut z = Vec::new();
        Compression::Fastest.compress_into(&text(5000), &mut z);
        assert!(decompress_exact(&z, &mut [0u8; 4999]).is_err());
        assert!(decompress_exact(&noise(100), &mut [0u8; 100]).is_err());
    }

    /// The sampled estimate is the exact order-0 entropy of inputs it reads
    /// whole, and keeps noise and text on their sides of the threshold.
    #[test]
    fn estimate_is_exact_on_short_inputs_and_separates_long_ones() {
        fn exact(b: &[u8]) -> f64 {
            let mut h = [0u64; 256];
            b.iter().for_each(|&x| h[x as usize] += 1);
            h.iter()
                .filter(|&&c| c > 0)
                .map(|&c| {
                    let p = c as f64 / b.len() as f64;
                    -p * p.log2()
                })
                .sum()
        }
        for n in [1, 3, 4, 5, 511, 2047, 2048] {
            for b in [text(n), noise(n)] {
                assert!((sample_entropy(&b) - exact(&b)).abs() < 1e-9, "{n}");
            }
        }
        for n in [2049, 8192, 65536] {
            assert!(sample_entropy(&noise(n)) > INCOMPRESSIBLE_BITS, "{n}");
            assert!(sample_entropy(&text(n)) < 4.0, "{n}");
        }
    }

    #[test]
    fn names_parse_and_print() {
        for s in ["off", "auto", "fastest", "better", "max", "zstd:7"] {
            assert_eq!(s.parse::<Compression>().unwrap().to_string(), s);
        }
        assert!("zstd:0".parse::<Compression>().is_err());
        assert!("zstd:23".parse::<Compression>().is_err());
        assert!("lz4".parse::<Compression>().is_err());
    }
}
