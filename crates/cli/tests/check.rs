//! `tessera check` on a healthy and a damaged repository, and bad input.

use assert_cmd::Command;
use std::path::Path;

fn tessera(repo: &Path) -> Command {
    let mut c = Command::cargo_bin("tessera").unwrap();
    c.env("TESSERA_REPO", repo).env_remove("RUST_BACKTRACE");
    c
}

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("bad json ({e})"))
}

#[test]
fn check_reports_damage_with_exit_status_and_json() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let src = t.path().join("data.bin");
    let data: Vec<u8> = (0..400_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    tessera(&repo)
        .args(["init", "--container-size", "64KiB"])
        .assert()
        .success();
    tessera(&repo).arg("backup").arg(&src).assert().success();

    let out = tessera(&repo)
        .args(["check", "--read-data", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out.stdout);
    assert_eq!(v["ok"], true);
    assert!(v["data_containers_read"].as_u64().unwrap() >= 1);

    // Damage the first container's data.
    let mut first = std::fs::read_dir(repo.join("containers"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<Vec<_>>();
    first.sort();
    let mut b = std::fs::read(&first[0]).unwrap();
    b[300] ^= 1;
    std::fs::write(&first[0], b).unwrap();

    let out = tessera(&repo)
        .args(["check", "--read-data"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("problem: container 0000000000000001") && text.contains("affects backups 1"),
        "{text}"
    );
    let out = tessera(&repo)
        .args(["check", "--read-data", "--json"])
        .output()
        .unwrap();
    let v = json(&out.stdout);
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"][0]["backups"][0], 1);
}

#[test]
fn repair_leftovers_removes_only_unlisted_objects() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    tessera(&repo).arg("init").assert().success();
    let src = t.path().join("f");
    std::fs::write(&src, b"some bytes").unwrap();
    tessera(&repo).arg("backup").arg(&src).assert().success();
    let junk = repo.join("containers/00000000000000ff");
    std::fs::write(&junk, b"junk").unwrap();
    let out = tessera(&repo).args(["check", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        json(&out.stdout)["leftovers"][0],
        "containers/00000000000000ff"
    );
    assert!(junk.exists(), "a plain check changes nothing");
    let out = tessera(&repo)
        .args(["check", "--repair-leftovers", "--json"])
        .output()
        .unwrap();
    let v = json(&out.stdout);
    assert_eq!(v["removed_leftovers"][0], "containers/00000000000000ff");
    assert!(v["leftovers"].as_array().unwrap().is_empty());
    assert!(!junk.exists());
    tessera(&repo)
        .args(["restore", "latest", "--stdout"])
        .assert()
        .success()
        .stdout(&b"some bytes"[..]);
}

#[test]
fn bad_check_input_is_one_clear_line() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let out = tessera(&repo).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no Tessera repository"));
    tessera(&repo).arg("init").assert().success();
    let out = tessera(&repo)
        .args(["check", "--read-data-subset", "4/3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad subset '4/3'"), "{err}");
}
