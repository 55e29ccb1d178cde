//! Neighbor-duplicate-focus indexing (MFDedup §4.2): a backup is
//! deduplicated only against itself and the previous version of its chain.
//!
//! Each version's table — its distinct data fingerprints in stream order —
//! is kept as an object (`ndf/<id>`) while it is still needed: by the next
//! backup of the chain (as the previous version) and by arranging (to
//! classify the active categories). During a backup the table of the
//! previous version is loaded into an exact [`Index`] (in stream order, so
//! its insertion log predicts a repeated stream) and the backup adds its own
//! chunks to it: internal duplicates hit those, adjacent duplicates the
//! previous version's, and everything else — skip duplicates included — is
//! stored as new. The global index is not consulted.

use crate::backend::ObjectKey;
use crate::container::format::checksum;
use crate::container::{ChunkKind, ContainerId};
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpSet, FP_LEN};
use crate::index::{Index, IndexEntry};
use crate::seal::SealedStore;

const MAGIC: [u8; 8] = *b"TSRANDFT";
const VERSION: u32 = 1;

/// `TSRANDFT` | version u32 | count u64 | count × fingerprint | XXH3-128.
pub fn encode_table(fps: &[Fingerprint]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + fps.len() * FP_LEN + 16);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(fps.len() as u64).to_le_bytes());
    for fp in fps {
        out.extend_from_slice(&fp.0);
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum);
    out
}

pub fn decode_table(b: &[u8], name: &str) -> Result<Vec<Fingerprint>> {
    let bad = |why: &str| Err(Error::corrupt(name.to_string(), why.to_string()));
    if b.len() < 36 || b[..8] != MAGIC {
        return bad("not an NDF table");
    }
    let (body, sum) = b.split_at(b.len() - 16);
    if checksum(body) != sum {
        return bad("checksum mismatch");
    }
    if u32::from_le_bytes(b[8..12].try_into().unwrap()) != VERSION {
        return bad("unknown NDF table version");
    }
    let n = u64::from_le_bytes(b[12..20].try_into().unwrap()) as usize;
    let fps = &body[20..];
    if fps.len() != n.saturating_mul(FP_LEN) {
        return bad("length mismatch");
    }
    Ok(fps
        .chunks_exact(FP_LEN)
        .map(|c| Fingerprint(c.try_into().unwrap()))
        .collect())
}

pub fn put_table(objects: &SealedStore, key: u64, fps: &[Fingerprint]) -> Result<()> {
    objects.put(&ObjectKey::NdfTable(key), encode_table(fps))
}

pub fn load_table(objects: &SealedStore, key: u64) -> Result<Vec<Fingerprint>> {
    let k = ObjectKey::NdfTable(key);
    decode_table(&objects.get(&k)?, &k.name())
}

/// The distinct fingerprints of a stream, first occurrences in order.
pub fn distinct(fps: &[Fingerprint]) -> Vec<Fingerprint> {
    let mut seen = FpSet::with_capacity_and_hasher(fps.len(), Default::default());
    fps.iter().filter(|fp| seen.insert(**fp)).copied().collect()
}

/// The index a backup deduplicates against: the previous version's table.
/// Locations are meaningless here (recipes hold fingerprints only and the
/// chunk is found through its category), so every entry names container 0.
pub fn index_of(prev: &[Fingerprint]) -> Result<Index> {
    let mut index = Index::default();
    for &fp in prev {
        index.insert(IndexEntry {
            fp,
            container: ContainerId(0),
            kind: ChunkKind::Data,
            copy: 0,
        })?;
    }
    Ok(index)
}

/// Memory of the NDF tables a backup holds: the previous version's and its
/// own (the paper's "two tables"), as an exact index would hold them.
pub fn memory_bytes(prev: usize, cur: usize) -> usize {
    let per = std::mem::size_of::<IndexEntry>() + 8;
    (prev + cur) * per
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::HashAlgo;

    #[test]
    fn table_round_trip_and_corruption() {
        let fps: Vec<_> = (0..5u8).map(|i| HashAlgo::Blake3.hash(&[i])).collect();
        let b = encode_table(&fps);
        assert_eq!(decode_table(&b, "t").unwrap(), fps);
        for i in (0..b.len()).step_by(7) {
            let mut bad = b.clone();
            bad[i] ^= 4;
            assert!(decode_table(&bad, "t").is_err());
        }
        let dup = [fps[0], fps[1], fps[0], fps[2], fps[1]];
        assert_eq!(distinct(&dup), fps[..3].to_vec());
    }
}
