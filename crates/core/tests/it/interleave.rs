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
    assert!(err.to_string().contains("one policy and segment"), "{err}");
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

fn with(rewrite: &str, name: &str, source: SourceKind) -> BackupOptions {
    BackupOptions {
        rewrite: RewriteSpec::parse(rewrite).unwrap(),
        chain: Some(name.to_string()),
        ..member(name, source)
    }
}

/// Interleaved rewriting: the policy decides the dealt stream's segments,
/// every member restores byte for byte from its own recipe, and a member's
/// rewrites are counted for that member only.
#[test]
fn interleaved_rewriting_restores_every_member_and_counts_per_stream() {
    let mut r = repo(false, 8 * CHUNK);
    // Two sources, each stored in order first.
    let (a0, b0) = (
        bytes(11, 400 * CHUNK as usize),
        bytes(12, 400 * CHUNK as usize),
    );
    r.backup_interleaved(vec![
        (
            member("a0", SourceKind::Stream),
            GroupInput::Bytes(a0.clone()),
        ),
        (
            member("b0", SourceKind::Stream),
            GroupInput::Bytes(b0.clone()),
        ),
    ])
    .unwrap();
    // A's next version takes its blocks out of order (fragmented); C is new.
    let mut a1 = Vec::new();
    for k in (0..400).step_by(7).chain((3..400).step_by(7)) {
        a1.extend_from_slice(&a0[k * CHUNK as usize..(k + 1) * CHUNK as usize]);
    }
    let c1 = bytes(13, 100 * CHUNK as usize);
    let group = |rewrite: &str| {
        vec![
            (
                with(rewrite, "a", SourceKind::Stream),
                GroupInput::Bytes(a1.clone()),
            ),
            (
                with(rewrite, "c", SourceKind::Stream),
                GroupInput::Bytes(c1.clone()),
            ),
        ]
    };
    let reports = r.backup_interleaved(group("capping:1")).unwrap();
    assert!(
        reports[0].rewritten_bytes > 0,
        "a fragmented member rewrites"
    );
    assert_eq!(reports[1].rewritten_bytes, 0, "a member without duplicates");
    assert!(reports[0].segments > 0 && reports[1].segments > 0);
    assert_eq!(reports[1].new_chunks, 100);
    for (rep, s) in reports.iter().zip([&a1, &c1]) {
        assert_eq!(rep.logical_bytes, s.len() as u64);
        assert!(
            common::restore(&r, rep.backup.id).unwrap() == *s,
            "{}",
            rep.backup.name
        );
    }
    // Earlier backups still restore from their own copies.
    for (b, s) in r.backups()[..2].to_vec().iter().zip([&a0, &b0]) {
        assert!(common::restore(&r, b.id).unwrap() == *s, "{}", b.name);
    }
}

/// HAR keeps its history per chain: an interleaved group of two sources
/// records for each source the sparse list that source's backup alone
/// would have recorded, and the source's next backup avoids exactly those
/// containers.
#[test]
fn har_history_is_per_chain_even_interleaved() {
    const HAR: &str = "har:0.5:1";
    // The same base in two repositories: A's and B's old versions, each in
    // containers of its own (8 chunks each).
    let names = |p: &str, n: usize| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
    let (a0, b0) = (names("a", 64), names("b", 64));
    let base = || {
        let mut r = repo(true, 8 * CHUNK);
        for (n, v) in [("a0", &a0), ("b0", &b0)] {
            let refs: Vec<&str> = v.iter().map(|s| s.as_str()).collect();
            r.backup_trace(
                &member(n, SourceKind::Trace),
                refs.iter().map(|n| Ok((fp(n), CHUNK))),
            )
            .unwrap();
        }
        r
    };
    // The next versions use some containers fully and some sparsely (one
    // chunk of 8): A and B differently.
    let pick = |v: &[String], sparse_every: usize| -> Vec<String> {
        v.chunks(8)
            .enumerate()
            .flat_map(|(k, c)| if k % sparse_every == 0 { &c[..1] } else { c })
            .cloned()
            .collect()
    };
    let (a1, b1) = (pick(&a0, 2), pick(&b0, 3));
    let tr = |v: &[String]| GroupInput::Trace(v.iter().map(|n| (fp(n), CHUNK)).collect());
    let history = |r: &Writer| tessera_core::rewrite::HarHistory::of(r.manifest()).unwrap();

    let mut alone = base();
    for (n, v) in [("a", &a1), ("b", &b1)] {
        alone
            .backup_interleaved(vec![(with(HAR, n, SourceKind::Trace), tr(v))])
            .unwrap();
    }
    let mut together = base();
    together
        .backup_interleaved(vec![
            (with(HAR, "a", SourceKind::Trace), tr(&a1)),
            (with(HAR, "b", SourceKind::Trace), tr(&b1)),
        ])
        .unwrap();
    let (h1, h2) = (history(&alone), history(&together));
    assert_eq!(h1.chain("a").len(), 4, "{h1:?}");
    assert_eq!(h1.chain("b").len(), 3, "{h1:?}");
    assert_eq!(h1, h2);

    // A's next backup rewrites exactly its chunks held in A's sparse
    // containers (one per sparse container), nothing of B's list.
    let a2 = a1.clone();
    let refs: Vec<&str> = a2.iter().map(|s| s.as_str()).collect();
    let rep = together
        .backup_trace(
            &with(HAR, "a", SourceKind::Trace),
            refs.iter().map(|n| Ok((fp(n), CHUNK))),
        )
        .unwrap();
    assert_eq!(rep.rewritten_chunks, 4);
}

/// GCCDF's random-packing ablation (gccdf-eurosys25 Fig. 15): the same
/// clusters written in another order. It moves the same chunks and bytes
/// as the paper's recency packing, lays them out differently, and every
/// retained backup still restores byte for byte.
#[test]
fn gccdf_random_packing_moves_the_same_chunks_in_another_order() {
    use tessera_core::gc::{GcOptions, GcStrategy, Packing};
    let run = |packing: Packing| {
        let mut r = repo(false, 8 * CHUNK);
        // Version k: the base with the cumulative edits 1..=k (each owned
        // by every later version) and, right after its own, an edit of its
        // own: the containers a deleted version's edit dies in hold chunks
        // of several ownerships.
        let base = bytes(21, 240 * CHUNK as usize);
        let edit = |v: &mut Vec<u8>, chunk: usize, seed: u64| {
            let at = chunk * CHUNK as usize;
            v[at..at + 4 * CHUNK as usize].copy_from_slice(&bytes(seed, 4 * CHUNK as usize));
        };
        let versions: Vec<Vec<u8>> = (0..8usize)
            .map(|k| {
                let mut v = base.clone();
                for j in 1..=k {
                    edit(&mut v, 10 * j, 100 + j as u64);
                }
                edit(&mut v, 10 * k + 4, 200 + k as u64);
                v
            })
            .collect();
        let reports = r
            .backup_interleaved(
                versions
                    .iter()
                    .enumerate()
                    .map(|(k, v)| {
                        (
                            member(&format!("v{k}"), SourceKind::Stream),
                            GroupInput::Bytes(v.clone()),
                        )
                    })
                    .collect(),
            )
            .unwrap();
        let gone: Vec<_> = [0, 2, 4, 6].iter().map(|&k| reports[k].backup.id).collect();
        r.forget(&gone).unwrap();
        let g = r
            .gc(&GcOptions {
                strategy: GcStrategy::Gccdf,
                packing,
                split_threshold: 1,
                ..Default::default()
            })
            .unwrap();
        for (k, rep) in reports
            .iter()
            .enumerate()
            .filter(|(k, _)| ![0, 2, 4, 6].contains(k))
        {
            assert!(
                common::restore(&r, rep.backup.id).unwrap() == versions[k],
                "v{k}"
            );
        }
        (g, layout_fps(&r))
    };
    let (recency, a) = run(Packing::Recency);
    let (random, b) = run(Packing::Random);
    assert!(recency.moved_chunks > 0);
    assert_eq!(recency.moved_chunks, random.moved_chunks);
    assert_eq!(recency.bytes_written, random.bytes_written);
    assert_ne!(a, b, "another order");
    let (mut sa, mut sb) = (a.concat(), b.concat());
    sa.sort();
    sb.sort();
    assert_eq!(sa, sb, "the same chunks");
}

/// Each data container's chunk fingerprints, in container order.
fn layout_fps(repo: &Repository) -> Vec<Vec<Fingerprint>> {
    repo.manifest()
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| {
            repo.store()
                .read_meta(c.id)
                .unwrap()
                .1
                .iter()
                .map(|m| m.fp)
                .collect()
        })
        .collect()
}
