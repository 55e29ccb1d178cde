//! Deletion without copying (MFDedup §4.5, Fig. 10) and exact space
//! answers (§4.6).
//!
//! Forgetting versions frees exactly the categories whose lifecycle holds
//! no retained version: forgetting the oldest version deletes whole
//! volumes; a version in the middle frees the categories that lie inside
//! the forgotten versions (a suffix of each volume it touches). No chunk is
//! copied; volume headers that lose categories are rewritten (they hold
//! sizes, not data). When the newest version of a chain is forgotten,
//! active categories may be freed too, and its NDF table loses their
//! fingerprints, so the next backup stores those chunks anew.
//!
//! What forgetting frees is computed from the catalog's copy of the volume headers
//! alone: `forget --dry-run` and `forget` run the same [`freeing`].

use super::avar;
use super::volume::{put_header, Category};
use crate::backend::ObjectKey;
use crate::catalog::{BackupEntry, BackupId, Manifest};
use crate::container::ContainerId;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::FpSet;
use crate::layout::mfdedup::state::MfState;
use serde::Serialize;
use std::collections::HashSet;

/// One category forgetting frees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FreedCategory {
    pub chain: String,
    pub start: u32,
    pub end: u32,
    /// The volume it is archived in (`None`: an active category).
    pub volume: Option<u32>,
    pub bytes: u64,
    pub object_bytes: u64,
}

/// What forgetting some backups frees, exactly.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ForgetSpace {
    pub categories: Vec<FreedCategory>,
    /// Chunk bytes freed (the categories' sizes from volume headers).
    pub data_bytes: u64,
    /// Bytes of the category part objects deleted.
    pub data_object_bytes: u64,
    /// Volumes deleted whole.
    pub volumes_deleted: usize,
    /// Bytes of the forgotten backups' recipe containers.
    pub recipe_object_bytes: u64,
    /// Chains with versions not yet arranged: `forget` arranges them first,
    /// so the answer above covers only what is already arranged.
    pub unarranged: Vec<String>,
}

/// The new state after forgetting `ids`, and what it frees.
pub(crate) struct Freeing {
    pub space: ForgetSpace,
    pub state: MfState,
    /// Volume headers to write (changed) and keys superseded.
    pub rewrite_volumes: Vec<(String, super::volume::Volume)>,
    pub superseded: Vec<ObjectKey>,
    /// Containers that leave the catalog.
    pub gone: HashSet<ContainerId>,
    /// Chains whose newest version's table must lose the freed active
    /// categories' fingerprints: (chain index, freed active categories).
    pub tail_filters: Vec<(usize, Vec<Category>)>,
}

pub(crate) fn freeing(m: &Manifest, ids: &[BackupId]) -> Result<Freeing> {
    let mut state = super::state::MfState::of(m)?;
    let mut space = ForgetSpace::default();
    let mut rewrite_volumes = Vec::new();
    let mut superseded = Vec::new();
    let mut gone = HashSet::new();
    let mut tail_filters = Vec::new();
    let object_bytes = |id: ContainerId| {
        m.containers
            .iter()
            .find(|c| c.id == id)
            .map_or(0, |c| c.object_bytes)
    };
    for (ci, chain) in state.chains.iter_mut().enumerate() {
        // No ids (gc): every chain is checked for categories no retained
        // version needs.
        if !ids.is_empty() && !chain.versions.iter().any(|v| ids.contains(&v.backup)) {
            continue;
        }
        if needs_arranging(chain, ids) {
            space.unarranged.push(chain.name.clone());
        }
        for v in chain.versions.iter().filter(|v| ids.contains(&v.backup)) {
            for &r in &v.recipes {
                space.recipe_object_bytes += object_bytes(r);
                gone.insert(r);
                superseded.push(ObjectKey::Container(r));
            }
        }
        chain.versions.retain(|v| !ids.contains(&v.backup));
        let retained = chain.retained();
        let name = chain.name.clone();
        let mut free = |c: &Category,
                        volume: Option<u32>,
                        space: &mut ForgetSpace,
                        superseded: &mut Vec<ObjectKey>| {
            space.categories.push(FreedCategory {
                chain: name.clone(),
                start: c.start,
                end: c.end,
                volume,
                bytes: c.bytes,
                object_bytes: c.object_bytes,
            });
            space.data_bytes += c.bytes;
            space.data_object_bytes += c.object_bytes;
            for &p in &c.parts {
                gone.insert(p);
                superseded.push(ObjectKey::Container(p));
            }
        };
        let mut volumes = Vec::new();
        for mut vol in std::mem::take(&mut chain.volumes) {
            let before = vol.categories.len();
            let (keep, freed): (Vec<_>, Vec<_>) =
                vol.categories.into_iter().partition(|c| c.live(&retained));
            for c in &freed {
                free(c, Some(vol.version), &mut space, &mut superseded);
            }
            vol.categories = keep;
            if vol.categories.len() == before {
                volumes.push(vol);
                continue;
            }
            superseded.push(ObjectKey::Volume(vol.key));
            if vol.categories.is_empty() {
                space.volumes_deleted += 1;
            } else {
                rewrite_volumes.push((chain.name.clone(), vol.clone()));
                volumes.push(vol);
            }
        }
        let (keep, freed): (Vec<_>, Vec<_>) = std::mem::take(&mut chain.active)
            .into_iter()
            .partition(|c| c.live(&retained));
        for c in &freed {
            free(c, None, &mut space, &mut superseded);
        }
        chain.volumes = volumes;
        chain.active = keep;
        if !freed.is_empty() {
            tail_filters.push((ci, freed));
        }
    }
    // New header keys, now that the state is no longer borrowed per chain.
    for (name, vol) in &mut rewrite_volumes {
        let key = state.take_key();
        let c = state.chains.iter_mut().find(|c| &c.name == name).unwrap();
        let v = c
            .volumes
            .iter_mut()
            .find(|v| v.version == vol.version)
            .unwrap();
        v.key = key;
        vol.key = key;
    }
    Ok(Freeing {
        space,
        state,
        rewrite_volumes,
        superseded,
        gone,
        tail_filters,
    })
}

/// Whether forgetting `ids` must arrange `chain` first: only when it is
/// behind and forgetting could touch its active categories, that is when a
/// forgotten version is not yet arranged or the newest arranged one goes.
/// Otherwise only archived categories (lifecycles ending before the newest
/// arranged version, which stays) can be freed, exactly as arranged, and
/// arranging may stay behind (§5.7).
fn needs_arranging(chain: &super::state::Chain, ids: &[BackupId]) -> bool {
    let gone: Vec<u32> = chain
        .versions
        .iter()
        .filter(|v| ids.contains(&v.backup))
        .map(|v| v.version)
        .collect();
    chain.behind() > 0
        && !gone.is_empty()
        && (gone.iter().any(|&v| v >= chain.arranged)
            || !chain.versions.iter().any(|v| v.version == chain.arranged))
}

/// [`Repository::forget_space`](crate::Repository::forget_space).
pub fn forget_space(repo: &Context, ids: &[BackupId]) -> Result<ForgetSpace> {
    check_ids(repo, ids)?;
    Ok(freeing(&repo.manifest, ids)?.space)
}

fn check_ids(repo: &Context, ids: &[BackupId]) -> Result<()> {
    for id in ids {
        if repo.manifest.backup(*id).is_none() {
            return Err(Error::Snapshot(format!(
                "no snapshot '{id}' (see `tessera snapshots`)"
            )));
        }
    }
    Ok(())
}

/// Forget `ids` on this layout: arrange their chains, then delete what
/// [`freeing`] frees and publish; returns the forgotten entries and the space.
pub fn forget(w: &mut Context, ids: &[BackupId]) -> Result<(Vec<BackupEntry>, ForgetSpace)> {
    check_ids(w, ids)?;
    let chains: Vec<String> = super::state::MfState::of(&w.manifest)?
        .chains
        .iter()
        .filter(|c| needs_arranging(c, ids))
        .map(|c| c.name.clone())
        .collect();
    for c in &chains {
        avar::arrange_chain(w, c, None)?;
    }
    let mut p = freeing(&w.manifest, ids)?;
    let mut next = w.manifest.clone();
    for (ci, freed) in &p.tail_filters {
        let chain = &mut p.state.chains[*ci];
        let tail = chain.tail();
        let Some(t) = chain.tables.iter().position(|t| t.version == tail) else {
            continue;
        };
        let mut drop = FpSet::default();
        for c in freed {
            for &part in &c.parts {
                let (_, meta) = w.store.read_meta(part)?;
                drop.extend(meta.iter().map(|m| m.fp));
            }
        }
        let old = chain.tables[t].key;
        let fps: Vec<_> = super::ndf::load_table(&w.objects, old)?
            .into_iter()
            .filter(|fp| !drop.contains(fp))
            .collect();
        p.state.next_key += 1;
        let key = p.state.next_key;
        super::ndf::put_table(&w.objects, key, &fps)?;
        let chain = &mut p.state.chains[*ci];
        chain.tables[t].key = key;
        chain.tables[t].fingerprints = fps.len() as u64;
        p.superseded.push(ObjectKey::NdfTable(old));
    }
    for (name, vol) in &p.rewrite_volumes {
        put_header(&w.objects, name, vol)?;
    }
    let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut next.backups)
        .into_iter()
        .partition(|b| ids.contains(&b.id));
    next.backups = kept;
    super::state::MfState::set(&mut next, &p.state);
    next.containers.retain(|c| !p.gone.contains(&c.id));
    crate::publish::publish(w, next, &p.superseded)?;
    let recipes = super::locate::recipe_index(w)?;
    w.index.set(recipes);
    Ok((gone, p.space))
}
