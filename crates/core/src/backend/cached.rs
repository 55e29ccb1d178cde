//! A local cache of a remote store's immutable metadata objects: manifest
//! generations, index segments, reference graph segments and recipe
//! containers, the objects every
//! command reads first and GC's mark reads all of.
//!
//! Why it is safe: these objects are never rewritten under the same name
//! once a manifest lists them (generations and ids only grow; an
//! interrupted writer's leftovers are never read, so never cached), and
//! this wrapper forgets a key it puts or deletes. Each cached file ends
//! with the BLAKE3 hash of its bytes, checked on every read: a damaged or
//! truncated file is removed and the object fetched again. Deleting the
//! whole cache directory at any time only costs refetching.
//!
//! Data containers are not cached (they are the bulk of a repository);
//! a container is recognised as a recipe container by its header, which
//! this layer does not read itself: whoever builds the cache gives it a
//! [`ContainerFilter`] (the container format's
//! `container::format::is_recipe_container`).
//!
//! Never cached: the mutable objects of concurrent writers and online GC
//! (`lock`, `locks/*`, `gc/lock`, `gc/state`, `gc/resurrect/*`, the config
//! and key slots) and every listing (the newest generation is found by
//! listing `manifests/` on the server each time). Nor an object this
//! handle wrote: until a manifest lists it, it may be abandoned (a crash
//! before the publish), removed as a leftover and its number taken again
//! with other bytes; objects read from others are read because a published
//! manifest lists them, and published numbers are never reused.
//! `s3::s3_online_gc_through_the_metadata_cache` runs two writers and an
//! online GC through two caches on MinIO.

use super::store::{ObjectBytes, ObjectStore};
use crate::error::Result;
use crate::ids::ContainerId;
use crate::object_key::{KeyKind, ObjectKey};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const HASH_LEN: usize = 32;

/// Whether a fetched container object (its id and bytes) is metadata to
/// cache rather than bulk data. The container format knows how to tell
/// (`container::format::is_recipe_container`); the cache is told by
/// whoever builds it, so the storage layer never reads container headers.
pub type ContainerFilter = fn(ContainerId, &[u8]) -> bool;

/// Hits and misses, for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    /// Cached files found damaged (and dropped).
    pub damaged: u64,
}

pub struct CachedStore<B: ObjectStore> {
    inner: B,
    dir: PathBuf,
    /// Which container objects are cached.
    containers: ContainerFilter,
    /// Keys this handle wrote: read from the server, never cached.
    written: std::sync::Mutex<std::collections::HashSet<ObjectKey>>,
    hits: AtomicU64,
    misses: AtomicU64,
    damaged: AtomicU64,
}

impl<B: ObjectStore> CachedStore<B> {
    /// Cache `inner`'s metadata under `dir` (created on first use): its
    /// manifests, index and reference graph segments, and the container
    /// objects `containers` accepts.
    pub fn new(inner: B, dir: PathBuf, containers: ContainerFilter) -> Self {
        CachedStore {
            inner,
            dir,
            containers,
            written: Default::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            damaged: AtomicU64::new(0),
        }
    }

    /// The cache directory of a location: `$TESSERA_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`, then one folder
    /// per location (named by its hash). `None` if no home is known or
    /// `TESSERA_CACHE_DIR=off`.
    pub fn default_dir(location: &str) -> Option<PathBuf> {
        let root = match std::env::var_os("TESSERA_CACHE_DIR") {
            Some(v) if v == "off" => return None,
            Some(v) => PathBuf::from(v),
            None => match std::env::var_os("XDG_CACHE_HOME") {
                Some(x) if !x.is_empty() => PathBuf::from(x).join("tessera"),
                _ => PathBuf::from(std::env::var_os("HOME")?)
                    .join(".cache")
                    .join("tessera"),
            },
        };
        let tag = blake3::hash(location.as_bytes()).to_hex();
        Some(root.join(&tag.as_str()[..16]))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    pub fn counters(&self) -> CacheCounters {
        CacheCounters {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            damaged: self.damaged.load(Ordering::Relaxed),
        }
    }

    fn file(&self, key: &ObjectKey) -> Option<PathBuf> {
        match key {
            ObjectKey::Manifest(_)
            | ObjectKey::IndexSegment(_)
            | ObjectKey::RefGraph(_)
            | ObjectKey::Container(_) => Some(self.dir.join(key.name().replace('/', "-"))),
            _ => None,
        }
    }

    /// The cached bytes of `key`, verified; a damaged file is removed.
    fn lookup(&self, key: &ObjectKey) -> Option<Vec<u8>> {
        let path = self.file(key)?;
        let mut bytes = std::fs::read(&path).ok()?;
        let ok = bytes.len() >= HASH_LEN && {
            let split = bytes.len() - HASH_LEN;
            blake3::hash(&bytes[..split]).as_bytes()[..] == bytes[split..]
        };
        if !ok {
            self.damaged.fetch_add(1, Ordering::Relaxed);
            let _ = std::fs::remove_file(&path);
            return None;
        }
        bytes.truncate(bytes.len() - HASH_LEN);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(bytes)
    }

    /// Whether a fetched object belongs in the cache.
    fn cacheable(&self, key: &ObjectKey, bytes: &[u8]) -> bool {
        match key {
            ObjectKey::Manifest(_) | ObjectKey::IndexSegment(_) | ObjectKey::RefGraph(_) => true,
            ObjectKey::Container(id) => (self.containers)(*id, bytes),
            _ => false,
        }
    }

    /// Best effort: a cache that cannot be written is only a slower cache.
    fn remember(&self, key: &ObjectKey, bytes: &[u8]) {
        let Some(path) = self.file(key) else { return };
        if !self.cacheable(key, bytes) {
            return;
        }
        let _ = std::fs::create_dir_all(&self.dir);
        let tmp = self.dir.join(format!(
            ".{}.{}.tmp",
            key.name().replace('/', "-"),
            std::process::id()
        ));
        let mut data = Vec::with_capacity(bytes.len() + HASH_LEN);
        data.extend_from_slice(bytes);
        data.extend_from_slice(blake3::hash(bytes).as_bytes());
        if std::fs::write(&tmp, &data).is_ok() && std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    fn forget(&self, key: &ObjectKey) {
        if let Some(path) = self.file(key) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Before writing `key`: drop any cached copy and never cache it.
    fn wrote(&self, key: &ObjectKey) {
        if self.file(key).is_some() {
            self.written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone());
        }
        self.forget(key);
    }

    fn ours(&self, key: &ObjectKey) -> bool {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    fn fetch(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        if self.ours(key) {
            return self.inner.get(key);
        }
        if let Some(b) = self.lookup(key) {
            return Ok(b);
        }
        if self.file(key).is_some() {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        let bytes = self.inner.get(key)?;
        self.remember(key, &bytes);
        Ok(bytes)
    }
}

impl<B: ObjectStore> ObjectStore for CachedStore<B> {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        self.fetch(key)
    }

    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        *buf = self.fetch(key)?;
        Ok(())
    }

    fn prefetch(&self, key: &ObjectKey) {
        self.inner.prefetch(key)
    }
    fn get_whole(&self, key: &ObjectKey, _reuse: Vec<u8>) -> Result<ObjectBytes> {
        Ok(self.fetch(key)?.into())
    }

    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        if let Some(b) = self.lookup(key).filter(|_| !self.ours(key)) {
            let size = b.len() as u64;
            if let Some(end) = offset.checked_add(len).filter(|e| *e <= size) {
                return Ok(b[offset as usize..end as usize].to_vec());
            }
        }
        self.inner.get_range(key, offset, len)
    }

    fn size(&self, key: &ObjectKey) -> Result<u64> {
        self.inner.size(key)
    }

    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        self.wrote(key);
        self.inner.put(key, data)
    }

    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        self.wrote(key);
        self.inner.put_owned(key, data)
    }

    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        self.wrote(key);
        self.inner.put_if_absent(key, data)
    }

    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        self.inner.list(kind)
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        self.forget(key);
        self.inner.delete(key)
    }

    fn barrier(&self) -> Result<()> {
        self.inner.barrier()
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn clean_interrupted(&self) -> Result<usize> {
        self.inner.clean_interrupted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Generation, MemoryStore};
    use std::sync::Arc;

    fn no_containers(_: ContainerId, _: &[u8]) -> bool {
        false
    }

    /// Mutable objects and this handle's own writes are read from the
    /// server every time; another handle caches a published object.
    #[test]
    fn mutable_and_own_objects_are_never_served_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let server = Arc::new(MemoryStore::new());
        let a = CachedStore::new(server.clone(), dir.path().join("c"), no_containers);
        let manifest = ObjectKey::Manifest(Generation(7));
        let mutable = [
            ObjectKey::Lock,
            ObjectKey::SharedLock("t1".into()),
            ObjectKey::Gc("lock".into()),
            ObjectKey::Gc("state".into()),
            ObjectKey::Gc("resurrect/t1-0".into()),
        ];
        a.put(&manifest, b"one").unwrap();
        for k in &mutable {
            a.put(k, b"v1").unwrap();
            assert_eq!(a.get(k).unwrap(), b"v1");
        }
        assert_eq!(a.get(&manifest).unwrap(), b"one");
        // Another writer replaces the mutable objects and, say, an
        // abandoned unpublished object under a reused number.
        for k in &mutable {
            server.put(k, b"v2").unwrap();
            assert_eq!(a.get(k).unwrap(), b"v2", "{k:?}");
        }
        server.put(&manifest, b"two").unwrap();
        assert_eq!(a.get(&manifest).unwrap(), b"two", "own write cached");
        assert_eq!(a.counters().hits, 0);
        // Another handle caches what it reads (published objects).
        let b = CachedStore::new(server.clone(), dir.path().join("c"), no_containers);
        assert_eq!(b.get(&manifest).unwrap(), b"two");
        assert_eq!(b.get(&manifest).unwrap(), b"two");
        assert_eq!(b.counters().hits, 1);
        let names: Vec<String> = std::fs::read_dir(dir.path().join("c"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![manifest.name().replace('/', "-")]);
    }
}
