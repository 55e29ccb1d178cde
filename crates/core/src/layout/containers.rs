//! Today's layout: fixed-size containers filled in stream order, the exact
//! global [`Index`], copy-forward GC.

use super::{ChunkWriter, Layout};
use crate::catalog::{BackupEntry, ContainerEntry};
use crate::container::{
    ChunkKind, ChunkSealing, ContainerId, ContainerWriter, IdAllocator, PerKind, Presealed,
};
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use crate::gc::mark::Mark;
use crate::gc::select::Selection;
use crate::gc::sweep::{sweep_containers, Swept};
use crate::gc::GcOptions;
use crate::index::Index;
use crate::repo::{Repository, Writer};

/// Fixed-size containers (the default and, for now, only layout).
#[derive(Clone, Copy, Debug, Default)]
pub struct ContainerLayout;

/// One open container per kind, ids from one allocator (data and recipe
/// containers share the id sequence), and every sealed container in order.
pub struct ContainerWriters {
    ids: IdAllocator,
    kinds: PerKind<ContainerWriter>,
    written: Vec<ContainerEntry>,
}

impl ContainerWriters {
    pub fn new(repo: &Repository) -> Self {
        let cfg = &repo.manifest.config;
        ContainerWriters {
            ids: IdAllocator::new(repo.first_container_id()),
            kinds: PerKind::new(|kind| {
                ContainerWriter::new(
                    repo.store.clone(),
                    kind,
                    cfg.container_size as u64,
                    cfg.trace,
                )
            }),
            written: Vec::new(),
        }
    }

    fn record(&mut self, sealed: Option<ContainerEntry>) -> Option<ContainerEntry> {
        self.written.extend(sealed);
        sealed
    }
}

impl ChunkWriter for ContainerWriters {
    #[inline]
    fn seal_if_full(&mut self, kind: ChunkKind, len: u32) -> Result<Option<ContainerEntry>> {
        let sealed = self.kinds[kind].seal_if_full(len)?;
        Ok(self.record(sealed))
    }
    #[inline]
    fn append(&mut self, kind: ChunkKind, fp: Fingerprint, len: u32, bytes: &[u8]) -> ContainerId {
        self.kinds[kind].append(&mut self.ids, fp, len, bytes)
    }
    #[inline]
    fn open(&self, kind: ChunkKind) -> Option<ContainerId> {
        self.kinds[kind].open()
    }
    fn seal(&mut self, kind: ChunkKind) -> Result<Option<ContainerEntry>> {
        let sealed = self.kinds[kind].seal()?;
        Ok(self.record(sealed))
    }
    fn written(&self) -> &[ContainerEntry] {
        &self.written
    }
    fn next_id(&self) -> ContainerId {
        self.ids.next_id()
    }
    fn chunk_sealing(&self) -> Option<ChunkSealing> {
        self.kinds[ChunkKind::Data].chunk_sealing()
    }
    fn presealed(&mut self) -> Option<&mut Presealed> {
        Some(self.kinds[ChunkKind::Data].presealed())
    }
}

impl Layout for ContainerLayout {
    type Index = Index;
    type Writer = ContainerWriters;
    type Swept = Swept;

    fn index(repo: &mut Repository) -> &mut Index {
        &mut repo.index
    }
    fn writer(&self, repo: &Repository) -> ContainerWriters {
        ContainerWriters::new(repo)
    }
    /// The chunk's newest copy (what dedup references).
    fn locate(&self, repo: &Repository, kind: ChunkKind, fp: &Fingerprint) -> Option<ContainerId> {
        repo.index.get(kind, fp)
    }
    /// The copy a recipe names, wherever GC has moved it.
    fn locate_copy(
        &self,
        repo: &Repository,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: crate::index::CopyNo,
    ) -> Option<ContainerId> {
        repo.index.get_copy(kind, fp, copy)
    }
    /// Containers need no work after a backup.
    fn after_backup(&self, _repo: &mut Writer, _backups: &[BackupEntry]) -> Result<()> {
        Ok(())
    }
    /// Copy-forward of the selected containers' live chunks (naive or
    /// GCCDF order); the caller publishes with `gc::sweep::commit`.
    fn sweep(
        &self,
        repo: &Repository,
        mark: &Mark,
        sel: &Selection,
        opts: &GcOptions,
    ) -> Result<Swept> {
        sweep_containers(repo, mark, sel, opts)
    }
}
