//! Frames: runs of consecutive chunks of one container compressed and
//! sealed together, and the threads that seal them.
//!
//! Why frames: zstd on 8 KiB chunks one by one stores more and runs slower
//! than on 64–256 KiB units (`docs/FORMAT.md`, "Frames", has the figures),
//! and a restore reads a container region anyway. A frame holds whole
//! chunks, never crosses a container, and is sealed with every fingerprint
//! it holds as associated data.
//!
//! Why a pool: placement is decided in stream order on one thread (so the
//! layout does not depend on the thread count), but sealing a frame
//! depends only on its bytes. The builder hands each full frame to these
//! threads and keeps placing chunks; it collects the sealed frames in order
//! when the container is written. The threads block on a channel when idle
//! (no spinning) and live as long as the process.

use crate::fingerprint::Fingerprint;
use crate::ids::ChunkKind;
use crate::seal::{Codec, Compression, Sealer};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// One frame to seal.
pub(super) struct FrameJob {
    pub seq: u64,
    pub kind: ChunkKind,
    pub fps: Vec<Fingerprint>,
    /// The chunks' plain lengths, in order.
    pub lens: Vec<u32>,
    pub plain: Vec<u8>,
    /// Where to append the stored frame (a spare buffer, cleared).
    pub stored: Vec<u8>,
    pub sealer: Arc<Sealer>,
    pub compression: Compression,
    pub reply: Sender<FrameDone>,
}

/// A sealed frame, with the job's buffers handed back for reuse.
pub(super) struct FrameDone {
    pub seq: u64,
    pub fps: Vec<Fingerprint>,
    pub lens: Vec<u32>,
    pub plain: Vec<u8>,
    pub stored: Vec<u8>,
    pub codec: Codec,
    /// Empty: `stored` is one frame. Otherwise the frame did not compress
    /// and each chunk was sealed on its own: their stored lengths, in
    /// order (see [`FrameJob::run`]).
    pub pieces: Vec<u32>,
}

impl FrameJob {
    /// Seal the frame on this thread. A sealed frame that does not
    /// compress is sealed again chunk by chunk: framing it would save only
    /// the 40 bytes of a seal per chunk, while a damaged byte would cost
    /// every chunk of the frame and GC would have to re-seal what it
    /// splits.
    pub fn run(mut self) -> (FrameDone, Sender<FrameDone>) {
        let mut codec = self.sealer.seal_frame(
            self.kind,
            &self.fps,
            &self.plain,
            self.compression,
            &mut self.stored,
        );
        let mut pieces = Vec::new();
        if codec == Codec::Raw && self.sealer.encrypted() && self.fps.len() > 1 {
            self.stored.clear();
            let mut at = 0;
            for (fp, &len) in self.fps.iter().zip(&self.lens) {
                let start = self.stored.len();
                let plain = &self.plain[at..at + len as usize];
                codec = self.sealer.seal_frame(
                    self.kind,
                    std::slice::from_ref(fp),
                    plain,
                    Compression::Off,
                    &mut self.stored,
                );
                pieces.push((self.stored.len() - start) as u32);
                at += len as usize;
            }
        }
        let done = FrameDone {
            seq: self.seq,
            fps: self.fps,
            lens: self.lens,
            plain: self.plain,
            stored: self.stored,
            codec,
            pieces,
        };
        (done, self.reply)
    }
}

/// The process's frame-sealing threads (one per core), started on first
/// use; `None` if none could be started (frames are then sealed inline).
pub(super) fn pool() -> Option<&'static Mutex<Sender<FrameJob>>> {
    static POOL: OnceLock<Option<Mutex<Sender<FrameJob>>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = channel::<FrameJob>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut started = 0;
        for _ in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name("tessera-frame".into())
                .spawn(move || serve(&rx));
            started += spawned.is_ok() as usize;
        }
        (started > 0).then(|| Mutex::new(tx))
    })
    .as_ref()
}

fn serve(rx: &Mutex<Receiver<FrameJob>>) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let (done, reply) = job.run();
        // The builder may be gone (an error dropped it): nothing to do.
        let _ = reply.send(done);
    }
}
