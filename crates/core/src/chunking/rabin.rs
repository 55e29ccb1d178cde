//! Rabin–Karp rolling-hash chunking over a 48-byte window.
//!
//! The fingerprint of a window `x[0..48]` is the polynomial
//!
//! ```text
//! H = T[x0]·B^47 + T[x1]·B^46 + … + T[x47]·B^0   (mod 2^64)
//! ```
//!
//! with base `B =` [`BASE`] (odd) and `T` a fixed table of 256 pseudo-random
//! 64-bit symbols. Arithmetic modulo 2^64 is what the CPU does for free; the
//! base is odd so that `B^k` is odd for every `k`, which keeps every byte of
//! the window present in the low bits we test (an even base would shift old
//! bytes out of the low bits). Bytes are mapped through `T` before entering
//! the polynomial because the low `k` bits of a plain byte polynomial would
//! depend only on the low `k` bits of each byte (e.g. bit 0 would be the
//! parity of the window), which is poor on text.
//!
//! Sliding the window by one byte is `H' = H·B + T[in] − T[out]·B^48`, with
//! `T[out]·B^48` read from a precomputed table: O(1) per byte.
//! A chunk ends after the first window whose fingerprint satisfies
//! `H & (avg − 1) == MAGIC & (avg − 1)`, at the earliest at `min` bytes,
//! and is cut at `max` otherwise; the expected chunk size is about
//! `min + avg` on random data.
//!
//! The window restarts at every chunk start. Since the fingerprint only
//! depends on the last 48 bytes and `min >= 64 > 48`, the first candidate
//! window is `[min − 48, min)` and nothing before it needs hashing.
//!
//! Speed: rolling one byte is a multiply-add that depends on the previous
//! one, so a single rolling hash is latency-bound (~4 cycles per byte).
//! Because a window's fingerprint depends on nothing but its 48 bytes, the
//! scan instead runs two independent rolling hashes over adjacent
//! [`LANE`]-byte stretches, which doubles the throughput and yields exactly
//! the same cut points as the sequential definition above.
//!
//! [`BASE`], [`MAGIC`] and the seed of `T` are part of the on-disk format
//! (see `tests::rabin_test_vectors`).

use super::chunker::Chunker;

/// Bytes in the sliding window.
pub const WINDOW: usize = 48;

/// Polynomial base: an odd constant with well-mixed bits (2^64 / golden
/// ratio). Any odd value works; this one is fixed forever.
pub const BASE: u64 = 0x9e37_79b9_7f4a_7c15;

/// Candidate positions per lane of the two-lane scan. Longer lanes amortise
/// hashing lane B's first window (48 multiply-adds per block); shorter ones
/// waste less when the cut falls early in lane A (lane B's work is then
/// thrown away, and the scan is no faster than a single chain).
const LANE: usize = 512;

/// Boundary pattern: a chunk ends where the low `log2(avg)` bits of the
/// fingerprint equal the low bits of this arbitrary constant.
pub const MAGIC: u64 = 0x5c3a_97e1_d26b_f04d;

/// Seed of the symbol table `T` (splitmix64 sequence).
const TABLE_SEED: u64 = 0x7465_7373_6572_6121; // "tessera!"

/// splitmix64 output for counter `i`: a tiny, well-known mixer, good enough
/// for a constant table (written without `&mut` so it runs in a `const fn`).
const fn splitmix64(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Symbol table `T`.
const fn in_table() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = splitmix64(TABLE_SEED, i as u64);
        i += 1;
    }
    t
}

/// `T[b]·B^48`: the term a byte carries when it leaves the window (after
/// the multiply by `B` that ages every other byte).
const fn out_table() -> [u64; 256] {
    let mut bw = 1u64;
    let mut k = 0;
    while k < WINDOW {
        bw = bw.wrapping_mul(BASE);
        k += 1;
    }
    let mut t = in_table();
    let mut i = 0;
    while i < 256 {
        t[i] = t[i].wrapping_mul(bw);
        i += 1;
    }
    t
}

/// `T[b] + MAGIC·(B − 1)`, see [`ROLL`].
const fn roll_table() -> [u64; 256] {
    let c = MAGIC.wrapping_mul(BASE.wrapping_sub(1));
    let mut t = in_table();
    let mut i = 0;
    while i < 256 {
        t[i] = t[i].wrapping_add(c);
        i += 1;
    }
    t
}

/// `T`, built at compile time so there is no start-up cost.
pub(super) static IN: [u64; 256] = in_table();
/// `OUT[b] = T[b]·B^48`, likewise precomputed.
static OUT: [u64; 256] = out_table();
/// `ROLL[b] = T[b] + MAGIC·(B − 1)`: the scan tracks `G = H − MAGIC`, for
/// which sliding is `G' = G·B + ROLL[in] − OUT[out]` and the boundary test
/// `H & mask == MAGIC & mask` becomes the cheaper `G & mask == 0`.
static ROLL: [u64; 256] = roll_table();

/// Rabin–Karp content-defined chunker.
#[derive(Clone, Debug)]
pub struct Rabin {
    min: usize,
    max: usize,
    mask: u64,
}

impl Rabin {
    /// `64 <= min <= avg <= max`, `avg` a power of two (as checked by
    /// `ChunkerConfig::validate`); `min > WINDOW` lets the first window fit.
    pub fn new(min: usize, avg: usize, max: usize) -> Self {
        assert!(
            min >= 64 && min <= avg && avg <= max && avg.is_power_of_two(),
            "invalid Rabin sizes {min}/{avg}/{max}"
        );
        Rabin {
            min,
            max,
            mask: avg as u64 - 1,
        }
    }
}

/// `G = H − MAGIC` of a whole window, computed from scratch.
#[inline]
fn window_g(w: &[u8]) -> u64 {
    w.iter()
        .fold(0u64, |h, &b| {
            h.wrapping_mul(BASE).wrapping_add(IN[b as usize])
        })
        .wrapping_sub(MAGIC)
}

/// Slide `G` by one byte: `a` enters, `o` (48 bytes earlier) leaves.
#[inline(always)]
fn roll(g: u64, a: u8, o: u8) -> u64 {
    g.wrapping_mul(BASE)
        .wrapping_add(ROLL[a as usize].wrapping_sub(OUT[o as usize]))
}

/// Sequential scan: `g` is the state at position `pos`; `incoming[i]` enters
/// and `outgoing[i]` leaves for candidate `pos + i + 1`. Returns the first
/// boundary. Zipping equal-length slices keeps it free of bounds checks.
#[inline(always)]
fn scan(mut g: u64, mask: u64, incoming: &[u8], outgoing: &[u8], pos: usize) -> Option<usize> {
    for (i, (&a, &o)) in incoming.iter().zip(outgoing).enumerate() {
        g = roll(g, a, o);
        if g & mask == 0 {
            return Some(pos + i + 1);
        }
    }
    None
}

impl Chunker for Rabin {
    fn cut(&self, data: &[u8], eof: bool) -> usize {
        debug_assert!(!data.is_empty());
        debug_assert!(eof || data.len() >= self.max);
        let (min, mask) = (self.min, self.mask);
        if data.len() <= min {
            return data.len();
        }
        let end = data.len().min(self.max);

        // Invariant: `g` is the state of the window ending at `pos` (a
        // chunk of length `pos`), and no candidate in `min..=pos` matched.
        let mut pos = min;
        let mut g = window_g(&data[pos - WINDOW..pos]);
        if g & mask == 0 {
            return pos;
        }
        // Blocks of two lanes: lane A covers candidates pos+1 ..= pos+LANE,
        // lane B the next LANE, starting from its own freshly hashed window.
        // The two hash chains are independent, so the CPU overlaps them.
        while end - pos >= 2 * LANE {
            let mut gb = window_g(&data[pos + LANE - WINDOW..pos + LANE]);
            let a_in = &data[pos..pos + LANE];
            let a_out = &data[pos - WINDOW..pos + LANE - WINDOW];
            let b_in = &data[pos + LANE..pos + 2 * LANE];
            let b_out = &data[pos + LANE - WINDOW..pos + 2 * LANE - WINDOW];
            let lanes = a_in.iter().zip(a_out).zip(b_in.iter().zip(b_out));
            for (i, ((&ai, &ao), (&bi, &bo))) in lanes.enumerate() {
                g = roll(g, ai, ao);
                if g & mask == 0 {
                    return pos + i + 1;
                }
                gb = roll(gb, bi, bo);
                if gb & mask == 0 {
                    // Lane A's remaining candidates come first.
                    let rest = i + 1;
                    return scan(g, mask, &a_in[rest..], &a_out[rest..], pos + rest)
                        .unwrap_or(pos + LANE + i + 1);
                }
            }
            g = gb;
            pos += 2 * LANE;
        }
        scan(
            g,
            mask,
            &data[pos..end],
            &data[pos - WINDOW..end - WINDOW],
            pos,
        )
        .unwrap_or(end)
    }

    fn max_size(&self) -> usize {
        self.max
    }
}
