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

fn z(level: i32, lean: bool, plain: &[u8]) -> usize {
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
    let mut out = Vec::with_capacity(plain.len() + 1024);
    c.compress2(&mut out, plain).unwrap();
    out.len().min(plain.len())
}

fn main() {
    let repo = std::env::args().nth(1).unwrap();
    let backend =
        tessera_core::backend::open(&repo, tessera_core::container::format::is_recipe_container)
            .unwrap();
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
        for (i, m) in meta.iter().enumerate() {
            // A frame's stored bytes count once, at its first chunk.
            if m.frame_offset != 0 {
                continue;
            }
            aead += sealer.overhead() as u64;
            let plain = open_chunk(&obj, &meta, i, &sealer).unwrap();
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
    let lean: u64 = data.iter().map(|p| z(3, true, &p.1) as u64).sum();
    println!(
        "  lean framing (magicless, no size, no dict id): {lean} ({:?})",
        t.elapsed()
    );
    // Every data chunk (raw-stored ones too: with a dictionary some pay),
    // at zstd levels with and without a dictionary trained on every 8th
    // chunk: what a dictionary or a higher level would save, and its cost.
    let all: Vec<&[u8]> = plains
        .iter()
        .filter(|p| p.0 == ChunkKind::Data)
        .map(|p| &p.1[..])
        .collect();
    let logical: usize = all.iter().map(|p| p.len()).sum();
    let samples: Vec<&[u8]> = all.iter().step_by(8).copied().collect();
    let t = std::time::Instant::now();
    let dict = zstd::dict::from_samples(&samples, 112 << 10).unwrap();
    println!(
        "data chunks {} ({logical} B); dictionary {} B trained in {:?}",
        all.len(),
        dict.len(),
        t.elapsed()
    );
    for level in [1, 3, 5, 7, 9] {
        for with_dict in [false, true] {
            let mut c = if with_dict {
                zstd::bulk::Compressor::with_dictionary(level, &dict).unwrap()
            } else {
                zstd::bulk::Compressor::new(level).unwrap()
            };
            let t = std::time::Instant::now();
            let mut out = Vec::with_capacity(1 << 20);
            let stored: usize = all
                .iter()
                .map(|p| {
                    out.clear();
                    match p.len() {
                        0..64 => p.len(),
                        n => c
                            .compress_to_buffer(p, &mut out)
                            .map_or(n, |_| out.len().min(n)),
                    }
                })
                .sum();
            println!(
                "  level {level}, dictionary {with_dict}: {stored} B ({:.4}), {:.0} MB/s on one core",
                stored as f64 / logical as f64,
                logical as f64 / t.elapsed().as_secs_f64() / 1e6
            );
        }
    }
}
