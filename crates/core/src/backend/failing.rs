//! STUB
pub struct FailingBackend;
