//! The two stages of a backup: the caller's thread cuts bytes into chunks
//! (or buffers trace entries, and in trace mode without rewriting also
//! builds the recipe tree); the worker thread fingerprints and hands every
//! chunk to the [`Sink`], in batches.

use super::parallel::{Piece, Workers};
use super::sink::Sink;
use crate::chunking::Chunker;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::index::DedupIndex;
use crate::layout::{ChunkWriter, ContainerLayout, Layout};
use crate::recipe::{RecipeBuilder, RecipeEntry, RecipeSink};
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes the chunking stage accumulates before handing a batch to the worker.
const BATCH_BYTES: usize = 4 << 20;
/// Trace entries per batch.
const TRACE_BATCH: usize = 8192;
/// How many chunks ahead the trace worker prefetches index slots (and twice
/// as far, the index's insertion log).
const PREFETCH: usize = 16;

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

type WorkerResult<L> = (Sink<L>, RecipeBuilder, Result<()>);

#[allow(clippy::too_many_arguments)]
fn worker<L: Layout>(
    rx: Receiver<Batch>,
    spent: SyncSender<Vec<u8>>,
    trace_spent: SyncSender<(Vec<(Fingerprint, u32)>, RecipeEvents)>,
    mut sink: Sink<L>,
    mut recipe: RecipeBuilder,
    algo: Fingerprinter,
    recipe_upstream: bool,
    threads: usize,
    chunker: Arc<dyn Chunker>,
) -> WorkerResult<L> {
    let mut workers = Workers::new(threads);
    let mut pieces = Vec::new();
    let run = || -> Result<()> {
        for batch in rx {
            match batch {
                Batch::Data(buf, cuts) => {
                    // Fingerprints (and chunks sealed ahead) from the
                    // workers; then dedup and placement here, in order.
                    // With rewriting, chunks are stored segments later.
                    let sealing = match sink.rw {
                        None => sink.writer.chunk_sealing(),
                        Some(_) => None,
                    };
                    pieces.clear();
                    pieces.extend(cuts.iter().map(|&(start, len)| Piece {
                        start,
                        len,
                        section: false,
                    }));
                    let parts = workers.prepare(
                        &buf,
                        &pieces,
                        &*chunker,
                        &algo,
                        &sink.index,
                        sealing.as_ref(),
                    );
                    let presealed = sealing.and_then(|_| sink.writer.presealed());
                    match presealed {
                        Some(p) => p.install(parts),
                        None => workers.give_back(parts),
                    }
                    for &(s, n, fp) in workers.chunks() {
                        let bytes = &buf[s..s + n];
                        sink.data_chunk(&mut recipe, fp, n as u32, bytes)?;
                    }
                    if let Some(p) = sink.writer.presealed() {
                        workers.give_back(p.recycle());
                    }
                    // Hand the buffer back: no 5 MiB allocation per batch.
                    let _ = spent.try_send(buf);
                }
                Batch::Trace(entries, ev) => {
                    // Start loading the index slots PREFETCH chunks ahead,
                    // so the probes' cache misses overlap.
                    let ahead = if sink.rw.is_none() { PREFETCH } else { 0 };
                    for (j, &(fp, _)) in entries.iter().take(ahead).enumerate() {
                        DedupIndex::prefetch_data_seq(&sink.index, sink.cursor, j, &fp);
                    }
                    let mut events = ev.events.iter().peekable();
                    for (i, &(fp, len)) in entries.iter().enumerate() {
                        if ahead > 0 {
                            // Two stages: the log entry expected 2·ahead on,
                            // then (the log entry now cached) the index slot
                            // ahead on unless the log predicts the chunk.
                            DedupIndex::prefetch_data_log(&sink.index, sink.cursor, 2 * ahead);
                            if let Some(&(next, _)) = entries.get(i + ahead) {
                                DedupIndex::prefetch_data_seq(
                                    &sink.index,
                                    sink.cursor,
                                    ahead,
                                    &next,
                                );
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
pub struct Ingest<L: Layout = ContainerLayout> {
    chunker: Arc<dyn Chunker>,
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
    handle: Option<JoinHandle<WorkerResult<L>>>,
    fed: u64,
}

impl<L: Layout> Ingest<L> {
    pub(super) fn start(
        sink: Sink<L>,
        chunker: Arc<dyn Chunker>,
        algo: Fingerprinter,
        trace: bool,
        threads: usize,
    ) -> Self {
        let worker_chunker = chunker.clone();
        let (tx, rx) = sync_channel(1);
        let (spent_tx, spent) = sync_channel(2);
        let (trace_spent_tx, trace_spent) = sync_channel(2);
        let recipe = RecipeBuilder::new(algo.clone());
        let upstream_algo = algo.clone();
        // With rewriting, recipe entries follow the segment's decisions, so
        // the worker builds the recipe; in data mode it has the fingerprints.
        let upstream = trace && sink.rw.is_none();
        let handle = std::thread::Builder::new()
            .name("tessera-ingest".into())
            .spawn(move || {
                worker(
                    rx,
                    spent_tx,
                    trace_spent_tx,
                    sink,
                    recipe,
                    algo,
                    upstream,
                    threads,
                    worker_chunker,
                )
            })
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
            recipe: upstream.then(|| RecipeBuilder::new(upstream_algo)),
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
    #[allow(clippy::type_complexity)]
    pub(super) fn stop(
        mut self,
        flush: bool,
    ) -> (
        Sink<L>,
        RecipeBuilder,
        Result<()>,
        Option<(RecipeEntry, u8)>,
    ) {
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

impl<L: Layout> Write for Ingest<L> {
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
