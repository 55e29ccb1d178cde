//! The fingerprint index: exact and global, (fingerprint, copy) → container.
//!
//! A data chunk can be stored more than once: rewriting (Capping, SMR, NED,
//! HAR) writes a duplicate again next to its neighbours. Each stored copy of
//! a fingerprint has a *copy number* (0 for the first; each rewrite takes the
//! next), recipes name the copy each backup reads, and the index maps every
//! copy to the container holding it. So each backup restores from the copies
//! its own ingest chose (as Destor's recipes do), and GC moving a copy only
//! changes its index entry, never a recipe. Dedup references the newest copy.
//!
//! In memory while a repository is open. It is persisted as immutable *index
//! segments*: each mutation that writes containers writes one segment with the
//! entries it added, and the manifest lists the segments in order (a later
//! entry for the same fingerprint, copy and kind wins). Opening a repository
//! loads the segments instead of scanning every container.
//!
//! Data chunks and recipe chunks are kept in separate maps: they live in
//! separate containers and must never deduplicate against each other.
//! Recipe chunks have one copy (0).
//!
//! The data table is in memory ([`FpTable`], the default) or on disk
//! ([`disk::DiskTable`], `init --index disk`: sorted runs, a Bloom filter
//! summary and a locality-preserved cache of container lists); both give
//! the same answer to every query. The copy lists and the recipe table stay
//! in memory either way (few entries: only rewritten chunks, recipe chunks).
//!
//! Errors: the changes ([`Index::insert`], [`Index::remove`],
//! [`Index::remove_copy`], [`Index::set_data_state`]) and
//! [`Index::flush`] return a [`Result`]: an on-disk table may fail to
//! write its files, and says so in one line naming the file (in memory
//! they always succeed). The change is made even then, so the index
//! answers as if it succeeded (and an undo after it is exact); an on-disk
//! table that failed returns its first error from every later change
//! ([`disk`]). Lookups read memory and mapped files only, and cannot fail.
//!
//! Segment format: `b"TSRAINDX"` | version u32 | count u64 |
//! count × (fingerprint\[32\], container u64, kind u8, zero u8, copy u16,
//! 4 zero bytes) | XXH3-128 of all before.

use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap, FpSet, FP_LEN};
use crate::fptable::FpTable;
use crate::framing::checksum;
use crate::ids::{ChunkKind, ContainerId};
use std::collections::HashSet;

pub mod blocksum;
pub mod bloom;
pub mod disk;
pub mod kept_table;
pub mod recipes;
pub mod runset;

use disk::{DiskConfig, DiskCursor, DiskTable, SortedFile};
use recipes::Recipes;

/// How an opening came by its index (for tests and benchmarks): the kept
/// run set of [`runset`] (on disk) or the kept table of [`kept_table`] (in
/// memory) reused, segments applied, or rebuilt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskLoad {
    /// Segments the kept run set already held.
    pub kept_segments: usize,
    /// Segments applied on top of it (all of them on a rebuild).
    pub applied_segments: usize,
    /// Why the run set was rebuilt, if it was.
    pub rebuilt: Option<String>,
    /// Whether this opening saved the run set.
    pub saved: bool,
}

/// Where the data table lives, fixed at `init --index`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// Every entry in RAM ([`FpTable`]).
    #[default]
    Memory,
    /// Sorted runs on local disk, a Bloom filter and a locality cache in
    /// RAM ([`DiskTable`]).
    Disk,
}

impl IndexKind {
    pub fn is_memory(&self) -> bool {
        *self == IndexKind::Memory
    }
}

impl std::fmt::Display for IndexKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IndexKind::Memory => "memory",
            IndexKind::Disk => "disk",
        })
    }
}

impl std::str::FromStr for IndexKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "memory" => Ok(IndexKind::Memory),
            "disk" => Ok(IndexKind::Disk),
            _ => Err(format!("unknown index '{s}' (expected memory or disk)")),
        }
    }
}

/// The data table: in memory or on disk (one branch per call, predicted).
enum DataTable {
    Mem(FpTable),
    Disk(Box<DiskTable>),
}

macro_rules! both {
    ($t:expr, $x:ident => $e:expr) => {
        match $t {
            DataTable::Mem($x) => $e,
            DataTable::Disk($x) => $e,
        }
    };
}

impl DataTable {
    #[inline]
    fn get(&self, fp: &Fingerprint) -> Option<u64> {
        both!(self, t => t.get(fp))
    }
    #[inline]
    fn contains(&self, fp: &Fingerprint) -> bool {
        both!(self, t => t.contains(fp))
    }
    #[inline]
    fn insert(&mut self, fp: Fingerprint, v: u64) -> Result<()> {
        match self {
            DataTable::Mem(t) => {
                t.insert(fp, v);
                Ok(())
            }
            DataTable::Disk(t) => t.insert(fp, v).map(drop),
        }
    }
    fn remove(&mut self, fp: &Fingerprint) -> Result<()> {
        match self {
            DataTable::Mem(t) => {
                t.remove(fp);
                Ok(())
            }
            DataTable::Disk(t) => t.remove(fp).map(drop),
        }
    }
    fn len(&self) -> usize {
        both!(self, t => t.len())
    }
    fn is_empty(&self) -> bool {
        both!(self, t => t.is_empty())
    }
    fn memory_bytes(&self) -> usize {
        both!(self, t => t.memory_bytes())
    }
    #[inline]
    fn prefetch(&self, fp: &Fingerprint) {
        both!(self, t => t.prefetch(fp))
    }
    fn iter(&self) -> Box<dyn Iterator<Item = (Fingerprint, u64)> + '_> {
        match self {
            DataTable::Mem(t) => Box::new(t.iter()),
            DataTable::Disk(t) => Box::new(t.iter()),
        }
    }
}

const MAGIC: [u8; 8] = *b"TSRAINDX";
const VERSION: u32 = 1;
const ENTRY_LEN: usize = 48;

/// Which stored copy of a data chunk: 0 for the first, each rewrite of the
/// chunk the next number. Numbers are never reused while a copy with the
/// number may still be referenced (a new copy takes the highest + 1).
pub type CopyNo = u16;

/// One index entry: copy `copy` of chunk `fp` is in `container`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub fp: Fingerprint,
    pub container: ContainerId,
    pub kind: ChunkKind,
    /// Always 0 for recipe chunks.
    pub copy: CopyNo,
}

/// Copies a data chunk may have at once (as the SMR port keeps): beyond it
/// rewriting references the newest copy instead of storing another.
pub const MAX_COPIES: usize = 255;

/// The copies of a data chunk that has more than copy 0 alone: copy numbers
/// ascending, and the container of each (parallel arrays, so the containers
/// can be lent out as a slice).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Copies {
    nos: Vec<CopyNo>,
    at: Vec<ContainerId>,
}

/// The stored copies of a data chunk, newest (highest number) last.
#[derive(Clone, Copy, Debug)]
pub enum CopyList<'a> {
    None,
    One(CopyNo, ContainerId),
    Many(&'a [CopyNo], &'a [ContainerId]),
}

impl<'a> CopyList<'a> {
    pub fn len(&self) -> usize {
        match self {
            CopyList::None => 0,
            CopyList::One(..) => 1,
            CopyList::Many(n, _) => n.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// (copy, container), ascending copy numbers.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (CopyNo, ContainerId)> + 'a {
        let empty: (&[CopyNo], &[ContainerId]) = (&[], &[]);
        let (one, (nos, at)) = match *self {
            CopyList::None => (None, empty),
            CopyList::One(n, c) => (Some((n, c)), empty),
            CopyList::Many(n, c) => (None, (n, c)),
        };
        one.into_iter()
            .chain(nos.iter().copied().zip(at.iter().copied()))
    }
    /// The newest copy.
    pub fn newest(&self) -> Option<(CopyNo, ContainerId)> {
        self.iter().next_back()
    }
    /// The container of copy `copy`.
    pub fn get(&self, copy: CopyNo) -> Option<ContainerId> {
        self.iter().find(|&(n, _)| n == copy).map(|(_, c)| c)
    }
    /// The copies `container` holds.
    pub fn in_container(
        &self,
        container: ContainerId,
    ) -> impl DoubleEndedIterator<Item = CopyNo> + 'a {
        self.iter()
            .filter(move |&(_, c)| c == container)
            .map(|(n, _)| n)
    }
}

/// An exact set of chunk copies: copy 0 in a fingerprint set (most chunks
/// have only it), the others beside it.
#[derive(Clone, Debug, Default)]
pub struct CopySet {
    first: FpSet,
    other: HashSet<(Fingerprint, CopyNo)>,
}

impl CopySet {
    /// Insert; returns whether the copy was new.
    pub fn insert(&mut self, fp: Fingerprint, copy: CopyNo) -> bool {
        if copy == 0 {
            self.first.insert(fp)
        } else {
            self.other.insert((fp, copy))
        }
    }
    pub fn contains(&self, fp: &Fingerprint, copy: CopyNo) -> bool {
        if copy == 0 {
            self.first.contains(fp)
        } else {
            self.other.contains(&(*fp, copy))
        }
    }
    pub fn len(&self) -> usize {
        self.first.len() + self.other.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Estimated heap bytes.
    pub fn memory_bytes(&self) -> usize {
        self.first.capacity() * (FP_LEN + 1) + self.other.capacity() * (FP_LEN + 3)
    }
}

/// See [`Index::copy_census`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyCensus {
    /// Distinct data chunks.
    pub chunks: u64,
    /// Chunks stored in more than one container.
    pub redundant_chunks: u64,
    /// Copies in containers beyond each chunk's first.
    pub extra_copies: u64,
}

pub struct Index {
    /// Data fingerprint → container of its newest copy (what dedup refers
    /// to); for most chunks the only copy, copy 0.
    data: DataTable,
    recipe: Recipes,
    /// Every copy of a data chunk stored more than once, or whose only copy
    /// is not copy 0. May name containers GC deleted until GC's commit
    /// drops them; users filter by the live containers.
    copies: FpMap<Copies>,
    /// How an opening came by an on-disk index.
    disk_load: Option<DiskLoad>,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            // Logged: a backup mostly repeats an earlier stream in order.
            data: DataTable::Mem(FpTable::with_log()),
            recipe: Recipes::default(),
            copies: FpMap::default(),
            disk_load: None,
        }
    }
}

/// Where a stream of data lookups expects its next fingerprint in the
/// index's insertion log (see [`Index::contains_data_seq`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct DataCursor {
    log: usize,
    disk: DiskCursor,
}

impl Index {
    /// An empty index whose data table lives on disk, in a private
    /// directory under `base` (removed when the index is dropped).
    pub fn on_disk(base: &std::path::Path, cfg: DiskConfig) -> std::io::Result<Self> {
        Ok(Index {
            data: DataTable::Disk(Box::new(DiskTable::create(base, cfg)?)),
            ..Index::default()
        })
    }
    /// An index over a kept on-disk table, with its kept recipe file (if
    /// any) and the copy lists [`copy_entries`](Self::copy_entries) gave
    /// (a kept run set).
    pub fn from_disk(
        table: DiskTable,
        recipes: Option<SortedFile>,
        copies: Vec<IndexEntry>,
    ) -> Self {
        let mut index = Index {
            data: DataTable::Disk(Box::new(table)),
            recipe: recipes.map(Recipes::over).unwrap_or_default(),
            ..Index::default()
        };
        index.add_copies(copies);
        index
    }
    fn add_copies(&mut self, copies: Vec<IndexEntry>) {
        for e in copies.into_iter().filter(|e| e.kind == ChunkKind::Data) {
            let c = self.copies.entry(e.fp).or_default();
            let i = c.nos.partition_point(|&n| n < e.copy);
            c.nos.insert(i, e.copy);
            c.at.insert(i, e.container);
        }
    }
    /// An in-memory index over kept tables (the data and recipe tables a
    /// kept table file maps, see [`kept_table`]) and the copy lists that
    /// [`copy_entries`](Self::copy_entries) gave.
    pub(crate) fn from_tables(data: FpTable, recipe: FpTable, copies: Vec<IndexEntry>) -> Self {
        let mut index = Index {
            data: DataTable::Mem(data),
            recipe: Recipes::of(recipe),
            ..Index::default()
        };
        index.add_copies(copies);
        index
    }
    /// The in-memory tables (data, recipe) to keep (`None` on disk).
    pub(crate) fn tables(&self) -> Option<(&FpTable, &FpTable)> {
        match &self.data {
            DataTable::Mem(t) => Some((t, self.recipe.in_memory()?)),
            DataTable::Disk(_) => None,
        }
    }
    /// Every copy of each chunk with a copy list (few: rewritten chunks).
    pub fn copy_entries(&self) -> Vec<IndexEntry> {
        let mut out: Vec<IndexEntry> = self.listed_copies().collect();
        sort_entries(&mut out);
        out
    }
    /// Every copy of each chunk with a copy list, unsorted.
    fn listed_copies(&self) -> impl Iterator<Item = IndexEntry> + '_ {
        self.copies.iter().flat_map(|(fp, c)| {
            c.nos
                .iter()
                .zip(&c.at)
                .map(|(&copy, &container)| IndexEntry {
                    fp: *fp,
                    container,
                    kind: ChunkKind::Data,
                    copy,
                })
        })
    }
    /// The recipe table as one sorted file for a run set's save (`None`
    /// when empty; on an on-disk index only): its kept file if unchanged,
    /// else a new one in the disk table's private directory, which the
    /// table then stands on (see [`recipes::Recipes::for_save`]).
    pub fn recipes_for_save(
        &mut self,
        still_kept: impl Fn(&disk::KeptData) -> bool,
    ) -> Result<Option<disk::TableFile>> {
        match &mut self.data {
            DataTable::Mem(_) => Err(Error::invalid("only an on-disk index is kept")),
            DataTable::Disk(t) => self.recipe.for_save(t, still_kept),
        }
    }
    /// Note the descriptions a save gave the recipe file.
    pub fn recipes_kept_as(
        &self,
        names: &std::collections::HashMap<std::path::PathBuf, disk::KeptData>,
    ) {
        self.recipe.kept_as(names);
    }
    /// The on-disk table (`None` in memory).
    pub fn disk_table_mut(&mut self) -> Option<&mut DiskTable> {
        match &mut self.data {
            DataTable::Mem(_) => None,
            DataTable::Disk(t) => Some(t),
        }
    }
    /// How the opening came by this on-disk index: a kept run set reused,
    /// segments applied, rebuilt and why (`None` in memory).
    pub fn disk_load(&self) -> Option<&DiskLoad> {
        self.disk_load
            .as_ref()
            .filter(|_| self.kind() == IndexKind::Disk)
    }
    /// How the opening came by this index when it was kept across
    /// openings (a run set on disk, a table in memory); `None` otherwise.
    pub fn kept_load(&self) -> Option<&DiskLoad> {
        self.disk_load.as_ref()
    }
    pub(crate) fn set_disk_load(&mut self, load: DiskLoad) {
        self.disk_load = Some(load);
    }
    pub fn kind(&self) -> IndexKind {
        match self.data {
            DataTable::Mem(_) => IndexKind::Memory,
            DataTable::Disk(_) => IndexKind::Disk,
        }
    }
    /// The private directory of an on-disk index's files (`None` in memory).
    pub fn disk_dir(&self) -> Option<&std::path::Path> {
        match &self.data {
            DataTable::Mem(_) => None,
            DataTable::Disk(t) => Some(t.dir()),
        }
    }
    /// Where an on-disk index answered its lookups (`None` in memory).
    pub fn disk_counts(&self) -> Option<disk::DiskCounts> {
        match &self.data {
            DataTable::Mem(_) => None,
            DataTable::Disk(t) => Some(t.counts()),
        }
    }
    /// Room for `additional` more data entries (in memory; on disk the
    /// overlay is flushed at its size anyway).
    pub fn reserve_data(&mut self, additional: usize) {
        if let DataTable::Mem(t) = &mut self.data {
            t.reserve(additional);
        }
    }
    /// The memory the in-memory tables' next inserts write (see
    /// [`crate::zerobuf::populate`]); none on disk.
    pub(crate) fn spare(&self) -> Vec<crate::zerobuf::Spare> {
        let mut out = self.recipe.spare();
        if let DataTable::Mem(t) = &self.data {
            out.extend(t.spare());
        }
        out
    }
    /// Room for `additional` more recipe chunk entries.
    pub fn reserve_recipe(&mut self, additional: usize) {
        self.recipe.reserve(additional);
    }
    /// Write pending on-disk changes as a run (no-op in memory). Loading
    /// ends with it, so the first backup's lookups see sorted runs.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.data {
            DataTable::Mem(_) => Ok(()),
            DataTable::Disk(t) => t.flush(),
        }
    }

    /// Whether the index holds a data chunk, for consecutive chunks of one
    /// stream: when the chunk follows the previous hit in the order chunks
    /// were indexed (as most of a new version of a backup does), the answer
    /// comes from one sequential comparison instead of a random probe.
    /// Exact: the log only ever holds fingerprints the index holds.
    #[inline]
    pub fn contains_data_seq(&mut self, cursor: &mut DataCursor, fp: &Fingerprint) -> bool {
        self.get_data_seq(cursor, fp).is_some()
    }
    /// [`contains_data_seq`](Self::contains_data_seq) through a shared
    /// borrow, with a position `log` in the memory table's insertion log
    /// (moved after each hit); the disk table answers by a probe, as
    /// [`contains`](Self::contains). Exact either way. The files cache
    /// checks its files' chunks so before a backup: they come in the
    /// order of the backup that recorded them, mostly the order they were
    /// indexed, and a sequential comparison costs no random probe (two
    /// cache misses and, on a kept table, a page fault on first touch).
    #[inline]
    pub fn contains_data_near(&self, log: &mut usize, fp: &Fingerprint) -> bool {
        self.get_data_near(log, fp).is_some()
    }
    /// The container of a data chunk's newest copy, found along the memory
    /// table's insertion log from `log`; the disk table probes.
    #[inline]
    fn get_data_near(&self, log: &mut usize, fp: &Fingerprint) -> Option<u64> {
        match &self.data {
            DataTable::Mem(t) => t.get_seq(log, fp),
            DataTable::Disk(t) => t.get(fp),
        }
    }
    /// Whether the index holds a data chunk: answered by the insertion log
    /// when it has the chunk where `cursor` points (nothing moves), else by
    /// a probe, as [`contains`](Self::contains).
    #[inline]
    pub fn contains_data_at(&self, cursor: &DataCursor, fp: &Fingerprint) -> bool {
        match &self.data {
            DataTable::Mem(t) => t.logged_at(cursor.log, fp) || t.contains(fp),
            DataTable::Disk(t) => t.contains(fp),
        }
    }
    /// [`get`](Self::get) of a data chunk, for consecutive chunks of one
    /// stream, as [`contains_data_seq`](Self::contains_data_seq).
    #[inline]
    pub fn get_data_seq(
        &mut self,
        cursor: &mut DataCursor,
        fp: &Fingerprint,
    ) -> Option<ContainerId> {
        match &mut self.data {
            DataTable::Mem(t) => t.get_seq(&mut cursor.log, fp),
            DataTable::Disk(t) => t.get_seq(&mut cursor.disk, fp),
        }
        .map(ContainerId)
    }
    /// Hint that the insertion-log entry `ahead` after `cursor` will be read
    /// soon (by [`prefetch_data_seq`](Self::prefetch_data_seq)).
    #[inline]
    pub fn prefetch_data_log(&self, cursor: DataCursor, ahead: usize) {
        if let DataTable::Mem(t) = &self.data {
            t.prefetch_log(cursor.log + ahead)
        }
    }
    /// [`prefetch`](Self::prefetch) a data fingerprint expected `ahead`
    /// lookups after `cursor`, unless the log predicts it there.
    #[inline]
    pub fn prefetch_data_seq(&mut self, cursor: DataCursor, ahead: usize, fp: &Fingerprint) {
        match &mut self.data {
            DataTable::Mem(t) => {
                if !t.logged_at(cursor.log + ahead, fp) {
                    t.prefetch(fp)
                }
            }
            DataTable::Disk(t) => t.prefetch_seq(&cursor.disk, ahead, fp),
        }
    }
    /// The container of a chunk's newest copy (what dedup refers to).
    #[inline]
    pub fn get(&self, kind: ChunkKind, fp: &Fingerprint) -> Option<ContainerId> {
        match kind {
            ChunkKind::Data => self.data.get(fp),
            ChunkKind::Recipe => self.recipe.get(fp),
        }
        .map(ContainerId)
    }
    /// The container of copy `copy` of a chunk.
    #[inline]
    pub fn get_copy(&self, kind: ChunkKind, fp: &Fingerprint, copy: CopyNo) -> Option<ContainerId> {
        match kind {
            ChunkKind::Recipe => (copy == 0).then(|| self.get(kind, fp)).flatten(),
            // Without rewriting every chunk has copy 0 alone: one probe.
            ChunkKind::Data if self.copies.is_empty() => {
                (copy == 0).then(|| self.get(kind, fp)).flatten()
            }
            ChunkKind::Data => match self.copies.get(fp) {
                Some(c) => c.nos.iter().position(|&n| n == copy).map(|i| c.at[i]),
                None if copy == 0 => self.get(kind, fp),
                None => None,
            },
        }
    }
    /// [`get_copy`](Self::get_copy) of a data chunk, for the consecutive
    /// entries of one recipe: `log` is a position in the memory table's
    /// insertion log, moved after each hit there. Why: a backup's chunks
    /// were mostly indexed in its own order (or a same tree's before it),
    /// so a restore's walks find each next to the previous one instead of
    /// by a random probe, which cost 0.11 s of CPU in two walks of a
    /// 2.29 GB tree (issue 33). Exact either way.
    #[inline]
    pub fn get_copy_near(
        &self,
        log: &mut usize,
        fp: &Fingerprint,
        copy: CopyNo,
    ) -> Option<ContainerId> {
        if !self.copies.is_empty() {
            return self.get_copy(ChunkKind::Data, fp, copy);
        }
        if copy != 0 {
            return None;
        }
        self.get_data_near(log, fp).map(ContainerId)
    }
    /// Every stored copy of a data chunk.
    #[inline]
    pub fn copy_list(&self, fp: &Fingerprint) -> CopyList<'_> {
        match self.copies.get(fp) {
            Some(c) => CopyList::Many(&c.nos, &c.at),
            None => match self.data.get(fp) {
                Some(c) => CopyList::One(0, ContainerId(c)),
                None => CopyList::None,
            },
        }
    }
    /// The copy number of a data chunk's newest copy (0 if it has one copy).
    #[inline]
    pub fn newest_copy(&self, fp: &Fingerprint) -> CopyNo {
        if self.copies.is_empty() {
            return 0;
        }
        self.copies
            .get(fp)
            .and_then(|c| c.nos.last().copied())
            .unwrap_or(0)
    }
    /// The number a new copy of `fp` takes, or `None` if it may not get
    /// another ([`MAX_COPIES`], or the numbers are exhausted).
    pub fn next_copy(&self, fp: &Fingerprint) -> Option<CopyNo> {
        match self.copy_list(fp) {
            CopyList::None => Some(0),
            CopyList::One(n, _) => n.checked_add(1),
            CopyList::Many(n, _) if n.len() >= MAX_COPIES => None,
            CopyList::Many(n, _) => n.last().and_then(|l| l.checked_add(1)),
        }
    }
    /// Whether every data chunk's only copy is copy 0 (no rewriting
    /// happened, or GC removed every extra copy): recipes then depend on the
    /// stream alone.
    pub fn first_copies_only(&self) -> bool {
        self.copies.is_empty()
    }
    /// Whether the index holds a chunk of `kind` (reads less memory than
    /// [`get`](Self::get)).
    #[inline]
    pub fn contains(&self, kind: ChunkKind, fp: &Fingerprint) -> bool {
        match kind {
            ChunkKind::Data => self.data.contains(fp),
            ChunkKind::Recipe => self.recipe.contains(fp),
        }
    }
    /// Hint that `fp` will be looked up soon: start loading its table slot,
    /// so a batch of lookups overlaps its cache misses.
    #[inline]
    pub fn prefetch(&self, kind: ChunkKind, fp: &Fingerprint) {
        match kind {
            ChunkKind::Data => self.data.prefetch(fp),
            ChunkKind::Recipe => self.recipe.prefetch(fp),
        }
    }
    /// Add or move one copy. An error (on disk: a file not written) leaves
    /// the copy added (see the module documentation).
    pub fn insert(&mut self, e: IndexEntry) -> Result<()> {
        match e.kind {
            ChunkKind::Data => {
                if e.copy == 0 && !self.copies.contains_key(&e.fp) {
                    return self.data.insert(e.fp, e.container.0);
                }
                let old = self.data.get(&e.fp);
                let c = self.copies.entry(e.fp).or_insert_with(|| match old {
                    Some(o) => Copies {
                        nos: vec![0],
                        at: vec![ContainerId(o)],
                    },
                    None => Copies::default(),
                });
                match c.nos.binary_search(&e.copy) {
                    Ok(i) => c.at[i] = e.container,
                    Err(i) => {
                        c.nos.insert(i, e.copy);
                        c.at.insert(i, e.container);
                    }
                }
                let newest = *c.at.last().expect("just inserted");
                self.data.insert(e.fp, newest.0)
            }
            ChunkKind::Recipe => {
                debug_assert_eq!(e.copy, 0, "recipe chunks have one copy");
                self.recipe.insert(e.fp, e.container.0);
                Ok(())
            }
        }
    }
    /// Forget every copy of a chunk. An error leaves them forgotten.
    pub fn remove(&mut self, kind: ChunkKind, fp: &Fingerprint) -> Result<()> {
        match kind {
            ChunkKind::Data => {
                self.copies.remove(fp);
                self.data.remove(fp)
            }
            ChunkKind::Recipe => {
                self.recipe.remove(fp);
                Ok(())
            }
        }
    }
    /// Forget one copy of a chunk (the others stay). An error leaves it
    /// forgotten.
    pub fn remove_copy(&mut self, kind: ChunkKind, fp: &Fingerprint, copy: CopyNo) -> Result<()> {
        if kind == ChunkKind::Recipe || !self.copies.contains_key(fp) {
            if copy == 0 {
                return self.remove(kind, fp);
            }
            return Ok(());
        }
        let c = self.copies.get_mut(fp).expect("checked");
        if let Ok(i) = c.nos.binary_search(&copy) {
            c.nos.remove(i);
            c.at.remove(i);
        }
        match (c.nos.as_slice(), c.at.last().copied()) {
            ([], _) => {
                self.copies.remove(fp);
                self.data.remove(fp)
            }
            (&[0], Some(at)) => {
                self.copies.remove(fp);
                self.data.insert(*fp, at.0)
            }
            (_, Some(at)) => self.data.insert(*fp, at.0),
            (_, None) => unreachable!("parallel arrays"),
        }
    }
    /// Containers of a data chunk's copies other than the newest, oldest
    /// first.
    pub fn copies(&self, fp: &Fingerprint) -> &[ContainerId] {
        self.copies
            .get(fp)
            .map_or(&[], |c| &c.at[..c.at.len().saturating_sub(1)])
    }
    /// A data chunk's exact state (every copy), to undo a failed backup.
    pub fn data_state(&self, fp: &Fingerprint) -> Vec<(CopyNo, ContainerId)> {
        self.copy_list(fp).iter().collect()
    }
    /// Put a data chunk back in a state [`data_state`](Self::data_state)
    /// saved. Every copy is put back even after an error (the first is
    /// returned): an undo must be exact.
    pub fn set_data_state(
        &mut self,
        fp: Fingerprint,
        copies: Vec<(CopyNo, ContainerId)>,
    ) -> Result<()> {
        let mut done = self.remove(ChunkKind::Data, &fp);
        for (copy, container) in copies {
            let put = self.insert(IndexEntry {
                fp,
                container,
                kind: ChunkKind::Data,
                copy,
            });
            done = done.and(put);
        }
        done
    }
    /// Every data fingerprint (each once, whatever its copies).
    pub fn data_fingerprints(&self) -> impl Iterator<Item = Fingerprint> + '_ {
        self.data.iter().map(|(fp, _)| fp)
    }
    /// Fingerprints (data, recipe).
    pub fn len(&self) -> (usize, usize) {
        (self.data.len(), self.recipe.len())
    }
    /// Copies stored beyond the first of each data chunk.
    pub fn extra_copies(&self) -> usize {
        self.copies.values().map(|c| c.nos.len() - 1).sum()
    }
    /// The redundancy among containers (SMR paper, Figs. 4–5): how many
    /// data chunks the index holds, how many of them have copies in more
    /// than one container, and how many copies those hold beyond the first
    /// (copies of one chunk in one container count once).
    pub fn copy_census(&self) -> CopyCensus {
        let mut census = CopyCensus {
            chunks: self.data.len() as u64,
            ..CopyCensus::default()
        };
        let mut at = Vec::new();
        for c in self.copies.values() {
            at.clear();
            at.extend_from_slice(&c.at);
            at.sort_unstable();
            at.dedup();
            if at.len() > 1 {
                census.redundant_chunks += 1;
                census.extra_copies += at.len() as u64 - 1;
            }
        }
        census
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty() && self.recipe.is_empty()
    }
    /// Approximate heap bytes of the in-memory tables (key and value per
    /// slot, and the copy lists).
    pub fn memory_bytes(&self) -> usize {
        let copies: usize = self
            .copies
            .values()
            .map(|c| 48 + c.nos.capacity() * 2 + c.at.capacity() * 8)
            .sum();
        self.data.memory_bytes() + self.recipe.memory_bytes() + copies
    }
    /// Every entry: each copy of each data chunk, then the recipe chunks.
    pub fn entries(&self) -> impl Iterator<Item = IndexEntry> + '_ {
        let d = self.data.iter().flat_map(move |(fp, c)| {
            let (one, many) = match self.copies.get(&fp) {
                None => (Some((0, ContainerId(c))), None),
                Some(cs) => (None, Some(cs)),
            };
            let many = many
                .into_iter()
                .flat_map(|cs| cs.nos.iter().copied().zip(cs.at.iter().copied()));
            one.into_iter()
                .chain(many)
                .map(move |(copy, container)| IndexEntry {
                    fp,
                    container,
                    kind: ChunkKind::Data,
                    copy,
                })
        });
        let r = self.recipe.iter().map(|(fp, c)| IndexEntry {
            fp,
            container: ContainerId(c),
            kind: ChunkKind::Recipe,
            copy: 0,
        });
        d.chain(r)
    }
}

/// Sort entries for a segment that replaces all others: by kind (data
/// first), then fingerprint, then copy, so its content is deterministic.
/// Every (kind, fingerprint, copy) occurs once, so an unstable sort gives
/// the one order, several times faster on millions of entries.
pub fn sort_entries(entries: &mut [IndexEntry]) {
    let key = |e: &IndexEntry| e.kind == ChunkKind::Recipe;
    let by_fp = |a: &IndexEntry, b: &IndexEntry| {
        // Lexicographic, decided by the first 8 bytes almost always.
        let p = |e: &IndexEntry| u64::from_be_bytes(e.fp.0[..8].try_into().unwrap());
        p(a).cmp(&p(b)).then_with(|| a.fp.cmp(&b.fp))
    };
    entries.sort_unstable_by(|a, b| {
        key(a)
            .cmp(&key(b))
            .then_with(|| by_fp(a, b))
            .then(a.copy.cmp(&b.copy))
    });
}

/// One entry's bytes in a segment.
fn encode_entry(e: &IndexEntry, b: &mut [u8]) {
    b[..FP_LEN].copy_from_slice(&e.fp.0);
    b[32..40].copy_from_slice(&e.container.0.to_le_bytes());
    b[40] = match e.kind {
        ChunkKind::Data => 0,
        ChunkKind::Recipe => 1,
    };
    b[42..44].copy_from_slice(&e.copy.to_le_bytes());
}

/// The segment header for `count` entries.
fn segment_header(count: usize) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&(count as u64).to_le_bytes());
    h
}

pub fn encode_segment(entries: &[IndexEntry]) -> Vec<u8> {
    // Zeroed up front (reserved bytes stay zero), then filled in place: a
    // compaction encodes millions of entries.
    let body = 20 + entries.len() * ENTRY_LEN;
    let mut out = vec![0u8; body + 16];
    out[..20].copy_from_slice(&segment_header(entries.len()));
    for (e, b) in entries
        .iter()
        .zip(out[20..body].chunks_exact_mut(ENTRY_LEN))
    {
        encode_entry(e, b);
    }
    let sum = checksum(&out[..body]);
    out[body..].copy_from_slice(&sum);
    out
}

/// The segment [`encode_segment`] makes of `entries` sorted by
/// [`sort_entries`], sorting the encoded entries in place. A compaction's
/// segment holds the whole index (millions of entries): a sorted copy of the
/// entries beside their encoding doubled the memory it needs. `expected` is
/// how many entries there will be (the room allocated up front; a wrong
/// guess only costs a reallocation).
pub fn encode_segment_sorted(
    expected: usize,
    entries: impl IntoIterator<Item = IndexEntry>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + expected * ENTRY_LEN + 16);
    out.extend_from_slice(&segment_header(0));
    let mut rec = [0u8; ENTRY_LEN];
    let mut count = 0usize;
    for e in entries {
        encode_entry(&e, &mut rec);
        out.extend_from_slice(&rec);
        count += 1;
    }
    out[..20].copy_from_slice(&segment_header(count));
    sort_records(&mut out[20..]);
    let sum = checksum(&out);
    out.extend_from_slice(&sum);
    out
}

/// Sort encoded entries as [`sort_entries`] sorts entries: kind (byte 40,
/// data first), fingerprint (bytes 0..32, lexicographic), copy (bytes
/// 42..44, little-endian).
fn sort_records(body: &mut [u8]) {
    assert!(body.len().is_multiple_of(ENTRY_LEN), "whole entries");
    // SAFETY: the same bytes seen as whole entries ([u8; N] has alignment
    // 1 and no invalid values); `body` is borrowed mutably throughout.
    let records: &mut [[u8; ENTRY_LEN]] =
        unsafe { std::slice::from_raw_parts_mut(body.as_mut_ptr().cast(), body.len() / ENTRY_LEN) };
    let prefix = |r: &[u8; ENTRY_LEN]| u64::from_be_bytes(r[..8].try_into().unwrap());
    let copy = |r: &[u8; ENTRY_LEN]| u16::from_le_bytes([r[42], r[43]]);
    let order = |a: &[u8; ENTRY_LEN], b: &[u8; ENTRY_LEN]| {
        a[40]
            .cmp(&b[40])
            .then_with(|| prefix(a).cmp(&prefix(b)))
            .then_with(|| a[..FP_LEN].cmp(&b[..FP_LEN]))
            .then_with(|| copy(a).cmp(&copy(b)))
    };
    // A compaction's millions of entries: split at the median (every entry
    // before it orders at or before every entry after) and sort the halves
    // on two threads. A compaction runs between backups, while the ingest's
    // threads wait; on one thread it was most of that pause (issue 35).
    if records.len() < PARALLEL_SORT {
        records.sort_unstable_by(order);
        return;
    }
    let mid = records.len() / 2;
    records.select_nth_unstable_by(mid, order);
    let (low, high) = records.split_at_mut(mid);
    std::thread::scope(|s| {
        s.spawn(|| high.sort_unstable_by(order));
        low.sort_unstable_by(order);
    });
}

/// Entries from which [`sort_records`] sorts on two threads.
const PARALLEL_SORT: usize = 1 << 16;

/// Decode and verify a segment; `name` identifies it in errors.
pub fn decode_segment(b: &[u8], name: &str) -> Result<Vec<IndexEntry>> {
    Ok(SegmentView::verify(b, name)?.entries().collect())
}

/// A verified segment's entries, read in place: loading a large
/// repository's index inserts millions of them, and a decoded copy of
/// each segment cost as much to allocate and fill as the inserts.
pub struct SegmentView<'a> {
    /// The entries' bytes, [`ENTRY_LEN`] each.
    body: &'a [u8],
}

impl<'a> SegmentView<'a> {
    /// Verify a segment (magic, checksum, version, count, and every
    /// entry's kind, copy and reserved bytes); `name` identifies it in
    /// errors.
    pub fn verify(b: &'a [u8], name: &str) -> Result<Self> {
        if b.len() < 36 || b[..8] != MAGIC {
            return Err(Error::corrupt(name, "not an index segment"));
        }
        let (body, sum) = b.split_at(b.len() - 16);
        if checksum(body) != sum {
            return Err(Error::corrupt(name, "checksum mismatch"));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                object: name.into(),
                found: version,
                supported: VERSION,
            });
        }
        let count = u64::from_le_bytes(b[12..20].try_into().unwrap());
        let entries = &body[20..];
        if entries.len() as u64 != count.saturating_mul(ENTRY_LEN as u64) {
            return Err(Error::corrupt(
                name,
                "entry count does not match its length",
            ));
        }
        for e in entries.chunks_exact(ENTRY_LEN) {
            if e[41] != 0 || e[44..].iter().any(|&b| b != 0) {
                return Err(Error::corrupt(
                    name,
                    "reserved bytes of an entry are not zero",
                ));
            }
            match e[40] {
                0 => {}
                1 if e[42..44] != [0, 0] => {
                    return Err(Error::corrupt(
                        name,
                        "a recipe chunk entry has a copy number",
                    ))
                }
                1 => {}
                k => return Err(Error::corrupt(name, format!("unknown chunk kind {k}"))),
            }
        }
        Ok(SegmentView { body: entries })
    }

    /// The view of bytes [`verify`](Self::verify) accepted (verified on
    /// another thread): not checked again.
    pub(crate) fn verified(b: &'a [u8]) -> Self {
        SegmentView {
            body: &b[20..b.len() - 16],
        }
    }

    pub fn len(&self) -> usize {
        self.body.len() / ENTRY_LEN
    }

    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Entry `i` (`i < len()`).
    #[inline]
    pub fn get(&self, i: usize) -> IndexEntry {
        let e = &self.body[i * ENTRY_LEN..(i + 1) * ENTRY_LEN];
        IndexEntry {
            fp: Fingerprint(e[..FP_LEN].try_into().unwrap()),
            container: ContainerId(u64::from_le_bytes(e[32..40].try_into().unwrap())),
            // Verified: 0 or 1.
            kind: match e[40] {
                0 => ChunkKind::Data,
                _ => ChunkKind::Recipe,
            },
            copy: CopyNo::from_le_bytes(e[42..44].try_into().unwrap()),
        }
    }

    pub fn entries(&self) -> impl ExactSizeIterator<Item = IndexEntry> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Hint that entry `i` will be read soon (none past the end).
    #[inline]
    pub fn prefetch(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(e) = self.body.get(i * ENTRY_LEN) {
            // SAFETY: prefetching a valid address never faults.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>((e as *const u8).cast::<i8>());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashAlgo;

    fn data(fp: Fingerprint, copy: CopyNo, c: u64) -> IndexEntry {
        IndexEntry {
            fp,
            container: ContainerId(c),
            kind: ChunkKind::Data,
            copy,
        }
    }

    #[test]
    fn segment_round_trip_and_corruption() {
        let entries: Vec<_> = (0..100u32)
            .map(|i| IndexEntry {
                fp: HashAlgo::Blake3.hash(&i.to_le_bytes()),
                container: ContainerId(i as u64 / 10),
                kind: if i % 3 == 0 {
                    ChunkKind::Recipe
                } else {
                    ChunkKind::Data
                },
                copy: if i % 3 == 0 {
                    0
                } else {
                    (i % 4) as CopyNo * 300
                },
            })
            .collect();
        let seg = encode_segment(&entries);
        assert_eq!(decode_segment(&seg, "s").unwrap(), entries);
        for i in (0..seg.len()).step_by(7) {
            let mut bad = seg.clone();
            bad[i] ^= 1;
            assert!(decode_segment(&bad, "s").is_err(), "flip at {i}");
        }
        assert!(decode_segment(&seg[..seg.len() - 1], "s").is_err());
    }

    /// Sorting the encoded entries gives the bytes of encoding sorted
    /// entries: fingerprints alike in their first 8 bytes (or all 32),
    /// copy numbers whose little-endian bytes sort the other way round
    /// (1 and 256), both kinds, and a wrong guess of the count; below and
    /// above the size sorted on two threads.
    #[test]
    fn a_segment_sorted_in_place_is_the_sorted_segment() {
        for n in [3000u32, 40_000] {
            sorted_in_place_is_sorted(n);
        }
    }

    fn sorted_in_place_is_sorted(n: u32) {
        let mut entries = Vec::new();
        let mut x = 5u64;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut fp = HashAlgo::Blake3.hash(&i.to_le_bytes());
            if i % 5 == 0 {
                // A shared prefix: the order is decided past byte 8.
                fp.0[..8].copy_from_slice(&[7; 8]);
            }
            let kind = if i % 7 == 0 {
                ChunkKind::Recipe
            } else {
                ChunkKind::Data
            };
            let copies: &[CopyNo] = match (kind, i % 3) {
                (ChunkKind::Recipe, _) | (_, 0) => &[0],
                (_, 1) => &[256, 1, 0],
                _ => &[2, 513],
            };
            for &copy in copies {
                entries.push(IndexEntry {
                    fp,
                    container: ContainerId(x % 1000),
                    kind,
                    copy,
                });
            }
        }
        let mut sorted = entries.clone();
        sort_entries(&mut sorted);
        assert_ne!(sorted, entries, "the input is not already sorted");
        let want = encode_segment(&sorted);
        for guess in [entries.len(), 0, 10 * entries.len()] {
            let got = encode_segment_sorted(guess, entries.iter().copied());
            assert!(got == want, "guess {guess}");
        }
        assert_eq!(decode_segment(&want, "s").unwrap(), sorted);
        assert_eq!(n < 10_000, entries.len() < PARALLEL_SORT, "both paths");
        assert_eq!(
            encode_segment_sorted(7, std::iter::empty()),
            encode_segment(&[])
        );
    }

    /// Copies in distinct containers are redundancy among containers;
    /// two copies of a chunk in one container (GC's aliases) are not.
    #[test]
    fn copy_census_counts_containers_not_copy_numbers() {
        let h = |s: &str| HashAlgo::Blake3.hash(s.as_bytes());
        let mut ix = Index::default();
        ix.insert(data(h("once"), 0, 1)).unwrap();
        for (copy, c) in [(0, 1), (1, 2), (2, 3)] {
            ix.insert(data(h("thrice"), copy, c)).unwrap();
        }
        for (copy, c) in [(0, 4), (1, 4)] {
            ix.insert(data(h("aliased"), copy, c)).unwrap();
        }
        let census = ix.copy_census();
        assert_eq!(
            census,
            CopyCensus {
                chunks: 3,
                redundant_chunks: 1,
                extra_copies: 2
            }
        );
        ix.remove_copy(ChunkKind::Data, &h("thrice"), 1).unwrap();
        assert_eq!(ix.copy_census().extra_copies, 1);
    }

    proptest::proptest! {
        /// `get_copy_near` answers as `get_copy` whatever the order of the
        /// look-ups (in the log's order, repeated, backwards, missing
        /// chunks) and whether chunks have several copies (rewriting).
        #[test]
        fn near_lookups_answer_as_probes(
            n in 1u32..300,
            walk in proptest::collection::vec(0u32..400, 0..600),
            copies in proptest::collection::vec((0u32..300, 1u16..3), 0..4),
            seq in proptest::bool::ANY,
        ) {
            let h = |i: u32| HashAlgo::Blake3.hash(&i.to_le_bytes());
            let mut ix = Index::default();
            for i in 0..n {
                ix.insert(data(h(i), 0, u64::from(i / 7))).unwrap();
            }
            for &(i, copy) in &copies {
                if i < n {
                    ix.insert(data(h(i), copy, 1000 + u64::from(i))).unwrap();
                }
            }
            // In order (as a restore of the backup that indexed them), or
            // as drawn.
            let order: Vec<u32> = if seq { (0..n).chain(walk).collect() } else { walk };
            let mut log = 0;
            for i in order {
                for copy in [0, 1, 2] {
                    proptest::prop_assert_eq!(
                        ix.get_copy_near(&mut log, &h(i), copy),
                        ix.get_copy(ChunkKind::Data, &h(i), copy),
                        "chunk {} copy {}", i, copy
                    );
                }
            }
        }
    }

    /// Found by the index_segment fuzz target: non-zero reserved bytes were
    /// accepted, so a decoded segment did not re-encode to itself.
    #[test]
    fn reserved_bytes_must_be_zero() {
        let e = data(HashAlgo::Blake3.hash(b"x"), 0, 3);
        for at in [41, 45, 47] {
            let mut seg = encode_segment(&[e]);
            seg[20 + at] = 1;
            let body = seg.len() - 16;
            let sum = checksum(&seg[..body]);
            seg[body..].copy_from_slice(&sum);
            let err = decode_segment(&seg, "s").unwrap_err().to_string();
            assert!(err.contains("reserved bytes"), "{err}");
        }
        let r = IndexEntry {
            kind: ChunkKind::Recipe,
            copy: 1,
            ..e
        };
        let err = decode_segment(&encode_segment(&[r]), "s").unwrap_err();
        assert!(err.to_string().contains("copy number"), "{err}");
    }

    #[test]
    fn kinds_are_separate_and_later_entries_win() {
        let fp = HashAlgo::Blake3.hash(b"x");
        let mut idx = Index::default();
        idx.insert(data(fp, 0, 1)).unwrap();
        assert_eq!(idx.get(ChunkKind::Recipe, &fp), None);
        // The same copy moved (GC): no second copy.
        idx.insert(data(fp, 0, 5)).unwrap();
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(5)));
        assert_eq!(idx.len(), (1, 0));
        assert!(idx.copies(&fp).is_empty());
        assert!(idx.first_copies_only());
    }

    /// Every copy keeps its own container; dedup sees the newest; removing
    /// one copy leaves the others; a replay of `entries` is the same index.
    #[test]
    fn copies_are_kept_per_number() {
        let fp = HashAlgo::Blake3.hash(b"x");
        let mut idx = Index::default();
        assert_eq!(idx.next_copy(&fp), Some(0));
        idx.insert(data(fp, 0, 1)).unwrap();
        assert_eq!(idx.next_copy(&fp), Some(1));
        idx.insert(data(fp, 1, 4)).unwrap();
        idx.insert(data(fp, 2, 7)).unwrap();
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(7)));
        assert_eq!(idx.newest_copy(&fp), 2);
        assert_eq!(idx.get_copy(ChunkKind::Data, &fp, 1), Some(ContainerId(4)));
        assert_eq!(idx.copies(&fp), &[ContainerId(1), ContainerId(4)]);
        assert_eq!(idx.extra_copies(), 2);
        // GC moves copy 1.
        idx.insert(data(fp, 1, 9)).unwrap();
        assert_eq!(idx.get_copy(ChunkKind::Data, &fp, 1), Some(ContainerId(9)));
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(7)));
        let mut replay = Index::default();
        let mut entries: Vec<_> = idx.entries().collect();
        entries.reverse();
        for e in entries {
            replay.insert(e).unwrap();
        }
        assert_eq!(replay.data_state(&fp), idx.data_state(&fp));
        // The newest copy dies: copy 1 is the newest; numbers are not reused.
        idx.remove_copy(ChunkKind::Data, &fp, 2).unwrap();
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(9)));
        assert_eq!(idx.next_copy(&fp), Some(2));
        idx.remove_copy(ChunkKind::Data, &fp, 1).unwrap();
        assert!(idx.first_copies_only(), "copy 0 alone again");
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(1)));
        // Copy 0 dies while copy 3 lives: copy 0 is gone, not repointed.
        idx.insert(data(fp, 3, 11)).unwrap();
        idx.remove_copy(ChunkKind::Data, &fp, 0).unwrap();
        assert_eq!(idx.get_copy(ChunkKind::Data, &fp, 0), None);
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(11)));
        assert!(!idx.first_copies_only());
        let saved = idx.data_state(&fp);
        idx.remove(ChunkKind::Data, &fp).unwrap();
        assert!(idx.copy_list(&fp).is_empty());
        idx.set_data_state(fp, saved.clone()).unwrap();
        assert_eq!(idx.data_state(&fp), saved);
    }

    #[test]
    fn copies_are_capped() {
        let fp = HashAlgo::Blake3.hash(b"x");
        let mut idx = Index::default();
        for n in 0..MAX_COPIES as CopyNo {
            idx.insert(data(fp, n, n as u64)).unwrap();
        }
        assert_eq!(idx.next_copy(&fp), None);
        idx.remove_copy(ChunkKind::Data, &fp, 0).unwrap();
        assert_eq!(idx.next_copy(&fp), Some(MAX_COPIES as CopyNo));
    }

    /// An on-disk index whose directory became a regular file: the insert
    /// whose flush cannot create its file returns one line naming it, the
    /// index answers every lookup as if it had succeeded, and an undo after
    /// it (every later change returns the first error) is still exact.
    #[test]
    fn a_disk_index_error_names_the_file_and_keeps_the_answers() {
        let base = std::env::temp_dir().join("tessera-index-unit");
        let cfg = disk::DiskConfig {
            flush_at: 10,
            cache_containers: 2,
            background_merges: false,
        };
        let mut idx = Index::on_disk(&base, cfg).unwrap();
        let fp = |i: u64| HashAlgo::Blake3.hash(&i.to_le_bytes());
        for i in 0..25 {
            idx.insert(data(fp(i), 0, i / 4)).unwrap();
        }
        idx.insert(data(fp(0), 1, 100)).unwrap();
        idx.flush().unwrap();
        let dir = idx.disk_dir().unwrap().to_path_buf();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, b"not a directory").unwrap();
        let added: Vec<IndexEntry> = (25..40).map(|i| data(fp(i), 0, i / 4)).collect();
        let mut err = None;
        for e in &added {
            if let Err(x) = idx.insert(*e) {
                err.get_or_insert(x);
            }
        }
        let msg = err.expect("the 10th insert flushes").to_string();
        assert!(
            msg.starts_with(&format!("on-disk index {}/lists-", dir.display())),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
        for i in 0..40 {
            let c0 = idx.get_copy(ChunkKind::Data, &fp(i), 0);
            assert_eq!(c0, Some(ContainerId(i / 4)));
        }
        assert_eq!(idx.get(ChunkKind::Data, &fp(0)), Some(ContainerId(100)));
        assert_eq!(idx.flush().unwrap_err().to_string(), msg);
        // The undo of a failed backup: every copy removed, each call failing.
        for e in &added {
            let e = idx.remove_copy(e.kind, &e.fp, e.copy).unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
        assert_eq!(idx.len(), (25, 0));
        for i in 25..40 {
            assert!(!idx.contains(ChunkKind::Data, &fp(i)));
        }
        drop(idx);
        std::fs::remove_file(&dir).unwrap();
    }
}
