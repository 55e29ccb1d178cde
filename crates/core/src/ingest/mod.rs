//! Backup ingest: chunk → fingerprint → dedup → containers + recipe.
//!
//! Two stages run concurrently so that both cores work:
//! 1. the caller's thread produces bytes (a file, stdin, a directory's
//!    stream) in batches of about 4 MiB, marking where each file ends;
//! 2. a worker thread has each batch cut, fingerprinted and its new chunks
//!    sealed by scoped worker threads (`parallel.rs`), then looks each chunk
//!    up in the index in stream order, appends new chunks to the open data
//!    container and every chunk to the recipe tree (`sink.rs`).
//!
//! No thread pool: measured on the 2-core reference machine, rayon's idle
//! workers spun (sched_yield) and took the cores from both stages, cutting
//! backup throughput by more than half; the workers are scoped to a batch.
//!
//! Memory is bounded: at most two batches in flight plus one open container
//! of each kind, whatever the input size. Trace mode feeds (fingerprint, size)
//! pairs into the same worker, so layout decisions are identical. Without a
//! rewrite policy, trace mode builds and hashes the recipe tree on the
//! feeding thread (it depends only on the stream), and the worker stores
//! each recipe chunk exactly where it would have emitted it.
//!
//! Lookups follow the index's insertion log
//! ([`Index::contains_data_seq`](crate::index::Index::contains_data_seq)):
//! a backup mostly repeats an earlier one in order, so the chunk logged after
//! the previous hit is compared first and the table is probed (prefetched
//! ahead in trace mode) only when that fails.
//!
//! With a rewrite policy the worker buffers an ingest segment (20 MiB of
//! chunks by default), hands its distinct duplicates with every live copy to
//! the policy, then stores chunks in stream order: unique and rewritten
//! chunks go to the open data container (at most once per segment) as a new
//! copy of the chunk (the next copy number), and a duplicate references the
//! copy the policy chose. Recipe leaves name the copy each chunk is read
//! from, so every backup restores from the copies its own ingest chose; no
//! existing index entry changes.
//!
//! While a backup runs the index is owned by the worker; on failure every
//! entry the backup added is removed again, so the in-memory repository
//! matches the last published generation.
//!
//! Modules: `options` (what a backup is asked and reports; the layout's
//! [`BackupHooks`]), `backup` (one backup from hooks to publish),
//! `pipeline` (the two stages, [`Ingest`]), `parallel` (the batch workers),
//! `sink` (dedup against the index, the backup's containers (`containers`),
//! the undo log), `rewriting` (rewriting decisions per ingest segment; the
//! buffer and policy state live in [`crate::rewrite`]), `tree` and
//! `files_cache` (directory backups), `interleave` (groups), `fastcopy`
//! (a backup cloned from another's recipe root, no data read).

use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use std::io::{self, Read, Write};

mod backup;
mod containers;
mod fastcopy;
mod files_cache;
pub(crate) mod interleave;
mod options;
mod parallel;
mod pipeline;
mod rewriting;
mod sink;
mod tree;
pub use files_cache::FilesCacheOptions;
pub use interleave::GroupInput;
pub use options::{ArrangeReport, BackupHooks, BackupOptions, BackupReport, Plain};
pub use parallel::default_threads;
pub use pipeline::Ingest;

/// [`Writer::backup_with`](crate::Writer::backup_with).
pub(crate) fn backup_with(
    repo: &mut Context,
    hooks: &dyn BackupHooks,
    opts: &BackupOptions,
    feed: impl FnOnce(&mut Ingest) -> Result<()>,
) -> Result<BackupReport> {
    repo.backup_in(hooks, opts, feed)
}

/// [`Writer::backup_reader`](crate::Writer::backup_reader).
pub(crate) fn backup_reader(
    repo: &mut Context,
    hooks: &dyn BackupHooks,
    opts: &BackupOptions,
    reader: &mut dyn Read,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupReport> {
    let name = opts.name.clone();
    repo.backup_in(hooks, opts, |ingest| {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(format!("cannot read {name}"), e)),
            };
            ingest
                .write_all(&buf[..n])
                .map_err(|e| Error::io("backup", e))?;
            progress(ingest.fed());
        }
    })
}

/// [`Writer::backup_tree`](crate::Writer::backup_tree).
pub(crate) fn backup_tree(
    repo: &mut Context,
    hooks: &dyn BackupHooks,
    files_cache: Option<&FilesCacheOptions>,
    opts: &BackupOptions,
    root: &std::path::Path,
    progress: &mut dyn FnMut(u64),
) -> Result<(BackupReport, crate::archive::TreeStats)> {
    let scan = crate::archive::Scan::start(
        vec![root.to_path_buf()],
        crate::archive::Selection::default(),
    );
    tree::backup_paths(repo, hooks, files_cache, opts, scan, progress)
}

pub(crate) use tree::backup_paths;

/// [`Writer::backup_trace`](crate::Writer::backup_trace).
pub(crate) fn backup_trace(
    repo: &mut Context,
    hooks: &dyn BackupHooks,
    opts: &BackupOptions,
    chunks: impl IntoIterator<Item = Result<(Fingerprint, u32)>>,
) -> Result<BackupReport> {
    repo.backup_in(hooks, opts, |ingest| {
        for c in chunks {
            let (fp, len) = c?;
            ingest.push_trace(fp, len)?;
        }
        Ok(())
    })
}
