//! Fingerprint traces, one backup version per file: a `#` header, then one
//! line per chunk, `<hex fingerprint> <size in bytes>` (the format `tessera
//! backup --trace-file` reads). Traces of a tar image are made by chunking
//! and hashing it exactly as a repository would, so trace mode sees the very
//! same chunks as data mode.

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use tessera_core::chunking::{chunk_all, ChunkerConfig};
use tessera_core::{Fingerprint, HashAlgo};

/// File extension of trace files.
pub const EXT: &str = "trace";

/// The chunks of `data`, as the repository's chunker and hash cut them.
pub fn chunks_of(data: &[u8], chunker: &ChunkerConfig, hash: HashAlgo) -> Vec<(Fingerprint, u32)> {
    let c = chunker.build();
    let mut pos = 0;
    chunk_all(&*c, data)
        .into_iter()
        .map(|n| {
            let fp = hash.hash(&data[pos..pos + n]);
            pos += n;
            (fp, n as u32)
        })
        .collect()
}

/// Write a trace file; the header records how the chunks were made.
pub fn write(path: &Path, header: &str, chunks: &[(Fingerprint, u32)]) -> Result<()> {
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = BufWriter::new(f);
    let hexlen = chunks
        .iter()
        .map(|(fp, _)| 32 - fp.0.iter().rev().take_while(|&&b| b == 0).count())
        .max()
        .unwrap_or(32);
    (|| -> std::io::Result<()> {
        writeln!(w, "# tessera trace v1: <hex fingerprint> <size>; {header}")?;
        for (fp, n) in chunks {
            writeln!(w, "{} {n}", hex(&fp.0[..hexlen]))?;
        }
        w.flush()
    })()
    .with_context(|| format!("cannot write {}", path.display()))
}

fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

/// The chunks of a trace file; errors name the file and line.
pub fn open(path: &Path) -> Result<impl Iterator<Item = tessera_core::Result<(Fingerprint, u32)>>> {
    let f = std::fs::File::open(path)
        .with_context(|| format!("cannot open trace {}", path.display()))?;
    Ok(tessera_core::trace::read_trace(
        BufReader::with_capacity(1 << 20, f),
        path.display().to_string(),
    ))
}

/// Read a whole trace file.
pub fn read(path: &Path) -> Result<Vec<(Fingerprint, u32)>> {
    Ok(open(path)?.collect::<tessera_core::Result<Vec<_>>>()?)
}

/// Whether a file is a trace (by extension, or by its header line).
pub fn is_trace(path: &Path) -> bool {
    if path.extension().is_some_and(|e| e == EXT) {
        return true;
    }
    std::fs::File::open(path)
        .ok()
        .and_then(|f| BufReader::new(f).lines().next()?.ok())
        .is_some_and(|l| l.starts_with("# tessera trace"))
}

/// Turn every image in `images` into `<dir>/<stem>.trace`; returns the trace paths.
pub fn convert_all(
    images: &[PathBuf],
    dir: &Path,
    chunker: &ChunkerConfig,
    hash: HashAlgo,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut out = Vec::new();
    for img in images {
        let data = std::fs::read(img).with_context(|| format!("cannot read {}", img.display()))?;
        let stem = img
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let p = dir.join(format!("{stem}.{EXT}"));
        let header = format!(
            "source={} chunker={} hash={}",
            img.file_name().unwrap_or_default().to_string_lossy(),
            chunker.describe(),
            hash.name()
        );
        write(&p, &header, &chunks_of(&data, chunker, hash))?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_line_names_file_and_line() {
        let t = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for hash in [HashAlgo::Blake3, HashAlgo::Sha1] {
            let chunks = chunks_of(&data, &ChunkerConfig::default(), hash);
            assert!(chunks.len() > 5);
            assert_eq!(
                chunks.iter().map(|c| c.1 as usize).sum::<usize>(),
                data.len()
            );
            let p = t.path().join("v.trace");
            write(&p, "test", &chunks).unwrap();
            assert!(is_trace(&p));
            assert_eq!(read(&p).unwrap(), chunks);
        }
        let p = t.path().join("bad.trace");
        std::fs::write(&p, "# h\naabb 10\naabb ten\n").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("bad.trace:3:"), "{e}");
    }
}
