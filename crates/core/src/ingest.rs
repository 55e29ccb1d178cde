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
//! Lookups follow the index's insertion log ([`Index::contains_data_seq`]):
//! a backup mostly repeats an earlier one in order, so the chunk logged after
//! the previous hit is compared first and the table is probed (prefetched
//! ahead in trace mode) only when that fails.
//!
//! With a rewrite policy the worker buffers an ingest segment (20 MiB of
//! chunks by default), hands its distinct duplicates with every live copy to
//! the policy, then stores chunks in stream order: unique and rewritten
//! chunks go to the open data container (at most once per segment), and a
//! duplicate deduplicated against an older copy repoints the index there, so
//! restores read the copies the newest backup chose (the index serves all
//! restores; recipes hold fingerprints only).
//!
//! While a backup runs the index is owned by the worker; on failure every
//! entry the backup added is removed again, so the in-memory repository
//! matches the last published generation.

use crate::catalog::{BackupEntry, ContainerEntry, SourceKind};
use crate::chunking::Chunker;
use crate::container::ContainerId;
use crate::container::{ChunkKind, ContainerBuilder, ContainerStore};
use crate::error::{Error, Result};
use crate::fingerprint::FpMap;
use crate::fingerprint::{Fingerprint, FpSet, HashAlgo};
use crate::index::{DataCursor, Index, IndexEntry};
use crate::recipe::{RecipeBuilder, RecipeEntry, RecipeSink};
use crate::repo::{container_entry, Repository};
use crate::rewrite::{RewritePolicy, RewriteSpec, Segment, SegmentChunk};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::Instant;

mod interleave;
pub use interleave::GroupInput;

/// Bytes the chunking stage accumulates before handing a batch to the worker.
const BATCH_BYTES: usize = 4 << 20;
/// Trace entries per batch.
const TRACE_BATCH: usize = 8192;
/// How many chunks ahead the trace worker prefetches index slots (and twice
/// as far, the index's insertion log).
const PREFETCH: usize = 16;

/// How a backup is named in the catalog, and how its duplicates are treated.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    pub name: String,
    pub source: SourceKind,
    /// Which duplicate chunks are written again to fight fragmentation.
    pub rewrite: RewriteSpec,
    /// Logical bytes of chunks per rewriting decision (the ingest segment).
    pub segment_bytes: u64,
}

impl BackupOptions {
    /// A backup with the default policy (no rewriting).
    pub fn new(name: impl Into<String>, source: SourceKind) -> Self {
        BackupOptions {
            name: name.into(),
            source,
            rewrite: RewriteSpec::None,
            segment_bytes: crate::rewrite::DEFAULT_SEGMENT_BYTES,
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
}

/// Counters kept by the worker.
#[derive(Default, Clone, Copy)]
struct Counts {
    logical: u64,
    chunks: u64,
    new_bytes: u64,
    new_chunks: u64,
    new_recipe_chunks: u64,
    rewritten_bytes: u64,
    rewritten_chunks: u64,
    segments: u64,
}

/// A backup about to be committed: how it is named, its recipe root (and
/// level), and what its ingest counted.
struct Member {
    name: String,
    source: SourceKind,
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
    BackupReport {
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
        backup,
    }
}

/// Segment buffering and the rewrite policy (absent without rewriting, so
/// the naive path stays a straight per-chunk loop).
struct Rewriter {
    policy: Box<dyn RewritePolicy>,
    segment_bytes: u64,
    trace: bool,
    /// The segment's chunk bytes (data mode) and (fingerprint, len, offset).
    buf: Vec<u8>,
    entries: Vec<(Fingerprint, u32, usize)>,
    logical: u64,
    /// Sealed data containers a chunk may be deduplicated against.
    live: HashSet<ContainerId>,
    /// HAR bookkeeping (absent for other policies).
    har: Option<HarUse>,
}

/// What HAR needs to mark the next backup's sparse containers.
struct HarUse {
    threshold: f64,
    limit: f64,
    /// Distinct chunks seen so far in this backup.
    seen: FpSet,
    /// Bytes of distinct chunks this backup referenced, per container.
    used: HashMap<ContainerId, u64>,
}

/// What the second pass of a segment does with a fingerprint.
enum Plan {
    /// Not stored anywhere: write it.
    New,
    /// Held by the open container (written earlier in this backup): reference it.
    Free,
    /// A duplicate in sealed containers: the policy's decision `k`.
    Dup(usize),
    /// Already handled earlier in this segment.
    Done,
}

/// Destination of new chunks: the open containers and the index.
pub(crate) struct Sink {
    index: Index,
    store: ContainerStore,
    capacity: u64,
    next_id: u64,
    data: ContainerBuilder,
    data_id: u64,
    recipe: ContainerBuilder,
    recipe_id: u64,
    new_entries: Vec<IndexEntry>,
    containers: Vec<ContainerEntry>,
    counts: Counts,
    rw: Option<Rewriter>,
    /// With rewriting: the index state before this backup of each existing
    /// data fingerprint it repoints, to undo a failed backup exactly
    /// (fingerprints new in this backup are simply removed).
    saved: FpMap<(Option<ContainerId>, Vec<ContainerId>)>,
    /// Whether `saved` is kept (rewriting can repoint existing entries).
    rewriting: bool,
    /// First container id of this backup: older ones predate it.
    first_id: ContainerId,
    /// Where the index's log expects the next data chunk.
    cursor: DataCursor,
}

impl Sink {
    /// Store a chunk unless the index already has it. Returns whether it was new.
    fn add(&mut self, kind: ChunkKind, fp: Fingerprint, len: u32, bytes: &[u8]) -> Result<bool> {
        let held = match kind {
            ChunkKind::Data => self.index.contains_data_seq(&mut self.cursor, &fp),
            ChunkKind::Recipe => self.index.contains(kind, &fp),
        };
        if held {
            return Ok(false);
        }
        self.store(kind, fp, len, bytes)?;
        Ok(true)
    }

    /// Point the index at `container` for `fp`, remembering the old state.
    fn point(&mut self, fp: Fingerprint, container: ContainerId) {
        if self.rewriting {
            let before = self
                .index
                .get(ChunkKind::Data, &fp)
                .is_some_and(|p| p < self.first_id);
            if before && !self.saved.contains_key(&fp) {
                self.saved.insert(fp, self.index.data_state(&fp));
            }
        }
        let e = IndexEntry {
            fp,
            container,
            kind: ChunkKind::Data,
        };
        self.index.insert(e);
        self.new_entries.push(e);
    }

    /// Append a chunk to the open container of `kind` and index it there
    /// (the newest copy wins). Returns the container.
    fn store(
        &mut self,
        kind: ChunkKind,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<ContainerId> {
        if !self.builder(kind).fits(len as u64) {
            self.seal(kind)?;
        }
        if self.builder(kind).is_empty() {
            let id = self.next_id;
            self.next_id += 1;
            match kind {
                ChunkKind::Data => self.data_id = id,
                ChunkKind::Recipe => self.recipe_id = id,
            }
        }
        let container = match kind {
            ChunkKind::Data => self.data_id,
            ChunkKind::Recipe => self.recipe_id,
        };
        self.builder(kind).push(fp, len, bytes);
        if kind == ChunkKind::Data {
            self.point(fp, container);
        } else {
            let e = IndexEntry {
                fp,
                container,
                kind,
            };
            self.index.insert(e);
            self.new_entries.push(e);
        }
        Ok(container)
    }

    fn builder(&mut self, kind: ChunkKind) -> &mut ContainerBuilder {
        match kind {
            ChunkKind::Data => &mut self.data,
            ChunkKind::Recipe => &mut self.recipe,
        }
    }

    /// Write the open container of `kind`, if any.
    fn seal(&mut self, kind: ChunkKind) -> Result<()> {
        let id = match kind {
            ChunkKind::Data => self.data_id,
            ChunkKind::Recipe => self.recipe_id,
        };
        let b = self.builder(kind);
        if b.is_empty() {
            return Ok(());
        }
        let logical = b.logical_len();
        let (entries, framed) = b.take();
        let (object_bytes, buf) = self.store.write_framed(id, kind, &entries, framed)?;
        self.builder(kind).recycle(buf);
        if let (ChunkKind::Data, Some(rw)) = (kind, &mut self.rw) {
            rw.live.insert(id);
            rw.policy.sealed(id, logical);
        }
        self.containers.push(container_entry(
            id,
            kind,
            entries.len(),
            logical,
            object_bytes,
        ));
        Ok(())
    }

    /// One data chunk of the backup, in stream order.
    fn data_chunk(
        &mut self,
        recipe: &mut RecipeBuilder,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<()> {
        if let Some(rw) = &mut self.rw {
            rw.buf.extend_from_slice(bytes);
            rw.entries.push((fp, len, rw.buf.len() - bytes.len()));
            rw.logical += len as u64;
            if rw.logical >= rw.segment_bytes {
                self.flush_segment(recipe)?;
            }
            return Ok(());
        }
        self.dedup_chunk(fp, len, bytes)?;
        recipe.push(fp, len as u64, self)
    }

    /// Without rewriting: count a data chunk and store it unless the index
    /// has it (the recipe is built by the caller).
    #[inline]
    fn dedup_chunk(&mut self, fp: Fingerprint, len: u32, bytes: &[u8]) -> Result<()> {
        self.counts.logical += len as u64;
        self.counts.chunks += 1;
        if self.add(ChunkKind::Data, fp, len, bytes)? {
            self.counts.new_bytes += len as u64;
            self.counts.new_chunks += 1;
        }
        Ok(())
    }

    /// Store a recipe chunk unless the index has it.
    fn recipe_bytes(&mut self, fp: Fingerprint, bytes: &[u8]) -> Result<()> {
        if self.add(ChunkKind::Recipe, fp, bytes.len() as u32, bytes)? {
            self.counts.new_recipe_chunks += 1;
        }
        Ok(())
    }
}

impl Sink {
    /// Decide and store the buffered segment (no-op without rewriting).
    fn flush_segment(&mut self, recipe: &mut RecipeBuilder) -> Result<()> {
        let Some(mut rw) = self.rw.take() else {
            return Ok(());
        };
        let r = if rw.entries.is_empty() {
            Ok(())
        } else {
            self.counts.segments += 1;
            self.segment(&mut rw, recipe)
        };
        rw.buf.clear();
        rw.entries.clear();
        rw.logical = 0;
        self.rw = Some(rw);
        r
    }

    /// One segment: collect its distinct duplicates with every live copy,
    /// let the policy decide, then store and reference chunks in stream
    /// order. A chunk is written at most once per segment.
    fn segment(&mut self, rw: &mut Rewriter, recipe: &mut RecipeBuilder) -> Result<()> {
        let open = (!self.data.is_empty()).then_some(self.data_id);
        let mut plan: FpMap<Plan> = FpMap::default();
        let mut seg = Segment::default();
        for &(fp, len, _) in &rw.entries {
            if plan.contains_key(&fp) {
                continue;
            }
            let p = match self.index.get(ChunkKind::Data, &fp) {
                None => Plan::New,
                Some(c) if Some(c) == open => Plan::Free,
                Some(c) => {
                    let mut cs = Vec::with_capacity(1);
                    for &x in std::iter::once(&c).chain(self.index.copies(&fp).iter().rev()) {
                        if rw.live.contains(&x) && !cs.contains(&x) {
                            cs.push(x);
                        }
                    }
                    if cs.is_empty() {
                        Plan::New
                    } else {
                        seg.chunks.push(SegmentChunk {
                            len,
                            containers: cs,
                        });
                        Plan::Dup(seg.chunks.len() - 1)
                    }
                }
            };
            plan.insert(fp, p);
        }
        let decisions = if seg.chunks.is_empty() {
            Vec::new()
        } else {
            rw.policy.decide(&seg)
        };
        debug_assert_eq!(decisions.len(), seg.chunks.len());
        for &(fp, len, off) in &rw.entries {
            let p = plan.get_mut(&fp).expect("planned");
            let used = match std::mem::replace(p, Plan::Done) {
                Plan::Done | Plan::Free => None,
                Plan::Dup(k) => match decisions[k] {
                    Some(c) => {
                        // Later backups restore from the copy this one chose.
                        if self.index.get(ChunkKind::Data, &fp) != Some(c) {
                            self.point(fp, c);
                        }
                        Some(c)
                    }
                    None => {
                        self.counts.rewritten_bytes += len as u64;
                        self.counts.rewritten_chunks += 1;
                        Some(self.store_new(rw, fp, len, off)?)
                    }
                },
                Plan::New => Some(self.store_new(rw, fp, len, off)?),
            };
            if let (Some(c), Some(h)) = (used, &mut rw.har) {
                if h.seen.insert(fp) {
                    *h.used.entry(c).or_default() += len as u64;
                }
            }
            self.counts.logical += len as u64;
            self.counts.chunks += 1;
            recipe.push(fp, len as u64, self)?;
        }
        Ok(())
    }
}

impl Sink {
    /// Store a segment chunk (new, or a rewritten duplicate) and count it.
    fn store_new(
        &mut self,
        rw: &Rewriter,
        fp: Fingerprint,
        len: u32,
        off: usize,
    ) -> Result<ContainerId> {
        let bytes = if rw.trace {
            &[][..]
        } else {
            &rw.buf[off..off + len as usize]
        };
        let c = self.store(ChunkKind::Data, fp, len, bytes)?;
        self.counts.new_bytes += len as u64;
        self.counts.new_chunks += 1;
        Ok(c)
    }
}

impl RecipeSink for Sink {
    fn recipe_chunk(&mut self, fp: Fingerprint, _level: u8, bytes: &[u8]) -> Result<()> {
        self.recipe_bytes(fp, bytes)
    }
}

/// Recipe chunks built on the feeding side (trace mode without rewriting),
/// so the BLAKE3 work over recipe chunks runs beside the worker's index
/// probes. Each chunk is stored after the first `pos` data chunks of its
/// batch: exactly where the worker would have emitted it, so containers are
/// filled and numbered the same.
#[derive(Default)]
struct RecipeEvents {
    bytes: Vec<u8>,
    events: Vec<RecipeEvent>,
    /// Data chunks of the batch before the chunks emitted now.
    pos: usize,
}

struct RecipeEvent {
    pos: usize,
    fp: Fingerprint,
    start: usize,
    len: usize,
}

impl RecipeSink for RecipeEvents {
    fn recipe_chunk(&mut self, fp: Fingerprint, _level: u8, bytes: &[u8]) -> Result<()> {
        self.events.push(RecipeEvent {
            pos: self.pos,
            fp,
            start: self.bytes.len(),
            len: bytes.len(),
        });
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }
}

enum Batch {
    /// Bytes and the (start, len) of each chunk in them.
    Data(Vec<u8>, Vec<(usize, usize)>),
    /// Trace entries, and the recipe chunks built upstream (if so).
    Trace(Vec<(Fingerprint, u32)>, RecipeEvents),
}

type WorkerResult = (Sink, RecipeBuilder, Result<()>);

fn worker(
    rx: Receiver<Batch>,
    spent: SyncSender<Vec<u8>>,
    trace_spent: SyncSender<(Vec<(Fingerprint, u32)>, RecipeEvents)>,
    mut sink: Sink,
    mut recipe: RecipeBuilder,
    algo: HashAlgo,
    recipe_upstream: bool,
) -> WorkerResult {
    let run = || -> Result<()> {
        for batch in rx {
            match batch {
                Batch::Data(buf, cuts) => {
                    for &(s, n) in &cuts {
                        let bytes = &buf[s..s + n];
                        sink.data_chunk(&mut recipe, algo.hash(bytes), n as u32, bytes)?;
                    }
                    // Hand the buffer back: no 5 MiB allocation per batch.
                    let _ = spent.try_send(buf);
                }
                Batch::Trace(entries, ev) => {
                    // Start loading the index slots PREFETCH chunks ahead,
                    // so the probes' cache misses overlap.
                    let ahead = if sink.rw.is_none() { PREFETCH } else { 0 };
                    for (j, &(fp, _)) in entries.iter().take(ahead).enumerate() {
                        sink.index.prefetch_data_seq(sink.cursor, j, &fp);
                    }
                    let mut events = ev.events.iter().peekable();
                    for (i, &(fp, len)) in entries.iter().enumerate() {
                        if ahead > 0 {
                            // Two stages: the log entry expected 2·ahead on,
                            // then (the log entry now cached) the index slot
                            // ahead on unless the log predicts the chunk.
                            sink.index.prefetch_data_log(sink.cursor, 2 * ahead);
                            if let Some(&(next, _)) = entries.get(i + ahead) {
                                sink.index.prefetch_data_seq(sink.cursor, ahead, &next);
                            }
                        }
                        if recipe_upstream {
                            while let Some(e) = events.next_if(|e| e.pos <= i) {
                                sink.recipe_bytes(e.fp, &ev.bytes[e.start..e.start + e.len])?;
                            }
                            sink.dedup_chunk(fp, len, &[])?;
                        } else {
                            sink.data_chunk(&mut recipe, fp, len, &[])?;
                        }
                    }
                    for e in events {
                        sink.recipe_bytes(e.fp, &ev.bytes[e.start..e.start + e.len])?;
                    }
                    // Hand the buffers back: no allocation per batch.
                    let _ = trace_spent.try_send((entries, ev));
                }
            }
        }
        sink.flush_segment(&mut recipe)
    };
    let result = run();
    (sink, recipe, result)
}

/// A running backup. Feed it bytes through [`Write`] (data mode) or
/// fingerprints through [`Ingest::push_trace`] (trace mode).
pub struct Ingest {
    chunker: Box<dyn Chunker>,
    trace: bool,
    buf: Vec<u8>,
    trace_buf: Vec<(Fingerprint, u32)>,
    trace_spent: Receiver<(Vec<(Fingerprint, u32)>, RecipeEvents)>,
    /// Trace mode without rewriting: the recipe is built here, not in the
    /// worker (which only stores the chunks in `events`).
    recipe: Option<RecipeBuilder>,
    events: RecipeEvents,
    /// The recipe root, once `recipe` is finished.
    root: Option<(RecipeEntry, u8)>,
    tx: Option<SyncSender<Batch>>,
    spent: Receiver<Vec<u8>>,
    handle: Option<JoinHandle<WorkerResult>>,
    fed: u64,
}

impl Ingest {
    fn start(sink: Sink, chunker: Box<dyn Chunker>, algo: HashAlgo, trace: bool) -> Ingest {
        let (tx, rx) = sync_channel(1);
        let (spent_tx, spent) = sync_channel(2);
        let (trace_spent_tx, trace_spent) = sync_channel(2);
        let recipe = RecipeBuilder::new(algo);
        // With rewriting, recipe entries follow the segment's decisions, so
        // the worker builds the recipe; in data mode it has the fingerprints.
        let upstream = trace && sink.rw.is_none();
        let handle = std::thread::Builder::new()
            .name("tessera-ingest".into())
            .spawn(move || worker(rx, spent_tx, trace_spent_tx, sink, recipe, algo, upstream))
            .expect("spawn ingest worker");
        Ingest {
            chunker,
            trace,
            buf: if trace {
                Vec::new()
            } else {
                Vec::with_capacity(BATCH_BYTES + (1 << 20))
            },
            trace_buf: Vec::new(),
            trace_spent,
            recipe: upstream.then(|| RecipeBuilder::new(algo)),
            events: RecipeEvents::default(),
            root: None,
            tx: Some(tx),
            spent,
            handle: Some(handle),
            fed: 0,
        }
    }

    /// Logical bytes fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    fn send(&mut self, batch: Batch) -> io::Result<()> {
        // A closed channel means the worker stopped on an error; `stop` reports it.
        let ok = self.tx.as_ref().is_some_and(|tx| tx.send(batch).is_ok());
        if ok {
            Ok(())
        } else {
            Err(io::Error::other("backup worker stopped"))
        }
    }

    /// Cut the buffered bytes into chunks; keep the tail that may still grow
    /// (less than `max_size` bytes) unless this is the end of the stream.
    fn cut_batch(&mut self, eof: bool) -> io::Result<()> {
        let max = self.chunker.max_size();
        let mut cuts = Vec::with_capacity(self.buf.len() / 4096 + 1);
        let mut pos = 0;
        while pos < self.buf.len() {
            let rest = &self.buf[pos..];
            if !eof && rest.len() < max {
                break;
            }
            let n = self.chunker.cut(rest, eof);
            cuts.push((pos, n));
            pos += n;
        }
        if cuts.is_empty() {
            return Ok(());
        }
        let mut next = self.spent.try_recv().unwrap_or_default();
        next.clear();
        next.reserve(BATCH_BYTES + (1 << 20));
        next.extend_from_slice(&self.buf[pos..]);
        let mut full = std::mem::replace(&mut self.buf, next);
        full.truncate(pos);
        self.send(Batch::Data(full, cuts))
    }

    /// Add one chunk of a fingerprint trace.
    pub fn push_trace(&mut self, fp: Fingerprint, len: u32) -> Result<()> {
        if !self.trace {
            return Err(Error::invalid("this repository stores data; it cannot ingest a fingerprint trace (init it with --trace)"));
        }
        self.fed += len as u64;
        self.trace_buf.push((fp, len));
        if let Some(r) = &mut self.recipe {
            self.events.pos = self.trace_buf.len();
            r.push(fp, len as u64, &mut self.events)?;
        }
        if self.trace_buf.len() >= TRACE_BATCH {
            self.send_trace().map_err(|e| Error::io("backup", e))?;
        }
        Ok(())
    }

    /// Send the buffered trace entries and recipe chunks to the worker.
    fn send_trace(&mut self) -> io::Result<()> {
        let (next, next_ev) = match self.trace_spent.try_recv() {
            Ok((mut v, mut ev)) => {
                v.clear();
                ev.bytes.clear();
                ev.events.clear();
                ev.pos = 0;
                (v, ev)
            }
            Err(_) => (Vec::with_capacity(TRACE_BATCH), RecipeEvents::default()),
        };
        let b = std::mem::replace(&mut self.trace_buf, next);
        let ev = std::mem::replace(&mut self.events, next_ev);
        self.send(Batch::Trace(b, ev))
    }

    /// Flush what is buffered, stop the worker and take back its state.
    /// With the recipe built upstream, also its root (when flushed).
    fn stop(mut self, flush: bool) -> (Sink, RecipeBuilder, Result<()>, Option<(RecipeEntry, u8)>) {
        let flushed = if flush {
            if self.trace {
                let mut closed = Ok(());
                if let Some(r) = self.recipe.take() {
                    self.events.pos = self.trace_buf.len();
                    match r.finish(&mut self.events) {
                        Ok(root) => self.root = Some(root),
                        Err(e) => closed = Err(io::Error::other(e.to_string())),
                    }
                }
                if self.trace_buf.is_empty() && self.events.events.is_empty() {
                    closed
                } else {
                    closed.and_then(|()| self.send_trace())
                }
            } else {
                self.cut_batch(true)
            }
        } else {
            Ok(())
        };
        drop(self.tx.take());
        let (sink, recipe, result) = self
            .handle
            .take()
            .expect("stopped once")
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        // A worker error explains a failed send better than the send error.
        let result = result.and(flushed.map_err(|e| Error::io("backup", e)));
        (sink, recipe, result, self.root)
    }
}

impl Ingest {
    /// Read from `reader` straight into the batch buffer (no intermediate
    /// copy) until end of input.
    pub fn read_from(
        &mut self,
        reader: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> io::Result<()> {
        const READ: usize = 1 << 20;
        loop {
            let len = self.buf.len();
            self.buf.resize(len + READ, 0);
            let n = loop {
                match reader.read(&mut self.buf[len..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            let n = match n {
                Ok(n) => n,
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(e);
                }
            };
            self.buf.truncate(len + n);
            if n == 0 {
                return Ok(());
            }
            self.fed += n as u64;
            if self.buf.len() >= BATCH_BYTES {
                self.cut_batch(false)?;
            }
            progress(self.fed);
        }
    }
}

impl Write for Ingest {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.trace {
            return Err(io::Error::other(
                "this repository is in trace mode; it stores fingerprint traces, not data",
            ));
        }
        self.buf.extend_from_slice(data);
        self.fed += data.len() as u64;
        if self.buf.len() >= BATCH_BYTES {
            self.cut_batch(false)?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Repository {
    /// Run a backup: `feed` writes the backup's bytes (or trace entries) into
    /// the [`Ingest`]; then the recipe is closed, the containers and index
    /// segment written, and a new manifest generation published. On any error
    /// nothing is published and the repository is unchanged.
    pub fn backup_with(
        &mut self,
        opts: &BackupOptions,
        feed: impl FnOnce(&mut Ingest) -> Result<()>,
    ) -> Result<BackupReport> {
        self.require_writer()?;
        let started = Instant::now();
        let cfg = self.manifest.config.clone();
        let before = self.metrics.snapshot();
        let rw = self.rewriter(opts);
        let sink = self.sink(rw, opts.rewrite != RewriteSpec::None);
        let mut ingest = Ingest::start(sink, cfg.chunker.build(), cfg.hash, cfg.trace);
        let fed = feed(&mut ingest);
        let (mut sink, recipe, worker, upstream_root) = ingest.stop(fed.is_ok());
        let member = worker.and(fed).and_then(|()| {
            let root = match upstream_root {
                Some(r) => r,
                None => recipe.finish(&mut sink)?,
            };
            Ok(vec![Member {
                name: opts.name.clone(),
                source: opts.source,
                root,
                counts: sink.counts,
            }])
        });
        let entry = self
            .commit(&mut sink, member)?
            .pop()
            .expect("one member, one entry");
        let sparse = if matches!(opts.rewrite, RewriteSpec::Har { .. }) {
            self.manifest.har_sparse.len() as u64
        } else {
            0
        };
        let io = self.metrics.snapshot().since(&before);
        Ok(report(entry, sink.counts, sparse, &io, started))
    }

    /// The sink of a new backup (or group): it owns the index until
    /// [`commit`](Self::commit) gives it back.
    fn sink(&mut self, rw: Option<Rewriter>, rewriting: bool) -> Sink {
        let cfg = &self.manifest.config;
        let sink = Sink {
            index: std::mem::take(&mut self.index),
            store: self.store.clone(),
            capacity: cfg.container_size as u64,
            next_id: self.manifest.next_container_id,
            data: ContainerBuilder::new(ChunkKind::Data, cfg.container_size as u64, cfg.trace),
            data_id: 0,
            recipe: ContainerBuilder::new(ChunkKind::Recipe, cfg.container_size as u64, false),
            recipe_id: 0,
            new_entries: Vec::new(),
            containers: Vec::new(),
            counts: Counts::default(),
            rw,
            saved: FpMap::default(),
            rewriting,
            first_id: self.manifest.next_container_id,
            cursor: DataCursor::default(),
        };
        debug_assert!(sink.capacity > 0);
        sink
    }

    /// Seal the open containers, write the index segment and publish one
    /// manifest generation listing `members` as new backups, in order.
    /// The index goes back to the repository either way; on failure (of the
    /// ingest, given as `members`, or here) every entry the sink added is
    /// removed and every repointed one restored, so the repository is
    /// exactly as before.
    fn commit(
        &mut self,
        sink: &mut Sink,
        members: Result<Vec<Member>>,
    ) -> Result<Vec<BackupEntry>> {
        let time = crate::clock::now();
        let outcome = members.and_then(|members| {
            sink.seal(ChunkKind::Data)?;
            sink.seal(ChunkKind::Recipe)?;
            let mut next = self.manifest.clone();
            next.next_container_id = sink.next_id;
            next.containers.extend(sink.containers.iter().copied());
            if let Some(h) = sink.rw.as_ref().and_then(|r| r.har.as_ref()) {
                next.har_sparse =
                    crate::rewrite::har_sparse(&h.used, sink.capacity, h.threshold, h.limit);
            }
            self.write_segment(&mut next, &sink.new_entries)?;
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
                };
                next.next_backup_id += 1;
                next.backups.push(entry.clone());
                entries.push(entry);
            }
            Ok((next, entries))
        });
        // Give the index back before publishing, so a failed publish can undo.
        let new_entries = std::mem::take(&mut sink.new_entries);
        let saved = std::mem::take(&mut sink.saved);
        self.index = std::mem::take(&mut sink.index);
        let published = outcome.and_then(|(mut next, entries)| {
            let superseded = self.compact_segments(&mut next)?;
            self.publish(next, &superseded).map(|()| entries)
        });
        if published.is_err() {
            for ne in &new_entries {
                self.index.remove(ne.kind, &ne.fp);
            }
            for (fp, state) in saved {
                self.index.set_data_state(fp, state);
            }
        }
        published
    }

    /// The segment buffer and policy for a backup, or `None` without rewriting.
    fn rewriter(&self, opts: &BackupOptions) -> Option<Rewriter> {
        if opts.rewrite == RewriteSpec::None {
            return None;
        }
        let live: HashSet<ContainerId> = self
            .manifest
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Data)
            .map(|c| c.id)
            .collect();
        let sparse: Vec<ContainerId> = self
            .manifest
            .har_sparse
            .iter()
            .copied()
            .filter(|c| live.contains(c))
            .collect();
        let trace = self.manifest.config.trace;
        Some(Rewriter {
            policy: opts.rewrite.policy(&sparse, || {
                self.manifest
                    .containers
                    .iter()
                    .filter(|c| c.kind == ChunkKind::Data)
                    .map(|c| (c.id, c.logical_bytes))
                    .collect()
            }),
            segment_bytes: opts.segment_bytes.max(1),
            trace,
            buf: Vec::new(),
            entries: Vec::new(),
            logical: 0,
            live,
            har: match opts.rewrite {
                RewriteSpec::Har { threshold, limit } => Some(HarUse {
                    threshold,
                    limit,
                    seen: FpSet::default(),
                    used: HashMap::new(),
                }),
                _ => None,
            },
        })
    }

    /// Back up a byte stream (a file, or stdin under a name).
    pub fn backup_reader(
        &mut self,
        opts: &BackupOptions,
        reader: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupReport> {
        let name = opts.name.clone();
        self.backup_with(opts, |ingest| {
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

    /// Back up a directory as a deterministic tar stream.
    pub fn backup_tree(
        &mut self,
        opts: &BackupOptions,
        root: &std::path::Path,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(BackupReport, crate::archive::TreeStats)> {
        let mut stats = None;
        let report = self.backup_with(opts, |ingest| {
            let mut done = 0u64;
            let mut on_bytes = |n: u64| {
                done += n;
                progress(done)
            };
            stats = Some(crate::archive::write_tree(root, ingest, &mut on_bytes)?);
            Ok(())
        })?;
        Ok((report, stats.unwrap_or_default()))
    }

    /// Back up a fingerprint trace: (fingerprint, size) per chunk.
    pub fn backup_trace(
        &mut self,
        opts: &BackupOptions,
        chunks: impl IntoIterator<Item = Result<(Fingerprint, u32)>>,
    ) -> Result<BackupReport> {
        self.backup_with(opts, |ingest| {
            for c in chunks {
                let (fp, len) = c?;
                ingest.push_trace(fp, len)?;
            }
            Ok(())
        })
    }
}
