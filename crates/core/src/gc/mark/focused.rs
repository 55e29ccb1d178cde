//! The focused mark (FGC, §IV-D): walk only the deleted backups and their
//! correlative backups, not every retained one.
//!
//! CorrTracker (pre-calculation): the deleted virtual files are those of
//! every backup the graph knows that is no longer retained (the backups
//! forgotten since the last GC, and any an earlier non-focused GC left in
//! the graph). A chunk of a deleted backup is live iff a retained virtual
//! file references it; by the graph's invariant (see [`crate::fgc`])
//! that is its base, or, if its base was deleted, a retained leaf of that
//! base. A retained base needs no walk (a base references its chunks), so
//! the correlative virtual files are the retained leaves of deleted bases
//! (the paper also walks the retained bases of deleted leaves; the base
//! pointer kept per chunk answers that without reading their recipes):
//!
//! 1. walking the correlative virtual files fills the liveness array (an
//!    exact set, a Bloom filter or a perfect-hash vector: `--vc`);
//! 2. walking the deleted backups, each copy they name whose base is
//!    deleted and that is missing from the array is dead; everything else
//!    is left live (garbage from before the deletion waits for a full
//!    mark);
//! 3. the graph is updated (§IV-C): deleted vertices go, and each live
//!    chunk whose base was deleted gets the earliest correlative virtual
//!    file referencing it as its new base, with edges from the others.
//!
//! The per-container live counts come from the catalog minus the dead
//! stored chunks, so only the deleted and correlative recipes are read.

use super::liveness::{FocusStats, FpFilter, Live, Mark, Marker, VcSpec};
use crate::catalog::{BackupEntry, BackupId};
use crate::container::{ChunkKind, ContainerId};
use crate::context::Context;
use crate::error::Result;
use crate::fgc::{walk_backup, CopyMap, RefGraph, RefGraphState, VFile, WHOLE};
use crate::fingerprint::{Fingerprint, FpSet};
use crate::index::CopyNo;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FocusedMark {
    /// The liveness array.
    pub vc: VcSpec,
    /// Virtual-file size for a graph built here (none recorded yet, or a
    /// rebuild asked for another); `None`: the recorded graph's, else 0.
    pub granularity: Option<u64>,
    /// `Some(rate)`: also compute the ownership GCCDF's sweep needs (the
    /// RRT and per-backup filters) for the containers holding dead chunks;
    /// see [`ownership`].
    pub owners_fp_rate: Option<f64>,
    /// Run the full mark when the focus covers most of the repository
    /// ([`Estimate::covers_most`]).
    pub fallback: bool,
    /// The GC publishes the graph it builds (false for a dry run): a
    /// graph built where none is recorded is an investment only then.
    pub keeps_graph: bool,
}

impl Marker for FocusedMark {
    fn mark(&self, repo: &Context) -> Result<Mark> {
        // Loading the recorded graph is part of the focused mark's cost: a
        // process that did not record it reads every segment first. When
        // that and the deleted backups' recipes alone reach the full
        // mark's share, the graph is not even loaded.
        let kept = crate::fgc::kept_graph(repo);
        let graph_cost = match RefGraphState::of(&repo.manifest)? {
            Some(state) if self.fallback && kept.is_none() => state
                .segments
                .iter()
                .map(|k| repo.objects.store().size(k))
                .sum::<Result<u64>>()?,
            _ => 0,
        };
        let mut before = Estimate::deleted(repo)?;
        before.focus_bytes += graph_cost;
        if self.fallback && graph_cost > 0 && before.leaves_too_little_for_the_graph() {
            return self.full_mark(repo, before);
        }
        let recorded = match kept {
            Some(g) => Some(g),
            None => RefGraph::load(repo)?,
        };
        let usable = recorded
            .as_ref()
            .is_some_and(|g| self.granularity.is_none_or(|want| want == g.granularity));
        if self.fallback && !usable && !self.keeps_graph {
            // Building the graph reads every recipe, and a dry run keeps
            // nothing of it: the full mark costs less.
            let mut e = Estimate::deleted(repo)?;
            e.focus_bytes += e.full_bytes;
            e.focus_entry_bytes += e.full_entry_bytes;
            return self.full_mark(repo, e);
        }
        let (graph, rebuilt) = match recorded {
            Some(g) if self.granularity.is_none_or(|want| want == g.granularity) => (g, false),
            _ => (
                RefGraph::rebuild(repo, self.granularity.unwrap_or(0))?,
                true,
            ),
        };
        let mut estimate = Estimate::of(repo, &graph)?;
        estimate.focus_bytes += if rebuilt { 0 } else { graph_cost };
        // A rebuilt graph has read every recipe already: the focus costs
        // less than marking everything again.
        if self.fallback && !rebuilt && estimate.covers_most() {
            return self.full_mark(repo, estimate);
        }
        let (mut m, mut stats, graph) = focus(repo, graph, self.vc, self.owners_fp_rate)?;
        stats.rebuilt = rebuilt;
        stats.focus_estimate_bytes = estimate.focus_bytes;
        stats.full_estimate_bytes = estimate.full_bytes;
        stats.focus_estimate_entry_bytes = estimate.focus_entry_bytes;
        stats.full_estimate_entry_bytes = estimate.full_entry_bytes;
        stats.base_map_bytes = graph.base_map_bytes() as u64;
        stats.graph_bytes = graph.edges_bytes() as u64;
        // The mark's own memory: its tables and the reference graph's
        // edges (the paper's Fig. 8b). The base map (a base per stored
        // chunk) is reported on its own: FGC keeps it in the fingerprint
        // index, which no mark's memory counts.
        m.memory_bytes += stats.graph_bytes;
        m.fgc = Some(stats);
        m.refgraph = Some(graph);
        Ok(m)
    }
}

impl FocusedMark {
    /// The full (logical) mark in the focused mark's place, saying so.
    fn full_mark(&self, repo: &Context, estimate: Estimate) -> Result<Mark> {
        let mut m = super::logical::LogicalMark {
            vc: self.vc,
            owners_fp_rate: self.owners_fp_rate,
            walk_shared: false,
        }
        .mark(repo)?;
        // The graph keeps the deleted vertices; the next focused mark
        // treats them as deleted (as after any full GC).
        m.fgc = Some(FocusStats {
            deleted_backups: repo.manifest.forgotten.len(),
            fell_back: true,
            focus_estimate_bytes: estimate.focus_bytes,
            full_estimate_bytes: estimate.full_bytes,
            focus_estimate_entry_bytes: estimate.focus_entry_bytes,
            full_estimate_entry_bytes: estimate.full_entry_bytes,
            ..Default::default()
        });
        Ok(m)
    }
}

/// Bytes of a level-1 recipe entry (`recipe/tree.rs`: fingerprint, size
/// and copy): how much of its recipe containers a backup's recipe spans.
const RECIPE_ENTRY_BYTES: u64 = crate::fingerprint::FP_LEN as u64 + 8;

/// The focused mark falls back to the full one when its focus is at least
/// this share of what the full mark would read: past it, walking the
/// deleted and correlative backups (their shared subtrees again, for the
/// per-virtual-file bases) costs about as much as walking everything once.
pub const FALLBACK_SHARE: f64 = 0.5;

/// What each mark would read, estimated from the catalog, the index and
/// the graph alone (before any recipe is read), in two units:
///
/// - recipe *container* bytes, what both marks read from the store: many
///   small backups share a recipe container (a manifest generation seals
///   the recipes of every backup it publishes together), so counting
///   entries made 15,000 files of 100,000 look like 19 % of the full mark
///   when they touched every recipe container (issue 31's `fgc-files-90`);
/// - recipe *entry* bytes, what the walks visit: the focused walk visits a
///   shared subtree again per backup, where the full mark skips it.
///
/// The focused mark falls back when it would read more containers than the
/// full mark, or visit at least [`FALLBACK_SHARE`] of its entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Recipe container bytes the focus reads (each container holding a
    /// deleted or correlative backup's recipe root once per pass, plus
    /// what larger recipes span beyond it), plus the recorded graph's
    /// segments when they must be read first.
    pub focus_bytes: u64,
    /// Recipe container bytes stored: the full mark reads every one.
    pub full_bytes: u64,
    /// Recipe entry bytes the focus visits.
    pub focus_entry_bytes: u64,
    /// Recipe entry bytes the full mark visits (every retained backup's,
    /// at most the recipe bytes stored: it visits a shared subtree once).
    pub full_entry_bytes: u64,
}

/// A deleted backup's chunk copy (recipe or data, fingerprint, copy) whose
/// base is not retained, held with its size to judge after the one pass:
/// once per copy however many deleted backups name it.
type DeferredKey = (bool, Fingerprint, CopyNo);

/// Memory a held copy costs at most: its table entry (key, size, control
/// byte) and the dead entry it may become.
const DEFERRED_BYTES: usize = 2 * (std::mem::size_of::<(DeferredKey, u64)>() + 1);

/// Bytes per entry of the full mark's exact liveness table (a fingerprint
/// and its copy byte).
const FULL_ENTRY_BYTES: usize = std::mem::size_of::<Fingerprint>() + 1;

/// The memory the focused mark may use for held copies: about what the
/// full mark's liveness array takes, one entry per stored data chunk.
fn full_mark_memory(repo: &Context) -> usize {
    let stored: u64 = repo
        .manifest
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| u64::from(c.chunks))
        .sum();
    stored as usize * FULL_ENTRY_BYTES
}

/// A backup to walk (a `share` of its recipe) for the estimate.
type Walked<'b> = (&'b BackupEntry, f64);

impl Estimate {
    /// The deleted backups' walk alone (the focus's floor), against the
    /// full mark.
    pub fn deleted(repo: &Context) -> Result<Estimate> {
        let (bytes, entries) = recipe_cost(repo, repo.manifest.forgotten.iter().map(|b| (b, 1.0)))?;
        Ok(Self::against_full(repo, bytes, entries))
    }

    fn against_full(repo: &Context, focus_bytes: u64, focus_entry_bytes: u64) -> Estimate {
        let stored: u64 = repo
            .manifest
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Recipe)
            .map(|c| c.logical_bytes)
            .sum();
        let walked: u64 = repo
            .manifest
            .backups
            .iter()
            .map(|b| b.chunks * RECIPE_ENTRY_BYTES)
            .sum();
        Estimate {
            focus_bytes,
            full_bytes: stored,
            focus_entry_bytes,
            full_entry_bytes: walked.min(stored),
        }
    }

    pub fn of(repo: &Context, graph: &RefGraph) -> Result<Estimate> {
        let retained: HashMap<BackupId, &BackupEntry> =
            repo.manifest.backups.iter().map(|b| (b.id, b)).collect();
        let g = graph.granularity;
        let walked = correlative(graph, &retained)
            .into_iter()
            .map(|(id, parts)| {
                let b = retained[&id];
                let share = if parts.whole || g == 0 || b.logical_bytes == 0 {
                    1.0
                } else {
                    (parts.parts.len() as f64 * g as f64 / b.logical_bytes as f64).min(1.0)
                };
                (b, share)
            });
        let forgotten = repo.manifest.forgotten.iter().map(|b| (b, 1.0));
        let (mut bytes, entries) = recipe_cost(repo, walked.chain(forgotten))?;
        // The deleted backups' references are held for one pass only while
        // they and the focus's own table fit the full mark's memory; past
        // that they take a second pass: count them all twice (an upper
        // bound).
        let deleted_refs: u64 = repo.manifest.forgotten.iter().map(|b| b.chunks).sum();
        let focus_table = (entries / RECIPE_ENTRY_BYTES) as usize * FULL_ENTRY_BYTES;
        if focus_table + deleted_refs as usize * DEFERRED_BYTES > full_mark_memory(repo) {
            bytes += Self::deleted(repo)?.focus_bytes;
        }
        Ok(Self::against_full(repo, bytes, entries))
    }

    /// Before the graph is loaded (the focus's floor: the deleted backups
    /// and the graph's segments): whether that already reaches
    /// [`FALLBACK_SHARE`] of the full mark's reads, leaving too little for
    /// the correlative walks, which the graph must be read to know.
    pub fn leaves_too_little_for_the_graph(&self) -> bool {
        self.focus_bytes as f64 >= FALLBACK_SHARE * self.full_bytes as f64 || self.covers_most()
    }

    /// Whether the focus costs as much as the full mark: more recipe
    /// containers read, or most of its entries visited.
    pub fn covers_most(&self) -> bool {
        self.focus_bytes > self.full_bytes
            || self.focus_entry_bytes as f64 >= FALLBACK_SHARE * self.full_entry_bytes as f64
    }
}

/// Recipe container bytes and recipe entry bytes a walk of `backups` in
/// [`by_root_container`] order reads: each container holding a root once
/// (the walk visits the backups rooted there together), and for a recipe
/// larger than its root's container, the entry bytes beyond it (its
/// leaves sit in the containers written just before).
fn recipe_cost<'b>(
    repo: &Context,
    backups: impl Iterator<Item = Walked<'b>>,
) -> Result<(u64, u64)> {
    let index = repo.need_index()?;
    let size: HashMap<ContainerId, u64> = repo
        .manifest
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Recipe)
        .map(|c| (c.id, c.logical_bytes))
        .collect();
    let mut roots = HashSet::new();
    let (mut beyond, mut entries) = (0u64, 0u64);
    for (b, share) in backups {
        let span = (b.chunks as f64 * RECIPE_ENTRY_BYTES as f64 * share) as u64;
        entries += span;
        match index.get(ChunkKind::Recipe, &b.root_fp()?) {
            Some(c) => {
                roots.insert(c);
                beyond += span.saturating_sub(size.get(&c).copied().unwrap_or(0));
            }
            None => beyond += span,
        }
    }
    let bytes = roots
        .iter()
        .map(|c| size.get(c).copied().unwrap_or(0))
        .sum::<u64>()
        + beyond;
    Ok((bytes, entries))
}

/// `items` sorted by the recipe container holding each backup's root
/// (then by id): a walk in this order reads each such container once
/// while the reader keeps it, instead of once per run of backups.
fn by_root_container<T>(
    repo: &Context,
    mut items: Vec<T>,
    backup: impl Fn(&T) -> &BackupEntry,
) -> Result<Vec<T>> {
    let index = repo.need_index()?;
    let mut keyed = Vec::with_capacity(items.len());
    for t in items.drain(..) {
        let b = backup(&t);
        let c = index.get(ChunkKind::Recipe, &b.root_fp()?);
        keyed.push(((c, b.id), t));
    }
    keyed.sort_by_key(|(k, _)| *k);
    Ok(keyed.into_iter().map(|(_, t)| t).collect())
}

/// CorrTracker's pre-calculation: the retained leaves of deleted bases, per
/// backup. A retained base is itself a retained owner of its chunks (the
/// base pointer says so, no walk needed); the retained leaves of a deleted
/// base are where its live chunks may be.
fn correlative(
    graph: &RefGraph,
    retained: &HashMap<BackupId, &BackupEntry>,
) -> BTreeMap<BackupId, Parts> {
    let gone = |v: &VFile| !retained.contains_key(&v.backup);
    let mut out: BTreeMap<BackupId, Parts> = BTreeMap::new();
    for (leaf, base) in &graph.edges {
        if gone(base) && !gone(leaf) {
            out.entry(leaf.backup).or_default().add(leaf);
        }
    }
    out
}

/// Which parts of one backup to walk.
#[derive(Default)]
struct Parts {
    whole: bool,
    parts: BTreeSet<u32>,
}

impl Parts {
    fn add(&mut self, v: &VFile) {
        if v.part == WHOLE {
            self.whole = true;
        } else {
            self.parts.insert(v.part);
        }
    }

    /// Whether walking these parts walks `v` (granularity `g`).
    fn covers(&self, v: &VFile, g: u64) -> bool {
        self.whole || g == 0 || self.parts.contains(&v.part)
    }
}

/// Walk the `parts` of backup `b`, calling `visit` for each recipe chunk
/// above them and each data chunk in them (as [`walk_backup`] does).
fn walk_parts(
    reader: &mut crate::recipe::RecipeReader<'_>,
    graph: &RefGraph,
    b: &BackupEntry,
    parts: &Parts,
    visit: &mut crate::fgc::Visit<'_>,
) -> Result<()> {
    let g = graph.granularity;
    let wanted = |start: u64, end: u64| {
        parts.whole
            || g == 0
            || parts.parts.iter().any(|&p| {
                let (lo, hi) = (p as u64 * g, (p as u64 + 1).saturating_mul(g));
                start < hi && end > lo || (start == end && start >= lo && start < hi)
            })
    };
    let data_wanted = |offset: u64| {
        parts.whole
            || g == 0
            || parts
                .parts
                .contains(&graph.vfile(b.id, ChunkKind::Data, offset).part)
    };
    walk_backup(reader, b, &wanted, &mut |kind, fp, copy, offset, size| {
        if kind == ChunkKind::Data && !data_wanted(offset) {
            return Ok(());
        }
        visit(kind, fp, copy, offset, size)
    })
    .map_err(|e| e.in_backup(b.id, None))
}

/// GCCDF's ownership, gathered while walking: per backup the data
/// fingerprints its walked parts reference, per container the backups
/// referencing a copy there.
struct Owners {
    rate: f64,
    filters: HashMap<BackupId, crate::gc::mark::liveness::FpFilter>,
    rrt: HashMap<ContainerId, BTreeSet<BackupId>>,
}

impl Owners {
    fn saw(&mut self, repo: &Context, b: &BackupEntry, fp: &Fingerprint, copy: CopyNo) {
        self.filters
            .entry(b.id)
            .or_insert_with(|| FpFilter::new(b.chunks as usize, self.rate))
            .insert(*fp);
        if let Some(c) = repo.locate_copy(ChunkKind::Data, fp, copy) {
            self.rrt.entry(c).or_default().insert(b.id);
        }
    }
}

fn focus(
    repo: &Context,
    mut graph: RefGraph,
    vc: VcSpec,
    owners_fp_rate: Option<f64>,
) -> Result<(Mark, FocusStats, RefGraph)> {
    let retained: HashMap<BackupId, &BackupEntry> =
        repo.manifest.backups.iter().map(|b| (b.id, b)).collect();
    let gone = |v: &VFile| !retained.contains_key(&v.backup);
    let mut stats = FocusStats {
        deleted_backups: repo.manifest.forgotten.len(),
        ..Default::default()
    };

    // CorrTracker: the retained neighbours of every deleted vertex.
    let correlative = correlative(&graph, &retained);
    stats.correlative_vfiles = graph
        .edges
        .iter()
        .filter(|(leaf, base)| gone(base) && !gone(leaf))
        .map(|(leaf, _)| leaf)
        .collect::<BTreeSet<_>>()
        .len();
    stats.correlative_backups = correlative.len();
    stats.skipped_backups = retained.len() - correlative.len();

    // Mark: the correlative recipes fill the liveness array, per chunk copy
    // (a copy no retained backup names is dead even if another copy of the
    // fingerprint lives); referencers of copies whose base is deleted are
    // kept for re-basing.
    let expected: u64 = correlative
        .keys()
        .map(|id| retained[id].chunks)
        .sum::<u64>()
        .max(1);
    let mut live_data = Mark::new(vc.filter(repo, expected as usize));
    let mut live_recipe = FpSet::default();
    let mut rebase: HashMap<(bool, Fingerprint, CopyNo), BTreeSet<VFile>> = HashMap::new();
    let mut reader = repo.recipe_reader(16)?;
    // Per-chunk liveness queries (Fig. 9): each data chunk reference of a
    // correlative walk, and each one of a deleted backup checked against
    // the liveness array (not those whose retained base answers).
    let mut queries = 0u64;
    let mut owners = owners_fp_rate.map(|rate| Owners {
        rate,
        filters: HashMap::new(),
        rrt: HashMap::new(),
    });
    // One pass over the focus in recipe-container order: the correlative
    // walks fill the liveness array, and the deleted backups' references
    // are collected on the way (a container holding both kinds of roots is
    // read once) and judged after it, once the array is complete. Past
    // the full mark's memory ([`full_mark_memory`]) the remaining deleted
    // backups are walked in a second pass instead: the focused mark never
    // holds more than the full mark would.
    // A subtree shared by deleted backups is walked once: its chunks'
    // fates do not depend on which deleted backup names them.
    let mut walked = FpSet::default();
    let mut deferred: HashMap<DeferredKey, u64> = HashMap::new();
    // A deleted backup's copy whose base is retained is live by its base
    // alone: no query, nothing to hold.
    let live_by_base = |kind: ChunkKind, fp: &Fingerprint, copy: CopyNo| {
        graph
            .bases(kind)
            .get(&(*fp, copy))
            .is_some_and(|v| !gone(v))
    };
    let budget = full_mark_memory(repo);
    let mut later: Vec<&BackupEntry> = Vec::new();
    let focus_order = by_root_container(
        repo,
        correlative
            .iter()
            .map(|(id, parts)| (retained[id], Some(parts)))
            .chain(repo.manifest.forgotten.iter().map(|b| (b, None)))
            .collect(),
        |(b, _)| b,
    )?;
    for (b, parts) in focus_order {
        let Some(parts) = parts else {
            let held = live_data.table_bytes()
                + (live_recipe.capacity() + walked.capacity()) * 33
                + graph.edges_bytes();
            // The table grows by doubling: count the capacity it may take.
            let copies = deferred.len() + b.chunks as usize;
            let cap = if copies > deferred.capacity() {
                copies.max(2 * deferred.capacity())
            } else {
                deferred.capacity()
            };
            if held + cap * DEFERRED_BYTES > budget {
                later.push(b);
                continue;
            }
            walk_unseen(&mut reader, b, &mut walked, &mut |kind, fp, copy, size| {
                if live_by_base(kind, fp, copy) {
                    return Ok(());
                }
                queries += u64::from(kind == ChunkKind::Data);
                deferred.insert((kind == ChunkKind::Recipe, *fp, copy), size);
                Ok(())
            })
            .map_err(|e| e.in_backup(b.id, None))?;
            continue;
        };
        walk_parts(
            &mut reader,
            &graph,
            b,
            parts,
            &mut |kind, fp, copy, offset, _| {
                match kind {
                    ChunkKind::Data => {
                        queries += 1;
                        live_data.insert_valid(*fp, copy);
                        if let Some(o) = owners.as_mut() {
                            o.saw(repo, b, fp, copy);
                        }
                    }
                    ChunkKind::Recipe => {
                        live_recipe.insert(*fp);
                    }
                }
                if graph.bases(kind).get(&(*fp, copy)).is_some_and(&gone) {
                    let here = graph.vfile(b.id, kind, offset);
                    rebase
                        .entry((kind == ChunkKind::Recipe, *fp, copy))
                        .or_default()
                        .insert(here);
                }
                Ok(())
            },
        )?;
    }
    let deferred_bytes = deferred.capacity() * DEFERRED_BYTES / 2;

    // A copy a deleted backup names is live if its base is retained or a
    // correlative walk found it; the others are dead.
    let mut dead_data: CopyMap<u64> = CopyMap::default();
    let mut dead_recipe = FpSet::default();
    let mut judge = |kind: ChunkKind, fp: &Fingerprint, copy: CopyNo, size: u64| {
        let key = (*fp, copy);
        match kind {
            ChunkKind::Data if !live_data.is_valid(fp, copy) => {
                dead_data.insert(key, size);
            }
            ChunkKind::Recipe if !live_recipe.contains(fp) => {
                dead_recipe.insert(*fp);
            }
            _ => {}
        }
    };
    for ((recipe, fp, copy), size) in std::mem::take(&mut deferred) {
        let kind = if recipe {
            ChunkKind::Recipe
        } else {
            ChunkKind::Data
        };
        judge(kind, &fp, copy, size);
    }
    for b in later {
        walk_unseen(&mut reader, b, &mut walked, &mut |kind, fp, copy, size| {
            if live_by_base(kind, fp, copy) {
                return Ok(());
            }
            queries += u64::from(kind == ChunkKind::Data);
            judge(kind, fp, copy, size);
            Ok(())
        })
        .map_err(|e| e.in_backup(b.id, None))?;
    }
    stats.dead_data_chunks = dead_data.len() as u64;
    stats.dead_recipe_chunks = dead_recipe.len() as u64;

    // Live counts: the catalog's, less the stored chunks found dead. A
    // stored chunk is dead when every copy the index places there is (two
    // copies PGC+ sent to one container share one stored chunk).
    let index = &repo.index;
    let mut dead_in: HashMap<ContainerId, Live> = HashMap::new();
    let mut counted: HashSet<(Fingerprint, ContainerId)> = HashSet::new();
    for (&(fp, copy), size) in &dead_data {
        let Some(c) = repo.locate_copy(ChunkKind::Data, &fp, copy) else {
            continue;
        };
        let shared = index
            .copy_list(&fp)
            .in_container(c)
            .any(|n| n != copy && !dead_data.contains_key(&(fp, n)));
        if shared || !counted.insert((fp, c)) {
            continue;
        }
        let l = dead_in.entry(c).or_default();
        l.chunks += 1;
        l.bytes += size;
    }
    let mut dead_recipe_in: HashMap<ContainerId, u32> = HashMap::new();
    for fp in &dead_recipe {
        if let Some(c) = repo.locate_copy(ChunkKind::Recipe, fp, 0) {
            *dead_recipe_in.entry(c).or_default() += 1;
        }
    }
    let mut live = HashMap::new();
    let mut live_recipe_count = HashMap::new();
    for c in &repo.manifest.containers {
        match c.kind {
            ChunkKind::Data => {
                let d = dead_in.get(&c.id).copied().unwrap_or_default();
                live.insert(
                    c.id,
                    Live {
                        chunks: c.chunks.saturating_sub(d.chunks),
                        bytes: c.logical_bytes.saturating_sub(d.bytes),
                    },
                );
            }
            ChunkKind::Recipe => {
                let dead = dead_recipe_in.get(&c.id).copied().unwrap_or(0);
                live_recipe_count.insert(c.id, c.chunks.saturating_sub(dead));
            }
        }
    }
    let mut valid_recipe = FpSet::default();
    let mut valid_copies = HashSet::new();
    for e in index.entries() {
        match e.kind {
            ChunkKind::Recipe if !dead_recipe.contains(&e.fp) => {
                valid_recipe.insert(e.fp);
            }
            ChunkKind::Data if e.copy != 0 && !dead_data.contains_key(&(e.fp, e.copy)) => {
                valid_copies.insert((e.fp, e.copy));
            }
            _ => {}
        }
    }

    // §IV-C: new bases for live copies whose base was deleted.
    for kind in [ChunkKind::Data, ChunkKind::Recipe] {
        let bases = graph.bases_mut(kind);
        bases.retain(|&(fp, copy), base| {
            if !gone(base) {
                return true;
            }
            match rebase
                .get(&(kind == ChunkKind::Recipe, fp, copy))
                .and_then(|r| r.first())
            {
                Some(first) => {
                    *base = *first;
                    true
                }
                None => false,
            }
        });
    }
    graph
        .edges
        .retain(|(leaf, base)| !gone(leaf) && !gone(base));
    for refs in rebase.values() {
        let mut it = refs.iter();
        if let Some(base) = it.next() {
            for leaf in it.filter(|l| l.backup != base.backup) {
                graph.edges.insert((*leaf, *base));
            }
        }
    }

    if let Some(mut o) = owners {
        let swept: HashSet<ContainerId> = dead_in
            .iter()
            .filter(|(_, d)| d.chunks > 0)
            .map(|(c, _)| *c)
            .collect();
        let (vfiles, backups) = ownership(
            repo,
            &graph,
            &retained,
            &correlative,
            &swept,
            &dead_data,
            &mut reader,
            &mut o,
        )?;
        stats.owner_vfiles = vfiles;
        stats.owner_backups = backups;
        owners = Some(o);
    }

    let walk = crate::recipe::WalkStats {
        visited: reader.loads(),
        ..Default::default()
    };
    // Copy 0 of every chunk but the dead ones is valid; the other copies
    // are listed (they are few: rewritten chunks).
    let dead_first: FpSet = dead_data
        .keys()
        .filter(|(_, copy)| *copy == 0)
        .map(|(fp, _)| *fp)
        .collect();
    let mut m = Mark::new(FpFilter::AllBut(dead_first));
    m.chunk_queries = queries;
    if let Some(o) = owners {
        m.owners = o.filters;
        m.rrt = o
            .rrt
            .into_iter()
            .map(|(c, b)| (c, b.into_iter().collect()))
            .collect();
    }
    m.valid_copies = valid_copies;
    m.valid_recipe = valid_recipe;
    m.live = Some(live);
    m.live_recipe = live_recipe_count;
    m.walk = walk;
    stats.liveness_array_bytes = live_data.table_bytes() as u64;
    m.memory_bytes = (m.table_bytes()
        + live_data.table_bytes()
        + live_recipe.capacity() * 33
        + walked.capacity() * 33
        + deferred_bytes
        + dead_data.capacity() * 44) as u64;
    Ok((m, stats, graph))
}

/// GCCDF's ownership input after a focused mark: the RRT and per-backup
/// fingerprint filters for the containers that hold a dead chunk (`swept`:
/// the only ones select can send to GCCDF's sweep, whose live counts are
/// the catalog's less the dead ones).
///
/// Why the correlative walk alone is not enough: a container that holds a
/// dead chunk of a deleted backup also holds chunks the deleted backups
/// never referenced (an earlier GC packed chunks of many backups together;
/// a backup's containers hold every chunk new in it), and a chunk the
/// deleted backups did reference may have a retained base the mark never
/// needed to walk (the base pointer already says it is live). Their
/// owners are not among the correlative backups.
///
/// What is walked instead, and why it is exact: for every live copy in a
/// swept container — and every other copy of the same fingerprint, since
/// GCCDF's ownership is by fingerprint as the full mark's filters are — its
/// base (after this mark's re-basing, so a retained virtual file) and the
/// leaves with an edge to that base. By the graph's invariant (see
/// [`crate::fgc`]) every retained virtual file referencing a copy is
/// its base, another part of the base's backup, or has an edge to its base,
/// so every retained backup referencing the copy is walked in at least one
/// part that references it: each filter holds every swept fingerprint its
/// backup references, and each swept container's RRT entry lists exactly
/// the retained backups referencing a copy there — what the full mark
/// finds for those containers (`gc::focused_gccdf_clusters_match_full_mark`
/// checks it). Filters of backups walked only in part miss fingerprints
/// outside the swept containers, which the sweep never asks about.
///
/// Chunks with no base are referenced by no retained backup (garbage from
/// before the deletions, which the focused mark leaves live): they have no
/// owners, as under the full mark, and form their own cluster.
///
/// The virtual files the correlative walk covered are not walked again.
/// Returns the virtual files and backups walked here.
#[allow(clippy::too_many_arguments)]
fn ownership(
    repo: &Context,
    graph: &RefGraph,
    retained: &HashMap<BackupId, &BackupEntry>,
    correlative: &BTreeMap<BackupId, Parts>,
    swept: &HashSet<ContainerId>,
    dead_data: &CopyMap<u64>,
    reader: &mut crate::recipe::RecipeReader<'_>,
    owners: &mut Owners,
) -> Result<(usize, usize)> {
    let index = &repo.index;
    let mut fps = FpSet::default();
    for e in index.entries() {
        if e.kind == ChunkKind::Data
            && swept.contains(&e.container)
            && !dead_data.contains_key(&(e.fp, e.copy))
        {
            fps.insert(e.fp);
        }
    }
    let mut bases = HashSet::new();
    for fp in &fps {
        for (n, _) in index.copy_list(fp).iter() {
            if let Some(b) = graph.data_bases.get(&(*fp, n)) {
                bases.insert(*b);
            }
        }
    }
    let mut need: BTreeSet<VFile> = bases.iter().copied().collect();
    need.extend(
        graph
            .edges
            .iter()
            .filter(|(_, base)| bases.contains(base))
            .map(|(leaf, _)| *leaf),
    );
    let g = graph.granularity;
    let mut todo: BTreeMap<BackupId, Parts> = BTreeMap::new();
    let mut vfiles = 0;
    for v in &need {
        if !retained.contains_key(&v.backup)
            || correlative.get(&v.backup).is_some_and(|p| p.covers(v, g))
        {
            continue;
        }
        vfiles += 1;
        todo.entry(v.backup).or_default().add(v);
    }
    let order = by_root_container(
        repo,
        todo.iter()
            .map(|(id, parts)| (retained[id], parts))
            .collect(),
        |(b, _)| b,
    )?;
    for (b, parts) in order {
        walk_parts(reader, graph, b, parts, &mut |kind, fp, copy, _, _| {
            if kind == ChunkKind::Data {
                owners.saw(repo, b, fp, copy);
            }
            Ok(())
        })?;
    }
    Ok((vfiles, todo.len()))
}

/// Walk backup `b`'s recipe tree depth-first, skipping the subtrees whose
/// root is in `walked` (and adding the others), calling `visit(kind, fp,
/// copy, size)` for each recipe chunk loaded and each data chunk below it.
fn walk_unseen(
    reader: &mut crate::recipe::RecipeReader<'_>,
    b: &BackupEntry,
    walked: &mut FpSet,
    visit: &mut dyn FnMut(ChunkKind, &Fingerprint, CopyNo, u64) -> Result<()>,
) -> Result<()> {
    fn node(
        reader: &mut crate::recipe::RecipeReader<'_>,
        fp: &Fingerprint,
        level: u8,
        walked: &mut FpSet,
        visit: &mut dyn FnMut(ChunkKind, &Fingerprint, CopyNo, u64) -> Result<()>,
    ) -> Result<()> {
        if !walked.insert(*fp) {
            return Ok(());
        }
        let (chunk, _) = reader.load(fp)?;
        if chunk.level != level {
            return Err(crate::error::Error::corrupt(
                crate::error::ObjectRef::RecipeChunk(*fp),
                format!("level {} where {level} was expected", chunk.level),
            ));
        }
        visit(ChunkKind::Recipe, fp, 0, chunk.logical_size())?;
        for e in &chunk.entries {
            if level == 1 {
                visit(ChunkKind::Data, &e.fp, e.copy, e.size)?;
            } else {
                node(reader, &e.fp, level - 1, walked, visit)?;
            }
        }
        Ok(())
    }
    node(reader, &b.root_fp()?, b.root_level, walked, visit)
}
