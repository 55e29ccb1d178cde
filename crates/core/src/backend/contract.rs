//! The backend contract every [`ObjectStore`] keeps, as a checker that any
//! test can run against a store: the unit tests run it on the local and
//! memory stores and the wrappers, the integration tests on S3 (MinIO).
//! A test tool, not part of the API: behind the `testing` feature, and
//! hidden. It panics on the first broken rule.

use super::*;
use crate::error::{Error, ObjectRef};
use std::collections::BTreeMap;

/// A key by name (strays for names that are no engine key).
pub fn nk(name: &str) -> ObjectKey {
    ObjectKey::parse(name)
}

/// Names of everything a store lists, of every kind, sorted.
pub fn names(b: &dyn ObjectStore) -> Vec<String> {
    let mut all: Vec<String> = KeyKind::ALL
        .iter()
        .flat_map(|kind| b.list(*kind).unwrap())
        .map(|k| k.name())
        .collect();
    all.sort();
    all
}

/// Names a store lists of one kind.
pub fn listed(b: &dyn ObjectStore, kind: KeyKind) -> Vec<String> {
    b.list(kind).unwrap().iter().map(ObjectKey::name).collect()
}

/// Everything a store lists, read through its own interface.
pub fn contents(b: &dyn ObjectStore) -> BTreeMap<String, Vec<u8>> {
    names(b)
        .into_iter()
        .map(|k| (k.clone(), b.get(&nk(&k)).unwrap()))
        .collect()
}

pub fn assert_missing<T: std::fmt::Debug>(r: crate::error::Result<T>, key: &str) {
    match r {
        Err(Error::MissingObject(k)) => assert_eq!(k.object, ObjectRef::Stored(nk(key))),
        other => panic!("expected MissingObject({key}), got {other:?}"),
    }
}

pub fn assert_truncated<T: std::fmt::Debug>(r: crate::error::Result<T>, key: &str) {
    match r {
        Err(e @ Error::Corrupt { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(key) && msg.contains("truncated"), "{msg}");
        }
        other => panic!("expected a truncation error, got {other:?}"),
    }
}

/// The semantics every backend must share.
pub fn check_contract(b: &dyn ObjectStore) {
    assert!(names(b).is_empty());

    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    b.put(&nk("containers/000a"), &data).unwrap();
    assert_eq!(b.get(&nk("containers/000a")).unwrap(), data);
    assert_eq!(b.size(&nk("containers/000a")).unwrap(), 1000);
    assert_eq!(b.get_range(&nk("containers/000a"), 0, 1000).unwrap(), data);
    assert_eq!(
        b.get_range(&nk("containers/000a"), 100, 28).unwrap(),
        &data[100..128]
    );
    assert_eq!(
        b.get_range(&nk("containers/000a"), 1000, 0).unwrap(),
        Vec::<u8>::new()
    );
    assert_truncated(
        b.get_range(&nk("containers/000a"), 990, 11),
        "containers/000a",
    );
    assert_truncated(
        b.get_range(&nk("containers/000a"), 1001, 0),
        "containers/000a",
    );
    assert_truncated(
        b.get_range(&nk("containers/000a"), 1, u64::MAX),
        "containers/000a",
    );

    // The whole-object reads that reuse a buffer agree with `get`, whatever
    // the buffer held; a large object (mapped by the local backend) too.
    let mut buf = vec![7u8; 3000];
    b.get_into(&nk("containers/000a"), &mut buf).unwrap();
    assert_eq!(buf, data);
    assert_eq!(
        &*b.get_whole(&nk("containers/000a"), vec![7u8; 5]).unwrap(),
        &data[..]
    );
    let large: Vec<u8> = (0..(3usize << 20) + 5).map(|i| (i % 251) as u8).collect();
    b.put(&nk("containers/000c"), &large).unwrap();
    assert!(*b.get_whole(&nk("containers/000c"), Vec::new()).unwrap() == large[..]);
    b.get_into(&nk("containers/000c"), &mut buf).unwrap();
    assert!(buf == large);
    b.delete(&nk("containers/000c")).unwrap();

    for key in [
        "containers/000b",
        "containers/000c",
        "nothing",
        "deep/er/key",
    ] {
        assert_missing(b.get(&nk(key)), key);
        assert_missing(b.get_into(&nk(key), &mut buf), key);
        assert_missing(b.get_whole(&nk(key), Vec::new()).map(|o| o.len()), key);
        assert_missing(b.size(&nk(key)), key);
        assert_missing(b.get_range(&nk(key), 0, 1), key);
    }
    // A directory of objects is not an object.
    assert_missing(b.size(&nk("containers")), "containers");

    // Overwrite replaces the whole object; empty objects exist.
    b.put(&nk("containers/000a"), b"short").unwrap();
    assert_eq!(b.get(&nk("containers/000a")).unwrap(), b"short");
    assert_eq!(b.size(&nk("containers/000a")).unwrap(), 5);
    b.put(&nk("empty"), b"").unwrap();
    assert_eq!(b.get(&nk("empty")).unwrap(), b"");
    assert_eq!(b.size(&nk("empty")).unwrap(), 0);

    for key in [
        "manifests/0000000000000002",
        "manifests/0000000000000001",
        "index/0001",
        "deep/er/key",
    ] {
        b.put(&nk(key), key.as_bytes()).unwrap();
    }
    // Names outside every kind's prefix are not listed; those under one
    // that do not parse are, as strays.
    let all = [
        "containers/000a",
        "index/0001",
        "manifests/0000000000000001",
        "manifests/0000000000000002",
    ];
    assert_eq!(names(b), all);
    assert_eq!(
        b.list(KeyKind::Manifest).unwrap(),
        [
            ObjectKey::Manifest(Generation(1)),
            ObjectKey::Manifest(Generation(2))
        ]
    );
    assert_eq!(
        b.list(KeyKind::Container).unwrap(),
        [ObjectKey::Stray("containers/000a".into())]
    );
    assert!(b.list(KeyKind::Lock).unwrap().is_empty());

    b.delete(&nk("index/0001")).unwrap();
    assert_missing(b.get(&nk("index/0001")), "index/0001");
    b.delete(&nk("index/0001")).unwrap();
    b.delete(&nk("never/existed")).unwrap();
    assert!(b.list(KeyKind::IndexSegment).unwrap().is_empty());

    assert!(b.put_if_absent(&nk("lock"), b"first").unwrap());
    assert!(!b.put_if_absent(&nk("lock"), b"second").unwrap());
    assert_eq!(b.get(&nk("lock")).unwrap(), b"first");
    assert!(b.put_if_absent(&nk("locks/nested"), b"x").unwrap());
    b.delete(&nk("lock")).unwrap();
    assert!(b.put_if_absent(&nk("lock"), b"third").unwrap());
    assert_eq!(b.get(&nk("lock")).unwrap(), b"third");
    assert_eq!(b.list(KeyKind::Lock).unwrap(), [ObjectKey::Lock]);

    // The config is a single name too (not a folder); key slots are one.
    assert!(b.list(KeyKind::Config).unwrap().is_empty());
    b.put(&nk("config"), b"cfg").unwrap();
    b.put(&nk("keys/0000000000000001"), b"slot").unwrap();
    assert_eq!(b.list(KeyKind::Config).unwrap(), [ObjectKey::Config]);
    assert_eq!(b.list(KeyKind::KeySlot).unwrap(), [ObjectKey::KeySlot(1)]);
    b.delete(&nk("config")).unwrap();
    b.delete(&nk("keys/0000000000000001")).unwrap();
    assert!(b.list(KeyKind::Config).unwrap().is_empty());

    b.barrier().unwrap();
    assert_eq!(b.get(&nk("deep/er/key")).unwrap(), b"deep/er/key");
    assert!(!b.location().is_empty());
}

pub fn check_key_validation(b: &dyn ObjectStore) {
    for key in [
        "",
        "/abs",
        "/",
        "a//b",
        "a/",
        "..",
        "../x",
        "a/../b",
        ".",
        "./a",
        "a\\b",
        ".hidden",
        "a/.x.1.2.tmp",
        "a\0b",
    ] {
        let invalid = |r: crate::error::Result<()>| matches!(r, Err(Error::Invalid(_)));
        assert!(invalid(b.put(&nk(key), b"x")), "put {key:?}");
        assert!(invalid(b.get(&nk(key)).map(drop)), "get {key:?}");
        assert!(
            invalid(b.get_range(&nk(key), 0, 0).map(drop)),
            "get_range {key:?}"
        );
        assert!(invalid(b.size(&nk(key)).map(drop)), "size {key:?}");
        assert!(invalid(b.delete(&nk(key))), "delete {key:?}");
        assert!(
            invalid(b.put_if_absent(&nk(key), b"x").map(drop)),
            "create_new {key:?}"
        );
    }
    b.put(&nk("ok-key_1.bin/x.y"), b"fine").unwrap();
    assert_eq!(b.get(&nk("ok-key_1.bin/x.y")).unwrap(), b"fine");
}
