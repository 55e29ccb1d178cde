//! Online GC (FAST'17 §3.5): backups keep running while a GC runs, from
//! other processes, and no interleaving loses a chunk a committed backup
//! references.
//!
//! A backup that deduplicates against a chunk a running GC found dead
//! *resurrects* it. GC and backups tell each other through two kinds of
//! object (never shared memory), both under `gc/`:
//!
//! * `gc/state` ([`GcState`]), written by GCs only (one at a time, under
//!   the GC lock): the recent GC runs, each `marking` (mark and select
//!   running), `sweeping` (its reclaimed containers announced: the
//!   **cutoff**), `done` (committed as a generation) or `failed` (ended
//!   without committing: deleted nothing).
//! * `gc/resurrect/<writer token>-<n>` ([`encode_record`]), written by
//!   backups: the chunk copies they deduplicated against in containers of
//!   their starting generation, flushed every few MiB and before commit.
//!
//! Protocol. A GC writes `marking`, reloads the newest generation, marks
//! and selects on it, then writes `sweeping` with the containers it will
//! delete, and only then lists the records: every copy a record names in
//! those containers that the mark found dead is added to the live set (a
//! resurrection), and a container selected as empty that now holds a live
//! copy is copied instead. A backup keeps the bytes of each deduplicated
//! chunk until a record naming it is durable *and* it has read `gc/state`
//! after that: a run still `marking` then will see the record at its
//! cutoff; a run past its cutoff (`sweeping`, or `done` after the backup's
//! starting generation) that reclaims the chunk's container may delete it,
//! so the backup writes its own copy of the chunk (same fingerprint and
//! copy number; its index entry wins over the old one) — the paper's
//! "write a (potentially) duplicate chunk for safety", removed by a later
//! GC. Records of writers that are gone are deleted by the next GC; a
//! backup deletes its own after committing when no GC is marking (else a
//! GC that planned on an older generation would miss its references).

use super::bloom::Bloom;
use super::options::GcOptions;
use super::plan::{plan_gc, GcPlan};
use super::report::GcReport;
use super::run::gc_with;
use crate::backend::{Generation, KeyKind, ObjectKey};
use crate::container::format::checksum;
use crate::container::{ChunkKind, ContainerId};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FP_LEN};
use crate::index::CopyNo;
use crate::seal::SealedStore;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// GC runs `gc/state` remembers; a backup that started before the oldest
/// forgotten run committed treats every chunk it deduplicated as
/// threatened (writes its own copies).
pub const HISTORY: usize = 64;
/// A backup confirms its deduplicated chunks (writes a record, reads the
/// state) at least every this many bytes of them, which it holds until then.
pub const CONFIRM_BYTES: usize = 32 << 20;
/// ... or every this many chunks.
pub const CONFIRM_CHUNKS: usize = 1 << 16;

const RECORD_MAGIC: [u8; 8] = *b"TSRARESU";
const RECORD_VERSION: u32 = 1;
const RECORD_ENTRY: usize = 1 + 1 + 2 + 4 + 8 + FP_LEN;
const RECORD_PREFIX: &str = "resurrect/";

/// Where a GC run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Marking,
    Sweeping,
    Done,
    Failed,
}

/// One GC run, as `gc/state` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRun {
    pub seq: u64,
    pub phase: Phase,
    /// Containers (data and recipe) it deletes; announced at the cutoff.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reclaimed: Vec<ContainerId>,
    /// The generation its commit published (`done`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed: Option<Generation>,
    /// Whether it wrote its dead filter `gc/dead/<seq>` before announcing
    /// `reclaimed` (see [`DeadFilter`]); without one, every chunk in a
    /// reclaimed container counts as threatened.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dead_filter: bool,
}

impl GcRun {
    /// Whether a backup started from generation `base` must treat this
    /// run's reclaimed containers as possibly gone (sweeping, or done after
    /// `base`).
    fn past_cutoff(&self, base: Generation) -> bool {
        match self.phase {
            Phase::Marking | Phase::Failed => false,
            Phase::Sweeping => true,
            Phase::Done => self.committed.is_none_or(|g| g > base),
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `gc/state`: the recent GC runs, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcState {
    pub next_seq: u64,
    pub runs: Vec<GcRun>,
    /// The newest generation any run dropped from `runs` committed (a
    /// backup that started before it cannot tell what those runs deleted).
    #[serde(default)]
    pub pruned_through: Generation,
}

impl GcState {
    /// Whether a chunk in `container`, deduplicated by a backup that
    /// started from generation `base`, may be deleted by a run that will
    /// not see a record written before this state was read.
    pub fn threatens(&self, base: Generation, container: ContainerId) -> bool {
        self.pruned_through > base || self.reclaiming(base, container).next().is_some()
    }

    /// The runs past their cutoff that reclaim `container` and that a
    /// backup started from generation `base` cannot tell apart from its
    /// own view (sweeping, or done after `base`).
    pub fn reclaiming(
        &self,
        base: Generation,
        container: ContainerId,
    ) -> impl Iterator<Item = &GcRun> + '_ {
        self.runs
            .iter()
            .filter(move |r| r.past_cutoff(base) && r.reclaimed.binary_search(&container).is_ok())
    }

    /// Whether any run past its cutoff (as [`reclaiming`](Self::reclaiming)
    /// sees it from `base`) reclaims anything.
    pub fn past_cutoff(&self, base: Generation) -> bool {
        self.runs
            .iter()
            .any(|r| r.past_cutoff(base) && !r.reclaimed.is_empty())
    }

    /// Whether a run is marking (has not reached its cutoff).
    pub fn marking(&self) -> bool {
        self.runs.iter().any(|r| r.phase == Phase::Marking)
    }

    fn run(&mut self, seq: u64) -> Result<&mut GcRun> {
        self.runs
            .iter_mut()
            .find(|r| r.seq == seq)
            .ok_or_else(|| Error::invalid(format!("GC run {seq} is not in gc/state")))
    }
}

fn state_key() -> ObjectKey {
    ObjectKey::Gc("state".into())
}

/// Read `gc/state` (empty when no GC ever ran).
pub fn read_state(objects: &SealedStore) -> Result<GcState> {
    match objects.get(&state_key()) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| Error::corrupt("gc/state", format!("unreadable: {e}"))),
        Err(Error::MissingObject(_)) => Ok(GcState::default()),
        Err(e) => Err(e),
    }
}

fn write_state(objects: &SealedStore, s: &GcState) -> Result<()> {
    let json = serde_json::to_vec(s).expect("gc state serializes");
    objects.put(&state_key(), json)?;
    objects.barrier()
}

/// A run's dead filter, `gc/dead/<seq>`: a Bloom filter over the
/// fingerprints of the chunks its sweep drops (copies its mark found dead
/// in the containers it reclaims, per its index), written before the
/// cutoff announces those containers. A backup past that cutoff stores
/// again only the deduplicated chunks the filter may contain: the others
/// are live in the run's plan, so its sweep carries them forward under the
/// same fingerprint and copy number (or keeps them where they are), and
/// the backup's reference stays good. A false positive only stores a chunk
/// once more. Resurrections at the cutoff only make more chunks live.
pub struct DeadFilter(Bloom);

const DEAD_MAGIC: [u8; 8] = *b"TSRADEAD";
/// 2: the filter hashes the whole fingerprint (`gc::bloom`); version 1's
/// took h2 from bytes 16..24, zero in a trace's 6-byte fingerprints.
const DEAD_VERSION: u32 = 2;
/// False-positive rate of a dead filter (~9.6 bits per dead chunk).
const DEAD_FP_RATE: f64 = 0.01;

impl DeadFilter {
    /// The dead chunks of `plan` in the containers it reclaims.
    pub(crate) fn of_plan(repo: &crate::context::Context, plan: &GcPlan) -> Self {
        // Two passes (count, then insert) rather than a list of them.
        let dead = || {
            repo.index
                .entries()
                .filter(|e| plan.reclaimed.contains(&e.container))
                .filter(|e| match e.kind {
                    ChunkKind::Data => !plan.mark.is_valid(&e.fp, e.copy),
                    ChunkKind::Recipe => !plan.mark.valid_recipe.contains(&e.fp),
                })
        };
        let mut b = Bloom::new(dead().count(), DEAD_FP_RATE);
        for e in dead() {
            b.insert(&e.fp);
        }
        DeadFilter(b)
    }

    /// Whether the run may drop chunk `fp` (false: it surely does not).
    pub fn may_drop(&self, fp: &Fingerprint) -> bool {
        self.0.contains(fp)
    }

    /// magic | version u32 | the Bloom filter (hash count u32, bit words
    /// u64 each) | XXH3-128 of all before (docs/FORMAT.md).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = DEAD_MAGIC.to_vec();
        b.extend_from_slice(&DEAD_VERSION.to_le_bytes());
        b.extend_from_slice(&self.0.to_bytes());
        let sum = checksum(&b);
        b.extend_from_slice(&sum);
        b
    }

    pub fn decode(b: &[u8], name: &str) -> Result<Self> {
        let bad = |why: &str| Error::corrupt(name.to_string(), why.to_string());
        if b.len() < 12 + 16 || b[..8] != DEAD_MAGIC {
            return Err(bad("not a dead filter"));
        }
        let (body, sum) = b.split_at(b.len() - 16);
        if checksum(body)[..] != *sum {
            return Err(bad("checksum mismatch"));
        }
        if u32::from_le_bytes(body[8..12].try_into().unwrap()) != DEAD_VERSION {
            return Err(bad("unknown dead filter version"));
        }
        Bloom::from_bytes(&body[12..])
            .map(DeadFilter)
            .ok_or_else(|| bad("malformed Bloom filter"))
    }
}

fn dead_key(seq: u64) -> ObjectKey {
    ObjectKey::Gc(format!("dead/{seq}"))
}

/// Run `seq`'s dead filter; `None` if it is gone (its run left the
/// history) or unreadable: then every chunk it reclaims is threatened.
fn read_dead_filter(objects: &SealedStore, seq: u64) -> Option<DeadFilter> {
    let key = dead_key(seq);
    let b = objects.get(&key).ok()?;
    DeadFilter::decode(&b, &key.name()).ok()
}

/// Delete run `seq`'s dead filter, if any (best effort: an orphan filter
/// is never read again, since sequence numbers are not reused).
fn remove_dead_filter(objects: &SealedStore, seq: u64) {
    let _ = objects.delete(&dead_key(seq));
}

/// One deduplicated chunk copy a record names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ref {
    pub kind: ChunkKind,
    pub fp: Fingerprint,
    pub copy: CopyNo,
    pub len: u32,
    /// Where the backup's index had it.
    pub container: ContainerId,
}

/// Record format: magic | version u32 | count u64 | count × (kind u8, 0 u8,
/// copy u16, len u32, container u64, fingerprint\[32\]) | XXH3-128 of all
/// before (docs/FORMAT.md, "Online GC objects").
pub fn encode_record<'a>(refs: impl ExactSizeIterator<Item = &'a Ref>) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + refs.len() * RECORD_ENTRY + 16);
    b.extend_from_slice(&RECORD_MAGIC);
    b.extend_from_slice(&RECORD_VERSION.to_le_bytes());
    b.extend_from_slice(&(refs.len() as u64).to_le_bytes());
    for r in refs {
        b.push(match r.kind {
            ChunkKind::Data => 0,
            ChunkKind::Recipe => 1,
        });
        b.push(0);
        b.extend_from_slice(&r.copy.to_le_bytes());
        b.extend_from_slice(&r.len.to_le_bytes());
        b.extend_from_slice(&r.container.0.to_le_bytes());
        b.extend_from_slice(&r.fp.0);
    }
    let sum = checksum(&b);
    b.extend_from_slice(&sum);
    b
}

pub fn decode_record(b: &[u8], name: &str) -> Result<Vec<Ref>> {
    let bad = |why: &str| Error::corrupt(name.to_string(), why.to_string());
    if b.len() < 20 + 16 || b[..8] != RECORD_MAGIC {
        return Err(bad("not a resurrection record"));
    }
    let (body, sum) = b.split_at(b.len() - 16);
    if checksum(body)[..] != *sum {
        return Err(bad("checksum mismatch"));
    }
    if u32::from_le_bytes(body[8..12].try_into().unwrap()) != RECORD_VERSION {
        return Err(bad("unknown record version"));
    }
    let n = u64::from_le_bytes(body[12..20].try_into().unwrap()) as usize;
    let entries = &body[20..];
    if entries.len() != n.saturating_mul(RECORD_ENTRY) {
        return Err(bad("wrong length"));
    }
    entries
        .chunks_exact(RECORD_ENTRY)
        .map(|e| {
            let kind = match e[0] {
                0 => ChunkKind::Data,
                1 => ChunkKind::Recipe,
                _ => return Err(bad("bad chunk kind")),
            };
            let mut fp = [0u8; FP_LEN];
            fp.copy_from_slice(&e[16..16 + FP_LEN]);
            Ok(Ref {
                kind,
                copy: u16::from_le_bytes([e[2], e[3]]),
                len: u32::from_le_bytes(e[4..8].try_into().unwrap()),
                container: ContainerId(u64::from_le_bytes(e[8..16].try_into().unwrap())),
                fp: Fingerprint(fp),
            })
        })
        .collect()
}

/// The writer token a record's name carries.
fn record_token(key: &ObjectKey) -> Option<&str> {
    match key {
        ObjectKey::Gc(name) => name
            .strip_prefix(RECORD_PREFIX)
            .and_then(|t| t.rsplit_once('-'))
            .map(|(t, _)| t),
        _ => None,
    }
}

/// Every resurrection record in the repository.
pub fn list_records(objects: &SealedStore) -> Result<Vec<ObjectKey>> {
    Ok(objects
        .list(KeyKind::Gc)?
        .into_iter()
        .filter(|k| matches!(k, ObjectKey::Gc(n) if n.starts_with(RECORD_PREFIX)))
        .collect())
}

/// A deduplicated chunk not confirmed yet, with its bytes (none for the
/// files cache's chunks, which were not read).
pub(crate) struct Pending {
    pub r: Ref,
    pub bytes: Option<Vec<u8>>,
}

/// The containers of a backup's starting generation, asked once per
/// deduplicated chunk: sorted ids and the last answer (consecutive
/// duplicates mostly sit in one container), cheaper than a hashed set.
struct BaseContainers {
    ids: Vec<ContainerId>,
    last: Option<(ContainerId, bool)>,
}

impl BaseContainers {
    fn new(ids: impl IntoIterator<Item = ContainerId>) -> Self {
        let mut ids: Vec<ContainerId> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        BaseContainers { ids, last: None }
    }

    fn contains(&mut self, id: ContainerId) -> bool {
        match self.last {
            Some((l, answer)) if l == id => answer,
            _ => {
                let answer = self.ids.binary_search(&id).is_ok();
                self.last = Some((id, answer));
                answer
            }
        }
    }
}

/// A backup's side: records its deduplicated chunks, confirms them, and
/// hands back the ones it must store again.
pub(crate) struct Resurrector {
    objects: SealedStore,
    token: String,
    base: Generation,
    /// Containers of the backup's starting generation (the only ones a GC
    /// may reclaim under it).
    base_containers: BaseContainers,
    trace: bool,
    next_record: u64,
    pending: Vec<Pending>,
    pending_bytes: usize,
    /// Records this backup wrote (deleted after commit when safe).
    pub(crate) records: Vec<ObjectKey>,
    /// Chunks stored again because a GC past its cutoff may delete them.
    pub(crate) stored_again: u64,
    /// Dead filters read, by run (`None`: the run has none readable).
    filters: std::collections::HashMap<u64, Option<DeadFilter>>,
}

impl Resurrector {
    pub(crate) fn new(
        objects: SealedStore,
        token: String,
        base: Generation,
        base_containers: impl IntoIterator<Item = ContainerId>,
        trace: bool,
    ) -> Self {
        Resurrector {
            objects,
            token,
            base,
            base_containers: BaseContainers::new(base_containers),
            trace,
            next_record: 0,
            pending: Vec::new(),
            pending_bytes: 0,
            records: Vec::new(),
            stored_again: 0,
            filters: Default::default(),
        }
    }

    /// Whether a run past its cutoff may delete the chunk `r` names, as
    /// `state` says: one that reclaims its container and whose dead filter
    /// (if it wrote one) may hold it.
    fn threatened(&mut self, state: &GcState, r: &Ref) -> bool {
        if state.pruned_through > self.base {
            return true;
        }
        for run in state.reclaiming(self.base, r.container) {
            if !run.dead_filter {
                return true;
            }
            let objects = &self.objects;
            let f = self
                .filters
                .entry(run.seq)
                .or_insert_with(|| read_dead_filter(objects, run.seq));
            if f.as_ref().is_none_or(|f| f.may_drop(&r.fp)) {
                return true;
            }
        }
        false
    }

    /// A chunk deduplicated against copy `copy` in `container`; true when
    /// enough is pending to [`confirm`](Self::confirm).
    pub(crate) fn hit(&mut self, r: Ref, bytes: &[u8]) -> bool {
        if !self.base_containers.contains(r.container) {
            return false; // this writer's own, unpublished container
        }
        let have = self.trace || r.len == 0 || !bytes.is_empty();
        self.pending_bytes += bytes.len();
        self.pending.push(Pending {
            r,
            bytes: have.then(|| bytes.to_vec()),
        });
        self.pending_bytes >= CONFIRM_BYTES || self.pending.len() >= CONFIRM_CHUNKS
    }

    /// Make the pending chunks safe: write a record naming them, then read
    /// `gc/state`; returns those a run past its cutoff may delete, which
    /// the caller stores again.
    pub(crate) fn confirm(&mut self) -> Result<Vec<Pending>> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let key = ObjectKey::Gc(format!(
            "{RECORD_PREFIX}{}-{:08}",
            self.token, self.next_record
        ));
        self.next_record += 1;
        self.objects
            .put(&key, encode_record(self.pending.iter().map(|p| &p.r)))?;
        // Durable before the state is read: a run still marking then
        // lists it at its cutoff.
        self.objects.barrier()?;
        self.records.push(key);
        let state = read_state(&self.objects)?;
        self.pending_bytes = 0;
        // Usually no run is past its cutoff: nothing is threatened, and the
        // pending list keeps its allocation for the next round.
        if state.pruned_through <= self.base && !state.past_cutoff(self.base) {
            self.pending.clear();
            return Ok(Vec::new());
        }
        let mut pending = std::mem::take(&mut self.pending);
        let threatened: Vec<Pending> = pending
            .drain(..)
            .filter(|p| self.threatened(&state, &p.r))
            .collect();
        self.pending = pending;
        if let Some(p) = threatened.iter().find(|p| p.bytes.is_none()) {
            return Err(Error::Locked(format!(
                "a concurrent GC reclaims chunk {} that the files cache named without reading it; \
                 run the backup again",
                p.r.fp.to_hex()
            )));
        }
        self.stored_again += threatened.len() as u64;
        Ok(threatened)
    }

    /// After the backup committed: delete its records unless a GC is
    /// marking (which may have planned on a generation before the commit;
    /// the next GC deletes them once this writer is gone).
    pub(crate) fn finish(self) -> Result<()> {
        if self.records.is_empty() || read_state(&self.objects)?.marking() {
            return Ok(());
        }
        for k in &self.records {
            self.objects.delete(k)?;
        }
        self.objects.barrier()
    }
}

/// What a GC's cutoff found.
#[derive(Debug, Default)]
pub struct Cutoff {
    /// Records listed at the cutoff.
    pub records: Vec<ObjectKey>,
    /// Dead chunk copies added to the live set.
    pub resurrected: u64,
}

/// GC begins (holding the GC lock): runs left `marking` or `sweeping` by a
/// GC that died are settled (a `sweeping` one as `done` at the newest
/// generation, reclaiming what the newest catalog no longer lists), and a
/// new `marking` run is added. Returns its number.
pub(crate) fn begin(objects: &SealedStore, newest: &crate::catalog::Manifest) -> Result<u64> {
    let mut s = read_state(objects)?;
    let listed: HashSet<ContainerId> = newest.containers.iter().map(|c| c.id).collect();
    for r in &mut s.runs {
        match r.phase {
            Phase::Marking => r.phase = Phase::Failed,
            Phase::Sweeping => {
                r.reclaimed.retain(|c| !listed.contains(c));
                r.phase = Phase::Done;
                r.committed = Some(newest.generation);
            }
            Phase::Done | Phase::Failed => {}
        }
    }
    let seq = s.next_seq;
    s.next_seq += 1;
    s.runs.push(GcRun {
        seq,
        phase: Phase::Marking,
        reclaimed: Vec::new(),
        committed: None,
        dead_filter: false,
    });
    let mut pruned = Vec::new();
    while s.runs.len() > HISTORY {
        let r = s.runs.remove(0);
        if let Some(g) = r.committed {
            s.pruned_through = s.pruned_through.max(g);
        }
        if r.dead_filter {
            pruned.push(r.seq);
        }
    }
    write_state(objects, &s)?;
    // No backup consults a run the state no longer lists.
    for seq in pruned {
        remove_dead_filter(objects, seq);
    }
    Ok(seq)
}

/// The cutoff: announce the containers run `seq` reclaims, then read every
/// record and resurrect the dead copies they name in those containers
/// (see the module docs).
pub(crate) fn cutoff(
    repo: &crate::context::Context,
    seq: u64,
    plan: &mut GcPlan,
) -> Result<Cutoff> {
    let objects = &repo.objects;
    let mut s = read_state(objects)?;
    let mut reclaimed: Vec<ContainerId> = plan.reclaimed.iter().copied().collect();
    reclaimed.sort_unstable();
    // The dead filter is durable before the state names it.
    let dead_filter = !reclaimed.is_empty();
    if dead_filter {
        objects.put(&dead_key(seq), DeadFilter::of_plan(repo, plan).encode())?;
        objects.barrier()?;
    }
    {
        let r = s.run(seq)?;
        r.phase = Phase::Sweeping;
        r.reclaimed = reclaimed;
        r.dead_filter = dead_filter;
    }
    write_state(objects, &s)?;
    let records = list_records(objects)?;
    let mut out = Cutoff::default();
    let mut touched: HashSet<ContainerId> = HashSet::new();
    for key in &records {
        let bytes = match objects.get(key) {
            Ok(b) => b,
            // Deleted by its backup after it committed: its references
            // are in a backup the mark saw (no GC was marking then).
            Err(Error::MissingObject(_)) => continue,
            Err(e) => return Err(e),
        };
        for r in decode_record(&bytes, &key.name())? {
            let at = match r.kind {
                ChunkKind::Data => repo.index.copy_list(&r.fp).get(r.copy),
                ChunkKind::Recipe => repo.index.get(ChunkKind::Recipe, &r.fp),
            };
            let Some(at) = at.filter(|c| plan.reclaimed.contains(c)) else {
                continue;
            };
            let dead = match r.kind {
                ChunkKind::Data => !plan.mark.is_valid(&r.fp, r.copy),
                ChunkKind::Recipe => !plan.mark.valid_recipe.contains(&r.fp),
            };
            if !dead {
                continue;
            }
            match r.kind {
                ChunkKind::Data => {
                    plan.mark.insert_valid(r.fp, r.copy);
                }
                ChunkKind::Recipe => {
                    plan.mark.valid_recipe.insert(r.fp);
                }
            }
            out.resurrected += 1;
            touched.insert(at);
        }
    }
    // A container selected as empty that now holds a live copy is copied;
    // CMA copies nothing, so it keeps such a container whole (deleting it
    // uncopied lost the resurrected chunks, found by the model test).
    let copies = plan.options.strategy != super::options::GcStrategy::Cma;
    let mut kept = Vec::new();
    let sel = &mut plan.selection;
    for (empty, copy) in [
        (&mut sel.empty, &mut sel.copy),
        (&mut sel.recipe_empty, &mut sel.recipe_copy),
    ] {
        let moved: Vec<ContainerId> = empty
            .iter()
            .copied()
            .filter(|c| touched.contains(c))
            .collect();
        if !moved.is_empty() {
            empty.retain(|c| !touched.contains(c));
            if copies {
                copy.extend(moved);
                copy.sort_unstable();
            } else {
                kept.extend(moved);
            }
        }
    }
    for c in &kept {
        plan.reclaimed.remove(c);
    }
    plan.reclaimed_logical_bytes -= repo
        .manifest
        .containers
        .iter()
        .filter(|c| kept.contains(&c.id))
        .map(|c| c.logical_bytes)
        .sum::<u64>();
    out.records = records;
    Ok(out)
}

/// Run `seq` ended: `done` at `committed`, or `failed` (nothing deleted).
pub(crate) fn finish(objects: &SealedStore, seq: u64, committed: Option<Generation>) -> Result<()> {
    let mut s = read_state(objects)?;
    let r = s.run(seq)?;
    match committed {
        Some(g) => {
            r.phase = Phase::Done;
            r.committed = Some(g);
        }
        None => {
            r.phase = Phase::Failed;
            r.reclaimed.clear();
            r.dead_filter = false;
        }
    }
    write_state(objects, &s)?;
    if committed.is_none() {
        // A failed run threatens nothing: no backup reads its filter.
        remove_dead_filter(objects, seq);
    }
    Ok(())
}

/// Delete the records listed at a cutoff whose writers hold no lock any
/// more (committed or gone: the next GC's mark sees what they committed).
pub(crate) fn remove_records(objects: &SealedStore, records: &[ObjectKey]) -> Result<()> {
    let live: HashSet<String> = crate::lock::shared_holders(&**objects.store())?
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    let mut any = false;
    for key in records {
        if record_token(key).is_some_and(|t| !live.contains(t)) {
            objects.delete(key)?;
            any = true;
        }
    }
    if any {
        objects.barrier()?;
    }
    Ok(())
}

/// A GC run between its steps ([`Writer::gc_begin`], [`Writer::gc_cutoff`],
/// [`Writer::gc_finish`]): what [`Writer::gc`] does in one go, in steps so
/// that tests can run backups in between.
pub struct OnlineGc {
    seq: u64,
    lock: Option<crate::lock::RepoLock>,
    plan: Option<GcPlan>,
    cut: Option<Cutoff>,
    before: Generation,
}

impl OnlineGc {
    /// The plan (mark and select) this run carries out.
    pub fn plan(&self) -> Option<&GcPlan> {
        self.plan.as_ref()
    }
    /// Dead copies resurrected at the cutoff (after [`Writer::gc_cutoff`]).
    pub fn resurrected(&self) -> u64 {
        self.cut.as_ref().map_or(0, |c| c.resurrected)
    }
}

/// Online GC, step 1: take the GC lock, announce a marking run, then mark
/// and select on the newest generation.
pub(crate) fn begin_run(cx: &mut Context, opts: &GcOptions) -> Result<OnlineGc> {
    cx.gc_begin(opts)
}

/// Step 2, the cutoff: announce the containers to reclaim, then resurrect
/// the dead copies concurrent backups recorded.
pub(crate) fn cutoff_run(cx: &mut Context, run: &mut OnlineGc) -> Result<()> {
    cx.gc_cutoff(run)
}

/// Step 3: sweep and commit (merging with what others published), record
/// the run as done, and delete the records of writers gone.
pub(crate) fn finish_run(cx: &mut Context, run: OnlineGc) -> Result<GcReport> {
    cx.gc_finish(run)
}

impl Context {
    fn gc_begin(&mut self, opts: &GcOptions) -> Result<OnlineGc> {
        let lock = crate::lock::RepoLock::acquire_gc(self.objects.store().clone(), "tessera gc")?;
        let newest = crate::context::read_newest(&self.objects)?;
        let seq = begin(&self.objects, &newest)?;
        let mut run = OnlineGc {
            seq,
            lock: Some(lock),
            plan: None,
            cut: None,
            before: self.manifest.generation,
        };
        // Planned on a generation read after the run was announced: a
        // backup that committed before is in the mark; one that commits
        // later keeps its records until this run is done.
        let fresh = match crate::context::read_newest(&self.objects) {
            Ok(m) if m.generation == self.manifest.generation => Ok(()),
            Ok(_) => self.reload(),
            Err(e) => Err(e),
        };
        let planned = fresh.and_then(|()| plan_gc(self, opts));
        match planned {
            Ok(p) => {
                run.plan = Some(p);
                Ok(run)
            }
            Err(e) => {
                finish(&self.objects, seq, None)?;
                Err(e)
            }
        }
    }

    fn gc_cutoff(&mut self, run: &mut OnlineGc) -> Result<()> {
        let plan = run
            .plan
            .as_mut()
            .ok_or_else(|| Error::invalid("GC run without a plan"))?;
        match cutoff(self, run.seq, plan) {
            Ok(c) => {
                run.cut = Some(c);
                Ok(())
            }
            Err(e) => {
                finish(&self.objects, run.seq, None)?;
                Err(e)
            }
        }
    }

    fn gc_finish(&mut self, mut run: OnlineGc) -> Result<GcReport> {
        let plan = run
            .plan
            .take()
            .ok_or_else(|| Error::invalid("GC run without a plan"))?;
        let cut = run.cut.take().unwrap_or_default();
        let planned = plan.generation;
        let result = gc_with(self, plan);
        let committed = match &result {
            Ok(_) if self.manifest.generation == planned => None,
            _ if self.manifest.generation != run.before && self.manifest.generation != planned => {
                Some(self.manifest.generation)
            }
            _ => None,
        };
        finish(&self.objects, run.seq, committed)?;
        let mut r = result?;
        r.resurrections = cut.resurrected;
        r.resurrection_records = cut.records.len() as u64;
        remove_records(&self.objects, &cut.records)?;
        drop(run.lock.take());
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_damage() {
        let refs = vec![
            Ref {
                kind: ChunkKind::Data,
                fp: Fingerprint([7; FP_LEN]),
                copy: 3,
                len: 4096,
                container: ContainerId(0x1_0000_0005),
            },
            Ref {
                kind: ChunkKind::Recipe,
                fp: Fingerprint([9; FP_LEN]),
                copy: 0,
                len: 77,
                container: ContainerId(2),
            },
        ];
        let b = encode_record(refs.iter());
        assert_eq!(decode_record(&b, "r").unwrap(), refs);
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert!(decode_record(&bad, "r").is_err(), "flip at {i}");
        }
        assert!(decode_record(&b[..b.len() - 1], "r").is_err());
    }

    #[test]
    fn threat_depends_on_phase_and_starting_generation() {
        let c = ContainerId(5);
        let mut s = GcState {
            next_seq: 1,
            runs: vec![GcRun {
                seq: 0,
                phase: Phase::Marking,
                reclaimed: vec![],
                committed: None,
                dead_filter: false,
            }],
            pruned_through: Generation(0),
        };
        assert!(
            !s.threatens(Generation(3), c),
            "marking: it will see the record"
        );
        s.runs[0].phase = Phase::Sweeping;
        s.runs[0].reclaimed = vec![ContainerId(1), c];
        assert!(s.threatens(Generation(3), c), "past its cutoff");
        assert!(!s.threatens(Generation(3), ContainerId(6)), "not reclaimed");
        s.runs[0].phase = Phase::Done;
        s.runs[0].committed = Some(Generation(4));
        assert!(
            s.threatens(Generation(3), c),
            "committed after the backup began"
        );
        assert!(!s.threatens(Generation(4), c), "the backup began after it");
        s.runs[0].phase = Phase::Failed;
        assert!(!s.threatens(Generation(3), c), "deleted nothing");
        s.pruned_through = Generation(9);
        assert!(
            s.threatens(Generation(8), ContainerId(77)),
            "forgotten runs"
        );
    }

    #[test]
    fn dead_filters_round_trip_and_reject_damage() {
        let mut b = crate::gc::bloom::Bloom::new(50, DEAD_FP_RATE);
        let fps: Vec<Fingerprint> = (0..50u8).map(|i| Fingerprint([i; FP_LEN])).collect();
        for fp in &fps {
            b.insert(fp);
        }
        let enc = DeadFilter(b).encode();
        let f = DeadFilter::decode(&enc, "d").unwrap();
        assert!(fps.iter().all(|fp| f.may_drop(fp)), "no false negative");
        let misses = (100..=255u8)
            .filter(|&i| f.may_drop(&Fingerprint([i; FP_LEN])))
            .count();
        assert!(misses < 20, "{misses} false positives of 156");
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 1;
            assert!(DeadFilter::decode(&bad, "d").is_err(), "flip at {i}");
        }
        assert!(DeadFilter::decode(&enc[..enc.len() - 8], "d").is_err());
    }

    #[test]
    fn a_state_without_dead_filters_still_reads() {
        let old = r#"{"next_seq":1,"runs":[{"seq":0,"phase":"sweeping","reclaimed":[5]}],"pruned_through":0}"#;
        let s: GcState = serde_json::from_str(old).unwrap();
        assert!(!s.runs[0].dead_filter);
        assert!(s.threatens(Generation(0), ContainerId(5)));
    }

    #[test]
    fn record_names_carry_the_writer_token() {
        let k = ObjectKey::Gc("resurrect/123-4-5678-00000002".into());
        assert_eq!(record_token(&k), Some("123-4-5678"));
        assert_eq!(record_token(&ObjectKey::Gc("state".into())), None);
    }
}
