//! Data chunks compressed and sealed ahead of the container writer.
//!
//! Why: compression and sealing are the costly part of storing a chunk, and
//! they depend only on the chunk (its kind, fingerprint and bytes; the nonce
//! is random), not on where it lands. Ingest's workers run them in
//! parallel for the chunks a batch will probably store; the writer, still
//! deciding placement sequentially in stream order, appends the stored
//! bytes it finds here and seals inline whatever it does not find. So the
//! layout (which chunk goes into which container, in which order) does not
//! depend on how many workers ran, or whether any did.

use crate::ids::ChunkKind;

use crate::container::format::ChunkMeta;
use crate::fingerprint::{Fingerprint, FpMap};
use crate::seal::{Codec, Compression, Sealer};
use std::sync::Arc;

/// How data chunks are stored: what a worker needs to seal one exactly as
/// [`ContainerBuilder::push`](super::ContainerBuilder::push) would.
#[derive(Clone)]
pub struct ChunkSealing {
    sealer: Arc<Sealer>,
    compression: Compression,
}

impl ChunkSealing {
    /// `None` when chunks are stored as they are (nothing to do ahead).
    pub(crate) fn new(sealer: &Arc<Sealer>, compression: Compression) -> Option<Self> {
        (compression != Compression::Off || sealer.encrypted()).then(|| ChunkSealing {
            sealer: sealer.clone(),
            compression,
        })
    }

    /// Append the stored form of data chunk `fp` to `out`; returns its codec.
    pub fn seal(&self, fp: &Fingerprint, plain: &[u8], out: &mut Vec<u8>) -> Codec {
        self.sealer
            .seal_chunk(ChunkKind::Data, fp, plain, self.compression, out)
    }
}

/// One worker's output: stored bytes back to back, and where each chunk's are.
#[derive(Default)]
pub struct SealedPart {
    bytes: Vec<u8>,
    chunks: Vec<(Fingerprint, u32, Codec, u32, u32)>,
}

impl SealedPart {
    /// Seal data chunk `fp` (`plain` is its bytes) into this part.
    pub fn push(&mut self, sealing: &ChunkSealing, fp: Fingerprint, plain: &[u8]) {
        let start = self.bytes.len();
        let codec = sealing.seal(&fp, plain, &mut self.bytes);
        let stored = self.bytes.len() - start;
        self.chunks
            .push((fp, plain.len() as u32, codec, start as u32, stored as u32));
    }

    /// Whether no chunk was sealed into this part.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.chunks.clear();
    }
}

/// The chunks sealed ahead for the batch being stored, by fingerprint.
#[derive(Default)]
pub struct Presealed {
    parts: Vec<SealedPart>,
    /// fingerprint → (part, index in the part).
    at: FpMap<(u32, u32)>,
}

impl Presealed {
    /// Make the chunks of `parts` available (replacing any left over).
    pub fn install(&mut self, parts: Vec<SealedPart>) {
        self.at.clear();
        for (p, part) in parts.iter().enumerate() {
            for (i, c) in part.chunks.iter().enumerate() {
                self.at.insert(c.0, (p as u32, i as u32));
            }
        }
        self.parts = parts;
    }

    /// Forget the chunks not used and hand back the parts' buffers for the
    /// next batch.
    pub fn recycle(&mut self) -> Vec<SealedPart> {
        self.at.clear();
        let mut parts = std::mem::take(&mut self.parts);
        parts.iter_mut().for_each(SealedPart::clear);
        parts
    }

    /// The stored form of data chunk `fp` of `len` bytes, if sealed ahead:
    /// its entry (offsets left for the builder to fill) and stored bytes.
    /// Each chunk is handed out once.
    #[inline]
    pub fn take(&mut self, fp: &Fingerprint, len: u32) -> Option<(ChunkMeta, &[u8])> {
        if self.at.is_empty() {
            return None;
        }
        let (p, i) = self.at.remove(fp)?;
        let part = &self.parts[p as usize];
        let (fp, plain_len, codec, start, stored) = part.chunks[i as usize];
        if plain_len != len {
            return None;
        }
        let meta = ChunkMeta {
            fp,
            offset: 0,
            len,
            kind: ChunkKind::Data,
            stored_offset: 0,
            stored_len: stored,
            codec,
        };
        Some((meta, &part.bytes[start as usize..(start + stored) as usize]))
    }
}
