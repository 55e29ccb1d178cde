//! The restore pipeline (planner, container loaders, assembler) under
//! failure: a container read that fails at any point, or an output that
//! stops accepting bytes, ends the restore with an error, never a hang and
//! never wrong bytes; and FAA windows that need more reads than the
//! read-ahead allows still complete.

use crate::common;

use common::{bytes, repo_with_stream};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tessera_core::backend::{KeyKind, MemoryStore, ObjectKey, ObjectStore};
use tessera_core::catalog::BackupEntry;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::restore::CacheSpec;
use tessera_core::Result;
use tessera_core::{RestoreOptions, Writer};

/// A memory backend whose `n`-th container read (1-based, `get` or
/// `get_into`) fails, or (`garble_at`) hands back its bytes with the first
/// one flipped, as a read broken in transit; 0 never does. Counts
/// container reads.
struct FailingReads {
    inner: MemoryStore,
    fail_at: AtomicU64,
    garble_at: AtomicU64,
    reads: AtomicU64,
}

impl FailingReads {
    /// Whether this read's bytes are to be garbled.
    fn read(&self, key: &ObjectKey) -> Result<bool> {
        if key.kind() == Some(KeyKind::Container) {
            let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
            if n == self.fail_at.load(Ordering::SeqCst) {
                return Err(tessera_core::Error::io(
                    format!("cannot read {key}"),
                    std::io::Error::other("injected read failure"),
                ));
            }
            return Ok(n == self.garble_at.load(Ordering::SeqCst));
        }
        Ok(false)
    }
}

impl ObjectStore for FailingReads {
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        self.inner.put(key, data)
    }
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        let garble = self.read(key)?;
        let mut v = self.inner.get(key)?;
        if garble {
            v[0] ^= 0xff;
        }
        Ok(v)
    }
    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        let garble = self.read(key)?;
        self.inner.get_into(key, buf)?;
        if garble {
            buf[0] ^= 0xff;
        }
        Ok(())
    }
    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.inner.get_range(key, offset, len)
    }
    fn size(&self, key: &ObjectKey) -> Result<u64> {
        self.inner.size(key)
    }
    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        self.inner.list(kind)
    }
    fn delete(&self, key: &ObjectKey) -> Result<()> {
        self.inner.delete(key)
    }
    fn barrier(&self) -> Result<()> {
        self.inner.barrier()
    }
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        self.inner.put_if_absent(key, data)
    }
    fn location(&self) -> String {
        "failing reads".into()
    }
}

/// A stream of 4 KiB pieces, half of them copies of earlier ones, backed up
/// into 32 KiB containers: many containers, each referenced from far apart.
fn setup() -> (Arc<FailingReads>, Writer, BackupEntry, Vec<u8>) {
    let fresh = bytes(7, 1 << 20);
    let mut data = Vec::new();
    let mut x = 11u64;
    for i in 0..512usize {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let piece = if i > 0 && (x >> 33).is_multiple_of(2) {
            (x >> 40) as usize % i
        } else {
            i
        };
        let at = (piece % 256) * 4096;
        data.extend_from_slice(&fresh[at..at + 4096]);
    }
    let backend = Arc::new(FailingReads {
        inner: MemoryStore::new(),
        fail_at: AtomicU64::new(0),
        garble_at: AtomicU64::new(0),
        reads: AtomicU64::new(0),
    });
    let (repo, entry) = repo_with_stream(
        backend.clone(),
        ChunkerConfig::Fixed { size: 4096 },
        32 << 10,
        &data,
    );
    (backend, repo, entry, data)
}

fn opts(cache: &str) -> RestoreOptions {
    RestoreOptions {
        cache: CacheSpec::parse(cache).unwrap(),
        ..Default::default()
    }
}

const CACHES: [&str; 6] = ["lru:2", "lru:64", "opt:2", "opt:5", "faa:2", "faa:40"];

#[test]
fn every_cache_restores_exactly_with_reads_in_flight() {
    let (backend, repo, entry, data) = setup();
    for cache in CACHES {
        backend.reads.store(0, Ordering::SeqCst);
        let mut out = Vec::new();
        let r = repo
            .restore_to(&entry, &mut out, &opts(cache), &mut |_| {})
            .unwrap();
        assert!(out == data, "{cache}: restored bytes differ");
        // Containers are read exactly as often as the policy decided: the
        // loaders read nothing the assembler does not use.
        let recipe_reads = r.recipe_containers_read;
        assert_eq!(
            backend.reads.load(Ordering::SeqCst),
            r.data_containers_read + recipe_reads,
            "{cache}"
        );
    }
}

/// Under a memory ceiling below one container, every cache restores
/// exactly: containers the policy keeps are freed and read again when used
/// again, and each of those reads is counted (the backend sees exactly the
/// reads reported). A ceiling that holds the policy's containers reads
/// what the default does.
#[test]
fn a_ceiling_below_one_container_restores_exactly_and_counts_every_read() {
    let (backend, repo, entry, data) = setup();
    for cache in CACHES {
        let mut reads = Vec::new();
        for memory in [1, 100_000, 64 << 20] {
            backend.reads.store(0, Ordering::SeqCst);
            let mut out = Vec::new();
            let opts = RestoreOptions {
                memory,
                ..opts(cache)
            };
            let r = repo
                .restore_to(&entry, &mut out, &opts, &mut |_| {})
                .unwrap();
            assert!(
                out == data,
                "{cache} memory {memory}: restored bytes differ"
            );
            assert_eq!(
                backend.reads.load(Ordering::SeqCst),
                r.data_containers_read + r.recipe_containers_read,
                "{cache} memory {memory}"
            );
            reads.push(r.data_containers_read);
        }
        let default = repo
            .restore_to(&entry, &mut Vec::new(), &opts(cache), &mut |_| {})
            .unwrap();
        assert_eq!(reads[2], default.data_containers_read, "{cache}");
        assert!(
            reads[0] >= reads[2] && reads[1] >= reads[2],
            "{cache}: {reads:?}"
        );
        if cache == "lru:64" {
            // 64 containers of 32 KiB fit no 1-byte ceiling: some are read again.
            assert!(reads[0] > reads[2], "{cache}: {reads:?}");
        }
    }
}

#[test]
fn faa_window_needing_more_reads_than_the_read_ahead_completes() {
    // faa:40 is an area of 39 containers of 32 KiB; the stream's pieces
    // come from everywhere, so one window needs far more containers than
    // the 8 reads allowed ahead.
    let (_, repo, entry, data) = setup();
    let mut out = Vec::new();
    let r = repo
        .restore_to(&entry, &mut out, &opts("faa:40"), &mut |_| {})
        .unwrap();
    assert!(out == data);
    let containers = repo.stats().data_containers as u64;
    assert!(
        containers > 16 && r.data_containers_read >= containers,
        "{} containers, {} read",
        containers,
        r.data_containers_read
    );
}

#[test]
fn a_failed_container_read_anywhere_ends_the_restore_with_an_error() {
    let (backend, repo, entry, data) = setup();
    for cache in CACHES {
        backend.fail_at.store(0, Ordering::SeqCst);
        backend.reads.store(0, Ordering::SeqCst);
        repo.restore_to(&entry, &mut Vec::new(), &opts(cache), &mut |_| {})
            .unwrap();
        let total = backend.reads.load(Ordering::SeqCst);
        assert!(total > 4, "{cache}: {total} reads");
        for n in 1..=total {
            backend.reads.store(0, Ordering::SeqCst);
            backend.fail_at.store(n, Ordering::SeqCst);
            let mut out = Vec::new();
            let err = repo
                .restore_to(&entry, &mut out, &opts(cache), &mut |_| {})
                .expect_err("a read failed");
            let msg = err.to_string();
            assert!(
                msg.contains("injected read failure"),
                "{cache} at {n}: {msg}"
            );
            // What was written before the failure is the backup's start.
            assert!(out.len() < data.len(), "{cache} at {n}");
            assert!(out == data[..out.len()], "{cache} at {n}: wrong bytes");
        }
    }
}

/// A container read that comes back garbled anywhere in a restore is read
/// again, and the restore completes exactly (one read more).
#[test]
fn a_garbled_container_read_is_read_again() {
    let (backend, repo, entry, data) = setup();
    for cache in CACHES {
        backend.garble_at.store(0, Ordering::SeqCst);
        backend.reads.store(0, Ordering::SeqCst);
        repo.restore_to(&entry, &mut Vec::new(), &opts(cache), &mut |_| {})
            .unwrap();
        let total = backend.reads.load(Ordering::SeqCst);
        for n in 1..=total {
            backend.reads.store(0, Ordering::SeqCst);
            backend.garble_at.store(n, Ordering::SeqCst);
            let mut out = Vec::new();
            repo.restore_to(&entry, &mut out, &opts(cache), &mut |_| {})
                .unwrap_or_else(|e| panic!("{cache} at {n}: {e}"));
            assert!(out == data, "{cache} at {n}: wrong bytes");
            assert_eq!(
                backend.reads.load(Ordering::SeqCst),
                total + 1,
                "{cache} at {n}"
            );
        }
    }
    backend.garble_at.store(0, Ordering::SeqCst);
}

/// Accepts `left` bytes, then fails.
struct FailingWriter {
    left: usize,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::Error::other("disk full"));
        }
        let n = buf.len().min(self.left);
        self.left -= n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_output_that_fails_ends_the_restore_without_a_hang() {
    let (_, repo, entry, data) = setup();
    for cache in CACHES {
        for left in [0, 1, 4096 * 3 + 5, data.len() / 2, data.len() - 1] {
            let err = repo
                .restore_to(
                    &entry,
                    &mut FailingWriter { left },
                    &opts(cache),
                    &mut |_| {},
                )
                .expect_err("the output failed");
            assert!(
                err.to_string().contains("cannot write restored data"),
                "{cache} after {left}: {err}"
            );
        }
    }
}
