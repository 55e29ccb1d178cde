//! STUB
pub struct MemoryBackend;
