//! The backend contract, checked against every implementation, plus the
//! behaviour specific to each backend and wrapper.

use super::contract::*;
use super::local::{WRITE_BEHIND_DEPTH, WRITE_BEHIND_MIN};
use super::*;
use crate::error::Error;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn local() -> (tempfile::TempDir, LocalStore) {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalStore::create(&dir.path().join("repo")).unwrap();
    (dir, b)
}

#[test]
fn memory_backend_contract() {
    check_contract(&MemoryStore::new());
}

#[test]
fn local_backend_contract() {
    let (_dir, b) = local();
    check_contract(&b);
    assert!(
        b.root().join("deep/er/key").is_file(),
        "objects are plain files"
    );
}

#[test]
fn wrappers_keep_the_contract() {
    check_contract(&CountingStore::new(MemoryStore::new()));
    check_contract(&FaultyStore::new(MemoryStore::new(), None));
    check_contract(&FaultyStore::with_lost_unsynced(MemoryStore::new(), None));
    let (_dir, b) = local();
    check_contract(&FaultyStore::with_lost_unsynced(
        CountingStore::new(b),
        None,
    ));
}

#[test]
fn memory_backend_validates_keys() {
    check_key_validation(&MemoryStore::new());
}

#[test]
fn local_backend_validates_keys() {
    let (dir, b) = local();
    check_key_validation(&b);
    // Nothing escaped the root.
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, ["repo"]);
}

#[test]
fn backends_are_shareable_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<LocalStore>();
    send_sync::<MemoryStore>();
    send_sync::<CountingStore<MemoryStore>>();
    send_sync::<FaultyStore<Arc<dyn ObjectStore>>>();
}

#[test]
fn local_open_requires_an_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    assert!(matches!(LocalStore::open(&missing), Err(Error::NoRepository(p)) if p == missing));
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert!(matches!(LocalStore::open(&file), Err(Error::Invalid(_))));
    let nested = dir.path().join("a/b/c");
    let b = LocalStore::create(&nested).unwrap();
    assert_eq!(
        b.unsynced_counts(),
        (0, 3),
        "a, b and c are new directories"
    );
    b.barrier().unwrap();
    assert_eq!(b.root(), nested);
    assert_eq!(b.location(), nested.display().to_string());
    LocalStore::open(&nested).unwrap();
    LocalStore::create(&nested).unwrap();
}

#[test]
fn local_list_ignores_temporaries_and_remove_temporaries_cleans_them() {
    let (_dir, b) = local();
    b.put(&nk("containers/0001"), b"object").unwrap();
    let leftovers = [
        b.root().join("containers/.0002.4242.7.tmp"),
        b.root().join(".lock.1.0.tmp"),
        b.root().join("index/.0001.99.3.tmp"),
    ];
    std::fs::create_dir_all(b.root().join("index")).unwrap();
    for t in &leftovers {
        std::fs::write(t, b"half an obj").unwrap();
    }
    assert_eq!(names(&b), ["containers/0001"]);
    assert_eq!(listed(&b, KeyKind::Container), ["containers/0001"]);
    assert!(b.list(KeyKind::IndexSegment).unwrap().is_empty());

    let mut expected = leftovers.to_vec();
    expected.sort();
    assert_eq!(b.list_temporaries().unwrap(), expected);
    // Through the trait, as the engine calls it.
    assert_eq!(ObjectStore::clean_interrupted(&b).unwrap(), 3);
    assert!(b.list_temporaries().unwrap().is_empty());
    assert_eq!(b.remove_temporaries().unwrap(), 0);
    assert_eq!(b.get(&nk("containers/0001")).unwrap(), b"object");
    b.barrier().unwrap();
}

/// `put` writes a new file and renames it into place: a reader holding the
/// old file keeps reading the whole old object, the new object is a
/// different file, and no temporary is left.
#[test]
fn local_overwrite_replaces_the_file_atomically() {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let (_dir, b) = local();
    let old = vec![b'o'; 100_000];
    let new = vec![b'n'; 150_000];
    b.put(&nk("containers/0001"), &old).unwrap();
    let path = b.root().join("containers/0001");
    let mut reader = std::fs::File::open(&path).unwrap();
    let old_inode = reader.metadata().unwrap().ino();
    b.put(&nk("containers/0001"), &new).unwrap();
    assert_ne!(
        std::fs::metadata(&path).unwrap().ino(),
        old_inode,
        "written in place"
    );
    let mut seen = Vec::new();
    reader.read_to_end(&mut seen).unwrap();
    assert_eq!(seen, old);
    assert_eq!(b.get(&nk("containers/0001")).unwrap(), new);
    assert!(b.list_temporaries().unwrap().is_empty());
}

/// Concurrent readers only ever see one complete version of an object that
/// is being overwritten.
#[test]
fn local_readers_never_see_a_partial_object() {
    let (_dir, b) = local();
    let b = Arc::new(b);
    let versions: Vec<Vec<u8>> = (0..4u8)
        .map(|v| vec![b'a' + v; 64 * 1024 + v as usize * 1000])
        .collect();
    b.put(&nk("obj"), &versions[0]).unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (b, done, versions) = (b.clone(), done.clone(), versions.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                let seen = b.get(&nk("obj")).unwrap();
                assert!(
                    versions.contains(&seen),
                    "partial read of {} bytes",
                    seen.len()
                );
                reads += 1;
            }
        })
    };
    for i in 0..300 {
        b.put(&nk("obj"), &versions[i % versions.len()]).unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
    assert!(b.list_temporaries().unwrap().is_empty());
}

#[test]
fn local_sync_flushes_remembered_writes_and_forgets_them() {
    let (_dir, b) = local();
    // The new repository directory's entry in its parent.
    assert_eq!(b.unsynced_counts(), (0, 1));
    b.barrier().unwrap();
    assert_eq!(b.unsynced_counts(), (0, 0));
    b.put(&nk("containers/0001"), b"a").unwrap();
    b.put(&nk("containers/0002"), b"b").unwrap();
    b.put(&nk("containers/0002"), b"c").unwrap();
    // Two files; their directory and the root (which gained `containers`).
    assert_eq!(b.unsynced_counts(), (2, 2));
    b.barrier().unwrap();
    assert_eq!(b.unsynced_counts(), (0, 0));
    b.delete(&nk("containers/0001")).unwrap();
    assert_eq!(b.unsynced_counts(), (0, 1));
    b.put(&nk("containers/0003"), b"d").unwrap();
    b.delete(&nk("containers/0003")).unwrap();
    assert_eq!(b.unsynced_counts(), (0, 1), "a deleted file needs no fsync");
    b.barrier().unwrap();
    assert_eq!(b.unsynced_counts(), (0, 0));
    // create_new is durable on return and leaves nothing for sync.
    assert!(b.put_if_absent(&nk("locks/l"), b"x").unwrap());
    assert_eq!(b.unsynced_counts(), (0, 0));
}

#[test]
fn local_large_objects_written_behind_read_back_exactly() {
    // Large objects go through the write-behind queue (their pages are
    // dropped once a few newer ones follow); they must read back exactly,
    // before and after sync, from this handle and a fresh one, including
    // one deleted and one overwritten while still queued.
    let (dir, b) = local();
    let object = |i: usize| -> Vec<u8> {
        (0..WRITE_BEHIND_MIN + 4096 * i)
            .map(|j| (j * 31 + i * 7) as u8)
            .collect()
    };
    let n = WRITE_BEHIND_DEPTH + 4;
    for i in 0..n {
        b.put(&nk(&format!("containers/{i:04}")), &object(i))
            .unwrap();
    }
    b.delete(&nk("containers/0003")).unwrap();
    b.put(&nk("containers/0004"), &object(40)).unwrap();
    let expect = |i: usize| if i == 4 { object(40) } else { object(i) };
    let check = |b: &dyn ObjectStore| {
        for i in 0..n {
            let key = format!("containers/{i:04}");
            if i == 3 {
                assert_missing(b.get(&nk(&key)), &key);
            } else {
                assert!(b.get(&nk(&key)).unwrap() == expect(i), "{key}");
                let mut buf = vec![9u8; 17];
                b.get_into(&nk(&key), &mut buf).unwrap();
                assert!(buf == expect(i), "{key} via get_into");
            }
        }
    };
    check(&b);
    b.barrier().unwrap();
    assert_eq!(b.unsynced_counts(), (0, 0));
    check(&b);
    drop(b);
    check(&LocalStore::open(&dir.path().join("repo")).unwrap());
}

#[test]
fn local_maps_large_objects_and_reads_small_ones() {
    let (_dir, b) = local();
    let small = vec![1u8; 1000];
    let large = vec![2u8; 2 << 20];
    b.put(&nk("containers/s"), &small).unwrap();
    b.put(&nk("containers/l"), &large).unwrap();
    let s = b
        .get_whole(&nk("containers/s"), Vec::with_capacity(4096))
        .unwrap();
    assert!(!s.is_mapped());
    assert!(*s == small[..]);
    assert!(s.into_buffer().capacity() >= 4096, "buffer reused");
    let l = b.get_whole(&nk("containers/l"), Vec::new()).unwrap();
    assert!(l.is_mapped());
    // Deleting a mapped object leaves the mapping intact.
    b.delete(&nk("containers/l")).unwrap();
    assert!(*l == large[..]);
    assert!(l.into_buffer().is_empty());
}

/// Resident bytes of the mapping that holds `addr`, from /proc/self/smaps.
#[cfg(target_os = "linux")]
fn mapping_rss(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = range.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = a <= addr && addr < b;
                continue;
            }
        }
        if inside {
            if let Some(kb) = line.strip_prefix("Rss:") {
                return kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap()
                    * 1024;
            }
        }
    }
    panic!("no mapping holds {addr:#x}");
}

/// Discarding a mapped object's pages takes them out of this process's
/// memory, and a later read gets the file's bytes again. Bytes in memory
/// are left alone. (At least the whole pages inside the range go: where
/// the page cache maps the file in huge pages, the kernel drops the whole
/// huge mapping, and the kept pages fault in again from the page cache.)
#[cfg(target_os = "linux")]
#[test]
fn discard_gives_back_the_pages_of_a_mapping_only() {
    let (_dir, b) = local();
    let page = super::page_size();
    let large: Vec<u8> = (0..512 * page).map(|i| (i * 7 + i / 4096) as u8).collect();
    b.put(&nk("containers/l"), &large).unwrap();
    let l = b.get_whole(&nk("containers/l"), Vec::new()).unwrap();
    assert!(l.is_mapped());
    let addr = l.as_ptr() as usize;
    assert_eq!(mapping_rss(addr), (512 * page) as u64, "populated");
    // Pages 8..40 go whole (the partial pages around them are not asked).
    l.discard(8 * page - 1..40 * page + 1);
    let after = mapping_rss(addr);
    assert!(after <= ((512 - 32) * page) as u64, "{after} resident");
    l.discard(0..0);
    l.discard(511 * page..512 * page + 1);
    assert_eq!(mapping_rss(addr), after, "empty or past the end: ignored");
    // Read again from the file, the same bytes.
    assert!(*l == large[..]);
    assert_eq!(mapping_rss(addr), (512 * page) as u64);
    let mem = ObjectBytes::from(large.clone());
    mem.discard(0..large.len());
    assert!(*mem == large[..]);
}

/// A view past the first bytes reads as the tail, and gives back its
/// buffer without the skipped bytes.
#[test]
fn skipped_bytes_are_a_tail_of_the_object() {
    let b = ObjectBytes::from(b"headerbody".to_vec()).skip(6);
    assert_eq!(&*b, b"body");
    let b = b.skip(1);
    assert_eq!(&*b, b"ody");
    assert_eq!(b.into_buffer(), b"ody");
    assert!(ObjectBytes::from(b"x".to_vec()).skip(1).is_empty());
}

#[test]
fn local_failed_put_leaves_no_temporary() {
    let (_dir, b) = local();
    b.put(&nk("containers/0001"), b"x").unwrap();
    // `containers` is a directory: renaming a file over it fails.
    let err = b.put(&nk("containers"), b"y").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&b.root().display().to_string()),
        "names the path: {err}"
    );
    assert!(b.list_temporaries().unwrap().is_empty());
    assert_eq!(names(&b), ["containers/0001"]);
}

/// A repository directory removed while open (`rm -rf` by a script) is
/// not made again by the next put: the writer would go on publishing over
/// objects that are gone, and the loss would show only when they are read
/// (a lab GC failed so, "missing object container …", 74 s later).
#[test]
fn local_put_refuses_a_removed_repository_directory() {
    let (_dir, b) = local();
    b.put(&nk("containers/0001"), b"first").unwrap();
    b.barrier().unwrap();
    std::fs::remove_dir_all(b.root()).unwrap();
    for key in ["containers/0002", "manifests/0002", "config"] {
        let err = b.put(&nk(key), b"next").unwrap_err();
        assert!(
            err.to_string().contains("was removed while open"),
            "{key}: {err}"
        );
    }
    assert!(!b.root().exists(), "the root is not made again");
    // A new subdirectory of a root that is still there is made as before.
    std::fs::create_dir(b.root()).unwrap();
    b.put(&nk("containers/0003"), b"again").unwrap();
    assert_eq!(names(&b), ["containers/0003"]);
}

#[test]
fn local_create_new_is_exclusive_and_complete() {
    let (_dir, b) = local();
    let b = Arc::new(b);
    // Racing creators: exactly one wins and the object is its whole content.
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let b = b.clone();
            std::thread::spawn(move || {
                b.put_if_absent(&nk("lock"), format!("holder {i}").repeat(100).as_bytes())
                    .unwrap()
            })
        })
        .collect();
    let winners = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&w| w)
        .count();
    assert_eq!(winners, 1);
    let content = String::from_utf8(b.get(&nk("lock")).unwrap()).unwrap();
    let first = &content[..8];
    assert_eq!(content, first.repeat(100));
    assert!(b.list_temporaries().unwrap().is_empty());
}

#[test]
fn counting_backend_counts_a_known_sequence_exactly() {
    let b = CountingStore::new(MemoryStore::new());
    b.put(&nk("unrelated"), b"before").unwrap();
    let before = b.counters();

    b.put(&nk("containers/a"), &[0; 10]).unwrap();
    b.put(&nk("containers/b"), &[0; 5]).unwrap();
    b.put(&nk("index/x"), &[0; 3]).unwrap();
    b.get(&nk("containers/a")).unwrap();
    b.get_range(&nk("containers/b"), 1, 2).unwrap();
    b.size(&nk("index/x")).unwrap();
    b.get(&nk("containers/zz")).unwrap_err();
    b.list(KeyKind::Container).unwrap();
    b.list(KeyKind::Lock).unwrap();
    b.delete(&nk("index/x")).unwrap();
    b.barrier().unwrap();
    assert!(b.put_if_absent(&nk("lock"), b"held").unwrap());
    assert!(!b.put_if_absent(&nk("lock"), b"again").unwrap());

    let total = IoCounters {
        gets: 4,
        get_bytes: 12,
        puts: 5,
        put_bytes: 22,
        deletes: 1,
        lists: 2,
        syncs: 1,
    };
    assert_eq!(b.counters().since(&before), total);
    assert_eq!(b.counters().puts, 6);
    assert_eq!(
        b.counters_of(KeyKind::Container),
        IoCounters {
            gets: 3,
            get_bytes: 12,
            puts: 2,
            put_bytes: 15,
            lists: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        b.counters_of(KeyKind::IndexSegment),
        IoCounters {
            gets: 1,
            puts: 1,
            put_bytes: 3,
            deletes: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        b.counters_of(KeyKind::Lock),
        IoCounters {
            puts: 2,
            put_bytes: 4,
            lists: 1,
            ..Default::default()
        }
    );
    assert_eq!(b.counters_of(KeyKind::Manifest), IoCounters::default());
    assert_eq!(b.inner().len(), 4);

    let json = serde_json::to_value(total).unwrap();
    assert_eq!(json["put_bytes"], 22);
    b.reset();
    assert_eq!(b.counters(), IoCounters::default());
}

/// One step of the scripted workload of the fault-injection tests.
#[derive(Clone, Copy, Debug)]
enum Step {
    Put(&'static str, &'static [u8]),
    Delete(&'static str),
    Sync,
    CreateNew(&'static str, &'static [u8]),
    /// A read between mutations; not counted as an operation.
    Get(&'static str),
}

const SCRIPT: &[Step] = &[
    Step::CreateNew("lock", b"L"),
    Step::Put("containers/1", b"one"),
    Step::Put("containers/2", b"two"),
    Step::Get("containers/1"),
    Step::Sync,
    Step::Put("manifests/1", b"m1"),
    Step::Delete("index/base"),
    Step::Put("containers/2", b"two, again"),
    Step::Sync,
    Step::Delete("containers/1"),
    Step::Put("containers/3", b"three"),
    Step::Delete("nothing"),
    Step::Delete("lock"),
    Step::CreateNew("lock", b"L2"),
    Step::Put("containers/4", b"four"),
    Step::Sync,
    Step::Delete("containers/4"),
    Step::Put("manifests/2", b"m2"),
];

/// What the store holds before the script runs.
fn seed(b: &dyn ObjectStore) {
    b.put(&nk("index/base"), b"base").unwrap();
    b.put(&nk("containers/2"), b"old two").unwrap();
    b.barrier().unwrap();
}

fn run(b: &dyn ObjectStore, step: Step) -> crate::Result<()> {
    match step {
        Step::Put(k, v) => b.put(&nk(k), v),
        Step::Delete(k) => b.delete(&nk(k)),
        Step::Sync => b.barrier(),
        Step::CreateNew(k, v) => b.put_if_absent(&nk(k), v).map(drop),
        Step::Get(k) => b.get(&nk(k)).map(drop),
    }
}

/// Reference model: the current contents and what a power loss would keep.
#[derive(Clone, Default)]
struct Model {
    now: BTreeMap<String, Vec<u8>>,
    durable: BTreeMap<String, Vec<u8>>,
}

impl Model {
    fn apply(&mut self, step: Step) {
        match step {
            Step::Put(k, v) => {
                self.now.insert(k.into(), v.into());
            }
            Step::Delete(k) => {
                self.now.remove(k);
            }
            Step::Sync => self.durable = self.now.clone(),
            Step::CreateNew(k, v) => {
                if !self.now.contains_key(k) {
                    self.now.insert(k.into(), v.into());
                    self.durable.insert(k.into(), v.into());
                }
            }
            Step::Get(_) => {}
        }
    }
}

fn is_mutation(step: Step) -> bool {
    !matches!(step, Step::Get(_))
}

/// Run the script against fresh stores failing at every operation in turn,
/// in both modes, and compare what survives with the model.
fn sweep(make: &dyn Fn() -> (Option<tempfile::TempDir>, Arc<dyn ObjectStore>)) {
    let mutations = SCRIPT.iter().filter(|s| is_mutation(**s)).count() as u64;
    // Counting run: no failure, every op counted, final state as modelled.
    {
        let (_dir, inner) = make();
        seed(&*inner);
        let b = FaultyStore::new(inner.clone(), None);
        let mut model = Model::default();
        seed_model(&mut model);
        for &step in SCRIPT {
            run(&b, step).unwrap();
            model.apply(step);
        }
        assert_eq!(b.ops(), mutations);
        assert!(!b.has_failed());
        assert_eq!(contents(&*inner), model.now);
    }
    for lose in [false, true] {
        for n in 1..=mutations {
            let (_dir, inner) = make();
            seed(&*inner);
            let b = if lose {
                FaultyStore::with_lost_unsynced(inner.clone(), Some(n))
            } else {
                FaultyStore::new(inner.clone(), Some(n))
            };
            let mut model = Model::default();
            seed_model(&mut model);
            let mut failed = false;
            for &step in SCRIPT {
                let r = run(&b, step);
                if failed {
                    assert!(
                        matches!(r, Err(Error::Injected(m)) if m == n),
                        "after the failure: {step:?} gave {r:?}"
                    );
                    continue;
                }
                if is_mutation(step) && b.ops() == n {
                    assert!(
                        matches!(r, Err(Error::Injected(m)) if m == n),
                        "fail_at {n}: {step:?} gave {r:?}"
                    );
                    assert!(b.has_failed());
                    failed = true;
                } else {
                    r.unwrap_or_else(|e| panic!("fail_at {n}: {step:?} failed early: {e}"));
                    model.apply(step);
                }
            }
            assert!(failed, "fail_at {n} never reached");
            assert_eq!(b.ops(), n, "operations after the failure are not counted");
            assert!(matches!(
                b.list(KeyKind::Container),
                Err(Error::Injected(_))
            ));
            let expected = if lose { &model.durable } else { &model.now };
            assert_eq!(
                &contents(&*inner),
                expected,
                "fail_at {n}, lose_unsynced {lose}"
            );
        }
    }
}

fn seed_model(model: &mut Model) {
    model.apply(Step::Put("index/base", b"base"));
    model.apply(Step::Put("containers/2", b"old two"));
    model.apply(Step::Sync);
}

#[test]
fn failing_backend_sweep_on_memory() {
    sweep(&|| (None, Arc::new(MemoryStore::new())));
}

#[test]
fn failing_backend_sweep_on_local() {
    sweep(&|| {
        let (dir, b) = local();
        (Some(dir), Arc::new(b))
    });
}

#[test]
fn failing_backend_never_fails_without_fail_at() {
    let b = FaultyStore::new(MemoryStore::new(), None);
    for i in 0..100 {
        b.put(&nk(&format!("k/{i}")), b"x").unwrap();
    }
    b.barrier().unwrap();
    assert_eq!(b.ops(), 101);
    assert!(!b.has_failed());
}

/// A power loss right after a sync loses nothing; one before it loses the
/// batch, including restoring objects deleted in that batch.
#[test]
fn lost_unsynced_restores_the_last_synced_state() {
    let inner = Arc::new(MemoryStore::new());
    let b = FaultyStore::with_lost_unsynced(inner.clone(), Some(6));
    b.put(&nk("containers/a"), b"1").unwrap(); // 1
    b.put(&nk("containers/b"), b"2").unwrap(); // 2
    b.barrier().unwrap(); // 3
    b.delete(&nk("containers/a")).unwrap(); // 4
    b.put(&nk("containers/b"), b"changed").unwrap(); // 5
    assert_eq!(inner.get(&nk("containers/b")).unwrap(), b"changed");
    assert!(matches!(
        b.put(&nk("containers/c"), b"3"),
        Err(Error::Injected(6))
    )); // 6: power loss
    assert!(matches!(
        b.get(&nk("containers/b")),
        Err(Error::Injected(6))
    ));
    let expected: BTreeMap<String, Vec<u8>> = [
        ("containers/a".into(), b"1".to_vec()),
        ("containers/b".into(), b"2".to_vec()),
    ]
    .into();
    assert_eq!(contents(&*inner), expected);
}

#[test]
fn local_paths_stay_inside_the_root() {
    let (_dir, b) = local();
    b.put(&nk("a/b/c"), b"x").unwrap();
    assert_eq!(
        std::fs::read(b.root().join(Path::new("a/b/c"))).unwrap(),
        b"x"
    );
}
