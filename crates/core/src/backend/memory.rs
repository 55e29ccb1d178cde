//! An in-memory backend with the same semantics as [`super::LocalBackend`]
//! (key validation, missing objects, truncated ranges), for tests and the
//! lab's trace mode where the data never needs to outlive the process.

use super::local::{validate_key, validate_prefix};
use super::Backend;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Everything lives in one map. Values are `Arc`ed so that a `get` only
/// copies the bytes after the lock has been released.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    objects: Mutex<BTreeMap<String, Arc<Vec<u8>>>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Vec<u8>>>> {
        // The map is never left half-updated, so a poisoned lock is usable.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn object(&self, key: &str) -> Result<Arc<Vec<u8>>> {
        validate_key(key)?;
        self.objects()
            .get(key)
            .cloned()
            .ok_or_else(|| Error::MissingObject(key.to_string()))
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

impl Backend for MemoryBackend {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        validate_key(key)?;
        let value = Arc::new(data.to_vec());
        self.objects().insert(key.to_string(), value);
        Ok(())
    }

    fn put_vec(&self, key: &str, data: Vec<u8>) -> Result<()> {
        validate_key(key)?;
        self.objects().insert(key.to_string(), Arc::new(data));
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        Ok(self.object(key)?.as_ref().clone())
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let data = self.object(key)?;
        let size = data.len() as u64;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(data[offset as usize..end as usize].to_vec()),
            _ => Err(Error::corrupt(
                key,
                format!("truncated: wanted {len} bytes at offset {offset}, but the object has {size} bytes"),
            )),
        }
    }

    fn size(&self, key: &str) -> Result<u64> {
        Ok(self.object(key)?.len() as u64)
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        validate_prefix(prefix)?;
        // BTreeMap order is byte order, the same as the sorted local listing.
        Ok(self
            .objects()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect())
    }

    fn delete(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        self.objects().remove(key);
        Ok(())
    }

    /// Memory is as durable as it gets here.
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn create_new(&self, key: &str, data: &[u8]) -> Result<bool> {
        validate_key(key)?;
        match self.objects().entry(key.to_string()) {
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
