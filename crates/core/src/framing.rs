//! Checksummed JSON objects: the framing manifests and MFDedup volume
//! headers share, so both are verified the same way.
//!
//! ```text
//! magic[8] | version u32 | json_len u64 | JSON | XXH3-128 of all before
//! ```
//!
//! [`checksum`] is the one checksum of every format (containers, index
//! segments, these framed objects); `container::format` re-exports it.

use crate::error::{Error, Result, Subject};

/// XXH3-128 of `bytes`, little endian: it guards against corruption;
/// authenticity is the sealer's job.
pub fn checksum(bytes: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes()
}

/// Bytes before the JSON (magic, version, length) plus the checksum after it.
const OVERHEAD: usize = 8 + 4 + 8 + 16;

/// Frame `json` as an object of kind `magic`.
pub(crate) fn encode(magic: &[u8; 8], version: u32, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + OVERHEAD);
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(json);
    let sum = checksum(&out);
    out.extend_from_slice(&sum);
    out
}

/// Verify the framing of `b` (magic, checksum, length) and return its
/// version and JSON; the caller judges the version. `what` names the kind
/// in errors ("not a Tessera manifest").
pub(crate) fn decode<'a>(
    b: &'a [u8],
    magic: &[u8; 8],
    what: &str,
    name: &Subject,
) -> Result<(u32, &'a [u8])> {
    if b.len() < OVERHEAD || b[..8] != *magic {
        return Err(Error::corrupt(name.clone(), format!("not a {what}")));
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    let (body, sum) = b.split_at(b.len() - 16);
    if checksum(body) != sum {
        return Err(Error::corrupt(name.clone(), "checksum mismatch"));
    }
    let len = u64::from_le_bytes(b[12..20].try_into().unwrap());
    if len != (body.len() - 20) as u64 {
        return Err(Error::corrupt(name.clone(), "length mismatch"));
    }
    Ok((version, &body[20..]))
}
