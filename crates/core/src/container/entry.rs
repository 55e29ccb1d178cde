//! The catalog's record of one written container, [`ContainerEntry`]: what
//! the container writer hands back for each container it seals and the
//! manifest's `containers` list holds. A file of its own so the writer
//! builds entries without depending on the folder's `mod.rs`.

use crate::ids::{ChunkKind, ContainerId};

/// One container in the catalog (the manifest's `containers` list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerEntry {
    pub id: ContainerId,
    pub kind: ChunkKind,
    pub chunks: u32,
    /// Sum of chunk lengths (the container's size for every metric).
    pub logical_bytes: u64,
    /// Size of the stored object.
    pub object_bytes: u64,
}

impl ContainerEntry {
    /// The entry of a written container of `chunks` chunks.
    pub fn new(
        id: ContainerId,
        kind: ChunkKind,
        chunks: usize,
        logical_bytes: u64,
        object_bytes: u64,
    ) -> Self {
        ContainerEntry {
            id,
            kind,
            chunks: chunks as u32,
            logical_bytes,
            object_bytes,
        }
    }
}
