//! Random access into a backup (what `tessera mount` reads through): a read
//! fetches exactly the data containers holding the bytes asked for, keeps
//! recently read ones, and gives the source's bytes, for directory backups
//! (hard links included), directory backups stored as tar streams by older
//! builds, and stream backups.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use tessera_core::backend::{CountingStore, KeyKind, MemoryStore, ObjectStore};
use tessera_core::catalog::{BackupEntry, SourceKind};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::restore::{BackupStream, StreamEntry};
use tessera_core::{BackupOptions, ContainerId, Repository};

use crate::common::{bytes, open_new};

/// Containers of 256 KiB, so each large file spans several.
const CONTAINER: u32 = 256 << 10;

fn source(root: &Path) {
    fs::create_dir_all(root.join("big")).unwrap();
    for i in 0..8u64 {
        fs::write(
            root.join(format!("big/f{i}")),
            bytes(i + 1, 500_000 + i as usize * 1000),
        )
        .unwrap();
    }
    fs::write(root.join("small.txt"), b"a small file\n").unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::hard_link(root.join("big/f3"), root.join("f3-again")).unwrap();
    std::os::unix::fs::symlink("small.txt", root.join("link")).unwrap();
}

fn repo(backend: Arc<dyn ObjectStore>) -> tessera_core::Writer {
    open_new(backend, ChunkerConfig::default(), CONTAINER, false)
}

/// The distinct data containers holding bytes `start..end` of `b`.
fn containers_of(r: &Repository, b: &BackupEntry, start: u64, end: u64) -> BTreeSet<ContainerId> {
    let mut at = 0;
    let mut out = BTreeSet::new();
    for (e, c) in r.chunk_homes(b).unwrap() {
        if at < end && at + e.size > start {
            out.insert(c);
        }
        at += e.size;
    }
    out
}

fn find<'a>(entries: &'a [StreamEntry], path: &str) -> &'a StreamEntry {
    entries
        .iter()
        .find(|e| e.listed.path == path)
        .unwrap_or_else(|| panic!("{path} not listed"))
}

/// Read a file as the mount does: 128 KiB requests at increasing offsets.
fn read_file(s: &mut BackupStream, (start, len): (u64, u64)) -> Vec<u8> {
    let mut out = Vec::new();
    while (out.len() as u64) < len {
        let want = (128 << 10).min(len - out.len() as u64) as usize;
        let got = s.read_at(start + out.len() as u64, want).unwrap();
        assert_eq!(got.len(), want);
        out.extend_from_slice(&got);
    }
    out
}

#[test]
fn reading_one_file_reads_only_its_containers() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    source(&src);
    let counting = Arc::new(CountingStore::new(MemoryStore::new()));
    let backend: Arc<dyn ObjectStore> = counting.clone();
    let mut w = repo(backend.clone());
    let opts = BackupOptions::new("src", SourceKind::Tree);
    let (report, _) = w.backup_tree(&opts, &src, &mut |_| {}).unwrap();
    w.close().unwrap();

    let r = Repository::open(backend).unwrap();
    let b = r.manifest().backup(report.backup.id).unwrap().clone();
    let all = containers_of(&r, &b, 0, b.logical_bytes);
    let mut s = BackupStream::open(&r, &b).unwrap();
    let entries = s.entries().unwrap();
    assert_eq!(entries.len(), 13, "{entries:#?}");

    let f5 = find(&entries, "big/f5").content.unwrap();
    assert_eq!(f5.1, 505_000);
    let want = containers_of(&r, &b, f5.0, f5.0 + f5.1);
    assert!(
        want.len() >= 2 && want.len() * 3 < all.len(),
        "{want:?} of {all:?}"
    );
    let before = r.metrics().snapshot();
    counting.reset();
    assert!(read_file(&mut s, f5) == bytes(6, 505_000));
    let read = r.metrics().snapshot().since(&before);
    assert_eq!(read.data_containers_read, want.len() as u64);
    // Every container fetched from the backend is one of those, or a
    // recipe container.
    assert_eq!(
        counting.counters_of(KeyKind::Container).gets,
        read.data_containers_read + read.recipe_containers_read
    );

    // Reading it again is served by the cache of recent containers.
    let before = r.metrics().snapshot();
    let tail = s.read_at(f5.0 + f5.1 - 1000, 1000).unwrap();
    assert!(tail == bytes(6, 505_000)[504_000..]);
    assert_eq!(
        r.metrics().snapshot().since(&before).data_containers_read,
        0
    );

    // Random access elsewhere, a hard link, small and empty files.
    let f2 = find(&entries, "big/f2").content.unwrap();
    let mid = s.read_at(f2.0 + 300_001, 70_000).unwrap();
    assert!(mid == bytes(3, 502_000)[300_001..370_001]);
    assert_eq!(
        find(&entries, "f3-again").content,
        find(&entries, "big/f3").content
    );
    let small = find(&entries, "small.txt").content.unwrap();
    assert_eq!(read_file(&mut s, small), b"a small file\n");
    assert_eq!(find(&entries, "empty").content.unwrap().1, 0);
    assert_eq!(find(&entries, "link").content, None);
    assert_eq!(
        find(&entries, "link").listed.link.as_deref(),
        Some("small.txt")
    );
    // Past the end: nothing; a range past the recipe: an error.
    assert!(s.read_at(b.logical_bytes, 10).unwrap().is_empty());
    assert!(s.read_range(0, b.logical_bytes + 1).is_err());
}

#[test]
fn tar_stream_and_stream_backups_are_read_in_place() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    source(&src);
    let backend: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let mut w = repo(backend.clone());
    // A directory backup as older builds stored it: its tar stream.
    let mut tar = Vec::new();
    tessera_core::archive::write_tree(&src, &mut tar, &mut |_| {}).unwrap();
    let opts = BackupOptions::new("legacy", SourceKind::Tree);
    let legacy = w.backup_reader(&opts, &mut &tar[..], &mut |_| {}).unwrap();
    let data = bytes(99, 700_000);
    let opts = BackupOptions::new("notes.bin", SourceKind::Stream);
    let stream = w.backup_reader(&opts, &mut &data[..], &mut |_| {}).unwrap();
    w.close().unwrap();
    let r = Repository::open(backend).unwrap();

    let b = r.manifest().backup(legacy.backup.id).unwrap().clone();
    assert_eq!(b.content_bytes, None, "stored as a tar stream");
    let mut s = BackupStream::open(&r, &b).unwrap();
    let entries = s.entries().unwrap();
    for i in 0..8u64 {
        let e = find(&entries, &format!("big/f{i}"));
        let content = e.content.unwrap();
        assert!(read_file(&mut s, content) == bytes(i + 1, 500_000 + i as usize * 1000));
    }
    assert_eq!(
        find(&entries, "f3-again").content,
        find(&entries, "big/f3").content
    );

    let b = r.manifest().backup(stream.backup.id).unwrap().clone();
    let mut s = BackupStream::open(&r, &b).unwrap();
    let entries = s.entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].listed.path, "notes.bin");
    assert_eq!(entries[0].content, Some((0, 700_000)));
    assert!(s.read_at(123_457, 99_999).unwrap() == data[123_457..223_456]);
}
