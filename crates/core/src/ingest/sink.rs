//! Where the worker puts each chunk: deduplicated against the layout's
//! index, written through the layout's writer, logged for undo.

use super::Counts;
use crate::catalog::ContainerEntry;
use crate::container::{ChunkKind, ContainerId};
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpMap};
use crate::index::{DedupIndex, IndexEntry};
use crate::layout::{ChunkWriter, ContainerLayout, Layout};
use crate::recipe::{RecipeBuilder, RecipeSink};
use crate::repo::Repository;
use crate::rewrite::Rewriter;

/// Destination of a backup's chunks. While the backup runs it owns the
/// layout's index; `Repository::commit` gives it back.
pub(crate) struct Sink<L: Layout = ContainerLayout> {
    pub(super) index: L::Index,
    pub(super) writer: L::Writer,
    /// Index entries this backup added or repointed, in order (the new
    /// index segment).
    pub(super) new_entries: Vec<IndexEntry>,
    pub(super) counts: Counts,
    pub(super) rw: Option<Rewriter>,
    pub(super) undo: UndoLog<L::Index>,
    /// Where the index's log expects the next data chunk.
    pub(super) cursor: <L::Index as DedupIndex>::Cursor,
    /// FGC's CorrRecorder, when the repository records the reference graph.
    pub(super) corr: Option<crate::refgraph::CorrRecorder>,
}

/// How to put the index back as it was if the backup fails: entries the
/// backup added are removed (`Sink::new_entries`); existing data entries
/// it repointed (only rewriting does) get their saved state back.
pub(crate) struct UndoLog<I: DedupIndex> {
    saved: FpMap<I::Saved>,
    /// Whether `saved` is kept (rewriting can repoint existing entries).
    rewriting: bool,
    /// First container id of this backup: older ones predate it.
    first_id: ContainerId,
}

impl<I: DedupIndex> UndoLog<I> {
    fn new(rewriting: bool, first_id: ContainerId) -> Self {
        UndoLog {
            saved: FpMap::default(),
            rewriting,
            first_id,
        }
    }

    /// `fp` is about to be pointed elsewhere: remember its state once, if
    /// it predates this backup.
    fn repointing(&mut self, index: &I, fp: &Fingerprint) {
        if self.rewriting {
            let before = index
                .get(ChunkKind::Data, fp)
                .is_some_and(|p| p < self.first_id);
            if before && !self.saved.contains_key(fp) {
                self.saved.insert(*fp, index.data_state(fp));
            }
        }
    }

    /// Undo a failed backup that added `added` to `index`.
    pub(super) fn undo(self, index: &mut I, added: &[IndexEntry]) {
        for ne in added {
            index.remove(ne.kind, &ne.fp);
        }
        for (fp, state) in self.saved {
            index.set_data_state(fp, state);
        }
    }
}

impl<L: Layout> Sink<L> {
    /// The sink of a new backup (or group): takes the layout's index from
    /// the repository until `commit` gives it back.
    pub(super) fn new(repo: &mut Repository, layout: &L, rw: Option<Rewriter>) -> Self {
        let writer = layout.writer(repo);
        let undo = UndoLog::new(rw.is_some(), writer.next_id());
        Sink {
            index: std::mem::take(L::index(repo)),
            writer,
            new_entries: Vec::new(),
            counts: Counts::default(),
            rw,
            undo,
            cursor: Default::default(),
            corr: None,
        }
    }

    /// Store a chunk unless the index already has it. Returns whether it was new.
    fn add(&mut self, kind: ChunkKind, fp: Fingerprint, len: u32, bytes: &[u8]) -> Result<bool> {
        let held = match kind {
            ChunkKind::Data => self.index.contains_data_seq(&mut self.cursor, &fp),
            ChunkKind::Recipe => self.index.contains(kind, &fp),
        };
        if let Some(corr) = &mut self.corr {
            corr.saw(
                kind,
                &fp,
                held,
                self.counts.logical.saturating_sub(len as u64),
            );
        }
        if held {
            return Ok(false);
        }
        self.store(kind, fp, len, bytes)?;
        Ok(true)
    }

    /// Index `e` and log it for the new segment.
    fn index_entry(&mut self, e: IndexEntry) {
        self.index.insert(e);
        self.new_entries.push(e);
    }

    /// Point the index at `container` for `fp`, remembering the old state.
    pub(super) fn point(&mut self, fp: Fingerprint, container: ContainerId) {
        self.undo.repointing(&self.index, &fp);
        self.index_entry(IndexEntry {
            fp,
            container,
            kind: ChunkKind::Data,
        });
    }

    /// Append a chunk to the open container of `kind` and index it there
    /// (the newest copy wins). Returns the container.
    pub(super) fn store(
        &mut self,
        kind: ChunkKind,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<ContainerId> {
        let sealed = self.writer.seal_if_full(kind, len)?;
        self.sealed(sealed);
        let container = self.writer.append(kind, fp, len, bytes);
        if kind == ChunkKind::Data {
            self.point(fp, container);
        } else {
            self.index_entry(IndexEntry {
                fp,
                container,
                kind,
            });
        }
        Ok(container)
    }

    /// A container was sealed: with rewriting, later segments may
    /// deduplicate against it.
    #[inline]
    fn sealed(&mut self, sealed: Option<ContainerEntry>) {
        if let (Some(c), Some(rw)) = (sealed, &mut self.rw) {
            if c.kind == ChunkKind::Data {
                rw.sealed(c.id, c.logical_bytes);
            }
        }
    }

    /// Write the open container of `kind`, if any.
    pub(super) fn seal(&mut self, kind: ChunkKind) -> Result<()> {
        let sealed = self.writer.seal(kind)?;
        self.sealed(sealed);
        Ok(())
    }

    /// One data chunk of the backup, in stream order.
    pub(super) fn data_chunk(
        &mut self,
        recipe: &mut RecipeBuilder,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<()> {
        if let Some(rw) = &mut self.rw {
            if rw.push(fp, len, bytes) {
                self.flush_segment(recipe)?;
            }
            return Ok(());
        }
        self.dedup_chunk(fp, len, bytes)?;
        recipe.push(fp, len as u64, self)
    }

    /// Without rewriting: count a data chunk and store it unless the index
    /// has it (the recipe is built by the caller).
    #[inline]
    pub(super) fn dedup_chunk(&mut self, fp: Fingerprint, len: u32, bytes: &[u8]) -> Result<()> {
        self.counts.logical += len as u64;
        self.counts.chunks += 1;
        if self.add(ChunkKind::Data, fp, len, bytes)? {
            self.counts.new_bytes += len as u64;
            self.counts.new_chunks += 1;
        }
        Ok(())
    }

    /// Store a recipe chunk unless the index has it.
    pub(super) fn recipe_bytes(&mut self, fp: Fingerprint, bytes: &[u8]) -> Result<()> {
        if self.add(ChunkKind::Recipe, fp, bytes.len() as u32, bytes)? {
            self.counts.new_recipe_chunks += 1;
        }
        Ok(())
    }
}

impl<L: Layout> RecipeSink for Sink<L> {
    fn recipe_chunk(&mut self, fp: Fingerprint, _level: u8, bytes: &[u8]) -> Result<()> {
        self.recipe_bytes(fp, bytes)
    }
}
