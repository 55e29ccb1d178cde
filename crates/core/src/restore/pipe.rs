//! An in-process pipe carrying a restore's tar stream to its extractor.
//!
//! Why: an OS pipe moves the stream through a 64 KiB kernel buffer, two
//! copies and a wake-up per buffer each way; passing whole 1 MiB blocks
//! over a channel costs one copy and a wake-up per block. Blocks go back
//! to the writer once read, so a restore allocates only `depth + 2` of them
//! besides those its file writers still hold: a file's bytes inside one
//! block are handed to its writer as a slice of it ([`Input::share`]),
//! and the block goes back once the last of them is written (the writers'
//! queue is bounded, so these are a few).

use crate::archive::{Input, Shared};
use std::io::{self, BufRead, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

/// Bytes per block handed over.
const BLOCK: usize = 1 << 20;

/// The writing end: buffers a block, then hands it over. Dropping it ends
/// the stream (after what was written); a write after the reader is gone
/// fails as a broken pipe.
pub(crate) struct PipeWriter {
    full: SyncSender<Vec<u8>>,
    empty: Receiver<Vec<u8>>,
    buf: Vec<u8>,
}

/// The reading end: reads what the writer wrote, then end of file.
pub(crate) struct PipeReader {
    full: Receiver<Vec<u8>>,
    empty: SyncSender<Vec<u8>>,
    block: Arc<Block>,
    at: usize,
}

/// A block being read, shared with the file writers that hold slices of
/// it; the last to let go sends its buffer back to the pipe's writer.
struct Block {
    bytes: Vec<u8>,
    home: Option<SyncSender<Vec<u8>>>,
}

impl AsRef<[u8]> for Block {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Some(home) = &self.home {
            // The writer may be gone or have spares enough.
            let _ = home.try_send(std::mem::take(&mut self.bytes));
        }
    }
}

/// A pipe holding up to `depth` blocks in flight.
pub(crate) fn pipe(depth: usize) -> (PipeReader, PipeWriter) {
    let (full_tx, full_rx) = sync_channel(depth.max(1));
    let (empty_tx, empty_rx) = sync_channel(depth.max(1) + 2);
    (
        PipeReader {
            full: full_rx,
            empty: empty_tx,
            block: Arc::new(Block {
                bytes: Vec::new(),
                home: None,
            }),
            at: 0,
        },
        PipeWriter {
            full: full_tx,
            empty: empty_rx,
            buf: Vec::with_capacity(BLOCK),
        },
    )
}

impl PipeWriter {
    fn hand_over(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut next = self.empty.try_recv().unwrap_or_default();
        next.clear();
        next.reserve(BLOCK);
        let block = std::mem::replace(&mut self.buf, next);
        self.full
            .send(block)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the extractor stopped"))
    }
}

impl Write for PipeWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(BLOCK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == BLOCK {
            self.hand_over()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()
    }
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        // The reader sees the end either way; a reader that is gone has
        // nothing to hear.
        let _ = self.hand_over();
    }
}

impl Read for PipeReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let block = self.fill_buf()?;
        let n = out.len().min(block.len());
        out[..n].copy_from_slice(&block[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// Read in place: the extractor copies a file's bytes straight out of the
/// block (a buffered reader over the pipe would copy them twice).
impl BufRead for PipeReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at == self.block.bytes.len() {
            let Ok(next) = self.full.recv() else {
                return Ok(&[]);
            };
            // The block read goes back to the writer now, or once the
            // file writers holding slices of it are done.
            self.block = Arc::new(Block {
                bytes: next,
                home: Some(self.empty.clone()),
            });
            self.at = 0;
        }
        Ok(&self.block.bytes[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.block.bytes.len());
    }
}

impl Input for PipeReader {
    fn share(&mut self, n: usize) -> Option<Shared> {
        if n == 0 || self.fill_buf().ok()?.len() < n {
            return None;
        }
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.block.clone();
        let shared = Shared::new(owner, self.at..self.at + n);
        self.at += n;
        Some(shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carries_every_byte_in_order_then_ends() {
        let data: Vec<u8> = (0..3 * BLOCK + 12_345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let (mut r, mut w) = pipe(2);
        let got = std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut got = Vec::new();
                r.read_to_end(&mut got).unwrap();
                got
            });
            // Odd-sized writes straddle the blocks.
            for piece in data.chunks(100_003) {
                w.write_all(piece).unwrap();
            }
            drop(w);
            reader.join().unwrap()
        });
        assert_eq!(got, data);
    }

    #[test]
    fn read_in_place_gives_whole_blocks_then_ends() {
        let data: Vec<u8> = (0..BLOCK + 10).map(|i| (i % 253) as u8).collect();
        let (mut r, mut w) = pipe(2);
        w.write_all(&data).unwrap();
        drop(w);
        assert_eq!(r.fill_buf().unwrap(), &data[..BLOCK]);
        r.consume(BLOCK - 3);
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, &data[BLOCK - 3..]);
        assert!(r.fill_buf().unwrap().is_empty());
    }

    #[test]
    fn share_hands_out_bytes_within_a_block_and_returns_it_after_the_last() {
        let data: Vec<u8> = (0..2 * BLOCK).map(|i| (i % 241) as u8).collect();
        let (mut r, mut w) = pipe(2);
        w.write_all(&data).unwrap();
        let a = r.share(100).unwrap();
        assert_eq!(&a[..], &data[..100]);
        // Straddling the end of the block: not shared, nothing consumed.
        assert!(r.share(BLOCK).is_none());
        let b = r.share(BLOCK - 100).unwrap();
        assert_eq!(&b[..], &data[100..BLOCK]);
        // The next block is loaded for the next share.
        let c = r.share(7).unwrap();
        assert_eq!(&c[..], &data[BLOCK..BLOCK + 7]);
        // The writer's spares are full: dropping the first block's last
        // slices frees it rather than blocking.
        for _ in 0..4 {
            r.empty.try_send(Vec::new()).unwrap();
        }
        assert!(r.empty.try_send(Vec::new()).is_err());
        drop(a);
        drop(b);
        drop(w);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, &data[BLOCK + 7..]);
        assert!(r.share(1).is_none());
        drop(c);
    }

    #[test]
    fn a_block_goes_back_to_the_writer_with_its_last_slice() {
        let (mut r, mut w) = pipe(1);
        w.write_all(&vec![5; BLOCK]).unwrap();
        let a = r.share(10).unwrap();
        r.consume(BLOCK - 10);
        w.write_all(&[6]).unwrap();
        w.flush().unwrap();
        // Reading on replaces the block, which a slice still holds.
        assert_eq!(r.fill_buf().unwrap(), &[6]);
        assert!(w.empty.try_recv().is_err());
        drop(a);
        let back = w.empty.try_recv().unwrap();
        assert_eq!(back.len(), BLOCK);
    }

    #[test]
    fn a_write_after_the_reader_left_is_a_broken_pipe() {
        let (r, mut w) = pipe(1);
        drop(r);
        let err = w.write_all(&vec![1; 2 * BLOCK]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}
