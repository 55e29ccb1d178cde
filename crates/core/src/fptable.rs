//! A compact open-addressing table from fingerprint to `u64`, built for the
//! index's hot path (one probe per chunk reference, 10^8 of them in a scale
//! run).
//!
//! * Entries live once, in insertion order, in two dense arrays (keys and
//!   values): the order is the *insertion log* a repeated stream is checked
//!   against sequentially ([`FpTable::get_seq`]), so the log costs no
//!   second copy of the keys. The arrays grow by an eighth at a time (a large
//!   reallocation remaps pages instead of copying), so little is allocated
//!   beyond the entries.
//! * The hash table holds 8-byte slots: a 32-bit tag of the key's hash and
//!   the entry's position. A probe compares tags and reads the key only on
//!   a tag match, so a miss (a new chunk) costs one cache line. Linear
//!   probing from a home slot taken from the high bits of a multiplicative
//!   hash, so [`FpTable::prefetch`] can fetch the line a later lookup will
//!   need. Deletion shifts the following slots back (no tombstones in the
//!   table) and zeroes the entry's key; the arrays are compacted when half
//!   their entries are dead.
//! * The all-zero fingerprint marks a dead entry; a real all-zero
//!   fingerprint (possible in traces) is kept beside the table.
//! * A large slot array is on transparent huge pages ([`ZeroBuf`]): the
//!   table is far larger than the TLB's reach, and a 4 KiB page walk per
//!   random probe costs as much as the probe.
//!
//! Lookups compare the full 32 bytes: deduplication stays exact. An entry
//! costs 40 bytes plus 8 / load factor (at most 3/4): 51–61 bytes.

use crate::fingerprint::Fingerprint;
use crate::growbuf::GrowBuf;
use crate::zerobuf::ZeroBuf;

type Key = [u64; 4];
const EMPTY: Key = [0; 4];
/// Smallest allocated capacity (slots).
const MIN_CAPACITY: usize = 64;

#[inline]
fn key_of(fp: &Fingerprint) -> Key {
    // One 32-byte load (the same words as u64::from_ne_bytes of each 8
    // bytes): loading word by word and comparing as vectors stalls on
    // store forwarding.
    // SAFETY: 32 readable bytes, and any bytes are valid u64s.
    unsafe { std::ptr::read_unaligned(fp.0.as_ptr().cast::<Key>()) }
}

/// Word-wise comparisons: the key usually sits in registers, and a vector
/// compare would reload it from the stack (a store-forwarding stall).
#[inline(always)]
fn same(a: &Key, b: &Key) -> bool {
    ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0
}

#[inline(always)]
fn vacant(k: &Key) -> bool {
    (k[0] | k[1] | k[2] | k[3]) == 0
}

#[inline]
fn fp_of(k: &Key) -> Fingerprint {
    let mut b = [0u8; 32];
    for (part, w) in b.chunks_exact_mut(8).zip(k) {
        part.copy_from_slice(&w.to_ne_bytes());
    }
    Fingerprint(b)
}

#[inline]
fn hash(k: &Key) -> u64 {
    // Fingerprints are uniformly random (short trace hashes are zero-padded,
    // so fold every word in), and the high bits of the product are well mixed.
    (k[0] ^ k[1].rotate_left(21) ^ k[2].rotate_left(42) ^ k[3].rotate_left(11))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// An empty slot.
const FREE: u64 = 0;

/// Fingerprint → u64 (see the module documentation).
#[derive(Default)]
pub struct FpTable {
    /// Keys in insertion order; removed ones zeroed.
    keys: GrowBuf<Key>,
    vals: GrowBuf<u64>,
    /// tag << 32 | (position + 1); `None` until the first insertion.
    slots: Option<ZeroBuf<u64>>,
    /// 64 − log2(slot count).
    shift: u32,
    /// Live entries in the arrays (the zero fingerprint's excluded).
    len: usize,
    /// The all-zero fingerprint's value.
    zero: Option<u64>,
}

#[inline(always)]
fn tag_of(h: u64) -> u64 {
    h & 0xffff_ffff
}

impl FpTable {
    /// The same as `default()`: every table keeps its insertion order (kept
    /// for the index's callers, which name the order they rely on).
    pub fn with_log() -> Self {
        FpTable::default()
    }

    pub fn len(&self) -> usize {
        self.len + self.zero.is_some() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Allocated slots.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().map_or(0, |s| s.len())
    }

    /// Bytes of the slot array and the entry arrays.
    pub fn memory_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<u64>()
            + self.keys.capacity() * std::mem::size_of::<Key>()
            + self.vals.capacity() * std::mem::size_of::<u64>()
    }

    #[inline]
    fn home(&self, h: u64) -> usize {
        (h >> self.shift) as usize
    }

    /// Hint that `fp` will be looked up soon: start loading its home slot.
    #[inline]
    pub fn prefetch(&self, fp: &Fingerprint) {
        #[cfg(target_arch = "x86_64")]
        if let Some(s) = &self.slots {
            let i = self.home(hash(&key_of(fp)));
            // SAFETY: i < capacity; prefetching never faults.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().add(i).cast::<i8>());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = fp;
    }

    /// Hint that the log entry at `at` will be read soon.
    #[inline]
    pub fn prefetch_log(&self, at: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = self.keys.get(at) {
            // SAFETY: prefetching a valid address never faults.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>((k as *const Key).cast::<i8>());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }

    /// Whether the log has `fp` at position `at` (then
    /// [`get_seq`](Self::get_seq) from there needs no probe).
    #[inline]
    pub fn logged_at(&self, at: usize, fp: &Fingerprint) -> bool {
        let k = key_of(fp);
        !vacant(&k) && self.keys.get(at).is_some_and(|x| same(x, &k))
    }

    /// The value of `fp` if the log has it at position `at` (no probe).
    #[inline]
    pub fn value_logged_at(&self, at: usize, fp: &Fingerprint) -> Option<u64> {
        let k = key_of(fp);
        if vacant(&k) || !self.keys.get(at).is_some_and(|x| same(x, &k)) {
            return None;
        }
        Some(self.vals[at])
    }

    /// Slot holding `k` (Ok) or the free slot ending its probe (Err).
    /// `k` is not zero and the slots exist.
    #[inline]
    fn find(&self, slots: &[u64], k: &Key) -> Result<usize, usize> {
        let mask = slots.len() - 1;
        let h = hash(k);
        let tag = tag_of(h);
        let mut i = self.home(h);
        loop {
            let s = slots[i];
            if s == FREE {
                return Err(i);
            }
            if s >> 32 == tag {
                let at = (s as u32 - 1) as usize;
                // SAFETY-free: positions in slots are always < keys.len().
                if same(&self.keys[at], k) {
                    return Ok(i);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The position in the entry arrays of the entry in slot `i`.
    #[inline(always)]
    fn at(slots: &[u64], i: usize) -> usize {
        (slots[i] as u32 - 1) as usize
    }

    #[inline]
    pub fn get(&self, fp: &Fingerprint) -> Option<u64> {
        let k = key_of(fp);
        if vacant(&k) {
            return self.zero;
        }
        let s = self.slots.as_ref()?.as_slice();
        self.find(s, &k).ok().map(|i| self.vals[Self::at(s, i)])
    }

    #[inline]
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        let k = key_of(fp);
        if vacant(&k) {
            return self.zero.is_some();
        }
        match &self.slots {
            None => false,
            Some(s) => self.find(s.as_slice(), &k).is_ok(),
        }
    }

    /// [`get`](Self::get) for one key of a stream: `cursor` is where the
    /// log is expected to hold the key (the position after the stream's
    /// previous hit). A logged entry is always present in the table
    /// (removal zeroes it), so a match there answers without probing; a
    /// hit elsewhere moves the cursor after it.
    #[inline]
    pub fn get_seq(&self, cursor: &mut usize, fp: &Fingerprint) -> Option<u64> {
        let k = key_of(fp);
        if vacant(&k) {
            return self.zero;
        }
        if self.keys.get(*cursor).is_some_and(|x| same(x, &k)) {
            *cursor += 1;
            return Some(self.vals[*cursor - 1]);
        }
        let s = self.slots.as_ref()?.as_slice();
        let at = Self::at(s, self.find(s, &k).ok()?);
        *cursor = at + 1;
        Some(self.vals[at])
    }

    /// Insert or replace; returns the previous value.
    pub fn insert(&mut self, fp: Fingerprint, v: u64) -> Option<u64> {
        let k = key_of(&fp);
        if vacant(&k) {
            return self.zero.replace(v);
        }
        // At most 3/4 full, so probes stay short.
        if (self.len + 1) * 4 > self.capacity() * 3 {
            self.grow();
        }
        let r = self.find(self.slots.as_ref().expect("grown").as_slice(), &k);
        match r {
            Ok(i) => {
                let at = Self::at(self.slots.as_ref().expect("grown").as_slice(), i);
                Some(std::mem::replace(&mut self.vals[at], v))
            }
            Err(i) => {
                if self.keys.len() >= u32::MAX as usize {
                    // Positions must fit a slot; dead entries may free some.
                    self.compact();
                    assert!(
                        self.keys.len() < u32::MAX as usize,
                        "in-memory index full (2^32 entries): use the on-disk index"
                    );
                    return self.insert(fp, v);
                }
                if self.keys.len() == self.keys.capacity() {
                    // An eighth at a time: a large Vec reallocates by
                    // remapping, and the slack stays small.
                    let more = (self.keys.len() / 8).max(256);
                    self.keys.reserve_exact(more);
                    self.vals.reserve_exact(more);
                }
                let at = self.keys.len();
                self.keys.push(k);
                self.vals.push(v);
                let tag = tag_of(hash(&k));
                self.slots.as_mut().expect("grown").as_mut_slice()[i] = tag << 32 | (at as u64 + 1);
                self.len += 1;
                None
            }
        }
    }

    /// Remove; returns the value.
    pub fn remove(&mut self, fp: &Fingerprint) -> Option<u64> {
        let k = key_of(fp);
        if vacant(&k) {
            return self.zero.take();
        }
        let mut hole = self.find(self.slots.as_ref()?.as_slice(), &k).ok()?;
        let shift = self.shift;
        let keys = &mut self.keys;
        let slots = self.slots.as_mut().expect("present").as_mut_slice();
        let at = Self::at(slots, hole);
        keys[at] = EMPTY;
        let old = self.vals[at];
        self.vals[at] = 0;
        let mask = slots.len() - 1;
        // Backward-shift deletion: move back every later slot of the run
        // whose home does not lie cyclically in (hole, j].
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if slots[j] == FREE {
                break;
            }
            let h = (hash(&keys[Self::at(slots, j)]) >> shift) as usize;
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                slots[hole] = slots[j];
                hole = j;
            }
        }
        slots[hole] = FREE;
        self.len -= 1;
        let dead = self.keys.len() - self.len;
        if dead > 1024 && dead * 2 > self.keys.len() {
            self.compact();
        }
        Some(old)
    }

    /// Drop the dead entries from the arrays and rebuild the slots.
    fn compact(&mut self) {
        let mut n = 0;
        for i in 0..self.keys.len() {
            if !vacant(&self.keys[i]) {
                self.keys[n] = self.keys[i];
                self.vals[n] = self.vals[i];
                n += 1;
            }
        }
        self.keys.truncate(n);
        self.vals.truncate(n);
        self.keys.shrink_to_fit();
        self.vals.shrink_to_fit();
        let cap = self.capacity();
        if cap > 0 {
            self.rebuild(cap);
        }
    }

    /// Remove every entry but keep the allocations: a table refilled to the
    /// same size (the on-disk index's overlay after each flush) neither
    /// regrows nor faults in fresh pages.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.vals.clear();
        if let Some(s) = &mut self.slots {
            s.as_mut_slice().fill(FREE);
        }
        self.len = 0;
        self.zero = None;
    }

    /// Double the slots (or allocate the first ones).
    /// Room for `additional` more entries without growing: a load that
    /// knows a segment's size sizes the slots once instead of doubling
    /// (and rehashing everything) several times on the way.
    pub fn reserve(&mut self, additional: usize) {
        let need = self.len + additional;
        if need * 4 > self.capacity() * 3 {
            let cap = (need * 4).div_ceil(3).next_power_of_two().max(MIN_CAPACITY);
            self.rebuild(cap);
        }
        self.keys.reserve_exact(additional);
        self.vals.reserve_exact(additional);
    }

    /// The memory the table's next inserts write and has not written yet:
    /// the slots, and the entry arrays' room past their entries (see
    /// [`crate::zerobuf::populate`]).
    pub(crate) fn spare(&self) -> Vec<crate::zerobuf::Spare> {
        use crate::zerobuf::Spare;
        let mut out = Vec::new();
        if let Some(s) = &self.slots {
            out.push(Spare::of(s.as_slice()));
        }
        out.push(self.keys.spare());
        out.push(self.vals.spare());
        out
    }

    fn grow(&mut self) {
        self.rebuild((self.capacity() * 2).max(MIN_CAPACITY));
    }

    /// Fresh slots of `cap` entries for every live entry.
    fn rebuild(&mut self, cap: usize) {
        let mut next = ZeroBuf::<u64>::zeroed(cap);
        let shift = 64 - cap.trailing_zeros();
        let s = next.as_mut_slice();
        let mask = cap - 1;
        for (at, k) in self.keys.iter().enumerate() {
            if vacant(k) {
                continue;
            }
            let h = hash(k);
            let mut i = (h >> shift) as usize;
            while s[i] != FREE {
                i = (i + 1) & mask;
            }
            s[i] = tag_of(h) << 32 | (at as u64 + 1);
        }
        self.slots = Some(next);
        self.shift = shift;
    }

    /// Every entry, in insertion order (the zero fingerprint first).
    pub fn iter(&self) -> impl Iterator<Item = (Fingerprint, u64)> + '_ {
        let zero = self.zero.map(|v| (Fingerprint::default(), v));
        let live = self
            .keys
            .iter()
            .zip(self.vals.iter())
            .filter(|(k, _)| !vacant(k))
            .map(|(k, &v)| (fp_of(k), v));
        zero.into_iter().chain(live)
    }
}

/// A table kept in a file (issue 36, `index/kept_table.rs`): its arrays
/// exactly as in memory, each at a page boundary, so an opening maps them
/// instead of building the table. The file: the keys (32 bytes each, in
/// insertion order, zero for a removed entry), zeros to a page boundary,
/// the values (u64), zeros to a page boundary, the slots (u64: the key
/// hash's low 32 bits << 32 | position + 1; 0 empty), all in this
/// machine's byte order. The shape says how many of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableShape {
    /// Entries in the arrays (removed ones included).
    pub entries: u64,
    /// Live entries among them.
    pub live: u64,
    /// Slots (a power of two, or 0 before the first insertion).
    pub slots: u64,
    /// The all-zero fingerprint's value.
    pub zero: Option<u64>,
}

/// What a kept table's bytes depend on besides its shape: the slot hash
/// and encoding, and the byte order. A change to [`hash`] or the slots
/// must change it, so older kept tables are rebuilt, never misread.
#[cfg(target_endian = "little")]
pub const KEPT_FORMAT: &str = "fptable-1-le";
#[cfg(target_endian = "big")]
pub const KEPT_FORMAT: &str = "fptable-1-be";

const PAGE: u64 = 4096;

impl TableShape {
    fn vals_at(&self) -> u64 {
        (self.entries * 32).next_multiple_of(PAGE)
    }
    fn slots_at(&self) -> u64 {
        (self.vals_at() + self.entries * 8).next_multiple_of(PAGE)
    }
    /// The file's length.
    pub fn file_len(&self) -> u64 {
        self.slots_at() + self.slots * 8
    }
    /// Why a shape cannot be a table's (a foreign or damaged description).
    fn check(&self) -> std::result::Result<(), String> {
        let ok = self.live <= self.entries
            && self.entries < u32::MAX as u64
            && if self.slots == 0 {
                self.entries == 0
            } else {
                self.slots.is_power_of_two()
                    && self.slots >= MIN_CAPACITY as u64
                    && self.live * 4 <= self.slots * 3
            };
        match ok {
            true => Ok(()),
            false => Err(format!("not a table's shape: {self:?}")),
        }
    }
}

impl FpTable {
    /// The shape [`write_kept`](Self::write_kept) writes.
    pub(crate) fn shape(&self) -> TableShape {
        TableShape {
            entries: self.keys.len() as u64,
            live: self.len as u64,
            slots: self.capacity() as u64,
            zero: self.zero,
        }
    }

    /// Write the table as a kept file (see [`TableShape`]).
    pub(crate) fn write_kept(&self, w: &mut impl std::io::Write) -> std::io::Result<TableShape> {
        let shape = self.shape();
        let pad = |w: &mut dyn std::io::Write, from: u64, to: u64| {
            w.write_all(&vec![0u8; (to - from) as usize])
        };
        w.write_all(self.keys.as_bytes())?;
        pad(w, shape.entries * 32, shape.vals_at())?;
        w.write_all(self.vals.as_bytes())?;
        pad(w, shape.vals_at() + shape.entries * 8, shape.slots_at())?;
        if let Some(s) = &self.slots {
            // SAFETY: initialized u64s viewed as bytes.
            let b = unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), s.len() * 8) };
            w.write_all(b)?;
        }
        Ok(shape)
    }

    /// The table a kept file holds, mapped privately (see
    /// [`crate::growbuf`]): its pages are read as lookups touch them, and
    /// changes stay in this process. The caller verified the file's
    /// checksums; the shape is checked against the file here.
    #[cfg(unix)]
    pub(crate) fn map_kept(
        file: &std::fs::File,
        shape: &TableShape,
    ) -> std::result::Result<FpTable, String> {
        shape.check()?;
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        if len != shape.file_len() {
            return Err(format!(
                "{len} bytes where its shape needs {}",
                shape.file_len()
            ));
        }
        let entries = shape.entries as usize;
        // Appends before the arrays move to the heap: virtual room only.
        let room = entries / 8 + 1024;
        let io = |e: std::io::Error| format!("cannot map it: {e}");
        let keys = GrowBuf::map_file(file, 0, entries, room).map_err(io)?;
        let vals = GrowBuf::map_file(file, shape.vals_at(), entries, room).map_err(io)?;
        let (slots, shift) = match shape.slots {
            0 => (None, 0),
            n => (
                Some(ZeroBuf::map_file(file, shape.slots_at(), n as usize).map_err(io)?),
                64 - n.trailing_zeros(),
            ),
        };
        Ok(FpTable {
            keys,
            vals,
            slots,
            shift,
            len: shape.live as usize,
            zero: shape.zero,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn fp(i: u64) -> Fingerprint {
        crate::HashAlgo::Blake3.hash(&i.to_le_bytes())
    }

    /// A reserved table takes that many entries without growing, and keeps
    /// what it held.
    #[test]
    fn reserve_sizes_the_slots_once() {
        let mut t = FpTable::default();
        for i in 0..100 {
            t.insert(fp(i), i);
        }
        t.reserve(10_000);
        let cap = t.capacity();
        assert!(cap * 3 >= 10_100 * 4, "{cap}");
        for i in 100..10_100 {
            t.insert(fp(i), i);
        }
        assert_eq!(t.capacity(), cap);
        assert!((0..10_100).all(|i| t.get(&fp(i)) == Some(i)));
    }

    #[test]
    fn matches_a_hash_map_under_random_operations() {
        let mut t = FpTable::default();
        let mut m: HashMap<Fingerprint, u64> = HashMap::new();
        let mut x = 7u64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys (some short, some zero) so operations collide.
            let key = match x % 50 {
                0 => Fingerprint::default(),
                1 => Fingerprint::from_slice(&[(x >> 8) as u8]).unwrap(),
                _ => fp((x >> 8) % 3000),
            };
            match (x >> 40) % 3 {
                0 | 1 => assert_eq!(t.insert(key, step), m.insert(key, step)),
                _ => assert_eq!(t.remove(&key), m.remove(&key)),
            }
            if step % 30_011 == 30_010 {
                // Cleared with its allocations kept, then refilled.
                t.clear();
                m.clear();
                assert!(t.get(&key).is_none() && t.iter().next().is_none());
            }
            assert_eq!(t.len(), m.len());
            if step % 1000 == 0 {
                for (k, v) in &m {
                    assert_eq!(t.get(k), Some(*v));
                }
                let mut all: Vec<_> = t.iter().collect();
                all.sort();
                let mut want: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
                want.sort();
                assert_eq!(all, want);
            }
        }
    }

    #[test]
    fn logged_lookups_agree_with_probes() {
        let mut t = FpTable::with_log();
        let mut x = 11u64;
        let mut cursor = 0usize;
        for step in 0..300_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = if x.is_multiple_of(97) {
                Fingerprint::default()
            } else {
                fp((x >> 8) % 5000)
            };
            match (x >> 40) % 4 {
                0 => {
                    t.insert(key, step);
                }
                1 => {
                    t.remove(&key);
                }
                _ => {
                    // Replay a stretch of the log, then a random key.
                    let seq = fp(step % 5000);
                    assert_eq!(t.get_seq(&mut cursor, &seq), t.get(&seq));
                    assert_eq!(t.get_seq(&mut cursor, &key), t.get(&key));
                }
            }
        }
        // A log replayed in order hits without probing; removal clears its
        // entries, and enough removals compact it.
        let mut t = FpTable::with_log();
        for i in 0..5000 {
            t.insert(fp(i), i);
        }
        for i in (0..5000).filter(|i| i % 3 != 0) {
            t.remove(&fp(i));
        }
        assert!(t.keys.len() < 5000, "compacted");
        let mut c = 0;
        for i in 0..5000 {
            assert!(!t.logged_at(c, &fp(i)) || i % 3 == 0);
            assert_eq!(t.get_seq(&mut c, &fp(i)).is_some(), i % 3 == 0);
        }
        t.compact();
        t.grow();
        let mut c = 0;
        for i in 0..5000 {
            // Compacted: every surviving key follows the previous one.
            assert_eq!(t.logged_at(c, &fp(i)), i % 3 == 0);
            assert_eq!(t.get_seq(&mut c, &fp(i)).is_some(), i % 3 == 0);
        }
    }

    #[test]
    fn large_table_and_clustered_keys() {
        let mut t = FpTable::default();
        // Keys differing only in their last byte share a home slot.
        let n = 300_000u64;
        for i in 0..n {
            let k = if i < 100 {
                let mut b = [9u8; 32];
                b[31] = i as u8;
                Fingerprint(b)
            } else {
                fp(i)
            };
            assert_eq!(t.insert(k, i), None);
            t.prefetch(&k);
        }
        assert_eq!(t.len(), n as usize);
        assert!(t.memory_bytes() >= n as usize * 40);
        // One copy of each key, 8-byte slots, arrays grown by an eighth.
        assert!(t.memory_bytes() <= n as usize * 64, "{}", t.memory_bytes());
        for i in (0..n).step_by(3) {
            assert!(t.remove(&fp(i)).is_some() || i < 100);
        }
        for i in 100..n {
            assert_eq!(t.contains(&fp(i)), i % 3 != 0, "{i}");
            assert_eq!(t.get(&fp(i)), (i % 3 != 0).then_some(i));
        }
        assert!(!t.contains(&Fingerprint::default()));
    }
}
