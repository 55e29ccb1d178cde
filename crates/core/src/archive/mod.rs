//! STUB: deterministic tar serialization and safe extraction.
