//! `tessera gc` and `tessera forget` with retention policies.

use assert_cmd::Command;
use std::path::Path;

use crate::common::{fails, ok, ok_bytes, tessera};

fn json(cmd: &mut Command) -> serde_json::Value {
    let s = ok_bytes(cmd);
    serde_json::from_slice(&s)
        .unwrap_or_else(|e| panic!("bad json ({e}): {}", String::from_utf8_lossy(&s)))
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A repository with small containers and backups of v1, v2, v3 (file
/// versions sharing most chunks); returns the versions.
fn setup(repo: &Path, dir: &Path) -> Vec<Vec<u8>> {
    ok_bytes(tessera(repo).args([
        "init",
        "--chunker",
        "fastcdc:1k/4k/16k",
        "--container-size",
        "64KiB",
    ]));
    let v1 = data(1, 400_000);
    let mut v2 = v1.clone();
    v2[100_000..150_000].copy_from_slice(&data(2, 50_000));
    let mut v3 = v2.clone();
    v3[250_000..300_000].copy_from_slice(&data(3, 50_000));
    let f = dir.join("file.bin");
    for v in [&v1, &v2, &v3] {
        std::fs::write(&f, v).unwrap();
        ok_bytes(tessera(repo).arg("backup").arg(&f));
    }
    vec![v1, v2, v3]
}

fn restore(repo: &Path, id: &str) -> Vec<u8> {
    ok_bytes(tessera(repo).args(["restore", id, "--stdout"]))
}

fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(listing(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out.sort();
    out
}

#[test]
fn gc_naive_then_gccdf_report_json_and_keep_backups_restorable() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let v = setup(&repo, t.path());
    ok_bytes(tessera(&repo).args(["forget", "1"]));
    let r = json(tessera(&repo).args(["gc", "--vc-fp-rate", "0.01", "--json"]));
    assert_eq!(r["strategy"], "naive");
    assert_eq!(r["dry_run"], false);
    let involved = r["involved_containers"].as_u64().unwrap();
    assert!(involved > 0, "{r}");
    let reclaimed = r["reclaimed_containers"].as_u64().unwrap();
    assert!(reclaimed >= 1, "{r}");
    assert_eq!(
        reclaimed + r["skipped_containers"].as_u64().unwrap(),
        involved
    );
    assert!(r["produced_containers"].as_u64().unwrap() >= 1);
    for f in [
        "bytes_read",
        "bytes_written",
        "mark_seconds",
        "analyze_seconds",
        "sweep_read_seconds",
        "sweep_write_seconds",
        "peak_memory_bytes",
        "involved_bytes",
    ] {
        assert!(r[f].is_number(), "{f} missing: {r}");
    }
    assert_eq!(restore(&repo, "2"), v[1]);
    assert_eq!(restore(&repo, "3"), v[2]);

    ok_bytes(tessera(&repo).args(["forget", "2"]));
    let r = json(tessera(&repo).args([
        "gc",
        "--strategy",
        "GCCDF",
        "--segment-containers",
        "2",
        "--split-threshold",
        "10",
        "--vc-phv",
        "--json",
    ]));
    assert_eq!(r["strategy"], "gccdf");
    assert!(r["segments"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["tree_peak_bytes"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(restore(&repo, "3"), v[2]);
    // Nothing left to collect.
    let r = json(tessera(&repo).args(["gc", "--json"]));
    assert_eq!(r["involved_containers"], 0);
    let human = ok(tessera(&repo).arg("gc"));
    assert!(human.contains("0 containers involved"), "{human}");
}

#[test]
fn dry_runs_change_nothing() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    setup(&repo, t.path());
    let before = listing(&repo);
    let r = json(tessera(&repo).args(["forget", "--keep-last", "1", "--dry-run", "--json"]));
    assert_eq!(r["dry_run"], true);
    let gone: Vec<u64> = r["forgotten"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_u64().unwrap())
        .collect();
    assert_eq!(gone, vec![1, 2]);
    assert_eq!(r["remaining"], 1);
    assert_eq!(listing(&repo), before);
    ok_bytes(tessera(&repo).args(["forget", "1"]));
    let before = listing(&repo);
    for s in ["naive", "gccdf"] {
        let r = json(tessera(&repo).args(["gc", "--dry-run", "--strategy", s, "--json"]));
        assert_eq!(r["dry_run"], true);
        assert!(r["reclaimed_containers"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(listing(&repo), before);
    }
    // CMA: whole dead containers only, nothing copied.
    let r = json(tessera(&repo).args(["gc", "--dry-run", "--strategy", "cma", "--json"]));
    assert_eq!(r["strategy"], "cma");
    assert_eq!(r["produced_containers"], 0, "{r}");
    assert_eq!(r["deleted_without_copy"], r["reclaimed_containers"], "{r}");
    assert_eq!(listing(&repo), before);
}

#[test]
fn forget_keep_last_then_gc() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let v = setup(&repo, t.path());
    let out = ok(tessera(&repo).args(["forget", "--keep-last", "2"]));
    assert!(out.contains("forgot backup 1"), "{out}");
    let snaps = json(tessera(&repo).args(["snapshots", "--json"]));
    let ids: Vec<u64> = snaps
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![2, 3]);
    ok_bytes(tessera(&repo).args(["gc", "--strategy", "gccdf"]));
    assert_eq!(restore(&repo, "2"), v[1]);
    assert_eq!(restore(&repo, "latest"), v[2]);
    // Dry run by id lists without forgetting.
    let r = json(tessera(&repo).args(["forget", "2", "--dry-run", "--json"]));
    assert_eq!(r["forgotten"][0]["id"], 2);
    assert_eq!(
        json(tessera(&repo).args(["snapshots", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn bad_gc_and_forget_flags_give_one_clear_line() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    setup(&repo, t.path());
    fails(
        tessera(&repo).args(["gc", "--strategy", "fast"]),
        "unknown gc strategy 'fast'",
    );
    fails(
        tessera(&repo).args(["gc", "--liveness-threshold", "2"]),
        "between 0 and 1",
    );
    fails(
        tessera(&repo).args(["gc", "--liveness-threshold", "half"]),
        "--liveness-threshold expects a number",
    );
    fails(
        tessera(&repo).args(["gc", "--segment-containers", "x"]),
        "--segment-containers expects a whole number",
    );
    fails(
        tessera(&repo).args(["gc", "--segment-containers", "0"]),
        "at least 1 container",
    );
    fails(
        tessera(&repo).args(["forget", "--keep-last", "two"]),
        "--keep-last expects a whole number",
    );
    fails(
        tessera(&repo).args(["gc", "--vc-fp-rate", "0.7"]),
        "false-positive rate must be in [0, 0.5)",
    );
    fails(
        tessera(&repo).args(["gc", "--ownership-fp-rate", "nan"]),
        "--ownership-fp-rate expects a rate",
    );
    fails(tessera(&repo).arg("forget"), "nothing to forget");
    fails(
        tessera(&repo).args(["forget", "1", "--keep-last", "1"]),
        "not both",
    );
    fails(
        tessera(&t.path().join("nope")).arg("gc"),
        "no Tessera repository",
    );
}

/// `--mark physical` and `physical+` with either sweep: the JSON names the
/// mark and reports each phase (analysis, enumeration per level, select,
/// copy); `--memory-limit` makes a physical mark take two passes; the
/// human output lists the phases; backups stay restorable.
#[test]
fn gc_physical_marks_report_their_phases() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let v = setup(&repo, t.path());
    ok_bytes(tessera(&repo).args(["forget", "1"]));
    let r = json(tessera(&repo).args([
        "gc",
        "--mark",
        "physical+",
        "--max-read-rate",
        "1GiB",
        "--max-write-rate",
        "1GiB",
        "--json",
    ]));
    assert_eq!(r["mark"], "physical+");
    assert_eq!(r["mark_passes"], 1);
    let phases: Vec<String> = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(phases[0], "analysis", "{r}");
    assert!(phases.iter().any(|p| p == "enumeration L1"), "{r}");
    assert!(phases.iter().any(|p| p == "select"), "{r}");
    assert_eq!(phases.last().unwrap(), "copy", "{r}");
    for p in r["phases"].as_array().unwrap() {
        for f in ["seconds", "bytes_read", "containers_read", "memory_bytes"] {
            assert!(p[f].is_number(), "{f}: {p}");
        }
    }
    assert!(r["reclaimed_containers"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(restore(&repo, "2"), v[1]);
    ok_bytes(tessera(&repo).args(["forget", "2"]));
    let r = json(tessera(&repo).args([
        "gc",
        "--mark",
        "physical",
        "--strategy",
        "gccdf",
        "--memory-limit",
        "1KiB",
        "--json",
    ]));
    assert_eq!(r["mark"], "physical");
    assert_eq!(r["mark_passes"], 2, "{r}");
    assert_eq!(restore(&repo, "3"), v[2]);
    let human = ok(tessera(&repo).args(["gc", "--mark", "physical", "--dry-run"]));
    assert!(human.contains("physical mark"), "{human}");
    assert!(human.contains("enumeration L1"), "{human}");
    fails(
        tessera(&repo).args(["gc", "--memory-limit", "0"]),
        "--memory-limit must be above 0",
    );
}

/// `backup --clone ID` (fastcopy): a new backup sharing the source's root,
/// no container written; it restores exactly and survives the source's
/// forget and GC.
#[test]
fn backup_clone_restores_and_outlives_its_source() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let v = setup(&repo, t.path());
    let containers = |repo: &Path| listing(&repo.join("containers")).len();
    let before = containers(&repo);
    let c = json(tessera(&repo).args(["backup", "--clone", "1", "--stdin-name", "cl", "--json"]));
    assert_eq!(c["id"], 4, "{c}");
    assert_eq!(c["name"], "cl");
    assert_eq!(c["new_bytes"], 0);
    assert_eq!(c["parent"], 1, "{c}");
    assert_eq!(containers(&repo), before, "no container written");
    assert_eq!(restore(&repo, "4"), v[0]);
    ok_bytes(tessera(&repo).args(["forget", "1"]));
    ok_bytes(tessera(&repo).args(["gc"]));
    assert_eq!(restore(&repo, "4"), v[0]);
    fails(
        tessera(&repo).args(["backup", "--clone", "1"]),
        "no snapshot",
    );
}
