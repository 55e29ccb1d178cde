//! FGC's austere reference graph (`fgc-focused-gc.md`, §III-B and
//! §IV-B/C; the focused mark that walks it is `gc/mark/focused.rs`): which backups a
//! backup deduplicated against, so GC can walk only the deleted backups and
//! their correlative backups.
//!
//! Vertices are *virtual files* ([`VFile`]): a backup cut into parts of at
//! most `granularity` bytes (§IV-F: one shared chunk pulls one part into the
//! mark, not a whole large backup); granularity 0 keeps whole backups.
//! Recipe chunks always belong to the whole backup ([`WHOLE`]): walking any
//! of a backup's data reads the recipe chunks above it anyway.
//!
//! Each chunk copy has a **base**: the first still-live virtual file that
//! referenced it. A virtual file that deduplicates against a copy whose
//! base is another backup's adds the edge *(leaf, base)*. Invariant: every
//! live virtual file referencing a copy is its base or has an edge to it,
//! so a copy a deleted backup references is live iff a live neighbour of
//! the deleted backups references it (see `gc/mark/focused.rs`).
//!
//! Liveness is per copy (as every mark's, see `gc/mark`): a recipe leaf
//! names the copy `(fingerprint, copy number)` it reads, so the graph keys
//! its bases by copy. Copy numbers survive GC (the sweep only repoints
//! index entries), so a base stays valid across GCs.
//!
//! Not on the MFDedup layout: it has no mark-and-sweep GC (forget deletes
//! volumes itself), so there is nothing for the graph to focus; the face
//! refuses to rebuild it there, so it is never recorded.
//!
//! Persisted as segments (`refgraph/<n>`, listed in the manifest's
//! [`RefGraphState`]): each backup appends one with its new bases and
//! edges; a focused GC writes the whole updated graph as one.

use crate::backend::ObjectKey;
use crate::catalog::{BackupEntry, BackupId, Manifest};
use crate::container::ChunkKind;
use crate::context::Context;
use crate::error::{Error, ObjectRef, Result};
use crate::fingerprint::{Fingerprint, FpBuildHasher, FP_LEN};
use crate::index::CopyNo;
use std::collections::BTreeSet;

/// The part number of a backup's recipe chunks: the whole backup.
pub const WHOLE: u32 = u32::MAX;

/// A virtual file: a backup, or one `granularity`-sized part of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VFile {
    pub backup: BackupId,
    pub part: u32,
}

/// Where the graph is, as the manifest records it. No state: the
/// repository does not record the graph (`tessera check --rebuild-refgraph`
/// or the first focused GC starts it).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RefGraphState {
    /// Bytes per virtual file; 0: whole backups.
    pub granularity: u64,
    /// Segment keys, oldest first (later segments override bases).
    pub segments: Vec<ObjectKey>,
    /// Number of the next segment.
    pub next_segment: u64,
}

impl crate::catalog::Section for RefGraphState {
    const NAME: &'static str = "refgraph";
}

impl RefGraphState {
    /// The manifest's graph state, if the repository records the graph.
    pub fn of(m: &Manifest) -> Result<Option<RefGraphState>> {
        m.sections.get()
    }
    /// Record `state` in `m` (`None`: stop recording).
    pub fn set(m: &mut Manifest, state: Option<&RefGraphState>) {
        m.sections.put(state)
    }
    /// The objects the manifest's graph state lists.
    pub fn listed_keys(m: &Manifest) -> Vec<ObjectKey> {
        Self::of(m)
            .ok()
            .flatten()
            .map(|s| s.segments)
            .unwrap_or_default()
    }
}

/// The graph as of the segments listed, kept in the context's memo between
/// backups so each does not load it again (only used while the manifest
/// lists exactly those segments).
pub(crate) struct Kept(Vec<ObjectKey>, RefGraph);

/// A copy of the graph this process keeps for the manifest's current
/// segments, if it keeps one (a focused mark then need not read them).
pub(crate) fn kept_graph(cx: &Context) -> Option<RefGraph> {
    let state = RefGraphState::of(&cx.manifest).ok()??;
    match cx.memo.get::<Kept>() {
        Some(Kept(segments, g))
            if *segments == state.segments && g.granularity == state.granularity =>
        {
            Some(g.clone())
        }
        _ => None,
    }
}

/// Keep `kept` (or forget the kept graph) for the next backup.
pub(crate) fn keep(cx: &mut Context, kept: Option<Kept>) {
    match kept {
        Some(k) => cx.memo.put(k),
        None => drop(cx.memo.take::<Kept>()),
    }
}

/// Bases keyed by chunk copy (recipe chunks: always copy 0).
pub type CopyMap<V> = std::collections::HashMap<(Fingerprint, CopyNo), V, FpBuildHasher>;

/// Segments appended before the next one rewrites the graph whole.
const COMPACT_AFTER: usize = 32;

/// The graph (or one segment of it: a delta).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefGraph {
    pub granularity: u64,
    /// Base of each data chunk copy and of each recipe chunk.
    pub data_bases: CopyMap<VFile>,
    pub recipe_bases: CopyMap<VFile>,
    /// (leaf, base) pairs, never within one backup.
    pub edges: BTreeSet<(VFile, VFile)>,
}

const MAGIC: &[u8; 8] = b"TSRAREFG";
const VERSION: u32 = 1;

impl RefGraph {
    pub fn new(granularity: u64) -> Self {
        RefGraph {
            granularity,
            ..Default::default()
        }
    }

    /// The virtual file of a chunk of `kind` at `offset` in `backup`.
    pub fn vfile(&self, backup: BackupId, kind: ChunkKind, offset: u64) -> VFile {
        let part = match kind {
            ChunkKind::Recipe => WHOLE,
            ChunkKind::Data if self.granularity == 0 => 0,
            ChunkKind::Data => (offset / self.granularity).min(WHOLE as u64 - 1) as u32,
        };
        VFile { backup, part }
    }

    pub fn bases(&self, kind: ChunkKind) -> &CopyMap<VFile> {
        match kind {
            ChunkKind::Data => &self.data_bases,
            ChunkKind::Recipe => &self.recipe_bases,
        }
    }

    pub fn bases_mut(&mut self, kind: ChunkKind) -> &mut CopyMap<VFile> {
        match kind {
            ChunkKind::Data => &mut self.data_bases,
            ChunkKind::Recipe => &mut self.recipe_bases,
        }
    }

    /// Apply a later segment: its bases override, its edges add.
    pub fn merge(&mut self, delta: RefGraph) {
        self.data_bases.extend(delta.data_bases);
        self.recipe_bases.extend(delta.recipe_bases);
        self.edges.extend(delta.edges);
    }

    /// Record one occurrence of copy `copy` of a chunk in `here`
    /// (CorrRecorder's rule): a copy the store already held and whose base
    /// is another backup's adds the edge to that base; a copy without a base
    /// gets `here`. `seen` holds the bases this commit set so far: this
    /// backup's, or an earlier member's of an interleaved group (then the
    /// edge goes to that member).
    fn record(
        &self,
        seen: &mut RefGraph,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: CopyNo,
        held: bool,
        here: VFile,
    ) {
        let key = (*fp, copy);
        if let Some(base) = seen.bases(kind).get(&key) {
            if base.backup != here.backup {
                let base = *base;
                seen.edges.insert((here, base));
            }
            return;
        }
        match self.bases(kind).get(&key).filter(|_| held) {
            Some(base) if base.backup != here.backup => {
                seen.edges.insert((here, *base));
            }
            Some(_) => {}
            None => {
                seen.bases_mut(kind).insert(key, here);
            }
        }
    }

    /// Approximate heap bytes.
    pub fn memory_bytes(&self) -> usize {
        self.base_map_bytes() + self.edges_bytes()
    }

    /// Approximate heap bytes of the bases (one per stored chunk copy:
    /// what the paper keeps in the fingerprint index).
    pub fn base_map_bytes(&self) -> usize {
        (self.data_bases.capacity() + self.recipe_bases.capacity()) * (FP_LEN + 18)
    }

    /// Approximate heap bytes of the edges (the paper's austere graph).
    pub fn edges_bytes(&self) -> usize {
        self.edges.len() * 48
    }

    pub fn encode(&self) -> Vec<u8> {
        let n = self.data_bases.len() + self.recipe_bases.len();
        let mut out = Vec::with_capacity(40 + n * (FP_LEN + 15) + self.edges.len() * 24 + 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.granularity.to_le_bytes());
        out.extend_from_slice(&(n as u64).to_le_bytes());
        out.extend_from_slice(&(self.edges.len() as u64).to_le_bytes());
        let vf = |out: &mut Vec<u8>, v: &VFile| {
            out.extend_from_slice(&v.backup.0.to_le_bytes());
            out.extend_from_slice(&v.part.to_le_bytes());
        };
        // Sorted, so equal graphs encode equally.
        for (kind, map) in [
            (ChunkKind::Data, &self.data_bases),
            (ChunkKind::Recipe, &self.recipe_bases),
        ] {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort();
            for ((fp, copy), v) in entries {
                out.push(matches!(kind, ChunkKind::Recipe) as u8);
                out.extend_from_slice(&fp.0);
                out.extend_from_slice(&copy.to_le_bytes());
                vf(&mut out, v);
            }
        }
        for (leaf, base) in &self.edges {
            vf(&mut out, leaf);
            vf(&mut out, base);
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8], name: ObjectRef) -> Result<RefGraph> {
        let bad =
            |why: &str| Error::corrupt(name.clone(), format!("reference graph segment: {why}"));
        if bytes.len() < 44 || &bytes[..8] != MAGIC {
            return Err(bad("not a reference graph segment"));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        if xxhash_rust::xxh3::xxh3_64(body).to_le_bytes() != sum {
            return Err(bad("checksum mismatch"));
        }
        let u32_at = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().unwrap());
        if u32_at(8) != VERSION {
            return Err(bad(&format!(
                "version {} (this build reads {VERSION})",
                u32_at(8)
            )));
        }
        let granularity = u64_at(12);
        let (n, e) = (u64_at(20) as usize, u64_at(28) as usize);
        let entry = 1 + FP_LEN + 2 + 12;
        if n.checked_mul(entry)
            .and_then(|a| e.checked_mul(24).and_then(|b| a.checked_add(b)))
            .and_then(|a| a.checked_add(36))
            != Some(body.len())
        {
            return Err(bad("length does not match its counts"));
        }
        let vf = |i: usize| VFile {
            backup: BackupId(u64_at(i)),
            part: u32_at(i + 8),
        };
        let mut g = RefGraph::new(granularity);
        let mut at = 36;
        for _ in 0..n {
            let kind = match body[at] {
                0 => ChunkKind::Data,
                1 => ChunkKind::Recipe,
                _ => return Err(bad("unknown chunk kind")),
            };
            let mut fp = [0u8; FP_LEN];
            fp.copy_from_slice(&body[at + 1..at + 1 + FP_LEN]);
            let copy = u16::from_le_bytes(body[at + 1 + FP_LEN..][..2].try_into().unwrap());
            if kind == ChunkKind::Recipe && copy != 0 {
                return Err(bad("a recipe chunk with a copy other than 0"));
            }
            g.bases_mut(kind)
                .insert((Fingerprint(fp), copy), vf(at + 3 + FP_LEN));
            at += entry;
        }
        for _ in 0..e {
            g.edges.insert((vf(at), vf(at + 12)));
            at += 24;
        }
        Ok(g)
    }

    /// The repository's graph, if it records one.
    pub fn load(repo: &Context) -> Result<Option<RefGraph>> {
        let Some(state) = RefGraphState::of(&repo.manifest)? else {
            return Ok(None);
        };
        let mut g = RefGraph::new(state.granularity);
        for key in &state.segments {
            let name = ObjectRef::Object(key.clone());
            let bytes = repo.objects.get(key).map_err(|e| match e {
                Error::MissingObject(_) => e.about(name.clone()),
                e => e,
            })?;
            let seg = Self::decode(&bytes, name)?;
            if seg.granularity != state.granularity {
                return Err(Error::corrupt(
                    ObjectRef::Object(key.clone()),
                    "reference graph segment of another granularity",
                ));
            }
            g.merge(seg);
        }
        Ok(Some(g))
    }

    /// Rebuild from the recipes of the retained backups, oldest first, as
    /// CorrRecorder would have recorded them (reads every recipe: the cost
    /// of a full mark).
    pub fn rebuild(repo: &Context, granularity: u64) -> Result<RefGraph> {
        let mut g = RefGraph::new(granularity);
        let mut backups: Vec<&BackupEntry> = repo.manifest.backups.iter().collect();
        backups.sort_by_key(|b| b.id);
        let mut reader = repo.recipe_reader(16)?;
        for b in backups {
            let mut seen = RefGraph::new(granularity);
            let mut visit = |kind: ChunkKind, fp: &Fingerprint, copy: CopyNo, offset: u64| {
                let here = g.vfile(b.id, kind, offset);
                g.record(&mut seen, kind, fp, copy, true, here);
            };
            walk_backup(
                &mut reader,
                b,
                &|_, _| true,
                &mut |kind, fp, copy, off, _| {
                    visit(kind, fp, copy, off);
                    Ok(())
                },
            )
            .map_err(|e| e.in_backup(b.id, None))?;
            g.merge(seen);
        }
        Ok(g)
    }
}

/// What [`walk_backup`] calls per chunk: `(kind, fp, copy, offset, size)`.
pub(crate) type Visit<'a> = dyn FnMut(ChunkKind, &Fingerprint, CopyNo, u64, u64) -> Result<()> + 'a;

/// Walk one backup's recipe tree depth-first with logical offsets, calling
/// `visit(kind, fp, copy, offset, size)` for each recipe chunk (its first
/// byte's offset; copy 0) and each data chunk (the copy its leaf names),
/// and descending only into subtrees for which `wanted(start, end)` holds.
/// Every occurrence is visited.
pub(crate) fn walk_backup(
    reader: &mut crate::recipe::RecipeReader<'_>,
    b: &BackupEntry,
    wanted: &dyn Fn(u64, u64) -> bool,
    visit: &mut Visit<'_>,
) -> Result<()> {
    let root = b.root_fp()?;
    walk_node(reader, &root, b.root_level, 0, wanted, visit)
}

fn walk_node(
    reader: &mut crate::recipe::RecipeReader<'_>,
    fp: &Fingerprint,
    level: u8,
    offset: u64,
    wanted: &dyn Fn(u64, u64) -> bool,
    visit: &mut Visit<'_>,
) -> Result<()> {
    let (chunk, _) = reader.load(fp)?;
    if chunk.level != level {
        return Err(Error::corrupt(
            ObjectRef::RecipeChunk(*fp),
            format!("level {} where {level} was expected", chunk.level),
        ));
    }
    visit(ChunkKind::Recipe, fp, 0, offset, chunk.logical_size())?;
    let mut at = offset;
    for e in &chunk.entries {
        if wanted(at, at + e.size) {
            if level == 1 {
                visit(ChunkKind::Data, &e.fp, e.copy, at, e.size)?;
            } else {
                walk_node(reader, &e.fp, level - 1, at, wanted, visit)?;
            }
        }
        at += e.size;
    }
    Ok(())
}

/// CorrRecorder: records one backup's bases and edges as ingest finds its
/// chunks new or duplicate.
pub(crate) struct CorrRecorder {
    graph: RefGraph,
    /// The backup whose chunks it sees, and the first of its group.
    backup: BackupId,
    first: BackupId,
    seen: RefGraph,
}

impl CorrRecorder {
    /// A recorder for the next backup, if the repository records the
    /// graph. A graph that cannot be read is dropped (the next focused GC
    /// rebuilds it) rather than failing the backup.
    pub(crate) fn start(writer: &mut Context) -> Option<CorrRecorder> {
        let (segments, granularity) = {
            let state = RefGraphState::of(&writer.manifest).ok()??;
            (state.segments, state.granularity)
        };
        let graph = match writer.memo.take::<Kept>() {
            Some(Kept(kept, g)) if kept == segments && g.granularity == granularity => g,
            _ => RefGraph::load(writer).ok()??,
        };
        Some(CorrRecorder {
            graph,
            backup: writer.manifest.next_backup_id,
            first: writer.manifest.next_backup_id,
            seen: RefGraph::new(granularity),
        })
    }

    /// The chunks that follow are member `m`'s of an interleaved group
    /// (published in member order, so its id is the group's first plus
    /// `m`); a single backup is member 0.
    pub(crate) fn member(&mut self, m: usize) {
        self.backup = BackupId(self.first.0 + m as u64);
    }

    /// One chunk of the backup, referencing copy `copy`: `held` if the
    /// store already had it, at `offset` (data) in the backup's stream.
    #[inline]
    pub(crate) fn saw(
        &mut self,
        kind: ChunkKind,
        fp: &Fingerprint,
        copy: CopyNo,
        held: bool,
        offset: u64,
    ) {
        let here = self.graph.vfile(self.backup, kind, offset);
        self.graph
            .record(&mut self.seen, kind, fp, copy, held, here);
    }
}

/// What a backup's commit did to the graph: the segments it supersedes,
/// and the graph as of `next`'s segments (to keep for the next backup).
pub(crate) type Committed = (Vec<ObjectKey>, Option<Kept>);

/// At a backup's commit: append the recorder's segment to `next`, or drop
/// the graph if this backup was not recorded (rewriting),
/// since it would miss edges.
pub(crate) fn commit_backup(
    writer: &Context,
    next: &mut Manifest,
    recorder: Option<CorrRecorder>,
) -> Result<Committed> {
    let Some(mut state) = RefGraphState::of(next)? else {
        return Ok((Vec::new(), None));
    };
    let Some(r) = recorder else {
        RefGraphState::set(next, None);
        return Ok((state.segments, None));
    };
    let mut graph = r.graph;
    if r.seen.data_bases.is_empty() && r.seen.recipe_bases.is_empty() && r.seen.edges.is_empty() {
        return Ok((Vec::new(), Some(Kept(state.segments, graph))));
    }
    let superseded = if state.segments.len() >= COMPACT_AFTER {
        graph.merge(r.seen);
        stage(writer, &mut state, &graph)?
    } else {
        let key = next_key(writer, &mut state);
        writer.objects.put(&key, r.seen.encode())?;
        state.segments.push(key);
        graph.merge(r.seen);
        Vec::new()
    };
    RefGraphState::set(next, Some(&state));
    Ok((superseded, Some(Kept(state.segments, graph))))
}

/// The key of a new segment: a writer that joined others takes it from its
/// reserved segment range (the counter in the manifest is shared: two
/// writers on one generation would otherwise both write `refgraph/<n>`,
/// one over the other); a writer alone takes the manifest's counter.
fn next_key(writer: &Context, state: &mut RefGraphState) -> ObjectKey {
    let n = match &writer.reserved {
        Some(r) => {
            let n = r.segment.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Past the whole reserved range, so a writer allocating from
            // the counter never enters it (as for index segments).
            state.next_segment = state
                .next_segment
                .max(n + 1 + crate::context::RESERVE_SEGMENTS);
            n
        }
        None => state.next_segment,
    };
    state.next_segment = state.next_segment.max(n + 1);
    ObjectKey::RefGraph(n)
}

/// Write `graph` whole as the only segment of `state`; returns the
/// segments it supersedes.
pub(crate) fn stage(
    writer: &Context,
    state: &mut RefGraphState,
    graph: &RefGraph,
) -> Result<Vec<ObjectKey>> {
    let key = next_key(writer, state);
    state.granularity = graph.granularity;
    writer.objects.put(&key, graph.encode())?;
    Ok(std::mem::replace(&mut state.segments, vec![key]))
}

/// The next generation after rebuilding the graph from the recipes with
/// virtual files of `granularity` bytes (0: whole backups), recording it
/// from then on, with the segments it supersedes (the face publishes it:
/// `Writer::rebuild_refgraph`).
pub(crate) fn rebuild(
    cx: &Context,
    granularity: u64,
) -> Result<(RefGraph, Manifest, Vec<ObjectKey>)> {
    let graph = RefGraph::rebuild(cx, granularity)?;
    let mut next = cx.manifest.clone();
    let mut state = RefGraphState::of(&next)?.unwrap_or_default();
    let superseded = stage(cx, &mut state, &graph)?;
    RefGraphState::set(&mut next, Some(&state));
    Ok((graph, next, superseded))
}

/// Merging the graph when a publish has to merge with another writer's
/// generation (`publish::publish_merged`): made before the compare-and-swap
/// loop, asked at each merge, finished after it.
///
/// One side's change to the graph is a *delta* appended to the base
/// generation's segments (a backup: new bases and edges); the other side's
/// graph is taken whole (the newest generation's, or a focused GC's
/// rewritten one), and the delta is grafted onto it ([`graft`]). Where
/// neither side only appended (both rewrote the graph, e.g. a compaction
/// meeting a GC), the granularities differ, or a segment cannot be read,
/// the graph is dropped as before (the next focused GC rebuilds it from
/// the recipes: slower, never wrong).
pub(crate) struct GraphMerge {
    base: Option<RefGraphState>,
    ours: Option<RefGraphState>,
    /// The writer's graph as of `ours`' segments, if it kept it in memory.
    mem: Option<Kept>,
    objects: crate::seal::SealedStore,
    /// Joining writers: segment ids taken from the reserved range up front
    /// (the loop cannot reach the writer); alone: the counter.
    reserved: Vec<u64>,
    /// Segments written by merge attempts (the last one is listed if the
    /// publish merged), and our own delta segments a merge left unlisted.
    written: Vec<ObjectKey>,
    unlisted: Vec<ObjectKey>,
    /// Whether the graph was dropped after all (for tests and reports).
    pub(crate) dropped: bool,
}

/// Merge attempts a joining writer reserves segment ids for; a publish
/// that has to merge more often than this drops the graph.
const MERGE_KEYS: u64 = 4;

impl GraphMerge {
    pub(crate) fn new(writer: &mut Context, next: &Manifest) -> Result<GraphMerge> {
        let ours = RefGraphState::of(next)?;
        let reserved = match &writer.reserved {
            Some(r) if ours.is_some() => {
                let n = r
                    .segment
                    .fetch_add(MERGE_KEYS, std::sync::atomic::Ordering::Relaxed);
                (n..n + MERGE_KEYS).collect()
            }
            _ => Vec::new(),
        };
        Ok(GraphMerge {
            base: RefGraphState::of(&writer.manifest)?,
            ours,
            mem: writer.memo.take::<Kept>(),
            objects: writer.objects.clone(),
            reserved,
            written: Vec::new(),
            unlisted: Vec::new(),
            dropped: false,
        })
    }

    /// Set `m.refgraph` (`m`: our change applied to `newest`; our added
    /// backups renumbered by `remap`).
    pub(crate) fn merge(
        &mut self,
        newest: &Manifest,
        m: &mut Manifest,
        remap: &std::collections::HashMap<BackupId, BackupId>,
    ) -> Result<()> {
        self.unlisted.clear();
        let theirs = RefGraphState::of(newest)?;
        // A segment that cannot be read: drop the graph (never wrong).
        let merged = self.merged(theirs, remap).unwrap_or_default();
        self.dropped = merged.is_none() && self.ours.is_some();
        RefGraphState::set(m, merged.as_ref());
        Ok(())
    }

    fn merged(
        &mut self,
        theirs: Option<RefGraphState>,
        remap: &std::collections::HashMap<BackupId, BackupId>,
    ) -> Result<Option<RefGraphState>> {
        let (Some(base), Some(ours), Some(theirs)) = (&self.base, &self.ours, &theirs) else {
            return Ok(None);
        };
        let (base, ours, theirs) = (base.clone(), ours.clone(), theirs.clone());
        if ours.granularity != theirs.granularity {
            return Ok(None);
        }
        let extends = |st: &RefGraphState| {
            st.granularity == base.granularity && st.segments.starts_with(&base.segments)
        };
        if ours.segments == base.segments {
            // We did not touch the graph (a forget): theirs stands.
            return Ok(Some(theirs));
        }
        if theirs.segments == base.segments && remap.is_empty() {
            // They did not touch it: ours stands.
            let mut st = ours;
            st.next_segment = st.next_segment.max(theirs.next_segment);
            return Ok(Some(st));
        }
        let rename = |v: VFile| VFile {
            backup: remap.get(&v.backup).copied().unwrap_or(v.backup),
            part: v.part,
        };
        let (mut state, start, delta, reference) = if extends(&ours) {
            // Our backups' delta onto the newest graph.
            let extra = &ours.segments[base.segments.len()..];
            let delta = self.load(extra, ours.granularity)?.renamed(&rename);
            let reference = match &self.mem {
                Some(Kept(keys, g)) if *keys == ours.segments => g.clone(),
                _ => self.load(&ours.segments, ours.granularity)?,
            }
            .renamed(&rename);
            let start = self.load(&theirs.segments, theirs.granularity)?;
            self.unlisted = extra.to_vec();
            let mut st = theirs.clone();
            st.next_segment = st.next_segment.max(ours.next_segment);
            (st, start, delta, reference)
        } else if extends(&theirs) && remap.is_empty() {
            // Our rewritten graph (a focused GC's) plus their backups' delta.
            let extra = &theirs.segments[base.segments.len()..];
            let delta = self.load(extra, theirs.granularity)?;
            let reference = self.load(&theirs.segments, theirs.granularity)?;
            let start = self.load(&ours.segments, ours.granularity)?;
            let mut st = ours.clone();
            st.next_segment = st.next_segment.max(theirs.next_segment);
            (st, start, delta, reference)
        } else {
            return Ok(None);
        };
        let grafted = graft(&start, &delta, &reference);
        let n = if self.reserved.is_empty() {
            state.next_segment
        } else {
            self.reserved.remove(0)
        };
        state.next_segment = state.next_segment.max(n + 1);
        let key = ObjectKey::RefGraph(n);
        self.objects.put(&key, grafted.encode())?;
        self.written.push(key.clone());
        state.segments.push(key);
        Ok(Some(state))
    }

    fn load(&self, keys: &[ObjectKey], granularity: u64) -> Result<RefGraph> {
        let mut g = RefGraph::new(granularity);
        for key in keys {
            let name = ObjectRef::Object(key.clone());
            let seg = RefGraph::decode(&self.objects.get(key)?, name)?;
            if seg.granularity != granularity {
                return Err(Error::corrupt(
                    ObjectRef::Object(key.clone()),
                    "reference graph segment of another granularity",
                ));
            }
            g.merge(seg);
        }
        Ok(g)
    }

    /// After the loop: our delta segments the merged generation does not
    /// list, and segments of earlier merge attempts, are removed (best
    /// effort: no generation lists them); the writer's in-memory graph is
    /// given back if no merge happened.
    pub(crate) fn finish(mut self, writer: &mut Context, published: Option<&Manifest>) {
        let listed: Vec<ObjectKey> = published
            .map(RefGraphState::listed_keys)
            .unwrap_or_default();
        if published.is_some() {
            for key in self.unlisted.iter().chain(&self.written) {
                if !listed.contains(key) {
                    let _ = self.objects.delete(key);
                }
            }
        }
        if !writer.memo.contains::<Kept>() {
            if let Some(k) = self.mem.take() {
                writer.memo.put(k);
            }
        }
    }
}

impl RefGraph {
    /// The graph with every vertex renamed by `f`.
    fn renamed(self, f: &dyn Fn(VFile) -> VFile) -> RefGraph {
        RefGraph {
            granularity: self.granularity,
            data_bases: self
                .data_bases
                .into_iter()
                .map(|(k, v)| (k, f(v)))
                .collect(),
            recipe_bases: self
                .recipe_bases
                .into_iter()
                .map(|(k, v)| (k, f(v)))
                .collect(),
            edges: self.edges.into_iter().map(|(l, b)| (f(l), f(b))).collect(),
        }
    }
}

/// The additions that graft `delta` (one side's appended segments) onto
/// `start` (the other side's whole graph); `reference` is the delta's side
/// as its recorder saw it (base generation plus delta). Why the result
/// never misses an edge a live chunk needs — the invariant of
/// [`crate::fgc`]: every retained virtual file `w` referencing a copy
/// is in its base's backup or has an edge to its base:
/// - `w` on `start`'s side: `start` keeps it, and the graft never changes
///   a base `start` has (it only adds bases `start` lacks, and edges).
/// - `w` in the delta, the copy new to it (a base in the delta): it stays
///   the base if `start` has none; else the other side stored or based
///   the copy too, and `w` gets an edge to `start`'s base.
/// - `w` in the delta, the copy held with base `b0` (the delta's edge
///   `(w, b0)`, kept): if `start` still bases the copy on `b0`, done; if
///   not — a concurrent focused GC deleted `b0` and re-based the copy
///   (edge to the new base) or found no retained referencer (then `w`
///   becomes its base: `w` may be its only referencer, a resurrected
///   copy), or a rebuild chose another base — every leaf of `b0` in the
///   delta gets the edge to the new base, or becomes the base. The edges
///   carry no chunk, so this covers each copy `reference` bases on `b0`:
///   it may add edges and bases a chunk did not need, which only makes a
///   focused mark walk more (never judge a live copy dead).
pub(crate) fn graft(start: &RefGraph, delta: &RefGraph, reference: &RefGraph) -> RefGraph {
    let mut out = RefGraph::new(start.granularity);
    for kind in [ChunkKind::Data, ChunkKind::Recipe] {
        for (k, v) in delta.bases(kind) {
            match start.bases(kind).get(k).or(out.bases(kind).get(k)) {
                Some(b) if b.backup == v.backup => {}
                Some(b) => {
                    out.edges.insert((*v, *b));
                }
                None => {
                    out.bases_mut(kind).insert(*k, *v);
                }
            }
        }
    }
    let mut leaves: std::collections::HashMap<VFile, Vec<VFile>> = Default::default();
    for (leaf, base) in &delta.edges {
        out.edges.insert((*leaf, *base));
        leaves.entry(*base).or_default().push(*leaf);
    }
    for kind in [ChunkKind::Data, ChunkKind::Recipe] {
        for (k, b0) in reference.bases(kind) {
            let Some(ls) = leaves.get(b0) else { continue };
            let mut now = start.bases(kind).get(k).or(out.bases(kind).get(k)).copied();
            if now == Some(*b0) {
                continue;
            }
            for leaf in ls {
                match now {
                    Some(nb) if nb.backup == leaf.backup => {}
                    Some(nb) => {
                        out.edges.insert((*leaf, nb));
                    }
                    None => {
                        out.bases_mut(kind).insert(*k, *leaf);
                        now = Some(*leaf);
                    }
                }
            }
        }
    }
    out
}

/// What the face says when asked to record the graph on a layout without
/// mark-and-sweep GC (MFDedup): there is nothing for it to focus.
pub(crate) fn no_gc_to_focus() -> Error {
    Error::invalid(
        "the reference graph (FGC) is not kept on the mfdedup layout: it has no mark-and-sweep GC to focus (forget deletes volumes itself)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_round_trip_and_damage_is_found() {
        let mut g = RefGraph::new(1 << 20);
        let v = |b, p| VFile {
            backup: BackupId(b),
            part: p,
        };
        g.data_bases.insert((Fingerprint([1; FP_LEN]), 0), v(1, 0));
        g.data_bases.insert((Fingerprint([2; FP_LEN]), 0), v(2, 3));
        g.data_bases.insert((Fingerprint([2; FP_LEN]), 7), v(4, 1));
        g.recipe_bases
            .insert((Fingerprint([3; FP_LEN]), 0), v(1, WHOLE));
        g.edges.insert((v(2, 3), v(1, 0)));
        g.edges.insert((v(3, WHOLE), v(1, WHOLE)));
        let bytes = g.encode();
        let name = ObjectRef::Object(ObjectKey::RefGraph(1));
        assert_eq!(RefGraph::decode(&bytes, name.clone()).unwrap(), g);
        for i in [0, 9, 30, 40, 36 + 1 + FP_LEN, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(RefGraph::decode(&bad, name.clone()).is_err(), "byte {i}");
        }
        assert!(RefGraph::decode(&bytes[..bytes.len() - 1], name).is_err());
    }

    #[test]
    fn recording_keeps_the_first_owner_as_base() {
        let g = RefGraph::new(100);
        let mut seen = RefGraph::new(100);
        let fp = Fingerprint([9; FP_LEN]);
        let here = g.vfile(BackupId(1), ChunkKind::Data, 250);
        assert_eq!(here.part, 2);
        g.record(&mut seen, ChunkKind::Data, &fp, 0, false, here);
        assert_eq!(seen.data_bases[&(fp, 0)], here);
        let mut g2 = g.clone();
        g2.merge(seen);
        let mut seen2 = RefGraph::new(100);
        let leaf = g2.vfile(BackupId(2), ChunkKind::Data, 10);
        g2.record(&mut seen2, ChunkKind::Data, &fp, 0, true, leaf);
        assert!(seen2.data_bases.is_empty());
        assert_eq!(seen2.edges.iter().next(), Some(&(leaf, here)));
        // Another copy of the same chunk is another vertex's: its first
        // referencer is its base, with no edge to copy 0's base.
        let mut seen4 = RefGraph::new(100);
        g2.record(&mut seen4, ChunkKind::Data, &fp, 1, true, leaf);
        assert_eq!(seen4.data_bases[&(fp, 1)], leaf);
        assert!(seen4.edges.is_empty());
        // A chunk the store no longer holds starts over with a new base.
        let mut seen3 = RefGraph::new(100);
        g2.record(&mut seen3, ChunkKind::Data, &fp, 0, false, leaf);
        assert_eq!(seen3.data_bases[&(fp, 0)], leaf);
    }
}
