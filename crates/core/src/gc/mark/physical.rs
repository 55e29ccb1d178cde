//! The physical mark (PGC and PGC+, `physical-gc-fast17.md` §3.2–3.4):
//! breadth-first over the Merkle recipe levels instead of depth-first over
//! each backup's tree.
//!
//! Analysis: one perfect hash over the index's recipe fingerprints with two
//! bits each, *walk* (a live parent or the catalog references it) and
//! *confirm* (it was found at its level) — §3.2.2's "PH function that maps
//! from a chunk hash value to two bits". A recipe chunk's content fixes its
//! level, so the one hash serves every level; the index does not record
//! levels, and one hash per level would need them (or a pass over every
//! recipe container) before enumeration starts.
//!
//! Enumeration: the roots of the retained backups set walk bits at their
//! levels; then, from the top level down, the recipe containers holding a
//! walked chunk of that level are read once each, in container order; a
//! walked chunk found there is confirmed and sets the walk bits of its
//! children; level 1 fills the live vector of data chunks. So a recipe
//! container is read at most once per level, whatever the number of
//! backups (a few stay cached for the next level: a backup's recipe
//! containers hold several levels), and a shared subtree is walked once.
//!
//! Level checksums: per level, the XOR of the fingerprints parents
//! reference (each once, by its walk bit) must equal the XOR of the chunks
//! found (each once, by its confirm bit); a mismatch stops GC before
//! anything is deleted and names the level and the missing fingerprints.
//!
//! PGC+ adds to the analysis a per-container duplicate counter (from the
//! index's older copies) and always keeps the live vector as a perfect-hash
//! vector; select then estimates unique liveness and the copy phase removes
//! duplicates (`select.rs`, `sweep.rs`). Under a memory budget too small for
//! the live vector, the mark samples (§3.1.2): a pre-pass marks a sample of
//! fingerprints, a pre-select picks mostly dead candidate containers, and a
//! second pass marks exactly the fingerprints of those candidates.

use crate::cache::LruCache;
use crate::catalog::{BackupEntry, BackupId};
use crate::container::format::object_name;
use crate::container::{ChunkKind, ContainerId};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap};
use crate::gc::bloom::Bloom;
use crate::gc::mark::liveness::{FpFilter, Mark, Marker, Phv, VcSpec};
use crate::gc::phase::PhaseClock;
use crate::recipe::{self, MAX_LEVEL};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Recipe containers kept between levels (the logical mark keeps as many).
const RECIPE_CACHE: usize = 16;

/// The physical mark: PGC, or PGC+ with `plus`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhysicalMark {
    /// PGC+: analysis-phase duplicate counter, a perfect-hash live vector,
    /// unique-liveness select and dynamic duplicate removal in the copy.
    pub plus: bool,
    /// PGC's live vector (PGC+ always uses a perfect-hash vector).
    pub vc: VcSpec,
    /// `Some(rate)`: also build the RRT and one ownership filter per backup
    /// (GCCDF's sweep), propagating each chunk's backups level by level.
    pub owners_fp_rate: Option<f64>,
    /// Budget (bytes) for the live vector of data chunks; when the vector
    /// would not fit, the mark samples and runs two passes.
    pub memory_limit: Option<u64>,
    /// Sampling's pre-select picks candidates below this liveness.
    pub liveness_threshold: f64,
}

/// Bytes a live vector of `spec` needs for `n` data fingerprints.
fn live_vector_bytes(spec: VcSpec, n: usize) -> u64 {
    let n = n as f64;
    let b = match spec {
        // FpSet: key + control byte per slot, at most 7/8 full.
        VcSpec::Exact => n * 33.0 * 8.0 / 7.0,
        VcSpec::Bloom { fp_rate } => {
            let ln2 = std::f64::consts::LN_2;
            -(n * fp_rate.ln()) / (ln2 * ln2) / 8.0
        }
        VcSpec::BloomBits { bits } => n * bits / 8.0,
        // One bit plus the hash function (see `Phv::memory_bytes`).
        VcSpec::Phv => n * (1.0 + 3.4) / 8.0,
    };
    b.ceil() as u64
}

/// Whether `fp` is in a sample of about `rate` of all fingerprints (bytes
/// the Bloom filter and the index do not use, so the sample is unbiased).
fn sampled(fp: &Fingerprint, rate: f64) -> bool {
    let x = u64::from_le_bytes(fp.0[24..32].try_into().unwrap());
    (x as f64) < rate * u64::MAX as f64
}

/// A live vector of `spec` over the data fingerprints `admit` lets in.
fn live_vector(repo: &Context, spec: VcSpec, admit: &dyn Fn(&Fingerprint) -> bool) -> FpFilter {
    match spec {
        VcSpec::Phv => {
            let keys: Vec<Fingerprint> = repo
                .index
                .data_fingerprints()
                .filter(|f| admit(f))
                .collect();
            FpFilter::Phv(Phv::new(&keys))
        }
        VcSpec::Exact => FpFilter::new(0, 0.0),
        VcSpec::Bloom { .. } | VcSpec::BloomBits { .. } => {
            let n = repo.index.data_fingerprints().filter(|f| admit(f)).count();
            spec.bloom_or_exact(n)
        }
    }
}

/// The L_p vector: a minimal perfect hash over every recipe fingerprint of
/// the index, and a walk and a confirm bit per fingerprint.
struct LpVector {
    mphf: Option<boomphf::Mphf<Fingerprint>>,
    walk: Vec<u64>,
    confirm: Vec<u64>,
    keys: usize,
}

fn bit(v: &[u64], i: usize) -> bool {
    v[i / 64] & (1 << (i % 64)) != 0
}
fn set(v: &mut [u64], i: usize) {
    v[i / 64] |= 1 << (i % 64);
}

impl LpVector {
    fn new(keys: &[Fingerprint]) -> Self {
        LpVector {
            mphf: (!keys.is_empty()).then(|| boomphf::Mphf::new(1.7, keys)),
            walk: vec![0; keys.len().div_ceil(64)],
            confirm: vec![0; keys.len().div_ceil(64)],
            keys: keys.len(),
        }
    }
    /// The slot of a key (any slot, or none, for a fingerprint that is not).
    fn slot(&self, fp: &Fingerprint) -> Option<usize> {
        self.mphf
            .as_ref()?
            .try_hash(fp)
            .map(|i| i as usize)
            .filter(|&i| i < self.keys)
    }
    fn clear(&mut self) {
        self.walk.fill(0);
        self.confirm.fill(0);
    }
    fn memory_bytes(&self) -> usize {
        (self.walk.len() + self.confirm.len()) * 8 + (self.keys as f64 * 3.4 / 8.0) as usize
    }
}

impl Marker for PhysicalMark {
    fn mark(&self, repo: &Context) -> Result<Mark> {
        let mut backups: Vec<BackupEntry> = repo.manifest.backups.clone();
        backups.sort_by_key(|b| b.id);

        // 1'. Analysis: the perfect hashes (and PGC+'s duplicate counter).
        let clock = PhaseClock::start(repo, "analysis");
        let lp_keys: Vec<Fingerprint> = repo
            .index
            .entries()
            .filter(|e| e.kind == ChunkKind::Recipe)
            .map(|e| e.fp)
            .collect();
        let mut lp = LpVector::new(&lp_keys);
        drop(lp_keys);
        let spec = if self.plus { VcSpec::Phv } else { self.vc };
        let need = live_vector_bytes(spec, repo.index.len().0);
        let budget = self.memory_limit.filter(|&l| need > l);
        // PGC+ that does not fit falls back to PGC's two passes (§3.4).
        let dup_counter = (self.plus && budget.is_none()).then(|| duplicate_counter(repo));
        let dup_bytes = dup_counter.as_ref().map_or(0, |d| d.capacity() * 16);
        let mut phases = vec![clock.stop(repo, lp.memory_bytes() + dup_bytes)];

        let mut m = match budget {
            None => {
                let clock = PhaseClock::start(repo, "analysis: live vector");
                let mut m = Mark::new(live_vector(repo, spec, &|_| true));
                phases.push(clock.stop(repo, m.valid.memory_bytes()));
                if spec == VcSpec::Phv && !self.plus {
                    m.live = Some(HashMap::new());
                }
                if self.plus {
                    // PGC+ has no live-instance information: select estimates.
                    m.live = None;
                }
                self.enumerate(repo, &backups, &mut lp, &mut m, &|_| true, "")?;
                m
            }
            Some(limit) => {
                let rate = (limit as f64 / need as f64).min(1.0);
                let admit = |fp: &Fingerprint| sampled(fp, rate);
                let mut pre = Mark::new(live_vector(repo, spec, &admit));
                pre.live = None;
                let pre = PhysicalMark {
                    owners_fp_rate: None,
                    ..*self
                }
                .enumerate(repo, &backups, &mut lp, &mut pre, &admit, "pre-")
                .map(|()| pre)?;
                phases.extend(pre.phases.iter().cloned());
                let mut clock = PhaseClock::start(repo, "pre-select");
                let (candidates, cand) =
                    self.candidates(repo, &pre, spec, limit, rate, &mut clock)?;
                phases.push(clock.stop(repo, pre.valid.memory_bytes()));
                drop(pre);
                let admit = |fp: &Fingerprint| cand.contains(fp);
                let mut m = Mark::new(live_vector(repo, spec, &admit));
                if spec == VcSpec::Phv {
                    m.live = Some(HashMap::new());
                }
                self.enumerate(repo, &backups, &mut lp, &mut m, &admit, "")?;
                m.focus = Some(candidates);
                m.passes = 2;
                m
            }
        };
        phases.append(&mut m.phases);
        m.phases = phases;
        m.dup_counter = dup_counter;
        m.memory_bytes = (m.table_bytes() + lp.memory_bytes() + dup_bytes) as u64;
        m.lp_vector = Some((lp.memory_bytes() as u64, lp.keys as u64));
        Ok(m)
    }
}

/// PGC+'s duplicate counter (§3.4.2, ANALYSIS_DUP_CNTR): for each data
/// container, how many of its chunks have a copy in a newer container. The
/// index's older copies say where duplicates are.
fn duplicate_counter(repo: &Context) -> HashMap<ContainerId, u32> {
    let data: HashSet<ContainerId> = repo
        .manifest
        .containers
        .iter()
        .filter(|c| c.kind == ChunkKind::Data)
        .map(|c| c.id)
        .collect();
    let mut holders: FpMap<Vec<ContainerId>> = FpMap::default();
    for e in repo.index.entries() {
        if e.kind == ChunkKind::Data
            && data.contains(&e.container)
            && repo.index.copy_list(&e.fp).len() > 1
        {
            holders.entry(e.fp).or_default().push(e.container);
        }
    }
    let mut dup = HashMap::new();
    for (_, mut v) in holders {
        v.sort_unstable();
        v.dedup();
        v.pop();
        for c in v {
            *dup.entry(c).or_insert(0u32) += 1;
        }
    }
    dup
}

/// What one enumeration pass tracks besides the [`Mark`].
struct Levels<'r> {
    repo: &'r Context,
    lp: &'r mut LpVector,
    /// Recipe containers to read per level (index = level).
    frontier: Vec<BTreeSet<ContainerId>>,
    /// The containers read per level, kept to name missing chunks.
    scanned: Vec<Vec<ContainerId>>,
    /// XOR of the fingerprints referenced (C) and found (P), per level.
    referenced: Vec<Fingerprint>,
    found: Vec<Fingerprint>,
    /// References to fingerprints the index does not hold, per level.
    missing: Vec<Vec<Fingerprint>>,
    unreadable: Vec<String>,
    skipped_subtrees: u64,
    skipped_bytes: u64,
    /// Backups reaching each walked chunk, per level (GCCDF's ownership).
    owners: Option<Vec<FpMap<Vec<BackupId>>>>,
}

fn xor(acc: &mut Fingerprint, fp: &Fingerprint) {
    for (a, b) in acc.0.iter_mut().zip(fp.0) {
        *a ^= b;
    }
}

/// Sorted union of two ascending id lists into `into`.
fn union(into: &mut Vec<BackupId>, add: &[BackupId]) {
    if add.iter().all(|b| into.binary_search(b).is_ok()) {
        return;
    }
    into.extend_from_slice(add);
    into.sort_unstable();
    into.dedup();
}

impl Levels<'_> {
    /// A reference to recipe chunk `fp` at `level` (from a parent, or the
    /// catalog for a root). Walks it unless already walked.
    fn refer(&mut self, fp: &Fingerprint, size: u64, level: usize) {
        let (Some(c), Some(s)) = (
            self.repo.locate_copy(ChunkKind::Recipe, fp, 0),
            self.lp.slot(fp),
        ) else {
            self.missing[level].push(*fp);
            return;
        };
        if bit(&self.lp.walk, s) {
            self.skipped_subtrees += 1;
            self.skipped_bytes += size;
            return;
        }
        set(&mut self.lp.walk, s);
        xor(&mut self.referenced[level], fp);
        self.frontier[level].insert(c);
    }

    /// The fingerprints referenced at `level` but not found: those the
    /// index lacks, unconfirmed roots, and unconfirmed children of the
    /// chunks found a level up (their containers are read again: this is
    /// the error path).
    fn name_missing(&self, level: usize, backups: &[BackupEntry]) -> Vec<Fingerprint> {
        let mut out = self.missing[level].clone();
        let unconfirmed = |fp: &Fingerprint| {
            self.lp
                .slot(fp)
                .is_some_and(|s| bit(&self.lp.walk, s) && !bit(&self.lp.confirm, s))
        };
        for b in backups.iter().filter(|b| b.root_level as usize == level) {
            if let Ok(fp) = b.root_fp() {
                if unconfirmed(&fp) {
                    out.push(fp);
                }
            }
        }
        if level < MAX_LEVEL as usize {
            for &id in &self.scanned[level + 1] {
                let Ok(c) = self.repo.store.read(id) else {
                    continue;
                };
                for m in &c.meta {
                    let found = self
                        .lp
                        .slot(&m.fp)
                        .is_some_and(|s| bit(&self.lp.confirm, s));
                    let Ok(chunk) = recipe::decode(c.bytes(m), "recipe chunk") else {
                        continue;
                    };
                    if found && chunk.level as usize == level + 1 {
                        out.extend(
                            chunk
                                .entries
                                .iter()
                                .map(|e| e.fp)
                                .filter(|fp| unconfirmed(fp)),
                        );
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl PhysicalMark {
    /// One enumeration pass: roots, then every level top-down. Data chunks
    /// enter the live vector only if `admit`ted (sampling).
    fn enumerate(
        &self,
        repo: &Context,
        backups: &[BackupEntry],
        lp: &mut LpVector,
        m: &mut Mark,
        admit: &dyn Fn(&Fingerprint) -> bool,
        prefix: &str,
    ) -> Result<()> {
        lp.clear();
        let top = MAX_LEVEL as usize;
        let zero = Fingerprint([0; 32]);
        let mut lv = Levels {
            repo,
            lp,
            frontier: vec![BTreeSet::new(); top + 1],
            scanned: vec![Vec::new(); top + 1],
            referenced: vec![zero; top + 1],
            found: vec![zero; top + 1],
            missing: vec![Vec::new(); top + 1],
            unreadable: Vec::new(),
            skipped_subtrees: 0,
            skipped_bytes: 0,
            owners: self
                .owners_fp_rate
                .map(|_| (0..=top).map(|_| FpMap::default()).collect()),
        };
        let mut rrt: HashMap<ContainerId, BTreeSet<BackupId>> = HashMap::new();
        if let Some(p) = self.owners_fp_rate {
            for b in backups {
                m.owners.insert(b.id, FpFilter::new(b.chunks as usize, p));
            }
        }
        for b in backups {
            let k = b.root_level as usize;
            if !(1..=top).contains(&k) {
                return Err(Error::corrupt(
                    "manifest",
                    format!("backup {} has root level {k}", b.id),
                ));
            }
            let root = b.root_fp()?;
            lv.refer(&root, b.logical_bytes, k);
            if let Some(o) = lv.owners.as_mut() {
                union(o[k].entry(root).or_default(), &[b.id]);
            }
        }
        let hash = repo.fingerprinter();
        let mut missing_data = Vec::new();
        // A container holding chunks of several levels may still be cached
        // when the next level comes to it (§3.3); as many as the logical
        // mark's reader keeps, for a fair comparison.
        let mut cache = LruCache::new(RECIPE_CACHE);
        for k in (1..=top).rev() {
            if lv.frontier[k].is_empty() && lv.missing[k].is_empty() {
                continue;
            }
            let clock = PhaseClock::start(repo, format!("{prefix}enumeration L{k}"));
            let ids: Vec<ContainerId> = std::mem::take(&mut lv.frontier[k]).into_iter().collect();
            for &id in &ids {
                let c = match cache.get(id, |id| repo.store.read(id)) {
                    Ok(c) => c,
                    Err(e) => {
                        lv.unreadable.push(format!("{}: {e}", object_name(id)));
                        continue;
                    }
                };
                for meta in &c.meta {
                    let Some(s) = lv.lp.slot(&meta.fp) else {
                        continue;
                    };
                    if !bit(&lv.lp.walk, s) || bit(&lv.lp.confirm, s) {
                        continue;
                    }
                    // Only the index's copy counts (another is a stale copy).
                    if repo.locate_copy(ChunkKind::Recipe, &meta.fp, 0) != Some(id) {
                        continue;
                    }
                    let bytes = c.bytes(meta);
                    if hash.hash(bytes) != meta.fp {
                        continue; // corrupt: stays unconfirmed, the checksum names it
                    }
                    let Ok(chunk) = recipe::decode(bytes, "recipe chunk") else {
                        continue;
                    };
                    if chunk.level as usize != k {
                        continue; // walked at another level (a root lower down)
                    }
                    set(&mut lv.lp.confirm, s);
                    xor(&mut lv.found[k], &meta.fp);
                    m.valid_recipe.insert(meta.fp);
                    *m.live_recipe.entry(id).or_default() += 1;
                    m.walk.visited += 1;
                    let own = lv
                        .owners
                        .as_mut()
                        .map(|o| o[k].remove(&meta.fp).unwrap_or_default());
                    if k > 1 {
                        for e in &chunk.entries {
                            lv.refer(&e.fp, e.size, k - 1);
                            if let (Some(o), Some(own)) = (lv.owners.as_mut(), own.as_ref()) {
                                union(o[k - 1].entry(e.fp).or_default(), own);
                            }
                        }
                        continue;
                    }
                    // Level 1: its data chunks are live.
                    // Each entry's own copy is live (per-backup copies).
                    for e in &chunk.entries {
                        let mut home = None;
                        m.chunk_queries += u64::from(admit(&e.fp));
                        if admit(&e.fp) && !m.is_valid(&e.fp, e.copy) {
                            let Some(dc) = repo.locate_copy(ChunkKind::Data, &e.fp, e.copy) else {
                                missing_data.push(e.fp);
                                continue;
                            };
                            home = Some(dc);
                            m.insert_valid(e.fp, e.copy);
                            m.count_live(&repo.index, &e.fp, e.copy, dc, e.size);
                        }
                        if let Some(own) = own.as_ref() {
                            let Some(dc) =
                                home.or_else(|| repo.locate_copy(ChunkKind::Data, &e.fp, e.copy))
                            else {
                                missing_data.push(e.fp);
                                continue;
                            };
                            let r = rrt.entry(dc).or_default();
                            for b in own {
                                r.insert(*b);
                                if let Some(f) = m.owners.get_mut(b) {
                                    f.insert(e.fp);
                                }
                            }
                        }
                    }
                }
            }
            lv.scanned[k] = ids;
            // The level checksum (§3.2.2).
            if lv.referenced[k] != lv.found[k] || !lv.missing[k].is_empty() {
                let gone = lv.name_missing(k, backups);
                let list: Vec<String> = gone.iter().take(8).map(|f| f.to_hex()).collect();
                let more = if gone.len() > 8 { ", …" } else { "" };
                let why = if lv.unreadable.is_empty() {
                    String::new()
                } else {
                    format!("; unreadable: {}", lv.unreadable.join("; "))
                };
                return Err(Error::corrupt(
                    format!("recipe level {k}"),
                    format!(
                        "level checksum mismatch: {} recipe chunk(s) referenced at level {k} were not found ({}{more}){why}; GC stopped before deleting anything",
                        gone.len(),
                        list.join(", ")
                    ),
                ));
            }
            let memory = m.valid.memory_bytes() + lv.lp.memory_bytes();
            m.phases.push(clock.stop(repo, memory));
        }
        if !missing_data.is_empty() {
            missing_data.sort_unstable();
            missing_data.dedup();
            let list: Vec<String> = missing_data.iter().take(8).map(|f| f.to_hex()).collect();
            return Err(Error::corrupt(
                "recipe level 1",
                format!(
                    "{} data chunk(s) referenced are not in the index ({}); GC stopped before deleting anything",
                    missing_data.len(),
                    list.join(", ")
                ),
            ));
        }
        m.walk.skipped_subtrees += lv.skipped_subtrees;
        m.walk.skipped_bytes += lv.skipped_bytes;
        m.rrt = rrt
            .into_iter()
            .map(|(c, b)| (c, b.into_iter().collect()))
            .collect();
        Ok(())
    }

    /// Sampling's pre-select (§3.1.2): estimate each data container's
    /// liveness from the sampled chunks, take the most dead ones while
    /// their chunks fit the budget, and return them and a filter of their
    /// fingerprints (the candidate filter; false positives only let extra
    /// fingerprints into the second pass's live vector).
    fn candidates(
        &self,
        repo: &Context,
        pre: &Mark,
        spec: VcSpec,
        limit: u64,
        rate: f64,
        clock: &mut PhaseClock,
    ) -> Result<(HashSet<ContainerId>, Bloom)> {
        let mut ranked = Vec::new();
        let mut containers: Vec<_> = repo
            .manifest
            .containers
            .iter()
            .filter(|c| c.kind == ChunkKind::Data)
            .copied()
            .collect();
        containers.sort_by_key(|c| c.id);
        let mut here = Vec::new();
        for c in &containers {
            let (mut n, mut live) = (0u32, 0u32);
            for m in clock.read_meta(repo, c.id)? {
                if sampled(&m.fp, rate) {
                    n += 1;
                    pre.live_copies_in(&repo.index, &m.fp, c.id, &mut here);
                    if !here.is_empty() {
                        live += 1;
                    }
                }
            }
            let liveness = if n == 0 { 1.0 } else { live as f64 / n as f64 };
            if live < n && (self.liveness_threshold >= 1.0 || liveness < self.liveness_threshold) {
                ranked.push((liveness, c.id, c.chunks));
            }
        }
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut picked = HashSet::new();
        let mut chunks = 0usize;
        for (_, id, n) in ranked {
            if live_vector_bytes(spec, chunks + n as usize) > limit && !picked.is_empty() {
                break;
            }
            chunks += n as usize;
            picked.insert(id);
        }
        let mut cand = Bloom::new(chunks, 0.01);
        for &id in &picked {
            for m in clock.read_meta(repo, id)? {
                cand.insert(&m.fp);
            }
        }
        Ok((picked, cand))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryStore;
    use crate::catalog::SourceKind;
    use crate::container::ChunkMeta;
    use crate::gc::{GcOptions, GcStrategy, MarkSpec};
    use crate::index::IndexEntry;
    use crate::recipe::{encode, RecipeEntry};
    use crate::repo::{container_entry, Repository, Writer};
    use crate::{InitOptions, RestoreOptions};
    use std::sync::Arc;

    fn new_repo() -> Writer {
        let b = Arc::new(MemoryStore::new());
        Repository::init(b.clone(), &InitOptions::default()).unwrap();
        Repository::open_writer(b, "t").unwrap()
    }

    /// Write one container of `kind` holding `chunks` and publish it and
    /// its index entries (later entries win, as after a rewrite).
    fn put(repo: &mut Context, kind: ChunkKind, chunks: &[(Fingerprint, Vec<u8>)]) -> ContainerId {
        let mut next = repo.manifest.clone();
        let id = next.next_container_id;
        next.next_container_id = id.next();
        let (mut meta, mut bytes) = (Vec::new(), Vec::new());
        for (fp, b) in chunks {
            meta.push(ChunkMeta::plain(
                *fp,
                bytes.len() as u32,
                b.len() as u32,
                kind,
            ));
            bytes.extend_from_slice(b);
        }
        let obj = repo.store.write(id, kind, &meta, &bytes).unwrap();
        next.containers.push(container_entry(
            id,
            kind,
            chunks.len(),
            bytes.len() as u64,
            obj,
        ));
        index(repo, &mut next, kind, chunks.iter().map(|c| c.0), id);
        id
    }

    /// Point the index at `id` for `fps` and publish `next`.
    fn index(
        repo: &mut Context,
        next: &mut crate::catalog::Manifest,
        kind: ChunkKind,
        fps: impl Iterator<Item = Fingerprint>,
        id: ContainerId,
    ) {
        let entries: Vec<IndexEntry> = fps
            .map(|fp| IndexEntry {
                fp,
                container: id,
                kind,
                copy: 0,
            })
            .collect();
        repo.write_segment(next, &entries).unwrap();
        crate::publish::publish(repo, next.clone(), &[]).unwrap();
        for e in entries {
            repo.index.insert(e).unwrap();
        }
    }

    fn data(repo: &Context, i: u32) -> (Fingerprint, Vec<u8>) {
        let b: Vec<u8> = format!("data chunk number {i}").into_bytes().repeat(8);
        (repo.manifest.config.hash.hash(&b), b)
    }

    /// A recipe chunk of `level` over `children` (fingerprint, size).
    fn node(
        repo: &Context,
        level: u8,
        children: &[(Fingerprint, u64)],
    ) -> (Fingerprint, Vec<u8>, u64) {
        let entries: Vec<RecipeEntry> = children
            .iter()
            .map(|&(fp, size)| RecipeEntry { fp, size, copy: 0 })
            .collect();
        let b = encode(level, &entries);
        let size = children.iter().map(|c| c.1).sum();
        (repo.manifest.config.hash.hash(&b), b, size)
    }

    fn add_backup(repo: &mut Context, root: &(Fingerprint, Vec<u8>, u64), level: u8) -> BackupId {
        let mut next = repo.manifest.clone();
        let id = next.next_backup_id;
        next.next_backup_id = id.next();
        next.backups.push(BackupEntry {
            id,
            root: root.0.to_hex(),
            root_level: level,
            name: format!("b{id}"),
            source: SourceKind::Stream,
            time: 0,
            logical_bytes: root.2,
            chunks: 0,
            new_bytes: 0,
            new_chunks: 0,
            meta: Default::default(),
            chain: None,
            content_bytes: None,
        });
        crate::publish::publish(repo, next, &[]).unwrap();
        id
    }

    /// The forest of the tests, and its live chunks per level.
    struct Forest {
        repo: Writer,
        live: Vec<Vec<Fingerprint>>,
        dead_data: Fingerprint,
        /// A live level-1 chunk shared by two parents, and its container.
        shared: Fingerprint,
        shared_home: ContainerId,
        backups: Vec<BackupId>,
    }

    /// Backups: one of three levels (root r3 → p, q), one rooted at q (a
    /// level-2 root), one rooted at level-1 chunk a, and one rooted at r
    /// (forgotten). Level-1 chunks a, b, c, x; b is shared by p and q; x,
    /// only under r, holds the one dead data chunk d12. Recipe containers
    /// mix levels (R3 holds level 2 and level 3 chunks).
    fn forest() -> Forest {
        let mut repo = new_repo();
        let d: Vec<(Fingerprint, Vec<u8>)> = (0..13).map(|i| data(&repo, i)).collect();
        put(&mut repo, ChunkKind::Data, &d[..7]);
        put(&mut repo, ChunkKind::Data, &d[7..]);
        let refs = |r: std::ops::Range<usize>| -> Vec<(Fingerprint, u64)> {
            d[r].iter().map(|(fp, b)| (*fp, b.len() as u64)).collect()
        };
        let a = node(&repo, 1, &refs(0..4));
        let b = node(&repo, 1, &refs(4..8));
        let c = node(&repo, 1, &refs(8..12));
        let x = node(&repo, 1, &[refs(0..1)[0], refs(12..13)[0]]);
        let p = node(&repo, 2, &[(a.0, a.2), (b.0, b.2)]);
        let q = node(&repo, 2, &[(b.0, b.2), (c.0, c.2)]);
        let r = node(&repo, 2, &[(x.0, x.2)]);
        let r3 = node(&repo, 3, &[(p.0, p.2), (q.0, q.2)]);
        let rc = |n: &(Fingerprint, Vec<u8>, u64)| (n.0, n.1.clone());
        put(&mut repo, ChunkKind::Recipe, &[rc(&c), rc(&a)]);
        let shared_home = put(&mut repo, ChunkKind::Recipe, &[rc(&b), rc(&x)]);
        put(
            &mut repo,
            ChunkKind::Recipe,
            &[rc(&p), rc(&r3), rc(&q), rc(&r)],
        );
        let backups = vec![
            add_backup(&mut repo, &r3, 3),
            add_backup(&mut repo, &q, 2),
            add_backup(&mut repo, &a, 1),
        ];
        let gone = add_backup(&mut repo, &r, 2);
        repo.forget(&[gone]).unwrap();
        Forest {
            live: vec![
                d[..12].iter().map(|c| c.0).collect(),
                vec![a.0, b.0, c.0],
                vec![p.0, q.0],
                vec![r3.0],
            ],
            dead_data: d[12].0,
            shared: b.0,
            shared_home,
            backups,
            repo,
        }
    }

    fn physical(plus: bool) -> PhysicalMark {
        PhysicalMark {
            plus,
            liveness_threshold: 1.0,
            ..Default::default()
        }
    }

    /// Enumeration sets exactly the live bits: per level, the chunks it
    /// confirms are the live ones (each chunk's level is fixed by its
    /// content, so the confirmed set of a level is the live set ∩ level);
    /// each level reads each recipe container holding a live chunk of that
    /// level once; shared subtrees are skipped, not walked again.
    #[test]
    fn enumeration_sets_exactly_the_live_bits_per_level() {
        let f = forest();
        for plus in [false, true] {
            let m = physical(plus).mark(&f.repo).unwrap();
            let recipes: HashSet<Fingerprint> = f.live[1..].iter().flatten().copied().collect();
            assert_eq!(
                m.valid_recipe.iter().copied().collect::<HashSet<_>>(),
                recipes
            );
            for fp in &f.live[0] {
                assert!(m.valid.contains(fp));
            }
            assert!(!m.valid.contains(&f.dead_data));
            assert_eq!(m.walk.visited, 6, "each live recipe chunk confirmed once");
            // q (from r3), a (from p), b (from q): walked once each.
            assert_eq!(m.walk.skipped_subtrees, 3);
            let reads = |phase: &str| {
                m.phases
                    .iter()
                    .find(|p| p.phase == phase)
                    .unwrap_or_else(|| panic!("no phase {phase}: {:?}", m.phases))
                    .containers_read
            };
            // Level 3: r3's container; level 2: the same container, still
            // cached; level 1: the two containers of a, b, c.
            assert_eq!(
                (
                    reads("enumeration L3"),
                    reads("enumeration L2"),
                    reads("enumeration L1")
                ),
                (1, 0, 2)
            );
            assert!(m.phases.iter().any(|p| p.phase == "analysis"));
            assert_eq!(m.dup_counter.is_some(), plus);
        }
    }

    /// Rewrite recipe container `id` without `fp` (`drop`) or with its
    /// bytes altered (the container itself stays well-formed).
    fn damage(repo: &mut Context, id: ContainerId, fp: Fingerprint, drop: bool) {
        let c = repo.store.read(id).unwrap();
        let (mut meta, mut bytes) = (Vec::new(), Vec::new());
        for m in &c.meta {
            let mut b = c.bytes(m).to_vec();
            if m.fp == fp {
                if drop {
                    continue;
                }
                let last = b.len() - 1;
                b[last] ^= 1;
            }
            meta.push(ChunkMeta {
                offset: bytes.len() as u32,
                ..*m
            });
            bytes.extend_from_slice(&b);
        }
        repo.store
            .write(id, ChunkKind::Recipe, &meta, &bytes)
            .unwrap();
    }

    /// A deleted, a corrupted, or an unindexed recipe chunk breaks the
    /// level-1 checksum: GC stops before deleting anything and names the
    /// level and the chunk.
    #[test]
    fn level_checksums_catch_a_missing_and_a_corrupted_chunk() {
        for how in ["deleted", "corrupted", "unindexed"] {
            for mark in [MarkSpec::Physical, MarkSpec::PhysicalPlus] {
                let mut f = forest();
                match how {
                    "deleted" => damage(&mut f.repo, f.shared_home, f.shared, true),
                    "corrupted" => damage(&mut f.repo, f.shared_home, f.shared, false),
                    _ => f.repo.index.remove(ChunkKind::Recipe, &f.shared).unwrap(),
                }
                let before = f.repo.manifest.clone();
                let err = f
                    .repo
                    .gc(&GcOptions {
                        mark,
                        ..Default::default()
                    })
                    .unwrap_err()
                    .to_string();
                assert!(err.contains("recipe level 1"), "{how}: {err}");
                assert!(err.contains("checksum"), "{how}: {err}");
                assert!(err.contains(&f.shared.to_hex()), "{how}: {err}");
                assert!(err.contains("before deleting anything"), "{err}");
                assert_eq!(f.repo.manifest, before, "{how}: nothing changed");
            }
        }
    }

    fn restore(repo: &Repository, id: BackupId) -> Vec<u8> {
        let b = repo.manifest.backup(id).unwrap().clone();
        let mut out = Vec::new();
        repo.restore_to(&b, &mut out, &RestoreOptions::default(), &mut |_| {})
            .unwrap();
        out
    }

    /// Per-backup copies: a second stored copy of a chunk that no index
    /// entry lists (here: written, then the index pointed back at the
    /// first) is no copy any backup reads, so PGC+ frees it and keeps the
    /// listed one; every backup restores byte for byte. (PGC+ keeping the
    /// newest of several *listed* live copies and redirecting the older
    /// ones' readers is `gc_physical`'s Capping test.)
    #[test]
    fn pgc_plus_keeps_the_newest_copy_and_frees_the_older() {
        for strategy in [GcStrategy::Naive, GcStrategy::Gccdf] {
            let mut f = forest();
            let want: Vec<Vec<u8>> = f.backups.iter().map(|&b| restore(&f.repo, b)).collect();
            let d: Vec<(Fingerprint, Vec<u8>)> = (0..2).map(|i| data(&f.repo, i)).collect();
            let old = f.repo.index.get(ChunkKind::Data, &d[0].0).unwrap();
            // A newer copy of d0 and d1 (as rewriting stores), then the
            // index pointed back at the older copies.
            let newer = put(&mut f.repo, ChunkKind::Data, &d);
            let mut next = f.repo.manifest.clone();
            index(
                &mut f.repo,
                &mut next,
                ChunkKind::Data,
                d.iter().map(|c| c.0),
                old,
            );
            assert_eq!(f.repo.index.get(ChunkKind::Data, &d[0].0), Some(old));
            let r = f
                .repo
                .gc(&GcOptions {
                    mark: MarkSpec::PhysicalPlus,
                    strategy,
                    ..Default::default()
                })
                .unwrap();
            let kept = f.repo.index.get(ChunkKind::Data, &d[0].0).unwrap();
            let containers: HashSet<ContainerId> =
                f.repo.manifest.containers.iter().map(|c| c.id).collect();
            assert!(
                !containers.contains(&newer),
                "{strategy}: the unlisted copies are garbage: {r:?}"
            );
            assert_ne!(kept, newer);
            for m in f.repo.store.read(kept).unwrap().meta {
                assert!(m.fp != f.dead_data);
            }
            // One copy of each live data chunk remains. (GCCDF's sweep keeps
            // the copy the index names, so there the newer copy, unselected,
            // stays until the index is pointed at it.)
            if strategy == GcStrategy::Gccdf {
                continue;
            }
            let mut seen = HashSet::new();
            for c in f
                .repo
                .manifest
                .containers
                .iter()
                .filter(|c| c.kind == ChunkKind::Data)
            {
                for m in f.repo.store.read(c.id).unwrap().meta {
                    assert!(
                        seen.insert(m.fp),
                        "{strategy}: two copies of {}",
                        m.fp.to_hex()
                    );
                }
            }
            assert_eq!(seen.len(), 12);
            for (b, w) in f.backups.iter().zip(&want) {
                assert_eq!(&restore(&f.repo, *b), w);
            }
        }
    }

    /// Under a budget too small for the live vector, the mark samples: two
    /// passes, only candidate containers selected, nothing live lost.
    #[test]
    fn sampling_marks_twice_and_only_cleans_candidates() {
        let mut f = forest();
        let want: Vec<Vec<u8>> = f.backups.iter().map(|&b| restore(&f.repo, b)).collect();
        let opts = GcOptions {
            mark: MarkSpec::Physical,
            memory_limit: Some(100),
            ..Default::default()
        };
        let plan = f.repo.plan_gc(&opts).unwrap();
        assert_eq!(plan.mark.passes, 2);
        let focus = plan.mark.focus.clone().unwrap();
        assert!(plan
            .selection
            .copy
            .iter()
            .chain(&plan.selection.empty)
            .all(|c| focus.contains(c)));
        assert!(plan.phases.iter().any(|p| p.phase == "pre-enumeration L1"));
        assert!(plan.phases.iter().any(|p| p.phase == "pre-select"));
        let r = f.repo.gc_with(plan).unwrap();
        assert_eq!(r.mark_passes, 2);
        for (b, w) in f.backups.iter().zip(&want) {
            assert_eq!(&restore(&f.repo, *b), w);
        }
        // PGC+ fits the same data in far less memory than PGC's exact set.
        let need_pgc = live_vector_bytes(VcSpec::Exact, 1_000_000);
        let need_plus = live_vector_bytes(VcSpec::Phv, 1_000_000);
        assert!(need_plus * 40 < need_pgc);
    }

    #[test]
    fn samples_are_about_the_rate() {
        let hits = (0..10_000u32)
            .filter(|i| sampled(&crate::HashAlgo::Blake3.hash(&i.to_le_bytes()), 0.25))
            .count();
        assert!((2_200..2_800).contains(&hits), "{hits}");
    }
}
