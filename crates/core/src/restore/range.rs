//! Random access into a backup's stream through its recipe tree: how a
//! restore reads a directory backup's metadata (which follows the contents)
//! before the contents, and how `tessera mount` reads one file of a backup
//! without restoring the rest.
//!
//! A seek descends the recipe tree by the logical sizes its entries carry,
//! so a read loads the recipe chunks on one root-to-leaf path and the data
//! containers holding the bytes asked for, nothing else. Recently read data
//! containers are kept (a container is the unit of a read: the next chunks
//! of a file are usually in the one just read), and so are recently decoded
//! recipe chunks.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use crate::archive::meta::{self, Kind, Record};
use crate::archive::Listed;
use crate::cache::LruCache;
use crate::catalog::{BackupEntry, SourceKind};
use crate::container::{ChunkKind, Container};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::recipe::{check_child, reader::RecipeReader, RecipeChunk, RecipeEntry};

/// Data containers a [`BackupStream`] keeps (4 MiB each by default).
const DATA_CACHE: usize = 4;
/// Recipe containers it keeps.
const RECIPE_CACHE: usize = 4;
/// Decoded recipe chunks it keeps: a few root-to-leaf paths.
const RECIPE_MEMO: usize = 32;

/// One backup's byte stream opened for random access (see the module
/// comment). Reads are verified as a restore's are; a damaged container
/// whose needed chunk is intact is salvaged.
pub struct BackupStream<'r> {
    repo: &'r Context,
    backup: BackupEntry,
    root: Fingerprint,
    recipes: RecipeReader<'r>,
    memo: VecDeque<(Fingerprint, Arc<RecipeChunk>)>,
    data: LruCache<Container>,
}

/// Where a seek stands in the recipe tree: the chunks from the root down,
/// each with the index of its next entry, and the stream offset of the next
/// data chunk.
struct Cursor {
    stack: Vec<(Arc<RecipeChunk>, usize)>,
    at: u64,
}

/// An entry of a backup with where its contents are in the backup's stream
/// (see [`BackupStream::entries`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    pub listed: Listed,
    /// For a regular file and a hard link (whose bytes are its first
    /// path's): the stream offset of its first byte and its length.
    pub content: Option<(u64, u64)>,
}

impl<'r> BackupStream<'r> {
    /// Open `backup` of `repo`; a fingerprint trace has no bytes to read.
    pub fn open(repo: &'r Context, backup: &BackupEntry) -> Result<Self> {
        if backup.source == SourceKind::Trace {
            return Err(Error::invalid(format!(
                "backup {} is a fingerprint trace: it has no bytes to read",
                backup.id
            )));
        }
        Ok(BackupStream {
            repo,
            backup: backup.clone(),
            root: backup.root_fp()?,
            recipes: repo.recipe_reader(RECIPE_CACHE)?,
            memo: VecDeque::new(),
            data: LruCache::new(DATA_CACHE),
        })
    }

    /// The stream's length in bytes.
    pub fn len(&self) -> u64 {
        self.backup.logical_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `start..end` of the stream; an error if the recipe ends first.
    pub fn read_range(&mut self, start: u64, end: u64) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(end.saturating_sub(start).min(1 << 30) as usize);
        if start < end {
            let mut cur = self.seek(start)?;
            while cur.at < end {
                let Some((e, a)) = self.next_leaf(&mut cur)? else {
                    break;
                };
                let from = start.saturating_sub(a) as usize;
                let to = (end.min(a + e.size) - a) as usize;
                self.copy_chunk(&e, a, from, to, &mut out)?;
            }
        }
        if (out.len() as u64) < end.saturating_sub(start) {
            return Err(Error::corrupt(
                format!("backup {}", self.backup.id),
                format!("the recipe ends before byte {end}"),
            ));
        }
        Ok(out)
    }

    /// Up to `len` bytes from `offset`, fewer at the end of the stream.
    pub fn read_at(&mut self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let end = offset.saturating_add(len as u64).min(self.len());
        if offset >= end {
            return Ok(Vec::new());
        }
        self.read_range(offset, end)
    }

    /// Every entry of the backup, in stream order, with where its contents
    /// are: a directory backup's entries (its metadata is read, or for one
    /// stored as a tar stream by an older build, the whole stream), or the
    /// one file a file or stream backup restores to.
    pub fn entries(&mut self) -> Result<Vec<StreamEntry>> {
        let b = self.backup.clone();
        match (b.source, b.content_bytes) {
            (SourceKind::Tree, Some(content)) => {
                let records = self.records(content)?;
                Ok(entries_of(&records))
            }
            (SourceKind::Tree, None) => {
                let mut out: Vec<StreamEntry> = Vec::new();
                let mut firsts: HashMap<String, (u64, u64)> = HashMap::new();
                let mut reader = Sequential { s: self, at: 0 };
                crate::archive::list_with_offsets(&mut reader, &mut |listed, data| {
                    let content = match listed.kind {
                        "file" => {
                            firsts.insert(listed.path.clone(), (data, listed.size));
                            Some((data, listed.size))
                        }
                        "hardlink" => listed
                            .link
                            .as_ref()
                            .and_then(|l| firsts.get(l.trim_start_matches("./")))
                            .copied(),
                        _ => None,
                    };
                    out.push(StreamEntry { listed, content });
                    Ok(())
                })?;
                Ok(out)
            }
            _ => {
                let listed = single_file_listing(&b);
                Ok(vec![StreamEntry {
                    listed,
                    content: Some((0, b.logical_bytes)),
                }])
            }
        }
    }

    /// A directory backup's metadata records (they start at `content`).
    fn records(&mut self, content: u64) -> Result<Vec<Record>> {
        if content > self.len() {
            return Err(Error::corrupt(
                "manifest",
                format!(
                    "backup {} has more content bytes than bytes",
                    self.backup.id
                ),
            ));
        }
        let bytes = self.read_range(content, self.len())?;
        meta::decode(&bytes)
    }

    /// A recipe chunk, from the memo or loaded and verified, checked
    /// against its parent's entry.
    fn fetch(
        &mut self,
        fp: &Fingerprint,
        level: u8,
        size: Option<u64>,
    ) -> Result<Arc<RecipeChunk>> {
        let chunk = match self.memo.iter().position(|(f, _)| f == fp) {
            Some(i) => self.memo[i].1.clone(),
            None => {
                let (chunk, _) = self.recipes.load(fp)?;
                if self.memo.len() == RECIPE_MEMO {
                    self.memo.pop_front();
                }
                self.memo.push_back((*fp, chunk.clone()));
                chunk
            }
        };
        check_child(&chunk, fp, level, size)?;
        Ok(chunk)
    }

    /// A cursor whose next data chunk holds byte `offset` (or at the end).
    fn seek(&mut self, offset: u64) -> Result<Cursor> {
        let root = self.root;
        let mut chunk = self.fetch(&root, self.backup.root_level, None)?;
        let mut cur = Cursor {
            stack: Vec::new(),
            at: 0,
        };
        loop {
            let mut i = 0;
            while i < chunk.entries.len() && cur.at + chunk.entries[i].size <= offset {
                cur.at += chunk.entries[i].size;
                i += 1;
            }
            if chunk.level == 1 || i == chunk.entries.len() {
                cur.stack.push((chunk, i));
                return Ok(cur);
            }
            let e = chunk.entries[i];
            let level = chunk.level - 1;
            cur.stack.push((chunk, i + 1));
            chunk = self.fetch(&e.fp, level, Some(e.size))?;
        }
    }

    /// The next data chunk and its stream offset.
    fn next_leaf(&mut self, cur: &mut Cursor) -> Result<Option<(RecipeEntry, u64)>> {
        loop {
            let Some((chunk, pos)) = cur.stack.last_mut() else {
                return Ok(None);
            };
            if *pos == chunk.entries.len() {
                cur.stack.pop();
                continue;
            }
            let e = chunk.entries[*pos];
            *pos += 1;
            if chunk.level == 1 {
                let at = cur.at;
                cur.at += e.size;
                return Ok(Some((e, at)));
            }
            let level = chunk.level - 1;
            let child = self.fetch(&e.fp, level, Some(e.size))?;
            cur.stack.push((child, 0));
        }
    }

    /// Append bytes `from..to` of data chunk `e` (at stream offset `a`).
    fn copy_chunk(
        &mut self,
        e: &RecipeEntry,
        a: u64,
        from: usize,
        to: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let (repo, bid) = (self.repo, self.backup.id);
        let id = repo
            .locate_copy(ChunkKind::Data, &e.fp, e.copy)
            .ok_or_else(|| Error::missing(format!("data chunk {}", e.fp.to_hex())))
            .map_err(|err| err.in_backup(bid, Some(a)))?;
        match self.data.get(id, |id| repo.store.read(id)) {
            Ok(c) => {
                let bytes = c
                    .chunk(&e.fp)
                    .filter(|x| x.len() as u64 == e.size)
                    .ok_or_else(|| {
                        Error::corrupt(
                            format!("backup {bid}"),
                            format!("chunk at offset {a} is not where the index says"),
                        )
                    })?;
                out.extend_from_slice(&bytes[from..to]);
            }
            // A damaged container may still hold this chunk intact (the
            // metadata shares containers with contents): salvage it.
            Err(err) => {
                let salvaged = repo.salvage_object(id).and_then(|(object, _, metas)| {
                    let i = metas.iter().position(|m| m.fp == e.fp)?;
                    let bytes =
                        crate::container::open_chunk(&object, &metas, i, repo.store.sealer())?;
                    (bytes.len() as u64 == e.size && repo.fingerprinter().hash(&bytes) == e.fp)
                        .then(|| bytes[from..to].to_vec())
                });
                match salvaged {
                    Some(bytes) => out.extend_from_slice(&bytes),
                    None => return Err(err.in_backup(bid, Some(a))),
                }
            }
        }
        Ok(())
    }
}

/// The stream read from its start, for parsing a tar stream.
struct Sequential<'a, 'r> {
    s: &'a mut BackupStream<'r>,
    at: u64,
}

impl std::io::Read for Sequential<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Whole chunks at a time would be faster; a legacy listing reads
        // its stream once.
        let want = buf.len().min(1 << 20);
        let bytes = self
            .s
            .read_at(self.at, want)
            .map_err(std::io::Error::other)?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        self.at += bytes.len() as u64;
        Ok(bytes.len())
    }
}

/// Records as stream entries: files' contents lie back to back from 0 in
/// record order; a hard link's are those of the path it names.
fn entries_of(records: &[Record]) -> Vec<StreamEntry> {
    let mut at = 0u64;
    let mut firsts: HashMap<&[u8], (u64, u64)> = HashMap::new();
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let content = match r.kind {
            Kind::File => {
                let c = (at, r.size);
                at += r.size;
                firsts.insert(&r.path, c);
                Some(c)
            }
            Kind::Hardlink => firsts.get(r.link.as_slice()).copied(),
            _ => None,
        };
        out.push(StreamEntry {
            listed: crate::archive::assemble::listed(r),
            content,
        });
    }
    out
}

/// A directory backup's metadata records and where its metadata starts;
/// None for other backups and for directory backups stored as tar streams.
pub(crate) fn tree_records(repo: &Context, b: &BackupEntry) -> Result<Option<(Vec<Record>, u64)>> {
    let (SourceKind::Tree, Some(content)) = (b.source, b.content_bytes) else {
        return Ok(None);
    };
    let records = BackupStream::open(repo, b)?.records(content)?;
    Ok(Some((records, content)))
}

/// The one entry of a file or stream backup.
pub(crate) fn single_file_listing(backup: &BackupEntry) -> crate::archive::Listed {
    crate::archive::Listed {
        path: file_name(backup).to_string_lossy().into_owned(),
        kind: "file",
        size: backup.logical_bytes,
        mode: 0o644,
        mtime: backup.time,
        link: None,
    }
}

/// The file a file or stream backup restores to: its source's name.
pub(crate) fn file_name(backup: &BackupEntry) -> std::ffi::OsString {
    Path::new(&backup.name)
        .file_name()
        .map(|s| s.to_os_string())
        .unwrap_or_else(|| format!("backup-{}", backup.id).into())
}
