//! Parallel ingest (issue 17): the same backups give the same layout —
//! containers (their chunk tables and plain bytes; whole objects when not
//! encrypted), recipes and index — whatever the thread count, with and
//! without compression and encryption; and every backup restores byte for
//! byte.

use crate::common::{bytes, mem, mutate, restore};
use proptest::prelude::*;
use std::sync::Arc;
use tessera_core::backend::{list_all, MemoryStore, ObjectKey, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{
    BackupOptions, Compression, HashAlgo, InitOptions, KdfParams, Password, Repository,
    RestoreOptions, SealOptions, Writer,
};

const PW: &str = "parallel ingest";

/// Everything a backup decided, in comparable form.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    /// Per backup: name, root, root level, logical bytes, chunks, new bytes.
    backups: Vec<String>,
    /// The manifest's container list, in order.
    containers: Vec<String>,
    /// Per container: its chunk table, then each chunk's plain bytes.
    tables: Vec<String>,
    plain: Vec<Vec<u8>>,
    /// Whole container objects (unencrypted repositories only: nonces differ).
    objects: Vec<Vec<u8>>,
    /// Index entries, sorted.
    index: Vec<String>,
}

/// A new repository; every run of a comparison starts from a copy of the
/// same one, so an encrypted repository has the same master key (and so
/// the same keyed fingerprints) in each.
fn template(compression: Compression, encrypt: bool) -> Arc<MemoryStore> {
    let t = mem();
    init(t.clone(), compression, encrypt);
    t
}

fn copy_of(template: &MemoryStore) -> Arc<MemoryStore> {
    let copy = mem();
    for key in list_all(template).unwrap() {
        copy.put(&key, &template.get(&key).unwrap()).unwrap();
    }
    copy
}

fn init(backend: Arc<dyn ObjectStore>, compression: Compression, encrypt: bool) {
    let opts = InitOptions {
        hash: HashAlgo::Blake3,
        chunker: ChunkerConfig::Fastcdc {
            min: 1024,
            avg: 4096,
            max: 16384,
        },
        container_size: 64 << 10,
        trace: false,
        ..Default::default()
    };
    let seal = SealOptions {
        compression,
        encryption: encrypt.then(|| (Password::new(PW), KdfParams::INSECURE_FAST)),
        ..Default::default()
    };
    Repository::init_sealed(backend, &opts, &seal).unwrap();
}

fn writer(backend: Arc<dyn ObjectStore>, threads: usize) -> Writer {
    let mut w = Repository::open_writer_with(backend, "test", &|| Ok(Password::new(PW))).unwrap();
    w.set_threads(threads);
    w
}

fn layout(backend: Arc<dyn ObjectStore>, encrypted: bool) -> Layout {
    let repo = Repository::open_with(backend.clone(), &|| Ok(Password::new(PW))).unwrap();
    let m = repo.manifest();
    let backups = m
        .backups
        .iter()
        .map(|b| {
            format!(
                "{} {} {} {} {} {}",
                b.name, b.root, b.root_level, b.logical_bytes, b.chunks, b.new_bytes
            )
        })
        .collect();
    let containers = m.containers.iter().map(|c| format!("{c:?}")).collect();
    let mut tables = Vec::new();
    let mut plain = Vec::new();
    let mut objects = Vec::new();
    for c in &m.containers {
        let read = repo.store().read(c.id).unwrap();
        let h = &read.header;
        tables.push(format!(
            "{:?} {:?} {} {} {} {} {:?}",
            h.kind, h.id, h.chunk_count, h.data_len, h.logical_len, h.meta_len, read.meta
        ));
        for e in &read.meta {
            plain.push(read.bytes(e).to_vec());
        }
        if !encrypted {
            objects.push(backend.get(&ObjectKey::Container(c.id)).unwrap());
        }
    }
    let mut index: Vec<String> = repo
        .index()
        .unwrap()
        .entries()
        .map(|e| format!("{e:?}"))
        .collect();
    index.sort();
    Layout {
        backups,
        containers,
        tables,
        plain,
        objects,
        index,
    }
}

/// Back up each stream of `versions` in a new repository with `threads`
/// workers, check every backup restores exactly, and return the layout.
fn run(
    versions: &[Vec<u8>],
    threads: usize,
    template: &MemoryStore,
    encrypt: bool,
    rewrite: &RewriteSpec,
) -> Layout {
    let backend = copy_of(template);
    let mut w = writer(backend.clone(), threads);
    let mut ids = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let mut opts = BackupOptions::new(format!("v{i}"), SourceKind::Stream);
        opts.rewrite = *rewrite;
        let r = w.backup_reader(&opts, &mut &v[..], &mut |_| {}).unwrap();
        ids.push(r.backup.id);
    }
    drop(w);
    let mut repo = Repository::open_with(backend.clone(), &|| Ok(Password::new(PW))).unwrap();
    repo.set_threads(threads);
    for (id, v) in ids.iter().zip(versions) {
        assert!(restore(&repo, *id).unwrap() == *v, "backup {id} restores");
    }
    layout(backend, encrypt)
}

/// Text-like bytes (compressible) with a random run inside, so `auto`
/// both compresses and skips chunks.
fn mixed(seed: u64, len: usize) -> Vec<u8> {
    let words: [&[u8]; 5] = [b"walk ", b"read ", b"chunk ", b"hash ", b"seal "];
    let mut out = Vec::with_capacity(len);
    let mut x = seed | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 5) as usize]);
    }
    out.truncate(len);
    let r = bytes(seed, len / 3);
    out[len / 3..len / 3 + r.len()].copy_from_slice(&r);
    out
}

/// Versions larger than one ingest batch (4 MiB), with duplicates inside
/// a batch (a repeated run, zeros) and across versions.
fn versions() -> Vec<Vec<u8>> {
    let mut v0 = mixed(7, 5 << 20);
    let rep = v0[100_000..400_000].to_vec();
    v0.extend_from_slice(&rep);
    v0.extend_from_slice(&vec![0u8; 300_000]);
    let v1 = mutate(&v0, 11, 50_000);
    let v2 = mutate(&v1, 12, 5_000);
    vec![v0, v1, v2]
}

#[test]
fn layout_does_not_depend_on_thread_count() {
    let versions = versions();
    for (compression, encrypt) in [
        (Compression::Off, false),
        (Compression::Auto, false),
        (Compression::Auto, true),
        (Compression::Off, true),
    ] {
        let t = template(compression, encrypt);
        let one = run(&versions, 1, &t, encrypt, &RewriteSpec::None);
        assert!(one.containers.len() > 50, "many containers");
        for threads in [2, 4] {
            let many = run(&versions, threads, &t, encrypt, &RewriteSpec::None);
            assert!(
                one == many,
                "{threads} threads, compression {compression}, encrypted {encrypt}: layout differs"
            );
        }
    }
}

#[test]
fn layout_with_rewriting_does_not_depend_on_thread_count() {
    let versions = versions();
    let capping = RewriteSpec::Capping { level: 2 };
    let t = template(Compression::Auto, true);
    let one = run(&versions, 1, &t, true, &capping);
    let four = run(&versions, 4, &t, true, &capping);
    assert!(one == four, "rewriting: layout differs");
}

#[test]
fn restore_with_any_thread_count_is_exact() {
    let versions = versions();
    let backend = mem();
    init(backend.clone(), Compression::Auto, true);
    let mut w = writer(backend.clone(), 2);
    let opts = BackupOptions::new("s", SourceKind::Stream);
    let id = w
        .backup_reader(&opts, &mut &versions[0][..], &mut |_| {})
        .unwrap()
        .backup
        .id;
    drop(w);
    for threads in [1, 2, 3, 8] {
        let mut repo = Repository::open_with(backend.clone(), &|| Ok(Password::new(PW))).unwrap();
        repo.set_threads(threads);
        let b = repo.manifest().backup(id).unwrap().clone();
        let mut out = Vec::new();
        repo.restore_to(&b, &mut out, &RestoreOptions::default(), &mut |_| {})
            .unwrap();
        assert!(out == versions[0], "{threads} threads");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Small generated version series (one batch or a few): the layout
    /// with 1, 2 and 4 threads is the same, compressed and encrypted.
    #[test]
    fn generated_series_layout_is_thread_invariant(
        seeds in prop::collection::vec((any::<u64>(), 0usize..300_000, 0usize..20_000), 1..4),
        encrypt in any::<bool>(),
    ) {
        let mut versions: Vec<Vec<u8>> = Vec::new();
        for (seed, len, insert) in seeds {
            let v = match versions.last() {
                Some(prev) if seed % 3 != 0 => mutate(prev, seed, insert),
                _ => mixed(seed, len),
            };
            versions.push(v);
        }
        let t = template(Compression::Auto, encrypt);
        let one = run(&versions, 1, &t, encrypt, &RewriteSpec::None);
        for threads in [2, 4] {
            let many = run(&versions, threads, &t, encrypt, &RewriteSpec::None);
            prop_assert!(one == many, "{} threads: layout differs", threads);
        }
    }
}

/// A tree with many small files (duplicates and empty ones among them),
/// files larger than an ingest batch, and nested directories.
fn make_tree(root: &std::path::Path) {
    use std::fs;
    for d in 0..6 {
        let dir = root.join(format!("d{d}")).join(format!("sub{}", d % 3));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..60u64 {
            let seed = d * 1000 + f;
            let len = (seed as usize * 7919) % 30_000;
            let body = match f % 7 {
                0 => Vec::new(),
                1 => mixed(3, 12_000), // the same bytes in many files
                _ => mixed(seed, len),
            };
            fs::write(dir.join(format!("f{f}.txt")), body).unwrap();
        }
    }
    fs::write(root.join("big1"), mixed(1, 5 << 20)).unwrap();
    fs::write(root.join("big2"), bytes(2, (4 << 20) + 12_345)).unwrap();
    // Fixed times: nothing is racily clean for the files cache.
    for p in walk_files(root) {
        filetime::set_file_mtime(&p, filetime::FileTime::from_unix_time(1_600_000_000, 0)).unwrap();
    }
}

fn walk_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Directory backups (each file's contents cut by the workers) give the
/// same layout with 1, 2 and 4 threads, and so does the second backup,
/// which takes every file from the files cache; both restore exactly.
#[test]
fn tree_layout_does_not_depend_on_thread_count() {
    use tessera_core::ingest::FilesCacheOptions;
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    make_tree(&src);
    // Files changed (ctime) in the second a backup starts are re-read.
    let s = tessera_core::clock::now();
    while tessera_core::clock::now() == s {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let t = template(Compression::Auto, true);
    let mut layouts = Vec::new();
    for threads in [1, 2, 4] {
        let backend = copy_of(&t);
        let mut w = writer(backend.clone(), threads);
        w.set_files_cache(Some(FilesCacheOptions {
            dir: tmp.path().join(format!("cache{threads}")),
            force_read: false,
        }));
        let opts = BackupOptions::new("tree", SourceKind::Tree);
        let first = w.backup_tree(&opts, &src, &mut |_| {}).unwrap().0;
        let second = w.backup_tree(&opts, &src, &mut |_| {}).unwrap().0;
        assert_eq!(first.files_from_cache, 0);
        assert_eq!(second.files_from_cache, 362, "every file from the cache");
        drop(w);
        let mut repo = Repository::open_with(backend.clone(), &|| Ok(Password::new(PW))).unwrap();
        repo.set_threads(threads);
        for id in [first.backup.id, second.backup.id] {
            let b = repo.manifest().backup(id).unwrap().clone();
            let out = tmp.path().join(format!("out{threads}-{id}"));
            repo.restore_into(&b, &out, &RestoreOptions::default(), &mut |_| {})
                .unwrap();
            for p in walk_files(&src) {
                let rel = p.strip_prefix(&src).unwrap();
                assert!(
                    std::fs::read(&p).unwrap() == std::fs::read(out.join(rel)).unwrap(),
                    "{} restores exactly",
                    rel.display()
                );
            }
        }
        layouts.push(layout(backend, true));
    }
    assert!(layouts[0] == layouts[1], "2 threads: layout differs");
    assert!(layouts[0] == layouts[2], "4 threads: layout differs");
}
