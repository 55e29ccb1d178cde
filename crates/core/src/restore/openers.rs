//! The restore's frame openers: worker threads that decrypt and decompress
//! the frames the assembler will copy chunks out of next.
//!
//! Why: opening a frame (authenticating it, then zstd) is most of a
//! compressed restore's CPU time. Done on the assembler's thread, one frame
//! after the other, it made that thread the restore's critical path while
//! the other core waited on it. The assembler looks ahead along its ops
//! (the recipe order is known) and hands the frames it will need to these
//! workers, a bounded number of bytes ahead ([`OpenFrames`]), so frames
//! open on every core while it copies.
//!
//! [`OpenFrames`]: super::frames::OpenFrames

use super::loader::Buffers;
use crate::container::{Container, ContainerStore};
use crate::error::{Error, Result};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::Scope;

/// A frame being opened: its plain bytes arrive here (or why it failed).
pub(crate) type Opening = Receiver<Result<Vec<u8>>>;

/// One frame for a worker: the frame holding chunk `i` of `container`,
/// opened into `buf` (a spare buffer, reused).
struct Job {
    container: Arc<Container>,
    i: usize,
    buf: Vec<u8>,
    reply: SyncSender<Result<Vec<u8>>>,
}

/// The assembler's end of the pool. Workers stop when it is dropped.
pub(crate) struct Openers {
    jobs: SyncSender<Job>,
}

impl Openers {
    /// `workers` threads in `scope`; `None` if not one can be started (the
    /// assembler then opens every frame itself). A container whose last
    /// user is a worker (the assembler freed it meanwhile) has its buffer
    /// given to `buffers`, as the assembler would have.
    pub(crate) fn spawn<'scope>(
        scope: &'scope Scope<'scope, '_>,
        store: &'scope ContainerStore,
        workers: usize,
        buffers: &Buffers,
    ) -> Option<Openers> {
        // Bounded by the assembler's look-ahead; this only avoids a
        // rendezvous per frame.
        let (jobs, queue) = sync_channel::<Job>(64);
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        for _ in 0..workers.max(1) {
            let queue = Arc::clone(&queue);
            let buffers = buffers.clone();
            let spawned = std::thread::Builder::new()
                .name("tessera-open".into())
                .spawn_scoped(scope, move || loop {
                    // Hold the lock only to take a job, not while opening.
                    let job = match queue.lock() {
                        Ok(q) => q.recv(),
                        Err(_) => return,
                    };
                    let Ok(Job {
                        container,
                        i,
                        mut buf,
                        reply,
                    }) = job
                    else {
                        return;
                    };
                    let opened = store.open_frame(&container, i, &mut buf).map(|()| buf);
                    // Its last user may be this: its buffer is read into next.
                    if let Ok(c) = Arc::try_unwrap(container) {
                        buffers.give(c);
                    }
                    // The assembler may have stopped (an error); nobody waits.
                    let _ = reply.send(opened);
                });
            if spawned.is_ok() {
                started += 1;
            }
        }
        (started > 0).then_some(Openers { jobs })
    }

    /// Start opening the frame holding chunk `i` of `container` into `buf`.
    pub(crate) fn open(&self, container: Arc<Container>, i: usize, buf: Vec<u8>) -> Opening {
        let (reply, opening) = sync_channel(1);
        let job = Job {
            container,
            i,
            buf,
            reply,
        };
        if let Err(e) = self.jobs.send(job) {
            // Workers only stop when told to; answer for them.
            let _ = e.0.reply.send(Err(stopped()));
        }
        opening
    }
}

/// Wait for a frame being opened.
pub(crate) fn receive(opening: &Opening) -> Result<Vec<u8>> {
    opening.recv().unwrap_or_else(|_| Err(stopped()))
}

fn stopped() -> Error {
    Error::io(
        "cannot open a frame",
        std::io::Error::other("its opener thread stopped"),
    )
}
