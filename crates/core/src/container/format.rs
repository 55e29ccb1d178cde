//! The container object format (the repository's format version:
//! `crate::version`). See
//! `docs/FORMAT.md`.
//!
//! ```text
//! +----------------------+ 0
//! | header (128 bytes)   |
//! +----------------------+ 128
//! | data section         |  stored chunks back to back (empty in trace mode)
//! +----------------------+ 128 + data_len
//! | metadata section     |  chunk_count entries of 48 bytes (sealed when encrypted)
//! +----------------------+ 128 + data_len + meta_len  (= object size)
//! ```
//!
//! Each chunk is stored as the [`Sealer`] made it: raw or zstd-compressed,
//! and sealed on its own when the repository is encrypted. Its entry
//! records both lengths: the stored bytes (what the data section holds and
//! GC copies as they are) and the logical ones (what every metric counts).
//!
//! Invariants, all checked by [`decode_header`] / [`decode_meta`] / [`decode`]:
//! - the header checksum covers header bytes 0..112;
//! - `meta_len == chunk_count * META_ENTRY_LEN` (plus the sealing overhead
//!   when sealed), and the object is exactly `HEADER_LEN + data_len +
//!   meta_len` bytes long;
//! - the stored chunks tile the data section (entry i starts where entry
//!   i−1 ends, the first at 0, `data_len` is their sum) and the logical
//!   lengths add up to `logical_len`; in trace mode nothing is stored;
//! - the metadata checksum covers the (sealed) metadata section and the data
//!   checksum the data section (XXH3-128: it guards against corruption;
//!   authenticity is the sealer's job, identity the fingerprints').
//!
//! The metadata sits after the data so a writer can stream chunks out, but the
//! header records where it is, so the metadata can be read alone with two
//! ranged reads, without touching the data.

use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, HashAlgo, FP_LEN};
use crate::seal::{Codec, Sealer};

pub const MAGIC: [u8; 8] = *b"TSRACONT";
/// The repository format version: one number for every object kind.
pub use crate::version::VERSION;
pub const HEADER_LEN: usize = 128;
pub const META_ENTRY_LEN: usize = 48;

pub use crate::framing::checksum;
pub use crate::ids::{ChunkKind, ContainerId};

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

// A kind's byte in a container header and in a metadata entry.
impl ChunkKind {
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
    /// Logical offset: the sum of the logical lengths before it (not
    /// stored; derived when decoding).
    pub offset: u32,
    /// Logical length: the chunk's plain bytes.
    pub len: u32,
    pub kind: ChunkKind,
    /// Where its stored bytes start in the data section.
    pub stored_offset: u32,
    /// Bytes stored (compressed and/or sealed; 0 in trace mode). With
    /// `stored_offset` and `codec`, these are the chunk's *frame*'s: every
    /// chunk of a frame has the same three.
    pub stored_len: u32,
    pub codec: Codec,
    /// Where the chunk's plain bytes start in its frame's (not stored;
    /// derived when decoding: the lengths of the frame's chunks before it).
    pub frame_offset: u32,
    /// The plain length of the chunk's frame (its own `len` for a frame of
    /// one; not stored, derived when decoding).
    pub frame_len: u32,
}

impl ChunkMeta {
    /// A chunk as a builder appends it; the stored fields are filled in by
    /// the container codec.
    pub fn plain(fp: Fingerprint, offset: u32, len: u32, kind: ChunkKind) -> Self {
        ChunkMeta {
            fp,
            offset,
            len,
            kind,
            stored_offset: offset,
            stored_len: len,
            codec: Codec::Raw,
            frame_offset: 0,
            frame_len: len,
        }
    }

    /// Whether the chunk is stored in a frame of its own (its stored bytes
    /// are its alone, and move as they are).
    pub fn alone(&self) -> bool {
        self.frame_offset == 0 && self.frame_len == self.len
    }

    /// Whether `next` (the entry after this one) continues this one's frame.
    pub fn same_frame(&self, next: &ChunkMeta) -> bool {
        next.frame_offset != 0
            && next.stored_offset == self.stored_offset
            && next.stored_len == self.stored_len
    }
}

/// The fixed-size header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: ChunkKind,
    pub algo: HashAlgo,
    /// True when the data section is absent (trace mode).
    pub trace: bool,
    /// True when chunks and metadata are encrypted.
    pub sealed: bool,
    pub id: ContainerId,
    pub chunk_count: u32,
    /// Bytes physically present in the data section (stored chunks).
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
    b[15] = h.sealed as u8;
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
        sealed: b[15] != 0,
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
        || h.meta_len != meta_len(h.chunk_count, h.sealed)
        || (h.trace && h.data_len != 0)
        || b[14] > 1
        || b[15] > 1
    {
        return Err(Error::corrupt(
            name,
            "inconsistent section lengths in header",
        ));
    }
    Ok(h)
}

/// Whether `object` (a whole container object, or at least its header) is
/// a recipe container with a valid header: what the S3 metadata cache
/// keeps (the [`crate::backend::ContainerFilter`] its builders pass).
pub fn is_recipe_container(id: ContainerId, object: &[u8]) -> bool {
    object.len() >= HEADER_LEN
        && decode_header(id, &object[..HEADER_LEN]).is_ok_and(|h| h.kind == ChunkKind::Recipe)
}

/// The metadata section's length for `count` chunks.
pub fn meta_len(count: u32, sealed: bool) -> u64 {
    count as u64 * META_ENTRY_LEN as u64
        + if sealed {
            crate::seal::aead::OVERHEAD as u64
        } else {
            0
        }
}

pub fn encode_meta(entries: &[ChunkMeta], out: &mut Vec<u8>) {
    out.reserve(entries.len() * META_ENTRY_LEN);
    for e in entries {
        out.extend_from_slice(&e.fp.0);
        out.extend_from_slice(&e.stored_offset.to_le_bytes());
        out.extend_from_slice(&e.stored_len.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
        out.push(e.kind.code());
        out.push(e.codec.code());
        // 1: the entry continues the previous entry's frame.
        out.push((e.frame_offset != 0) as u8);
        out.push(0);
    }
}

/// What the metadata section's seal is bound to: the container's name and
/// its header up to the checksums (so neither can be changed or swapped).
fn meta_ad(h: &Header) -> Vec<u8> {
    let mut ad = crate::backend::ObjectKey::Container(h.id)
        .name()
        .into_bytes();
    ad.extend_from_slice(&encode_header(h)[..64]);
    ad
}

/// Parse and verify the (sealed) metadata section against its header.
pub fn decode_meta(h: &Header, b: &[u8], sealer: &Sealer) -> Result<Vec<ChunkMeta>> {
    let name = object_name(h.id);
    if b.len() as u64 != h.meta_len {
        return Err(Error::corrupt(name, "truncated metadata section"));
    }
    if checksum(b) != h.meta_sum {
        return Err(Error::corrupt(name, "metadata checksum mismatch"));
    }
    check_sealing(h, sealer)?;
    let b = sealer
        .unseal_meta(&meta_ad(h), b)
        .map_err(|why| Error::corrupt(&name, why))?;
    let overhead = sealer.overhead() as u32;
    let mut out = Vec::with_capacity(h.chunk_count as usize);
    let (mut logical, mut stored): (u64, u64) = (0, 0);
    // The open frame: index of its first entry in `out`.
    let mut frame_start = 0usize;
    for e in b.chunks_exact(META_ENTRY_LEN) {
        let fp = Fingerprint(e[..FP_LEN].try_into().unwrap());
        let stored_offset = u32_at(e, 32);
        let stored_len = u32_at(e, 36);
        let len = u32_at(e, 40);
        let kind = ChunkKind::from_code(e[44])
            .ok_or_else(|| Error::corrupt(&name, format!("unknown chunk kind {}", e[44])))?;
        let codec = Codec::from_code(e[45])
            .ok_or_else(|| Error::corrupt(&name, format!("unknown chunk codec {}", e[45])))?;
        let continues = e[46] == 1;
        let tiles = if continues {
            // Same frame as the previous entry: same stored bytes and codec.
            out.last().is_some_and(|p: &ChunkMeta| {
                !h.trace
                    && p.stored_offset == stored_offset
                    && p.stored_len == stored_len
                    && p.codec == codec
            })
        } else {
            stored_offset as u64 == stored
        };
        if !tiles || kind != h.kind || e[46] > 1 || e[47] != 0 {
            return Err(Error::corrupt(
                name,
                "metadata entries do not tile the container",
            ));
        }
        if !continues {
            close_frame(&name, h, overhead, &mut out[frame_start..])?;
            frame_start = out.len();
            stored += stored_len as u64;
        }
        let frame_offset = if continues {
            let p = out.last().unwrap();
            p.frame_offset + p.len
        } else {
            0
        };
        out.push(ChunkMeta {
            fp,
            offset: logical as u32,
            len,
            kind,
            stored_offset,
            stored_len,
            codec,
            frame_offset,
            frame_len: 0,
        });
        logical += len as u64;
    }
    close_frame(&name, h, overhead, &mut out[frame_start..])?;
    if logical != h.logical_len || stored != h.data_len {
        return Err(Error::corrupt(
            name,
            "chunk lengths do not add up to the container size",
        ));
    }
    Ok(out)
}

/// Give a decoded frame's entries its plain length, once its last entry is
/// known, and check that its stored length is plausible for it.
fn close_frame(
    name: &crate::error::ObjectRef,
    h: &Header,
    overhead: u32,
    frame: &mut [ChunkMeta],
) -> Result<()> {
    let Some(first) = frame.first() else {
        return Ok(());
    };
    let plain: u64 = frame.iter().map(|m| m.len as u64).sum();
    let (codec, stored_len) = (first.codec, first.stored_len);
    let plausible = plain <= u32::MAX as u64
        && match (h.trace, codec) {
            (true, _) => stored_len == 0 && codec == Codec::Raw && frame.len() == 1,
            (false, Codec::Raw) => stored_len as u64 == plain + overhead as u64,
            (false, Codec::Zstd) => stored_len > overhead,
        };
    if !plausible {
        return Err(Error::corrupt(
            name.clone(),
            "metadata entries do not tile the container",
        ));
    }
    for m in frame {
        m.frame_len = plain as u32;
    }
    Ok(())
}

/// The header's sealing must be the repository's.
fn check_sealing(h: &Header, sealer: &Sealer) -> Result<()> {
    match (h.sealed, sealer.encrypted()) {
        (true, false) => Err(Error::corrupt(
            object_name(h.id),
            "is encrypted, but the repository config says it is not",
        )),
        (false, true) => Err(Error::corrupt(
            object_name(h.id),
            "is not encrypted in an encrypted repository (planted or downgraded)",
        )),
        _ => Ok(()),
    }
}

/// Encode a whole container object from its chunks' metadata (stored
/// fields filled in) and stored data section (`data` is empty in trace
/// mode).
pub fn encode(
    id: ContainerId,
    kind: ChunkKind,
    algo: HashAlgo,
    trace: bool,
    entries: &[ChunkMeta],
    data: &[u8],
    sealer: &Sealer,
) -> Vec<u8> {
    let mut framed = Vec::with_capacity(HEADER_LEN + data.len() + entries.len() * META_ENTRY_LEN);
    framed.resize(HEADER_LEN, 0);
    framed.extend_from_slice(data);
    encode_framed(id, kind, algo, trace, entries, framed, sealer)
}

/// Encode in place: `framed` is `HEADER_LEN` placeholder bytes followed by
/// the stored data section. The (sealed) metadata is appended and the
/// header filled in, so the writer never copies a container's data a
/// second time.
pub fn encode_framed(
    id: ContainerId,
    kind: ChunkKind,
    algo: HashAlgo,
    trace: bool,
    entries: &[ChunkMeta],
    mut framed: Vec<u8>,
    sealer: &Sealer,
) -> Vec<u8> {
    assert!(
        framed.len() >= HEADER_LEN,
        "framed buffer lacks header space"
    );
    let data_len = framed.len() - HEADER_LEN;
    let logical_len: u64 = entries.iter().map(|e| e.len as u64).sum();
    debug_assert!(
        trace
            || data_len as u64
                == entries
                    .iter()
                    .filter(|e| e.frame_offset == 0)
                    .map(|e| e.stored_len as u64)
                    .sum::<u64>()
    );
    let data_sum = checksum(&framed[HEADER_LEN..]);
    let sealed = sealer.encrypted();
    let mut h = Header {
        kind,
        algo,
        trace,
        sealed,
        id,
        chunk_count: entries.len() as u32,
        data_len: data_len as u64,
        logical_len,
        meta_len: meta_len(entries.len() as u32, sealed),
        data_sum,
        meta_sum: [0; 16],
    };
    let meta_start = HEADER_LEN + data_len;
    encode_meta(entries, &mut framed);
    sealer.seal_meta(&meta_ad(&h), &mut framed, meta_start);
    debug_assert_eq!((framed.len() - meta_start) as u64, h.meta_len);
    h.meta_sum = checksum(&framed[meta_start..]);
    framed[..HEADER_LEN].copy_from_slice(&encode_header(&h));
    framed
}

/// Verify a whole container object. Returns the header, the metadata and
/// the range of the data section within `object`.
pub fn decode(id: ContainerId, object: &[u8], sealer: &Sealer) -> Result<(Header, Vec<ChunkMeta>)> {
    let h = decode_sized_header(id, object)?;
    verify_data(id, object, &h)?;
    let meta = decode_meta(&h, &object[h.meta_offset() as usize..], sealer)?;
    Ok((h, meta))
}

/// Verify the data checksum of a whole container object whose header `h`
/// was checked against its length ([`decode_salvage`]).
pub fn verify_data(id: ContainerId, object: &[u8], h: &Header) -> Result<()> {
    let data = &object[HEADER_LEN..HEADER_LEN + h.data_len as usize];
    if checksum(data) != h.data_sum {
        return Err(Error::corrupt(object_name(id), "data checksum mismatch"));
    }
    Ok(())
}

/// Like [`decode`] but without the data checksum: for salvaging the intact
/// chunks of a damaged container (each must then be opened and checked
/// against its fingerprint by the caller). Header, length and metadata are
/// still verified.
pub fn decode_salvage(
    id: ContainerId,
    object: &[u8],
    sealer: &Sealer,
) -> Result<(Header, Vec<ChunkMeta>)> {
    let h = decode_sized_header(id, object)?;
    let meta = decode_meta(&h, &object[h.meta_offset() as usize..], sealer)?;
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
    use crate::seal::{keys::MasterKey, Compression};

    const ID: ContainerId = ContainerId(3);

    fn sealers() -> Vec<Sealer> {
        let key = MasterKey::from_bytes([5; 32]);
        vec![
            Sealer::identity(),
            Sealer::new(None, Compression::Auto),
            Sealer::new(
                Some(key.cipher(crate::seal::CipherKind::Xchacha20Poly1305)),
                Compression::Off,
            ),
            Sealer::new(
                Some(key.cipher(crate::seal::CipherKind::Xaes256Gcm)),
                Compression::Max,
            ),
        ]
    }

    /// Five chunks sealed by `sealer`: their entries and the data section.
    fn sample(trace: bool, sealer: &Sealer) -> (Vec<ChunkMeta>, Vec<u8>) {
        let mut entries = Vec::new();
        let mut data = Vec::new();
        let mut logical = 0;
        for i in 0..5u32 {
            let bytes = vec![i as u8; 100 + i as usize];
            let fp = HashAlgo::Blake3.hash(&bytes);
            let mut m = ChunkMeta::plain(fp, logical, bytes.len() as u32, ChunkKind::Data);
            logical += m.len;
            m.stored_offset = data.len() as u32;
            if trace {
                m.stored_offset = 0;
                m.stored_len = 0;
            } else {
                m.codec = sealer.seal_chunk(
                    ChunkKind::Data,
                    &fp,
                    &bytes,
                    sealer.compression(),
                    &mut data,
                );
                m.stored_len = data.len() as u32 - m.stored_offset;
            }
            entries.push(m);
        }
        (entries, data)
    }

    /// A data container `ID` of `sample(false)`, encoded.
    fn sample_object(sealer: &Sealer) -> (Vec<ChunkMeta>, Vec<u8>) {
        let (entries, data) = sample(false, sealer);
        let kind = ChunkKind::Data;
        let obj = encode(ID, kind, HashAlgo::Blake3, false, &entries, &data, sealer);
        (entries, obj)
    }

    /// The S3 metadata cache's filter: recipe containers with a valid
    /// header, from the whole object or the header alone.
    #[test]
    fn is_recipe_container_reads_the_header() {
        let sealer = Sealer::identity();
        let (entries, data) = sample(false, &sealer);
        for (kind, recipe) in [(ChunkKind::Data, false), (ChunkKind::Recipe, true)] {
            let obj = encode(ID, kind, HashAlgo::Blake3, false, &entries, &data, &sealer);
            assert_eq!(is_recipe_container(ID, &obj), recipe);
            assert_eq!(is_recipe_container(ID, &obj[..HEADER_LEN]), recipe);
            assert!(!is_recipe_container(ContainerId(4), &obj), "another id");
            assert!(!is_recipe_container(ID, &obj[..HEADER_LEN - 1]));
            let mut bad = obj.clone();
            bad[20] ^= 1;
            assert!(!is_recipe_container(ID, &bad), "header checksum");
        }
    }

    #[test]
    fn round_trip_data_and_trace() {
        for sealer in sealers() {
            for trace in [false, true] {
                let (entries, data) = sample(trace, &sealer);
                let obj = encode(
                    ContainerId(7),
                    ChunkKind::Data,
                    HashAlgo::Blake3,
                    trace,
                    &entries,
                    &data,
                    &sealer,
                );
                let (h, meta) = decode(ContainerId(7), &obj, &sealer).unwrap();
                assert_eq!(meta, entries);
                assert_eq!(h.logical_len, 510);
                assert_eq!(h.trace, trace);
                assert_eq!(h.sealed, sealer.encrypted());
                assert_eq!(obj.len() as u64, h.object_len());
                if sealer.compression() == Compression::Off && !sealer.encrypted() && !trace {
                    assert_eq!(h.data_len, 510, "raw chunks are stored as they are");
                }
                // Metadata alone: header + metadata section only.
                let h2 = decode_header(ContainerId(7), &obj[..HEADER_LEN]).unwrap();
                assert_eq!(
                    decode_meta(&h2, &obj[h2.meta_offset() as usize..], &sealer).unwrap(),
                    entries
                );
                // Each chunk opens from its stored bytes.
                for m in meta.iter().filter(|_| !trace) {
                    let at = HEADER_LEN + m.stored_offset as usize;
                    let mut plain = vec![0u8; m.len as usize];
                    sealer
                        .unseal_chunk(
                            m.kind,
                            &m.fp,
                            m.codec,
                            &obj[at..at + m.stored_len as usize],
                            &mut plain,
                        )
                        .unwrap();
                    assert_eq!(HashAlgo::Blake3.hash(&plain), m.fp);
                }
            }
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        for sealer in sealers() {
            let (_, obj) = sample_object(&sealer);
            for i in 0..obj.len() {
                let mut bad = obj.clone();
                bad[i] ^= 0x40;
                let err = decode(ID, &bad, &sealer).expect_err(&format!("flip at {i} undetected"));
                assert!(
                    err.to_string().contains("container 0000000000000003"),
                    "{err}"
                );
            }
        }
    }

    /// A sealed container's metadata is bound to its name and header: with
    /// every checksum recomputed (what a deliberate forger would do), a
    /// changed header or another container's name is still refused.
    #[test]
    fn sealed_metadata_is_bound_to_its_container() {
        let sealer = &sealers()[3];
        let (_, obj) = sample_object(sealer);
        let mut h = decode_header(ID, &obj).unwrap();
        h.id = ContainerId(4);
        let mut moved = obj.clone();
        moved[..HEADER_LEN].copy_from_slice(&encode_header(&h));
        let err = decode(ContainerId(4), &moved, sealer)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not authenticate"), "{err}");
        // Another repository's key.
        let other = Sealer::new(
            Some(MasterKey::from_bytes([6; 32]).cipher(crate::seal::CipherKind::Xaes256Gcm)),
            Compression::Off,
        );
        assert!(decode(ID, &obj, &other).is_err());
        // Mixed modes.
        assert!(decode(ID, &obj, &Sealer::identity()).is_err());
        let (_, plain) = sample_object(&Sealer::identity());
        assert!(decode(ID, &plain, sealer).is_err());
    }

    #[test]
    fn truncation_and_wrong_id_are_detected() {
        for sealer in sealers() {
            let (_, obj) = sample_object(&sealer);
            for len in [0, 10, HEADER_LEN, obj.len() - 1] {
                assert!(decode(ID, &obj[..len], &sealer).is_err());
            }
            assert!(decode(ContainerId(4), &obj, &sealer)
                .unwrap_err()
                .to_string()
                .contains("header names"));
        }
    }

    #[test]
    fn other_version_is_reported_as_such() {
        let (_, mut obj) = sample_object(&Sealer::identity());
        obj[8..12].copy_from_slice(&1u32.to_le_bytes());
        let err = decode(ID, &obj, &Sealer::identity()).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedVersion { found: 1, .. }),
            "{err}"
        );
    }
}
