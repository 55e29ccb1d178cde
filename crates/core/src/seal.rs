//! The sealing layer: between the engine's objects and the object store.
//!
//! Every object the engine reads or writes passes through a [`SealedStore`]:
//! manifests and index segments are sealed whole, containers piece by piece.
//! Today the only [`Sealer`] is [`Identity`] (the stored bytes are the
//! plain bytes, so the on-disk format is unchanged); compression and
//! authenticated encryption (issue 12) plug in here as further sealers, and
//! nothing above this layer changes:
//!
//! - **Whole objects** (manifest generations, index segments): [`Sealer::seal`]
//!   gets the object's [`ObjectKey`], whose name and kind become the AEAD's
//!   associated data, so a sealed object cannot be swapped for another (of
//!   the same or another kind) or replayed under another generation's name.
//!   Compression runs before encryption, inside `seal`.
//! - **Containers** are not sealed whole: a restore reads one chunk's range
//!   and GC copies live chunks into a new container, and neither should
//!   decrypt and re-encrypt. Each chunk is sealed on its own
//!   ([`Sealer::seal_chunk`]) with its kind and fingerprint as associated
//!   data (not the container id, so copy-forward moves sealed bytes as they
//!   are); the container's metadata section is sealed whole with the
//!   container's key. The container codec calls these when it frames and
//!   reads chunks; with [`Identity`] they are the identity, so the codec
//!   does not call them yet.
//! - **The lock** stays unsealed: it is read by `tessera unlock` and by a
//!   refused writer to say who holds the repository, before (and without)
//!   any key, and it holds nothing secret.
//!
//! Which sealer a repository uses will be recorded next to the key slots
//! (an unsealed object), since the manifest itself is sealed.

use crate::backend::{KeyKind, ObjectBytes, ObjectKey, ObjectStore};
use crate::container::{ChunkKind, ContainerId};
use crate::error::{ObjectRef, Result};
use crate::fingerprint::Fingerprint;
use std::borrow::Cow;
use std::sync::Arc;

/// Turns plain object bytes into stored bytes and back.
pub trait Sealer: Send + Sync {
    /// Short name for reports (`identity`, later e.g. `zstd+xchacha20`).
    fn name(&self) -> &'static str;
    /// Seal a whole object stored under `key` (its name and kind are the
    /// associated data).
    fn seal(&self, key: &ObjectKey, plain: Vec<u8>) -> Result<Vec<u8>>;
    /// Open a whole object read from `key`; a wrong key, a tampered or
    /// truncated object is `Error::Corrupt` naming the object.
    fn unseal(&self, key: &ObjectKey, sealed: ObjectBytes) -> Result<ObjectBytes>;
    /// Append one chunk, sealed, to a container's data section. The chunk's
    /// kind and fingerprint are the associated data.
    fn seal_chunk(
        &self,
        kind: ChunkKind,
        fp: &Fingerprint,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<()>;
    /// Open one chunk read from a container (whole or by range).
    fn unseal_chunk<'a>(
        &self,
        kind: ChunkKind,
        fp: &Fingerprint,
        sealed: &'a [u8],
    ) -> Result<Cow<'a, [u8]>>;
}

/// Stores plain bytes: the format of every repository so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;

impl Sealer for Identity {
    fn name(&self) -> &'static str {
        "identity"
    }
    fn seal(&self, _key: &ObjectKey, plain: Vec<u8>) -> Result<Vec<u8>> {
        Ok(plain)
    }
    fn unseal(&self, _key: &ObjectKey, sealed: ObjectBytes) -> Result<ObjectBytes> {
        Ok(sealed)
    }
    fn seal_chunk(
        &self,
        _kind: ChunkKind,
        _fp: &Fingerprint,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        out.extend_from_slice(plain);
        Ok(())
    }
    fn unseal_chunk<'a>(
        &self,
        _kind: ChunkKind,
        _fp: &Fingerprint,
        sealed: &'a [u8],
    ) -> Result<Cow<'a, [u8]>> {
        Ok(Cow::Borrowed(sealed))
    }
}

/// An object store seen through a sealer: the only way the engine reads and
/// writes objects (the lock excepted, see the module doc).
#[derive(Clone)]
pub struct SealedStore {
    store: Arc<dyn ObjectStore>,
    sealer: Arc<dyn Sealer>,
}

impl SealedStore {
    pub fn new(store: Arc<dyn ObjectStore>, sealer: Arc<dyn Sealer>) -> Self {
        SealedStore { store, sealer }
    }

    /// Through the [`Identity`] sealer.
    pub fn plain(store: Arc<dyn ObjectStore>) -> Self {
        Self::new(store, Arc::new(Identity))
    }

    /// The store underneath (for the lock, and for listing and deleting,
    /// which see names only).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub fn sealer(&self) -> &Arc<dyn Sealer> {
        &self.sealer
    }

    /// Seal and put a whole object (a manifest generation, an index segment).
    pub fn put(&self, key: &ObjectKey, plain: Vec<u8>) -> Result<()> {
        let sealed = self.sealer.seal(key, plain)?;
        self.store.put_owned(key, sealed)
    }

    /// Seal and create a whole object only if absent (a manifest
    /// generation's compare-and-swap); false if it existed.
    pub fn put_if_absent(&self, key: &ObjectKey, plain: Vec<u8>) -> Result<bool> {
        let sealed = self.sealer.seal(key, plain)?;
        self.store.put_if_absent(key, &sealed)
    }

    /// Get and open a whole object.
    pub fn get(&self, key: &ObjectKey) -> Result<ObjectBytes> {
        let sealed = self.store.get_whole(key, Vec::new())?;
        self.sealer.unseal(key, sealed)
    }

    /// Put a container object, framed by the container codec (whose chunks
    /// and metadata are sealed piecewise, see the module doc).
    pub fn put_container(&self, id: ContainerId, object: &[u8]) -> Result<()> {
        self.store
            .put(&ObjectKey::Container(id), object)
            .map_err(|e| e.about(ObjectRef::Object(ObjectKey::Container(id))))
    }

    /// Read a whole container object into `reuse` (or however the store
    /// serves it cheapest). Errors name the container.
    pub fn get_container(&self, id: ContainerId, reuse: Vec<u8>) -> Result<ObjectBytes> {
        self.store
            .get_whole(&ObjectKey::Container(id), reuse)
            .map_err(|e| e.about(ObjectRef::Object(ObjectKey::Container(id))))
    }

    /// Read `len` bytes at `offset` of a container object. Errors name the
    /// container.
    pub fn get_container_range(&self, id: ContainerId, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.store
            .get_range(&ObjectKey::Container(id), offset, len)
            .map_err(|e| e.about(ObjectRef::Object(ObjectKey::Container(id))))
    }

    pub fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        self.store.list(kind)
    }

    pub fn delete(&self, key: &ObjectKey) -> Result<()> {
        self.store.delete(key)
    }

    pub fn barrier(&self) -> Result<()> {
        self.store.barrier()
    }

    pub fn location(&self) -> String {
        self.store.location()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Generation, MemoryStore};
    use crate::error::Error;

    #[test]
    fn identity_stores_plain_bytes_and_names_objects_in_errors() {
        let mem = Arc::new(MemoryStore::new());
        let s = SealedStore::plain(mem.clone());
        let key = ObjectKey::IndexSegment(7);
        s.put(&key, b"segment".to_vec()).unwrap();
        assert_eq!(mem.get(&key).unwrap(), b"segment");
        assert_eq!(&*s.get(&key).unwrap(), b"segment");
        let missing = ObjectKey::Manifest(Generation(3));
        let err = s.get(&missing).err().unwrap();
        assert!(matches!(err, Error::MissingObject(_)));
        assert_eq!(err.to_string(), "missing object manifests/0000000000000003");
        let err = s.get_container_range(ContainerId(9), 0, 1).unwrap_err();
        assert_eq!(err.to_string(), "missing object container 0000000000000009");

        let fp = Fingerprint::default();
        let mut out = b"x".to_vec();
        Identity
            .seal_chunk(ChunkKind::Data, &fp, b"abc", &mut out)
            .unwrap();
        assert_eq!(out, b"xabc");
        assert_eq!(
            &*Identity
                .unseal_chunk(ChunkKind::Data, &fp, &out[1..])
                .unwrap(),
            b"abc"
        );
    }
}
