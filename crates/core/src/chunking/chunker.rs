//! The trait the chunking algorithms beside it (FastCDC, Rabin, fixed
//! size) implement; `chunking` re-exports it.

/// Finds chunk boundaries.
pub trait Chunker: Send + Sync {
    /// Length of the chunk that starts at `data[0]`.
    ///
    /// Contract: `data` is non-empty. If `eof` is false, `data.len() >=
    /// self.max_size()`. The result is in `1..=min(data.len(), max_size)`,
    /// and is at least `min_size` unless `data.len() < min_size` (a final
    /// short chunk, only possible with `eof`).
    fn cut(&self, data: &[u8], eof: bool) -> usize;
    /// Largest chunk this chunker produces: the look-ahead the caller keeps.
    fn max_size(&self) -> usize;
}
