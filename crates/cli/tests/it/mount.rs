//! `tessera mount`: mount, browse by id, host and tag, read files (random
//! access included) and compare them with the source, unmount.

use crate::common::{ok, tessera};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The mount process, unmounted and reaped on drop.
struct Mounted {
    child: Child,
    at: std::path::PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3").arg("-u").arg(&self.at).status();
        let _ = self.child.wait();
    }
}

/// Whether this machine can mount. Without `/dev/fuse` the test is
/// skipped (said on stderr), except in CI (`CI` set, as `.ci/run` runs)
/// or with `TESSERA_REQUIRE_FUSE=1`, where that fails it. With
/// `/dev/fuse`, `fusermount3` must run: a machine that has FUSE (CI's)
/// runs the test or fails loudly (`.ci/run` installs fuse3).
fn fuse_available() -> bool {
    let required = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
        || std::env::var("TESSERA_REQUIRE_FUSE").as_deref() == Ok("1");
    if !Path::new("/dev/fuse").exists() {
        assert!(
            !required,
            "no /dev/fuse, and the mount test must run here (CI or TESSERA_REQUIRE_FUSE=1)"
        );
        return false;
    }
    let runs = Command::new("fusermount3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        runs,
        "/dev/fuse exists but fusermount3 does not run: install fuse3 (.ci/run does) so the mount test runs"
    );
    true
}

#[test]
fn mount_browses_and_reads_backups() {
    if !fuse_available() {
        eprintln!("skipped: no FUSE here (no /dev/fuse)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("sub/big.bin"), &big).unwrap();
    std::fs::write(src.join("small.txt"), b"hello mount\n").unwrap();
    std::os::unix::fs::symlink("small.txt", src.join("link")).unwrap();
    std::fs::hard_link(src.join("small.txt"), src.join("hard.txt")).unwrap();
    ok(tessera(&repo).arg("init"));
    ok(tessera(&repo)
        .arg("backup")
        .arg(&src)
        .args(["--host", "alpha", "--tag", "nightly"]));
    std::fs::write(src.join("small.txt"), b"changed\n").unwrap();
    ok(tessera(&repo)
        .arg("backup")
        .arg(&src)
        .args(["--host", "beta"]));
    ok(tessera(&repo)
        .args(["backup", "--stdin-name", "notes.txt"])
        .write_stdin("a stream"));

    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let child = Command::new(assert_cmd::cargo::cargo_bin("tessera"))
        .env("TESSERA_REPO", &repo)
        // As common::tessera: the password of repositories encrypted by default.
        .env("TESSERA_PASSWORD", "test password")
        .env("TESSERA_KDF", "m=8,t=1,p=1")
        .arg("mount")
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut m = Mounted {
        child,
        at: mnt.clone(),
    };
    // Wait for the mount to be served (not a timing assertion); a mount
    // that cannot be made fails the test with its error, not a skip.
    let start = Instant::now();
    while !mnt.join("ids").exists() {
        if let Some(status) = m.child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = m.child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("tessera mount exited ({status}) before mounting: {err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the mount never appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let names = |p: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&mnt), vec!["hosts", "ids", "latest", "tags"]);
    assert_eq!(names(&mnt.join("ids")), vec!["1", "2", "3"]);
    // The stream backup recorded this machine's host name.
    let hosts = names(&mnt.join("hosts"));
    assert!(
        hosts.len() == 3 && hosts.contains(&"alpha".into()) && hosts.contains(&"beta".into()),
        "{hosts:?}"
    );
    assert_eq!(names(&mnt.join("tags/nightly")), vec!["1"]);
    assert_eq!(
        std::fs::read_link(mnt.join("latest")).unwrap(),
        Path::new("ids/3")
    );

    let one = mnt.join("hosts/alpha/1");
    assert_eq!(names(&one), vec!["hard.txt", "link", "small.txt", "sub"]);
    assert_eq!(
        std::fs::read(one.join("small.txt")).unwrap(),
        b"hello mount\n"
    );
    assert_eq!(
        std::fs::read(one.join("hard.txt")).unwrap(),
        b"hello mount\n"
    );
    assert_eq!(
        std::fs::read_link(one.join("link")).unwrap(),
        Path::new("small.txt")
    );
    assert_eq!(
        std::fs::read(mnt.join("tags/nightly/1/sub/big.bin")).unwrap(),
        big
    );
    assert_eq!(
        std::fs::metadata(one.join("sub/big.bin")).unwrap().len(),
        big.len() as u64
    );
    assert_eq!(
        std::fs::read(mnt.join("ids/2/small.txt")).unwrap(),
        b"changed\n"
    );
    assert_eq!(
        std::fs::read(mnt.join("latest/notes.txt")).unwrap(),
        b"a stream"
    );
    // Random access: a read in the middle of the big file.
    let mut f = std::fs::File::open(mnt.join("ids/2/sub/big.bin")).unwrap();
    f.seek(SeekFrom::Start(2_000_001)).unwrap();
    let mut part = vec![0u8; 70_000];
    f.read_exact(&mut part).unwrap();
    assert_eq!(part, big[2_000_001..2_070_001]);
    // Read-only.
    assert!(std::fs::write(one.join("new"), b"x").is_err());
    drop(f);
    drop(m);
    assert!(!mnt.join("ids").exists(), "unmounted");
}
