//! Containers: the fixed-capacity, immutable unit of storage and of I/O.
//!
//! [`format`](mod@format) is the byte layout; [`ContainerBuilder`] fills
//! one container; [`ContainerStore`] puts and gets container objects
//! through the sealing layer ([`SealedStore`](crate::seal::SealedStore)),
//! verifying every read and counting every read and write in
//! [`Metrics`](crate::metrics::Metrics); [`ContainerFiller`] fills and seals
//! new containers (ingest and GC sweep); [`ContainerEntry`] is a written
//! container in the catalog.

mod builder;
mod entry;
mod filler;
pub mod format;
mod frames;
mod store;

pub use builder::{ChunkSource, ContainerBuilder, FrameRef};
pub use entry::ContainerEntry;
pub use filler::{ContainerFiller, IdAllocator};
pub use format::{ChunkKind, ChunkMeta, ContainerId, Header, PerKind};
pub use store::{
    chunk_stored, frame_range, frames, open_chunk, open_chunks, open_frame, Container,
    ContainerStore,
};
