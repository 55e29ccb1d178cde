//! STUB: being implemented.
use super::Chunker;

pub struct FixedSize;

impl FixedSize {
    #[allow(unused_variables)]
    pub fn new(size: usize) -> Self {
        FixedSize
    }
}

impl Chunker for FixedSize {
    fn cut(&self, data: &[u8], _eof: bool) -> usize {
        data.len().min(8192)
    }
    fn max_size(&self) -> usize {
        8192
    }
}
