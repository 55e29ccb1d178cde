//! The `tessera` binary, command by command, including bad input.

use assert_cmd::Command;
use std::path::Path;
use std::sync::Arc;

use crate::common::{self, json, ok, tessera};

/// [`common::fails`], and the error is not a panic.
fn fails(cmd: &mut Command, needle: &str) {
    let err = common::fails(cmd, needle);
    assert!(!err.contains("panicked"), "{err}");
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/empty")).unwrap();
    std::fs::write(root.join("a.txt"), b"hello tessera\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("sub/big.bin"), &big).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
}

/// Run `cmd` with `-q` among its arguments: it succeeds and prints nothing
/// on stdout; returns its stderr.
fn quiet_run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{cmd:?} with -q");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn quiet_commands_print_no_summary() {
    let t = tempfile::tempdir().unwrap();
    let quiet = t.path().join("quiet");
    let stderr = quiet_run(tessera(&quiet).args(["init", "-q", "--encryption", "none"]));
    assert!(
        stderr.contains("NOT encrypted"),
        "the unencrypted warning stays"
    );
    let loud = t.path().join("loud");
    assert!(ok(tessera(&loud).arg("init")).starts_with("created repository "));

    let src = t.path().join("file");
    std::fs::write(&src, b"quiet bytes").unwrap();
    ok(tessera(&quiet).arg("backup").arg(&src));
    quiet_run(
        tessera(&quiet)
            .args(["restore", "-q", "latest", "--target"])
            .arg(t.path().join("out")),
    );
    assert_eq!(
        std::fs::read(t.path().join("out/file")).unwrap(),
        b"quiet bytes"
    );
    quiet_run(tessera(&quiet).args(["forget", "-q", "1"]));
    quiet_run(tessera(&quiet).args(["gc", "-q"]));
}

#[test]
fn init_backup_snapshots_restore_forget_stats() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let src = t.path().join("src");
    make_tree(&src);

    let cfg = json(&ok(
        tessera(&repo).args(["init", "--hash", "sha256", "--json"])
    ));
    assert_eq!(cfg["hash"], "sha256");
    fails(tessera(&repo).arg("init"), "already exists");

    let rep = json(&ok(tessera(&repo).arg("backup").arg(&src).arg("--json")));
    assert_eq!(rep["backup"]["id"], 1);
    assert_eq!(rep["tree"]["files"], 2);
    let rep2 = json(&ok(tessera(&repo).arg("backup").arg(&src).arg("--json")));
    assert_eq!(
        rep2["stored_bytes"], 0,
        "an unchanged tree stores nothing new"
    );
    assert_eq!(rep2["backup"]["root"], rep["backup"]["root"]);

    let human = ok(tessera(&repo).arg("snapshots"));
    assert!(
        human.contains("tree") && human.lines().count() == 3,
        "{human}"
    );
    let list = json(&ok(tessera(&repo).args(["snapshots", "--json"])));
    assert_eq!(list.as_array().unwrap().len(), 2);

    let out = t.path().join("out");
    let r = json(&ok(tessera(&repo)
        .args(["restore", "1", "--json", "--target"])
        .arg(&out)));
    assert_eq!(r["extract"]["refused"].as_array().unwrap().len(), 0);
    assert!(r["read_amplification"].as_f64().unwrap() > 0.0);
    assert_eq!(
        std::fs::read(out.join("sub/big.bin")).unwrap(),
        std::fs::read(src.join("sub/big.bin")).unwrap()
    );
    assert_eq!(
        std::fs::read_link(out.join("link")).unwrap(),
        Path::new("a.txt")
    );
    assert!(out.join("sub/empty").is_dir());

    // Restore by root prefix and `latest`, as a tar stream on stdout.
    let root = rep["backup"]["root"].as_str().unwrap()[..10].to_string();
    let a = tessera(&repo)
        .args(["restore", &root, "--stdout"])
        .output()
        .unwrap();
    let b = tessera(&repo)
        .args(["restore", "latest", "--stdout"])
        .output()
        .unwrap();
    assert!(a.status.success() && !a.stdout.is_empty());
    assert_eq!(a.stdout, b.stdout, "deterministic tar stream");

    let s = json(&ok(tessera(&repo).args(["stats", "--json"])));
    assert_eq!(s["backups"], 2);
    assert!(
        s.get("index").is_none(),
        "plain stats does not load the index"
    );
    let s = json(&ok(tessera(&repo).args(["stats", "--index", "--json"])));
    assert!(s["index"]["bytes_per_entry"].as_f64().unwrap() > 32.0);
    assert!(ok(tessera(&repo).args(["stats", "--index"])).contains("bytes/entry"));

    let f = json(&ok(tessera(&repo).args(["forget", "1", "--json"])));
    assert_eq!(f["remaining"], 1);
    fails(tessera(&repo).args(["forget", "1"]), "no snapshot '1'");
    fails(
        tessera(&repo).args(["restore", "1", "--stdout"]),
        "no snapshot '1'",
    );
}

#[test]
fn file_and_stdin_round_trip() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    ok(tessera(&repo).arg("init"));
    let data: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let file = t.path().join("db.dump");
    std::fs::write(&file, &data).unwrap();

    ok(tessera(&repo).arg("backup").arg(&file));
    let out = tessera(&repo)
        .args(["restore", "1", "--stdout"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, data);

    ok(tessera(&repo)
        .args(["backup", "--stdin-name", "stream.bin"])
        .write_stdin(data.clone()));
    let dir = t.path().join("restored");
    ok(tessera(&repo).args(["restore", "2", "--target"]).arg(&dir));
    assert_eq!(std::fs::read(dir.join("stream.bin")).unwrap(), data);
    // Restoring over an existing file is refused, not overwritten.
    fails(
        tessera(&repo).args(["restore", "2", "--target"]).arg(&dir),
        "stream.bin",
    );
}

#[test]
fn bad_input_gives_one_clear_line() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    fails(tessera(&repo).arg("snapshots"), "no Tessera repository");
    fails(
        tessera(&repo).arg("backup").arg(t.path()),
        "no Tessera repository",
    );
    fails(
        tessera(&repo).args(["init", "--hash", "md5"]),
        "unknown fingerprint algorithm",
    );
    fails(
        tessera(&repo).args(["init", "--chunker", "fastcdc:8k/4k/2k"]),
        "min <= avg <= max",
    );
    ok(tessera(&repo).arg("init"));
    fails(
        tessera(&repo).arg("backup").arg(t.path().join("nope")),
        "cannot read",
    );
    fails(
        tessera(&repo).args(["restore", "7", "--stdout"]),
        "no snapshot '7'",
    );
    fails(
        tessera(&repo).args(["restore", "latest", "--stdout"]),
        "no backups",
    );
    let trace = t.path().join("t.trace");
    std::fs::write(&trace, "aabb 100\nnot-hex 5\n").unwrap();
    fails(
        tessera(&repo).arg("backup").arg("--trace-file").arg(&trace),
        "init it with --trace",
    );
}

#[test]
fn second_writer_is_refused_until_unlock() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    ok(tessera(&repo).arg("init"));
    let backend: Arc<dyn tessera_core::backend::ObjectStore> =
        Arc::new(tessera_core::backend::LocalStore::open(&repo).unwrap());
    let held = tessera_core::lock::RepoLock::acquire(backend, "tessera backup").unwrap();
    fails(
        tessera(&repo)
            .arg("backup")
            .arg(t.path().join("repo/manifests")),
        &format!("pid {}", std::process::id()),
    );
    // Readers are not blocked by the writer lock.
    ok(tessera(&repo).arg("snapshots"));
    let u = json(&ok(tessera(&repo).args(["unlock", "--json"])));
    assert_eq!(u["removed"]["pid"], std::process::id());
    drop(held);
    ok(tessera(&repo)
        .arg("backup")
        .arg(t.path().join("repo/manifests")));
}

#[test]
fn trace_repository_ingests_traces() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    ok(tessera(&repo).args(["init", "--trace", "--hash", "sha1"]));
    let trace = t.path().join("v1.trace");
    let mut text = String::from("# fingerprint size\n");
    for i in 0..2000u32 {
        text.push_str(&format!(
            "{:040x} {}\n",
            (i % 1500) as u128 * 0x1234567,
            4096 + i % 100
        ));
    }
    std::fs::write(&trace, &text).unwrap();
    let r = json(&ok(tessera(&repo)
        .arg("backup")
        .arg("--trace-file")
        .arg(&trace)
        .arg("--json")));
    assert_eq!(r["chunks"], 2000);
    assert_eq!(r["new_chunks"], 1500);
    let out = tessera(&repo)
        .args(["restore", "1", "--stdout", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success() && out.stdout.is_empty());
    std::fs::write(&trace, "aabb 100\nnot-hex 5\n").unwrap();
    fails(
        tessera(&repo).arg("backup").arg("--trace-file").arg(&trace),
        "v1.trace:2:",
    );
}

#[test]
fn ls_lists_a_backups_entries_and_restore_includes_some() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let src = t.path().join("src");
    make_tree(&src);
    ok(tessera(&repo).arg("init"));
    ok(tessera(&repo).arg("backup").arg(&src));
    let plain = ok(tessera(&repo).args(["ls", "latest"]));
    assert_eq!(
        plain.lines().collect::<Vec<_>>(),
        ["a.txt", "link", "sub/", "sub/big.bin", "sub/empty/"]
    );
    let long = ok(tessera(&repo).args(["ls", "1", "-l"]));
    let lines: Vec<&str> = long.lines().collect();
    assert!(
        lines[0].starts_with("-rw") && lines[0].contains(" 14 "),
        "{long}"
    );
    assert!(
        lines[1].starts_with("l") && lines[1].ends_with("link -> a.txt"),
        "{long}"
    );
    assert!(
        lines[2].starts_with("d") && lines[3].contains(" 300000 "),
        "{long}"
    );
    let j = json(&ok(tessera(&repo).args(["ls", "latest", "--json"])));
    let entries = j.as_array().unwrap();
    assert_eq!(entries.len(), 5);
    assert_eq!(entries[3]["path"], "sub/big.bin");
    assert_eq!(entries[3]["kind"], "file");
    assert_eq!(entries[3]["size"], 300_000);
    assert_eq!(entries[1]["link"], "a.txt");
    // A partial restore: one file, with the directory above it.
    let part = t.path().join("part");
    ok(tessera(&repo)
        .args(["restore", "1", "--include", "sub/big.bin", "-t"])
        .arg(&part));
    assert_eq!(
        std::fs::read(part.join("sub/big.bin")).unwrap().len(),
        300_000
    );
    assert!(!part.join("a.txt").exists() && !part.join("sub/empty").exists());
    fails(
        tessera(&repo)
            .args([
                "restore",
                "1",
                "--include",
                "nope",
                "--include",
                "a.txt",
                "-t",
            ])
            .arg(t.path().join("part2")),
        "--include matched nothing in backup 1: nope",
    );
    assert!(t.path().join("part2/a.txt").exists());
    // A stream backup is one file named after its source.
    let f = t.path().join("db.dump");
    std::fs::write(&f, b"0123456789").unwrap();
    ok(tessera(&repo).arg("backup").arg(&f));
    let j = json(&ok(tessera(&repo).args(["ls", "latest", "--json"])));
    assert_eq!(j[0]["path"], "db.dump");
    assert_eq!(j[0]["size"], 10);
    fails(tessera(&repo).args(["ls", "42"]), "no snapshot '42'");
    fails(
        tessera(&repo)
            .args(["restore", "latest", "--include", "x", "-t"])
            .arg(t.path().join("part3")),
        "only a directory backup has paths to include",
    );
}

#[test]
fn help_lists_every_command() {
    let out = Command::cargo_bin("tessera")
        .unwrap()
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for c in [
        "init",
        "backup",
        "snapshots",
        "restore",
        "forget",
        "stats",
        "unlock",
        "ls",
        "check",
        "gc",
        "lab",
    ] {
        assert!(help.contains(c), "{c} missing from --help");
    }
}

#[test]
fn json_reports_count_backend_requests_and_bytes() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let src = t.path().join("f.bin");
    std::fs::write(&src, vec![7u8; 100_000]).unwrap();
    ok(tessera(&repo).arg("init"));
    let b = json(&ok(tessera(&repo).args(["backup", "--json"]).arg(&src)));
    assert!(b["backend"]["puts"].as_u64().unwrap() > 0, "{b}");
    assert!(b["backend"]["put_bytes"].as_u64().unwrap() > 0, "{b}");
    let r = json(&ok(tessera(&repo)
        .args(["restore", "1", "--json", "--target"])
        .arg(t.path().join("out"))));
    assert!(r["backend"]["get_bytes"].as_u64().unwrap() > 0, "{r}");
    let g = json(&ok(tessera(&repo).args(["gc", "--json"])));
    assert!(g["backend"]["lists"].as_u64().unwrap() > 0, "{g}");
}
