//! MFDedup's state in the manifest (section `mfdedup`): each version
//! chain's versions, NDF tables, pending and active categories, and
//! volumes.

use super::volume::{Category, Volume};
use crate::backend::ObjectKey;
use crate::catalog::{BackupId, Manifest};
use crate::container::ContainerId;
use crate::error::Result;
use serde::{Deserialize, Serialize};

/// Every chain of the repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MfState {
    pub chains: Vec<Chain>,
    /// Next id for volume header and NDF table objects.
    pub next_key: u64,
}

impl crate::catalog::Section for MfState {
    const NAME: &'static str = "mfdedup";
}

impl MfState {
    /// The manifest's MFDedup state (empty on the container layout).
    pub fn of(m: &Manifest) -> Result<MfState> {
        Ok(m.sections.get()?.unwrap_or_default())
    }
    /// Record `state` in `m` (an empty state is not written).
    pub fn set(m: &mut Manifest, state: &MfState) {
        m.sections.put((!state.is_empty()).then_some(state))
    }
    /// The volume and NDF table objects `m` lists.
    pub fn listed_keys(m: &Manifest) -> Vec<ObjectKey> {
        Self::of(m).map(|s| s.keys().collect()).unwrap_or_default()
    }
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
    pub(crate) fn take_key(&mut self) -> u64 {
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
