//! The in-memory index kept across openings (issue 36): an opening maps
//! the table an earlier one left, applies only the index segments listed
//! since, and rebuilds (never trusts) a table that is damaged, foreign or
//! stale; a GC or a compaction leaves the table of the generation it
//! publishes; concurrent openings never spoil each other's tables; and
//! every lookup through a kept table answers as a rebuild from the
//! segments does.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_core::backend::{KeyKind, LocalStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::ChunkKind;
use tessera_core::index::{sort_entries, DiskLoad, IndexEntry, IndexKind};
use tessera_core::layout::LayoutKind;
use tessera_core::repo::IndexLoad;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{BackupOptions, HashAlgo, InitOptions, Repository};

use crate::common::{backup, bytes, fp_n, mutate, restore};

/// A memory-index repository on a local store, its kept table removed
/// when dropped (it lives in the user's cache directory).
struct Repo {
    _tmp: tempfile::TempDir,
    store: Arc<dyn ObjectStore>,
    kept: PathBuf,
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.kept);
    }
}

impl Repo {
    fn new(trace: bool) -> Repo {
        let tmp = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> =
            Arc::new(LocalStore::create(&tmp.path().join("r")).unwrap());
        Repository::init_indexed(
            store.clone(),
            &InitOptions {
                hash: HashAlgo::Blake3,
                chunker: ChunkerConfig::Fastcdc {
                    min: 512,
                    avg: 2048,
                    max: 8192,
                },
                container_size: if trace { 5 * 1000 } else { 16 * 1024 },
                trace,
                ..Default::default()
            },
            LayoutKind::Containers,
            IndexKind::Memory,
        )
        .unwrap();
        let kept = Repository::open_reader(store.clone(), "test")
            .unwrap()
            .kept_index_dir()
            .expect("a memory index on a local store is kept");
        assert!(file_name(&kept).starts_with("table-"), "{kept:?}");
        Repo {
            _tmp: tmp,
            store,
            kept,
        }
    }

    fn backup(&self, data: &[u8]) {
        let mut w = Repository::open_writer(self.store.clone(), "test").unwrap();
        backup(&mut w, "a", data).unwrap();
        w.close().unwrap();
    }

    /// Open (loading the index): how it came by it, and its entries.
    fn open(&self) -> (DiskLoad, Vec<IndexEntry>) {
        let r = Repository::open(self.store.clone()).unwrap();
        let ix = r.index().unwrap();
        assert!(ix.disk_load().is_none(), "in memory");
        let mut entries: Vec<IndexEntry> = ix.entries().collect();
        sort_entries(&mut entries);
        (ix.kept_load().expect("kept").clone(), entries)
    }

    /// The entries of an index rebuilt from the segments alone.
    fn rebuilt_entries(&self) -> Vec<IndexEntry> {
        let _ = std::fs::remove_dir_all(&self.kept);
        let (load, entries) = self.open();
        assert!(load.rebuilt.is_some(), "{load:?}");
        entries
    }

    fn files(&self, prefix: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.kept)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| file_name(p).starts_with(prefix))
            .collect();
        v.sort();
        v
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn two_versions(r: &Repo) -> (Vec<u8>, Vec<u8>) {
    let v1 = bytes(1, 300 << 10);
    let v2 = mutate(&v1, 3, 5000);
    r.backup(&v1);
    r.backup(&v2);
    (v1, v2)
}

#[cfg(unix)]
fn inode(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().ino()
}

#[test]
#[cfg(unix)]
fn an_opening_reuses_the_table_it_left() {
    let r = Repo::new(false);
    let (_, v2) = two_versions(&r);
    let segments = r.store.list(KeyKind::IndexSegment).unwrap().len();
    assert!(segments >= 2);
    let (first, entries) = r.open();
    assert!(first.saved, "{first:?}");
    assert_eq!(first.kept_segments + first.applied_segments, segments);
    let state = r.kept.join("state");
    let files: Vec<PathBuf> = ["data", "recipe", "side"]
        .iter()
        .flat_map(|p| r.files(p))
        .collect();
    assert_eq!(files.len(), 3, "{files:?}");
    let inodes: Vec<u64> = files.iter().map(|p| inode(p)).collect();
    let state_inode = inode(&state);
    for _ in 0..3 {
        let (load, again) = r.open();
        assert_eq!(
            load,
            DiskLoad {
                kept_segments: segments,
                applied_segments: 0,
                rebuilt: None,
                saved: false,
            }
        );
        assert_eq!(again, entries);
    }
    // Nothing was rewritten: the same state and table files.
    assert_eq!(inode(&state), state_inode);
    assert_eq!(files.iter().map(|p| inode(p)).collect::<Vec<_>>(), inodes);
    assert_eq!(r.rebuilt_entries(), entries);
    // A restore and a backup through the reused table.
    let repo = Repository::open(r.store.clone()).unwrap();
    assert!(repo.index().unwrap().kept_load().unwrap().rebuilt.is_none());
    assert_eq!(restore(&repo, repo.backups()[1].id).unwrap(), v2);
    drop(repo);
    let mut w = Repository::open_writer(r.store.clone(), "test").unwrap();
    let stored = w.index().unwrap().len();
    let rep = {
        let opts = BackupOptions::new("a", SourceKind::Stream);
        w.backup_reader(&opts, &mut &v2[..], &mut |_| {}).unwrap()
    };
    assert_eq!(rep.new_chunks, 0, "all deduplicated through the table");
    assert_eq!(w.index().unwrap().len(), stored);
    w.close().unwrap();
}

#[test]
fn an_older_table_takes_only_the_new_segments() {
    let r = Repo::new(false);
    let (_, v2) = two_versions(&r);
    r.open();
    let (held, _) = r.open();
    let n = held.kept_segments;
    let data = r.files("data");
    // Two more versions; their writers open on the table and add a segment each.
    let v3 = mutate(&v2, 5, 7000);
    let v4 = mutate(&v3, 6, 7000);
    r.backup(&v3);
    r.backup(&v4);
    let (load, entries) = r.open();
    assert_eq!(load.rebuilt, None, "{load:?}");
    assert_eq!(load.kept_segments + load.applied_segments, n + 2);
    assert!(
        load.applied_segments >= 1 && load.applied_segments <= 2,
        "{load:?}"
    );
    // A version's segment is more than a 256th of this small table.
    assert!(load.saved, "{load:?}");
    assert_ne!(r.files("data"), data, "a new table file");
    assert_eq!(r.open().0.applied_segments, 0);
    assert_eq!(r.rebuilt_entries(), entries);
}

/// A lag of a few entries is applied on top of the kept table at each
/// opening instead of writing the table again.
#[test]
fn a_small_lag_is_applied_again_not_saved() {
    let r = Repo::new(false);
    // ~6,000 chunks: a small version stays under a 256th of them.
    r.backup(&bytes(1, 12 << 20));
    let (first, _) = r.open();
    let n = first.kept_segments + first.applied_segments;
    let state = std::fs::read(r.kept.join("state")).unwrap();
    r.backup(&bytes(2, 1000));
    let lagging = DiskLoad {
        kept_segments: n,
        applied_segments: 1,
        rebuilt: None,
        saved: false,
    };
    let mut entries = Vec::new();
    for _ in 0..2 {
        let (load, e) = r.open();
        assert_eq!(load, lagging);
        assert_eq!(std::fs::read(r.kept.join("state")).unwrap(), state);
        entries = e;
    }
    assert_eq!(r.rebuilt_entries(), entries);
}

/// Every kind of damage: the opening rebuilds, says why, and answers as a
/// rebuild does.
#[test]
fn a_damaged_or_foreign_table_is_rebuilt_never_trusted() {
    let r = Repo::new(false);
    two_versions(&r);
    let expected = r.rebuilt_entries();
    type Spoil = Box<dyn Fn(&Repo)>;
    let flip = |f: &Path, at: usize| {
        let mut b = std::fs::read(f).unwrap();
        b[at] ^= 0x40;
        std::fs::write(f, b).unwrap();
    };
    let damage: Vec<(&str, Spoil)> = vec![
        (
            "checksum",
            Box::new(move |r: &Repo| flip(&r.files("data")[0], 17)),
        ),
        (
            "checksum",
            // A slot: the table's probe structure.
            Box::new(move |r: &Repo| {
                let f = &r.files("data")[0];
                let len = std::fs::metadata(f).unwrap().len() as usize;
                flip(f, len - 3)
            }),
        ),
        (
            "bytes",
            Box::new(|r: &Repo| {
                let f = &r.files("recipe")[0];
                let b = std::fs::read(f).unwrap();
                std::fs::write(f, &b[..b.len() - 8]).unwrap();
            }),
        ),
        (
            "recipe-",
            Box::new(|r: &Repo| std::fs::remove_file(&r.files("recipe")[0]).unwrap()),
        ),
        (
            "side-",
            Box::new(|r: &Repo| std::fs::write(&r.files("side")[0], b"zero").unwrap()),
        ),
        (
            "damaged",
            Box::new(|r: &Repo| {
                let state = r.kept.join("state");
                let mut b = std::fs::read(&state).unwrap();
                let mid = b.len() / 2;
                b[mid] ^= 1;
                std::fs::write(&state, b).unwrap();
            }),
        ),
    ];
    for (why, spoil) in damage {
        let (load, _) = r.open();
        assert_eq!(load.rebuilt, None, "reused before spoiling ({why})");
        spoil(&r);
        let (load, entries) = r.open();
        let reason = load.rebuilt.clone().unwrap_or_default();
        assert!(reason.contains(why), "{why}: {load:?}");
        assert!(load.saved, "{load:?}");
        assert_eq!(entries, expected, "{why}");
        assert_eq!(r.open().0.rebuilt, None, "the rebuilt table is reused");
    }
    // Another repository's table in this one's place (a cache copied over).
    let other = Repo::new(false);
    two_versions(&other);
    other.open();
    let _ = std::fs::remove_dir_all(&r.kept);
    copy_dir(&other.kept, &r.kept);
    let (load, entries) = r.open();
    assert!(
        load.rebuilt
            .as_ref()
            .unwrap()
            .contains("kept for repository"),
        "{load:?}"
    );
    assert_eq!(entries, expected);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
    }
}

fn forget_oldest_and_gc(r: &Repo) {
    let mut w = Repository::open_writer(r.store.clone(), "test").unwrap();
    let first = w.backups()[0].id;
    w.forget(&[first]).unwrap();
    let gc = tessera_core::gc::GcOptions {
        liveness_threshold: 1.0,
        ..Default::default()
    };
    let report = w.gc(&gc).unwrap();
    assert!(report.reclaimed_containers > 0, "{report:?}");
    w.close().unwrap();
}

/// Every lookup of a fresh opening answers as `expected` (a rebuild's
/// entries) says; fingerprints of `gone` not among them are absent.
fn assert_lookups_exact(r: &Repo, expected: &[IndexEntry], gone: &[IndexEntry]) {
    let repo = Repository::open(r.store.clone()).unwrap();
    let ix = repo.index().unwrap();
    assert!(ix.kept_load().unwrap().rebuilt.is_none());
    for e in expected {
        assert_eq!(
            ix.get_copy(e.kind, &e.fp, e.copy),
            Some(e.container),
            "{e:?}"
        );
    }
    for e in gone {
        if !expected.iter().any(|x| x.kind == e.kind && x.fp == e.fp) {
            assert!(!ix.contains(e.kind, &e.fp), "{e:?} was collected");
        }
    }
}

/// A GC writes the index anew and removes containers: the process that
/// ran it keeps the table of the generation it published, so the first
/// opening after it maps that table instead of building one.
#[test]
fn a_gc_leaves_the_table_of_the_generation_it_publishes() {
    let r = Repo::new(false);
    let (_, v2) = two_versions(&r);
    let (_, before) = r.open();
    forget_oldest_and_gc(&r);
    let segments = r.store.list(KeyKind::IndexSegment).unwrap().len();
    let (load, entries) = r.open();
    assert_eq!(
        load,
        DiskLoad {
            kept_segments: segments,
            applied_segments: 0,
            rebuilt: None,
            saved: false,
        }
    );
    let gone: Vec<IndexEntry> = before
        .iter()
        .filter(|e| !entries.contains(e))
        .copied()
        .collect();
    assert!(!gone.is_empty(), "the GC dropped entries");
    assert_lookups_exact(&r, &entries, &gone);
    let v3 = mutate(&v2, 4, 6000);
    r.backup(&v3);
    let (load, entries) = r.open();
    assert_eq!(load.rebuilt, None, "{load:?}");
    let rebuilt = r.rebuilt_entries();
    assert_eq!(entries, rebuilt);
    let repo = Repository::open(r.store.clone()).unwrap();
    assert_eq!(restore(&repo, repo.backups()[0].id).unwrap(), v2);
    assert_eq!(restore(&repo, repo.backups()[1].id).unwrap(), v3);
}

/// A GC that loads the index knowing it replaces it: opened with
/// `IndexLoad::Replaced` (as `tessera gc` is) or lazily (`Writer::gc`
/// loads it so); it collects garbage and closes. Returns how the GC's
/// handle came by its index.
fn replacing_forget_oldest_and_gc(r: &Repo, load: IndexLoad) -> DiskLoad {
    let mut w =
        Repository::open_writer_loading(r.store.clone(), "test", &|| unreachable!(), load).unwrap();
    let first = w.backups()[0].id;
    w.forget(&[first]).unwrap();
    assert_eq!(w.index_loaded(), load != IndexLoad::Lazy);
    let gc = tessera_core::gc::GcOptions {
        liveness_threshold: 1.0,
        ..Default::default()
    };
    let report = w.gc(&gc).unwrap();
    assert!(report.reclaimed_containers > 0, "{report:?}");
    let load = w.index().unwrap().kept_load().expect("kept").clone();
    w.close().unwrap();
    load
}

/// A GC replaces the whole index: loading it, it keeps no table even when
/// it had to build one (the table of the generation it publishes is kept
/// after the publish, once), and the next opening maps that table.
#[test]
fn a_gc_keeps_its_table_after_the_publish_not_at_its_opening() {
    let r = Repo::new(false);
    let (_, v2) = two_versions(&r);
    r.open();
    // The table is there but cannot be used: a GC's opening rebuilds.
    for f in r.files("data") {
        std::fs::remove_file(f).unwrap();
    }
    let load = replacing_forget_oldest_and_gc(&r, IndexLoad::Lazy);
    assert!(load.rebuilt.is_some(), "{load:?}");
    assert!(!load.saved, "the GC's opening kept a table: {load:?}");
    // Exactly one table, the GC's generation's: nothing half-written.
    for prefix in ["data", "recipe", "side"] {
        assert_eq!(r.files(prefix).len(), 1, "{prefix}");
    }
    let segments = r.store.list(KeyKind::IndexSegment).unwrap().len();
    let (load, entries) = r.open();
    assert_eq!(
        load,
        DiskLoad {
            kept_segments: segments,
            applied_segments: 0,
            rebuilt: None,
            saved: false,
        }
    );
    assert_eq!(r.rebuilt_entries(), entries);
    assert_lookups_exact(&r, &entries, &[]);
    let repo = Repository::open(r.store.clone()).unwrap();
    assert_eq!(restore(&repo, repo.backups()[0].id).unwrap(), v2);
}

/// Where no table is kept (the first command here, or a cleared cache), a
/// GC keeps none either: no table files at all, and the next opening
/// builds and keeps one, then the one after maps it.
#[test]
fn a_gc_where_no_table_is_kept_leaves_none() {
    let r = Repo::new(false);
    let (_, v2) = two_versions(&r);
    let _ = std::fs::remove_dir_all(&r.kept);
    let load = replacing_forget_oldest_and_gc(&r, IndexLoad::Replaced);
    assert!(load.rebuilt.is_some() && !load.saved, "{load:?}");
    let left: Vec<PathBuf> = std::fs::read_dir(&r.kept)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.iter().all(|p| file_name(p) == "save.lock"), "{left:?}");
    let (first, entries) = r.open();
    assert!(first.rebuilt.is_some() && first.saved, "{first:?}");
    let (again, same) = r.open();
    assert_eq!(again.rebuilt, None, "{again:?}");
    assert_eq!(same, entries);
    assert_eq!(r.rebuilt_entries(), entries);
    let repo = Repository::open(r.store.clone()).unwrap();
    assert_eq!(restore(&repo, repo.backups()[0].id).unwrap(), v2);
}

/// A table older than a GC (run where it was not kept) names removed
/// containers and replaced segments: rebuilt, never trusted.
#[test]
fn a_table_older_than_a_gc_is_rebuilt() {
    let r = Repo::new(false);
    let (_, v2) = two_versions(&r);
    r.open();
    let old = r.kept.with_extension("old");
    copy_dir(&r.kept, &old);
    forget_oldest_and_gc(&r);
    let _ = std::fs::remove_dir_all(&r.kept);
    copy_dir(&old, &r.kept);
    std::fs::remove_dir_all(&old).unwrap();
    let (load, entries) = r.open();
    let reason = load.rebuilt.clone().unwrap_or_default();
    assert!(
        reason.contains("removed") || reason.contains("replaced"),
        "{load:?}"
    );
    assert_eq!(r.open().0.rebuilt, None);
    assert_eq!(r.rebuilt_entries(), entries);
    let repo = Repository::open(r.store.clone()).unwrap();
    assert_eq!(restore(&repo, repo.backups()[0].id).unwrap(), v2);
}

/// A backup whose publish compacts the segments keeps the table of that
/// generation.
#[test]
fn a_compaction_leaves_the_table_of_its_generation() {
    let r = Repo::new(false);
    let mut data = bytes(3, 64 << 10);
    let mut compacted = false;
    for i in 0..tessera_core::repo::MAX_SEGMENTS as u64 + 2 {
        data = mutate(&data, 10 + i, 3000);
        r.backup(&data);
        let segments = r.store.list(KeyKind::IndexSegment).unwrap().len();
        if segments == 1 && i > 0 {
            let (load, entries) = r.open();
            assert_eq!(load.rebuilt, None, "backup {i}: {load:?}");
            compacted = true;
            assert_eq!(load.applied_segments, 0, "backup {i}: {load:?}");
            assert_eq!(r.rebuilt_entries(), entries);
            assert_lookups_exact(&r, &entries, &[]);
        }
    }
    assert!(compacted, "the segments were compacted");
}

/// Openings at once, as threads of one process and as other processes
/// (each with its own table and save): every one answers as a rebuild,
/// and the table left is whole.
#[test]
fn openings_at_once_do_not_spoil_each_others_tables() {
    let r = Repo::new(false);
    let (_, v2) = two_versions(&r);
    let expected = r.rebuilt_entries();
    let v3 = mutate(&v2, 9, 9000);
    for round in 0..3 {
        if round == 1 {
            let _ = std::fs::remove_dir_all(&r.kept);
        }
        if round == 2 {
            r.backup(&v3);
        }
        let want = if round == 2 {
            r.open().1
        } else {
            expected.clone()
        };
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| r.open())).collect();
            for h in hs {
                let (_, entries) = h.join().unwrap();
                assert_eq!(entries, want, "round {round}");
            }
        });
        let (load, entries) = r.open();
        assert_eq!(load.rebuilt, None, "round {round}: {load:?}");
        assert_eq!(entries, want);
    }
}

/// One step of the property test's history.
#[derive(Clone, Debug)]
enum Step {
    /// A trace backup of these chunk numbers, rewriting (Capping) or not.
    Backup(Vec<u64>, bool),
    /// Forget the oldest backup and collect everything dead.
    ForgetOldestAndGc,
    /// Drop the kept table (another host's cache, or a cleaned one).
    DropKept,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop::collection::vec(0u64..120, 1..40), any::<bool>())
            .prop_map(|(c, rw)| Step::Backup(c, rw)),
        1 => Just(Step::ForgetOldestAndGc),
        1 => Just(Step::DropKept),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// After any history of backups (rewriting ones store copies), GCs
    /// and lost tables, the index looked up through the kept table is the
    /// index rebuilt from the segments: the same entries, and the same
    /// answer to every lookup of every chunk ever stored.
    #[test]
    fn the_kept_table_answers_as_the_segments(steps in prop::collection::vec(step(), 1..8)) {
        let r = Repo::new(true);
        for s in &steps {
            match s {
                Step::Backup(chunks, rewrite) => {
                    let mut w = Repository::open_writer(r.store.clone(), "test").unwrap();
                    let opts = BackupOptions {
                        rewrite: if *rewrite { RewriteSpec::Capping { level: 1 } } else { RewriteSpec::None },
                        ..BackupOptions::new("t", SourceKind::Trace)
                    };
                    w.backup_trace(&opts, chunks.iter().map(|&n| Ok((fp_n(n), 1000)))).unwrap();
                    w.close().unwrap();
                }
                Step::ForgetOldestAndGc => {
                    let mut w = Repository::open_writer(r.store.clone(), "test").unwrap();
                    if let Some(first) = w.backups().first().map(|b| b.id) {
                        w.forget(&[first]).unwrap();
                        let gc = tessera_core::gc::GcOptions { liveness_threshold: 1.0, ..Default::default() };
                        w.gc(&gc).unwrap();
                    }
                    w.close().unwrap();
                }
                Step::DropKept => {
                    let _ = std::fs::remove_dir_all(&r.kept);
                }
            }
            let kept = Repository::open(r.store.clone()).unwrap();
            let kix = kept.index().unwrap();
            let mut got: Vec<IndexEntry> = kix.entries().collect();
            sort_entries(&mut got);
            // A rebuild in a scratch index directory: the kept table stays.
            let _ = std::fs::rename(&r.kept, r.kept.with_extension("aside"));
            let fresh = Repository::open(r.store.clone()).unwrap();
            let fix = fresh.index().unwrap();
            prop_assert!(fix.kept_load().unwrap().rebuilt.is_some());
            let mut want: Vec<IndexEntry> = fix.entries().collect();
            sort_entries(&mut want);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(kix.len(), fix.len());
            for n in 0..120 {
                let f = fp_n(n);
                prop_assert_eq!(kix.get(ChunkKind::Data, &f), fix.get(ChunkKind::Data, &f));
                prop_assert_eq!(kix.newest_copy(&f), fix.newest_copy(&f));
                for copy in 0..3 {
                    prop_assert_eq!(
                        kix.get_copy(ChunkKind::Data, &f, copy),
                        fix.get_copy(ChunkKind::Data, &f, copy)
                    );
                }
            }
            for e in want.iter().filter(|e| e.kind == ChunkKind::Recipe) {
                prop_assert_eq!(kix.get(ChunkKind::Recipe, &e.fp), Some(e.container));
            }
            drop((kept, fresh));
            let _ = std::fs::remove_dir_all(&r.kept);
            let _ = std::fs::rename(r.kept.with_extension("aside"), &r.kept);
        }
    }
}
