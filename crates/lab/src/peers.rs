//! `tessera lab peers TREE`: Tessera side by side with restic and borg on the
//! same tree, the same machine, one run of each step at a time.
//!
//! Every tool runs as a child process, so each is measured the same way:
//! wall time, and peak resident memory from `wait4`'s resource usage. The
//! steps are what users do: a first backup, an unchanged backup, a backup
//! after one file changed, a restore of the newest backup, and dropping the
//! oldest backup with its space (`forget` + `gc`, `forget --prune`,
//! `prune` + `compact`). Beside the restores, `cp -a` of the tree is timed
//! the same way: the floor a restore is compared with.
//!
//! Settled (the default as root, see [`crate::settle`]): before each step
//! the page cache is written back and dropped and only that step's input is
//! read back (the tree for a backup and the copy, the repository for a
//! restore and for forget + gc); every restore and copy writes into a fresh
//! ext4 on a loop image. Warm (`--no-settle`, or not root): `sync` between
//! steps, the input read right before each step, restores into the work
//! directory's file system.
//!
//! The source directory is copied once into the work directory (the changed
//! file step edits the copy, never the caller's tree) and repositories are
//! made afresh for every run; medians over runs are reported.
//!
//! Nothing is deleted between steps. ext4 without a journal (this
//! machine's root file system) passes over inodes freed in the last 60 s
//! when it allocates new ones, and over those freed in the last 360 s
//! whose inode table block is dirty (`recently_deleted` in
//! `fs/ext4/ialloc.c`, checked one inode at a time) — and a step that
//! creates files keeps dirtying those blocks. So a step that creates many
//! files within six minutes of a large deletion pays seconds of system time
//! that belong to the deletion. Measured (2026-11-26, a restore of
//! `/usr/share`, 46 k files, after deleting six such trees): 14.4 s right
//! after, 9.8 s at +65 s, 8.8 s at +130 s, 8.9 s at +200 s, 7.3 s at +290 s,
//! 1.35 s at +370 s. Finished runs (and, warm, restore targets) are
//! therefore moved to `trash/` and removed after the last measurement. When
//! the work directory held an earlier comparison, clearing it freed many
//! inodes: warm, the first restore waits until [`SETTLE`] after the
//! clearing; settled, restores and copies go to file systems that never
//! freed an inode, but the backups still create their repositories' files
//! on the work directory's, so the first timed step waits instead.

use crate::settle::{self, ImageSize, LoopFs};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::ffi::OsString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tool under comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    Tessera,
    Restic,
    Borg,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Tessera => "tessera",
            Tool::Restic => "restic",
            Tool::Borg => "borg",
        }
    }
}

/// The steps, in the order they run.
pub const STEPS: [&str; 5] = ["first", "unchanged", "changed", "restore", "forget+gc"];

/// What to compare.
#[derive(Debug, Clone)]
pub struct PeersOptions {
    pub source: PathBuf,
    /// Work directory: the source copy, repositories, restore targets.
    pub work: PathBuf,
    pub runs: usize,
    /// The tessera binary to run (normally the running one).
    pub tessera: PathBuf,
    /// Compress where the tool can (restic auto, borg lz4); otherwise every
    /// tool stores uncompressed.
    pub compression: bool,
    /// Time every step settled (see [`crate::settle`]) when this machine
    /// allows it; otherwise, or when false, warm.
    pub settle: bool,
}

/// How the steps were timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Page cache dropped and the step's input read back before each step;
    /// restores and the copy into a fresh ext4 on a loop image.
    Settled,
    /// `sync` and the step's input read right before each step; restores
    /// into the work directory's file system.
    Warm,
}

/// `cp -a` of the tree, timed as the restores are: what a restore is
/// compared with.
#[derive(Debug, Clone, Serialize)]
pub struct CopyFigures {
    /// Median over the runs.
    pub seconds: f64,
    /// Every run's time, in run order.
    pub runs: Vec<f64>,
    pub peak_rss_bytes: u64,
    /// Every run's CPU seconds, `[user, system]`, in run order.
    pub cpu_runs: Vec<[f64; 2]>,
}

/// One step of one tool: medians over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct StepFigures {
    pub step: String,
    pub seconds: f64,
    /// Every run's time, in run order.
    pub runs: Vec<f64>,
    /// Largest peak resident set over the runs.
    pub peak_rss_bytes: u64,
    /// Every run's CPU seconds, `[user, system]` (from `wait4`), in run
    /// order. Why: whether a step is CPU-bound, and how much kernel time
    /// the steps before it add, decide how its time compares (docs/LAB.md,
    /// "why the harness measures restores slower").
    pub cpu_runs: Vec<[f64; 2]>,
    /// This step's time over the fastest peer's (restic, borg); absent for peers.
    pub vs_fastest_peer: Option<f64>,
    /// The restore's time over `cp -a` of the tree; absent for other steps.
    pub vs_copy: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolFigures {
    pub tool: Tool,
    pub version: String,
    pub steps: Vec<StepFigures>,
    /// Repository bytes after the first backup and at the end (median runs agree).
    pub stored_after_first: u64,
    pub stored_final: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeersReport {
    pub source: PathBuf,
    pub source_bytes: u64,
    pub source_files: u64,
    /// Reading every file once (warm), and walking + stat-ing the tree.
    pub read_all_seconds: f64,
    pub walk_seconds: f64,
    pub runs: usize,
    pub compression: bool,
    pub method: Method,
    /// Why the settled method was asked for and not used.
    pub method_note: Option<String>,
    /// The loop file system each restore and copy wrote into (settled).
    pub image: Option<ImageSize>,
    /// `cp -a` of the tree into the restores' kind of target.
    pub copy: Option<CopyFigures>,
    pub tools: Vec<ToolFigures>,
    /// Tools not run, and why (not installed).
    pub skipped: Vec<String>,
}

/// How long ext4 may treat freed inodes as recently deleted (60 s, plus
/// 300 s while their inode table block is dirty; see the module doc), with
/// a second to spare. It was 31 s, and the restores of the first runs
/// (tessera's most, as it runs first) paid for clearing the work directory.
const SETTLE: Duration = Duration::from_secs(361);

/// Move `path` under `work/trash/` (a rename: no inode is freed until the
/// comparison ends).
fn trash(work: &Path, path: &Path) -> Result<()> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let bin = work.join("trash");
    fs::create_dir_all(&bin)?;
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let to = bin.join(format!("{}-{n}", std::process::id()));
    fs::rename(path, &to)
        .with_context(|| format!("cannot move {} to {}", path.display(), to.display()))
}

/// Run the comparison; `note` hears progress.
pub fn run(opts: &PeersOptions, note: &mut dyn FnMut(&str)) -> Result<PeersReport> {
    // Restores run in their target directory (borg extracts there), so a
    // relative work directory would name another place to them.
    let opts = &PeersOptions {
        source: std::path::absolute(&opts.source)?,
        work: std::path::absolute(&opts.work)?,
        ..opts.clone()
    };
    if !opts.source.is_dir() {
        bail!("{} is not a directory", opts.source.display());
    }
    let (method, method_note) = match (opts.settle, settle::unavailable()) {
        (false, _) => (Method::Warm, None),
        (true, None) => (Method::Settled, None),
        (true, Some(why)) => {
            note(&format!("settled timing not possible: {why}"));
            (Method::Warm, Some(why))
        }
    };
    // An interrupted settled comparison may have left its loop file system
    // mounted: clearing must not descend into it.
    settle::unmount_stale(&opts.work.join("images").join("mnt"))?;
    let cleared = prepare_work(&opts.work)?;
    let wait_until = Instant::now() + if cleared { SETTLE } else { Duration::ZERO };
    if cleared {
        note(&format!(
            "the work directory held an earlier comparison: the first {} waits until {} s after clearing it (ext4 shuns freshly freed inodes)",
            match method {
                Method::Settled => "timed step",
                Method::Warm => "restore",
            },
            SETTLE.as_secs()
        ));
    }
    let src = opts.work.join("source");
    note("copying the source into the work directory");
    copy_tree(&opts.source, &src)?;
    let (files, bytes) = tree_size(&src)?;
    let changed = pick_changed_file(&src)?;

    read_all(&src)?;
    let t = Instant::now();
    read_all(&src)?;
    let read_all_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    tree_size(&src)?;
    let walk_seconds = t.elapsed().as_secs_f64();

    let mut stage = Stage {
        method,
        wait_until,
        image: None,
    };
    if method == Method::Settled {
        let size = settle::image_size(&src)?;
        note(&format!(
            "making the loop image for restores ({:.2} GB, a fresh ext4 before each restore)",
            size.bytes as f64 / 1e9
        ));
        let images = opts.work.join("images");
        fs::create_dir_all(&images)?;
        stage.image = Some(LoopFs::create(
            &images.join("restore.img"),
            &images.join("mnt"),
            size,
        )?);
        // One untimed use first: the loop path is proven before any
        // backup is spent, and no timed step is the image's first use (in
        // a check on a loaded machine, a cp -a into a just-filled image
        // took 24 s, the next 6.6 s).
        let t = stage.target(&images, "warm-up")?;
        copy_tree(&src, &t.join("source"))?;
        stage.done(&opts.work, &t)?;
    }

    let mut tools = Vec::new();
    let mut skipped = Vec::new();
    for tool in [Tool::Tessera, Tool::Restic, Tool::Borg] {
        let version = match version_of(tool, opts) {
            Ok(v) => v,
            Err(e) => {
                skipped.push(format!("{}: {e}", tool.name()));
                continue;
            }
        };
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); STEPS.len()];
        let mut cpus: Vec<Vec<[f64; 2]>> = vec![Vec::new(); STEPS.len()];
        let mut peaks = vec![0u64; STEPS.len()];
        let (mut first_size, mut final_size) = (0, 0);
        for run in 0..opts.runs {
            note(&format!("{} run {}/{}", tool.name(), run + 1, opts.runs));
            let r = run_tool(tool, opts, &src, changed.as_deref(), &mut stage)?;
            for (i, m) in r.steps.iter().enumerate() {
                times[i].push(m.secs);
                cpus[i].push([m.user, m.system]);
                peaks[i] = peaks[i].max(m.peak);
            }
            first_size = r.stored_after_first;
            final_size = r.stored_final;
        }
        let steps = STEPS
            .iter()
            .zip(times)
            .zip(cpus)
            .zip(peaks)
            .map(|(((step, runs), cpu_runs), peak)| StepFigures {
                step: step.to_string(),
                seconds: median(&runs),
                runs,
                peak_rss_bytes: peak,
                cpu_runs,
                vs_fastest_peer: None,
                vs_copy: None,
            })
            .collect();
        tools.push(ToolFigures {
            tool,
            version,
            steps,
            stored_after_first: first_size,
            stored_final: final_size,
        });
    }
    let mut copy_runs = Vec::new();
    let mut copy_cpu = Vec::new();
    let mut copy_peak = 0;
    for run in 0..opts.runs {
        note(&format!("cp -a run {}/{}", run + 1, opts.runs));
        let m = copy_step(opts, &src, &mut stage)?;
        copy_runs.push(m.secs);
        copy_cpu.push([m.user, m.system]);
        copy_peak = copy_peak.max(m.peak);
    }
    let copy = CopyFigures {
        seconds: median(&copy_runs),
        runs: copy_runs,
        peak_rss_bytes: copy_peak,
        cpu_runs: copy_cpu,
    };
    compare(&mut tools, Some(&copy));
    note("removing the loop image, the runs' repositories and restores");
    let image = stage.image.as_ref().map(|i| i.size());
    drop(stage);
    let _ = fs::remove_dir_all(opts.work.join("images"));
    let _ = fs::remove_dir_all(opts.work.join("run"));
    let _ = fs::remove_dir_all(opts.work.join("trash"));
    Ok(PeersReport {
        source: opts.source.clone(),
        source_bytes: bytes,
        source_files: files,
        read_all_seconds,
        walk_seconds,
        runs: opts.runs,
        compression: opts.compression,
        method,
        method_note,
        image,
        copy: Some(copy),
        tools,
        skipped,
    })
}

/// Tessera's time over the fastest peer's, step by step, and every tool's
/// restore over `cp -a` of the tree.
fn compare(tools: &mut [ToolFigures], copy: Option<&CopyFigures>) {
    for i in 0..STEPS.len() {
        let fastest = tools
            .iter()
            .filter(|t| t.tool != Tool::Tessera)
            .map(|t| t.steps[i].seconds)
            .fold(f64::INFINITY, f64::min);
        if fastest.is_finite() {
            for t in tools.iter_mut().filter(|t| t.tool == Tool::Tessera) {
                t.steps[i].vs_fastest_peer = Some(t.steps[i].seconds / fastest);
            }
        }
    }
    let restore = STEPS.iter().position(|s| *s == "restore");
    if let (Some(i), Some(c)) = (restore, copy) {
        if c.seconds > 0.0 {
            for t in tools.iter_mut() {
                t.steps[i].vs_copy = Some(t.steps[i].seconds / c.seconds);
            }
        }
    }
}

/// How each timed step is prepared and where restores and copies write.
struct Stage {
    method: Method,
    /// Before this instant no step that creates many files may start (an
    /// earlier comparison was cleared; see the module doc).
    wait_until: Instant,
    /// Settled: the image made into a fresh ext4 for every restore.
    image: Option<LoopFs>,
}

impl Stage {
    /// Ready a timed step whose input is `input`; `creates_tree` when the
    /// step writes a whole tree (a restore or the copy).
    fn before(&mut self, input: &Path, creates_tree: bool) -> Result<()> {
        if creates_tree || self.method == Method::Settled {
            if let Some(wait) = self.wait_until.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        match self.method {
            Method::Settled => settle::drop_caches()?,
            Method::Warm => sync(),
        }
        read_all(input)
    }

    /// An empty directory for a restore or copy: on a fresh ext4 (settled)
    /// or named `name` in `dir` (warm).
    fn target(&mut self, dir: &Path, name: &str) -> Result<PathBuf> {
        let t = match &mut self.image {
            Some(image) => image.fresh()?.join(name),
            None => dir.join(name),
        };
        fs::create_dir_all(&t)?;
        Ok(t)
    }

    /// The restore or copy into `target` is over: unmount its file system
    /// (settled) or move it aside (warm); nothing is deleted.
    fn done(&mut self, work: &Path, target: &Path) -> Result<()> {
        match &mut self.image {
            Some(image) => image.unmount(),
            None => trash(work, target),
        }
    }
}

/// One timed `cp -a` of the tree into a restore's kind of target.
fn copy_step(opts: &PeersOptions, src: &Path, stage: &mut Stage) -> Result<Measured> {
    let dir = opts.work.join("run").join("cp");
    fs::create_dir_all(&dir)?;
    let target = stage.target(&dir, "copy")?;
    stage.before(src, true)?;
    let mut cp = Command::new("cp");
    cp.arg("-a").arg(src).arg(&target);
    let r = measure(cp, "cp");
    stage.done(&opts.work, &target)?;
    r
}

/// The work directory must be new, empty, or an earlier comparison's
/// (marked by a file), so a mistyped path never gets cleared. Returns
/// whether anything was deleted.
fn prepare_work(work: &Path) -> Result<bool> {
    const MARK: &str = ".tessera-peers";
    let mut cleared = false;
    if work.exists() {
        let empty = fs::read_dir(work)?.next().is_none();
        if !empty && !work.join(MARK).exists() {
            bail!(
                "{} is not empty and was not made by `tessera lab peers`; choose another --work",
                work.display()
            );
        }
        fs::remove_dir_all(work).with_context(|| format!("cannot clear {}", work.display()))?;
        cleared = !empty;
    }
    fs::create_dir_all(work).with_context(|| format!("cannot create {}", work.display()))?;
    fs::write(work.join(MARK), b"")?;
    Ok(cleared)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .context("cannot run cp")?;
    if !status.success() {
        bail!("cp -a {} {} failed", from.display(), to.display());
    }
    Ok(())
}

/// Regular files and their bytes, walking without following symlinks.
fn tree_size(root: &Path) -> Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    settle::walk(root, |e, ft| {
        if ft.is_file() {
            files += 1;
            bytes += e.metadata()?.len();
        }
        Ok(())
    })?;
    Ok((files, bytes))
}

/// Read every regular file once (what `find … | xargs cat` does).
fn read_all(root: &Path) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    settle::walk(root, |e, ft| {
        if ft.is_file() {
            if let Ok(mut f) = fs::File::open(e.path()) {
                while f.read(&mut buf)? > 0 {}
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// The file the "changed" step edits: the first (in path order) of at
/// least 64 KiB, or the largest if none is that large.
fn pick_changed_file(root: &Path) -> Result<Option<PathBuf>> {
    let mut all = Vec::new();
    settle::walk(root, |e, ft| {
        if ft.is_file() {
            let m = e.metadata()?;
            if m.len() > 0 && m.mode() & 0o200 != 0 {
                all.push((e.path(), m.len()));
            }
        }
        Ok(())
    })?;
    all.sort();
    Ok(all
        .iter()
        .find(|(_, len)| *len >= 64 << 10)
        .or_else(|| all.iter().max_by_key(|(_, len)| *len))
        .map(|(p, _)| p.clone()))
}

/// Overwrite 16 bytes in the middle of `path` (size unchanged); returns the
/// old bytes so the edit can be undone for the next run.
fn edit_file(path: &Path, bytes: Option<&[u8]>) -> Result<Vec<u8>> {
    let mut f = fs::OpenOptions::new().read(true).write(true).open(path)?;
    let len = f.metadata()?.len();
    let at = len / 2;
    let n = 16.min(len - at) as usize;
    let mut old = vec![0u8; n];
    f.seek(SeekFrom::Start(at))?;
    f.read_exact(&mut old)?;
    let new: Vec<u8> = match bytes {
        Some(b) => b.to_vec(),
        None => old.iter().map(|b| !b).collect(),
    };
    f.seek(SeekFrom::Start(at))?;
    f.write_all(&new)?;
    f.sync_all()?;
    Ok(old)
}

fn version_of(tool: Tool, opts: &PeersOptions) -> Result<String> {
    let (prog, arg) = match tool {
        Tool::Tessera => (opts.tessera.as_os_str().to_owned(), "--version"),
        Tool::Restic => (OsString::from("restic"), "version"),
        Tool::Borg => (OsString::from("borg"), "--version"),
    };
    let out = Command::new(&prog)
        .arg(arg)
        .output()
        .map_err(|_| anyhow::anyhow!("not installed (apt-get install {})", tool_package(tool)))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn tool_package(tool: Tool) -> &'static str {
    match tool {
        Tool::Tessera => "tessera",
        Tool::Restic => "restic",
        Tool::Borg => "borgbackup",
    }
}

/// One run's figures: each step's, and stored sizes.
struct RunFigures {
    steps: Vec<Measured>,
    stored_after_first: u64,
    stored_final: u64,
}

/// The commands of one tool, for one run in `dir`.
struct Commands<'a> {
    tool: Tool,
    opts: &'a PeersOptions,
    dir: PathBuf,
    repo: PathBuf,
}

impl Commands<'_> {
    fn cmd(&self, args: &[&dyn AsRefOs]) -> Command {
        let mut c = match self.tool {
            Tool::Tessera => Command::new(&self.opts.tessera),
            Tool::Restic => Command::new("restic"),
            Tool::Borg => Command::new("borg"),
        };
        for a in args {
            c.arg(a.os());
        }
        match self.tool {
            Tool::Tessera => {
                c.env("TESSERA_PASSWORD", "peers")
                    .env("NO_COLOR", "1")
                    .env("TESSERA_CACHE_DIR", self.dir.join("tessera-cache"));
            }
            Tool::Restic => {
                c.env("RESTIC_REPOSITORY", &self.repo)
                    .env("RESTIC_PASSWORD", "peers")
                    .env("RESTIC_CACHE_DIR", self.dir.join("restic-cache"));
            }
            Tool::Borg => {
                c.env("BORG_PASSPHRASE", "peers")
                    .env("BORG_BASE_DIR", self.dir.join("borg-home"))
                    .env("BORG_RELOCATED_REPO_ACCESS_IS_OK", "yes");
            }
        }
        c
    }

    fn init(&self) -> Command {
        match self.tool {
            // Encrypted as restic and borg are; compressed (auto, the
            // default) only when they are.
            Tool::Tessera => {
                let compression = if self.opts.compression { "auto" } else { "off" };
                self.cmd(&[
                    &"init",
                    &"--repo",
                    &self.repo,
                    &"--compression",
                    &compression,
                ])
            }
            Tool::Restic => self.cmd(&[&"init", &"--repository-version", &"2"]),
            Tool::Borg => self.cmd(&[&"init", &"--encryption", &"repokey-blake2", &self.repo]),
        }
    }

    fn backup(&self, src: &Path, n: usize) -> Command {
        let archive = format!("{}::b{n}", self.repo.display());
        let restic_compression = if self.opts.compression { "auto" } else { "off" };
        let borg_compression = if self.opts.compression { "lz4" } else { "none" };
        match self.tool {
            Tool::Tessera => self.cmd(&[&"backup", &"--repo", &self.repo, &src]),
            Tool::Restic => self.cmd(&[
                &"backup",
                &"--quiet",
                &"--compression",
                &restic_compression,
                &src,
            ]),
            Tool::Borg => self.cmd(&[&"create", &"-C", &borg_compression, &archive, &src]),
        }
    }

    fn restore(&self, target: &Path) -> Command {
        match self.tool {
            Tool::Tessera => self.cmd(&[
                &"restore",
                &"--repo",
                &self.repo,
                &"latest",
                &"--target",
                &target,
            ]),
            Tool::Restic => self.cmd(&[&"restore", &"--quiet", &"latest", &"--target", &target]),
            Tool::Borg => {
                let mut c = self.cmd(&[&"extract", &format!("{}::b3", self.repo.display())]);
                c.current_dir(target);
                c
            }
        }
    }

    /// Drop the oldest backup and reclaim its space: one or two commands.
    fn forget_gc(&self) -> Vec<Command> {
        match self.tool {
            Tool::Tessera => vec![
                self.cmd(&[&"forget", &"--repo", &self.repo, &"--keep-last", &"2"]),
                self.cmd(&[&"gc", &"--repo", &self.repo]),
            ],
            Tool::Restic => {
                vec![self.cmd(&[&"forget", &"--quiet", &"--keep-last", &"2", &"--prune"])]
            }
            Tool::Borg => vec![
                self.cmd(&[&"prune", &"--keep-last", &"2", &self.repo]),
                self.cmd(&[&"compact", &self.repo]),
            ],
        }
    }
}

/// Arguments of mixed types for [`Commands::cmd`].
trait AsRefOs {
    fn os(&self) -> &std::ffi::OsStr;
}
impl AsRefOs for &str {
    fn os(&self) -> &std::ffi::OsStr {
        self.as_ref()
    }
}
impl AsRefOs for String {
    fn os(&self) -> &std::ffi::OsStr {
        self.as_ref()
    }
}
impl AsRefOs for PathBuf {
    fn os(&self) -> &std::ffi::OsStr {
        self.as_os_str()
    }
}
impl AsRefOs for &Path {
    fn os(&self) -> &std::ffi::OsStr {
        self.as_os_str()
    }
}

fn run_tool(
    tool: Tool,
    opts: &PeersOptions,
    src: &Path,
    changed: Option<&Path>,
    stage: &mut Stage,
) -> Result<RunFigures> {
    let dir = opts.work.join("run").join(tool.name());
    if dir.exists() {
        trash(&opts.work, &dir)?;
    }
    fs::create_dir_all(&dir)?;
    let c = Commands {
        tool,
        opts,
        repo: dir.join("repo"),
        dir: dir.clone(),
    };
    let name = tool.name();
    measure(c.init(), name)?;
    let mut steps = Vec::new();
    stage.before(src, false)?;
    steps.push(measure(c.backup(src, 1), name)?);
    let stored_after_first = du(&c.repo)?;
    stage.before(src, false)?;
    steps.push(measure(c.backup(src, 2), name)?);
    let old = changed.map(|p| edit_file(p, None)).transpose()?;
    stage.before(src, false)?;
    steps.push(measure(c.backup(src, 3), name)?);
    if let (Some(p), Some(old)) = (changed, old) {
        edit_file(p, Some(&old))?;
    }
    let target = stage.target(&dir, "restore")?;
    stage.before(&c.repo, true)?;
    let restored = measure(c.restore(&target), name);
    stage.done(&opts.work, &target)?;
    steps.push(restored?);
    // Settled, forget + gc starts from the repository read back; warm, it
    // runs after a `sync` as it always has.
    match stage.method {
        Method::Settled => stage.before(&c.repo, false)?,
        Method::Warm => sync(),
    }
    let mut forget_gc = Measured::default();
    for cmd in c.forget_gc() {
        let m = measure(cmd, name)?;
        forget_gc = Measured {
            secs: forget_gc.secs + m.secs,
            peak: forget_gc.peak.max(m.peak),
            user: forget_gc.user + m.user,
            system: forget_gc.system + m.system,
        };
    }
    steps.push(forget_gc);
    let stored_final = du(&c.repo)?;
    trash(&opts.work, &dir)?;
    Ok(RunFigures {
        steps,
        stored_after_first,
        stored_final,
    })
}

/// One command, run to completion.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    /// Wall seconds.
    secs: f64,
    /// Peak resident set, bytes.
    peak: u64,
    /// CPU seconds in user space and in the kernel.
    user: f64,
    system: f64,
}

/// Run `cmd` to completion: its wall time, and its peak RSS and CPU time
/// from `wait4`. A failing command is an error carrying its stderr.
fn measure(mut cmd: Command, tool: &str) -> Result<Measured> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {tool}"))?;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let mut status = 0;
    // SAFETY: plain FFI call with valid out-pointers; the child is ours and
    // not waited for elsewhere.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = started.elapsed().as_secs_f64();
    if r != pid {
        bail!("waiting for {tool} failed");
    }
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        let line = err.lines().last().unwrap_or("").to_string();
        bail!(
            "{tool} failed ({:?}): {line}",
            cmd.get_args().collect::<Vec<_>>()
        );
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Measured {
        secs,
        peak: usage.ru_maxrss as u64 * 1024,
        user: seconds(usage.ru_utime),
        system: seconds(usage.ru_stime),
    })
}

fn sync() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Bytes of the files below `path` (the repository's stored size).
fn du(path: &Path) -> Result<u64> {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p)?;
        if m.is_dir() {
            for e in fs::read_dir(&p)? {
                stack.push(e?.path());
            }
        } else if m.is_file() {
            total += m.len();
        }
    }
    Ok(total)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The CPU seconds (`[user, system]`) of the run whose time is the median
/// (the lower middle one of an even count); `None` without CPU figures.
fn median_cpu(runs: &[f64], cpu: &[[f64; 2]]) -> Option<[f64; 2]> {
    if runs.is_empty() || cpu.len() != runs.len() {
        return None;
    }
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| runs[a].total_cmp(&runs[b]));
    Some(cpu[order[(runs.len() - 1) / 2]])
}

/// How the figures were taken, for the report's first line.
fn method_words(r: &PeersReport) -> &'static str {
    match r.method {
        Method::Settled => {
            "settled (page cache dropped and the step's input read back before each step; restores and cp -a into a fresh ext4)"
        }
        Method::Warm => "warm cache",
    }
}

/// Peak resident memory of a tool's backups, restore, and forget + gc.
fn peaks(t: &ToolFigures) -> [u64; 3] {
    let of = |names: &[&str]| {
        t.steps
            .iter()
            .filter(|s| names.contains(&s.step.as_str()))
            .map(|s| s.peak_rss_bytes)
            .max()
            .unwrap_or(0)
    };
    [
        of(&["first", "unchanged", "changed"]),
        of(&["restore"]),
        of(&["forget+gc"]),
    ]
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// The comparison as a Markdown table (the README's figures come from it).
pub fn markdown(r: &PeersReport) -> String {
    let mut out = format!(
        "{} ({} files, {}); median of {} run(s), {}, {}; reading every file: {:.2} s, walking: {:.2} s\n\n",
        r.source.display(),
        r.source_files,
        mb(r.source_bytes),
        r.runs,
        method_words(r),
        if r.compression { "default compression" } else { "uncompressed" },
        r.read_all_seconds,
        r.walk_seconds,
    );
    if let Some(why) = &r.method_note {
        out.push_str(&format!("settled timing not used: {why}\n\n"));
    }
    out.push_str("| tool | ");
    out.push_str(&STEPS.join(" | "));
    out.push_str(
        " | restore / cp -a | stored (first) | stored (end) | peak memory (backup / restore / forget+gc) |\n|---|",
    );
    out.push_str(&"---|".repeat(STEPS.len() + 4));
    out.push('\n');
    for t in &r.tools {
        out.push_str(&format!("| {} |", t.tool.name()));
        let mut vs_copy = None;
        for s in &t.steps {
            vs_copy = vs_copy.or(s.vs_copy);
            match s.vs_fastest_peer {
                Some(x) => out.push_str(&format!(" {:.2} s ({:.2}×) |", s.seconds, x)),
                None => out.push_str(&format!(" {:.2} s |", s.seconds)),
            }
        }
        match vs_copy {
            Some(x) => out.push_str(&format!(" {x:.2}× |")),
            None => out.push_str(" — |"),
        }
        let [b, re, g] = peaks(t);
        out.push_str(&format!(
            " {} | {} | {} / {} / {} |\n",
            mb(t.stored_after_first),
            mb(t.stored_final),
            mb(b),
            mb(re),
            mb(g)
        ));
    }
    if let Some(c) = &r.copy {
        out.push_str("| cp -a |");
        for step in STEPS {
            if step == "restore" {
                out.push_str(&format!(" {:.2} s |", c.seconds));
            } else {
                out.push_str(" — |");
            }
        }
        out.push_str(&format!(
            " 1.00× | — | — | — / {} / — |\n",
            mb(c.peak_rss_bytes)
        ));
    }
    if r.tools.iter().any(|t| t.tool == Tool::Tessera) && r.tools.len() > 1 {
        out.push_str("\n(×) = Tessera's time / the fastest peer's; below 1 is faster.\n");
    }
    if r.copy.is_some() {
        out.push_str("restore / cp -a = the restore's time / cp -a of the tree into the same kind of target.\n");
    }
    let mut cpu = Vec::new();
    for t in &r.tools {
        if let Some([u, s]) = t
            .steps
            .iter()
            .find(|s| s.step == "restore")
            .and_then(|s| median_cpu(&s.runs, &s.cpu_runs))
        {
            cpu.push(format!("{} {u:.2} / {s:.2} s", t.tool.name()));
        }
    }
    if let Some([u, s]) = r
        .copy
        .as_ref()
        .and_then(|c| median_cpu(&c.runs, &c.cpu_runs))
    {
        cpu.push(format!("cp -a {u:.2} / {s:.2} s"));
    }
    if !cpu.is_empty() {
        out.push_str(&format!(
            "CPU of the median restore, user / system: {}.\n",
            cpu.join(", ")
        ));
    }
    for s in &r.skipped {
        out.push_str(&format!("\nnot run: {s}\n"));
    }
    out
}

/// A standalone HTML page with the same table.
pub fn html(r: &PeersReport) -> String {
    let mut rows = String::new();
    for t in &r.tools {
        rows.push_str(&format!("<tr><th>{}</th>", t.tool.name()));
        let mut vs_copy = None;
        for s in &t.steps {
            vs_copy = vs_copy.or(s.vs_copy);
            rows.push_str(&format!("<td>{:.2} s", s.seconds));
            if let Some(x) = s.vs_fastest_peer {
                rows.push_str(&format!(" ({x:.2}×)"));
            }
            rows.push_str("</td>");
        }
        match vs_copy {
            Some(x) => rows.push_str(&format!("<td>{x:.2}×</td>")),
            None => rows.push_str("<td>—</td>"),
        }
        let [b, re, g] = peaks(t);
        rows.push_str(&format!(
            "<td>{}</td><td>{}</td><td>{} / {} / {}</td></tr>\n",
            mb(t.stored_after_first),
            mb(t.stored_final),
            mb(b),
            mb(re),
            mb(g)
        ));
    }
    if let Some(c) = &r.copy {
        rows.push_str("<tr><th>cp -a</th>");
        for step in STEPS {
            if step == "restore" {
                rows.push_str(&format!("<td>{:.2} s</td>", c.seconds));
            } else {
                rows.push_str("<td>—</td>");
            }
        }
        rows.push_str(&format!(
            "<td>1.00×</td><td>—</td><td>—</td><td>— / {} / —</td></tr>\n",
            mb(c.peak_rss_bytes)
        ));
    }
    let heads: String = STEPS.iter().map(|s| format!("<th>{s}</th>")).collect();
    format!(
        "<!doctype html><meta charset=utf-8><title>tessera lab peers</title>\
         <style>body{{font-family:sans-serif}}td,th{{padding:4px 10px;text-align:right}}</style>\
         <h1>Tessera, restic and borg on {}</h1><p>{} files, {:.1} MB; median of {} run(s); {}; {}.</p>\
         <table><tr><th>tool</th>{heads}<th>restore / cp -a</th><th>stored (first)</th><th>stored (end)</th><th>peak memory (backup / restore / forget+gc)</th></tr>\n{rows}</table>",
        html_escape(&r.source.display().to_string()),
        r.source_files,
        r.source_bytes as f64 / 1e6,
        r.runs,
        method_words(r),
        if r.compression { "default compression" } else { "uncompressed" },
    )
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn edit_is_undone_exactly() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        fs::write(&p, &data).unwrap();
        let old = edit_file(&p, None).unwrap();
        let edited = fs::read(&p).unwrap();
        assert_eq!(edited.len(), data.len());
        assert_ne!(edited, data);
        edit_file(&p, Some(&old)).unwrap();
        assert_eq!(fs::read(&p).unwrap(), data);
    }

    /// Trashing moves, never deletes, and never lands two paths on one name.
    #[test]
    fn trash_moves_without_deleting() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..3 {
            let t = d.path().join("restore");
            fs::create_dir_all(t.join("sub")).unwrap();
            fs::write(t.join("sub/f"), [i]).unwrap();
            trash(d.path(), &t).unwrap();
            assert!(!t.exists());
        }
        let mut kept: Vec<u8> = fs::read_dir(d.path().join("trash"))
            .unwrap()
            .map(|e| fs::read(e.unwrap().path().join("sub/f")).unwrap()[0])
            .collect();
        kept.sort();
        assert_eq!(kept, [0, 1, 2]);
    }

    /// A tool's figures with the given step times (peak memory: 10 MB per
    /// second, so every step's differs).
    fn figures(tool: Tool, secs: [f64; 5]) -> ToolFigures {
        ToolFigures {
            tool,
            version: "0".into(),
            steps: STEPS
                .iter()
                .zip(secs)
                .map(|(step, s)| StepFigures {
                    step: step.to_string(),
                    seconds: s,
                    runs: vec![s],
                    peak_rss_bytes: (s * 1e7) as u64,
                    cpu_runs: vec![[s * 0.5, s * 0.25]],
                    vs_fastest_peer: None,
                    vs_copy: None,
                })
                .collect(),
            stored_after_first: 800_000_000,
            stored_final: 600_000_000,
        }
    }

    fn report() -> PeersReport {
        let copy = CopyFigures {
            seconds: 2.0,
            runs: vec![2.0],
            peak_rss_bytes: 3_000_000,
            cpu_runs: vec![[0.25, 1.5]],
        };
        let mut tools = vec![
            figures(Tool::Tessera, [7.0, 0.5, 0.45, 3.5, 1.0]),
            figures(Tool::Restic, [14.0, 2.5, 2.0, 7.0, 4.0]),
            figures(Tool::Borg, [15.0, 3.8, 3.6, 8.0, 2.0]),
        ];
        compare(&mut tools, Some(&copy));
        PeersReport {
            source: "/work/usrtree".into(),
            source_bytes: 2_290_000_000,
            source_files: 68_505,
            read_all_seconds: 1.0,
            walk_seconds: 0.2,
            runs: 1,
            compression: true,
            method: Method::Settled,
            method_note: None,
            image: Some(settle::image_size_for(2_350_000_000, 9_000, 68_505)),
            copy: Some(copy),
            tools,
            skipped: vec![],
        }
    }

    #[test]
    fn restores_are_compared_with_the_copy_and_tessera_with_the_fastest_peer() {
        let r = report();
        let restore = |t: &ToolFigures| {
            t.steps
                .iter()
                .find(|s| s.step == "restore")
                .unwrap()
                .clone()
        };
        assert_eq!(restore(&r.tools[0]).vs_copy, Some(1.75));
        assert_eq!(restore(&r.tools[1]).vs_copy, Some(3.5));
        assert_eq!(restore(&r.tools[2]).vs_copy, Some(4.0));
        // Only the restore is compared with the copy.
        for t in &r.tools {
            for s in t.steps.iter().filter(|s| s.step != "restore") {
                assert_eq!(s.vs_copy, None, "{} {}", t.tool.name(), s.step);
            }
        }
        // Tessera over the fastest peer: restic's restore, borg's forget+gc.
        assert_eq!(restore(&r.tools[0]).vs_fastest_peer, Some(0.5));
        assert_eq!(r.tools[0].steps[4].vs_fastest_peer, Some(0.5));
        assert_eq!(r.tools[1].steps[3].vs_fastest_peer, None);
    }

    /// The CPU figures reported are the median run's, and are in the JSON
    /// and the table's notes.
    #[test]
    fn cpu_of_the_median_run_is_reported() {
        let cpu = [[3.0, 0.3], [1.0, 0.1], [2.0, 0.2], [4.0, 0.4]];
        assert_eq!(median_cpu(&[3.0, 1.0, 2.0], &cpu[..3]), Some([2.0, 0.2]));
        // Even: the lower middle run.
        assert_eq!(median_cpu(&[3.0, 1.0, 2.0, 4.0], &cpu), Some([2.0, 0.2]));
        assert_eq!(median_cpu(&[1.0, 2.0], &cpu[..1]), None, "not every run's");
        assert_eq!(median_cpu(&[], &[]), None);
        let r = report();
        let md = markdown(&r);
        assert!(
            md.contains("CPU of the median restore, user / system: tessera 1.75 / 0.88 s, restic 3.50 / 1.75 s, borg 4.00 / 2.00 s, cp -a 0.25 / 1.50 s."),
            "{md}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["tools"][0]["steps"][3]["cpu_runs"],
            serde_json::json!([[1.75, 0.875]])
        );
        assert_eq!(v["copy"]["cpu_runs"], serde_json::json!([[0.25, 1.5]]));
    }

    /// A command's CPU time comes back from `wait4`: a shell busy in a
    /// loop uses user time, and no more than its wall time (one thread).
    #[test]
    fn measure_reports_the_child_cpu_time() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done");
        let m = measure(cmd, "sh").unwrap();
        assert!(m.user > 0.0, "{m:?}");
        assert!(m.user + m.system <= m.secs + 0.02, "{m:?}");
        assert!(m.peak > 0, "{m:?}");
    }

    #[test]
    fn no_copy_no_ratio() {
        let mut tools = vec![figures(Tool::Tessera, [1.0; 5])];
        compare(&mut tools, None);
        assert!(tools[0].steps.iter().all(|s| s.vs_copy.is_none()));
        // A zero copy time (nothing measured) gives no ratio, not infinity.
        let zero = CopyFigures {
            seconds: 0.0,
            runs: vec![],
            peak_rss_bytes: 0,
            cpu_runs: vec![],
        };
        compare(&mut tools, Some(&zero));
        assert!(tools[0].steps.iter().all(|s| s.vs_copy.is_none()));
    }

    #[test]
    fn json_carries_the_method_and_the_copy_row() {
        let v = serde_json::to_value(report()).unwrap();
        assert_eq!(v["method"], "settled");
        assert_eq!(v["method_note"], serde_json::Value::Null);
        assert_eq!(v["copy"]["seconds"], 2.0);
        assert_eq!(v["copy"]["runs"], serde_json::json!([2.0]));
        assert_eq!(v["copy"]["peak_rss_bytes"], 3_000_000);
        assert!(v["image"]["bytes"].as_u64().unwrap() > 2_350_000_000);
        let tessera = &v["tools"][0];
        assert_eq!(tessera["tool"], "tessera");
        assert_eq!(tessera["steps"][3]["step"], "restore");
        assert_eq!(tessera["steps"][3]["vs_copy"], 1.75);
        assert_eq!(tessera["steps"][3]["peak_rss_bytes"], 35_000_000);
        assert_eq!(tessera["steps"][0]["vs_copy"], serde_json::Value::Null);
        assert_eq!(v["tools"][2]["tool"], "borg");
    }

    #[test]
    fn table_has_the_copy_row_and_the_ratio_column() {
        let md = markdown(&report());
        assert!(md.contains("settled (page cache dropped"), "{md}");
        let row = |name: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| {name} |")))
                .unwrap_or_else(|| panic!("no {name} row in\n{md}"))
                .to_string()
        };
        let cp_row = row("cp -a");
        let cp: Vec<&str> = cp_row.split('|').map(str::trim).collect::<Vec<_>>();
        let cp = cp[1..cp.len() - 1].to_vec();
        // tool, five steps (only the restore's filled), ratio, stored ×2, memory.
        assert_eq!(
            cp,
            [
                "cp -a",
                "—",
                "—",
                "—",
                "2.00 s",
                "—",
                "1.00×",
                "—",
                "—",
                "— / 3.0 MB / —"
            ]
        );
        let t = row("tessera");
        assert!(
            t.contains("| 3.50 s (0.50×) | 1.00 s (0.50×) | 1.75× |"),
            "{t}"
        );
        // Peak memory: backups (7 s step), restore, forget+gc.
        assert!(t.ends_with("| 70.0 MB / 35.0 MB / 10.0 MB |"), "{t}");
        assert!(row("restic").contains("| 7.00 s | 4.00 s | 3.50× |"));
        let header_cells = md
            .lines()
            .find(|l| l.starts_with("| tool |"))
            .unwrap()
            .matches('|')
            .count();
        assert_eq!(row("cp -a").matches('|').count(), header_cells);
        assert_eq!(row("borg").matches('|').count(), header_cells);
    }

    #[test]
    fn warm_fallback_is_said_in_the_table() {
        let mut r = report();
        r.method = Method::Warm;
        r.method_note = settle::unavailable_for(1000, |_| true);
        let md = markdown(&r);
        assert!(md.contains("warm cache"), "{md}");
        assert!(md.contains("settled timing not used: not root"), "{md}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["method"], "warm");
        assert!(v["method_note"].as_str().unwrap().contains("not root"));
    }

    #[test]
    fn work_directory_of_someone_else_is_refused() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("precious"), b"x").unwrap();
        assert!(prepare_work(d.path()).is_err());
        assert!(d.path().join("precious").exists());
        let w = d.path().join("w");
        // A new directory: nothing was deleted, no restore need wait.
        assert!(!prepare_work(&w).unwrap());
        fs::write(w.join("junk"), b"x").unwrap();
        // An earlier comparison's: cleared, and the caller must settle.
        assert!(prepare_work(&w).unwrap());
        assert!(!w.join("junk").exists());
    }
}
