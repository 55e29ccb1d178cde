//! When a writer alone sweeps leftovers (issue 36): only after a writer
//! that crashed (its lock broken) or ended with objects unpublished; a
//! writer opening after clean ones lists no container.

use std::sync::Arc;
use tessera_core::backend::{CountingStore, KeyKind, ObjectKey, ObjectStore};
use tessera_core::check::CheckOptions;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::ContainerId;
use tessera_core::gc::GcOptions;
use tessera_core::{sweep, Repository, Writer};

use crate::common::{backup, bytes, init_blake3, mem, restore};

const CHUNKER: ChunkerConfig = ChunkerConfig::Fastcdc {
    min: 256,
    avg: 1024,
    max: 4096,
};

fn repo() -> Arc<dyn ObjectStore> {
    let b: Arc<dyn ObjectStore> = mem();
    init_blake3(b.clone(), CHUNKER, 16 * 1024, false);
    b
}

fn writer(b: &Arc<dyn ObjectStore>) -> Writer {
    Repository::open_writer(b.clone(), "test").unwrap()
}

const JUNK: ContainerId = ContainerId(0xffff_ffff);

/// Container listings a lone writer's opening made.
fn container_lists_at_opening(b: &Arc<dyn ObjectStore>) -> (u64, Writer) {
    let counting = Arc::new(CountingStore::new(b.clone()));
    let w = Repository::open_writer(counting.clone(), "test").unwrap();
    (counting.counters_of(KeyKind::Container).lists, w)
}

#[test]
fn after_clean_writers_a_lone_writer_lists_no_container() {
    let b = repo();
    let mut w = writer(&b);
    let d = bytes(1, 60_000);
    let first = backup(&mut w, "a", &d).unwrap();
    let second = backup(&mut w, "b", &bytes(2, 60_000)).unwrap();
    w.close().unwrap();
    assert_eq!(sweep::marked(&*b).unwrap(), None);
    let (lists, mut w) = container_lists_at_opening(&b);
    assert_eq!(lists, 0, "nothing asked for a sweep");
    w.forget(&[second]).unwrap();
    w.gc(&GcOptions::default()).unwrap();
    drop(w);
    assert_eq!(sweep::marked(&*b).unwrap(), None, "a clean GC leaves none");
    let (lists, w) = container_lists_at_opening(&b);
    assert_eq!(lists, 0);
    assert!(w.find_leftovers().unwrap().is_empty());
    assert_eq!(restore(&w, first).unwrap(), d);
}

/// A reader that fails after `n` bytes: the backup stops with objects
/// already put and unpublished.
struct FailAfter(usize, Vec<u8>);

impl std::io::Read for FailAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0 >= self.1.len() {
            return Err(std::io::Error::other("source went away"));
        }
        let n = buf.len().min(self.1.len() - self.0);
        buf[..n].copy_from_slice(&self.1[self.0..self.0 + n]);
        self.0 += n;
        Ok(n)
    }
}

#[test]
fn a_failed_backup_marks_and_the_next_lone_writer_sweeps() {
    let b = repo();
    let mut w = writer(&b);
    let kept = bytes(3, 40_000);
    let id = backup(&mut w, "kept", &kept).unwrap();
    let listed = b.list(KeyKind::Container).unwrap();
    let opts =
        tessera_core::BackupOptions::new("broken", tessera_core::catalog::SourceKind::Stream);
    // Larger than the read-ahead, so containers are put before the
    // source fails.
    let mut source = FailAfter(0, bytes(4, 24 << 20));
    assert!(w.backup_reader(&opts, &mut source, &mut |_| {}).is_err());
    let unlisted = b.list(KeyKind::Container).unwrap().len() - listed.len();
    assert!(unlisted > 0, "the failed backup put containers");
    drop(w);
    let why = sweep::marked(&*b).unwrap().expect("marked");
    assert!(why.contains("unpublished"), "{why}");
    let (lists, w) = container_lists_at_opening(&b);
    assert!(lists > 0, "the marker asks for a sweep");
    assert_eq!(
        w.leftovers()
            .objects
            .iter()
            .filter(|k| k.starts_with("containers/"))
            .count(),
        unlisted
    );
    assert_eq!(b.list(KeyKind::Container).unwrap(), listed);
    assert_eq!(sweep::marked(&*b).unwrap(), None, "removed after the sweep");
    drop(w);
    let (lists, w) = container_lists_at_opening(&b);
    assert_eq!(lists, 0, "one sweep is enough");
    assert_eq!(restore(&w, id).unwrap(), kept);
}

/// A writer that died (its lock left, nothing said): breaking its lock
/// puts the marker; breaking a reader's does not (readers write nothing).
#[test]
fn breaking_a_writers_lock_marks_and_a_readers_does_not() {
    let b = repo();
    let reader = Repository::open_reader(b.clone(), "test").unwrap();
    std::mem::forget(reader);
    tessera_core::lock::break_lock(&*b).unwrap();
    assert_eq!(sweep::marked(&*b).unwrap(), None, "a reader's lock");

    let w = writer(&b);
    // An object of a mutation in flight when the process died.
    w.object_store()
        .put(&ObjectKey::Container(JUNK), b"x")
        .unwrap();
    std::mem::forget(w);
    tessera_core::lock::break_lock(&*b).unwrap();
    let why = sweep::marked(&*b).unwrap().expect("marked");
    assert!(why.contains("was broken"), "{why}");
    let w = writer(&b);
    assert!(w
        .leftovers()
        .objects
        .contains(&ObjectKey::Container(JUNK).name()));
    assert_eq!(sweep::marked(&*b).unwrap(), None);
    let report = w.check(&CheckOptions::default()).unwrap();
    assert!(report.ok() && report.leftovers.is_empty(), "{report:?}");
}

/// A writer beside others removes nothing, marker or not; the marker
/// stays for the writer that opens alone.
#[test]
fn only_a_writer_alone_sweeps() {
    let b = repo();
    let w1 = writer(&b);
    w1.object_store()
        .put(&ObjectKey::Container(JUNK), b"x")
        .unwrap();
    let w2 = writer(&b);
    assert!(w2.leftovers().objects.is_empty());
    drop(w1);
    assert!(sweep::marked(&*b).unwrap().is_some(), "w1 said it left one");
    let w3 = writer(&b);
    assert!(w3.leftovers().objects.is_empty(), "w2 still holds a lock");
    drop((w2, w3));
    assert!(sweep::marked(&*b).unwrap().is_some());
    let w = writer(&b);
    let containers: Vec<&String> = w
        .leftovers()
        .objects
        .iter()
        .filter(|k| k.starts_with("containers/"))
        .collect();
    assert_eq!(containers, [&ObjectKey::Container(JUNK).name()]);
}

/// `check --repair-leftovers` sweeps even when nothing asked for it (an
/// object an older build or an operator left).
#[test]
fn a_sweeping_writer_removes_unmarked_leftovers() {
    let b = repo();
    b.put(&ObjectKey::Container(JUNK), b"x").unwrap();
    let w = writer(&b);
    assert!(w.leftovers().objects.is_empty(), "unmarked: not swept");
    drop(w);
    let w = Repository::open_writer_sweeping(b.clone(), "repair", &|| unreachable!()).unwrap();
    assert_eq!(w.leftovers().objects, [ObjectKey::Container(JUNK).name()]);
    assert!(!b
        .list(KeyKind::Container)
        .unwrap()
        .contains(&ObjectKey::Container(JUNK)));
}
