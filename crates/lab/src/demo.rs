//! `tessera lab demo`: a small multi-source synthetic series, every demo
//! approach, the report. Sized to finish well within a minute on 2 cores.

use crate::approach::Approach;
use crate::experiment::{BackendKind, Dataset, Experiment, Mode, RestorePlan};
use crate::retention::{Pick, Retention};
use crate::synth::SynthConfig;
use std::path::Path;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::restore::CacheSpec;
use tessera_core::units::ByteSize;
use tessera_core::HashAlgo;

/// The demo's dataset: 3 sources × 16 versions of ~6 MiB (MIX).
pub fn dataset() -> SynthConfig {
    SynthConfig {
        seed: 2025,
        sources: 3,
        versions: 16,
        files: 96,
        create_rate: 0.04,
        delete_rate: 0.02,
        modify_rate: 0.15,
        edit_size_min: ByteSize(256),
        edit_size_max: ByteSize(32 << 10),
        // File sizes 4 KiB…256 KiB and 2 edits per file.
        ..SynthConfig::default()
    }
}

/// The demo as an experiment (the same as `experiments/demo.toml`).
pub fn experiment(approaches: Vec<Approach>, file: &Path) -> Experiment {
    Experiment {
        name: "demo".into(),
        file: file.to_path_buf(),
        mode: Mode::Data,
        dataset: Dataset::Synthetic(dataset()),
        chunker: ChunkerConfig::parse("fastcdc:2k/8k/64k").expect("valid"),
        hash: HashAlgo::Blake3,
        container_size: 1 << 20,
        frame_size: tessera_core::catalog::DEFAULT_FRAME_SIZE,
        backend: BackendKind::Memory,
        index: Default::default(),
        compression: tessera_core::Compression::Off,
        encrypted: false,
        threads: 0,
        approaches,
        retention: Some(Retention {
            retain: 8,
            delete: 2,
            probability: 1.0,
            pick: Pick::Oldest,
            gc: true,
            cold_gc: false,
            seed: 1,
        }),
        restore: RestorePlan {
            cache: CacheSpec::Lru(16),
            retained_at_end: true,
            newest_after_each: false,
            verify: true,
            to_file: false,
            cold: false,
        },
        interleave: 1,
        fastcopy_doublings: 0,
    }
}

/// One paper's headline claim beside what a run shows.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Headline {
    pub paper: &'static str,
    pub claim: &'static str,
    /// This run's numbers for it.
    pub shows: String,
    /// Whether the claim's direction holds here.
    pub holds: bool,
}

/// The five papers' headlines as far as the run's approaches show them
/// (each needs its approaches: `naive` and the technique's own).
pub fn headlines(r: &crate::runner::Results) -> Vec<Headline> {
    use crate::runner::Row;
    let ok = |name: &str| {
        r.summaries
            .iter()
            .find(|s| s.approach == name && s.status == "ok")
    };
    let mark_bytes = |name: &str| -> u64 {
        r.rows
            .iter()
            .filter_map(|row| match row {
                Row::Gc(g) if g.approach == name => Some(g.report.mark_bytes_read),
                _ => None,
            })
            .sum()
    };
    let mut out = Vec::new();
    let Some(naive) = ok("naive") else {
        return out;
    };
    let level = |p: &str| {
        r.summaries
            .iter()
            .find_map(|s| s.approach.strip_prefix(p).map(str::to_string))
    };
    if let Some(l) = level("smr:").filter(|l| ok(&format!("capping:{l}")).is_some()) {
        if let (Some(s), Some(c)) = (ok(&format!("smr:{l}")), ok(&format!("capping:{l}"))) {
            out.push(Headline {
                paper: "SMR (smr-rewriting.md)",
                claim: "at one level SMR keeps more dedup than Capping (Fig. 11)",
                shows: format!(
                    "level {l}: dedup {:.3} vs {:.3}, read amplification {:.3} vs {:.3}",
                    s.dedup_ratio,
                    c.dedup_ratio,
                    s.mean_read_amplification,
                    c.mean_read_amplification
                ),
                holds: s.dedup_ratio >= c.dedup_ratio,
            });
        }
    }
    if let Some(h) = ok("har") {
        out.push(Headline {
            paper: "HAR (gccdf-eurosys25.md Fig. 2)",
            claim: "HAR restores faster than naive (~25 %) at a dedup cost",
            shows: format!(
                "read amplification {:.3} vs {:.3} ({:+.0} %), dedup {:.3} vs {:.3}",
                h.mean_read_amplification,
                naive.mean_read_amplification,
                (h.mean_read_amplification / naive.mean_read_amplification - 1.0) * 100.0,
                h.dedup_ratio,
                naive.dedup_ratio
            ),
            holds: h.mean_read_amplification < naive.mean_read_amplification,
        });
    }
    if let Some(g) = ok("gccdf") {
        out.push(Headline {
            paper: "GCCDF (gccdf-eurosys25.md)",
            claim: "GCCDF restores 2.1–3.1× faster than naive at the same dedup ratio",
            shows: format!(
                "naive / GCCDF read amplification {:.2}×, dedup {:.3} vs {:.3}",
                naive.mean_read_amplification / g.mean_read_amplification,
                g.dedup_ratio,
                naive.dedup_ratio
            ),
            holds: g.mean_read_amplification < naive.mean_read_amplification
                && (g.dedup_ratio - naive.dedup_ratio).abs() < 1e-9,
        });
    }
    if let (Some(m), Some(c)) = (ok("mfdedup"), ok("cma")) {
        out.push(Headline {
            paper: "MFDedup (mfdedup-tos.md)",
            claim: "a sequential layout, and 1.12–2.19× the dedup ratio of baselines with CMA",
            shows: format!(
                "read amplification {:.3}; dedup {:.3} vs CMA's {:.3} ({:.2}×)",
                m.mean_read_amplification,
                m.dedup_ratio,
                c.dedup_ratio,
                m.dedup_ratio / c.dedup_ratio
            ),
            holds: m.mean_read_amplification <= 1.01 && m.dedup_ratio > c.dedup_ratio,
        });
    }
    if ok("pgc+").is_some() {
        let (p, l) = (mark_bytes("pgc+"), mark_bytes("naive"));
        out.push(Headline {
            paper: "Physical GC (physical-gc-fast17.md)",
            claim: "the physical mark reads the recipes once, in container order, instead of walking each backup",
            shows: format!("mark read {p} B (PGC+) vs {l} B (logical, shared subtrees skipped)"),
            holds: p <= l,
        });
    }
    if ok("fgc").is_some() {
        let (f, l) = (mark_bytes("fgc"), mark_bytes("naive"));
        let (mut rounds, mut full) = (0, 0);
        for row in &r.rows {
            if let Row::Gc(g) = row {
                if g.approach == "fgc" && g.gc != "none" {
                    rounds += 1;
                    full += usize::from(g.report.mark_ran == "logical");
                }
            }
        }
        out.push(Headline {
            paper: "FGC (fgc-focused-gc.md)",
            claim: "the focused mark reads only the deleted and correlative backups, never more than the full mark",
            shows: format!(
                "mark read {f} B (focused) vs {l} B (full); the focus covered most of the repository in {full} of {rounds} rounds, which ran the full mark"
            ),
            holds: f <= l,
        });
    }
    out
}
