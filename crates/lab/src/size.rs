//! Byte sizes in experiment files: a number or a string such as `"4MiB"`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl Size {
    pub fn parse(s: &str) -> Result<Size, String> {
        let t = s.trim().to_ascii_lowercase();
        let units: [(&str, u64); 7] = [
            ("gib", 1 << 30),
            ("mib", 1 << 20),
            ("kib", 1 << 10),
            ("g", 1 << 30),
            ("m", 1 << 20),
            ("k", 1 << 10),
            ("b", 1),
        ];
        let (num, mult) = units
            .iter()
            .find_map(|(u, m)| t.strip_suffix(u).map(|n| (n, *m)))
            .unwrap_or((t.as_str(), 1));
        let v: u64 = num
            .trim()
            .parse()
            .map_err(|_| format!("bad size '{s}' (e.g. 4096, 64KiB, 4MiB, 1GiB)"))?;
        v.checked_mul(mult)
            .map(Size)
            .ok_or_else(|| format!("size '{s}' is too large"))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            N(u64),
            S(String),
        }
        match Repr::deserialize(d)? {
            Repr::N(n) => Ok(Size(n)),
            Repr::S(s) => Size::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_units() {
        assert_eq!(Size::parse("4096"), Ok(Size(4096)));
        assert_eq!(Size::parse("64KiB"), Ok(Size(64 << 10)));
        assert_eq!(Size::parse("1g"), Ok(Size(1 << 30)));
        assert!(Size::parse("4 apples").is_err());
    }
}
