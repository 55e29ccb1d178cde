//! `tessera lab reproduce`: run every experiment that
//! `experiments/REPRODUCTION.md.in` cites and regenerate
//! `docs/REPRODUCTION.md` from their results.
//!
//! The template is Markdown with directive lines; each names one
//! experiment (`experiments/NAME.toml`, results in `RESULTS/NAME/`) and is
//! replaced by a table computed from that experiment's per-step CSV:
//!
//! * `@TABLE NAME`: per approach, the final actual dedup ratio, the mean
//!   read amplification of the newest-backup restores and of the retained
//!   backups restored at the end (all, older half, newer half), and the
//!   containers GC produced;
//! * `@GCTABLE NAME`: GC's share of the layout (rounds; containers
//!   involved, reclaimed, produced; the live share of what GC read; GC's
//!   output over the data containers at the end; retained RA);
//! * `@ROUNDS NAME APPROACH…`: read amplification of the newest backup by
//!   the number of GC rounds before it, with the containers each round
//!   produced;
//! * `@SMRTABLE NAME`: the SMR paper's dedup ratio (both definitions), mean
//!   speed factor (all and the last 20), bytes rewritten, backup MB/s;
//! * `@GCTIME NAME`: GC time in the GCCDF paper's four stages;
//! * `@COPIES NAME`: the redundancy among containers (SMR paper, Figs.
//!   4–5): chunks stored in more than one container and their copies
//!   beyond the first, after a quarter, half, three quarters and all of
//!   the backups.
//! * `@COLDRESTORE NAME`: MFDedup's §5 restore and migration figures per
//!   approach (restore MB/s from a cold cache beside a cold read of the
//!   same bytes, seeks, RA, data migrated, arranging or GC time);
//! * `@MFLAYOUT NAME`: MFDedup's volumes and active categories (Fig. 17).
//!
//! The set of experiments run is exactly the set of names the directives
//! cite. An experiment whose dataset directory is missing is skipped and
//! its committed results are used; a directive whose results exist nowhere,
//! a table without rows, an empty section or a section saying "pending"
//! or "not run yet" fails the command, naming the section.

use crate::experiment::{Dataset, Experiment};
use crate::runner::{self, RunOptions, Stamp};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The template, relative to the checkout's root.
pub const TEMPLATE: &str = "experiments/REPRODUCTION.md.in";
/// The generated document, relative to the checkout's root.
pub const DOC: &str = "docs/REPRODUCTION.md";
/// The committed results, relative to the checkout's root.
pub const RESULTS: &str = "experiments/results";
/// The experiment files, relative to the checkout's root.
pub const EXPERIMENTS: &str = "experiments";

/// One directive of the template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Directive {
    Table,
    GcTable,
    /// The approaches whose columns the table has, in order.
    Rounds(Vec<String>),
    SmrTable,
    GcTime,
    Copies,
    ColdRestore,
    MfLayout,
}

/// A directive line: what to compute, from which experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectiveLine {
    pub directive: Directive,
    pub experiment: String,
    /// 1-based line of the template.
    pub line: usize,
}

/// The directive on `line`, `None` if it is an ordinary line. A line
/// starting with `@` and a capital letter that is not a known directive is
/// an error (a typo would otherwise vanish from the document).
pub fn parse_directive(line: &str, no: usize) -> Result<Option<DirectiveLine>> {
    let Some(rest) = line.strip_prefix('@') else {
        return Ok(None);
    };
    if !rest.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Ok(None);
    }
    let mut words = rest.split_whitespace();
    let kind = words.next().unwrap_or_default();
    let name = words
        .next()
        .ok_or_else(|| anyhow!("{TEMPLATE}:{no}: @{kind} needs an experiment name"))?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
        || name.starts_with('.')
    {
        bail!("{TEMPLATE}:{no}: '{name}' is not an experiment name");
    }
    let args: Vec<String> = words.map(str::to_string).collect();
    let directive = match kind {
        "TABLE" => Directive::Table,
        "GCTABLE" => Directive::GcTable,
        "SMRTABLE" => Directive::SmrTable,
        "GCTIME" => Directive::GcTime,
        "COPIES" => Directive::Copies,
        "COLDRESTORE" => Directive::ColdRestore,
        "MFLAYOUT" => Directive::MfLayout,
        "ROUNDS" if args.is_empty() => {
            bail!("{TEMPLATE}:{no}: @ROUNDS {name} needs at least one approach")
        }
        "ROUNDS" => Directive::Rounds(args.clone()),
        other => bail!(
            "{TEMPLATE}:{no}: unknown directive @{other} (known: @TABLE, @GCTABLE, @ROUNDS, @SMRTABLE, @GCTIME, @COPIES, @COLDRESTORE, @MFLAYOUT)"
        ),
    };
    if !matches!(directive, Directive::Rounds(_)) && !args.is_empty() {
        bail!("{TEMPLATE}:{no}: @{kind} takes only an experiment name");
    }
    Ok(Some(DirectiveLine {
        directive,
        experiment: name.to_string(),
        line: no,
    }))
}

/// Every directive of a template, in order.
pub fn directives(template: &str) -> Result<Vec<DirectiveLine>> {
    let mut out = Vec::new();
    for (i, line) in template.lines().enumerate() {
        if let Some(d) = parse_directive(line, i + 1)? {
            out.push(d);
        }
    }
    Ok(out)
}

/// The experiments a template cites, each once, in order of first mention.
pub fn experiments(template: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for d in directives(template)? {
        if !out.contains(&d.experiment) {
            out.push(d.experiment);
        }
    }
    Ok(out)
}

/// A lab `results.csv`: columns by name, rows as fields. Fields are split
/// at every comma (the lab quotes no field of a results file).
pub struct Csv {
    col: HashMap<String, usize>,
    rows: Vec<Vec<String>>,
}

impl Csv {
    pub fn parse(text: &str) -> Csv {
        let mut lines = text.lines();
        let col = lines
            .next()
            .unwrap_or_default()
            .split(',')
            .enumerate()
            .map(|(i, c)| (c.to_string(), i))
            .collect();
        let rows = lines
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect();
        Csv { col, rows }
    }

    /// The field of `row` in column `name` ("" when absent).
    fn get<'a>(&self, row: &'a [String], name: &str) -> &'a str {
        self.col
            .get(name)
            .and_then(|&i| row.get(i))
            .map_or("", String::as_str)
    }

    /// The field as a number (0 when blank or not a number).
    fn num(&self, row: &[String], name: &str) -> f64 {
        self.get(row, name).trim().parse().unwrap_or(0.0)
    }

    pub fn rows(&self) -> usize {
        self.rows.len()
    }
}

/// The names under which a results directory may hold its per-step CSV.
pub const CSV_NAMES: &[&str] = &["results.csv", "results.csv.gz", "results.csv.zst"];

/// The per-step CSV of a results directory (plain, gzip or zstd), if any.
pub fn load_csv(dir: &Path) -> Result<Option<Csv>> {
    let there: Vec<&&str> = CSV_NAMES.iter().filter(|n| dir.join(n).is_file()).collect();
    if there.len() > 1 {
        bail!(
            "{} holds {} per-step CSVs ({}): remove the stale ones",
            dir.display(),
            there.len(),
            there
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for name in CSV_NAMES {
        let p = dir.join(name);
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
        };
        let mut text = String::new();
        let read = if name.ends_with(".gz") {
            flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_string(&mut text)
        } else if name.ends_with(".zst") {
            zstd::stream::read::Decoder::new(&bytes[..])
                .and_then(|mut d| d.read_to_string(&mut text))
        } else {
            std::io::Cursor::new(bytes).read_to_string(&mut text)
        };
        read.with_context(|| format!("cannot decompress {}", p.display()))?;
        return Ok(Some(Csv::parse(&text)));
    }
    Ok(None)
}

/// Approaches in order of first appearance.
fn order(csv: &Csv, keep: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &csv.rows {
        let a = csv.get(r, "approach");
        if keep(r) && !out.iter().any(|x| x == a) {
            out.push(a.to_string());
        }
    }
    out
}

fn rows_of<'a>(csv: &'a Csv, a: &'a str) -> impl Iterator<Item = &'a Vec<String>> + 'a {
    csv.rows.iter().filter(move |r| csv.get(r, "approach") == a)
}

fn kind<'a>(csv: &Csv, r: &'a [String]) -> &'a str {
    csv.get(r, "kind")
}

fn restores<'a>(
    csv: &'a Csv,
    a: &'a str,
    when: &'a str,
) -> impl Iterator<Item = &'a Vec<String>> + 'a {
    rows_of(csv, a).filter(move |r| kind(csv, r) == "restore" && csv.get(r, "when") == when)
}

/// `x` with `p` decimals, or "–" when there is nothing to average.
fn or_dash(n: usize, v: impl FnOnce() -> f64, p: usize) -> String {
    if n == 0 {
        "–".into()
    } else {
        format!("{:.*}", p, v())
    }
}

/// `@TABLE`: dedup, read amplification, GC produced per approach.
pub fn table(csv: &Csv) -> String {
    let mut s = String::from(
        "| approach | actual dedup ratio | RA newest (mean) | RA retained (mean) | RA older half | RA newer half | GC produced |\n|---|---|---|---|---|---|---|\n",
    );
    for a in order(csv, |_| true) {
        let mut dedup = 0.0;
        let mut produced = 0.0;
        for r in rows_of(csv, &a) {
            if !csv.get(r, "dedup_ratio").is_empty() {
                dedup = csv.num(r, "dedup_ratio");
            }
            if kind(csv, r) == "gc" {
                produced += csv.num(r, "produced_containers");
            }
        }
        let newest: Vec<f64> = restores(csv, &a, "newest")
            .map(|r| csv.num(r, "read_amplification"))
            .collect();
        // Final restores are in backup order: halves by position.
        let fin: Vec<f64> = restores(csv, &a, "final")
            .map(|r| csv.num(r, "read_amplification"))
            .collect();
        let (m, h) = (fin.len(), fin.len() / 2);
        let sum = |v: &[f64]| v.iter().fold(0.0, |s, x| s + x);
        writeln!(
            s,
            "| {a} | {dedup:.3} | {} | {} | {} | {} | {} |",
            or_dash(newest.len(), || sum(&newest) / newest.len() as f64, 3),
            or_dash(m, || sum(&fin) / m as f64, 3),
            or_dash(h, || sum(&fin[..h]) / h as f64, 3),
            or_dash(m - h, || sum(&fin[h..]) / (m - h) as f64, 3),
            produced as i64
        )
        .ok();
    }
    s
}

/// `@GCTABLE`: GC's share of the layout, per approach that ran GC.
pub fn gc_table(csv: &Csv) -> String {
    let mut s = String::from(
        "| approach | GC rounds | involved | reclaimed | produced | live share of reclaimed | produced / data containers at the end | RA retained (mean) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for a in order(csv, |_| true) {
        let (mut rounds, mut inv, mut rec, mut prod, mut br, mut bw) = (0, 0.0, 0.0, 0.0, 0.0, 0.0);
        let mut last = 0.0;
        for r in rows_of(csv, &a) {
            if !csv.get(r, "data_containers").is_empty() {
                last = csv.num(r, "data_containers");
            }
            if kind(csv, r) == "gc" {
                rounds += 1;
                inv += csv.num(r, "involved_containers");
                rec += csv.num(r, "reclaimed_containers");
                prod += csv.num(r, "produced_containers");
                br += csv.num(r, "bytes_read");
                bw += csv.num(r, "bytes_written");
            }
        }
        if rounds == 0 {
            continue;
        }
        let fin: Vec<f64> = restores(csv, &a, "final")
            .map(|r| csv.num(r, "read_amplification"))
            .collect();
        let live = if br != 0.0 {
            format!("{:.0} %", 100.0 * bw / br)
        } else {
            "–".into()
        };
        let share = if last != 0.0 {
            format!("{:.0} % ({})", 100.0 * prod / last, last as i64)
        } else {
            "–".into()
        };
        writeln!(
            s,
            "| {a} | {rounds} | {} | {} | {} | {live} | {share} | {} |",
            inv as i64,
            rec as i64,
            prod as i64,
            or_dash(
                fin.len(),
                || fin.iter().fold(0.0, |s, x| s + x) / fin.len() as f64,
                3
            )
        )
        .ok();
    }
    s
}

/// `@GCTIME`: GC time in four stages, summed over the rounds.
pub fn gc_time(csv: &Csv) -> String {
    let mut s = String::from(
        "| approach | GC rounds | mark s | analysis s | read containers s | write containers s | total s | MiB read | MiB written | produced |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let is_gc = |r: &[String]| kind(csv, r) == "gc";
    for a in order(csv, is_gc) {
        let mut v = [0.0f64; 8];
        let mut rounds = 0;
        for r in rows_of(csv, &a).filter(|r| is_gc(r)) {
            rounds += 1;
            for (i, c) in [
                "mark_seconds",
                "analyze_seconds",
                "sweep_read_seconds",
                "sweep_write_seconds",
                "total_seconds",
                "bytes_read",
                "bytes_written",
                "produced_containers",
            ]
            .iter()
            .enumerate()
            {
                v[i] += csv.num(r, c);
            }
        }
        writeln!(
            s,
            "| {a} | {rounds} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {} |",
            v[0],
            v[1],
            v[2],
            v[3],
            v[4],
            v[5] / 1048576.0,
            v[6] / 1048576.0,
            v[7] as i64
        )
        .ok();
    }
    s
}

/// `@SMRTABLE`: the SMR paper's dedup ratio and speed factor per approach.
pub fn smr_table(csv: &Csv) -> String {
    let mut s = String::from(
        "| approach | dedup ratio (logical/stored) | dedup (removed/all) | speed factor, mean | speed factor, last 20 | rewritten MiB | backup MB/s |\n|---|---|---|---|---|---|---|\n",
    );
    for a in order(csv, |_| true) {
        let (mut dedup, mut rw, mut logical, mut secs) = (0.0, 0.0, 0.0, 0.0);
        for r in rows_of(csv, &a).filter(|r| kind(csv, r) == "backup") {
            dedup = csv.num(r, "classic_dedup_ratio");
            rw += csv.num(r, "rewritten_bytes");
            logical += csv.num(r, "logical_bytes");
            secs += csv.num(r, "seconds");
        }
        let sf: Vec<f64> = restores(csv, &a, "newest")
            .map(|r| csv.num(r, "speed_factor"))
            .collect();
        let m = sf.len();
        let tail = &sf[m.saturating_sub(20)..];
        let sum = |v: &[f64]| v.iter().fold(0.0, |s, x| s + x);
        writeln!(
            s,
            "| {a} | {dedup:.3} | {:.3} | {} | {} | {:.1} | {:.0} |",
            if dedup > 0.0 { 1.0 - 1.0 / dedup } else { 0.0 },
            or_dash(m, || sum(&sf) / m as f64, 4),
            or_dash(tail.len(), || sum(tail) / tail.len() as f64, 4),
            rw / 1048576.0,
            if secs > 0.0 {
                logical / secs / 1e6
            } else {
                0.0
            }
        )
        .ok();
    }
    s
}

/// `@COPIES`: per approach, the chunks with copies in more than one
/// container after ¼, ½, ¾ and all of its backups (Fig. 4's growth), then
/// at the end their share of the distinct chunks and the copies beyond
/// the first (Fig. 5's comparison across levels).
pub fn copies(csv: &Csv) -> String {
    let mut s = String::from(
        "| approach | redundant chunks after ¼ | ½ | ¾ | all backups | distinct chunks | redundant / distinct | copies beyond the first | rewritten MiB |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for a in order(csv, |r| kind(csv, r) == "backup") {
        let b: Vec<&Vec<String>> = rows_of(csv, &a)
            .filter(|r| kind(csv, r) == "backup")
            .collect();
        let Some(last) = b.last() else { continue };
        let at = |q: usize| csv.num(b[(b.len() * q).div_ceil(4) - 1], "redundant_chunks");
        let (chunks, redundant) = (
            csv.num(last, "stored_chunks"),
            csv.num(last, "redundant_chunks"),
        );
        let rw: f64 = b.iter().map(|r| csv.num(r, "rewritten_bytes")).sum();
        writeln!(
            s,
            "| {a} | {:.0} | {:.0} | {:.0} | {redundant:.0} | {chunks:.0} | {} | {:.0} | {:.1} |",
            at(1),
            at(2),
            at(3),
            if chunks > 0.0 {
                format!("{:.2} %", 100.0 * redundant / chunks)
            } else {
                "–".into()
            },
            csv.num(last, "extra_copies"),
            rw / 1048576.0,
        )
        .ok();
    }
    s
}

/// `@ROUNDS`: newest-backup read amplification by GC rounds before it.
pub fn rounds(csv: &Csv, approaches: &[String]) -> String {
    let mut s = String::from("| GC rounds before |");
    let mut u = String::from("|---|");
    for a in approaches {
        write!(s, " {a} RA newest | {a} produced |").ok();
        u.push_str("---|---|");
    }
    s.push('\n');
    s.push_str(&u);
    s.push('\n');
    // Per approach: produced per round (1-based), RA sums and counts by
    // the rounds run before the restore.
    type RaByRounds = HashMap<usize, (f64, usize)>;
    let mut per: Vec<(Vec<String>, RaByRounds)> = Vec::new();
    let mut max_rounds = 0;
    for a in approaches {
        let (mut produced, mut ra) = (Vec::new(), HashMap::new());
        for r in rows_of(csv, a) {
            match kind(csv, r) {
                "gc" => produced.push(csv.get(r, "produced_containers").to_string()),
                "restore" if csv.get(r, "when") == "newest" => {
                    let e: &mut (f64, usize) = ra.entry(produced.len()).or_default();
                    e.0 += csv.num(r, "read_amplification");
                    e.1 += 1;
                }
                _ => {}
            }
        }
        max_rounds = max_rounds.max(produced.len());
        per.push((produced, ra));
    }
    for i in 0..=max_rounds {
        write!(s, "| {i} |").ok();
        for (produced, ra) in &per {
            let m = match ra.get(&i) {
                Some(&(sum, n)) if n > 0 => format!("{:.3}", sum / n as f64),
                _ => "–".into(),
            };
            let p = if i == 0 {
                "–"
            } else {
                produced.get(i - 1).map_or("", String::as_str)
            };
            write!(s, " {m} | {p} |").ok();
        }
        s.push('\n');
    }
    s
}

/// Mean of `v` with `p` decimals, "–" when empty.
fn mean_of(v: &[f64], p: usize) -> String {
    or_dash(v.len(), || v.iter().sum::<f64>() / v.len() as f64, p)
}

/// `@COLDRESTORE`: MFDedup's §5 per approach — the final actual dedup
/// ratio (Fig. 11); the retained backups' restores at the end: MB/s
/// (from a cold cache with `[restore] cold`) beside a cold read of the
/// same bytes (fread, Fig. 13), seeks (Fig. 14) and RA (Fig. 15); the
/// data migrated, arranging's writes plus GC's copies, over the logical
/// bytes ingested (the GCCDF paper's Fig. 3); the time of that migration,
/// arranging or GC's sweep (Fig. 16), and GC's whole time.
pub fn cold_restore(csv: &Csv) -> String {
    let mut s = String::from(
        "| approach | actual dedup ratio | restore MB/s (mean; min–max) | fread MB/s, same bytes | seeks per restore | RA retained | data migrated / ingested | arranging or GC sweep s | GC total s |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for a in order(csv, |_| true) {
        let (mut dedup, mut logical, mut migrated, mut mig_s, mut gc_s) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for r in rows_of(csv, &a) {
            if !csv.get(r, "dedup_ratio").is_empty() {
                dedup = csv.num(r, "dedup_ratio");
            }
            match kind(csv, r) {
                "backup" => {
                    logical += csv.num(r, "logical_bytes");
                    migrated += csv.num(r, "arrange_written_bytes");
                    mig_s += csv.num(r, "arrange_seconds");
                }
                "gc" => {
                    migrated += csv.num(r, "bytes_written");
                    mig_s += csv.num(r, "sweep_read_seconds") + csv.num(r, "sweep_write_seconds");
                    gc_s += csv.num(r, "total_seconds");
                }
                _ => {}
            }
        }
        let fin: Vec<&Vec<String>> = restores(csv, &a, "final").collect();
        let col = |c: &str| -> Vec<f64> { fin.iter().map(|r| csv.num(r, c)).collect() };
        let mbs = col("throughput_mb_s");
        let fread: Vec<f64> = fin
            .iter()
            .filter(|r| !csv.get(r, "fread_mb_s").is_empty())
            .map(|r| csv.num(r, "fread_mb_s"))
            .collect();
        let range = if mbs.is_empty() {
            String::new()
        } else {
            let lo = mbs.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = mbs.iter().cloned().fold(0.0, f64::max);
            format!("; {lo:.0}–{hi:.0}")
        };
        writeln!(
            s,
            "| {a} | {dedup:.3} | {}{range} | {} | {} | {} | {} | {mig_s:.2} | {gc_s:.2} |",
            mean_of(&mbs, 0),
            mean_of(&fread, 0),
            mean_of(&col("seeks"), 1),
            mean_of(&col("read_amplification"), 3),
            if logical > 0.0 {
                format!("{:.1} %", 100.0 * migrated / logical)
            } else {
                "–".into()
            },
        )
        .ok();
    }
    s
}

/// `@MFLAYOUT`: MFDedup's layout per approach with volumes (Fig. 17):
/// volumes at the end and their sizes (each backup row names the volume
/// its arranging wrote), active categories at the end and the largest of
/// them against the last backup, the largest over the run against the
/// backup it followed, arranging time per version.
pub fn mf_layout(csv: &Csv) -> String {
    let mut s = String::from(
        "| approach | versions | volumes | volume MiB min / median / max | active categories | largest active MiB (share of last backup) | largest over the run (share of its backup) | arranging s per version |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mib = |b: f64| b / 1048576.0;
    let is_mf = |r: &[String]| kind(csv, r) == "backup" && !csv.get(r, "volumes_stored").is_empty();
    for a in order(csv, is_mf) {
        let rows: Vec<&Vec<String>> = rows_of(csv, &a).filter(|r| is_mf(r)).collect();
        let Some(last) = rows.last() else { continue };
        // A row whose chain gained a volume names it as its newest.
        let mut vols = Vec::new();
        let mut before = 0.0;
        for r in &rows {
            let n = csv.num(r, "volumes_stored");
            if n > before {
                vols.push(csv.num(r, "newest_volume_bytes"));
            }
            before = n;
        }
        vols.sort_by(f64::total_cmp);
        let share = |r: &[String]| {
            100.0 * csv.num(r, "largest_active_bytes") / csv.num(r, "logical_bytes").max(1.0)
        };
        let peak = rows
            .iter()
            .max_by(|x, y| {
                csv.num(x, "largest_active_bytes")
                    .total_cmp(&csv.num(y, "largest_active_bytes"))
            })
            .expect("non-empty");
        let arrange: Vec<f64> = rows.iter().map(|r| csv.num(r, "arrange_seconds")).collect();
        writeln!(
            s,
            "| {a} | {} | {} | {} | {} | {:.1} ({:.1} %) | {:.1} ({:.1} %) | {} |",
            rows.len(),
            csv.num(last, "volumes_stored") as i64,
            if vols.is_empty() {
                "–".into()
            } else {
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    mib(vols[0]),
                    mib(vols[vols.len() / 2]),
                    mib(vols[vols.len() - 1])
                )
            },
            csv.num(last, "active_categories") as i64,
            mib(csv.num(last, "largest_active_bytes")),
            share(last),
            mib(csv.num(peak, "largest_active_bytes")),
            share(peak),
            mean_of(&arrange, 3),
        )
        .ok();
    }
    s
}

/// The table a directive stands for.
pub fn compute(d: &Directive, csv: &Csv) -> String {
    match d {
        Directive::Table => table(csv),
        Directive::GcTable => gc_table(csv),
        Directive::Rounds(a) => rounds(csv, a),
        Directive::SmrTable => smr_table(csv),
        Directive::GcTime => gc_time(csv),
        Directive::Copies => copies(csv),
        Directive::ColdRestore => cold_restore(csv),
        Directive::MfLayout => mf_layout(csv),
    }
}

/// The template with every directive replaced by its table. `results`
/// gives an experiment's per-step CSV (`None`: no results anywhere, which
/// fails naming the section).
pub fn render(
    template: &str,
    results: &mut dyn FnMut(&str) -> Result<Option<Csv>>,
) -> Result<String> {
    let mut out = String::new();
    let mut section = String::from("(before the first heading)");
    let mut cache: HashMap<String, Option<Csv>> = HashMap::new();
    for (i, line) in template.lines().enumerate() {
        if line.starts_with('#') {
            section = line.trim_start_matches('#').trim().to_string();
        }
        let Some(d) = parse_directive(line, i + 1)? else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        if !cache.contains_key(&d.experiment) {
            let csv = results(&d.experiment)?;
            cache.insert(d.experiment.clone(), csv);
        }
        let Some(csv) = cache[&d.experiment].as_ref() else {
            bail!(
                "section \"{section}\": {TEMPLATE}:{}: no results for {} (run `tessera lab reproduce`, or `tessera lab run experiments/{}.toml`, with its dataset)",
                d.line,
                d.experiment,
                d.experiment
            );
        };
        let t = compute(&d.directive, csv);
        if t.lines().count() <= 2 {
            bail!(
                "section \"{section}\": {TEMPLATE}:{}: {} gives an empty table (its results have no rows for it)",
                d.line,
                line.trim()
            );
        }
        out.push_str(&t);
    }
    Ok(out)
}

/// Fails, naming the section, where the document has an empty section or
/// says "pending" or "not run yet".
pub fn check(doc: &str) -> Result<()> {
    let lines: Vec<&str> = doc.lines().collect();
    let level = |l: &str| l.chars().take_while(|&c| c == '#').count();
    let heading = |l: &str| {
        let n = level(l);
        n > 0 && l[n..].starts_with(' ')
    };
    let mut fence = false;
    let mut in_fence = Vec::with_capacity(lines.len());
    for l in &lines {
        if l.trim_start().starts_with("```") {
            fence = !fence;
        }
        in_fence.push(fence);
    }
    let mut section = String::from("(before the first heading)");
    for (i, l) in lines.iter().enumerate() {
        if heading(l) && !in_fence[i] {
            section = l.trim_start_matches('#').trim().to_string();
            // Its content runs to the next heading of the same or a higher level.
            let n = level(l);
            let body = lines[i + 1..]
                .iter()
                .zip(&in_fence[i + 1..])
                .take_while(|(x, f)| **f || !heading(x) || level(x) > n)
                .any(|(x, f)| *f || (!x.trim().is_empty() && !heading(x)));
            if !body {
                bail!("section \"{section}\" is empty");
            }
        }
        let low = l.to_lowercase();
        for bad in ["pending", "not run yet"] {
            let hit = low.match_indices(bad).any(|(at, _)| {
                let before = low[..at].chars().next_back();
                let after = low[at + bad.len()..].chars().next();
                !before.is_some_and(char::is_alphanumeric)
                    && !after.is_some_and(char::is_alphanumeric)
            });
            if hit {
                bail!(
                    "section \"{section}\" says \"{bad}\" (line {}): fill it or remove the claim",
                    i + 1
                );
            }
        }
    }
    Ok(())
}

/// Reduced scale for `--quick`.
#[derive(Clone, Copy, Debug)]
pub struct Quick {
    /// Factor on versions, files per source, version sizes and retention
    /// counts.
    pub scale: f64,
    /// Directory datasets larger than this are skipped.
    pub max_dataset_bytes: u64,
}

impl Default for Quick {
    fn default() -> Self {
        Quick {
            scale: 0.25,
            max_dataset_bytes: 4 << 30,
        }
    }
}

fn scaled(n: usize, f: f64, min: usize) -> usize {
    ((n as f64 * f).ceil() as usize).max(min)
}

impl Quick {
    /// The experiment at this scale; also the number of versions to ingest.
    pub fn apply(&self, exp: &mut Experiment) -> Option<usize> {
        let f = self.scale;
        match &mut exp.dataset {
            Dataset::Synthetic(c) => {
                c.versions = scaled(c.versions, f, 2);
                c.files = scaled(c.files, f, 4);
            }
            Dataset::Scale(c) => {
                c.versions = scaled(c.versions, f, 2);
                c.version_size.0 = ((c.version_size.0 as f64 * f) as u64).max(c.chunk_size.0 * 16);
            }
            Dataset::Dir(_) => {}
        }
        if let Some(r) = &mut exp.retention {
            r.retain = scaled(r.retain, f, 2);
            r.delete = scaled(r.delete, f, 1).min(r.retain);
            // Dropping the page cache slows every process on the machine.
            r.cold_gc = false;
        }
        exp.restore.cold = false;
        match &exp.dataset {
            Dataset::Dir(d) => {
                let n = std::fs::read_dir(d).map_or(0, |e| e.count());
                Some(scaled(n, f, 2))
            }
            _ => None,
        }
    }
}

/// The dataset directory an experiment file names, resolved as the lab
/// resolves it (relative to the file); `None` for generated datasets.
pub fn dataset_dir(file: &Path) -> Result<Option<PathBuf>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read experiment file {}", file.display()))?;
    let v: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}: not valid TOML", file.display()))?;
    let dir = v
        .get("dataset")
        .and_then(|d| d.get("dir"))
        .and_then(|d| d.as_str());
    Ok(dir.map(|d| file.parent().unwrap_or(Path::new(".")).join(d)))
}

/// Bytes of the regular files under `dir`, following links.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match std::fs::metadata(e.path()) {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

pub struct Options {
    /// The checkout: `experiments/`, `docs/`.
    pub root: PathBuf,
    /// The template (default `ROOT/experiments/REPRODUCTION.md.in`).
    pub template: PathBuf,
    /// Where the experiment files are (default `ROOT/experiments`).
    pub experiments: PathBuf,
    /// The committed results (default `ROOT/experiments/results`): read for
    /// skipped experiments; written only by a full run without `--out`.
    pub committed: PathBuf,
    /// Where this run's results go (`OUT/NAME/`).
    pub results: PathBuf,
    /// The document written.
    pub doc: PathBuf,
    pub quick: Option<Quick>,
    /// Run the experiments (false: only regenerate the document).
    pub run: bool,
    pub progress: bool,
}

impl Options {
    /// Defaults for a checkout at `root`: a full run writes the committed
    /// results and `docs/REPRODUCTION.md`; `out` puts both elsewhere
    /// (`OUT/results/NAME`, `OUT/REPRODUCTION.md`); a quick run without
    /// `out` writes under `ROOT/lab-results/reproduce-quick`.
    pub fn new(root: &Path, out: Option<&Path>, quick: Option<Quick>, run: bool) -> Self {
        let out = out
            .map(Path::to_path_buf)
            .or_else(|| quick.map(|_| root.join("lab-results/reproduce-quick")));
        let (results, doc) = match &out {
            Some(o) => (o.join("results"), o.join("REPRODUCTION.md")),
            None => (root.join(RESULTS), root.join(DOC)),
        };
        Options {
            root: root.to_path_buf(),
            template: root.join(TEMPLATE),
            experiments: root.join(EXPERIMENTS),
            committed: root.join(RESULTS),
            results,
            doc,
            quick,
            run,
            progress: false,
        }
    }
}

/// What happened to one experiment.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub experiment: String,
    /// `ran`, `skipped: …`, `failed: …`, or `kept` (`--no-run`).
    pub status: String,
    /// Where the document's numbers for it come from.
    pub results: Option<PathBuf>,
    pub seconds: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub doc: PathBuf,
    pub stamp: Stamp,
    pub outcomes: Vec<Outcome>,
    pub seconds: f64,
}

/// Write the run's per-step CSV compressed (what a reader needs beside the
/// report; the JSON lines and the work directory are left out). zstd at
/// level 19: the committed CSVs are most of the repository's bytes, and
/// it stores them in 60 % of gzip -9's size (`zstd -dc` reads them).
fn keep(r: &runner::Results, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("report.html"), crate::report::html(r))
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    for n in CSV_NAMES {
        let _ = std::fs::remove_file(dir.join(n));
    }
    let p = dir.join("results.csv.zst");
    let z = zstd::stream::encode_all(crate::report::csv(r).as_bytes(), 19)?;
    std::fs::write(&p, z).with_context(|| format!("cannot write {}", p.display()))?;
    Ok(())
}

/// Run (unless `opts.run` is false) every experiment the template cites,
/// then write the document. Errors name the experiment or the section;
/// approaches that failed leave their experiment's committed results in
/// place and fail the command after the document is written.
pub fn reproduce(opts: &Options, log: &mut dyn FnMut(&str)) -> Result<Report> {
    let started = Instant::now();
    let stamp = Stamp::now();
    let template = std::fs::read_to_string(&opts.template)
        .with_context(|| format!("cannot read {}", opts.template.display()))?;
    let names = experiments(&template)?;
    let mut outcomes = Vec::new();
    for name in &names {
        let t0 = Instant::now();
        let file = opts.experiments.join(format!("{name}.toml"));
        let out_dir = opts.results.join(name);
        let status = if !opts.run {
            "kept (`--no-run`)".to_string()
        } else {
            match run_one(opts, name, &file, &out_dir, log) {
                Ok(s) => s,
                Err(e) => format!("failed: {e:#}"),
            }
        };
        let results = [&out_dir, &opts.committed.join(name)]
            .into_iter()
            .find(|d| CSV_NAMES.iter().any(|n| d.join(n).is_file()))
            .cloned();
        let o = Outcome {
            experiment: name.clone(),
            status,
            results,
            seconds: t0.elapsed().as_secs_f64(),
        };
        if opts.run {
            log(&format!(
                "{name}: {} ({:.1} s)",
                o.status.lines().next().unwrap_or_default(),
                o.seconds
            ));
        }
        outcomes.push(o);
    }
    let mut results = |name: &str| -> Result<Option<Csv>> {
        match outcomes.iter().find(|o| o.experiment == name) {
            Some(Outcome {
                results: Some(dir), ..
            }) => load_csv(dir),
            _ => Ok(None),
        }
    };
    let mut doc = render(&template, &mut results)?;
    doc.push_str(&provenance(opts, &stamp, &outcomes));
    check(&doc)?;
    if let Some(parent) = opts.doc.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&opts.doc, &doc)
        .with_context(|| format!("cannot write {}", opts.doc.display()))?;
    let report = Report {
        doc: opts.doc.clone(),
        stamp,
        outcomes,
        seconds: started.elapsed().as_secs_f64(),
    };
    let failed: Vec<&Outcome> = report
        .outcomes
        .iter()
        .filter(|o| o.status.starts_with("failed"))
        .collect();
    if let Some(f) = failed.first() {
        bail!(
            "{} of {} experiments failed, first {}: {} (the document, {}, uses their earlier results)",
            failed.len(),
            report.outcomes.len(),
            f.experiment,
            f.status,
            report.doc.display()
        );
    }
    Ok(report)
}

/// Run one experiment into `out_dir`; the status line.
fn run_one(
    opts: &Options,
    name: &str,
    file: &Path,
    out_dir: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<String> {
    if let Some(d) = dataset_dir(file)? {
        let versions = std::fs::read_dir(&d).map_or(0, |rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        });
        if versions == 0 {
            return Ok(format!(
                "skipped: no dataset at {} (see {}); committed results kept",
                d.display(),
                file.display()
            ));
        }
        if let Some(q) = &opts.quick {
            let bytes = dir_bytes(&d);
            if bytes > q.max_dataset_bytes {
                return Ok(format!(
                    "skipped by --quick: dataset {} is {:.1} GiB (over {:.1} GiB); committed results kept",
                    d.display(),
                    bytes as f64 / (1u64 << 30) as f64,
                    q.max_dataset_bytes as f64 / (1u64 << 30) as f64
                ));
            }
        }
    }
    let mut exp = Experiment::load(file)?;
    if let (Some(q), crate::experiment::Dataset::Scale(c)) = (&opts.quick, &exp.dataset) {
        // The paper-scale trace runs (terabytes of chunk identities) take
        // an hour even scaled; --quick leaves them to the full run.
        let logical = (c.versions as f64 * q.scale) * c.version_size.0 as f64;
        let limit = 16.0 * q.max_dataset_bytes as f64;
        if logical > limit {
            return Ok(format!(
                "skipped by --quick: {:.0} GiB of generated chunk identities (over {:.0} GiB, 16 × --max-dataset); committed results kept",
                logical / (1u64 << 30) as f64,
                limit / (1u64 << 30) as f64
            ));
        }
    }
    let mut run = RunOptions::new(&out_dir.join("work"));
    run.progress = opts.progress;
    if let Some(q) = &opts.quick {
        run.max_versions = q.apply(&mut exp);
    }
    log(&format!(
        "{name}: running {} approaches …",
        exp.approaches.len()
    ));
    let r = runner::run(&exp, &run);
    let _ = std::fs::remove_dir_all(out_dir.join("work"));
    let _ = std::fs::remove_dir(out_dir); // only if nothing else is there
    let r = r?;
    if let Some(f) = r.failed().first() {
        // Keep the earlier results: the document must not lose a table.
        let keep_dir = out_dir.join("failed");
        crate::report::write_all(&r, &keep_dir)?;
        bail!(
            "approach '{}' {} (this run's outputs in {})",
            f.approach,
            f.status,
            keep_dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(out_dir.join("failed"));
    keep(&r, out_dir)?;
    Ok(format!("ran, {} backups", r.versions.len()))
}

/// The closing section: where each experiment's numbers come from.
fn provenance(opts: &Options, stamp: &Stamp, outcomes: &[Outcome]) -> String {
    let mut s = String::from("\n## Where the numbers come from\n\n");
    write!(
        s,
        "Generated by `tessera lab reproduce{}{}` from `{TEMPLATE}` at commit {} on {} ({} cores), {}.",
        if opts.quick.is_some() { " --quick" } else { "" },
        if opts.run { "" } else { " --no-run" },
        stamp.commit,
        stamp.host,
        stamp.cores,
        stamp.date
    )
    .ok();
    if let Some(q) = &opts.quick {
        write!(
            s,
            " **Quick run**: versions, files per source and retention counts scaled by {} and directory datasets over {:.1} GiB skipped, so its numbers show the directions of the claims, not the papers' magnitudes; the tables of skipped experiments are the committed ones.",
            q.scale,
            q.max_dataset_bytes as f64 / (1u64 << 30) as f64
        )
        .ok();
    }
    s.push_str(
        "\n\n| experiment | this run | numbers from | run of those results |\n|---|---|---|---|\n",
    );
    for o in outcomes {
        let from = o.results.as_ref().map_or("–".to_string(), |p| {
            let p = p.strip_prefix(&opts.root).unwrap_or(p);
            format!("`{}`", p.display())
        });
        let when = o
            .results
            .as_deref()
            .and_then(results_stamp)
            .unwrap_or_else(|| "–".into());
        let status = o.status.lines().next().unwrap_or_default();
        writeln!(
            s,
            "| `{}` | {} | {from} | {when} |",
            o.experiment,
            status.replace('|', "\\|")
        )
        .ok();
    }
    s
}

/// When and from which build a results directory's run came, from the
/// stamp in its `report.html`: `2026-11-27 15:44 UTC, build cccf021`.
fn results_stamp(dir: &Path) -> Option<String> {
    let html = std::fs::read_to_string(dir.join("report.html")).ok()?;
    let stamp = html.split("<p class=\"stamp\">Run ").nth(1)?;
    let stamp = stamp.split("</p>").next()?;
    let date = stamp.get(..16)?;
    let build = stamp.split("build ").nth(1)?;
    let commit: String = build.chars().take_while(|c| !c.is_whitespace()).collect();
    let short: String = commit.chars().take(7).collect();
    let dirty = if commit.ends_with("+dirty") {
        "+dirty"
    } else {
        ""
    };
    Some(format!("{date} UTC, build {short}{dirty}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_name_experiments_and_typos_fail() {
        let t = "# T\n@TABLE a\ntext\n@ROUNDS b naive gccdf\n@GCTABLE a\n@x lower\n";
        assert_eq!(experiments(t).unwrap(), ["a", "b"]);
        let d = directives(t).unwrap();
        assert_eq!(
            d[1].directive,
            Directive::Rounds(vec!["naive".into(), "gccdf".into()])
        );
        assert!(directives("@TABEL a\n").is_err());
        assert!(directives("@ROUNDS a\n").is_err());
        assert!(directives("@TABLE a b\n").is_err());
    }

    const CSV: &str = "kind,approach,when,backup_id,dedup_ratio,classic_dedup_ratio,data_containers,read_amplification,speed_factor,produced_containers,involved_containers,reclaimed_containers,bytes_read,bytes_written,logical_bytes,rewritten_bytes,seconds,mark_seconds,analyze_seconds,sweep_read_seconds,sweep_write_seconds,total_seconds
backup,naive,,1,2.0,2.0,10,,,,,,,,1000000,0,0.5,,,,,
restore,naive,newest,1,,,,1.5,0.2,,,,,,,,,,,,,
gc,naive,,,2.5,,9,,,3,5,4,100,50,,,,0.1,0,0.2,0.3,0.6
restore,naive,newest,2,,,,2.5,0.1,,,,,,,,,,,,,
restore,naive,final,1,,,,1.0,,,,,,,,,,,,,,
restore,naive,final,2,,,,3.0,,,,,,,,,,,,,,
";

    #[test]
    fn tables_compute_what_the_directives_say() {
        let c = Csv::parse(CSV);
        let t = table(&c);
        assert!(
            t.ends_with("| naive | 2.500 | 2.000 | 2.000 | 1.000 | 3.000 | 3 |\n"),
            "{t}"
        );
        let g = gc_table(&c);
        assert!(
            g.ends_with("| naive | 1 | 5 | 4 | 3 | 50 % | 33 % (9) | 2.000 |\n"),
            "{g}"
        );
        let r = rounds(&c, &["naive".into()]);
        assert!(r.contains("| 0 | 1.500 | – |\n| 1 | 2.500 | 3 |\n"), "{r}");
        let s = smr_table(&c);
        assert!(
            s.ends_with("| naive | 2.000 | 0.500 | 0.1500 | 0.1500 | 0.0 | 2 |\n"),
            "{s}"
        );
        let p = copies(&Csv::parse(
            "kind,approach,stored_chunks,redundant_chunks,extra_copies,rewritten_bytes\n\
             backup,capping:5,10,0,0,0\nrestore,capping:5,,,,\nbackup,capping:5,14,1,1,1048576\n\
             backup,capping:5,15,2,3,1048576\nbackup,capping:5,15,3,4,0\n",
        ));
        assert!(
            p.ends_with("| capping:5 | 0 | 1 | 2 | 3 | 15 | 20.00 % | 4 | 2.0 |\n"),
            "{p}"
        );
        let m = gc_time(&c);
        assert!(
            m.ends_with("| naive | 1 | 0.10 | 0.00 | 0.20 | 0.30 | 0.60 | 0 | 0 | 3 |\n"),
            "{m}"
        );
    }

    /// MFDedup's per-approach figures: arranging's writes and GC's copies
    /// are both migration; fread only where the restore was cold.
    #[test]
    fn cold_restore_and_layout_tables() {
        let c = Csv::parse(
            "kind,approach,when,logical_bytes,dedup_ratio,arrange_written_bytes,arrange_seconds,bytes_written,sweep_read_seconds,sweep_write_seconds,total_seconds,throughput_mb_s,fread_mb_s,seeks,read_amplification
backup,mf,,1000,1.0,1000,0.5,,,,,,,,
backup,mf,,3000,1.8,2600,1.5,,,,,,,,
gc,mf,,,2.0,,,0,0,0,0.01,,,,
restore,mf,final,,,,,,,,,100,50,2,1.0
restore,mf,final,,,,,,,,,300,50,4,1.0
backup,naive,,1000,1.0,,,,,,,,,,
gc,naive,,,1.5,,,400,0.2,0.3,1.0,,,,
restore,naive,final,,,,,,,,,50,,10,3.0
",
        );
        let t = cold_restore(&c);
        assert!(
            t.contains("| mf | 2.000 | 200; 100–300 | 50 | 3.0 | 1.000 | 90.0 % | 2.00 | 0.01 |\n"),
            "{t}"
        );
        assert!(
            t.ends_with(
                "| naive | 1.500 | 50; 50–50 | – | 10.0 | 3.000 | 40.0 % | 0.50 | 1.00 |\n"
            ),
            "{t}"
        );
        let m = 1048576;
        let l = Csv::parse(&format!(
            "kind,approach,logical_bytes,arrange_seconds,volumes_stored,newest_volume_bytes,active_categories,largest_active_bytes
backup,mf,{m},0.5,0,0,1,{m}
backup,mf,{},0.5,1,{},2,{}
backup,mf,{},1.0,2,{},2,{m}
backup,naive,{m},,,,,
",
            2 * m,
            4 * m,
            2 * m,
            4 * m,
            2 * m
        ));
        let t = mf_layout(&l);
        assert!(
            t.ends_with(
                "| mf | 3 | 2 | 2.00 / 4.00 / 4.00 | 2 | 1.0 (25.0 %) | 2.0 (100.0 %) | 0.667 |\n"
            ),
            "{t}"
        );
    }

    #[test]
    fn render_fails_naming_the_section() {
        let mut none = |_: &str| -> Result<Option<Csv>> { Ok(None) };
        let e = render("# Doc\n\n## GCCDF\n\n@TABLE x\n", &mut none).unwrap_err();
        assert!(e.to_string().contains("section \"GCCDF\""), "{e}");
        let mut empty =
            |_: &str| -> Result<Option<Csv>> { Ok(Some(Csv::parse("kind,approach\n"))) };
        let e = render("## FGC\n@GCTABLE x\n", &mut empty).unwrap_err();
        assert!(e.to_string().contains("empty table"), "{e}");
        let mut some = |_: &str| -> Result<Option<Csv>> { Ok(Some(Csv::parse(CSV))) };
        let doc = render("## S\n\n@TABLE x\n", &mut some).unwrap();
        assert!(doc.contains("| naive | 2.500 |"));
        check(&doc).unwrap();
    }

    #[test]
    fn check_finds_empty_sections_and_pending_claims() {
        check("# A\n\ntext\n\n## B\n\n### C\n\nbody\n").unwrap();
        let e = check("# A\n\ntext\n\n## B\n\n## C\n\nbody\n").unwrap_err();
        assert!(e.to_string().contains("\"B\" is empty"), "{e}");
        let e = check("# A\n\ntext\n\n## C\n").unwrap_err();
        assert!(e.to_string().contains("\"C\" is empty"), "{e}");
        let e = check("# A\n\n## PGC\n\n| x | pending: later |\n").unwrap_err();
        assert!(e.to_string().contains("\"PGC\" says \"pending\""), "{e}");
        assert!(check("# A\n\n## B\n\n(not run yet: x)\n").is_err());
        check("# A\n\ndepending on the load\n").unwrap();
        check("# A\n\n```\n# not a heading\n```\n").unwrap();
    }
}
