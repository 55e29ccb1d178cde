//! An in-process pipe carrying a restore's tar stream to its extractor.
//!
//! Why: an OS pipe moves the stream through a 64 KiB kernel buffer, two
//! copies and a wake-up per buffer each way; passing whole 1 MiB blocks
//! over a channel costs one copy and a wake-up per block. Blocks go back
//! to the writer once read, so a restore allocates only `depth + 2` of them.

use std::io::{self, BufRead, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

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
    block: Vec<u8>,
    at: usize,
}

/// A pipe holding up to `depth` blocks in flight.
pub(crate) fn pipe(depth: usize) -> (PipeReader, PipeWriter) {
    let (full_tx, full_rx) = sync_channel(depth.max(1));
    let (empty_tx, empty_rx) = sync_channel(depth.max(1) + 2);
    (
        PipeReader {
            full: full_rx,
            empty: empty_tx,
            block: Vec::new(),
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
        if self.at == self.block.len() {
            let Ok(next) = self.full.recv() else {
                return Ok(&[]);
            };
            let used = std::mem::replace(&mut self.block, next);
            self.at = 0;
            // The writer may be gone or have spares enough.
            let _ = self.empty.try_send(used);
        }
        Ok(&self.block[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.block.len());
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
    fn a_write_after_the_reader_left_is_a_broken_pipe() {
        let (r, mut w) = pipe(1);
        drop(r);
        let err = w.write_all(&vec![1; 2 * BLOCK]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}
