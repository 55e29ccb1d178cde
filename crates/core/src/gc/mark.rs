//! Mark: walk the recipes of the retained backups and build what the sweep
//! needs — the VC table (valid data chunks), the valid recipe chunks, the
//! live chunks per container, the RRT (container → retained backups that
//! reference it) and, for GCCDF, one fingerprint filter per backup.
//!
//! A data chunk copy `(fp, C)` is live iff a retained backup references `fp`
//! and the index maps `fp` to `C`: older copies left by rewriting are dead.

use super::bloom::Bloom;
use crate::catalog::BackupEntry;
use crate::container::{format::object_name, ChunkKind, Container, ContainerId};
use crate::error::{Error, ObjectRef, Result};
use crate::fingerprint::{Fingerprint, FpMap, FpSet};
use crate::recipe::{self, RecipeChunk};
use crate::repo::Repository;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Valid-chunk membership: exact, a Bloom filter (false positives keep
/// dead chunks, which is safe), or a perfect-hash vector.
pub enum FpFilter {
    Exact(FpSet),
    Bloom(Bloom),
    Phv(Phv),
}

/// A perfect-hash vector (physical GC, FAST'17 §4): a minimal perfect hash
/// over every data fingerprint the index holds, and one bit per fingerprint.
/// GC only ever asks about stored chunks, all of which are keys, so it is
/// exact for them at about 4 bits per chunk instead of 33 bytes; a
/// fingerprint outside the key set may map to any bit (a false positive,
/// which only keeps garbage).
pub struct Phv {
    mphf: boomphf::Mphf<Fingerprint>,
    bits: Vec<u64>,
    keys: usize,
}

/// boomphf's space/time trade-off (its documented default range is 1–5).
const PHV_GAMMA: f64 = 1.7;

impl Phv {
    pub fn new(keys: &[Fingerprint]) -> Self {
        Phv {
            mphf: boomphf::Mphf::new(PHV_GAMMA, keys),
            bits: vec![0; keys.len().div_ceil(64)],
            keys: keys.len(),
        }
    }
    fn insert(&mut self, fp: &Fingerprint) {
        if let Some(i) = self.mphf.try_hash(fp) {
            if let Some(w) = self.bits.get_mut((i / 64) as usize) {
                *w |= 1 << (i % 64);
            }
        }
    }
    fn contains(&self, fp: &Fingerprint) -> bool {
        self.mphf
            .try_hash(fp)
            .and_then(|i| {
                self.bits
                    .get((i / 64) as usize)
                    .map(|w| w & (1 << (i % 64)) != 0)
            })
            .unwrap_or(false)
    }
    /// The vector plus an estimate of the hash function: BBHash needs about
    /// gamma × e^(1/gamma) bits per key (3.1 at 1.7), plus rank samples.
    fn memory_bytes(&self) -> usize {
        self.bits.len() * 8 + (self.keys as f64 * 3.4 / 8.0) as usize
    }
}

impl FpFilter {
    pub fn new(items: usize, fp_rate: f64) -> Self {
        if fp_rate > 0.0 {
            FpFilter::Bloom(Bloom::new(items, fp_rate))
        } else {
            FpFilter::Exact(FpSet::default())
        }
    }
    /// Insert; returns whether the fingerprint is certainly new (exact only).
    pub fn insert(&mut self, fp: Fingerprint) -> bool {
        match self {
            FpFilter::Exact(s) => s.insert(fp),
            FpFilter::Bloom(b) => {
                b.insert(&fp);
                false
            }
            FpFilter::Phv(p) => {
                p.insert(&fp);
                false
            }
        }
    }
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        match self {
            FpFilter::Exact(s) => s.contains(fp),
            FpFilter::Bloom(b) => b.contains(fp),
            FpFilter::Phv(p) => p.contains(fp),
        }
    }
    pub fn memory_bytes(&self) -> usize {
        match self {
            FpFilter::Exact(s) => s.capacity() * (std::mem::size_of::<Fingerprint>() + 1),
            FpFilter::Bloom(b) => b.memory_bytes(),
            FpFilter::Phv(p) => p.memory_bytes(),
        }
    }
}

/// Live chunks and bytes of one container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    pub chunks: u32,
    pub bytes: u64,
}

pub struct Mark {
    /// VC: valid data chunks.
    pub valid: FpFilter,
    /// Recipe chunks of retained backups (always exact: they are few).
    pub valid_recipe: FpSet,
    /// Live chunks per data container; `None` with a Bloom VC, where the
    /// sweep planner counts them from container metadata instead.
    pub live: Option<HashMap<ContainerId, Live>>,
    pub live_recipe: HashMap<ContainerId, u32>,
    /// RRT: container → retained backups referencing it, ascending ids.
    pub rrt: HashMap<ContainerId, Vec<u64>>,
    /// Per-backup recipe fingerprints (GCCDF's ownership checks).
    pub owners: HashMap<u64, FpFilter>,
    pub memory_bytes: u64,
}

/// Reads recipe chunks through a small FIFO cache of recipe containers and,
/// when every backup is walked in full (GCCDF), a memo of decoded chunks so
/// shared subtrees are not read again.
struct RecipeReader<'a> {
    repo: &'a Repository,
    cache: VecDeque<Arc<Container>>,
    memo: Option<FpMap<(Arc<RecipeChunk>, ContainerId)>>,
    /// Containers of a memoized level-1 chunk's data chunks, in order.
    homes: FpMap<Arc<[ContainerId]>>,
    memo_bytes: usize,
}

impl RecipeReader<'_> {
    fn load(&mut self, fp: &Fingerprint) -> Result<(Arc<RecipeChunk>, ContainerId)> {
        if let Some(hit) = self.memo.as_ref().and_then(|m| m.get(fp)) {
            return Ok(hit.clone());
        }
        let name = format!("recipe chunk {}", fp.to_hex());
        let id = self
            .repo
            .index
            .get(ChunkKind::Recipe, fp)
            .ok_or_else(|| Error::missing(ObjectRef::RecipeChunk(*fp)))?;
        let c = match self.cache.iter().find(|c| c.id() == id) {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(self.repo.store.read(id)?);
                if self.cache.len() >= 16 {
                    self.cache.pop_front();
                }
                self.cache.push_back(c.clone());
                c
            }
        };
        let bytes = c
            .chunk(fp)
            .ok_or_else(|| Error::corrupt(object_name(id), format!("does not hold {name}")))?;
        if self.repo.manifest.config.hash.hash(bytes) != *fp {
            return Err(Error::corrupt(
                ObjectRef::RecipeChunk(*fp),
                "content does not match its fingerprint",
            ));
        }
        let chunk = Arc::new(recipe::decode(bytes, &name)?);
        if let Some(m) = self.memo.as_mut() {
            self.memo_bytes += bytes.len() + 64;
            m.insert(*fp, (chunk.clone(), id));
        }
        Ok((chunk, id))
    }
}

/// What the walk of one backup records.
struct Walk<'m> {
    m: &'m mut Mark,
    backup: u64,
    own: Option<FpFilter>,
    /// Naive GC skips a recipe subtree already marked: its fingerprint fixes
    /// its content (the Merkle tree's point). GCCDF needs every backup's
    /// full fingerprint set, so it walks all, through the memo.
    skip_seen: bool,
}

impl Walk<'_> {
    fn visit(
        &mut self,
        repo: &Repository,
        reader: &mut RecipeReader,
        fp: &Fingerprint,
        level: u8,
        size: Option<u64>,
    ) -> Result<()> {
        let first = !self.m.valid_recipe.contains(fp);
        if !first && self.skip_seen {
            return Ok(());
        }
        let (chunk, id) = reader.load(fp)?;
        if first {
            self.m.valid_recipe.insert(*fp);
            *self.m.live_recipe.entry(id).or_default() += 1;
        }
        let name = || format!("recipe chunk {}", fp.to_hex());
        if chunk.level != level {
            return Err(Error::corrupt(
                name(),
                format!("is level {}, expected level {level}", chunk.level),
            ));
        }
        if size.is_some_and(|s| s != chunk.logical_size()) {
            return Err(Error::corrupt(
                name(),
                "logical size differs from its parent's entry",
            ));
        }
        if level > 1 {
            for e in &chunk.entries {
                self.visit(repo, reader, &e.fp, level - 1, Some(e.size))?;
            }
            return Ok(());
        }
        // A level-1 chunk seen before already put its data chunks in the VC;
        // only its ownership (RRT, per-backup filter) is new.
        let containers = match reader.homes.get(fp) {
            Some(h) if !first => h.clone(),
            _ => {
                let mut homes = Vec::with_capacity(chunk.entries.len());
                for e in &chunk.entries {
                    let c = repo.index.get(ChunkKind::Data, &e.fp).ok_or_else(|| {
                        Error::corrupt(
                            format!("backup {}", self.backup),
                            format!("chunk {} is not in the index", e.fp.to_hex()),
                        )
                    })?;
                    if self.m.valid.insert(e.fp) {
                        if let Some(live) = self.m.live.as_mut() {
                            let l = live.entry(c).or_default();
                            l.chunks += 1;
                            l.bytes += e.size;
                        }
                    }
                    homes.push(c);
                }
                let homes: Arc<[ContainerId]> = homes.into();
                if reader.memo.is_some() {
                    reader.memo_bytes += homes.len() * 8 + 48;
                    reader.homes.insert(*fp, homes.clone());
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

/// Walk every retained backup's recipe. The VC is a perfect-hash vector
/// with `vc_phv`, else exact (`vc_fp_rate` 0) or a Bloom filter.
/// `owners_fp_rate` is `None` when no RRT and per-backup filters are wanted
/// (naive GC).
pub fn mark(
    repo: &Repository,
    vc_fp_rate: f64,
    vc_phv: bool,
    owners_fp_rate: Option<f64>,
) -> Result<Mark> {
    let backups: Vec<BackupEntry> = {
        let mut b = repo.manifest.backups.clone();
        b.sort_by_key(|b| b.id);
        b
    };
    let expected: u64 = backups.iter().map(|b| b.chunks).sum();
    let valid = if vc_phv {
        let keys: Vec<Fingerprint> = repo.index.data_fingerprints().collect();
        FpFilter::Phv(Phv::new(&keys))
    } else {
        FpFilter::new(expected as usize, vc_fp_rate)
    };
    let exact = matches!(valid, FpFilter::Exact(_));
    let mut m = Mark {
        valid,
        valid_recipe: FpSet::default(),
        live: exact.then(HashMap::new),
        live_recipe: HashMap::new(),
        rrt: HashMap::new(),
        owners: HashMap::new(),
        memory_bytes: 0,
    };
    let mut reader = RecipeReader {
        repo,
        cache: VecDeque::new(),
        memo: owners_fp_rate.map(|_| FpMap::default()),
        homes: FpMap::default(),
        memo_bytes: 0,
    };
    for b in &backups {
        let mut w = Walk {
            m: &mut m,
            backup: b.id,
            own: owners_fp_rate.map(|p| FpFilter::new(b.chunks as usize, p)),
            skip_seen: owners_fp_rate.is_none(),
        };
        w.visit(repo, &mut reader, &b.root_fp()?, b.root_level, None)
            .map_err(|e| e.in_backup(b.id, None))?;
        if let Some(o) = w.own.take() {
            m.owners.insert(b.id, o);
        }
    }
    let fp = std::mem::size_of::<Fingerprint>() + 1;
    m.memory_bytes = (m.valid.memory_bytes()
        + m.valid_recipe.capacity() * fp
        + m.live.as_ref().map_or(0, |l| l.capacity() * 24)
        + m.rrt.values().map(|v| v.capacity() * 8 + 32).sum::<usize>()
        + m.owners.values().map(|o| o.memory_bytes()).sum::<usize>()
        + reader.memo_bytes) as u64;
    Ok(m)
}
