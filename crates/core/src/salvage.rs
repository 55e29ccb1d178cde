//! Getting what can be got out of a damaged backup.
//!
//! A damaged data chunk (its container missing, unreadable, or holding bytes
//! that no longer match the fingerprint) reads as zeros of its recorded
//! size, so every later byte keeps its offset; the damaged ranges are
//! recorded. A container whose data checksum fails is salvaged chunk by
//! chunk: each chunk whose bytes still hash to its fingerprint is intact.
//!
//! Used by `check` (to name the files a damaged range falls in) and by
//! `restore --skip-damaged` (to restore everything else and list what is
//! missing). The recipe itself must be readable: without it there are no
//! offsets to keep.

use crate::archive::ExtractReport;
use crate::backend::ObjectBytes;
use crate::cache::LruCache;
use crate::catalog::{BackupEntry, BackupId, SourceKind};
use crate::container::{format, ChunkKind, ChunkMeta, ContainerId, Header};
use crate::context::Context;
use crate::error::{Error, IoContext, Result};
use crate::fingerprint::Fingerprint;
use crate::index::CopyNo;
use crate::recipe::Entries;
use serde::Serialize;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

/// A container object read without its data checksum, and its metadata.
type RawContainer = (ObjectBytes, Vec<ChunkMeta>);

/// What a salvaging restore could not restore.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SalvageReport {
    pub backup_id: BackupId,
    pub restored_bytes: u64,
    /// (offset, length) of every range written as zeros.
    pub damaged: Vec<(u64, u64)>,
    pub damaged_bytes: u64,
    /// Paths in a directory backup whose bytes fall in a damaged range
    /// (their damaged parts were written as zeros, or, if their tar header
    /// was damaged, not at all).
    pub files: Vec<String>,
}

/// The byte stream of a backup with every damaged chunk read as zeros.
pub(crate) struct TolerantStream<'a> {
    repo: &'a Context,
    walker: Entries<'a>,
    cache: LruCache,
    salvaged: HashMap<ContainerId, Option<RawContainer>>,
    current: Vec<u8>,
    pos: usize,
    offset: u64,
    damaged: Vec<(u64, u64)>,
}

impl<'a> TolerantStream<'a> {
    pub(crate) fn new(repo: &'a Context, b: &BackupEntry) -> Result<Self> {
        let walker = repo
            .recipe_reader(16)?
            .into_entries(b.root_fp()?, b.root_level)?;
        Ok(TolerantStream {
            repo,
            walker,
            cache: LruCache::new(8),
            salvaged: HashMap::new(),
            current: Vec::new(),
            pos: 0,
            offset: 0,
            damaged: Vec::new(),
        })
    }

    /// Ranges read as zeros so far.
    pub(crate) fn damaged(&self) -> &[(u64, u64)] {
        &self.damaged
    }

    /// An intact chunk of the expected size: from its verified container, or
    /// salvaged (and rehashed) from a container whose data checksum fails.
    fn chunk(&mut self, fp: &Fingerprint, size: u64, copy: CopyNo) -> Option<Vec<u8>> {
        let id = self.repo.locate_copy(ChunkKind::Data, fp, copy)?;
        if let Ok(c) = self.cache.get(id, |id| self.repo.store.read(id)) {
            return c
                .chunk(fp)
                .filter(|b| b.len() as u64 == size)
                .map(|b| b.to_vec());
        }
        if !self.salvaged.contains_key(&id) {
            let s = self.repo.salvage_object(id).map(|(o, _, m)| (o, m));
            self.salvaged.insert(id, s);
        }
        let (object, metas) = self.salvaged.get(&id)?.as_ref()?;
        let i = metas.iter().position(|m| m.fp == *fp)?;
        let bytes = crate::container::open_chunk(object, metas, i, self.repo.store.sealer())?;
        (bytes.len() as u64 == size && self.repo.fingerprinter().hash(&bytes) == *fp)
            .then_some(bytes)
    }
}

impl Read for TolerantStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.current.len() {
            let e = match self.walker.next() {
                Ok(Some(e)) => e,
                Ok(None) => return Ok(0),
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            };
            self.pos = 0;
            match self.chunk(&e.fp, e.size, e.copy) {
                Some(b) => self.current = b,
                None => {
                    self.current.clear();
                    self.current.resize(e.size as usize, 0);
                    match self.damaged.last_mut() {
                        Some((o, l)) if *o + *l == self.offset => *l += e.size,
                        _ => self.damaged.push((self.offset, e.size)),
                    }
                }
            }
            self.offset += e.size;
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Plain bytes of chunk `i` inside a raw container object (`metas` its
/// entries), opened with its frame alone (`None` if it does not open:
/// damaged, or its entry points outside).
pub(crate) fn chunk_bytes(
    object: &[u8],
    metas: &[ChunkMeta],
    i: usize,
    sealer: &crate::seal::Sealer,
) -> Option<Vec<u8>> {
    crate::container::open_chunk(object, metas, i, sealer)
}

/// Paths of the tar entries whose headers or data overlap one of `ranges`.
/// Blocks in a damaged range, or failing the header checksum, are skipped
/// until the next valid header; the byte range that could not be attributed
/// to a name is reported in parentheses.
pub(crate) fn tar_paths_overlapping(input: impl Read, ranges: &[(u64, u64)]) -> Vec<String> {
    let mut stream = std::io::BufReader::with_capacity(1 << 20, input);
    let overlaps = |a: u64, z: u64| ranges.iter().any(|&(o, l)| o < z && o + l > a);
    let mut out = Vec::new();
    let mut block = [0u8; 512];
    let mut pos = 0u64;
    let mut entry_start = 0u64;
    let mut long_name: Option<Vec<u8>> = None;
    let mut lost_from: Option<u64> = None;
    while stream.read_exact(&mut block).is_ok() {
        let at = pos;
        pos += 512;
        let damaged = overlaps(at, pos);
        if !damaged && block.iter().all(|&x| x == 0) {
            break; // end-of-archive marker
        }
        let header = tar::Header::from_byte_slice(&block);
        if damaged || !header_checksum_ok(&block) {
            lost_from.get_or_insert(at);
            long_name = None;
            continue;
        }
        if let Some(from) = lost_from.take() {
            out.push(format!(
                "(entries whose tar headers are damaged, in bytes {from}..{at})"
            ));
            entry_start = at;
        }
        let size = header.entry_size().unwrap_or(0);
        let padded = size.div_ceil(512) * 512;
        let kind = header.entry_type().as_byte();
        let keep = if kind == b'L' { padded } else { 0 };
        let mut data = Vec::new();
        if (&mut stream).take(keep).read_to_end(&mut data).is_err()
            || std::io::copy(&mut (&mut stream).take(padded - keep), &mut std::io::sink()).is_err()
        {
            break;
        }
        pos += padded;
        match kind {
            b'L' => {
                data.truncate(size as usize);
                while data.last() == Some(&0) {
                    data.pop();
                }
                long_name = Some(data);
            }
            b'K' => {}
            _ => {
                let name = long_name
                    .take()
                    .unwrap_or_else(|| header.path_bytes().into_owned());
                if overlaps(entry_start, at + 512 + size) {
                    out.push(String::from_utf8_lossy(&name).into_owned());
                }
                entry_start = pos;
            }
        }
    }
    if let Some(from) = lost_from {
        out.push(format!(
            "(entries whose tar headers are damaged, from byte {from} to the end)"
        ));
    }
    out
}

/// A tar header block's checksum: the sum of its bytes with the checksum
/// field read as spaces.
fn header_checksum_ok(block: &[u8; 512]) -> bool {
    let sum: u64 = block
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            if (148..156).contains(&i) {
                32
            } else {
                x as u64
            }
        })
        .sum();
    tar::Header::from_byte_slice(block)
        .cksum()
        .is_ok_and(|c| c as u64 == sum)
}

impl Context {
    /// A container object decoded without its data checksum (header, length
    /// and metadata still verified); None in trace mode or if even that fails.
    pub(crate) fn salvage_object(
        &self,
        id: ContainerId,
    ) -> Option<(ObjectBytes, Header, Vec<ChunkMeta>)> {
        if self.manifest.config.trace {
            return None;
        }
        // Through the sealing layer like every read, but not through
        // `ContainerStore::read`, which refuses the damaged data section;
        // counted as a container read all the same.
        let object = self.store.objects().get_container(id, Vec::new()).ok()?;
        let (h, metas) = format::decode_salvage(id, &object, self.store.sealer()).ok()?;
        self.metrics
            .container_read(id.0, h.kind == ChunkKind::Recipe, h.logical_len);
        Some((object, h, metas))
    }

    /// Paths of a directory backup whose bytes fall in `ranges`.
    pub(crate) fn damaged_files(&self, b: &BackupEntry, ranges: &[(u64, u64)]) -> Vec<String> {
        if b.content_bytes.is_some() {
            return match crate::restore::range::tree_records(self, b) {
                Ok(Some((records, content))) => {
                    crate::archive::assemble::paths_overlapping(&records, content, ranges)
                }
                _ => vec!["(the directory metadata is damaged: the files cannot be named)".into()],
            };
        }
        match TolerantStream::new(self, b) {
            Ok(s) => tar_paths_overlapping(s, ranges),
            Err(_) => vec!["(recipe unreadable)".into()],
        }
    }
}
/// [`Repository::restore_damaged_to`](crate::Repository::restore_damaged_to).
pub(crate) fn restore_damaged_to(
    repo: &Context,
    b: &BackupEntry,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<SalvageReport> {
    let mut s = TolerantStream::new(repo, b).map_err(|e| e.in_backup(b.id, None))?;
    // A directory backup: its metadata must be readable to name anything.
    let n = match crate::restore::range::tree_records(repo, b)? {
        Some((records, content)) => {
            let mut tar = crate::archive::assemble::TarAssembler::new(&mut *out, records, content)?;
            let n = copy_tolerant(&mut s, &mut tar, b, progress)?;
            tar.finish()?;
            n
        }
        None => copy_tolerant(&mut s, out, b, progress)?,
    };
    out.flush().ctx(|| "cannot write restored data".into())?;
    let damaged = s.damaged().to_vec();
    let files = if damaged.is_empty() {
        Vec::new()
    } else if b.source == SourceKind::Tree {
        repo.damaged_files(b, &damaged)
    } else {
        vec![b.name.clone()]
    };
    Ok(SalvageReport {
        backup_id: b.id,
        restored_bytes: n,
        damaged_bytes: damaged.iter().map(|r| r.1).sum(),
        damaged,
        files,
    })
}

/// Copy the tolerant stream into `out`; returns the bytes copied.
fn copy_tolerant(
    s: &mut TolerantStream,
    out: &mut dyn Write,
    b: &BackupEntry,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = s
            .read(&mut buf)
            .map_err(|e| Error::corrupt(format!("recipe of backup {}", b.id), e.to_string()))?;
        if k == 0 {
            return Ok(n);
        }
        out.write_all(&buf[..k])
            .ctx(|| "cannot write restored data".into())?;
        n += k as u64;
        progress(n);
    }
}

/// [`Repository::restore_damaged_into`](crate::Repository::restore_damaged_into).
pub(crate) fn restore_damaged_into(
    repo: &Context,
    b: &BackupEntry,
    target: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<(SalvageReport, ExtractReport)> {
    let (restored, extracted) = crate::restore::into_directory(
        b,
        target,
        &[],
        |out| restore_damaged_to(repo, b, out, progress),
        |r| r.restored_bytes,
    )?;
    let rep = restored?;
    Ok((rep, extracted?))
}

/// Add to a restore's damage error (corrupt or missing objects) the files
/// of the backup that are damaged, and how to restore the rest.
pub(crate) fn explain_damage(repo: &Context, b: &BackupEntry, e: Error) -> Error {
    if !matches!(e, Error::Corrupt { .. } | Error::MissingObject(_)) {
        return e;
    }
    let damaged = match TolerantStream::new(repo, b) {
        Ok(mut s) => {
            let _ = std::io::copy(&mut s, &mut std::io::sink());
            s.damaged().to_vec()
        }
        Err(_) => return e,
    };
    if damaged.is_empty() {
        return e;
    }
    e.with_damaged_files(repo.damaged_files(b, &damaged))
}
