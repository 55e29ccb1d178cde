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
    let b = &fp.0;
    [
        u64::from_ne_bytes(b[0..8].try_into().unwrap()),
        u64::from_ne_bytes(b[8..16].try_into().unwrap()),
        u64::from_ne_bytes(b[16..24].try_into().unwrap()),
        u64::from_ne_bytes(b[24..32].try_into().unwrap()),
    ]
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

/// Fingerprint → u64 (see the module documentation).
#[derive(Default)]
pub struct FpTable {
    /// Keys and values; `None` until the first insertion.
    slots: Option<(ZeroBuf<Key>, ZeroBuf<u64>)>,
    /// 64 − log2(capacity).
    shift: u32,
    /// Entries in the arrays (the zero fingerprint's excluded).
    len: usize,
    /// The all-zero fingerprint's value.
    zero: Option<u64>,
}

impl FpTable {
    pub fn len(&self) -> usize {
        self.len + self.zero.is_some() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Allocated slots.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().map_or(0, |(k, _)| k.len)
    }

    /// Bytes of the allocated arrays.
    pub fn memory_bytes(&self) -> usize {
        self.capacity() * (std::mem::size_of::<Key>() + std::mem::size_of::<u64>())
    }

    #[inline]
    fn home(&self, k: &Key) -> usize {
        (hash(k) >> self.shift) as usize
    }

    /// Hint that `fp` will be looked up soon: start loading its home slot.
    #[inline]
    pub fn prefetch(&self, fp: &Fingerprint) {
        #[cfg(target_arch = "x86_64")]
        if let Some((keys, _)) = &self.slots {
            let i = self.home(&key_of(fp));
            // SAFETY: i < capacity; prefetching never faults (the line
            // after the last slot may lie past the array: harmless).
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let p = keys.ptr.as_ptr().add(i).cast::<i8>();
                _mm_prefetch::<_MM_HINT_T0>(p);
                // A probe often runs on into the next line.
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = fp;
    }

    /// Slot holding `k` (Ok) or the empty slot ending its probe (Err).
    /// `k` is not zero and the arrays exist.
    #[inline]
    fn find(&self, keys: &[Key], k: &Key) -> Result<usize, usize> {
        let mask = keys.len() - 1;
        let mut i = self.home(k);
        loop {
            let s = &keys[i];
            if s == k {
                return Ok(i);
            }
            if *s == EMPTY {
                return Err(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub fn get(&self, fp: &Fingerprint) -> Option<u64> {
        let k = key_of(fp);
        if k == EMPTY {
            return self.zero;
        }
        let (keys, vals) = self.slots.as_ref()?;
        self.find(keys.as_slice(), &k)
            .ok()
            .map(|i| vals.as_slice()[i])
    }

    #[inline]
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        let k = key_of(fp);
        if k == EMPTY {
            return self.zero.is_some();
        }
        match &self.slots {
            None => false,
            Some((keys, _)) => self.find(keys.as_slice(), &k).is_ok(),
        }
    }

    /// Insert or replace; returns the previous value.
    pub fn insert(&mut self, fp: Fingerprint, v: u64) -> Option<u64> {
        let k = key_of(&fp);
        if k == EMPTY {
            return self.zero.replace(v);
        }
        // At most 3/4 full, so probes stay short.
        if (self.len + 1) * 4 > self.capacity() * 3 {
            self.grow();
        }
        let (keys, _) = self.slots.as_ref().expect("grown");
        let r = self.find(keys.as_slice(), &k);
        let (keys, vals) = self.slots.as_mut().expect("grown");
        match r {
            Ok(i) => Some(std::mem::replace(&mut vals.as_mut_slice()[i], v)),
            Err(i) => {
                keys.as_mut_slice()[i] = k;
                vals.as_mut_slice()[i] = v;
                self.len += 1;
                None
            }
        }
    }

    /// Remove; returns the value.
    pub fn remove(&mut self, fp: &Fingerprint) -> Option<u64> {
        let k = key_of(fp);
        if k == EMPTY {
            return self.zero.take();
        }
        let (keys, _) = self.slots.as_ref()?;
        let mut hole = self.find(keys.as_slice(), &k).ok()?;
        let shift = self.shift;
        let (keys, vals) = self.slots.as_mut().expect("present");
        let (keys, vals) = (keys.as_mut_slice(), vals.as_mut_slice());
        let mask = keys.len() - 1;
        let old = vals[hole];
        // Backward-shift deletion: move back every later entry of the run
        // whose home does not lie cyclically in (hole, j].
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if keys[j] == EMPTY {
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
                hole = j;
            }
        }
        keys[hole] = EMPTY;
        vals[hole] = 0;
        self.len -= 1;
        Some(old)
    }

    /// Double the capacity (or allocate the first arrays).
    fn grow(&mut self) {
        let cap = (self.capacity() * 2).max(MIN_CAPACITY);
        let mut next = FpTable {
            slots: Some((ZeroBuf::zeroed(cap), ZeroBuf::zeroed(cap))),
            shift: 64 - cap.trailing_zeros(),
            len: 0,
            zero: self.zero,
        };
        if let Some((keys, vals)) = self.slots.take() {
            // The home slot is monotonic in the hash, so walking the old
            // slots in order fills the new ones nearly sequentially.
            let (nk, nv) = next.slots.as_mut().expect("allocated");
            let (nk, nv) = (nk.as_mut_slice(), nv.as_mut_slice());
            let mask = cap - 1;
            for (k, &v) in keys.as_slice().iter().zip(vals.as_slice()) {
                if *k == EMPTY {
                    continue;
                }
                let mut i = (hash(k) >> next.shift) as usize;
                while nk[i] != EMPTY {
                    i = (i + 1) & mask;
                }
                nk[i] = *k;
                nv[i] = v;
            }
            next.len = self.len;
        }
        *self = next;
    }

    /// Every entry, in slot order (the zero fingerprint first).
    pub fn iter(&self) -> impl Iterator<Item = (Fingerprint, u64)> + '_ {
        let zero = self.zero.map(|v| (Fingerprint::default(), v));
        let slots = self.slots.iter().flat_map(|(keys, vals)| {
            keys.as_slice()
                .iter()
                .zip(vals.as_slice())
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
