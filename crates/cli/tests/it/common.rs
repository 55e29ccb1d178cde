//! Helpers shared by the `tessera` binary's integration tests.

use assert_cmd::Command;
use std::path::Path;

/// `tessera` on the repository `repo`, without `RUST_BACKTRACE`.
pub fn tessera(repo: &Path) -> Command {
    let mut c = Command::cargo_bin("tessera").unwrap();
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
