//! Storage layouts: where a backup's chunks end up, where readers find
//! them, how backups are forgotten and how space is freed. A repository's
//! layout is fixed at `init --layout` and chosen once when it opens
//! ([`for_kind`]); the face ([`crate::repo`]) asks it, and hands its parts
//! to the modules below: the [`Locator`] to every reader (through the
//! context), the [`BackupHooks`] to ingest, the [`Restorer`] to restore.
//!
//! - [`ContainerLayout`]: fixed-size containers filled in stream order, a
//!   global exact index, mark-and-sweep GC with copy-forward (`gc`).
//! - [`MfdedupLayout`] (`mfdedup-tos.md`): NDF deduplication against the
//!   chain's previous version, lifecycle categories arranged into volumes
//!   (AVAR), forget deletes whole categories and copies nothing.

mod containers;
mod contract;
pub mod mfdedup;

pub use crate::catalog::LayoutKind;
pub use containers::ContainerLayout;
pub use contract::Layout;
pub use mfdedup::MfdedupLayout;

use crate::backend::{ObjectKey, ObjectStore};
use crate::catalog::Manifest;
use crate::context::{Context, IndexLoad, PasswordSource};
use crate::error::Result;
use std::sync::Arc;

/// The layout of `kind`: chosen once, when a repository opens.
pub fn for_kind(kind: LayoutKind) -> Box<dyn Layout> {
    match kind {
        LayoutKind::Containers => Box::new(ContainerLayout),
        LayoutKind::Mfdedup => Box::new(MfdedupLayout::default()),
    }
}

/// Open the newest generation at `backend` with its layout: the layout
/// named in the manifest is chosen here, once, and its locator installed
/// in the context; the index is loaded as `load` says (see
/// [`Context::open`] for `password` and `bad_segments`).
pub fn open(
    backend: Arc<dyn ObjectStore>,
    password: PasswordSource,
    load: IndexLoad,
    bad_segments: Option<&mut Vec<(ObjectKey, crate::error::Error)>>,
) -> Result<(Context, Box<dyn Layout>)> {
    let locator_of = |m: &Manifest| for_kind(m.config.layout).locator();
    let mut cx = Context::open(backend, password, &locator_of, load, bad_segments)?;
    let layout = for_kind(cx.manifest.config.layout);
    cx.section_keys = section_keys;
    Ok((cx, layout))
}

/// The objects the manifest's sections list: MFDedup's volumes and NDF
/// tables, FGC's graph segments (an absent section lists none).
fn section_keys(m: &Manifest) -> Vec<ObjectKey> {
    let mut keys = mfdedup::MfState::listed_keys(m);
    keys.extend(crate::fgc::RefGraphState::listed_keys(m));
    keys
}
