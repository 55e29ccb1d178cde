//! Recipes as Merkle trees (physical-GC paper §2.2).
//!
//! A level-1 recipe chunk is an array of (fingerprint, size) of consecutive
//! data chunks; a level-k chunk (k ≥ 2) is an array of (fingerprint, logical
//! size) of level-(k−1) recipe chunks. The single chunk at the top is the root,
//! and its fingerprint identifies the backup's content.
//!
//! Recipe chunks are cut *content-defined* over the entries (an entry whose
//! fingerprint has certain bits ends a chunk), not every N entries, so an
//! insertion in a new version only changes the recipe chunks around it and an
//! unchanged stretch shares its recipe chunks with the previous version. They
//! are fingerprinted and deduplicated like data.
//!
//! Encoding of a recipe chunk (little endian):
//! `b"TR"` | version u8 (=1) | level u8 | count u32 | count × entry (40 bytes).
//! A level-k entry (k ≥ 2) is fingerprint\[32\] | size u64. A level-1 entry
//! is fingerprint\[32\] | length u32 | copy u16 | 2 zero bytes: the copy
//! number says which stored copy of the chunk this backup reads (0 = the
//! first; rewriting adds more), so each backup restores from the copies its
//! own ingest chose. The copy costs no bytes: the 8 bytes of a level-1 size
//! held a u32 length anyway, and an entry of copy 0 encodes exactly as before.

pub use crate::index::CopyNo;

mod memo;
pub(crate) mod reader;
mod tree;

pub use memo::LeafMemo;
pub use reader::{Entries, Fetch, RecipeReader, RecipeVisitor, WalkStats};
pub(crate) use tree::check_child;
pub use tree::{
    decode, encode, encode_into, RecipeBuilder, RecipeChunk, RecipeEntry, RecipeSink, RecipeWalker,
    MAX_LEVEL,
};
