//! HAR, history-aware rewriting (Fu et al., ATC'14): consecutive backups
//! share most of their fragmentation, so containers the previous backup used
//! sparsely are avoided by the next one — duplicates that would reference
//! them are rewritten. "Previous backup" means the previous backup of the
//! same chain (source): Destor keeps one dataset per store, and on a
//! repository of several sources a backup must not inherit another
//! source's containers (with a repository-wide list HAR did nothing on a
//! multi-source series).

use crate::container::ContainerId;
use crate::fingerprint::{Fingerprint, FpSet};
use crate::rewrite::policy::{RewritePolicy, Segment};
use std::collections::{HashMap, HashSet};

/// HAR with the sparse containers each stream inherited (one stream for a
/// single backup; one per member of an interleaved group).
pub struct Har {
    sparse: Vec<HashSet<ContainerId>>,
}

/// HAR's history in the manifest (section `har_history`): per chain, the
/// data containers its last HAR backup used sparsely; the chain's next HAR
/// backup rewrites duplicates held only there. Ids of containers that no
/// longer exist are ignored. (Format 8 manifests written before it kept one
/// repository-wide list under `har_sparse`; it is dropped at the next HAR
/// backup, which then starts without history, as a first backup does.)
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct HarHistory(pub std::collections::BTreeMap<String, Vec<ContainerId>>);

impl crate::catalog::Section for HarHistory {
    const NAME: &'static str = "har_history";
}

/// The repository-wide list older builds wrote; only ever removed.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct LegacySparse(Vec<ContainerId>);

impl crate::catalog::Section for LegacySparse {
    const NAME: &'static str = "har_sparse";
}

impl HarHistory {
    /// The manifest's history (empty when no HAR backup recorded one).
    pub fn of(m: &crate::catalog::Manifest) -> crate::error::Result<Self> {
        Ok(m.sections.get()?.unwrap_or_default())
    }

    /// The sparse list chain `chain` recorded last (empty if none).
    pub fn chain(&self, chain: &str) -> &[ContainerId] {
        self.0.get(chain).map_or(&[], |v| v.as_slice())
    }

    /// Record `chain`'s new list, and drop the ids of containers that no
    /// longer exist (`live`) from every chain, and chains left empty, so
    /// the section stays the size of what it can still name.
    pub fn record(&mut self, chain: &str, sparse: Vec<ContainerId>, live: &HashSet<ContainerId>) {
        self.0.insert(chain.to_string(), sparse);
        for v in self.0.values_mut() {
            v.retain(|c| live.contains(c));
        }
        self.0.retain(|_, v| !v.is_empty());
    }
}

impl Har {
    /// HAR whose stream `k` avoids the containers of `sparse[k]`.
    pub fn new(sparse: Vec<Vec<ContainerId>>) -> Self {
        Har {
            sparse: sparse
                .into_iter()
                .map(|s| s.into_iter().collect())
                .collect(),
        }
    }
}

impl RewritePolicy for Har {
    /// Reference the first copy outside a sparse container of the chunk's
    /// stream (the index's preferred copy first); rewrite if every copy is
    /// sparse.
    fn decide(&mut self, seg: &Segment) -> Vec<Option<ContainerId>> {
        let none = HashSet::new();
        seg.chunks
            .iter()
            .map(|c| {
                let sparse = self.sparse.get(c.stream).unwrap_or(&none);
                c.containers.iter().find(|id| !sparse.contains(id)).copied()
            })
            .collect()
    }
}

/// Default utilization below which a container is sparse (Destor, HAR).
pub const HAR_THRESHOLD: f64 = 0.5;
/// Default cap on the sparse list: its referenced bytes at most this share
/// of all the bytes the backup referenced (Destor: 5 %; the GCCDF artifact
/// uses 1 %, with threshold 0.7).
pub const HAR_LIMIT: f64 = 0.05;

/// Containers whose utilization by a backup (bytes of distinct chunks it
/// referenced in them / container capacity) is below `threshold`, sorted.
/// If they hold more than `limit` of all the bytes the backup referenced,
/// the most used are dropped from the list until they do not: rewriting
/// them would cost the most and gain the least.
pub fn har_sparse(
    used: &HashMap<ContainerId, u64>,
    capacity: u64,
    threshold: f64,
    limit: f64,
) -> Vec<ContainerId> {
    let mut v: Vec<(u64, ContainerId)> = used
        .iter()
        .filter(|(_, &b)| (b as f64) < threshold * capacity as f64)
        .map(|(&id, &b)| (b, id))
        .collect();
    let total: u64 = used.values().sum();
    let mut sparse: u64 = v.iter().map(|(b, _)| b).sum();
    // Least used first; ties by id, so the list is deterministic.
    v.sort_unstable();
    while sparse as f64 > limit * total as f64 {
        match v.pop() {
            Some((b, _)) => sparse -= b,
            None => break,
        }
    }
    let mut ids: Vec<ContainerId> = v.into_iter().map(|(_, id)| id).collect();
    ids.sort_unstable();
    ids
}

/// The sparse list a backup inherits: the manifest's list (written by the
/// previous HAR backup), without containers GC has since removed.
pub(crate) fn inherited_sparse(
    listed: &[ContainerId],
    live: &HashSet<ContainerId>,
) -> Vec<ContainerId> {
    listed
        .iter()
        .copied()
        .filter(|c| live.contains(c))
        .collect()
}

/// What HAR counts during a backup to mark the next backup's sparse
/// containers.
pub(crate) struct HarUse {
    threshold: f64,
    limit: f64,
    /// Distinct chunks seen so far in this backup.
    seen: FpSet,
    /// Bytes of distinct chunks this backup referenced, per container.
    used: HashMap<ContainerId, u64>,
}

impl HarUse {
    pub(crate) fn new(threshold: f64, limit: f64) -> Self {
        HarUse {
            threshold,
            limit,
            seen: FpSet::default(),
            used: HashMap::new(),
        }
    }

    /// The backup referenced `fp` (of `len` bytes) in `container`; only its
    /// first reference counts.
    pub(crate) fn referenced(&mut self, fp: Fingerprint, container: ContainerId, len: u32) {
        if self.seen.insert(fp) {
            *self.used.entry(container).or_default() += len as u64;
        }
    }

    /// The sparse list for the next backup (the manifest's `har_sparse`).
    pub(crate) fn sparse(&self, capacity: u64) -> Vec<ContainerId> {
        har_sparse(&self.used, capacity, self.threshold, self.limit)
    }
}
