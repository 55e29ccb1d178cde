//! Backup ingest: chunk → fingerprint → dedup → containers + recipe.
//!
//! Two stages run concurrently so that both cores work:
//! 1. the caller's thread produces bytes (a file, stdin, a tar stream of a
//!    directory) and cuts them into chunks, in batches of about 4 MiB;
//! 2. a worker thread fingerprints each chunk, looks it up in the index,
//!    appends new chunks to the open data container and every chunk to the
//!    recipe tree.
//!
//! Two threads for two stages, and no thread pool: measured on the 2-core
//! reference machine, rayon's idle workers spun (sched_yield) and took the
//! cores from both stages, cutting backup throughput by more than half.
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
//! Modules: `pipeline` (the two threads, [`Ingest`]), `sink` (dedup against
//! the layout's [`DedupIndex`](crate::index::DedupIndex), the layout's
//! writer, the undo log), `segment` (rewriting decisions per segment; the
//! buffer and policy state live in [`crate::rewrite`]), `interleave`.

use crate::catalog::{BackupEntry, ContainerEntry, Manifest, SourceKind};
use crate::container::ChunkKind;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::recipe::RecipeEntry;
use crate::rewrite::{RewriteSpec, Rewriter};
use serde::Serialize;
use std::io::{self, Read, Write};
use std::time::Instant;

mod files_cache;
pub(crate) mod interleave;
mod parallel;
mod pipeline;
mod segment;
mod sink;
mod tree;
mod writers;
pub use files_cache::FilesCacheOptions;
pub use interleave::GroupInput;
pub use parallel::default_threads;
pub use pipeline::Ingest;
use sink::Sink;

/// How a backup is named in the catalog, and how its duplicates are treated.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    pub name: String,
    pub source: SourceKind,
    /// Which duplicate chunks are written again to fight fragmentation.
    pub rewrite: RewriteSpec,
    /// Logical bytes of chunks per rewriting decision (the ingest segment).
    pub segment_bytes: u64,
    /// Host, user, paths, tags and parent, recorded in the catalog entry.
    pub meta: crate::catalog::SnapshotMeta,
    /// The version chain (`--source`); the name when unset. Recorded in
    /// the catalog when set, always on the MFDedup layout.
    pub chain: Option<String>,
    /// MFDedup: arrange right after the backup (`--no-arrange` clears it).
    pub arrange: bool,
}

impl BackupOptions {
    /// A backup with the default policy (no rewriting).
    pub fn new(name: impl Into<String>, source: SourceKind) -> Self {
        BackupOptions {
            name: name.into(),
            source,
            rewrite: RewriteSpec::None,
            segment_bytes: crate::rewrite::DEFAULT_SEGMENT_BYTES,
            meta: Default::default(),
            chain: None,
            arrange: true,
        }
    }
}

/// What a backup did.
#[derive(Clone, Debug, Serialize)]
pub struct BackupReport {
    pub backup: BackupEntry,
    pub logical_bytes: u64,
    /// Data bytes stored anew by this backup (rewritten copies included).
    pub stored_bytes: u64,
    pub duplicate_bytes: u64,
    pub chunks: u64,
    pub new_chunks: u64,
    pub duplicate_chunks: u64,
    pub new_recipe_chunks: u64,
    /// Duplicates the rewrite policy stored again (part of `stored_bytes`
    /// and `new_chunks`).
    pub rewritten_bytes: u64,
    pub rewritten_chunks: u64,
    /// Ingest segments the rewrite policy decided on (0 without rewriting).
    pub segments: u64,
    /// HAR: containers marked sparse for the next backup.
    pub sparse_containers: u64,
    pub data_containers_written: u64,
    pub recipe_containers_written: u64,
    pub seconds: f64,
    /// Logical MB (10^6 bytes) per second.
    pub throughput_mb_s: f64,
    /// MFDedup: memory of the NDF index at its peak (the previous and this
    /// version's fingerprints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ndf_memory_bytes: Option<u64>,
    /// MFDedup: the arranging that followed the backup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arranged: Option<ArrangeReport>,
    /// Where the logical bytes went: file contents and (directory backups)
    /// metadata, and how much of each was stored anew.
    pub content_bytes: u64,
    pub metadata_bytes: u64,
    pub new_content_bytes: u64,
    pub new_metadata_bytes: u64,
    /// Directory backups with the files cache: regular files whose
    /// contents were taken from it rather than read.
    pub files_from_cache: u64,
}

/// What MFDedup's arranging (AVAR) did to one chain: filled by the layout
/// after a backup (`BackupReport::arranged`) and by `tessera arrange`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ArrangeReport {
    pub chain: String,
    /// Versions arranged.
    pub steps: u32,
    /// Chunk bytes of the active categories read.
    pub read_bytes: u64,
    /// Moved on to the new active categories.
    pub kept_bytes: u64,
    /// Archived into volumes.
    pub archived_bytes: u64,
    pub volumes_written: u32,
    pub seconds: f64,
}

/// What a layout does around each backup, given to ingest by the layout
/// chosen when the repository opened (`layout::Layout::backup_hooks`).
/// The container layout does nothing ([`Plain`]); MFDedup deduplicates
/// against the chain's previous version only (NDF), records the version
/// in its chain and arranges it.
pub trait BackupHooks: Sync {
    /// The chain a backup belongs to: the one named, or, on a layout that
    /// keeps every backup in a chain, its name.
    fn chain(&self, opts: &BackupOptions) -> Option<String> {
        opts.chain.clone()
    }
    /// Refuse what this layout cannot back up (a rewrite policy).
    fn check(&self, _opts: &BackupOptions) -> Result<()> {
        Ok(())
    }
    /// Refuse interleaved groups where this layout cannot take them.
    fn check_interleaved(&self) -> Result<()> {
        Ok(())
    }
    /// Before the backup of `chain`: put in place the index it
    /// deduplicates against.
    fn begin(&self, _cx: &mut Context, _chain: Option<&str>) -> Result<()> {
        Ok(())
    }
    /// After it, published or not: the index back; returns the memory of
    /// the layout's own dedup index at its peak, if it has one.
    fn end(&self, _cx: &mut Context, _published: bool) -> Option<u64> {
        None
    }
    /// Whether the backup's data fingerprints are collected in order for
    /// [`record`](Self::record).
    fn collects_refs(&self) -> bool {
        false
    }
    /// Whether the backup's new index entries are written as an index
    /// segment (MFDedup keeps no global index).
    fn writes_index_segment(&self) -> bool {
        true
    }
    /// In the manifest the backup publishes: what the layout records of it.
    fn record(
        &self,
        _cx: &Context,
        _next: &mut Manifest,
        _entry: &BackupEntry,
        _written: &[ContainerEntry],
        _refs: &[Fingerprint],
    ) -> Result<()> {
        Ok(())
    }
    /// After the backup is published (MFDedup: arrange its chain).
    fn after(
        &self,
        _cx: &mut Context,
        _chain: Option<&str>,
        _opts: &BackupOptions,
    ) -> Result<Option<ArrangeReport>> {
        Ok(None)
    }
}

/// Backups with nothing around them (the container layout).
pub struct Plain;
impl BackupHooks for Plain {}

/// Counters kept by the worker.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counts {
    logical: u64,
    chunks: u64,
    new_bytes: u64,
    new_chunks: u64,
    new_recipe_chunks: u64,
    rewritten_bytes: u64,
    rewritten_chunks: u64,
    segments: u64,
    /// Directory streams: where the metadata section starts.
    meta_from: Option<u64>,
    /// New bytes of the metadata section (part of `new_bytes`).
    new_meta_bytes: u64,
}

impl Counts {
    /// A new data chunk starting at stream offset `at` was stored.
    #[inline]
    fn stored_new(&mut self, at: u64, len: u32) {
        self.new_bytes += len as u64;
        self.new_chunks += 1;
        if self.meta_from.is_some_and(|m| at >= m) {
            self.new_meta_bytes += len as u64;
        }
    }
}

/// A backup about to be committed: how it is named, its recipe root (and
/// level), and what its ingest counted.
struct Member {
    name: String,
    chain: Option<String>,
    source: SourceKind,
    meta: crate::catalog::SnapshotMeta,
    root: (RecipeEntry, u8),
    counts: Counts,
}

/// The report of a committed backup. `io` is what the whole ingest did (for
/// an interleaved group, the group's containers).
fn report(
    backup: BackupEntry,
    c: Counts,
    sparse_containers: u64,
    io: &crate::metrics::MetricsSnapshot,
    started: Instant,
) -> BackupReport {
    let secs = started.elapsed().as_secs_f64();
    let content = c.meta_from.unwrap_or(c.logical).min(c.logical);
    BackupReport {
        content_bytes: content,
        metadata_bytes: c.logical - content,
        new_content_bytes: c.new_bytes - c.new_meta_bytes,
        new_metadata_bytes: c.new_meta_bytes,
        files_from_cache: 0,
        logical_bytes: c.logical,
        stored_bytes: c.new_bytes,
        duplicate_bytes: c.logical - c.new_bytes,
        chunks: c.chunks,
        new_chunks: c.new_chunks,
        duplicate_chunks: c.chunks - c.new_chunks,
        new_recipe_chunks: c.new_recipe_chunks,
        rewritten_bytes: c.rewritten_bytes,
        rewritten_chunks: c.rewritten_chunks,
        segments: c.segments,
        sparse_containers,
        data_containers_written: io.data_containers_written,
        recipe_containers_written: io.recipe_containers_written,
        seconds: secs,
        throughput_mb_s: crate::metrics::mb_per_s(c.logical, secs),
        ndf_memory_bytes: None,
        arranged: None,
        backup,
    }
}

impl Context {
    /// [`Writer::backup_with`](crate::Writer::backup_with).
    pub(crate) fn backup_in(
        &mut self,
        hooks: &dyn BackupHooks,
        opts: &BackupOptions,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<BackupReport> {
        self.backup_trailed(hooks, opts, false, feed)
            .map(|(r, _)| r)
    }

    /// A directory backup: [`backup_in`](Self::backup_in), also returning
    /// its data chunks in stream order if `trail` (for the files cache).
    pub(crate) fn backup_in_tree(
        &mut self,
        hooks: &dyn BackupHooks,
        opts: &BackupOptions,
        trail: bool,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<(BackupReport, Option<tree::Trail>)> {
        self.backup_trailed(hooks, opts, trail, feed)
    }

    fn backup_trailed(
        &mut self,
        hooks: &dyn BackupHooks,
        opts: &BackupOptions,
        trail: bool,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<(BackupReport, Option<tree::Trail>)> {
        let started = Instant::now();
        let cfg = self.manifest.config.clone();
        let before = self.metrics.snapshot();
        hooks.check(opts)?;
        let chain = hooks.chain(opts);
        hooks.begin(self, chain.as_deref())?;
        let rw = match Rewriter::new(&opts.rewrite, opts.segment_bytes, &self.manifest) {
            Ok(rw) => rw,
            Err(e) => {
                hooks.end(self, false);
                return Err(e);
            }
        };
        let recording = rw.is_none();
        let mut sink = Sink::new(self, hooks, rw);
        if recording {
            sink.corr = crate::fgc::CorrRecorder::start(self);
        }
        if trail {
            sink.trail = Some(tree::Trail::default());
        }
        let fingerprinter = self.fingerprinter().clone();
        let threads = self.threads;
        let mut ingest = Ingest::start(
            sink,
            cfg.chunker.build().into(),
            fingerprinter,
            cfg.trace,
            threads,
        );
        let fed = feed(&mut ingest);
        let (mut sink, recipe, worker, upstream_root) = ingest.stop(fed.is_ok());
        let member = worker.and(fed).and_then(|()| {
            let root = match upstream_root {
                Some(r) => r,
                None => recipe.finish(&mut sink)?,
            };
            Ok(vec![Member {
                name: opts.name.clone(),
                chain: chain.clone(),
                source: opts.source,
                meta: opts.meta.clone(),
                root,
                counts: sink.counts,
            }])
        });
        let counts = sink.counts;
        let trail = sink.trail.take();
        let entries = self.commit(hooks, sink, member);
        let ndf_memory = hooks.end(self, entries.is_ok());
        let entries = entries?;
        // The backup's own I/O (arranging is reported on its own).
        let io = self.metrics.snapshot().since(&before);
        let arranged = hooks.after(self, chain.as_deref(), opts)?;
        let entry = entries.into_iter().next().expect("one member, one entry");
        let sparse = if matches!(opts.rewrite, RewriteSpec::Har { .. }) {
            crate::rewrite::SparseHistory::of(&self.manifest)?.0.len() as u64
        } else {
            0
        };
        let mut r = report(entry, counts, sparse, &io, started);
        r.ndf_memory_bytes = ndf_memory;
        r.arranged = arranged;
        Ok((r, trail))
    }

    /// Seal the open containers, write the index segment and publish one
    /// manifest generation listing `members` as new backups, in order.
    /// The index goes back to the repository either way; on failure (of the
    /// ingest, given as `members`, or here) every entry the sink added is
    /// removed and every repointed one restored, so the repository is
    /// exactly as before.
    /// Seal the open containers, write the index segment and publish one
    /// manifest generation listing `members` as new backups, in order.
    /// The index goes back to the repository either way; on failure (of the
    /// ingest, given as `members`, or here) every entry the sink added is
    /// removed and every repointed one restored, so the repository is
    /// exactly as before.
    fn commit(
        &mut self,
        hooks: &dyn BackupHooks,
        mut sink: Sink,
        members: Result<Vec<Member>>,
    ) -> Result<Vec<BackupEntry>> {
        let time = crate::clock::now();
        let corr = sink.corr.take();
        let mut graph_superseded = Vec::new();
        let mut graph_after = None;
        let outcome = members.and_then(|members| {
            // Online GC: every deduplicated chunk safe (or stored again)
            // before the containers are sealed.
            sink.confirm_online()?;
            sink.seal(ChunkKind::Data)?;
            sink.seal(ChunkKind::Recipe)?;
            let mut next = self.manifest.clone();
            // A writer that joined others allocates in its reserved
            // range, below the allocator.
            next.next_container_id = next.next_container_id.max(sink.writer.next_id());
            self.containers_allocated(sink.writer.next_id());
            next.containers.extend_from_slice(sink.writer.written());
            let capacity = self.manifest.config.container_size as u64;
            if let Some(sparse) = sink.rw.as_ref().and_then(|r| r.next_sparse(capacity)) {
                next.sections
                    .put(Some(&crate::rewrite::SparseHistory(sparse)));
            }
            if hooks.writes_index_segment() {
                self.write_segment(&mut next, &sink.new_entries)?;
            }
            (graph_superseded, graph_after) = crate::fgc::commit_backup(self, &mut next, corr)?;
            let mut entries = Vec::with_capacity(members.len());
            for m in members {
                let (root, root_level) = m.root;
                let c = m.counts;
                let entry = BackupEntry {
                    id: next.next_backup_id,
                    root: root.fp.to_hex(),
                    root_level,
                    name: m.name,
                    source: m.source,
                    time,
                    logical_bytes: c.logical,
                    chunks: c.chunks,
                    new_bytes: c.new_bytes,
                    new_chunks: c.new_chunks,
                    meta: m.meta,
                    chain: m.chain,
                    content_bytes: c.meta_from,
                };
                let refs = sink.refs.take().unwrap_or_default();
                hooks.record(self, &mut next, &entry, sink.writer.written(), &refs)?;
                next.next_backup_id = next.next_backup_id.next();
                next.backups.push(entry.clone());
                entries.push(entry);
            }
            Ok((next, entries))
        });
        // Give the index back before publishing, so a failed publish can undo.
        let Sink {
            index,
            new_entries,
            online,
            ..
        } = sink;
        self.index = index;
        // Published entries: renumbered if another writer took their ids.
        // The graph as of this backup's segments: kept before publishing,
        // so a publish that has to merge can graft this backup's delta (a
        // kept graph is only used while the manifest lists its segments).
        crate::fgc::keep(self, graph_after);
        let published = outcome.and_then(|(mut next, _entries)| {
            let mut superseded = self.compact_segments(&mut next)?;
            superseded.extend(graph_superseded);
            crate::publish::publish_merged(self, next, &superseded)
        });
        if published.is_err() {
            sink::undo(&mut self.index, &new_entries);
        } else {
            if let Some(o) = online {
                // Best effort: a record left behind only keeps chunks live
                // until the next GC removes it.
                let _ = o.finish();
            }
        }
        published
    }
}
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
