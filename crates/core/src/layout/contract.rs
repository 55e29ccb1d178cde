//! What every layout answers: the contract the face holds a repository's
//! layout to (see the module docs of `layout`).

use crate::catalog::{BackupEntry, BackupId, LayoutKind};
use crate::context::{Context, Locator};
use crate::error::Result;
use crate::ingest::BackupHooks;
use crate::restore::Restorer;
use std::sync::Arc;

/// A storage layout (see the module docs).
pub trait Layout: Send + Sync {
    fn kind(&self) -> LayoutKind;
    /// Where readers find a chunk copy; installed in the context at open.
    fn locator(&self) -> Arc<dyn Locator>;
    /// What ingest does around each backup.
    fn backup_hooks(&self) -> &dyn BackupHooks;
    /// How a backup is restored where not through the container pipeline.
    fn restorer(&self) -> &dyn Restorer;
    /// Whether several writers may work at once (each publishing by
    /// compare-and-swap and merging); otherwise a writer holds the
    /// exclusive lock.
    fn concurrent_writers(&self) -> bool;
    /// Refuse what this layout does not have: mark-and-sweep GC, the data
    /// index on disk. `Ok` where it has it.
    fn mark_sweep(&self) -> Result<()>;
    fn index_on_disk(&self) -> Result<()>;
    /// Refuse a fastcopy (a backup cloned from another's recipe root,
    /// `Writer::clone_backup`) where the layout cannot share a root.
    fn fastcopy(&self) -> Result<()>;
    /// Remove `ids` from the catalog.
    fn forget(&self, cx: &mut Context, ids: &[BackupId]) -> Result<Vec<BackupEntry>>;
    /// The layout itself, for operations of one layout only (MFDedup's
    /// arranging and exact forget space: the face downcasts).
    fn as_any(&self) -> &dyn std::any::Any;
}
