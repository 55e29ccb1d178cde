//! The logical mark (LGC): each retained backup's recipe tree, depth-first.

use super::liveness::{FpFilter, Mark, Marker, VcSpec};
use crate::catalog::{BackupEntry, BackupId};
use crate::container::ContainerId;
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::{Fingerprint, FpMap};
use crate::recipe::{RecipeChunk, RecipeVisitor};
use std::sync::Arc;

/// The logical mark (LGC): walk every retained backup's recipe tree
/// depth-first. Naive GC skips a subtree already marked (its fingerprint
/// fixes its content, the Merkle tree's point); GCCDF needs every backup's
/// full fingerprint set, so it walks all, through the reader's memo.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LogicalMark {
    /// The VC table.
    pub vc: VcSpec,
    /// `Some(rate)`: also build the RRT and one ownership filter per backup
    /// (GCCDF) with this false-positive rate (0 = exact sets).
    pub owners_fp_rate: Option<f64>,
    /// Walk every backup's tree in full, shared subtrees again each time,
    /// as DDFS's LGC must (FAST'17 §3.1: its Bloom-filter live vector cannot
    /// safely say a subtree was seen), so its cost follows the logical size.
    pub walk_shared: bool,
}

impl Marker for LogicalMark {
    fn mark(&self, repo: &Context) -> Result<Mark> {
        let backups: Vec<BackupEntry> = {
            let mut b = repo.manifest.backups.clone();
            b.sort_by_key(|b| b.id);
            b
        };
        let expected: u64 = backups.iter().map(|b| b.chunks).sum();
        let mut m = Mark::new(self.vc.filter(repo, expected as usize));
        let mut reader = repo.recipe_reader(16)?;
        if self.owners_fp_rate.is_some() {
            reader = reader.with_memo();
        }
        let mut homes = FpMap::default();
        for b in &backups {
            let mut w = Walk {
                repo,
                m: &mut m,
                homes: &mut homes,
                memoize: reader.memoizes(),
                homes_bytes: 0,
                backup: b.id,
                own: self
                    .owners_fp_rate
                    .map(|p| FpFilter::new(b.chunks as usize, p)),
                skip_seen: self.owners_fp_rate.is_none() && !self.walk_shared,
            };
            let stats = reader
                .walk(&b.root_fp()?, b.root_level, &mut w)
                .map_err(|e| e.in_backup(b.id, None))?;
            let (own, homes_bytes) = (w.own.take(), w.homes_bytes);
            reader.account(homes_bytes);
            m.walk += stats;
            if let Some(o) = own {
                m.owners.insert(b.id, o);
            }
        }
        m.memory_bytes = (m.table_bytes() + reader.memo_bytes()) as u64;
        Ok(m)
    }
}

/// What the walk of one backup records.
struct Walk<'m> {
    repo: &'m Context,
    m: &'m mut Mark,
    /// Containers of a level-1 chunk's data chunks, in order, kept when the
    /// reader memoizes (every backup is walked in full).
    homes: &'m mut FpMap<Arc<[ContainerId]>>,
    memoize: bool,
    homes_bytes: usize,
    backup: BackupId,
    own: Option<FpFilter>,
    skip_seen: bool,
}

impl RecipeVisitor for Walk<'_> {
    fn enter(&mut self, fp: &Fingerprint, _level: u8) -> bool {
        !(self.skip_seen && self.m.valid_recipe.contains(fp))
    }

    fn chunk(&mut self, fp: &Fingerprint, chunk: &RecipeChunk, id: ContainerId) -> Result<()> {
        let first = self.m.valid_recipe.insert(*fp);
        if first {
            *self.m.live_recipe.entry(id).or_default() += 1;
        }
        if chunk.level > 1 {
            return Ok(());
        }
        // A level-1 chunk seen before already put its data chunks in the VC;
        // only its ownership (RRT, per-backup filter) is new.
        let containers = match self.homes.get(fp) {
            Some(h) if !first => h.clone(),
            _ => {
                let homes = self.add_data_chunks(chunk)?;
                if self.memoize {
                    self.homes_bytes += homes.len() * 8 + 48;
                    self.homes.insert(*fp, homes.clone());
                }
                homes
            }
        };
        if let Some(o) = self.own.as_mut() {
            let mut last = None;
            for (e, &c) in chunk.entries.iter().zip(containers.iter()) {
                if last != Some(c) {
                    let r = self.m.rrt.entry(c).or_default();
                    if r.last() != Some(&self.backup) {
                        r.push(self.backup);
                    }
                    last = Some(c);
                }
                o.insert(e.fp);
            }
        }
        Ok(())
    }
}

impl Walk<'_> {
    /// Put a level-1 chunk's data chunks in the VC (and their containers'
    /// live counts); return the container of each, in order.
    fn add_data_chunks(&mut self, chunk: &RecipeChunk) -> Result<Arc<[ContainerId]>> {
        let mut homes = Vec::with_capacity(chunk.entries.len());
        for e in &chunk.entries {
            let c = self.repo.locate_data(self.backup, &e.fp, e.copy)?;
            self.m.chunk_queries += 1;
            if self.m.insert_valid(e.fp, e.copy) {
                self.m
                    .count_live(&self.repo.index, &e.fp, e.copy, c, e.size);
            }
            homes.push(c);
        }
        Ok(homes.into())
    }
}
