//! STUB: repository lock.
