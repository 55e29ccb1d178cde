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
    /// Container reads out of ascending id order: the first, a jump back
    /// or a re-read (ids are allocated in write order, so a backend lays
    /// containers out in that order). A pass in container order that skips
    /// containers is one seek; FAST'17's LGC re-reads are one each.
    seeks: AtomicU64,
    /// The id of the container read last, plus one (0: none yet).
    last_read: AtomicU64,
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
    /// Container reads (data or recipe) out of ascending id order: the
    /// first, a jump back or a re-read.
    pub container_seeks: u64,
}

impl Metrics {
    /// Container `id` was read whole (`id` is the container's number).
    pub fn container_read(&self, id: u64, recipe: bool, logical_bytes: u64) {
        // `last_read` is the previous id plus one (0: none yet).
        let prev = self.last_read.swap(id + 1, Relaxed);
        if prev == 0 || prev > id {
            self.seeks.fetch_add(1, Relaxed);
        }
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
            container_seeks: self.seeks.load(Relaxed),
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
            container_seeks: self.container_seeks - e.container_seeks,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of a container after the previous one (next or further on)
    /// is sequential; the first read, a jump back and a re-read are seeks.
    #[test]
    fn seeks_count_reads_out_of_sequence() {
        let m = Metrics::default();
        for id in [5, 6, 7, 3, 4, 4, 9] {
            m.container_read(id, id % 2 == 0, 10);
        }
        let s = m.snapshot();
        assert_eq!(s.data_containers_read + s.recipe_containers_read, 7);
        // 5 (first), 3, 4 again; not 6, 7, 4 or 9.
        assert_eq!(s.container_seeks, 3);
    }
}
