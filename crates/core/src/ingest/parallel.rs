//! The pure per-chunk work of a data batch, spread over worker threads:
//! fingerprinting every chunk and, for the chunks the index does not hold,
//! compressing and sealing them ahead of the container writer
//! ([`Presealed`](crate::container::Presealed)).
//!
//! Dedup decisions and placement stay on the sink's thread, in stream
//! order, after this step: the workers only read the index (to guess which
//! chunks will be stored) and their output is looked up by fingerprint, so
//! a wrong guess costs time, never layout. Containers, recipes and the
//! index come out the same whatever the thread count.
//!
//! Threads are scoped to one batch (a few MiB of chunks, split into
//! contiguous runs of about equal bytes): no pool whose idle workers spin,
//! and memory is bounded by the batch.

use crate::container::{ChunkKind, ChunkSealing, SealedPart};
use crate::fingerprint::{Fingerprint, Fingerprinter, FpSet};
use crate::index::DedupIndex;
use std::sync::Mutex;

/// Runs a batch is split into per thread.
const RUNS_PER_THREAD: usize = 4;

/// Worker threads to use when asked for 0: the available cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The batch step's state, reused across batches.
pub(super) struct Workers {
    threads: usize,
    fps: Vec<Fingerprint>,
    /// Spare parts (their buffers) for the next batch.
    spare: Vec<SealedPart>,
}

/// One worker's run of chunks.
struct Run<'a> {
    spans: &'a [(usize, usize)],
    fps: &'a mut [Fingerprint],
    part: SealedPart,
}

impl Workers {
    /// `threads` workers per batch (0: every core). With one, nothing is
    /// sealed ahead: the writer seals inline, as a sequential ingest does.
    pub(super) fn new(threads: usize) -> Self {
        let threads = if threads == 0 {
            default_threads()
        } else {
            threads
        };
        Workers {
            threads,
            fps: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// The fingerprints of the last batch, one per span.
    pub(super) fn fps(&self) -> &[Fingerprint] {
        &self.fps
    }

    /// Take back the parts the writer is done with.
    pub(super) fn give_back(&mut self, parts: Vec<SealedPart>) {
        self.spare.extend(parts);
    }

    /// Fingerprint the chunks at `spans` of `buf` (then in [`fps`](Self::fps)),
    /// and with `sealing`, seal the ones `index` does not hold. Returns the
    /// sealed parts, for the writer's [`Presealed`](crate::container::Presealed).
    pub(super) fn prepare<I: DedupIndex>(
        &mut self,
        buf: &[u8],
        spans: &[(usize, usize)],
        algo: &Fingerprinter,
        index: &I,
        sealing: Option<&ChunkSealing>,
    ) -> Vec<SealedPart> {
        self.fps.clear();
        self.fps.resize(spans.len(), Fingerprint::default());
        let sealing = sealing.filter(|_| self.threads > 1);
        let total: usize = spans.iter().map(|s| s.1).sum();
        // Contiguous runs of about total/want bytes each, several per
        // thread: how well a run compresses varies, and threads that finish
        // early take the next run.
        let want = (self.threads * RUNS_PER_THREAD).min(spans.len()).max(1);
        let mut runs = Vec::with_capacity(want);
        let (mut rest_spans, mut rest_fps) = (spans, &mut self.fps[..]);
        let mut done = 0usize;
        for k in 1..=want {
            let goal = total * k / want;
            let mut n = 0;
            while n < rest_spans.len() && (done < goal || n == 0) {
                done += rest_spans[n].1;
                n += 1;
            }
            if k == want {
                n = rest_spans.len();
            }
            let (a, b) = rest_spans.split_at(n);
            let (fa, fb) = std::mem::take(&mut rest_fps).split_at_mut(n);
            rest_spans = b;
            rest_fps = fb;
            runs.push(Run {
                spans: a,
                fps: fa,
                part: self.spare.pop().unwrap_or_default(),
            });
            if rest_spans.is_empty() {
                break;
            }
        }
        let helpers = self.threads.min(runs.len()) - 1;
        let work = |run: &mut Run| {
            let mut seen = FpSet::default();
            for (fp, &(s, n)) in run.fps.iter_mut().zip(run.spans) {
                let bytes = &buf[s..s + n];
                *fp = algo.hash(bytes);
                if let Some(sealing) = sealing {
                    if !index.contains(ChunkKind::Data, fp) && seen.insert(*fp) {
                        run.part.push(sealing, *fp, bytes);
                    }
                }
            }
        };
        if helpers == 0 {
            runs.iter_mut().for_each(work);
        } else {
            // Every thread, this one included, takes runs until none is
            // left; a helper that cannot be started leaves its share here.
            let queue = Mutex::new(runs.iter_mut().collect::<Vec<_>>());
            let drain = || loop {
                let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                match next {
                    Some(run) => work(run),
                    None => return,
                }
            };
            std::thread::scope(|s| {
                for _ in 0..helpers {
                    let _ = std::thread::Builder::new()
                        .name("tessera-hash".into())
                        .spawn_scoped(s, drain);
                }
                drain();
            });
        }
        runs.into_iter().map(|r| r.part).collect()
    }
}
