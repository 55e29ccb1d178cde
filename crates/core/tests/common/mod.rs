//! Helpers shared by the integration tests.

/// Cheap deterministic bytes (xorshift), so tests can make megabytes quickly.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A new data-mode repository on `backend` (BLAKE3) holding one stream
/// backup of `data`, and that backup.
#[allow(dead_code)] // not every test file restores a single stream
pub fn repo_with_stream(
    backend: std::sync::Arc<dyn tessera_core::backend::Backend>,
    chunker: tessera_core::chunking::ChunkerConfig,
    container_size: u32,
    data: &[u8],
) -> (tessera_core::Repository, tessera_core::catalog::BackupEntry) {
    use tessera_core::{BackupOptions, HashAlgo, InitOptions, Repository};
    Repository::init(
        backend.clone(),
        &InitOptions {
            hash: HashAlgo::Blake3,
            chunker,
            container_size,
            trace: false,
        },
    )
    .unwrap();
    let mut repo = Repository::open_writer(backend, "test").unwrap();
    let opts = BackupOptions::new("s", tessera_core::catalog::SourceKind::Stream);
    let id = repo
        .backup_reader(&opts, &mut &data[..], &mut |_| {})
        .unwrap()
        .backup
        .id;
    let entry = repo.manifest().backup(id).unwrap().clone();
    (repo, entry)
}
