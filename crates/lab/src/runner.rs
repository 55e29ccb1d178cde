//! The experiment runner: every approach on identical input, one fresh
//! repository each, with retention rounds, GC and restores, producing one
//! row per backup, restore and retention round.

use crate::approach::Approach;
use crate::experiment::{BackendKind, Dataset, Experiment, Mode};
use crate::scale::ScaleSeries;
use crate::{synth, tracefile};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tessera_core::backend::{self, CountingStore, IoCounters, ObjectStore};
use tessera_core::catalog::{BackupId, SourceKind};
use tessera_core::container::format::is_recipe_container;
use tessera_core::gc::{GcReport, MarkSpec};
use tessera_core::ingest::GroupInput;
use tessera_core::layout::mfdedup::MfState;
use tessera_core::layout::LayoutKind;
use tessera_core::{BackupOptions, BackupReport, InitOptions, Repository, RestoreOptions, Writer};

/// One backup of the sequence, as every approach ingests it.
#[derive(Clone, Debug)]
pub enum Input {
    /// Bytes (data mode).
    Image(PathBuf),
    /// A trace file (trace mode).
    Trace(PathBuf),
    /// Version `n` of a generated scale series (trace mode).
    Scale(usize),
}

#[derive(Clone, Debug)]
pub struct Version {
    pub name: String,
    pub input: Input,
}

/// Per backup.
#[derive(Clone, Debug, Serialize)]
pub struct BackupRow {
    pub approach: String,
    /// Position in the backup sequence (0-based).
    pub step: usize,
    pub version: String,
    pub backup_id: BackupId,
    pub logical_bytes: u64,
    pub chunks: u64,
    /// Data bytes this backup stored anew (rewrites included).
    pub new_bytes: u64,
    /// Duplicate bytes the rewrite policy stored again (part of `new_bytes`).
    pub rewritten_bytes: u64,
    /// Data bytes stored in the repository after it (all copies).
    pub stored_bytes: u64,
    pub data_containers: usize,
    pub retained_backups: usize,
    pub retained_logical_bytes: u64,
    /// Logical bytes of retained backups / stored bytes.
    pub dedup_ratio: f64,
    /// Logical bytes of every backup ingested so far / stored bytes.
    pub classic_dedup_ratio: f64,
    pub seconds: f64,
    pub throughput_mb_s: f64,
    pub chunk_refs_per_s: f64,
    /// The repository's in-memory index after the backup: the global
    /// fingerprint index (on the mfdedup layout only its recipe chunks; the
    /// NDF index a backup holds is `ndf_memory_bytes`).
    pub index_memory_bytes: u64,
    /// Distinct data chunks the index holds after the backup (all copies).
    #[serde(skip)]
    pub index_data_entries: u64,
    /// The redundancy among containers after the backup (SMR paper,
    /// Figs. 4–5): distinct data chunks, those stored in more than one
    /// container, and their copies beyond the first.
    pub stored_chunks: u64,
    pub redundant_chunks: u64,
    pub extra_copies: u64,
    /// `index = "disk"`: where the disk index answered its lookups so far
    /// (cursor, cache, overlay, Bloom, run probes, lists loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_index: Option<tessera_core::index::disk::DiskCounts>,
    /// MFDedup: the layout of this backup's chain after it.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub mfdedup: Option<MfdedupBackup>,
    #[serde(skip)]
    pub io: StepIo,
}

/// MFDedup's per-backup figures (absent for the container layout).
#[derive(Clone, Debug, Serialize, Default)]
pub struct MfdedupBackup {
    pub chain: String,
    /// NDF index memory at its peak (this and the previous version).
    pub ndf_memory_bytes: u64,
    /// Arranging after this backup (0 when it was held back).
    pub arrange_seconds: f64,
    pub arrange_read_bytes: u64,
    /// The chain's newest volume, active categories, versions behind.
    pub newest_volume_bytes: u64,
    pub active_bytes: u64,
    pub arrange_behind: u32,
    /// Bytes arranging wrote (kept and archived): MFDedup's data migration
    /// (the GCCDF paper's Fig. 3), against GC's `bytes_written`.
    pub arrange_written_bytes: u64,
    /// The chain's volumes, active categories and the largest of these
    /// after the backup (MFDedup Fig. 17).
    pub volumes_stored: usize,
    pub active_categories: usize,
    pub largest_active_bytes: u64,
}

/// Per restore.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreRow {
    pub approach: String,
    /// `newest` (right after the backup) or `final` (after the last version).
    pub when: &'static str,
    pub step: usize,
    pub version: String,
    pub backup_id: BackupId,
    pub restored_bytes: u64,
    pub chunks: u64,
    pub containers_read: u64,
    pub container_bytes_read: u64,
    pub read_amplification: f64,
    pub speed_factor: f64,
    pub cache: String,
    /// Sequential runs read (core's `RestoreReport::seeks`): container
    /// reads not following the previous one in id order; on MFDedup the
    /// volumes, active run and pending categories read.
    pub seeks: u64,
    pub seconds: f64,
    pub throughput_mb_s: f64,
    /// `[restore] cold`: a cold read of the version's file, MB/s (the
    /// disk's sequential speed for the same bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fread_mb_s: Option<f64>,
    /// MFDedup: categories and volumes read.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub mfdedup: Option<MfdedupRestore>,
    #[serde(skip)]
    pub io: StepIo,
}

/// MFDedup's restore figures beside the common ones (its seeks are the
/// row's `seeks`).
#[derive(Clone, Debug, Serialize)]
pub struct MfdedupRestore {
    pub categories: u64,
    pub volumes: u64,
    /// Restored through a temporary file (a stream target).
    pub buffered: bool,
}

/// Per retention round (deletion, then GC if the approach has one).
#[derive(Clone, Debug, Serialize, Default)]
pub struct GcRow {
    pub approach: String,
    pub round: usize,
    /// The round ran after this step.
    pub step: usize,
    /// Deleted backups' versions, space-separated.
    pub deleted: String,
    /// A fastcopy round (`fastcopy_doublings`): its number (1, 2, …); 0
    /// for a retention round. It cloned every retained backup and deleted
    /// nothing.
    pub fastcopy: usize,
    pub gc: String,
    /// What the GC did (all zeros when the round ran none).
    #[serde(flatten)]
    pub report: GcReport,
    /// `report.peak_memory_bytes`, under the name results files have used.
    pub gc_peak_memory_bytes: u64,
    pub retained_backups: usize,
    pub stored_bytes: u64,
    pub data_containers: usize,
    pub dedup_ratio: f64,
    #[serde(skip)]
    pub io: StepIo,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Row {
    Backup(BackupRow),
    Restore(RestoreRow),
    Gc(Box<GcRow>),
}

impl Row {
    pub fn io(&self) -> StepIo {
        match self {
            Row::Backup(r) => r.io,
            Row::Restore(r) => r.io,
            Row::Gc(r) => r.io,
        }
    }
}

/// What a step cost the backend. Kept out of the rows' own serialization
/// (the report appends it as the last columns): it depends on the mode —
/// trace mode stores no chunk bytes — while every other layout figure of a
/// row must agree between data and trace mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepIo {
    /// Gets, puts, deletes and lists.
    pub backend_requests: u64,
    pub backend_bytes_read: u64,
    pub backend_bytes_written: u64,
}

impl From<IoCounters> for StepIo {
    fn from(c: IoCounters) -> Self {
        StepIo {
            backend_requests: c.gets + c.puts + c.deletes + c.lists,
            backend_bytes_read: c.get_bytes,
            backend_bytes_written: c.put_bytes,
        }
    }
}

/// Per approach, over the whole run.
#[derive(Clone, Debug, Serialize, Default)]
pub struct Summary {
    pub approach: String,
    pub description: String,
    /// `ok`, or why the approach stopped.
    pub status: String,
    pub backups: usize,
    pub retained: usize,
    pub logical_bytes: u64,
    pub stored_bytes: u64,
    pub dedup_ratio: f64,
    pub classic_dedup_ratio: f64,
    pub mean_read_amplification: f64,
    pub mean_speed_factor: f64,
    pub backup_mb_s: f64,
    pub chunk_refs_per_s: f64,
    pub gc_rounds: usize,
    pub gc_reclaimed_containers: u64,
    pub gc_produced_containers: u64,
    pub gc_bytes_read: u64,
    pub gc_bytes_written: u64,
    pub gc_seconds: f64,
    /// Duplicate bytes the rewrite policy stored again, over all backups.
    pub rewritten_bytes: u64,
    /// The approach has a rewrite policy but rewrote nothing: its rows are
    /// the baseline's, whatever its name says (a level too loose for the
    /// data, say).
    pub rewrote_nothing: bool,
    /// Process peak resident memory when the approach finished (a high-water mark).
    pub peak_rss_bytes: u64,
    pub seconds: f64,
}

/// Which build ran an experiment, where and when: stamped into every
/// results directory so a figure can be traced to the commit behind it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stamp {
    /// `git rev-parse HEAD` of the working directory (the checkout the
    /// lab was run from; "unknown" outside one), `+dirty` when tracked
    /// files other than `experiments/results/` differ from it.
    pub commit: String,
    pub version: String,
    /// UTC, when the run started.
    pub date: String,
    pub host: String,
    pub cores: usize,
}

impl Stamp {
    /// The stamp of a run starting now.
    pub fn now() -> Self {
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let commit = match git(&["rev-parse", "HEAD"]) {
            Some(c) if !c.is_empty() => {
                // Results being written are not the build's changes.
                let dirty = git(&[
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                    "--",
                    ":(top,exclude)experiments/results",
                ])
                .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{c}+dirty")
                } else {
                    c
                }
            }
            _ => "unknown".into(),
        };
        Stamp {
            commit,
            version: env!("CARGO_PKG_VERSION").into(),
            date: tessera_core::clock::format_utc(tessera_core::clock::now()),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub experiment: String,
    pub stamp: Stamp,
    pub mode: Mode,
    pub chunker: String,
    pub hash: String,
    pub container_size: u32,
    pub versions: Vec<String>,
    pub summaries: Vec<Summary>,
    pub rows: Vec<Row>,
}

impl Results {
    pub fn failed(&self) -> Vec<&Summary> {
        self.summaries.iter().filter(|s| s.status != "ok").collect()
    }
}

/// Write dirty pages back and drop the page cache: what follows reads
/// from the disk. Needs root (`/proc/sys/vm/drop_caches`).
fn drop_page_cache() -> Result<()> {
    // SAFETY: sync has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .context("cannot write /proc/sys/vm/drop_caches (run as root, or set cold_gc / [restore] cold = false)")
}

/// Process peak resident set size (getrusage; Linux reports KiB).
pub fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut u) == 0 {
            u.ru_maxrss as u64 * 1024
        } else {
            0
        }
    }
}

/// List a dataset directory: regular, non-hidden files (or links to them:
/// a multi-source series is a directory of links into each source's
/// series) in name order.
fn list_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = e.file_name();
        let file = std::fs::metadata(e.path()).is_ok_and(|m| m.is_file());
        if name.to_string_lossy().starts_with('.') || !file {
            continue;
        }
        v.push(e.path());
    }
    v.sort();
    if v.is_empty() {
        bail!("dataset directory {} holds no version files", dir.display());
    }
    Ok(v)
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .to_string()
}

/// Materialize the dataset once under `work` (generated images, traces).
pub fn prepare(exp: &Experiment, work: &Path) -> Result<Vec<Version>> {
    let trace_dir = work.join("traces");
    let to_versions = |paths: Vec<PathBuf>, trace: bool| {
        paths
            .into_iter()
            .map(|p| Version {
                name: stem(&p),
                input: if trace {
                    Input::Trace(p)
                } else {
                    Input::Image(p)
                },
            })
            .collect::<Vec<_>>()
    };
    Ok(match (&exp.dataset, exp.mode) {
        (Dataset::Dir(d), mode) => {
            let files = list_dir(d)?;
            let (traces, images): (Vec<_>, Vec<_>) =
                files.into_iter().partition(|p| tracefile::is_trace(p));
            match (mode, traces.first(), images.first()) {
                (Mode::Data, Some(t), _) => bail!(
                    "{}: a fingerprint trace cannot be replayed in data mode (set mode = \"trace\")",
                    t.display()
                ),
                (Mode::Trace, Some(_), Some(i)) => bail!(
                    "{}: dataset {} mixes traces and other files",
                    i.display(),
                    d.display()
                ),
                (Mode::Data, None, _) => to_versions(images, false),
                (Mode::Trace, Some(_), None) => {
                    // A bad line is the dataset's fault, not an approach's: fail before running.
                    for t in &traces {
                        for c in tracefile::open(t)? {
                            c?;
                        }
                    }
                    to_versions(traces, true)
                }
                (Mode::Trace, None, _) => to_versions(
                    tracefile::convert_all(&images, &trace_dir, &exp.chunker, exp.hash)?,
                    true,
                ),
            }
        }
        (Dataset::Synthetic(cfg), Mode::Data) => {
            to_versions(synth::write_images(cfg, &work.join("dataset"))?, false)
        }
        (Dataset::Synthetic(cfg), Mode::Trace) => {
            std::fs::create_dir_all(&trace_dir)
                .with_context(|| format!("cannot create {}", trace_dir.display()))?;
            let mut paths = Vec::new();
            synth::for_each_image(cfg, |sv, img| {
                let p = trace_dir.join(format!("{}.{}", sv.name, tracefile::EXT));
                let header = format!(
                    "synthetic seed={} chunker={}",
                    cfg.seed,
                    exp.chunker.describe()
                );
                tracefile::write(
                    &p,
                    &header,
                    &tracefile::chunks_of(img, &exp.chunker, exp.hash),
                )?;
                paths.push(p);
                Ok(())
            })?;
            to_versions(paths, true)
        }
        (Dataset::Scale(cfg), _) => (0..cfg.versions)
            .map(|n| Version {
                name: format!("{n:05}"),
                input: Input::Scale(n),
            })
            .collect(),
    })
}

/// Progress on stderr (only when it is a terminal): versions done,
/// approach, rate, ETA.
struct Progress {
    on: bool,
    started: Instant,
    total: usize,
    done: usize,
    bytes: u64,
}

impl Progress {
    fn show(&self, approach: &str, version: usize, versions: usize) {
        self.line(&format!("{approach}: version {version}/{versions}"));
    }
    fn line(&self, what: &str) {
        if !self.on {
            return;
        }
        let el = self.started.elapsed().as_secs_f64();
        let rate = self.bytes as f64 / el.max(1e-9) / 1e6;
        let eta = if self.done == 0 {
            "--".to_string()
        } else {
            let s = (el / self.done as f64 * (self.total - self.done) as f64) as u64;
            format!("{}:{:02}", s / 60, s % 60)
        };
        eprint!(
            "\r\x1b[2K{what} ({}/{} backups, {rate:.0} MB/s logical, ETA {eta})",
            self.done, self.total
        );
        let _ = std::io::stderr().flush();
    }
    fn finish(&self) {
        if self.on {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Compares restored bytes with the version file as they arrive.
struct Verify<'a> {
    want: &'a [u8],
    pos: usize,
    ok: bool,
}

impl Write for Verify<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let end = self.pos + b.len();
        if end > self.want.len() || &self.want[self.pos..end] != b {
            self.ok = false;
        }
        self.pos = end;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub struct RunOptions {
    /// Work directory: generated dataset, traces, local repositories.
    pub work: PathBuf,
    pub progress: bool,
    /// Ingest only the first N versions of the dataset (`lab reproduce
    /// --quick` on a directory of versions); all of them when `None`.
    pub max_versions: Option<usize>,
}

impl RunOptions {
    pub fn new(work: &Path) -> Self {
        RunOptions {
            work: work.to_path_buf(),
            progress: std::io::stderr().is_terminal(),
            max_versions: None,
        }
    }
}

/// Run every approach of `exp` and collect the results. An approach that
/// fails stops there; its summary says why and the others still run.
pub fn run(exp: &Experiment, opts: &RunOptions) -> Result<Results> {
    let stamp = Stamp::now();
    // Held to the end: a second run on this work directory is refused.
    let _work = crate::workdir::WorkDirLock::acquire(&opts.work)?;
    let mut versions = prepare(exp, &opts.work)?;
    if let Some(n) = opts.max_versions {
        versions.truncate(n.max(1));
    }
    // Kept for the whole run; stopped (and its data removed) on return.
    let _minio = match exp.backend {
        BackendKind::S3 => Some(crate::minio::LabMinio::start(&opts.work)?),
        _ => None,
    };
    let _azurite = match exp.backend {
        BackendKind::Azure => Some(crate::azurite::LabAzurite::start(&opts.work)?),
        _ => None,
    };
    let mut progress = Progress {
        on: opts.progress,
        started: Instant::now(),
        total: versions.len() * exp.approaches.len(),
        done: 0,
        bytes: 0,
    };
    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    for a in &exp.approaches {
        let started = Instant::now();
        let mut summary = Summary {
            approach: a.name.clone(),
            description: a.describe(exp.restore.cache),
            ..Default::default()
        };
        let mut mine = Vec::new();
        let outcome = run_approach(exp, a, &versions, opts, &mut mine, &mut progress);
        summary.status = match outcome {
            Ok(()) => "ok".into(),
            Err(e) => format!("failed: {e:#}").replace('\n', " "),
        };
        summary.seconds = started.elapsed().as_secs_f64();
        summary.peak_rss_bytes = peak_rss_bytes();
        summarize(&mut summary, &mine);
        summary.rewrote_nothing =
            a.rewrite != tessera_core::rewrite::RewriteSpec::None && summary.rewritten_bytes == 0;
        rows.extend(mine);
        summaries.push(summary);
    }
    progress.finish();
    Ok(Results {
        experiment: exp.name.clone(),
        stamp,
        mode: exp.mode,
        chunker: exp.chunker.describe(),
        hash: exp.hash.name().into(),
        container_size: exp.container_size,
        versions: versions.into_iter().map(|v| v.name).collect(),
        summaries,
        rows,
    })
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

fn summarize(s: &mut Summary, rows: &[Row]) {
    let (mut backups, mut finals, mut gcs) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        match row {
            Row::Backup(b) => backups.push(b),
            Row::Restore(x) if x.when == "final" => finals.push(x),
            Row::Restore(_) => {}
            Row::Gc(g) => gcs.push(&**g),
        }
    }
    s.backups = backups.len();
    let (mut logical, mut secs, mut chunks) = (0u64, 0f64, 0u64);
    for b in &backups {
        s.rewritten_bytes += b.rewritten_bytes;
        logical += b.logical_bytes;
        secs += b.seconds;
        chunks += b.chunks;
    }
    s.logical_bytes = logical;
    s.backup_mb_s = tessera_core::metrics::mb_per_s(logical, secs);
    s.chunk_refs_per_s = if secs > 0.0 {
        chunks as f64 / secs
    } else {
        0.0
    };
    // The state after the last step: the last GC row if it came after the last backup.
    if let Some(b) = backups.last() {
        s.retained = b.retained_backups;
        s.stored_bytes = b.stored_bytes;
        s.dedup_ratio = b.dedup_ratio;
        s.classic_dedup_ratio = b.classic_dedup_ratio;
        if let Some(g) = gcs.last().filter(|g| g.step == b.step) {
            s.retained = g.retained_backups;
            s.stored_bytes = g.stored_bytes;
            s.dedup_ratio = g.dedup_ratio;
            s.classic_dedup_ratio = if g.stored_bytes == 0 {
                0.0
            } else {
                logical as f64 / g.stored_bytes as f64
            };
        }
    }
    s.mean_read_amplification = mean(finals.iter().map(|r| r.read_amplification));
    s.mean_speed_factor = mean(finals.iter().map(|r| r.speed_factor));
    s.gc_rounds = gcs.len();
    for g in gcs.iter().map(|g| &g.report) {
        s.gc_reclaimed_containers += g.reclaimed_containers;
        s.gc_produced_containers += g.produced_containers;
        s.gc_bytes_read += g.bytes_read;
        s.gc_bytes_written += g.bytes_written;
        s.gc_seconds += g.total_seconds;
    }
}

/// The store of an approach's repository, counted so each row can say
/// what it cost in backend requests and bytes.
type Counted = Arc<CountingStore<Arc<dyn ObjectStore>>>;

fn open_repo(exp: &Experiment, a: &Approach, work: &Path) -> Result<(Writer, Counted)> {
    let location = match exp.backend {
        BackendKind::Memory => "memory:".to_string(),
        BackendKind::S3 => crate::minio::location(&format!(
            "{}-{}",
            a.name.replace(':', "-"),
            tessera_core::clock::now_nanos()
        ))?,
        BackendKind::Azure => crate::azurite::location(&format!(
            "{}-{}",
            a.name.replace(':', "-"),
            tessera_core::clock::now_nanos()
        )),
        BackendKind::Local => {
            let dir = work.join("repos").join(&a.name);
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
            }
            dir.to_str()
                .with_context(|| format!("{} is not a UTF-8 path", dir.display()))?
                .to_string()
        }
    };
    let store = match exp.backend {
        // No metadata cache: the rows count what crosses the network.
        BackendKind::S3 => backend::open_s3(
            &location,
            crate::minio::options(),
            true,
            is_recipe_container,
        )?,
        BackendKind::Azure => backend::behind_cache(
            Box::new(backend::AzureStore::open(
                &location,
                crate::azurite::options()?,
            )?),
            true,
            is_recipe_container,
        )?,
        _ => backend::create(&location, is_recipe_container)?,
    };
    let counted = Arc::new(CountingStore::new(store));
    let seal = tessera_core::SealOptions {
        compression: exp.compression,
        encryption: exp
            .encrypted
            .then(|| (lab_password(), tessera_core::KdfParams::INSECURE_FAST)),
        ..Default::default()
    };
    Repository::init_with_index(
        counted.clone(),
        &InitOptions {
            hash: exp.hash,
            chunker: exp.chunker,
            container_size: exp.container_size,
            frame_size: exp.frame_size,
            trace: exp.mode == Mode::Trace,
        },
        a.layout,
        &seal,
        exp.index,
    )?;
    // The lab owns its repositories: nothing runs beside its backups.
    let mut repo = Repository::open_writer_exclusive(counted.clone(), "tessera lab run", &|| {
        Ok(lab_password())
    })?;
    if let Some(g) = a.gc.as_ref().filter(|g| g.mark == MarkSpec::Focused) {
        // FGC records the reference graph from the first backup on.
        repo.rebuild_refgraph(g.fgc_granularity.unwrap_or(0))?;
    }
    repo.set_threads(exp.threads);
    Ok((repo, counted))
}

/// One approach's pass over the backup sequence: its repository and what
/// the rows need to remember between steps.
struct ApproachRun<'a> {
    exp: &'a Experiment,
    a: &'a Approach,
    versions: &'a [Version],
    repo: Writer,
    backend: Counted,
    cache: tessera_core::restore::CacheSpec,
    scale: Option<ScaleSeries>,
    rng: Option<rand_chacha::ChaCha8Rng>,
    /// Backup id → step, so rows can name versions.
    step_of: std::collections::HashMap<BackupId, usize>,
    /// Logical bytes of every backup so far (the classic dedup ratio's numerator).
    ingested: u64,
    round: usize,
    rows: &'a mut Vec<Row>,
    /// The run's work directory (`[restore] to_file` restores into it).
    opts_work: PathBuf,
}

fn run_approach(
    exp: &Experiment,
    a: &Approach,
    versions: &[Version],
    opts: &RunOptions,
    rows: &mut Vec<Row>,
    progress: &mut Progress,
) -> Result<()> {
    let (repo, backend) = open_repo(exp, a, &opts.work)?;
    let mut run = ApproachRun {
        exp,
        a,
        versions,
        repo,
        backend,
        cache: a.cache.unwrap_or(exp.restore.cache),
        scale: match &exp.dataset {
            Dataset::Scale(cfg) => Some(ScaleSeries::new(cfg)),
            _ => None,
        },
        rng: exp.retention.as_ref().map(|r| r.rng()),
        step_of: std::collections::HashMap::new(),
        ingested: 0,
        round: 0,
        rows,
        opts_work: opts.work.clone(),
    };
    let group = exp.interleave.max(1);
    for (g, members) in versions.chunks(group).enumerate() {
        progress.show(&a.name, g * group, versions.len());
        let io = run.backend.counters();
        let reports = run.backup_group(members)?;
        // An interleaved group's requests cannot be told apart: the group's
        // last row carries them all.
        let mut io = Some(run.backend.counters().since(&io));
        let last = reports.len().saturating_sub(1);
        // The stats after the group (each member's row carries them), read
        // again only after a retention round: reading them per member cost
        // a scan of the catalog each, quadratic in a many-files series.
        let mut st = run.repo.stats();
        for (k, report) in reports.into_iter().enumerate() {
            let step = g * group + k;
            progress.done += 1;
            progress.bytes += report.logical_bytes;
            let io = if k == last { io.take() } else { None };
            run.record_backup(step, &report, io.unwrap_or_default(), &st)?;
            if run.retention_round(step, report.backup.id)? {
                st = run.repo.stats();
            }
        }
    }
    for doubling in 1..=exp.fastcopy_doublings {
        progress.line(&format!(
            "{}: fastcopy doubling {doubling} of {}",
            a.name, exp.fastcopy_doublings
        ));
        run.fastcopy_round(doubling)?;
    }
    if exp.restore.retained_at_end {
        progress.line(&format!(
            "{}: restoring {} retained backups",
            a.name,
            run.repo.backups().len()
        ));
        run.restore_retained()?;
    }
    run.repo.close()?;
    Ok(())
}

impl ApproachRun<'_> {
    fn backup_options(&self, v: &Version) -> BackupOptions {
        let source = if self.exp.mode == Mode::Trace {
            SourceKind::Trace
        } else {
            SourceKind::File
        };
        BackupOptions {
            rewrite: self.a.rewrite,
            segment_bytes: self.a.segment,
            // Every approach names the chain: MFDedup keeps one per
            // source, HAR a history per source.
            chain: Some(if self.a.one_chain {
                "series".to_string()
            } else {
                chain_of(&v.name)
            }),
            arrange: self.a.arrange_lag == 0,
            ..BackupOptions::new(v.name.clone(), source)
        }
    }

    /// MFDedup: keep arranging `arrange_lag` versions behind; the chain's
    /// figures for the backup's row.
    fn mfdedup_after(&mut self, report: &BackupReport) -> Result<Option<MfdedupBackup>> {
        if self.a.layout != LayoutKind::Mfdedup {
            return Ok(None);
        }
        let chain = report.backup.chain.clone().unwrap_or_default();
        let (mut secs, mut read, mut written) = report.arranged.as_ref().map_or((0.0, 0, 0), |a| {
            (a.seconds, a.read_bytes, a.kept_bytes + a.archived_bytes)
        });
        let lag = self.a.arrange_lag;
        let state = |r: &Writer| MfState::of(r.manifest()).unwrap_or_default();
        let behind = |r: &Writer| state(r).chain(&chain).map_or(0, |c| c.behind());
        if lag > 0 && behind(&self.repo) > lag {
            let a = self
                .repo
                .arrange_chain(&chain, Some(behind(&self.repo) - lag))?;
            secs += a.seconds;
            read += a.read_bytes;
            written += a.kept_bytes + a.archived_bytes;
        }
        let now = state(&self.repo);
        let c = now.chain(&chain);
        Ok(Some(MfdedupBackup {
            ndf_memory_bytes: report.ndf_memory_bytes.unwrap_or(0),
            arrange_seconds: secs,
            arrange_read_bytes: read,
            newest_volume_bytes: c.and_then(|c| c.volumes.last()).map_or(0, |v| v.bytes()),
            active_bytes: c.map_or(0, |c| c.active.iter().map(|x| x.bytes).sum()),
            arrange_behind: behind(&self.repo),
            arrange_written_bytes: written,
            volumes_stored: c.map_or(0, |c| c.volumes.len()),
            active_categories: c.map_or(0, |c| c.active.len()),
            largest_active_bytes: c
                .and_then(|c| c.active.iter().map(|x| x.bytes).max())
                .unwrap_or(0),
            chain,
        }))
    }

    /// Back up one version, or a group of them interleaved.
    fn backup_group(&mut self, members: &[Version]) -> Result<Vec<BackupReport>> {
        if let [v] = members {
            return Ok(vec![self.backup_one(v)?]);
        }
        let mut inputs = Vec::with_capacity(members.len());
        for v in members {
            let input = match &v.input {
                Input::Image(p) => GroupInput::Bytes(
                    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
                ),
                Input::Trace(p) => GroupInput::Trace(
                    tracefile::open(p)?.collect::<tessera_core::Result<Vec<_>>>()?,
                ),
                Input::Scale(_) => {
                    let s = self.scale.as_mut().expect("scale dataset");
                    let ids = s.next_version().to_vec();
                    GroupInput::Trace(ids.into_iter().map(|id| s.chunk(id)).collect())
                }
            };
            inputs.push((self.backup_options(v), input));
        }
        Ok(self.repo.backup_interleaved(inputs)?)
    }

    fn backup_one(&mut self, v: &Version) -> Result<BackupReport> {
        let bopts = self.backup_options(v);
        Ok(match &v.input {
            Input::Image(p) => {
                let mut f = std::fs::File::open(p)
                    .with_context(|| format!("cannot open {}", p.display()))?;
                self.repo.backup_reader(&bopts, &mut f, &mut |_| {})?
            }
            Input::Trace(p) => self.repo.backup_trace(&bopts, tracefile::open(p)?)?,
            Input::Scale(_) => {
                let s = self.scale.as_mut().expect("scale dataset");
                let ids = s.next_version().to_vec();
                let s = &*s;
                self.repo.backup_with(&bopts, |ing| {
                    for id in ids {
                        let (fp, n) = s.chunk(id);
                        ing.push_trace(fp, n)?;
                    }
                    Ok(())
                })?
            }
        })
    }

    /// The backup's row, and the restore of the newest backup if asked for.
    fn record_backup(
        &mut self,
        step: usize,
        report: &BackupReport,
        io: IoCounters,
        st: &tessera_core::repo::RepoStats,
    ) -> Result<()> {
        let mfdedup = self.mfdedup_after(report)?;
        let (a, v) = (self.a, &self.versions[step]);
        self.ingested += report.logical_bytes;
        self.step_of.insert(report.backup.id, step);
        // Only the chunks with several copies are visited: cheap per row.
        let census = self.repo.index()?.copy_census();
        self.rows.push(Row::Backup(BackupRow {
            approach: a.name.clone(),
            step,
            version: v.name.clone(),
            backup_id: report.backup.id,
            logical_bytes: report.logical_bytes,
            chunks: report.chunks,
            new_bytes: report.stored_bytes,
            rewritten_bytes: report.rewritten_bytes,
            stored_bytes: st.stored_data_bytes,
            data_containers: st.data_containers,
            retained_backups: st.backups,
            retained_logical_bytes: st.logical_bytes,
            dedup_ratio: st.dedup_ratio,
            classic_dedup_ratio: ratio(self.ingested, st.stored_data_bytes),
            seconds: report.seconds,
            throughput_mb_s: report.throughput_mb_s,
            chunk_refs_per_s: report.chunks as f64 / report.seconds.max(1e-9),
            // A writer that backs up has its index loaded.
            index_memory_bytes: st.index.map_or(0, |i| i.memory_bytes as u64),
            index_data_entries: st.index.map_or(0, |i| i.data_entries as u64),
            stored_chunks: census.chunks,
            redundant_chunks: census.redundant_chunks,
            extra_copies: census.extra_copies,
            disk_index: self.repo.index()?.disk_counts(),
            mfdedup,
            io: io.into(),
        }));
        if self.exp.restore.newest_after_each {
            // The member just made (with interleaving, not the last listed).
            let row = self.restore(&report.backup, step, "newest")?;
            self.rows.push(Row::Restore(row));
        }
        Ok(())
    }

    /// A retention round after `step` if one is due: forget, then GC if the
    /// approach has one. Returns whether a round ran.
    fn retention_round(&mut self, step: usize, backup_id: BackupId) -> Result<bool> {
        let (Some(ret), Some(rng)) = (&self.exp.retention, self.rng.as_mut()) else {
            return Ok(false);
        };
        // Backups up to this one: with interleaving, the group's later
        // members exist already but are not yet due for retention, so
        // every approach and interleave deletes the same backups. The
        // catalog lists backups in id order.
        let backups = self.repo.backups();
        let due = backups.partition_point(|b| b.id <= backup_id);
        if due <= ret.retain {
            return Ok(false);
        }
        let ids: Vec<BackupId> = backups[..due].iter().map(|b| b.id).collect();
        let gone = ret.round(&ids, rng);
        if gone.is_empty() {
            return Ok(false);
        }
        self.round += 1;
        let io = self.backend.counters();
        let forget_started = Instant::now();
        let freed = if self.a.layout == LayoutKind::Mfdedup {
            Some(self.repo.forget_freeing(&gone)?.1)
        } else {
            self.repo.forget(&gone)?;
            None
        };
        let forget_seconds = forget_started.elapsed().as_secs_f64();
        let mut g = GcRow {
            approach: self.a.name.clone(),
            round: self.round,
            step,
            deleted: gone
                .iter()
                .map(|id| self.versions[self.step_of[id]].name.clone())
                .collect::<Vec<_>>()
                .join(" "),
            gc: "none".into(),
            ..Default::default()
        };
        if ret.gc {
            self.collect(&mut g, ret.cold_gc, &format!("step {step}"))?;
        }
        if let Some(f) = freed {
            // MFDedup's "GC": forget deleted whole categories, copying nothing.
            g.gc = "mfdedup-delete".into();
            g.report.reclaimed_bytes = f.data_bytes;
            g.report.reclaimed_containers = f.categories.len().try_into().unwrap_or(u64::MAX);
            g.report.deleted_without_copy = g.report.reclaimed_containers;
            g.report.total_seconds = forget_seconds;
        }
        let st = self.repo.stats();
        g.retained_backups = st.backups;
        g.stored_bytes = st.stored_data_bytes;
        g.data_containers = st.data_containers;
        g.dedup_ratio = st.dedup_ratio;
        g.io = self.backend.counters().since(&io).into();
        self.rows.push(Row::Gc(Box::new(g)));
        Ok(true)
    }

    /// GC with the approach's options, if it has any (cold: the page cache
    /// dropped first), into `g`; `after` names the step for errors.
    fn collect(&mut self, g: &mut GcRow, cold: bool, after: &str) -> Result<()> {
        let Some(gopts) = &self.a.gc else {
            return Ok(());
        };
        if cold {
            drop_page_cache().context("cold_gc: dropping the page cache before GC")?;
        }
        g.report = self
            .repo
            .gc(gopts)
            .with_context(|| format!("gc after {after}"))?;
        g.gc = gopts.strategy.to_string();
        g.gc_peak_memory_bytes = g.report.peak_memory_bytes;
        Ok(())
    }

    /// A fastcopy doubling: clone every retained backup in one
    /// generation, then GC (cold with `cold_gc`) as a retention round would,
    /// with nothing deleted: the mark walks twice the backups over the
    /// same containers.
    fn fastcopy_round(&mut self, doubling: usize) -> Result<()> {
        let sources: Vec<BackupId> = self.repo.backups().iter().map(|b| b.id).collect();
        let io = self.backend.counters();
        let clones = self
            .repo
            .clone_backups(&sources, None)
            .with_context(|| format!("fastcopy doubling {doubling}"))?;
        for (src, c) in sources.iter().zip(&clones) {
            let step = self.step_of[src];
            self.step_of.insert(c.id, step);
            self.ingested += c.logical_bytes;
        }
        self.round += 1;
        let mut g = GcRow {
            approach: self.a.name.clone(),
            round: self.round,
            step: self.versions.len().saturating_sub(1),
            fastcopy: doubling,
            gc: "none".into(),
            ..Default::default()
        };
        let ret = self.exp.retention.as_ref();
        if ret.is_none_or(|r| r.gc) {
            let cold = ret.is_some_and(|r| r.cold_gc);
            self.collect(&mut g, cold, &format!("fastcopy doubling {doubling}"))?;
        }
        let st = self.repo.stats();
        g.retained_backups = st.backups;
        g.stored_bytes = st.stored_data_bytes;
        g.data_containers = st.data_containers;
        g.dedup_ratio = st.dedup_ratio;
        g.io = self.backend.counters().since(&io).into();
        self.rows.push(Row::Gc(Box::new(g)));
        Ok(())
    }

    /// Restore every retained backup (after the last version).
    fn restore_retained(&mut self) -> Result<()> {
        for b in self.repo.backups().to_vec() {
            let row = self.restore(&b, self.step_of[&b.id], "final")?;
            self.rows.push(Row::Restore(row));
        }
        Ok(())
    }

    fn restore(
        &self,
        b: &tessera_core::catalog::BackupEntry,
        step: usize,
        when: &'static str,
    ) -> Result<RestoreRow> {
        let v = &self.versions[step];
        let plan = &self.exp.restore;
        // No memory ceiling: an experiment measures the cache policy as the
        // papers define it (containers counted, every read the policy's),
        // which a ceiling below the policy's containers would change.
        let ropts = RestoreOptions {
            cache: self.cache,
            memory: u64::MAX,
        };
        let repo = &self.repo;
        let image = match &v.input {
            Input::Image(p) => Some(p),
            _ => None,
        };
        // The version's bytes, read first so that a cold restore starts
        // with nothing of it cached; the cold read is timed as fread().
        let mut fread_mb_s = None;
        let want = match image {
            Some(p) if plan.verify || plan.cold => {
                if plan.cold {
                    drop_page_cache().context("[restore] cold: dropping the page cache")?;
                }
                let started = Instant::now();
                let want =
                    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
                if plan.cold {
                    let secs = started.elapsed().as_secs_f64();
                    fread_mb_s = Some(tessera_core::metrics::mb_per_s(want.len() as u64, secs));
                }
                Some(want)
            }
            _ => None,
        };
        if plan.cold {
            drop_page_cache().context("[restore] cold: dropping the page cache")?;
        }
        let io = self.backend.counters();
        let r = match (&want, image) {
            (Some(want), Some(p)) if plan.to_file => {
                let out = self.opts_work.join("restore.out");
                let mut f = std::fs::File::create(&out)
                    .with_context(|| format!("cannot create {}", out.display()))?;
                let r = repo.restore_to_file(b, &mut f, &ropts, &mut |_| {})?;
                drop(f);
                let got = std::fs::read(&out)
                    .with_context(|| format!("cannot read {}", out.display()))?;
                std::fs::remove_file(&out).ok();
                if plan.verify && got != *want {
                    bail!("restore of {} does not match {}", v.name, p.display());
                }
                r
            }
            (Some(want), Some(p)) if plan.verify => {
                let mut w = Verify {
                    want,
                    pos: 0,
                    ok: true,
                };
                let r = repo.restore_to(b, &mut w, &ropts, &mut |_| {})?;
                if !w.ok || w.pos != want.len() {
                    bail!("restore of {} does not match {}", v.name, p.display());
                }
                r
            }
            // Trace mode writes nothing; the container reads are still accounted.
            _ => repo.restore_to(b, &mut std::io::sink(), &ropts, &mut |_| {})?,
        };
        Ok(RestoreRow {
            approach: self.a.name.clone(),
            when,
            step,
            version: v.name.clone(),
            backup_id: b.id,
            restored_bytes: r.restored_bytes,
            chunks: r.chunks,
            containers_read: r.data_containers_read,
            container_bytes_read: r.data_container_bytes_read,
            read_amplification: r.read_amplification,
            speed_factor: r.speed_factor,
            cache: self.cache.to_string(),
            seeks: r.seeks,
            seconds: r.seconds,
            throughput_mb_s: r.throughput_mb_s,
            fread_mb_s,
            mfdedup: r.mfdedup.as_ref().map(|m| MfdedupRestore {
                categories: m.categories,
                volumes: m.volumes,
                buffered: m.buffered,
            }),
            io: self.backend.counters().since(&io).into(),
        })
    }
}

/// The chain a version belongs to: `s<k>` of a synthetic series' `NNNNN-s<k>-vNNNN`,
/// else one chain for the whole series.
fn chain_of(name: &str) -> String {
    let parts: Vec<&str> = name.split('-').collect();
    parts
        .windows(2)
        .find(|w| {
            w[0].len() > 1
                && w[0].starts_with('s')
                && w[0][1..].bytes().all(|c| c.is_ascii_digit())
                && w[1].starts_with('v')
        })
        .map_or_else(|| "series".to_string(), |w| w[0].to_string())
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The password of the lab's encrypted repositories (throwaway data: the
/// point is the cost of sealing, not of guessing).
pub fn lab_password() -> tessera_core::Password {
    tessera_core::Password::new("tessera lab")
}
