//! The on-disk index alone on a version series, as a backup drives it:
//! each version is the previous one with a share of its chunks replaced,
//! looked up in stream order (`contains_seq`), new chunks inserted with
//! the container they would land in. Prints lookups per second and where
//! they were answered, to tune the disk table without the rest of ingest.
//!
//! `cargo run --release -p tessera-core --example index_series -- 1000000 10 0.25`
//! (chunks per version, versions, change rate).

use std::time::Instant;
use tessera_core::index::disk::{DiskConfig, DiskCursor, DiskTable};
use tessera_core::Fingerprint;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(1_000_000, |a| a.parse().unwrap());
    let versions: usize = args.next().map_or(10, |a| a.parse().unwrap());
    let change: f64 = args.next().map_or(0.25, |a| a.parse().unwrap());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut next_fp = 0u64;
    let mut fresh = || {
        next_fp += 1;
        tessera_core::HashAlgo::Blake3.hash(&next_fp.to_le_bytes())
    };
    let mut version: Vec<Fingerprint> = (0..n).map(|_| fresh()).collect();
    let dir = std::env::temp_dir();
    let mut t = DiskTable::create(&dir, DiskConfig::default()).unwrap();
    let mut stored = 0u64;
    let (mut total_refs, mut total_secs) = (0usize, 0f64);
    for v in 0..versions {
        if v > 0 {
            // Runs of 1..=64 changed chunks, as the lab's scale series.
            let mut todo = (n as f64 * change).round() as usize;
            while todo > 0 {
                let run = (1 + rng() as usize % 64).min(todo);
                let at = rng() as usize % n.saturating_sub(run).max(1);
                for fp in &mut version[at..at + run] {
                    *fp = fresh();
                }
                todo -= run;
            }
        }
        let started = Instant::now();
        let mut cursor = DiskCursor::default();
        for fp in &version {
            if !t.contains_seq(&mut cursor, fp) {
                t.insert(*fp, stored / 512);
                stored += 1;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        total_refs += version.len();
        total_secs += secs;
        println!(
            "version {v}: {:.2} M lookups/s, {} stored, {} runs, {:.2} B/entry, {:?}",
            version.len() as f64 / secs / 1e6,
            t.len(),
            t.runs(),
            t.memory_bytes() as f64 / t.len() as f64,
            t.counts()
        );
    }
    println!(
        "all: {:.2} M lookups/s",
        total_refs as f64 / total_secs / 1e6
    );
}
