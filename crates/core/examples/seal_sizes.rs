//! Where a repository's stored bytes go, and what a zstd dictionary or
//! leaner zstd frames would save on its chunks (issue 12's stored-size
//! target). Reads every container, so run it on a copy you can afford to
//! read: `cargo run --release -p tessera-core --example seal_sizes -- REPO`
//! (password from `TESSERA_PASSWORD`).
use std::collections::BTreeMap;
use tessera_core::backend::{KeyKind, ObjectKey};
use tessera_core::container::{format, open_chunk, ChunkKind};
use tessera_core::seal::Codec;

fn class(len: u32) -> &'static str {
    match len {
        0..=2047 => "a <2K",
        2048..=4095 => "b 2-4K",
        4096..=8191 => "c 4-8K",
        8192..=16383 => "d 8-16K",
        16384..=32767 => "e 16-32K",
        _ => "f >=32K",
    }
}

fn z(level: i32, lean: bool, dict: Option<&[u8]>, plain: &[u8]) -> usize {
    use zstd::zstd_safe::{CCtx, CParameter, FrameFormat};
    let mut c = CCtx::create();
    c.set_parameter(CParameter::CompressionLevel(level))
        .unwrap();
    if lean {
        c.set_parameter(CParameter::Format(FrameFormat::Magicless))
            .unwrap();
        c.set_parameter(CParameter::ContentSizeFlag(false)).unwrap();
        c.set_parameter(CParameter::DictIdFlag(false)).unwrap();
    }
    if let Some(d) = dict {
        c.load_dictionary(d).unwrap();
    }
    let mut out = Vec::with_capacity(plain.len() + 1024);
    c.compress2(&mut out, plain).unwrap();
    out.len().min(plain.len())
}

fn main() {
    let repo = std::env::args().nth(1).unwrap();
    let backend = tessera_core::backend::open(&repo).unwrap();
    let pw = || {
        std::env::var("TESSERA_PASSWORD")
            .map(tessera_core::Password::new)
            .map_err(|_| tessera_core::Error::Key("set TESSERA_PASSWORD".into()))
    };
    let r = tessera_core::Repository::open_with(backend.clone(), &pw).unwrap();
    let sealer = r.objects().sealer().clone();
    let mut by_kind: BTreeMap<KeyKind, (usize, u64)> = BTreeMap::new();
    for k in KeyKind::ALL {
        for key in backend.list(k).unwrap() {
            let n = backend.get(&key).map(|b| b.len()).unwrap_or(0);
            let e = by_kind.entry(k).or_default();
            e.0 += 1;
            e.1 += n as u64;
        }
    }
    println!("objects by kind: {by_kind:?}");
    let (mut headers, mut metas, mut aead) = (0u64, 0u64, 0u64);
    let mut classes: BTreeMap<(String, &str, &str), (u64, u64, u64)> = BTreeMap::new();
    let mut plains: Vec<(ChunkKind, Vec<u8>, u32)> = Vec::new();
    for key in backend.list(KeyKind::Container).unwrap() {
        let ObjectKey::Container(id) = key else {
            continue;
        };
        let obj = backend.get(&key).unwrap();
        let (h, meta) = format::decode(id, &obj, &sealer).unwrap();
        headers += format::HEADER_LEN as u64;
        metas += h.meta_len;
        for m in &meta {
            aead += sealer.overhead() as u64;
            let plain = open_chunk(&obj, m, &sealer).unwrap();
            let codec = if m.codec == Codec::Raw { "raw" } else { "zstd" };
            let e = classes
                .entry((format!("{:?}", m.kind), class(m.len), codec))
                .or_default();
            e.0 += 1;
            e.1 += m.len as u64;
            e.2 += (m.stored_len as usize - sealer.overhead()) as u64;
            plains.push((m.kind, plain, m.stored_len - sealer.overhead() as u32));
        }
    }
    println!("container headers {headers}, metadata sections {metas}, per-chunk AEAD {aead}");
    println!("class: count logical stored(excl. AEAD)");
    for (k, v) in &classes {
        println!(
            "  {k:?}: {} {} {} ({:.3})",
            v.0,
            v.1,
            v.2,
            v.2 as f64 / v.1 as f64
        );
    }
    // Simulations over zstd chunks of the data kind.
    let data: Vec<&(ChunkKind, Vec<u8>, u32)> =
        plains.iter().filter(|p| p.2 < p.1.len() as u32).collect();
    let cur: u64 = data.iter().map(|p| p.2 as u64).sum();
    println!("compressed chunks: {} stored {cur}", data.len());
    let t = std::time::Instant::now();
    let lean: u64 = data.iter().map(|p| z(3, true, None, &p.1) as u64).sum();
    println!(
        "  lean framing (magicless, no size, no dict id): {lean} ({:?})",
        t.elapsed()
    );
    for (dsize, every) in [
        (64 << 10, 8),
        (112 << 10, 8),
        (256 << 10, 8),
        (112 << 10, 40),
    ] {
        let samples: Vec<&[u8]> = plains.iter().step_by(every).map(|p| &p.1[..]).collect();
        let sample_bytes: usize = samples.iter().map(|s| s.len()).sum();
        let t = std::time::Instant::now();
        let dict = zstd::dict::from_samples(&samples, dsize).unwrap();
        let train = t.elapsed();
        let t = std::time::Instant::now();
        let d: u64 = data
            .iter()
            .map(|p| z(3, true, Some(&dict), &p.1) as u64)
            .sum();
        println!(
            "  dict {} B from {} samples ({} B, trained in {train:?}), lean: {d} ({:?})",
            dict.len(),
            samples.len(),
            sample_bytes,
            t.elapsed()
        );
        let raw: Vec<&(ChunkKind, Vec<u8>, u32)> = plains
            .iter()
            .filter(|p| p.2 == p.1.len() as u32 && p.1.len() >= 64)
            .collect();
        let rawd: u64 = raw
            .iter()
            .map(|p| z(3, true, Some(&dict), &p.1) as u64)
            .sum();
        let rawl: u64 = raw.iter().map(|p| p.1.len() as u64).sum();
        println!(
            "    raw-stored chunks {} ({rawl} B) with dict: {rawd}",
            raw.len()
        );
    }
}
