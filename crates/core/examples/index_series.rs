//! The on-disk index alone on a version series, as a backup drives it:
//! each version is the previous one with a share of its chunks replaced,
//! looked up in stream order (`contains_seq`), new chunks inserted with
//! the container they would land in. Prints lookups per second and where
//! they were answered, to tune the disk table without the rest of ingest.
//!
//! `cargo run --release -p tessera-core --example index_series -- 1000000 10 0.25 disk`
//! (chunks per version, versions, change rate, table). The table is `disk`
//! (the default: the disk table alone), `memory` or `index-disk` (the whole
//! [`Index`] in memory or on disk, through the calls ingest makes:
//! `get_data_seq`, `insert`).

use std::time::Instant;
use tessera_core::ids::ChunkKind;
use tessera_core::index::disk::{DiskConfig, DiskCursor, DiskTable};
use tessera_core::index::{DataCursor, Index, IndexEntry};
use tessera_core::{ContainerId, Fingerprint};

/// The table under test (one, on the stack: boxing the large variant
/// would add an indirection to the path measured).
#[allow(clippy::large_enum_variant)]
enum Table {
    Disk(DiskTable, DiskCursor),
    Index(Index, DataCursor),
}

impl Table {
    fn new_stream(&mut self) {
        match self {
            Table::Disk(_, c) => *c = DiskCursor::default(),
            Table::Index(_, c) => *c = DataCursor::default(),
        }
    }
    #[inline]
    fn contains_seq(&mut self, fp: &Fingerprint) -> bool {
        match self {
            Table::Disk(t, c) => t.contains_seq(c, fp),
            Table::Index(t, c) => t.get_data_seq(c, fp).is_some(),
        }
    }
    #[inline]
    fn insert(&mut self, fp: Fingerprint, container: u64) -> tessera_core::Result<()> {
        match self {
            Table::Disk(t, _) => t.insert(fp, container).map(drop),
            Table::Index(t, _) => t.insert(IndexEntry {
                fp,
                container: ContainerId(container),
                kind: ChunkKind::Data,
                copy: 0,
            }),
        }
    }
    fn len(&self) -> usize {
        match self {
            Table::Disk(t, _) => t.len(),
            Table::Index(t, _) => t.len().0,
        }
    }
    fn memory_bytes(&self) -> usize {
        match self {
            Table::Disk(t, _) => t.memory_bytes(),
            Table::Index(t, _) => t.memory_bytes(),
        }
    }
    fn describe(&self) -> String {
        match self {
            Table::Disk(t, _) => format!("{} runs, {:?}", t.runs(), t.counts()),
            Table::Index(t, _) => match t.disk_counts() {
                Some(c) => format!("{c:?}"),
                None => "memory".into(),
            },
        }
    }
}

fn main() -> tessera_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(1_000_000, |a| a.parse().unwrap());
    let versions: usize = args.next().map_or(10, |a| a.parse().unwrap());
    let change: f64 = args.next().map_or(0.25, |a| a.parse().unwrap());
    let table = args.next().unwrap_or_else(|| "disk".into());
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
    let mut t = match table.as_str() {
        "disk" => Table::Disk(
            DiskTable::create(&dir, DiskConfig::default()).unwrap(),
            DiskCursor::default(),
        ),
        "memory" => Table::Index(Index::default(), DataCursor::default()),
        "index-disk" => Table::Index(
            Index::on_disk(&dir, DiskConfig::default()).unwrap(),
            DataCursor::default(),
        ),
        other => panic!("unknown table {other} (disk, memory or index-disk)"),
    };
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
        t.new_stream();
        for fp in &version {
            if !t.contains_seq(fp) {
                t.insert(*fp, stored / 512)?;
                stored += 1;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        total_refs += version.len();
        total_secs += secs;
        println!(
            "version {v}: {:.2} M lookups/s, {} stored, {:.2} B/entry, {}",
            version.len() as f64 / secs / 1e6,
            t.len(),
            t.memory_bytes() as f64 / t.len() as f64,
            t.describe()
        );
    }
    println!(
        "all: {:.2} M lookups/s",
        total_refs as f64 / total_secs / 1e6
    );
    Ok(())
}
