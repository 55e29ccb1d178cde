//! [`ContainerBuilder`]: the chunks of one open container, compressed and
//! sealed as they are pushed, framed for [`ContainerStore`](super::ContainerStore)
//! to write. Apart from `mod.rs` so the container writer and the store use
//! it without depending on the folder's re-exports.

use super::format;
use crate::container::format::ChunkMeta;
use crate::container::presealed::ChunkSealing;
use crate::fingerprint::Fingerprint;
use crate::ids::ChunkKind;
use crate::seal::{Codec, Compression, Sealer};
use std::sync::Arc;

/// Accumulates the chunks of one open container, stored as they will be
/// written: each chunk compressed and sealed as it is pushed, so a full
/// container is framed without another pass over its data. Capacity counts
/// logical bytes, so where containers close does not depend on how well
/// chunks compress.
pub struct ContainerBuilder {
    kind: ChunkKind,
    capacity: u64,
    trace: bool,
    sealer: Arc<Sealer>,
    compression: Compression,
    entries: Vec<ChunkMeta>,
    data: Vec<u8>,
    logical: u64,
}

impl ContainerBuilder {
    /// A builder storing chunks as they are (no compression, no sealing).
    pub fn new(kind: ChunkKind, capacity: u64, trace: bool) -> Self {
        Self::sealing(
            kind,
            capacity,
            trace,
            Arc::new(Sealer::identity()),
            Compression::Off,
        )
    }

    /// A builder storing chunks through `sealer` with `compression`.
    pub fn sealing(
        kind: ChunkKind,
        capacity: u64,
        trace: bool,
        sealer: Arc<Sealer>,
        compression: Compression,
    ) -> Self {
        ContainerBuilder {
            kind,
            capacity,
            trace,
            sealer,
            compression,
            entries: Vec::new(),
            data: Vec::new(),
            logical: 0,
        }
    }
    /// How this builder's chunks are stored, for workers sealing them ahead
    /// ([`Presealed`](super::Presealed)); `None` when they are stored as they are.
    pub fn chunk_sealing(&self) -> Option<ChunkSealing> {
        if self.trace || self.kind != ChunkKind::Data {
            return None;
        }
        ChunkSealing::new(&self.sealer, self.compression)
    }

    /// Whether a chunk of `len` bytes fits. An empty container takes any chunk,
    /// so a chunk larger than the capacity gets a container of its own.
    pub fn fits(&self, len: u64) -> bool {
        self.entries.is_empty() || self.logical + len <= self.capacity
    }

    fn open_buffer(&mut self) {
        if self.data.is_empty() {
            // Header space first, so the container is encoded in place.
            let data = if self.trace {
                0
            } else {
                self.capacity as usize
            };
            // Room for the metadata of ~2 KiB chunks, appended when sealing.
            let meta = (self.capacity as usize / 2048 + 64) * format::META_ENTRY_LEN;
            let want = format::HEADER_LEN + data + meta;
            self.data.reserve(want);
            self.data.resize(format::HEADER_LEN, 0);
        }
    }

    /// Append a chunk. `bytes` is ignored in trace mode (pass `&[]`).
    pub fn push(&mut self, fp: Fingerprint, len: u32, bytes: &[u8]) {
        self.open_buffer();
        let stored_offset = (self.data.len() - format::HEADER_LEN) as u32;
        let mut codec = Codec::Raw;
        if !self.trace {
            debug_assert_eq!(bytes.len(), len as usize);
            if self.compression == Compression::Off && !self.sealer.encrypted() {
                self.data.extend_from_slice(bytes);
            } else {
                codec =
                    self.sealer
                        .seal_chunk(self.kind, &fp, bytes, self.compression, &mut self.data);
            }
        }
        self.entries.push(ChunkMeta {
            fp,
            offset: self.logical as u32,
            len,
            kind: self.kind,
            stored_offset,
            stored_len: (self.data.len() - format::HEADER_LEN) as u32 - stored_offset,
            codec,
        });
        self.logical += len as u64;
    }

    /// Append a chunk's stored bytes as another container held them (GC's
    /// copy-forward: no decompression, no re-encryption). `m` is its entry
    /// there.
    pub fn push_stored(&mut self, m: &ChunkMeta, stored: &[u8]) {
        self.open_buffer();
        let stored_offset = (self.data.len() - format::HEADER_LEN) as u32;
        if !self.trace {
            debug_assert_eq!(stored.len(), m.stored_len as usize);
            self.data.extend_from_slice(stored);
        }
        self.entries.push(ChunkMeta {
            offset: self.logical as u32,
            kind: self.kind,
            stored_offset,
            stored_len: if self.trace { 0 } else { m.stored_len },
            codec: if self.trace { Codec::Raw } else { m.codec },
            ..*m
        });
        self.logical += m.len as u64;
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn logical_len(&self) -> u64 {
        self.logical
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Take the accumulated chunks, leaving the builder empty for the next
    /// container. The buffer is framed: `HEADER_LEN` placeholder bytes, then
    /// the stored data section (see [`format::encode_framed`]).
    pub fn take(&mut self) -> (Vec<ChunkMeta>, Vec<u8>) {
        self.logical = 0;
        let mut framed = std::mem::take(&mut self.data);
        if framed.is_empty() {
            framed.resize(format::HEADER_LEN, 0);
        }
        (std::mem::take(&mut self.entries), framed)
    }

    /// Hand back a written container's buffer for reuse (saves a 4 MiB
    /// allocation and its page faults per container).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.data.is_empty() {
            buf.clear();
            self.data = buf;
        }
    }
}
