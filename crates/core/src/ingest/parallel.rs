//! The pure per-chunk work of a data batch, spread over worker threads:
//! cutting sections into chunks and fingerprinting every chunk.
//!
//! Dedup decisions and placement stay on the sink's thread, in stream
//! order, after this step, so containers, recipes and the index come out
//! the same whatever the thread count. (Compression and sealing run on the
//! container builder's frame threads: a frame's chunks are known only once
//! placed.)
//!
//! Threads are scoped to one batch (a few MiB of chunks, split into
//! contiguous runs of about equal bytes): no pool whose idle workers spin,
//! and memory is bounded by the batch.

use crate::chunking::Chunker;
use crate::fingerprint::{Fingerprint, Fingerprinter};
use std::sync::Mutex;

/// Runs a batch is split into per thread.
const RUNS_PER_THREAD: usize = 4;

/// Worker threads to use when asked for 0: the available cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A piece of a batch for the workers: `len` bytes at `start`, either one
/// chunk cut already or a whole section (a file's contents in a directory
/// stream) that a worker cuts: sections are chunked independently, so
/// several are cut at once.
#[derive(Clone, Copy, Debug)]
pub(super) struct Piece {
    pub start: usize,
    pub len: usize,
    /// A section to cut (else one chunk).
    pub section: bool,
}

/// A chunk of the batch: where its bytes are, and its fingerprint.
pub(super) type Chunk = (usize, usize, Fingerprint);

/// The batch step's state, reused across batches.
pub(super) struct Workers {
    threads: usize,
    /// Each run's chunks, in stream order (runs are contiguous).
    chunks: Vec<Vec<Chunk>>,
}

/// One worker's run of pieces.
struct Run<'a> {
    pieces: &'a [Piece],
    chunks: Vec<Chunk>,
}

impl Workers {
    /// `threads` workers per batch (0: every core).
    pub(super) fn new(threads: usize) -> Self {
        let threads = if threads == 0 {
            default_threads()
        } else {
            threads
        };
        Workers {
            threads,
            chunks: Vec::new(),
        }
    }

    /// The chunks of the last batch, in stream order.
    pub(super) fn chunks(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.iter().flatten()
    }

    /// Cut the sections among `pieces` of `buf` with `chunker` (to the end
    /// of each) and fingerprint every chunk (then in [`chunks`](Self::chunks)).
    pub(super) fn prepare(
        &mut self,
        buf: &[u8],
        pieces: &[Piece],
        chunker: &dyn Chunker,
        algo: &Fingerprinter,
    ) {
        let total: usize = pieces.iter().map(|p| p.len).sum();
        // Contiguous runs of about total/want bytes each, several per
        // thread: how well a run compresses varies, and threads that finish
        // early take the next run.
        let want = (self.threads * RUNS_PER_THREAD).min(pieces.len()).max(1);
        let mut spare_chunks = std::mem::take(&mut self.chunks);
        let mut runs = Vec::with_capacity(want);
        let mut rest = pieces;
        let mut done = 0usize;
        for k in 1..=want {
            let goal = total * k / want;
            let mut n = 0;
            while n < rest.len() && (done < goal || n == 0) {
                done += rest[n].len;
                n += 1;
            }
            if k == want {
                n = rest.len();
            }
            let (a, b) = rest.split_at(n);
            rest = b;
            let mut chunks = spare_chunks.pop().unwrap_or_default();
            chunks.clear();
            runs.push(Run { pieces: a, chunks });
            if rest.is_empty() {
                break;
            }
        }
        let helpers = self.threads.min(runs.len()) - 1;
        let work = |run: &mut Run| {
            for p in run.pieces {
                let mut at = p.start;
                let end = p.start + p.len;
                while at < end {
                    let n = if p.section {
                        chunker.cut(&buf[at..end], true)
                    } else {
                        p.len
                    };
                    let bytes = &buf[at..at + n];
                    let fp = algo.hash(bytes);
                    run.chunks.push((at, n, fp));
                    at += n;
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
        for r in runs {
            self.chunks.push(r.chunks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunking::ChunkerConfig;
    use crate::fingerprint::HashAlgo;

    fn noise(n: usize, mut x: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Sections cut by the workers give exactly the chunks a sequential cut
    /// of each section gives, in order, whatever the thread count; single
    /// chunks pass through as they are.
    #[test]
    fn sections_cut_in_parallel_as_sequentially() {
        let chunker = ChunkerConfig::Fastcdc {
            min: 256,
            avg: 1024,
            max: 4096,
        }
        .build();
        let algo = Fingerprinter::from(HashAlgo::Blake3);
        let buf = noise(300_000, 9);
        // Sections of many sizes (0-byte files have no piece), and a few
        // pre-cut chunks between them.
        let mut pieces = Vec::new();
        let mut at = 0;
        let mut k = 1usize;
        while at < buf.len() {
            let len = ((k * 7919) % 20_000 + 1).min(buf.len() - at);
            pieces.push(Piece {
                start: at,
                len,
                section: !k.is_multiple_of(5) || len > 4096,
            });
            at += len;
            k += 1;
        }
        let mut want = Vec::new();
        for p in &pieces {
            let mut s = p.start;
            while s < p.start + p.len {
                let n = if p.section {
                    chunker.cut(&buf[s..p.start + p.len], true)
                } else {
                    p.len
                };
                want.push((s, n, algo.hash(&buf[s..s + n])));
                s += n;
            }
        }
        for threads in [1, 2, 3, 8] {
            let mut w = Workers::new(threads);
            w.prepare(&buf, &pieces, &*chunker, &algo);
            let got: Vec<Chunk> = w.chunks().copied().collect();
            assert_eq!(got, want, "{threads} threads");
        }
    }
}
