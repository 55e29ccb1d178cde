//! MFDedup (`mfdedup-tos.md`): a layout that flattens deduplicated data by
//! chunk lifecycle, chosen at `init --layout mfdedup`.
//!
//! One repository holds several version chains (one per source). Within a
//! chain, NDF (`ndf.rs`) deduplicates a backup only against itself and the
//! chain's previous version, so every stored chunk is referenced by a run of
//! consecutive versions and belongs to exactly one category Cat.(n, m)
//! (`volume.rs`). A backup stores its unique chunks as a new category
//! Cat.(v, v) (pending until arranged); AVAR (`avar.rs`) then splits the
//! active categories Cat.(·, v−1) by whether version v references each
//! chunk: referenced chunks move on to Cat.(·, v), the rest are archived
//! into Volume v−1. Restore (`restore.rs`) reads exactly the categories a
//! version needs, volume by volume; forget (`forget.rs`) deletes the
//! categories whose lifecycle lies inside the forgotten versions, copying
//! nothing.
//!
//! The catalog lists every category part and recipe container as an
//! ordinary container (so leftovers, stats and check see them) and keeps
//! the chains in [`MfState`]. Recipes stay Merkle trees of fingerprints;
//! recipe chunks are deduplicated only within their backup, so forgetting a
//! backup deletes its recipe containers outright.

pub mod avar;
pub mod forget;
mod locate;
pub mod ndf;
pub mod restore;
mod state;
pub mod volume;

use crate::layout::contract::Layout;

use crate::catalog::LayoutKind;
use crate::catalog::{BackupEntry, BackupId, ContainerEntry, Manifest};
use crate::container::ChunkKind;
use crate::context::{Context, Locator};
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::index::Index;
use crate::ingest::{ArrangeReport, BackupHooks, BackupOptions};
use crate::restore::{RestoreOptions, RestoreReport, Restorer};
use locate::MfLocator;
use serde::Serialize;
pub use state::{Chain, ChainVersion, MfState, Run, Table};
use std::sync::Arc;
pub use volume::{Category, Volume};

/// The MFDedup layout (see the module docs).
#[derive(Default)]
pub struct MfdedupLayout {
    locator: Arc<MfLocator>,
}

/// What a backup on this layout swapped out of the repository: the recipe
/// index (restored afterwards), plus the NDF table size for the report.
/// The recipe index, set aside while a backup deduplicates against the
/// NDF index (kept in the context's memo from `begin` to `end`).
pub(crate) struct Stash {
    recipes: Index,
}

/// Before a backup of `chain`: load the previous version's NDF table as
/// the index ingest deduplicates against.
pub(crate) fn begin_backup(w: &mut Context, chain: &str) -> Result<Stash> {
    let state = MfState::of(&w.manifest)?;
    let prev = match state.chain(chain) {
        Some(c) => match c.table(c.tail()) {
            Some(t) => ndf::load_table(&w.objects, t.key)?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let ndf = ndf::index_of(&prev)?;
    let recipes = w.index.take();
    w.index.set(ndf);
    Ok(Stash { recipes })
}

/// After a backup (published or not): the recipe index comes back, with
/// the new backup's recipe chunks if it was published. Returns the NDF
/// index's memory at its peak (previous + current version). The recipe
/// index comes back even after an index error (the first is returned).
pub(crate) fn end_backup(w: &mut Context, stash: Stash, published: bool) -> Result<usize> {
    let ndf = w.index.take();
    let memory = ndf.memory_bytes();
    let mut recipes = stash.recipes;
    let mut done = Ok(());
    if published {
        for e in ndf.entries().filter(|e| e.kind == ChunkKind::Recipe) {
            done = done.and(recipes.insert(e));
        }
    }
    w.index.set(recipes);
    done.map(|()| memory)
}

/// In the manifest a backup publishes: its version of the chain, its
/// unique chunks as the pending Cat.(v, v), its recipe containers and its
/// NDF table (written here, made durable by the publish).
pub(crate) fn record_backup(
    repo: &Context,
    next: &mut Manifest,
    entry: &BackupEntry,
    written: &[ContainerEntry],
    refs: &[Fingerprint],
) -> Result<()> {
    let name = entry.chain.clone().unwrap_or_else(|| entry.name.clone());
    let table = ndf::distinct(refs);
    let mut state = MfState::of(next)?;
    let key = state.take_key();
    ndf::put_table(&repo.objects, key, &table)?;
    let ci = match state.chains.iter().position(|c| c.name == name) {
        Some(i) => i,
        None => {
            state.chains.push(Chain {
                name,
                next_version: 1,
                ..Default::default()
            });
            state.chains.len() - 1
        }
    };
    let chain = &mut state.chains[ci];
    let v = chain.next_version;
    chain.next_version += 1;
    let data: Vec<&ContainerEntry> = written
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .collect();
    if !data.is_empty() {
        chain.pending.push(Category {
            start: v,
            end: v,
            chunks: data.iter().map(|c| c.chunks as u64).sum(),
            bytes: data.iter().map(|c| c.logical_bytes).sum(),
            object_bytes: data.iter().map(|c| c.object_bytes).sum(),
            parts: data.iter().map(|c| c.id).collect(),
        });
    }
    chain.versions.push(ChainVersion {
        version: v,
        backup: entry.id,
        recipes: written
            .iter()
            .filter(|c| c.kind == ChunkKind::Recipe)
            .map(|c| c.id)
            .collect(),
    });
    chain.tables.push(Table {
        version: v,
        key,
        fingerprints: table.len() as u64,
    });
    MfState::set(next, &state);
    Ok(())
}

/// One chain in `tessera stats`.
#[derive(Clone, Debug, Serialize)]
pub struct ChainStats {
    pub name: String,
    pub versions: usize,
    pub newest_version: u32,
    pub arranged: u32,
    /// Versions backed up but not arranged yet.
    pub behind: u32,
    /// (volume version, chunk bytes, categories), oldest first.
    pub volumes: Vec<(u32, u64, usize)>,
    pub active_bytes: u64,
    pub active_categories: usize,
    pub pending_bytes: u64,
    /// Chunk bytes of every category of the chain.
    pub stored_bytes: u64,
    /// §4.6: each volume is what one version held that the next did not,
    /// so the mean of the newest three volumes estimates the next backup's
    /// unique bytes.
    pub next_unique_estimate: u64,
    /// NDF tables kept (and their fingerprints).
    pub ndf_tables: usize,
    pub ndf_fingerprints: u64,
}

pub(crate) fn chain_stats(m: &Manifest) -> Vec<ChainStats> {
    // Statistics only: an unreadable section shows no chains (check says why).
    MfState::of(m)
        .unwrap_or_default()
        .chains
        .iter()
        .map(|c| {
            let vols: Vec<_> = c
                .volumes
                .iter()
                .map(|v| (v.version, v.bytes(), v.categories.len()))
                .collect();
            let recent: Vec<u64> = vols.iter().rev().take(3).map(|v| v.1).collect();
            ChainStats {
                name: c.name.clone(),
                versions: c.versions.len(),
                newest_version: c.tail(),
                arranged: c.arranged,
                behind: c.behind(),
                active_bytes: c.active.iter().map(|x| x.bytes).sum(),
                active_categories: c.active.len(),
                pending_bytes: c.pending.iter().map(|x| x.bytes).sum(),
                stored_bytes: c.categories().map(|x| x.bytes).sum(),
                next_unique_estimate: if recent.is_empty() {
                    0
                } else {
                    recent.iter().sum::<u64>() / recent.len() as u64
                },
                ndf_tables: c.tables.len(),
                ndf_fingerprints: c.tables.iter().map(|t| t.fingerprints).sum(),
                volumes: vols,
            }
        })
        .collect()
}

impl Layout for MfdedupLayout {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Mfdedup
    }
    fn locator(&self) -> Arc<dyn Locator> {
        self.locator.clone()
    }
    fn backup_hooks(&self) -> &dyn BackupHooks {
        self
    }
    fn restorer(&self) -> &dyn Restorer {
        self
    }
    /// NDF and arranging change the chains' state, which a merge cannot
    /// combine: one writer at a time.
    fn concurrent_writers(&self) -> bool {
        false
    }
    fn mark_sweep(&self) -> Result<()> {
        Err(not_gc())
    }
    /// A version's chunks live in the categories of its chain by which
    /// versions reference them; a clone would have no categories of its
    /// own and be read from volumes that arranging and deletion reshape
    /// by chain position, so it would need its chunks copied: no fastcopy.
    fn fastcopy(&self) -> Result<()> {
        Err(Error::invalid(
            "the mfdedup layout cannot clone a backup: its chunks are arranged by the versions of a chain that reference them, so a clone sharing another version's recipe would need its data copied (back the data up again instead)",
        ))
    }
    fn index_on_disk(&self) -> Result<()> {
        Err(Error::invalid(
            "--index disk is not built for the mfdedup layout yet (its NDF index is per version chain); use --index memory",
        ))
    }
    /// Arrange the chains involved, then delete the categories whose
    /// lifecycle lies inside the forgotten versions.
    fn forget(&self, cx: &mut Context, ids: &[BackupId]) -> Result<Vec<BackupEntry>> {
        forget::forget(cx, ids).map(|(gone, _)| gone)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl BackupHooks for MfdedupLayout {
    /// Every backup belongs to a chain: its source's name when unnamed.
    fn chain(&self, opts: &BackupOptions) -> Option<String> {
        Some(opts.chain.clone().unwrap_or_else(|| opts.name.clone()))
    }
    fn check(&self, opts: &BackupOptions) -> Result<()> {
        if !matches!(opts.rewrite, crate::rewrite::RewriteSpec::None) {
            return Err(Error::invalid(
                "the mfdedup layout does not rewrite duplicates (it keeps every chunk's lifecycle in one category)",
            ));
        }
        Ok(())
    }
    fn check_interleaved(&self) -> Result<()> {
        Err(Error::invalid(
            "the mfdedup layout backs up one version of a chain at a time (no interleaved groups)",
        ))
    }
    /// NDF: the backup deduplicates against its chain's previous version.
    fn begin(&self, cx: &mut Context, chain: Option<&str>) -> Result<()> {
        let chain = chain.expect("every mfdedup backup has a chain");
        let stash = begin_backup(cx, chain)?;
        cx.memo.put(stash);
        Ok(())
    }
    fn end(&self, cx: &mut Context, published: bool) -> Result<Option<u64>> {
        let Some(stash) = cx.memo.take::<Stash>() else {
            return Ok(None);
        };
        Ok(Some(end_backup(cx, stash, published)? as u64))
    }
    fn collects_refs(&self) -> bool {
        true
    }
    fn writes_index_segment(&self) -> bool {
        false
    }
    fn record(
        &self,
        cx: &Context,
        next: &mut Manifest,
        entry: &BackupEntry,
        written: &[ContainerEntry],
        refs: &[Fingerprint],
    ) -> Result<()> {
        record_backup(cx, next, entry, written, refs)
    }
    /// AVAR: arrange the backup's chain right away unless asked not to.
    fn after(
        &self,
        cx: &mut Context,
        chain: Option<&str>,
        opts: &BackupOptions,
    ) -> Result<Option<ArrangeReport>> {
        match chain {
            Some(c) if opts.arrange => Ok(Some(avar::arrange_chain(cx, c, None)?)),
            _ => Ok(None),
        }
    }
}

impl Restorer for MfdedupLayout {
    fn restore_to(
        &self,
        cx: &Context,
        backup: &BackupEntry,
        out: &mut dyn std::io::Write,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Option<Result<RestoreReport>> {
        Some(restore::restore_to(cx, backup, out, opts, progress))
    }
    fn writes_in_place(&self) -> bool {
        true
    }
    fn restore_to_file(
        &self,
        cx: &Context,
        backup: &BackupEntry,
        file: &std::fs::File,
        opts: &RestoreOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<RestoreReport> {
        restore::restore_to_file(cx, backup, file, opts, progress)
    }
}

/// What mark-and-sweep GC says on this layout.
pub fn not_gc() -> Error {
    Error::invalid(
        "the mfdedup layout has no mark-and-sweep GC: forget deletes whole volumes and categories itself, copying nothing (`tessera gc` on this layout only deletes categories no retained version needs)",
    )
}
