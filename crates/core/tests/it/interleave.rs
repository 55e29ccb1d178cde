//! Interleaved ingest of a group of backups (the GCCDF artifact's baseline
//! ingest): exact container layout, dedup across members, byte-exact
//! restores, and all-or-nothing publishing.

use crate::common;

use common::{bytes, open_new};
use std::sync::Arc;
use tessera_core::backend::{MemoryStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::ChunkKind;
use tessera_core::ingest::GroupInput;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{BackupOptions, Fingerprint, HashAlgo, Repository, RestoreOptions, Writer};

const CHUNK: u32 = 4096;

fn fp(name: &str) -> Fingerprint {
    HashAlgo::Blake3.hash(name.as_bytes())
}

fn repo(trace: bool, container_size: u32) -> Writer {
    let b: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    open_new(
        b,
        ChunkerConfig::Fixed { size: CHUNK },
        container_size,
        trace,
    )
}

fn trace(names: &[&str]) -> GroupInput {
    GroupInput::Trace(names.iter().map(|n| (fp(n), CHUNK)).collect())
}

fn member(name: &str, source: SourceKind) -> BackupOptions {
    BackupOptions::new(name, source)
}

/// Each data container's chunks, in container order, by name.
fn layout(repo: &Repository, names: &[&str]) -> Vec<Vec<String>> {
    let by_fp: std::collections::HashMap<Fingerprint, &str> =
        names.iter().map(|n| (fp(n), *n)).collect();
    repo.manifest()
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| {
            let (_, meta) = repo.store().read_meta(c.id).unwrap();
            meta.iter().map(|m| by_fp[&m.fp].to_string()).collect()
        })
        .collect()
}

#[test]
fn chunks_are_dealt_round_robin_into_shared_containers() {
    // Four chunks per container. Round-robin: a1 b1 c1 a2 | b2 c2 a3 c3 | c4,
    // and the group's last container is sealed when the group ends.
    let mut r = repo(true, 4 * CHUNK);
    let reports = r
        .backup_interleaved(vec![
            (member("A", SourceKind::Trace), trace(&["a1", "a2", "a3"])),
            (member("B", SourceKind::Trace), trace(&["b1", "b2"])),
            (
                member("C", SourceKind::Trace),
                trace(&["c1", "c2", "c3", "c4"]),
            ),
        ])
        .unwrap();
    let all = ["a1", "a2", "a3", "b1", "b2", "c1", "c2", "c3", "c4"];
    assert_eq!(
        layout(&r, &all),
        vec![
            vec!["a1", "b1", "c1", "a2"],
            vec!["b2", "c2", "a3", "c3"],
            vec!["c4"]
        ]
    );
    // Backups are listed in member order, each with its own recipe.
    let names: Vec<_> = r.backups().iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["A", "B", "C"]);
    assert_eq!(
        reports.iter().map(|x| x.chunks).collect::<Vec<_>>(),
        [3, 2, 4]
    );
    assert_eq!(r.backups()[2].logical_bytes, 4 * CHUNK as u64);
    // A next group starts a fresh container.
    r.backup_interleaved(vec![(member("D", SourceKind::Trace), trace(&["d1"]))])
        .unwrap();
    assert_eq!(
        layout(&r, &[&all[..], &["d1"]].concat()).last().unwrap(),
        &["d1"]
    );
}

#[test]
fn a_chunk_shared_by_members_is_stored_once_and_new_for_the_first_dealt() {
    let mut r = repo(true, 64 * CHUNK);
    let reports = r
        .backup_interleaved(vec![
            (member("A", SourceKind::Trace), trace(&["x", "s", "a"])),
            (member("B", SourceKind::Trace), trace(&["s", "b", "x"])),
        ])
        .unwrap();
    // Dealt: x(A) s(B) s(A) b(B) a(A) x(B): A stores x and a, B stores s and b.
    assert_eq!(
        layout(&r, &["x", "s", "a", "b"]),
        vec![vec!["x", "s", "b", "a"]]
    );
    assert_eq!(reports[0].new_chunks, 2);
    assert_eq!(reports[1].new_chunks, 2);
    assert_eq!(reports[0].duplicate_chunks + reports[1].duplicate_chunks, 2);
    assert_eq!(r.stats().stored_data_bytes, 4 * CHUNK as u64);
}

#[test]
fn one_member_is_an_ordinary_backup() {
    let names: Vec<String> = (0..40).map(|i| format!("c{}", i % 25)).collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let mut a = repo(true, 8 * CHUNK);
    a.backup_trace(
        &member("A", SourceKind::Trace),
        refs.iter().map(|n| Ok((fp(n), CHUNK))),
    )
    .unwrap();
    let mut b = repo(true, 8 * CHUNK);
    b.backup_interleaved(vec![(member("A", SourceKind::Trace), trace(&refs))])
        .unwrap();
    assert_eq!(layout(&a, &refs), layout(&b, &refs));
    assert_eq!(a.backups()[0].root, b.backups()[0].root);
}

#[test]
fn data_members_restore_byte_for_byte() {
    let mut r = repo(false, 16 * CHUNK);
    let base = bytes(1, 300_000);
    let mut v2 = base.clone();
    v2[100_000..110_000].copy_from_slice(&bytes(2, 10_000));
    let other = bytes(3, 123_457);
    let streams = [base, v2, other, Vec::new()];
    let before = r.manifest().generation;
    let reports = r
        .backup_interleaved(
            streams
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    (
                        member(&format!("m{i}"), SourceKind::Stream),
                        GroupInput::Bytes(s.clone()),
                    )
                })
                .collect(),
        )
        .unwrap();
    // One manifest generation for the whole group.
    assert_eq!(r.manifest().generation, before.next());
    for (rep, s) in reports.iter().zip(&streams) {
        assert_eq!(rep.logical_bytes, s.len() as u64);
        let mut out = Vec::new();
        r.restore_to(
            &rep.backup,
            &mut out,
            &RestoreOptions::default(),
            &mut |_| {},
        )
        .unwrap();
        assert!(out == *s, "{}", rep.backup.name);
    }
    // The second version shares all but the changed chunks with the first.
    assert!(reports[1].new_chunks <= 4, "{}", reports[1].new_chunks);
}

#[test]
fn bad_groups_are_refused_and_publish_nothing() {
    let mut r = repo(true, 4 * CHUNK);
    let smr = BackupOptions {
        rewrite: RewriteSpec::parse("smr:4").unwrap(),
        ..member("B", SourceKind::Trace)
    };
    let err = r
        .backup_interleaved(vec![
            (member("A", SourceKind::Trace), trace(&["a"])),
            (smr, trace(&["b"])),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("does not rewrite"), "{err}");
    let err = r
        .backup_interleaved(vec![(
            member("A", SourceKind::Stream),
            GroupInput::Bytes(vec![1, 2, 3]),
        )])
        .unwrap_err();
    assert!(err.to_string().contains("cannot store bytes"), "{err}");
    assert!(r.backups().is_empty());
    assert!(r.manifest().containers.is_empty());
    assert!(r.backup_interleaved(Vec::new()).unwrap().is_empty());
}
