//! The container layout: fixed-size containers filled in stream order, the
//! exact global index, mark-and-sweep GC with copy-forward (`crate::gc`).

use crate::layout::contract::Layout;

use crate::catalog::LayoutKind;
use crate::catalog::{BackupEntry, BackupId};
use crate::context::{Context, IndexLocator, Locator};
use crate::error::Result;
use crate::ingest::{BackupHooks, Plain};
use crate::restore::{Pipeline, Restorer};
use std::sync::Arc;

/// Fixed-size containers (the default layout).
#[derive(Clone, Copy, Debug, Default)]
pub struct ContainerLayout;

impl Layout for ContainerLayout {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Containers
    }
    /// The index names every copy, wherever GC has moved it.
    fn locator(&self) -> Arc<dyn Locator> {
        Arc::new(IndexLocator)
    }
    fn backup_hooks(&self) -> &dyn BackupHooks {
        &Plain
    }
    fn restorer(&self) -> &dyn Restorer {
        &Pipeline
    }
    fn concurrent_writers(&self) -> bool {
        true
    }
    fn mark_sweep(&self) -> Result<()> {
        Ok(())
    }
    fn index_on_disk(&self) -> Result<()> {
        Ok(())
    }
    /// Recipes are Merkle trees located through the index: a second
    /// catalog entry naming the same root reads the same chunks.
    fn fastcopy(&self) -> Result<()> {
        Ok(())
    }
    /// Logical deletion: the backups leave the catalog for the forgotten
    /// list; GC reclaims their chunks.
    fn forget(&self, cx: &mut Context, ids: &[BackupId]) -> Result<Vec<BackupEntry>> {
        let mut next = cx.manifest.clone();
        let (gone, kept): (Vec<_>, Vec<_>) =
            next.backups.into_iter().partition(|b| ids.contains(&b.id));
        next.backups = kept;
        next.forgotten.extend(gone.iter().cloned());
        crate::publish::publish(cx, next, &[])?;
        Ok(gone)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
