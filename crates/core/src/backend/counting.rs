//! STUB
pub struct CountingBackend;
pub struct IoCounters;
