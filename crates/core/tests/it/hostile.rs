//! Hostile or foreign repository objects: each gives one clear error naming
//! the object, never a panic and never wrong output.

use std::sync::Arc;
use tessera_core::backend::{Generation, ObjectKey};
use tessera_core::backend::{LocalStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::container::format::checksum;
use tessera_core::container::{ChunkKind, ContainerId};
use tessera_core::{BackupOptions, Error, InitOptions, Repository, RestoreOptions};

fn repo_with_backup() -> (
    tempfile::TempDir,
    Arc<dyn ObjectStore>,
    tessera_core::BackupId,
) {
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn ObjectStore> =
        Arc::new(LocalStore::create(&dir.path().join("r")).unwrap());
    Repository::init(backend.clone(), &InitOptions::default()).unwrap();
    let mut r = Repository::open_writer(backend.clone(), "t").unwrap();
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8)
        .collect();
    let rep = r
        .backup_reader(
            &BackupOptions::new("s", SourceKind::Stream),
            &mut &data[..],
            &mut |_| {},
        )
        .unwrap();
    r.close().unwrap();
    (dir, backend, rep.backup.id)
}

fn generation(b: &Arc<dyn ObjectStore>) -> u64 {
    Repository::open(b.clone()).unwrap().manifest().generation.0
}

/// The first container of `kind` the manifest lists.
fn first_container(r: &Repository, kind: ChunkKind) -> ContainerId {
    r.manifest()
        .containers
        .iter()
        .find(|c| c.kind == kind)
        .unwrap()
        .id
}

/// Rewrite an object's version field (u32 at offset 8) and fix its trailing
/// (or header) checksum so that only the version is foreign.
fn set_version(bytes: &mut [u8], version: u32, header_sum: bool) {
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    if header_sum {
        let s = checksum(&bytes[..112]);
        bytes[112..128].copy_from_slice(&s);
    } else {
        let n = bytes.len() - 16;
        let s = checksum(&bytes[..n]);
        bytes[n..].copy_from_slice(&s);
    }
}

/// Bytes of the plain frame before a whole object's own bytes in an
/// unencrypted repository (`mode | codec | plain_len`).
const PLAIN_FRAME: usize = 10;

#[test]
fn manifest_of_another_format_version_is_refused_by_name() {
    let (_d, b, _) = repo_with_backup();
    let key = ObjectKey::Manifest(Generation(generation(&b)));
    let mut m = b.get(&key).unwrap();
    // A manifest of the first format inside a current frame.
    set_version(&mut m[PLAIN_FRAME..], 1, false);
    b.put(&key, &m).unwrap();
    let err = Repository::open(b.clone()).err().unwrap();
    assert!(
        matches!(err, Error::UnsupportedVersion { found: 1, .. }),
        "{err}"
    );
    let msg = err.to_string();
    let supported = format!("version {}", tessera_core::catalog::VERSION);
    assert!(
        msg.contains(&key.to_string()) && msg.contains("version 1") && msg.contains(&supported),
        "{msg}"
    );
}

/// A repository of a format before sealing (versions 1 to 4: no config
/// object; its manifest says its version in plain bytes) fails at open with
/// one line naming both versions, whether opened for reading, writing or
/// checking.
#[test]
fn repository_of_an_unsealed_format_version_is_named() {
    for version in [1u32, 4] {
        let dir = tempfile::tempdir().unwrap();
        let b: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(&dir.path().join("r")).unwrap());
        // An old manifest: magic, version, JSON length, JSON, checksum.
        let json = br#"{"generation":1}"#;
        let mut m = b"TSRAMANI".to_vec();
        m.extend_from_slice(&version.to_le_bytes());
        m.extend_from_slice(&(json.len() as u64).to_le_bytes());
        m.extend_from_slice(json);
        let sum = checksum(&m);
        m.extend_from_slice(&sum);
        b.put(&ObjectKey::Manifest(Generation(1)), &m).unwrap();
        let location = b.location();
        let expect = format!(
            "repository at {location} has format version {version}; this build of Tessera reads version {}",
            tessera_core::catalog::VERSION
        );
        let err = Repository::open(b.clone()).err().unwrap();
        assert!(
            matches!(err, Error::UnsupportedVersion { found, .. } if found == version),
            "{err}"
        );
        assert_eq!(err.to_string(), expect);
        let err = Repository::open_writer(b.clone(), "t").err().unwrap();
        assert_eq!(err.to_string(), expect);
        let report = tessera_core::check::check_backend(b.clone(), &Default::default()).unwrap();
        assert_eq!(report.problems.len(), 1);
        assert_eq!(report.problems[0].problem, expect);
    }
}

#[test]
fn container_of_another_format_version_is_refused_by_name() {
    let (_d, b, id) = repo_with_backup();
    let r = Repository::open(b.clone()).unwrap();
    let c = first_container(&r, ChunkKind::Data);
    let mut obj = b.get(&ObjectKey::Container(c)).unwrap();
    set_version(&mut obj, 10, true);
    b.put(&ObjectKey::Container(c), &obj).unwrap();
    let entry = r.resolve(&id.to_string()).unwrap().clone();
    let err = r
        .restore_to(
            &entry,
            &mut Vec::new(),
            &RestoreOptions::default(),
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("container {c:016x}")) && err.contains("version 10"),
        "{err}"
    );
}

#[test]
fn garbage_and_truncated_manifests_are_corrupt_not_panics() {
    let (_d, b, _) = repo_with_backup();
    let key = ObjectKey::Manifest(Generation(generation(&b)));
    let good = b.get(&key).unwrap();
    for bad in [
        b"garbage".to_vec(),
        Vec::new(),
        good[..good.len() / 2].to_vec(),
        good[..20].to_vec(),
        {
            let mut v = good.clone();
            v[30] ^= 0xff;
            v
        },
    ] {
        b.put(&key, &bad).unwrap();
        let err = Repository::open(b.clone()).err().unwrap();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(&key.to_string()), "{err}");
    }
    b.put(&key, &good).unwrap();
    assert!(Repository::open(b).is_ok());
}

#[test]
fn garbage_index_segment_is_named() {
    let (_d, b, _) = repo_with_backup();
    let r = Repository::open(b.clone()).unwrap();
    let seg = r.manifest().index_segments[0].clone();
    let kept = r.kept_index_dir().expect("kept on a local store");
    drop(r);
    b.put(&seg, b"TSRAINDX\x01\0\0\0 not really").unwrap();
    // An opening whose kept table already holds the segment does not read
    // it (issue 36; `check` always does): one that has to read it names it.
    let _ = std::fs::remove_dir_all(&kept);
    let err = Repository::open(b.clone()).err().unwrap().to_string();
    assert!(err.contains(&seg.to_string()), "{err}");
}

#[test]
fn swapped_recipe_container_content_is_detected() {
    // A recipe container replaced by a valid *data* container: the kinds and
    // fingerprints disagree, and restore says so instead of emitting bytes.
    let (_d, b, id) = repo_with_backup();
    let r = Repository::open(b.clone()).unwrap();
    let rc = first_container(&r, ChunkKind::Recipe);
    let dc = first_container(&r, ChunkKind::Data);
    let obj = b.get(&ObjectKey::Container(dc)).unwrap();
    b.put(&ObjectKey::Container(rc), &obj).unwrap();
    let entry = r.resolve(&id.to_string()).unwrap().clone();
    let mut out = Vec::new();
    let err = r
        .restore_to(&entry, &mut out, &RestoreOptions::default(), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("container {rc:016x}")), "{err}");
    assert!(out.is_empty(), "no bytes before the recipe is verified");
}

/// The fuzz input `crash-5d35984c` (once in the repository root), inline.
/// Its byte 0 is even, so the `index_segment` target wrapped the other 48
/// bytes (one entry) in a valid envelope; the entry's reserved bytes are not
/// zero, which decoding used to accept, so the decoded segment did not
/// re-encode to itself. It must now be refused by name, and no other
/// parser may panic on it.
#[test]
fn fuzz_crash_5d35984c_index_segment_with_reserved_bytes() {
    use tessera_core::catalog::{Manifest, VERSION};
    use tessera_core::container::format::{self, checksum};
    use tessera_core::index::decode_segment;
    const CRASH: [u8; 49] = [
        0x00, 0x00, 0xcc, 0xcc, 0xcc, 0xcc, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xcc,
        0xcc, 0xcc, 0xcc, 0x34, 0xff, 0x00, 0xdb, 0xdb, 0xdb, 0x00, 0x00, 0x0e, 0x1e, 0xcc, 0x00,
        0x00, 0x00, 0x00, 0x0e, 0x0e, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0e, 0x00, 0x00, 0x0e, 0xcc,
        0xcc, 0x00, 0x00, 0x00,
    ];
    // As the index_segment target builds its segment.
    let (flag, body) = CRASH.split_first().unwrap();
    assert_eq!(flag & 1, 0);
    let mut seg = b"TSRAINDX".to_vec();
    seg.extend_from_slice(&1u32.to_le_bytes());
    seg.extend_from_slice(&((body.len() / 48) as u64).to_le_bytes());
    seg.extend_from_slice(body);
    let sum = checksum(&seg);
    seg.extend_from_slice(&sum);
    let err = decode_segment(&seg, "fuzz").unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt fuzz: reserved bytes of an entry are not zero"
    );
    assert!(decode_segment(&CRASH, "fuzz").is_err());

    // The other parsers refuse it without panicking.
    let mut man = b"TSRAMANI".to_vec();
    man.extend_from_slice(&VERSION.to_le_bytes());
    man.extend_from_slice(&(body.len() as u64).to_le_bytes());
    man.extend_from_slice(body);
    let sum = checksum(&man);
    man.extend_from_slice(&sum);
    assert!(Manifest::decode(&man, "fuzz").is_err());
    assert!(Manifest::decode(&CRASH, "fuzz").is_err());
    assert!(format::decode(ContainerId(7), &CRASH, &Default::default()).is_err());
    assert!(format::decode_salvage(ContainerId(7), &CRASH, &Default::default()).is_err());
    assert!(format::decode_header(ContainerId(7), &CRASH).is_err());
    for part in CRASH.split(|&b| b == b'|').filter(|p| !p.is_empty()) {
        assert!(tessera_core::recipe::decode(part, "fuzz").is_err());
    }
    let _ = tessera_core::trace::read_trace(&CRASH[..], "fuzz.trace".into())
        .take(1000)
        .count();
    let dir = tempfile::tempdir().unwrap();
    let mut input = &CRASH[..];
    assert!(tessera_core::archive::extract(&mut input, &dir.path().join("t")).is_err());
}

/// A repository of the previous sealed format (version 7, whose config
/// could only name XChaCha20-Poly1305) fails at open with one line naming
/// its version and this build's, for reading, writing and checking.
#[test]
fn repository_of_the_previous_sealed_version_is_named() {
    let (_d, b, _) = repo_with_backup();
    let cfg = String::from_utf8(b.get(&ObjectKey::Config).unwrap()).unwrap();
    let current = format!("\"version\": {}", tessera_core::catalog::VERSION);
    assert!(cfg.contains(&current), "{cfg}");
    let old = cfg.replace(&current, "\"version\": 7");
    b.put(&ObjectKey::Config, old.as_bytes()).unwrap();
    let expect = format!(
        "repository at {} has format version 7; this build of Tessera reads version {}",
        b.location(),
        tessera_core::catalog::VERSION
    );
    let err = Repository::open(b.clone()).err().unwrap();
    assert!(
        matches!(err, Error::UnsupportedVersion { found: 7, .. }),
        "{err}"
    );
    assert_eq!(err.to_string(), expect);
    let err = Repository::open_writer(b.clone(), "t").err().unwrap();
    assert_eq!(err.to_string(), expect);
    let report = tessera_core::check::check_backend(b.clone(), &Default::default()).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].problem, expect);
}

/// Two backups' worth of different bytes.
fn stream(seed: u32) -> Vec<u8> {
    (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 9) as u8)
        .collect()
}

/// A writer that keeps a local repository open while a script removes the
/// repository's objects (`rm -rf`, as a lab stream's cleanup could):
/// before, the next backup made the directories again, published on top
/// of the lost generation and reported success, and the loss surfaced
/// only at the next read of an old container (a GC's mark: "missing
/// object container … (needed by backup 1)"). Now that backup fails and
/// says what happened.
#[test]
fn objects_removed_under_an_open_writer_fail_the_next_publish() {
    for whole_root in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        let backend: Arc<dyn ObjectStore> = Arc::new(LocalStore::create(&root).unwrap());
        Repository::init(backend.clone(), &InitOptions::default()).unwrap();
        let mut w = Repository::open_writer(backend.clone(), "t").unwrap();
        let opts = BackupOptions::new("s", SourceKind::Stream);
        w.backup_reader(&opts, &mut &stream(1)[..], &mut |_| {})
            .unwrap();
        if whole_root {
            std::fs::remove_dir_all(&root).unwrap();
        } else {
            for e in std::fs::read_dir(&root).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).unwrap();
                } else {
                    std::fs::remove_file(&p).unwrap();
                }
            }
        }
        let err = w
            .backup_reader(&opts, &mut &stream(2)[..], &mut |_| {})
            .unwrap_err()
            .to_string();
        let said = if whole_root {
            "was removed while open"
        } else {
            "vanished from the store: something outside Tessera removed"
        };
        assert!(err.contains(said), "whole root {whole_root}: {err}");
        assert_eq!(root.exists(), !whole_root, "the root is not made again");
    }
}
