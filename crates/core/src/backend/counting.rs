//! A wrapper that counts backend operations, so benchmarks and tests can
//! report (and assert) how much I/O an operation really did, in total and
//! per kind of object (`containers/`, `index/`, `manifests/`, `lock`).

use super::{Backend, ObjectBytes};
use crate::error::Result;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Operation counts. Every call is counted, failed ones included (a failed
/// request still cost a round trip); byte counts include only successful
/// transfers. `size` is counted as a get of 0 bytes (a metadata request),
/// `create_new` as a put, and each file removed by `remove_temporaries` as a
/// delete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoCounters {
    pub gets: u64,
    pub get_bytes: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub deletes: u64,
    pub lists: u64,
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

/// The class a key is counted under: the key up to and including its first
/// `/` (`containers/`), or the whole key if it has none (`lock`). A list is
/// counted under the class of its prefix, and operations without a key
/// (`sync`, `remove_temporaries`) under the empty class.
fn class_of(key: &str) -> &str {
    match key.find('/') {
        Some(i) => &key[..=i],
        None => key,
    }
}

pub struct CountingBackend<B: Backend> {
    inner: B,
    /// Per-class counts; the total is their sum. One short critical section
    /// per operation is negligible next to the I/O itself.
    by_class: Mutex<BTreeMap<String, IoCounters>>,
}

impl<B: Backend> CountingBackend<B> {
    pub fn new(inner: B) -> Self {
        CountingBackend {
            inner,
            by_class: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn classes(&self) -> MutexGuard<'_, BTreeMap<String, IoCounters>> {
        self.by_class.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, key: &str, update: impl FnOnce(&mut IoCounters)) {
        let class = class_of(key);
        let mut classes = self.classes();
        match classes.get_mut(class) {
            Some(c) => update(c),
            None => update(classes.entry(class.to_string()).or_default()),
        }
    }

    /// Counts of every operation so far.
    pub fn counters(&self) -> IoCounters {
        self.counters_for("")
    }

    /// Counts of the operations on keys starting with `prefix`, which is
    /// matched against key classes: pass a class such as `"containers/"` or
    /// `"lock"`. The empty prefix gives the total, syncs included.
    pub fn counters_for(&self, prefix: &str) -> IoCounters {
        let mut total = IoCounters::default();
        for (_, c) in self
            .classes()
            .iter()
            .filter(|(class, _)| class.starts_with(prefix))
        {
            total.add(c);
        }
        total
    }

    /// Forget all counts.
    pub fn reset(&self) {
        self.classes().clear();
    }
}

impl<B: Backend> Backend for CountingBackend<B> {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        let r = self.inner.put(key, data);
        let bytes = if r.is_ok() { data.len() as u64 } else { 0 };
        self.count(key, |c| {
            c.puts += 1;
            c.put_bytes += bytes;
        });
        r
    }

    fn put_vec(&self, key: &str, data: Vec<u8>) -> Result<()> {
        let len = data.len() as u64;
        let r = self.inner.put_vec(key, data);
        let bytes = if r.is_ok() { len } else { 0 };
        self.count(key, |c| {
            c.puts += 1;
            c.put_bytes += bytes;
        });
        r
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let r = self.inner.get(key);
        let bytes = r.as_ref().map_or(0, |v| v.len() as u64);
        self.count(key, |c| {
            c.gets += 1;
            c.get_bytes += bytes;
        });
        r
    }

    fn get_into(&self, key: &str, buf: &mut Vec<u8>) -> Result<()> {
        let r = self.inner.get_into(key, buf);
        let bytes = if r.is_ok() { buf.len() as u64 } else { 0 };
        self.count(key, |c| {
            c.gets += 1;
            c.get_bytes += bytes;
        });
        r
    }

    fn get_shared(&self, key: &str, reuse: Vec<u8>) -> Result<ObjectBytes> {
        let r = self.inner.get_shared(key, reuse);
        let bytes = r.as_ref().map_or(0, |o| o.len() as u64);
        self.count(key, |c| {
            c.gets += 1;
            c.get_bytes += bytes;
        });
        r
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let r = self.inner.get_range(key, offset, len);
        let bytes = r.as_ref().map_or(0, |v| v.len() as u64);
        self.count(key, |c| {
            c.gets += 1;
            c.get_bytes += bytes;
        });
        r
    }

    fn size(&self, key: &str) -> Result<u64> {
        let r = self.inner.size(key);
        self.count(key, |c| c.gets += 1);
        r
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let r = self.inner.list(prefix);
        self.count(prefix, |c| c.lists += 1);
        r
    }

    fn delete(&self, key: &str) -> Result<()> {
        let r = self.inner.delete(key);
        self.count(key, |c| c.deletes += 1);
        r
    }

    fn sync(&self) -> Result<()> {
        let r = self.inner.sync();
        self.count("", |c| c.syncs += 1);
        r
    }

    fn create_new(&self, key: &str, data: &[u8]) -> Result<bool> {
        let r = self.inner.create_new(key, data);
        let bytes = if matches!(r, Ok(true)) {
            data.len() as u64
        } else {
            0
        };
        self.count(key, |c| {
            c.puts += 1;
            c.put_bytes += bytes;
        });
        r
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn remove_temporaries(&self) -> Result<usize> {
        let r = self.inner.remove_temporaries();
        let removed = *r.as_ref().unwrap_or(&0) as u64;
        self.count("", |c| c.deletes += removed);
        r
    }
}
