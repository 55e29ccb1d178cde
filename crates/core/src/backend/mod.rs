//! Storage backends: a flat namespace of immutable objects.
//!
//! Keys are `/`-separated relative names such as `containers/00000000000000a1`
//! or `manifests/0000000000000007`. An object is written once with [`put`] and
//! never modified; the only way to change the repository's state is to put a
//! new manifest generation, which is why `put` must be atomic (a reader sees the
//! whole object or none of it). Durability is batched: objects put since the
//! last [`sync`] may be lost in a crash, so the engine calls `sync` before it
//! publishes the manifest that references them.
//!
//! [`put`]: Backend::put
//! [`sync`]: Backend::sync

use crate::error::Result;

mod counting;
mod failing;
mod local;
mod memory;
#[cfg(test)]
mod tests;

pub use counting::{CountingBackend, IoCounters};
pub use failing::FailingBackend;
pub use local::LocalBackend;
pub use memory::MemoryBackend;

/// The backend of a repository location, as given by `--repo` or
/// `TESSERA_REPO`: the one place a location is turned into a backend.
/// A plain path (or `file:PATH`) is a local directory; a location with a URL
/// scheme Tessera does not serve is refused rather than taken for a
/// directory named after it.
pub fn open(location: &str) -> Result<std::sync::Arc<dyn Backend>> {
    if location == "memory:" {
        return Err(crate::error::Error::invalid(
            "a memory: repository exists only inside the process that created it",
        ));
    }
    Ok(std::sync::Arc::new(LocalBackend::open(&local_path(
        location,
    )?)?))
}

/// [`open`], creating a local directory (and its parents) if needed; for `init`.
/// `memory:` is a fresh in-memory repository (the lab's scratch runs).
pub fn create(location: &str) -> Result<std::sync::Arc<dyn Backend>> {
    if location == "memory:" {
        return Ok(std::sync::Arc::new(MemoryBackend::new()));
    }
    Ok(std::sync::Arc::new(LocalBackend::create(&local_path(
        location,
    )?)?))
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
            && (rest.starts_with("//") || scheme == "s3");
        if url_like {
            return Err(crate::error::Error::invalid(format!(
                "unsupported repository location '{location}': scheme '{scheme}:' is not served by this build (use a local path)"
            )));
        }
    }
    Ok(location.into())
}

/// A whole object as read for a reader that only looks at it: its bytes in
/// memory, or the file that holds it mapped (no copy out of the page cache).
pub enum ObjectBytes {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for ObjectBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ObjectBytes::Owned(v) => v,
            ObjectBytes::Mapped(m) => m,
        }
    }
}

impl ObjectBytes {
    /// The buffer, for the next read to reuse (none for a mapping).
    pub fn into_buffer(self) -> Vec<u8> {
        match self {
            ObjectBytes::Owned(v) => v,
            ObjectBytes::Mapped(_) => Vec::new(),
        }
    }
}

pub trait Backend: Send + Sync {
    /// Store `data` under `key` atomically (all or nothing). Overwrites an
    /// existing object of the same key (used only for leftovers and tests).
    fn put(&self, key: &str, data: &[u8]) -> Result<()>;
    /// [`put`](Self::put) an owned buffer: a backend that keeps objects in
    /// memory takes it without copying (index segments run to hundreds of MB).
    fn put_vec(&self, key: &str, data: Vec<u8>) -> Result<()> {
        self.put(key, &data)
    }
    /// Read a whole object. A missing key is `Error::MissingObject(key)`.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// [`get`](Self::get) into `buf`, replacing its contents. A buffer that
    /// is reused from read to read is not faulted in again: restores read
    /// hundreds of 4 MiB containers, and fresh pages cost as much as the copy.
    fn get_into(&self, key: &str, buf: &mut Vec<u8>) -> Result<()> {
        *buf = self.get(key)?;
        Ok(())
    }
    /// Read a whole object to look at it, into `reuse` or, where the backend
    /// can, by mapping it (see [`LocalBackend`]).
    fn get_shared(&self, key: &str, reuse: Vec<u8>) -> Result<ObjectBytes> {
        let mut buf = reuse;
        self.get_into(key, &mut buf)?;
        Ok(ObjectBytes::Owned(buf))
    }
    /// Read `len` bytes at `offset`. Reading past the end is `Error::Corrupt`
    /// (the object is shorter than its header promised).
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// Size of an object in bytes.
    fn size(&self, key: &str) -> Result<u64>;
    /// Keys that start with `prefix`, sorted.
    fn list(&self, prefix: &str) -> Result<Vec<String>>;
    /// Delete an object; deleting a missing object is not an error.
    fn delete(&self, key: &str) -> Result<()>;
    /// Make every `put` and `delete` so far durable.
    fn sync(&self) -> Result<()>;
    /// Create `key` only if it does not exist (lock files). Returns false if
    /// it already existed. Durable on return.
    fn create_new(&self, key: &str, data: &[u8]) -> Result<bool>;
    /// Human-readable location, for messages.
    fn location(&self) -> String;
    /// Remove temporary files an interrupted `put` left behind; returns how
    /// many. Only the writer holding the lock may call it.
    fn remove_temporaries(&self) -> Result<usize> {
        Ok(0)
    }
}

impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        (**self).put(key, data)
    }
    fn put_vec(&self, key: &str, data: Vec<u8>) -> Result<()> {
        (**self).put_vec(key, data)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        (**self).get(key)
    }
    fn get_into(&self, key: &str, buf: &mut Vec<u8>) -> Result<()> {
        (**self).get_into(key, buf)
    }
    fn get_shared(&self, key: &str, reuse: Vec<u8>) -> Result<ObjectBytes> {
        (**self).get_shared(key, reuse)
    }
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        (**self).get_range(key, offset, len)
    }
    fn size(&self, key: &str) -> Result<u64> {
        (**self).size(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        (**self).list(prefix)
    }
    fn delete(&self, key: &str) -> Result<()> {
        (**self).delete(key)
    }
    fn sync(&self) -> Result<()> {
        (**self).sync()
    }
    fn create_new(&self, key: &str, data: &[u8]) -> Result<bool> {
        (**self).create_new(key, data)
    }
    fn location(&self) -> String {
        (**self).location()
    }
    fn remove_temporaries(&self) -> Result<usize> {
        (**self).remove_temporaries()
    }
}
