//! Opening a command's repository: its store (counted, for `--json`),
//! for reading or for writing.

use crate::args::RepoArg;
use anyhow::Result;
use std::sync::Arc;
use tessera_core::backend::{self, CountingStore, ObjectStore};
use tessera_core::container::format::is_recipe_container;
use tessera_core::repo::IndexLoad;

/// A repository's store, counted so `--json` reports can say what a
/// command cost in backend requests and bytes.
pub type Counted = Arc<CountingStore<Arc<dyn ObjectStore>>>;

/// Open the repository for writing; a stale lock of a crashed writer is
/// broken on the way, and said so in one line on stderr. The fingerprint
/// index is loaded while opening (backups and GCs need it at once).
pub fn open_writer(
    repo: &RepoArg,
    backend: Arc<dyn ObjectStore>,
    command: &str,
) -> Result<tessera_core::repo::Writer> {
    open_writer_loading(repo, backend, command, IndexLoad::Now)
}

/// [`open_writer`] for a command that may only edit the catalog (forget,
/// keys): the index is loaded only if the command turns out to need it
/// (a forget that prunes, a publish that compacts the index segments).
pub fn open_writer_lazy(
    repo: &RepoArg,
    backend: Arc<dyn ObjectStore>,
    command: &str,
) -> Result<tessera_core::repo::Writer> {
    open_writer_loading(repo, backend, command, IndexLoad::Lazy)
}

/// [`open_writer`] for a GC: the index is loaded while opening (under the
/// opening's lock, before other writers publish) but kept by the GC's
/// publish, not by the opening (it is about to be replaced).
pub fn open_writer_replacing(
    repo: &RepoArg,
    backend: Arc<dyn ObjectStore>,
    command: &str,
) -> Result<tessera_core::repo::Writer> {
    open_writer_loading(repo, backend, command, IndexLoad::Replaced)
}

fn open_writer_loading(
    repo: &RepoArg,
    backend: Arc<dyn ObjectStore>,
    command: &str,
    load: IndexLoad,
) -> Result<tessera_core::repo::Writer> {
    let w = super::password::open_writer(repo, backend, command, load)?;
    if let Some(b) = w.broken_lock() {
        eprintln!("note: {}", b.notice());
    }
    Ok(w)
}

/// Open the repository for reading (the one place commands do); its
/// fingerprint index is loaded on first use.
pub fn open_repo(
    repo: &RepoArg,
    backend: Arc<dyn ObjectStore>,
) -> Result<tessera_core::Repository> {
    super::password::open(repo, backend)
}

/// The store of an existing repository.
pub fn open_backend(repo: &RepoArg) -> Result<Counted> {
    Ok(Arc::new(CountingStore::new(backend::open(
        &repo.repo,
        is_recipe_container,
    )?)))
}
