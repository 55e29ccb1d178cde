//! The container object format (version 1). See `docs/FORMAT.md`.
//!
//! ```text
//! +----------------------+ 0
//! | header (128 bytes)   |
//! +----------------------+ 128
//! | data section         |  chunk bytes back to back (empty in trace mode)
//! +----------------------+ 128 + data_len
//! | metadata section     |  chunk_count entries of 48 bytes
//! +----------------------+ 128 + data_len + meta_len  (= object size)
//! ```
//!
//! Invariants, all checked by [`decode_header`] / [`decode_meta`] / [`decode`]:
//! - the header checksum covers header bytes 0..112;
//! - `meta_len == chunk_count * META_ENTRY_LEN`, and the object is exactly
//!   `HEADER_LEN + data_len + meta_len` bytes long;
//! - in data mode the chunks tile the data section: entry i starts where entry
//!   i−1 ends, the first at 0, and `data_len == logical_len`; in trace mode
//!   `data_len == 0` and offsets are still the logical positions;
//! - the metadata checksum covers the metadata section and the data checksum
//!   the data section (XXH3-128: it guards against corruption; identity is the
//!   fingerprints' job).
//!
//! The metadata sits after the data so a writer can stream chunks out, but the
//! header records where it is, so the metadata can be read alone with two
//! ranged reads, without touching the data.

use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, HashAlgo, FP_LEN};

pub const MAGIC: [u8; 8] = *b"TSRACONT";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 128;
pub const META_ENTRY_LEN: usize = 48;

pub use crate::ids::ContainerId;

/// What a chunk holds: user data (recipe level 0) or a recipe chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkKind {
    Data,
    Recipe,
}

/// A value for each [`ChunkKind`]: the data and recipe twins (open
/// containers, index tables, live counts) that used to be two fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerKind<T> {
    pub data: T,
    pub recipe: T,
}

impl<T> PerKind<T> {
    pub fn new(mut make: impl FnMut(ChunkKind) -> T) -> Self {
        PerKind {
            data: make(ChunkKind::Data),
            recipe: make(ChunkKind::Recipe),
        }
    }
    pub fn get(&self, kind: ChunkKind) -> &T {
        match kind {
            ChunkKind::Data => &self.data,
            ChunkKind::Recipe => &self.recipe,
        }
    }
    pub fn get_mut(&mut self, kind: ChunkKind) -> &mut T {
        match kind {
            ChunkKind::Data => &mut self.data,
            ChunkKind::Recipe => &mut self.recipe,
        }
    }
}

impl<T> std::ops::Index<ChunkKind> for PerKind<T> {
    type Output = T;
    fn index(&self, kind: ChunkKind) -> &T {
        self.get(kind)
    }
}

impl<T> std::ops::IndexMut<ChunkKind> for PerKind<T> {
    fn index_mut(&mut self, kind: ChunkKind) -> &mut T {
        self.get_mut(kind)
    }
}

impl ChunkKind {
    /// Both kinds, data first.
    pub const ALL: [ChunkKind; 2] = [ChunkKind::Data, ChunkKind::Recipe];

    fn code(self) -> u8 {
        match self {
            ChunkKind::Data => 0,
            ChunkKind::Recipe => 1,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(ChunkKind::Data),
            1 => Some(ChunkKind::Recipe),
            _ => None,
        }
    }
}

/// One metadata entry: where a chunk sits in its container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkMeta {
    pub fp: Fingerprint,
    pub offset: u32,
    pub len: u32,
    pub kind: ChunkKind,
}

/// The fixed-size header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: ChunkKind,
    pub algo: HashAlgo,
    /// True when the data section is absent (trace mode).
    pub trace: bool,
    pub id: ContainerId,
    pub chunk_count: u32,
    /// Bytes physically present in the data section.
    pub data_len: u64,
    /// Sum of the chunk lengths: the container's size for every metric.
    pub logical_len: u64,
    pub meta_len: u64,
    pub data_sum: [u8; 16],
    pub meta_sum: [u8; 16],
}

impl Header {
    pub fn object_len(&self) -> u64 {
        HEADER_LEN as u64 + self.data_len + self.meta_len
    }
    pub fn meta_offset(&self) -> u64 {
        HEADER_LEN as u64 + self.data_len
    }
}

pub fn checksum(bytes: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes()
}

/// A container as errors name it (`container 00000000000000a1`).
pub fn object_name(id: ContainerId) -> crate::error::ObjectRef {
    crate::error::ObjectRef::Object(crate::backend::ObjectKey::Container(id))
}

pub fn encode_header(h: &Header) -> [u8; HEADER_LEN] {
    let mut b = [0u8; HEADER_LEN];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12] = h.kind.code();
    b[13] = h.algo.code();
    b[14] = h.trace as u8;
    b[16..24].copy_from_slice(&h.id.0.to_le_bytes());
    b[24..28].copy_from_slice(&h.chunk_count.to_le_bytes());
    b[32..40].copy_from_slice(&h.data_len.to_le_bytes());
    b[40..48].copy_from_slice(&h.logical_len.to_le_bytes());
    b[48..56].copy_from_slice(&h.meta_offset().to_le_bytes());
    b[56..64].copy_from_slice(&h.meta_len.to_le_bytes());
    b[64..80].copy_from_slice(&h.data_sum);
    b[80..96].copy_from_slice(&h.meta_sum);
    let sum = checksum(&b[..112]);
    b[112..128].copy_from_slice(&sum);
    b
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Parse and verify a header read from the start of a container object.
pub fn decode_header(id: ContainerId, b: &[u8]) -> Result<Header> {
    let name = object_name(id);
    if b.len() < HEADER_LEN {
        return Err(Error::corrupt(
            name,
            format!("truncated header ({} bytes)", b.len()),
        ));
    }
    if b[0..8] != MAGIC {
        return Err(Error::corrupt(
            name,
            "not a Tessera container (bad magic bytes)",
        ));
    }
    let version = u32_at(b, 8);
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            object: name.into(),
            found: version,
            supported: VERSION,
        });
    }
    if checksum(&b[..112]) != b[112..128] {
        return Err(Error::corrupt(name, "header checksum mismatch"));
    }
    let kind = ChunkKind::from_code(b[12])
        .ok_or_else(|| Error::corrupt(&name, format!("unknown container kind {}", b[12])))?;
    let algo = HashAlgo::from_code(b[13])
        .ok_or_else(|| Error::corrupt(&name, format!("unknown fingerprint algorithm {}", b[13])))?;
    let h = Header {
        kind,
        algo,
        trace: b[14] != 0,
        id: ContainerId(u64_at(b, 16)),
        chunk_count: u32_at(b, 24),
        data_len: u64_at(b, 32),
        logical_len: u64_at(b, 40),
        meta_len: u64_at(b, 56),
        data_sum: b[64..80].try_into().unwrap(),
        meta_sum: b[80..96].try_into().unwrap(),
    };
    if h.id != id {
        return Err(Error::corrupt(
            name,
            format!("header names container {:016x}", h.id),
        ));
    }
    if u64_at(b, 48) != h.meta_offset()
        || h.meta_len != h.chunk_count as u64 * META_ENTRY_LEN as u64
        || (!h.trace && h.data_len != h.logical_len)
        || (h.trace && h.data_len != 0)
    {
        return Err(Error::corrupt(
            name,
            "inconsistent section lengths in header",
        ));
    }
    Ok(h)
}

pub fn encode_meta(entries: &[ChunkMeta], out: &mut Vec<u8>) {
    out.reserve(entries.len() * META_ENTRY_LEN);
    for e in entries {
        out.extend_from_slice(&e.fp.0);
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
        out.push(e.kind.code());
        out.extend_from_slice(&[0u8; 7]);
    }
}

/// Parse and verify the metadata section against its header.
pub fn decode_meta(h: &Header, b: &[u8]) -> Result<Vec<ChunkMeta>> {
    let name = object_name(h.id);
    if b.len() as u64 != h.meta_len {
        return Err(Error::corrupt(name, "truncated metadata section"));
    }
    if checksum(b) != h.meta_sum {
        return Err(Error::corrupt(name, "metadata checksum mismatch"));
    }
    let mut out = Vec::with_capacity(h.chunk_count as usize);
    let mut expect_offset: u64 = 0;
    for e in b.chunks_exact(META_ENTRY_LEN) {
        let fp = Fingerprint(e[..FP_LEN].try_into().unwrap());
        let offset = u32_at(e, 32);
        let len = u32_at(e, 36);
        let kind = ChunkKind::from_code(e[40])
            .ok_or_else(|| Error::corrupt(&name, format!("unknown chunk kind {}", e[40])))?;
        if offset as u64 != expect_offset || kind != h.kind {
            return Err(Error::corrupt(
                name,
                "metadata entries do not tile the container",
            ));
        }
        expect_offset += len as u64;
        out.push(ChunkMeta {
            fp,
            offset,
            len,
            kind,
        });
    }
    if expect_offset != h.logical_len {
        return Err(Error::corrupt(
            name,
            "chunk lengths do not add up to the container size",
        ));
    }
    Ok(out)
}

/// Encode a whole container object from its chunks' metadata and data bytes
/// (`data` is empty in trace mode).
pub fn encode(
    id: ContainerId,
    kind: ChunkKind,
    algo: HashAlgo,
    trace: bool,
    entries: &[ChunkMeta],
    data: &[u8],
) -> Vec<u8> {
    let mut framed = Vec::with_capacity(HEADER_LEN + data.len() + entries.len() * META_ENTRY_LEN);
    framed.resize(HEADER_LEN, 0);
    framed.extend_from_slice(data);
    encode_framed(id, kind, algo, trace, entries, framed)
}

/// Encode in place: `framed` is `HEADER_LEN` placeholder bytes followed by
/// the data section. The metadata is appended and the header filled in, so
/// the writer never copies a container's data a second time.
pub fn encode_framed(
    id: ContainerId,
    kind: ChunkKind,
    algo: HashAlgo,
    trace: bool,
    entries: &[ChunkMeta],
    mut framed: Vec<u8>,
) -> Vec<u8> {
    assert!(
        framed.len() >= HEADER_LEN,
        "framed buffer lacks header space"
    );
    let data_len = framed.len() - HEADER_LEN;
    let logical_len: u64 = entries.iter().map(|e| e.len as u64).sum();
    debug_assert!(trace || data_len as u64 == logical_len);
    let data_sum = checksum(&framed[HEADER_LEN..]);
    encode_meta(entries, &mut framed);
    let meta_start = HEADER_LEN + data_len;
    let h = Header {
        kind,
        algo,
        trace,
        id,
        chunk_count: entries.len() as u32,
        data_len: data_len as u64,
        logical_len,
        meta_len: (framed.len() - meta_start) as u64,
        data_sum,
        meta_sum: checksum(&framed[meta_start..]),
    };
    framed[..HEADER_LEN].copy_from_slice(&encode_header(&h));
    framed
}

/// Verify a whole container object. Returns the header, the metadata and
/// the range of the data section within `object`.
pub fn decode(id: ContainerId, object: &[u8]) -> Result<(Header, Vec<ChunkMeta>)> {
    let h = decode_sized_header(id, object)?;
    let data = &object[HEADER_LEN..HEADER_LEN + h.data_len as usize];
    if checksum(data) != h.data_sum {
        return Err(Error::corrupt(object_name(id), "data checksum mismatch"));
    }
    let meta = decode_meta(&h, &object[h.meta_offset() as usize..])?;
    Ok((h, meta))
}

/// Like [`decode`] but without the data checksum: for salvaging the intact
/// chunks of a damaged container (each must then be checked against its
/// fingerprint by the caller). Header, length and metadata are still verified.
pub fn decode_salvage(id: ContainerId, object: &[u8]) -> Result<(Header, Vec<ChunkMeta>)> {
    let h = decode_sized_header(id, object)?;
    let meta = decode_meta(&h, &object[h.meta_offset() as usize..])?;
    Ok((h, meta))
}

/// The header of a whole container object, checked against its length.
fn decode_sized_header(id: ContainerId, object: &[u8]) -> Result<Header> {
    let h = decode_header(id, object)?;
    if object.len() as u64 != h.object_len() {
        return Err(Error::corrupt(
            object_name(id),
            format!(
                "object is {} bytes, header promises {}",
                object.len(),
                h.object_len()
            ),
        ));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: ContainerId = ContainerId(3);

    /// A data container `ID` of `sample(false)`, encoded.
    fn sample_object() -> (Vec<ChunkMeta>, Vec<u8>) {
        let (entries, data) = sample(false);
        let kind = ChunkKind::Data;
        let obj = encode(ID, kind, HashAlgo::Blake3, false, &entries, &data);
        (entries, obj)
    }

    fn sample(trace: bool) -> (Vec<ChunkMeta>, Vec<u8>) {
        let mut entries = Vec::new();
        let mut data = Vec::new();
        for i in 0..5u32 {
            let bytes = vec![i as u8; 100 + i as usize];
            entries.push(ChunkMeta {
                fp: HashAlgo::Blake3.hash(&bytes),
                offset: data.len() as u32,
                len: bytes.len() as u32,
                kind: ChunkKind::Data,
            });
            data.extend_from_slice(&bytes);
        }
        if trace {
            data.clear();
        }
        (entries, data)
    }

    #[test]
    fn round_trip_data_and_trace() {
        for trace in [false, true] {
            let (entries, data) = sample(trace);
            let obj = encode(
                ContainerId(7),
                ChunkKind::Data,
                HashAlgo::Blake3,
                trace,
                &entries,
                &data,
            );
            let (h, meta) = decode(ContainerId(7), &obj).unwrap();
            assert_eq!(meta, entries);
            assert_eq!(h.logical_len, 510);
            assert_eq!(h.trace, trace);
            assert_eq!(obj.len() as u64, h.object_len());
            // Metadata alone: header + metadata section only.
            let h2 = decode_header(ContainerId(7), &obj[..HEADER_LEN]).unwrap();
            assert_eq!(
                decode_meta(&h2, &obj[h2.meta_offset() as usize..]).unwrap(),
                entries
            );
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let (_, obj) = sample_object();
        for i in 0..obj.len() {
            let mut bad = obj.clone();
            bad[i] ^= 0x40;
            let err = decode(ID, &bad).expect_err(&format!("flip at {i} undetected"));
            assert!(
                err.to_string().contains("container 0000000000000003"),
                "{err}"
            );
        }
    }

    #[test]
    fn truncation_and_wrong_id_are_detected() {
        let (_, obj) = sample_object();
        for len in [0, 10, HEADER_LEN, obj.len() - 1] {
            assert!(decode(ID, &obj[..len]).is_err());
        }
        assert!(decode(ContainerId(4), &obj)
            .unwrap_err()
            .to_string()
            .contains("header names"));
    }

    #[test]
    fn future_version_is_reported_as_such() {
        let (entries, data) = sample(false);
        let mut obj = encode(
            ID,
            ChunkKind::Data,
            HashAlgo::Blake3,
            false,
            &entries,
            &data,
        );
        obj[8..12].copy_from_slice(&2u32.to_le_bytes());
        let err = decode(ID, &obj).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedVersion { found: 2, .. }),
            "{err}"
        );
    }
}
