//! Fixed-size chunking: the baseline that content-defined chunking is
//! measured against (an insertion shifts every later boundary).

use super::chunker::Chunker;

/// Cuts every `size` bytes; the last chunk of a stream may be shorter.
#[derive(Clone, Debug)]
pub struct FixedSize {
    size: usize,
}

impl FixedSize {
    /// `size` in `1..=16 MiB` (as checked by `ChunkerConfig::validate`).
    pub fn new(size: usize) -> Self {
        assert!(size > 0, "fixed chunk size must be positive");
        FixedSize { size }
    }
}

impl Chunker for FixedSize {
    #[inline]
    fn cut(&self, data: &[u8], eof: bool) -> usize {
        debug_assert!(!data.is_empty());
        debug_assert!(eof || data.len() >= self.size);
        data.len().min(self.size)
    }

    fn max_size(&self) -> usize {
        self.size
    }
}
