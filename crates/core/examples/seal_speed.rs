//! Single-thread throughput of each per-chunk step of a backup and a
//! restore on real bytes (issue 12's cost targets): hashing, compression,
//! sealing, and their inverses, on 8 KiB pieces of the files under a
//! directory. `cargo run --release -p tessera-core --example seal_speed -- DIR [MiB]`
use std::time::Instant;
use tessera_core::container::ChunkKind;
use tessera_core::fingerprint::{Fingerprinter, HashAlgo};
use tessera_core::seal::aead::{Cipher, CipherKind};
use tessera_core::seal::{Codec, Compression, Sealer};

fn load(dir: &std::path::Path, limit: usize, out: &mut Vec<u8>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if out.len() >= limit {
            return;
        }
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            load(&e.path(), limit, out);
        } else if ft.is_file() {
            if let Ok(b) = std::fs::read(e.path()) {
                out.extend_from_slice(&b);
            }
        }
    }
}

fn rate(label: &str, bytes: usize, t: Instant) {
    let s = t.elapsed().as_secs_f64();
    println!("{label:<34} {:>8.0} MB/s", bytes as f64 / s / 1e6);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "/usr/share".into());
    let mib: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(256);
    let mut data = Vec::new();
    load(dir.as_ref(), mib << 20, &mut data);
    data.truncate(mib << 20);
    let pieces: Vec<&[u8]> = data.chunks(8192).collect();
    let n = data.len();
    println!("{} MiB in {} pieces of 8 KiB", n >> 20, pieces.len());
    if std::env::var_os("LEVELS").is_some() {
        levels(&pieces);
        return;
    }
    if std::env::var_os("ENTROPY").is_some() {
        entropy(&pieces);
        return;
    }

    let t = Instant::now();
    let plain = HashAlgo::Blake3;
    let fps: Vec<_> = pieces.iter().map(|p| plain.hash(p)).collect();
    rate("blake3", n, t);
    let keyed = Fingerprinter::keyed(HashAlgo::Blake3, &[9; 32]);
    let t = Instant::now();
    for p in &pieces {
        std::hint::black_box(keyed.hash(p));
    }
    rate("blake3 keyed", n, t);

    let mut runs = vec![
        (
            "seal auto".to_string(),
            Sealer::new(None, Compression::Auto),
            Compression::Auto,
        ),
        (
            "seal fastest".to_string(),
            Sealer::new(None, Compression::Fastest),
            Compression::Fastest,
        ),
    ];
    for kind in CipherKind::ALL {
        let cipher = || Some(Cipher::new(kind, &[7; 32]));
        for comp in [Compression::Off, Compression::Auto] {
            runs.push((
                format!("seal {comp}+{}", kind.name()),
                Sealer::new(cipher(), comp),
                comp,
            ));
        }
    }
    for (label, sealer, comp) in runs {
        let mut out = Vec::with_capacity(n + n / 2);
        let mut ents: Vec<(Codec, usize, usize)> = Vec::with_capacity(pieces.len());
        // Once untimed, so the timed run does not pay first-touch page faults.
        for (p, fp) in pieces.iter().zip(&fps) {
            sealer.seal_chunk(ChunkKind::Data, fp, p, comp, &mut out);
        }
        out.clear();
        let t = Instant::now();
        for (p, fp) in pieces.iter().zip(&fps) {
            let s = out.len();
            let c = sealer.seal_chunk(ChunkKind::Data, fp, p, comp, &mut out);
            ents.push((c, s, out.len()));
        }
        rate(&label, n, t);
        println!(
            "{:<34} {:>8.1} %",
            "  stored",
            out.len() as f64 * 100.0 / n as f64
        );
        let mut buf = vec![0u8; 8192];
        let t = Instant::now();
        for ((p, fp), &(c, s, e)) in pieces.iter().zip(&fps).zip(&ents) {
            let b = &mut buf[..p.len()];
            sealer
                .unseal_chunk(ChunkKind::Data, fp, c, &out[s..e], b)
                .unwrap();
        }
        rate(&format!("un{label}"), n, t);
    }
}

/// zstd's levels on the same pieces: speed and stored share (is `auto`'s
/// level the right trade?).
fn levels(pieces: &[&[u8]]) {
    let n: usize = pieces.iter().map(|p| p.len()).sum();
    for level in [-5, -1, 1, 2, 3, 4, 6] {
        let mut c = zstd::bulk::Compressor::new(level).unwrap();
        let mut out = vec![0u8; 16384];
        let mut stored = 0;
        let t = Instant::now();
        for p in pieces {
            let k = c.compress_to_buffer(p, &mut out[..]).unwrap();
            stored += k.min(p.len());
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "zstd level {level:>3}: {:>6.0} MB/s, stored {:.2} %",
            n as f64 / s / 1e6,
            stored as f64 * 100.0 / n as f64
        );
    }
}

/// Where `auto`'s time and savings go by the sampled entropy of a piece:
/// is the threshold above which it does not try the right one?
fn entropy(pieces: &[&[u8]]) {
    let level = Compression::Auto.level().unwrap();
    let mut c = zstd::bulk::Compressor::new(level).unwrap();
    let mut out = vec![0u8; 16384];
    // bucket (entropy in quarter bits) -> pieces, bytes, saved bytes, seconds
    let mut b = [(0usize, 0usize, 0usize, 0f64); 33];
    for p in pieces {
        let e = tessera_core::seal::zstd::sample_entropy(p);
        let t = Instant::now();
        let k = c.compress_to_buffer(p, &mut out[..]).unwrap().min(p.len());
        let s = t.elapsed().as_secs_f64();
        let i = ((e * 4.0) as usize).min(32);
        b[i].0 += 1;
        b[i].1 += p.len();
        b[i].2 += p.len() - k;
        b[i].3 += s;
    }
    let (tb, ts, tt) = b
        .iter()
        .fold((0, 0, 0.0), |a, x| (a.0 + x.1, a.1 + x.2, a.2 + x.3));
    println!("entropy  pieces  bytes%  saved%(of all saved)  time%  stored");
    for (i, x) in b.iter().enumerate().filter(|x| x.1 .0 > 0) {
        println!(
            "{:>5.2}  {:>7} {:>6.1} {:>8.2} {:>6.1} {:>6.3}",
            i as f64 / 4.0,
            x.0,
            x.1 as f64 * 100.0 / tb as f64,
            x.2 as f64 * 100.0 / ts as f64,
            x.3 * 100.0 / tt,
            1.0 - x.2 as f64 / x.1 as f64
        );
    }
}
