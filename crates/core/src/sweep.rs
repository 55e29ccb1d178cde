//! When a writer alone must sweep leftovers.
//!
//! Finding the objects no manifest lists (the sweep,
//! [`Context::remove_leftovers`](crate::context::Context)) lists every
//! object: at 600 k containers that is ~4 s of CPU, paid by every writer
//! that opened alone, a one-chunk backup included. A writer that finished
//! cleanly left nothing, so the sweep is needed only after one that did not:
//!
//! * one that **crashed** left its lock behind. Whoever breaks a stale
//!   writer's lock (the next acquirer, `tessera unlock`) first puts the
//!   `sweep` marker ([`mark`]);
//! * one that **failed**, or left objects on purpose (a GC that could not
//!   wait for its readers), puts the marker before it releases its lock.
//!   Its [`Unsettled`] state, fed by the [`Tracked`] store every object it
//!   writes goes through, says so: something put and not published since,
//!   a delete or barrier that failed, or something left on purpose.
//!
//! A writer that opens alone sweeps when the marker is there or when its own
//! lock acquisition broke a stale lock, and removes the marker after the
//! sweep is durable. Older manifest generations (left while other writers
//! held locks) are removed at every lone opening: listing manifests is
//! cheap. `check` still lists everything and reports what it finds;
//! `check --repair-leftovers` sweeps whatever the marker says.
//!
//! The marker is advisory: a repository without it is as valid as before
//! (a build that never writes it sweeps at every opening, and ignores it).
//! What a skipped sweep could cost is space, never data: leftovers are never
//! listed and ids are never reused (docs/FORMAT.md, invariants 3 and 4).

use crate::backend::{ObjectBytes, ObjectStore};
use crate::error::{Error, Result};
use crate::object_key::{KeyKind, ObjectKey};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// The kinds of object a manifest lists, which a sweep removes when none
/// does (see [`Context::leftover_keys`](crate::context::Context::leftover_keys)).
pub(crate) const SWEPT: [KeyKind; 6] = [
    KeyKind::Manifest,
    KeyKind::Container,
    KeyKind::IndexSegment,
    KeyKind::Volume,
    KeyKind::NdfTable,
    KeyKind::RefGraph,
];

/// Whether a writer may have left objects no manifest lists.
#[derive(Debug, Default)]
pub struct Unsettled {
    /// An object was put (or a put attempted) since the last publish.
    unpublished: AtomicBool,
    /// A delete or barrier failed, or something was left on purpose.
    left: AtomicBool,
}

impl Unsettled {
    /// A publish that listed everything put so far went out.
    pub(crate) fn published(&self) {
        self.unpublished.store(false, Relaxed);
    }

    /// The writer leaves objects for the next lone writer (on purpose, or
    /// because removing them failed).
    pub(crate) fn leave(&self) {
        self.left.store(true, Relaxed);
    }

    /// Nothing this writer did can have left a leftover.
    pub fn is_settled(&self) -> bool {
        !self.unpublished.load(Relaxed) && !self.left.load(Relaxed)
    }
}

/// A writer's view of its store: every call passes through unchanged, and
/// [`Unsettled`] learns of every put and of every failed delete or barrier.
pub(crate) struct Tracked {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Unsettled>,
}

impl Tracked {
    pub(crate) fn wrap(inner: Arc<dyn ObjectStore>) -> (Arc<dyn ObjectStore>, Arc<Unsettled>) {
        let state = Arc::new(Unsettled::default());
        let store = Arc::new(Tracked {
            inner,
            state: state.clone(),
        });
        (store, state)
    }

    /// Before the put starts. Only the kinds a sweep removes (a
    /// manifest lists them) wait for a publish; the lock's and online GC's
    /// objects are their owners' to remove.
    fn putting(&self, key: &ObjectKey) {
        if key.kind().is_some_and(|k| SWEPT.contains(&k)) {
            self.state.unpublished.store(true, Relaxed);
        }
    }

    /// A put that failed may have left a temporary, whatever its kind.
    fn put_done<T>(&self, r: Result<T>) -> Result<T> {
        self.failed_if(r)
    }

    fn failed_if<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.state.leave();
        }
        r
    }
}

impl ObjectStore for Tracked {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        self.inner.get(key)
    }
    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.get_into(key, buf)
    }
    fn prefetch(&self, key: &ObjectKey) {
        self.inner.prefetch(key)
    }
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        self.inner.get_whole(key, reuse)
    }
    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.inner.get_range(key, offset, len)
    }
    fn size(&self, key: &ObjectKey) -> Result<u64> {
        self.inner.size(key)
    }
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        self.putting(key);
        self.put_done(self.inner.put(key, data))
    }
    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        self.putting(key);
        self.put_done(self.inner.put_owned(key, data))
    }
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        self.putting(key);
        self.put_done(self.inner.put_if_absent(key, data))
    }
    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        self.inner.list(kind)
    }
    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let r = self.inner.delete(key);
        self.failed_if(r)
    }
    fn barrier(&self) -> Result<()> {
        let r = self.inner.barrier();
        self.failed_if(r)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn clean_interrupted(&self) -> Result<usize> {
        let r = self.inner.clean_interrupted();
        self.failed_if(r)
    }
}

/// Put the marker (durably): the next writer alone must sweep. `why` is
/// for an operator reading it.
pub fn mark(store: &dyn ObjectStore, why: &str) -> Result<()> {
    let line = format!("{}\n", why.replace('\n', " "));
    store.put(&ObjectKey::Sweep, line.as_bytes())?;
    store.barrier()
}

/// Why the next writer alone must sweep, if the marker says so.
pub fn marked(store: &dyn ObjectStore) -> Result<Option<String>> {
    match store.get(&ObjectKey::Sweep) {
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).trim().to_string())),
        Err(Error::MissingObject(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Remove the marker once a sweep is durable.
pub(crate) fn unmark(store: &dyn ObjectStore) -> Result<()> {
    store.delete(&ObjectKey::Sweep)?;
    store.barrier()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryStore;

    #[test]
    fn puts_unsettle_until_published_and_failures_stay() {
        let (store, state) = Tracked::wrap(Arc::new(MemoryStore::new()));
        assert!(state.is_settled());
        store.get(&ObjectKey::Config).unwrap_err();
        store.list(KeyKind::Container).unwrap();
        assert!(state.is_settled(), "reads change nothing");
        store
            .put(&ObjectKey::Container(crate::ids::ContainerId(7)), b"x")
            .unwrap();
        assert!(!state.is_settled());
        state.published();
        assert!(state.is_settled());
        store
            .put_owned(&ObjectKey::IndexSegment(1), vec![1])
            .unwrap();
        assert!(!state.is_settled());
        state.published();
        store
            .put_if_absent(&ObjectKey::Manifest(crate::ids::Generation(3)), b"m")
            .unwrap();
        assert!(!state.is_settled());
        state.published();
        store
            .delete(&ObjectKey::Container(crate::ids::ContainerId(7)))
            .unwrap();
        store.barrier().unwrap();
        store.put(&ObjectKey::Gc("state".into()), b"s").unwrap();
        store.put(&ObjectKey::SharedLock("t".into()), b"l").unwrap();
        assert!(state.is_settled(), "locks and GC objects are their owners'");
        state.leave();
        state.published();
        assert!(!state.is_settled(), "what was left stays left");
    }

    #[test]
    fn the_marker_round_trips() {
        let store = MemoryStore::new();
        assert_eq!(marked(&store).unwrap(), None);
        mark(&store, "a writer failed\nbadly").unwrap();
        assert_eq!(
            marked(&store).unwrap().as_deref(),
            Some("a writer failed badly")
        );
        assert_eq!(store.list(KeyKind::Sweep).unwrap(), [ObjectKey::Sweep]);
        unmark(&store).unwrap();
        assert_eq!(marked(&store).unwrap(), None);
    }
}
