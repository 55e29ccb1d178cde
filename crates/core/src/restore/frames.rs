//! The restore's opened frames: a small cache, bounded by bytes, of the
//! frames (compressed and sealed runs of chunks, `docs/FORMAT.md`
//! "Frames") that chunks were last copied out of.
//!
//! Why: a restore holds containers as stored and opens a frame only when a
//! chunk in it is needed, so the memory of a cached container is its
//! stored bytes, not 4 MiB of plain ones. A recipe takes a frame's chunks
//! mostly one after the other, sometimes coming back to it after chunks of
//! other containers (a file that repeats another's), so the frames opened
//! last are kept, least recently used going first. Container contents never
//! change under an id, so a frame stays valid after its container leaves
//! the cache.
//!
//! Frames the assembler will need soon are handed to the
//! [openers](super::openers) ahead of time ([`OpenFrames::request`]); they
//! count in the budget from then on, and a chunk of one waits for it.

use super::openers::{self, Openers, Opening};
use crate::container::{Container, ContainerId, ContainerStore};
use crate::error::Result;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Opened frames, most recently used last, and frames being opened.
pub(crate) struct OpenFrames {
    /// Plain bytes kept at most (one frame is always kept, however large).
    budget: usize,
    /// Plain bytes of the opened frames and of those being opened.
    held: usize,
    frames: VecDeque<Opened>,
    /// Frames being opened by the openers, by container and stored offset,
    /// with their plain length.
    opening: HashMap<(ContainerId, u32), (usize, Opening)>,
    /// Plain bytes being opened.
    ahead: usize,
}

struct Opened {
    container: ContainerId,
    /// The frame's stored offset: it names the frame within its container.
    stored_offset: u32,
    plain: Vec<u8>,
}

impl OpenFrames {
    pub(crate) fn new(budget: usize) -> Self {
        OpenFrames {
            budget,
            held: 0,
            frames: VecDeque::new(),
            opening: HashMap::new(),
            ahead: 0,
        }
    }

    /// Plain bytes of the frames being opened ahead.
    pub(crate) fn ahead(&self) -> usize {
        self.ahead
    }

    /// Have `openers` open the frame of chunk `i` of `c` now, unless it
    /// needs no opening or is opened or being opened already.
    pub(crate) fn request(&mut self, c: &Arc<Container>, i: usize, openers: &Openers) {
        let m = &c.meta[i];
        if !c.needs_opening(m) {
            return;
        }
        let key = (c.id(), m.stored_offset);
        if self.opening.contains_key(&key)
            || self
                .frames
                .iter()
                .any(|f| (f.container, f.stored_offset) == key)
        {
            return;
        }
        let len = m.frame_len as usize;
        let mut buf = self.make_room(len);
        // Allocated here rather than on the opener's thread: a buffer made
        // there would live in that thread's malloc arena, one more arena
        // of spare memory (restore peak RSS grew 15 MB so). Not cleared:
        // the opener only resizes it (opening writes every byte or fails),
        // so a reused buffer is not zeroed first (3 % of a restore's CPU
        // went to zeroing frames that were then overwritten).
        buf.reserve(len.saturating_sub(buf.len()));
        let opening = openers.open(Arc::clone(c), i, buf);
        self.held += len;
        self.ahead += len;
        self.opening.insert(key, (len, opening));
    }

    /// The plain bytes of chunk `i` of `c`: out of the container when it
    /// holds them as they are, otherwise out of its opened frame (opened,
    /// and so authenticated, now if it is not kept).
    pub(crate) fn chunk<'a>(
        &'a mut self,
        c: &'a Container,
        i: usize,
        store: &ContainerStore,
    ) -> Result<&'a [u8]> {
        let m = &c.meta[i];
        if !c.needs_opening(m) {
            return Ok(c.bytes(m));
        }
        let (id, at) = (c.id(), m.stored_offset);
        let k = match self
            .frames
            .iter()
            .position(|f| f.container == id && f.stored_offset == at)
        {
            Some(k) => k,
            None => {
                let buf = match self.opening.remove(&(id, at)) {
                    Some((len, opening)) => {
                        // Counted since it was requested.
                        self.held -= len;
                        self.ahead -= len;
                        openers::receive(&opening)?
                    }
                    None => {
                        let mut buf = self.make_room(m.frame_len as usize);
                        store.open_frame(c, i, &mut buf)?;
                        buf
                    }
                };
                self.held += buf.len();
                self.frames.push_back(Opened {
                    container: id,
                    stored_offset: at,
                    plain: buf,
                });
                self.frames.len() - 1
            }
        };
        // Most recently used last.
        if k + 1 != self.frames.len() {
            let f = self.frames.remove(k).expect("a kept frame");
            self.frames.push_back(f);
        }
        let plain = &self.frames.back().expect("a kept frame").plain;
        let start = m.frame_offset as usize;
        Ok(plain.get(start..start + m.len as usize).unwrap_or(&[]))
    }

    /// Drop the least recently used frames until `need` more bytes fit the
    /// budget (or none is left); the last one dropped is handed back as the
    /// buffer for the next frame.
    fn make_room(&mut self, need: usize) -> Vec<u8> {
        let mut spare = Vec::new();
        while !self.frames.is_empty() && self.held + need > self.budget {
            let f = self.frames.pop_front().expect("not empty");
            self.held -= f.plain.len();
            spare = f.plain;
        }
        spare
    }

    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        (self.frames.len(), self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::ChunkKind;
    use crate::fingerprint::HashAlgo;
    use crate::seal::keys::MasterKey;
    use crate::seal::{CipherKind, Compression, Sealer};
    use std::sync::Arc;

    /// A store sealing with `sealer`: what opens the frames (a container
    /// read from it again, when one does not open, is not there to read).
    fn store(sealer: &Arc<Sealer>) -> ContainerStore {
        let mem = Arc::new(crate::backend::MemoryStore::new());
        let objects = crate::seal::SealedStore::new(mem, sealer.clone());
        ContainerStore::new(objects, HashAlgo::Blake3, false, Default::default())
    }

    fn sealer() -> Arc<Sealer> {
        let key = MasterKey::from_bytes([7; 32]);
        Arc::new(Sealer::new(
            Some(key.cipher(CipherKind::Xaes256Gcm)),
            Compression::Auto,
        ))
    }

    /// A compressed, sealed container `id` of `chunks`, in 4 KiB frames.
    fn sealed_of(
        sealer: &Arc<Sealer>,
        id: u64,
        chunks: impl Iterator<Item = Vec<u8>>,
    ) -> (Container, Vec<Vec<u8>>) {
        let mut b = crate::container::ContainerBuilder::sealing(
            ChunkKind::Data,
            1 << 20,
            false,
            sealer.clone(),
            Compression::Auto,
            4096,
        );
        let chunks: Vec<Vec<u8>> = chunks.collect();
        for bytes in &chunks {
            b.push(HashAlgo::Blake3.hash(bytes), bytes.len() as u32, bytes);
        }
        let (entries, framed) = b.take();
        let id = ContainerId(id);
        let object = crate::container::format::encode_framed(
            id,
            ChunkKind::Data,
            HashAlgo::Blake3,
            false,
            &entries,
            framed,
            sealer,
        );
        let (header, meta) = crate::container::format::decode(id, &object, sealer).unwrap();
        (Container::unopened(header, meta, object), chunks)
    }

    /// A compressed, sealed container of 8 frames of 4 chunks of 1 KiB each.
    fn container(sealer: &Arc<Sealer>) -> (Container, Vec<Vec<u8>>) {
        sealed_of(
            sealer,
            5,
            (0..32u32).map(|n| {
                (0..1024)
                    .map(|i| ((i / 7) as u32 * n % 251) as u8)
                    .collect()
            }),
        )
    }

    #[test]
    fn copies_every_chunk_and_keeps_no_more_than_its_budget() {
        let sealer = sealer();
        let store = store(&sealer);
        let (c, chunks) = container(&sealer);
        assert!(c.needs_opening(&c.meta[0]), "compressed chunks are opened");
        assert_eq!(crate::container::frames(&c.meta).count(), 8);
        // Two frames' worth: every chunk, in an order that comes back to
        // frames it left, is exact.
        let mut open = OpenFrames::new(8192);
        for round in 0..2 {
            for i in (0..32).rev().chain(0..32) {
                let got = open.chunk(&c, i, &store).unwrap().to_vec();
                assert_eq!(got, chunks[i], "round {round} chunk {i}");
                let (n, bytes) = open.held();
                assert!(n <= 2 && bytes <= 8192, "{n} frames, {bytes} bytes");
            }
        }
        // Below one frame: one frame is still kept, and the bytes are exact.
        let mut tiny = OpenFrames::new(1);
        for (i, want) in chunks.iter().enumerate() {
            assert_eq!(tiny.chunk(&c, i, &store).unwrap(), &want[..]);
            assert_eq!(tiny.held().0, 1);
        }
    }

    /// Frames requested ahead are opened on the openers' threads, counted
    /// in the budget until used, asked for once however many chunks need
    /// them, and give every chunk exactly; a container freed by the caller
    /// meanwhile stays readable by the frame being opened.
    #[test]
    fn frames_opened_ahead_give_exact_chunks_once_each() {
        let sealer = sealer();
        let store = store(&sealer);
        let (c, chunks) = container(&sealer);
        let c = Arc::new(c);
        std::thread::scope(|scope| {
            let buffers = super::super::loader::Buffers::default();
            let openers = Openers::spawn(scope, &store, 2, &buffers).unwrap();
            let mut open = OpenFrames::new(64 << 10);
            // Every chunk of the first four frames: four frames requested.
            for i in 0..16 {
                open.request(&c, i, &openers);
            }
            assert_eq!(open.ahead(), 4 * 4096, "each frame requested once");
            assert_eq!(open.held(), (0, 4 * 4096));
            // The caller's own reference goes; the openers hold theirs.
            let mine = Arc::clone(&c);
            for (i, want) in chunks.iter().enumerate() {
                assert_eq!(
                    open.chunk(&mine, i, &store).unwrap(),
                    &want[..],
                    "chunk {i}"
                );
            }
            assert_eq!(open.ahead(), 0);
            // All eight frames are kept now (32 KiB under 64 KiB); a request
            // for a kept frame is not sent again.
            open.request(&c, 0, &openers);
            assert_eq!(open.ahead(), 0);
            assert_eq!(open.held(), (8, 8 * 4096));
        });
    }

    /// Buffers are reused without being zeroed: frames of different
    /// lengths and contents, opened ahead into buffers that held others
    /// (a budget of two frames), still give every chunk exactly, whichever
    /// frame a buffer held before.
    #[test]
    fn reused_frame_buffers_never_show_earlier_bytes() {
        let sealer = sealer();
        let store = store(&sealer);
        // 200 to 3,000 bytes: frames of unequal lengths; every other chunk
        // random-looking (stored raw), the others compressible.
        let (c, chunks) = sealed_of(
            &sealer,
            6,
            (0..48u32).map(|n| {
                let len = 200 + (n as usize * 1_237) % 2_800;
                (0..len as u32)
                    .map(|i| match n % 2 {
                        0 => (i.wrapping_mul(2_654_435_761) >> 13 ^ n) as u8,
                        _ => (i / 5 + n) as u8,
                    })
                    .collect()
            }),
        );
        let c = Arc::new(c);
        let lens: std::collections::BTreeSet<u32> = c.meta.iter().map(|m| m.frame_len).collect();
        assert!(lens.len() > 2, "frames of several lengths: {lens:?}");
        std::thread::scope(|scope| {
            let buffers = super::super::loader::Buffers::default();
            let openers = Openers::spawn(scope, &store, 2, &buffers).unwrap();
            let mut open = OpenFrames::new(2 * 4096);
            let order: Vec<usize> = (0..48)
                .rev()
                .chain(0..48)
                .chain((0..48).step_by(7))
                .collect();
            for (k, &i) in order.iter().enumerate() {
                // Ask for the next chunks' frames first, as the assembler does.
                for &j in order.iter().skip(k + 1).take(3) {
                    open.request(&c, j, &openers);
                }
                let got = open.chunk(&c, i, &store).unwrap();
                assert_eq!(got, &chunks[i][..], "step {k}: chunk {i}");
            }
        });
    }

    /// A byte changed in a frame's stored bytes (past the checksums a
    /// container read verifies) is refused when the frame is opened, by
    /// the container's name and the chunk's fingerprint; the other frames
    /// still open.
    #[test]
    fn a_tampered_frame_is_refused_when_opened() {
        let sealer = sealer();
        let store = store(&sealer);
        let (c, chunks) = container(&sealer);
        let (header, meta) = (c.header, c.meta.clone());
        let victim = 9;
        let at = crate::container::format::HEADER_LEN + meta[victim].stored_offset as usize + 30;
        let mut object = c.into_buffer();
        object[at] ^= 0x10;
        let c = Container::unopened(header, meta, object);
        let mut open = OpenFrames::new(1 << 20);
        let err = open.chunk(&c, victim, &store).unwrap_err().to_string();
        assert!(
            err.contains("0000000000000005") && err.contains(&c.meta[victim].fp.to_hex()),
            "{err}"
        );
        assert!(err.contains("does not authenticate"), "{err}");
        // Another frame of the same container opens.
        assert_eq!(open.chunk(&c, 0, &store).unwrap(), &chunks[0][..]);
    }
}
