//! The extractor's input: a buffered stream that may hand out its next
//! bytes without copying them.
//!
//! Why: a restore's tar stream arrives in 1 MiB blocks (`restore/pipe.rs`);
//! a file's bytes that lie inside one block go to their writer as a shared
//! slice of the block, where they used to be copied into a buffer of their
//! own first. That copy was half of the `memmove` in a restore of a system
//! tree (8 % of its CPU, issue 33). Other inputs copy as before.

use std::io::{BufRead, BufReader, Read};
use std::ops::{Deref, Range};
use std::sync::Arc;

/// Bytes some other owner keeps alive (a block of the stream): a slice of
/// it, sent to another thread without a copy.
pub struct Shared {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: Range<usize>,
}

impl Shared {
    /// `range` of `owner`'s bytes (checked: a range outside them panics).
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= (*owner).as_ref().len(),
            "shared range outside its owner"
        );
        Shared { owner, range }
    }
}

impl Deref for Shared {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.range.clone()]
    }
}

/// A buffered stream the extractor reads from.
pub trait Input: BufRead {
    /// The next `n` bytes, consumed, if the input can hand them out without
    /// a copy (they lie in one of its buffers); otherwise `None` and
    /// nothing is consumed.
    fn share(&mut self, n: usize) -> Option<Shared> {
        let _ = n;
        None
    }
}

impl Input for &[u8] {}

impl<R: Read> Input for BufReader<R> {}

/// Any buffered stream, whose bytes are copied.
pub(crate) struct Copied<'a>(pub &'a mut dyn BufRead);

impl Read for Copied<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl BufRead for Copied<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.0.fill_buf()
    }
    fn consume(&mut self, n: usize) {
        self.0.consume(n)
    }
}

impl Input for Copied<'_> {}

/// An input over one buffer that shares what lies within its `block`-sized
/// pieces and copies what straddles two (for tests of both paths).
#[cfg(test)]
pub(crate) struct Blocks {
    bytes: Arc<Vec<u8>>,
    block: usize,
    at: usize,
    /// Bytes handed out shared.
    pub(crate) shared: usize,
}

#[cfg(test)]
impl Blocks {
    pub(crate) fn new(bytes: Vec<u8>, block: usize) -> Self {
        Blocks {
            bytes: Arc::new(bytes),
            block: block.max(1),
            at: 0,
            shared: 0,
        }
    }
}

#[cfg(test)]
impl Read for Blocks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let got = self.fill_buf()?;
        let n = got.len().min(buf.len());
        buf[..n].copy_from_slice(&got[..n]);
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
impl BufRead for Blocks {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        let end = ((self.at / self.block + 1) * self.block).min(self.bytes.len());
        Ok(&self.bytes[self.at..end])
    }
    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.bytes.len());
    }
}

#[cfg(test)]
impl Input for Blocks {
    fn share(&mut self, n: usize) -> Option<Shared> {
        let end = ((self.at / self.block + 1) * self.block).min(self.bytes.len());
        if n == 0 || end - self.at < n {
            return None;
        }
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.bytes.clone();
        let s = Shared::new(owner, self.at..self.at + n);
        self.at += n;
        self.shared += n;
        Some(s)
    }
}
