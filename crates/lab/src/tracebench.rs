//! `tessera lab bench --trace`: the trace-mode ingest rate and the memory
//! per stored chunk, in one command.
//!
//! It runs the scale benchmark (`experiments/scale.toml`: the scale
//! generator, naive, no retention, no restores) with the sizes given, and
//! reports chunk references per second over every backup and the process's
//! peak memory per distinct chunk stored. Trace mode is what lets the lab
//! simulate the papers' terabyte datasets on one machine, so its rate is
//! the figure a silent regression would hide in (issue 35); the committed
//! result `experiments/results/scale` is its reference.

use crate::experiment::Experiment;
use crate::runner::{self, Row, RunOptions, Stamp};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What to run.
#[derive(Clone, Debug)]
pub struct TraceBenchOptions {
    /// Work directory (the local repository, with `backend = "local"`).
    pub dir: PathBuf,
    pub versions: usize,
    /// Logical bytes of each version.
    pub version_size: u64,
    /// Fraction of each version's chunks that are new.
    pub change_rate: f64,
    /// `memory` or `disk`.
    pub index: tessera_core::index::IndexKind,
    /// The repository lives in memory (the default) or in `dir`.
    pub local: bool,
}

impl TraceBenchOptions {
    /// `experiments/scale.toml`: 100 versions of 10 GiB, 2 % new.
    pub fn new(dir: PathBuf) -> Self {
        TraceBenchOptions {
            dir,
            versions: 100,
            version_size: 10 << 30,
            change_rate: 0.02,
            index: tessera_core::index::IndexKind::Memory,
            local: false,
        }
    }

    /// The experiment these options describe (the same text as
    /// `experiments/scale.toml` at its sizes).
    pub fn experiment_text(&self) -> String {
        format!(
            "name = \"bench-trace\"\nmode = \"trace\"\napproaches = [\"naive\"]\n\
             [dataset.scale]\nseed = 1\nversions = {}\nversion_size = {}\n\
             chunk_size = \"8KiB\"\nchange_rate = {}\n\
             [repo]\nchunker = \"fastcdc:2k/8k/64k\"\ncontainer_size = \"4MiB\"\n\
             index = \"{}\"\nbackend = \"{}\"\n\
             [restore]\nretained_at_end = false\n",
            self.versions,
            self.version_size,
            self.change_rate,
            self.index,
            if self.local { "local" } else { "memory" },
        )
    }
}

/// What it measured.
#[derive(Clone, Debug, Serialize)]
pub struct TraceBenchReport {
    pub stamp: Stamp,
    pub versions: usize,
    pub version_size: u64,
    pub index: String,
    pub backend: String,
    /// Chunk references ingested, over every backup.
    pub chunk_refs: u64,
    /// Seconds in backups (the generator's time excluded).
    pub backup_seconds: f64,
    pub chunk_refs_per_s: f64,
    /// Distinct data chunks in the index after the last backup.
    pub stored_chunks: u64,
    pub peak_rss_bytes: u64,
    /// Peak memory / stored chunks (all of it: index, container metadata,
    /// recipes and index segments held by the memory backend, the lab).
    pub peak_bytes_per_stored_chunk: f64,
    /// The in-memory index after the last backup.
    pub index_memory_bytes: u64,
    pub seconds: f64,
}

pub fn run(opts: &TraceBenchOptions) -> Result<TraceBenchReport> {
    if opts.versions == 0 || opts.version_size == 0 {
        bail!("--versions and --size must be positive");
    }
    let text = opts.experiment_text();
    let exp = Experiment::parse(&text, Path::new("lab bench --trace"), &opts.dir)?;
    let mut run_opts = RunOptions::new(&opts.dir);
    run_opts.progress = false;
    let results = runner::run(&exp, &run_opts)?;
    let s = &results.summaries[0];
    if s.status != "ok" {
        bail!("the trace benchmark failed: {}", s.status);
    }
    let backups: Vec<_> = results
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Backup(b) => Some(b),
            _ => None,
        })
        .collect();
    let chunk_refs: u64 = backups.iter().map(|b| b.chunks).sum();
    let backup_seconds: f64 = backups.iter().map(|b| b.seconds).sum();
    let last = backups.last().expect("a backup row per version");
    let stored_chunks = last.index_data_entries;
    Ok(TraceBenchReport {
        stamp: results.stamp.clone(),
        versions: opts.versions,
        version_size: opts.version_size,
        index: opts.index.to_string(),
        backend: if opts.local { "local" } else { "memory" }.into(),
        chunk_refs,
        backup_seconds,
        chunk_refs_per_s: chunk_refs as f64 / backup_seconds.max(1e-9),
        stored_chunks,
        peak_rss_bytes: s.peak_rss_bytes,
        peak_bytes_per_stored_chunk: s.peak_rss_bytes as f64 / stored_chunks.max(1) as f64,
        index_memory_bytes: last.index_memory_bytes,
        seconds: s.seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark's experiment is the committed scale benchmark at its
    /// default sizes (the rate it reports is the one `scale.toml` gives).
    #[test]
    fn default_experiment_is_the_scale_benchmark() {
        let ours = TraceBenchOptions::new("w".into());
        let exp =
            Experiment::parse(&ours.experiment_text(), Path::new("x"), Path::new(".")).unwrap();
        let committed = Experiment::load(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/scale.toml"),
        )
        .unwrap();
        let key = |e: &Experiment| {
            format!(
                "{:?} {:?} {:?} {:?} {} {:?} {} {:?}",
                e.mode,
                e.dataset,
                e.chunker,
                e.hash,
                e.container_size,
                e.backend,
                e.index,
                e.approaches.iter().map(|a| &a.name).collect::<Vec<_>>()
            )
        };
        assert_eq!(key(&exp), key(&committed));
    }

    /// A small run counts every reference and every distinct chunk.
    #[test]
    fn small_run_counts_references_and_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = TraceBenchOptions::new(dir.path().to_path_buf());
        o.versions = 3;
        o.version_size = 8 << 20;
        let r = run(&o).unwrap();
        // 8 MiB of 8 KiB average chunks, three times.
        assert!((2_400..=3_900).contains(&r.chunk_refs), "{}", r.chunk_refs);
        // The first version's chunks plus about 2 % new per later one.
        let per = r.chunk_refs / 3;
        assert!(
            r.stored_chunks >= per && r.stored_chunks <= per + per / 10,
            "{r:?}"
        );
        assert!(r.chunk_refs_per_s > 0.0 && r.peak_rss_bytes > 0);
    }
}
