//! What a GC is asked: the sweep's order (naive or GCCDF), the mark, and
//! their parameters.

use super::mark::{LogicalMark, MarkSpec, PhysicalMark, VcSpec};
use crate::context::Context;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How the sweep orders the live chunks it copies forward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GcStrategy {
    /// Copy live chunks forward in their old order (the papers' baseline).
    #[default]
    Naive,
    /// Cluster live chunks by ownership and pack similar clusters together.
    Gccdf,
    /// Destor's container-marker algorithm (CMA, mfdedup-tos.md §5's
    /// second baseline): only containers with no live chunk are deleted and
    /// nothing is copied, so a container keeps its dead chunks as long as
    /// one of its chunks lives. The coarse end of GC (the paper's
    /// "utilization threshold 100 %"): fastest, leaves the most garbage.
    Cma,
}

impl GcStrategy {
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "naive" => Ok(GcStrategy::Naive),
            "gccdf" => Ok(GcStrategy::Gccdf),
            "cma" => Ok(GcStrategy::Cma),
            _ => Err(format!(
                "unknown gc strategy '{s}' (expected naive, gccdf or cma)"
            )),
        }
    }
}

impl fmt::Display for GcStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GcStrategy::Naive => "naive",
            GcStrategy::Gccdf => "gccdf",
            GcStrategy::Cma => "cma",
        })
    }
}

/// GC parameters.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// The sweep: naive copy-forward, GCCDF, or none (CMA).
    pub strategy: GcStrategy,
    /// The mark: logical today; physical, physical+ and focused plug in here.
    pub mark: MarkSpec,
    /// GC-involved containers processed together (GCCDF's segment, S).
    pub segment_containers: usize,
    /// Containers whose liveness (live bytes / bytes) is at or above this
    /// are left alone; 1.0 selects every container holding a dead chunk
    /// (the artifact's "threshold 0": migrate on any invalid byte).
    pub liveness_threshold: f64,
    /// Report what would be done without changing the repository.
    pub dry_run: bool,
    /// GCCDF: a leaf of the ownership tree is split by a backup only if at
    /// least this many of its chunks are referenced by it (artifact: 200 in
    /// 4 MiB containers). 0 = scaled with the containers:
    /// [`SPLIT_FRACTION`] of the mean chunks per data container.
    pub split_threshold: usize,
    /// The VC table: exact set, Bloom filter or perfect-hash vector.
    pub vc: VcSpec,
    /// GCCDF: false-positive rate of the per-backup ownership Bloom
    /// filters; 0 = exact fingerprint sets.
    pub ownership_fp_rate: f64,
    /// GCCDF: how clusters are packed (the paper's recency order, or the
    /// random ablation of its Fig. 15).
    pub packing: super::gccdf::plan::Packing,
    /// The focused mark: virtual-file size of the reference graph (FGC's
    /// granularity); `None` keeps the recorded graph's. Another size than
    /// the recorded one rebuilds the graph from every recipe.
    pub fgc_granularity: Option<u64>,
    /// Physical marks: budget (bytes) for the live vector of data chunks;
    /// above it the mark samples and runs two passes (FAST'17 §3.1.2).
    pub memory_limit: Option<u64>,
    /// Copy phase: at most this many container bytes read per second.
    pub max_read_rate: Option<u64>,
    /// Copy phase: at most this many container bytes written per second.
    pub max_write_rate: Option<u64>,
    /// Focused mark: run the full (logical) mark instead when the focus is
    /// estimated to cover most of the repository (`focused::Estimate`);
    /// `false` always runs the focused mark (tests of the mark itself).
    pub focus_fallback: bool,
    /// Logical mark: walk shared recipe subtrees again for every backup
    /// (the paper's LGC) instead of skipping those already marked.
    pub walk_shared_subtrees: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            strategy: GcStrategy::Naive,
            mark: MarkSpec::Logical,
            segment_containers: 100,
            liveness_threshold: 1.0,
            dry_run: false,
            split_threshold: 0,
            vc: VcSpec::Exact,
            ownership_fp_rate: 0.01,
            packing: Default::default(),
            fgc_granularity: None,
            memory_limit: None,
            max_read_rate: None,
            max_write_rate: None,
            walk_shared_subtrees: false,
            focus_fallback: true,
        }
    }
}

/// GCCDF's split threshold as a share of the chunks a container holds: the
/// paper's 200 of the ~512 chunks of a 4 MiB container (the artifact's
/// chunker, expected 4 KiB with min/4 and max×8, averages ~8 KiB). A
/// threshold of 200 in 256 KiB containers (~32 chunks) would never split a
/// leaf, so GCCDF would degrade to naive order.
pub const SPLIT_FRACTION: f64 = 200.0 / 512.0;

impl GcOptions {
    /// The split threshold in chunks for `repo`'s containers: the option,
    /// or when it is 0, [`SPLIT_FRACTION`] of the mean chunks per data
    /// container (at least 1).
    pub fn split_threshold_for(&self, repo: &Context) -> usize {
        if self.split_threshold > 0 {
            return self.split_threshold;
        }
        let (n, chunks) = repo
            .manifest
            .containers
            .iter()
            .filter(|c| c.kind == crate::container::ChunkKind::Data)
            .fold((0u64, 0u64), |(n, k), c| (n + 1, k + c.chunks as u64));
        let mean = if n == 0 {
            0.0
        } else {
            chunks as f64 / n as f64
        };
        ((mean * SPLIT_FRACTION).round() as usize).max(1)
    }

    /// Check the parameters; the error says what is wrong.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.segment_containers == 0 {
            return Err("segment size must be at least 1 container".into());
        }
        if !(0.0..=1.0).contains(&self.liveness_threshold) {
            return Err(format!(
                "liveness threshold must be between 0 and 1 (got {})",
                self.liveness_threshold
            ));
        }
        for (what, p) in [
            ("VC", self.vc.fp_rate()),
            ("ownership", self.ownership_fp_rate),
        ] {
            if !(0.0..0.5).contains(&p) {
                return Err(format!(
                    "{what} false-positive rate must be in [0, 0.5) (got {p})"
                ));
            }
        }
        for (what, r) in [("read", self.max_read_rate), ("write", self.max_write_rate)] {
            if r == Some(0) {
                return Err(format!("the maximum {what} rate must be above 0"));
            }
        }
        if self.memory_limit == Some(0) {
            return Err("the memory limit must be above 0".into());
        }
        Ok(())
    }
}

/// How long a GC waits for readers (restore, ls, check) that may read
/// containers it reclaimed before deleting them; after it, they are left
/// for the next writer that opens alone (leftovers meanwhile).
pub const READER_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl GcOptions {
    /// The physical mark (PGC, or PGC+ with `plus`) with these options.
    pub fn physical_marker(&self, plus: bool) -> PhysicalMark {
        PhysicalMark {
            plus,
            vc: self.vc,
            owners_fp_rate: (self.strategy == GcStrategy::Gccdf).then_some(self.ownership_fp_rate),
            memory_limit: self.memory_limit,
            liveness_threshold: self.liveness_threshold,
        }
    }

    /// The logical mark with these options, with the RRT and ownership
    /// filters GCCDF's sweep needs.
    pub fn marker(&self) -> LogicalMark {
        LogicalMark {
            vc: self.vc,
            owners_fp_rate: (self.strategy == GcStrategy::Gccdf).then_some(self.ownership_fp_rate),
            walk_shared: self.walk_shared_subtrees,
        }
    }
}

impl std::str::FromStr for GcStrategy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s)
    }
}
