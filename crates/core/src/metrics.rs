//! Counters that every stage reports into.
//!
//! Container reads and writes are counted here, at the container layer, in
//! *logical* container bytes (the sum of the chunk lengths a container holds),
//! so data mode and trace mode — where a data container holds no bytes —
//! report identical layout metrics. Object-level I/O (what really hit the
//! backend) is counted separately by `backend::CountingStore`.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub struct Metrics {
    data_reads: AtomicU64,
    data_read_bytes: AtomicU64,
    recipe_reads: AtomicU64,
    recipe_read_bytes: AtomicU64,
    data_writes: AtomicU64,
    data_write_bytes: AtomicU64,
    recipe_writes: AtomicU64,
    recipe_write_bytes: AtomicU64,
}

/// A point-in-time copy of [`Metrics`]; subtract two with [`since`](Self::since).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricsSnapshot {
    pub data_containers_read: u64,
    pub data_container_bytes_read: u64,
    pub recipe_containers_read: u64,
    pub recipe_container_bytes_read: u64,
    pub data_containers_written: u64,
    pub data_container_bytes_written: u64,
    pub recipe_containers_written: u64,
    pub recipe_container_bytes_written: u64,
}

impl Metrics {
    pub fn container_read(&self, recipe: bool, logical_bytes: u64) {
        if recipe {
            self.recipe_reads.fetch_add(1, Relaxed);
            self.recipe_read_bytes.fetch_add(logical_bytes, Relaxed);
        } else {
            self.data_reads.fetch_add(1, Relaxed);
            self.data_read_bytes.fetch_add(logical_bytes, Relaxed);
        }
    }
    pub fn container_written(&self, recipe: bool, logical_bytes: u64) {
        if recipe {
            self.recipe_writes.fetch_add(1, Relaxed);
            self.recipe_write_bytes.fetch_add(logical_bytes, Relaxed);
        } else {
            self.data_writes.fetch_add(1, Relaxed);
            self.data_write_bytes.fetch_add(logical_bytes, Relaxed);
        }
    }
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            data_containers_read: self.data_reads.load(Relaxed),
            data_container_bytes_read: self.data_read_bytes.load(Relaxed),
            recipe_containers_read: self.recipe_reads.load(Relaxed),
            recipe_container_bytes_read: self.recipe_read_bytes.load(Relaxed),
            data_containers_written: self.data_writes.load(Relaxed),
            data_container_bytes_written: self.data_write_bytes.load(Relaxed),
            recipe_containers_written: self.recipe_writes.load(Relaxed),
            recipe_container_bytes_written: self.recipe_write_bytes.load(Relaxed),
        }
    }
}

impl MetricsSnapshot {
    pub fn since(&self, e: &MetricsSnapshot) -> MetricsSnapshot {
        MetricsSnapshot {
            data_containers_read: self.data_containers_read - e.data_containers_read,
            data_container_bytes_read: self.data_container_bytes_read - e.data_container_bytes_read,
            recipe_containers_read: self.recipe_containers_read - e.recipe_containers_read,
            recipe_container_bytes_read: self.recipe_container_bytes_read
                - e.recipe_container_bytes_read,
            data_containers_written: self.data_containers_written - e.data_containers_written,
            data_container_bytes_written: self.data_container_bytes_written
                - e.data_container_bytes_written,
            recipe_containers_written: self.recipe_containers_written - e.recipe_containers_written,
            recipe_container_bytes_written: self.recipe_container_bytes_written
                - e.recipe_container_bytes_written,
        }
    }
}

/// Read amplification: container bytes read per byte restored (0 when nothing was restored).
pub fn read_amplification(container_bytes_read: u64, restored_bytes: u64) -> f64 {
    if restored_bytes == 0 {
        0.0
    } else {
        container_bytes_read as f64 / restored_bytes as f64
    }
}

/// Speed factor: MB (10^6 bytes) restored per container read.
pub fn speed_factor(restored_bytes: u64, containers_read: u64) -> f64 {
    if containers_read == 0 {
        0.0
    } else {
        restored_bytes as f64 / 1e6 / containers_read as f64
    }
}

/// Throughput in MB/s (10^6 bytes per second).
pub fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        bytes as f64 / 1e6 / secs
    }
}
