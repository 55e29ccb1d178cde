//! Mark: walk the recipes of the retained backups and build what the sweep
//! needs — the VC table (valid data chunks), the valid recipe chunks, the
//! live chunks per container, the RRT (container → retained backups that
//! reference it) and, for GCCDF, one fingerprint filter per backup.
//!
//! A data chunk is stored as one or more numbered copies (rewriting adds
//! copies); a recipe names the copy it reads. A copy `(fp, n)` is live iff a
//! retained backup's recipe names it: a copy no retained backup references
//! is dead even if another copy of the same fingerprint is live.

pub mod focused;

pub use focused::{FocusStats, FocusedMark};

use super::bloom::Bloom;
use super::PhaseReport;
use crate::catalog::{BackupEntry, BackupId};
use crate::container::{ChunkKind, ContainerId};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap, FpSet};
use crate::index::CopyNo;
use crate::recipe::{RecipeChunk, RecipeVisitor, WalkStats};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

pub mod physical;
pub use physical::PhysicalMark;

/// Which mark phase a GC runs, chosen by name (`gc --mark NAME`): any mark
/// works with any sweep ([`GcStrategy`](super::GcStrategy)).
///
/// Contract for the marks being built (issues 15 and 16): each variant has
/// its `Marker` in its own module beside this one (`logical` today in this
/// file; `physical.rs` for `Physical`/`PhysicalPlus`, `focused.rs` for
/// `Focused`), and [`GcOptions::marker`](super::GcOptions) dispatches on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MarkSpec {
    /// Depth-first walk of every retained backup's recipe tree (LGC).
    #[default]
    Logical,
    /// Breadth-first over the recipe levels, containers in order (PGC).
    Physical,
    /// PGC with the analysis phase and dynamic duplicate removal (PGC+).
    PhysicalPlus,
    /// Only the deleted backups and their correlative backups (FGC).
    Focused,
}

impl std::str::FromStr for MarkSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "logical" => Ok(MarkSpec::Logical),
            "physical" => Ok(MarkSpec::Physical),
            "physical+" => Ok(MarkSpec::PhysicalPlus),
            "focused" => Ok(MarkSpec::Focused),
            _ => Err(format!(
                "unknown mark `{s}` (expected logical, physical, physical+ or focused)"
            )),
        }
    }
}

impl fmt::Display for MarkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MarkSpec::Logical => "logical",
            MarkSpec::Physical => "physical",
            MarkSpec::PhysicalPlus => "physical+",
            MarkSpec::Focused => "focused",
        })
    }
}

/// The valid-chunk (VC) table, as named on the command line and in the
/// lab: `exact`, `bloom:P` or `phv`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum VcSpec {
    /// An exact fingerprint set.
    #[default]
    Exact,
    /// A Bloom filter: false positives keep dead chunks, which is safe.
    Bloom { fp_rate: f64 },
    /// A perfect-hash vector over the index's data fingerprints (physical
    /// GC): exact for stored chunks, about 4 bits each.
    Phv,
}

impl VcSpec {
    /// The table `--vc-fp-rate P` asks for: the exact set at 0, else a
    /// Bloom filter (a rate out of range is left for `validate` to name).
    pub fn from_fp_rate(fp_rate: f64) -> Self {
        if fp_rate == 0.0 {
            VcSpec::Exact
        } else {
            VcSpec::Bloom { fp_rate }
        }
    }

    /// The Bloom filter's false-positive rate; 0 for the exact tables.
    pub fn fp_rate(&self) -> f64 {
        match *self {
            VcSpec::Bloom { fp_rate } => fp_rate,
            VcSpec::Exact | VcSpec::Phv => 0.0,
        }
    }

    /// An empty table for about `expected` chunks.
    fn filter(&self, repo: &Context, expected: usize) -> FpFilter {
        match *self {
            VcSpec::Phv => {
                let keys: Vec<Fingerprint> = repo.index.data_fingerprints().collect();
                FpFilter::Phv(Phv::new(&keys))
            }
            VcSpec::Exact | VcSpec::Bloom { .. } => FpFilter::new(expected, self.fp_rate()),
        }
    }
}

impl std::str::FromStr for VcSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "exact" => Ok(VcSpec::Exact),
            "phv" => Ok(VcSpec::Phv),
            v => match v.strip_prefix("bloom:").map(str::parse::<f64>) {
                Some(Ok(p)) if p > 0.0 && p < 0.5 => Ok(VcSpec::Bloom { fp_rate: p }),
                _ => Err(format!(
                    "unknown vc '{s}' (expected exact, phv or bloom:P with 0 < P < 0.5)"
                )),
            },
        }
    }
}

impl fmt::Display for VcSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VcSpec::Exact => f.write_str("exact"),
            VcSpec::Bloom { fp_rate } => write!(f, "bloom:{fp_rate}"),
            VcSpec::Phv => f.write_str("phv"),
        }
    }
}

/// Valid-chunk membership: exact, a Bloom filter (false positives keep
/// dead chunks, which is safe), or a perfect-hash vector.
pub enum FpFilter {
    Exact(FpSet),
    Bloom(Bloom),
    Phv(Phv),
    /// Every fingerprint but these (the focused mark: it finds the dead
    /// chunks of the deleted backups and leaves everything else live).
    AllBut(FpSet),
}

/// A perfect-hash vector (physical GC, FAST'17 §4): a minimal perfect hash
/// over every data fingerprint the index holds, and one bit per fingerprint.
/// GC only ever asks about stored chunks, all of which are keys, so it is
/// exact for them at about 4 bits per chunk instead of 33 bytes; a
/// fingerprint outside the key set may map to any bit (a false positive,
/// which only keeps garbage).
pub struct Phv {
    mphf: boomphf::Mphf<Fingerprint>,
    bits: Vec<u64>,
    keys: usize,
}

/// boomphf's space/time trade-off (its documented default range is 1–5).
const PHV_GAMMA: f64 = 1.7;

impl Phv {
    pub fn new(keys: &[Fingerprint]) -> Self {
        Phv {
            mphf: boomphf::Mphf::new(PHV_GAMMA, keys),
            bits: vec![0; keys.len().div_ceil(64)],
            keys: keys.len(),
        }
    }
    /// The bit of `fp` (any bit for a fingerprint outside the key set).
    pub(crate) fn slot(&self, fp: &Fingerprint) -> Option<usize> {
        self.mphf
            .try_hash(fp)
            .map(|i| i as usize)
            .filter(|&i| i < self.keys)
    }
    /// Bits in the vector (one per key).
    pub(crate) fn len(&self) -> usize {
        self.keys
    }
    fn insert(&mut self, fp: &Fingerprint) {
        if let Some(i) = self.mphf.try_hash(fp) {
            if let Some(w) = self.bits.get_mut((i / 64) as usize) {
                *w |= 1 << (i % 64);
            }
        }
    }
    fn contains(&self, fp: &Fingerprint) -> bool {
        self.mphf
            .try_hash(fp)
            .and_then(|i| {
                self.bits
                    .get((i / 64) as usize)
                    .map(|w| w & (1 << (i % 64)) != 0)
            })
            .unwrap_or(false)
    }
    /// The vector plus an estimate of the hash function: BBHash needs about
    /// gamma × e^(1/gamma) bits per key (3.1 at 1.7), plus rank samples.
    fn memory_bytes(&self) -> usize {
        self.bits.len() * 8 + (self.keys as f64 * 3.4 / 8.0) as usize
    }
}

impl FpFilter {
    pub fn new(items: usize, fp_rate: f64) -> Self {
        if fp_rate > 0.0 {
            FpFilter::Bloom(Bloom::new(items, fp_rate))
        } else {
            FpFilter::Exact(FpSet::default())
        }
    }
    /// Insert; returns whether the fingerprint is certainly new (exact only).
    pub fn insert(&mut self, fp: Fingerprint) -> bool {
        match self {
            FpFilter::Exact(s) => s.insert(fp),
            FpFilter::Bloom(b) => {
                b.insert(&fp);
                false
            }
            FpFilter::Phv(p) => {
                p.insert(&fp);
                false
            }
            FpFilter::AllBut(dead) => dead.remove(&fp),
        }
    }
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        match self {
            FpFilter::Exact(s) => s.contains(fp),
            FpFilter::Bloom(b) => b.contains(fp),
            FpFilter::Phv(p) => p.contains(fp),
            FpFilter::AllBut(dead) => !dead.contains(fp),
        }
    }
    pub fn memory_bytes(&self) -> usize {
        match self {
            FpFilter::Exact(s) => s.capacity() * (std::mem::size_of::<Fingerprint>() + 1),
            FpFilter::Bloom(b) => b.memory_bytes(),
            FpFilter::Phv(p) => p.memory_bytes(),
            FpFilter::AllBut(dead) => dead.capacity() * (std::mem::size_of::<Fingerprint>() + 1),
        }
    }
}

/// Live chunks and bytes of one container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    pub chunks: u32,
    pub bytes: u64,
}

pub struct Mark {
    /// VC: valid data chunks — copy 0 of each (most chunks' only copy).
    /// Use [`insert_valid`](Self::insert_valid) / [`is_valid`](Self::is_valid),
    /// which also cover the other copies.
    pub valid: FpFilter,
    /// Valid copies other than copy 0 (rewritten chunks; always exact).
    pub valid_copies: HashSet<(Fingerprint, CopyNo)>,
    /// Recipe chunks of retained backups (always exact: they are few).
    pub valid_recipe: FpSet,
    /// Live chunks per data container; `None` with a Bloom VC, where the
    /// sweep planner counts them from container metadata instead.
    pub live: Option<HashMap<ContainerId, Live>>,
    pub live_recipe: HashMap<ContainerId, u32>,
    /// RRT: container → retained backups referencing it, ascending ids.
    pub rrt: HashMap<ContainerId, Vec<BackupId>>,
    /// Per-backup recipe fingerprints (GCCDF's ownership checks).
    pub owners: HashMap<BackupId, FpFilter>,
    /// Recipe chunks the walks visited and the subtrees they skipped as
    /// already marked.
    pub walk: WalkStats,
    pub memory_bytes: u64,
    /// The focused mark's updated reference graph, published with the
    /// GC's generation.
    pub refgraph: Option<crate::fgc::RefGraph>,
    /// What the focused mark walked and found.
    pub fgc: Option<FocusStats>,
    /// Per-phase figures of the mark (analysis, enumeration per level...);
    /// empty for a mark that reports itself as one phase.
    pub phases: Vec<PhaseReport>,
    /// Mark passes: 2 when sampling (`--memory-limit`) needed a pre-pass.
    pub passes: u32,
    /// PGC+: per data container, its chunks with a newer copy elsewhere
    /// (the analysis phase's duplicate counter); select then estimates
    /// unique liveness instead of asking the index which copy is live.
    pub dup_counter: Option<HashMap<ContainerId, u32>>,
    /// Sampling's second pass: only these data containers were marked
    /// exactly; select must leave every other one alone.
    pub focus: Option<std::collections::HashSet<ContainerId>>,
}

/// The mark phase: from the catalog's retained backups, the live set the
/// select and sweep phases work from.
///
/// [`LogicalMark`] (LGC, depth-first over each backup's recipe tree) is the
/// one implementation today. The others plug in here, each filling the same
/// [`Mark`] so that any mark works with any sweep:
/// - physical mark (PGC/PGC+, issue 15): breadth-first over the recipe
///   levels, each level's recipe containers scanned once in container order,
///   perfect hashes per level ([`Phv`]) and level checksums;
/// - focused mark (FGC, issue 16): walks only the deleted backups and their
///   correlative backups (from the reference graph), the liveness array as a
///   Bloom filter or a [`Phv`].
pub trait Marker {
    fn mark(&self, repo: &Context) -> Result<Mark>;
}

/// The logical mark (LGC): walk every retained backup's recipe tree
/// depth-first. Naive GC skips a subtree already marked (its fingerprint
/// fixes its content, the Merkle tree's point); GCCDF needs every backup's
/// full fingerprint set, so it walks all, through the reader's memo.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LogicalMark {
    /// The VC table.
    pub vc: VcSpec,
    /// `Some(rate)`: also build the RRT and one ownership filter per backup
    /// (GCCDF) with this false-positive rate (0 = exact sets).
    pub owners_fp_rate: Option<f64>,
    /// Walk every backup's tree in full, shared subtrees again each time,
    /// as DDFS's LGC must (FAST'17 §3.1: its Bloom-filter live vector cannot
    /// safely say a subtree was seen), so its cost follows the logical size.
    pub walk_shared: bool,
}

impl Marker for LogicalMark {
    fn mark(&self, repo: &Context) -> Result<Mark> {
        let backups: Vec<BackupEntry> = {
            let mut b = repo.manifest.backups.clone();
            b.sort_by_key(|b| b.id);
            b
        };
        let expected: u64 = backups.iter().map(|b| b.chunks).sum();
        let mut m = Mark::new(self.vc.filter(repo, expected as usize));
        let mut reader = repo.recipe_reader(16);
        if self.owners_fp_rate.is_some() {
            reader = reader.with_memo();
        }
        let mut homes = FpMap::default();
        for b in &backups {
            let mut w = Walk {
                repo,
                m: &mut m,
                homes: &mut homes,
                memoize: reader.memoizes(),
                homes_bytes: 0,
                backup: b.id,
                own: self
                    .owners_fp_rate
                    .map(|p| FpFilter::new(b.chunks as usize, p)),
                skip_seen: self.owners_fp_rate.is_none() && !self.walk_shared,
            };
            let stats = reader
                .walk(&b.root_fp()?, b.root_level, &mut w)
                .map_err(|e| e.in_backup(b.id, None))?;
            let (own, homes_bytes) = (w.own.take(), w.homes_bytes);
            reader.account(homes_bytes);
            m.walk += stats;
            if let Some(o) = own {
                m.owners.insert(b.id, o);
            }
        }
        m.memory_bytes = (m.table_bytes() + reader.memo_bytes()) as u64;
        Ok(m)
    }
}

impl Mark {
    fn new(valid: FpFilter) -> Self {
        let exact = matches!(valid, FpFilter::Exact(_));
        Mark {
            valid,
            valid_copies: HashSet::new(),
            valid_recipe: FpSet::default(),
            live: exact.then(HashMap::new),
            live_recipe: HashMap::new(),
            rrt: HashMap::new(),
            owners: HashMap::new(),
            walk: WalkStats::default(),
            memory_bytes: 0,
            refgraph: None,
            fgc: None,
            phases: Vec::new(),
            passes: 1,
            dup_counter: None,
            focus: None,
        }
    }

    /// Mark copy `copy` of data chunk `fp` valid; returns whether it is
    /// certainly new (exact VC only).
    pub fn insert_valid(&mut self, fp: Fingerprint, copy: CopyNo) -> bool {
        if copy == 0 {
            self.valid.insert(fp)
        } else {
            self.valid_copies.insert((fp, copy))
        }
    }

    /// Whether copy `copy` of data chunk `fp` is valid (referenced by a
    /// retained backup; a Bloom VC may say so of a dead copy 0).
    #[inline]
    pub fn is_valid(&self, fp: &Fingerprint, copy: CopyNo) -> bool {
        if copy == 0 {
            self.valid.contains(fp)
        } else {
            self.valid_copies.contains(&(*fp, copy))
        }
    }

    /// Count copy `copy` of `fp` (just marked valid, held in `container`)
    /// in the container's live chunks — once per stored chunk: two valid
    /// copies a GC placed in one container share one chunk there.
    pub fn count_live(
        &mut self,
        index: &crate::index::Index,
        fp: &Fingerprint,
        copy: CopyNo,
        container: ContainerId,
        size: u64,
    ) {
        if self.live.is_none() {
            return;
        }
        let copies = index.copy_list(fp);
        if copies.len() > 1
            && copies
                .in_container(container)
                .any(|n| n != copy && self.is_valid(fp, n))
        {
            return;
        }
        if let Some(live) = self.live.as_mut() {
            let l = live.entry(container).or_default();
            l.chunks += 1;
            l.bytes += size;
        }
    }

    /// Whether any copy of data chunk `fp` is valid.
    pub fn any_valid(&self, index: &crate::index::Index, fp: &Fingerprint) -> bool {
        index
            .copy_list(fp)
            .iter()
            .any(|(n, _)| self.is_valid(fp, n))
    }

    /// The valid copies of data chunk `fp` that the index places in
    /// container `id`, into `out` (cleared first). Almost always none or
    /// one; more only where GC packed two copies into one container.
    pub fn live_copies_in(
        &self,
        index: &crate::index::Index,
        fp: &Fingerprint,
        id: ContainerId,
        out: &mut Vec<CopyNo>,
    ) {
        out.clear();
        out.extend(
            index
                .copy_list(fp)
                .in_container(id)
                .filter(|&n| self.is_valid(fp, n)),
        );
    }

    /// Memory of the mark's own tables (estimated).
    fn table_bytes(&self) -> usize {
        let fp = std::mem::size_of::<Fingerprint>() + 1;
        self.valid.memory_bytes()
            + self.valid_copies.capacity() * (fp + 2)
            + self.valid_recipe.capacity() * fp
            + self.live.as_ref().map_or(0, |l| l.capacity() * 24)
            + self
                .rrt
                .values()
                .map(|v| v.capacity() * 8 + 32)
                .sum::<usize>()
            + self
                .owners
                .values()
                .map(|o| o.memory_bytes())
                .sum::<usize>()
    }
}

/// What the walk of one backup records.
struct Walk<'m> {
    repo: &'m Context,
    m: &'m mut Mark,
    /// Containers of a level-1 chunk's data chunks, in order, kept when the
    /// reader memoizes (every backup is walked in full).
    homes: &'m mut FpMap<Arc<[ContainerId]>>,
    memoize: bool,
    homes_bytes: usize,
    backup: BackupId,
    own: Option<FpFilter>,
    skip_seen: bool,
}

impl RecipeVisitor for Walk<'_> {
    fn enter(&mut self, fp: &Fingerprint, _level: u8) -> bool {
        !(self.skip_seen && self.m.valid_recipe.contains(fp))
    }

    fn chunk(&mut self, fp: &Fingerprint, chunk: &RecipeChunk, id: ContainerId) -> Result<()> {
        let first = self.m.valid_recipe.insert(*fp);
        if first {
            *self.m.live_recipe.entry(id).or_default() += 1;
        }
        if chunk.level > 1 {
            return Ok(());
        }
        // A level-1 chunk seen before already put its data chunks in the VC;
        // only its ownership (RRT, per-backup filter) is new.
        let containers = match self.homes.get(fp) {
            Some(h) if !first => h.clone(),
            _ => {
                let homes = self.add_data_chunks(chunk)?;
                if self.memoize {
                    self.homes_bytes += homes.len() * 8 + 48;
                    self.homes.insert(*fp, homes.clone());
                }
                homes
            }
        };
        if let Some(o) = self.own.as_mut() {
            let mut last = None;
            for (e, &c) in chunk.entries.iter().zip(containers.iter()) {
                if last != Some(c) {
                    let r = self.m.rrt.entry(c).or_default();
                    if r.last() != Some(&self.backup) {
                        r.push(self.backup);
                    }
                    last = Some(c);
                }
                o.insert(e.fp);
            }
        }
        Ok(())
    }
}

impl Walk<'_> {
    /// Put a level-1 chunk's data chunks in the VC (and their containers'
    /// live counts); return the container of each, in order.
    fn add_data_chunks(&mut self, chunk: &RecipeChunk) -> Result<Arc<[ContainerId]>> {
        let mut homes = Vec::with_capacity(chunk.entries.len());
        for e in &chunk.entries {
            let c = self
                .repo
                .locate_copy(ChunkKind::Data, &e.fp, e.copy)
                .ok_or_else(|| {
                    Error::corrupt(
                        format!("backup {}", self.backup),
                        format!(
                            "chunk {} (copy {}) is not in the index",
                            e.fp.to_hex(),
                            e.copy
                        ),
                    )
                })?;
            if self.m.insert_valid(e.fp, e.copy) {
                self.m
                    .count_live(&self.repo.index, &e.fp, e.copy, c, e.size);
            }
            homes.push(c);
        }
        Ok(homes.into())
    }
}
