//! Byte sizes as people write them (`4096`, `64k`, `4MiB`, `1g`, `512b`):
//! one parser for the command line, the chunker specs and experiment files,
//! so a size that works in one place works in all.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Binary units, longest spelling first so `kib` is not read as `k` + `ib`.
const UNITS: [(&str, u32); 9] = [
    ("kib", 10),
    ("mib", 20),
    ("gib", 30),
    ("tib", 40),
    ("k", 10),
    ("m", 20),
    ("g", 30),
    ("t", 40),
    ("b", 0),
];

/// Parse a byte count with an optional binary unit, case-insensitive:
/// `k`/`KiB`, `m`/`MiB`, `g`/`GiB`, `t`/`TiB`, or `b` for bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, shift) = UNITS
        .iter()
        .find_map(|&(u, sh)| t.strip_suffix(u).map(|n| (n, sh)))
        .unwrap_or((t.as_str(), 0));
    let v: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad size '{s}' (e.g. 4096, 64KiB, 4MiB, 1GiB)"))?;
    v.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size '{s}' too large"))
}

/// A byte count that parses from [`parse_bytes`]'s spellings (and, in
/// serde, also from a plain number) and prints in the largest exact unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn bytes(self) -> u64 {
        self.0
    }

    /// The size as a `u32` (chunk and container sizes), or an error naming
    /// the spelling `s` it came from.
    pub fn to_u32(self, s: &str) -> Result<u32, String> {
        u32::try_from(self.0).map_err(|_| format!("size '{s}' too large"))
    }
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_bytes(s).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")]
            .into_iter()
            .find(|&(sh, _)| self.0 != 0 && self.0.is_multiple_of(1u64 << sh));
        match unit {
            Some((sh, u)) => write!(f, "{}{u}", self.0 >> sh),
            None => write!(f, "{}", self.0),
        }
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            N(u64),
            S(String),
        }
        match Repr::deserialize(d)? {
            Repr::N(n) => Ok(ByteSize(n)),
            Repr::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A plain number of bytes, what result files and JSON readers expect.
impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_spelling_of_both_former_parsers() {
        for (s, v) in [
            ("512", 512),
            ("8k", 8 << 10),
            ("8K", 8 << 10),
            ("8KiB", 8 << 10),
            ("64kib", 64 << 10),
            ("4m", 4 << 20),
            ("4MiB", 4 << 20),
            ("1g", 1 << 30),
            ("1GiB", 1 << 30),
            ("3TiB", 3 << 40),
            ("2t", 2 << 40),
            ("512b", 512),
            (" 4 MiB ", 4 << 20),
        ] {
            assert_eq!(parse_bytes(s), Ok(v), "{s}");
        }
        assert!(parse_bytes("4 apples").is_err());
        assert!(parse_bytes("lots").unwrap_err().contains("bad size 'lots'"));
        assert!(parse_bytes("18446744073709551615m").is_err());
    }

    #[test]
    fn display_round_trips() {
        for v in [0u64, 1, 1000, 4096, 4 << 20, (4 << 20) + 1, 3 << 40] {
            let b = ByteSize(v);
            assert_eq!(b.to_string().parse::<ByteSize>(), Ok(b));
        }
        assert_eq!(ByteSize(4 << 20).to_string(), "4MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
    }
}
