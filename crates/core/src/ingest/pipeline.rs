//! The two stages of a backup: the caller's thread buffers bytes and marks
//! where each section (a file's contents) ends, cutting only a section that
//! runs past a batch (or buffers trace entries, and in trace mode without
//! rewriting also builds the recipe tree); the worker thread has the
//! batch's sections cut, its chunks fingerprinted and the new ones sealed
//! by worker threads ([`Workers`]), then hands every chunk to the
//! [`Sink`] in stream order.

use super::parallel::{Piece, Workers};
use super::sink::Sink;
use crate::archive::meta::Xattr;
use crate::archive::FileId;
use crate::chunking::Chunker;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::ids::ChunkKind;
use crate::recipe::{LeafMemo, RecipeBuilder, RecipeEntry, RecipeSink};
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
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
/// probes (and, with the writer's [`LeafMemo`], only over leaves the last
/// backups did not have). Each chunk is stored after the first `pos` data
/// chunks of its batch: exactly where the worker would have emitted it, so
/// containers are filled and numbered the same.
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

/// One piece of a data batch, in stream order.
pub(super) enum Cut {
    /// A chunk of the batch's bytes: (start, len).
    Bytes(usize, usize),
    /// A whole section of the batch's bytes, for the workers to cut: (start, len).
    Section(usize, usize),
    /// A chunk the index holds, given by fingerprint (the files cache): its
    /// bytes were not read.
    Known(Fingerprint, u32),
    /// The directory stream's metadata starts at this stream offset.
    MetaStart(u64),
    /// A position in the chunk sequence ([`Ingest::mark`]).
    Mark,
    /// A file whose contents are the data chunks since mark `from`, for
    /// the next files cache ([`Ingest::learn`]).
    File(Box<LearntFile>),
}

/// A file the files cache is to record: (path, identity, extended
/// attributes, mark before its chunks).
pub(super) struct LearntFile {
    pub path: Vec<u8>,
    pub id: FileId,
    pub xattrs: Vec<Xattr>,
    pub from: u64,
}

enum Batch {
    /// Bytes and the chunks cut in them.
    Data(Vec<u8>, Vec<Cut>),
    /// Trace entries, and the recipe chunks built upstream (if so).
    Trace(Vec<(Fingerprint, u32)>, RecipeEvents),
}

type WorkerResult = (Sink, RecipeBuilder, Result<()>);

#[allow(clippy::too_many_arguments)]
fn worker(
    rx: Receiver<Batch>,
    spent: SyncSender<Vec<u8>>,
    trace_spent: SyncSender<(Vec<(Fingerprint, u32)>, RecipeEvents)>,
    mut sink: Sink,
    mut recipe: RecipeBuilder,
    algo: Fingerprinter,
    recipe_upstream: bool,
    threads: usize,
    chunker: Arc<dyn Chunker>,
) -> WorkerResult {
    let mut workers = Workers::new(threads);
    let mut pieces = Vec::new();
    let run = || -> Result<()> {
        for batch in rx {
            match batch {
                Batch::Data(buf, cuts) => {
                    // Sections cut and fingerprints from the workers; then
                    // dedup and placement here, in stream order (frames are
                    // compressed and sealed by the container builder's
                    // threads as they fill).
                    pieces.clear();
                    pieces.extend(cuts.iter().filter_map(|c| match *c {
                        Cut::Bytes(start, len) => Some(Piece {
                            start,
                            len,
                            section: false,
                        }),
                        Cut::Section(start, len) => Some(Piece {
                            start,
                            len,
                            section: true,
                        }),
                        _ => None,
                    }));
                    workers.prepare(&buf, &pieces, &*chunker, &algo);
                    let mut chunks = workers.chunks().peekable();
                    for cut in &cuts {
                        match *cut {
                            Cut::Bytes(start, len) | Cut::Section(start, len) => {
                                let end = start + len;
                                while let Some(&(s, n, fp)) = chunks.next_if(|c| c.0 < end) {
                                    let bytes = &buf[s..s + n];
                                    sink.data_chunk(&mut recipe, fp, n as u32, bytes)?;
                                    if let Some(l) = &mut sink.learn {
                                        l.chunk(fp, n as u32);
                                    }
                                }
                            }
                            Cut::Known(fp, n) => {
                                sink.known_chunk(&mut recipe, fp, n)?;
                                if let Some(l) = &mut sink.learn {
                                    l.chunk(fp, n);
                                }
                            }
                            Cut::MetaStart(at) => {
                                sink.counts.meta_from = Some(at);
                                // The metadata in frames of its own.
                                sink.writer.break_frame(ChunkKind::Data);
                            }
                            Cut::Mark => {
                                if let Some(l) = &mut sink.learn {
                                    l.mark();
                                }
                            }
                            Cut::File(ref f) => {
                                if let Some(l) = &mut sink.learn {
                                    l.file(&f.path, &f.id, &f.xattrs, f.from);
                                }
                            }
                        }
                    }
                    drop(chunks);
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
                            let copy = sink.dedup_chunk(fp, len, &[])?;
                            debug_assert_eq!(copy, 0, "only first copies");
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
        sink.flush_own_segment(&mut recipe)
    };
    let result = run();
    (sink, recipe, result)
}

/// A running backup. Feed it bytes through [`Write`] (data mode) or
/// fingerprints through [`Ingest::push_trace`] (trace mode).
pub struct Ingest {
    chunker: Arc<dyn Chunker>,
    trace: bool,
    buf: Vec<u8>,
    /// Chunks cut in `buf` (and other pieces) not yet sent.
    cuts: Vec<Cut>,
    /// Bytes of `buf` already cut or handed over as sections.
    cut_to: usize,
    /// Marks placed so far ([`mark`](Self::mark)).
    marks: u64,
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
    pub(super) fn start(
        sink: Sink,
        chunker: Arc<dyn Chunker>,
        algo: Fingerprinter,
        trace: bool,
        threads: usize,
        leaf_memo: Option<Arc<Mutex<LeafMemo>>>,
    ) -> Self {
        let worker_chunker = chunker.clone();
        let (tx, rx) = sync_channel(1);
        let (spent_tx, spent) = sync_channel(2);
        let (trace_spent_tx, trace_spent) = sync_channel(2);
        let recipe = RecipeBuilder::new(algo.clone());
        let upstream_algo = algo.clone();
        // With rewriting, recipe entries follow the segment's decisions, so
        // the worker builds the recipe; in data mode it has the fingerprints.
        // Without rewriting a recipe names each chunk's newest copy, which
        // is copy 0 unless earlier rewriting stored more.
        let upstream = trace && sink.rw.is_none() && sink.index.first_copies_only();
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
            cuts: Vec::new(),
            cut_to: 0,
            marks: 0,
            trace_buf: Vec::new(),
            trace_spent,
            recipe: upstream.then(|| {
                let recipe = RecipeBuilder::new(upstream_algo);
                match leaf_memo {
                    Some(m) => {
                        m.lock().unwrap_or_else(|p| p.into_inner()).next_backup();
                        recipe.with_memo(m)
                    }
                    None => recipe,
                }
            }),
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
    /// (less than `max_size` bytes) unless this is the end of a stream
    /// section (`eof`: the chunker restarts after it).
    fn cut_pending(&mut self, eof: bool) {
        let max = self.chunker.max_size();
        let mut pos = self.cut_to;
        while pos < self.buf.len() {
            let rest = &self.buf[pos..];
            if !eof && rest.len() < max {
                break;
            }
            let n = self.chunker.cut(rest, eof);
            self.cuts.push(Cut::Bytes(pos, n));
            pos += n;
        }
        self.cut_to = pos;
    }

    /// Send the cut bytes and pieces to the worker; keep the uncut tail.
    fn send_cut(&mut self) -> io::Result<()> {
        if self.cuts.is_empty() {
            return Ok(());
        }
        let mut next = self.spent.try_recv().unwrap_or_default();
        next.clear();
        next.reserve(BATCH_BYTES + (1 << 20));
        next.extend_from_slice(&self.buf[self.cut_to..]);
        let mut full = std::mem::replace(&mut self.buf, next);
        full.truncate(self.cut_to);
        self.cut_to = 0;
        let cuts = std::mem::take(&mut self.cuts);
        self.send(Batch::Data(full, cuts))
    }

    fn cut_batch(&mut self, eof: bool) -> io::Result<()> {
        self.cut_pending(eof);
        self.send_cut()
    }

    /// Send a batch when enough is buffered: bytes, or pieces without bytes.
    fn maybe_send(&mut self) -> io::Result<()> {
        if self.cut_to >= BATCH_BYTES || self.cuts.len() >= TRACE_BATCH {
            self.send_cut()
        } else {
            Ok(())
        }
    }

    /// End a stream section (a file's contents): the next byte starts a new
    /// chunk. The section's bytes in this batch are cut by the workers.
    pub(crate) fn boundary(&mut self) -> io::Result<()> {
        if self.trace {
            return Ok(());
        }
        self.end_section();
        self.maybe_send()
    }

    /// Hand the bytes fed since the last cut over as a section.
    fn end_section(&mut self) {
        if self.cut_to < self.buf.len() {
            self.cuts
                .push(Cut::Section(self.cut_to, self.buf.len() - self.cut_to));
            self.cut_to = self.buf.len();
        }
    }

    /// Place a mark here, at a section boundary; returns its number. A
    /// file's chunks are those after the mark placed before them.
    pub(crate) fn mark(&mut self) -> u64 {
        self.end_section();
        self.cuts.push(Cut::Mark);
        self.marks += 1;
        self.marks - 1
    }

    /// The data chunks since mark `from` (up to here, a section boundary)
    /// are `path`'s contents, with identity `id` and extended attributes
    /// `xattrs`: the next files cache records them (if the backup learns
    /// one).
    pub(crate) fn learn(
        &mut self,
        path: &[u8],
        id: FileId,
        xattrs: &[Xattr],
        from: u64,
    ) -> io::Result<()> {
        self.end_section();
        self.cuts.push(Cut::File(Box::new(LearntFile {
            path: path.to_vec(),
            id,
            xattrs: xattrs.to_vec(),
            from,
        })));
        self.maybe_send()
    }

    /// Add a chunk the repository's index holds without its bytes (the
    /// files cache), at a section boundary. The worker refuses it if the
    /// index does not hold it.
    pub(crate) fn push_known(&mut self, fp: Fingerprint, len: u32) -> io::Result<()> {
        self.boundary()?;
        self.cuts.push(Cut::Known(fp, len));
        self.fed += u64::from(len);
        self.maybe_send()
    }

    /// The directory stream's metadata starts here: from now on new bytes
    /// count as metadata in the report.
    pub(crate) fn metadata_starts(&mut self) -> io::Result<()> {
        self.boundary()?;
        self.cuts.push(Cut::MetaStart(self.fed));
        Ok(())
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
            r.push(fp, len, 0, &mut self.events)?;
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
    ) -> (Sink, RecipeBuilder, Result<()>, Option<(RecipeEntry, u8)>) {
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
                self.end_section();
                self.send_cut()
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
