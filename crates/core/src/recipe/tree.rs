//! The recipe format: a recipe chunk's encoding ([`encode`], [`decode`],
//! [`RecipeEntry`], [`RecipeChunk`]), the [`RecipeBuilder`] that cuts a
//! backup's Merkle tree while its data chunks stream in, and the
//! [`RecipeWalker`] that streams the tree's leaves back with `check_child`
//! checking each level. Recipes are Merkle trees of fingerprints
//! (physical-GC paper §2.2; the folder's `mod.rs` describes the layout). A
//! file of its own so the reader builds on the format without depending on
//! the folder's `mod.rs`.

use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, Fingerprinter, FP_LEN};
use crate::index::CopyNo;
use crate::recipe::memo::LeafMemo;
use std::sync::{Arc, Mutex};

const MAGIC: [u8; 2] = *b"TR";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 8;
const ENTRY_LEN: usize = FP_LEN + 8;
/// Entries per recipe chunk: at least MIN (unless it is the last one of its
/// level), at most MAX, about MIN + AVG on average.
const MIN_ENTRIES: usize = 16;
const AVG_MASK: u64 = 63;
const MAX_ENTRIES: usize = 1024;
/// Deepest tree we accept when decoding (1024^8 chunks is far beyond any input).
pub const MAX_LEVEL: u8 = 8;

/// One entry of a recipe chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecipeEntry {
    pub fp: Fingerprint,
    /// Data chunk length (level 1) or logical bytes below the child (level ≥ 2).
    pub size: u64,
    /// Level 1: which stored copy of the data chunk the backup reads (see
    /// [`CopyNo`]). Always 0 at level ≥ 2 (recipe chunks have one copy).
    pub copy: CopyNo,
}

/// A decoded recipe chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecipeChunk {
    pub level: u8,
    pub entries: Vec<RecipeEntry>,
}

impl RecipeChunk {
    pub fn logical_size(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }
}

/// So a walker can hold decoded chunks owned or shared (`Arc`, from a memo).
impl AsRef<RecipeChunk> for RecipeChunk {
    fn as_ref(&self) -> &RecipeChunk {
        self
    }
}

pub fn encode(level: u8, entries: &[RecipeEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + entries.len() * ENTRY_LEN);
    encode_into(level, entries, &mut out);
    out
}

/// [`encode`] appending to `out` (so a buffer can be reused).
pub fn encode_into(level: u8, entries: &[RecipeEntry], out: &mut Vec<u8>) {
    out.reserve(HEADER_LEN + entries.len() * ENTRY_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(level);
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.fp.0);
        if level == 1 {
            debug_assert!(e.size <= u32::MAX as u64, "a data chunk's length is a u32");
            out.extend_from_slice(&(e.size as u32).to_le_bytes());
            out.extend_from_slice(&e.copy.to_le_bytes());
            out.extend_from_slice(&[0, 0]);
        } else {
            debug_assert_eq!(e.copy, 0, "recipe chunks have one copy");
            out.extend_from_slice(&e.size.to_le_bytes());
        }
    }
}

/// Decode a recipe chunk; `name` identifies it in errors.
pub fn decode(bytes: &[u8], name: &str) -> Result<RecipeChunk> {
    let bad = |why: &str| Error::corrupt(name, why.to_string());
    if bytes.len() < HEADER_LEN || bytes[0..2] != MAGIC {
        return Err(bad("not a recipe chunk"));
    }
    if bytes[2] != VERSION {
        return Err(Error::UnsupportedVersion {
            object: name.into(),
            found: bytes[2] as u32,
            supported: VERSION as u32,
        });
    }
    let level = bytes[3];
    if level == 0 || level > MAX_LEVEL {
        return Err(bad("recipe level out of range"));
    }
    let count = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    if bytes.len() != HEADER_LEN + count * ENTRY_LEN {
        return Err(bad("recipe chunk length does not match its entry count"));
    }
    let entries = bytes[HEADER_LEN..].chunks_exact(ENTRY_LEN).map(|e| {
        let fp = Fingerprint(e[..FP_LEN].try_into().unwrap());
        let tail = &e[FP_LEN..];
        if level > 1 {
            let size = u64::from_le_bytes(tail.try_into().unwrap());
            return Ok(RecipeEntry { fp, size, copy: 0 });
        }
        if tail[6..] != [0, 0] {
            return Err(bad("reserved bytes of a level-1 entry are not zero"));
        }
        Ok(RecipeEntry {
            fp,
            size: u32::from_le_bytes(tail[..4].try_into().unwrap()) as u64,
            copy: CopyNo::from_le_bytes(tail[4..6].try_into().unwrap()),
        })
    });
    let entries = entries.collect::<Result<Vec<_>>>()?;
    Ok(RecipeChunk { level, entries })
}

/// Receives the recipe chunks a [`RecipeBuilder`] emits, in bottom-up order
/// (a chunk is always emitted before its parent).
pub trait RecipeSink {
    fn recipe_chunk(&mut self, fp: Fingerprint, level: u8, bytes: &[u8]) -> Result<()>;
}

/// Builds the Merkle tree of one backup while its data chunks stream in.
pub struct RecipeBuilder {
    algo: Fingerprinter,
    /// `levels[k]` holds the pending entries of the level-(k+1) chunk, for
    /// k ≥ 1 (`levels[0]` stays empty: level 1 is `leaf`).
    levels: Vec<Vec<RecipeEntry>>,
    /// The pending level-1 chunk, encoded as its entries come (header
    /// first, filled in when it closes): a backup pushes every data chunk
    /// here, so each entry is written once, not kept and encoded again.
    leaf: Vec<u8>,
    leaf_count: usize,
    leaf_size: u64,
    /// Chunks emitted so far at each level.
    emitted: Vec<u64>,
    /// Encoding buffer for chunks of level ≥ 2, reused for every chunk.
    buf: Vec<u8>,
    /// Where level-1 chunks' fingerprints are looked up before hashing
    /// (trace mode; see [`LeafMemo`]).
    memo: Option<Arc<Mutex<LeafMemo>>>,
}

fn is_boundary(fp: &Fingerprint, count: usize) -> bool {
    // Bytes 8..16: the index hashes bytes 0..8; keep the two signals independent.
    count >= MAX_ENTRIES
        || (count >= MIN_ENTRIES
            && u64::from_le_bytes(fp.0[8..16].try_into().unwrap()) & AVG_MASK == 0)
}

impl RecipeBuilder {
    pub fn new(algo: impl Into<Fingerprinter>) -> Self {
        let algo = algo.into();
        RecipeBuilder {
            algo,
            levels: vec![Vec::new()],
            leaf: Vec::new(),
            leaf_count: 0,
            leaf_size: 0,
            emitted: vec![0],
            buf: Vec::new(),
            memo: None,
        }
    }

    /// Look level-1 chunks up in `memo` (which must answer with this
    /// builder's fingerprints) instead of hashing each.
    pub fn with_memo(mut self, memo: Arc<Mutex<LeafMemo>>) -> Self {
        self.memo = Some(memo);
        self
    }

    /// Append the next data chunk of the backup, read from its stored copy
    /// `copy`.
    pub fn push(
        &mut self,
        fp: Fingerprint,
        size: u32,
        copy: CopyNo,
        sink: &mut dyn RecipeSink,
    ) -> Result<()> {
        if self.leaf.is_empty() {
            self.leaf.extend_from_slice(&[0; HEADER_LEN]);
        }
        // A level-1 entry, as `encode_into` writes it.
        let mut e = [0u8; ENTRY_LEN];
        e[..FP_LEN].copy_from_slice(&fp.0);
        e[FP_LEN..FP_LEN + 4].copy_from_slice(&size.to_le_bytes());
        e[FP_LEN + 4..FP_LEN + 6].copy_from_slice(&copy.to_le_bytes());
        self.leaf.extend_from_slice(&e);
        self.leaf_count += 1;
        self.leaf_size += size as u64;
        if is_boundary(&fp, self.leaf_count) {
            let up = self.flush(0, sink)?;
            self.push_at(1, up, sink)?;
        }
        Ok(())
    }

    /// Append an entry to level k+1 (k ≥ 1).
    fn push_at(&mut self, k: usize, e: RecipeEntry, sink: &mut dyn RecipeSink) -> Result<()> {
        if self.levels.len() == k {
            self.levels.push(Vec::new());
            self.emitted.push(0);
        }
        self.levels[k].push(e);
        if is_boundary(&e.fp, self.levels[k].len()) {
            let up = self.flush(k, sink)?;
            self.push_at(k + 1, up, sink)?;
        }
        Ok(())
    }

    /// Entries pending at level k+1.
    fn pending(&self, k: usize) -> usize {
        if k == 0 {
            self.leaf_count
        } else {
            self.levels[k].len()
        }
    }

    /// Emit the pending entries of level k+1 as one chunk; return its entry
    /// for the parent level.
    fn flush(&mut self, k: usize, sink: &mut dyn RecipeSink) -> Result<RecipeEntry> {
        let level = (k + 1) as u8;
        let (fp, size) = if k == 0 {
            if self.leaf.is_empty() {
                self.leaf.extend_from_slice(&[0; HEADER_LEN]);
            }
            self.leaf[..2].copy_from_slice(&MAGIC);
            self.leaf[2] = VERSION;
            self.leaf[3] = 1;
            self.leaf[4..8].copy_from_slice(&(self.leaf_count as u32).to_le_bytes());
            let fp = match &self.memo {
                Some(m) => m
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .fingerprint(&self.leaf),
                None => self.algo.hash(&self.leaf),
            };
            sink.recipe_chunk(fp, level, &self.leaf)?;
            // Keep the buffer (and its capacity) for the next chunk.
            self.leaf.clear();
            self.leaf_count = 0;
            (fp, std::mem::take(&mut self.leaf_size))
        } else {
            let entries = &mut self.levels[k];
            let size = entries.iter().map(|e| e.size).sum();
            self.buf.clear();
            encode_into(level, entries, &mut self.buf);
            entries.clear();
            let fp = self.algo.hash(&self.buf);
            sink.recipe_chunk(fp, level, &self.buf)?;
            (fp, size)
        };
        self.emitted[k] += 1;
        Ok(RecipeEntry { fp, size, copy: 0 })
    }

    /// Close the tree and return the root entry (fingerprint and logical size)
    /// and its level. An empty backup has a root: a level-1 chunk with no entries.
    pub fn finish(mut self, sink: &mut dyn RecipeSink) -> Result<(RecipeEntry, u8)> {
        let mut k = 0;
        loop {
            if self.emitted[k] == 0 {
                // Every entry this level ever had is pending: one chunk, the root.
                let root = self.flush(k, sink)?;
                return Ok((root, (k + 1) as u8));
            }
            if self.pending(k) == 0
                && self.emitted[k] == 1
                && self.emitted[k + 1] == 0
                && self.levels[k + 1].len() == 1
            {
                // The single chunk already emitted at this level is the root.
                return Ok((self.levels[k + 1][0], (k + 1) as u8));
            }
            if self.pending(k) > 0 {
                let up = self.flush(k, sink)?;
                self.levels[k + 1].push(up);
            }
            k += 1;
        }
    }
}

/// Streams the level-1 entries (the data chunks) of a recipe tree in order,
/// fetching recipe chunks on demand, so memory is one path of the tree.
/// `C` is how a fetched chunk is held: owned, or shared with a memo.
pub struct RecipeWalker<F, C = RecipeChunk> {
    fetch: F,
    stack: Vec<(C, usize)>,
}

impl<F, C> RecipeWalker<F, C>
where
    F: FnMut(&Fingerprint, u8) -> Result<C>,
    C: AsRef<RecipeChunk>,
{
    /// `fetch(fp, expected_level)` loads and decodes a recipe chunk; the walker
    /// checks its level and size against its parent's entry.
    pub fn new(root: Fingerprint, root_level: u8, mut fetch: F) -> Result<Self> {
        let chunk = fetch(&root, root_level)?;
        check_child(chunk.as_ref(), &root, root_level, None)?;
        Ok(RecipeWalker {
            fetch,
            stack: vec![(chunk, 0)],
        })
    }

    /// The next data chunk entry, or None at the end of the backup.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<RecipeEntry>> {
        loop {
            let Some((chunk, pos)) = self.stack.last_mut() else {
                return Ok(None);
            };
            let chunk = chunk.as_ref();
            if *pos == chunk.entries.len() {
                self.stack.pop();
                continue;
            }
            let e = chunk.entries[*pos];
            *pos += 1;
            if chunk.level == 1 {
                return Ok(Some(e));
            }
            let level = chunk.level - 1;
            let child = (self.fetch)(&e.fp, level)?;
            check_child(child.as_ref(), &e.fp, level, Some(e.size))?;
            self.stack.push((child, 0));
        }
    }
}

/// A recipe chunk must be at the level its parent puts it (`level`) and,
/// below the root, cover the logical bytes its parent's entry says (`size`).
pub(crate) fn check_child(
    chunk: &RecipeChunk,
    fp: &Fingerprint,
    level: u8,
    size: Option<u64>,
) -> Result<()> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashAlgo;
    use std::collections::HashMap;

    #[derive(Default)]
    struct MapSink {
        chunks: HashMap<Fingerprint, Vec<u8>>,
        order: Vec<(Fingerprint, u8)>,
    }
    impl RecipeSink for MapSink {
        fn recipe_chunk(&mut self, fp: Fingerprint, level: u8, bytes: &[u8]) -> Result<()> {
            // A child is always emitted before its parent.
            if level > 1 {
                for e in decode(bytes, "t").unwrap().entries {
                    assert!(self.chunks.contains_key(&e.fp));
                }
            }
            self.order.push((fp, level));
            self.chunks.insert(fp, bytes.to_vec());
            Ok(())
        }
    }

    fn entries(n: usize, seed: u64) -> Vec<RecipeEntry> {
        (0..n)
            .map(|i| RecipeEntry {
                fp: HashAlgo::Blake3.hash(&[seed.to_le_bytes(), (i as u64).to_le_bytes()].concat()),
                size: 1000 + (i as u64 % 7),
                copy: (i % 5 == 0) as CopyNo * (i as CopyNo % 3),
            })
            .collect()
    }

    fn build(es: &[RecipeEntry], sink: &mut MapSink) -> (RecipeEntry, u8) {
        let mut b = RecipeBuilder::new(HashAlgo::Blake3);
        for e in es {
            b.push(e.fp, e.size as u32, e.copy, sink).unwrap();
        }
        b.finish(sink).unwrap()
    }

    fn walk(root: &RecipeEntry, level: u8, sink: &MapSink) -> Vec<RecipeEntry> {
        let mut w =
            RecipeWalker::new(root.fp, level, |fp, _| decode(&sink.chunks[fp], "t")).unwrap();
        let mut out = Vec::new();
        while let Some(e) = w.next().unwrap() {
            out.push(e);
        }
        out
    }

    #[test]
    fn round_trip_various_sizes() {
        for n in [0, 1, 15, 16, 17, 100, 1023, 1024, 1025, 5000, 70_000] {
            let es = entries(n, 1);
            let mut sink = MapSink::default();
            let (root, level) = build(&es, &mut sink);
            assert_eq!(walk(&root, level, &sink), es, "n = {n}");
            assert_eq!(root.size, es.iter().map(|e| e.size).sum::<u64>());
            assert_eq!(
                sink.order.last().unwrap(),
                &(root.fp, level),
                "root is emitted last"
            );
            assert!(sink.order.iter().all(|&(_, l)| l <= level));
            if n > 5000 {
                assert!(
                    level >= 3,
                    "70k entries need at least 3 levels, got {level}"
                );
            }
        }
    }

    #[test]
    fn unchanged_stretches_share_recipe_chunks() {
        let old = entries(20_000, 1);
        let mut new = old.clone();
        new.insert(10_000, entries(1, 99)[0]);
        let mut a = MapSink::default();
        let mut b = MapSink::default();
        build(&old, &mut a);
        build(&new, &mut b);
        let shared = b
            .chunks
            .keys()
            .filter(|k| a.chunks.contains_key(*k))
            .count();
        // One insertion changes one chunk per level (plus possibly its neighbour).
        assert!(
            b.chunks.len() - shared <= 2 * 4,
            "{} of {} new",
            b.chunks.len() - shared,
            b.chunks.len()
        );
    }

    /// A leaf names the copy it reads: another copy is another leaf. A
    /// copy-0 leaf encodes as a leaf did before copies (a u64 size).
    #[test]
    fn leaf_entries_carry_their_copy() {
        let mut es = entries(3, 1);
        for e in &mut es {
            e.copy = 0;
        }
        let zero = encode(1, &es);
        let mut old = zero[..HEADER_LEN].to_vec();
        for e in &es {
            old.extend_from_slice(&e.fp.0);
            old.extend_from_slice(&e.size.to_le_bytes());
        }
        assert_eq!(zero, old);
        es[1].copy = 7;
        let seven = encode(1, &es);
        assert_ne!(HashAlgo::Blake3.hash(&zero), HashAlgo::Blake3.hash(&seven));
        assert_eq!(decode(&seven, "t").unwrap().entries, es);
        let mut bad = seven.clone();
        bad[HEADER_LEN + ENTRY_LEN + FP_LEN + 7] = 1;
        assert!(decode(&bad, "t").is_err(), "reserved bytes");
    }

    #[test]
    fn decode_rejects_garbage() {
        assert!(decode(b"", "x").is_err());
        assert!(decode(b"TR\x01\x00\0\0\0\0", "x").is_err(), "level 0");
        let mut ok = encode(1, &entries(3, 1));
        ok.pop();
        assert!(decode(&ok, "x").is_err(), "truncated");
        let mut v = encode(1, &[]);
        v[2] = 9;
        assert!(matches!(
            decode(&v, "x"),
            Err(Error::UnsupportedVersion { .. })
        ));
    }

    /// The tree as a plain model cuts it: every level a list of entries,
    /// each chunk encoded by [`encode`] and hashed whole.
    /// Emitted chunks: fingerprint, level, bytes, in order.
    type Emitted = Vec<(Fingerprint, u8, Vec<u8>)>;

    fn model(es: &[RecipeEntry]) -> (Emitted, (RecipeEntry, u8)) {
        fn close(k: usize, levels: &mut [Vec<RecipeEntry>], out: &mut Emitted) -> RecipeEntry {
            let bytes = encode(k as u8 + 1, &levels[k]);
            let fp = HashAlgo::Blake3.hash(&bytes);
            let size = levels[k].iter().map(|e| e.size).sum();
            levels[k].clear();
            out.push((fp, k as u8 + 1, bytes));
            RecipeEntry { fp, size, copy: 0 }
        }
        let mut levels = vec![Vec::new(); MAX_LEVEL as usize + 1];
        let mut emitted = vec![0u64; MAX_LEVEL as usize + 1];
        let mut out = Vec::new();
        for e in es {
            let (mut k, mut e) = (0, *e);
            loop {
                levels[k].push(e);
                if !is_boundary(&e.fp, levels[k].len()) {
                    break;
                }
                e = close(k, &mut levels, &mut out);
                emitted[k] += 1;
                k += 1;
            }
        }
        let mut k = 0;
        let root = loop {
            if emitted[k] == 0 {
                break (close(k, &mut levels, &mut out), k as u8 + 1);
            }
            if levels[k].is_empty()
                && emitted[k] == 1
                && emitted[k + 1] == 0
                && levels[k + 1].len() == 1
            {
                break (levels[k + 1][0], k as u8 + 1);
            }
            if !levels[k].is_empty() {
                let up = close(k, &mut levels, &mut out);
                emitted[k] += 1;
                levels[k + 1].push(up);
            }
            k += 1;
        };
        (out, root)
    }

    #[derive(Default)]
    struct ListSink(Emitted);
    impl RecipeSink for ListSink {
        fn recipe_chunk(&mut self, fp: Fingerprint, level: u8, bytes: &[u8]) -> Result<()> {
            self.0.push((fp, level, bytes.to_vec()));
            Ok(())
        }
    }

    proptest::proptest! {
        /// The builder emits exactly the model's chunks (bytes, levels,
        /// fingerprints, order) and root, and so does a builder answering
        /// leaves from a memo shared over a series of edited versions.
        #[test]
        fn builder_and_memo_agree_with_the_model(
            n in 0usize..6000,
            edits in proptest::collection::vec((0usize..6000, 0usize..40, 0u64..1000), 0..6),
            versions in 1usize..4,
        ) {
            let memo = Arc::new(Mutex::new(LeafMemo::new(HashAlgo::Blake3.into())));
            let mut es = entries(n, 1);
            for v in 0..versions {
                let (want, want_root) = model(&es);
                for with_memo in [false, true] {
                    let mut b = RecipeBuilder::new(HashAlgo::Blake3);
                    if with_memo {
                        memo.lock().unwrap().next_backup();
                        b = b.with_memo(memo.clone());
                    }
                    let mut sink = ListSink::default();
                    for e in &es {
                        b.push(e.fp, e.size as u32, e.copy, &mut sink).unwrap();
                    }
                    let root = b.finish(&mut sink).unwrap();
                    proptest::prop_assert_eq!(&sink.0, &want, "version {} memo {}", v, with_memo);
                    proptest::prop_assert_eq!(root, want_root);
                }
                // The next version: runs replaced by new entries.
                for &(at, run, seed) in &edits {
                    let at = at.min(es.len());
                    let end = (at + run).min(es.len());
                    let fresh = entries(run, 1000 + seed + v as u64);
                    es.splice(at..end, fresh);
                }
            }
            if versions > 1 && n > 2000 {
                proptest::prop_assert!(memo.lock().unwrap().hits > 0);
            }
        }
    }

    #[test]
    fn walker_detects_wrong_level_and_size() {
        let es = entries(3000, 1);
        let mut sink = MapSink::default();
        let (root, level) = build(&es, &mut sink);
        // Claim the root is one level lower than it is.
        assert!(
            RecipeWalker::new(root.fp, level - 1, |fp, _| decode(&sink.chunks[fp], "t")).is_err()
        );
    }
}
