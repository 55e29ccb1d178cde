//! A compact open-addressing table from fingerprint to `u64`, built for the
//! index's hot path (one probe per chunk reference, 10^8 of them in a scale
//! run).
//!
//! * Keys and values live in two separate arrays: a membership test (all a
//!   backup without rewriting needs) touches only the 32-byte key, which is
//!   32-byte aligned and so never straddles a cache line.
//! * Linear probing from a home slot taken from the high bits of a
//!   multiplicative hash, so [`FpTable::prefetch`] can fetch the line a
//!   later lookup will need, and a lookup that hits its home slot costs one
//!   cache line. Deletion shifts the following entries back (no tombstones).
//! * The all-zero fingerprint marks an empty slot; a real all-zero
//!   fingerprint (possible in traces) is kept beside the table.
//! * Large arrays are anonymous mappings advised to use transparent huge
//!   pages: the table is far larger than the TLB's reach, and a 4 KiB page
//!   walk per random probe costs as much as the probe.
//!
//! Lookups compare the full 32 bytes: deduplication stays exact.

use crate::fingerprint::Fingerprint;
use std::ptr::NonNull;

type Key = [u64; 4];
const EMPTY: Key = [0; 4];
/// Smallest allocated capacity (slots).
const MIN_CAPACITY: usize = 64;
/// Arrays of at least this many bytes are mapped with huge pages.
const MAP_BYTES: usize = 2 << 20;

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

/// A zero-initialized array of `T` (for which all-zero bytes are a valid value).
struct ZeroBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    mapped: bool,
}

// SAFETY: ZeroBuf owns its allocation exclusively, like a Box<[T]>.
unsafe impl<T: Copy + Send> Send for ZeroBuf<T> {}
unsafe impl<T: Copy + Sync> Sync for ZeroBuf<T> {}

impl<T: Copy> ZeroBuf<T> {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len * std::mem::size_of::<T>(), 64).expect("table size")
    }

    /// `len` zeroed elements; `len` must be > 0 and T must be valid as zeros.
    fn zeroed(len: usize) -> Self {
        debug_assert!(len > 0);
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= MAP_BYTES {
            // SAFETY: an anonymous private mapping, checked for failure;
            // the kernel hands it out zero-filled and page aligned.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                #[cfg(target_os = "linux")]
                // SAFETY: advice on the range just mapped; failure is harmless.
                unsafe {
                    libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
                }
                return ZeroBuf {
                    ptr: NonNull::new(p.cast()).expect("mmap returned null"),
                    len,
                    mapped: true,
                };
            }
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(p.cast()) else {
            std::alloc::handle_alloc_error(layout)
        };
        ZeroBuf {
            ptr,
            len,
            mapped: false,
        }
    }

    #[inline]
    fn as_slice(&self) -> &[T] {
        // SAFETY: ptr points to len initialized (zeroed or written) elements.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for ZeroBuf<T> {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: the mapping made in `zeroed`, with its length.
            unsafe {
                libc::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len * std::mem::size_of::<T>(),
                );
            }
        } else {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) }
        }
    }
}

/// The allocated arrays, indexed by slot.
struct Arrays {
    keys: ZeroBuf<Key>,
    vals: ZeroBuf<u64>,
    /// With a log: each entry's position in it.
    pos: Option<ZeroBuf<u32>>,
}

/// Keys in insertion order (removed ones zeroed), for [`FpTable::contains_seq`].
#[derive(Default)]
struct Log {
    keys: Vec<Key>,
    dead: usize,
}

/// Fingerprint → u64 (see the module documentation).
#[derive(Default)]
pub struct FpTable {
    /// `None` until the first insertion.
    slots: Option<Arrays>,
    /// 64 − log2(capacity).
    shift: u32,
    /// Entries in the arrays (the zero fingerprint's excluded).
    len: usize,
    /// The all-zero fingerprint's value.
    zero: Option<u64>,
    log: Option<Log>,
}

impl FpTable {
    /// A table that also logs its keys in insertion order, so a stream that
    /// repeats an earlier one is checked sequentially by
    /// [`contains_seq`](Self::contains_seq) instead of by random probes.
    pub fn with_log() -> Self {
        FpTable {
            log: Some(Log::default()),
            ..FpTable::default()
        }
    }

    pub fn len(&self) -> usize {
        self.len + self.zero.is_some() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Allocated slots.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().map_or(0, |a| a.keys.len)
    }

    /// Bytes of the allocated arrays and the log.
    pub fn memory_bytes(&self) -> usize {
        let per_slot = std::mem::size_of::<Key>()
            + std::mem::size_of::<u64>()
            + if self.log.is_some() { 4 } else { 0 };
        self.capacity() * per_slot
            + self
                .log
                .as_ref()
                .map_or(0, |l| l.keys.capacity() * std::mem::size_of::<Key>())
    }

    #[inline]
    fn home(&self, k: &Key) -> usize {
        (hash(k) >> self.shift) as usize
    }

    /// Hint that `fp` will be looked up soon: start loading its home slot.
    #[inline]
    pub fn prefetch(&self, fp: &Fingerprint) {
        #[cfg(target_arch = "x86_64")]
        if let Some(a) = &self.slots {
            let i = self.home(&key_of(fp));
            // SAFETY: i < capacity; prefetching never faults (the line
            // after the last slot may lie past the array: harmless).
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let p = a.keys.ptr.as_ptr().add(i).cast::<i8>();
                _mm_prefetch::<_MM_HINT_T0>(p);
                // A probe often runs on into the next line.
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = fp;
    }

    /// Hint that the log entry at `at` will be read soon.
    #[inline]
    pub fn prefetch_log(&self, at: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = self.log.as_ref().and_then(|l| l.keys.get(at)) {
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
    /// [`contains_seq`](Self::contains_seq) from there needs no probe).
    #[inline]
    pub fn logged_at(&self, at: usize, fp: &Fingerprint) -> bool {
        let k = key_of(fp);
        !vacant(&k)
            && self
                .log
                .as_ref()
                .is_some_and(|l| l.keys.get(at).is_some_and(|x| same(x, &k)))
    }

    /// Slot holding `k` (Ok) or the empty slot ending its probe (Err).
    /// `k` is not zero.
    #[inline]
    fn find(&self, keys: &[Key], k: &Key) -> Result<usize, usize> {
        let mask = keys.len() - 1;
        let mut i = self.home(k);
        loop {
            let s = &keys[i];
            if same(s, k) {
                return Ok(i);
            }
            if vacant(s) {
                return Err(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub fn get(&self, fp: &Fingerprint) -> Option<u64> {
        let k = key_of(fp);
        if vacant(&k) {
            return self.zero;
        }
        let a = self.slots.as_ref()?;
        self.find(a.keys.as_slice(), &k)
            .ok()
            .map(|i| a.vals.as_slice()[i])
    }

    #[inline]
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        let k = key_of(fp);
        if vacant(&k) {
            return self.zero.is_some();
        }
        match &self.slots {
            None => false,
            Some(a) => self.find(a.keys.as_slice(), &k).is_ok(),
        }
    }

    /// [`contains`](Self::contains) for one key of a stream: `cursor` is
    /// where the log is expected to hold the key (the position after the
    /// stream's previous hit). A logged entry is always present in the table
    /// (removal clears it), so a match there answers without probing; a
    /// hit elsewhere moves the cursor after it.
    #[inline]
    pub fn contains_seq(&self, cursor: &mut usize, fp: &Fingerprint) -> bool {
        let k = key_of(fp);
        if vacant(&k) {
            return self.zero.is_some();
        }
        let Some(a) = &self.slots else {
            return false;
        };
        if let Some(l) = &self.log {
            if l.keys.get(*cursor).is_some_and(|x| same(x, &k)) {
                *cursor += 1;
                return true;
            }
        }
        match self.find(a.keys.as_slice(), &k) {
            Ok(i) => {
                if let Some(pos) = &a.pos {
                    *cursor = pos.as_slice()[i] as usize + 1;
                }
                true
            }
            Err(_) => false,
        }
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
        if self
            .log
            .as_ref()
            .is_some_and(|l| l.keys.len() >= u32::MAX as usize)
        {
            // Positions no longer fit: stop logging (lookups just probe).
            self.log = None;
            if let Some(a) = &mut self.slots {
                a.pos = None;
            }
        }
        let a = self.slots.as_ref().expect("grown");
        let r = self.find(a.keys.as_slice(), &k);
        let a = self.slots.as_mut().expect("grown");
        match r {
            Ok(i) => Some(std::mem::replace(&mut a.vals.as_mut_slice()[i], v)),
            Err(i) => {
                a.keys.as_mut_slice()[i] = k;
                a.vals.as_mut_slice()[i] = v;
                if let (Some(l), Some(pos)) = (&mut self.log, &mut a.pos) {
                    pos.as_mut_slice()[i] = l.keys.len() as u32;
                    l.keys.push(k);
                }
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
        let a = self.slots.as_ref()?;
        let mut hole = self.find(a.keys.as_slice(), &k).ok()?;
        let shift = self.shift;
        let a = self.slots.as_mut().expect("present");
        let (keys, vals) = (a.keys.as_mut_slice(), a.vals.as_mut_slice());
        let mut pos = a.pos.as_mut().map(|p| p.as_mut_slice());
        if let (Some(l), Some(pos)) = (&mut self.log, &pos) {
            l.keys[pos[hole] as usize] = EMPTY;
            l.dead += 1;
        }
        let mask = keys.len() - 1;
        let old = vals[hole];
        // Backward-shift deletion: move back every later entry of the run
        // whose home does not lie cyclically in (hole, j].
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if vacant(&keys[j]) {
                break;
            }
            let h = (hash(&keys[j]) >> shift) as usize;
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                keys[hole] = keys[j];
                vals[hole] = vals[j];
                if let Some(p) = &mut pos {
                    p[hole] = p[j];
                }
                hole = j;
            }
        }
        keys[hole] = EMPTY;
        vals[hole] = 0;
        if let Some(p) = &mut pos {
            p[hole] = 0;
        }
        self.len -= 1;
        if self
            .log
            .as_ref()
            .is_some_and(|l| l.dead > 1024 && l.dead * 2 > l.keys.len())
        {
            self.compact_log();
        }
        Some(old)
    }

    /// Drop the removed keys from the log and renumber the positions.
    fn compact_log(&mut self) {
        let Some(mut l) = self.log.take() else {
            return;
        };
        l.keys.retain(|k| *k != EMPTY);
        l.keys.shrink_to_fit();
        l.dead = 0;
        if let Some(a) = &self.slots {
            let mut fixed = Vec::with_capacity(l.keys.len());
            for (n, k) in l.keys.iter().enumerate() {
                let i = self.find(a.keys.as_slice(), k).expect("logged key present");
                fixed.push((i, n as u32));
            }
            let a = self.slots.as_mut().expect("present");
            if let Some(pos) = &mut a.pos {
                let pos = pos.as_mut_slice();
                for (i, n) in fixed {
                    pos[i] = n;
                }
            }
        }
        self.log = Some(l);
    }

    /// Double the capacity (or allocate the first arrays).
    fn grow(&mut self) {
        let cap = (self.capacity() * 2).max(MIN_CAPACITY);
        let logged = self.log.is_some();
        let mut next = Arrays {
            keys: ZeroBuf::zeroed(cap),
            vals: ZeroBuf::zeroed(cap),
            pos: logged.then(|| ZeroBuf::zeroed(cap)),
        };
        let shift = 64 - cap.trailing_zeros();
        if let Some(old) = self.slots.take() {
            // The home slot is monotonic in the hash, so walking the old
            // slots in order fills the new ones nearly sequentially.
            let (nk, nv) = (next.keys.as_mut_slice(), next.vals.as_mut_slice());
            let mut np = next.pos.as_mut().map(|p| p.as_mut_slice());
            let op = old.pos.as_ref().map(|p| p.as_slice());
            let mask = cap - 1;
            for (j, (k, &v)) in old
                .keys
                .as_slice()
                .iter()
                .zip(old.vals.as_slice())
                .enumerate()
            {
                if vacant(k) {
                    continue;
                }
                let mut i = (hash(k) >> shift) as usize;
                while !vacant(&nk[i]) {
                    i = (i + 1) & mask;
                }
                nk[i] = *k;
                nv[i] = v;
                if let (Some(np), Some(op)) = (&mut np, op) {
                    np[i] = op[j];
                }
            }
        }
        self.slots = Some(next);
        self.shift = shift;
    }

    /// Every entry, in slot order (the zero fingerprint first).
    pub fn iter(&self) -> impl Iterator<Item = (Fingerprint, u64)> + '_ {
        let zero = self.zero.map(|v| (Fingerprint::default(), v));
        let slots = self.slots.iter().flat_map(|a| {
            a.keys
                .as_slice()
                .iter()
                .zip(a.vals.as_slice())
                .filter(|(k, _)| **k != EMPTY)
                .map(|(k, &v)| (fp_of(k), v))
        });
        zero.into_iter().chain(slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn fp(i: u64) -> Fingerprint {
        crate::HashAlgo::Blake3.hash(&i.to_le_bytes())
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
                    assert_eq!(t.contains_seq(&mut cursor, &seq), t.contains(&seq));
                    assert_eq!(t.contains_seq(&mut cursor, &key), t.contains(&key));
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
        assert!(t.log.as_ref().unwrap().keys.len() < 5000, "compacted");
        let mut c = 0;
        for i in 0..5000 {
            assert!(!t.logged_at(c, &fp(i)) || i % 3 == 0);
            assert_eq!(t.contains_seq(&mut c, &fp(i)), i % 3 == 0);
        }
        t.compact_log();
        t.grow();
        let mut c = 0;
        for i in 0..5000 {
            // Compacted: every surviving key follows the previous one.
            assert_eq!(t.logged_at(c, &fp(i)), i % 3 == 0);
            assert_eq!(t.contains_seq(&mut c, &fp(i)), i % 3 == 0);
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
