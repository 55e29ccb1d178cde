//! The one way recipe chunks are read back: the index names the recipe
//! container, a small LRU keeps recent recipe containers (a tree's chunks
//! sit together, written bottom-up by one backup), every chunk is rehashed
//! against its fingerprint before it is decoded, and a full walk of many
//! backups may keep what it decoded so shared subtrees are read once.
//!
//! Two walks sit on top: [`Entries`], the data chunks of one backup in
//! order (restore, check, salvage, GC's select), and [`RecipeReader::walk`],
//! a depth-first visit of the recipe chunks themselves that can skip a
//! subtree already seen (GC's mark: a fingerprint fixes its subtree).

use super::tree::{check_child, decode, RecipeChunk, RecipeWalker};
use crate::cache::LruCache;
use crate::container::{format::object_name, ChunkKind, ContainerId, ContainerStore};
use crate::context::Context;
use crate::error::{Error, ObjectRef, Result};
use crate::fingerprint::{Fingerprint, Fingerprinter, FpMap};
use crate::index::Index;
use std::sync::Arc;

/// Loads, verifies and decodes recipe chunks (see the module comment).
pub struct RecipeReader<'a> {
    index: &'a Index,
    store: &'a ContainerStore,
    hash: Fingerprinter,
    cache: LruCache,
    /// Decoded chunks and their containers, when kept (full walks).
    memo: Option<FpMap<(Arc<RecipeChunk>, ContainerId)>>,
    memo_bytes: usize,
    /// Loads asked for, memo hits and failures included.
    loads: u64,
    /// The recipe container of the last load, if the index named one.
    last_container: Option<ContainerId>,
}

/// How [`Entries`] fetches a recipe chunk: through a reader it borrows or owns.
pub type Fetch<'r> = Box<dyn FnMut(&Fingerprint, u8) -> Result<Arc<RecipeChunk>> + 'r>;

/// The data chunk entries of one backup, in order.
pub type Entries<'r> = RecipeWalker<Fetch<'r>, Arc<RecipeChunk>>;

/// What a depth-first [`RecipeReader::walk`] sees.
pub trait RecipeVisitor {
    /// Whether to visit the recipe chunk `fp` (at `level`) and its subtree;
    /// asked before it is loaded, so a skipped subtree costs no read.
    fn enter(&mut self, _fp: &Fingerprint, _level: u8) -> bool {
        true
    }

    /// A recipe chunk, loaded from `container`, verified and checked against
    /// its parent's entry (so `chunk.level` is the level asked for); its
    /// children (level ≥ 2) are visited next.
    fn chunk(
        &mut self,
        fp: &Fingerprint,
        chunk: &RecipeChunk,
        container: ContainerId,
    ) -> Result<()>;
}

/// What a walk visited and what it skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Recipe chunks visited.
    pub visited: u64,
    /// Subtrees skipped (their root was declined by [`RecipeVisitor::enter`]).
    pub skipped_subtrees: u64,
    /// Logical bytes below the skipped subtrees (the root's size is not
    /// known, so a skipped root adds nothing).
    pub skipped_bytes: u64,
}

impl std::ops::AddAssign for WalkStats {
    fn add_assign(&mut self, o: WalkStats) {
        self.visited += o.visited;
        self.skipped_subtrees += o.skipped_subtrees;
        self.skipped_bytes += o.skipped_bytes;
    }
}

impl<'a> RecipeReader<'a> {
    /// A reader keeping up to `containers` recipe containers.
    pub fn new(
        index: &'a Index,
        store: &'a ContainerStore,
        hash: impl Into<Fingerprinter>,
        containers: usize,
    ) -> Self {
        RecipeReader {
            index,
            store,
            hash: hash.into(),
            cache: LruCache::new(containers),
            memo: None,
            memo_bytes: 0,
            loads: 0,
            last_container: None,
        }
    }

    /// Keep every decoded chunk: for walks that visit every backup in full
    /// (GCCDF's mark needs each backup's whole fingerprint set).
    pub fn with_memo(mut self) -> Self {
        self.memo = Some(FpMap::default());
        self
    }

    /// Whether decoded chunks are kept.
    pub fn memoizes(&self) -> bool {
        self.memo.is_some()
    }

    /// Memory the memo holds (estimated), plus what a caller adds for its
    /// own per-chunk tables through [`Self::account`].
    pub fn memo_bytes(&self) -> usize {
        self.memo_bytes
    }

    /// Count `bytes` a caller keeps per memoized chunk in the memo's memory.
    pub fn account(&mut self, bytes: usize) {
        self.memo_bytes += bytes;
    }

    /// Loads asked for so far (memo hits and failures included).
    pub fn loads(&self) -> u64 {
        self.loads
    }

    /// The recipe container the last load went to, if the index named one:
    /// a walk that fails there is that container's problem.
    pub fn last_container(&self) -> Option<ContainerId> {
        self.last_container
    }

    /// The recipe chunk `fp` and the container it was read from.
    pub fn load(&mut self, fp: &Fingerprint) -> Result<(Arc<RecipeChunk>, ContainerId)> {
        self.loads += 1;
        if let Some(hit) = self.memo.as_ref().and_then(|m| m.get(fp)) {
            self.last_container = Some(hit.1);
            return Ok(hit.clone());
        }
        let name = format!("recipe chunk {}", fp.to_hex());
        self.last_container = self.index.get(ChunkKind::Recipe, fp);
        let id = self
            .last_container
            .ok_or_else(|| Error::missing(ObjectRef::RecipeChunk(*fp)))?;
        let store = self.store;
        let c = self.cache.get(id, |id| store.read(id))?;
        let bytes = c
            .chunk(fp)
            .ok_or_else(|| Error::corrupt(object_name(id), format!("does not hold {name}")))?;
        if self.hash.hash(bytes) != *fp {
            return Err(Error::corrupt(
                ObjectRef::RecipeChunk(*fp),
                "content does not match its fingerprint",
            ));
        }
        let chunk = Arc::new(decode(bytes, &name)?);
        if let Some(m) = self.memo.as_mut() {
            self.memo_bytes += bytes.len() + 64;
            m.insert(*fp, (chunk.clone(), id));
        }
        Ok((chunk, id))
    }

    /// The data chunks of the tree under `root` (at `level`), in order.
    pub fn entries(&mut self, root: Fingerprint, level: u8) -> Result<Entries<'_>> {
        let fetch: Fetch<'_> = Box::new(|fp, _| Ok(self.load(fp)?.0));
        RecipeWalker::new(root, level, fetch)
    }

    /// [`Self::entries`] owning the reader (a stream that outlives its maker).
    pub fn into_entries(mut self, root: Fingerprint, level: u8) -> Result<Entries<'a>> {
        let fetch: Fetch<'a> = Box::new(move |fp, _| Ok(self.load(fp)?.0));
        RecipeWalker::new(root, level, fetch)
    }

    /// Visit the recipe chunks under `root` (at `level`) depth-first,
    /// parents before children, skipping the subtrees `visitor` declines.
    pub fn walk(
        &mut self,
        root: &Fingerprint,
        level: u8,
        visitor: &mut dyn RecipeVisitor,
    ) -> Result<WalkStats> {
        let mut stats = WalkStats::default();
        self.visit(root, level, None, visitor, &mut stats)?;
        Ok(stats)
    }

    fn visit(
        &mut self,
        fp: &Fingerprint,
        level: u8,
        size: Option<u64>,
        visitor: &mut dyn RecipeVisitor,
        stats: &mut WalkStats,
    ) -> Result<()> {
        if !visitor.enter(fp, level) {
            stats.skipped_subtrees += 1;
            stats.skipped_bytes += size.unwrap_or(0);
            return Ok(());
        }
        let (chunk, id) = self.load(fp)?;
        stats.visited += 1;
        check_child(&chunk, fp, level, size)?;
        visitor.chunk(fp, &chunk, id)?;
        if level > 1 {
            for e in &chunk.entries {
                self.visit(&e.fp, level - 1, Some(e.size), visitor, stats)?;
            }
        }
        Ok(())
    }
}

impl Context {
    /// A [`RecipeReader`] over this repository keeping up to `containers`
    /// recipe containers. The index names the recipe containers: a handle
    /// that opened without it loads it here, the first time a command
    /// reads a recipe (and every reader of data chunks reads one first).
    pub fn recipe_reader(&self, containers: usize) -> Result<RecipeReader<'_>> {
        Ok(RecipeReader::new(
            self.need_index()?,
            &self.store,
            self.fingerprinter().clone(),
            containers,
        ))
    }
}
