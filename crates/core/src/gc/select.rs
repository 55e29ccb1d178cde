//! Select: which GC-involved containers the sweep cleans. Involved are the
//! containers that hold a dead chunk or that a backup forgotten since the
//! last GC referenced; only those holding a dead chunk are cleaned. A
//! container with no live chunk is simply deleted; one with live chunks is
//! copied forward when its liveness (live bytes / container bytes) is below
//! the threshold (always, at threshold 1.0), and never under CMA
//! ([`Keep::WholeIfLive`]), which only deletes containers with no live
//! chunk, recipe containers included.
//!
//! After a PGC+ mark, which keeps no live-instance information, a data
//! container's live chunks are its *unique* live chunks as FAST'17 §3.4.2
//! estimates them: live chunks minus live duplicates, where live duplicates
//! are the analysis phase's duplicate count minus the dead duplicates found
//! walking the containers newest to oldest with a small dead vector.

use super::bloom::Bloom;
use super::mark::{Live, Mark};
use super::phase::PhaseClock;
use crate::catalog::ContainerEntry;
use crate::container::{ChunkKind, ContainerId};
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::FpSet;
use std::collections::{HashMap, HashSet};

#[derive(Default, Debug)]
pub struct Selection {
    /// Data containers holding a dead chunk, in id (old) order.
    pub involved: Vec<ContainerEntry>,
    /// Involved data containers with no live chunk: deleted without a read.
    pub empty: Vec<ContainerId>,
    /// Involved data containers whose live chunks are copied forward.
    pub copy: Vec<ContainerId>,
    /// Live bytes of the containers in `copy`.
    pub copy_live_bytes: u64,
    pub recipe_involved: Vec<ContainerEntry>,
    pub recipe_empty: Vec<ContainerId>,
    pub recipe_copy: Vec<ContainerId>,
}

/// Which containers holding a dead chunk select sends to the copy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Keep {
    /// Copy forward those whose liveness is below the threshold (every one
    /// at 1.0); leave the others.
    Threshold(f64),
    /// CMA: copy none; a container with any live chunk stays whole.
    WholeIfLive,
}

impl Keep {
    pub fn of(opts: &super::options::GcOptions) -> Keep {
        match opts.strategy {
            super::options::GcStrategy::Cma => Keep::WholeIfLive,
            _ => Keep::Threshold(opts.liveness_threshold),
        }
    }

    fn copies(self, liveness: f64) -> bool {
        match self {
            Keep::Threshold(t) => t >= 1.0 || liveness < t,
            Keep::WholeIfLive => false,
        }
    }
}

pub fn select(
    repo: &Context,
    mark: &Mark,
    keep: Keep,
    clock: &mut PhaseClock,
) -> Result<Selection> {
    let mut s = Selection::default();
    let gs = deleted_references(repo);
    let mut containers: Vec<ContainerEntry> = repo.manifest.containers.clone();
    containers.sort_by_key(|c| c.id);
    // PGC+'s unique-liveness estimate leaves older live copies to its copy
    // phase; CMA has none, so it counts live copies as they are.
    let unique = match &mark.dup_counter {
        Some(dup) if keep != Keep::WholeIfLive => {
            Some(unique_liveness(repo, mark, dup, &containers, clock)?)
        }
        _ => None,
    };
    for c in containers {
        match c.kind {
            ChunkKind::Data => {
                if mark.focus.as_ref().is_some_and(|f| !f.contains(&c.id)) {
                    // Sampling: only the candidates were marked exactly.
                    continue;
                }
                let live = match (&unique, &mark.live) {
                    (Some(u), _) => u.get(&c.id).copied().unwrap_or_default(),
                    (None, Some(l)) if mark.dup_counter.is_none() => {
                        l.get(&c.id).copied().unwrap_or_default()
                    }
                    (None, _) => live_from_meta(repo, mark, c.id, clock)?,
                };
                if live.chunks >= c.chunks {
                    // Referenced by a deleted backup but fully live: involved,
                    // examined and skipped (as the papers count it).
                    if gs.contains(&c.id) {
                        s.involved.push(c);
                    }
                    continue;
                }
                s.involved.push(c);
                let liveness = if c.logical_bytes == 0 {
                    0.0
                } else {
                    live.bytes as f64 / c.logical_bytes as f64
                };
                if live.chunks == 0 {
                    s.empty.push(c.id);
                } else if keep.copies(liveness) {
                    s.copy.push(c.id);
                    s.copy_live_bytes += live.bytes;
                }
            }
            ChunkKind::Recipe => {
                let live = mark.live_recipe.get(&c.id).copied().unwrap_or(0);
                if live >= c.chunks {
                    continue;
                }
                s.recipe_involved.push(c);
                if live == 0 {
                    s.recipe_empty.push(c.id);
                } else if keep != Keep::WholeIfLive {
                    s.recipe_copy.push(c.id);
                }
            }
        }
    }
    Ok(s)
}

/// Data containers that chunks of the backups forgotten since the last GC
/// are found in (through the index): the GS list of containers a deletion
/// involves. Best effort: a recipe that can no longer be read (say, removed
/// by hand) only makes the count smaller; reclaiming never depends on it.
fn deleted_references(repo: &Context) -> HashSet<ContainerId> {
    let mut gs = HashSet::new();
    let Ok(mut recipes) = repo.recipe_reader(16) else {
        return gs;
    };
    for b in &repo.manifest.forgotten {
        let Ok(root) = b.root_fp() else { continue };
        let Ok(mut w) = recipes.entries(root, b.root_level) else {
            continue;
        };
        while let Ok(Some(e)) = w.next() {
            if let Some(c) = repo.locate_copy(ChunkKind::Data, &e.fp, e.copy) {
                gs.insert(c);
            }
        }
    }
    gs
}

/// With a Bloom VC the live chunks of a container are counted from its
/// metadata (read without its data, as the physical-GC paper's mark does).
fn live_from_meta(
    repo: &Context,
    mark: &Mark,
    id: ContainerId,
    clock: &mut PhaseClock,
) -> Result<Live> {
    let meta = clock.read_meta(repo, id)?;
    let mut live = Live::default();
    let mut seen = FpSet::default();
    let mut copies = Vec::new();
    for m in meta {
        mark.live_copies_in(&repo.index, &m.fp, id, &mut copies);
        if !copies.is_empty() && seen.insert(m.fp) {
            live.chunks += 1;
            live.bytes += m.len as u64;
        }
    }
    Ok(live)
}

/// PGC+'s liveness estimate (§3.4.2): per data container, live chunks (by
/// the live vector alone) minus live duplicates, where live duplicates =
/// the analysis phase's duplicate count − the dead duplicates this walk,
/// newest container first, finds with a small dead vector (a Bloom filter:
/// a false positive only overcounts dead duplicates, so liveness is
/// overestimated and less is cleaned, never more). Bytes scale with chunks.
fn unique_liveness(
    repo: &Context,
    mark: &Mark,
    dup: &HashMap<ContainerId, u32>,
    containers: &[ContainerEntry],
    clock: &mut PhaseClock,
) -> Result<HashMap<ContainerId, Live>> {
    let data: Vec<&ContainerEntry> = containers
        .iter()
        .rev()
        .filter(|c| c.kind == ChunkKind::Data)
        .collect();
    // Dead chunks are about a tenth of the live ones (§3.4.2); size for
    // all chunks of the containers holding duplicates, at least 1024.
    let expected: u64 = data
        .iter()
        .filter(|c| dup.contains_key(&c.id))
        .map(|c| c.chunks as u64)
        .sum();
    let mut dead = Bloom::new((expected as usize).max(1024), 0.01);
    let mut out = HashMap::new();
    for c in data {
        let (mut live, mut live_bytes, mut dead_dup) = (0u32, 0u64, 0u32);
        let mut here = Vec::new();
        for m in clock.read_meta(repo, c.id)? {
            // Per-backup copies: live if a copy the index places here is.
            mark.live_copies_in(&repo.index, &m.fp, c.id, &mut here);
            if !here.is_empty() {
                live += 1;
                live_bytes += m.len as u64;
            } else if dup.contains_key(&c.id) && dead.contains(&m.fp) {
                dead_dup += 1;
            } else {
                dead.insert(&m.fp);
            }
        }
        let live_dup = dup
            .get(&c.id)
            .copied()
            .unwrap_or(0)
            .saturating_sub(dead_dup);
        let unique = live.saturating_sub(live_dup);
        let bytes = if live == 0 {
            0
        } else {
            (live_bytes as u128 * unique as u128 / live as u128) as u64
        };
        out.insert(
            c.id,
            Live {
                chunks: unique,
                bytes,
            },
        );
    }
    Ok(out)
}
