//! `tessera lab …`: datasets, experiment runs, the demo.

use crate::args::{GenCommand, LabCommand};
use crate::ui;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tessera_lab::experiment::Experiment;
use tessera_lab::runner::{self, Results, RunOptions};
use tessera_lab::{approach, demo, git, report, reproduce, synth, tracefile};

pub fn run(cmd: LabCommand) -> Result<ExitCode> {
    match cmd {
        LabCommand::Demo {
            dir,
            approaches,
            json,
        } => run_demo(&dir, &approaches, json.json),
        LabCommand::Bench {
            trace: true,
            dir,
            size,
            versions,
            index,
            local,
            json,
            ..
        } => super::bench::run_trace(&dir, size, versions, index, local, json.json),
        LabCommand::Bench {
            dir,
            size,
            runs,
            cache,
            memory,
            compression,
            encryption,
            compressible,
            threads,
            json,
            ..
        } => super::bench::run(
            &dir,
            size.unwrap_or(tessera_core::units::ByteSize(1 << 30)),
            runs,
            (cache, memory),
            (compression, encryption, compressible),
            threads,
            json.json,
        ),
        LabCommand::Peers {
            source,
            work,
            runs,
            no_compression,
            no_settle,
            json,
        } => run_peers(source, work, runs, !no_compression, !no_settle, json.json),
        LabCommand::Gen { command } => gen(command),
        LabCommand::Reproduce {
            quick,
            out,
            no_run,
            scale,
            max_dataset,
            root,
            json,
        } => run_reproduce(
            root,
            out,
            quick.then_some(reproduce::Quick {
                scale,
                max_dataset_bytes: max_dataset.0,
            }),
            !no_run,
            json.json,
        ),
        LabCommand::Run {
            experiment,
            out,
            json,
        } => run_experiment(&experiment, out, json.json),
    }
}

fn gen(cmd: GenCommand) -> Result<ExitCode> {
    let (what, paths) = match cmd {
        GenCommand::Synth {
            out,
            series,
            trace,
            chunker,
            hash,
        } => {
            let cfg = series.config();
            cfg.validate().map_err(anyhow::Error::msg)?;
            if trace {
                let (c, h) = (chunker, hash);
                std::fs::create_dir_all(&out)
                    .with_context(|| format!("cannot create {}", out.display()))?;
                let mut paths = Vec::new();
                synth::for_each_image(&cfg, |sv, img| {
                    let p = out.join(format!("{}.{}", sv.name, tracefile::EXT));
                    let header = format!(
                        "synthetic seed={} chunker={} hash={}",
                        cfg.seed,
                        c.describe(),
                        h.name()
                    );
                    tracefile::write(&p, &header, &tracefile::chunks_of(img, &c, h))?;
                    paths.push(p);
                    Ok(())
                })?;
                ("traces", paths)
            } else {
                ("tar images", synth::write_images(&cfg, &out)?)
            }
        }
        GenCommand::Git { repo, tags, out } => ("tarballs", git::write_series(&repo, &tags, &out)?),
        GenCommand::Trace {
            input,
            out,
            chunker,
            hash,
        } => {
            let (c, h) = (chunker, hash);
            if !input.is_dir() {
                bail!("dataset directory {} does not exist", input.display());
            }
            let mut images: Vec<PathBuf> = std::fs::read_dir(&input)
                .with_context(|| format!("cannot list {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            images.sort();
            ("traces", tracefile::convert_all(&images, &out, &c, h)?)
        }
    };
    let bytes: u64 = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    println!("wrote {} {what} ({})", paths.len(), ui::bytes(bytes));
    if let (Some(a), Some(b)) = (paths.first(), paths.last()) {
        println!("  {} … {}", a.display(), b.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_summary(r: &Results) {
    println!(
        "{:<12} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>7}  status",
        "approach",
        "backups",
        "dedup",
        "classic",
        "read amp",
        "speed f",
        "MB/s",
        "Mref/s",
        "GC recl",
        "peak MiB",
        "time s"
    );
    for s in &r.summaries {
        println!(
            "{:<12} {:>7} {:>7.2} {:>7.2} {:>8.3} {:>8.3} {:>8.1} {:>7.2} {:>7} {:>8.0} {:>7.1}  {}",
            s.approach,
            s.backups,
            s.dedup_ratio,
            s.classic_dedup_ratio,
            s.mean_read_amplification,
            s.mean_speed_factor,
            s.backup_mb_s,
            s.chunk_refs_per_s / 1e6,
            s.gc_reclaimed_containers,
            s.peak_rss_bytes as f64 / (1u64 << 20) as f64,
            s.seconds,
            if s.rewrote_nothing {
                format!("{} (rewrote nothing)", s.status)
            } else {
                s.status.clone()
            }
        );
    }
}

/// Write the outputs, print them, and fail (after writing) if an approach failed.
fn finish(
    r: &Results,
    out: &Path,
    started: Instant,
    json: bool,
    headlines: &[demo::Headline],
) -> Result<ExitCode> {
    let w = report::write_all(r, out)?;
    let secs = started.elapsed().as_secs_f64();
    if json {
        ui::print_json(&serde_json::json!({
            "experiment": r.experiment,
            "report": w.html,
            "csv": w.csv,
            "jsonl": w.jsonl,
            "seconds": secs,
            "summaries": r.summaries,
            "headlines": headlines,
        }))?;
    } else {
        print_summary(r);
        println!("\nreport: {}", w.html.display());
        println!("data:   {}, {}", w.csv.display(), w.jsonl.display());
        println!("time:   {secs:.1} s");
    }
    if let Some(f) = r.failed().first() {
        bail!(
            "approach '{}' {} (results of the others are in {})",
            f.approach,
            f.status,
            w.html.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn run_experiment(file: &Path, out: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    let started = Instant::now();
    let exp = Experiment::load(file)?;
    let out = out.unwrap_or_else(|| Path::new("lab-results").join(&exp.name));
    let r = runner::run(&exp, &RunOptions::new(&out.join("work")))?;
    finish(&r, &out, started, json, &[])
}

/// Marks a directory as the demo's, so a later demo may replace it.
const DEMO_MARK: &str = ".tessera-lab-demo";

fn run_demo(dir: &Path, approaches: &str, json: bool) -> Result<ExitCode> {
    let started = Instant::now();
    let list = approach::resolve_list(approaches).map_err(anyhow::Error::msg)?;
    if list.is_empty() {
        bail!("--approaches names no approach");
    }
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .next()
            .is_none();
        if !empty && !dir.join(DEMO_MARK).exists() {
            bail!(
                "{} exists and is not an earlier demo's directory; choose another --dir",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join(DEMO_MARK), b"")
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    let exp = demo::experiment(list, &dir.join("demo.toml"));
    if !json {
        let d = demo::dataset();
        eprintln!(
            "demo: {} sources x {} versions, approaches {approaches}",
            d.sources, d.versions
        );
    }
    let work = dir.join("work");
    let r = runner::run(&exp, &RunOptions::new(&work))?;
    if r.failed().is_empty() {
        // The dataset (~300 MB) is reproducible: `tessera lab run experiments/demo.toml`.
        let _ = std::fs::remove_dir_all(&work);
    }
    let heads = demo::headlines(&r);
    let code = finish(&r, dir, started, json, &heads)?;
    if !json && !heads.is_empty() {
        println!(
            "
the papers' headlines, in this run:"
        );
        for h in &heads {
            println!(
                "  {} {}: {}
      {}",
                if h.holds { "holds " } else { "DIFFERS" },
                h.paper,
                h.claim,
                h.shows
            );
        }
    }
    Ok(code)
}

fn run_peers(
    source: PathBuf,
    work: PathBuf,
    runs: u32,
    compression: bool,
    settle: bool,
    json: bool,
) -> Result<ExitCode> {
    use tessera_lab::peers;
    let opts = peers::PeersOptions {
        source,
        work: work.clone(),
        runs: runs as usize,
        tessera: std::env::current_exe().context("cannot find the tessera binary")?,
        compression,
        settle,
    };
    let report = peers::run(&opts, &mut |s| {
        if !json {
            eprintln!("peers: {s}…");
        }
    })?;
    std::fs::write(work.join("peers.json"), serde_json::to_vec_pretty(&report)?)?;
    std::fs::write(work.join("report.html"), peers::html(&report))?;
    if json {
        ui::print_json(&report)?;
    } else {
        print!("{}", peers::markdown(&report));
        println!("\nwritten: {}", work.join("report.html").display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The checkout holding the reproduction template: `dir` or the nearest
/// directory above it.
fn find_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(reproduce::TEMPLATE).is_file())
        .map(Path::to_path_buf)
}

fn run_reproduce(
    root: Option<PathBuf>,
    out: Option<PathBuf>,
    quick: Option<reproduce::Quick>,
    run: bool,
    json: bool,
) -> Result<ExitCode> {
    if let Some(q) = &quick {
        if !(q.scale > 0.0 && q.scale <= 1.0) {
            bail!("--scale must be in (0, 1] (got {})", q.scale);
        }
    }
    let root = match root {
        Some(r) => r,
        None => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            find_root(&cwd).with_context(|| {
                format!(
                    "no {} here or above {}: run from the checkout or give --root",
                    reproduce::TEMPLATE,
                    cwd.display()
                )
            })?
        }
    };
    let mut opts = reproduce::Options::new(&root, out.as_deref(), quick, run);
    opts.progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let report = reproduce::reproduce(&opts, &mut |s| {
        if !json {
            eprintln!("reproduce: {s}");
        }
    })?;
    if json {
        ui::print_json(&report)?;
    } else {
        for o in &report.outcomes {
            println!(
                "{:<28} {:>7.1} s  {}",
                o.experiment,
                o.seconds,
                o.status.lines().next().unwrap_or_default()
            );
        }
        println!(
            "\nwrote {} in {:.1} s",
            report.doc.display(),
            report.seconds
        );
    }
    Ok(ExitCode::SUCCESS)
}
