//! Storage layouts: where a backup's chunks go, where a restore finds them,
//! what runs after a backup and how GC frees space.
//!
//! Today there is one layout, [`ContainerLayout`]: fixed-size containers
//! filled in stream order, a global exact index, copy-forward GC. Ingest is
//! generic over [`Layout`] (its sink holds a `L::Index` and a `L::Writer`),
//! so the per-chunk path is monomorphized: no dynamic dispatch per chunk.
//!
//! # How MFDedup plugs in
//! MFDedup (`mfdedup-tos.md`, issue 14) adds `layout/mfdedup/` with
//! - `ndf.rs`: the NDF index (fingerprint tables of this and the previous
//!   version of the same source), implementing [`DedupIndex`] — its
//!   `Cursor` can stay `()`, its locations are category ids;
//! - `volume.rs`: categories (variable-sized containers, written through a
//!   [`ChunkWriter`] that puts one backup's unique chunks into its new active
//!   category) and volumes with their headers;
//! - `avar.rs`: arranging, run from [`Layout::after_backup`] (archived
//!   categories into the newest volume, referenced chunks into the new
//!   active categories);
//! - `mod.rs`: `MfdedupLayout: Layout`, whose [`Layout::sweep`] deletes whole
//!   volumes and categories instead of copying forward, and whose
//!   [`Layout::locate`] answers fingerprint → category for restore.
//!
//! Restore's planner, salvage, check and GC's mark find chunks through
//! `Repository::locate` and GC sweeps through [`Layout::sweep`]; both call
//! [`ContainerLayout`] today and dispatch on the repository's layout once a
//! second one exists. GC's select and sweep still ask the index whether a
//! container's copy is the indexed one: that is container-layout logic.

mod containers;
pub mod mfdedup;

pub use containers::{ContainerLayout, ContainerWriters};
pub use mfdedup::MfdedupLayout;

/// Which layout a repository uses, fixed at `init --layout`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    /// Fixed-size containers in stream order ([`ContainerLayout`]).
    #[default]
    Containers,
    /// MFDedup's lifecycle categories and volumes ([`MfdedupLayout`]).
    Mfdedup,
}

impl LayoutKind {
    pub fn is_containers(&self) -> bool {
        *self == LayoutKind::Containers
    }
}

impl std::fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LayoutKind::Containers => "containers",
            LayoutKind::Mfdedup => "mfdedup",
        })
    }
}

impl std::str::FromStr for LayoutKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "containers" | "container" => Ok(LayoutKind::Containers),
            "mfdedup" => Ok(LayoutKind::Mfdedup),
            _ => Err(format!(
                "unknown layout '{s}' (expected containers or mfdedup)"
            )),
        }
    }
}

use crate::catalog::{BackupEntry, ContainerEntry};
use crate::container::{ChunkKind, ChunkSealing, ContainerId, Presealed};
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use crate::gc::mark::Mark;
use crate::gc::select::Selection;
use crate::gc::GcOptions;
use crate::index::DedupIndex;
use crate::repo::{Repository, Writer};

/// Writes a backup's chunks into the layout's storage units (containers
/// here; categories under MFDedup). Ids come from the manifest's allocator.
pub trait ChunkWriter: Send + 'static {
    /// Seal the open unit of `kind` if `len` more bytes do not fit; returns
    /// the unit sealed.
    fn seal_if_full(&mut self, kind: ChunkKind, len: u32) -> Result<Option<ContainerEntry>>;
    /// Append a chunk to the open unit of `kind` (the caller made room with
    /// [`seal_if_full`](Self::seal_if_full)); returns its location.
    fn append(&mut self, kind: ChunkKind, fp: Fingerprint, len: u32, bytes: &[u8]) -> ContainerId;
    /// The open unit of `kind`, if it holds a chunk.
    fn open(&self, kind: ChunkKind) -> Option<ContainerId>;
    /// Write the open unit of `kind`, if any.
    fn seal(&mut self, kind: ChunkKind) -> Result<Option<ContainerEntry>>;
    /// Units written, in the order sealed (the manifest lists them so).
    fn written(&self) -> &[ContainerEntry];
    /// The allocator's next id (the manifest's new `next_container_id`).
    fn next_id(&self) -> ContainerId;
    /// How data chunks are compressed and sealed, so that ingest's workers
    /// can do it ahead of [`append`](Self::append) (`None`: the writer
    /// stores them as they are, or does not take chunks sealed ahead).
    fn chunk_sealing(&self) -> Option<ChunkSealing> {
        None
    }
    /// Data chunks sealed ahead, which `append` uses instead of sealing
    /// (only asked when [`chunk_sealing`](Self::chunk_sealing) is `Some`).
    fn presealed(&mut self) -> Option<&mut Presealed> {
        None
    }
}

/// A storage layout (see the module docs).
pub trait Layout: Send + Sized + 'static {
    /// What ingest deduplicates against.
    type Index: DedupIndex;
    /// Where a backup's chunks are written.
    type Writer: ChunkWriter;
    /// What a GC sweep produced, for the caller to report and publish.
    type Swept;

    /// The repository's index of this layout (ingest takes it for the
    /// duration of a backup and gives it back).
    fn index(repo: &mut Repository) -> &mut Self::Index;
    /// A writer for one backup (or interleaved group).
    fn writer(&self, repo: &Repository) -> Self::Writer;
    /// Where the chunk `fp` of `kind` is found (its newest copy).
    fn locate(&self, repo: &Repository, kind: ChunkKind, fp: &Fingerprint) -> Option<ContainerId>;
    /// Where a restore reads copy `copy` of the chunk `fp` (the copy a
    /// recipe entry names). A layout without rewriting has copy 0 alone.
    fn locate_copy(
        &self,
        repo: &Repository,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: crate::index::CopyNo,
    ) -> Option<ContainerId> {
        (copy == 0).then(|| self.locate(repo, kind, fp)).flatten()
    }
    /// Runs once `backups` are published (MFDedup arranges here).
    fn after_backup(&self, repo: &mut Writer, backups: &[BackupEntry]) -> Result<()>;
    /// Free the space of the containers GC selected.
    fn sweep(
        &self,
        repo: &Repository,
        mark: &Mark,
        sel: &Selection,
        opts: &GcOptions,
    ) -> Result<Self::Swept>;
}
