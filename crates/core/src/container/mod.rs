//! Containers: the fixed-capacity, immutable unit of storage and of I/O.
//!
//! [`format`](mod@format) is the byte layout; [`ContainerBuilder`] fills one container;
//! [`ContainerStore`] puts and gets container objects through the sealing
//! layer ([`SealedStore`]), verifying every read and counting every read and
//! write in [`Metrics`]; [`ContainerWriter`] fills and seals new containers
//! (ingest and GC sweep).

pub mod format;
mod writer;

use crate::backend::ObjectBytes;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap, HashAlgo};
use crate::metrics::Metrics;
use crate::seal::SealedStore;
pub use format::{ChunkKind, ChunkMeta, ContainerId, Header, PerKind};
use std::sync::Arc;
pub use writer::{ContainerWriter, IdAllocator};

/// Accumulates the chunks of one open container.
pub struct ContainerBuilder {
    kind: ChunkKind,
    capacity: u64,
    trace: bool,
    entries: Vec<ChunkMeta>,
    data: Vec<u8>,
    logical: u64,
}

impl ContainerBuilder {
    pub fn new(kind: ChunkKind, capacity: u64, trace: bool) -> Self {
        ContainerBuilder {
            kind,
            capacity,
            trace,
            entries: Vec::new(),
            data: Vec::new(),
            logical: 0,
        }
    }
    /// Whether a chunk of `len` bytes fits. An empty container takes any chunk,
    /// so a chunk larger than the capacity gets a container of its own.
    pub fn fits(&self, len: u64) -> bool {
        self.entries.is_empty() || self.logical + len <= self.capacity
    }
    /// Append a chunk. `bytes` is ignored in trace mode (pass `&[]`).
    pub fn push(&mut self, fp: Fingerprint, len: u32, bytes: &[u8]) {
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
        if !self.trace {
            debug_assert_eq!(bytes.len(), len as usize);
            self.data.extend_from_slice(bytes);
        }
        self.entries.push(ChunkMeta {
            fp,
            offset: self.logical as u32,
            len,
            kind: self.kind,
        });
        self.logical += len as u64;
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
    /// the data section (see [`format::encode_framed`]).
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

/// A container read back from storage: verified header, metadata and data.
pub struct Container {
    pub header: Header,
    pub meta: Vec<ChunkMeta>,
    object: ObjectBytes,
    by_fp: FpMap<u32>,
}

impl Container {
    fn new(header: Header, meta: Vec<ChunkMeta>, object: ObjectBytes) -> Self {
        let mut by_fp = FpMap::with_capacity_and_hasher(meta.len(), Default::default());
        for (i, m) in meta.iter().enumerate() {
            by_fp.entry(m.fp).or_insert(i as u32);
        }
        Container {
            header,
            meta,
            object,
            by_fp,
        }
    }
    pub fn id(&self) -> ContainerId {
        self.header.id
    }
    /// Metadata of the chunk with this fingerprint, if the container holds it.
    pub fn find(&self, fp: &Fingerprint) -> Option<&ChunkMeta> {
        self.by_fp.get(fp).map(|&i| &self.meta[i as usize])
    }
    /// Bytes of a chunk of this container (empty in trace mode).
    pub fn bytes(&self, m: &ChunkMeta) -> &[u8] {
        if self.header.trace {
            return &[];
        }
        let start = format::HEADER_LEN + m.offset as usize;
        &self.object[start..start + m.len as usize]
    }
    /// Bytes of the chunk with this fingerprint.
    pub fn chunk(&self, fp: &Fingerprint) -> Option<&[u8]> {
        self.find(fp).map(|m| self.bytes(m))
    }
    /// The buffer the container was read into, for
    /// [`ContainerStore::read_into`] to reuse.
    pub fn into_buffer(self) -> Vec<u8> {
        self.object.into_buffer()
    }
}

/// Puts and gets containers through the sealing layer; verifies and counts.
#[derive(Clone)]
pub struct ContainerStore {
    objects: SealedStore,
    algo: HashAlgo,
    trace: bool,
    metrics: Arc<Metrics>,
}

impl ContainerStore {
    pub fn new(objects: SealedStore, algo: HashAlgo, trace: bool, metrics: Arc<Metrics>) -> Self {
        ContainerStore {
            objects,
            algo,
            trace,
            metrics,
        }
    }
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
    pub fn objects(&self) -> &SealedStore {
        &self.objects
    }

    /// Write one container. Recipe containers always hold their bytes (recipes
    /// are metadata); data containers hold none in trace mode. Returns the
    /// object size in bytes.
    pub fn write(
        &self,
        id: ContainerId,
        kind: ChunkKind,
        entries: &[ChunkMeta],
        data: &[u8],
    ) -> Result<u64> {
        let mut framed = Vec::with_capacity(format::HEADER_LEN + data.len());
        framed.resize(format::HEADER_LEN, 0);
        framed.extend_from_slice(data);
        self.write_framed(id, kind, entries, framed).map(|(n, _)| n)
    }

    /// [`write`](Self::write) from a framed buffer (header space + data, as
    /// [`ContainerBuilder::take`] returns it). Returns the object size and the
    /// buffer, for reuse.
    pub fn write_framed(
        &self,
        id: ContainerId,
        kind: ChunkKind,
        entries: &[ChunkMeta],
        framed: Vec<u8>,
    ) -> Result<(u64, Vec<u8>)> {
        let trace = self.trace && kind == ChunkKind::Data;
        let object = format::encode_framed(id, kind, self.algo, trace, entries, framed);
        self.objects.put_container(id, &object)?;
        let logical: u64 = entries.iter().map(|e| e.len as u64).sum();
        self.metrics
            .container_written(kind == ChunkKind::Recipe, logical);
        Ok((object.len() as u64, object))
    }

    /// Read and verify a whole container.
    pub fn read(&self, id: ContainerId) -> Result<Container> {
        self.read_into(id, Vec::new())
    }

    /// [`read`](Self::read) into `buf` (from [`Container::into_buffer`]), so
    /// a restore reuses the memory of the containers it evicts.
    pub fn read_into(&self, id: ContainerId, reuse: Vec<u8>) -> Result<Container> {
        let object = self.objects.get_container(id, reuse)?;
        let (header, meta) = format::decode(id, &object)?;
        self.check_algo(&header)?;
        self.metrics
            .container_read(header.kind == ChunkKind::Recipe, header.logical_len);
        Ok(Container::new(header, meta, object))
    }

    /// Read only the header and metadata section (two ranged reads). Not
    /// counted as a container read: it touches no chunk data.
    pub fn read_meta(&self, id: ContainerId) -> Result<(Header, Vec<ChunkMeta>)> {
        let head = self
            .objects
            .get_container_range(id, 0, format::HEADER_LEN as u64)?;
        let header = format::decode_header(id, &head)?;
        self.check_algo(&header)?;
        let meta = self
            .objects
            .get_container_range(id, header.meta_offset(), header.meta_len)?;
        let meta = format::decode_meta(&header, &meta)?;
        Ok((header, meta))
    }

    fn check_algo(&self, h: &Header) -> Result<()> {
        if h.algo != self.algo {
            return Err(Error::corrupt(
                format::object_name(h.id),
                format!(
                    "fingerprints are {}, repository uses {}",
                    h.algo.name(),
                    self.algo.name()
                ),
            ));
        }
        Ok(())
    }
}
