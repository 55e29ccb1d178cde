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
pub mod ndf;
pub mod restore;
pub mod volume;

use super::{ContainerWriters, Layout};
use crate::backend::ObjectKey;
use crate::catalog::{BackupEntry, BackupId, ContainerEntry, Manifest};
use crate::container::{ChunkKind, ContainerId};
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap};
use crate::gc::mark::Mark;
use crate::gc::select::Selection;
use crate::gc::GcOptions;
use crate::index::{Index, IndexEntry};
use crate::repo::{Repository, Writer};
use serde::{Deserialize, Serialize};
pub use volume::{Category, Volume};

/// The MFDedup layout (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct MfdedupLayout;

/// Every chain of the repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MfState {
    pub chains: Vec<Chain>,
    /// Next id for volume header and NDF table objects.
    pub next_key: u64,
}

impl MfState {
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.next_key == 0
    }
    /// The volume and NDF table objects the state lists.
    pub fn keys(&self) -> impl Iterator<Item = ObjectKey> + '_ {
        self.chains.iter().flat_map(|c| {
            c.volumes
                .iter()
                .map(|v| ObjectKey::Volume(v.key))
                .chain(c.tables.iter().map(|t| ObjectKey::NdfTable(t.key)))
        })
    }
    pub fn chain(&self, name: &str) -> Option<&Chain> {
        self.chains.iter().find(|c| c.name == name)
    }
    /// The chain and version number of a backup.
    pub fn version_of(&self, id: BackupId) -> Option<(&Chain, u32)> {
        self.chains.iter().find_map(|c| {
            c.versions
                .iter()
                .find(|v| v.backup == id)
                .map(|v| (c, v.version))
        })
    }
    fn take_key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }
}

/// One source's versions and their layout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    pub name: String,
    /// Version number of the next backup (numbers start at 1, never reused).
    pub next_version: u32,
    /// Retained versions, oldest first.
    pub versions: Vec<ChainVersion>,
    /// The layout is arranged for versions ≤ this (0: none yet).
    pub arranged: u32,
    /// Active categories Cat.(i, arranged), by i, stored consecutively.
    pub active: Vec<Category>,
    /// Unique chunks of versions not yet arranged: Cat.(v, v), by v.
    pub pending: Vec<Category>,
    /// Volumes, by version.
    pub volumes: Vec<Volume>,
    /// NDF tables still needed: the unarranged versions' and the newest.
    pub tables: Vec<Table>,
}

impl Chain {
    /// The newest version number (forgotten or not); 0 for a new chain.
    pub fn tail(&self) -> u32 {
        self.next_version.saturating_sub(1)
    }
    /// Versions backed up but not arranged yet.
    pub fn behind(&self) -> u32 {
        self.tail() - self.arranged
    }
    pub fn retained(&self) -> Vec<u32> {
        self.versions.iter().map(|v| v.version).collect()
    }
    pub fn table(&self, version: u32) -> Option<&Table> {
        self.tables.iter().find(|t| t.version == version)
    }
    /// Every category with its place: (volume version or None for active /
    /// pending, category).
    pub fn categories(&self) -> impl Iterator<Item = &Category> {
        self.volumes
            .iter()
            .flat_map(|v| v.categories.iter())
            .chain(self.active.iter())
            .chain(self.pending.iter())
    }
    /// The categories restoring `version` reads, in disk order: volumes
    /// from `version` on (each a prefix: Cat.(1..=k, m)), then the active
    /// ones, then pending ones. A version not yet arranged needs every
    /// active and earlier pending category (§5.7: arranging behind).
    pub fn required(&self, k: u32) -> Vec<(Run, &Category)> {
        let mut out = Vec::new();
        if k <= self.arranged {
            for v in self.volumes.iter().filter(|v| v.version >= k) {
                for c in v.categories.iter().filter(|c| c.start <= k) {
                    out.push((Run::Volume(v.version), c));
                }
            }
            for c in self.active.iter().filter(|c| c.start <= k) {
                out.push((Run::Active, c));
            }
        } else {
            for c in &self.active {
                out.push((Run::Active, c));
            }
            for c in self.pending.iter().filter(|c| c.start <= k) {
                out.push((Run::Pending(c.start), c));
            }
        }
        out
    }
}

/// Where a category sits: which sequential run a restore reads it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Run {
    Volume(u32),
    Active,
    Pending(u32),
}

/// A retained version of a chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainVersion {
    pub version: u32,
    pub backup: BackupId,
    /// Its recipe containers (recipe chunks are deduplicated per backup).
    pub recipes: Vec<ContainerId>,
}

/// An NDF table object of one version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub version: u32,
    pub key: u64,
    /// Distinct data fingerprints in it.
    pub fingerprints: u64,
}

/// What a backup on this layout swapped out of the repository: the recipe
/// index (restored afterwards), plus the NDF table size for the report.
pub(crate) struct Stash {
    recipes: Index,
    prev: usize,
}

/// Before a backup of `chain`: refuse what the layout cannot do and load
/// the previous version's NDF table as the index ingest deduplicates against.
pub(crate) fn begin_backup(
    w: &mut Writer,
    chain: &str,
    rewrite: &crate::rewrite::RewriteSpec,
) -> Result<Stash> {
    if !matches!(rewrite, crate::rewrite::RewriteSpec::None) {
        return Err(Error::invalid(
            "the mfdedup layout does not rewrite duplicates (it keeps every chunk's lifecycle in one category)",
        ));
    }
    let prev = match w.manifest.mfdedup.chain(chain) {
        Some(c) => match c.table(c.tail()) {
            Some(t) => ndf::load_table(&w.objects, t.key)?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let ndf = ndf::index_of(&prev);
    let recipes = std::mem::replace(&mut w.index, ndf);
    Ok(Stash {
        recipes,
        prev: prev.len(),
    })
}

/// After a backup (published or not): the recipe index comes back, with
/// the new backup's recipe chunks if it was published. Returns the NDF
/// index's memory at its peak (previous + current version).
pub(crate) fn end_backup(w: &mut Writer, stash: Stash, published: bool) -> usize {
    let ndf = std::mem::take(&mut w.index);
    let memory = ndf.memory_bytes();
    let _ = stash.prev;
    let mut recipes = stash.recipes;
    if published {
        for e in ndf.entries().filter(|e| e.kind == ChunkKind::Recipe) {
            recipes.insert(e);
        }
    }
    w.index = recipes;
    memory
}

/// In the manifest a backup publishes: its version of the chain, its
/// unique chunks as the pending Cat.(v, v), its recipe containers and its
/// NDF table (written here, made durable by the publish).
pub(crate) fn record_backup(
    repo: &Repository,
    next: &mut Manifest,
    entry: &BackupEntry,
    written: &[ContainerEntry],
    refs: &[Fingerprint],
) -> Result<()> {
    let name = entry.chain.clone().unwrap_or_else(|| entry.name.clone());
    let table = ndf::distinct(refs);
    let key = next.mfdedup.take_key();
    ndf::put_table(&repo.objects, key, &table)?;
    let ci = match next.mfdedup.chains.iter().position(|c| c.name == name) {
        Some(i) => i,
        None => {
            next.mfdedup.chains.push(Chain {
                name,
                next_version: 1,
                ..Default::default()
            });
            next.mfdedup.chains.len() - 1
        }
    };
    let chain = &mut next.mfdedup.chains[ci];
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
    Ok(())
}

/// The recipe index of this layout: every recipe container's chunks (read
/// from container metadata; no data is read).
pub(crate) fn recipe_index(repo: &Repository) -> Result<Index> {
    let mut index = Index::default();
    for c in repo
        .manifest
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Recipe)
    {
        let (_, meta) = repo.store.read_meta(c.id)?;
        for m in meta {
            index.insert(IndexEntry {
                fp: m.fp,
                container: c.id,
                kind: ChunkKind::Recipe,
                copy: 0,
            });
        }
    }
    Ok(index)
}

/// Data chunk → one category part holding it, for check and salvage (any
/// copy has the same bytes). Built from part metadata on first use.
pub(crate) fn data_locations(repo: &Repository) -> FpMap<ContainerId> {
    let mut map = FpMap::default();
    for c in repo
        .manifest
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
    {
        if let Ok((_, meta)) = repo.store.read_meta(c.id) {
            for m in meta {
                map.entry(m.fp).or_insert(c.id);
            }
        }
    }
    map
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
    m.mfdedup
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
    type Index = Index;
    type Writer = ContainerWriters;
    type Swept = ();

    /// During a backup: the NDF index ([`begin_backup`] loads it).
    fn index(repo: &mut Repository) -> &mut Index {
        &mut repo.index
    }
    fn writer(&self, repo: &Repository) -> ContainerWriters {
        ContainerWriters::new(repo)
    }
    /// Recipe chunks through the recipe index; data chunks through their
    /// category parts (restore itself reads whole categories instead).
    fn locate(&self, repo: &Repository, kind: ChunkKind, fp: &Fingerprint) -> Option<ContainerId> {
        match kind {
            ChunkKind::Recipe => repo.index.get(kind, fp),
            ChunkKind::Data => repo
                .mf_located
                .get_or_init(|| data_locations(repo))
                .get(fp)
                .copied(),
        }
    }
    /// AVAR: arrange the chains of the new backups.
    fn after_backup(&self, repo: &mut Writer, backups: &[BackupEntry]) -> Result<()> {
        for b in backups {
            let name = b.chain.clone().unwrap_or_else(|| b.name.clone());
            avar::arrange_chain(repo, &name, None)?;
        }
        Ok(())
    }
    /// No copy-forward: forget already deleted whole categories.
    fn sweep(
        &self,
        _repo: &Repository,
        _mark: &Mark,
        _sel: &Selection,
        _opts: &GcOptions,
    ) -> Result<()> {
        Err(not_gc())
    }
}

/// What mark-and-sweep GC says on this layout.
pub fn not_gc() -> Error {
    Error::invalid(
        "the mfdedup layout has no mark-and-sweep GC: forget deletes whole volumes and categories itself, copying nothing (`tessera gc` on this layout only deletes categories no retained version needs)",
    )
}
