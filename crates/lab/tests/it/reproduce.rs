//! `lab reproduce`: the experiments a template cites, run at a tiny scale,
//! regenerate a document without an empty section.

use std::path::Path;
use tessera_lab::reproduce::{self, Options, Quick};

/// A small generated experiment (5 sources, the papers' retention).
const SYNTH: &str = r#"
mode = "trace"
approaches = ["naive", "smr:10", "gccdf", "mfdedup"]

[dataset.synthetic]
seed = 7
sources = 3
versions = 40
files = 200
file_size_max = "64KiB"
modify_rate = 0.3

[repo]
chunker = "fastcdc:1k/4k/32k"
container_size = "64KiB"

[retention]
retain = 100
delete = 20
pick = "spread"

[restore]
cache = "lru:1000000"
newest_after_each = true
"#;

const TEMPLATE: &str = "# Reproduction (test)

Intro.

## Rewriting

@SMRTABLE tiny-a

## GCCDF

@TABLE tiny-a

@GCTABLE tiny-b

### Rounds

@ROUNDS tiny-b naive gccdf

@GCTIME tiny-b

## Real series

@TABLE elsewhere
";

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

/// A checkout with the template, two generated experiments and one whose
/// dataset is missing but whose committed results are there.
fn checkout(root: &Path, template: &str) {
    write(&root.join(reproduce::TEMPLATE), template);
    write(&root.join("experiments/tiny-a.toml"), SYNTH);
    write(
        &root.join("experiments/tiny-b.toml"),
        &SYNTH.replace("seed = 7", "seed = 8"),
    );
    // Its dataset directory is there but empty (a dataset not generated yet).
    std::fs::create_dir_all(root.join("experiments/data/series")).unwrap();
    write(
        &root.join("experiments/elsewhere.toml"),
        "approaches = [\"naive\"]\n[dataset]\ndir = \"data/series\"\n",
    );
    write(
        &root.join("experiments/results/elsewhere/results.csv"),
        "kind,approach,when,dedup_ratio,read_amplification\nbackup,naive,,2.5,\nrestore,naive,final,,1.25\n",
    );
}

#[test]
fn quick_reproduce_at_a_tiny_scale_fills_every_section() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("checkout");
    checkout(&root, TEMPLATE);
    let out = t.path().join("out");
    let quick = Quick {
        scale: 0.05,
        max_dataset_bytes: 1 << 30,
    };
    let opts = Options::new(&root, Some(&out), Some(quick), true);
    let mut log = Vec::new();
    let r = reproduce::reproduce(&opts, &mut |s| log.push(s.to_string())).unwrap();
    assert_eq!(r.doc, out.join("REPRODUCTION.md"));
    let doc = std::fs::read_to_string(&r.doc).unwrap();
    reproduce::check(&doc).unwrap();
    assert!(!doc.contains('@'), "{doc}");
    // Each directive became a table with rows.
    assert!(doc.contains("| smr:10 |"), "{doc}");
    assert!(doc.contains("| gccdf |"), "{doc}");
    assert!(
        doc.contains("| GC rounds before | naive RA newest |"),
        "{doc}"
    );
    assert!(doc.contains("| 1 |"), "no GC round at this scale: {doc}");
    assert!(doc.contains("| naive | 2.500 | – | 1.250 |"), "{doc}");
    // The run is stamped and says where each table comes from.
    assert!(
        doc.contains(&format!("at commit {}", r.stamp.commit)),
        "{doc}"
    );
    assert!(doc.contains("**Quick run**"));
    let st: Vec<(&str, &str)> = r
        .outcomes
        .iter()
        .map(|o| (o.experiment.as_str(), o.status.as_str()))
        .collect();
    assert_eq!(st.len(), 3, "{st:?}");
    assert!(
        st[0].1.starts_with("ran") && st[1].1.starts_with("ran"),
        "{st:?}"
    );
    assert!(
        st[2].1.starts_with("skipped: no dataset at") && st[2].1.contains("data/series"),
        "{st:?}"
    );
    // This run's results are under --out; the committed ones are untouched.
    for n in ["tiny-a", "tiny-b"] {
        let d = out.join("results").join(n);
        assert!(d.join("report.html").is_file() && d.join("results.csv.zst").is_file());
        assert!(!d.join("work").exists());
        assert!(!root.join("experiments/results").join(n).exists());
    }
    assert!(
        std::fs::read_to_string(root.join("experiments/results/elsewhere/results.csv"))
            .unwrap()
            .contains("2.5")
    );
    // --no-run regenerates the same tables from what is there.
    let again = Options::new(&root, Some(&out), Some(quick), false);
    let r2 = reproduce::reproduce(&again, &mut |_| {}).unwrap();
    let doc2 = std::fs::read_to_string(&r2.doc).unwrap();
    let body = |d: &str| {
        d.split("## Where the numbers come from")
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(body(&doc), body(&doc2));
}

#[test]
fn reproduce_fails_loudly_naming_the_section() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("checkout");
    // No results anywhere for an experiment whose dataset is missing.
    checkout(&root, "# R\n\ntext\n\n## FGC\n\n@TABLE gone\n");
    write(
        &root.join("experiments/gone.toml"),
        "approaches = [\"naive\"]\n[dataset]\ndir = \"/nonexistent/x\"\n",
    );
    let out = t.path().join("out");
    let opts = Options::new(&root, Some(&out), Some(Quick::default()), true);
    let e = reproduce::reproduce(&opts, &mut |_| {}).unwrap_err();
    assert!(
        e.to_string().contains("section \"FGC\"") && e.to_string().contains("gone"),
        "{e}"
    );
    assert!(!out.join("REPRODUCTION.md").exists());
    // A claim left pending fails too.
    write(
        &root.join(reproduce::TEMPLATE),
        "# R\n\n## PGC\n\n| claim | pending: later |\n\n@TABLE elsewhere\n",
    );
    let e = reproduce::reproduce(&opts, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("\"PGC\" says \"pending\""), "{e}");
}
