//! What a restore is asked and what it reports, and the [`Restorer`] a
//! layout gives for what it restores itself.

use crate::cache::CacheSpec;
use crate::catalog::{BackupEntry, BackupId};
use crate::context::Context;
use crate::error::{Error, Result};
use serde::Serialize;
use std::io::Write;

/// The default memory ceiling of a restore's containers and opened frames
/// ([`RestoreOptions::memory`]). Chosen so that a restore of a 2.2 GB
/// copy of `/usr` (`docs/ARCHITECTURE.md`, "Restore memory") peaks below
/// restic 0.14's memory on the same tree.
pub const DEFAULT_MEMORY: u64 = 48 << 20;

/// Restore parameters.
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// How data containers are cached while the recipe is walked.
    pub cache: CacheSpec,
    /// Memory ceiling, in bytes, for the containers a restore holds (as
    /// stored: cached, read ahead, being read) and the frames it opened.
    /// The cache policy decides the reads; when the containers it keeps
    /// would exceed the ceiling, the least recently used are freed and read
    /// again if the policy uses them again (counted as reads). One
    /// container and one frame are always held, so a ceiling below a
    /// container restores a container at a time.
    pub memory: u64,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        RestoreOptions {
            cache: CacheSpec::default(),
            memory: DEFAULT_MEMORY,
        }
    }
}

impl RestoreOptions {
    /// The ceiling split between containers and opened frames: frames get
    /// an eighth, at most 4 MiB (16 frames of the default 256 KiB), half of
    /// it for the frames opened ahead on the openers' threads.
    pub(crate) fn split_memory(&self) -> (u64, usize) {
        let frames = (self.memory / 8).min(4 << 20);
        (self.memory - frames, frames as usize)
    }
}

/// What a restore did.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    pub backup_id: BackupId,
    pub restored_bytes: u64,
    pub chunks: u64,
    pub data_containers_read: u64,
    pub data_container_bytes_read: u64,
    pub recipe_containers_read: u64,
    pub read_amplification: f64,
    pub speed_factor: f64,
    /// Sequential runs of data reads: on the container layout the reads
    /// that do not follow the previous one in id order (first, jump,
    /// re-read), in the cache policy's order; on MFDedup the volumes,
    /// active run and pending categories read (`MfdedupReads::seeks`).
    pub seeks: u64,
    pub cache_containers: usize,
    /// The cache policy used.
    pub cache: CacheSpec,
    pub seconds: f64,
    pub throughput_mb_s: f64,
    /// MFDedup layout: categories, volumes and sequential runs read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mfdedup: Option<MfdedupReads>,
}

/// The MFDedup layout's own restore metrics (`layout::mfdedup::restore`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MfdedupReads {
    /// Categories read.
    pub categories: u64,
    /// Volumes read from (each a prefix of its categories).
    pub volumes: u64,
    /// Sequential runs read: volumes, the active categories (one run) and
    /// each pending category — the paper's seek count.
    pub seeks: u64,
    /// Whether the output was a stream restored through a temporary file.
    pub buffered: bool,
}

/// How a layout restores a backup that it does not read through the
/// container pipeline (MFDedup reads whole categories, out of order, by
/// positional writes). Given by the layout chosen when the repository
/// opened (`layout::Layout::restorer`); `None` answers take the pipeline.
pub trait Restorer: Sync {
    /// Restore `backup`'s stream into `out`, if this layout does it itself.
    fn restore_to(
        &self,
        _cx: &Context,
        _backup: &BackupEntry,
        _out: &mut dyn Write,
        _opts: &RestoreOptions,
        _progress: &mut dyn FnMut(u64),
    ) -> Option<Result<RestoreReport>> {
        None
    }
    /// Whether this layout restores file and stream backups into their
    /// file by positional writes ([`restore_to_file`](Self::restore_to_file)).
    fn writes_in_place(&self) -> bool {
        false
    }
    /// Restore a file or stream backup into `file` by positional writes
    /// (asked only when [`writes_in_place`](Self::writes_in_place)).
    fn restore_to_file(
        &self,
        _cx: &Context,
        _backup: &BackupEntry,
        _file: &std::fs::File,
        _opts: &RestoreOptions,
        _progress: &mut dyn FnMut(u64),
    ) -> Result<RestoreReport> {
        Err(Error::invalid("this layout restores no file in place"))
    }
}

/// The container pipeline for every backup.
pub struct Pipeline;
impl Restorer for Pipeline {}
