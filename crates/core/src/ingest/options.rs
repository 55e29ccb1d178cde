//! What a backup is asked and what it reports, and the [`BackupHooks`] a
//! layout gives ingest.

use crate::catalog::{BackupEntry, ContainerEntry, Manifest, SourceKind};
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use crate::recipe::RecipeEntry;
use crate::rewrite::RewriteSpec;
use serde::Serialize;
use std::time::Instant;

/// How a backup is named in the catalog, and how its duplicates are treated.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    pub name: String,
    pub source: SourceKind,
    /// Which duplicate chunks are written again to fight fragmentation.
    pub rewrite: RewriteSpec,
    /// Logical bytes of chunks per rewriting decision (the ingest segment);
    /// `None`: 5 containers of data ([`crate::rewrite::default_segment_bytes`]).
    pub segment_bytes: Option<u64>,
    /// Host, user, paths, tags and parent, recorded in the catalog entry.
    pub meta: crate::catalog::SnapshotMeta,
    /// The version chain (`--source`); the name when unset. Recorded in
    /// the catalog when set, always on the MFDedup layout.
    pub chain: Option<String>,
    /// MFDedup: arrange right after the backup (`--no-arrange` clears it).
    pub arrange: bool,
}

impl BackupOptions {
    /// A backup with the default policy (no rewriting).
    pub fn new(name: impl Into<String>, source: SourceKind) -> Self {
        BackupOptions {
            name: name.into(),
            source,
            rewrite: RewriteSpec::None,
            segment_bytes: None,
            meta: Default::default(),
            chain: None,
            arrange: true,
        }
    }
}

/// What a backup did.
#[derive(Clone, Debug, Serialize)]
pub struct BackupReport {
    pub backup: BackupEntry,
    pub logical_bytes: u64,
    /// Data bytes stored anew by this backup (rewritten copies included).
    pub stored_bytes: u64,
    pub duplicate_bytes: u64,
    pub chunks: u64,
    pub new_chunks: u64,
    pub duplicate_chunks: u64,
    pub new_recipe_chunks: u64,
    /// Duplicates the rewrite policy stored again (part of `stored_bytes`
    /// and `new_chunks`).
    pub rewritten_bytes: u64,
    pub rewritten_chunks: u64,
    /// Ingest segments the rewrite policy decided on (0 without rewriting).
    pub segments: u64,
    /// HAR: containers marked sparse for the next backup.
    pub sparse_containers: u64,
    pub data_containers_written: u64,
    pub recipe_containers_written: u64,
    pub seconds: f64,
    /// Logical MB (10^6 bytes) per second.
    pub throughput_mb_s: f64,
    /// MFDedup: memory of the NDF index at its peak (the previous and this
    /// version's fingerprints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ndf_memory_bytes: Option<u64>,
    /// MFDedup: the arranging that followed the backup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arranged: Option<ArrangeReport>,
    /// Where the logical bytes went: file contents and (directory backups)
    /// metadata, and how much of each was stored anew.
    pub content_bytes: u64,
    pub metadata_bytes: u64,
    pub new_content_bytes: u64,
    pub new_metadata_bytes: u64,
    /// Directory backups with the files cache: regular files whose
    /// contents were taken from it rather than read.
    pub files_from_cache: u64,
}

/// What MFDedup's arranging (AVAR) did to one chain: filled by the layout
/// after a backup (`BackupReport::arranged`) and by `tessera arrange`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ArrangeReport {
    pub chain: String,
    /// Versions arranged.
    pub steps: u32,
    /// Chunk bytes of the active categories read.
    pub read_bytes: u64,
    /// Moved on to the new active categories.
    pub kept_bytes: u64,
    /// Archived into volumes.
    pub archived_bytes: u64,
    pub volumes_written: u32,
    pub seconds: f64,
}

/// What a layout does around each backup, given to ingest by the layout
/// chosen when the repository opened (`layout::Layout::backup_hooks`).
/// The container layout does nothing ([`Plain`]); MFDedup deduplicates
/// against the chain's previous version only (NDF), records the version
/// in its chain and arranges it.
pub trait BackupHooks: Sync {
    /// The chain a backup belongs to: the one named, or, on a layout that
    /// keeps every backup in a chain, its name.
    fn chain(&self, opts: &BackupOptions) -> Option<String> {
        opts.chain.clone()
    }
    /// Refuse what this layout cannot back up (a rewrite policy).
    fn check(&self, _opts: &BackupOptions) -> Result<()> {
        Ok(())
    }
    /// Refuse interleaved groups where this layout cannot take them.
    fn check_interleaved(&self) -> Result<()> {
        Ok(())
    }
    /// Before the backup of `chain`: put in place the index it
    /// deduplicates against.
    fn begin(&self, _cx: &mut Context, _chain: Option<&str>) -> Result<()> {
        Ok(())
    }
    /// After it, published or not: the index back; returns the memory of
    /// the layout's own dedup index at its peak, if it has one. The index
    /// is back even after an error.
    fn end(&self, _cx: &mut Context, _published: bool) -> Result<Option<u64>> {
        Ok(None)
    }
    /// Whether the backup's data fingerprints are collected in order for
    /// [`record`](Self::record).
    fn collects_refs(&self) -> bool {
        false
    }
    /// Whether the backup's new index entries are written as an index
    /// segment (MFDedup keeps no global index).
    fn writes_index_segment(&self) -> bool {
        true
    }
    /// In the manifest the backup publishes: what the layout records of it.
    fn record(
        &self,
        _cx: &Context,
        _next: &mut Manifest,
        _entry: &BackupEntry,
        _written: &[ContainerEntry],
        _refs: &[Fingerprint],
    ) -> Result<()> {
        Ok(())
    }
    /// After the backup is published (MFDedup: arrange its chain).
    fn after(
        &self,
        _cx: &mut Context,
        _chain: Option<&str>,
        _opts: &BackupOptions,
    ) -> Result<Option<ArrangeReport>> {
        Ok(None)
    }
}

/// Backups with nothing around them (the container layout).
pub struct Plain;
impl BackupHooks for Plain {}

/// Counters kept by the worker.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(super) logical: u64,
    pub(super) chunks: u64,
    pub(super) new_bytes: u64,
    pub(super) new_chunks: u64,
    pub(super) new_recipe_chunks: u64,
    pub(super) rewritten_bytes: u64,
    pub(super) rewritten_chunks: u64,
    pub(super) segments: u64,
    /// Directory streams: where the metadata section starts.
    pub(super) meta_from: Option<u64>,
    /// New bytes of the metadata section (part of `new_bytes`).
    pub(super) new_meta_bytes: u64,
}

impl Counts {
    /// A new data chunk starting at stream offset `at` was stored.
    #[inline]
    pub(super) fn stored_new(&mut self, at: u64, len: u32) {
        self.new_bytes += len as u64;
        self.new_chunks += 1;
        if self.meta_from.is_some_and(|m| at >= m) {
            self.new_meta_bytes += len as u64;
        }
    }
}

/// A backup about to be committed: how it is named, its recipe root (and
/// level), and what its ingest counted.
pub(super) struct Member {
    pub(super) name: String,
    pub(super) chain: Option<String>,
    pub(super) source: SourceKind,
    pub(super) meta: crate::catalog::SnapshotMeta,
    pub(super) root: (RecipeEntry, u8),
    pub(super) counts: Counts,
}

/// The report of a committed backup. `io` is what the whole ingest did (for
/// an interleaved group, the group's containers).
pub(super) fn report(
    backup: BackupEntry,
    c: Counts,
    sparse_containers: u64,
    io: &crate::metrics::MetricsSnapshot,
    started: Instant,
) -> BackupReport {
    let secs = started.elapsed().as_secs_f64();
    let content = c.meta_from.unwrap_or(c.logical).min(c.logical);
    BackupReport {
        content_bytes: content,
        metadata_bytes: c.logical - content,
        new_content_bytes: c.new_bytes - c.new_meta_bytes,
        new_metadata_bytes: c.new_meta_bytes,
        files_from_cache: 0,
        logical_bytes: c.logical,
        stored_bytes: c.new_bytes,
        duplicate_bytes: c.logical - c.new_bytes,
        chunks: c.chunks,
        new_chunks: c.new_chunks,
        duplicate_chunks: c.chunks - c.new_chunks,
        new_recipe_chunks: c.new_recipe_chunks,
        rewritten_bytes: c.rewritten_bytes,
        rewritten_chunks: c.rewritten_chunks,
        segments: c.segments,
        sparse_containers,
        data_containers_written: io.data_containers_written,
        recipe_containers_written: io.recipe_containers_written,
        seconds: secs,
        throughput_mb_s: crate::metrics::mb_per_s(c.logical, secs),
        ndf_memory_bytes: None,
        arranged: None,
        backup,
    }
}
