//! Fault injection for crash-safety tests (a test tool: behind the `testing`
//! feature, as is [`Error::Injected`]).
//!
//! Mutating operations (`put`, `delete`, `barrier`, `put_if_absent`) are numbered
//! from 1. When the number reaches `fail_at`, the process is considered dead
//! at that instant: that operation fails with [`Error::Injected`] without
//! having any effect (a failing `put` writes nothing, a failing `delete`
//! deletes nothing, a failing `barrier` makes nothing durable), and every later
//! operation of any kind, reads included, fails the same way. What the inner
//! backend holds afterwards is what the next process would find.
//!
//! With [`FaultyStore::with_lost_unsynced`] the failure is a power loss
//! instead: puts and deletes since the last successful `barrier` are undone in
//! the inner backend (put objects removed or restored to their previous
//! content, deleted objects restored). `put_if_absent` is durable on return and
//! is never undone.
//!
//! [`FaultyStore::with_partial_loss`] models a power loss on a disk that
//! reorders writes: each unsynced key is rolled back or kept independently
//! (chosen by a seed), so a later write can survive while an earlier one is
//! lost. This is what catches a missing `barrier` between writing objects and
//! publishing the manifest that names them.
//!
//! A test first runs an operation with `fail_at = None` to learn how many
//! mutating operations it performs ([`FaultyStore::ops`]), then repeats it
//! with every `fail_at` in that range.
//!
//! `clean_interrupted` is passed through uncounted: the stores used with
//! this wrapper have no temporaries that could change what a reader sees.

use super::store::{ObjectBytes, ObjectStore};
use crate::error::{Error, Result};
use crate::object_key::{KeyKind, ObjectKey};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Default)]
struct State {
    /// Mutating operations started so far (the failing one included).
    ops: u64,
    /// The operation number that failed, once it has.
    failed: Option<u64>,
    /// For power-loss mode: each key touched since the last successful sync,
    /// with its content at that sync (`None` = absent).
    unsynced: BTreeMap<ObjectKey, Option<Vec<u8>>>,
}

pub struct FaultyStore<B: ObjectStore> {
    inner: B,
    fail_at: Option<u64>,
    lose_unsynced: bool,
    /// With power loss: `Some(seed)` rolls back only a seeded subset of keys.
    partial_seed: Option<u64>,
    /// Held across each mutating operation, so that nothing can slip in
    /// between the failure and the operations it must stop, and the undo log
    /// matches the inner backend exactly.
    state: Mutex<State>,
}

impl<B: ObjectStore> FaultyStore<B> {
    /// Fail at mutating operation `fail_at` (1-based) and ever after; `None`
    /// never fails (to count operations).
    pub fn new(inner: B, fail_at: Option<u64>) -> Self {
        FaultyStore {
            inner,
            fail_at,
            lose_unsynced: false,
            partial_seed: None,
            state: Mutex::new(State::default()),
        }
    }

    /// Like [`new`](Self::new), but the failure also loses every put and
    /// delete not yet made durable by `sync`, as a power loss would.
    pub fn with_lost_unsynced(inner: B, fail_at: Option<u64>) -> Self {
        FaultyStore {
            lose_unsynced: true,
            ..Self::new(inner, fail_at)
        }
    }

    /// Like [`with_lost_unsynced`](Self::with_lost_unsynced), but each unsynced
    /// key is independently lost or kept, as decided by `seed`.
    pub fn with_partial_loss(inner: B, fail_at: Option<u64>, seed: u64) -> Self {
        FaultyStore {
            lose_unsynced: true,
            partial_seed: Some(seed),
            ..Self::new(inner, fail_at)
        }
    }

    /// Mutating operations attempted so far (including the one that failed).
    pub fn ops(&self) -> u64 {
        self.state().ops
    }

    /// Whether the injected failure has happened.
    pub fn has_failed(&self) -> bool {
        self.state().failed.is_some()
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails once the process is "dead". Reads only check this and do not
    /// hold the lock, so they can run in parallel.
    fn check(&self) -> Result<()> {
        self.alive().map(drop)
    }

    /// Lock the state, failing once the process is "dead".
    fn alive(&self) -> Result<MutexGuard<'_, State>> {
        let state = self.state();
        match state.failed {
            Some(n) => Err(Error::Injected(n)),
            None => Ok(state),
        }
    }

    /// Lock the state for a mutating operation: number it, and fail (undoing
    /// unsynced work in power-loss mode) if it is the chosen one.
    fn mutation(&self) -> Result<MutexGuard<'_, State>> {
        let mut state = self.alive()?;
        state.ops += 1;
        if Some(state.ops) == self.fail_at {
            let n = state.ops;
            state.failed = Some(n);
            if self.lose_unsynced {
                self.lose(&mut state)?;
            }
            return Err(Error::Injected(n));
        }
        Ok(state)
    }

    /// Put the inner backend back in its state as of the last sync.
    fn lose(&self, state: &mut State) -> Result<()> {
        for (key, prior) in std::mem::take(&mut state.unsynced) {
            if let Some(seed) = self.partial_seed {
                let h = blake3::hash(&[&seed.to_le_bytes()[..], key.name().as_bytes()].concat());
                if h.as_bytes()[0] & 1 == 0 {
                    continue; // this write happened to reach the disk
                }
            }
            match prior {
                Some(data) => self.inner.put(&key, &data)?,
                None => self.inner.delete(&key)?,
            }
        }
        // For a durable inner store: the restored state is what survives.
        self.inner.barrier()
    }

    /// Remember `key`'s durable content before its first unsynced change.
    fn log(&self, state: &mut State, key: &ObjectKey) -> Result<()> {
        if !self.lose_unsynced || state.unsynced.contains_key(key) {
            return Ok(());
        }
        let prior = match self.inner.get(key) {
            Ok(data) => Some(data),
            Err(Error::MissingObject(_)) => None,
            Err(e) => return Err(e),
        };
        state.unsynced.insert(key.clone(), prior);
        Ok(())
    }
}

impl<B: ObjectStore> ObjectStore for FaultyStore<B> {
    /// Fails before writing anything: a put that fails leaves no object.
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        let mut state = self.mutation()?;
        self.log(&mut state, key)?;
        self.inner.put(key, data)
    }

    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        self.check()?;
        self.inner.get(key)
    }

    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        self.check()?;
        self.inner.get_into(key, buf)
    }

    fn prefetch(&self, key: &ObjectKey) {
        self.inner.prefetch(key)
    }
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        self.check()?;
        self.inner.get_whole(key, reuse)
    }

    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.check()?;
        self.inner.get_range(key, offset, len)
    }

    fn size(&self, key: &ObjectKey) -> Result<u64> {
        self.check()?;
        self.inner.size(key)
    }

    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        self.check()?;
        self.inner.list(kind)
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let mut state = self.mutation()?;
        self.log(&mut state, key)?;
        self.inner.delete(key)
    }

    fn barrier(&self) -> Result<()> {
        let mut state = self.mutation()?;
        self.inner.barrier()?;
        state.unsynced.clear();
        Ok(())
    }

    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        let mut state = self.mutation()?;
        let created = self.inner.put_if_absent(key, data)?;
        if created {
            // Durable on return, and so is the directory entry it replaced:
            // a power loss must not bring back an earlier deleted object.
            state.unsynced.remove(key);
        }
        Ok(created)
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn clean_interrupted(&self) -> Result<usize> {
        self.check()?;
        self.inner.clean_interrupted()
    }
}
