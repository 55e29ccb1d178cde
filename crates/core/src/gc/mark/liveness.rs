//! The mark's result: which chunk copies are live (the VC table), and
//! what the sweep needs besides; the [`Marker`] contract every mark fulfils.

use crate::catalog::BackupId;
use crate::container::ContainerId;
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpSet};
use crate::gc::bloom::Bloom;
use crate::gc::phase::PhaseReport;
use crate::index::CopyNo;
use crate::recipe::WalkStats;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// What a focused mark found, beyond the [`Mark`] (for reports and tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FocusStats {
    pub deleted_backups: usize,
    /// Correlative virtual files walked, and the backups they belong to.
    pub correlative_vfiles: usize,
    pub correlative_backups: usize,
    /// Retained backups not walked.
    pub skipped_backups: usize,
    /// Whether the graph had to be rebuilt from every recipe first.
    pub rebuilt: bool,
    pub dead_data_chunks: u64,
    pub dead_recipe_chunks: u64,
    /// GCCDF: virtual files walked for ownership beyond the correlative
    /// ones, and the backups they belong to (see `focused::ownership`).
    pub owner_vfiles: usize,
    pub owner_backups: usize,
    /// The focus was estimated to cover most of the repository, so the
    /// full (logical) mark ran instead (`focused::FALLBACK_SHARE`).
    pub fell_back: bool,
    /// Recipe container bytes the focused mark was estimated to read, and
    /// the full mark; recipe entry bytes each would visit
    /// (`focused::Estimate`).
    pub focus_estimate_bytes: u64,
    pub full_estimate_bytes: u64,
    pub focus_estimate_entry_bytes: u64,
    pub full_estimate_entry_bytes: u64,
    /// Memory: the liveness array of the correlative walk, the base map
    /// (a base per stored chunk, not in the mark's memory: FGC keeps it in
    /// the fingerprint index) and the graph's edges (in the mark's memory).
    pub liveness_array_bytes: u64,
    pub base_map_bytes: u64,
    pub graph_bytes: u64,
}

/// Which mark phase a GC runs, chosen by name (`gc --mark NAME`): any mark
/// works with any sweep ([`GcStrategy`](crate::gc::GcStrategy)). Each has
/// its [`Marker`] in its own module beside this one: `logical.rs`,
/// `physical.rs` (`Physical`, `PhysicalPlus`), `focused.rs` (`Focused`);
/// [`GcOptions`](crate::gc::GcOptions) builds it.
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
    /// A Bloom filter of exactly `bits` bits per expected entry and the
    /// optimal number of hashes (`bloom-bits:6`: FAST'17's live vector,
    /// "6 bits per fingerprint", §3.4); `Bloom` rounds its size up to a
    /// power of two.
    BloomBits { bits: f64 },
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

    /// The Bloom filter's false-positive rate (for `BloomBits`, its
    /// theoretical rate when full: (1 − e^(−k/b))^k); 0 for the exact tables.
    pub fn fp_rate(&self) -> f64 {
        match *self {
            VcSpec::Bloom { fp_rate } => fp_rate,
            VcSpec::BloomBits { bits } => {
                let k = (bits * std::f64::consts::LN_2).round().clamp(1.0, 16.0);
                (1.0 - (-k / bits).exp()).powf(k)
            }
            VcSpec::Exact | VcSpec::Phv => 0.0,
        }
    }

    /// A Bloom filter of this spec for `items` entries; the exact set for
    /// `Exact` and `Phv` (callers build the PHV from the index).
    pub(crate) fn bloom_or_exact(&self, items: usize) -> FpFilter {
        match *self {
            VcSpec::BloomBits { bits } => FpFilter::Bloom(Bloom::with_bits_per_item(items, bits)),
            VcSpec::Bloom { fp_rate } => FpFilter::new(items, fp_rate),
            VcSpec::Exact | VcSpec::Phv => FpFilter::new(items, 0.0),
        }
    }

    /// An empty table for about `expected` chunks.
    pub(crate) fn filter(&self, repo: &Context, expected: usize) -> FpFilter {
        match *self {
            VcSpec::Phv => {
                let keys: Vec<Fingerprint> = repo.index.data_fingerprints().collect();
                FpFilter::Phv(Phv::new(&keys))
            }
            VcSpec::Exact | VcSpec::Bloom { .. } | VcSpec::BloomBits { .. } => {
                self.bloom_or_exact(expected)
            }
        }
    }
}

impl std::str::FromStr for VcSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "exact" => Ok(VcSpec::Exact),
            "phv" => Ok(VcSpec::Phv),
            v => match (
                v.strip_prefix("bloom:").map(str::parse::<f64>),
                v.strip_prefix("bloom-bits:").map(str::parse::<f64>),
            ) {
                (Some(Ok(p)), _) if p > 0.0 && p < 0.5 => Ok(VcSpec::Bloom { fp_rate: p }),
                (_, Some(Ok(b))) if (2.0..=64.0).contains(&b) => Ok(VcSpec::BloomBits { bits: b }),
                _ => Err(format!(
                    "unknown vc '{s}' (expected exact, phv, bloom:P with 0 < P < 0.5 \
                     or bloom-bits:B with 2 <= B <= 64 bits per chunk)"
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
            VcSpec::BloomBits { bits } => write!(f, "bloom-bits:{bits}"),
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

/// A perfect-hash vector (physical GC, FAST'17 §3.2.1): a minimal perfect hash
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
    pub(crate) fn insert(&mut self, fp: &Fingerprint) {
        if let Some(i) = self.mphf.try_hash(fp) {
            if let Some(w) = self.bits.get_mut((i / 64) as usize) {
                *w |= 1 << (i % 64);
            }
        }
    }
    pub(crate) fn contains(&self, fp: &Fingerprint) -> bool {
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
    pub(crate) fn memory_bytes(&self) -> usize {
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
    /// Per-chunk liveness queries the mark made: each data chunk reference
    /// it marked, and each one the focused mark checked against its
    /// liveness array (FGC Fig. 9: a distributed network-intensive mark
    /// sends one query per chunk to the node holding it).
    pub chunk_queries: u64,
    /// The physical marks' L_p vector (perfect hash, walk and confirm
    /// bits): its bytes and the recipe fingerprints it covers.
    pub lp_vector: Option<(u64, u64)>,
}

/// The mark phase: from the catalog's retained backups, the live set the
/// select and sweep phases work from.
///
/// Each fills the same [`Mark`], so any mark works with any sweep:
/// - the logical mark (LGC, `logical.rs`): depth-first over each backup's
///   recipe tree;
/// - the physical mark (PGC/PGC+, `physical.rs`): breadth-first over the
///   recipe levels, each level's recipe containers scanned once in
///   container order, perfect hashes per level ([`Phv`]) and level checksums;
/// - the focused mark (FGC, `focused.rs`): walks only the deleted backups
///   and their correlative backups (from the reference graph), the
///   liveness array as a Bloom filter or a [`Phv`].
pub trait Marker {
    fn mark(&self, repo: &Context) -> Result<Mark>;
}

impl Mark {
    /// The live copies of chunk `fp` that the index places in container
    /// `id` and that are not moved yet (`placed` takes them), into `out`
    /// (cleared first). Recipe chunks have copy 0 alone.
    pub fn take_live_copies(
        &self,
        index: &crate::index::Index,
        kind: crate::container::ChunkKind,
        fp: &Fingerprint,
        id: ContainerId,
        placed: &mut crate::index::CopySet,
        out: &mut Vec<CopyNo>,
    ) {
        match kind {
            crate::container::ChunkKind::Data => self.live_copies_in(index, fp, id, out),
            crate::container::ChunkKind::Recipe => {
                out.clear();
                if self.valid_recipe.contains(fp) && index.get(kind, fp) == Some(id) {
                    out.push(0);
                }
            }
        }
        out.retain(|&n| placed.insert(*fp, n));
    }

    pub(crate) fn new(valid: FpFilter) -> Self {
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
            chunk_queries: 0,
            lp_vector: None,
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
    pub(crate) fn table_bytes(&self) -> usize {
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
