//! FastCDC (Xia et al., 2016/2020) with normalized chunking, level 2.
//!
//! This wraps the `fastcdc` crate's slice-level cut function
//! ([`fastcdc::v2020::cut`]) instead of re-implementing the Gear loop: it
//! already takes a slice that starts at a chunk boundary, allocates nothing,
//! reads at most `max` bytes, and rolls two bytes per step as in the 2020
//! paper. Its Gear table (MD5-derived, seed 0) and its mask table (the
//! reference C implementation's evenly spread masks) are therefore part of
//! our on-disk format; `tests::fastcdc_test_vectors` pins the resulting
//! boundaries so a crate upgrade cannot silently change them.
//!
//! The crate wants even sizes and only has masks for averages of 128 B to
//! 8 MiB at level 2, while our config accepts any `64 <= min <= avg <= max <=
//! 16 MiB` with a power-of-two `avg`; [`FastCdc::new`] bridges the gap (see
//! there). For even sizes and `avg` in that range the boundaries are exactly
//! those of `fastcdc::v2020::FastCDC::with_level(.., Normalization::Level2)`.

use fastcdc::v2020::{self, Normalization, MASKS};

use super::chunker::Chunker;

/// Normalization level: the strict mask has `log2(avg) + 2` one-bits, the
/// loose one `log2(avg) - 2`, which concentrates chunk sizes around `avg`.
const LEVEL: Normalization = Normalization::Level2;

/// FastCDC chunker: Gear rolling hash, no hashing of the first `min` bytes,
/// strict mask before `avg`, loose mask after, forced cut at `max`.
#[derive(Clone, Debug)]
pub struct FastCdc {
    /// `min` rounded up to even: the crate scans in byte pairs from here.
    min_even: usize,
    avg: usize,
    /// `max` rounded down to even, for the same reason.
    max_even: usize,
    max: usize,
    mask_s: u64,
    mask_l: u64,
}

impl FastCdc {
    /// `min <= avg <= max`, `avg` a power of two, `min >= 64`, `max <= 16 MiB`
    /// (as checked by `ChunkerConfig::validate`).
    ///
    /// The crate tests cut candidates in pairs starting at an even offset, so
    /// an odd `min` is rounded up (the first candidate is `min + 1`) and an
    /// odd `max` is handled by cutting at `max` when the crate reports
    /// "nothing found up to `max - 1`". Because `avg` is an even power of
    /// two, the rounded sizes still satisfy `min_even <= avg <= max_even`.
    pub fn new(min: usize, avg: usize, max: usize) -> Self {
        assert!(
            min >= 64 && min <= avg && avg <= max && avg.is_power_of_two() && max <= 1 << 24,
            "invalid FastCDC sizes {min}/{avg}/{max}"
        );
        let (mask_s, mask_l) = masks(avg);
        FastCdc {
            min_even: min + (min & 1),
            avg,
            max_even: max & !1,
            max,
            mask_s,
            mask_l,
        }
    }
}

/// Strict and loose masks for `avg`. Inside the crate's table range this is
/// exactly `select_masks(avg, Level2)`; the two sizes it cannot serve are
/// clamped to the nearest usable entry: `avg = 64` gets the 5-bit mask after
/// the average (the table's 4-bit slot is a zero mask, which would cut at the
/// first byte past `avg`), and `avg = 16 MiB` forces `max = avg`, so its
/// loose mask is never used and its strict mask takes the last entry.
pub(super) fn masks(avg: usize) -> (u64, u64) {
    let bits = avg.trailing_zeros() as usize; // exact log2: avg is a power of two
    let level = LEVEL.bits() as usize;
    if bits >= 5 + level && bits + level < MASKS.len() {
        v2020::select_masks(avg, LEVEL)
    } else {
        let strict = (bits + level).min(MASKS.len() - 1);
        let loose = bits.saturating_sub(level).max(5);
        (MASKS[strict], MASKS[loose])
    }
}

impl Chunker for FastCdc {
    #[inline]
    fn cut(&self, data: &[u8], eof: bool) -> usize {
        debug_assert!(!data.is_empty());
        debug_assert!(eof || data.len() >= self.max);
        let (_hash, n) = v2020::cut(
            data,
            self.min_even,
            self.avg,
            self.max_even,
            self.mask_s,
            self.mask_l,
            self.mask_s << 1,
            self.mask_l << 1,
        );
        // `n == max_even` means no cut point before `max_even` (or the data
        // ends there); with an odd `max` the forced cut belongs at `max`.
        if n == self.max_even {
            data.len().min(self.max)
        } else {
            n
        }
    }

    fn max_size(&self) -> usize {
        self.max
    }
}
