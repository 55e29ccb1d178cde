//! Publishing a mutation: the new manifest generation goes out by
//! compare-and-swap ([`Context::commit_with`]); when another writer
//! published first, this writer's change is merged into theirs
//! ([`Change`]), FGC's reference graph grafted ([`crate::fgc::GraphMerge`]);
//! only then are the objects it supersedes deleted.

use crate::backend::ObjectKey;
use crate::catalog::{BackupEntry, Change, Manifest};
use crate::context::Context;
use crate::error::Result;
use crate::fgc::{GraphMerge, RefGraphState};
use crate::ids::BackupId;
use crate::rewrite::HarHistory;
use std::collections::HashSet;

/// Sections a merged publish takes from this writer although another
/// writer changed them too: HAR's history (the newest backup's; and the
/// older builds' list it removes), and
/// FGC's graph (grafted afterwards).
const OVERWRITES: &[&str] = &[
    <HarHistory as crate::catalog::Section>::NAME,
    <crate::rewrite::LegacySparse as crate::catalog::Section>::NAME,
    <RefGraphState as crate::catalog::Section>::NAME,
];

/// Publish `next` as the new generation: make every new object durable,
/// put the manifest, then delete what it supersedes.
pub(crate) fn publish(cx: &mut Context, next: Manifest, superseded: &[ObjectKey]) -> Result<()> {
    publish_merged(cx, next, superseded).map(drop)
}

/// [`publish`], returning the backups `next` added as they were
/// published: when another writer published first, the change from our
/// generation to `next` is merged into theirs, which may renumber them.
/// Sections a mutation staged ([`Context::staged`]) go out with it.
pub(crate) fn publish_merged(
    cx: &mut Context,
    mut next: Manifest,
    superseded: &[ObjectKey],
) -> Result<Vec<BackupEntry>> {
    next.sections.overlay(std::mem::take(&mut cx.staged));
    let change = Change::between(&cx.manifest, &next);
    let known: HashSet<BackupId> = cx.manifest.backups.iter().map(|b| b.id).collect();
    let mut added: Vec<BackupEntry> = next
        .backups
        .iter()
        .filter(|b| !known.contains(&b.id))
        .cloned()
        .collect();
    let mut graph = GraphMerge::new(cx, &next)?;
    let ours_ids: Vec<BackupId> = added.iter().map(|b| b.id).collect();
    let mut first = Some(next);
    let done = cx.commit_with(|newest, ours| match first.take() {
        Some(n) if ours => Ok(n),
        _ => {
            let (mut m, a) = change.apply(newest, OVERWRITES)?;
            // FGC's reference graph: our delta grafted onto theirs, or
            // theirs onto our rewritten one (see `fgc::graft`).
            let remap = ours_ids
                .iter()
                .zip(&a)
                .filter(|(o, n)| **o != n.id)
                .map(|(o, n)| (*o, n.id))
                .collect();
            graph.merge(newest, &mut m, &remap)?;
            added = a;
            Ok(m)
        }
    });
    let published = done.is_ok().then(|| cx.manifest.clone());
    graph.finish(cx, published.as_ref());
    done?;
    for key in superseded {
        cx.objects.delete(key)?;
    }
    cx.objects.barrier()?;
    Ok(added)
}
