//! Outputs of a run: `results.csv`, `results.jsonl` and a self-contained
//! `report.html` whose SVG plots are drawn here (no scripts, opens offline,
//! each plot can be saved on its own for a paper).

use crate::runner::{RestoreRow, Results, Row};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessera_core::gc::GcReport;

/// CSV columns: the union of every row kind's fields (blank when absent).
const COLUMNS: &[&str] = &[
    "kind",
    "approach",
    "step",
    "version",
    "backup_id",
    "when",
    "round",
    "deleted",
    "gc",
    "logical_bytes",
    "chunks",
    "new_bytes",
    "rewritten_bytes",
    "stored_bytes",
    "stored_chunks",
    "redundant_chunks",
    "extra_copies",
    "data_containers",
    "retained_backups",
    "retained_logical_bytes",
    "dedup_ratio",
    "classic_dedup_ratio",
    "restored_bytes",
    "containers_read",
    "container_bytes_read",
    "read_amplification",
    "speed_factor",
    "cache",
    // Restores: sequential runs read; cold: the version's file read cold.
    "seeks",
    "fread_mb_s",
    "involved_containers",
    "reclaimed_containers",
    "produced_containers",
    "bytes_read",
    "bytes_written",
    "mark_seconds",
    "analyze_seconds",
    "sweep_read_seconds",
    "sweep_write_seconds",
    "total_seconds",
    "gc_peak_memory_bytes",
    "mark",
    "mark_passes",
    "mark_bytes_read",
    "mark_memory_bytes",
    // Mark I/O and tables (physical GC §5; FGC Figs. 9–10).
    "mark_ran",
    "fastcopy",
    "mark_containers_read",
    "mark_seeks",
    "mark_metadata_reads",
    "chunk_queries",
    "liveness_array_bytes",
    "live_vector_bits_per_fp",
    "lp_vector_bits_per_fp",
    "seconds",
    "throughput_mb_s",
    "chunk_refs_per_s",
    "index_memory_bytes",
    // MFDedup rows only (blank for the container layout).
    "chain",
    "ndf_memory_bytes",
    "arrange_seconds",
    "arrange_read_bytes",
    "newest_volume_bytes",
    "active_bytes",
    "arrange_behind",
    "arrange_written_bytes",
    "volumes_stored",
    "active_categories",
    "largest_active_bytes",
    "categories",
    "volumes",
    "buffered",
    "backend_requests",
    "backend_bytes_read",
    "backend_bytes_written",
];

/// A row as one JSON object in field order, its backend I/O appended.
fn row_line(row: &Row) -> Result<String> {
    let (row, io) = (
        serde_json::to_string(row)?,
        serde_json::to_string(&row.io())?,
    );
    // Both are non-empty objects: `{row…}` + `{io…}` → `{row…,io…}`.
    Ok(format!("{},{}", &row[..row.len() - 1], &io[1..]))
}

/// A row as JSON, its backend I/O appended.
fn row_value(row: &Row) -> serde_json::Value {
    let mut v = serde_json::to_value(row).expect("rows serialize");
    if let (Some(o), serde_json::Value::Object(io)) = (
        v.as_object_mut(),
        serde_json::to_value(row.io()).expect("counts serialize"),
    ) {
        o.extend(io);
    }
    v
}

pub struct Written {
    pub csv: PathBuf,
    pub jsonl: PathBuf,
    pub html: PathBuf,
}

pub fn write_all(r: &Results, dir: &Path) -> Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let w = Written {
        csv: dir.join("results.csv"),
        jsonl: dir.join("results.jsonl"),
        html: dir.join("report.html"),
    };
    let put = |p: &Path, s: String| {
        std::fs::write(p, s).with_context(|| format!("cannot write {}", p.display()))
    };
    put(&w.csv, csv(r))?;
    put(&w.jsonl, jsonl(r)?)?;
    put(&w.html, html(r))?;
    Ok(w)
}

fn csv_field(v: Option<&serde_json::Value>) -> String {
    let s = match v {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

pub fn csv(r: &Results) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for row in &r.rows {
        let v = row_value(row);
        let line: Vec<String> = COLUMNS.iter().map(|c| csv_field(v.get(*c))).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// One JSON object per line: a `run` header, the rows, one `summary` per approach.
pub fn jsonl(r: &Results) -> Result<String> {
    let mut out = String::new();
    let head = serde_json::json!({
        "kind": "run", "experiment": r.experiment, "stamp": r.stamp, "mode": r.mode, "chunker": r.chunker,
        "hash": r.hash, "container_size": r.container_size, "versions": r.versions,
    });
    writeln!(out, "{head}").ok();
    for row in &r.rows {
        writeln!(out, "{}", row_line(row)?).ok();
    }
    for s in &r.summaries {
        let mut v = serde_json::to_value(s)?;
        v["kind"] = "summary".into();
        writeln!(out, "{v}").ok();
    }
    Ok(out)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Twelve colours that stay apart on white and in colour-blind vision
/// (Okabe–Ito without its yellow, then Tol's muted scheme).
const COLORS: &[&str] = &[
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#882255",
    "#44AA99", "#999933", "#661100", "#6699CC",
];

/// Dash patterns: with the markers, series stay apart in greyscale too.
const DASHES: &[&str] = &["", "7 3", "2 3", "9 3 2 3", "4 2", "1 3"];

/// A marker of kind `k` (six shapes, filled then hollow) centred at (x, y).
fn marker(k: usize, x: f64, y: f64, c: &str) -> String {
    let fill = if k % 12 < 6 { c } else { "white" };
    let st = format!(r#"fill="{fill}" stroke="{c}" stroke-width="1.3""#);
    let r = 3.6;
    match k % 6 {
        0 => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" {st}/>"#),
        1 => format!(
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" {st}/>"#,
            x - r,
            y - r,
            2.0 * r,
            2.0 * r
        ),
        2 => format!(
            r#"<path d="M{x:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}Z" {st}/>"#,
            y - r * 1.2,
            x + r * 1.1,
            y + r * 0.9,
            x - r * 1.1,
            y + r * 0.9
        ),
        3 => format!(
            r#"<path d="M{x:.1} {:.1}L{:.1} {y:.1}L{x:.1} {:.1}L{:.1} {y:.1}Z" {st}/>"#,
            y - r * 1.3,
            x + r * 1.3,
            y + r * 1.3,
            x - r * 1.3
        ),
        4 => format!(
            r#"<path d="M{x:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}Z" {st}/>"#,
            y + r * 1.2,
            x + r * 1.1,
            y - r * 0.9,
            x - r * 1.1,
            y - r * 0.9
        ),
        _ => format!(
            r#"<path d="M{:.1} {y:.1}H{:.1}M{x:.1} {:.1}V{:.1}" stroke="{c}" stroke-width="2.2" fill="none"/>"#,
            x - r * 1.3,
            x + r * 1.3,
            y - r * 1.3,
            y + r * 1.3
        ),
    }
}

/// A "nice" tick step (1, 2 or 5 × 10^k) for about `n` ticks over `span`.
fn tick_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-12);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn num(v: f64) -> String {
    if v.abs() >= 1e6 {
        let e = v.abs().log10().floor();
        let m = v / 10f64.powf(e);
        if (m - m.round()).abs() < 1e-9 {
            format!("{}e{e}", m.round())
        } else {
            format!("{m:.1}e{e}")
        }
    } else if (v == v.trunc() && v.abs() < 1e9) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else if v.abs() >= 0.001 || v == 0.0 {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        format!("{v:.0e}")
    }
}

/// Whether a metric spans enough decades to need a log axis: all values
/// positive and the largest over 30 times the smallest.
fn wants_log(pts: &[(f64, f64)]) -> bool {
    let (lo, hi) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    lo > 0.0 && hi / lo > 30.0
}

/// A line plot, one series per approach (up to 12 told apart by colour,
/// marker and dash), a legend on the right, and a log y axis where the
/// values span decades. Scales to the page width (`viewBox`).
pub fn line_plot(
    id: &str,
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let longest = series
        .iter()
        .map(|s| s.0.chars().count())
        .max()
        .unwrap_or(0);
    let legend_w = (40.0 + 7.0 * longest as f64).clamp(110.0, 260.0);
    let rows = series.len().max(1) as f64;
    let (w, h) = (960.0, (100.0 + 19.0 * rows).max(420.0));
    let (l, rgt, t, b) = (78.0, legend_w + 20.0, 38.0, 50.0);
    let (pw, ph) = (w - l - rgt, h - t - b);
    let mut s = String::new();
    write!(s, r#"<svg id="{id}" xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {w} {h}" font-family="Helvetica, Arial, sans-serif" font-size="13"><title>{}</title><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="16" font-weight="bold">{}</text>"#, esc(title), l + pw / 2.0, esc(title)).ok();
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    if pts.is_empty() {
        write!(s, r##"<text x="{}" y="{}" text-anchor="middle" fill="#666">no data in this run</text></svg>"##, l + pw / 2.0, t + ph / 2.0).ok();
        return s;
    }
    let log = wants_log(&pts);
    let (mut x0, mut x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (mut y0, mut y1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    if x1 <= x0 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    // Tick values (and the transformed axis range).
    let mut ticks = Vec::new();
    if log {
        y0 = 10f64.powf(y0.log10().floor());
        y1 = 10f64.powf(y1.log10().ceil());
        let decades = (y1 / y0).log10().round() as i32;
        let mut e = y0.log10().round() as i32;
        while 10f64.powi(e) <= y1 * 1.0001 {
            for m in [1.0, 2.0, 5.0] {
                let v = m * 10f64.powi(e);
                if v >= y0 * 0.9999 && v <= y1 * 1.0001 && (m == 1.0 || decades <= 3) {
                    ticks.push(v);
                }
            }
            e += 1;
        }
    } else {
        // Zero is the baseline unless every value sits far above it (read
        // amplification near 1, say), where it would flatten the lines.
        let zoom = y0 > 0.0 && y1 < 3.0 * y0;
        if !zoom {
            y0 = y0.min(0.0);
        }
        if y1 <= y0 {
            y1 = y0 + 1.0;
        }
        let ys = tick_step(y1 - y0, 6.0);
        y1 = (y1 / ys).ceil() * ys;
        if zoom {
            y0 = (y0 / ys).floor() * ys;
        }
        let mut y = y0;
        while y <= y1 + ys * 1e-9 {
            ticks.push(y);
            y += ys;
        }
    }
    let tf = |y: f64| if log { y.log10() } else { y };
    let (ty0, ty1) = (tf(y0), tf(y1));
    let xs = tick_step(x1 - x0, 10.0).max(1.0);
    let px = |x: f64| l + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| t + ph - (tf(y) - ty0) / (ty1 - ty0) * ph;
    for y in ticks {
        let (x2, yy, tx, ty, label) = (l + pw, py(y), l - 6.0, py(y) + 4.0, num(y));
        write!(s, r##"<line x1="{l}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e3e3e3"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"##).ok();
    }
    let mut x = (x0 / xs).ceil() * xs;
    while x <= x1 + 1e-9 {
        write!(s, r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" stroke="#333"/><text x="{0:.1}" y="{3}" text-anchor="middle">{4}</text>"##, px(x), t + ph, t + ph + 5.0, t + ph + 19.0, num(x)).ok();
        x += xs;
    }
    let ylabel = if log {
        format!("{ylabel} (log scale)")
    } else {
        ylabel.to_string()
    };
    write!(s, r##"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="#333"/><text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{}</text>"##, l + pw / 2.0, h - 12.0, esc(xlabel), t + ph / 2.0, esc(&ylabel)).ok();
    for (i, (name, p)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        // Past 12 series colours and markers repeat; the dash then differs.
        let dash = DASHES[(i + i / COLORS.len()) % DASHES.len()];
        let path: Vec<(f64, f64)> = p
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log || *y > 0.0))
            .map(|&(x, y)| (px(x), py(y)))
            .collect();
        let d: Vec<String> = path.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        // The series' marker is drawn once and placed by reference.
        let m = format!("{id}-m{i}");
        write!(s, r#"<defs><g id="{m}">{}</g></defs><g><title>{}</title><polyline fill="none" stroke="{c}" stroke-width="1.8" stroke-dasharray="{dash}" points="{}"/>"#, marker(i, 0.0, 0.0, c), esc(name), d.join(" ")).ok();
        // About 12 markers a series, staggered so series do not hide each other's.
        let every = (path.len() / 12).max(1);
        for (j, &(mx, my)) in path.iter().enumerate() {
            if j % every == (i * every / series.len().max(1)) % every || path.len() == 1 {
                write!(s, r##"<use href="#{m}" x="{mx:.1}" y="{my:.1}"/>"##).ok();
            }
        }
        s.push_str("</g>");
        let ly = t + 12.0 + i as f64 * 19.0;
        let lx = l + pw + 14.0;
        write!(s, r##"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2" stroke-dasharray="{dash}"/><use href="#{m}" x="{}" y="{ly}"/><text x="{}" y="{}">{}</text>"##, lx + 30.0, lx + 15.0, lx + 38.0, ly + 4.5, esc(name)).ok();
    }
    s.push_str("</svg>");
    s
}

const RETAINED: &str = "retained backup (step in sequence)";
const ROUND: &str = "retention round";

/// A figure of every retained backup's final restore, per approach.
fn finals(r: &Results, y: fn(&RestoreRow) -> f64) -> Vec<(String, Vec<(f64, f64)>)> {
    series(r, |row| match row {
        Row::Restore(x) if x.when == "final" => Some((x.approach.as_str(), x.step as f64, y(x))),
        _ => None,
    })
}

/// A figure of every restore made right after its backup, per approach.
fn newest(r: &Results, y: fn(&RestoreRow) -> f64) -> Vec<(String, Vec<(f64, f64)>)> {
    series(r, |row| match row {
        Row::Restore(x) if x.when == "newest" => Some((x.approach.as_str(), x.step as f64, y(x))),
        _ => None,
    })
}

/// A count of every retention round that ran a GC, per approach.
fn gc_rounds(r: &Results, y: fn(&GcReport) -> f64) -> Vec<(String, Vec<(f64, f64)>)> {
    series(r, |row| match row {
        Row::Gc(g) if g.gc != "none" => Some((g.approach.as_str(), g.round as f64, y(&g.report))),
        _ => None,
    })
}

/// Per approach (in the summaries' order), the points `pick` takes from
/// the rows; approaches without any are left out.
fn series(
    r: &Results,
    pick: impl Fn(&Row) -> Option<(&str, f64, f64)>,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = r
        .summaries
        .iter()
        .map(|s| (s.approach.clone(), Vec::new()))
        .collect();
    for row in &r.rows {
        if let Some((a, x, y)) = pick(row) {
            if let Some(e) = out.iter_mut().find(|e| e.0 == a) {
                e.1.push((x, y));
            }
        }
    }
    out.retain(|e| !e.1.is_empty());
    out
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

/// The five papers, in the report's order: (section id, title, the paper
/// file, its headline claims, which approaches are its techniques).
pub const PAPERS: &[(&str, &str, &str, &[&str])] = &[
    (
        "paper-rewriting",
        "SMR, Capping, NED, HAR: rewriting at backup time",
        "smr-rewriting.md",
        &[
            "Rewriting duplicates into new containers trades dedup ratio for restore speed; the speed factor rises as the level falls (SMR Fig. 11, 13).",
            "At one level SMR keeps more dedup than Capping, and its curve lies above Capping's and NED's (Fig. 11).",
            "HAR restores ~25 % faster than naive at up to 40 % dedup loss (GCCDF paper, Fig. 2).",
        ],
    ),
    (
        "paper-gccdf",
        "GCCDF: defragmenting during garbage collection",
        "gccdf-eurosys25.md",
        &[
            "GCCDF keeps naive's dedup ratio and restores 2.1–3.1× faster (Fig. 12).",
            "Its GC produces about a third of naive's containers and is faster in most cases (Fig. 13, 14).",
        ],
    ),
    (
        "paper-mfdedup",
        "MFDedup: a layout by category, no GC",
        "mfdedup-tos.md",
        &[
            "1.12–2.19× the actual dedup ratio of rewriting baselines under CMA garbage collection.",
            "Restores read a nearly sequential layout (read amplification ≈ 1); deletion copies nothing.",
        ],
    ),
    (
        "paper-physical-gc",
        "Physical GC: marking by container, compact valid-chunk tables",
        "physical-gc-fast17.md",
        &[
            "The physical mark (PGC, PGC+) reads recipes once in container order; 10–60 % faster than the logical mark, up to 99× on extreme workloads.",
            "A perfect-hash vector needs a few bits per chunk instead of a fingerprint set, and reclaims exactly as much.",
        ],
    ),
    (
        "paper-fgc",
        "FGC: focused garbage collection",
        "fgc-focused-gc.md",
        &[
            "The mark reads only the deleted and correlative backups: 1.3–7.34× faster than Mark&Sweep, 128–256× less network traffic for the mark.",
        ],
    ),
];

/// The paper section an approach belongs to, from its description; `None`
/// for the baselines (naive, nogc).
pub fn paper_of(description: &str) -> Option<&'static str> {
    let has = |k: &str| description.split_whitespace().any(|w| w.starts_with(k));
    if has("layout=mfdedup") || has("gc=cma") {
        Some("paper-mfdedup")
    } else if description.contains("mark=focused") {
        Some("paper-fgc")
    } else if description.contains("mark=physical") || description.contains(" vc=") {
        Some("paper-physical-gc")
    } else if has("gc=gccdf") {
        Some("paper-gccdf")
    } else if has("rewrite=") && !has("rewrite=none") {
        Some("paper-rewriting")
    } else {
        None
    }
}

/// The section of a demo headline.
fn headline_section(paper: &str) -> &'static str {
    if paper.starts_with("SMR") || paper.starts_with("HAR") {
        "paper-rewriting"
    } else if paper.starts_with("GCCDF") {
        "paper-gccdf"
    } else if paper.starts_with("MFDedup") {
        "paper-mfdedup"
    } else if paper.starts_with("Physical") {
        "paper-physical-gc"
    } else {
        "paper-fgc"
    }
}

/// A plot of the report: (id, section, title, x label, y label).
pub const PLOTS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "dedup-ratio",
        "overview",
        "Actual deduplication ratio over versions",
        "backup (step in sequence)",
        "logical retained / stored",
    ),
    (
        "read-amplification",
        "overview",
        "Read amplification per retained backup (final restores)",
        RETAINED,
        "container bytes read / restored",
    ),
    (
        "newest-read-amplification",
        "paper-rewriting",
        "Read amplification of each backup restored right after it is made",
        "backup (step in sequence)",
        "container bytes read / restored",
    ),
    (
        "speed-factor",
        "paper-rewriting",
        "Speed factor per retained backup (final restores)",
        RETAINED,
        "MB restored per container read",
    ),
    (
        "gc-involved",
        "paper-gccdf",
        "GC-involved containers per retention round",
        ROUND,
        "containers",
    ),
    (
        "gc-produced",
        "paper-gccdf",
        "Containers produced by GC per retention round",
        ROUND,
        "containers",
    ),
    (
        "stored",
        "paper-mfdedup",
        "Data stored over versions",
        "backup (step in sequence)",
        "MiB stored (all copies)",
    ),
    (
        "gc-mark-seconds",
        "paper-physical-gc",
        "GC mark time per retention round",
        ROUND,
        "seconds",
    ),
    (
        "gc-mark-bytes",
        "paper-fgc",
        "Recipe bytes the GC mark read per retention round",
        ROUND,
        "KiB",
    ),
];

/// The data of a plot.
fn plot_data(r: &Results, id: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    match id {
        "dedup-ratio" => series(r, |row| match row {
            Row::Backup(b) => Some((b.approach.as_str(), b.step as f64, b.dedup_ratio)),
            _ => None,
        }),
        "stored" => series(r, |row| match row {
            Row::Backup(b) => Some((
                b.approach.as_str(),
                b.step as f64,
                b.stored_bytes as f64 / (1 << 20) as f64,
            )),
            _ => None,
        }),
        "read-amplification" => finals(r, |x| x.read_amplification),
        "newest-read-amplification" => newest(r, |x| x.read_amplification),
        "speed-factor" => finals(r, |x| x.speed_factor),
        "gc-involved" => gc_rounds(r, |g| g.involved_containers as f64),
        "gc-produced" => gc_rounds(r, |g| g.produced_containers as f64),
        "gc-mark-seconds" => marks(gc_rounds(r, |g| g.mark_seconds)),
        _ => marks(gc_rounds(r, |g| g.mark_bytes_read as f64 / 1024.0)),
    }
}

/// Mark plots leave out approaches that never mark (MFDedup deletes
/// categories, CMA only drops dead containers): their zeros say nothing.
fn marks(mut s: Vec<(String, Vec<(f64, f64)>)>) -> Vec<(String, Vec<(f64, f64)>)> {
    s.retain(|(_, p)| p.iter().any(|&(_, y)| y > 0.0));
    s
}

/// The plots of a section that have data in this run, as `<figure>`s.
fn figures(r: &Results, section: &str) -> String {
    let mut h = String::new();
    for (id, sec, title, xlabel, ylabel) in PLOTS {
        if *sec != section {
            continue;
        }
        let data = plot_data(r, id);
        if data.is_empty() {
            continue;
        }
        write!(
            h,
            "<figure>{}</figure>",
            line_plot(id, title, xlabel, ylabel, &data)
        )
        .ok();
    }
    h
}

const STYLE: &str = "body{font-family:Helvetica,Arial,sans-serif;margin:24px auto;max-width:1200px;padding:0 16px;line-height:1.4;color:#222}\
h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:2em}\
.box{overflow-x:auto;max-width:100%;border:1px solid #eee}\
table{border-collapse:collapse;font-size:13px}\
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}\
th{background:#f4f4f4;font-weight:600;max-width:9em;text-align:left}\
td:first-child,td.l,td.s{text-align:left}td:first-child{white-space:nowrap}\
td.l{min-width:12em;max-width:26em;overflow-wrap:break-word}\
figure{margin:16px 0}figure svg{display:block;width:100%;height:auto;border:1px solid #eee}\
.bad{color:#b00}.good{color:#070}ul.claims li{margin:3px 0}.note{color:#555}";

/// The report: the run, a summary table, an overview (dedup ratio and read
/// amplification of every approach), then one section per paper with its
/// claims, this run's numbers for its techniques and its plots.
pub fn html(r: &Results) -> String {
    let mut h = String::new();
    write!(h, r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Tessera lab: {0}</title><style>{STYLE}</style></head><body><h1>Tessera lab: {0}</h1>"#, esc(&r.experiment)).ok();
    write!(h, "<p>Mode <b>{:?}</b>, chunker {}, hash {}, containers of {} KiB, {} backups in sequence, {} approaches. Restore metrics in the summary are those of the final restore of every retained backup.</p>", r.mode, esc(&r.chunker), esc(&r.hash), r.container_size / 1024, r.versions.len(), r.summaries.len()).ok();
    write!(
        h,
        "<p class=\"stamp\">Run {} on {} ({} cores), build {} (tessera {}).</p>",
        esc(&r.stamp.date),
        esc(&r.stamp.host),
        r.stamp.cores,
        esc(&r.stamp.commit),
        esc(&r.stamp.version)
    )
    .ok();
    h.push_str(r#"<h2 id="summary-title">Summary</h2><div class="box"><table id="summary"><tr><th>approach</th><th>configuration</th><th>status</th><th>backups</th><th>retained</th><th>stored MiB</th><th>actual dedup ratio</th><th>classic dedup ratio</th><th>mean read amplification</th><th>mean speed factor</th><th>backup MB/s</th><th>chunk refs/s</th><th>GC rounds</th><th>GC reclaimed</th><th>GC produced</th><th>GC MiB read</th><th>GC MiB written</th><th>GC s</th><th>peak RSS MiB</th><th>time s</th></tr>"#);
    for s in &r.summaries {
        let status = if s.status == "ok" && s.rewrote_nothing {
            r#"ok <span class="bad">(rewrote nothing)</span>"#.to_string()
        } else if s.status == "ok" {
            "ok".to_string()
        } else {
            format!(r#"<span class="bad">{}</span>"#, esc(&s.status))
        };
        write!(h, r#"<tr><td>{}</td><td class="l">{}</td><td class="s">{status}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.3}</td><td>{:.3}</td><td>{:.1}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{:.1}</td></tr>"#,
            esc(&s.approach), esc(&s.description), s.backups, s.retained, mib(s.stored_bytes), s.dedup_ratio, s.classic_dedup_ratio, s.mean_read_amplification, s.mean_speed_factor, s.backup_mb_s, s.chunk_refs_per_s, s.gc_rounds, s.gc_reclaimed_containers, s.gc_produced_containers, mib(s.gc_bytes_read), mib(s.gc_bytes_written), s.gc_seconds, mib(s.peak_rss_bytes), s.seconds).ok();
    }
    h.push_str("</table></div>");
    write!(
        h,
        r#"<section id="overview"><h2>Overview: every approach</h2>{}</section>"#,
        figures(r, "overview")
    )
    .ok();
    // The demo's verdicts compare the final restores' means: only where
    // the run has them.
    let finals = r.summaries.iter().any(|s| s.mean_read_amplification > 0.0);
    let heads = if finals {
        crate::demo::headlines(r)
    } else {
        Vec::new()
    };
    for (id, title, file, claims) in PAPERS {
        write!(h, r#"<section class="paper" id="{id}"><h2>{}</h2><p class="note">Paper: <code>{file}</code>. Its claims:</p><ul class="claims">"#, esc(title)).ok();
        for c in *claims {
            write!(h, "<li>{}</li>", esc(c)).ok();
        }
        h.push_str("</ul>");
        let mine: Vec<&crate::runner::Summary> = r
            .summaries
            .iter()
            .filter(|s| paper_of(&s.description) == Some(id))
            .collect();
        if mine.is_empty() {
            h.push_str("<p class=\"note\">This run has no approach of this paper; <code>docs/REPRODUCTION.md</code> has its numbers from the committed experiments.</p>");
        } else {
            h.push_str("<p>This run's numbers for its techniques, beside the baselines (– where the run has no such restore):</p><div class=\"box\"><table><tr><th>approach</th><th>actual dedup ratio</th><th>classic dedup ratio</th><th>RA retained (mean)</th><th>RA newest (mean)</th><th>speed factor retained (mean)</th><th>GC produced</th><th>GC s</th><th>rewritten MiB</th></tr>");
            let base = r
                .summaries
                .iter()
                .filter(|s| paper_of(&s.description).is_none());
            for s in base.chain(mine.iter().copied()) {
                let (n, sum) = r
                    .rows
                    .iter()
                    .fold((0usize, 0.0), |(n, sum), row| match row {
                        Row::Restore(x) if x.approach == s.approach && x.when == "newest" => {
                            (n + 1, sum + x.read_amplification)
                        }
                        _ => (n, sum),
                    });
                let or_dash = |v: f64, ok: bool| if ok { format!("{v:.3}") } else { "–".into() };
                let finals = s.mean_read_amplification > 0.0;
                write!(h, "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td></tr>", esc(&s.approach), s.dedup_ratio, s.classic_dedup_ratio, or_dash(s.mean_read_amplification, finals), or_dash(sum / n.max(1) as f64, n > 0), or_dash(s.mean_speed_factor, finals), s.gc_produced_containers, s.gc_seconds, mib(s.rewritten_bytes)).ok();
            }
            h.push_str("</table></div>");
        }
        for hl in heads.iter().filter(|x| headline_section(x.paper) == *id) {
            write!(
                h,
                r#"<p><b class="{}">{}</b> {}: {}</p>"#,
                if hl.holds { "good" } else { "bad" },
                if hl.holds {
                    "Holds here"
                } else {
                    "Differs here"
                },
                esc(hl.claim),
                esc(&hl.shows)
            )
            .ok();
        }
        h.push_str(&figures(r, id));
        h.push_str("</section>");
    }
    h.push_str("<p class=\"note\">Data: <code>results.csv</code> (or <code>results.csv.zst</code>, <code>results.csv.gz</code>) next to this file. The papers' headline claims beside Tessera's measurements over every committed experiment, with the reason for each difference: <code>docs/REPRODUCTION.md</code> (regenerated by <code>tessera lab reproduce</code>).</p></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_empty_plots_say_so() {
        assert_eq!(tick_step(10.0, 5.0), 2.0);
        assert_eq!(tick_step(0.9, 5.0), 0.2);
        assert_eq!(tick_step(700.0, 8.0), 100.0);
        let empty = line_plot("x", "T", "a", "b", &[("n".into(), vec![])]);
        assert!(empty.contains("no data") && !empty.contains("<polyline"));
        let one = line_plot("x", "T <&>", "a", "b", &[("n".into(), vec![(1.0, 2.0)])]);
        assert!(!one.contains("log scale"));
        let wide = line_plot(
            "y",
            "T",
            "a",
            "b",
            &[("n".into(), vec![(1.0, 2.0), (2.0, 900.0)])],
        );
        assert!(wide.contains("(log scale)"));
        assert!(one.contains("T &lt;&amp;&gt;") && one.contains("<polyline"));
        assert!(one.starts_with("<svg id=\"x\"") && one.ends_with("</svg>"));
    }
}
