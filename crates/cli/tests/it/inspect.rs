//! Looking inside: diff, find, dump; and the conventions (completions, man
//! page, --quiet).

use crate::common::{fails, json, ok, ok_bytes, tessera};
use std::path::Path;

fn write(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

#[test]
fn diff_find_dump() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let src = t.path().join("src");
    write(&src, "same.txt", b"unchanged");
    write(&src, "grow.txt", b"short");
    write(&src, "gone.txt", b"to be removed");
    write(&src, "etc/app.conf", b"a = 1\n");
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect();
    write(&src, "data/big.bin", &big);
    std::os::unix::fs::symlink("same.txt", src.join("link")).unwrap();
    ok(tessera(&repo).arg("init"));
    ok(tessera(&repo).arg("backup").arg(&src));
    write(&src, "grow.txt", b"much longer now");
    // Same size, and (most likely) the same second: found by content.
    write(&src, "same.txt", b"UNCHANGED");
    std::fs::remove_file(src.join("gone.txt")).unwrap();
    write(&src, "new/file.conf", b"b = 2\n");
    ok(tessera(&repo).arg("backup").arg(&src));

    let d = json(&ok(tessera(&repo).args(["diff", "1", "2", "--json"])));
    assert_eq!((d["from"].as_u64(), d["to"].as_u64()), (Some(1), Some(2)));
    assert_eq!(d["added"], 2, "{d}"); // new/ and new/file.conf
    assert_eq!(d["removed"], 1, "{d}");
    assert_eq!(d["changed"], 2, "{d}");
    assert_eq!(d["added_bytes"], 6);
    assert_eq!(d["removed_bytes"], 13);
    assert_eq!(d["changed_bytes"], 15 + 9);
    let changes: Vec<(String, String)> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["what"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("removed", "gone.txt"),
        ("changed", "grow.txt"),
        ("added", "new"),
        ("added", "new/file.conf"),
        ("changed", "same.txt"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(changes, want);
    let human = ok(tessera(&repo).args(["diff", "1", "latest"]));
    assert!(
        human.contains("-    gone.txt") && human.contains("+    new/"),
        "{human}"
    );
    assert!(
        human.contains("M    grow.txt") && human.contains("2 changed"),
        "{human}"
    );
    let same = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "same.txt")
        .unwrap();
    assert_eq!(same["fields"][0], "content", "{same}");
    assert!(ok(tessera(&repo).args(["diff", "2", "2", "--json"])).contains("\"changes\": []"));

    // find: in every backup, newest first; by name at any depth.
    let f = json(&ok(tessera(&repo).args(["find", "*.conf", "--json"])));
    let hits: Vec<(u64, String)> = f
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["backup"].as_u64().unwrap(),
                h["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        hits,
        vec![
            (2, "etc/app.conf".to_string()),
            (2, "new/file.conf".to_string()),
            (1, "etc/app.conf".to_string()),
        ]
    );
    let one = json(&ok(tessera(&repo).args([
        "find",
        "GONE.TXT",
        "-i",
        "--snapshot",
        "1",
        "--json",
    ])));
    assert_eq!(one.as_array().unwrap().len(), 1);
    let out = tessera(&repo)
        .args(["find", "nothing-like-this"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "no match: status 1");
    assert!(out.stderr.is_empty());

    // dump: a file's bytes; a directory as tar; the whole backup.
    assert_eq!(
        ok_bytes(tessera(&repo).args(["dump", "latest", "data/big.bin"])),
        big
    );
    assert_eq!(
        ok_bytes(tessera(&repo).args(["dump", "1", "/gone.txt"])),
        b"to be removed"
    );
    let tar_bytes = ok_bytes(tessera(&repo).args(["dump", "latest", "etc"]));
    let mut ar = tar::Archive::new(&tar_bytes[..]);
    let mut names = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().display().to_string();
        if name.ends_with("app.conf") {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            assert_eq!(s, "a = 1\n");
        }
        names.push(name);
    }
    assert!(names.iter().any(|n| n == "etc/app.conf"), "{names:?}");
    let whole = ok_bytes(tessera(&repo).args(["dump", "latest", "/"]));
    let mut ar = tar::Archive::new(&whole[..]);
    let n = ar.entries().unwrap().count();
    assert!(n >= 8, "{n} entries");
    fails(
        tessera(&repo).args(["dump", "latest", "no/such"]),
        "no entry no/such",
    );
    // A stream backup is dumped by its name.
    ok(tessera(&repo)
        .args(["backup", "--stdin-name", "db.sql"])
        .write_stdin("create table t;"));
    assert_eq!(
        ok(tessera(&repo).args(["dump", "latest", "db.sql"])),
        "create table t;"
    );
}

#[test]
fn completions_man_page_and_quiet() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    for shell in ["bash", "zsh", "fish"] {
        let s = ok(tessera(&repo).args(["completion", shell]));
        assert!(
            s.contains("tessera") && s.contains("snapshots"),
            "{shell}: {s}"
        );
        assert!(s.contains("exclude-caches"), "{shell} lacks a backup flag");
    }
    let man = ok(tessera(&repo).arg("man"));
    assert!(
        man.starts_with(".ie") || man.contains(".TH tessera"),
        "{man}"
    );
    assert!(man.contains("backup"));
    // --quiet: no summary on stdout; the backup is still made.
    let src = t.path().join("src");
    write(&src, "f", b"x");
    ok(tessera(&repo).arg("init"));
    let out = ok(tessera(&repo).arg("--quiet").arg("backup").arg(&src));
    assert_eq!(out, "");
    let out = ok(tessera(&repo).arg("backup").arg(&src).arg("-v"));
    assert!(out.contains("parent 1"), "{out}");
    // Progress is drawn only on a terminal: stderr here is a pipe.
    let o = tessera(&repo).arg("backup").arg(&src).output().unwrap();
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
