//! The physical marks (PGC, PGC+) on whole repositories: recipe containers
//! read at most once per level however many backups share them, and PGC+
//! removing the duplicates rewriting left behind.

use std::collections::HashSet;
use std::sync::Arc;
use tessera_core::backend::{MemoryStore, ObjectStore};
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::container::ChunkKind;
use tessera_core::gc::{GcOptions, MarkSpec};
use tessera_core::rewrite::RewriteSpec;
use tessera_core::{BackupOptions, Writer};

use crate::common;
use common::{bytes, open_new, restore};

fn repo() -> Writer {
    let backend: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    open_new(
        backend,
        ChunkerConfig::Fastcdc {
            min: 256,
            avg: 1024,
            max: 4096,
        },
        16 * 1024,
        false,
    )
}

fn plan(repo: &Writer, mark: MarkSpec) -> tessera_core::gc::GcPlan {
    repo.plan_gc(&GcOptions {
        mark,
        dry_run: true,
        ..Default::default()
    })
    .unwrap()
}

/// However many backups share recipe subtrees, the physical mark reads
/// each recipe container at most once per level (each level's phase reads
/// no more containers than there are), while the logical mark's reads
/// grow with the backups. Both find the same live chunks.
#[test]
fn recipe_containers_are_read_at_most_once_per_level() {
    let mut repo = repo();
    let mut v = bytes(7, 400_000);
    let mut reads = Vec::new();
    for round in 0..3 {
        for i in 0..10 {
            v = common::mutate(&v, round * 100 + i, 2000);
            common::backup(&mut repo, "v", &v).unwrap();
        }
        let recipe_containers = repo
            .manifest()
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Recipe)
            .count() as u64;
        let p = plan(&repo, MarkSpec::Physical);
        let levels: Vec<_> = p
            .phases
            .iter()
            .filter(|x| x.phase.starts_with("enumeration L"))
            .collect();
        assert!(levels.len() >= 2, "{:?}", p.phases);
        for l in &levels {
            assert!(
                l.containers_read <= recipe_containers,
                "{l:?} of {recipe_containers}"
            );
        }
        let total: u64 = levels.iter().map(|l| l.containers_read).sum();
        assert!(total <= levels.len() as u64 * recipe_containers);
        let l = plan(&repo, MarkSpec::Logical);
        assert_eq!(p.mark.valid_recipe, l.mark.valid_recipe);
        reads.push((p.mark_bytes_read, l.mark_bytes_read));
        // The logical mark's skip of shared subtrees is reported.
        assert!(l.mark.walk.skipped_subtrees > 0);
        assert!(p.mark.walk.skipped_subtrees > 0);
    }
    eprintln!("mark bytes read (physical, logical) at 10, 20, 30 backups: {reads:?}");
}

/// Capping stores duplicates; PGC+ (analysis duplicate counter, unique
/// liveness, newest-first copy) leaves exactly one copy of each chunk,
/// and every backup still restores byte for byte.
#[test]
fn pgc_plus_removes_the_duplicates_rewriting_left() {
    let mut repo = repo();
    let mut versions = Vec::new();
    let mut v = bytes(3, 300_000);
    for i in 0..6 {
        // Reorder blocks so later versions are fragmented and Capping rewrites.
        v = common::mutate(&v, 40 + i, 9000);
        let mut w = v[150_000..].to_vec();
        w.extend_from_slice(&v[..150_000]);
        v = w;
        let opts = BackupOptions {
            rewrite: RewriteSpec::Capping { level: 1 },
            segment_bytes: Some(32 * 1024),
            ..BackupOptions::new("v", SourceKind::Stream)
        };
        let id = repo
            .backup_reader(&opts, &mut &v[..], &mut |_| {})
            .unwrap()
            .backup
            .id;
        versions.push((id, v.clone()));
    }
    let copies = |repo: &Writer| {
        let (mut seen, mut dups) = (HashSet::new(), 0);
        for c in repo
            .manifest()
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Data)
        {
            for m in repo.store().read(c.id).unwrap().meta {
                if !seen.insert(m.fp) {
                    dups += 1;
                }
            }
        }
        dups
    };
    assert!(copies(&repo) > 0, "Capping stored duplicates");
    let r = repo
        .gc(&GcOptions {
            mark: MarkSpec::PhysicalPlus,
            ..Default::default()
        })
        .unwrap();
    assert!(r.reclaimed_containers > 0, "{r:?}");
    assert_eq!(copies(&repo), 0, "one copy of each chunk remains");
    assert!(r.phases.iter().any(|p| p.phase == "copy"));
    for (id, v) in &versions {
        assert_eq!(&restore(&repo, *id).unwrap(), v);
    }
}
