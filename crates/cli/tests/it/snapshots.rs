//! Snapshots people can find: host, user, paths, tags and parent recorded;
//! `snapshots`, `restore` and `forget` filtered by `--host`, `--tag`,
//! `--path`; retention policies per group.

use crate::common::{fails, json, ok, tessera};
use serde_json::Value;

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_u64().unwrap())
        .collect()
}

fn id_list(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect()
}

#[test]
fn backups_record_host_user_paths_tags_and_parent_and_are_filtered() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let a = t.path().join("a");
    let b = t.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("f"), b"alpha data\n").unwrap();
    std::fs::write(b.join("g"), b"beta data\n").unwrap();
    ok(tessera(&repo).arg("init"));
    let backup = |dir: &std::path::Path, extra: &[&str]| {
        json(&ok(tessera(&repo)
            .arg("backup")
            .arg(dir)
            .args(extra)
            .arg("--json")))
    };
    let one = backup(&a, &["--tag", "daily,work", "--host", "alpha"]);
    let two = backup(&a, &["--tag", "weekly", "--tag", "work", "--host", "alpha"]);
    let three = backup(&b, &["--host", "beta", "--tag", "daily"]);
    let four = json(&ok(tessera(&repo)
        .args([
            "backup",
            "--stdin-name",
            "db.sql",
            "--host",
            "beta",
            "--json",
        ])
        .write_stdin("dump")));

    let abs_a = std::path::absolute(&a).unwrap().display().to_string();
    let e1 = &one["backup"];
    assert_eq!(e1["host"], "alpha");
    assert!(!e1["user"].as_str().unwrap().is_empty());
    assert_eq!(e1["paths"], serde_json::json!([abs_a]));
    assert_eq!(e1["tags"], serde_json::json!(["daily", "work"]));
    assert!(e1.get("parent").is_none(), "the first backup has no parent");
    let e2 = &two["backup"];
    assert_eq!(e2["tags"], serde_json::json!(["weekly", "work"]));
    assert_eq!(e2["parent"], 1, "the previous backup of host and paths");
    assert!(
        three["backup"].get("parent").is_none(),
        "another host and path"
    );
    assert_eq!(
        four["backup"]["paths"],
        Value::Null,
        "a stream has no paths"
    );

    let list = |args: &[&str]| {
        let mut c = tessera(&repo);
        c.args(["snapshots", "--json"]).args(args);
        ids(&json(&ok(&mut c)))
    };
    assert_eq!(list(&[]), vec![1, 2, 3, 4]);
    assert_eq!(list(&["--host", "alpha"]), vec![1, 2]);
    assert_eq!(
        list(&["--host", "alpha", "--host", "beta"]),
        vec![1, 2, 3, 4]
    );
    assert_eq!(list(&["--tag", "daily"]), vec![1, 3]);
    assert_eq!(list(&["--tag", "daily,work"]), vec![1], "a list needs all");
    assert_eq!(list(&["--tag", "weekly", "--tag", "daily"]), vec![1, 2, 3]);
    assert_eq!(list(&["--path", a.to_str().unwrap()]), vec![1, 2]);
    assert_eq!(list(&["--path", "db.sql"]), vec![4], "a stream by its name");
    assert_eq!(
        list(&["--host", "beta", "--tag", "work"]),
        Vec::<u64>::new()
    );
    let human = ok(tessera(&repo).args(["snapshots", "--host", "alpha"]));
    assert!(human.lines().next().unwrap().contains("HOST"), "{human}");
    assert!(
        human.contains("weekly,work") && !human.contains("beta"),
        "{human}"
    );

    // restore: `latest` is the newest that matches; an id must match.
    let out = t.path().join("out");
    ok(tessera(&repo)
        .args([
            "restore", "latest", "--host", "alpha", "--tag", "daily", "--target",
        ])
        .arg(&out));
    assert_eq!(std::fs::read(out.join("f")).unwrap(), b"alpha data\n");
    let got = ok(tessera(&repo).args(["restore", "latest", "--host", "beta", "--stdout"]));
    assert_eq!(got, "dump");
    fails(
        tessera(&repo).args(["restore", "1", "--host", "beta", "--stdout"]),
        "backup 1 does not match",
    );
    fails(
        tessera(&repo).args(["restore", "latest", "--tag", "nope", "--stdout"]),
        "no backup matches",
    );
}

#[test]
fn forget_policies_apply_per_group_and_join_the_new_rules() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let a = t.path().join("a");
    let b = t.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    ok(tessera(&repo).arg("init"));
    // 1, 2, 5: host alpha, path a; 3, 4: host beta, path b; 6: beta, a.
    for (dir, host, tag) in [
        (&a, "alpha", "x"),
        (&a, "alpha", "keep"),
        (&b, "beta", "x"),
        (&b, "beta", "x"),
        (&a, "alpha", "x"),
        (&a, "beta", "x"),
    ] {
        std::fs::write(
            dir.join("f"),
            format!("{host} {tag} {:?}", std::time::Instant::now()),
        )
        .unwrap();
        ok(tessera(&repo)
            .arg("backup")
            .arg(dir)
            .args(["--host", host, "--tag", tag]));
    }
    let forget = |args: &[&str]| {
        let mut c = tessera(&repo);
        c.args(["forget", "--dry-run", "--json"]).args(args);
        json(&ok(&mut c))
    };
    // Default groups (host, paths): the newest of each group is kept.
    let r = forget(&["--keep-last", "1"]);
    assert_eq!(id_list(&r["kept"]), vec![4, 5, 6]);
    assert_eq!(ids(&r["forgotten"]), vec![1, 2, 3]);
    let groups = r["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3);
    assert_eq!(groups[0]["group"]["host"], "alpha");
    assert_eq!(id_list(&groups[0]["keep"]), vec![5]);
    assert_eq!(id_list(&groups[0]["forget"]), vec![2, 1]);
    // By host only.
    let r = forget(&["--keep-last", "1", "--group-by", "host"]);
    assert_eq!(id_list(&r["kept"]), vec![5, 6]);
    // No grouping, with --keep-tag joining --keep-last.
    let r = forget(&[
        "--keep-last",
        "1",
        "--group-by",
        "none",
        "--keep-tag",
        "keep",
    ]);
    assert_eq!(id_list(&r["kept"]), vec![2, 6]);
    // Only among the backups the filter selects.
    let r = forget(&["--keep-last", "1", "--host", "beta", "--group-by", "host"]);
    assert_eq!(ids(&r["forgotten"]), vec![3, 4]);
    // Everything here was taken within the last hour.
    let r = forget(&["--keep-within", "1h", "--keep-yearly", "1"]);
    assert!(ids(&r["forgotten"]).is_empty());
    let r = forget(&["--keep-yearly", "1"]);
    assert_eq!(id_list(&r["kept"]), vec![4, 5, 6]);

    fails(
        tessera(&repo).args(["forget", "--keep-last", "1", "--group-by", "colour"]),
        "unknown criterion 'colour'",
    );
    fails(
        tessera(&repo).args(["forget", "--keep-within", "soon"]),
        "--keep-within: bad duration 'soon'",
    );
    // For real, by host: beta keeps its newest (6), alpha its newest (5).
    let human = ok(tessera(&repo).args(["forget", "--keep-last", "1", "--group-by", "host"]));
    assert!(human.contains("host alpha: keep 1, forget 2"), "{human}");
    assert!(human.contains("host beta: keep 1, forget 2"), "{human}");
    let left = ids(&json(&ok(tessera(&repo).args(["snapshots", "--json"]))));
    assert_eq!(left, vec![5, 6]);
}

/// Commands that need only the manifest do not read the fingerprint index
/// (issue 36): with every index segment unreadable they still work, and
/// the commands that do need the index fail naming the segment.
#[test]
fn manifest_commands_work_with_unreadable_index_segments() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let dir = t.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), b"some file data\n".repeat(1000)).unwrap();
    ok(tessera(&repo).arg("init"));
    let tree = json(&ok(tessera(&repo).arg("backup").arg(&dir).arg("--json")));
    let tree = tree["backup"]["id"].as_u64().unwrap().to_string();
    let stream = json(&ok(tessera(&repo)
        .args(["backup", "--stdin-name", "db.sql", "--json"])
        .write_stdin("a stream")));
    let stream = stream["backup"]["id"].as_u64().unwrap().to_string();
    let mut spoiled = 0;
    for e in std::fs::read_dir(repo.join("index")).unwrap() {
        std::fs::write(e.unwrap().path(), b"not an index segment").unwrap();
        spoiled += 1;
    }
    assert!(spoiled >= 2);

    let listed = json(&ok(tessera(&repo).args(["snapshots", "--json"])));
    assert_eq!(ids(&listed).len(), 2);
    let s = json(&ok(tessera(&repo).args(["stats", "--json"])));
    assert_eq!(s["backups"], 2);
    assert!(s["data_chunks"].as_u64().unwrap() > 0);
    assert!(s.get("index").is_none(), "not loaded: {s}");
    assert!(ok(tessera(&repo).arg("stats")).contains("not loaded"));
    fails(tessera(&repo).args(["stats", "--index"]), "index/");
    let dry = json(&ok(tessera(&repo).args([
        "forget",
        &tree,
        "--dry-run",
        "--json",
    ])));
    assert_eq!(dry["forgotten"].as_array().unwrap().len(), 1);
    assert!(ok(tessera(&repo).args(["ls", &stream])).contains("db.sql"));
    assert!(!ok(tessera(&repo).args(["key", "list"])).is_empty());
    // Listing a directory backup reads its metadata from data chunks,
    // which the index locates.
    fails(tessera(&repo).args(["ls", &tree]), "index/");
    ok(tessera(&repo).args(["forget", &tree]));
    let listed = json(&ok(tessera(&repo).args(["snapshots", "--json"])));
    assert_eq!(ids(&listed), vec![stream.parse::<u64>().unwrap()]);
}
