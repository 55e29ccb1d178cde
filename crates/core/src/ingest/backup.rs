//! One backup (or interleaved group) from start to publish: the layout's
//! hooks around it, the ingest pipeline, then sealing, the index segment,
//! the FGC graph's segment and the manifest generation.

use super::files_cache::{CacheBuilder, CacheLearner};
use super::options::{report, BackupHooks, BackupOptions, BackupReport, Member};
use super::pipeline::Ingest;
use super::sink::{self, Sink};
use crate::catalog::BackupEntry;
use crate::container::ChunkKind;
use crate::context::Context;
use crate::error::Result;
use crate::recipe::LeafMemo;
use crate::rewrite::{default_segment_bytes, HarHistory, RewriteSpec, Rewriter};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The chain whose HAR history a backup continues: its chain, else its
/// name (the CLI's default chain is the backup's name too).
pub(super) fn har_chain(opts: &BackupOptions) -> String {
    opts.chain.clone().unwrap_or_else(|| opts.name.clone())
}

/// A memo of recipe leaves (trace mode), shared by the backups of a chain.
type SharedLeafMemo = Arc<Mutex<LeafMemo>>;

/// The writer's memos of recipe leaves, one per backup chain (the HAR
/// chain: a lab series' source), so that sources backed up in turn each
/// find their own previous version.
#[derive(Default)]
struct LeafMemos(HashMap<String, SharedLeafMemo>);

/// Chains that get a memo (each holds its last versions' leaves, up to
/// [`LeafMemo`]'s bound); the chains after them hash every leaf.
const MEMO_CHAINS: usize = 64;

impl Context {
    /// This writer's memo of recipe leaves for `chain` (see [`LeafMemo`]),
    /// made on first use: it lives as long as the handle, so consecutive
    /// backups of a chain share their unchanged leaves' fingerprints.
    fn leaf_memo(&mut self, chain: &str) -> Option<SharedLeafMemo> {
        if !self.memo.contains::<LeafMemos>() {
            self.memo.put(LeafMemos::default());
        }
        let algo = self.fingerprinter().clone();
        let memos = &mut self.memo.get_mut::<LeafMemos>().expect("put above").0;
        if let Some(m) = memos.get(chain) {
            return Some(m.clone());
        }
        if memos.len() >= MEMO_CHAINS {
            return None;
        }
        let m = Arc::new(Mutex::new(LeafMemo::new(algo)));
        memos.insert(chain.to_string(), m.clone());
        Some(m)
    }

    /// [`Writer::backup_with`](crate::Writer::backup_with).
    pub(crate) fn backup_in(
        &mut self,
        hooks: &dyn BackupHooks,
        opts: &BackupOptions,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<BackupReport> {
        self.backup_in_tree(hooks, opts, None, feed).map(|(r, _)| r)
    }

    /// [`backup_in`](Self::backup_in), writing the files `feed` names
    /// (`Ingest::learn`) with their chunks into `files_cache` as they come
    /// (directory backups), which is returned, unfinished, once the backup
    /// is committed.
    pub(crate) fn backup_in_tree(
        &mut self,
        hooks: &dyn BackupHooks,
        opts: &BackupOptions,
        files_cache: Option<CacheBuilder>,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<(BackupReport, Option<CacheBuilder>)> {
        let started = Instant::now();
        let cfg = self.manifest.config.clone();
        let before = self.metrics.snapshot();
        hooks.check(opts)?;
        let chain = hooks.chain(opts);
        hooks.begin(self, chain.as_deref())?;
        let segment = opts
            .segment_bytes
            .unwrap_or_else(|| default_segment_bytes(cfg.container_size as u64));
        let rw = match Rewriter::new(
            &opts.rewrite,
            segment,
            &self.manifest,
            vec![har_chain(opts)],
        ) {
            Ok(rw) => rw,
            Err(e) => {
                // The rewriter's error is the one to report (the index is
                // back either way).
                let _ = hooks.end(self, false);
                return Err(e);
            }
        };
        let recording = rw.is_none();
        let mut sink = Sink::new(self, hooks, rw);
        if recording {
            sink.corr = crate::fgc::CorrRecorder::start(self);
        }
        sink.learn = files_cache.map(CacheLearner::new);
        let fingerprinter = self.fingerprinter().clone();
        let threads = self.threads;
        let leaf_memo = cfg
            .trace
            .then(|| self.leaf_memo(&har_chain(opts)))
            .flatten();
        let mut ingest = Ingest::start(
            sink,
            cfg.chunker.build().into(),
            fingerprinter,
            cfg.trace,
            threads,
            leaf_memo,
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
        let learnt = sink.learn.take().map(CacheLearner::into_builder);
        let entries = self.commit(hooks, sink, member);
        let ndf_memory = hooks.end(self, entries.is_ok());
        let entries = entries?;
        let ndf_memory = ndf_memory?;
        // The backup's own I/O (arranging is reported on its own).
        let io = self.metrics.snapshot().since(&before);
        let arranged = hooks.after(self, chain.as_deref(), opts)?;
        let entry = entries.into_iter().next().expect("one member, one entry");
        let sparse = if matches!(opts.rewrite, RewriteSpec::Har { .. }) {
            HarHistory::of(&self.manifest)?
                .chain(&har_chain(opts))
                .len() as u64
        } else {
            0
        };
        let mut r = report(entry, counts, sparse, &io, started);
        r.ndf_memory_bytes = ndf_memory;
        r.arranged = arranged;
        Ok((r, learnt))
    }

    /// Seal the open containers, write the index segment and publish one
    /// manifest generation listing `members` as new backups, in order.
    /// The index goes back to the repository either way; on failure (of the
    /// ingest, given as `members`, or here) every entry the sink added is
    /// removed and every repointed one restored, so the repository is
    /// exactly as before.
    pub(super) fn commit(
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
                let mut history = HarHistory::of(&next)?;
                let live = next
                    .containers
                    .iter()
                    .map(|c| c.id)
                    .collect::<std::collections::HashSet<_>>();
                for (chain, list) in sparse {
                    history.record(chain, list, &live);
                }
                next.sections.put(Some(&history));
                next.sections.put::<crate::rewrite::LegacySparse>(None);
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
        self.index.set(index);
        // Published entries: renumbered if another writer took their ids.
        // The graph as of this backup's segments: kept before publishing,
        // so a publish that has to merge can graft this backup's delta (a
        // kept graph is only used while the manifest lists its segments).
        crate::fgc::keep(self, graph_after);
        let generation = self.manifest.generation;
        let mut compacted = false;
        let published = outcome.and_then(|(mut next, _entries)| {
            let mut superseded = self.compact_segments(&mut next)?;
            compacted = !superseded.is_empty();
            superseded.extend(graph_superseded);
            crate::publish::publish_merged(self, next, &superseded)
        });
        if published.is_ok() && compacted && self.manifest.generation == generation.next() {
            // Compacted and published unmerged: the index stands for the
            // one segment that replaced all others (see `keep_index`).
            self.keep_index();
        }
        if published.is_err() {
            // The backup's error is the one to report; an on-disk index
            // error met undoing still removes every entry (and the index
            // returns it from the next change).
            let _ = sink::undo(&mut self.index, &new_entries);
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
