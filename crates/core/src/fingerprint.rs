//! Fingerprints: fixed-size chunk identities.
//!
//! Every fingerprint is stored in 32 bytes whatever the algorithm; SHA-1's
//! 20 bytes (and short trace hashes) are zero-padded. One fixed width keeps the
//! index, container metadata and recipes free of per-algorithm layouts.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// Width of a stored fingerprint in bytes.
pub const FP_LEN: usize = 32;

/// `repr(transparent)`: the on-disk index views list files as fingerprint slices.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Fingerprint(pub [u8; FP_LEN]);

impl Fingerprint {
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > FP_LEN {
            return None;
        }
        let mut fp = [0u8; FP_LEN];
        fp[..bytes.len()].copy_from_slice(bytes);
        Some(Fingerprint(fp))
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    /// Parse a hex string of up to 64 digits (shorter ones are zero-padded).
    pub fn from_hex(s: &str) -> Option<Self> {
        if !s.len().is_multiple_of(2) {
            return None;
        }
        Self::from_slice(&hex::decode(s).ok()?)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", &self.to_hex()[..16])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Fingerprint algorithm, chosen per repository at `init`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HashAlgo {
    #[default]
    Blake3,
    Sha1,
    Sha256,
}

impl HashAlgo {
    pub fn hash(self, data: &[u8]) -> Fingerprint {
        use sha1::Digest as _;
        match self {
            HashAlgo::Blake3 => Fingerprint(*blake3::hash(data).as_bytes()),
            HashAlgo::Sha1 => Fingerprint::from_slice(&sha1::Sha1::digest(data)).unwrap(),
            HashAlgo::Sha256 => Fingerprint::from_slice(&sha2::Sha256::digest(data)).unwrap(),
        }
    }
    pub fn code(self) -> u8 {
        match self {
            HashAlgo::Blake3 => 1,
            HashAlgo::Sha1 => 2,
            HashAlgo::Sha256 => 3,
        }
    }
    pub fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => HashAlgo::Blake3,
            2 => HashAlgo::Sha1,
            3 => HashAlgo::Sha256,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            HashAlgo::Blake3 => "blake3",
            HashAlgo::Sha1 => "sha1",
            HashAlgo::Sha256 => "sha256",
        }
    }
}

impl std::str::FromStr for HashAlgo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "blake3" => Ok(HashAlgo::Blake3),
            "sha1" | "sha-1" => Ok(HashAlgo::Sha1),
            "sha256" | "sha-256" => Ok(HashAlgo::Sha256),
            _ => Err(format!(
                "unknown fingerprint algorithm '{s}' (expected blake3, sha1 or sha256)"
            )),
        }
    }
}

/// Computes a repository's fingerprints: [`HashAlgo::hash`] in a plain
/// repository; in an encrypted one keyed (BLAKE3 in keyed mode, HMAC for
/// the SHA families) by a subkey of the master key, so chunk names, the
/// index and recipes reveal nothing about content to someone without the
/// key (no confirming that a known file is stored). Cheap to clone.
#[derive(Clone)]
pub struct Fingerprinter {
    algo: HashAlgo,
    keyed: Option<std::sync::Arc<Keyed>>,
}

/// Keyed hash states, prepared once (HMAC's padded key blocks absorbed).
// Built once per repository and held behind an `Arc`: size does not matter.
#[allow(clippy::large_enum_variant)]
enum Keyed {
    Blake3(blake3::Hasher),
    Sha1(hmac::Hmac<sha1::Sha1>),
    Sha256(hmac::Hmac<sha2::Sha256>),
}

impl Fingerprinter {
    /// Keyed by `key` (the master key's fingerprint subkey).
    pub fn keyed(algo: HashAlgo, key: &[u8; 32]) -> Self {
        use hmac::KeyInit;
        let keyed = match algo {
            HashAlgo::Blake3 => Keyed::Blake3(blake3::Hasher::new_keyed(key)),
            HashAlgo::Sha1 => Keyed::Sha1(hmac::Hmac::new_from_slice(key).expect("any key length")),
            HashAlgo::Sha256 => {
                Keyed::Sha256(hmac::Hmac::new_from_slice(key).expect("any key length"))
            }
        };
        Fingerprinter {
            algo,
            keyed: Some(std::sync::Arc::new(keyed)),
        }
    }

    pub fn algo(&self) -> HashAlgo {
        self.algo
    }

    pub fn is_keyed(&self) -> bool {
        self.keyed.is_some()
    }

    #[inline]
    pub fn hash(&self, data: &[u8]) -> Fingerprint {
        use hmac::Mac;
        match self.keyed.as_deref() {
            None => self.algo.hash(data),
            Some(Keyed::Blake3(h)) => {
                let mut h = h.clone();
                h.update(data);
                Fingerprint(*h.finalize().as_bytes())
            }
            Some(Keyed::Sha1(m)) => {
                let mut m = m.clone();
                m.update(data);
                Fingerprint::from_slice(&m.finalize().into_bytes()).unwrap()
            }
            Some(Keyed::Sha256(m)) => {
                let mut m = m.clone();
                m.update(data);
                Fingerprint::from_slice(&m.finalize().into_bytes()).unwrap()
            }
        }
    }
}

impl From<HashAlgo> for Fingerprinter {
    fn from(algo: HashAlgo) -> Self {
        Fingerprinter { algo, keyed: None }
    }
}

impl fmt::Debug for Fingerprinter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}",
            self.algo.name(),
            if self.is_keyed() { " (keyed)" } else { "" }
        )
    }
}

/// Hasher for maps keyed by fingerprint: the key is already random, so the
/// first 8 bytes are the hash (no SipHash on the index hot path).
#[derive(Default)]
pub struct FpHasher(u64);

impl Hasher for FpHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // `Fingerprint` hashes as its 32-byte array: take the first 8.
        if bytes.len() >= 8 {
            self.0 = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        } else {
            for &b in bytes {
                self.0 = self.0.rotate_left(8) ^ b as u64;
            }
        }
    }
    fn write_usize(&mut self, _: usize) {}
}

pub type FpBuildHasher = BuildHasherDefault<FpHasher>;
pub type FpMap<V> = std::collections::HashMap<Fingerprint, V, FpBuildHasher>;
pub type FpSet = std::collections::HashSet<Fingerprint, FpBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(
            HashAlgo::Sha1.hash(b"abc").to_hex()[..40],
            *"a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            HashAlgo::Sha256.hash(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            HashAlgo::Blake3.hash(b"").to_hex(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    /// Keyed fingerprints: BLAKE3's keyed mode and HMAC (RFC 2202 / RFC
    /// 4231 style known answers computed independently), and different
    /// from the plain digests.
    #[test]
    fn keyed_known_answers() {
        let key = [0x0b; 32];
        let b = Fingerprinter::keyed(HashAlgo::Blake3, &key);
        assert_eq!(
            b.hash(b"abc").0,
            *blake3::keyed_hash(&key, b"abc").as_bytes()
        );
        assert_ne!(b.hash(b"abc"), HashAlgo::Blake3.hash(b"abc"));
        assert_eq!(
            Fingerprinter::keyed(HashAlgo::Sha256, &key)
                .hash(b"Hi There")
                .to_hex(),
            KAT_HMAC_SHA256
        );
        assert_eq!(
            Fingerprinter::keyed(HashAlgo::Sha1, &key)
                .hash(b"Hi There")
                .to_hex()[..40],
            *KAT_HMAC_SHA1
        );
        let plain = Fingerprinter::from(HashAlgo::Sha1);
        assert_eq!(plain.hash(b"x"), HashAlgo::Sha1.hash(b"x"));
        assert!(!format!("{b:?}").contains("0b0b"));
    }

    #[test]
    fn hex_round_trip_and_padding() {
        let fp = HashAlgo::Sha1.hash(b"x");
        assert_eq!(Fingerprint::from_hex(&fp.to_hex()), Some(fp));
        assert_eq!(&fp.0[20..], &[0u8; 12]);
        assert_eq!(Fingerprint::from_hex("abc"), None);
    }

    const KAT_HMAC_SHA256: &str =
        "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7";
    const KAT_HMAC_SHA1: &str = "68f9d1c65ae2dde43a134515c83813a96985cbe3";

    #[test]
    fn map_uses_prefix() {
        let mut m: FpMap<u32> = FpMap::default();
        for i in 0..1000u32 {
            m.insert(HashAlgo::Blake3.hash(&i.to_le_bytes()), i);
        }
        assert_eq!(m[&HashAlgo::Blake3.hash(&7u32.to_le_bytes())], 7);
    }
}
