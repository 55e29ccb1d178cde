//! `tessera lab peers DIR`: Tessera side by side with restic and borg on the
//! same directory, the same machine, one run of each step at a time.
//!
//! Every tool runs as a child process, so each is measured the same way:
//! wall time, and peak resident memory from `wait4`'s resource usage. The
//! steps are what users do: a first backup, an unchanged backup, a backup
//! after one file changed, a restore of the newest backup, and dropping the
//! oldest backup with its space (`forget` + `gc`, `forget --prune`,
//! `prune` + `compact`). `sync` runs between steps so one step's write-back
//! does not land in the next one's time. Inputs are read right before each
//! backup step and the repository right before each restore, so figures are
//! warm-cache (this machine evicts idle pages after about 30 s).
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
//! 1.35 s at +370 s. Restore targets and finished runs are therefore moved
//! to `trash/` and removed after the last measurement, and the first
//! restore waits until [`SETTLE`] after the work directory was cleared.

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
    /// This step's time over the fastest peer's (restic, borg); absent for peers.
    pub vs_fastest_peer: Option<f64>,
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
    if !opts.source.is_dir() {
        bail!("{} is not a directory", opts.source.display());
    }
    let cleared = prepare_work(&opts.work)?;
    let settled = Instant::now() + if cleared { SETTLE } else { Duration::ZERO };
    if cleared {
        note(&format!(
            "the work directory held an earlier comparison: the first restore waits until {} s after clearing it (ext4 shuns freshly freed inodes)",
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
        let mut peaks = vec![0u64; STEPS.len()];
        let (mut first_size, mut final_size) = (0, 0);
        for run in 0..opts.runs {
            note(&format!("{} run {}/{}", tool.name(), run + 1, opts.runs));
            let r = run_tool(tool, opts, &src, changed.as_deref(), settled)?;
            for (i, (secs, rss)) in r.steps.iter().enumerate() {
                times[i].push(*secs);
                peaks[i] = peaks[i].max(*rss);
            }
            first_size = r.stored_after_first;
            final_size = r.stored_final;
        }
        let steps = STEPS
            .iter()
            .zip(times)
            .zip(peaks)
            .map(|((step, runs), peak)| StepFigures {
                step: step.to_string(),
                seconds: median(&runs),
                runs,
                peak_rss_bytes: peak,
                vs_fastest_peer: None,
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
    // Ratios to the fastest peer, step by step.
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
    note("removing the runs' repositories and restores");
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
        tools,
        skipped,
    })
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
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let e = e?;
            let m = e.metadata()?;
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                files += 1;
                bytes += m.len();
            }
        }
    }
    Ok((files, bytes))
}

/// Read every regular file once (what `find … | xargs cat` does).
fn read_all(root: &Path) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir)? {
            let e = e?;
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                if let Ok(mut f) = fs::File::open(e.path()) {
                    while f.read(&mut buf)? > 0 {}
                }
            }
        }
    }
    Ok(())
}

/// The file the "changed" step edits: the first (in path order) of at
/// least 64 KiB, or the largest if none is that large.
fn pick_changed_file(root: &Path) -> Result<Option<PathBuf>> {
    let mut all = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir)? {
            let e = e?;
            let m = e.metadata()?;
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() && m.len() > 0 && m.mode() & 0o200 != 0 {
                all.push((e.path(), m.len()));
            }
        }
    }
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

/// One run's figures: (seconds, peak RSS) per step, and stored sizes.
struct RunFigures {
    steps: Vec<(f64, u64)>,
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
    settled: Instant,
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
    measure(c.init(), tool)?;
    let mut steps = Vec::new();
    sync();
    read_all(src)?;
    steps.push(measure(c.backup(src, 1), tool)?);
    let stored_after_first = du(&c.repo)?;
    sync();
    read_all(src)?;
    steps.push(measure(c.backup(src, 2), tool)?);
    sync();
    let old = changed.map(|p| edit_file(p, None)).transpose()?;
    read_all(src)?;
    steps.push(measure(c.backup(src, 3), tool)?);
    if let (Some(p), Some(old)) = (changed, old) {
        edit_file(p, Some(&old))?;
    }
    sync();
    let target = dir.join("restore");
    fs::create_dir_all(&target)?;
    if let Some(wait) = settled.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
    read_all(&c.repo)?;
    steps.push(measure(c.restore(&target), tool)?);
    trash(&opts.work, &target)?;
    sync();
    let (mut secs, mut peak) = (0.0, 0);
    for cmd in c.forget_gc() {
        let (s, p) = measure(cmd, tool)?;
        secs += s;
        peak = peak.max(p);
    }
    steps.push((secs, peak));
    let stored_final = du(&c.repo)?;
    trash(&opts.work, &dir)?;
    Ok(RunFigures {
        steps,
        stored_after_first,
        stored_final,
    })
}

/// Run `cmd` to completion: wall seconds and peak RSS (bytes). A failing
/// command is an error carrying its stderr.
fn measure(mut cmd: Command, tool: Tool) -> Result<(f64, u64)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", tool.name()))?;
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
        bail!("waiting for {} failed", tool.name());
    }
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        let line = err.lines().last().unwrap_or("").to_string();
        bail!(
            "{} failed ({:?}): {line}",
            tool.name(),
            cmd.get_args().collect::<Vec<_>>()
        );
    }
    Ok((secs, usage.ru_maxrss as u64 * 1024))
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

/// The comparison as a Markdown table (the README's figures come from it).
pub fn markdown(r: &PeersReport) -> String {
    let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
    let mut out = format!(
        "{} ({} files, {}); median of {} run(s), warm cache, {}; reading every file: {:.2} s, walking: {:.2} s\n\n",
        r.source.display(),
        r.source_files,
        mb(r.source_bytes),
        r.runs,
        if r.compression { "default compression" } else { "uncompressed" },
        r.read_all_seconds,
        r.walk_seconds,
    );
    out.push_str("| tool | ");
    out.push_str(&STEPS.join(" | "));
    out.push_str(" | stored (first) | stored (end) | peak memory |\n|---|");
    out.push_str(&"---|".repeat(STEPS.len() + 3));
    out.push('\n');
    for t in &r.tools {
        out.push_str(&format!("| {} |", t.tool.name()));
        for s in &t.steps {
            match s.vs_fastest_peer {
                Some(x) => out.push_str(&format!(" {:.2} s ({:.2}×) |", s.seconds, x)),
                None => out.push_str(&format!(" {:.2} s |", s.seconds)),
            }
        }
        let peak = t.steps.iter().map(|s| s.peak_rss_bytes).max().unwrap_or(0);
        out.push_str(&format!(
            " {} | {} | {} |\n",
            mb(t.stored_after_first),
            mb(t.stored_final),
            mb(peak)
        ));
    }
    if r.tools.iter().any(|t| t.tool == Tool::Tessera) && r.tools.len() > 1 {
        out.push_str("\n(×) = Tessera's time / the fastest peer's; below 1 is faster.\n");
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
        for s in &t.steps {
            rows.push_str(&format!("<td>{:.2} s", s.seconds));
            if let Some(x) = s.vs_fastest_peer {
                rows.push_str(&format!(" ({x:.2}×)"));
            }
            rows.push_str("</td>");
        }
        let peak = t.steps.iter().map(|s| s.peak_rss_bytes).max().unwrap_or(0);
        rows.push_str(&format!(
            "<td>{:.1} MB</td><td>{:.1} MB</td><td>{:.1} MB</td></tr>\n",
            t.stored_after_first as f64 / 1e6,
            t.stored_final as f64 / 1e6,
            peak as f64 / 1e6
        ));
    }
    let heads: String = STEPS.iter().map(|s| format!("<th>{s}</th>")).collect();
    format!(
        "<!doctype html><meta charset=utf-8><title>tessera lab peers</title>\
         <style>body{{font-family:sans-serif}}td,th{{padding:4px 10px;text-align:right}}</style>\
         <h1>Tessera, restic and borg on {}</h1><p>{} files, {:.1} MB; median of {} run(s); {}.</p>\
         <table><tr><th>tool</th>{heads}<th>stored (first)</th><th>stored (end)</th><th>peak memory</th></tr>\n{rows}</table>",
        html_escape(&r.source.display().to_string()),
        r.source_files,
        r.source_bytes as f64 / 1e6,
        r.runs,
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
