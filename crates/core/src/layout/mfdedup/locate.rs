//! Where readers find chunks on this layout: the recipe index (recipe
//! chunks, from the recipe containers' metadata) and, for check and
//! salvage, data chunks through their category parts.

use crate::backend::Generation;
use crate::container::{ChunkKind, ContainerId};
use crate::context::{Context, Locator};
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpMap};
use crate::index::{CopyNo, Index, IndexEntry};
use std::sync::{Arc, RwLock};

/// Readers' chunk locations on this layout: recipe chunks through the
/// recipe index; data chunks through their category parts (restore itself
/// reads whole categories instead), a map built on first use for the
/// generation it was built on.
#[derive(Default)]
pub(super) struct MfLocator {
    located: RwLock<Option<(Generation, Arc<FpMap<ContainerId>>)>>,
}

impl MfLocator {
    fn data(&self, cx: &Context) -> Arc<FpMap<ContainerId>> {
        let generation = cx.manifest.generation;
        if let Some((g, map)) = &*self.located.read().expect("not poisoned") {
            if *g == generation {
                return map.clone();
            }
        }
        let map = Arc::new(data_locations(cx));
        *self.located.write().expect("not poisoned") = Some((generation, map.clone()));
        map
    }
}

impl Locator for MfLocator {
    /// MFDedup never rewrites: every chunk is copy 0.
    fn locate_copy(
        &self,
        cx: &Context,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId> {
        if copy != 0 {
            return None;
        }
        match kind {
            ChunkKind::Recipe => cx.index.get(kind, fp),
            ChunkKind::Data => self.data(cx).get(fp).copied(),
        }
    }
    /// This layout writes no index segments: its index holds the recipe
    /// chunks, read from the recipe containers' metadata.
    fn own_index(&self, cx: &Context) -> Option<Result<Index>> {
        Some(recipe_index(cx))
    }
}

/// The recipe index of this layout: every recipe container's chunks (read
/// from container metadata; no data is read).
pub(crate) fn recipe_index(repo: &Context) -> Result<Index> {
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
            })?;
        }
    }
    Ok(index)
}

/// Data chunk → one category part holding it, for check and salvage (any
/// copy has the same bytes). Built from part metadata on first use.
pub(crate) fn data_locations(repo: &Context) -> FpMap<ContainerId> {
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
