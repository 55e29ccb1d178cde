//! The containers one backup (or interleaved group) writes: one open
//! container per kind, ids from one allocator (data and recipe containers
//! share the id sequence), and every sealed container in order.

use crate::catalog::ContainerEntry;
use crate::container::{ChunkKind, ContainerFiller, ContainerId, IdAllocator, PerKind};
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::Fingerprint;

pub struct BackupContainers {
    ids: IdAllocator,
    kinds: PerKind<ContainerFiller>,
    written: Vec<ContainerEntry>,
}

impl BackupContainers {
    /// The containers of a backup of `cx`; ids from its allocator (a joining
    /// writer's reserved range).
    pub fn new(cx: &Context) -> Self {
        let cfg = &cx.manifest.config;
        BackupContainers {
            ids: IdAllocator::new(cx.first_container_id()),
            kinds: PerKind::new(|kind| {
                ContainerFiller::new(cx.store.clone(), kind, cfg.container_size as u64, cfg.trace)
            }),
            written: Vec::new(),
        }
    }

    fn record(&mut self, sealed: Option<ContainerEntry>) -> Option<ContainerEntry> {
        self.written.extend(sealed);
        sealed
    }

    /// Seal the open container of `kind` if `len` more bytes do not fit;
    /// returns the container sealed.
    #[inline]
    pub fn seal_if_full(&mut self, kind: ChunkKind, len: u32) -> Result<Option<ContainerEntry>> {
        let sealed = self.kinds[kind].seal_if_full(len)?;
        Ok(self.record(sealed))
    }
    /// Append a chunk to the open container of `kind` (the caller made room
    /// with [`seal_if_full`](Self::seal_if_full)); returns its location.
    #[inline]
    pub fn append(
        &mut self,
        kind: ChunkKind,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> ContainerId {
        self.kinds[kind].append(&mut self.ids, fp, len, bytes)
    }
    /// The open container of `kind`, if it holds a chunk.
    #[inline]
    pub fn open(&self, kind: ChunkKind) -> Option<ContainerId> {
        self.kinds[kind].open()
    }
    /// End the open frame of `kind` containers (see
    /// [`ContainerFiller::break_frame`]).
    pub fn break_frame(&mut self, kind: ChunkKind) {
        self.kinds[kind].break_frame();
    }
    /// Write the open container of `kind`, if any.
    pub fn seal(&mut self, kind: ChunkKind) -> Result<Option<ContainerEntry>> {
        let sealed = self.kinds[kind].seal()?;
        Ok(self.record(sealed))
    }
    /// Containers written, in the order sealed (the manifest lists them so).
    pub fn written(&self) -> &[ContainerEntry] {
        &self.written
    }
    /// The allocator's next id (the manifest's new `next_container_id`).
    pub fn next_id(&self) -> ContainerId {
        self.ids.next_id()
    }
}
