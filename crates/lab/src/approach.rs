//! Approaches: a rewrite policy, a GC strategy and a restore cache, named so
//! that experiments can compare them. Each only calls the core APIs, so a
//! technique becomes available to the lab as soon as core implements it.

use serde::{Deserialize, Serialize};
use tessera_core::gc::{GcOptions, GcStrategy, MarkSpec, Packing, VcSpec};
use tessera_core::layout::LayoutKind;
use tessera_core::restore::CacheSpec;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::units::ByteSize;

/// What `tessera lab demo` compares: every paper's technique on one series
/// (rewriting: Capping, SMR, HAR; GCCDF; MFDedup and the CMA baseline;
/// physical GC's PGC+ mark; FGC's focused mark). Levels are in the
/// papers' units (containers per segment of 5 containers of data); the
/// demo's backups are small (~6 MiB), so a level of 10 is where they
/// rewrite a visible share.
pub const DEMO_APPROACHES: &[&str] = &[
    "naive",
    "capping:10",
    "smr:10",
    "har",
    "gccdf",
    "mfdedup",
    "cma",
    "pgc+",
    "fgc",
];

/// An approach as written in an experiment file (`[[approach]]`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApproachDef {
    pub name: String,
    /// `none`, `capping:T`, `smr:T`, `ned:T`, `har`, `har:U` or `har:U:L`.
    #[serde(default = "none")]
    pub rewrite: String,
    /// `none`, `naive`, `gccdf` or `cma` (delete only containers with no
    /// live chunk, copy nothing: mfdedup-tos.md §5's CMA baseline).
    #[serde(default = "naive")]
    pub gc: String,
    /// Rewriting's ingest segment (e.g. "20MiB"); default 5 containers of
    /// data, the SMR paper's 20 MB at 4 MB containers, so a level means
    /// the same at any container size. (Not `segment_containers`, GCCDF's
    /// GC batch.)
    #[serde(default)]
    pub segment: Option<ByteSize>,
    /// GCCDF: GC-involved containers analyzed together.
    #[serde(default = "segment")]
    pub segment_containers: usize,
    #[serde(default = "one")]
    pub liveness_threshold: f64,
    /// GCCDF: a leaf is split only if at least this many of its chunks are
    /// referenced by the backup checked; 0 (the default) scales the
    /// artifact's 200 of ~512 chunks per 4 MiB container to the
    /// repository's containers (`gc::SPLIT_FRACTION`).
    #[serde(default = "split")]
    pub split_threshold: usize,
    /// GCCDF: `recency` (the paper's cluster packing) or `random` (its
    /// Fig. 15 ablation: the same clusters in a random order).
    #[serde(default = "recency")]
    pub packing: String,
    /// GC's valid-chunk table: `exact`, `bloom:P` (false-positive rate P)
    /// or `phv` (perfect-hash vector).
    #[serde(default = "exact")]
    pub vc: String,
    /// Overrides the experiment's restore cache.
    #[serde(default)]
    pub cache: Option<String>,
    /// `containers` (default) or `mfdedup` (NDF + AVAR + deletion without
    /// GC; `gc` must then be `none`).
    #[serde(default = "containers")]
    pub layout: String,
    /// MFDedup: how many versions arranging is kept behind (0: arrange
    /// after each backup, the paper's default; §5.7 studies 1…8).
    #[serde(default)]
    pub arrange_lag: u32,
    /// The version chains: `source` (default: one per source of a
    /// multi-source series, `s<k>` in the version names) or `one` (the
    /// whole series as one chain: MFDedup over a mixed series, as the
    /// GCCDF paper compares it).
    #[serde(default = "source")]
    pub chains: String,
    /// GC's mark: `logical` (LGC), `physical` (PGC), `physical+` (PGC+)
    /// or `focused` (FGC: the deleted backups and their correlative
    /// backups; the repository records the reference graph from its first
    /// backup).
    #[serde(default = "logical")]
    pub mark: String,
    /// FGC's virtual-file size in bytes (0: whole backups).
    #[serde(default)]
    pub fgc_granularity: u64,
    /// Physical marks: the live vector's memory budget (e.g. "256KiB");
    /// above it they sample and mark twice.
    #[serde(default)]
    pub memory_limit: Option<ByteSize>,
    /// Logical mark: walk shared recipe subtrees again for every backup,
    /// as the physical-GC paper's LGC does, instead of skipping them.
    #[serde(default)]
    pub walk_shared_subtrees: bool,
    /// Focused mark: run the full mark instead where the focus covers most
    /// of the repository (default); `false` always marks focused, as the
    /// paper's FGC does.
    #[serde(default = "yes")]
    pub focus_fallback: bool,
}

fn yes() -> bool {
    true
}

fn source() -> String {
    "source".into()
}

fn recency() -> String {
    "recency".into()
}

fn containers() -> String {
    "containers".into()
}

fn logical() -> String {
    "logical".into()
}

fn none() -> String {
    "none".into()
}
fn exact() -> String {
    "exact".into()
}
fn naive() -> String {
    "naive".into()
}
fn segment() -> usize {
    GcOptions::default().segment_containers
}
fn one() -> f64 {
    1.0
}
fn split() -> usize {
    GcOptions::default().split_threshold
}

/// A resolved approach, ready to run.
#[derive(Clone, Debug)]
pub struct Approach {
    pub name: String,
    pub rewrite: RewriteSpec,
    /// Rewriting's ingest segment in bytes (`None`: 5 containers of data).
    pub segment: Option<u64>,
    /// `None`: deleted backups' chunks are never reclaimed.
    pub gc: Option<GcOptions>,
    pub cache: Option<CacheSpec>,
    pub layout: LayoutKind,
    pub arrange_lag: u32,
    /// The whole series is one version chain (`chains = "one"`).
    pub one_chain: bool,
}

impl Approach {
    /// One line for reports: `rewrite=capping:10 gc=naive`.
    pub fn describe(&self, default_cache: CacheSpec) -> String {
        if self.layout == LayoutKind::Mfdedup {
            return format!(
                "layout=mfdedup (NDF + AVAR, forget deletes categories) arrange_lag={}{}",
                self.arrange_lag,
                if self.one_chain { " chains=one" } else { "" }
            );
        }
        let rw = match self.segment {
            Some(b) if self.rewrite != RewriteSpec::None => {
                format!("{} segment={}", self.rewrite, ByteSize(b))
            }
            _ => self.rewrite.to_string(),
        };
        let gc = self.gc.as_ref().map_or("none".to_string(), |g| {
            // The valid-chunk table, when not the exact set.
            let vc = match g.vc {
                VcSpec::Exact => String::new(),
                vc => format!(" vc={vc}"),
            };
            let mark = match g.mark {
                MarkSpec::Logical => String::new(),
                m => format!(" mark={m}"),
            };
            let mark = match g.packing {
                Packing::Recency => mark,
                p => format!("{mark} packing={p}"),
            };
            let budget = g
                .memory_limit
                .map_or(String::new(), |l| format!(" memory-limit={}", ByteSize(l)));
            let walk = match (g.walk_shared_subtrees, g.focus_fallback) {
                (true, _) => " walk-shared",
                (false, false) if g.mark == MarkSpec::Focused => " no-fallback",
                _ => "",
            };
            format!("{}{vc}{mark}{walk}{budget}", g.strategy)
        });
        format!(
            "rewrite={rw} gc={gc} cache={}",
            self.cache.unwrap_or(default_cache)
        )
    }
}

/// Built-in approach names: `naive`, `nogc`, `capping[:T]`, `smr[:T]`,
/// `ned[:T]`, `har[:U[:L]]`, `gccdf`. Rewriting approaches use naive GC, as
/// in the papers.
pub fn builtin(name: &str) -> Result<ApproachDef, String> {
    let (base, _) = name.split_once(':').unwrap_or((name, ""));
    let def = |rewrite: &str, gc: &str| ApproachDef {
        name: name.to_string(),
        rewrite: rewrite.into(),
        gc: gc.into(),
        segment: None,
        segment_containers: segment(),
        liveness_threshold: 1.0,
        split_threshold: split(),
        packing: recency(),
        vc: exact(),
        cache: None,
        layout: containers(),
        arrange_lag: 0,
        chains: source(),
        mark: logical(),
        fgc_granularity: 0,
        memory_limit: None,
        walk_shared_subtrees: false,
        focus_fallback: true,
    };
    let plain = base == name;
    match base {
        "naive" if plain => Ok(def("none", "naive")),
        "nogc" if plain => Ok(def("none", "none")),
        "gccdf" if plain => Ok(def("none", "gccdf")),
        "capping" | "smr" if plain => Ok(def(&format!("{base}:20"), "naive")),
        "capping" | "smr" | "har" => Ok(def(name, "naive")),
        "cma" if plain => Ok(def("none", "cma")),
        "pgc" | "pgc+" | "fgc" if plain => Ok(ApproachDef {
            mark: match base {
                "pgc" => "physical",
                "pgc+" => "physical+",
                _ => "focused",
            }
            .into(),
            ..def("none", "naive")
        }),
        "ned" if plain => Ok(def("ned:0.5", "naive")),
        "ned" => Ok(def(name, "naive")),
        "mfdedup" => {
            let lag = match name.split_once(':') {
                None => 0,
                Some((_, n)) => n
                    .parse()
                    .map_err(|_| format!("mfdedup:N expects a whole number of versions (got '{name}')"))?,
            };
            Ok(ApproachDef {
                layout: "mfdedup".into(),
                arrange_lag: lag,
                ..def("none", "none")
            })
        }
        _ => Err(format!(
            "unknown approach '{name}' (built-in: naive, nogc, capping[:T], smr[:T], ned[:T], har[:U[:L]], gccdf, cma, pgc, pgc+, fgc, mfdedup[:LAG]; or define it in an [[approach]] table)"
        )),
    }
}

impl ApproachDef {
    // `..GcOptions::default()`: GC parameters core adds keep their defaults.
    #[allow(clippy::needless_update)]
    pub fn resolve(&self) -> Result<Approach, String> {
        let ctx = |e: String| format!("approach '{}': {e}", self.name);
        let rewrite = RewriteSpec::parse(&self.rewrite).map_err(ctx)?;
        let vc: VcSpec = self.vc.parse().map_err(ctx)?;
        let gc = match self.gc.to_ascii_lowercase().as_str() {
            "none" | "off" => None,
            s => Some(GcOptions {
                strategy: GcStrategy::parse(s).map_err(|e| ctx(format!("{e} (or none)")))?,
                segment_containers: self.segment_containers.max(1),
                liveness_threshold: self.liveness_threshold,
                split_threshold: self.split_threshold,
                packing: self.packing.parse::<Packing>().map_err(ctx)?,
                vc,
                dry_run: false,
                mark: self.mark.parse::<MarkSpec>().map_err(ctx)?,
                memory_limit: self.memory_limit.map(|b| b.0),
                walk_shared_subtrees: self.walk_shared_subtrees,
                fgc_granularity: Some(self.fgc_granularity),
                focus_fallback: self.focus_fallback,
                ..GcOptions::default()
            }),
        };
        let layout: LayoutKind = self.layout.parse().map_err(ctx)?;
        if layout == LayoutKind::Mfdedup && (gc.is_some() || rewrite != RewriteSpec::None) {
            return Err(ctx(
                "the mfdedup layout has neither rewriting nor GC (set rewrite and gc to none)"
                    .into(),
            ));
        }
        let cache = match &self.cache {
            None => None,
            Some(c) => Some(CacheSpec::parse(c).map_err(ctx)?),
        };
        // Names become directory names (local backend) and CSV fields.
        let fine = |c: char| c.is_ascii_alphanumeric() || "-_.:+".contains(c);
        if self.name.is_empty() || self.name.starts_with('.') || !self.name.chars().all(fine) {
            return Err(ctx(
                "a name may use letters, digits and - _ . : + (not starting with .)".into(),
            ));
        }
        if self.segment.is_some_and(|b| b.0 == 0) {
            return Err(ctx("segment must be positive".into()));
        }
        Ok(Approach {
            name: self.name.clone(),
            rewrite,
            segment: self.segment.map(|b| b.0),
            gc,
            cache,
            layout,
            arrange_lag: self.arrange_lag,
            one_chain: match self.chains.as_str() {
                "source" => false,
                "one" => true,
                c => {
                    return Err(ctx(format!(
                        "unknown chains '{c}' (expected source or one)"
                    )))
                }
            },
        })
    }
}

/// Resolve a comma-separated list of built-in names (the demo's `--approaches`).
pub fn resolve_list(list: &str) -> Result<Vec<Approach>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|n| builtin(n).and_then(|d| d.resolve()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vc_choices_resolve_and_bad_ones_fail() {
        let mut d = builtin("naive").unwrap();
        for (vc, spec) in [
            ("exact", VcSpec::Exact),
            ("phv", VcSpec::Phv),
            ("bloom:0.01", VcSpec::Bloom { fp_rate: 0.01 }),
        ] {
            d.vc = vc.into();
            let g = d.resolve().unwrap().gc.unwrap();
            assert_eq!(g.vc, spec, "{vc}");
        }
        d.vc = "phv".into();
        let a = d.resolve().unwrap();
        assert!(a.describe(CacheSpec::Lru(4)).contains("gc=naive vc=phv"));
        for bad in ["bloom", "bloom:0", "bloom:0.7", "perfect"] {
            d.vc = bad.into();
            assert!(d.resolve().unwrap_err().contains("unknown vc"), "{bad}");
        }
    }

    #[test]
    fn builtins_resolve_and_unknown_names_fail() {
        for n in DEMO_APPROACHES
            .iter()
            .chain(&["nogc", "capping", "har:0.7", "ned", "ned:0.2"])
        {
            builtin(n).unwrap().resolve().unwrap();
        }
        let a = builtin("capping").unwrap().resolve().unwrap();
        assert_eq!(a.rewrite, RewriteSpec::Capping { level: 20 });
        assert_eq!(a.gc.unwrap().strategy, GcStrategy::Naive);
        assert!(builtin("nogc").unwrap().resolve().unwrap().gc.is_none());
        for (n, strategy, mark) in [
            ("cma", GcStrategy::Cma, MarkSpec::Logical),
            ("pgc", GcStrategy::Naive, MarkSpec::Physical),
            ("pgc+", GcStrategy::Naive, MarkSpec::PhysicalPlus),
            ("fgc", GcStrategy::Naive, MarkSpec::Focused),
        ] {
            let g = builtin(n).unwrap().resolve().unwrap().gc.unwrap();
            assert_eq!((g.strategy, g.mark), (strategy, mark), "{n}");
        }
        assert_eq!(
            builtin("mfdedup").unwrap().resolve().unwrap().layout,
            LayoutKind::Mfdedup
        );
        let mut cma = builtin("capping").unwrap();
        cma.gc = "cma".into();
        assert_eq!(cma.resolve().unwrap().gc.unwrap().strategy, GcStrategy::Cma);
        let mut evil = builtin("naive").unwrap();
        evil.name = "../../etc".into();
        assert!(evil.resolve().unwrap_err().contains("a name may use"));
        for bad in ["fancy", "naive:3", "capping:x", "ned:2"] {
            let r = builtin(bad).and_then(|d| d.resolve());
            assert!(r.is_err(), "{bad}");
        }
        assert!(builtin("fancy")
            .unwrap_err()
            .contains("unknown approach 'fancy'"));
    }
}
