//! Opening without the fingerprint index (issue 36): a handle opened
//! `IndexLoad::Lazy` answers from the manifest alone, loads the index the
//! first time something needs it, and then behaves as one that loaded it
//! while opening.

use std::sync::Arc;
use tessera_core::backend::{KeyKind, MemoryStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::gc::GcOptions;
use tessera_core::layout::LayoutKind;
use tessera_core::repo::IndexLoad;
use tessera_core::{
    BackupOptions, Error, HashAlgo, InitOptions, Password, Repository, RestoreOptions, Writer,
};

use crate::common::{self, backup, bytes, mem, restore};

fn no_password() -> tessera_core::Result<Password> {
    Err(Error::Key("not encrypted: no password asked".into()))
}

fn open_lazy(b: &Arc<MemoryStore>) -> Repository {
    Repository::open_loading(b.clone(), &no_password, IndexLoad::Lazy).unwrap()
}

fn writer(b: &Arc<MemoryStore>, load: IndexLoad) -> Writer {
    Repository::open_writer_loading(b.clone(), "test", &no_password, load).unwrap()
}

/// Overwrite every index segment with bytes no decoder accepts.
fn spoil_segments(b: &Arc<MemoryStore>) -> usize {
    let segments = b.list(KeyKind::IndexSegment).unwrap();
    for key in &segments {
        b.put(key, b"not an index segment").unwrap();
    }
    segments.len()
}

/// Two stream backups on a new repository of small containers.
fn two_backups(b: &Arc<MemoryStore>) -> (Vec<u8>, Vec<u8>) {
    let mut w = common::open_new(b.clone(), ChunkerConfig::default(), 64 * 1024, false);
    let v1 = bytes(1, 600 << 10);
    let v2 = common::mutate(&v1, 7, 4000);
    backup(&mut w, "a", &v1).unwrap();
    backup(&mut w, "a", &v2).unwrap();
    w.close().unwrap();
    (v1, v2)
}

#[test]
fn manifest_commands_never_read_the_index_segments() {
    let b = mem();
    let (_, v2) = two_backups(&b);
    assert!(spoil_segments(&b) >= 2);
    // What loads the index fails now, naming the segment.
    let e = Repository::open(b.clone())
        .err()
        .expect("a full open reads them");
    assert!(e.to_string().contains("index/"), "{e}");

    let r = open_lazy(&b);
    assert_eq!(r.backups().len(), 2);
    assert_eq!(r.resolve("latest").unwrap().logical_bytes, v2.len() as u64);
    let s = r.stats();
    assert_eq!((s.backups, s.logical_bytes > 0), (2, true));
    assert!(s.data_chunks > 0 && s.recipe_chunks > 0);
    assert!(s.index.is_none(), "stats did not load the index");
    assert!(!r.index_loaded());
    // A restore needs it: it fails with the segment's error, not a panic
    // and not "chunk not in the index".
    let e = restore(&r, r.resolve("latest").unwrap().id).unwrap_err();
    assert!(e.to_string().contains("index/"), "{e}");
    assert!(!r.index_loaded());

    // A lazy writer forgets without reading them either.
    let mut w = writer(&b, IndexLoad::Lazy);
    let first = w.backups()[0].id;
    let gone = w.forget(&[first]).unwrap();
    assert_eq!(gone.len(), 1);
    assert!(!w.index_loaded());
    w.close().unwrap();
    assert_eq!(open_lazy(&b).backups().len(), 1);
}

/// The figures of a repository that say whether two histories stored the
/// same things (ids, times and the repository id aside).
fn shape(r: &Repository) -> (usize, usize, u64, u64, u64, usize, (usize, usize)) {
    let s = r.stats();
    (
        s.backups,
        s.data_containers,
        s.stored_data_bytes,
        s.data_chunks,
        s.recipe_chunks,
        s.index_segments,
        r.index().unwrap().len(),
    )
}

#[test]
fn a_lazy_writer_backs_up_and_collects_as_a_loaded_one() {
    let mut shapes = Vec::new();
    for load in [IndexLoad::Now, IndexLoad::Lazy] {
        let b = mem();
        let (v1, v2) = two_backups(&b);
        let v3 = common::mutate(&v2, 11, 9000);
        let mut w = writer(&b, load);
        assert_eq!(w.index_loaded(), load == IndexLoad::Now);
        let first = w.backups()[0].id;
        w.forget(&[first]).unwrap();
        assert_eq!(w.index_loaded(), load == IndexLoad::Now);
        // The backup loads it (and deduplicates against it).
        let id3 = backup(&mut w, "a", &v3).unwrap();
        assert!(w.index_loaded());
        let report = w.gc(&GcOptions::default()).unwrap();
        assert!(report.reclaimed_containers > 0, "{report:?}");
        w.close().unwrap();

        let r = open_lazy(&b);
        let ids: Vec<_> = r.backups().iter().map(|e| e.id).collect();
        assert_eq!(restore(&r, ids[0]).unwrap(), v2);
        assert_eq!(restore(&r, id3).unwrap(), v3);
        assert!(r.index_loaded(), "the restore loaded it");
        assert!(r.check(&Default::default()).unwrap().ok());
        let _ = v1;
        shapes.push(shape(&r));
    }
    assert_eq!(shapes[0], shapes[1], "the same history stores the same");
}

#[test]
fn lazy_handles_of_the_mfdedup_layout_load_its_recipe_index() {
    let b = mem();
    Repository::init_layout(
        b.clone(),
        &InitOptions {
            hash: HashAlgo::Blake3,
            chunker: ChunkerConfig::default(),
            container_size: 64 * 1024,
            trace: false,
            ..Default::default()
        },
        LayoutKind::Mfdedup,
    )
    .unwrap();
    let v1 = bytes(3, 300 << 10);
    let v2 = common::mutate(&v1, 3, 2000);
    let mut w = writer(&b, IndexLoad::Lazy);
    for v in [&v1, &v2] {
        let opts = BackupOptions::new("c", SourceKind::Stream);
        w.backup_reader(&opts, &mut &v[..], &mut |_| {}).unwrap();
    }
    w.close().unwrap();
    let r = open_lazy(&b);
    assert_eq!(r.backups().len(), 2);
    assert!(!r.index_loaded());
    let last = r.resolve("latest").unwrap().clone();
    let mut out = Vec::new();
    r.restore_to(&last, &mut out, &RestoreOptions::default(), &mut |_| {})
        .unwrap();
    assert_eq!(out, v2);
    assert!(r.index_loaded());
}
