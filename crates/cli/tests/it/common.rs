//! Helpers shared by the `tessera` binary's integration tests.

use assert_cmd::Command;
use std::path::Path;

/// `tessera` on the repository `repo`, without `RUST_BACKTRACE`.
pub fn tessera(repo: &Path) -> Command {
    Command::from_std(tessera_process(repo))
}

/// [`tessera`] as a plain process command, for tests that spawn `tessera`
/// processes, run them at once and kill them.
pub fn tessera_process(repo: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("tessera"));
    // Encrypted by default: a test password, and the cheapest key
    // derivation (the default costs seconds in a debug build).
    c.env("TESSERA_REPO", repo)
        .env("TESSERA_PASSWORD", "test password")
        .env("TESSERA_KDF", "m=8,t=1,p=1")
        .env_remove("RUST_BACKTRACE");
    // The files cache of directory backups: not in the user's cache dir.
    c.env(
        "TESSERA_CACHE_DIR",
        std::env::temp_dir().join("tessera-cli-tests-cache"),
    );
    c
}

/// xorshift64*: a test's only randomness, so a seed replays a run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The listed backups as (id, name), from `snapshots --json`.
pub fn snapshots(repo: &Path) -> Vec<(u64, String)> {
    let out = tessera_process(repo)
        .args(["snapshots", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "snapshots failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["id"].as_u64().unwrap(),
                b["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Backup `id` restored to stdout; panics with stderr on failure.
pub fn restored(repo: &Path, id: u64) -> Vec<u8> {
    let out = tessera_process(repo)
        .args(["restore", &id.to_string(), "--stdout"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "restore of backup {id} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Run and return stdout; panics with stderr on failure.
pub fn ok_bytes(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// [`ok_bytes`] as UTF-8 text.
pub fn ok(cmd: &mut Command) -> String {
    String::from_utf8(ok_bytes(cmd)).unwrap()
}

/// Run, expect failure with one `error:` line that contains every needle;
/// returns stderr.
pub fn fails_all(cmd: &mut Command, needles: &[&str]) -> String {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    let lines: Vec<_> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "expected '{needle}' in: {err}");
    }
    err
}

/// [`fails_all`] with one needle.
pub fn fails(cmd: &mut Command, needle: &str) -> String {
    fails_all(cmd, &[needle])
}

/// Parse JSON output, showing it when it is not JSON.
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("bad json ({e}): {s}"))
}
