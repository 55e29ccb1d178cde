//! STUB: being implemented.
use super::Chunker;

pub struct Rabin;

impl Rabin {
    #[allow(unused_variables)]
    pub fn new(min: usize, avg: usize, max: usize) -> Self {
        Rabin
    }
}

impl Chunker for Rabin {
    fn cut(&self, data: &[u8], _eof: bool) -> usize {
        data.len().min(8192)
    }
    fn max_size(&self) -> usize {
        8192
    }
}
