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
//! Memory is bounded by [`Permits`]: a read is requested only while fewer
//! than `n` loaded containers wait for the assembler. The buffers of
//! evicted containers come back through [`Buffers`] and are read into again.

use crate::container::{Container, ContainerId, ContainerStore};
use crate::error::{Error, Result};
use std::sync::mpsc::{sync_channel, Receiver, RecvError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::Scope;

/// Loaded containers that may wait for the assembler beyond the cache
/// itself: the read-ahead depth, and its memory (8 × 4 MiB by default).
pub(crate) const READ_AHEAD: usize = 8;

/// A container being read: the assembler receives it (or why it failed).
pub(crate) type Loaded = Receiver<Result<Container>>;

/// One read for a worker.
struct Job {
    id: ContainerId,
    reply: SyncSender<Result<Container>>,
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
                    let Ok(job) = job else { return };
                    // The assembler may have stopped (an error); nobody waits.
                    let _ = job.reply.send(store.read_into(job.id, buffers.take()));
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
        self.jobs.send(Job { id, reply }).ok()
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

/// Spare container buffers, shared by the loaders (which read into them)
/// and the assembler (which returns those of evicted containers).
#[derive(Clone, Default)]
pub(crate) struct Buffers(Arc<Mutex<Vec<Vec<u8>>>>);

impl Buffers {
    /// At most this many spare buffers are kept; the rest are freed. The
    /// read-ahead's worth: more would only hold memory (16 held 64 MiB).
    const KEEP: usize = READ_AHEAD;

    fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .ok()
            .and_then(|mut v| v.pop())
            .unwrap_or_default()
    }

    /// Return the buffer of a container the assembler is done with.
    pub(crate) fn give(&self, c: Container) {
        let buf = c.into_buffer();
        if let Ok(mut spare) = self.0.lock() {
            if spare.len() < Self::KEEP {
                spare.push(buf);
            }
        }
    }
}
