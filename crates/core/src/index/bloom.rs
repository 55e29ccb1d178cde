//! The on-disk index's summary vector (DDFS): a Bloom filter over every data
//! fingerprint indexed, so a chunk it has never seen is known new without
//! touching the disk. Blocked: the bits of one key lie in one 64-byte block
//! (one cache line per query), at 12 bits per key when full (~0.5 % false
//! positives, each costing a probe of every run, never a wrong answer: at 8
//! bits per key the ~3 % of new chunks probed dominated the disk index's
//! run searches on a version series).
//!
//! Keys are only added: a removed fingerprint stays a (harmless) false
//! positive until the filter is rebuilt from the runs.
//!
//! **Kept in pieces** (issue 36): the filter is cut into [`PIECE_WORDS`]
//! pieces. A kept run set stores them in piece files; a filter taken up
//! from one loads each piece the first time a query or insert touches it
//! (a [`PieceLoader`], which verifies it), so an opening reads a few
//! pieces, not the whole filter (~1 GB at 305 M keys); and a save writes
//! only the pieces changed since the filter was loaded or last saved
//! ([`Bloom::dirty`]).

use crate::fingerprint::Fingerprint;
use crate::zerobuf::ZeroBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bits set per key.
const K: u32 = 7;
/// Bits per key at the filter's capacity.
pub const BITS_PER_KEY: usize = 12;
/// Words (u64) per piece: 64 KiB, a page-cache read of a few microseconds.
pub const PIECE_WORDS: usize = 8192;

/// Where a kept filter's pieces come from: fills `into` (the piece's
/// words) with piece `piece`, verified, or says why it cannot.
pub trait PieceLoader: Send + Sync {
    fn load(&self, piece: usize, into: &mut [u64]) -> Result<(), super::blocksum::Damage>;
}

/// One file of a kept filter's pieces (see `super::runset`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PieceFile {
    pub name: String,
    pub len: u64,
    /// XXH3-128 of its trailer (the XXH3-64 of each piece it holds).
    pub sums: [u8; 16],
    /// The pieces it holds, as ascending half-open ranges, stored in that
    /// order.
    pub ranges: Vec<(u32, u32)>,
}

/// Where a kept filter lies: its capacity and its piece files, oldest
/// first (a piece is in the last file holding it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptBloom {
    pub capacity: usize,
    pub files: Vec<PieceFile>,
}

impl KeptBloom {
    /// For each piece of a filter of `pieces`, the (file, position in the
    /// file) holding it, if every piece is held.
    pub fn places(&self, pieces: usize) -> Option<Vec<(u32, u32)>> {
        let mut at = vec![(u32::MAX, 0u32); pieces];
        for (f, file) in self.files.iter().enumerate() {
            let mut slot = 0u32;
            for &(a, b) in &file.ranges {
                if a > b || b as usize > pieces {
                    return None;
                }
                for p in a..b {
                    at[p as usize] = (f as u32, slot);
                    slot += 1;
                }
            }
        }
        at.iter().all(|p| p.0 != u32::MAX).then_some(at)
    }
}

/// Pieces of a taken-up filter not loaded yet.
struct Lazy {
    loader: Arc<dyn PieceLoader>,
    /// One bit per piece, set once its words are in place.
    loaded: Box<[AtomicU64]>,
    /// Every piece loaded: queries skip the bit test.
    all: AtomicBool,
    left: AtomicU64,
    /// Loads through `&self` take it: one writer of the words at a time.
    lock: Mutex<()>,
}

pub struct Bloom {
    /// 8 words (512 bits) per block; on huge pages when large (each query
    /// is a random access: with 4 KiB pages, a page walk each).
    words: ZeroBuf<u64>,
    blocks: u64,
    /// Keys it is sized for.
    capacity: usize,
    /// Set for a filter taken up from a kept run set.
    lazy: Option<Lazy>,
    /// One bit per piece changed since the filter was loaded or saved.
    dirty: Vec<u64>,
    /// Where its clean pieces are kept, if anywhere.
    kept: Option<KeptBloom>,
}

#[inline]
fn hashes(fp: &Fingerprint) -> (u64, u64) {
    let w = |i: usize| u64::from_le_bytes(fp.0[i * 8..i * 8 + 8].try_into().unwrap());
    // Short trace fingerprints are zero-padded: fold every word in.
    let a = (w(0) ^ w(1).rotate_left(23) ^ w(2).rotate_left(41) ^ w(3).rotate_left(7))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let b = (a ^ (a >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (a, b ^ (b >> 32))
}

impl Bloom {
    /// A filter for `capacity` keys at [`BITS_PER_KEY`].
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1024);
        let blocks = (capacity * BITS_PER_KEY).div_ceil(512) as u64;
        let words = blocks as usize * 8;
        let pieces = words.div_ceil(PIECE_WORDS);
        let mut dirty = vec![0u64; pieces.div_ceil(64)];
        for p in 0..pieces {
            dirty[p / 64] |= 1 << (p % 64);
        }
        Bloom {
            words: ZeroBuf::zeroed(words),
            blocks,
            capacity,
            lazy: None,
            dirty,
            kept: None,
        }
    }

    /// A filter for `capacity` keys kept as `kept`, its pieces loaded by
    /// `loader` as they are first touched; nothing is read here.
    pub fn adopt(kept: KeptBloom, loader: Arc<dyn PieceLoader>) -> Self {
        let mut b = Bloom::new(kept.capacity);
        b.dirty.iter_mut().for_each(|w| *w = 0);
        let pieces = b.pieces();
        b.lazy = Some(Lazy {
            loader,
            loaded: (0..pieces.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            all: AtomicBool::new(pieces == 0),
            left: AtomicU64::new(pieces as u64),
            lock: Mutex::new(()),
        });
        b.kept = Some(kept);
        b
    }

    /// Pieces of [`PIECE_WORDS`] it has (the last may be short).
    pub fn pieces(&self) -> usize {
        self.words.len().div_ceil(PIECE_WORDS)
    }

    /// Where its clean pieces are kept (`None`: nowhere yet).
    pub fn kept(&self) -> Option<&KeptBloom> {
        self.kept.as_ref()
    }

    /// Whether piece `p` changed since the filter was loaded or saved.
    pub fn is_dirty(&self, p: usize) -> bool {
        self.dirty[p / 64] & (1 << (p % 64)) != 0
    }

    /// Piece `p`'s words (loaded first if need be).
    pub fn piece(&self, p: usize) -> &[u64] {
        let from = p * PIECE_WORDS;
        let to = (from + PIECE_WORDS).min(self.words.len());
        self.ensure(from);
        // SAFETY: in bounds; the piece is loaded, and written only through
        // `&mut self` from now on.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().add(from), to - from) }
    }

    /// After a save: its pieces are kept as `kept`, none dirty.
    pub fn saved(&mut self, kept: KeptBloom) {
        self.kept = Some(kept);
        self.dirty.iter_mut().for_each(|w| *w = 0);
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// The bytes a filter for `capacity` keys takes (before building it).
    pub fn bytes_for(capacity: usize) -> usize {
        (capacity.max(1024) * BITS_PER_KEY).div_ceil(512) * 64
    }

    #[inline]
    fn block(&self, a: u64) -> usize {
        ((a as u128 * self.blocks as u128) >> 64) as usize * 8
    }

    /// Make sure the piece holding word `at` is loaded (a filter taken up
    /// from a kept set: the first touch of each piece reads it).
    #[inline(always)]
    fn ensure(&self, at: usize) {
        if let Some(l) = &self.lazy {
            if !l.all.load(Ordering::Acquire) {
                self.load_piece(l, at / PIECE_WORDS);
            }
        }
    }

    #[inline(never)]
    fn load_piece(&self, l: &Lazy, p: usize) {
        let bit = 1u64 << (p % 64);
        if l.loaded[p / 64].load(Ordering::Acquire) & bit != 0 {
            return;
        }
        let _one = l.lock.lock().unwrap_or_else(|e| e.into_inner());
        if l.loaded[p / 64].load(Ordering::Acquire) & bit != 0 {
            return;
        }
        let from = p * PIECE_WORDS;
        let to = (from + PIECE_WORDS).min(self.words.len());
        let mut piece = vec![0u64; to - from];
        if let Err(d) = l.loader.load(p, &mut piece) {
            d.fail();
        }
        // SAFETY: in bounds; no reader touches this piece's words before
        // its bit is set (below, with Release), and the lock makes this the
        // only writer; words are read through raw pointers, never a slice
        // spanning a piece being loaded.
        unsafe {
            let dst = self.words.as_ptr().add(from).cast_mut();
            std::ptr::copy_nonoverlapping(piece.as_ptr(), dst, piece.len());
        }
        l.loaded[p / 64].fetch_or(bit, Ordering::Release);
        if l.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            l.all.store(true, Ordering::Release);
        }
    }

    /// Every piece loaded (a save rewriting the whole filter).
    pub fn load_all(&self) {
        for p in 0..self.pieces() {
            self.ensure(p * PIECE_WORDS);
        }
    }

    pub fn insert(&mut self, fp: &Fingerprint) {
        let (a, b) = hashes(fp);
        let at = self.block(a);
        self.set(at, b);
    }

    /// Insert every key of `keys`, each block prefetched a few keys ahead
    /// (a rebuild's inserts are independent cache misses: overlapped, they
    /// cost a fraction of one each).
    pub fn insert_all(&mut self, keys: impl Iterator<Item = Fingerprint>) {
        const AHEAD: usize = 16;
        let mut ring = [(0usize, 0u64); AHEAD];
        let mut n = 0usize;
        for fp in keys {
            let (a, b) = hashes(&fp);
            let at = self.block(a);
            self.prefetch_block(at);
            let slot = &mut ring[n % AHEAD];
            if n >= AHEAD {
                let (pat, pb) = *slot;
                self.set(pat, pb);
            }
            *slot = (at, b);
            n += 1;
        }
        for i in n.saturating_sub(AHEAD)..n {
            let (at, b) = ring[i % AHEAD];
            self.set(at, b);
        }
    }

    #[inline]
    fn set(&mut self, at: usize, mut b: u64) {
        self.ensure(at);
        let p = at / PIECE_WORDS;
        self.dirty[p / 64] |= 1 << (p % 64);
        let words = self.words.as_mut_slice();
        for _ in 0..K {
            let bit = (b & 511) as usize;
            words[at + bit / 64] |= 1 << (bit % 64);
            b >>= 9;
        }
    }

    #[inline]
    fn prefetch_block(&self, at: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an in-bounds address; prefetching never faults.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.words.as_ptr().add(at).cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }

    /// False: certainly never inserted.
    #[inline]
    pub fn may_contain(&self, fp: &Fingerprint) -> bool {
        let (a, mut b) = hashes(fp);
        let at = self.block(a);
        self.ensure(at);
        let w = self.words.as_ptr();
        let mut all = true;
        for _ in 0..K {
            let bit = (b & 511) as usize;
            // SAFETY: `at` is a block's first word and `bit / 64` < 8; the
            // piece is loaded (raw reads: see `load_piece`).
            all &= unsafe { *w.add(at + bit / 64) } & (1 << (bit % 64)) != 0;
            b >>= 9;
        }
        all
    }

    /// Hint that `fp` will be queried soon.
    #[inline]
    pub fn prefetch(&self, fp: &Fingerprint) {
        self.prefetch_block(self.block(hashes(fp).0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashAlgo;

    /// The prefetching bulk insert sets exactly the bits of one-by-one
    /// inserts, for fewer keys than its look-ahead and for many more.
    #[test]
    fn insert_all_equals_inserts() {
        for n in [0u32, 5, 16, 17, 5000] {
            let keys: Vec<Fingerprint> = (0..n)
                .map(|i| HashAlgo::Blake3.hash(&i.to_le_bytes()))
                .collect();
            let mut one = Bloom::new(4096);
            keys.iter().for_each(|k| one.insert(k));
            let mut bulk = Bloom::new(4096);
            bulk.insert_all(keys.iter().copied());
            assert!(one.words.as_slice() == bulk.words.as_slice(), "{n} keys");
        }
    }

    /// Pieces served from memory, counting loads; piece `bad` is damaged.
    struct Pieces {
        words: Vec<u64>,
        bad: usize,
        loads: std::sync::atomic::AtomicUsize,
    }

    impl PieceLoader for Pieces {
        fn load(&self, p: usize, into: &mut [u64]) -> Result<(), super::super::blocksum::Damage> {
            self.loads.fetch_add(1, Ordering::Relaxed);
            if p == self.bad {
                return Err(super::super::blocksum::Damage {
                    file: "bloom-test".into(),
                    what: format!("piece {p} checksum mismatch"),
                    state: None,
                });
            }
            into.copy_from_slice(&self.words[p * PIECE_WORDS..p * PIECE_WORDS + into.len()]);
            Ok(())
        }
    }

    /// A filter taken up from kept pieces answers as the one kept, loading
    /// a piece only when a query or insert first touches it, once; only
    /// pieces inserted into since are dirty; a damaged piece is never
    /// answered from (a query touching it panics).
    #[test]
    fn kept_pieces_load_on_first_touch_and_only_changes_are_dirty() {
        let n = 200_000u32;
        let key = |i: u32| HashAlgo::Blake3.hash(&i.to_le_bytes());
        let mut full = Bloom::new(n as usize);
        assert!(full.pieces() > 4, "{} pieces", full.pieces());
        assert!(
            (0..full.pieces()).all(|p| full.is_dirty(p)),
            "a new filter is unsaved"
        );
        full.insert_all((0..n).map(key));
        let kept = KeptBloom {
            capacity: full.capacity(),
            files: Vec::new(),
        };
        let pieces = Arc::new(Pieces {
            words: full.words.as_slice().to_vec(),
            bad: usize::MAX,
            loads: Default::default(),
        });
        let mut b = Bloom::adopt(kept.clone(), pieces.clone());
        assert_eq!(b.pieces(), full.pieces());
        assert_eq!(
            pieces.loads.load(Ordering::Relaxed),
            0,
            "nothing read at adoption"
        );
        assert!(b.may_contain(&key(7)));
        assert_eq!(pieces.loads.load(Ordering::Relaxed), 1);
        assert!((0..b.pieces()).all(|p| !b.is_dirty(p)));
        for i in 0..n {
            assert!(b.may_contain(&key(i)), "{i}");
        }
        for i in n..2 * n {
            assert_eq!(b.may_contain(&key(i)), full.may_contain(&key(i)), "{i}");
        }
        assert_eq!(
            pieces.loads.load(Ordering::Relaxed),
            b.pieces(),
            "each piece once"
        );
        b.insert(&key(2 * n));
        let dirty: Vec<usize> = (0..b.pieces()).filter(|&p| b.is_dirty(p)).collect();
        assert_eq!(dirty.len(), 1);
        b.saved(kept.clone());
        assert!((0..b.pieces()).all(|p| !b.is_dirty(p)));

        let bad = Arc::new(Pieces {
            words: full.words.as_slice().to_vec(),
            bad: 2,
            loads: Default::default(),
        });
        let b = Bloom::adopt(kept, bad);
        let answers = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (0..n).filter(|&i| b.may_contain(&key(i))).count()
        }));
        let e = answers.unwrap_err();
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("piece 2 checksum mismatch"), "{msg}");
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let n = 100_000u32;
        let mut b = Bloom::new(n as usize);
        for i in 0..n {
            b.insert(&HashAlgo::Blake3.hash(&i.to_le_bytes()));
        }
        for i in 0..n {
            assert!(b.may_contain(&HashAlgo::Blake3.hash(&i.to_le_bytes())));
        }
        let fp = (n..2 * n)
            .filter(|i| b.may_contain(&HashAlgo::Blake3.hash(&i.to_le_bytes())))
            .count();
        // ~2.5 % expected for a blocked filter at 8 bits per key.
        assert!(fp < n as usize / 25, "{fp} false positives");
        assert!(b.memory_bytes() <= n as usize * BITS_PER_KEY / 8 + 64);
        assert_eq!(b.memory_bytes(), Bloom::bytes_for(n as usize));
        // Short (zero-padded) fingerprints spread as well.
        let mut s = Bloom::new(n as usize);
        for i in 0..n {
            s.insert(&crate::Fingerprint::from_slice(&i.to_be_bytes()).unwrap());
        }
        let fp = (n..2 * n)
            .filter(|i| s.may_contain(&crate::Fingerprint::from_slice(&i.to_be_bytes()).unwrap()))
            .count();
        assert!(fp < n as usize / 25, "{fp} false positives (short keys)");
    }
}
