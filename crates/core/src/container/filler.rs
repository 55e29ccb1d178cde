//! The one container writer: ingest and GC sweep both fill new containers
//! through it, so ids, sealing and the catalog's container list are decided
//! in one place.

use crate::ids::{ChunkKind, ContainerId};

use crate::container::format::ChunkMeta;

use crate::container::builder::{ChunkSource, ContainerBuilder};

use crate::container::entry::ContainerEntry;

use crate::container::store::ContainerStore;
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use std::time::Instant;

/// Hands out container ids in the order containers are opened; starts at
/// the manifest's `next_container_id`. Shared by the writers of both kinds
/// (ingest interleaves data and recipe containers in one id sequence).
#[derive(Clone, Copy, Debug)]
pub struct IdAllocator {
    next: ContainerId,
}

impl IdAllocator {
    pub fn new(next: ContainerId) -> Self {
        IdAllocator { next }
    }
    /// The id the next opened container gets (the manifest's new
    /// `next_container_id` once writing is done).
    pub fn next_id(&self) -> ContainerId {
        self.next
    }
    fn allocate(&mut self) -> ContainerId {
        let id = self.next;
        self.next = id.next();
        id
    }
}

/// Fills containers of one kind: opens one (allocating its id) at the first
/// chunk, seals it through [`ContainerStore::write_framed`] when the next
/// chunk does not fit, reuses its buffer, and lists what it wrote.
pub struct ContainerFiller {
    store: ContainerStore,
    kind: ChunkKind,
    builder: ContainerBuilder,
    /// Id of the open container (meaningless while the builder is empty).
    id: ContainerId,
    written: Vec<ContainerEntry>,
    write_seconds: f64,
}

impl ContainerFiller {
    /// A writer of `kind` containers of `capacity` bytes; data containers of
    /// a trace-mode repository hold no bytes.
    pub fn new(store: ContainerStore, kind: ChunkKind, capacity: u64, trace: bool) -> Self {
        debug_assert!(capacity > 0);
        let trace = trace && kind == ChunkKind::Data;
        ContainerFiller {
            builder: store.builder(kind, capacity, trace),
            store,
            kind,
            id: ContainerId(0),
            written: Vec::new(),
            write_seconds: 0.0,
        }
    }

    /// Seal the open container if a chunk of `len` bytes does not fit;
    /// returns the sealed container's entry.
    #[inline]
    pub fn seal_if_full(&mut self, len: u32) -> Result<Option<ContainerEntry>> {
        if self.builder.fits(len as u64) {
            return Ok(None);
        }
        self.seal()
    }

    /// Append a chunk (sealing the open container first if it is full);
    /// returns the container it went into. `bytes` is ignored in trace mode.
    #[inline]
    pub fn push(
        &mut self,
        ids: &mut IdAllocator,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<ContainerId> {
        self.seal_if_full(len)?;
        Ok(self.append(ids, fp, len, bytes))
    }

    /// [`push`](Self::push) of a chunk's stored bytes as another container
    /// held them (GC's copy-forward: compressed and sealed bytes move as
    /// they are). `m` is the chunk's entry there.
    pub fn push_stored(
        &mut self,
        ids: &mut IdAllocator,
        m: &ChunkMeta,
        stored: &[u8],
    ) -> Result<ContainerId> {
        self.seal_if_full(m.len)?;
        if self.builder.is_empty() {
            self.id = ids.allocate();
        }
        self.builder.push_stored(m, stored);
        Ok(self.id)
    }

    /// [`push`](Self::push) of a chunk GC moves, as its old container
    /// holds it (see [`ContainerBuilder::push_source`]).
    pub fn push_source(
        &mut self,
        ids: &mut IdAllocator,
        m: &ChunkMeta,
        src: ChunkSource<'_>,
    ) -> Result<ContainerId> {
        self.seal_if_full(m.len)?;
        if self.builder.is_empty() {
            self.id = ids.allocate();
        }
        self.builder.push_source(m, src);
        Ok(self.id)
    }

    /// [`push`](Self::push) once [`seal_if_full`](Self::seal_if_full) made
    /// room (a chunk larger than the capacity gets an empty container).
    #[inline]
    pub fn append(
        &mut self,
        ids: &mut IdAllocator,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> ContainerId {
        debug_assert!(self.builder.fits(len as u64));
        if self.builder.is_empty() {
            self.id = ids.allocate();
        }
        self.builder.push(fp, len, bytes);
        self.id
    }

    /// End the open frame: the next chunk starts a new one.
    pub fn break_frame(&mut self) {
        self.builder.break_frame();
    }

    /// The open container, if it holds a chunk.
    #[inline]
    pub fn open(&self) -> Option<ContainerId> {
        (!self.builder.is_empty()).then_some(self.id)
    }

    /// Write the open container, if any; returns its entry.
    pub fn seal(&mut self) -> Result<Option<ContainerEntry>> {
        if self.builder.is_empty() {
            return Ok(None);
        }
        let t = Instant::now();
        let logical = self.builder.logical_len();
        let (entries, framed) = self.builder.take();
        let (object_bytes, buf) = self
            .store
            .write_framed(self.id, self.kind, &entries, framed)?;
        self.builder.recycle(buf);
        let entry = ContainerEntry::new(self.id, self.kind, entries.len(), logical, object_bytes);
        self.written.push(entry);
        self.write_seconds += t.elapsed().as_secs_f64();
        Ok(Some(entry))
    }

    /// The containers sealed so far, in the order written.
    pub fn written(&self) -> &[ContainerEntry] {
        &self.written
    }

    /// Seconds spent sealing (encoding and writing) containers.
    pub fn write_seconds(&self) -> f64 {
        self.write_seconds
    }
}
