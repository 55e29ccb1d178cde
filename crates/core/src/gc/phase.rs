//! The phases of a GC (FAST'17's: analysis, enumeration per recipe level,
//! select, copy) and what each cost: every GC report lists them.

use crate::container::{format::HEADER_LEN, ChunkMeta, ContainerId};
use crate::context::Context;
use crate::error::Result;
use crate::metrics::MetricsSnapshot;
use serde::Serialize;
use std::time::Instant;

/// Time, I/O and memory of one GC phase (FAST'17's phases: analysis,
/// enumeration per recipe level, select, copy). Container reads are whole
/// containers; metadata reads touch only a container's chunk list.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseReport {
    pub phase: String,
    pub seconds: f64,
    /// Logical container bytes read (data and recipe).
    pub bytes_read: u64,
    pub containers_read: u64,
    pub metadata_reads: u64,
    pub metadata_bytes: u64,
    /// The phase's own tables (estimated).
    pub memory_bytes: u64,
}

/// Times one phase and counts what it read.
pub struct PhaseClock {
    phase: String,
    started: Instant,
    io: MetricsSnapshot,
    pub(crate) metadata_reads: u64,
    pub(crate) metadata_bytes: u64,
}

impl PhaseClock {
    pub(crate) fn start(repo: &Context, phase: impl Into<String>) -> Self {
        PhaseClock {
            phase: phase.into(),
            started: Instant::now(),
            io: repo.metrics.snapshot(),
            metadata_reads: 0,
            metadata_bytes: 0,
        }
    }

    /// A container's metadata (header and chunk list, without its data),
    /// counted as this phase's metadata read.
    pub(crate) fn read_meta(&mut self, repo: &Context, id: ContainerId) -> Result<Vec<ChunkMeta>> {
        let (h, meta) = repo.store.read_meta(id)?;
        self.metadata_reads += 1;
        self.metadata_bytes += HEADER_LEN as u64 + h.meta_len;
        Ok(meta)
    }

    pub(crate) fn stop(self, repo: &Context, memory_bytes: usize) -> PhaseReport {
        let io = repo.metrics.snapshot().since(&self.io);
        PhaseReport {
            phase: self.phase,
            seconds: self.started.elapsed().as_secs_f64(),
            bytes_read: io.recipe_container_bytes_read + io.data_container_bytes_read,
            containers_read: io.recipe_containers_read + io.data_containers_read,
            metadata_reads: self.metadata_reads,
            metadata_bytes: self.metadata_bytes,
            memory_bytes: memory_bytes as u64,
        }
    }
}
