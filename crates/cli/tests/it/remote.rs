//! `tessera` on an SFTP server (a local `sshd` the test starts) and on an
//! rclone remote (a local remote of a generated rclone configuration):
//! init, backups, forget, gc, check --read-data and restore through the
//! command line, and the refusals as one-line errors. Without OpenSSH or
//! rclone the tests say so and pass, unless `TESSERA_REQUIRE_SSHD=1`,
//! `TESSERA_REQUIRE_RCLONE=1` or `CI=true` (see `backend::test_servers`).

use std::path::Path;
use tessera_core::backend::test_servers::{RcloneRemote, Sshd};

use crate::common::{fails_all, json, ok, tessera};

/// A small tree: a few files, one large enough for several containers.
fn tree(root: &Path, version: u64) {
    std::fs::create_dir_all(root.join("docs/deep")).unwrap();
    let mut x = version | 1;
    let big: Vec<u8> = (0..600_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("docs/a.txt"), format!("a {version}\n")).unwrap();
    std::fs::write(root.join("docs/deep/b.txt"), "same in every version\n").unwrap();
}

/// Every file under `dir` with its bytes, by path relative to `dir`.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The whole cycle on `location`, with `env` set for every command.
fn cycle(location: &str, env: &[(&str, String)]) {
    let repo = Path::new(location);
    let run = || {
        let mut c = tessera(repo);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    ok(run().args([
        "init",
        "--chunker",
        "fastcdc:1k/4k/16k",
        "--container-size",
        "64KiB",
    ]));
    for v in 1..=3 {
        tree(&src, v);
        ok(run().arg("backup").arg(&src));
    }
    let forgot = ok(run().args(["forget", "--keep-last", "1", "--json"]));
    assert!(!forgot.is_empty());
    let gc = json(&ok(run().args(["gc", "--json"])));
    assert!(gc["reclaimed_containers"].as_u64().unwrap_or(0) > 0, "{gc}");
    ok(run().args(["check", "--read-data"]));
    let target = work.path().join("restored");
    ok(run().args(["restore", "latest", "--target"]).arg(&target));
    // A backup of one directory restores as that directory's contents.
    assert_eq!(files(&target), files(&src));
}

#[test]
fn cli_cycle_on_sftp() {
    let Some(s) = Sshd::start() else { return };
    cycle(&s.location("repo"), &[("TESSERA_SSH_ARGS", s.ssh_args())]);
}

#[test]
fn cli_cycle_on_rclone() {
    let Some(r) = RcloneRemote::new() else { return };
    cycle(
        &r.location("repo"),
        &[("TESSERA_RCLONE_ARGS", r.rclone_args())],
    );
}

#[test]
fn cli_sftp_refusals_are_one_line() {
    let Some(s) = Sshd::start() else { return };
    // A key the server does not know.
    let stranger = format!("-F {}", s.dir.path().join("stranger_config").display());
    let loc = s.location("repo");
    fails_all(
        tessera(Path::new(&loc))
            .env("TESSERA_SSH_ARGS", &stranger)
            .arg("init"),
        &["access denied", "Permission denied"],
    );
    // No repository at the path.
    fails_all(
        tessera(Path::new(&s.location("missing")))
            .env("TESSERA_SSH_ARGS", s.ssh_args())
            .arg("snapshots"),
        &["missing"],
    );
    // A bad location.
    fails_all(
        tessera(Path::new("sftp:host-without-path")).arg("snapshots"),
        &["bad SFTP location"],
    );
    // The server gone.
    s.stop();
    fails_all(
        tessera(Path::new(&loc))
            .env("TESSERA_SSH_ARGS", s.ssh_args())
            .arg("init"),
        &["cannot reach", "Connection refused"],
    );
}

#[test]
fn cli_rclone_unknown_remote_is_one_line() {
    let Some(r) = RcloneRemote::new() else { return };
    fails_all(
        tessera(Path::new("rclone:no-such-remote:repo"))
            .env("TESSERA_RCLONE_ARGS", r.rclone_args())
            .arg("init"),
        &["rclone", "no-such-remote"],
    );
}
