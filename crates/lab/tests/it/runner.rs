//! The runner end to end on small synthetic series.

use std::path::Path;
use tessera_lab::approach::builtin;
use tessera_lab::experiment::{Experiment, Mode};
use tessera_lab::report;
use tessera_lab::runner::{run, Results, Row, RunOptions};

const EXP: &str = r#"
name = "small"
mode = "MODE"
approaches = ["nogc"]

[[approach]]
name = "nogc-lru4"
gc = "none"
cache = "lru:4"

[dataset.synthetic]
seed = 11
sources = 2
versions = 4
files = 24
file_size_max = "48KiB"
modify_rate = 0.3
edit_size_max = "8KiB"

[repo]
chunker = "fastcdc:1k/4k/32k"
container_size = "64KiB"

[retention]
retain = 3
delete = 2

[restore]
cache = "lru:8"
newest_after_each = true
"#;

fn run_text(text: &str, work: &Path) -> Results {
    let exp = Experiment::parse(text, Path::new("small.toml"), Path::new(".")).unwrap();
    let mut opts = RunOptions::new(work);
    opts.progress = false;
    run(&exp, &opts).unwrap()
}

fn run_mode(mode: &str, work: &Path) -> Results {
    let r = run_text(&EXP.replace("MODE", mode), work);
    assert!(r.failed().is_empty(), "{:?}", r.failed());
    r
}

/// Rewriting and GC approaches too. Core may not implement a technique yet;
/// then it must fail the same way in both modes (and nothing else may fail).
const ALL: &str = r#"approaches = ["nogc", "naive", "capping:4", "smr:4", "har", "gccdf"]

[[approach]]
name = "har-nogc"
rewrite = "har"
gc = "none"
"#;

#[test]
fn data_and_trace_mode_agree_for_every_approach() {
    let t = tempfile::tempdir().unwrap();
    let text = EXP.replace("approaches = [\"nogc\"]\n", ALL);
    let data = run_text(&text.replace("MODE", "data"), &t.path().join("d"));
    let trace = run_text(&text.replace("MODE", "trace"), &t.path().join("t"));
    assert_eq!(data.summaries.len(), 8);
    for (d, tr) in data.summaries.iter().zip(&trace.summaries) {
        assert_eq!(d.status, tr.status, "{}", d.approach);
        assert!(
            d.status == "ok" || d.status.contains("not implemented"),
            "{}: {}",
            d.approach,
            d.status
        );
    }
    assert_eq!(data.summaries[0].status, "ok");
    let (a, b) = (layout(&data), layout(&trace));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y);
    }
}

/// Every layout-derived field of a row (timings and throughputs dropped).
fn layout(r: &Results) -> Vec<serde_json::Value> {
    r.rows
        .iter()
        .map(|row| {
            let mut v = serde_json::to_value(row).unwrap();
            let o = v.as_object_mut().unwrap();
            o.retain(|k, _| {
                !k.contains("seconds") && !k.contains("_s") && k != "gc_peak_memory_bytes"
            });
            // GC phases: their times too.
            if let Some(serde_json::Value::Array(phases)) = o.get_mut("phases") {
                for p in phases {
                    if let Some(p) = p.as_object_mut() {
                        p.remove("seconds");
                    }
                }
            }
            v
        })
        .collect()
}

#[test]
fn data_and_trace_mode_agree_on_every_layout_metric() {
    let t = tempfile::tempdir().unwrap();
    let data = run_mode("data", &t.path().join("d"));
    let trace = run_mode("trace", &t.path().join("t"));
    assert_eq!(data.mode, Mode::Data);
    assert_eq!(trace.mode, Mode::Trace);
    let (a, b) = (layout(&data), layout(&trace));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y);
    }
    // The comparison is not vacuous: containers were read and the layout fragmented.
    let restores: Vec<_> = data
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Restore(x) => Some(x),
            _ => None,
        })
        .collect();
    assert!(restores.len() >= 8);
    assert!(restores
        .iter()
        .any(|r| r.containers_read > 2 && r.read_amplification > 1.0));
    let dr: Vec<f64> = data
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Backup(b) => Some(b.dedup_ratio),
            _ => None,
        })
        .collect();
    assert!(dr.iter().any(|&d| d > 1.2), "{dr:?}");
}

#[test]
fn retention_deletes_exactly_the_configured_backups() {
    let t = tempfile::tempdir().unwrap();
    let r = run_mode("trace", t.path());
    let names = r.versions.clone();
    assert_eq!(names.len(), 8);
    for approach in ["nogc", "nogc-lru4"] {
        // retain 3, delete the 2 oldest whenever more than 3 are retained:
        // after steps 3, 5, 7 → versions 0-1, 2-3, 4-5 deleted.
        let rounds: Vec<(usize, String)> = r
            .rows
            .iter()
            .filter_map(|row| match row {
                Row::Gc(g) if g.approach == approach => Some((g.step, g.deleted.clone())),
                _ => None,
            })
            .collect();
        let want: Vec<(usize, String)> = [(3, 0, 1), (5, 2, 3), (7, 4, 5)]
            .iter()
            .map(|&(s, a, b)| (s, format!("{} {}", names[a], names[b])))
            .collect();
        assert_eq!(rounds, want, "{approach}");
        let finals: Vec<&str> = r
            .rows
            .iter()
            .filter_map(|row| match row {
                Row::Restore(x) if x.approach == approach && x.when == "final" => {
                    Some(x.version.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(finals, vec![names[6].as_str(), names[7].as_str()]);
        let s = r.summaries.iter().find(|s| s.approach == approach).unwrap();
        assert_eq!((s.backups, s.retained, s.gc_rounds), (8, 2, 3));
    }
    // Without GC nothing is reclaimed, so the actual ratio drops after deletions.
    let s = &r.summaries[0];
    assert!(
        s.dedup_ratio < s.classic_dedup_ratio,
        "{} vs {}",
        s.dedup_ratio,
        s.classic_dedup_ratio
    );
}

/// The ids of the report's plots, in order, after checking that each is
/// one of `report::PLOTS`, drawn once, and that the report has one section
/// per paper.
fn one_svg_per_plot(html: &str) -> Vec<String> {
    let ids: Vec<String> = html
        .split("<svg id=\"")
        .skip(1)
        .map(|x| x.split('"').next().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), html.matches("<svg ").count());
    for id in &ids {
        assert!(report::PLOTS.iter().any(|p| p.0 == id), "{id}");
        assert_eq!(ids.iter().filter(|x| *x == id).count(), 1, "{id}");
    }
    assert_eq!(
        html.matches("<section class=\"paper\"").count(),
        report::PAPERS.len()
    );
    assert_eq!(report::PAPERS.len(), 5);
    ids
}

#[test]
fn report_has_every_plot_and_the_summary() {
    let t = tempfile::tempdir().unwrap();
    let r = run_mode("trace", &t.path().join("w"));
    let w = report::write_all(&r, &t.path().join("out")).unwrap();
    let html = std::fs::read_to_string(&w.html).unwrap();
    // Without GC the GC plots have no data and are left out; every other
    // plot is there once.
    let plots = one_svg_per_plot(&html);
    assert_eq!(
        plots,
        [
            "dedup-ratio",
            "read-amplification",
            "newest-read-amplification",
            "speed-factor",
            "stored"
        ]
    );
    assert!(html.contains("<table id=\"summary\">"));
    for s in &r.summaries {
        assert!(html.contains(&format!("<tr><td>{}</td>", s.approach)));
    }
    // One polyline per approach in the plots that have data.
    let dedup = html
        .split("<svg id=\"dedup-ratio\"")
        .nth(1)
        .unwrap()
        .split("</svg>")
        .next()
        .unwrap();
    assert_eq!(dedup.matches("<polyline").count(), 2);
    assert!(
        !html.contains("<script") && !html.contains("src="),
        "self-contained"
    );
    let csv = std::fs::read_to_string(&w.csv).unwrap();
    assert_eq!(csv.lines().count(), r.rows.len() + 1);
    assert!(csv.starts_with("kind,approach,step,version"));
    let jl = std::fs::read_to_string(&w.jsonl).unwrap();
    for l in jl.lines() {
        serde_json::from_str::<serde_json::Value>(l).unwrap();
    }
    assert_eq!(jl.lines().count(), 1 + r.rows.len() + r.summaries.len());
    // The run header names the build, the machine and the date (the tests
    // run inside the repository's checkout: a 40-hex commit).
    let head: serde_json::Value = serde_json::from_str(jl.lines().next().unwrap()).unwrap();
    let commit = head["stamp"]["commit"].as_str().unwrap();
    let hex = commit.trim_end_matches("+dirty");
    assert!(
        hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{commit}"
    );
    assert!(head["stamp"]["date"].as_str().unwrap().starts_with("20"));
    assert!(head["stamp"]["cores"].as_u64().unwrap() >= 1);
    assert!(html.contains(&format!("build {commit}")), "stamped report");
}

#[test]
fn bad_trace_line_fails_the_run_naming_file_and_line() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    std::fs::create_dir(&ds).unwrap();
    std::fs::write(ds.join("a.trace"), "# tessera trace\naa 100\n").unwrap();
    std::fs::write(ds.join("b.trace"), "aa 100\nbb 100\nbb x\n").unwrap();
    let text = "mode = \"trace\"\napproaches = [\"nogc\"]\n[dataset]\ndir = \"ds\"\n";
    let exp = Experiment::parse(text, &t.path().join("e.toml"), t.path()).unwrap();
    let e = format!(
        "{:#}",
        run(&exp, &RunOptions::new(&t.path().join("w"))).unwrap_err()
    );
    assert!(e.contains("b.trace:3:"), "{e}");
    assert!(builtin("naive").is_ok());
}

/// Deletions, per approach, as (step, deleted versions).
fn rounds(r: &Results, approach: &str) -> Vec<(usize, String)> {
    r.rows
        .iter()
        .filter_map(|row| match row {
            Row::Gc(g) if g.approach == approach => Some((g.step, g.deleted.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn interleaved_ingest_runs_every_step_and_changes_only_the_layout() {
    let t = tempfile::tempdir().unwrap();
    let text = EXP.replace(
        "approaches = [\"nogc\"]\n",
        "approaches = [\"naive\", \"gccdf\", \"smr:4\"]\n",
    );
    let one = run_text(&text.replace("MODE", "trace"), &t.path().join("one"));
    let text3 = format!("interleave = 3\n{text}");
    let data = run_text(&text3.replace("MODE", "data"), &t.path().join("d"));
    let trace = run_text(&text3.replace("MODE", "trace"), &t.path().join("t"));
    // Every approach runs interleaved, rewriting too, as the artifact
    // ingests its baselines (and every restore was verified byte for byte
    // in data mode).
    for r in [&data, &trace] {
        let status: Vec<&str> = r.summaries.iter().map(|s| s.status.as_str()).collect();
        assert_eq!(status[..3], ["ok", "ok", "ok"]);
        assert!(status.iter().all(|s| *s == "ok"), "{status:?}");
    }
    // The same layout in both modes.
    assert_eq!(layout(&data), layout(&trace));
    for approach in ["naive", "gccdf", "smr:4"] {
        // The same backups are deleted, after the same steps, as without
        // interleaving.
        assert_eq!(rounds(&trace, approach), rounds(&one, approach));
        assert!(!rounds(&trace, approach).is_empty());
        let backups = |r: &Results| {
            r.rows
                .iter()
                .filter(|row| matches!(row, Row::Backup(b) if b.approach == approach))
                .count()
        };
        assert_eq!(backups(&trace), backups(&one));
    }
    // Not vacuous: sharing containers between versions changes what
    // restores read.
    let reads = |r: &Results| -> Vec<u64> {
        r.rows
            .iter()
            .filter_map(|row| match row {
                Row::Restore(x) if x.approach == "naive" => Some(x.containers_read),
                _ => None,
            })
            .collect()
    };
    assert_eq!(reads(&trace).len(), reads(&one).len());
    assert_ne!(reads(&trace), reads(&one));
}

#[test]
fn every_step_reports_its_backend_requests_and_bytes() {
    let t = tempfile::tempdir().unwrap();
    let r = run_mode("data", &t.path().join("d"));
    for row in &r.rows {
        let io = row.io();
        assert!(io.backend_requests > 0, "{row:?}");
        match row {
            Row::Backup(_) => assert!(io.backend_bytes_written > 0, "{row:?}"),
            Row::Restore(_) => assert!(io.backend_bytes_read > 0, "{row:?}"),
            Row::Gc(_) => {}
        }
    }
    // The counts are the last columns, after every earlier one.
    let csv = report::csv(&r);
    let header = csv.lines().next().unwrap();
    assert!(
        header.ends_with(",backend_requests,backend_bytes_read,backend_bytes_written"),
        "{header}"
    );
    let jsonl = t.path().join("out");
    let w = report::write_all(&r, &jsonl).unwrap();
    let text = std::fs::read_to_string(w.jsonl).unwrap();
    let row = text.lines().nth(1).unwrap();
    assert!(row.starts_with(r#"{"kind":"backup","approach":"#), "{row}");
    assert!(row.contains(r#""backend_requests":"#), "{row}");
}

/// The mfdedup approach on a two-source series, in data mode (restores
/// verified byte for byte) and trace mode: both agree on every layout
/// figure; each source is its own chain; forgetting deletes categories
/// (the GC rows) and arranging held back raises restore reads.
#[test]
fn mfdedup_approach_in_both_modes() {
    let t = tempfile::tempdir().unwrap();
    let text = EXP
        .replace(
            "approaches = [\"nogc\"]\n",
            "approaches = [\"mfdedup\", \"mfdedup:2\"]\n",
        )
        .replace("retain = 3\ndelete = 2", "retain = 4\ndelete = 1");
    let data = run_text(&text.replace("MODE", "data"), &t.path().join("d"));
    let trace = run_text(&text.replace("MODE", "trace"), &t.path().join("t"));
    for r in [&data, &trace] {
        assert!(r.failed().is_empty(), "{:?}", r.failed());
    }
    // EXP also defines a container-layout approach (nogc-lru4): its rows
    // carry no MFDedup figures.
    let key = |r: &Results| -> Vec<String> {
        r.rows
            .iter()
            .filter(|row| match row {
                Row::Backup(b) => b.approach.starts_with("mfdedup"),
                Row::Restore(x) => x.approach.starts_with("mfdedup"),
                Row::Gc(g) => g.approach.starts_with("mfdedup"),
            })
            .map(|row| match row {
                Row::Backup(b) => {
                    let m = b.mfdedup.as_ref().unwrap();
                    assert!(m.chain == "s0" || m.chain == "s1", "{}", m.chain);
                    format!(
                        "{} {} {} {}",
                        b.approach, b.stored_bytes, m.active_bytes, m.arrange_behind
                    )
                }
                Row::Restore(x) => {
                    let m = x.mfdedup.as_ref().unwrap();
                    format!(
                        "{} {} {} {}",
                        x.approach, x.container_bytes_read, m.categories, x.seeks
                    )
                }
                Row::Gc(g) => {
                    assert_eq!(g.gc, "mfdedup-delete");
                    format!("{} {}", g.approach, g.report.reclaimed_bytes)
                }
            })
            .collect()
    };
    assert_eq!(key(&data), key(&trace));
    let behind: Vec<u32> = data
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Backup(b) if b.approach == "mfdedup:2" => {
                Some(b.mfdedup.as_ref().unwrap().arrange_behind)
            }
            _ => None,
        })
        .collect();
    assert!(
        behind.iter().all(|&b| b <= 2) && behind.contains(&2),
        "{behind:?}"
    );
    assert!(data
        .rows
        .iter()
        .any(|r| matches!(r, Row::Gc(g) if g.report.reclaimed_bytes > 0)));
}

/// `[restore] to_file`: data-mode restores go into a file under the work
/// directory (MFDedup writes it in place instead of through a temporary
/// file), are still compared with the version, and read exactly what the
/// stream restores read; every restore reports its seeks.
#[test]
fn restores_into_a_file_read_what_stream_restores_read() {
    let t = tempfile::tempdir().unwrap();
    let text = EXP.replace("MODE", "data").replace(
        "approaches = [\"nogc\"]\n",
        "approaches = [\"naive\", \"mfdedup\"]\n",
    );
    let stream = run_text(&text, &t.path().join("s"));
    let file = run_text(
        &text.replace(
            "newest_after_each = true",
            "newest_after_each = true\nto_file = true",
        ),
        &t.path().join("f"),
    );
    assert!(!t.path().join("f").join("restore.out").exists());
    type Read = (String, u64, u64, u64, u64, Option<bool>);
    let reads = |r: &Results| -> Vec<Read> {
        assert!(r.failed().is_empty(), "{:?}", r.failed());
        r.rows
            .iter()
            .filter_map(|row| match row {
                Row::Restore(x) => Some((
                    x.approach.clone(),
                    x.restored_bytes,
                    x.containers_read,
                    x.container_bytes_read,
                    x.seeks,
                    x.mfdedup.as_ref().map(|m| m.buffered),
                )),
                _ => None,
            })
            .collect()
    };
    let (s, f) = (reads(&stream), reads(&file));
    assert_eq!(s.len(), f.len());
    assert!(s.iter().any(|x| x.0 == "mfdedup") && s.iter().any(|x| x.0 == "naive"));
    for (a, b) in s.iter().zip(&f) {
        assert_eq!((&a.0, a.1, a.2, a.3, a.4), (&b.0, b.1, b.2, b.3, b.4));
        assert!(a.4 >= 1 && a.4 <= a.2.max(1), "{a:?}");
        if a.0 == "mfdedup" {
            assert_eq!((a.5, b.5), (Some(true), Some(false)));
        }
    }
}

/// MFDedup over a multi-source series as one chain (`chains = "one"`, the
/// GCCDF paper's comparison): every version restores byte for byte (data
/// mode verifies each restore) and every backup continues the one chain;
/// by default each source is a chain of its own.
#[test]
fn mfdedup_runs_a_multi_source_series_as_one_chain() {
    let t = tempfile::tempdir().unwrap();
    let text = EXP.replace("MODE", "data").replace(
        "approaches = [\"nogc\"]\n",
        "approaches = [\"mfdedup\"]\n\n[[approach]]\nname = \"mfdedup-one\"\nlayout = \"mfdedup\"\ngc = \"none\"\nchains = \"one\"\n",
    );
    let r = run_text(&text, t.path());
    assert!(r.failed().is_empty(), "{:?}", r.failed());
    let chains = |approach: &str| -> std::collections::BTreeSet<String> {
        r.rows
            .iter()
            .filter_map(|row| match row {
                Row::Backup(b) if b.approach == approach => {
                    b.mfdedup.as_ref().map(|m| m.chain.clone())
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        chains("mfdedup-one").into_iter().collect::<Vec<_>>(),
        ["series"]
    );
    assert_eq!(chains("mfdedup").len(), 2, "one chain per source");
    let restores = r
        .rows
        .iter()
        .filter(|row| matches!(row, Row::Restore(x) if x.approach == "mfdedup-one"))
        .count();
    assert!(restores >= 8, "{restores}");
}

/// The demo's closing screen: one headline per paper whose approaches ran,
/// each with this run's numbers; GCCDF's and MFDedup's directions hold by
/// construction (same dedup as naive and a lower RA; a sequential layout).
#[test]
fn headlines_name_each_paper_the_run_covers() {
    let t = tempfile::tempdir().unwrap();
    let text = EXP.replace("MODE", "trace").replace(
        "approaches = [\"nogc\"]\n",
        "approaches = [\"naive\", \"capping:4\", \"smr:4\", \"har\", \"gccdf\", \"mfdedup\", \"cma\", \"pgc+\", \"fgc\"]\n",
    );
    let r = run_text(&text, t.path());
    assert!(r.failed().is_empty(), "{:?}", r.failed());
    let h = tessera_lab::demo::headlines(&r);
    let papers: Vec<&str> = h
        .iter()
        .map(|h| h.paper.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        papers,
        ["SMR", "HAR", "GCCDF", "MFDedup", "Physical", "FGC"]
    );
    for x in &h {
        assert!(x.shows.chars().any(|c| c.is_ascii_digit()), "{x:?}");
    }
    assert!(h[3].holds, "MFDedup reads sequentially: {:?}", h[3]);
    // The report: a section per paper, each with its approaches' numbers,
    // and every plot (one <svg> each) since every metric has data.
    let html = report::html(&r);
    let plots = one_svg_per_plot(&html);
    let all: Vec<&str> = report::PLOTS.iter().map(|p| p.0).collect();
    assert_eq!(plots, all);
    for (id, _, _, _) in report::PAPERS {
        let sec = html
            .split(&format!("<section class=\"paper\" id=\"{id}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("no section {id}"))
            .split("</section>")
            .next()
            .unwrap();
        assert!(sec.contains("<table>"), "{id} has no numbers");
        assert!(!sec.contains("has no approach of this paper"), "{id}");
    }
    // Without naive there is nothing to compare with.
    let mut none = r.clone();
    none.summaries.retain(|s| s.approach != "naive");
    assert!(tessera_lab::demo::headlines(&none).is_empty());
}

/// `fastcopy_doublings`: each round clones every retained backup (nothing
/// deleted, no data written) and runs GC: the retained backups and the
/// total compression double at a constant stored size; the logical mark
/// that walks shared subtrees again queries twice the chunks each round,
/// the physical marks the same number; the CSV carries the new columns.
#[test]
fn fastcopy_doublings_double_compression_and_only_the_logical_walk() {
    let t = tempfile::tempdir().unwrap();
    let text = r#"
name = "fastcopy"
mode = "trace"
approaches = []
fastcopy_doublings = 3

[[approach]]
name = "lgc-walk-all"
walk_shared_subtrees = true

[[approach]]
name = "pgc-bloom6"
mark = "physical"
vc = "bloom-bits:6"

[[approach]]
name = "pgc+"
mark = "physical+"

[dataset.scale]
seed = 3
versions = 6
version_size = "2MiB"
chunk_size = "4KiB"
change_rate = 0.05

[repo]
container_size = "256KiB"
"#;
    let r = run_text(text, t.path());
    assert!(r.failed().is_empty(), "{:?}", r.failed());
    for a in ["lgc-walk-all", "pgc-bloom6", "pgc+"] {
        let rounds: Vec<_> = r
            .rows
            .iter()
            .filter_map(|row| match row {
                Row::Gc(g) if g.approach == a => Some(g),
                _ => None,
            })
            .collect();
        assert_eq!(
            rounds.iter().map(|g| g.fastcopy).collect::<Vec<_>>(),
            vec![1, 2, 3],
            "{a}"
        );
        for w in rounds.windows(2) {
            assert_eq!(w[1].retained_backups, 2 * w[0].retained_backups, "{a}");
            assert_eq!(w[1].stored_bytes, w[0].stored_bytes, "{a}");
            let ratio = w[1].dedup_ratio / w[0].dedup_ratio;
            assert!((ratio - 2.0).abs() < 1e-9, "{a}: {ratio}");
            assert_eq!(w[1].report.reclaimed_containers, 0, "{a}");
            let q = (w[0].report.chunk_queries, w[1].report.chunk_queries);
            if a == "lgc-walk-all" {
                assert_eq!(q.1, 2 * q.0, "{a}");
            } else {
                assert_eq!(q.1, q.0, "{a}");
            }
        }
        assert_eq!(rounds[0].retained_backups, 12, "{a}");
        if a == "pgc-bloom6" {
            let bits = rounds[0].report.live_vector_bits_per_fp;
            assert!((bits - 6.0).abs() < 0.1, "{bits}");
            assert!(rounds[0].report.lp_vector_bits_per_fp > 0.0);
        }
    }
    let csv = tessera_lab::report::csv(&r);
    let head = csv.lines().next().unwrap();
    for col in [
        "fastcopy",
        "mark_ran",
        "mark_containers_read",
        "mark_seeks",
        "chunk_queries",
        "liveness_array_bytes",
        "live_vector_bits_per_fp",
        "lp_vector_bits_per_fp",
    ] {
        assert!(head.split(',').any(|c| c == col), "{col} missing");
    }
}
