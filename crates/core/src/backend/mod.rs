//! Object stores: a flat namespace of immutable objects named by
//! [`ObjectKey`]s.
//!
//! An object is written once and never modified; the only way to change the
//! repository's state is to publish a new manifest generation, which is why
//! `put` must be atomic (a reader sees the whole object or none of it), and
//! why [`put_if_absent`] exists: write-if-absent is how object stores
//! publish. Durability is batched: objects put since the last [`barrier`]
//! may be lost in a crash, so the engine passes a barrier before it
//! publishes the manifest that references them.
//!
//! The engine does not call a store directly: every object goes through the
//! sealing layer ([`crate::seal::SealedStore`]). Wrappers count requests
//! ([`CountingStore`]) and inject faults ([`FaultyStore`]).
//!
//! [`put_if_absent`]: ObjectStore::put_if_absent
//! [`barrier`]: ObjectStore::barrier

use crate::error::Result;

mod cached;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod contract;
mod counting;
#[cfg(feature = "testing")]
mod faulty;
mod local;
mod memory;
pub mod s3;
#[cfg(test)]
mod tests;

pub use crate::object_key::{Generation, KeyKind, ObjectKey};
pub use cached::{CacheCounters, CachedStore, ContainerFilter};
pub use counting::{CountingStore, IoCounters};
#[cfg(feature = "testing")]
pub use faulty::FaultyStore;
pub use local::LocalStore;
pub use memory::MemoryStore;
pub use s3::{S3Location, S3Options, S3Store};

/// The backend of a repository location, as given by `--repo` or
/// `TESSERA_REPO`: the one place a location is turned into a backend.
/// A plain path (or `file:PATH`) is a local directory;
/// `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]` is an S3-compatible store
/// (behind a local cache of its metadata objects, see [`CachedStore`],
/// which keeps the container objects `containers` accepts: pass
/// `container::format::is_recipe_container`); a location with a URL scheme
/// Tessera does not serve is refused rather than taken for a directory
/// named after it.
pub fn open(
    location: &str,
    containers: ContainerFilter,
) -> Result<std::sync::Arc<dyn ObjectStore>> {
    if location == "memory:" {
        return Err(crate::error::Error::invalid(
            "a memory: repository exists only inside the process that created it",
        ));
    }
    if location.starts_with("s3:") {
        return open_s3(location, S3Options::from_env()?, false, containers);
    }
    Ok(std::sync::Arc::new(LocalStore::open(&local_path(
        location,
    )?)?))
}

/// [`open`], creating a local directory (and its parents) if needed; for `init`.
/// `memory:` is a fresh in-memory repository (the lab's scratch runs). An
/// S3 bucket must exist already; a server that ignores conditional writes
/// is refused here.
pub fn create(
    location: &str,
    containers: ContainerFilter,
) -> Result<std::sync::Arc<dyn ObjectStore>> {
    if location == "memory:" {
        return Ok(std::sync::Arc::new(MemoryStore::new()));
    }
    if location.starts_with("s3:") {
        return open_s3(location, S3Options::from_env()?, true, containers);
    }
    Ok(std::sync::Arc::new(LocalStore::create(&local_path(
        location,
    )?)?))
}

/// An S3 store with the given options, behind the metadata cache (keeping
/// the container objects `containers` accepts) unless
/// `TESSERA_CACHE_DIR=off`; `create` checks conditional writes first.
pub fn open_s3(
    location: &str,
    options: S3Options,
    create: bool,
    containers: ContainerFilter,
) -> Result<std::sync::Arc<dyn ObjectStore>> {
    let store = S3Store::open(location, options)?;
    if create {
        store.check_conditional_writes()?;
    }
    Ok(
        match CachedStore::<S3Store>::default_dir(&store.location()) {
            Some(dir) => std::sync::Arc::new(CachedStore::new(store, dir, containers)),
            None => std::sync::Arc::new(store),
        },
    )
}

/// The directory of a local location, or an error naming an unknown scheme.
fn local_path(location: &str) -> Result<std::path::PathBuf> {
    if let Some(path) = location.strip_prefix("file:") {
        return Ok(path.into());
    }
    if let Some((scheme, rest)) = location.split_once(':') {
        let url_like = scheme.len() >= 2
            && scheme
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'+')
            && rest.starts_with("//");
        if url_like {
            return Err(crate::error::Error::invalid(format!(
                "unsupported repository location '{location}': scheme '{scheme}:' is not served by this build (use a local path)"
            )));
        }
    }
    Ok(location.into())
}

/// A whole object as read for a reader that only looks at it. Opaque: a
/// store may hand out its bytes in memory or (a local store) a mapping of
/// the file that holds them.
pub struct ObjectBytes(Repr);

enum Repr {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for ObjectBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped(m) => m,
        }
    }
}

impl From<Vec<u8>> for ObjectBytes {
    fn from(v: Vec<u8>) -> Self {
        ObjectBytes(Repr::Owned(v))
    }
}

impl ObjectBytes {
    /// Bytes of a mapped file (a [`LocalStore`] detail).
    pub(crate) fn mapped(map: memmap2::Mmap) -> Self {
        ObjectBytes(Repr::Mapped(map))
    }

    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped(_))
    }

    /// The buffer, for the next read to reuse (none for a mapping).
    pub fn into_buffer(self) -> Vec<u8> {
        match self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped(_) => Vec::new(),
        }
    }
}

pub trait ObjectStore: Send + Sync {
    /// Read a whole object. A missing key is `Error::MissingObject` naming
    /// the key.
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>>;
    /// [`get`](Self::get) into `buf`, replacing its contents. A buffer that
    /// is reused from read to read is not faulted in again: restores read
    /// hundreds of 4 MiB containers, and fresh pages cost as much as the copy.
    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        *buf = self.get(key)?;
        Ok(())
    }
    /// Read a whole object to look at it, into `reuse` or however the store
    /// serves it cheapest (a local store maps large files).
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        let mut buf = reuse;
        self.get_into(key, &mut buf)?;
        Ok(buf.into())
    }
    /// Read `len` bytes at `offset`. Reading past the end is `Error::Corrupt`
    /// (the object is shorter than its header promised).
    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// Size of an object in bytes.
    fn size(&self, key: &ObjectKey) -> Result<u64>;
    /// Store `data` under `key` atomically (all or nothing). Overwrites an
    /// existing object of the same key (used only for leftovers and tests).
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()>;
    /// [`put`](Self::put) an owned buffer: a store that keeps objects in
    /// memory takes it without copying (index segments run to hundreds of MB).
    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        self.put(key, &data)
    }
    /// Create `key` only if it does not exist; false if it already existed.
    /// Durable on return: this is how a writer publishes (the lock).
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool>;
    /// Keys of one kind, sorted by name; names under the kind's prefix that
    /// do not parse come back as [`ObjectKey::Stray`].
    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>>;
    /// Delete an object; deleting a missing object is not an error.
    fn delete(&self, key: &ObjectKey) -> Result<()>;
    /// Make every `put` and `delete` so far durable.
    fn barrier(&self) -> Result<()>;
    /// Human-readable location, for messages.
    fn location(&self) -> String;
    /// Clean up what interrupted puts left behind (a local store's temporary
    /// files, an object store's incomplete uploads); returns how many. Only
    /// the writer holding the lock may call it.
    fn clean_interrupted(&self) -> Result<usize> {
        Ok(0)
    }
}

impl<B: ObjectStore + ?Sized> ObjectStore for std::sync::Arc<B> {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        (**self).get(key)
    }
    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        (**self).get_into(key, buf)
    }
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        (**self).get_whole(key, reuse)
    }
    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        (**self).get_range(key, offset, len)
    }
    fn size(&self, key: &ObjectKey) -> Result<u64> {
        (**self).size(key)
    }
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        (**self).put(key, data)
    }
    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        (**self).put_owned(key, data)
    }
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        (**self).put_if_absent(key, data)
    }
    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        (**self).list(kind)
    }
    fn delete(&self, key: &ObjectKey) -> Result<()> {
        (**self).delete(key)
    }
    fn barrier(&self) -> Result<()> {
        (**self).barrier()
    }
    fn location(&self) -> String {
        (**self).location()
    }
    fn clean_interrupted(&self) -> Result<usize> {
        (**self).clean_interrupted()
    }
}

/// Every object of every kind, sorted by name (for tests and tools that
/// look at a whole repository).
pub fn list_all(store: &dyn ObjectStore) -> Result<Vec<ObjectKey>> {
    let mut all = Vec::new();
    for kind in KeyKind::ALL {
        all.extend(store.list(kind)?);
    }
    all.sort();
    Ok(all)
}

/// Names of `kind` among `names` (listed under its prefix), as keys.
pub(crate) fn keys_of(kind: KeyKind, names: impl IntoIterator<Item = String>) -> Vec<ObjectKey> {
    names
        .into_iter()
        .filter(|n| KeyKind::of_name(n) == Some(kind))
        .map(|n| ObjectKey::parse(&n))
        .collect()
}
