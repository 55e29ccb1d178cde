//! Online GC and concurrent commits (issue 15): writers in one process
//! stand for processes; GC runs in steps (`gc_begin`, `gc_cutoff`,
//! `gc_finish`) so backups commit at every point in between. Every
//! committed backup restores byte for byte and `check` finds no problem.

use std::sync::Arc;
use tessera_core::backend::{KeyKind, ObjectKey, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::check::CheckOptions;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::gc::{GcOptions, GcStrategy, MarkSpec};
use tessera_core::lock::RepoLock;
use tessera_core::{BackupId, BackupOptions, Error, Repository, Writer};

use crate::common::{backup, bytes, init_blake3, mem, restore};

const CHUNKER: ChunkerConfig = ChunkerConfig::Fastcdc {
    min: 256,
    avg: 1024,
    max: 4096,
};

fn init(b: Arc<dyn ObjectStore>) {
    init_blake3(b, CHUNKER, 16 * 1024, false);
}

fn writer(b: &Arc<dyn ObjectStore>) -> Writer {
    Repository::open_writer(b.clone(), "test").unwrap()
}

/// Every listed backup restores to what `want` says, and check is clean.
fn verify(b: &Arc<dyn ObjectStore>, want: &[(BackupId, &[u8])]) {
    let repo = Repository::open(b.clone()).unwrap();
    for (id, data) in want {
        assert!(repo.manifest().backup(*id).is_some(), "backup {id} listed");
        assert_eq!(&restore(&repo, *id).unwrap(), data, "backup {id}");
    }
    let report = repo.check(&CheckOptions::default()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

fn options(mark: MarkSpec, strategy: GcStrategy) -> GcOptions {
    GcOptions {
        mark,
        strategy,
        ..Default::default()
    }
}

const MARKS: [(MarkSpec, GcStrategy); 4] = [
    (MarkSpec::Logical, GcStrategy::Naive),
    (MarkSpec::Physical, GcStrategy::Naive),
    (MarkSpec::PhysicalPlus, GcStrategy::Naive),
    (MarkSpec::Logical, GcStrategy::Gccdf),
];

/// A repository where `old` was backed up and forgotten (its chunks
/// dead), and `kept` is retained; returns the GC's writer.
fn with_dead_chunks(b: &Arc<dyn ObjectStore>, old: &[u8], kept: &[u8]) -> (Writer, BackupId) {
    init(b.clone());
    let mut w = writer(b);
    let gone = backup(&mut w, "old", old).unwrap();
    let id = backup(&mut w, "kept", kept).unwrap();
    w.forget(&[gone]).unwrap();
    (w, id)
}

/// A backup deduplicating against dead chunks commits between GC's mark
/// and its cutoff: GC reads its record and resurrects them.
#[test]
fn backup_between_mark_and_cutoff_is_resurrected() {
    // CMA copies nothing: it must keep a resurrected container whole
    // (it deleted it uncopied, losing the backup's chunks).
    let cma = [
        (MarkSpec::Logical, GcStrategy::Cma),
        (MarkSpec::PhysicalPlus, GcStrategy::Cma),
    ];
    for (mark, strategy) in MARKS.into_iter().chain(cma) {
        let b: Arc<dyn ObjectStore> = mem();
        let (old, kept) = (bytes(1, 120_000), bytes(2, 60_000));
        let (mut gc, kept_id) = with_dead_chunks(&b, &old, &kept);
        let mut run = gc.gc_begin(&options(mark, strategy)).unwrap();
        assert!(!run.plan().unwrap().reclaimed.is_empty(), "{mark}");
        let mut w = writer(&b);
        let again = backup(&mut w, "again", &old).unwrap();
        gc.gc_cutoff(&mut run).unwrap();
        assert!(run.resurrected() > 0, "{mark}/{strategy}");
        let r = gc.gc_finish(run).unwrap();
        assert!(r.resurrections > 0, "{mark}/{strategy}");
        assert!(r.resurrection_records >= 1);
        verify(&b, &[(kept_id, &kept), (again, &old)]);
        // The next GC changes nothing a retained backup needs.
        drop(w);
        gc.gc(&options(mark, strategy)).unwrap();
        verify(&b, &[(kept_id, &kept), (again, &old)]);
    }
}

/// A backup deduplicates against dead chunks after GC's cutoff (their
/// containers announced) and commits before GC: it writes its own copies.
#[test]
fn backup_after_cutoff_stores_its_own_copies() {
    for (mark, strategy) in MARKS {
        let b: Arc<dyn ObjectStore> = mem();
        let (old, kept) = (bytes(3, 120_000), bytes(4, 60_000));
        let (mut gc, kept_id) = with_dead_chunks(&b, &old, &kept);
        let mut run = gc.gc_begin(&options(mark, strategy)).unwrap();
        gc.gc_cutoff(&mut run).unwrap();
        assert_eq!(run.resurrected(), 0);
        let mut w = writer(&b);
        let stored0 = Repository::open(b.clone())
            .unwrap()
            .stats()
            .stored_data_bytes;
        let again = backup(&mut w, "again", &old).unwrap();
        let stored1 = Repository::open(b.clone())
            .unwrap()
            .stats()
            .stored_data_bytes;
        assert!(
            stored1 >= stored0 + old.len() as u64 * 9 / 10,
            "{mark}/{strategy}: its own copies ({stored0} → {stored1})"
        );
        gc.gc_finish(run).unwrap();
        verify(&b, &[(kept_id, &kept), (again, &old)]);
        // The GC's writer, whose commit merged with the backup's, still
        // indexes the copies the backup stored: its next GC keeps them.
        drop(w);
        gc.gc(&options(mark, strategy)).unwrap();
        verify(&b, &[(kept_id, &kept), (again, &old)]);
    }
}

/// A backup that began before GC and commits after GC deleted the
/// containers it deduplicated against: it stores its own copies at commit.
#[test]
fn backup_spanning_a_whole_gc_keeps_its_chunks() {
    for (mark, strategy) in MARKS {
        let b: Arc<dyn ObjectStore> = mem();
        let (old, kept) = (bytes(5, 120_000), bytes(6, 60_000));
        let (mut gc, kept_id) = with_dead_chunks(&b, &old, &kept);
        let mut w = writer(&b);
        let opts = BackupOptions::new("span", SourceKind::Stream);
        let report = w
            .backup_with(&opts, |ingest| {
                use std::io::Write;
                ingest.write_all(&old[..60_000]).unwrap();
                let r = gc.gc(&options(mark, strategy)).unwrap();
                assert!(r.reclaimed_containers > 0, "{mark}/{strategy}");
                ingest.write_all(&old[60_000..]).unwrap();
                Ok(())
            })
            .unwrap();
        verify(&b, &[(kept_id, &kept), (report.backup.id, &old)]);
    }
}

/// A backup commits between GC's cutoff and its commit while GC copies
/// a container the backup deduplicated against (live in another backup):
/// both commits merge, and nothing is lost.
#[test]
fn gc_commit_merges_with_backups_and_forgets() {
    let b: Arc<dyn ObjectStore> = mem();
    let (old, kept) = (bytes(7, 120_000), bytes(8, 60_000));
    let (mut gc, kept_id) = with_dead_chunks(&b, &old, &kept);
    let mut w = writer(&b);
    let doomed = backup(&mut w, "doomed", &bytes(9, 30_000)).unwrap();
    let mut run = gc.gc_begin(&GcOptions::default()).unwrap();
    let mixed: Vec<u8> = kept.iter().chain(&old).copied().collect();
    let a = backup(&mut w, "mixed", &mixed).unwrap();
    gc.gc_cutoff(&mut run).unwrap();
    let fresh = bytes(10, 40_000);
    let c = backup(&mut w, "fresh", &fresh).unwrap();
    w.forget(&[doomed]).unwrap();
    let r = gc.gc_finish(run).unwrap();
    assert!(r.reclaimed_containers > 0);
    let repo = Repository::open(b.clone()).unwrap();
    assert!(repo.manifest().backup(doomed).is_none());
    assert!(repo.manifest().forgotten.iter().any(|f| f.id == doomed));
    drop(repo);
    verify(&b, &[(kept_id, &kept), (a, &mixed), (c, &fresh)]);
    // The doomed backup's chunks go at the next GC.
    drop(w);
    let r = gc.gc(&GcOptions::default()).unwrap();
    assert!(r.reclaimed_containers > 0);
    verify(&b, &[(kept_id, &kept), (a, &mixed), (c, &fresh)]);
}

/// Two writers open at once back up in turns: every commit after the
/// first conflicts and merges; ids stay unique, nothing collides.
#[test]
fn concurrent_backups_merge_and_renumber() {
    let b: Arc<dyn ObjectStore> = mem();
    init(b.clone());
    let mut w1 = writer(&b);
    let mut w2 = writer(&b);
    let mut want: Vec<(BackupId, Vec<u8>)> = Vec::new();
    for round in 0..4u64 {
        let d1 = bytes(100 + round, 50_000);
        let mut d2 = d1.clone();
        d2.extend(bytes(200 + round, 20_000));
        want.push((backup(&mut w1, "one", &d1).unwrap(), d1));
        want.push((backup(&mut w2, "two", &d2).unwrap(), d2));
    }
    let ids: std::collections::HashSet<_> = want.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids.len(), want.len(), "backup ids unique");
    let refs: Vec<(BackupId, &[u8])> = want.iter().map(|(i, d)| (*i, &d[..])).collect();
    verify(&b, &refs);
    // Every container object is listed: the writers never overwrote one
    // another's (only older generations are left, for a lone writer).
    let repo = Repository::open(b.clone()).unwrap();
    let leftovers = repo.find_leftovers().unwrap();
    assert!(
        leftovers.iter().all(|k| k.starts_with("manifests/")),
        "{leftovers:?}"
    );
    drop((w1, w2));
    let w = writer(&b);
    assert!(w
        .leftovers()
        .objects
        .iter()
        .all(|k| k.starts_with("manifests/")));
    assert!(w.find_leftovers().unwrap().is_empty());
}

/// A writer that crashed (its lock stale, its containers unpublished)
/// does not stop others; the next writer that opens alone removes what
/// it left.
#[test]
fn leftovers_are_removed_only_by_a_writer_alone() {
    let b: Arc<dyn ObjectStore> = mem();
    init(b.clone());
    let mut w1 = writer(&b);
    let w2 = writer(&b);
    let d = bytes(11, 40_000);
    let id = backup(&mut w1, "a", &d).unwrap();
    // An object no manifest lists, as a writer in flight has (w2's: it
    // ends without publishing it, so it asks the next writer alone to sweep).
    w2.object_store()
        .put(
            &ObjectKey::Container(tessera_core::container::ContainerId(0xffff_ffff)),
            b"x",
        )
        .unwrap();
    let w3 = writer(&b);
    assert!(w3.leftovers().objects.is_empty(), "others hold locks");
    drop((w3, w2));
    let id2 = backup(&mut w1, "b", &d).unwrap();
    drop(w1);
    let w = writer(&b);
    assert!(w
        .leftovers()
        .objects
        .contains(&"containers/00000000ffffffff".to_string()));
    drop(w);
    verify(&b, &[(id, &d), (id2, &d)]);
}

/// Shared locks coexist; the exclusive lock waits for none of them and
/// is refused while one lives; a stale shared lock is broken.
#[test]
fn shared_and_exclusive_locks() {
    let b: Arc<dyn ObjectStore> = mem();
    init(b.clone());
    let r1 = RepoLock::acquire_shared(b.clone(), "tessera backup", false).unwrap();
    let r2 = RepoLock::acquire_shared(b.clone(), "tessera restore", true).unwrap();
    assert_eq!(b.list(KeyKind::SharedLock).unwrap().len(), 2);
    let err = RepoLock::acquire(b.clone(), "tessera init").unwrap_err();
    assert!(matches!(err, Error::Locked(_)), "{err}");
    assert!(b.get(&ObjectKey::Lock).is_err(), "backed off");
    drop(r1);
    drop(r2);
    let ex = RepoLock::acquire(b.clone(), "tessera init").unwrap();
    let err = RepoLock::acquire_shared(b.clone(), "tessera backup", false).unwrap_err();
    assert!(err.to_string().contains("tessera init"), "{err}");
    assert!(
        b.list(KeyKind::SharedLock).unwrap().is_empty(),
        "backed off"
    );
    drop(ex);
    // A shared lock left by a dead process is broken by the next writer
    // that opens alone.
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let info = serde_json::json!({
        "owner": "x", "pid": dead, "host": tessera_core::lock::current_host(),
        "time": 1, "command": "tessera backup", "shared": true
    });
    b.put(
        &ObjectKey::SharedLock("dead-0-1".into()),
        info.to_string().as_bytes(),
    )
    .unwrap();
    let w = writer(&b);
    let broken = w.broken_lock().expect("the dead holder's lock was broken");
    assert_eq!(broken.holder.pid, dead);
    // GCs run one at a time.
    let g = RepoLock::acquire_gc(b.clone(), "tessera gc").unwrap();
    assert!(RepoLock::acquire_gc(b.clone(), "tessera gc").is_err());
    drop(g);
}

/// GC waits for readers holding a lock before deleting what they read:
/// a reader of the generation before GC's commit still restores the
/// forgotten backup whose containers GC reclaims, until it closes.
#[test]
fn reader_keeps_its_containers_until_it_closes() {
    let b: Arc<dyn ObjectStore> = mem();
    let (old, kept) = (bytes(12, 120_000), bytes(13, 60_000));
    let (mut gc, kept_id) = with_dead_chunks(&b, &old, &kept);
    let reader = Repository::open_reader(b.clone(), "tessera restore").unwrap();
    let seen = reader.manifest().generation;
    let forgotten = reader.manifest().forgotten[0].clone();
    let r = std::thread::scope(|s| {
        let h = s.spawn(|| gc.gc(&GcOptions::default()).unwrap());
        // GC has committed: it now waits for the reader.
        while Repository::open(b.clone()).unwrap().manifest().generation == seen {
            std::thread::yield_now();
        }
        let mut out = Vec::new();
        reader
            .restore_to(
                &forgotten,
                &mut out,
                &tessera_core::RestoreOptions::default(),
                &mut |_| {},
            )
            .unwrap();
        assert_eq!(out, old);
        drop(reader);
        h.join().unwrap()
    });
    assert!(r.reclaimed_containers > 0);
    verify(&b, &[(kept_id, &kept)]);
}

/// How a backup reaches the chunks it deduplicates.
#[derive(Clone, Copy, Debug)]
enum DedupPath {
    /// A stream, one ingest thread, in-memory index.
    Stream,
    /// A stream cut and fingerprinted by parallel workers (sealed,
    /// encrypted objects).
    Parallel,
    /// A stream against the on-disk index.
    DiskIndex,
    /// A stream whose duplicates go through a rewriting policy's segments.
    Rewriting,
    /// A directory backup whose files the files cache names (their chunk
    /// lists reused, the files not read).
    FilesCache,
}

/// Every way a backup can deduplicate against a chunk GC found dead
/// records it, so GC resurrects it at its cutoff: each path backs up the
/// same data again between GC's mark and its cutoff.
#[test]
fn every_dedup_path_records_what_it_deduplicates() {
    use tessera_core::chunking::ChunkerConfig as C;
    use tessera_core::index::IndexKind;
    use tessera_core::ingest::FilesCacheOptions;
    use tessera_core::layout::LayoutKind;
    use tessera_core::rewrite::RewriteSpec;
    use tessera_core::{InitOptions, KdfParams, Password, RestoreOptions, SealOptions};
    const PW: &str = "pw";
    let password = || Ok(Password::new(PW));
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..6u64)
        .map(|i| {
            (
                format!("d/f{i}"),
                bytes(40 + i, 20_000 + 3_000 * i as usize),
            )
        })
        .collect();
    for (p, d) in &files {
        std::fs::write(src.join(p), d).unwrap();
        // An old mtime: no file is racily clean for the files cache.
        filetime::set_file_mtime(
            src.join(p),
            filetime::FileTime::from_unix_time(1_600_000_000, 0),
        )
        .unwrap();
    }
    // Files changed (ctime) in the second a backup starts are re-read.
    let s = tessera_core::clock::now();
    while tessera_core::clock::now() == s {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let old = bytes(30, 150_000);
    let kept = bytes(31, 40_000);
    for path in [
        DedupPath::Stream,
        DedupPath::Parallel,
        DedupPath::DiskIndex,
        DedupPath::Rewriting,
        DedupPath::FilesCache,
    ] {
        for (mark, strategy) in MARKS {
            let b: Arc<dyn ObjectStore> = mem();
            let encrypt = matches!(path, DedupPath::Parallel | DedupPath::FilesCache);
            Repository::init_with_index(
                b.clone(),
                &InitOptions {
                    chunker: C::Fastcdc {
                        min: 256,
                        avg: 1024,
                        max: 4096,
                    },
                    container_size: 16 * 1024,
                    ..Default::default()
                },
                LayoutKind::Containers,
                &SealOptions {
                    encryption: encrypt.then(|| (Password::new(PW), KdfParams::INSECURE_FAST)),
                    ..Default::default()
                },
                match path {
                    DedupPath::DiskIndex => IndexKind::Disk,
                    _ => IndexKind::Memory,
                },
            )
            .unwrap();
            let open = || {
                let mut w = Repository::open_writer_with(b.clone(), "test", &password).unwrap();
                w.set_threads(if matches!(path, DedupPath::Parallel) {
                    3
                } else {
                    1
                });
                w.set_files_cache(Some(FilesCacheOptions {
                    dir: tmp.path().join(format!("cache-{path:?}-{mark}-{strategy}")),
                    force_read: false,
                }));
                w
            };
            let mut opts = BackupOptions::new("old", SourceKind::Stream);
            if matches!(path, DedupPath::Rewriting) {
                // Generous: duplicates are referenced, not rewritten.
                opts.rewrite = RewriteSpec::Capping { level: 1000 };
            }
            let tree = BackupOptions::new("tree", SourceKind::Tree);
            let back_up = |w: &mut Writer| -> BackupId {
                match path {
                    DedupPath::FilesCache => {
                        let (r, _) = w.backup_tree(&tree, &src, &mut |_| {}).unwrap();
                        r.backup.id
                    }
                    _ => {
                        w.backup_reader(&opts, &mut &old[..], &mut |_| {})
                            .unwrap()
                            .backup
                            .id
                    }
                }
            };
            let mut gc = open();
            let gone = back_up(&mut gc);
            let kept_id = backup(&mut gc, "kept", &kept).unwrap();
            gc.forget(&[gone]).unwrap();
            let mut run = gc.gc_begin(&options(mark, strategy)).unwrap();
            assert!(!run.plan().unwrap().reclaimed.is_empty(), "{path:?} {mark}");
            let mut w = open();
            let again = match path {
                DedupPath::FilesCache => {
                    let (r, _) = w.backup_tree(&tree, &src, &mut |_| {}).unwrap();
                    assert_eq!(r.files_from_cache, files.len() as u64, "every file cached");
                    r.backup.id
                }
                _ => back_up(&mut w),
            };
            gc.gc_cutoff(&mut run).unwrap();
            assert!(
                run.resurrected() > 0,
                "{path:?} {mark}/{strategy}: no resurrection"
            );
            gc.gc_finish(run).unwrap();
            drop(w);
            let repo = Repository::open_with(b.clone(), &password).unwrap();
            assert_eq!(restore(&repo, kept_id).unwrap(), kept);
            match path {
                DedupPath::FilesCache => {
                    let e = repo.manifest().backup(again).unwrap().clone();
                    let out = tmp.path().join(format!("out-{mark}-{strategy}"));
                    repo.restore_into(&e, &out, &RestoreOptions::default(), &mut |_| {})
                        .unwrap();
                    for (p, d) in &files {
                        assert!(&std::fs::read(out.join(p)).unwrap() == d, "{p}");
                    }
                }
                _ => assert!(restore(&repo, again).unwrap() == old, "{path:?} {mark}"),
            }
            let report = repo.check(&CheckOptions::default()).unwrap();
            assert!(report.ok(), "{path:?} {mark}: {:?}", report.problems);
        }
    }
}

/// A backup after GC's cutoff stores again only the chunks GC drops (its
/// dead filter): live chunks in containers GC copies are carried forward
/// under the same fingerprint and copy number, so the backup keeps
/// referencing them; dead ones it must store itself.
#[test]
fn backup_after_cutoff_stores_again_only_what_gc_drops() {
    for (mark, strategy) in MARKS {
        let b: Arc<dyn ObjectStore> = mem();
        init(b.clone());
        // Every container holds chunks of both: live ones (kept) and dead
        // ones (forgotten).
        let (kb, ob) = (bytes(50, 60_000), bytes(51, 120_000));
        let kept: Vec<u8> = kb.chunks(6_000).flatten().copied().collect();
        let both: Vec<u8> = kb
            .chunks(6_000)
            .zip(ob.chunks(12_000))
            .flat_map(|(k, o)| k.iter().chain(o))
            .copied()
            .collect();
        let mut gc = writer(&b);
        let gone = backup(&mut gc, "both", &both).unwrap();
        let kept_id = backup(&mut gc, "kept", &kept).unwrap();
        gc.forget(&[gone]).unwrap();
        let mut run = gc.gc_begin(&options(mark, strategy)).unwrap();
        gc.gc_cutoff(&mut run).unwrap();
        let mut w = writer(&b);
        let stored = || {
            Repository::open(b.clone())
                .unwrap()
                .stats()
                .stored_data_bytes
        };
        let s0 = stored();
        let again = backup(&mut w, "kept again", &kept).unwrap();
        let s1 = stored();
        assert!(
            s1 - s0 < kept.len() as u64 / 4,
            "{mark}/{strategy}: live chunks of copied containers stored again ({s0} → {s1})"
        );
        let old = backup(&mut w, "old again", &ob).unwrap();
        let s2 = stored();
        assert!(
            s2 - s1 >= ob.len() as u64 * 8 / 10,
            "{mark}/{strategy}: dead chunks not stored again ({s1} → {s2})"
        );
        let r = gc.gc_finish(run).unwrap();
        assert!(r.reclaimed_containers > 0, "{mark}/{strategy}");
        verify(&b, &[(kept_id, &kept), (again, &kept), (old, &ob)]);
        drop(w);
        gc.gc(&options(mark, strategy)).unwrap();
        verify(&b, &[(kept_id, &kept), (again, &kept), (old, &ob)]);
    }
}

/// A writer that keeps the exclusive lock keeps every other writer (and so
/// every other GC) out, and its backups write no resurrection records; a
/// shared writer in the same spot (a GC marking) keeps its records.
#[test]
fn exclusive_writer_keeps_others_out_and_records_nothing() {
    let records = |b: &Arc<dyn ObjectStore>| {
        b.list(KeyKind::Gc)
            .unwrap()
            .into_iter()
            .filter(|k| matches!(k, ObjectKey::Gc(n) if n.starts_with("resurrect/")))
            .count()
    };
    let data = bytes(50, 200_000);
    for exclusive in [false, true] {
        let b: Arc<dyn ObjectStore> = mem();
        init(b.clone());
        let mut w = if exclusive {
            Repository::open_writer_exclusive(b.clone(), "tessera lab run", &|| {
                Err(Error::Key("no password".into()))
            })
            .unwrap()
        } else {
            writer(&b)
        };
        let first = backup(&mut w, "a", &data).unwrap();
        if exclusive {
            let Err(err) = Repository::open_writer(b.clone(), "tessera backup") else {
                panic!("a second writer joined an exclusive one");
            };
            assert!(matches!(err, Error::Locked(_)), "{err}");
            assert!(err.to_string().contains("tessera lab run"), "{err}");
            // Readers are never kept out.
            assert!(Repository::open_reader(b.clone(), "tessera restore").is_ok());
        }
        let run = w.gc_begin(&GcOptions::default()).unwrap();
        let again = backup(&mut w, "b", &data).unwrap();
        assert_eq!(
            records(&b) == 0,
            exclusive,
            "exclusive={exclusive}: {} records",
            records(&b)
        );
        // (The run planned before the backup committed: abandoned.)
        drop(run);
        verify(&b, &[(first, &data), (again, &data)]);
    }
}

/// A reader that opened a generation before a GC published (and has not
/// loaded its index yet: `restore` loads it when it first needs it) still
/// restores: the GC deletes the index segments it supersedes only once
/// readers are gone, as it does its reclaimed containers. (It deleted
/// them right after publishing: such a restore failed with "the
/// repository changed since this command opened it", seen in the CLI's
/// online test.)
#[test]
fn reader_opened_before_a_gc_loads_its_index_after_it() {
    use tessera_core::context::IndexLoad;
    let b: Arc<dyn ObjectStore> = mem();
    let (old, kept) = (bytes(5, 120_000), bytes(6, 60_000));
    let (mut gc, kept_id) = with_dead_chunks(&b, &old, &kept);
    let segments = |b: &Arc<dyn ObjectStore>| b.list(KeyKind::IndexSegment).unwrap();
    let before = segments(&b);
    let reader =
        Repository::open_reader_loading(b.clone(), "restore", &|| unreachable!(), IndexLoad::Lazy)
            .unwrap();
    let generation = reader.manifest().generation;
    let gc_thread = std::thread::spawn(move || {
        gc.gc(&options(MarkSpec::Logical, GcStrategy::Naive))
            .unwrap();
    });
    // The GC published its generation; give it time to delete what it would.
    let t0 = std::time::Instant::now();
    while Repository::open(b.clone()).unwrap().manifest().generation == generation {
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "no GC");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(restore(&reader, kept_id).unwrap(), kept);
    drop(reader);
    gc_thread.join().unwrap();
    // Then they went.
    let after = segments(&b);
    assert!(
        before.iter().all(|k| !after.contains(k)),
        "{before:?} {after:?}"
    );
    verify(&b, &[(kept_id, &kept)]);
}
