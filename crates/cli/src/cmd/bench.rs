//! `tessera lab bench`: print the hot-path throughputs.

use crate::ui;
use anyhow::Result;
use std::path::Path;
use std::process::ExitCode;
use tessera_core::restore::CacheSpec;
use tessera_core::units::ByteSize;
use tessera_lab::bench::{self, BenchOptions, RunFigures};
use tessera_lab::tracebench::{self, TraceBenchOptions};

pub fn run(
    dir: &Path,
    size: ByteSize,
    runs: u32,
    (cache, memory): (CacheSpec, u64),
    (compression, encryption, compressible): (
        tessera_core::Compression,
        tessera_core::Encryption,
        bool,
    ),
    threads: usize,
    json: bool,
) -> Result<ExitCode> {
    let mut opts = BenchOptions::new(dir.to_path_buf(), size.bytes());
    opts.runs = runs as usize;
    opts.cache = cache;
    opts.memory = memory;
    opts.compression = compression;
    opts.encryption = encryption;
    opts.compressible = compressible;
    opts.threads = threads;
    let r = bench::run(&opts, &mut |s| {
        if !json {
            eprintln!("bench: {s}…");
        }
    })?;
    if json {
        ui::print_json(&r)?;
        return Ok(ExitCode::SUCCESS);
    }
    // "min–max over the runs", when there are several.
    let range = |f: fn(&RunFigures) -> f64, digits: usize| {
        if r.runs.len() < 2 {
            return String::new();
        }
        let v: Vec<f64> = r.runs.iter().map(f).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("runs {lo:.digits$}–{hi:.digits$}")
    };
    println!(
        "stream {} ({} chunks, {}, {}), {:.0} % duplicate{}; median of {} run(s)",
        ui::bytes(r.stream_bytes),
        r.chunks,
        r.chunker,
        r.hash,
        r.duplicate_fraction * 100.0,
        if r.compressible { ", text-like" } else { "" },
        r.runs.len()
    );
    println!(
        "  compression {}, encryption {}: repository {} ({:.1} % of the stream)",
        r.compression,
        r.encryption,
        ui::bytes(r.stored_bytes),
        100.0 * r.stored_bytes as f64 / r.stream_bytes.max(1) as f64
    );
    let line = |name: &str, value: f64, f: fn(&RunFigures) -> f64, extra: String| {
        let runs = range(f, 0);
        let sep = if runs.is_empty() || extra.is_empty() {
            ""
        } else {
            "; "
        };
        let paren = if runs.is_empty() && extra.is_empty() {
            String::new()
        } else {
            format!("   {runs}{sep}{extra}")
        };
        println!("  {name:<24}{value:>8.0} MB/s{paren}");
    };
    line(
        "chunking alone",
        r.chunking_mb_s,
        |x| x.chunking_mb_s,
        String::new(),
    );
    line(
        "hashing alone",
        r.hashing_mb_s,
        |x| x.hashing_mb_s,
        String::new(),
    );
    line(
        "chunking then hashing",
        r.chunk_then_hash_mb_s,
        |x| x.chunk_then_hash_mb_s,
        String::new(),
    );
    line(
        "backup",
        r.backup_mb_s,
        |x| x.backup_mb_s,
        format!(
            "{:.2} × chunking then hashing{}, target ≥ 0.8",
            r.backup_vs_chunk_then_hash,
            with_space(range(|x| x.backup_vs_chunk_then_hash, 2))
        ),
    );
    let cold = if r.cold_reads {
        "cold"
    } else {
        "page cache kept"
    };
    line(
        &format!("sequential read ({cold})"),
        r.sequential_read_mb_s,
        |x| x.sequential_read_mb_s,
        String::new(),
    );
    line(
        &format!("restore ({cold})"),
        r.restore_mb_s,
        |x| x.restore_mb_s,
        format!(
            "{:.2} × sequential read{}, target ≥ 0.8",
            r.restore_vs_sequential_read,
            with_space(range(|x| x.restore_vs_sequential_read, 2))
        ),
    );
    println!(
        "  restore cache {} under a {} ceiling: {} containers read, read amplification {:.2}",
        r.cache,
        ui::bytes(r.restore_memory),
        r.restore_containers_read,
        r.restore_read_amplification
    );
    Ok(ExitCode::SUCCESS)
}

/// `" (s)"`, or nothing for an empty `s`.
fn with_space(s: String) -> String {
    if s.is_empty() {
        s
    } else {
        format!(" ({s})")
    }
}

/// `lab bench --trace`: the scale benchmark at the sizes given.
pub fn run_trace(
    dir: &Path,
    size: Option<ByteSize>,
    versions: u32,
    index: tessera_core::index::IndexKind,
    local: bool,
    json: bool,
) -> Result<ExitCode> {
    let mut opts = TraceBenchOptions::new(dir.to_path_buf());
    opts.versions = versions as usize;
    if let Some(s) = size {
        opts.version_size = s.bytes();
    }
    opts.index = index;
    opts.local = local;
    if !json {
        eprintln!(
            "bench: trace mode, {} versions of {}, index {}, repository {}…",
            opts.versions,
            ui::bytes(opts.version_size),
            index,
            if local { "local" } else { "in memory" }
        );
    }
    let r = tracebench::run(&opts)?;
    if json {
        ui::print_json(&r)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "trace ingest: {} chunk references in {:.1} s of backups: {:.2} M references/s",
        r.chunk_refs,
        r.backup_seconds,
        r.chunk_refs_per_s / 1e6
    );
    println!(
        "  {} distinct chunks stored; peak memory {} ({:.0} bytes per stored chunk), index {}",
        r.stored_chunks,
        ui::bytes(r.peak_rss_bytes),
        r.peak_bytes_per_stored_chunk,
        ui::bytes(r.index_memory_bytes)
    );
    println!(
        "  build {} on {}, {:.1} s in all",
        r.stamp.commit, r.stamp.host, r.seconds
    );
    Ok(ExitCode::SUCCESS)
}
