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
        },
        interleave: 1,
    }
}
