//! Helpers shared by the integration-test modules.

use std::sync::Arc;
use tessera_core::backend::{MemoryStore, ObjectStore};
use tessera_core::catalog::{BackupEntry, SourceKind};
use tessera_core::check::{CheckOptions, ReadData};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::gc::GcOptions;
use tessera_core::{
    BackupId, BackupOptions, Fingerprint, HashAlgo, InitOptions, Repository, RestoreOptions, Writer,
};

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

/// A memory backend.
pub fn mem() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

/// A new version of `base`: an overwrite, an insertion of `insert` bytes
/// and a deletion.
pub fn mutate(base: &[u8], seed: u64, insert: usize) -> Vec<u8> {
    let mut v = base.to_vec();
    if v.is_empty() {
        return bytes(seed, 1000);
    }
    let n = v.len();
    let at = (seed as usize).wrapping_mul(7919) % n;
    let end = (at + 3000).min(n);
    v[at..end].copy_from_slice(&bytes(seed ^ 1, end - at));
    let ins = (seed as usize).wrapping_mul(104_729) % v.len();
    v.splice(ins..ins, bytes(seed ^ 2, insert));
    let del = (seed as usize).wrapping_mul(1_299_709) % v.len();
    let del_end = (del + 2000).min(v.len());
    v.drain(del..del_end);
    v
}

/// The fingerprint of a one-letter chunk in the trace scenarios.
pub fn fp(letter: char) -> Fingerprint {
    HashAlgo::Blake3.hash(letter.to_string().as_bytes())
}

/// The fingerprint of chunk number `n` of a generated trace.
pub fn fp_n(n: u64) -> Fingerprint {
    HashAlgo::Blake3.hash(&n.to_le_bytes())
}

/// Initialise a BLAKE3 repository on `backend`.
pub fn init_blake3(
    backend: Arc<dyn ObjectStore>,
    chunker: ChunkerConfig,
    container_size: u32,
    trace: bool,
) {
    Repository::init(
        backend,
        &InitOptions {
            hash: HashAlgo::Blake3,
            chunker,
            container_size,
            trace,
            ..Default::default()
        },
    )
    .unwrap();
}

/// [`init_blake3`], then open the repository as writer "test".
pub fn open_new(
    backend: Arc<dyn ObjectStore>,
    chunker: ChunkerConfig,
    container_size: u32,
    trace: bool,
) -> Writer {
    init_blake3(backend.clone(), chunker, container_size, trace);
    Repository::open_writer(backend, "test").unwrap()
}

/// Back `data` up as the stream `name`; the new backup's id.
pub fn backup(repo: &mut Writer, name: &str, data: &[u8]) -> tessera_core::Result<BackupId> {
    let mut r = data;
    let opts = BackupOptions::new(name, SourceKind::Stream);
    repo.backup_reader(&opts, &mut r, &mut |_| {})
        .map(|rep| rep.backup.id)
}

/// Restore backup `id` into memory.
pub fn restore(repo: &Repository, id: BackupId) -> tessera_core::Result<Vec<u8>> {
    let b = repo.manifest().backup(id).expect("listed").clone();
    let mut out = Vec::new();
    repo.restore_to(&b, &mut out, &RestoreOptions::default(), &mut |_| {})?;
    Ok(out)
}

/// The trace of `data` as `chunker` cuts it: each chunk's BLAKE3
/// fingerprint and length, as a trace-mode backup takes them.
pub fn trace_of(
    chunker: &ChunkerConfig,
    data: &[u8],
) -> Vec<tessera_core::Result<(Fingerprint, u32)>> {
    let lens = tessera_core::chunking::chunk_all(&*chunker.build(), data);
    let mut pos = 0;
    lens.iter()
        .map(|&n| {
            let fp = HashAlgo::Blake3.hash(&data[pos..pos + n]);
            pos += n;
            Ok((fp, n as u32))
        })
        .collect()
}

/// A new data-mode repository on `backend` (BLAKE3) holding one stream
/// backup of `data`, and that backup.
pub fn repo_with_stream(
    backend: Arc<dyn ObjectStore>,
    chunker: ChunkerConfig,
    container_size: u32,
    data: &[u8],
) -> (Writer, BackupEntry) {
    let mut repo = open_new(backend, chunker, container_size, false);
    let opts = BackupOptions::new("s", SourceKind::Stream);
    let id = repo
        .backup_reader(&opts, &mut &data[..], &mut |_| {})
        .unwrap()
        .backup
        .id;
    let entry = repo.manifest().backup(id).unwrap().clone();
    (repo, entry)
}

/// The cycle every remote store's tests run (GCS, SFTP, rclone): three
/// backups, a forget of two, a GC that reclaims; then, from a fresh handle,
/// one backup listed, restored byte for byte, and `check --read-data` clean.
pub fn backup_forget_gc_check_restore(store: Arc<dyn ObjectStore>) {
    init_remote(store.clone());
    let v1 = bytes(7, 700_000);
    let v2 = mutate(&v1, 8, 5000);
    let v3 = bytes(9, 300_000);
    let mut w = Repository::open_writer(store.clone(), "test").unwrap();
    let i1 = backup(&mut w, "s", &v1).unwrap();
    let i2 = backup(&mut w, "s", &v2).unwrap();
    let i3 = backup(&mut w, "t", &v3).unwrap();
    w.forget(&[i1, i3]).unwrap();
    let gc = w.gc(&GcOptions::default()).unwrap();
    assert!(gc.reclaimed_containers > 0, "{gc:?}");
    w.close().unwrap();
    let r = Repository::open(store).unwrap();
    assert_eq!(r.backups().len(), 1);
    assert_eq!(restore(&r, i2).unwrap(), v2);
    let c = r
        .check(&CheckOptions {
            read_data: ReadData::All,
        })
        .unwrap();
    assert!(c.ok(), "{:?}", c.problems);
}

/// A repository for the remote stores' tests: BLAKE3, small FastCDC
/// chunks, 64 KiB containers, unencrypted.
pub fn init_remote(store: Arc<dyn ObjectStore>) {
    let chunker = ChunkerConfig::Fastcdc {
        min: 1024,
        avg: 4096,
        max: 16384,
    };
    init_blake3(store, chunker, 64 * 1024, false);
}

/// An error as the CLI would print it: one line, holding each of `words`.
pub fn assert_one_line(e: &tessera_core::Error, words: &[&str]) {
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "not one line: {msg}");
    for w in words {
        assert!(msg.contains(w), "{msg:?} lacks {w:?}");
    }
}
