//! Reading and writing containers: [`ContainerStore`] puts and gets
//! container objects through the sealing layer, verifying every read and
//! counting it in [`Metrics`]; a [`Container`] is one read back; and the
//! helpers that open the chunks of a raw container object. Apart from
//! `mod.rs` so the container writer uses the store without depending on the
//! folder's re-exports.

use super::builder::{ChunkSource, ContainerBuilder, FrameRef};
use super::format;
use crate::backend::ObjectBytes;
use crate::container::format::{ChunkMeta, Header};
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap, HashAlgo};
use crate::ids::{ChunkKind, ContainerId};
use crate::metrics::Metrics;
use crate::seal::{Codec, Compression, SealedStore, Sealer};
use std::sync::Arc;

/// A container read back from storage: verified header, metadata and data
/// (a restore's sealed one: its frames authenticate as they are opened).
/// When its chunks are stored as they are, their bytes are read out of the
/// object; otherwise its frames were opened, when it was read, into a plain
/// buffer (`plain`) beside the object ([`ContainerStore::read`]), or are
/// opened one at a time when a chunk in them is needed
/// ([`ContainerStore::read_unopened`], a restore: it holds the stored bytes,
/// a third of the plain ones when compressed).
pub struct Container {
    pub header: Header,
    pub meta: Vec<ChunkMeta>,
    /// The stored object.
    object: ObjectBytes,
    /// Every chunk's plain bytes at its logical offset, when opened.
    plain: Option<ObjectBytes>,
    by_fp: FpMap<u32>,
    /// Whether the data checksum was verified when it was read: not for a
    /// sealed container a restore reads ([`ContainerStore::read_unopened`]),
    /// whose frames authenticate themselves as they are opened.
    data_checked: bool,
}

impl Container {
    fn new(
        header: Header,
        meta: Vec<ChunkMeta>,
        object: ObjectBytes,
        plain: Option<ObjectBytes>,
    ) -> Self {
        let mut by_fp = FpMap::with_capacity_and_hasher(meta.len(), Default::default());
        for (i, m) in meta.iter().enumerate() {
            by_fp.entry(m.fp).or_insert(i as u32);
        }
        Container {
            header,
            meta,
            object,
            plain,
            by_fp,
            data_checked: true,
        }
    }
    /// A container of an encoded object, its frames not opened (unit tests
    /// of frame readers).
    #[cfg(test)]
    pub(crate) fn unopened(header: Header, meta: Vec<ChunkMeta>, object: Vec<u8>) -> Self {
        Container::new(header, meta, object.into(), None)
    }
    pub fn id(&self) -> ContainerId {
        self.header.id
    }
    /// Metadata of the chunk with this fingerprint, if the container holds it.
    pub fn find(&self, fp: &Fingerprint) -> Option<&ChunkMeta> {
        self.by_fp.get(fp).map(|&i| &self.meta[i as usize])
    }
    /// Position in [`meta`](Self::meta) of the chunk with this fingerprint.
    pub fn position(&self, fp: &Fingerprint) -> Option<usize> {
        self.by_fp.get(fp).map(|&i| i as usize)
    }
    /// Whether chunk `m`'s bytes must be opened from its frame
    /// ([`open_frame`](Self::open_frame)): [`bytes`](Self::bytes) has
    /// them otherwise (read out of the object or the opened buffer; empty
    /// in trace mode).
    pub fn needs_opening(&self, m: &ChunkMeta) -> bool {
        !self.header.trace && self.plain.is_none() && (m.codec != Codec::Raw || self.header.sealed)
    }
    /// Open the frame holding chunk `i` into `out` (resized to the frame's
    /// plain length): decrypted, authenticated and decompressed. The chunk's
    /// bytes are then `out[m.frame_offset..][..m.len]`.
    pub fn open_frame(&self, i: usize, sealer: &Sealer, out: &mut Vec<u8>) -> Result<()> {
        open_frame(self.id(), &self.object, &self.meta, i, sealer, out)
    }
    /// Plain bytes of a chunk of this container (empty in trace mode, and
    /// for a chunk stored alone, not plain, of a container read with
    /// [`ContainerStore::read_stored`]: it moves as it is).
    pub fn bytes(&self, m: &ChunkMeta) -> &[u8] {
        if self.header.trace {
            return &[];
        }
        if let Some(plain) = &self.plain {
            return plain
                .get(m.offset as usize..m.offset as usize + m.len as usize)
                .unwrap_or(&[]);
        }
        if m.codec != Codec::Raw || self.header.sealed {
            return &[];
        }
        let start = format::HEADER_LEN + m.stored_offset as usize;
        self.object
            .get(start..start + m.len as usize)
            .unwrap_or(&[])
    }
    /// Where chunk `m`'s plain bytes lie in the [`object`](Self::object),
    /// when they are there as they are (stored raw and unsealed, the
    /// container not opened into a buffer of its own, not trace mode).
    pub(crate) fn plain_span(&self, m: &ChunkMeta) -> Option<std::ops::Range<usize>> {
        if self.header.trace || self.plain.is_some() || self.needs_opening(m) {
            return None;
        }
        let start = format::HEADER_LEN + m.stored_offset as usize;
        let end = start + m.len as usize;
        (end <= self.object.len()).then_some(start..end)
    }
    /// The stored object as read (a restore's in-place trim gives pages of
    /// a mapped one back, `restore/trim.rs`).
    pub(crate) fn object(&self) -> &ObjectBytes {
        &self.object
    }
    /// Stored bytes of a chunk's frame (compressed and/or sealed), as GC
    /// copies them (a container read with [`ContainerStore::read_stored`]).
    pub fn stored(&self, m: &ChunkMeta) -> &[u8] {
        chunk_stored(&self.object, m)
    }
    /// Chunk `m` as GC moves it (this container read with
    /// [`ContainerStore::read_stored`]).
    pub fn source(&self, m: &ChunkMeta) -> ChunkSource<'_> {
        ChunkSource::Frame {
            from: FrameRef {
                container: self.id(),
                stored_offset: m.stored_offset,
            },
            stored: self.stored(m),
            plain: self.bytes(m),
        }
    }
    /// Bytes of the chunk with this fingerprint.
    pub fn chunk(&self, fp: &Fingerprint) -> Option<&[u8]> {
        self.find(fp).map(|m| self.bytes(m))
    }
    /// The buffer the container was read into, for
    /// [`ContainerStore::read_unopened`] to reuse (empty for a mapping).
    pub fn into_buffer(self) -> Vec<u8> {
        self.object.into_buffer()
    }
    /// Let the container go, its object's cached pages with it
    /// ([`ObjectBytes::uncache`]): a restore done with it for good.
    pub(crate) fn uncache(self) {
        self.object.uncache();
    }
}

/// How a container is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Verified, its frames opened ([`ContainerStore::read`]).
    Opened,
    /// Verified, its frames as stored.
    Verified,
    /// Its frames as stored, a sealed one's data checksum left to its
    /// frames ([`ContainerStore::read_unopened`]).
    Unopened,
}

/// Whether a container's chunks can be read straight out of its object.
fn stored_plain(meta: &[ChunkMeta], sealer: &Sealer) -> bool {
    !sealer.encrypted() && meta.iter().all(|m| m.codec == Codec::Raw)
}

/// The frames of a container's entries: index ranges of consecutive
/// entries sharing stored bytes.
pub fn frames(meta: &[ChunkMeta]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at == meta.len() {
            return None;
        }
        let start = at;
        at += 1;
        while at < meta.len() && meta[at - 1].same_frame(&meta[at]) {
            at += 1;
        }
        Some(start..at)
    })
}

/// Open every frame of a container into `plain` (logical offsets; resized
/// to `logical_len`). A frame that does not open is a corruption of the
/// container naming its first chunk.
pub fn open_chunks(
    id: ContainerId,
    object: &[u8],
    meta: &[ChunkMeta],
    sealer: &Sealer,
    logical_len: u64,
    mut plain: Vec<u8>,
) -> Result<Vec<u8>> {
    // Not zeroed first: the entries tile `0..logical_len` exactly (checked
    // by `format::decode_meta`), so every byte is written below, and a
    // buffer left half written by an error is dropped with it.
    plain.resize(logical_len as usize, 0);
    plain.truncate(logical_len as usize);
    let mut fps = Vec::new();
    for range in frames(meta) {
        let m = &meta[range.start];
        let out = &mut plain[m.offset as usize..m.offset as usize + m.frame_len as usize];
        let first = range.start;
        unseal_frame(id, object, meta, range, first, sealer, &mut fps, out)?;
    }
    Ok(plain)
}

/// Unseal the frame of entries `range` into `out` (its plain length),
/// `fps` a scratch list for the frame's fingerprints. A frame that does
/// not open is a corruption of the container naming chunk `named`.
#[allow(clippy::too_many_arguments)]
fn unseal_frame(
    id: ContainerId,
    object: &[u8],
    meta: &[ChunkMeta],
    range: std::ops::Range<usize>,
    named: usize,
    sealer: &Sealer,
    fps: &mut Vec<Fingerprint>,
    out: &mut [u8],
) -> Result<()> {
    let m = &meta[range.start];
    fps.clear();
    fps.extend(meta[range].iter().map(|m| m.fp));
    sealer
        .unseal_frame(m.kind, fps, m.codec, chunk_stored(object, m), out)
        .map_err(|why| {
            Error::corrupt(
                format::object_name(id),
                format!("chunk {}: {why}", meta[named].fp.to_hex()),
            )
        })
}

/// The entries of the frame holding entry `i` (`i` within `meta`).
pub fn frame_range(meta: &[ChunkMeta], i: usize) -> std::ops::Range<usize> {
    let mut first = i;
    while first > 0 && meta[first - 1].same_frame(&meta[first]) {
        first -= 1;
    }
    let mut last = i + 1;
    while last < meta.len() && meta[last - 1].same_frame(&meta[last]) {
        last += 1;
    }
    first..last
}

/// Open the frame holding chunk `i` of a raw container object (`meta` its
/// entries) into `out`, resized to the frame's plain length. A frame that
/// does not open is a corruption of the container naming the chunk.
pub fn open_frame(
    id: ContainerId,
    object: &[u8],
    meta: &[ChunkMeta],
    i: usize,
    sealer: &Sealer,
    out: &mut Vec<u8>,
) -> Result<()> {
    let range = frame_range(meta, i);
    let len = meta[range.start].frame_len as usize;
    // Only resized, never cleared: unsealing writes every byte or fails.
    out.resize(len, 0);
    out.truncate(len);
    unseal_frame(id, object, meta, range, i, sealer, &mut Vec::new(), out)
}

/// Stored bytes of a chunk's frame in a raw container object (empty if
/// its entry points outside it).
pub fn chunk_stored<'o>(object: &'o [u8], m: &ChunkMeta) -> &'o [u8] {
    let start = format::HEADER_LEN + m.stored_offset as usize;
    object
        .get(start..start + m.stored_len as usize)
        .unwrap_or(&[])
}

/// Chunk `i` of a raw container object (`meta` its entries) opened with
/// its frame alone (salvage and ranged restores of damaged containers,
/// check: the other frames may be damaged); `None` if it does not open
/// (damaged, or its entry points outside the object).
pub fn open_chunk(object: &[u8], meta: &[ChunkMeta], i: usize, sealer: &Sealer) -> Option<Vec<u8>> {
    let m = meta.get(i)?;
    let mut frame = Vec::new();
    open_frame(ContainerId(0), object, meta, i, sealer, &mut frame).ok()?;
    let at = m.frame_offset as usize;
    frame.get(at..at + m.len as usize).map(<[u8]>::to_vec)
}

/// Puts and gets containers through the sealing layer; verifies and counts.
#[derive(Clone)]
pub struct ContainerStore {
    objects: SealedStore,
    algo: HashAlgo,
    trace: bool,
    metrics: Arc<Metrics>,
    /// How new chunks are compressed (the repository's default, or a
    /// backup's `--compression`).
    compression: Compression,
    /// Plain bytes per frame of new containers (the repository's).
    frame_size: u32,
}

impl ContainerStore {
    pub fn new(objects: SealedStore, algo: HashAlgo, trace: bool, metrics: Arc<Metrics>) -> Self {
        let compression = objects.sealer().compression();
        ContainerStore {
            objects,
            algo,
            trace,
            metrics,
            compression,
            frame_size: 0,
        }
    }

    /// The same store grouping new chunks into frames of `frame_size`.
    pub fn with_frame_size(self, frame_size: u32) -> Self {
        ContainerStore { frame_size, ..self }
    }

    /// The same store compressing new chunks with `compression`.
    pub fn with_compression(&self, compression: Compression) -> Self {
        ContainerStore {
            compression,
            ..self.clone()
        }
    }

    pub fn compression(&self) -> Compression {
        self.compression
    }

    pub fn sealer(&self) -> &Arc<Sealer> {
        self.objects.sealer()
    }

    /// An empty builder of `kind` containers storing chunks as this store
    /// seals them.
    pub fn builder(&self, kind: ChunkKind, capacity: u64, trace: bool) -> ContainerBuilder {
        ContainerBuilder::sealing(
            kind,
            capacity,
            trace,
            self.sealer().clone(),
            self.compression,
            self.frame_size,
        )
    }
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
    pub fn objects(&self) -> &SealedStore {
        &self.objects
    }

    /// Write one container of the chunks `entries` (fingerprint and
    /// length; their other fields are recomputed) whose plain bytes are
    /// `data` back to back. Recipe containers always hold their bytes
    /// (recipes are metadata); data containers hold none in trace mode.
    /// Returns the object size in bytes.
    pub fn write(
        &self,
        id: ContainerId,
        kind: ChunkKind,
        entries: &[ChunkMeta],
        data: &[u8],
    ) -> Result<u64> {
        let trace = self.trace && kind == ChunkKind::Data;
        let total: u64 = entries.iter().map(|e| e.len as u64).sum();
        let mut b = self.builder(kind, total.max(1), trace);
        let mut at = 0usize;
        for e in entries {
            let bytes = if trace {
                &[][..]
            } else {
                &data[at..at + e.len as usize]
            };
            b.push(e.fp, e.len, bytes);
            at += e.len as usize;
        }
        let (entries, framed) = b.take();
        self.write_framed(id, kind, &entries, framed)
            .map(|(n, _)| n)
    }

    /// [`write`](Self::write) from a framed buffer (header space + data, as
    /// [`ContainerBuilder::take`] returns it). Returns the object size and the
    /// buffer, for reuse.
    pub fn write_framed(
        &self,
        id: ContainerId,
        kind: ChunkKind,
        entries: &[ChunkMeta],
        framed: Vec<u8>,
    ) -> Result<(u64, Vec<u8>)> {
        let trace = self.trace && kind == ChunkKind::Data;
        let object =
            format::encode_framed(id, kind, self.algo, trace, entries, framed, self.sealer());
        self.objects.put_container(id, &object)?;
        let logical: u64 = entries.iter().map(|e| e.len as u64).sum();
        self.metrics
            .container_written(kind == ChunkKind::Recipe, logical);
        Ok((object.len() as u64, object))
    }

    /// Read and verify a whole container, its frames opened.
    pub fn read(&self, id: ContainerId) -> Result<Container> {
        self.read_retried(id, Vec::new(), Read::Opened)
    }

    /// Read and verify a whole container into `reuse` (from
    /// [`Container::into_buffer`]), its frames left as stored: a restore
    /// holds the stored bytes and opens a frame only when a chunk in it is
    /// needed ([`ContainerStore::open_frame`], which authenticates it).
    ///
    /// A sealed container's data checksum is not computed here (3 % of a
    /// restore's CPU): every frame a restore takes a chunk from is opened,
    /// and a frame with a byte changed does not authenticate. Where one
    /// does not, [`ContainerStore::open_frame`] reads the container again,
    /// checksum and all, before it calls the container damaged. Header and
    /// metadata are verified as always.
    pub fn read_unopened(&self, id: ContainerId, reuse: Vec<u8>) -> Result<Container> {
        self.read_retried(id, reuse, Read::Unopened)
    }

    fn read_retried(&self, id: ContainerId, reuse: Vec<u8>, how: Read) -> Result<Container> {
        // A container that does not verify is read once more before it is
        // called damaged: bytes broken in transit (a connection reset
        // under an object store's retried GET was seen to hand back wrong
        // bytes) come right on a second read; a damaged object does not.
        match self.read_once(id, reuse, how) {
            Err(Error::Corrupt { .. }) => self.read_once(id, Vec::new(), how),
            r => r,
        }
    }

    /// Open the frame holding chunk `i` of `c` into `out`, as
    /// [`Container::open_frame`]. A frame of a container read without its
    /// data checksum ([`read_unopened`](Self::read_unopened)) that does not
    /// open is opened from the container read again, verified (and read
    /// once more if that fails): bytes broken on the way come right so, as
    /// they would have at the first read's checksum; a damaged container is
    /// refused by its checksum, as it would have been then.
    pub(crate) fn open_frame(&self, c: &Container, i: usize, out: &mut Vec<u8>) -> Result<()> {
        match c.open_frame(i, self.sealer(), out) {
            Err(Error::Corrupt { .. }) if !c.data_checked => self
                .read_retried(c.id(), Vec::new(), Read::Verified)?
                .open_frame(i, self.sealer(), out),
            r => r,
        }
    }

    /// Have the store start reading container `id` (a hint: a local store
    /// reads it into the page cache in the background).
    pub(crate) fn prefetch(&self, id: ContainerId) {
        self.objects.prefetch_container(id);
    }

    /// Count `c`, read earlier, as read again: a restore that kept its
    /// mapping reads it from there (`restore/loader.rs`, `Buffers`).
    pub(crate) fn count_read(&self, c: &Container) {
        self.metrics.container_read(
            c.id().0,
            c.header.kind == ChunkKind::Recipe,
            c.header.logical_len,
        );
    }

    fn read_once(&self, id: ContainerId, reuse: Vec<u8>, how: Read) -> Result<Container> {
        let object = self.objects.get_container(id, reuse)?;
        let (header, meta) = format::decode_salvage(id, &object, self.sealer())?;
        let data_checked = how != Read::Unopened || !header.sealed;
        if data_checked {
            format::verify_data(id, &object, &header)?;
        }
        self.check_algo(&header)?;
        let open = how == Read::Opened;
        let object = if open && !header.trace && !stored_plain(&meta, self.sealer()) {
            let sealer = self.sealer();
            let plain = open_chunks(id, &object, &meta, sealer, header.logical_len, Vec::new())?;
            // The plain bytes replace the object (what the readers keep).
            Container::new(header, meta, Vec::new().into(), Some(plain.into()))
        } else {
            Container {
                data_checked,
                ..Container::new(header, meta, object, None)
            }
        };
        self.metrics.container_read(
            id.0,
            object.header.kind == ChunkKind::Recipe,
            object.header.logical_len,
        );
        Ok(object)
    }

    /// Read and verify a whole container for GC's copy-forward, which
    /// moves stored bytes as they are where it can ([`Container::stored`])
    /// and compresses chunks again where a frame does not move whole
    /// ([`Container::bytes`]): the frames are opened too unless every chunk
    /// is stored alone.
    pub fn read_stored(&self, id: ContainerId) -> Result<Container> {
        let object = self.objects.get_container(id, Vec::new())?;
        let (header, meta) = format::decode(id, &object, self.sealer())?;
        self.check_algo(&header)?;
        self.metrics
            .container_read(id.0, header.kind == ChunkKind::Recipe, header.logical_len);
        let plain = if header.trace || meta.iter().all(ChunkMeta::alone) {
            None
        } else {
            let plain = open_chunks(
                id,
                &object,
                &meta,
                self.sealer(),
                header.logical_len,
                Vec::new(),
            )?;
            Some(plain.into())
        };
        Ok(Container::new(header, meta, object, plain))
    }

    /// Read only the header and metadata section (two ranged reads). Not
    /// counted as a container read: it touches no chunk data.
    pub fn read_meta(&self, id: ContainerId) -> Result<(Header, Vec<ChunkMeta>)> {
        let head = self
            .objects
            .get_container_range(id, 0, format::HEADER_LEN as u64)?;
        let header = format::decode_header(id, &head)?;
        self.check_algo(&header)?;
        let meta = self
            .objects
            .get_container_range(id, header.meta_offset(), header.meta_len)?;
        let meta = format::decode_meta(&header, &meta, self.sealer())?;
        Ok((header, meta))
    }

    fn check_algo(&self, h: &Header) -> Result<()> {
        if h.algo != self.algo {
            return Err(Error::corrupt(
                format::object_name(h.id),
                format!(
                    "fingerprints are {}, repository uses {}",
                    h.algo.name(),
                    self.algo.name()
                ),
            ));
        }
        Ok(())
    }
}
