//! The fingerprint index: exact and global, fingerprint → container.
//!
//! In memory while a repository is open. It is persisted as immutable *index
//! segments*: each mutation that writes containers writes one segment with the
//! entries it added, and the manifest lists the segments in order (later
//! entries win, so a rewritten chunk's newest copy is found). Opening a
//! repository loads the segments instead of scanning every container; the
//! index can always be rebuilt from container metadata.
//!
//! Data chunks and recipe chunks are kept in separate maps: they live in
//! separate containers and must never deduplicate against each other.
//!
//! Segment format: `b"TSRAINDX"` | version u32 | count u64 |
//! count × (fingerprint\[32\], container u64, kind u8, 7 zero bytes) | XXH3-128 of all before.

use crate::container::format::checksum;
use crate::container::{ChunkKind, ContainerId};
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap, FP_LEN};
use crate::fptable::FpTable;

const MAGIC: [u8; 8] = *b"TSRAINDX";
const VERSION: u32 = 1;
const ENTRY_LEN: usize = 48;

/// One index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub fp: Fingerprint,
    pub container: ContainerId,
    pub kind: ChunkKind,
}

/// Older copies remembered per data chunk (as the SMR port does).
pub const MAX_COPIES: usize = 254;

pub struct Index {
    data: FpTable,
    recipe: FpTable,
    /// Older containers holding a data chunk that rewriting stored again:
    /// Capping and SMR must see every copy. May name containers GC deleted;
    /// users filter by the live containers.
    copies: FpMap<Vec<ContainerId>>,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            // Logged: a backup mostly repeats an earlier stream in order.
            data: FpTable::with_log(),
            recipe: FpTable::default(),
            copies: FpMap::default(),
        }
    }
}

/// Where a stream of data lookups expects its next fingerprint in the
/// index's insertion log (see [`Index::contains_data_seq`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct DataCursor(usize);

impl Index {
    /// Whether the index holds a data chunk, for consecutive chunks of one
    /// stream: when the chunk follows the previous hit in the order chunks
    /// were indexed (as most of a new version of a backup does), the answer
    /// comes from one sequential comparison instead of a random probe.
    /// Exact: the log only ever holds fingerprints the index holds.
    #[inline]
    pub fn contains_data_seq(&self, cursor: &mut DataCursor, fp: &Fingerprint) -> bool {
        self.data.contains_seq(&mut cursor.0, fp)
    }
    /// Hint that the insertion-log entry `ahead` after `cursor` will be read
    /// soon (by [`prefetch_data_seq`](Self::prefetch_data_seq)).
    #[inline]
    pub fn prefetch_data_log(&self, cursor: DataCursor, ahead: usize) {
        self.data.prefetch_log(cursor.0 + ahead)
    }
    /// [`prefetch`](Self::prefetch) a data fingerprint expected `ahead`
    /// lookups after `cursor`, unless the log predicts it there.
    #[inline]
    pub fn prefetch_data_seq(&self, cursor: DataCursor, ahead: usize, fp: &Fingerprint) {
        if !self.data.logged_at(cursor.0 + ahead, fp) {
            self.data.prefetch(fp)
        }
    }
    #[inline]
    pub fn get(&self, kind: ChunkKind, fp: &Fingerprint) -> Option<ContainerId> {
        self.map(kind).get(fp).map(ContainerId)
    }
    /// Whether the index holds a chunk of `kind` (reads less memory than
    /// [`get`](Self::get)).
    #[inline]
    pub fn contains(&self, kind: ChunkKind, fp: &Fingerprint) -> bool {
        self.map(kind).contains(fp)
    }
    /// Hint that `fp` will be looked up soon: start loading its table slot,
    /// so a batch of lookups overlaps its cache misses.
    #[inline]
    pub fn prefetch(&self, kind: ChunkKind, fp: &Fingerprint) {
        self.map(kind).prefetch(fp)
    }
    pub fn insert(&mut self, e: IndexEntry) {
        match e.kind {
            ChunkKind::Data => {
                let old = self.data.insert(e.fp, e.container.0).map(ContainerId);
                if let Some(old) = old.filter(|&o| o != e.container) {
                    let v = self.copies.entry(e.fp).or_default();
                    v.retain(|&c| c != e.container && c != old);
                    if v.len() < MAX_COPIES {
                        v.push(old);
                    }
                }
            }
            ChunkKind::Recipe => {
                self.recipe.insert(e.fp, e.container.0);
            }
        };
    }
    pub fn remove(&mut self, kind: ChunkKind, fp: &Fingerprint) {
        match kind {
            ChunkKind::Data => {
                self.copies.remove(fp);
                self.data.remove(fp)
            }
            ChunkKind::Recipe => self.recipe.remove(fp),
        };
    }
    /// Older copies of a data chunk besides [`get`](Self::get)'s, oldest first.
    pub fn copies(&self, fp: &Fingerprint) -> &[ContainerId] {
        self.copies.get(fp).map_or(&[], |v| v.as_slice())
    }
    /// A data chunk's exact state (preferred copy and older copies), to undo
    /// a failed backup.
    pub fn data_state(&self, fp: &Fingerprint) -> (Option<ContainerId>, Vec<ContainerId>) {
        (self.data.get(fp).map(ContainerId), self.copies(fp).to_vec())
    }
    pub fn set_data_state(
        &mut self,
        fp: Fingerprint,
        (primary, copies): (Option<ContainerId>, Vec<ContainerId>),
    ) {
        match primary {
            Some(c) => self.data.insert(fp, c.0),
            None => self.data.remove(&fp),
        };
        if copies.is_empty() {
            self.copies.remove(&fp);
        } else {
            self.copies.insert(fp, copies);
        }
    }
    #[inline]
    fn map(&self, kind: ChunkKind) -> &FpTable {
        match kind {
            ChunkKind::Data => &self.data,
            ChunkKind::Recipe => &self.recipe,
        }
    }
    /// Every data fingerprint (each once, whatever its copies).
    pub fn data_fingerprints(&self) -> impl Iterator<Item = Fingerprint> + '_ {
        self.data.iter().map(|(fp, _)| fp)
    }
    /// Entries (data, recipe).
    pub fn len(&self) -> (usize, usize) {
        (self.data.len(), self.recipe.len())
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty() && self.recipe.is_empty()
    }
    /// Approximate heap bytes of the in-memory tables (key and value per
    /// slot; older copies not counted).
    pub fn memory_bytes(&self) -> usize {
        self.data.memory_bytes() + self.recipe.memory_bytes()
    }
    /// Older copies as entries, oldest first per fingerprint. Written before
    /// [`entries`](Self::entries) (later wins), they survive compaction.
    pub fn copy_entries(&self) -> impl Iterator<Item = IndexEntry> + '_ {
        self.copies.iter().flat_map(|(fp, v)| {
            v.iter().map(|&container| IndexEntry {
                fp: *fp,
                container,
                kind: ChunkKind::Data,
            })
        })
    }
    pub fn entries(&self) -> impl Iterator<Item = IndexEntry> + '_ {
        let d = self.data.iter().map(|(fp, c)| IndexEntry {
            fp,
            container: ContainerId(c),
            kind: ChunkKind::Data,
        });
        let r = self.recipe.iter().map(|(fp, c)| IndexEntry {
            fp,
            container: ContainerId(c),
            kind: ChunkKind::Recipe,
        });
        d.chain(r)
    }
}

/// What ingest deduplicates against: exact and global today ([`Index`]);
/// MFDedup's NDF index (this and the previous version of one source) will
/// implement it too. Ingest is generic over it, so the per-chunk lookups
/// stay monomorphized and inlined. A location is a container id here (a
/// category id under MFDedup).
pub trait DedupIndex: Default + Send + Sync + 'static {
    /// Where a stream of data lookups expects its next fingerprint (a hint
    /// that lets most lookups of a repeated stream skip the table).
    type Cursor: Copy + Default + Send;
    /// A data chunk's state before a backup changed it, to undo exactly.
    type Saved: Send;

    /// Whether a data chunk is held, for consecutive chunks of one stream.
    fn contains_data_seq(&self, cursor: &mut Self::Cursor, fp: &Fingerprint) -> bool;
    /// Hint that the log entry `ahead` after `cursor` will be read soon.
    fn prefetch_data_log(&self, cursor: Self::Cursor, ahead: usize);
    /// Hint that `fp` is looked up `ahead` lookups after `cursor`.
    fn prefetch_data_seq(&self, cursor: Self::Cursor, ahead: usize, fp: &Fingerprint);
    fn contains(&self, kind: ChunkKind, fp: &Fingerprint) -> bool;
    /// The preferred location of a chunk.
    fn get(&self, kind: ChunkKind, fp: &Fingerprint) -> Option<ContainerId>;
    /// Older copies of a data chunk (for rewriting policies), oldest first.
    fn copies(&self, fp: &Fingerprint) -> &[ContainerId];
    /// Add or repoint an entry (the newest location wins).
    fn insert(&mut self, e: IndexEntry);
    fn remove(&mut self, kind: ChunkKind, fp: &Fingerprint);
    fn data_state(&self, fp: &Fingerprint) -> Self::Saved;
    fn set_data_state(&mut self, fp: Fingerprint, state: Self::Saved);
}

impl DedupIndex for Index {
    type Cursor = DataCursor;
    type Saved = (Option<ContainerId>, Vec<ContainerId>);

    #[inline]
    fn contains_data_seq(&self, cursor: &mut DataCursor, fp: &Fingerprint) -> bool {
        Index::contains_data_seq(self, cursor, fp)
    }
    #[inline]
    fn prefetch_data_log(&self, cursor: DataCursor, ahead: usize) {
        Index::prefetch_data_log(self, cursor, ahead)
    }
    #[inline]
    fn prefetch_data_seq(&self, cursor: DataCursor, ahead: usize, fp: &Fingerprint) {
        Index::prefetch_data_seq(self, cursor, ahead, fp)
    }
    #[inline]
    fn contains(&self, kind: ChunkKind, fp: &Fingerprint) -> bool {
        Index::contains(self, kind, fp)
    }
    #[inline]
    fn get(&self, kind: ChunkKind, fp: &Fingerprint) -> Option<ContainerId> {
        Index::get(self, kind, fp)
    }
    #[inline]
    fn copies(&self, fp: &Fingerprint) -> &[ContainerId] {
        Index::copies(self, fp)
    }
    #[inline]
    fn insert(&mut self, e: IndexEntry) {
        Index::insert(self, e)
    }
    fn remove(&mut self, kind: ChunkKind, fp: &Fingerprint) {
        Index::remove(self, kind, fp)
    }
    fn data_state(&self, fp: &Fingerprint) -> Self::Saved {
        Index::data_state(self, fp)
    }
    fn set_data_state(&mut self, fp: Fingerprint, state: Self::Saved) {
        Index::set_data_state(self, fp, state)
    }
}

/// Sort entries for a segment that replaces all others: by kind (data
/// first), then fingerprint, so its content is deterministic. With older
/// copies present (`copies`: a fingerprint occurs more than once, older
/// copies first) the sort is stable, so the preferred copy still wins on
/// load; otherwise every (kind, fingerprint) occurs once and an unstable
/// sort gives the same order, several times faster on millions of entries.
pub fn sort_entries(entries: &mut [IndexEntry], copies: bool) {
    let key = |e: &IndexEntry| e.kind == ChunkKind::Recipe;
    let by_fp = |a: &IndexEntry, b: &IndexEntry| {
        // Lexicographic, decided by the first 8 bytes almost always.
        let p = |e: &IndexEntry| u64::from_be_bytes(e.fp.0[..8].try_into().unwrap());
        p(a).cmp(&p(b)).then_with(|| a.fp.cmp(&b.fp))
    };
    let order = |a: &IndexEntry, b: &IndexEntry| key(a).cmp(&key(b)).then_with(|| by_fp(a, b));
    if copies {
        entries.sort_by(order);
    } else {
        entries.sort_unstable_by(order);
    }
}

pub fn encode_segment(entries: &[IndexEntry]) -> Vec<u8> {
    // Zeroed up front (reserved bytes stay zero), then filled in place: a
    // compaction encodes millions of entries.
    let body = 20 + entries.len() * ENTRY_LEN;
    let mut out = vec![0u8; body + 16];
    out[..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[12..20].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    for (e, b) in entries
        .iter()
        .zip(out[20..body].chunks_exact_mut(ENTRY_LEN))
    {
        b[..FP_LEN].copy_from_slice(&e.fp.0);
        b[32..40].copy_from_slice(&e.container.0.to_le_bytes());
        b[40] = match e.kind {
            ChunkKind::Data => 0,
            ChunkKind::Recipe => 1,
        };
    }
    let sum = checksum(&out[..body]);
    out[body..].copy_from_slice(&sum);
    out
}

/// Decode and verify a segment; `name` identifies it in errors.
pub fn decode_segment(b: &[u8], name: &str) -> Result<Vec<IndexEntry>> {
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
    entries
        .chunks_exact(ENTRY_LEN)
        .map(|e| {
            if e[41..].iter().any(|&b| b != 0) {
                return Err(Error::corrupt(
                    name,
                    "reserved bytes of an entry are not zero",
                ));
            }
            let kind = match e[40] {
                0 => ChunkKind::Data,
                1 => ChunkKind::Recipe,
                k => return Err(Error::corrupt(name, format!("unknown chunk kind {k}"))),
            };
            Ok(IndexEntry {
                fp: Fingerprint(e[..FP_LEN].try_into().unwrap()),
                container: ContainerId(u64::from_le_bytes(e[32..40].try_into().unwrap())),
                kind,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashAlgo;

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

    /// Found by the index_segment fuzz target: non-zero reserved bytes were
    /// accepted, so a decoded segment did not re-encode to itself.
    #[test]
    fn reserved_bytes_must_be_zero() {
        let e = IndexEntry {
            fp: HashAlgo::Blake3.hash(b"x"),
            container: ContainerId(3),
            kind: ChunkKind::Data,
        };
        let mut seg = encode_segment(&[e]);
        seg[20 + 45] = 1;
        let body = seg.len() - 16;
        let sum = checksum(&seg[..body]);
        seg[body..].copy_from_slice(&sum);
        let err = decode_segment(&seg, "s").unwrap_err().to_string();
        assert!(err.contains("reserved bytes"), "{err}");
    }

    #[test]
    fn kinds_are_separate_and_later_entries_win() {
        let fp = HashAlgo::Blake3.hash(b"x");
        let mut idx = Index::default();
        idx.insert(IndexEntry {
            fp,
            container: ContainerId(1),
            kind: ChunkKind::Data,
        });
        assert_eq!(idx.get(ChunkKind::Recipe, &fp), None);
        idx.insert(IndexEntry {
            fp,
            container: ContainerId(5),
            kind: ChunkKind::Data,
        });
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(5)));
        assert_eq!(idx.len(), (1, 0));
        assert_eq!(idx.copies(&fp), &[ContainerId(1)]);
    }

    #[test]
    fn older_copies_are_remembered_and_replayed_in_order() {
        let fp = HashAlgo::Blake3.hash(b"x");
        let mut idx = Index::default();
        for c in [1, 4, 1, 7] {
            idx.insert(IndexEntry {
                fp,
                container: ContainerId(c),
                kind: ChunkKind::Data,
            });
        }
        // Repointing to 1 moved it from the copies to the front.
        assert_eq!(idx.get(ChunkKind::Data, &fp), Some(ContainerId(7)));
        assert_eq!(idx.copies(&fp), &[ContainerId(4), ContainerId(1)]);
        let mut replay = Index::default();
        for e in idx.copy_entries().chain(idx.entries()) {
            replay.insert(e);
        }
        assert_eq!(replay.data_state(&fp), idx.data_state(&fp));
        idx.remove(ChunkKind::Data, &fp);
        assert!(idx.copies(&fp).is_empty());
    }
}
