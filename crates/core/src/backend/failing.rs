//! Fault injection for crash-safety tests.
//!
//! Mutating operations (`put`, `delete`, `sync`, `create_new`) are numbered
//! from 1. When the number reaches `fail_at`, the process is considered dead
//! at that instant: that operation fails with [`Error::Injected`] without
//! having any effect (a failing `put` writes nothing, a failing `delete`
//! deletes nothing, a failing `sync` makes nothing durable), and every later
//! operation of any kind, reads included, fails the same way. What the inner
//! backend holds afterwards is what the next process would find.
//!
//! With [`FailingBackend::with_lost_unsynced`] the failure is a power loss
//! instead: puts and deletes since the last successful `sync` are undone in
//! the inner backend (put objects removed or restored to their previous
//! content, deleted objects restored). `create_new` is durable on return and
//! is never undone.
//!
//! [`FailingBackend::with_partial_loss`] models a power loss on a disk that
//! reorders writes: each unsynced key is rolled back or kept independently
//! (chosen by a seed), so a later write can survive while an earlier one is
//! lost. This is what catches a missing `sync` between writing objects and
//! publishing the manifest that names them.
//!
//! A test first runs an operation with `fail_at = None` to learn how many
//! mutating operations it performs ([`FailingBackend::ops`]), then repeats it
//! with every `fail_at` in that range.
//!
//! `remove_temporaries` is passed through uncounted: the backends used with
//! this wrapper have no temporaries that could change what a reader sees.

use super::{Backend, ObjectBytes};
use crate::error::{Error, Result};
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
    unsynced: BTreeMap<String, Option<Vec<u8>>>,
}

pub struct FailingBackend<B: Backend> {
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

impl<B: Backend> FailingBackend<B> {
    /// Fail at mutating operation `fail_at` (1-based) and ever after; `None`
    /// never fails (to count operations).
    pub fn new(inner: B, fail_at: Option<u64>) -> Self {
        FailingBackend {
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
        FailingBackend {
            lose_unsynced: true,
            ..Self::new(inner, fail_at)
        }
    }

    /// Like [`with_lost_unsynced`](Self::with_lost_unsynced), but each unsynced
    /// key is independently lost or kept, as decided by `seed`.
    pub fn with_partial_loss(inner: B, fail_at: Option<u64>, seed: u64) -> Self {
        FailingBackend {
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
                let h = blake3::hash(&[&seed.to_le_bytes()[..], key.as_bytes()].concat());
                if h.as_bytes()[0] & 1 == 0 {
                    continue; // this write happened to reach the disk
                }
            }
            match prior {
                Some(data) => self.inner.put(&key, &data)?,
                None => self.inner.delete(&key)?,
            }
        }
        // For a durable inner backend: the restored state is what survives.
        self.inner.sync()
    }

    /// Remember `key`'s durable content before its first unsynced change.
    fn log(&self, state: &mut State, key: &str) -> Result<()> {
        if !self.lose_unsynced || state.unsynced.contains_key(key) {
            return Ok(());
        }
        let prior = match self.inner.get(key) {
            Ok(data) => Some(data),
            Err(Error::MissingObject(_)) => None,
            Err(e) => return Err(e),
        };
        state.unsynced.insert(key.to_string(), prior);
        Ok(())
    }
}

impl<B: Backend> Backend for FailingBackend<B> {
    /// Fails before writing anything: a put that fails leaves no object.
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        let mut state = self.mutation()?;
        self.log(&mut state, key)?;
        self.inner.put(key, data)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.check()?;
        self.inner.get(key)
    }

    fn get_into(&self, key: &str, buf: &mut Vec<u8>) -> Result<()> {
        self.check()?;
        self.inner.get_into(key, buf)
    }

    fn get_shared(&self, key: &str, reuse: Vec<u8>) -> Result<ObjectBytes> {
        self.check()?;
        self.inner.get_shared(key, reuse)
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.check()?;
        self.inner.get_range(key, offset, len)
    }

    fn size(&self, key: &str) -> Result<u64> {
        self.check()?;
        self.inner.size(key)
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        self.check()?;
        self.inner.list(prefix)
    }

    fn delete(&self, key: &str) -> Result<()> {
        let mut state = self.mutation()?;
        self.log(&mut state, key)?;
        self.inner.delete(key)
    }

    fn sync(&self) -> Result<()> {
        let mut state = self.mutation()?;
        self.inner.sync()?;
        state.unsynced.clear();
        Ok(())
    }

    fn create_new(&self, key: &str, data: &[u8]) -> Result<bool> {
        let mut state = self.mutation()?;
        let created = self.inner.create_new(key, data)?;
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

    fn remove_temporaries(&self) -> Result<usize> {
        self.check()?;
        self.inner.remove_temporaries()
    }
}
