//! `tessera lab bench`: throughput of the hot paths on one generated stream.
//!
//! The stream is built from 1 MiB pieces, each either fresh pseudo-random
//! bytes or, with probability one half, a copy of an earlier piece, so about
//! half of it deduplicates. On it we time, in this order:
//! chunking alone and hashing alone (in memory, one thread each), a backup
//! into a local repository, a sequential read of the stream file, and a
//! restore of the fresh backup. Before the read and the restore, the stream
//! file and every repository object are flushed and dropped from the page
//! cache, so both come from the same disk, cold.
//!
//! The two comparisons that matter: backup against chunking + hashing done
//! one after the other (what a single thread would reach), and restore
//! against a sequential read of the same number of bytes.
//!
//! The whole sequence runs `runs` times on the same stream (a fresh
//! repository each time) and the report gives medians. Each ratio is taken
//! within one run, between measurements seconds apart, so a machine whose
//! speed drifts (shared disks, noisy neighbours) moves both sides together.

use anyhow::{Context, Result};
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessera_core::backend;
use tessera_core::catalog::SourceKind;
use tessera_core::chunking::{chunk_all, ChunkerConfig};
use tessera_core::container::format::is_recipe_container;
use tessera_core::metrics::mb_per_s;
use tessera_core::restore::CacheSpec;
use tessera_core::{
    BackupOptions, BackupReport, HashAlgo, InitOptions, Repository, RestoreOptions, RestoreReport,
};

/// Size of the pieces the stream is assembled from.
const PIECE: usize = 1 << 20;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Work directory: the stream file and the repository go here.
    pub dir: PathBuf,
    /// Stream size in bytes.
    pub size: u64,
    pub chunker: ChunkerConfig,
    pub hash: HashAlgo,
    /// Seed of the generated stream.
    pub seed: u64,
    /// How many times the measurements are repeated (medians are reported).
    pub runs: usize,
    /// The restore cache.
    pub cache: CacheSpec,
    /// The restore's memory ceiling (`RestoreOptions::memory`): restore's
    /// default, so the figure is what a user's restore does; a ceiling
    /// below the cache's containers re-reads some of them.
    pub memory: u64,
    /// Compression of the benchmark repository.
    pub compression: tessera_core::Compression,
    /// Encryption of the benchmark repository.
    pub encryption: tessera_core::Encryption,
    /// Fresh pieces of the stream are text-like words (compressible about
    /// 3:1 by zstd) instead of random bytes.
    pub compressible: bool,
    /// Worker threads for backup and restore (0: every core).
    pub threads: usize,
}

impl BenchOptions {
    pub fn new(dir: PathBuf, size: u64) -> Self {
        BenchOptions {
            dir,
            size,
            chunker: ChunkerConfig::default(),
            hash: HashAlgo::default(),
            seed: 42,
            runs: 3,
            cache: CacheSpec::default(),
            memory: tessera_core::restore::DEFAULT_MEMORY,
            compression: tessera_core::Compression::Off,
            encryption: tessera_core::Encryption::None,
            compressible: false,
            threads: 0,
        }
    }
}

/// The figures, in MB/s (10^6 bytes per second): medians over the runs,
/// each ratio the median of the per-run ratios.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub stream_bytes: u64,
    pub chunker: String,
    pub hash: String,
    pub chunks: u64,
    /// Share of the stream's bytes the backup found duplicate.
    pub duplicate_fraction: f64,
    /// The restore cache.
    pub cache: CacheSpec,
    /// The restore's memory ceiling, bytes.
    pub restore_memory: u64,
    /// Compression and encryption of the repository, and whether the
    /// stream's fresh bytes were text-like.
    pub compression: tessera_core::Compression,
    pub encryption: tessera_core::Encryption,
    pub compressible: bool,
    /// Bytes the repository stores (every object) after the backup.
    pub stored_bytes: u64,
    /// Every run's figures, in order.
    pub runs: Vec<RunFigures>,
    pub chunking_mb_s: f64,
    pub hashing_mb_s: f64,
    /// Chunking then hashing on one thread: 1 / (1/chunking + 1/hashing).
    pub chunk_then_hash_mb_s: f64,
    pub backup_mb_s: f64,
    /// backup / chunk_then_hash (target ≥ 0.8).
    pub backup_vs_chunk_then_hash: f64,
    pub containers_written: u64,
    pub sequential_read_mb_s: f64,
    pub restore_mb_s: f64,
    /// restore / sequential read (target ≥ 0.8).
    pub restore_vs_sequential_read: f64,
    pub restore_containers_read: u64,
    pub restore_read_amplification: f64,
    /// Whether the page cache could be dropped before the cold reads.
    pub cold_reads: bool,
}

/// One run's measurements, in MB/s.
#[derive(Clone, Debug, Serialize)]
pub struct RunFigures {
    pub chunking_mb_s: f64,
    pub hashing_mb_s: f64,
    pub chunk_then_hash_mb_s: f64,
    pub backup_mb_s: f64,
    pub backup_vs_chunk_then_hash: f64,
    pub sequential_read_mb_s: f64,
    pub restore_mb_s: f64,
    pub restore_vs_sequential_read: f64,
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Fill `out` with `size` bytes: fresh pieces, or (probability 1/2) copies of
/// an earlier fresh piece.
pub fn generate_stream(size: usize, seed: u64) -> Vec<u8> {
    generate_stream_of(size, seed, false)
}

/// [`generate_stream`]; `compressible` fills fresh pieces with words.
pub fn generate_stream_of(size: usize, seed: u64, compressible: bool) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![0u8; size];
    let mut fresh: Vec<usize> = Vec::new();
    let mut pos = 0;
    while pos < size {
        let n = PIECE.min(size - pos);
        if !fresh.is_empty() && rng.random_bool(0.5) {
            let src = fresh[rng.random_range(0..fresh.len())];
            out.copy_within(src..src + n, pos);
        } else {
            if compressible {
                fill_words(&mut rng, &mut out[pos..pos + n]);
            } else {
                rng.fill_bytes(&mut out[pos..pos + n]);
            }
            if n == PIECE {
                fresh.push(pos);
            }
        }
        pos += n;
    }
    out
}

/// Text-like bytes: words of a small vocabulary in random order.
fn fill_words(rng: &mut ChaCha8Rng, out: &mut [u8]) {
    const WORDS: [&str; 16] = [
        "the ",
        "backup ",
        "of ",
        "chunk ",
        "container ",
        "and ",
        "recipe ",
        "index ",
        "to ",
        "restore ",
        "a ",
        "segment ",
        "fingerprint ",
        "in ",
        "manifest ",
        "\n",
    ];
    let mut at = 0;
    while at < out.len() {
        let w = WORDS[rng.random_range(0..WORDS.len())].as_bytes();
        let n = w.len().min(out.len() - at);
        out[at..at + n].copy_from_slice(&w[..n]);
        at += n;
    }
}

/// Flush `path` (a file, or every file under a directory) and drop it from
/// the page cache. Returns false where the platform cannot.
fn evict(path: &Path) -> Result<bool> {
    if path.is_dir() {
        let mut ok = true;
        for e in std::fs::read_dir(path)? {
            ok &= evict(&e?.path())?;
        }
        return Ok(ok);
    }
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    f.sync_all()?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open descriptor; advice only, no memory is touched.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        Ok(rc == 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(false)
    }
}

/// Run the benchmark; `step` is told what is being measured.
pub fn run(opts: &BenchOptions, step: &mut dyn FnMut(&str)) -> Result<BenchReport> {
    let size = usize::try_from(opts.size).context("stream size too large")?;
    anyhow::ensure!(size > 0, "the stream size must be positive");
    opts.chunker.validate().map_err(anyhow::Error::msg)?;
    clear_work_dir(&opts.dir)?;

    step("generating the stream");
    let stream = generate_stream_of(size, opts.seed, opts.compressible);
    let stream_path = opts.dir.join("stream.bin");
    // Flushed before anything is timed: the backup must not compete with
    // the write-back of its own input.
    File::create(&stream_path)
        .and_then(|mut f| f.write_all(&stream).and_then(|()| f.sync_all()))
        .with_context(|| format!("cannot write {}", stream_path.display()))?;

    let mut runs = Vec::new();
    let mut last = None;
    for run in 1..=opts.runs.max(1) {
        let mut of = |what: &str| {
            if opts.runs > 1 {
                step(&format!("{what} (run {run} of {})", opts.runs))
            } else {
                step(what)
            }
        };
        let (figures, measured) = run_once(opts, &stream, &stream_path, &mut of)?;
        runs.push(figures);
        last = Some(measured);
    }
    Ok(report(opts, runs, last.expect("at least one run")))
}

/// Make `dir` empty, refusing to clear a directory an earlier bench did not
/// leave (never a directory someone pointed --dir at by mistake).
fn clear_work_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let name = e?.file_name();
            anyhow::ensure!(
                name == "stream.bin" || name == "repo",
                "{} holds {:?}, which an earlier bench did not leave; choose a new or empty --dir",
                dir.display(),
                name
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// What the report takes from the last run besides its figures.
struct LastRun {
    chunks: usize,
    backup: BackupReport,
    restore: RestoreReport,
    cold: bool,
    stored_bytes: u64,
}

/// One run of every measurement, in order.
fn run_once(
    opts: &BenchOptions,
    stream: &[u8],
    stream_path: &Path,
    step: &mut dyn FnMut(&str),
) -> Result<(RunFigures, LastRun)> {
    let size = stream.len() as u64;
    let chunker = opts.chunker.build();
    step("chunking");
    let t = Instant::now();
    let cuts = chunk_all(&*chunker, stream);
    let chunking = mb_per_s(size, t.elapsed().as_secs_f64());

    step("hashing");
    let t = Instant::now();
    let mut pos = 0;
    let mut sink = 0u8;
    for &n in &cuts {
        sink ^= opts.hash.hash(&stream[pos..pos + n]).0[0];
        pos += n;
    }
    std::hint::black_box(sink);
    let hashing = mb_per_s(size, t.elapsed().as_secs_f64());

    step("backup");
    let repo_dir = opts.dir.join("repo");
    let (backend, backup) = backup_into_fresh_repo(opts, stream_path, &repo_dir)?;

    step("sequential read (cold)");
    let mut cold = evict(stream_path)?;
    let seq = sequential_read_mb_s(stream_path)?;

    step("restore (cold)");
    cold &= evict(&repo_dir)?;
    let stored_bytes = tessera_core::backend::list_all(&*backend)?
        .iter()
        .map(|k| backend.size(k))
        .sum::<tessera_core::Result<u64>>()?;
    let mut repo = Repository::open_with(backend, &|| Ok(crate::runner::lab_password()))?;
    repo.set_threads(opts.threads);
    let entry = repo.resolve("latest")?.clone();
    let restore = repo.restore_to(
        &entry,
        &mut std::io::sink(),
        &RestoreOptions {
            cache: opts.cache,
            memory: opts.memory,
        },
        &mut |_| {},
    )?;
    anyhow::ensure!(
        restore.restored_bytes == size,
        "restore returned {} bytes of {size}",
        restore.restored_bytes
    );
    let chunk_then_hash = 1.0 / (1.0 / chunking + 1.0 / hashing);
    let figures = RunFigures {
        chunking_mb_s: chunking,
        hashing_mb_s: hashing,
        chunk_then_hash_mb_s: chunk_then_hash,
        backup_mb_s: backup.throughput_mb_s,
        backup_vs_chunk_then_hash: backup.throughput_mb_s / chunk_then_hash,
        sequential_read_mb_s: seq,
        restore_mb_s: restore.throughput_mb_s,
        restore_vs_sequential_read: restore.throughput_mb_s / seq,
    };
    let last = LastRun {
        chunks: cuts.len(),
        backup,
        restore,
        cold,
        stored_bytes,
    };
    Ok((figures, last))
}

/// Back the stream file up into a new repository at `repo_dir`.
fn backup_into_fresh_repo(
    opts: &BenchOptions,
    stream_path: &Path,
    repo_dir: &Path,
) -> Result<(
    std::sync::Arc<dyn tessera_core::backend::ObjectStore>,
    BackupReport,
)> {
    if repo_dir.exists() {
        std::fs::remove_dir_all(repo_dir)
            .with_context(|| format!("cannot clear {}", repo_dir.display()))?;
    }
    let backend = backend::create(
        repo_dir
            .to_str()
            .with_context(|| format!("{} is not a UTF-8 path", repo_dir.display()))?,
        is_recipe_container,
    )?;
    let seal = tessera_core::SealOptions {
        compression: opts.compression,
        encryption: opts.encryption.is_encrypted().then(|| {
            (
                crate::runner::lab_password(),
                tessera_core::KdfParams::INSECURE_FAST,
            )
        }),
        cipher: opts.encryption.cipher().unwrap_or_default(),
    };
    Repository::init_sealed(
        backend.clone(),
        &InitOptions {
            hash: opts.hash,
            chunker: opts.chunker,
            ..InitOptions::default()
        },
        &seal,
    )?;
    let mut repo = Repository::open_writer_with(backend.clone(), "tessera lab bench", &|| {
        Ok(crate::runner::lab_password())
    })?;
    repo.set_threads(opts.threads);
    let mut f = File::open(stream_path)?;
    let backup = repo.backup_reader(
        &BackupOptions::new("stream.bin", SourceKind::Stream),
        &mut f,
        &mut |_| {},
    )?;
    repo.close()?;
    Ok((backend, backup))
}

/// Read a file start to end, in MB/s.
fn sequential_read_mb_s(path: &Path) -> Result<f64> {
    let t = Instant::now();
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; PIECE];
    let mut read = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    Ok(mb_per_s(read, t.elapsed().as_secs_f64()))
}

/// Medians over the runs, counts from the last one.
fn report(opts: &BenchOptions, runs: Vec<RunFigures>, last: LastRun) -> BenchReport {
    let LastRun {
        chunks,
        backup,
        restore,
        cold,
        stored_bytes,
    } = last;
    let size = opts.size;
    let med = |f: fn(&RunFigures) -> f64| median(runs.iter().map(f).collect());
    BenchReport {
        stream_bytes: size,
        chunker: opts.chunker.describe(),
        hash: opts.hash.name().to_string(),
        chunks: chunks as u64,
        duplicate_fraction: backup.duplicate_bytes as f64 / size as f64,
        cache: opts.cache,
        restore_memory: opts.memory,
        compression: opts.compression,
        encryption: opts.encryption,
        compressible: opts.compressible,
        stored_bytes,
        chunking_mb_s: med(|r| r.chunking_mb_s),
        hashing_mb_s: med(|r| r.hashing_mb_s),
        chunk_then_hash_mb_s: med(|r| r.chunk_then_hash_mb_s),
        backup_mb_s: med(|r| r.backup_mb_s),
        backup_vs_chunk_then_hash: med(|r| r.backup_vs_chunk_then_hash),
        containers_written: backup.data_containers_written + backup.recipe_containers_written,
        sequential_read_mb_s: med(|r| r.sequential_read_mb_s),
        restore_mb_s: med(|r| r.restore_mb_s),
        restore_vs_sequential_read: med(|r| r.restore_vs_sequential_read),
        restore_containers_read: restore.data_containers_read,
        restore_read_amplification: restore.read_amplification,
        cold_reads: cold,
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_deterministic_and_half_duplicate() {
        let a = generate_stream(64 * PIECE + 123, 7);
        assert_eq!(a, generate_stream(64 * PIECE + 123, 7));
        assert_ne!(a, generate_stream(64 * PIECE + 123, 8));
        let pieces: Vec<&[u8]> = a.chunks(PIECE).collect();
        let distinct: std::collections::HashSet<&[u8]> = pieces.iter().copied().collect();
        let dup = 1.0 - distinct.len() as f64 / pieces.len() as f64;
        assert!((0.3..0.7).contains(&dup), "duplicate share {dup}");
    }

    #[test]
    fn small_bench_restores_everything_and_finds_the_duplicates() {
        let t = tempfile::tempdir().unwrap();
        let mut opts = BenchOptions::new(t.path().join("b"), 24 << 20);
        opts.runs = 2;
        let mut steps = Vec::new();
        let r = run(&opts, &mut |s| steps.push(s.to_string())).unwrap();
        assert_eq!(r.runs.len(), 2);
        assert_eq!(r.stream_bytes, 24 << 20);
        assert!(
            (0.25..0.75).contains(&r.duplicate_fraction),
            "{}",
            r.duplicate_fraction
        );
        assert!(r.restore_containers_read >= 1);
        assert!(r.chunking_mb_s > 0.0 && r.hashing_mb_s > 0.0 && r.restore_mb_s > 0.0);
        assert_eq!(steps.len(), 1 + 2 * 5, "{steps:?}");
        assert!(
            steps.contains(&"restore (cold) (run 2 of 2)".to_string()),
            "{steps:?}"
        );
        // Its own directory is cleared and reused.
        opts.runs = 1;
        run(&opts, &mut |_| {}).unwrap();
    }

    /// The restore runs under the asked ceiling: one below a container
    /// re-reads the containers the cache would have kept; a large one
    /// reads what the cache policy alone reads.
    #[test]
    fn restore_ceiling_is_the_one_asked() {
        let t = tempfile::tempdir().unwrap();
        let reads = |memory: u64| {
            let mut opts = BenchOptions::new(t.path().join(memory.to_string()), 24 << 20);
            opts.runs = 1;
            opts.memory = memory;
            let r = run(&opts, &mut |_| {}).unwrap();
            assert_eq!(r.restore_memory, memory);
            r.restore_containers_read
        };
        let (tight, loose) = (reads(1), reads(1 << 30));
        assert!(tight > loose, "{tight} <= {loose}");
    }

    #[test]
    fn refuses_a_directory_it_did_not_make() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("notes.txt"), "keep me").unwrap();
        let opts = BenchOptions::new(t.path().to_path_buf(), 1 << 20);
        let err = run(&opts, &mut |_| {}).unwrap_err().to_string();
        assert!(err.contains("notes.txt"), "{err}");
        assert!(t.path().join("notes.txt").exists());
    }
}
