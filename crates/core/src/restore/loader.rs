//! The restore's container loaders: worker threads that read and verify
//! containers in the order the scheduler asks for them.
//!
//! Why: a restore spends most of its time reading containers (the system
//! call that copies them out of the page cache, the checksum, the chunk
//! table). Done one at a time on the thread that walks the recipe, the disk
//! sees one request at a time and the other core idles. The cache policy is
//! run ahead on container ids, so the reads are known before their chunks
//! are needed: several workers keep several reads in flight, and the
//! assembler only copies chunks out.
//!
//! Memory is bounded twice: by [`Permits`], a read is requested only while
//! fewer than `n` loaded containers wait for the assembler; by the
//! [`Budget`], only while the stored bytes of the containers read and not
//! yet freed fit the restore's memory ceiling. The buffers of evicted
//! containers come back through [`Buffers`] and are read into again.

use crate::container::{Container, ContainerId, ContainerStore};
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{sync_channel, Receiver, RecvError, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::Scope;

/// Loaded containers that may wait for the assembler beyond the cache
/// itself: the read-ahead depth (their memory counts in the [`Budget`]).
pub(crate) const READ_AHEAD: usize = 8;

/// A container being read: the assembler receives it (or why it failed).
pub(crate) type Loaded = Receiver<Result<Container>>;

/// One task for a worker.
enum Job {
    /// Read container `id`, verified, into `reply`.
    Read {
        id: ContainerId,
        reply: SyncSender<Result<Container>>,
    },
    /// Have the store start reading `id` (see [`Loaders::prefetch`]).
    Prefetch(ContainerId),
}

/// The scheduler's end of the pool: where read requests go.
pub(crate) struct Loaders {
    jobs: SyncSender<Job>,
}

impl Loaders {
    /// Start `workers` threads in `scope` reading from `store`. They stop
    /// when the returned `Loaders` is dropped. Fails only if not even one
    /// thread can be started.
    pub(crate) fn spawn<'scope>(
        scope: &'scope Scope<'scope, '_>,
        store: &'scope ContainerStore,
        workers: usize,
        buffers: &Buffers,
    ) -> Result<Loaders> {
        // The queue itself is bounded by the permits; this only avoids a
        // rendezvous per request.
        let (jobs, queue) = sync_channel::<Job>(64);
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        let mut failure = None;
        for _ in 0..workers.max(1) {
            let queue = Arc::clone(&queue);
            let buffers = buffers.clone();
            // Named for profilers. Fewer workers than asked still work.
            let spawned = std::thread::Builder::new()
                .name("tessera-load".into())
                .spawn_scoped(scope, move || loop {
                    // Hold the lock only to take a job, not while reading.
                    let job = match queue.lock() {
                        Ok(q) => q.recv(),
                        Err(_) => return,
                    };
                    let (id, reply) = match job {
                        Ok(Job::Read { id, reply }) => (id, reply),
                        Ok(Job::Prefetch(id)) => {
                            store.prefetch(id);
                            continue;
                        }
                        Err(_) => return,
                    };
                    let read = match buffers.reuse(id) {
                        Some(c) => {
                            store.count_read(&c);
                            Ok(c)
                        }
                        None => store.read_unopened(id, buffers.take()),
                    };
                    // The assembler may have stopped (an error); nobody waits.
                    let _ = reply.send(read);
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) if started == 0 => Err(Error::io("cannot start a container loader thread", e)),
            _ => Ok(Loaders { jobs }),
        }
    }

    /// Start reading `id`; the container arrives on the returned receiver.
    /// `None` if the workers are gone (they only stop when told to).
    pub(crate) fn request(&self, id: ContainerId) -> Option<Loaded> {
        let (reply, loaded) = sync_channel(1);
        self.forward(id, reply)?;
        Some(loaded)
    }

    /// Start reading `id` into a receiver made beforehand.
    pub(crate) fn forward(
        &self,
        id: ContainerId,
        reply: SyncSender<Result<Container>>,
    ) -> Option<()> {
        self.jobs.send(Job::Read { id, reply }).ok()
    }

    /// Have the store start reading `id` into the page cache (a local
    /// store; elsewhere nothing happens), on an idle worker: the disk
    /// works ahead of the reads without the restore holding the bytes. A
    /// hint, dropped when the queue is full.
    pub(crate) fn prefetch(&self, id: ContainerId) {
        let _ = self.jobs.try_send(Job::Prefetch(id));
    }
}

/// Wait for a requested container.
pub(crate) fn receive(loaded: &Loaded) -> Result<Container> {
    loaded.recv().unwrap_or_else(|RecvError| {
        Err(Error::io(
            "cannot read a container",
            std::io::Error::other("its loader thread stopped"),
        ))
    })
}

/// How many loaded containers may wait for the assembler: the scheduler takes
/// a permit per read, the assembler returns it when it takes the container.
pub(crate) struct Permits {
    take: SyncSender<()>,
}

/// The assembler's end of [`Permits`].
pub(crate) struct PermitReturn {
    give_back: Receiver<()>,
}

/// Permits for `n` reads ahead.
pub(crate) fn permits(n: usize) -> (Permits, PermitReturn) {
    let (take, give_back) = sync_channel(n.max(1));
    (Permits { take }, PermitReturn { give_back })
}

/// What taking a permit found.
pub(crate) enum Permit {
    Granted,
    /// All permits are out: flush what the assembler has not seen yet, then
    /// [`Permits::wait`].
    Exhausted,
    /// The assembler stopped.
    Closed,
}

impl Permits {
    pub(crate) fn try_take(&self) -> Permit {
        match self.take.try_send(()) {
            Ok(()) => Permit::Granted,
            Err(TrySendError::Full(())) => Permit::Exhausted,
            Err(TrySendError::Disconnected(())) => Permit::Closed,
        }
    }

    /// Block until a permit is free; false if the assembler stopped.
    pub(crate) fn wait(&self) -> bool {
        self.take.send(()).is_ok()
    }
}

impl PermitReturn {
    /// The assembler took a loaded container.
    pub(crate) fn give_back(&self) {
        // Empty or closed: the scheduler took no permit for it or has stopped.
        let _ = self.give_back.try_recv();
    }
}

/// The restore's memory ceiling over the containers it holds: stored bytes
/// of every container read and not yet freed (cached, waiting, in flight).
/// The scheduler takes a container's bytes before it requests the read,
/// the assembler gives them back when it frees the container. One
/// container is always allowed, however large, so a ceiling below a
/// container still restores (a container at a time).
pub(crate) struct Budget {
    state: Mutex<Held>,
    freed: Condvar,
    limit: u64,
}

struct Held {
    bytes: u64,
    /// The most held at once.
    #[cfg_attr(not(test), allow(dead_code))]
    peak: u64,
    /// Bytes given back that were not held (a bug: the ceiling would then
    /// count less than is held).
    #[cfg_attr(not(test), allow(dead_code))]
    over: u64,
    /// The assembler stopped: nothing will be freed.
    closed: bool,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            state: Mutex::new(Held {
                bytes: 0,
                peak: 0,
                over: 0,
                closed: false,
            }),
            freed: Condvar::new(),
            limit,
        })
    }

    fn fits(&self, held: &Held, n: u64) -> bool {
        held.bytes == 0 || held.bytes.saturating_add(n) <= self.limit
    }

    /// Take `n` bytes if they fit now.
    pub(crate) fn try_take(&self, n: u64) -> bool {
        let Ok(mut held) = self.state.lock() else {
            return false;
        };
        let fits = self.fits(&held, n);
        if fits {
            held.add(n);
        }
        fits
    }

    /// Block until `n` bytes fit, then take them; false if the assembler
    /// stopped.
    pub(crate) fn take(&self, n: u64) -> bool {
        let Ok(mut held) = self.state.lock() else {
            return false;
        };
        while !held.closed && !self.fits(&held, n) {
            held = match self.freed.wait(held) {
                Ok(h) => h,
                Err(_) => return false,
            };
        }
        if held.closed {
            return false;
        }
        held.add(n);
        true
    }

    /// The assembler freed a container of `n` bytes.
    pub(crate) fn give(&self, n: u64) {
        if let Ok(mut held) = self.state.lock() {
            held.over += n.saturating_sub(held.bytes);
            held.bytes = held.bytes.saturating_sub(n);
        }
        self.freed.notify_all();
    }

    /// The bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.state.lock().map_or(0, |h| h.bytes)
    }

    /// The ceiling, the most held at once, and bytes given back beyond
    /// those held.
    #[cfg(test)]
    pub(crate) fn accounts(&self) -> (u64, u64, u64) {
        self.state
            .lock()
            .map_or((self.limit, u64::MAX, u64::MAX), |h| {
                (self.limit, h.peak, h.over)
            })
    }
}

impl Held {
    fn add(&mut self, n: u64) {
        self.bytes += n;
        self.peak = self.peak.max(self.bytes);
    }
}

/// The assembler's hold on the [`Budget`]: when it goes (the restore ended
/// or failed), a scheduler waiting for bytes stops waiting.
pub(crate) struct BudgetReturn(pub(crate) Arc<Budget>);

impl Drop for BudgetReturn {
    fn drop(&mut self) {
        if let Ok(mut held) = self.0.state.lock() {
            held.closed = true;
        }
        self.0.freed.notify_all();
    }
}

/// What evicted containers leave for the next reads, shared by the
/// loaders (which read into it), the assembler and the frame openers (which
/// give back the containers they are done with) and the scheduler (which
/// says which evicted containers it will read again).
///
/// Two kinds: spare buffers, read into again; and *kept mappings*. A
/// container mapped from a file (the local store maps large objects) that
/// the scheduler will read again keeps its mapping, its pages given back
/// to the kernel ([`ObjectBytes::discard`](crate::backend::ObjectBytes)),
/// and the next read of it takes the mapping instead of mapping, checking
/// and decoding the same unchanged object again (it is counted as a
/// container read all the same: the policy read it again). Why: under the
/// memory ceiling a restore of a fragmented backup re-reads containers it
/// spilled, one read at a time while the ceiling is full; `lab bench`'s
/// restore at the default ceiling took 1.53× its uncapped time, its CPU
/// only 1.2×. A restore that knows which containers it reads again
/// ([`Buffers::uncaching`]) lets any other mapped container leave the
/// page cache as it is given back.
#[derive(Clone, Default)]
pub(crate) struct Buffers(Arc<Mutex<Spares>>);

#[derive(Default)]
struct Spares {
    buffers: Vec<Vec<u8>>,
    /// Evicted containers the scheduler will read again.
    wanted: HashSet<ContainerId>,
    /// Their mappings, pages given back, and their chunks.
    kept: HashMap<ContainerId, Container>,
    kept_chunks: usize,
    /// Reads served from kept mappings, for tests.
    reused: u64,
    /// Whether a mapped container not wanted again leaves the page cache
    /// with its mapping ([`Buffers::uncaching`]).
    uncache: bool,
}

impl Buffers {
    /// At most this many spare buffers are kept; the rest are freed. One
    /// per loader that reads at once; more would only hold memory outside
    /// the [`Budget`] (16 held 64 MiB). A local store maps large
    /// containers instead, and has none to give back.
    const KEEP: usize = 4;
    /// Chunks of the kept mappings at most: each holds its container's
    /// metadata (about 110 bytes a chunk: ~56 KiB for 4 MiB of 8 KiB
    /// chunks, three times that for a compressed container) outside the
    /// [`Budget`], so this bounds them to ~3.5 MiB; beyond it, evicted
    /// containers are read again. Measured at most: 23,176 chunks in 52
    /// containers on `lab bench`'s stream, 10,490 in 24 restoring a
    /// compressed 2.29 GB system tree.
    const KEEP_CHUNKS: usize = 32 << 10;

    /// Buffers for a restore that knows every container it will read
    /// again (the scheduler says so with [`want`](Self::want)): any other
    /// mapped container given back leaves the page cache too
    /// ([`ObjectBytes::uncache`](crate::backend::ObjectBytes)), its pages
    /// free for the restore's writes.
    pub(crate) fn uncaching() -> Self {
        let spares = Spares {
            uncache: true,
            ..Spares::default()
        };
        Buffers(Arc::new(Mutex::new(spares)))
    }

    fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .ok()
            .and_then(|mut v| v.buffers.pop())
            .unwrap_or_default()
    }

    /// Reads served from kept mappings so far.
    #[cfg(test)]
    pub(crate) fn reused(&self) -> u64 {
        self.0.lock().map_or(0, |s| s.reused)
    }

    /// The scheduler evicted container `id` and will read it again.
    pub(crate) fn want(&self, id: ContainerId) {
        if let Ok(mut s) = self.0.lock() {
            s.wanted.insert(id);
        }
    }

    /// The kept mapping of `id`, for its next read. Either way `id` is no
    /// longer wanted: a copy given back later is not kept.
    fn reuse(&self, id: ContainerId) -> Option<Container> {
        let mut s = self.0.lock().ok()?;
        s.wanted.remove(&id);
        let c = s.kept.remove(&id)?;
        s.kept_chunks -= c.meta.len();
        s.reused += 1;
        Some(c)
    }

    /// Return a container the assembler is done with: its mapping kept if
    /// it will be read again, else its buffer.
    pub(crate) fn give(&self, c: Container) {
        if !c.object().is_mapped() {
            let buf = c.into_buffer();
            if let Ok(mut s) = self.0.lock() {
                if s.buffers.len() < Self::KEEP {
                    s.buffers.push(buf);
                }
            }
            return;
        }
        // A mapping has no buffer to give: kept, or unmapped here.
        let Ok(mut s) = self.0.lock() else { return };
        if s.wanted.contains(&c.id()) {
            // Without room it is read again from the file, still cached.
            if s.kept_chunks + c.meta.len() <= Self::KEEP_CHUNKS {
                s.wanted.remove(&c.id());
                let object = c.object();
                object.discard(0..object.len());
                s.kept_chunks += c.meta.len();
                if let Some(old) = s.kept.insert(c.id(), c) {
                    s.kept_chunks -= old.meta.len();
                }
            }
            return;
        }
        let uncache = s.uncache;
        drop(s);
        if uncache {
            c.uncache();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn budget_holds_one_container_above_it_waits_for_bytes_and_stops_when_closed() {
        let b = Budget::new(10);
        assert!(
            b.try_take(20),
            "a container above the ceiling is allowed alone"
        );
        assert!(!b.try_take(1));
        b.give(20);
        assert!(b.try_take(6));
        assert!(!b.try_take(6));
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || b.take(6))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            b.held(),
            6,
            "the waiter takes nothing before bytes are freed"
        );
        b.give(6);
        assert!(waiter.join().unwrap());
        assert_eq!(b.held(), 6);
        // The assembler stops: a waiting scheduler gives up.
        let hold = BudgetReturn(b.clone());
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || b.take(10))
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(hold);
        assert!(!waiter.join().unwrap());
        assert_eq!(b.held(), 6);
    }
}
