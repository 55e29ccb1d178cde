//! Fastcopy (physical-gc-fast17.md §5.1's constant-physical-size series):
//! a new backup that is an existing backup's recipe root, made without
//! reading or writing any data. Merkle recipes make this a catalog entry:
//! the root fingerprint fixes the whole tree, so the clone shares every
//! recipe and data chunk of its source, and the total compression of the
//! repository grows while its physical size stays the same (the workload
//! on which the logical mark grows and the physical mark stays flat).
//!
//! What a clone means elsewhere:
//! - **GC.** The clone's entry names the same root, so every mark walks the
//!   same tree for it: forgetting the source leaves each of its chunks
//!   referenced by the clone. The clone is published by compare-and-swap
//!   only onto a generation that still retains the source: a GC that
//!   marked on a generation without the source (forgotten before) may
//!   already be reclaiming its tree, and a clone taken then would name
//!   deleted chunks. A GC that marked on a generation with the source
//!   counts the tree live whatever is forgotten later, and every later
//!   mark sees the clone.
//! - **FGC's reference graph.** The clone references every chunk of its
//!   source, so the graph would need an edge from each of its virtual
//!   files to every base the source's parts reference, and a CorrRecorder
//!   that never sees a chunk cannot add them: like a backup that cannot
//!   record (rewriting), the clone stops the graph's recording, and the
//!   next focused GC rebuilds it from the recipes (`fgc.rs`).
//! - **MFDedup** refuses: its layout places a version's chunks by the
//!   versions of its chain that reference them (categories and volumes),
//!   so a version sharing another's root without its own categories would
//!   be read from volumes that arranging and deletion reshape by position
//!   in the chain (`Layout::fastcopy`).

use crate::catalog::{BackupEntry, BackupId};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fgc::RefGraphState;

impl Context {
    /// [`Writer::clone_backup`](crate::Writer::clone_backup): publish a new
    /// backup named `name` (the source's name if `None`) with `source`'s
    /// root. No container, index segment or graph segment is written.
    pub(crate) fn clone_backup(
        &mut self,
        source: BackupId,
        name: Option<&str>,
    ) -> Result<BackupEntry> {
        let mut made = self.clone_backups(&[source], name)?;
        made.pop()
            .ok_or_else(|| Error::invalid("clone: nothing published"))
    }

    /// [`Writer::clone_backups`](crate::Writer::clone_backups): a clone of
    /// each of `sources`, in order, published as one generation (a series
    /// that doubles its backups writes one manifest, not one per clone).
    pub(crate) fn clone_backups(
        &mut self,
        sources: &[BackupId],
        name: Option<&str>,
    ) -> Result<Vec<BackupEntry>> {
        let missing = |source: BackupId| {
            Error::Snapshot(format!(
                "no snapshot '{source}' to clone (forgotten or never made; see `tessera snapshots`)"
            ))
        };
        // Checked again on the generation published onto, below.
        for &source in sources {
            self.manifest
                .backup(source)
                .ok_or_else(|| missing(source))?;
        }
        let time = crate::clock::now();
        let mut made = Vec::new();
        let mut dropped_graph = false;
        self.commit_with(|newest, _| {
            made.clear();
            let mut next = newest.clone();
            for &source in sources {
                let src = newest
                    .backup(source)
                    .ok_or_else(|| missing(source))?
                    .clone();
                let entry = BackupEntry {
                    id: next.next_backup_id,
                    name: name.map_or_else(|| src.name.clone(), str::to_string),
                    time,
                    new_bytes: 0,
                    new_chunks: 0,
                    meta: crate::catalog::SnapshotMeta {
                        parent: Some(src.id),
                        ..src.meta.clone()
                    },
                    ..src
                };
                next.next_backup_id = next.next_backup_id.next();
                next.backups.push(entry.clone());
                made.push(entry);
            }
            // The graph cannot record the clones' edges (see above): stop
            // recording; its segments become leftovers for the next writer.
            dropped_graph = RefGraphState::of(&next)?.is_some();
            RefGraphState::set(&mut next, None);
            Ok(next)
        })?;
        if dropped_graph {
            self.leave_leftovers();
        }
        // Kept graphs described the dropped segments.
        crate::fgc::keep(self, None);
        if made.len() != sources.len() {
            return Err(Error::invalid("clone: nothing published"));
        }
        Ok(made)
    }
}
