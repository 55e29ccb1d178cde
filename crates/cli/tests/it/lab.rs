//! `tessera lab …` end to end: generators, experiment runs, the demo, bad input.

use assert_cmd::Command;
use std::path::Path;

use crate::common::{fails_all, json, ok};

fn tessera() -> Command {
    let mut c = Command::cargo_bin("tessera").unwrap();
    c.env_remove("RUST_BACKTRACE").env_remove("TESSERA_REPO");
    c
}

#[test]
fn demo_writes_a_report_and_refuses_foreign_directories() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("demo");
    for _ in 0..2 {
        // The second run replaces the first demo's directory.
        let v = json(&ok(tessera()
            .args(["lab", "demo", "--approaches", "nogc", "--json", "--dir"])
            .arg(&dir)));
        assert_eq!(v["summaries"][0]["approach"], "nogc");
        assert_eq!(v["summaries"][0]["status"], "ok");
        assert_eq!(v["summaries"][0]["backups"], 48);
        assert!(v["summaries"][0]["dedup_ratio"].as_f64().unwrap() > 1.0);
        let html = std::fs::read_to_string(v["report"].as_str().unwrap()).unwrap();
        assert!(
            html.contains("<svg id=\"dedup-ratio\"") && html.contains("<table id=\"summary\">")
        );
        assert!(
            !dir.join("work").exists(),
            "dataset removed after a successful demo"
        );
    }
    let mine = t.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("thesis.tex"), "x").unwrap();
    fails_all(
        tessera().args(["lab", "demo", "--dir"]).arg(&mine),
        &["not an earlier demo"],
    );
    assert!(mine.join("thesis.tex").exists());
    fails_all(
        tessera()
            .args(["lab", "demo", "--approaches", "nogc,fancy", "--dir"])
            .arg(&dir),
        &["unknown approach 'fancy'"],
    );
}

fn experiment(dir: &Path, mode: &str, dataset: &str) -> std::path::PathBuf {
    let p = dir.join(format!("{mode}.toml"));
    std::fs::write(
        &p,
        format!(
            "name = \"{mode}\"\nmode = \"{mode}\"\napproaches = [\"nogc\"]\n\n[dataset]\ndir = \"{dataset}\"\n\n[repo]\nchunker = \"fastcdc:1k/4k/32k\"\ncontainer_size = \"64KiB\"\n\n[retention]\nretain = 4\ndelete = 2\n"
        ),
    )
    .unwrap();
    p
}

#[test]
fn gen_then_run_in_data_and_trace_mode_gives_the_same_layout() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    let out = ok(tessera()
        .args([
            "lab",
            "gen",
            "synth",
            "--sources",
            "2",
            "--versions",
            "4",
            "--files",
            "12",
            "--seed",
            "5",
            "--out",
        ])
        .arg(&ds));
    assert!(out.contains("wrote 8 tar images"), "{out}");
    let names: Vec<_> = std::fs::read_dir(&ds)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 8);
    ok(tessera()
        .args([
            "lab",
            "gen",
            "trace",
            "--chunker",
            "fastcdc:1k/4k/32k",
            "--out",
        ])
        .arg(t.path().join("tr"))
        .arg(&ds));
    let mut sums = Vec::new();
    for (mode, d) in [("data", "ds"), ("trace", "tr")] {
        let e = experiment(t.path(), mode, d);
        let v = json(&ok(tessera()
            .args(["lab", "run", "--json", "--out"])
            .arg(t.path().join(format!("out-{mode}")))
            .arg(&e)));
        let s = v["summaries"][0].clone();
        assert_eq!(s["status"], "ok");
        assert!(Path::new(v["csv"].as_str().unwrap()).exists());
        sums.push(s);
    }
    for k in [
        "dedup_ratio",
        "classic_dedup_ratio",
        "mean_read_amplification",
        "mean_speed_factor",
        "stored_bytes",
        "retained",
    ] {
        assert_eq!(sums[0][k], sums[1][k], "{k}");
    }
    // Traces written directly by the generator equal those made from the images.
    let direct = t.path().join("direct");
    ok(tessera()
        .args([
            "lab",
            "gen",
            "synth",
            "--sources",
            "2",
            "--versions",
            "4",
            "--files",
            "12",
            "--seed",
            "5",
            "--trace",
            "--chunker",
            "fastcdc:1k/4k/32k",
            "--out",
        ])
        .arg(&direct));
    let strip = |p: &Path| -> String {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let first = std::fs::read_dir(&direct)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let twin = t.path().join("tr").join(first.file_name().unwrap());
    assert_eq!(strip(&first), strip(&twin));
}

#[test]
fn bad_input_names_file_and_line() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let write = |name: &str, s: &str| {
        std::fs::write(p.join(name), s).unwrap();
        p.join(name)
    };
    std::fs::create_dir(p.join("tr")).unwrap();
    std::fs::write(p.join("tr/a.trace"), "aa 100\n").unwrap();
    std::fs::write(p.join("tr/b.trace"), "# x\naa 100\nbb x\n").unwrap();
    let base = "mode = \"trace\"\napproaches = [\"nogc\"]\n[dataset]\ndir = \"tr\"\n";
    let cases = [
        (
            "unknown.toml",
            base.replace("nogc", "fancy"),
            vec!["unknown.toml:2:", "unknown approach 'fancy'"],
        ),
        (
            "missing.toml",
            base.replace("\"tr\"", "\"nowhere\""),
            vec!["missing.toml:4:", "does not exist"],
        ),
        (
            "malformed.toml",
            base.replace("mode = ", "mode == "),
            vec!["malformed.toml:1:"],
        ),
        ("trace.toml", base.to_string(), vec!["b.trace:3:"]),
    ];
    for (name, text, needles) in cases {
        let e = write(name, &text);
        fails_all(
            tessera()
                .args(["lab", "run", "--out"])
                .arg(p.join("o"))
                .arg(&e),
            &needles,
        );
    }
    fails_all(
        tessera().args(["lab", "run"]).arg(p.join("absent.toml")),
        &["absent.toml"],
    );
    fails_all(
        tessera()
            .args(["lab", "gen", "git", "--tags", "v*", "--repo"])
            .arg(p.join("nogit"))
            .arg("--out")
            .arg(p.join("g")),
        &["does not exist"],
    );
}

#[test]
fn gen_git_writes_one_tarball_per_tag_in_version_order() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let s = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    };
    git(&["init", "-q"]);
    for (i, tag) in ["v1", "v2", "v10"].iter().enumerate() {
        std::fs::write(repo.join("f.txt"), format!("version {i}\n").repeat(100)).unwrap();
        git(&["add", "f.txt"]);
        git(&["commit", "-qm", tag]);
        git(&["tag", tag]);
    }
    git(&["tag", "other"]);
    let out = t.path().join("series");
    ok(tessera()
        .args(["lab", "gen", "git", "--tags", "v*", "--repo"])
        .arg(&repo)
        .arg("--out")
        .arg(&out));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    names.sort();
    assert_eq!(names, ["00000-v1.tar", "00001-v2.tar", "00002-v10.tar"]);
    let tar = std::fs::read(out.join("00002-v10.tar")).unwrap();
    assert!(String::from_utf8_lossy(&tar).contains("version 2"));
    // Deterministic: a second run gives the same bytes.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // A relative --out is relative to where tessera runs, not to the
    // repository git runs in.
    let again = t.path().join("again");
    ok(tessera()
        .current_dir(t.path())
        .args(["lab", "gen", "git", "--tags", "v*", "--repo"])
        .arg(&repo)
        .args(["--out", "again"]));
    assert_eq!(std::fs::read(again.join("00002-v10.tar")).unwrap(), tar);
    fails_all(
        tessera()
            .args(["lab", "gen", "git", "--tags", "nomatch*", "--repo"])
            .arg(&repo)
            .arg("--out")
            .arg(&out),
        &["no tags", "nomatch*"],
    );
}

/// `lab bench --trace` runs the scale benchmark at the sizes given and
/// reports its rate and memory per stored chunk; its flags need --trace.
#[test]
fn bench_trace_reports_rate_and_memory_per_chunk() {
    let t = tempfile::tempdir().unwrap();
    for extra in [&[][..], &["--local", "--index", "disk"][..]] {
        let v = json(&ok(tessera()
            .args([
                "lab",
                "bench",
                "--trace",
                "--versions",
                "3",
                "--size",
                "4MiB",
                "--json",
            ])
            .args(extra)
            .arg("--dir")
            .arg(t.path().join(extra.len().to_string()))));
        let refs = v["chunk_refs"].as_u64().unwrap();
        // 4 MiB of ~8 KiB chunks, three times.
        assert!((1_200..=2_000).contains(&refs), "{v}");
        let stored = v["stored_chunks"].as_u64().unwrap();
        assert!(stored >= refs / 3 && stored < refs / 2, "{v}");
        assert!(v["chunk_refs_per_s"].as_f64().unwrap() > 0.0, "{v}");
        assert_eq!(
            v["backend"],
            if extra.is_empty() { "memory" } else { "local" }
        );
    }
    // A usage error (clap's exit status 2) naming the missing flag.
    let out = tessera()
        .args(["lab", "bench", "--versions", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--trace"));
}

/// `lab reproduce --quick` at a tiny scale on a checkout of one small
/// generated experiment: the document is written with its table and no
/// empty section; `--no-run` regenerates it; a directive without results
/// fails naming its section.
#[test]
fn reproduce_quick_writes_the_document_and_fails_on_a_missing_table() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("checkout");
    std::fs::create_dir_all(root.join("experiments")).unwrap();
    std::fs::write(
        root.join("experiments/REPRODUCTION.md.in"),
        "# R\n\nIntro.\n\n## GCCDF\n\n@TABLE small\n\n@GCTABLE small\n",
    )
    .unwrap();
    std::fs::write(
        root.join("experiments/small.toml"),
        "mode = \"trace\"\napproaches = [\"naive\", \"gccdf\"]\n[dataset.synthetic]\nsources = 2\nversions = 80\nfiles = 100\nfile_size_max = \"32KiB\"\nmodify_rate = 0.3\n[repo]\nchunker = \"fastcdc:1k/4k/32k\"\ncontainer_size = \"64KiB\"\n[retention]\nretain = 100\ndelete = 20\n",
    )
    .unwrap();
    let out = t.path().join("out");
    let v = json(&ok(tessera()
        .args([
            "lab",
            "reproduce",
            "--quick",
            "--scale",
            "0.05",
            "--json",
            "--root",
        ])
        .arg(&root)
        .arg("--out")
        .arg(&out)));
    assert_eq!(v["outcomes"][0]["experiment"], "small");
    assert!(v["outcomes"][0]["status"]
        .as_str()
        .unwrap()
        .starts_with("ran"));
    let doc = std::fs::read_to_string(out.join("REPRODUCTION.md")).unwrap();
    assert!(
        doc.contains("| gccdf |") && !doc.contains("@TABLE"),
        "{doc}"
    );
    assert!(out.join("results/small/report.html").is_file());
    ok(tessera()
        .args(["lab", "reproduce", "--no-run", "--root"])
        .arg(&root)
        .arg("--out")
        .arg(&out));
    std::fs::write(
        root.join("experiments/REPRODUCTION.md.in"),
        "# R\n\n## FGC\n\n@TABLE nowhere\n",
    )
    .unwrap();
    std::fs::write(
        root.join("experiments/nowhere.toml"),
        "approaches = [\"naive\"]\n[dataset]\ndir = \"missing\"\n",
    )
    .unwrap();
    fails_all(
        tessera()
            .args(["lab", "reproduce", "--quick", "--json", "--root"])
            .arg(&root)
            .arg("--out")
            .arg(&out),
        &["section \"FGC\"", "no results for nowhere"],
    );
}
