//! Chunker tests: contract, stream/whole equivalence, size statistics,
//! the content-defined property, and pinned boundaries (on-disk format).

use std::collections::HashSet;
use std::time::Instant;

use proptest::prelude::*;

use super::rabin::{BASE, IN, MAGIC, WINDOW};
use super::{chunk_all, Chunker, ChunkerConfig, FastCdc, FixedSize, Rabin};

/// splitmix64: cheap deterministic test data, independent of any crate.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Test data of different character: random, all zeros (never matches or
/// always matches), and a 4-letter alphabet (low entropy, text-like).
fn test_data(kind: u8, seed: u64, len: usize) -> Vec<u8> {
    let mut d = random_bytes(seed, len);
    match kind {
        0 => {}
        1 => d.iter_mut().for_each(|b| *b = 0),
        _ => d.iter_mut().for_each(|b| *b = b"acgt"[(*b & 3) as usize]),
    }
    d
}

/// Configurations exercised by the generic tests, including odd sizes,
/// `min == avg`, `avg == max` and the smallest legal sizes.
fn configs() -> Vec<ChunkerConfig> {
    let mut v = Vec::new();
    for (min, avg, max) in [
        (64, 64, 64),
        (64, 64, 1000),
        (64, 256, 1024),
        (65, 128, 1025),
        (100, 512, 513),
        (1001, 4096, 30001),
        (4096, 4096, 4096),
        (2048, 8192, 65536),
    ] {
        v.push(ChunkerConfig::Fastcdc { min, avg, max });
        v.push(ChunkerConfig::Rabin { min, avg, max });
    }
    for size in [1, 64, 100, 4096] {
        v.push(ChunkerConfig::Fixed { size });
    }
    for c in &v {
        c.validate().unwrap();
    }
    v
}

fn min_size(cfg: &ChunkerConfig) -> usize {
    match *cfg {
        ChunkerConfig::Fastcdc { min, .. } | ChunkerConfig::Rabin { min, .. } => min as usize,
        ChunkerConfig::Fixed { size } => size as usize,
    }
}

/// Call `cut` and check the trait contract on the result.
fn checked_cut(c: &dyn Chunker, min: usize, data: &[u8], eof: bool) -> usize {
    assert!(!data.is_empty());
    assert!(eof || data.len() >= c.max_size());
    let n = c.cut(data, eof);
    let cap = data.len().min(c.max_size());
    assert!(n >= 1 && n <= cap, "cut {n} outside 1..={cap}");
    if !(eof && data.len() < min) {
        assert!(
            n >= min,
            "cut {n} below min {min} (len {}, eof {eof})",
            data.len()
        );
    }
    n
}

/// Chunk `data` through a buffer that is topped up `refill` bytes at a time,
/// only when fewer than `max_size` bytes remain, as a streaming reader would.
/// The look-ahead past `max_size` therefore varies from cut to cut.
fn chunk_streamed(c: &dyn Chunker, min: usize, data: &[u8], refill: usize) -> Vec<usize> {
    let max = c.max_size();
    let mut buf: Vec<u8> = Vec::new();
    let (mut fed, mut pos) = (0, 0);
    let mut out = Vec::new();
    loop {
        while buf.len() - pos < max && fed < data.len() {
            let n = refill.min(data.len() - fed);
            buf.extend_from_slice(&data[fed..fed + n]);
            fed += n;
        }
        if pos == buf.len() {
            return out;
        }
        let n = checked_cut(c, min, &buf[pos..], fed == data.len());
        out.push(n);
        pos += n;
        if pos >= 4 * max {
            buf.drain(..pos);
            pos = 0;
        }
    }
}

/// Chunk contents, for comparing two chunkings by what they store.
fn pieces<'a>(data: &'a [u8], lens: &[usize]) -> Vec<&'a [u8]> {
    let mut pos = 0;
    lens.iter()
        .map(|&n| {
            pos += n;
            &data[pos - n..pos]
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Boundaries do not depend on how the input is buffered, every cut
    /// honours the contract, and the chunks cover the input exactly.
    #[test]
    fn streamed_equals_whole(
        which in 0usize..100,
        kind in 0u8..3,
        seed in any::<u64>(),
        len in 0usize..300_000,
        refill in 1usize..140_000,
    ) {
        let all = configs();
        let cfg = all[which % all.len()];
        let c = cfg.build();
        let min = min_size(&cfg);
        let data = test_data(kind, seed, len);

        let mut whole = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            let n = checked_cut(&*c, min, &data[pos..], true);
            whole.push(n);
            pos += n;
        }
        prop_assert_eq!(whole.iter().sum::<usize>(), data.len());
        prop_assert_eq!(&whole, &chunk_all(&*c, &data));
        let streamed = chunk_streamed(&*c, min, &data, refill);
        prop_assert_eq!(&streamed, &whole, "{} refill {}", cfg.describe(), refill);
    }
}

/// Lengths around `min` and `max`, with and without `eof`.
#[test]
fn contract_edge_cases() {
    for cfg in configs() {
        let c = cfg.build();
        let min = min_size(&cfg);
        let max = c.max_size();
        for kind in 0..3 {
            let data = test_data(kind, 7, 2 * max + 2);
            for len in [
                1,
                2,
                min - 1,
                min,
                min + 1,
                max - 1,
                max,
                max + 1,
                2 * max + 2,
            ] {
                if len == 0 {
                    continue;
                }
                checked_cut(&*c, min, &data[..len], true);
                if len >= max {
                    let a = checked_cut(&*c, min, &data[..len], false);
                    assert_eq!(
                        a,
                        checked_cut(&*c, min, &data[..max], false),
                        "{}",
                        cfg.describe()
                    );
                }
            }
        }
    }
}

fn mean_chunk(cfg: ChunkerConfig, data: &[u8]) -> f64 {
    let lens = chunk_all(&*cfg.build(), data);
    data.len() as f64 / lens.len() as f64
}

#[test]
fn fastcdc_mean_chunk_size() {
    let data = random_bytes(1, 8 << 20);
    for (min, avg, max) in [(2048, 8192, 65536), (1024, 4096, 32768), (512, 2048, 16384)] {
        let mean = mean_chunk(ChunkerConfig::Fastcdc { min, avg, max }, &data);
        let avg = avg as f64;
        assert!(
            mean >= 0.5 * avg && mean <= 2.0 * avg,
            "fastcdc {avg}: mean {mean}"
        );
    }
}

#[test]
fn rabin_mean_chunk_size() {
    let data = random_bytes(2, 8 << 20);
    for (min, avg, max) in [(2048, 8192, 65536), (1024, 4096, 32768), (512, 2048, 16384)] {
        let mean = mean_chunk(ChunkerConfig::Rabin { min, avg, max }, &data);
        let avg = avg as f64;
        assert!(
            mean >= 0.5 * avg && mean <= 2.0 * avg,
            "rabin {avg}: mean {mean}"
        );
    }
}

/// Insert a few bytes in the middle of 4 MiB: content-defined chunkers
/// re-synchronise after the edit, fixed-size chunking shifts every later
/// block.
#[test]
fn insertion_keeps_chunks_content_defined() {
    let data = random_bytes(3, 4 << 20);
    let at = (2 << 20) + 12_345;
    let mut edited = data[..at].to_vec();
    edited.extend_from_slice(b"hello");
    edited.extend_from_slice(&data[at..]);

    let shared = |cfg: ChunkerConfig| {
        let c = cfg.build();
        let before = chunk_all(&*c, &data);
        let after: HashSet<&[u8]> = pieces(&edited, &chunk_all(&*c, &edited))
            .into_iter()
            .collect();
        let kept = pieces(&data, &before)
            .iter()
            .filter(|p| after.contains(*p))
            .count();
        (kept, before.len())
    };
    for cfg in [
        ChunkerConfig::default(),
        ChunkerConfig::Rabin {
            min: 2048,
            avg: 8192,
            max: 65536,
        },
    ] {
        let (kept, total) = shared(cfg);
        assert!(
            kept * 10 > total * 9,
            "{}: only {kept}/{total} chunks kept",
            cfg.describe()
        );
        assert!(
            kept < total,
            "{}: the edited chunk cannot survive",
            cfg.describe()
        );
    }
    let (kept, total) = shared(ChunkerConfig::Fixed { size: 8192 });
    assert_eq!(
        kept,
        at / 8192,
        "fixed: only blocks before the edit survive"
    );
    assert!(kept * 10 < total * 6);
}

/// Sizes whose byte count overflows u64 used to wrap (in release builds) to
/// a small, valid-looking size.
#[test]
fn parse_size_rejects_overflow() {
    assert_eq!(super::parse_size("8k"), Ok(8192));
    assert_eq!(super::parse_size("4MiB"), Ok(4 << 20));
    assert!(super::parse_size("4096m").is_err());
    assert!(super::parse_size("18014398509481985k").is_err());
    assert!(super::parse_size("18446744073709551615m").is_err());
    assert_eq!(super::parse_bytes("1GiB"), Ok(1 << 30));
    assert_eq!(super::parse_bytes("2g"), Ok(2 << 30));
    assert_eq!(super::parse_bytes("3TiB"), Ok(3 << 40));
    assert_eq!(super::parse_bytes("512"), Ok(512));
    assert!(super::parse_size("4GiB").is_err());
    assert!(super::parse_bytes("1.5GiB").is_err());
    assert!(super::parse_bytes("20000000t").is_err());
}

#[test]
fn fixed_cuts_at_size() {
    let c = FixedSize::new(4096);
    assert_eq!(c.max_size(), 4096);
    assert_eq!(c.cut(&[0; 10_000], false), 4096);
    assert_eq!(c.cut(&[0; 4096], true), 4096);
    assert_eq!(c.cut(&[0; 100], true), 100);
    let lens = chunk_all(&c, &[1; 10_000]);
    assert_eq!(lens, [4096, 4096, 1808]);
}

/// Our masks are the crate's level-2 masks: `log2(avg) ± 2` one-bits,
/// clamped only where the crate's table ends.
#[test]
fn fastcdc_masks_are_level_2() {
    for bits in 6..=24u32 {
        let avg = 1usize << bits;
        let (s, l) = super::fastcdc::masks(avg);
        assert_eq!(s.count_ones(), (bits + 2).min(25), "strict mask for {avg}");
        assert_eq!(l.count_ones(), (bits - 2).max(5), "loose mask for {avg}");
        if (7..=23).contains(&bits) {
            let want = fastcdc::v2020::select_masks(avg, fastcdc::v2020::Normalization::Level2);
            assert_eq!((s, l), want);
        }
    }
}

/// For even sizes our wrapper cuts exactly where the crate's own iterator
/// does at normalization level 2.
#[test]
fn fastcdc_matches_crate_iterator() {
    use fastcdc::v2020::{FastCDC, Normalization};
    let data = random_bytes(4, 3 << 20);
    for (min, avg, max) in [
        (2048, 8192, 65536),
        (1024, 4096, 32768),
        (4096, 16384, 131072),
        (256, 1024, 4096),
    ] {
        let ours = chunk_all(&FastCdc::new(min, avg, max), &data);
        let theirs: Vec<usize> = FastCDC::with_level(&data, min, avg, max, Normalization::Level2)
            .map(|c| c.length)
            .collect();
        assert_eq!(ours, theirs, "{min}/{avg}/{max}");
    }
}

/// The wrapper is the paper's byte-at-a-time loop (Xia et al., Algorithm
/// "FastCDC with normalized chunking") over the crate's Gear table and our
/// masks, apart from the documented pair-alignment details: candidates
/// start at `min` rounded up to even and stop before the last even
/// position, and a chunk without a boundary ends at `min(len, max)`.
#[test]
fn fastcdc_matches_paper_algorithm() {
    let gear = fastcdc::v2020::get_gear_with_seed(0).0;
    for (min, avg, max, kind, len) in [
        (2048, 8192, 65536, 0, 1 << 20),
        (64, 256, 1024, 2, 300_001),
        (1001, 4096, 30001, 1, 100_001),
        (1001, 4096, 30001, 0, 500_001),
        (65, 128, 1025, 2, 200_001),
        (64, 64, 1000, 0, 100_001),
    ] {
        let (mask_s, mask_l) = super::fastcdc::masks(avg);
        let data = test_data(kind, 8, len);
        let mut expect = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            let rest = &data[pos..];
            let min_even = min + (min & 1);
            let last = rest.len().min(max & !1) & !1;
            let mut n = rest.len().min(max);
            let mut fp = 0u64;
            for i in min_even..last {
                fp = (fp << 1).wrapping_add(gear[rest[i] as usize]);
                let mask = if i < avg { mask_s } else { mask_l };
                if fp & mask == 0 {
                    n = i;
                    break;
                }
            }
            expect.push(n);
            pos += n;
        }
        let ours = chunk_all(&FastCdc::new(min, avg, max), &data);
        assert_eq!(ours, expect, "{min}/{avg}/{max}");
    }
}

/// The rolling, two-lane scan gives the same cut points as hashing every
/// window from scratch with the documented polynomial.
#[test]
fn rabin_matches_direct_fingerprint() {
    let direct = |w: &[u8]| {
        w.iter().fold(0u64, |h, &b| {
            h.wrapping_mul(BASE).wrapping_add(IN[b as usize])
        })
    };
    // Averages near the lane length make both lanes of the two-lane scan
    // find boundaries, in either order; zeros never match.
    for (min, avg, max, kind) in [
        (64, 64, 4096, 0),
        (64, 512, 8192, 0),
        (100, 1024, 5000, 2),
        (64, 1024, 10_000, 1),
        (2048, 8192, 65536, 0),
        (1001, 4096, 30001, 2),
    ] {
        let data = test_data(kind, 5, 1 << 20);
        let mask = avg as u64 - 1;
        let mut expect = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            let rest = &data[pos..];
            let end = rest.len().min(max);
            let n = if rest.len() <= min {
                rest.len()
            } else {
                (min..=end)
                    .find(|&n| direct(&rest[n - WINDOW..n]) & mask == MAGIC & mask)
                    .unwrap_or(end)
            };
            expect.push(n);
            pos += n;
        }
        assert_eq!(
            chunk_all(&Rabin::new(min, avg, max), &data),
            expect,
            "{min}/{avg}/{max}"
        );
    }
}

/// The test-vector buffer with 100 kB of zeros, where no boundary is found
/// and chunks are cut at `max` (odd in the vectors that use it).
fn with_zero_run(mut data: Vec<u8>) -> Vec<u8> {
    data[300_000..400_000].fill(0);
    data
}

/// Chunk lengths of a fixed 1 MiB pseudo-random buffer. Boundaries are part
/// of a repository's on-disk format (they decide what deduplicates against
/// existing data): if this fails, the change (or a `fastcdc` crate upgrade)
/// breaks compatibility with existing repositories.
#[test]
fn fastcdc_test_vectors() {
    let data = random_bytes(0x5445_5353_4552_4121, 1 << 20);
    let lens = chunk_all(&*ChunkerConfig::default().build(), &data);
    assert_eq!(lens, FASTCDC_2K_8K_64K);
    let lens = chunk_all(&*ChunkerConfig::preset("gccdf").unwrap().build(), &data);
    assert_eq!(lens, FASTCDC_1K_4K_32K);
    let lens = chunk_all(&FastCdc::new(1001, 4096, 30001), &with_zero_run(data));
    assert_eq!(lens, FASTCDC_ODD);
}

#[test]
fn rabin_test_vectors() {
    let data = random_bytes(0x5445_5353_4552_4121, 1 << 20);
    let lens = chunk_all(&Rabin::new(2048, 8192, 65536), &data);
    assert_eq!(lens, RABIN_2K_8K_64K);
    let lens = chunk_all(&Rabin::new(1001, 4096, 30001), &with_zero_run(data));
    assert_eq!(lens, RABIN_ODD);
}

/// Throughput over 256 MiB of random data; run in release mode:
/// `cargo test --release -p tessera-core chunking -- --ignored --nocapture`.
#[test]
#[ignore]
fn chunking_throughput() {
    let data = random_bytes(6, 256 << 20);
    let configs = [
        ChunkerConfig::default(),
        ChunkerConfig::preset("gccdf").unwrap(),
        ChunkerConfig::Rabin {
            min: 2048,
            avg: 8192,
            max: 65536,
        },
        ChunkerConfig::Rabin {
            min: 1024,
            avg: 4096,
            max: 32768,
        },
    ];
    for cfg in configs {
        let c = cfg.build();
        let mut best = f64::MAX;
        let mut chunks = 0;
        for _ in 0..3 {
            let t = Instant::now();
            chunks = chunk_all(&*c, &data).len();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{:<24} {:>8.0} MB/s  ({chunks} chunks, mean {:.0} B)",
            cfg.describe(),
            data.len() as f64 / best / 1e6,
            data.len() as f64 / chunks as f64
        );
    }
}

// Recorded once from the implementation; never edit them to make a test pass.
const FASTCDC_2K_8K_64K: &[usize] = &[
    7273, 9124, 14259, 9206, 9135, 12831, 11814, 9795, 12063, 2623, 9997, 8374, 8984, 9401, 9297,
    11636, 9208, 8584, 11240, 2341, 11431, 8561, 9828, 3730, 8490, 11751, 9822, 4518, 8701, 9840,
    8614, 8434, 11064, 11731, 15769, 13686, 8346, 5111, 9755, 9303, 8720, 9050, 8844, 8264, 8901,
    10204, 9285, 7298, 8732, 4092, 2461, 10606, 9955, 9429, 13696, 8582, 2833, 12945, 7603, 9327,
    2176, 8964, 10679, 10074, 10029, 8564, 9281, 8203, 10881, 11650, 9597, 9126, 8825, 9319, 9292,
    9451, 9967, 12209, 12535, 12256, 3741, 8419, 8754, 8421, 4350, 9108, 8382, 4802, 8214, 8805,
    11632, 2209, 9231, 19188, 9433, 9022, 8860, 8365, 8354, 8494, 12405, 12523, 14930, 9895, 11243,
    9035, 8495, 10572, 8922, 8540, 14452, 8910, 9467, 1828,
];
const FASTCDC_1K_4K_32K: &[usize] = &[
    4147, 2603, 4630, 5017, 4586, 7232, 5130, 6517, 4490, 4645, 1674, 4953, 4275, 6397, 6427, 4499,
    2425, 4285, 5274, 5243, 4671, 7011, 4520, 4110, 4570, 5705, 5166, 4677, 9297, 6352, 4255, 4487,
    4505, 4487, 5342, 5296, 4505, 1439, 2079, 5727, 4184, 7853, 5016, 3528, 6327, 1177, 5602, 4484,
    4398, 4416, 4157, 4275, 4392, 2857, 5383, 5384, 6133, 5010, 2663, 2582, 6073, 2361, 1314, 5083,
    4667, 7286, 4445, 4399, 4969, 6042, 5775, 8270, 4204, 4142, 4510, 4162, 5448, 4895, 4300, 7534,
    2040, 3148, 4482, 6418, 4335, 5763, 5218, 5203, 4573, 1736, 4387, 1574, 4368, 4546, 5472, 2131,
    2217, 4684, 4415, 4246, 4309, 4512, 1653, 3771, 4531, 4596, 4833, 4565, 5341, 6090, 4189, 4926,
    5131, 1030, 6784, 5589, 2014, 4969, 4358, 2176, 7355, 4115, 3750, 1197, 3226, 5751, 4152, 4604,
    5596, 2916, 4776, 6712, 4193, 3756, 7497, 4488, 4618, 6420, 4805, 5776, 4323, 5311, 1711, 5592,
    4508, 4594, 5677, 4119, 4232, 4436, 4525, 4162, 5009, 2225, 7030, 2954, 4331, 5716, 5088, 5548,
    4108, 4721, 5353, 4371, 4404, 2065, 5238, 3183, 4350, 5127, 3981, 4381, 4292, 4511, 1979, 5648,
    4520, 4149, 4366, 7989, 2209, 6858, 8582, 4918, 5162, 2899, 4741, 1498, 4990, 4796, 5104, 4849,
    4816, 4675, 6018, 4548, 4679, 4491, 4222, 4792, 5481, 6396, 4435, 4857, 6655, 6501, 4959, 5746,
    4275, 4329, 4706, 4900, 5724, 4564, 5085, 4495, 3221, 5431, 5933, 4715, 4514, 5165, 6144, 4125,
    5342, 1828,
];
const FASTCDC_ODD: &[usize] = &[
    4147, 2603, 4630, 5017, 4586, 7232, 5130, 6517, 4490, 4645, 1674, 4953, 4275, 6397, 6427, 4499,
    2425, 4285, 5274, 5243, 4671, 7011, 4520, 4110, 4570, 5705, 5166, 4677, 9297, 6352, 4255, 4487,
    4505, 4487, 5342, 5296, 4505, 1439, 2079, 5727, 4184, 7853, 5016, 3528, 6327, 1177, 5602, 4484,
    4398, 4416, 4157, 4275, 4392, 2857, 5383, 5384, 6133, 5010, 2663, 2582, 6073, 2361, 1314, 5083,
    30001, 30001, 30001, 13000, 4973, 4664, 4927, 4580, 4745, 1072, 4387, 1574, 4368, 4546, 5472,
    2131, 2217, 4684, 4415, 4246, 4309, 4512, 1653, 3771, 4531, 4596, 4833, 4565, 5341, 6090, 1068,
    5214, 2833, 5131, 7814, 5589, 2014, 4969, 4358, 2176, 7355, 4115, 3750, 1197, 3226, 5751, 4152,
    4604, 5596, 2916, 4776, 6712, 4193, 3756, 7497, 4488, 4618, 6420, 4805, 5776, 4323, 5311, 1711,
    5592, 4508, 4594, 5677, 4119, 4232, 4436, 4525, 4162, 5009, 2225, 7030, 2954, 4331, 5716, 5088,
    5548, 4108, 4721, 5353, 4371, 4404, 2065, 5238, 3183, 4350, 5127, 3981, 4381, 4292, 4511, 1979,
    5648, 4520, 4149, 4366, 7989, 2209, 6858, 8582, 4918, 5162, 2899, 4741, 1498, 4990, 4796, 5104,
    4849, 4816, 4675, 6018, 4548, 4679, 4491, 4222, 4792, 5481, 6396, 4435, 4857, 6655, 6501, 4959,
    5746, 4275, 4329, 4706, 4900, 5724, 4564, 5085, 4495, 3221, 5431, 5933, 4715, 4514, 5165, 6144,
    4125, 5342, 1828,
];
const RABIN_2K_8K_64K: &[usize] = &[
    8067, 3529, 2693, 47693, 23176, 9729, 2708, 9869, 22231, 16565, 4737, 13065, 8856, 5691, 15632,
    4328, 11210, 7253, 12282, 5566, 2268, 7496, 8319, 8523, 4479, 5845, 3716, 23603, 11113, 11945,
    7150, 10911, 5562, 4128, 2536, 7954, 9643, 6198, 2063, 3500, 24361, 4296, 5551, 2799, 2253,
    14353, 4794, 3977, 7642, 9061, 9352, 3993, 14857, 2786, 7779, 20366, 19683, 5801, 20291, 3577,
    4764, 7632, 2089, 4380, 8325, 10440, 3751, 9685, 6984, 2374, 3556, 7121, 16720, 9532, 7428,
    18529, 11718, 10861, 18451, 7025, 26560, 48720, 5494, 3593, 3166, 8830, 9049, 17341, 5942,
    4063, 2946, 3563, 19168, 10121, 5526, 42741, 11329, 5595, 10909, 2410, 5377, 16244, 19568,
    19552,
];
const RABIN_ODD: &[usize] = &[
    2687, 5380, 3529, 2693, 3617, 30001, 14075, 1065, 11332, 6025, 2425, 2329, 9729, 1159, 1549,
    5670, 4199, 9115, 12602, 17079, 4395, 3113, 10294, 5117, 3739, 2226, 2155, 1310, 4432, 1657,
    9543, 4328, 11210, 2815, 1966, 1403, 1069, 6290, 5992, 5566, 2268, 7496, 1565, 6754, 4067,
    4205, 1382, 3348, 5845, 1788, 1928, 2343, 10174, 11086, 30001, 30001, 30001, 11700, 5361, 4296,
    5551, 2799, 2253, 7886, 6467, 4070, 4701, 7642, 9061, 9352, 3993, 2930, 11927, 2786, 7779,
    2185, 6103, 3678, 8400, 2024, 2349, 15310, 5801, 6037, 1511, 2422, 10321, 3577, 4764, 1535,
    4890, 1207, 2089, 4380, 1751, 2360, 4214, 10440, 2024, 1727, 3616, 6069, 1305, 5679, 2374,
    1820, 1736, 7121, 7275, 9445, 1280, 8252, 7256, 1621, 8600, 2599, 5462, 8109, 2166, 1862, 9544,
    1317, 1317, 2554, 5960, 8620, 3979, 3046, 2908, 5378, 18274, 3773, 9018, 3291, 4173, 2103,
    2942, 15088, 8332, 5494, 3593, 2174, 9822, 2338, 6711, 4466, 1093, 9587, 1931, 2023, 4183,
    4063, 2946, 1797, 1766, 16664, 2504, 1131, 3792, 2033, 2879, 3890, 1922, 1241, 3752, 10006,
    9173, 12839, 1952, 2149, 1629, 1962, 9175, 5787, 1983, 8067, 1740, 1529, 2975, 2402, 7018,
    2070, 2661, 1843, 2652, 8780, 2083, 4540, 4165, 2053, 17499,
];
