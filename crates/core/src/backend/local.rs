//! STUB
pub struct LocalBackend;
