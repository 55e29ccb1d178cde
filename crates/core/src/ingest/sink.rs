//! Where the worker puts each chunk: deduplicated against the index (the
//! layout's: MFDedup swaps in its NDF index for the backup), written into
//! new containers, logged for undo.

use super::containers::BackupContainers;
use super::files_cache::CacheLearner;
use super::options::Counts;
use crate::catalog::ContainerEntry;
use crate::container::{ChunkKind, ContainerId};
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use crate::gc::online::{Ref, Resurrector};
use crate::index::{CopyNo, DataCursor, Index, IndexEntry};
use crate::recipe::{RecipeBuilder, RecipeSink};
use crate::rewrite::Rewriter;

/// Destination of a backup's chunks. While the backup runs it owns the
/// layout's index; `Repository::commit` gives it back.
pub(crate) struct Sink {
    pub(super) index: Index,
    pub(super) writer: BackupContainers,
    /// Index entries this backup added, in order (the new index segment).
    /// Every one is a new copy: a backup never moves an existing copy.
    pub(super) new_entries: Vec<IndexEntry>,
    pub(super) counts: Counts,
    pub(super) rw: Option<Rewriter>,
    /// Data containers sealed while the rewriter was busy deciding a segment
    /// (it is taken out of `rw` then): handed to it once the segment is
    /// stored, so the policy and later segments may deduplicate against them.
    pub(super) sealed_mid_segment: Vec<(ContainerId, u64)>,
    /// Whether the backup rewrites (`rw` is absent while a segment is decided).
    rewriting: bool,
    /// Where the index's log expects the next data chunk.
    pub(super) cursor: DataCursor,
    /// FGC's CorrRecorder, when the repository records the reference graph.
    pub(super) corr: Option<crate::fgc::CorrRecorder>,
    /// MFDedup only: every data fingerprint of the backup, in order (its
    /// NDF table, which arranging classifies the active categories by).
    pub(super) refs: Option<Vec<Fingerprint>>,
    /// The next files cache, learnt from the data chunks as they come
    /// (directory backups).
    pub(super) learn: Option<CacheLearner>,
    /// Online GC: the chunks deduplicated against existing containers,
    /// recorded and confirmed (see [`crate::gc::online`]); `None` on the
    /// MFDedup layout (one writer at a time, no GC).
    pub(super) online: Option<Resurrector>,
}

/// Put the index back as it was before a failed backup: remove exactly the
/// copies it added (`Sink::new_entries`); it changed no other entry. Every
/// copy is removed even after an on-disk index error (the first is
/// returned): the in-memory index must match the published generation.
pub(crate) fn undo(index: &mut Index, added: &[IndexEntry]) -> Result<()> {
    let mut done = Ok(());
    for ne in added {
        done = done.and(index.remove_copy(ne.kind, &ne.fp, ne.copy));
    }
    done
}

impl Sink {
    /// The sink of a new backup (or group): takes the layout's index from
    /// the repository until `commit` gives it back.
    pub(super) fn new(
        repo: &mut Context,
        hooks: &dyn super::options::BackupHooks,
        rw: Option<Rewriter>,
    ) -> Self {
        Sink {
            rewriting: rw.is_some(),
            index: repo.index.take(),
            writer: BackupContainers::new(repo),
            new_entries: Vec::new(),
            counts: Counts::default(),
            rw,
            sealed_mid_segment: Vec::new(),
            cursor: Default::default(),
            corr: None,
            refs: hooks.collects_refs().then(Vec::new),
            learn: None,
            online: repo.writer_token.clone().map(|token| {
                Resurrector::new(
                    repo.objects.clone(),
                    token,
                    repo.manifest.generation,
                    repo.manifest.containers.iter().map(|c| c.id),
                    repo.manifest.config.trace,
                )
            }),
        }
    }

    /// Online GC: note that the backup references copy `copy` of a chunk
    /// it did not store; confirm the pending ones when enough are.
    pub(super) fn deduplicated(
        &mut self,
        kind: ChunkKind,
        fp: Fingerprint,
        copy: CopyNo,
        len: u32,
        bytes: &[u8],
        container: Option<ContainerId>,
    ) -> Result<()> {
        let (Some(o), Some(container)) = (&mut self.online, container) else {
            return Ok(());
        };
        let r = Ref {
            kind,
            fp,
            copy,
            len,
            container,
        };
        if o.hit(r, bytes) {
            self.confirm_online()?;
        }
        Ok(())
    }

    /// Online GC: confirm the pending deduplicated chunks; store again
    /// those a GC past its cutoff may delete (same copy number: the new
    /// index entry wins over the old one when catalogs merge).
    pub(super) fn confirm_online(&mut self) -> Result<()> {
        let Some(o) = &mut self.online else {
            return Ok(());
        };
        for p in o.confirm()? {
            let bytes = p.bytes.unwrap_or_default();
            self.store(p.r.kind, p.r.fp, p.r.copy, p.r.len, &bytes)?;
        }
        Ok(())
    }

    /// Store a chunk unless the index already has it. Returns the copy the
    /// backup references (the newest if held, else the new copy 0) and
    /// whether it was new.
    fn add(
        &mut self,
        kind: ChunkKind,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<(CopyNo, bool)> {
        // The container comes with the answer: the online GC needs it for
        // every duplicate, and a second probe costs the disk index a run
        // search when the chunk was found at its cursor.
        let at = match kind {
            ChunkKind::Data => self.index.get_data_seq(&mut self.cursor, &fp),
            ChunkKind::Recipe => self.index.get(kind, &fp),
        };
        let held = at.is_some();
        let copy = match kind {
            ChunkKind::Data if held => self.index.newest_copy(&fp),
            _ => 0,
        };
        if let Some(corr) = &mut self.corr {
            let offset = self.counts.logical.saturating_sub(len as u64);
            corr.saw(kind, &fp, copy, held, offset);
        }
        if held {
            if self.online.is_some() {
                self.deduplicated(kind, fp, copy, len, bytes, at)?;
            }
            return Ok((copy, false));
        }
        self.store(kind, fp, 0, len, bytes)?;
        Ok((0, true))
    }

    /// Index `e` and log it for the new segment. Logged first: an on-disk
    /// index error still adds the entry, and an undo must remove it.
    fn index_entry(&mut self, e: IndexEntry) -> Result<()> {
        self.new_entries.push(e);
        self.index.insert(e)
    }

    /// Append copy `copy` of a chunk to the open container of `kind` and
    /// index it there. Returns the container.
    pub(super) fn store(
        &mut self,
        kind: ChunkKind,
        fp: Fingerprint,
        copy: CopyNo,
        len: u32,
        bytes: &[u8],
    ) -> Result<ContainerId> {
        let sealed = self.writer.seal_if_full(kind, len)?;
        self.sealed(sealed);
        let container = self.writer.append(kind, fp, len, bytes);
        self.index_entry(IndexEntry {
            fp,
            container,
            kind,
            copy,
        })?;
        Ok(container)
    }

    /// A container was sealed: with rewriting, later segments may
    /// deduplicate against it.
    #[inline]
    fn sealed(&mut self, sealed: Option<ContainerEntry>) {
        match (sealed, &mut self.rw) {
            (Some(c), Some(rw)) if c.kind == ChunkKind::Data => rw.sealed(c.id, c.logical_bytes),
            // Mid-segment (the rewriter is out deciding): remember it.
            (Some(c), None) if c.kind == ChunkKind::Data && self.rewriting => {
                self.sealed_mid_segment.push((c.id, c.logical_bytes))
            }
            _ => {}
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
            if rw.push(0, fp, len, bytes) {
                self.flush_own_segment(recipe)?;
            }
            return Ok(());
        }
        let copy = self.dedup_chunk(fp, len, bytes)?;
        recipe.push(fp, len, copy, self)
    }

    /// Without rewriting: count a data chunk and store it unless the index
    /// has it (the recipe is built by the caller). Returns the copy the
    /// recipe names: the newest.
    #[inline]
    pub(super) fn dedup_chunk(
        &mut self,
        fp: Fingerprint,
        len: u32,
        bytes: &[u8],
    ) -> Result<CopyNo> {
        let at = self.counts.logical;
        self.counts.logical += len as u64;
        self.counts.chunks += 1;
        if let Some(r) = &mut self.refs {
            r.push(fp);
        }
        let (copy, new) = self.add(ChunkKind::Data, fp, len, bytes)?;
        if new {
            self.counts.stored_new(at, len);
        }
        Ok(copy)
    }

    /// A data chunk given by fingerprint only (the files cache checked that
    /// the index holds it when the backup started; no rewriting then).
    /// Checked again here: where the stream follows the insertion log (an
    /// unchanged tree's does), by one comparison at the cursor the
    /// deduplication then finds it at, not a second random probe.
    pub(super) fn known_chunk(
        &mut self,
        recipe: &mut RecipeBuilder,
        fp: Fingerprint,
        len: u32,
    ) -> Result<()> {
        if self.rw.is_some() || !self.index.contains_data_at(&self.cursor, &fp) {
            return Err(crate::error::Error::invalid(format!(
                "the files cache named chunk {} that the index does not hold (a bug)",
                fp.to_hex()
            )));
        }
        self.data_chunk(recipe, fp, len, &[])
    }

    /// Store a recipe chunk unless the index has it.
    pub(super) fn recipe_bytes(&mut self, fp: Fingerprint, bytes: &[u8]) -> Result<()> {
        if self
            .add(ChunkKind::Recipe, fp, bytes.len() as u32, bytes)?
            .1
        {
            self.counts.new_recipe_chunks += 1;
        }
        Ok(())
    }
}

impl RecipeSink for Sink {
    fn recipe_chunk(&mut self, fp: Fingerprint, _level: u8, bytes: &[u8]) -> Result<()> {
        self.recipe_bytes(fp, bytes)
    }
}
