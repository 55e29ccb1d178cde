//! An in-memory store with the same semantics as [`super::LocalStore`]
//! (key validation, missing objects, truncated ranges), for tests and the
//! lab's trace mode where the data never needs to outlive the process.

use super::local::{validate_key, validate_prefix};
use super::store::{keys_of, ObjectBytes, ObjectStore};
use crate::error::{Error, ObjectRef, Result};
use crate::object_key::{KeyKind, ObjectKey};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Everything lives in one map, by name. Values are `Arc`ed so that a `get`
/// only copies the bytes after the lock has been released.
#[derive(Debug, Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, Arc<Vec<u8>>>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Vec<u8>>>> {
        // The map is never left half-updated, so a poisoned lock is usable.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn name(key: &ObjectKey) -> Result<String> {
        let name = key.name();
        validate_key(&name)?;
        Ok(name)
    }

    fn object(&self, key: &ObjectKey) -> Result<Arc<Vec<u8>>> {
        let name = Self::name(key)?;
        self.objects()
            .get(&name)
            .cloned()
            .ok_or_else(|| Error::missing(ObjectRef::Stored(key.clone())))
    }

    /// Number of objects stored.
    pub fn len(&self) -> usize {
        self.objects().len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects().is_empty()
    }

    /// Total bytes of all objects.
    pub fn total_bytes(&self) -> u64 {
        self.objects().values().map(|v| v.len() as u64).sum()
    }
}

impl ObjectStore for MemoryStore {
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        let name = Self::name(key)?;
        let value = Arc::new(data.to_vec());
        self.objects().insert(name, value);
        Ok(())
    }

    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        let name = Self::name(key)?;
        self.objects().insert(name, Arc::new(data));
        Ok(())
    }

    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        Ok(self.object(key)?.as_ref().clone())
    }

    fn get_whole(&self, key: &ObjectKey, _reuse: Vec<u8>) -> Result<ObjectBytes> {
        Ok(ObjectBytes::shared(self.object(key)?))
    }

    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        let data = self.object(key)?;
        let size = data.len() as u64;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(data[offset as usize..end as usize].to_vec()),
            _ => Err(Error::corrupt(
                ObjectRef::Stored(key.clone()),
                format!("truncated: wanted {len} bytes at offset {offset}, but the object has {size} bytes"),
            )),
        }
    }

    fn size(&self, key: &ObjectKey) -> Result<u64> {
        Ok(self.object(key)?.len() as u64)
    }

    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        let prefix = kind.prefix();
        validate_prefix(prefix)?;
        // BTreeMap order is byte order, the same as the sorted local listing.
        let names: Vec<String> = self
            .objects()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        Ok(keys_of(kind, names))
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let name = Self::name(key)?;
        self.objects().remove(&name);
        Ok(())
    }

    /// Memory is as durable as it gets here.
    fn barrier(&self) -> Result<()> {
        Ok(())
    }

    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        let name = Self::name(key)?;
        match self.objects().entry(name) {
            std::collections::btree_map::Entry::Occupied(_) => Ok(false),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(Arc::new(data.to_vec()));
                Ok(true)
            }
        }
    }

    fn location(&self) -> String {
        "memory".to_string()
    }
}
