//! The on-disk index kept across openings (issue 36): an opening reuses
//! the run set an earlier one left, applies only the index segments listed
//! since, and rebuilds (never trusts) a set that is damaged, foreign or
//! stale; concurrent openings never spoil each other's sets.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_core::backend::{KeyKind, LocalStore, ObjectStore};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::index::runset::Lag;
use tessera_core::index::{sort_entries, DiskLoad, IndexEntry, IndexKind};
use tessera_core::layout::LayoutKind;
use tessera_core::{HashAlgo, InitOptions, Repository};

use crate::common::{backup, bytes, mutate, restore};

/// A disk-index repository on a local store, its kept run set removed
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
    fn new() -> Repo {
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
                container_size: 16 * 1024,
                trace: false,
                ..Default::default()
            },
            LayoutKind::Containers,
            IndexKind::Disk,
        )
        .unwrap();
        let kept = Repository::open_reader(store.clone(), "test")
            .unwrap()
            .kept_index_dir()
            .expect("a disk index on a local store is kept");
        Repo {
            _tmp: tmp,
            store,
            kept,
        }
    }

    /// Back up `data` as a new version of "a".
    fn backup(&self, data: &[u8]) {
        let mut w = Repository::open_writer(self.store.clone(), "test").unwrap();
        backup(&mut w, "a", data).unwrap();
        w.close().unwrap();
    }

    /// Open (loading the index): how it came by it, and its entries.
    fn open(&self) -> (DiskLoad, Vec<IndexEntry>) {
        let r = Repository::open(self.store.clone()).unwrap();
        let ix = r.index().unwrap();
        let mut entries: Vec<IndexEntry> = ix.entries().collect();
        sort_entries(&mut entries);
        (ix.disk_load().expect("on disk").clone(), entries)
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

/// Two versions backed up.
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
fn an_opening_reuses_the_runs_it_left() {
    let r = Repo::new();
    let (_, v2) = two_versions(&r);
    let segments = r.store.list(KeyKind::IndexSegment).unwrap().len();
    assert!(segments >= 2);
    // The writers kept the set as of their openings: the first read
    // applies what they added since, and keeps that.
    let (first, entries) = r.open();
    assert!(first.saved, "{first:?}");
    assert_eq!(first.kept_segments + first.applied_segments, segments);
    let state = r.kept.join("state");
    let before = (inode(&state), r.files("run"));
    let runs: Vec<u64> = before.1.iter().map(|p| inode(p)).collect();
    assert!(!runs.is_empty());
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
    // Nothing was rewritten: the same state file and run files.
    assert_eq!(inode(&state), before.0);
    assert_eq!(r.files("run"), before.1);
    assert_eq!(
        r.files("run").iter().map(|p| inode(p)).collect::<Vec<_>>(),
        runs
    );
    assert_eq!(r.rebuilt_entries(), entries);
    // A restore through the reused index reads the right chunks.
    let repo = Repository::open(r.store.clone()).unwrap();
    assert!(repo.index().unwrap().disk_load().unwrap().rebuilt.is_none());
    assert_eq!(restore(&repo, repo.backups()[1].id).unwrap(), v2);
}

#[test]
fn an_older_run_set_takes_only_the_new_segments() {
    let r = Repo::new();
    let (_, v2) = two_versions(&r);
    let (_, _) = r.open();
    let (held, _) = r.open();
    let n = held.kept_segments;
    // Two more versions from "another host" (a writer that saves nothing
    // it did not load: the set stays at its opening's generation).
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
    assert!(load.saved);
    assert_eq!(r.open().0.applied_segments, 0);
    assert_eq!(r.rebuilt_entries(), entries);
}

/// A lag of a few entries (a one-chunk backup's segment) is applied on top
/// of the kept set at each opening instead of rewriting the set; once the
/// lag reaches `Lag::MAX_SEGMENTS` segments the set is saved again. The
/// answers are a rebuild's either way, and the stored chunk backed up
/// again stores nothing new.
#[test]
fn a_small_lag_is_applied_again_not_saved() {
    let r = Repo::new();
    // ~6,000 chunks: 16 small versions stay under a 64th of them.
    let v1 = bytes(1, 12 << 20);
    r.backup(&v1);
    let (first, _) = r.open();
    assert!(first.saved, "{first:?}");
    let n = first.kept_segments + first.applied_segments;
    let state = r.kept.join("state");
    let kept = std::fs::read(&state).unwrap();
    // A small version: a new chunk or two.
    r.backup(&bytes(2, 1000));
    let lagging = DiskLoad {
        kept_segments: n,
        applied_segments: 1,
        rebuilt: None,
        saved: false,
    };
    for _ in 0..2 {
        assert_eq!(r.open().0, lagging);
        assert_eq!(std::fs::read(&state).unwrap(), kept, "set rewritten");
    }
    // Data already stored adds no index entry, so no segment: the lag
    // stays as it was.
    let segments = r.store.list(KeyKind::IndexSegment).unwrap().len();
    r.backup(&v1);
    assert_eq!(r.store.list(KeyKind::IndexSegment).unwrap().len(), segments);
    assert_eq!(r.open().0, lagging);
    // Small versions up to the segment bound: then the set is saved.
    for i in 1..Lag::MAX_SEGMENTS {
        r.backup(&bytes(10 + i as u64, 1000));
    }
    let (load, entries) = r.open();
    assert_eq!(
        load,
        DiskLoad {
            kept_segments: n,
            applied_segments: Lag::MAX_SEGMENTS,
            rebuilt: None,
            saved: true,
        }
    );
    assert_ne!(std::fs::read(&state).unwrap(), kept);
    assert_eq!(r.open().0.applied_segments, 0);
    assert_eq!(r.rebuilt_entries(), entries);
}

/// Every kind of damage to the set: the opening rebuilds, says why, and
/// answers as a rebuild does.
#[test]
fn a_damaged_or_foreign_run_set_is_rebuilt_never_trusted() {
    let r = Repo::new();
    two_versions(&r);
    let expected = r.rebuilt_entries();
    type Spoil = Box<dyn Fn(&Repo)>;
    let damage: Vec<(&str, Spoil)> = vec![
        (
            // A run's meta file (its fences and block sums): checked whole.
            "checksum",
            Box::new(|r: &Repo| {
                let meta = &r.files("meta-run-")[0];
                let mut b = std::fs::read(meta).unwrap();
                let n = b.len();
                b[n - 3] ^= 0x40;
                std::fs::write(meta, b).unwrap();
            }),
        ),
        (
            // A truncated run: its length is checked at every opening.
            "bytes",
            Box::new(|r: &Repo| {
                let run = &r.files("run-")[0];
                let b = std::fs::read(run).unwrap();
                std::fs::write(run, &b[..b.len() - 40]).unwrap();
            }),
        ),
        (
            // A truncated container-list file.
            "bytes",
            Box::new(|r: &Repo| {
                let lists = &r.files("lists-")[0];
                let b = std::fs::read(lists).unwrap();
                std::fs::write(lists, &b[..b.len() - 32]).unwrap();
            }),
        ),
        (
            // A truncated recipe-chunk file: its length is checked too.
            "bytes",
            Box::new(|r: &Repo| {
                let f = &r.files("recipes-")[0];
                let b = std::fs::read(f).unwrap();
                std::fs::write(f, &b[..b.len() - 40]).unwrap();
            }),
        ),
        (
            // The summary vector's piece sums.
            "piece sums",
            Box::new(|r: &Repo| {
                let bloom = &r.files("bloom-")[0];
                let mut b = std::fs::read(bloom).unwrap();
                let n = b.len();
                b[n - 1] ^= 1;
                std::fs::write(bloom, b).unwrap();
            }),
        ),
        (
            "lists-",
            Box::new(|r: &Repo| std::fs::remove_file(&r.files("lists")[0]).unwrap()),
        ),
        (
            "bloom-",
            Box::new(|r: &Repo| std::fs::write(&r.files("bloom-")[0], b"zero").unwrap()),
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
        assert_eq!(
            r.open().0.rebuilt,
            None,
            "the rebuilt set is reused ({why})"
        );
    }
    // Another repository's set in this one's place (a cache copied over).
    let other = Repo::new();
    two_versions(&other);
    other.open();
    let _ = std::fs::remove_dir_all(&r.kept);
    std::fs::create_dir_all(&r.kept).unwrap();
    for f in std::fs::read_dir(&other.kept).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, r.kept.join(f.file_name().unwrap())).unwrap();
    }
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

/// A run record's container flipped on disk after the set was kept: the
/// opening does not read it (its cost must not grow with the index), but
/// the first lookup touching its block verifies the block and fails
/// loudly instead of answering; the set's state is removed, so the next
/// opening rebuilds and answers exactly. Blocks of other files answer.
#[test]
fn a_flipped_byte_a_lookup_touches_fails_loudly_never_answers() {
    use tessera_core::container::ChunkKind;
    use tessera_core::Fingerprint;
    let r = Repo::new();
    two_versions(&r);
    let expected = r.rebuilt_entries();
    let largest = r
        .files("run-")
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut b = std::fs::read(&largest).unwrap();
    let i = b.len() / 40 / 2;
    let fp = Fingerprint(b[i * 40..i * 40 + 32].try_into().unwrap());
    let right = expected
        .iter()
        .find(|e| e.kind == ChunkKind::Data && e.fp == fp && e.copy == 0)
        .expect("a live data entry")
        .container;
    b[i * 40 + 32] ^= 1;
    std::fs::write(&largest, &b).unwrap();

    let repo = Repository::open(r.store.clone()).unwrap();
    let ix = repo.index().unwrap();
    assert_eq!(ix.disk_load().unwrap().rebuilt, None, "not read at opening");
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ix.get_copy(ChunkKind::Data, &fp, 0)
    }));
    let Err(e) = answer else {
        panic!("answered {answer:?} from a damaged block (right: {right:?})");
    };
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("damaged") && msg.contains("checksum mismatch"),
        "{msg}"
    );
    drop(repo);
    assert_rebuilds_exactly(&r, &expected);
}

/// The recipe chunks are kept in a sorted file searched in place, not
/// decoded at each opening: every recipe lookup of a fresh opening answers
/// as a rebuild does; a flipped byte in that file fails the lookup that
/// touches its block loudly (the state removed), and the next opening
/// rebuilds and answers exactly.
#[test]
fn recipe_chunks_are_searched_in_their_kept_file_and_checked_on_touch() {
    use tessera_core::container::ChunkKind;
    use tessera_core::Fingerprint;
    let r = Repo::new();
    two_versions(&r);
    let expected = r.rebuilt_entries();
    let recipes: Vec<&IndexEntry> = expected
        .iter()
        .filter(|e| e.kind == ChunkKind::Recipe)
        .collect();
    assert!(!recipes.is_empty());
    let file = r.files("recipes-");
    assert_eq!(file.len(), 1, "{file:?}");
    let mut b = std::fs::read(&file[0]).unwrap();
    assert_eq!(b.len(), recipes.len() * 40, "one record per recipe chunk");
    let (load, entries) = r.open();
    assert_eq!(load.rebuilt, None);
    assert_eq!(entries, expected);
    assert_lookups_exact(&r, &expected, &[]);

    let fp = Fingerprint(b[..32].try_into().unwrap());
    b[32] ^= 1;
    std::fs::write(&file[0], &b).unwrap();
    let repo = Repository::open(r.store.clone()).unwrap();
    let ix = repo.index().unwrap();
    assert_eq!(ix.disk_load().unwrap().rebuilt, None, "not read at opening");
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ix.get(ChunkKind::Recipe, &fp)
    }));
    let Err(e) = answer else {
        panic!("answered {answer:?} from a damaged block");
    };
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("checksum mismatch"), "{msg}");
    drop(repo);
    assert_rebuilds_exactly(&r, &expected);
}

/// A summary vector from an earlier save put in place of the current one
/// (stale: it lacks the keys added since) is found at the opening and
/// rebuilt, never used; and filters kept piece by piece over several saves
/// hold every key (a fresh opening answers as a rebuild).
#[test]
fn a_stale_summary_vector_is_rebuilt_and_saves_keep_every_key() {
    let r = Repo::new();
    let (_, v2) = two_versions(&r);
    let (_, _) = r.open();
    let old: Vec<Vec<u8>> = r
        .files("bloom-")
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let mut data = v2;
    for i in 0..3 {
        data = mutate(&data, 20 + i, 6000);
        r.backup(&data);
        let (load, entries) = r.open();
        assert!(load.saved && load.rebuilt.is_none(), "{load:?}");
        let rebuilt = r.rebuilt_entries();
        assert_eq!(entries, rebuilt);
        assert_lookups_exact(&r, &rebuilt, &[]);
    }
    let expected = r.rebuilt_entries();
    let current = r.files("bloom-");
    let target = current
        .iter()
        .find(|p| !old.contains(&std::fs::read(p).unwrap()))
        .expect("a piece file written since");
    std::fs::write(target, &old[0]).unwrap();
    let (load, entries) = r.open();
    let reason = load.rebuilt.clone().unwrap_or_default();
    assert!(reason.contains("bloom-"), "{load:?}");
    assert_eq!(entries, expected);
    assert_lookups_exact(&r, &expected, &[]);
}

/// Forget the oldest backup and collect everything dead (containers
/// removed, the index written anew as one segment).
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

/// Every look-up of a fresh opening answers as `expected` (a rebuild's
/// entries) says, and fingerprints `gone` are absent.
/// After a lookup met a damaged block: the set's state is removed, and
/// the next opening rebuilds and answers exactly.
fn assert_rebuilds_exactly(r: &Repo, expected: &[IndexEntry]) {
    assert!(!r.kept.join("state").exists(), "the state is removed");
    let (load, entries) = r.open();
    assert!(load.rebuilt.is_some(), "{load:?}");
    assert_eq!(entries, expected);
    assert_lookups_exact(r, expected, &[]);
}

fn assert_lookups_exact(r: &Repo, expected: &[IndexEntry], gone: &[IndexEntry]) {
    let repo = Repository::open(r.store.clone()).unwrap();
    let ix = repo.index().unwrap();
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

/// A GC writes the index anew (one segment replacing all others) and
/// removes containers: the process that ran it keeps the run set of the
/// generation it published, so the next opening reuses it (no rebuild) and
/// answers exactly as a rebuild does.
#[test]
fn a_gc_leaves_the_run_set_of_the_generation_it_publishes() {
    let r = Repo::new();
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
    // A backup after the GC: its opening applies only its own segment.
    let v3 = mutate(&v2, 4, 6000);
    r.backup(&v3);
    let (load, entries) = r.open();
    assert_eq!(load.rebuilt, None, "{load:?}");
    assert!(load.applied_segments <= 1, "{load:?}");
    let rebuilt = r.rebuilt_entries();
    assert_eq!(entries, rebuilt);
    assert_lookups_exact(&r, &rebuilt, &gone);
    let repo = Repository::open(r.store.clone()).unwrap();
    assert_eq!(restore(&repo, repo.backups()[0].id).unwrap(), v2);
    assert_eq!(restore(&repo, repo.backups()[1].id).unwrap(), v3);
}

/// A run set older than a GC (the GC ran where this set was not kept: on
/// another host, or before the set was put back) names removed containers
/// and replaced segments: the next opening rebuilds it, never trusts it.
#[test]
fn a_run_set_older_than_a_gc_is_rebuilt() {
    let r = Repo::new();
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
    assert!(load.saved, "{load:?}");
    assert_eq!(r.open().0.rebuilt, None);
    assert_eq!(r.rebuilt_entries(), entries);
    let repo = Repository::open(r.store.clone()).unwrap();
    assert_eq!(restore(&repo, repo.backups()[0].id).unwrap(), v2);
}

/// A backup whose publish compacts the index segments into one keeps the
/// run set of that generation: the next opening reuses it.
#[test]
fn a_compaction_leaves_the_run_set_of_its_generation() {
    let r = Repo::new();
    let mut data = bytes(3, 64 << 10);
    let mut compacted = false;
    for i in 0..tessera_core::repo::MAX_SEGMENTS as u64 + 2 {
        data = mutate(&data, 10 + i, 3000);
        r.backup(&data);
        let segments = r.store.list(KeyKind::IndexSegment).unwrap().len();
        let (load, entries) = r.open();
        assert_eq!(load.rebuilt, None, "backup {i}: {load:?}");
        if segments == 1 && i > 0 {
            compacted = true;
            assert_eq!(load.applied_segments, 0, "backup {i}: {load:?}");
            assert_eq!(r.rebuilt_entries(), entries);
            assert_lookups_exact(&r, &entries, &[]);
        }
    }
    assert!(compacted, "the segments were compacted");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
    }
}

/// Openings at once (threads of one process, each with its own table and
/// save): every one answers as a rebuild, and the set left is whole.
#[test]
fn openings_at_once_do_not_spoil_each_others_runs() {
    let r = Repo::new();
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

/// A run file removed under a kept set and a directory in the place of the
/// set's lock: errors, never a panic; the opening rebuilds or goes on.
#[test]
fn io_errors_on_the_kept_set_are_errors_not_panics() {
    let r = Repo::new();
    two_versions(&r);
    let expected = r.rebuilt_entries();
    for f in r.files("run") {
        std::fs::remove_file(f).unwrap();
    }
    let (load, entries) = r.open();
    let reason = load.rebuilt.unwrap();
    assert!(reason.contains("run-"), "names the file: {reason}");
    assert_eq!(entries, expected);
    // A save that cannot write its state: the opening still answers.
    let state = r.kept.join("state");
    std::fs::remove_file(&state).unwrap();
    std::fs::create_dir(&state).unwrap();
    let (load, entries) = r.open();
    assert!(!load.saved, "{load:?}");
    assert_eq!(entries, expected);
    std::fs::remove_dir(&state).unwrap();
}
