//! Compression and encryption (issue 12): round trips over every setting,
//! keyed fingerprints, passwords and key slots, GC moving stored bytes as
//! they are, and tampering of every object kind reported by `check`.

use crate::common::{backup, bytes, mem, restore};
use std::sync::Arc;
use tessera_core::backend::{list_all, KeyKind, MemoryStore, ObjectKey, ObjectStore};
use tessera_core::check::{check_backend_with, CheckOptions, CheckReport, ReadData};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::ChunkKind;
use tessera_core::gc::GcOptions;
use tessera_core::{
    CipherKind, Compression, Error, HashAlgo, InitOptions, KdfParams, Password, Repository,
    SealOptions, Writer,
};

const PW: &str = "correct horse battery staple";

fn pw() -> Password {
    Password::new(PW)
}

fn init(backend: Arc<dyn ObjectStore>, hash: HashAlgo, compression: Compression, encrypt: bool) {
    init_cipher(
        backend,
        hash,
        compression,
        encrypt.then(CipherKind::default),
    )
}

fn init_cipher(
    backend: Arc<dyn ObjectStore>,
    hash: HashAlgo,
    compression: Compression,
    cipher: Option<CipherKind>,
) {
    let opts = InitOptions {
        hash,
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
        encryption: cipher.map(|_| (pw(), KdfParams::INSECURE_FAST)),
        cipher: cipher.unwrap_or_default(),
    };
    Repository::init_sealed(backend, &opts, &seal).unwrap();
}

fn writer(backend: Arc<dyn ObjectStore>) -> Writer {
    Repository::open_writer_with(backend, "test", &|| Ok(pw())).unwrap()
}

fn reader(backend: Arc<dyn ObjectStore>) -> Repository {
    Repository::open_with(backend, &|| Ok(pw())).unwrap()
}

/// Text-like bytes (compressible) with a random run in the middle.
fn mixed(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        &b"backup "[..],
        b"chunk ",
        b"container ",
        b"recipe ",
        b"seal ",
    ];
    let mut out = Vec::with_capacity(len);
    let mut x = seed | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 5) as usize]);
    }
    out.truncate(len);
    let r = bytes(seed, len / 4);
    out[len / 3..len / 3 + r.len()].copy_from_slice(&r);
    out
}

fn check_all(backend: Arc<dyn ObjectStore>) -> CheckReport {
    check_backend_with(
        backend,
        &CheckOptions {
            read_data: ReadData::All,
        },
        &|| Ok(pw()),
    )
    .unwrap()
}

/// Every compression setting × encryption on/off × fingerprint algorithm:
/// backups restore byte for byte, `check --read-data` is clean, GC keeps
/// the retained backup restorable, and compression shrinks the store.
#[test]
fn round_trips_over_every_setting() {
    let v1 = mixed(1, 300_000);
    let mut v2 = v1.clone();
    v2.splice(100_000..100_000, mixed(2, 50_000));
    let mut settings = Compression::NAMED.to_vec();
    settings.push(Compression::Level(22));
    for hash in [HashAlgo::Blake3, HashAlgo::Sha1, HashAlgo::Sha256] {
        let mut plain_size = 0;
        for compression in settings.iter().copied() {
            for cipher in [
                None,
                Some(CipherKind::Xaes256Gcm),
                Some(CipherKind::Xchacha20Poly1305),
            ] {
                let encrypt = cipher.is_some();
                let what = format!("{hash:?} {compression} cipher={cipher:?}");
                let m = mem();
                init_cipher(m.clone(), hash, compression, cipher);
                let mut w = writer(m.clone());
                let a = backup(&mut w, "a", &v1).unwrap();
                let b = backup(&mut w, "b", &v2).unwrap();
                assert_eq!(restore(&w, a).unwrap(), v1, "{what}");
                assert_eq!(w.fingerprinter().is_keyed(), encrypt);
                w.forget(&[a]).unwrap();
                w.gc(&GcOptions::default()).unwrap();
                w.close().unwrap();
                let r = reader(m.clone());
                assert_eq!(restore(&r, b).unwrap(), v2, "{what}");
                let report = check_all(m.clone());
                assert!(report.ok(), "{what}: {:?}", report.problems);
                assert!(report.chunks_rehashed > 0);
                let size = m.total_bytes();
                if compression == Compression::Off && !encrypt {
                    plain_size = size;
                } else if compression != Compression::Off {
                    assert!(size < plain_size * 3 / 4, "{what}: {size} vs {plain_size}");
                }
            }
        }
    }
}

/// `--compression` per backup: a backup's chunks follow its own setting,
/// and both backups restore.
#[test]
fn compression_per_backup() {
    let m = mem();
    init(m.clone(), HashAlgo::Blake3, Compression::Off, true);
    let mut w = writer(m.clone());
    let data = mixed(3, 200_000);
    let a = backup(&mut w, "a", &data).unwrap();
    let after_a = m.total_bytes();
    w.set_compression(Compression::Max);
    let other = mixed(4, 200_000);
    let b = backup(&mut w, "b", &other).unwrap();
    let grew_b = m.total_bytes() - after_a;
    assert!(grew_b < after_a / 2, "{grew_b} vs {after_a}");
    assert_eq!(restore(&w, a).unwrap(), data);
    assert_eq!(restore(&w, b).unwrap(), other);
}

/// In an encrypted repository no stored byte reveals content: no plain run
/// of the data appears in any object, fingerprints are keyed (two
/// repositories of the same data share none), and a plain repository's
/// fingerprints are the plain digests.
#[test]
fn encrypted_objects_and_fingerprints_reveal_nothing() {
    let marker = b"TOP-SECRET-MARKER-0123456789".repeat(2000);
    let mut fps = Vec::new();
    for _ in 0..2 {
        let m = mem();
        init(m.clone(), HashAlgo::Blake3, Compression::Off, true);
        let mut w = writer(m.clone());
        backup(&mut w, "secret-name", &marker).unwrap();
        w.close().unwrap();
        for key in list_all(&*m).unwrap() {
            let obj = m.get(&key).unwrap();
            assert!(
                !obj.windows(18).any(|w| w == b"TOP-SECRET-MARKER-"),
                "{key} holds plain data"
            );
            assert!(
                !obj.windows(11).any(|w| w == b"secret-name"),
                "{key} holds a backup name"
            );
        }
        let r = reader(m.clone());
        let data_fps: Vec<_> = r.index().unwrap().entries().map(|e| e.fp).collect();
        assert!(!data_fps.is_empty());
        let chunk = &marker[..];
        assert!(!data_fps.contains(&HashAlgo::Blake3.hash(chunk)));
        fps.push(data_fps);
    }
    assert!(fps[0].iter().all(|fp| !fps[1].contains(fp)));
}

/// A wrong or missing password is one clear line naming the repository;
/// reading the key slots costs no more than one derivation per slot.
#[test]
fn wrong_or_missing_password_is_one_clear_line() {
    let m = mem();
    init(m.clone(), HashAlgo::Blake3, Compression::Auto, true);
    let err = Repository::open_with(m.clone(), &|| Ok(Password::new("nope")))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Key(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "wrong password: it opens none of the 1 key slots of the repository at {}",
            m.location()
        )
    );
    assert!(!err.to_string().contains("nope"));
    let err = Repository::open(m.clone()).err().unwrap().to_string();
    assert!(
        err.starts_with("the repository is encrypted: give its password"),
        "{err}"
    );
    let err = Repository::open_writer(m.clone(), "t")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("encrypted"), "{err}");
    // An unencrypted repository never asks.
    let p = mem();
    init(p.clone(), HashAlgo::Blake3, Compression::Auto, false);
    Repository::open_with(p, &|| panic!("asked for a password")).unwrap();
}

/// Key slots: add, list, remove and passwd keep every backup readable;
/// the last slot and the slot in use are refused; a removed password no
/// longer opens the repository.
#[test]
fn key_slots_keep_every_backup_readable() {
    let m = mem();
    init(m.clone(), HashAlgo::Sha256, Compression::Auto, true);
    let mut w = writer(m.clone());
    let data = mixed(5, 100_000);
    let id = backup(&mut w, "a", &data).unwrap();
    let second = Password::new("second");
    let slot2 = w.add_key(&second, KdfParams::INSECURE_FAST).unwrap();
    assert_eq!(slot2, 2);
    assert_eq!(w.key_slots().unwrap().len(), 2);
    assert_eq!(w.key_slot_used(), Some(1));
    let err = w.remove_key(1).unwrap_err().to_string();
    assert!(err.contains("the one this password opened"), "{err}");
    w.close().unwrap();
    // The second password opens it and can remove the first slot.
    let open2 = |p: &Password| {
        let p = p.clone();
        Repository::open_writer_with(m.clone(), "t", &move || Ok(p.clone()))
    };
    let mut w2 = open2(&second).unwrap();
    assert_eq!(w2.key_slot_used(), Some(2));
    assert_eq!(restore(&w2, id).unwrap(), data);
    w2.remove_key(1).unwrap();
    let err = w2.remove_key(2).unwrap_err().to_string();
    assert!(err.contains("the one this password opened"), "{err}");
    // passwd: a new slot replaces the one in use.
    let third = Password::new("third");
    let slot3 = w2
        .change_password(&third, KdfParams::INSECURE_FAST)
        .unwrap();
    assert_eq!(
        w2.key_slots()
            .unwrap()
            .iter()
            .map(|s| s.id)
            .collect::<Vec<_>>(),
        [slot3]
    );
    w2.close().unwrap();
    assert!(Repository::open_with(m.clone(), &|| Ok(pw())).is_err());
    assert!(open2(&second).is_err());
    let w3 = open2(&third).unwrap();
    assert_eq!(restore(&w3, id).unwrap(), data);
    assert!(w3.key_slots().unwrap()[0].params == KdfParams::INSECURE_FAST);
}

/// GC's copy-forward moves a frame's stored bytes as they are when all its
/// chunks live: such a frame's sealed bytes (random nonce included) are
/// identical in its new container, so nothing was decompressed or
/// re-encrypted. Only the frame holding the live/dead boundary, and a frame
/// a new container's end would cut, are framed again.
#[test]
fn gc_moves_stored_bytes_without_resealing() {
    let m = mem();
    init(m.clone(), HashAlgo::Blake3, Compression::Better, true);
    let mut w = writer(m.clone());
    let keep = mixed(6, 150_000);
    let gone = mixed(7, 150_000);
    let mut both = keep.clone();
    both.extend_from_slice(&gone);
    let a = backup(&mut w, "both", &both).unwrap();
    let b = backup(&mut w, "keep", &keep).unwrap();
    let stored_before = stored_frames(&w);
    w.forget(&[a]).unwrap();
    let report = w.gc(&GcOptions::default()).unwrap();
    assert!(report.moved_chunks > 0);
    let stored_after = stored_frames(&w);
    let (mut whole, mut reframed) = (0, 0);
    for (fps, bytes) in &stored_after {
        match stored_before.iter().find(|(f, _)| f == fps) {
            Some((_, before)) => {
                assert_eq!(bytes, before, "frame {fps:?} was resealed");
                whole += 1;
            }
            None => reframed += 1,
        }
    }
    assert!(whole > 0, "frames moved whole");
    let cut = report.produced_containers as usize;
    assert!(reframed <= 1 + cut, "{reframed} frames made anew");
    assert_eq!(restore(&w, b).unwrap(), keep);
}

/// (fingerprints, stored bytes) of every frame of data chunks the
/// repository holds.
fn stored_frames(r: &Repository) -> Vec<(Vec<tessera_core::Fingerprint>, Vec<u8>)> {
    let mut out = Vec::new();
    for c in &r.manifest().containers {
        if c.kind == ChunkKind::Data {
            let cont = r.store().read_stored(c.id).unwrap();
            for f in tessera_core::container::frames(&cont.meta) {
                let fps = cont.meta[f.clone()].iter().map(|m| m.fp).collect();
                out.push((fps, cont.stored(&cont.meta[f.start]).to_vec()));
            }
        }
    }
    out
}

/// An encrypted repository with two backups, several containers of each
/// kind and several index segments.
fn tamper_repo() -> Arc<MemoryStore> {
    let m = mem();
    init(m.clone(), HashAlgo::Blake3, Compression::Auto, true);
    let mut w = writer(m.clone());
    backup(&mut w, "a", &mixed(8, 400_000)).unwrap();
    backup(&mut w, "b", &mixed(9, 400_000)).unwrap();
    w.close().unwrap();
    m
}

fn keys_of(m: &MemoryStore, kind: KeyKind) -> Vec<ObjectKey> {
    m.list(kind).unwrap()
}

fn flip(m: &MemoryStore, key: &ObjectKey, at: usize) {
    let mut b = m.get(key).unwrap();
    let at = at.min(b.len() - 1);
    b[at] ^= 0x10;
    m.put(key, &b).unwrap();
}

fn report_names(r: &CheckReport, key: &ObjectKey) -> bool {
    let name = tessera_core::ObjectRef::Object(key.clone()).to_string();
    r.problems.iter().any(|p| p.object == name)
}

/// A flipped byte in a data container, a recipe container and an index
/// segment at once (each checksum left wrong or not): `check --read-data`
/// reports each of them, not just the first.
#[test]
fn check_reports_every_tampered_object() {
    for fix_checksums in [false, true] {
        let m = tamper_repo();
        let r = reader(m.clone());
        let data = r
            .manifest()
            .containers
            .iter()
            .find(|c| c.kind == ChunkKind::Data)
            .unwrap()
            .id;
        let recipe = r
            .manifest()
            .containers
            .iter()
            .find(|c| c.kind == ChunkKind::Recipe)
            .unwrap()
            .id;
        let seg = r.manifest().index_segments[0].clone();
        drop(r);
        let (dk, rk) = (ObjectKey::Container(data), ObjectKey::Container(recipe));
        // In the data section (past the header), so the header still reads.
        flip(&m, &dk, 300);
        flip(&m, &rk, 200);
        flip(&m, &seg, 40);
        if fix_checksums {
            for k in [&dk, &rk] {
                refresh_container_checksums(&m, k);
            }
        }
        let report = check_all(m.clone());
        for k in [&dk, &rk, &seg] {
            assert!(
                report_names(&report, k),
                "{k} not reported: {:#?}",
                report.problems
            );
        }
    }
}

/// A restore under a memory ceiling below one container (each container
/// read, held as stored and its frames opened one at a time) restores an
/// encrypted, compressed backup byte for byte under every cache; with the
/// default ceiling the reads are the cache policy's alone.
#[test]
fn restore_under_a_ceiling_below_one_container_is_exact() {
    // Frames of 8 KiB in 64 KiB containers: several frames a container.
    let m = mem();
    let opts = InitOptions {
        hash: HashAlgo::Blake3,
        chunker: ChunkerConfig::Fastcdc {
            min: 1024,
            avg: 4096,
            max: 16384,
        },
        container_size: 64 << 10,
        frame_size: 8 << 10,
        trace: false,
    };
    let seal = SealOptions {
        compression: Compression::Auto,
        encryption: Some((pw(), KdfParams::INSECURE_FAST)),
        cipher: CipherKind::default(),
    };
    Repository::init_sealed(m.clone(), &opts, &seal).unwrap();
    let mut w = writer(m.clone());
    backup(&mut w, "a", &mixed(8, 400_000)).unwrap();
    backup(&mut w, "b", &mixed(9, 400_000)).unwrap();
    w.close().unwrap();
    let r = reader(m.clone());
    let frames: usize = stored_frames(&r).len();
    let containers = r
        .manifest()
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .count();
    assert!(
        containers >= 4 && frames > containers,
        "{containers} containers, {frames} frames"
    );
    for id in r
        .manifest()
        .backups
        .iter()
        .map(|b| b.id)
        .collect::<Vec<_>>()
    {
        let b = r.manifest().backup(id).unwrap().clone();
        let want = if id == r.manifest().backups[0].id {
            mixed(8, 400_000)
        } else {
            mixed(9, 400_000)
        };
        for cache in ["lru:1", "lru:32", "opt:2", "faa:2", "faa:16"] {
            let spec = tessera_core::restore::CacheSpec::parse(cache).unwrap();
            let mut reads = Vec::new();
            for memory in [1, 20_000, tessera_core::restore::DEFAULT_MEMORY] {
                let opts = tessera_core::RestoreOptions {
                    cache: spec,
                    memory,
                };
                let mut out = Vec::new();
                let rep = r.restore_to(&b, &mut out, &opts, &mut |_| {}).unwrap();
                assert!(
                    out == want,
                    "backup {id} {cache} memory {memory}: bytes differ"
                );
                reads.push(rep.data_containers_read);
            }
            // A tighter ceiling never reads less than the policy; at the
            // default it reads what the policy does (a sequential restore
            // with this cache reads each container once per miss).
            assert!(
                reads[0] >= reads[2] && reads[1] >= reads[2],
                "{cache}: {reads:?}"
            );
        }
    }
}

/// A data container whose frame bytes were changed, with its checksums
/// made to agree again (so the container read passes and only
/// authentication can tell), fails a restore when that frame is opened,
/// naming the container and the chunk; so does `check --read-data`.
#[test]
fn a_tampered_frame_fails_the_restore_when_opened() {
    let m = tamper_repo();
    let r = reader(m.clone());
    let data = r
        .manifest()
        .containers
        .iter()
        .find(|c| c.kind == ChunkKind::Data)
        .unwrap()
        .id;
    let b = r.manifest().backups[0].clone();
    drop(r);
    let key = ObjectKey::Container(data);
    flip(&m, &key, 300);
    refresh_container_checksums(&m, &key);
    let r = reader(m.clone());
    for memory in [1, tessera_core::restore::DEFAULT_MEMORY] {
        let opts = tessera_core::RestoreOptions {
            memory,
            ..Default::default()
        };
        let err = r
            .restore_to(&b, &mut Vec::new(), &opts, &mut |_| {})
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("{data:016x}")) && msg.contains("does not authenticate"),
            "{msg}"
        );
    }
    assert!(report_names(&check_all(m.clone()), &key));
}

/// What a forger with write access would do: make the XXH3 checksums agree
/// again, so only authentication can catch the change.
fn refresh_container_checksums(m: &MemoryStore, key: &ObjectKey) {
    use tessera_core::container::format::{checksum, HEADER_LEN};
    let mut b = m.get(key).unwrap();
    let data_len = u64::from_le_bytes(b[32..40].try_into().unwrap()) as usize;
    let d = checksum(&b[HEADER_LEN..HEADER_LEN + data_len]);
    let mm = checksum(&b[HEADER_LEN + data_len..]);
    b[64..80].copy_from_slice(&d);
    b[80..96].copy_from_slice(&mm);
    let h = checksum(&b[..112]);
    b[112..128].copy_from_slice(&h);
    m.put(key, &b).unwrap();
}

/// Two data containers swapped, two index segments swapped and one
/// container truncated: each is reported, by name.
#[test]
fn swapped_and_truncated_objects_are_reported() {
    let m = tamper_repo();
    let r = reader(m.clone());
    let data: Vec<_> = r
        .manifest()
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| ObjectKey::Container(c.id))
        .collect();
    let segs = r.manifest().index_segments.clone();
    assert!(data.len() >= 3 && segs.len() >= 2);
    drop(r);
    let swap = |a: &ObjectKey, b: &ObjectKey| {
        let (x, y) = (m.get(a).unwrap(), m.get(b).unwrap());
        m.put(a, &y).unwrap();
        m.put(b, &x).unwrap();
    };
    swap(&data[0], &data[1]);
    swap(&segs[0], &segs[1]);
    let t = m.get(&data[2]).unwrap();
    m.put(&data[2], &t[..t.len() - 7]).unwrap();
    let report = check_all(m.clone());
    for k in data[..3].iter().chain(&segs[..2]) {
        assert!(
            report_names(&report, k),
            "{k} not reported: {:#?}",
            report.problems
        );
    }
}

/// A replayed manifest: an old generation put back under the newest
/// generation's name (a rollback that also hides the newest) is refused by
/// name, at open and by `check`; a flipped manifest byte too.
#[test]
fn replayed_or_flipped_manifest_is_refused_by_name() {
    let m = mem();
    init(m.clone(), HashAlgo::Blake3, Compression::Auto, true);
    let old_key = keys_of(&m, KeyKind::Manifest)[0].clone();
    let old = m.get(&old_key).unwrap();
    let mut w = writer(m.clone());
    backup(&mut w, "a", &mixed(10, 50_000)).unwrap();
    w.close().unwrap();
    let new_key = keys_of(&m, KeyKind::Manifest).pop().unwrap();
    assert_ne!(new_key, old_key);
    let good = m.get(&new_key).unwrap();
    m.put(&new_key, &old).unwrap();
    let err = Repository::open_with(m.clone(), &|| Ok(pw()))
        .err()
        .unwrap();
    let name = tessera_core::ObjectRef::Object(new_key.clone()).to_string();
    assert_eq!(
        err.to_string(),
        format!("corrupt {name}: does not authenticate (tampered, truncated, moved from another name, or sealed with another key)")
    );
    let report = check_all(m.clone());
    assert!(
        report.problems[0].problem.contains(&name),
        "{:?}",
        report.problems
    );
    m.put(&new_key, &good).unwrap();
    flip(&m, &new_key, 50);
    assert!(Repository::open_with(m.clone(), &|| Ok(pw())).is_err());
    m.put(&new_key, &good).unwrap();
    reader(m);
}

/// The unsealed objects: a downgraded config (encryption none) cannot make
/// sealed objects read as plain; a key slot flipped no longer opens.
#[test]
fn tampered_config_or_key_slot_is_refused() {
    let m = mem();
    init(m.clone(), HashAlgo::Blake3, Compression::Auto, true);
    let cfg = String::from_utf8(m.get(&ObjectKey::Config).unwrap()).unwrap();
    assert!(cfg.contains("\"xaes-256-gcm\""), "{cfg}");
    let downgraded = cfg.replace("xaes-256-gcm", "none");
    m.put(&ObjectKey::Config, downgraded.as_bytes()).unwrap();
    let err = Repository::open(m.clone()).err().unwrap().to_string();
    assert!(
        err.contains("is encrypted, but the repository config says it is not"),
        "{err}"
    );
    // A config naming the other cipher opens no object: the first one read
    // is named as not authenticating.
    let swapped = cfg.replace("xaes-256-gcm", "xchacha20-poly1305");
    m.put(&ObjectKey::Config, swapped.as_bytes()).unwrap();
    let err = Repository::open_with(m.clone(), &|| Ok(pw()))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("does not authenticate"), "{err}");
    m.put(&ObjectKey::Config, cfg.as_bytes()).unwrap();
    let slot = ObjectKey::KeySlot(1);
    let good = m.get(&slot).unwrap();
    let text = String::from_utf8(good.clone()).unwrap();
    let at = text.find("\"wrapped\": \"").unwrap() + 14;
    let mut bad = good.clone();
    bad[at] = if bad[at] == b'0' { b'1' } else { b'0' };
    m.put(&slot, &bad).unwrap();
    let err = Repository::open_with(m.clone(), &|| Ok(pw()))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Key(_)), "{err}");
    m.put(&slot, &good).unwrap();
    reader(m);
}
