//! Categories and volumes (MFDedup §3.4): Cat.(n, m) holds the chunks that
//! versions n…m of one chain reference; archived categories whose lifecycle
//! ends at m are grouped, in order of n, into Volume m.
//!
//! A category is stored as one or more container objects ("parts", each at
//! most the repository's container size, so writing and reading it needs
//! bounded memory; every part goes through the sealing layer like any
//! container). A volume's header object (`volumes/<id>`) lists its
//! categories, their sizes and parts: forget's space answers and restore's
//! plan come from headers alone.

use crate::backend::ObjectKey;
use crate::catalog::ContainerEntry;
use crate::container::{ChunkKind, ContainerFiller, ContainerId, ContainerStore, IdAllocator};
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::seal::SealedStore;
use serde::{Deserialize, Serialize};

const MAGIC: [u8; 8] = *b"TSRAVOLH";
const VERSION: u32 = 1;

/// Cat.(start, end): chunks referenced by exactly the versions start..=end
/// of a chain (version numbers of the chain, never reused).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Category {
    pub start: u32,
    pub end: u32,
    pub chunks: u64,
    /// Sum of chunk lengths: the space forgetting this category frees.
    pub bytes: u64,
    /// Bytes of its part objects as stored.
    pub object_bytes: u64,
    /// Its container objects, in order.
    pub parts: Vec<ContainerId>,
}

impl Category {
    /// Whether any of `retained` (version numbers) lies in its lifecycle.
    pub fn live(&self, retained: &[u32]) -> bool {
        retained.iter().any(|&v| self.start <= v && v <= self.end)
    }
    /// Whether restoring version `k` needs it.
    pub fn holds(&self, k: u32) -> bool {
        self.start <= k && k <= self.end
    }
}

/// Volume m: the archived categories Cat.(·, m) of one chain, by start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// m: every category here ends at this version.
    pub version: u32,
    /// Its header object, `volumes/<key>`.
    pub key: u64,
    pub categories: Vec<Category>,
}

impl Volume {
    pub fn bytes(&self) -> u64 {
        self.categories.iter().map(|c| c.bytes).sum()
    }
    pub fn object_bytes(&self) -> u64 {
        self.categories.iter().map(|c| c.object_bytes).sum()
    }
}

/// The header object: `TSRAVOLH` | version u32 | chain name and volume as
/// JSON (length u64 first) | XXH3-128 of all before.
#[derive(Serialize, Deserialize)]
struct Header<'a> {
    chain: std::borrow::Cow<'a, str>,
    volume: std::borrow::Cow<'a, Volume>,
}

pub fn encode_header(chain: &str, v: &Volume) -> Vec<u8> {
    let json = serde_json::to_vec(&Header {
        chain: chain.into(),
        volume: std::borrow::Cow::Borrowed(v),
    })
    .expect("volume header serializes");
    crate::framing::encode(&MAGIC, VERSION, &json)
}

/// Decode and verify a header object: (chain, volume).
pub fn decode_header(b: &[u8], name: &str) -> Result<(String, Volume)> {
    let subject = crate::error::Subject::from(name);
    let (version, json) = crate::framing::decode(b, &MAGIC, "volume header", &subject)?;
    if version != VERSION {
        return Err(Error::corrupt(
            name.to_string(),
            format!("volume header version {version}"),
        ));
    }
    let h: Header = serde_json::from_slice(json)
        .map_err(|e| Error::corrupt(name.to_string(), format!("unreadable: {e}")))?;
    Ok((h.chain.into_owned(), h.volume.into_owned()))
}

/// Write a volume's header object.
pub fn put_header(objects: &SealedStore, chain: &str, v: &Volume) -> Result<()> {
    objects.put(&ObjectKey::Volume(v.key), encode_header(chain, v))
}

/// Writes one category at a time as parts of at most `capacity` bytes.
pub struct CategoryFiller {
    inner: ContainerFiller,
    chunks: u64,
    bytes: u64,
    /// Parts written so far, all categories.
    from: usize,
}

impl CategoryFiller {
    pub fn new(store: ContainerStore, capacity: u64, trace: bool) -> Self {
        CategoryFiller {
            inner: ContainerFiller::new(store, ChunkKind::Data, capacity, trace),
            chunks: 0,
            bytes: 0,
            from: 0,
        }
    }

    pub fn push(
        &mut self,
        ids: &mut IdAllocator,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<()> {
        self.inner.push(ids, fp, len, bytes)?;
        self.chunks += 1;
        self.bytes += len as u64;
        Ok(())
    }

    /// Close the category open since the last call: Cat.(start, end), or
    /// `None` if it holds no chunk.
    pub fn finish(&mut self, start: u32, end: u32) -> Result<Option<Category>> {
        self.inner.seal()?;
        let parts = &self.inner.written()[self.from..];
        self.from = self.inner.written().len();
        let cat = (self.chunks > 0).then(|| Category {
            start,
            end,
            chunks: self.chunks,
            bytes: self.bytes,
            object_bytes: parts.iter().map(|p| p.object_bytes).sum(),
            parts: parts.iter().map(|p| p.id).collect(),
        });
        self.chunks = 0;
        self.bytes = 0;
        Ok(cat)
    }

    /// Every part written, for the manifest.
    pub fn written(&self) -> &[ContainerEntry] {
        self.inner.written()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_corruption() {
        let v = Volume {
            version: 3,
            key: 9,
            categories: vec![Category {
                start: 1,
                end: 3,
                chunks: 2,
                bytes: 100,
                object_bytes: 300,
                parts: vec![ContainerId(4)],
            }],
        };
        let b = encode_header("src", &v);
        assert_eq!(decode_header(&b, "v").unwrap(), ("src".to_string(), v));
        for i in (0..b.len()).step_by(5) {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert!(decode_header(&bad, "v").is_err(), "flip at {i}");
        }
    }
}
