//! `tessera lab bench`: print the hot-path throughputs.

use crate::ui;
use anyhow::Result;
use std::path::Path;
use std::process::ExitCode;
use tessera_core::chunking::parse_bytes;
use tessera_lab::bench::{self, BenchOptions};

pub fn run(dir: &Path, size: &str, json: bool) -> Result<ExitCode> {
    let size = parse_bytes(size).map_err(anyhow::Error::msg)?;
    let opts = BenchOptions::new(dir.to_path_buf(), size);
    let r = bench::run(&opts, &mut |s| {
        if !json {
            eprintln!("bench: {s}…");
        }
    })?;
    if json {
        ui::print_json(&r)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "stream {} ({} chunks, {}, {}), {:.0} % duplicate",
        ui::bytes(r.stream_bytes),
        r.chunks,
        r.chunker,
        r.hash,
        r.duplicate_fraction * 100.0
    );
    println!("  chunking alone          {:>8.0} MB/s", r.chunking_mb_s);
    println!("  hashing alone           {:>8.0} MB/s", r.hashing_mb_s);
    println!(
        "  chunking then hashing   {:>8.0} MB/s",
        r.chunk_then_hash_mb_s
    );
    println!(
        "  backup                  {:>8.0} MB/s   ({:.2} × chunking then hashing; target ≥ 0.8)",
        r.backup_mb_s, r.backup_vs_chunk_then_hash
    );
    let cold = if r.cold_reads {
        "cold"
    } else {
        "page cache could not be dropped"
    };
    println!(
        "  sequential read ({cold}) {:>8.0} MB/s",
        r.sequential_read_mb_s
    );
    println!(
        "  restore ({cold})         {:>8.0} MB/s   ({:.2} × sequential read; target ≥ 0.8), {} containers read, read amplification {:.2}",
        r.restore_mb_s, r.restore_vs_sequential_read, r.restore_containers_read, r.restore_read_amplification
    );
    Ok(ExitCode::SUCCESS)
}
