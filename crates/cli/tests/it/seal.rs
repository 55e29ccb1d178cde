//! Encryption, compression and passwords from the command line (issue 12).

use crate::common::{fails, fails_all, json, ok, ok_bytes, tessera};
use std::path::Path;

fn data(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let words = [
        "backup ",
        "chunk ",
        "container ",
        "recipe ",
        "seal ",
        "key\n",
    ];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let text: Vec<u8> = (0..100_000)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            words[(x % 6) as usize].bytes()
        })
        .collect();
    std::fs::write(src.join("a.txt"), &text).unwrap();
    src
}

/// `--encryption` picks the object cipher: each named one round-trips a
/// directory byte for byte and `check --read-data` authenticates it; an
/// unknown name is refused with the choices.
#[test]
fn each_cipher_round_trips() {
    let d = tempfile::tempdir().unwrap();
    let src = data(d.path());
    let text = std::fs::read(src.join("a.txt")).unwrap();
    for cipher in ["xaes-256-gcm", "xchacha20-poly1305"] {
        let repo = d.path().join(cipher);
        let init = json(&ok(tessera(&repo).args([
            "init",
            "--json",
            "--encryption",
            cipher,
        ])));
        assert_eq!(init["encryption"], cipher);
        ok(tessera(&repo).arg("backup").arg(&src));
        let out = d.path().join(format!("{cipher}-out"));
        ok(tessera(&repo)
            .args(["restore", "latest", "--target"])
            .arg(&out));
        let back = std::fs::read(out.join(src.strip_prefix("/").unwrap()).join("a.txt"))
            .or_else(|_| std::fs::read(out.join("a.txt")))
            .unwrap();
        assert_eq!(back, text, "{cipher}");
        ok(tessera(&repo).args(["check", "--read-data"]));
    }
    fails(
        tessera(&d.path().join("x")).args(["init", "--encryption", "rot13"]),
        "expected xaes-256-gcm, xchacha20-poly1305 or none",
    );
}

/// `restore --memory` below one container restores a compressed,
/// encrypted directory byte for byte (a container at a time, each frame
/// opened when needed); a ceiling of 0 is refused.
#[test]
fn restore_under_a_memory_ceiling_below_one_container() {
    let d = tempfile::tempdir().unwrap();
    let src = data(d.path());
    let text = std::fs::read(src.join("a.txt")).unwrap();
    let repo = d.path().join("r");
    ok(tessera(&repo).args(["init", "--container-size", "64KiB"]));
    ok(tessera(&repo).arg("backup").arg(&src));
    for memory in ["1", "48MiB"] {
        let out = d.path().join(format!("out-{memory}"));
        let report = json(&ok(tessera(&repo)
            .args([
                "restore", "latest", "--json", "--memory", memory, "--target",
            ])
            .arg(&out)));
        assert!(
            report["data_containers_read"].as_u64().unwrap() > 4,
            "{report}"
        );
        let back = std::fs::read(out.join(src.strip_prefix("/").unwrap()).join("a.txt"))
            .or_else(|_| std::fs::read(out.join("a.txt")))
            .unwrap();
        assert!(back == text, "--memory {memory}: restored bytes differ");
    }
    fails(
        tessera(&repo).args(["restore", "latest", "--memory", "0", "--target", "x"]),
        "--memory must be positive",
    );
}

/// Every password source opens the repository; a wrong one is one line;
/// no password at all says where to give one.
#[test]
fn password_sources_and_wrong_password() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("r");
    let src = data(d.path());
    let init = json(&ok(tessera(&repo).args(["init", "--json"])));
    assert_eq!(init["encryption"], "xaes-256-gcm");
    assert_eq!(init["compression"], "auto");
    ok(tessera(&repo).arg("backup").arg(&src));
    let pwfile = d.path().join("pw");
    std::fs::write(&pwfile, "test password\n").unwrap();
    ok(tessera(&repo)
        .env_remove("TESSERA_PASSWORD")
        .args(["snapshots", "--password-file"])
        .arg(&pwfile));
    ok(tessera(&repo).env_remove("TESSERA_PASSWORD").args([
        "snapshots",
        "--password-command",
        "echo 'test password'",
    ]));
    fails(
        tessera(&repo)
            .env("TESSERA_PASSWORD", "wrong")
            .arg("snapshots"),
        "wrong password: it opens none of the 1 key slots",
    );
    fails(
        tessera(&repo)
            .env_remove("TESSERA_PASSWORD")
            .arg("snapshots"),
        "no password was given",
    );
    let err = fails(
        tessera(&repo).env_remove("TESSERA_PASSWORD").args([
            "snapshots",
            "--password-command",
            "exit 3",
        ]),
        "password command failed",
    );
    assert!(!err.contains("test password"));
}

/// `--encryption none` says so loudly; `--compression` at init and per
/// backup; restores are byte for byte.
#[test]
fn unencrypted_init_warns_and_compression_is_chosen() {
    let d = tempfile::tempdir().unwrap();
    let src = data(d.path());
    let plain = d.path().join("plain");
    let out = tessera(&plain)
        .args(["init", "--encryption", "none", "--compression", "off"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARNING") && err.contains("NOT encrypted"),
        "{err}"
    );
    ok(tessera(&plain).arg("backup").arg(&src));
    ok(tessera(&plain)
        .args(["backup", "--compression", "max"])
        .arg(&src));
    let stats = json(&ok(tessera(&plain).args(["stats", "--json"])));
    assert!(stats["container_object_bytes"].as_u64().unwrap() > 0);
    let restored = ok_bytes(tessera(&plain).args(["restore", "latest", "--stdout"]));
    assert!(!restored.is_empty());
    fails(
        tessera(&plain)
            .args(["backup", "--compression", "lz4"])
            .arg(&src),
        "unknown compression 'lz4'",
    );
    fails(tessera(&plain).args(["key", "list"]), "not encrypted");
}

/// `key add|list|remove|passwd`: every password opens the same backups.
#[test]
fn key_subcommand() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("r");
    let src = data(d.path());
    ok(tessera(&repo).arg("init"));
    ok(tessera(&repo).arg("backup").arg(&src));
    let second = d.path().join("second");
    std::fs::write(&second, "second password").unwrap();
    let added = json(&ok(tessera(&repo)
        .args(["key", "add", "--json", "--new-password-file"])
        .arg(&second)));
    assert_eq!(added["key_slot"], 2);
    let list = json(&ok(tessera(&repo).args(["key", "list", "--json"])));
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(list[0]["current"], true);
    let text = ok(tessera(&repo).args(["key", "list"]));
    assert!(!text.contains("test password") && !text.contains("wrapped"));
    fails_all(
        tessera(&repo).args(["key", "remove", "1"]),
        &["key slot 1 is the one this password opened"],
    );
    let as_second = |c: &mut assert_cmd::Command| {
        c.env("TESSERA_PASSWORD", "second password");
    };
    let mut c = tessera(&repo);
    as_second(&mut c);
    ok(c.args(["key", "remove", "1"]));
    fails(tessera(&repo).arg("snapshots"), "wrong password");
    let mut c = tessera(&repo);
    as_second(&mut c);
    ok(c.args(["key", "passwd"])
        .env("TESSERA_NEW_PASSWORD", "third"));
    let restored = ok_bytes(
        tessera(&repo)
            .env("TESSERA_PASSWORD", "third")
            .args(["restore", "latest", "--stdout"]),
    );
    assert!(!restored.is_empty());
}

/// `check --read-data` names every tampered container, not just the first.
#[test]
fn check_reports_all_tampered_containers() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("r");
    let src = data(d.path());
    ok(tessera(&repo).args(["init", "--container-size", "64KiB"]));
    ok(tessera(&repo).arg("backup").arg(&src));
    let mut containers: Vec<_> = std::fs::read_dir(repo.join("containers"))
        .unwrap()
        .flat_map(|e| {
            let p = e.unwrap().path();
            if p.is_dir() {
                std::fs::read_dir(p)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect()
            } else {
                vec![p]
            }
        })
        .collect();
    containers.sort();
    assert!(containers.len() >= 3, "{containers:?}");
    for c in &containers[..3] {
        let mut b = std::fs::read(c).unwrap();
        b[200] ^= 1;
        std::fs::write(c, b).unwrap();
    }
    let out = tessera(&repo)
        .args(["check", "--read-data", "--json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let report = json(&String::from_utf8_lossy(&out.stdout));
    let problems = report["problems"].as_array().unwrap();
    assert!(problems.len() >= 3, "{problems:?}");
}
