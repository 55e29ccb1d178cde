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
    "categories",
    "volumes",
    "seeks",
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

/// The plots of the report, by element id: (id, title, y label).
pub const PLOTS: &[(&str, &str, &str)] = &[
    (
        "dedup-ratio",
        "Actual deduplication ratio over versions",
        "logical retained / stored",
    ),
    (
        "read-amplification",
        "Read amplification per retained backup",
        "container bytes read / restored",
    ),
    (
        "speed-factor",
        "Speed factor per retained backup",
        "MB restored per container read",
    ),
    (
        "gc-involved",
        "GC-involved containers per retention round",
        "containers",
    ),
    (
        "gc-produced",
        "Containers produced by GC per retention round",
        "containers",
    ),
];

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

/// Okabe–Ito: distinguishable in colour-blind vision and in greyscale print.
const COLORS: &[&str] = &[
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

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
    if (v == v.trunc() && v.abs() < 1e9) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// A line plot with one series per approach.
pub fn line_plot(
    id: &str,
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let (w, h) = (680.0, 360.0);
    let (l, rgt, t, b) = (64.0, 150.0, 34.0, 46.0);
    let (pw, ph) = (w - l - rgt, h - t - b);
    let mut s = String::new();
    write!(s, r#"<svg id="{id}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="Helvetica, Arial, sans-serif" font-size="12"><title>{}</title><rect width="100%" height="100%" fill="white"/><text x="{}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"#, esc(title), l + pw / 2.0, esc(title)).ok();
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    if pts.is_empty() {
        write!(s, r##"<text x="{}" y="{}" text-anchor="middle" fill="#666">no data in this run</text></svg>"##, l + pw / 2.0, t + ph / 2.0).ok();
        return s;
    }
    let (mut x0, mut x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (mut y0, mut y1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    y0 = y0.min(0.0);
    if x1 <= x0 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let ys = tick_step(y1 - y0, 5.0);
    y1 = (y1 / ys).ceil() * ys;
    let xs = tick_step(x1 - x0, 8.0).max(1.0);
    let px = |x: f64| l + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| t + ph - (y - y0) / (y1 - y0) * ph;
    // Grid and ticks.
    let mut y = y0;
    while y <= y1 + ys * 1e-9 {
        let (x2, yy, tx, ty, label) = (l + pw, py(y), l - 6.0, py(y) + 4.0, num(y));
        write!(s, r##"<line x1="{l}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"##).ok();
        y += ys;
    }
    let mut x = (x0 / xs).ceil() * xs;
    while x <= x1 + 1e-9 {
        write!(s, r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" stroke="#333"/><text x="{0:.1}" y="{3}" text-anchor="middle">{4}</text>"##, px(x), t + ph, t + ph + 5.0, t + ph + 18.0, num(x)).ok();
        x += xs;
    }
    write!(s, r##"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="#333"/><text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(16 {}) rotate(-90)" text-anchor="middle">{}</text>"##, l + pw / 2.0, h - 10.0, esc(xlabel), t + ph / 2.0, esc(ylabel)).ok();
    for (i, (name, p)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = p
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        // Dash patterns tell series apart in greyscale too.
        let dash = ["", "6 3", "2 3", "8 3 2 3", "1 2"][i % 5];
        write!(s, r#"<polyline fill="none" stroke="{c}" stroke-width="1.8" stroke-dasharray="{dash}" points="{}"><title>{}</title></polyline>"#, path.join(" "), esc(name)).ok();
        if p.len() <= 80 {
            for q in &path {
                let (cx, cy) = q.split_once(',').expect("x,y");
                write!(s, r#"<circle cx="{cx}" cy="{cy}" r="2.4" fill="{c}"/>"#).ok();
            }
        }
        let ly = t + 10.0 + i as f64 * 18.0;
        write!(s, r#"<line x1="{0}" x2="{1}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{2}" y="{3}">{4}</text>"#, l + pw + 10.0, l + pw + 34.0, l + pw + 40.0, ly + 4.0, esc(name)).ok();
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

/// A count of every retention round that ran a GC, per approach.
fn gc_rounds(r: &Results, y: fn(&GcReport) -> u64) -> Vec<(String, Vec<(f64, f64)>)> {
    series(r, |row| match row {
        Row::Gc(g) if g.gc != "none" => {
            Some((g.approach.as_str(), g.round as f64, y(&g.report) as f64))
        }
        _ => None,
    })
}

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
    out
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

pub fn html(r: &Results) -> String {
    let mut h = String::new();
    write!(h, r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Tessera lab: {0}</title><style>body{{font-family:Helvetica,Arial,sans-serif;margin:24px;max-width:1400px}}table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}td:first-child,th:first-child,td.l{{text-align:left}}.plots{{display:flex;flex-wrap:wrap;gap:12px}}.bad{{color:#b00}}</style></head><body><h1>Tessera lab: {0}</h1>"#, esc(&r.experiment)).ok();
    write!(h, "<p>Mode <b>{:?}</b>, chunker {}, hash {}, containers of {} KiB, {} backups in sequence. Restore metrics are those of the final restore of every retained backup.</p>", r.mode, esc(&r.chunker), esc(&r.hash), r.container_size / 1024, r.versions.len()).ok();
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
    h.push_str(r#"<h2>Summary</h2><table id="summary"><tr><th>approach</th><th>configuration</th><th>status</th><th>backups</th><th>retained</th><th>stored MiB</th><th>actual dedup ratio</th><th>classic dedup ratio</th><th>mean read amplification</th><th>mean speed factor</th><th>backup MB/s</th><th>chunk refs/s</th><th>GC rounds</th><th>GC reclaimed</th><th>GC produced</th><th>GC MiB read</th><th>GC MiB written</th><th>GC s</th><th>peak RSS MiB</th><th>time s</th></tr>"#);
    for s in &r.summaries {
        let status = if s.status == "ok" && s.rewrote_nothing {
            r#"ok <span class="bad">(rewrote nothing)</span>"#.to_string()
        } else if s.status == "ok" {
            "ok".to_string()
        } else {
            format!(r#"<span class="bad">{}</span>"#, esc(&s.status))
        };
        write!(h, r#"<tr><td>{}</td><td class="l">{}</td><td class="l">{status}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.3}</td><td>{:.3}</td><td>{:.1}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{:.1}</td></tr>"#,
            esc(&s.approach), esc(&s.description), s.backups, s.retained, mib(s.stored_bytes), s.dedup_ratio, s.classic_dedup_ratio, s.mean_read_amplification, s.mean_speed_factor, s.backup_mb_s, s.chunk_refs_per_s, s.gc_rounds, s.gc_reclaimed_containers, s.gc_produced_containers, mib(s.gc_bytes_read), mib(s.gc_bytes_written), s.gc_seconds, mib(s.peak_rss_bytes), s.seconds).ok();
    }
    h.push_str("</table><h2>Plots</h2><div class=\"plots\">");
    for (id, title, ylabel) in PLOTS {
        let (xlabel, data) = match *id {
            "dedup-ratio" => (
                "backup (step in sequence)",
                series(r, |row| match row {
                    Row::Backup(b) => Some((b.approach.as_str(), b.step as f64, b.dedup_ratio)),
                    _ => None,
                }),
            ),
            "read-amplification" => (RETAINED, finals(r, |x| x.read_amplification)),
            "speed-factor" => (RETAINED, finals(r, |x| x.speed_factor)),
            "gc-involved" => (ROUND, gc_rounds(r, |g| g.involved_containers)),
            _ => (ROUND, gc_rounds(r, |g| g.produced_containers)),
        };
        write!(
            h,
            "<figure>{}</figure>",
            line_plot(id, title, xlabel, ylabel, &data)
        )
        .ok();
    }
    h.push_str("</div><p>Data: <code>results.csv</code> and <code>results.jsonl</code> next to this file. The papers' headline claims beside Tessera's measurements, with the reason for each difference: <code>docs/REPRODUCTION.md</code> (regenerated by <code>experiments/reproduce.sh</code>).</p></body></html>\n");
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
        assert!(one.contains("T &lt;&amp;&gt;") && one.contains("<polyline"));
        assert!(one.starts_with("<svg id=\"x\"") && one.ends_with("</svg>"));
    }
}
