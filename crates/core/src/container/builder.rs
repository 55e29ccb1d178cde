//! [`ContainerBuilder`]: the chunks of one open container, grouped into
//! frames that are compressed and sealed as they fill, framed for
//! [`ContainerStore`](super::ContainerStore) to write. Apart from `mod.rs`
//! so the container writer and the store use it without depending on the
//! folder's re-exports.

use super::format;
use super::frames::{self, FrameDone, FrameJob};
use crate::container::format::ChunkMeta;
use crate::fingerprint::Fingerprint;
use crate::ids::{ChunkKind, ContainerId};
use crate::seal::{Codec, Compression, Sealer};
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Where a frame GC copies comes from: its container and where its stored
/// bytes start there (what tells the chunks of one source frame apart from
/// another's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRef {
    pub container: ContainerId,
    pub stored_offset: u32,
}

/// A chunk GC moves, as its old container holds it.
#[derive(Clone, Copy)]
pub enum ChunkSource<'a> {
    /// Read with its container: its frame's stored bytes and its plain
    /// bytes (see [`ContainerBuilder::push_copy`]).
    Frame {
        from: FrameRef,
        stored: &'a [u8],
        plain: &'a [u8],
    },
    /// Stored alone: these bytes move as they are.
    Stored(&'a [u8]),
    /// Only its plain bytes kept: framed again.
    Plain(&'a [u8]),
}

/// A sealed frame's buffers, kept for the next frame: plain, stored,
/// fingerprints, lengths.
type Spare = (Vec<u8>, Vec<u8>, Vec<Fingerprint>, Vec<u32>);

/// A frame queued for the data section, in container order.
struct Slot {
    /// Its first entry and how many entries it holds.
    first: usize,
    count: usize,
    state: SlotState,
}

enum SlotState {
    /// Handed to the sealing threads as job `seq`.
    Sealing(u64),
    /// Sealed (or copied whole by GC): its stored bytes and codec.
    Ready(Vec<u8>, Codec),
}

/// GC's copy of a multi-chunk frame while its chunks arrive: moved whole,
/// stored bytes as they are, if every chunk arrives in order; re-framed
/// from the plain bytes otherwise.
struct Copying {
    from: FrameRef,
    first: usize,
    stored: Vec<u8>,
    codec: Codec,
    plain: Vec<u8>,
    frame_len: u32,
}

/// Accumulates the chunks of one open container, stored as they will be
/// written: consecutive chunks are grouped into frames of about
/// `frame_size` plain bytes, each compressed and sealed (by the frame
/// threads, [`frames`]) as soon as it is full, so a full container is
/// framed without another pass over its data. Capacity counts logical
/// bytes, so where containers close does not depend on how well chunks
/// compress. With compression off and no encryption every chunk is its own
/// frame, stored as it is.
pub struct ContainerBuilder {
    kind: ChunkKind,
    capacity: u64,
    trace: bool,
    sealer: Arc<Sealer>,
    compression: Compression,
    /// Plain bytes per frame (a frame closes before a chunk would take it
    /// past this; a larger chunk is a frame of its own). 0: one per chunk.
    frame_size: u32,
    entries: Vec<ChunkMeta>,
    /// Header space, then the stored frames appended so far.
    data: Vec<u8>,
    logical: u64,
    /// The frame being filled: its first entry, and its plain bytes.
    open: Option<usize>,
    plain: Vec<u8>,
    copying: Option<Copying>,
    /// Frames not yet in `data`, oldest first.
    queue: VecDeque<Slot>,
    next_seq: u64,
    replies: (Sender<FrameDone>, Receiver<FrameDone>),
    /// Sealed frames that came back ahead of an older one.
    arrived: HashMap<u64, FrameDone>,
    /// Buffers of sealed frames, for the next ones.
    spare: Vec<Spare>,
}

impl ContainerBuilder {
    /// A builder storing chunks as they are (no compression, no sealing).
    pub fn new(kind: ChunkKind, capacity: u64, trace: bool) -> Self {
        Self::sealing(
            kind,
            capacity,
            trace,
            Arc::new(Sealer::identity()),
            Compression::Off,
            0,
        )
    }

    /// A builder storing chunks through `sealer` with `compression`, in
    /// frames of `frame_size` plain bytes.
    pub fn sealing(
        kind: ChunkKind,
        capacity: u64,
        trace: bool,
        sealer: Arc<Sealer>,
        compression: Compression,
        frame_size: u32,
    ) -> Self {
        ContainerBuilder {
            kind,
            capacity,
            trace,
            sealer,
            compression,
            frame_size,
            entries: Vec::new(),
            data: Vec::new(),
            logical: 0,
            open: None,
            plain: Vec::new(),
            copying: None,
            queue: VecDeque::new(),
            next_seq: 0,
            replies: channel(),
            arrived: HashMap::new(),
            spare: Vec::new(),
        }
    }

    /// Whether chunks are stored as they are: one per frame, no sealing.
    fn stores_plain(&self) -> bool {
        self.trace || (self.compression == Compression::Off && !self.sealer.encrypted())
    }

    /// Whether a chunk of `len` bytes fits. An empty container takes any chunk,
    /// so a chunk larger than the capacity gets a container of its own.
    pub fn fits(&self, len: u64) -> bool {
        self.entries.is_empty() || self.logical + len <= self.capacity
    }

    fn open_buffer(&mut self) {
        if self.data.is_empty() {
            // Header space first, so the container is encoded in place.
            let data = if self.trace {
                0
            } else {
                self.capacity as usize
            };
            // Room for the metadata of ~2 KiB chunks, appended when sealing.
            let meta = (self.capacity as usize / 2048 + 64) * format::META_ENTRY_LEN;
            let want = format::HEADER_LEN + data + meta;
            self.data.reserve(want);
            self.data.resize(format::HEADER_LEN, 0);
        }
    }

    /// Append a chunk. `bytes` is ignored in trace mode (pass `&[]`).
    pub fn push(&mut self, fp: Fingerprint, len: u32, bytes: &[u8]) {
        self.open_buffer();
        self.end_copy();
        let mut m = ChunkMeta::plain(fp, self.logical as u32, len, self.kind);
        self.logical += len as u64;
        if self.stores_plain() {
            // Straight into the data section, after any frame still queued.
            self.collect(true);
            m.stored_offset = (self.data.len() - format::HEADER_LEN) as u32;
            m.stored_len = if self.trace { 0 } else { len };
            if !self.trace {
                debug_assert_eq!(bytes.len(), len as usize);
                self.data.extend_from_slice(bytes);
            }
            self.entries.push(m);
            return;
        }
        debug_assert_eq!(bytes.len(), len as usize);
        if self.open.is_some() && self.plain.len() + bytes.len() > self.frame_size as usize {
            self.close_frame();
        }
        if self.open.is_none() {
            self.open = Some(self.entries.len());
        }
        m.frame_offset = self.plain.len() as u32;
        self.plain.extend_from_slice(bytes);
        self.entries.push(m);
        if self.plain.len() >= self.frame_size as usize {
            self.close_frame();
        }
        self.collect(false);
    }

    /// Append a chunk's stored bytes as another container held them (GC's
    /// copy-forward: no decompression, no re-encryption). `m` is its entry
    /// there; it must be stored alone ([`ChunkMeta::alone`]).
    pub fn push_stored(&mut self, m: &ChunkMeta, stored: &[u8]) {
        debug_assert!(self.trace || m.alone());
        self.open_buffer();
        self.end_copy();
        self.close_frame();
        let entry = ChunkMeta {
            offset: self.logical as u32,
            kind: self.kind,
            stored_offset: 0,
            stored_len: if self.trace { 0 } else { m.stored_len },
            codec: if self.trace { Codec::Raw } else { m.codec },
            frame_offset: 0,
            frame_len: m.len,
            ..*m
        };
        self.logical += m.len as u64;
        let first = self.entries.len();
        self.entries.push(entry);
        if self.trace {
            self.entries[first].stored_offset = (self.data.len() - format::HEADER_LEN) as u32;
            return;
        }
        debug_assert_eq!(stored.len(), m.stored_len as usize);
        if self.queue.is_empty() {
            self.append(first, 1, stored, m.codec);
        } else {
            self.ready(first, 1, stored.to_vec(), m.codec);
        }
    }

    /// Copy one chunk for GC, as it lies in another container: `m` is its
    /// entry there, `from` its frame, `stored` the frame's stored bytes and
    /// `plain` the chunk's plain bytes (empty in trace mode). A chunk stored
    /// alone moves as it is; the chunks of a larger frame move as their
    /// frame's stored bytes when all of them arrive, in order, one after
    /// the other; otherwise they are compressed again into new frames.
    pub fn push_copy(&mut self, from: FrameRef, m: &ChunkMeta, stored: &[u8], plain: &[u8]) {
        if self.trace || m.alone() {
            return self.push_stored(m, stored);
        }
        self.open_buffer();
        let continues = self
            .copying
            .as_ref()
            .is_some_and(|c| c.from == from && c.plain.len() as u32 == m.frame_offset);
        if !continues {
            self.end_copy();
            if m.frame_offset != 0 {
                // Not the frame's first chunk: it will not move whole.
                return self.push(m.fp, m.len, plain);
            }
            self.close_frame();
            self.copying = Some(Copying {
                from,
                first: self.entries.len(),
                stored: stored.to_vec(),
                codec: m.codec,
                plain: Vec::with_capacity(m.frame_len as usize),
                frame_len: m.frame_len,
            });
        }
        let c = self.copying.as_mut().unwrap();
        self.entries.push(ChunkMeta {
            offset: self.logical as u32,
            kind: self.kind,
            frame_offset: c.plain.len() as u32,
            ..*m
        });
        self.logical += m.len as u64;
        c.plain.extend_from_slice(plain);
        if c.plain.len() as u32 == c.frame_len {
            let c = self.copying.take().unwrap();
            let count = self.entries.len() - c.first;
            self.ready(c.first, count, c.stored, c.codec);
        }
    }

    /// Append a chunk GC moves (see [`ChunkSource`]).
    pub fn push_source(&mut self, m: &ChunkMeta, src: ChunkSource<'_>) {
        match src {
            ChunkSource::Frame {
                from,
                stored,
                plain,
            } => self.push_copy(from, m, stored, plain),
            ChunkSource::Stored(stored) => self.push_stored(m, stored),
            ChunkSource::Plain(plain) => self.push(m.fp, m.len, plain),
        }
    }

    /// A copied frame that did not arrive whole: its chunks so far become
    /// a new frame of their own.
    fn end_copy(&mut self) {
        let Some(c) = self.copying.take() else {
            return;
        };
        self.close_frame();
        self.open = Some(c.first);
        self.plain.clear();
        self.plain.extend_from_slice(&c.plain);
        let mut at = 0;
        for m in &mut self.entries[c.first..] {
            m.frame_offset = at;
            at += m.len;
        }
        self.close_frame();
    }

    /// End the open frame here: the next chunk starts a new one (ingest
    /// keeps a directory backup's metadata out of its contents' frames, so
    /// damage to file data never takes the file names with it).
    pub fn break_frame(&mut self) {
        self.end_copy();
        self.close_frame();
    }

    /// Hand the open frame to the sealing threads (or seal it here).
    fn close_frame(&mut self) {
        let Some(first) = self.open.take() else {
            return;
        };
        let count = self.entries.len() - first;
        let (plain_spare, stored, mut fps, mut lens) = self.spare.pop().unwrap_or_default();
        let plain = std::mem::replace(&mut self.plain, plain_spare);
        self.plain.clear();
        fps.clear();
        fps.extend(self.entries[first..].iter().map(|m| m.fp));
        lens.clear();
        lens.extend(self.entries[first..].iter().map(|m| m.len));
        let seq = self.next_seq;
        self.next_seq += 1;
        let job = FrameJob {
            seq,
            kind: self.kind,
            fps,
            lens,
            plain,
            stored,
            sealer: self.sealer.clone(),
            compression: self.compression,
            reply: self.replies.0.clone(),
        };
        let job = match frames::pool() {
            Some(pool) => {
                let sender = pool.lock().unwrap_or_else(|e| e.into_inner());
                match sender.send(job) {
                    Ok(()) => None,
                    // The threads are gone: seal it here.
                    Err(returned) => Some(returned.0),
                }
            }
            None => Some(job),
        };
        if let Some(job) = job {
            let (done, _) = job.run();
            self.arrived.insert(seq, done);
        }
        self.queue.push_back(Slot {
            first,
            count,
            state: SlotState::Sealing(seq),
        });
    }

    /// Queue a frame whose stored bytes are at hand.
    fn ready(&mut self, first: usize, count: usize, stored: Vec<u8>, codec: Codec) {
        self.queue.push_back(Slot {
            first,
            count,
            state: SlotState::Ready(stored, codec),
        });
        self.collect(false);
    }

    /// Append the frames at the head of the queue that are sealed (all of
    /// them, waiting for the threads, when `wait`).
    fn collect(&mut self, wait: bool) {
        if self.queue.is_empty() {
            return;
        }
        while let Ok(done) = self.replies.1.try_recv() {
            self.arrived.insert(done.seq, done);
        }
        while let Some(slot) = self.queue.front() {
            if let SlotState::Sealing(seq) = slot.state {
                while !self.arrived.contains_key(&seq) {
                    if !wait {
                        return;
                    }
                    // The sending half is ours too, so this fails only if
                    // the threads died (a panic while sealing).
                    let d = self
                        .replies
                        .1
                        .recv()
                        .expect("the frame-sealing threads outlive their jobs");
                    self.arrived.insert(d.seq, d);
                }
            }
            let slot = self.queue.pop_front().unwrap();
            match slot.state {
                SlotState::Ready(stored, codec) => {
                    self.append(slot.first, slot.count, &stored, codec)
                }
                SlotState::Sealing(seq) => {
                    let done = self.arrived.remove(&seq).unwrap();
                    if done.pieces.is_empty() {
                        self.append(slot.first, slot.count, &done.stored, done.codec);
                    } else {
                        // Sealed chunk by chunk: each a frame of its own.
                        let mut at = 0;
                        for (k, &n) in done.pieces.iter().enumerate() {
                            let piece = &done.stored[at..at + n as usize];
                            self.append(slot.first + k, 1, piece, done.codec);
                            at += n as usize;
                        }
                    }
                    let mut stored = done.stored;
                    stored.clear();
                    self.spare.push((done.plain, stored, done.fps, done.lens));
                }
            }
        }
    }

    /// Append a sealed frame to the data section and fill in its entries.
    /// A frame stored raw and unsealed is recorded as one frame per chunk:
    /// the same bytes, and each chunk then moves alone.
    fn append(&mut self, first: usize, count: usize, stored: &[u8], codec: Codec) {
        let base = (self.data.len() - format::HEADER_LEN) as u32;
        self.data.extend_from_slice(stored);
        let entries = &mut self.entries[first..first + count];
        if codec == Codec::Raw && !self.sealer.encrypted() {
            let mut at = base;
            for m in entries {
                m.stored_offset = at;
                m.stored_len = m.len;
                m.codec = Codec::Raw;
                m.frame_offset = 0;
                m.frame_len = m.len;
                at += m.len;
            }
            return;
        }
        let frame_len: u32 = entries.iter().map(|m| m.len).sum();
        let mut offset = 0;
        for m in entries {
            m.frame_offset = offset;
            offset += m.len;
            m.stored_offset = base;
            m.stored_len = stored.len() as u32;
            m.codec = codec;
            m.frame_len = frame_len;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn logical_len(&self) -> u64 {
        self.logical
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Take the accumulated chunks, leaving the builder empty for the next
    /// container: waits for its frames to be sealed. The buffer is framed:
    /// `HEADER_LEN` placeholder bytes, then the stored data section (see
    /// [`format::encode_framed`]).
    pub fn take(&mut self) -> (Vec<ChunkMeta>, Vec<u8>) {
        self.end_copy();
        self.close_frame();
        self.collect(true);
        self.logical = 0;
        let mut framed = std::mem::take(&mut self.data);
        if framed.is_empty() {
            framed.resize(format::HEADER_LEN, 0);
        }
        (std::mem::take(&mut self.entries), framed)
    }

    /// Hand back a written container's buffer for reuse (saves a 4 MiB
    /// allocation and its page faults per container).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.data.is_empty() {
            buf.clear();
            self.data = buf;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::format::{self, HEADER_LEN};
    use crate::container::store::{frames, open_chunk, open_chunks};
    use crate::fingerprint::HashAlgo;
    use crate::seal::keys::MasterKey;
    use crate::seal::CipherKind;
    use proptest::prelude::*;

    const ID: ContainerId = ContainerId(11);

    fn sealers() -> Vec<(Arc<Sealer>, Compression)> {
        let key = MasterKey::from_bytes([7; 32]);
        vec![
            (Arc::new(Sealer::identity()), Compression::Off),
            (Arc::new(Sealer::identity()), Compression::Auto),
            (
                Arc::new(Sealer::new(
                    Some(key.cipher(CipherKind::Xaes256Gcm)),
                    Compression::Off,
                )),
                Compression::Off,
            ),
            (
                Arc::new(Sealer::new(
                    Some(key.cipher(CipherKind::Xchacha20Poly1305)),
                    Compression::Better,
                )),
                Compression::Better,
            ),
        ]
    }

    /// `n` chunks of `len` bytes each: text-like (compressible) unless
    /// `noise`, and every chunk distinct.
    fn chunks(lens: &[u32], noise: bool) -> Vec<(Fingerprint, Vec<u8>)> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let b: Vec<u8> = (0..len as usize)
                    .map(|j| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if noise {
                            x as u8
                        } else {
                            b"the quick brown fox "[(j + i) % 20] ^ x.is_multiple_of(3) as u8
                        }
                    })
                    .collect();
                (HashAlgo::Blake3.hash(&b), b)
            })
            .collect()
    }

    /// A container of `data` built with `frame_size`, encoded, decoded.
    fn build(
        sealer: &Arc<Sealer>,
        compression: Compression,
        frame_size: u32,
        data: &[(Fingerprint, Vec<u8>)],
    ) -> (Vec<u8>, Vec<ChunkMeta>) {
        let mut b = ContainerBuilder::sealing(
            ChunkKind::Data,
            4 << 20,
            false,
            sealer.clone(),
            compression,
            frame_size,
        );
        for (fp, bytes) in data {
            b.push(*fp, bytes.len() as u32, bytes);
        }
        let (entries, framed) = b.take();
        let obj = format::encode_framed(
            ID,
            ChunkKind::Data,
            HashAlgo::Blake3,
            false,
            &entries,
            framed,
            sealer,
        );
        let (_, meta) = format::decode(ID, &obj, sealer).unwrap();
        assert_eq!(meta, entries, "entries decode as the builder made them");
        (obj, meta)
    }

    fn check_opens(
        obj: &[u8],
        meta: &[ChunkMeta],
        sealer: &Sealer,
        data: &[(Fingerprint, Vec<u8>)],
    ) {
        let h = format::decode_header(ID, obj).unwrap();
        let plain = open_chunks(ID, obj, meta, sealer, h.logical_len, Vec::new()).unwrap();
        assert_eq!(meta.len(), data.len());
        for (i, (m, (fp, bytes))) in meta.iter().zip(data).enumerate() {
            assert_eq!(m.fp, *fp);
            assert_eq!(&plain[m.offset as usize..][..m.len as usize], &bytes[..]);
            assert_eq!(
                open_chunk(obj, meta, i, sealer).as_deref(),
                Some(&bytes[..])
            );
        }
    }

    /// Compressed or sealed chunks are grouped into frames of at most
    /// `frame_size` plain bytes (a larger chunk alone), consecutive, never
    /// empty; each opens, alone and with the others; without compression
    /// every chunk is a frame of its own.
    #[test]
    fn frames_group_consecutive_chunks_and_open() {
        let lens: Vec<u32> = (0..60).map(|i| 1000 + (i * 7919) % 9000).collect();
        let data = chunks(&lens, false);
        for (sealer, comp) in sealers() {
            for frame_size in [0, 16 << 10, 64 << 10] {
                let (obj, meta) = build(&sealer, comp, frame_size, &data);
                check_opens(&obj, &meta, &sealer, &data);
                // Sealed frames that do not compress are sealed per chunk.
                let framed = comp != Compression::Off;
                for r in frames(&meta) {
                    let n = r.len();
                    let plain: u32 = meta[r.clone()].iter().map(|m| m.len).sum();
                    assert_eq!(meta[r.start].frame_len, plain);
                    if !framed || frame_size == 0 {
                        assert_eq!(n, 1, "one chunk per frame");
                    } else if n > 1 {
                        assert!(plain <= frame_size, "{plain} > {frame_size}");
                    }
                }
                let multi = frames(&meta).filter(|r| r.len() > 1).count();
                assert_eq!(
                    multi > 0,
                    framed && frame_size > 0,
                    "{} {comp} {frame_size}",
                    sealer.name()
                );
            }
        }
    }

    /// Frames compress better than the same chunks one by one.
    #[test]
    fn frames_store_less_than_chunks_alone() {
        let lens: Vec<u32> = (0..64).map(|i| 2000 + (i * 104_729) % 6000).collect();
        let data = chunks(&lens, false);
        let sealer = Arc::new(Sealer::identity());
        let (alone, _) = build(&sealer, Compression::Auto, 0, &data);
        let (framed, _) = build(&sealer, Compression::Auto, 128 << 10, &data);
        assert!(
            framed.len() < alone.len(),
            "{} vs {}",
            framed.len(),
            alone.len()
        );
    }

    /// An incompressible frame of an unencrypted repository is recorded as
    /// one frame per chunk (the same bytes: each chunk then moves alone).
    #[test]
    fn raw_frames_are_split_into_chunks() {
        let data = chunks(&[5000; 20], true);
        let sealer = Arc::new(Sealer::identity());
        let (obj, meta) = build(&sealer, Compression::Fastest, 64 << 10, &data);
        assert!(meta.iter().all(|m| m.alone() && m.codec == Codec::Raw));
        let h = format::decode_header(ID, &obj).unwrap();
        assert_eq!(h.data_len, 100_000);
        check_opens(&obj, &meta, &sealer, &data);
    }

    /// An incompressible frame of an encrypted repository is sealed chunk
    /// by chunk: a damaged byte costs one chunk, and each moves alone.
    #[test]
    fn sealed_raw_frames_are_sealed_per_chunk() {
        let data = chunks(&[5000; 20], true);
        for (sealer, comp) in sealers().into_iter().filter(|(s, _)| s.encrypted()) {
            let (obj, meta) = build(&sealer, comp, 64 << 10, &data);
            assert!(meta.iter().all(|m| m.alone() && m.codec == Codec::Raw));
            assert!(meta
                .iter()
                .all(|m| m.stored_len as usize == 5000 + sealer.overhead()));
            check_opens(&obj, &meta, &sealer, &data);
            // Damage one chunk's stored bytes: only that chunk is lost.
            let mut bad = obj.clone();
            bad[HEADER_LEN + meta[7].stored_offset as usize + 30] ^= 1;
            for i in 0..meta.len() {
                assert_eq!(open_chunk(&bad, &meta, i, &sealer).is_some(), i != 7);
            }
        }
    }

    /// A sealed frame is bound to its chunks: swapping two entries of a
    /// frame (with the metadata sealed anew, as a forger would) does not
    /// open.
    #[test]
    fn a_sealed_frame_is_bound_to_its_fingerprints() {
        let data = chunks(&[3000; 8], false);
        let (sealer, comp) = sealers().remove(3);
        let (obj, mut meta) = build(&sealer, comp, 64 << 10, &data);
        assert!(meta.len() > 1 && !meta[1].alone());
        meta.swap(0, 1);
        let (a, b) = (meta[0].fp, meta[1].fp);
        assert!(open_chunk(&obj, &meta, 0, &sealer).is_none());
        meta.swap(0, 1);
        assert_eq!((meta[1].fp, meta[0].fp), (a, b));
        assert!(open_chunk(&obj, &meta, 0, &sealer).is_some());
    }

    /// GC's copy: a frame whose chunks all arrive in order moves as its
    /// stored bytes (byte for byte); one missing a chunk is framed again;
    /// every copied chunk opens in the new container.
    fn copy_keeping(keep: &[bool], sealer: &Arc<Sealer>, comp: Compression, frame_size: u32) {
        let lens: Vec<u32> = (0..keep.len() as u32)
            .map(|i| 1500 + (i * 7919) % 5000)
            .collect();
        let data = chunks(&lens, false);
        let (obj, meta) = build(sealer, comp, frame_size, &data);
        let src_id = ContainerId(3);
        let mut b = ContainerBuilder::sealing(
            ChunkKind::Data,
            4 << 20,
            false,
            sealer.clone(),
            comp,
            frame_size,
        );
        let h = format::decode_header(ID, &obj).unwrap();
        let plain = open_chunks(ID, &obj, &meta, sealer, h.logical_len, Vec::new()).unwrap();
        for (m, _) in meta.iter().zip(keep).filter(|(_, &k)| k) {
            let stored = crate::container::store::chunk_stored(&obj, m);
            let from = FrameRef {
                container: src_id,
                stored_offset: m.stored_offset,
            };
            b.push_copy(
                from,
                m,
                stored,
                &plain[m.offset as usize..][..m.len as usize],
            );
        }
        let (entries, framed) = b.take();
        let new = format::encode_framed(
            ID,
            ChunkKind::Data,
            HashAlgo::Blake3,
            false,
            &entries,
            framed,
            sealer,
        );
        let (_, got) = format::decode(ID, &new, sealer).unwrap();
        let kept: Vec<_> = data
            .iter()
            .zip(keep)
            .filter(|(_, &k)| k)
            .map(|(d, _)| d.clone())
            .collect();
        check_opens(&new, &got, sealer, &kept);
        // Frames whose chunks were all kept are in the new container as
        // they were stored.
        for r in frames(&meta) {
            if r.clone().all(|i| keep[i]) {
                let old = crate::container::store::chunk_stored(&obj, &meta[r.start]);
                let m = got.iter().find(|m| m.fp == meta[r.start].fp).unwrap();
                assert_eq!(crate::container::store::chunk_stored(&new, m), old);
                assert_eq!(m.frame_len, meta[r.start].frame_len);
            }
        }
    }

    #[test]
    fn gc_copies_whole_frames_as_stored_and_reframes_the_rest() {
        for (sealer, comp) in sealers() {
            let n = 40;
            copy_keeping(&vec![true; n], &sealer, comp, 16 << 10);
            let some: Vec<bool> = (0..n).map(|i| i % 7 != 3).collect();
            copy_keeping(&some, &sealer, comp, 16 << 10);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any chunk sizes, frame size and live subset, under every
        /// sealing: built containers open, and copies of any subset open.
        #[test]
        fn any_frames_round_trip(
            lens in proptest::collection::vec(1u32..20_000, 1..40),
            keep_bits in any::<u64>(),
            frame_kib in 0u32..80,
            noise in any::<bool>(),
            which in 0usize..4,
        ) {
            let (sealer, comp) = sealers().remove(which);
            let data = chunks(&lens, noise);
            let frame_size = frame_kib << 10;
            let (obj, meta) = build(&sealer, comp, frame_size, &data);
            check_opens(&obj, &meta, &sealer, &data);
            let keep: Vec<bool> = (0..lens.len()).map(|i| keep_bits >> (i % 64) & 1 == 1).collect();
            copy_keeping(&keep, &sealer, comp, frame_size);
        }
    }
}
