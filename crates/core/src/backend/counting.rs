//! A wrapper that counts store requests, so benchmarks, tests and reports
//! can say how much I/O an operation really did, in total and per kind of
//! object (manifests, containers, index segments, the lock).

use super::store::{ObjectBytes, ObjectStore};
use crate::error::Result;
use crate::object_key::{KeyKind, ObjectKey};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Operation counts. Every call is counted, failed ones included (a failed
/// request still cost a round trip); byte counts include only successful
/// transfers. `size` is counted as a get of 0 bytes (a metadata request),
/// `put_if_absent` as a put, and each leftover removed by
/// `clean_interrupted` as a delete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoCounters {
    pub gets: u64,
    pub get_bytes: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub deletes: u64,
    pub lists: u64,
    /// Durability barriers.
    pub syncs: u64,
}

impl IoCounters {
    /// What happened between the `earlier` snapshot and this one.
    pub fn since(&self, earlier: &IoCounters) -> IoCounters {
        IoCounters {
            gets: self.gets.saturating_sub(earlier.gets),
            get_bytes: self.get_bytes.saturating_sub(earlier.get_bytes),
            puts: self.puts.saturating_sub(earlier.puts),
            put_bytes: self.put_bytes.saturating_sub(earlier.put_bytes),
            deletes: self.deletes.saturating_sub(earlier.deletes),
            lists: self.lists.saturating_sub(earlier.lists),
            syncs: self.syncs.saturating_sub(earlier.syncs),
        }
    }

    fn add(&mut self, other: &IoCounters) {
        self.gets += other.gets;
        self.get_bytes += other.get_bytes;
        self.puts += other.puts;
        self.put_bytes += other.put_bytes;
        self.deletes += other.deletes;
        self.lists += other.lists;
        self.syncs += other.syncs;
    }
}

/// Counts requests by key kind; operations without a key (`barrier`,
/// `clean_interrupted`) and strays outside every prefix count under `None`.
pub struct CountingStore<B: ObjectStore> {
    inner: B,
    /// One short critical section per operation is negligible next to the
    /// I/O itself.
    by_kind: Mutex<BTreeMap<Option<KeyKind>, IoCounters>>,
}

impl<B: ObjectStore> CountingStore<B> {
    pub fn new(inner: B) -> Self {
        CountingStore {
            inner,
            by_kind: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn kinds(&self) -> MutexGuard<'_, BTreeMap<Option<KeyKind>, IoCounters>> {
        self.by_kind.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, kind: Option<KeyKind>, update: impl FnOnce(&mut IoCounters)) {
        update(self.kinds().entry(kind).or_default());
    }

    /// Counts of every operation so far, barriers included.
    pub fn counters(&self) -> IoCounters {
        let mut total = IoCounters::default();
        for c in self.kinds().values() {
            total.add(c);
        }
        total
    }

    /// Counts of the operations on keys of one kind.
    pub fn counters_of(&self, kind: KeyKind) -> IoCounters {
        self.kinds().get(&Some(kind)).copied().unwrap_or_default()
    }

    /// Forget all counts.
    pub fn reset(&self) {
        self.kinds().clear();
    }

    fn got(&self, key: &ObjectKey, bytes: u64) {
        self.count(key.kind(), |c| {
            c.gets += 1;
            c.get_bytes += bytes;
        });
    }

    fn wrote(&self, key: &ObjectKey, bytes: u64) {
        self.count(key.kind(), |c| {
            c.puts += 1;
            c.put_bytes += bytes;
        });
    }
}

impl<B: ObjectStore> ObjectStore for CountingStore<B> {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        let r = self.inner.get(key);
        self.got(key, r.as_ref().map_or(0, |v| v.len() as u64));
        r
    }

    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        let r = self.inner.get_into(key, buf);
        self.got(key, if r.is_ok() { buf.len() as u64 } else { 0 });
        r
    }

    fn prefetch(&self, key: &ObjectKey) {
        self.inner.prefetch(key)
    }
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        let r = self.inner.get_whole(key, reuse);
        self.got(key, r.as_ref().map_or(0, |o| o.len() as u64));
        r
    }

    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        let r = self.inner.get_range(key, offset, len);
        self.got(key, r.as_ref().map_or(0, |v| v.len() as u64));
        r
    }

    fn size(&self, key: &ObjectKey) -> Result<u64> {
        let r = self.inner.size(key);
        self.got(key, 0);
        r
    }

    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        let r = self.inner.put(key, data);
        self.wrote(key, if r.is_ok() { data.len() as u64 } else { 0 });
        r
    }

    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        let len = data.len() as u64;
        let r = self.inner.put_owned(key, data);
        self.wrote(key, if r.is_ok() { len } else { 0 });
        r
    }

    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        let r = self.inner.put_if_absent(key, data);
        let bytes = if matches!(r, Ok(true)) {
            data.len() as u64
        } else {
            0
        };
        self.wrote(key, bytes);
        r
    }

    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        let r = self.inner.list(kind);
        self.count(Some(kind), |c| c.lists += 1);
        r
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let r = self.inner.delete(key);
        self.count(key.kind(), |c| c.deletes += 1);
        r
    }

    fn barrier(&self) -> Result<()> {
        let r = self.inner.barrier();
        self.count(None, |c| c.syncs += 1);
        r
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn clean_interrupted(&self) -> Result<usize> {
        let r = self.inner.clean_interrupted();
        let removed = *r.as_ref().unwrap_or(&0) as u64;
        self.count(None, |c| c.deletes += removed);
        r
    }
}
