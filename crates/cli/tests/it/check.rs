//! `tessera check` on a healthy and a damaged repository, and bad input.

use crate::common::tessera;

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

#[test]
fn restore_skip_damaged_restores_the_rest_and_lists_the_damage() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), b"intact").unwrap();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let big: Vec<u8> = (0..400_000)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 56) as u8
        })
        .collect();
    std::fs::write(src.join("b.bin"), &big).unwrap();
    tessera(&repo)
        .args(["init", "--container-size", "64KiB"])
        .assert()
        .success();
    tessera(&repo).arg("backup").arg(&src).assert().success();
    // Damage the last data container (the tail of b.bin): byte 12 of a
    // container's header is its kind, 0 for data.
    let mut ids: Vec<_> = std::fs::read_dir(repo.join("containers"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    ids.sort();
    let victim = ids
        .iter()
        .rev()
        .find(|p| std::fs::read(p).unwrap()[12] == 0)
        .unwrap();
    let mut b = std::fs::read(victim).unwrap();
    b[200] ^= 1;
    std::fs::write(victim, b).unwrap();

    let out = tessera(&repo)
        .args(["restore", "latest", "--target"])
        .arg(t.path().join("o1"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("backup 1") && err.contains("b.bin") && err.contains("--skip-damaged"),
        "{err}"
    );

    let out = tessera(&repo)
        .args(["restore", "latest", "--skip-damaged", "--target"])
        .arg(t.path().join("o2"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("damaged file: b.bin"), "{err}");
    assert_eq!(std::fs::read(t.path().join("o2/a.txt")).unwrap(), b"intact");
    assert_eq!(
        std::fs::read(t.path().join("o2/b.bin")).unwrap().len(),
        big.len()
    );
}
