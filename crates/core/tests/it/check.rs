//! `check`: every kind of damage is found, attributed to the right object,
//! backups and files, and a healthy repository passes.

use std::path::Path;
use std::sync::Arc;
use tessera_core::backend::{KeyKind, ObjectKey};
use tessera_core::backend::{LocalStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::check::{check_backend, CheckOptions, CheckReport, ReadData};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::{ChunkKind, ContainerId};
use tessera_core::BackupId;
use tessera_core::{BackupOptions, Repository};

use crate::common;
use common::{bytes, open_new};

struct Fixture {
    _dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    backend: Arc<dyn ObjectStore>,
    /// Backup of the tree (id 1) and of a stream sharing nothing with it (id 2).
    tree: BackupId,
    stream: BackupId,
}

/// A repository with a directory backup (a small file, then a big one) and
/// an unrelated stream backup, in 64 KiB containers.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("docs")).unwrap();
    std::fs::write(src.join("docs/a-small.txt"), b"hello").unwrap();
    std::fs::write(src.join("z-big.bin"), bytes(1, 600_000)).unwrap();
    let repo = dir.path().join("repo");
    let backend: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(&repo).unwrap());
    let mut r = open_new(
        backend.clone(),
        ChunkerConfig::Fastcdc {
            min: 1024,
            avg: 4096,
            max: 16384,
        },
        64 * 1024,
        false,
    );
    let (t, _) = r
        .backup_tree(
            &BackupOptions::new("src", SourceKind::Tree),
            &src,
            &mut |_| {},
        )
        .unwrap();
    let s = r
        .backup_reader(
            &BackupOptions::new("s", SourceKind::Stream),
            &mut &bytes(2, 200_000)[..],
            &mut |_| {},
        )
        .unwrap();
    r.close().unwrap();
    Fixture {
        _dir: dir,
        repo,
        backend,
        tree: t.backup.id,
        stream: s.backup.id,
    }
}

fn check(f: &Fixture, read_data: ReadData) -> CheckReport {
    check_backend(f.backend.clone(), &CheckOptions { read_data }).unwrap()
}

/// Data containers in id order, with the backups whose chunks they hold.
fn data_containers(f: &Fixture) -> Vec<ContainerId> {
    let r = Repository::open(f.backend.clone()).unwrap();
    let mut ids: Vec<_> = r
        .manifest()
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

fn recipe_container(f: &Fixture) -> ContainerId {
    let r = Repository::open(f.backend.clone()).unwrap();
    r.manifest()
        .containers
        .iter()
        .find(|c| c.kind == ChunkKind::Recipe)
        .unwrap()
        .id
}

/// The tree backup's last data container: it holds the tail of z-big.bin.
fn last_tree_container(f: &Fixture) -> ContainerId {
    *data_containers(f)
        .iter()
        .filter(|&&c| c < recipe_container(f))
        .max()
        .unwrap()
}

fn path(f: &Fixture, id: ContainerId) -> std::path::PathBuf {
    f.repo.join(ObjectKey::Container(id).to_string())
}

fn flip(p: &Path, at: usize) {
    let mut b = std::fs::read(p).unwrap();
    b[at] ^= 0x40;
    std::fs::write(p, b).unwrap();
}

#[test]
fn healthy_repository_passes_every_level() {
    let f = fixture();
    for level in [
        ReadData::None,
        ReadData::All,
        ReadData::Subset { n: 2, m: 3 },
    ] {
        let r = check(&f, level);
        assert!(r.ok(), "{:?}", r.problems);
        assert_eq!(r.backups, 2);
        assert!(r.recipe_chunks_checked >= 2);
        assert!(r.leftovers.is_empty());
    }
    let all = check(&f, ReadData::All);
    let n = data_containers(&f).len() as u64;
    assert_eq!(all.data_containers_read, n);
    // The three subsets together read every data container exactly once.
    let parts: u64 = (1..=3)
        .map(|i| check(&f, ReadData::Subset { n: i, m: 3 }).data_containers_read)
        .sum();
    assert_eq!(parts, n);
    assert_eq!(check(&f, ReadData::None).data_containers_read, 0);
}

#[test]
fn flipped_data_byte_is_found_by_read_data_with_backup_and_file() {
    let f = fixture();
    // The tree backup's last data container holds the tail of z-big.bin;
    // its first chunk starts right after the 128-byte header.
    let tree_last = last_tree_container(&f);
    flip(&path(&f, tree_last), 128 + 100);
    assert!(
        check(&f, ReadData::None).ok(),
        "metadata-only check cannot see data"
    );
    let r = check(&f, ReadData::All);
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    let p = &r.problems[0];
    assert_eq!(p.object, format!("container {tree_last:016x}"));
    assert!(
        p.problem.contains("do not match their fingerprints"),
        "{p:?}"
    );
    assert_eq!(p.backups, vec![f.tree]);
    assert_eq!(p.files.len(), 1, "{p:?}");
    assert!(p.files[0].ends_with("z-big.bin"), "{p:?}");
}

#[test]
fn flipped_metadata_byte_is_found_without_reading_data() {
    let f = fixture();
    let c = data_containers(&f)[0];
    let p = path(&f, c);
    let len = std::fs::metadata(&p).unwrap().len() as usize;
    flip(&p, len - 10);
    let r = check(&f, ReadData::None);
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    assert_eq!(r.problems[0].object, format!("container {c:016x}"));
    assert!(r.problems[0].problem.contains("checksum"), "{r:?}");
    assert_eq!(r.problems[0].backups, vec![f.tree]);
}

#[test]
fn flipped_recipe_byte_names_the_recipe_container_and_its_backups() {
    let f = fixture();
    let c = recipe_container(&f);
    flip(&path(&f, c), 128 + 3);
    let r = check(&f, ReadData::None);
    assert!(!r.ok());
    let p = r
        .problems
        .iter()
        .find(|p| p.object == format!("container {c:016x}"))
        .unwrap_or_else(|| panic!("{:?}", r.problems));
    assert!(!p.backups.is_empty(), "{p:?}");
    assert!(p.backups.iter().all(|b| [f.tree, f.stream].contains(b)));
}

#[test]
fn truncated_and_deleted_containers_are_named_with_their_backups() {
    let f = fixture();
    let ids = data_containers(&f);
    let (tree_c, stream_c) = (ids[0], *ids.last().unwrap());
    let p = path(&f, tree_c);
    let b = std::fs::read(&p).unwrap();
    std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    std::fs::remove_file(path(&f, stream_c)).unwrap();
    let r = check(&f, ReadData::None);
    assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
    let by_obj = |id: ContainerId| {
        r.problems
            .iter()
            .find(|p| p.object == format!("container {id:016x}"))
            .unwrap()
    };
    assert_eq!(by_obj(tree_c).backups, vec![f.tree]);
    let gone = by_obj(stream_c);
    assert_eq!(gone.backups, vec![f.stream]);
    assert_eq!(gone.problem, "missing");
}

#[test]
fn deleted_manifest_is_reported_not_mistaken_for_no_repository() {
    let f = fixture();
    let r = Repository::open(f.backend.clone()).unwrap();
    let g = r.manifest().generation;
    drop(r);
    std::fs::remove_file(f.repo.join(ObjectKey::Manifest(g).to_string())).unwrap();
    let r = check(&f, ReadData::None);
    assert_eq!(r.problems.len(), 1);
    assert_eq!(r.problems[0].object, "manifest");
    assert!(r.problems[0].problem.contains("no manifest generation"));
    // An empty directory is simply no repository.
    let empty = tempfile::tempdir().unwrap();
    let b: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(empty.path()).unwrap());
    assert!(check_backend(b, &CheckOptions::default()).is_err());
}

#[test]
fn leftovers_are_reported_and_removed_by_the_next_writer_only() {
    let f = fixture();
    let listed: Vec<ObjectKey> = f.backend.list(KeyKind::Container).unwrap();
    f.backend
        .put(&ObjectKey::Container(ContainerId(0xfffff)), b"junk")
        .unwrap();
    let r = check(&f, ReadData::None);
    assert!(r.ok(), "leftovers are not damage");
    assert_eq!(r.leftovers, vec!["containers/00000000000fffff".to_string()]);
    // Nothing asked for a sweep (the junk was not put by a writer): an
    // ordinary writer leaves it, the repairing one removes it.
    let w = Repository::open_writer(f.backend.clone(), "test").unwrap();
    assert!(w.leftovers().objects.is_empty());
    drop(w);
    let w =
        Repository::open_writer_sweeping(f.backend.clone(), "repair", &|| unreachable!()).unwrap();
    assert_eq!(w.leftovers().objects, r.leftovers);
    w.close().unwrap();
    assert_eq!(f.backend.list(KeyKind::Container).unwrap(), listed);
    assert!(check(&f, ReadData::All).ok());
}

#[test]
fn restore_of_damaged_backup_names_backup_offset_and_file_or_skips_it() {
    let f = fixture();
    let tree_last = last_tree_container(&f);
    flip(&path(&f, tree_last), 128 + 100);
    let r = Repository::open(f.backend.clone()).unwrap();
    let b = r.resolve(&f.tree.to_string()).unwrap().clone();
    let out = f.repo.parent().unwrap().join("out");
    let err = r
        .restore_into(
            &b,
            &out,
            &tessera_core::RestoreOptions::default(),
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("container {tree_last:016x}"))
            && err.contains(&format!("backup {}", f.tree))
            && err.contains("at offset")
            && err.contains("z-big.bin")
            && err.contains("--skip-damaged"),
        "{err}"
    );
    // Everything else is restored; the damage is listed.
    let out2 = f.repo.parent().unwrap().join("out2");
    let (rep, ext) = r.restore_damaged_into(&b, &out2, &mut |_| {}).unwrap();
    assert_eq!(rep.files.len(), 1, "{rep:?}");
    assert!(rep.files[0].ends_with("z-big.bin"));
    assert_eq!(rep.damaged.len(), 1);
    assert!(rep.damaged_bytes > 0 && rep.damaged_bytes < 20_000);
    assert_eq!(rep.restored_bytes, b.logical_bytes);
    assert!(ext.refused.is_empty());
    assert_eq!(
        std::fs::read(out2.join("docs/a-small.txt")).unwrap(),
        b"hello"
    );
    // The damaged file has the right size, intact bytes everywhere but the
    // damaged range, and zeros there.
    let big = std::fs::read(out2.join("z-big.bin")).unwrap();
    let want = bytes(1, 600_000);
    assert_eq!(big.len(), want.len());
    let differing = big.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert!(differing > 0 && (differing as u64) <= rep.damaged_bytes);
    // The stream backup is untouched and restores normally.
    let s = r.resolve(&f.stream.to_string()).unwrap().clone();
    let mut v = Vec::new();
    r.restore_to(
        &s,
        &mut v,
        &tessera_core::RestoreOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(v, bytes(2, 200_000));
    let rep = r
        .restore_damaged_to(&s, &mut Vec::new(), &mut |_| {})
        .unwrap();
    assert!(rep.damaged.is_empty() && rep.files.is_empty());
}
