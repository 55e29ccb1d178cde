//! Tests for tar serialization and extraction: exact round trips, determinism,
//! hostile streams and malformed input.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use filetime::FileTime;
use proptest::prelude::*;
use tar::EntryType;

use super::serialize::{encode_header, Attrs};
use super::walk::{copy_exactly, CopyError};
use super::*;
use crate::error::Error;

// ---------------------------------------------------------------- helpers

fn tar_of(root: &Path) -> (Vec<u8>, TreeStats) {
    let mut out = Vec::new();
    let mut progress = 0u64;
    let stats = write_tree(root, &mut out, &mut |n| progress += n).unwrap();
    assert_eq!(progress, stats.bytes, "progress calls add up to the bytes");
    (out, stats)
}

fn extract_bytes(tar: &[u8], target: &Path) -> crate::Result<ExtractReport> {
    extract(&mut &tar[..], target)
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    File(Vec<u8>),
    Dir,
    Symlink(Vec<u8>),
}

#[derive(Debug, PartialEq, Eq)]
struct Node {
    kind: Kind,
    mode: u32,
    mtime: i64,
    /// For a multiply linked file: the first path (sorted) of its inode.
    same_inode_as: Option<String>,
}

/// Every path below `root` (not following symlinks), sorted.
fn all_paths(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Everything a round trip must preserve, keyed by relative path.
fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    let mut first: HashMap<u64, String> = HashMap::new();
    let mut out = BTreeMap::new();
    for p in all_paths(root) {
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let m = fs::symlink_metadata(&p).unwrap();
        let kind = if m.file_type().is_symlink() {
            Kind::Symlink(fs::read_link(&p).unwrap().as_os_str().as_bytes().to_vec())
        } else if m.is_dir() {
            Kind::Dir
        } else {
            Kind::File(fs::read(&p).unwrap())
        };
        let same_inode_as = (m.is_file() && m.nlink() > 1)
            .then(|| first.entry(m.ino()).or_insert_with(|| rel.clone()).clone());
        out.insert(
            rel,
            Node {
                kind,
                mode: m.mode() & 0o7777,
                mtime: m.mtime(),
                same_inode_as,
            },
        );
    }
    out
}

/// Give every path a distinct fixed mtime with nanoseconds, children before
/// their directory (reverse sorted order) so directory mtimes stick.
fn stamp_mtimes(root: &Path, base: i64) {
    for (i, p) in all_paths(root).iter().rev().enumerate() {
        let nsec = (i as u32).wrapping_mul(123_456_789) % 1_000_000_000 + 1;
        let t = FileTime::from_unix_time(base + 1000 * i as i64, nsec);
        // Never through an open: that would block on a fifo.
        filetime::set_symlink_file_times(p, t, t).unwrap();
    }
}

fn mkfifo(p: &Path, mode: u32) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), mode) }, 0);
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Entry paths of a stream as the `tar` crate reads them: an independent
/// check that the GNU long-name records are well-formed.
fn tar_crate_paths(tar: &[u8]) -> Vec<String> {
    let mut a = tar::Archive::new(tar);
    a.entries()
        .unwrap()
        .map(|e| String::from_utf8_lossy(&e.unwrap().path_bytes()).into_owned())
        .collect()
}

/// A hand-made stream: headers are filled byte by byte so that hostile
/// paths (absolute, `..`) get in, which `tar::Header::set_path` refuses.
#[derive(Default)]
struct RawTar(Vec<u8>);

impl RawTar {
    fn entry(&mut self, kind: u8, path: &str, link: &str, mode: u32, data: &[u8]) -> &mut Self {
        let mut h = tar::Header::new_gnu();
        assert!(path.len() < 100 && link.len() < 100, "raw names are short");
        h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_500_000_000);
        h.set_size(data.len() as u64);
        h.set_entry_type(EntryType::new(kind));
        h.set_cksum();
        self.0.extend_from_slice(h.as_bytes());
        self.0.extend_from_slice(data);
        self.0.resize(self.0.len().next_multiple_of(512), 0);
        self
    }
    fn file(&mut self, path: &str, data: &[u8]) -> &mut Self {
        self.entry(b'0', path, "", 0o644, data)
    }
    fn dir(&mut self, path: &str) -> &mut Self {
        self.entry(b'5', path, "", 0o755, b"")
    }
    fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.entry(b'2', path, target, 0o777, b"")
    }
    fn hardlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.entry(b'1', path, target, 0o644, b"")
    }
    fn finish(&self) -> Vec<u8> {
        let mut v = self.0.clone();
        v.extend_from_slice(&[0; 1024]);
        v
    }
}

/// A tree with every kind of entry the format supports.
fn build_fixture(root: &Path) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    fs::write(root.join("a/b/c/deep.txt"), b"deep\n").unwrap();
    fs::write(root.join("a/empty.txt"), b"").unwrap();
    let binary: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 256) as u8).collect();
    fs::write(root.join("bin.dat"), &binary).unwrap();
    // Paths over 100 and over 255 bytes (each component stays below NAME_MAX).
    let d1 = "x".repeat(80);
    let d2 = format!("{d1}/{}", "z".repeat(120));
    fs::create_dir_all(root.join(&d2)).unwrap();
    fs::write(root.join(format!("{d1}/{}", "y".repeat(50))), b"long 1").unwrap();
    let longest = format!("{d2}/{}", "w".repeat(100));
    assert!(longest.len() > 255);
    fs::write(root.join(&longest), b"long 2").unwrap();
    // Odd permissions.
    fs::write(root.join("odd.sh"), b"#!/bin/sh\n").unwrap();
    chmod(&root.join("odd.sh"), 0o751);
    fs::write(root.join("readonly"), b"ro").unwrap();
    chmod(&root.join("readonly"), 0o444);
    fs::write(root.join("private"), b"p").unwrap();
    chmod(&root.join("private"), 0o600);
    chmod(&root.join("a/b"), 0o750);
    // Symlinks: relative and inside, one climbing with `..`, one with a
    // target over 100 bytes, one dangling.
    symlink("b/c/deep.txt", root.join("a/link")).unwrap();
    symlink("../../bin.dat", root.join("a/b/up")).unwrap();
    symlink(&longest, root.join("longlink")).unwrap();
    symlink("not-there", root.join("dangling")).unwrap();
    // A hard link pair.
    fs::write(root.join("h1"), b"shared inode").unwrap();
    fs::hard_link(root.join("h1"), root.join("a/h2")).unwrap();
    stamp_mtimes(root, 1_600_000_000);
}

fn refused_reason<'a>(report: &'a ExtractReport, path: &str) -> &'a str {
    match report.refused.iter().find(|r| r.path == path) {
        Some(r) => &r.reason,
        None => panic!("{path} was not refused: {:#?}", report.refused),
    }
}

// ---------------------------------------------------------------- round trips

#[test]
fn round_trip_preserves_every_entry() {
    let src = tempfile::tempdir().unwrap();
    build_fixture(src.path());
    let (tar1, stats) = tar_of(src.path());
    assert_eq!(
        (stats.files, stats.dirs, stats.symlinks, stats.hardlinks),
        (9, 6, 4, 1)
    );
    assert!(stats.skipped.is_empty(), "{:?}", stats.skipped);

    let dst = tempfile::tempdir().unwrap();
    let target = dst.path().join("restored");
    let report = extract_bytes(&tar1, &target).unwrap();
    assert!(report.refused.is_empty(), "{:#?}", report.refused);
    assert_eq!(
        (
            report.files,
            report.dirs,
            report.symlinks,
            report.hardlinks,
            report.bytes
        ),
        (
            stats.files,
            stats.dirs,
            stats.symlinks,
            stats.hardlinks,
            stats.bytes
        )
    );
    assert_eq!(snapshot(src.path()), snapshot(&target));
    let ino = |p: &str| fs::metadata(target.join(p)).unwrap().ino();
    assert_eq!(ino("h1"), ino("a/h2"), "hard links share an inode");

    // Writing the restored tree gives the very same bytes.
    let (tar2, _) = tar_of(&target);
    assert!(tar1 == tar2, "re-serialized tree differs");
}

#[test]
fn list_gives_every_entry_in_stream_order() {
    let src = tempfile::tempdir().unwrap();
    build_fixture(src.path());
    let (tar, stats) = tar_of(src.path());
    let mut listed = Vec::new();
    super::list(&mut &tar[..], &mut |e| {
        listed.push(e);
        Ok(())
    })
    .unwrap();
    // The same paths, in the same order, as the tar crate reads them.
    let paths: Vec<String> = listed.iter().map(|e| e.path.clone()).collect();
    assert_eq!(paths, tar_crate_paths(&tar));
    let count = |k: &str| listed.iter().filter(|e| e.kind == k).count() as u64;
    assert_eq!(
        (
            count("file"),
            count("dir"),
            count("symlink"),
            count("hardlink")
        ),
        (stats.files, stats.dirs, stats.symlinks, stats.hardlinks)
    );
    assert_eq!(listed.iter().map(|e| e.size).sum::<u64>(), stats.bytes);
    // The first path of the inode in stream order is the file.
    let h1 = listed.iter().find(|e| e.path == "h1").unwrap();
    assert_eq!((h1.kind, h1.link.as_deref()), ("hardlink", Some("a/h2")));
    assert!(listed
        .iter()
        .all(|e| (e.kind == "symlink" || e.kind == "hardlink") == e.link.is_some()));
    // A truncated stream is an error, as for extraction.
    let err = super::list(&mut &tar[..tar.len() / 2], &mut |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    // The visitor can stop the listing.
    let mut n = 0;
    let stop = super::list(&mut &tar[..], &mut |_| {
        n += 1;
        Err(crate::Error::invalid("enough"))
    });
    assert!(stop.is_err() && n == 1);
}

#[test]
fn extract_selected_restores_only_the_included_paths() {
    let src = tempfile::tempdir().unwrap();
    build_fixture(src.path());
    let (tar, _) = tar_of(src.path());
    let dst = tempfile::tempdir().unwrap();
    let run = |name: &str, include: &[&str]| {
        let target = dst.path().join(name);
        let include: Vec<String> = include.iter().map(|s| s.to_string()).collect();
        let report = super::extract_selected(&mut &tar[..], &target, &include).unwrap();
        let paths: Vec<String> = all_paths(&target)
            .iter()
            .map(|p| {
                p.strip_prefix(&target)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        (report, paths, target)
    };
    // A directory brings everything below it, and the directories above.
    let (r, paths, target) = run("dir", &["a/b"]);
    assert_eq!(
        paths,
        ["a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/b/up"],
        "{r:?}"
    );
    assert!(r.refused.is_empty() && r.unmatched.is_empty(), "{r:?}");
    assert_eq!(fs::read(target.join("a/b/c/deep.txt")).unwrap(), b"deep\n");
    // Selected entries keep their modes: a/b is 0o750.
    let mode = fs::metadata(target.join("a/b"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    // A file deep down, `./` and a trailing slash are accepted forms.
    let (r, paths, _) = run("file", &["./a/b/c/deep.txt", "empty/"]);
    assert_eq!(
        paths,
        ["a", "a/b", "a/b/c", "a/b/c/deep.txt", "empty"],
        "{r:?}"
    );
    assert_eq!((r.files, r.dirs), (1, 4));
    // What matched nothing is reported; the rest is still restored.
    let (r, paths, _) = run("miss", &["nope/x", "bin.dat"]);
    assert_eq!(paths, ["bin.dat"]);
    assert_eq!(r.unmatched, ["nope/x"]);
    // A hard link whose data lies with a path left out is refused, saying so.
    let (r, paths, _) = run("link", &["h1"]);
    assert!(paths.is_empty(), "{paths:?}");
    assert!(
        refused_reason(&r, "h1").contains("include a/h2 too"),
        "{r:?}"
    );
    let (r, paths, _) = run("both", &["h1", "a/h2"]);
    assert_eq!(paths, ["a", "a/h2", "h1"], "{r:?}");
    // Paths that could never be restored are refused up front.
    for bad in ["/etc", "../x", "a/../../x", "", "."] {
        let err = super::extract_selected(&mut &tar[..], dst.path(), &[bad.to_string()]);
        assert!(err.is_err(), "{bad}");
    }
}

#[test]
fn write_tree_is_deterministic() {
    let src = tempfile::tempdir().unwrap();
    build_fixture(src.path());
    let (a, _) = tar_of(src.path());
    let (b, _) = tar_of(src.path());
    assert!(a == b);
    assert_eq!(a.len() % 512, 0);
    assert!(a.ends_with(&[0; 1024]));
}

#[test]
fn stream_is_sorted_depth_first_and_readable_by_tar_crate() {
    let src = tempfile::tempdir().unwrap();
    let r = src.path();
    fs::create_dir_all(r.join("a")).unwrap();
    fs::create_dir_all(r.join("a.b")).unwrap();
    fs::write(r.join("a/x"), b"").unwrap();
    fs::write(r.join("a.b/y"), b"").unwrap();
    fs::write(r.join("a-b"), b"").unwrap();
    fs::write(r.join("b"), b"").unwrap();
    let (tar, _) = tar_of(r);
    let paths = tar_crate_paths(&tar);
    assert_eq!(paths, ["a-b", "a.b/", "a.b/y", "a/", "a/x", "b"]);

    // The fixture, with long names and long link targets, reads back too.
    let src = tempfile::tempdir().unwrap();
    build_fixture(src.path());
    let (tar, _) = tar_of(src.path());
    let paths = tar_crate_paths(&tar);
    assert!(paths.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()));
    assert!(paths.iter().any(|p| p.len() > 255));
    assert!(!paths.iter().any(|p| p == "./" || p.is_empty()));
    let mut a = tar::Archive::new(&tar[..]);
    let long_link = a
        .entries()
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.path_bytes().as_ref() == b"longlink")
        .unwrap()
        .link_name_bytes()
        .unwrap()
        .into_owned();
    assert!(long_link.len() > 255 && long_link.ends_with(b"wwww"));
}

/// Fifos are stored since issue 13 (restores must bring them back); sockets
/// still are not, as in tar: they only exist while a process listens.
#[test]
fn fifos_are_stored_and_sockets_skipped_with_a_reason() {
    let src = tempfile::tempdir().unwrap();
    let r = src.path();
    fs::write(r.join("regular"), b"x").unwrap();
    mkfifo(&r.join("fifo"), 0o644);
    let _listener = std::os::unix::net::UnixListener::bind(r.join("socket")).unwrap();
    let (tar, stats) = tar_of(r);
    assert_eq!((stats.files, stats.specials), (1, 1));
    assert_eq!(stats.skipped, ["socket: socket (not stored)"]);
    assert_eq!(tar_crate_paths(&tar), ["fifo", "regular"]);
    let mut kinds = Vec::new();
    super::list(&mut &tar[..], &mut |e| {
        kinds.push(e.kind);
        Ok(())
    })
    .unwrap();
    assert_eq!(kinds, ["fifo", "file"]);
}

#[test]
fn unreadable_file_or_directory_is_an_error_naming_it() {
    if is_root() {
        eprintln!("skipped: root can read a mode 000 file");
        return;
    }
    let src = tempfile::tempdir().unwrap();
    let file = src.path().join("secret");
    fs::write(&file, b"x").unwrap();
    chmod(&file, 0o000);
    let err = write_tree(src.path(), &mut io::sink(), &mut |_| {}).unwrap_err();
    chmod(&file, 0o600);
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("cannot read {}: ", file.display())),
        "{msg}"
    );
    assert!(!msg.contains('\n'));

    fs::remove_file(&file).unwrap();
    let dir = src.path().join("closed");
    fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o000);
    let err = write_tree(src.path(), &mut io::sink(), &mut |_| {}).unwrap_err();
    chmod(&dir, 0o700);
    assert!(
        err.to_string()
            .starts_with(&format!("cannot read {}: ", dir.display())),
        "{err}"
    );
}

#[test]
fn root_must_be_a_directory() {
    let src = tempfile::tempdir().unwrap();
    let f = src.path().join("file");
    fs::write(&f, b"x").unwrap();
    let err = write_tree(&f, &mut io::sink(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    let err = write_tree(&src.path().join("nope"), &mut io::sink(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn changing_file_keeps_the_recorded_size() {
    let mut buf = vec![0; 7];
    let mut calls = 0;
    let mut out = Vec::new();
    // Shrunk: 5 bytes left of a recorded 12 are zero-filled.
    let r = copy_exactly(&mut &b"hello"[..], &mut out, 12, &mut buf, &mut |n| {
        calls += n
    });
    assert!(r.is_ok());
    assert_eq!(out, b"hello\0\0\0\0\0\0\0");
    assert_eq!(calls, 12);
    // Grown: only the recorded 3 bytes are copied.
    out.clear();
    let r = copy_exactly(&mut &b"hello"[..], &mut out, 3, &mut buf, &mut |_| {});
    assert!(r.is_ok());
    assert_eq!(out, b"hel");
    // A read error is reported as such.
    struct Failing;
    impl Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other("disk on fire"))
        }
    }
    let r = copy_exactly(&mut Failing, &mut out, 3, &mut buf, &mut |_| {});
    assert!(matches!(r, Err(CopyError::Read(_))));
}

#[test]
fn sizes_over_8_gib_use_base_256() {
    let size = 9 << 30;
    let mut out = Vec::new();
    let attrs = Attrs {
        mode: 0o644,
        uid: 1 << 40,
        gid: 7,
        mtime: 1 << 34,
    };
    encode_header(&mut out, b'0', b"big", b"", attrs, size);
    let h = tar::Header::from_byte_slice(&out[..512]);
    assert_eq!(h.entry_size().unwrap(), size);
    assert_eq!(h.uid().unwrap(), 1 << 40);
    assert_eq!(h.mtime().unwrap(), 1 << 34);
    assert_eq!(h.path_bytes().as_ref(), b"big");
}

#[test]
#[ignore = "reads a 9 GiB sparse file; run by hand"]
fn nine_gib_file_is_streamed() {
    let src = tempfile::tempdir().unwrap();
    let f = fs::File::create(src.path().join("big")).unwrap();
    f.set_len(9 << 30).unwrap();
    struct Probe {
        head: Vec<u8>,
        total: u64,
    }
    impl io::Write for Probe {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let keep = 512usize.saturating_sub(self.head.len()).min(b.len());
            self.head.extend_from_slice(&b[..keep]);
            self.total += b.len() as u64;
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut probe = Probe {
        head: Vec::new(),
        total: 0,
    };
    let stats = write_tree(src.path(), &mut probe, &mut |_| {}).unwrap();
    assert_eq!(stats.bytes, 9 << 30);
    assert_eq!(probe.total, 512 + (9 << 30) + 1024);
    let h = tar::Header::from_byte_slice(&probe.head);
    assert_eq!(h.entry_size().unwrap(), 9 << 30);
}

#[test]
fn read_only_directory_is_filled_then_locked() {
    let tar = RawTar::default()
        .entry(b'5', "ro/", "", 0o555, b"")
        .file("ro/inside", b"data")
        .finish();
    let dst = tempfile::tempdir().unwrap();
    let report = extract_bytes(&tar, dst.path()).unwrap();
    assert!(report.refused.is_empty(), "{:#?}", report.refused);
    let ro = dst.path().join("ro");
    assert_eq!(fs::metadata(&ro).unwrap().mode() & 0o7777, 0o555);
    assert_eq!(fs::metadata(&ro).unwrap().mtime(), 1_500_000_000);
    assert_eq!(fs::read(ro.join("inside")).unwrap(), b"data");
    chmod(&ro, 0o755);
}

/// Setuid and setgid bits would belong to whoever restores: they are kept
/// only with the stored owner, as root. The sticky bit is harmless and kept
/// (it was cleared before issue 13 asked for exact permissions).
#[test]
fn setuid_and_setgid_bits_are_kept_only_by_root() {
    let tar = RawTar::default()
        .entry(b'0', "suid", "", 0o4755, b"x")
        .entry(b'0', "sgid", "", 0o2750, b"x")
        .entry(b'5', "sticky/", "", 0o1777, b"")
        .finish();
    let runs: &[bool] = if is_root() { &[false, true] } else { &[false] };
    for &as_root in runs {
        let dst = tempfile::tempdir().unwrap();
        let report =
            super::extract::extract_as(&mut &tar[..], dst.path(), &[], as_root, 1).unwrap();
        assert!(report.refused.is_empty(), "{:#?}", report.refused);
        let mode = |p: &str| fs::metadata(dst.path().join(p)).unwrap().mode() & 0o7777;
        if as_root {
            assert_eq!((mode("suid"), mode("sgid")), (0o4755, 0o2750));
        } else {
            assert_eq!((mode("suid"), mode("sgid")), (0o755, 0o750));
        }
        assert_eq!(mode("sticky"), 0o1777);
    }
}

#[test]
fn symlink_loops_inside_the_target_are_restored() {
    let tar = RawTar::default()
        .symlink("loop1", "loop2")
        .symlink("loop2", "loop1")
        .symlink("self", "self")
        .finish();
    let dst = tempfile::tempdir().unwrap();
    let report = extract_bytes(&tar, dst.path()).unwrap();
    assert!(report.refused.is_empty(), "{:#?}", report.refused);
    assert_eq!(report.symlinks, 3);
}

// ---------------------------------------------------------------- hostile input

/// Every unsafe entry is refused with a reason, the safe ones are restored,
/// and nothing appears outside the target. Absolute names point into the
/// test's own directory rather than /etc, so that even a broken build run
/// as root cannot touch the system.
///
/// Before issue 13 symlinks that were absolute or left the target were
/// refused; now they are restored as stored (`link`, `up`, `d/e/l2`, `a2`,
/// `same`) and it is the entries that would go through them that are
/// refused, by the no-follow walk.
#[test]
fn hostile_entries_are_refused_and_nothing_escapes() {
    let runs: &[bool] = if is_root() { &[false, true] } else { &[false] };
    for &as_root in runs {
        hostile_run(as_root);
    }
}

fn hostile_run(as_root: bool) {
    let outer = tempfile::tempdir().unwrap();
    let o = outer.path().to_str().unwrap().to_string();
    let secret = outer.path().join("secret.txt");
    fs::write(&secret, b"secret").unwrap();
    let outside_dir = outer.path().join("outside");
    fs::create_dir(&outside_dir).unwrap();
    let target = outer.path().join("target");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("exists.txt"), b"original").unwrap();
    symlink(&o, target.join("pre_link")).unwrap();

    let abs = format!("{o}/abs_evil");
    let abs_link = format!("{o}/secret.txt");
    let abs_dir = format!("{o}/outside");
    let tar = RawTar::default()
        .file(&abs, b"evil")
        .file("../evil", b"evil")
        .file("a/../../evil", b"evil")
        .file("x/..", b"evil")
        .file("", b"evil")
        // An entry below a symlink pointing outside, absolute or with `..`.
        .symlink("link", &abs_dir)
        .file("link/passwd", b"evil")
        .dir("link/sub/")
        .file("link/sub/deeper", b"evil")
        .symlink("up", "..")
        .file("up/x", b"evil")
        .file("up/outside/x", b"evil")
        .hardlink("h_abs", &abs_link)
        .hardlink("h_up", "../secret.txt")
        .hardlink("h_missing", "nofile")
        .hardlink("h_link", "link")
        .dir("q/")
        .hardlink("h_dir", "q")
        // d/l1 -> .. stays inside, d/e/l2 -> ../l1/.. climbs out through it.
        .dir("d/")
        .dir("d/e/")
        .symlink("d/l1", "..")
        .symlink("d/e/l2", "../l1/..")
        .file("d/e/l2/escape", b"evil")
        .symlink("a2", "p/q/../../x")
        .symlink("p", ".")
        // A symlink, then entries of the same name: none goes through it.
        .symlink("same", &abs_link)
        .file("same", b"evil")
        .dir("same/")
        .entry(b'6', "same", "", 0o644, b"")
        .symlink("same", "elsewhere")
        .symlink("s", "q")
        .file("s/through", b"evil")
        // A symlink already in the target.
        .file("pre_link/x", b"evil")
        .file("pre_link/outside/x", b"evil")
        .file("pre_link", b"evil")
        .file("exists.txt", b"evil")
        .file("ok.txt", b"fine")
        .hardlink("ok2", "ok.txt")
        .hardlink("same", "ok.txt")
        .finish();
    let report = super::extract::extract_as(&mut &tar[..], &target, &[], as_root, 1).unwrap();

    let refused: Vec<(&str, &str)> = report
        .refused
        .iter()
        .map(|r| (r.path.as_str(), r.reason.as_str()))
        .collect();
    let not_extracted = |t: &str| format!("hard link target {t} is not a file extracted earlier");
    assert_eq!(
        refused,
        [
            (abs.as_str(), "absolute path"),
            ("../evil", "path contains `..`"),
            ("a/../../evil", "path contains `..`"),
            ("x/..", "path contains `..`"),
            ("", "empty path"),
            ("link/passwd", "parent link is a symlink"),
            ("link/sub/", "parent link is a symlink"),
            ("link/sub/deeper", "parent link/sub was refused"),
            ("up/x", "parent up is a symlink"),
            ("up/outside/x", "parent up is a symlink"),
            ("h_abs", "hard link target: absolute path"),
            ("h_up", "hard link target: path contains `..`"),
            ("h_missing", &not_extracted("nofile")),
            ("h_link", &not_extracted("link")),
            ("h_dir", &not_extracted("q")),
            ("d/e/l2/escape", "parent d/e/l2 is a symlink"),
            ("same", "already exists"),
            ("same/", "already exists"),
            ("same", "already exists"),
            ("same", "already exists"),
            ("s/through", "parent s is a symlink"),
            ("pre_link/x", "parent pre_link is a symlink"),
            ("pre_link/outside/x", "parent pre_link is a symlink"),
            ("pre_link", "already exists"),
            ("exists.txt", "already exists"),
            ("same", "already exists"),
        ]
    );

    // The safe entries are there, symlinks exactly as stored.
    assert_eq!(fs::read(target.join("ok.txt")).unwrap(), b"fine");
    let ino = |p: &str| fs::metadata(target.join(p)).unwrap().ino();
    assert_eq!(ino("ok.txt"), ino("ok2"));
    let link = |p: &str| fs::read_link(target.join(p)).unwrap();
    assert_eq!(link("link"), Path::new(&abs_dir));
    assert_eq!(link("up"), Path::new(".."));
    assert_eq!(link("d/l1"), Path::new(".."));
    assert_eq!(link("d/e/l2"), Path::new("../l1/.."));
    assert_eq!(link("a2"), Path::new("p/q/../../x"));
    assert_eq!(link("p"), Path::new("."));
    assert_eq!(link("same"), Path::new(&abs_link));
    assert_eq!(link("s"), Path::new("q"));
    assert_eq!(link("pre_link"), Path::new(&o));
    assert_eq!(fs::read(target.join("exists.txt")).unwrap(), b"original");
    assert_eq!(
        (report.files, report.hardlinks, report.symlinks, report.dirs),
        (1, 1, 8, 3)
    );

    // Outside the target: exactly what the test put there, untouched.
    let outside: Vec<_> = all_paths(outer.path())
        .into_iter()
        .filter(|p| *p == target || !p.starts_with(&target))
        .collect();
    assert_eq!(
        outside,
        [outside_dir.clone(), secret.clone(), target.clone()]
    );
    assert_eq!(fs::read(&secret).unwrap(), b"secret");
    assert_eq!(fs::metadata(&secret).unwrap().nlink(), 1);
    assert_eq!(fs::metadata(&secret).unwrap().mode() & 0o7777, 0o644);
    // And inside, nothing from a refused entry.
    for p in all_paths(&target) {
        let m = fs::symlink_metadata(&p).unwrap();
        if m.is_file() {
            assert_ne!(fs::read(&p).unwrap(), b"evil", "{}", p.display());
        }
    }
}

/// The two attack shapes of issue 13 on their own: a file below a symlink
/// that points outside, and a symlink then a file of the same name (which
/// would overwrite what the symlink points to if the file were opened
/// through it).
#[test]
fn symlink_attacks_write_nothing_outside() {
    let outer = tempfile::tempdir().unwrap();
    let victim_dir = outer.path().join("victim");
    fs::create_dir(&victim_dir).unwrap();
    let victim = victim_dir.join("file");
    fs::write(&victim, b"untouched").unwrap();
    let v = victim_dir.to_str().unwrap();
    let tar = RawTar::default()
        .symlink("below", v)
        .file("below/file", b"evil")
        .file("below/new", b"evil")
        .symlink("same", &format!("{v}/file"))
        .file("same", b"evil")
        .symlink("rel", "../victim")
        .file("rel/new2", b"evil")
        .finish();
    let target = outer.path().join("t");
    let report = extract_bytes(&tar, &target).unwrap();
    let refused: Vec<_> = report.refused.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(refused, ["below/file", "below/new", "same", "rel/new2"]);
    assert_eq!(report.symlinks, 3);
    assert_eq!(fs::read(&victim).unwrap(), b"untouched");
    let names: Vec<_> = fs::read_dir(&victim_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["file"]);
}

#[test]
fn existing_target_file_is_an_error() {
    let outer = tempfile::tempdir().unwrap();
    let f = outer.path().join("file");
    fs::write(&f, b"x").unwrap();
    let tar = RawTar::default().file("a", b"x").finish();
    let err = extract_bytes(&tar, &f).unwrap_err();
    assert!(err.to_string().contains(&*f.to_string_lossy()), "{err}");
}

#[test]
fn truncated_streams_are_errors() {
    let src = tempfile::tempdir().unwrap();
    build_fixture(src.path());
    let (tar, _) = tar_of(src.path());
    let dst = tempfile::tempdir().unwrap();
    // Up to the first end-of-archive block, every cut must be noticed.
    let last = tar.len() - 1024;
    for (i, cut) in (0..=last).step_by(509).chain([last]).enumerate() {
        let err = extract_bytes(&tar[..cut], &dst.path().join(i.to_string()))
            .expect_err(&format!("cut at {cut}"));
        assert!(matches!(err, Error::Corrupt { .. }), "cut at {cut}: {err}");
        assert!(err.to_string().contains("truncated"), "cut at {cut}: {err}");
    }
    // A cut inside a file's data names the file.
    let tar = RawTar::default().file("some/file", &[7; 3000]).finish();
    let err = extract_bytes(&tar[..1500], &dst.path().join("data")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt tar stream: truncated in the data of some/file"
    );
}

#[test]
fn garbage_is_an_error() {
    let dst = tempfile::tempdir().unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let err = extract_bytes(&garbage, dst.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt tar stream: bad header at byte 0: checksum mismatch (not a tar header)"
    );
    let err = extract_bytes(&garbage[..100], dst.path()).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    let err = extract_bytes(b"", dst.path()).unwrap_err();
    assert!(err.to_string().contains("end-of-archive"), "{err}");

    // One flipped bit in a valid header.
    let mut tar = RawTar::default().file("f", b"x").finish();
    tar[0] ^= 1;
    let err = extract_bytes(&tar, dst.path()).unwrap_err();
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
}

#[test]
fn huge_declared_sizes_do_not_allocate() {
    let dst = tempfile::tempdir().unwrap();
    // A file claiming 1 TiB, with 3 bytes behind it: streamed, then truncated.
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..4].copy_from_slice(b"huge");
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(1 << 40);
    h.set_entry_type(EntryType::Regular);
    h.set_cksum();
    let mut tar = h.as_bytes().to_vec();
    tar.extend_from_slice(b"abc");
    let err = extract_bytes(&tar, dst.path()).unwrap_err();
    assert!(
        err.to_string().contains("truncated in the data of huge"),
        "{err}"
    );

    // A long name claiming 1 TiB is refused before anything is read.
    h.as_old_mut().name = [0; 100];
    h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    h.set_entry_type(EntryType::GNULongName);
    h.set_cksum();
    let err = extract_bytes(h.as_bytes(), dst.path()).unwrap_err();
    assert!(err.to_string().contains("limit"), "{err}");
}

#[test]
fn pax_and_gnu_long_names_are_read() {
    // A PAX stream (as `tar --format=posix` writes) with a long path.
    fn record(key: &str, value: &str) -> String {
        let body = format!(" {key}={value}\n");
        // The length counts its own digits.
        let mut len = body.len() + 1;
        while format!("{len}{body}").len() != len {
            len += 1;
        }
        format!("{len}{body}")
    }
    let long = format!("{}/{}", "p".repeat(150), "q".repeat(150));
    let pax = record("path", &long) + &record("mtime", "1234567891.5");
    let mut raw = RawTar::default();
    raw.entry(b'x', "PaxHeaders/short", "", 0o644, pax.as_bytes())
        .entry(b'0', "short", "", 0o640, b"hi");
    // Plus a GNU long name with a long link target to it.
    let mut tar = raw.0.clone();
    let attrs = Attrs {
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime: 1,
    };
    let long_link = format!("{}/{}", "r".repeat(150), "s".repeat(150));
    encode_header(
        &mut tar,
        b'1',
        long_link.as_bytes(),
        long.as_bytes(),
        attrs,
        0,
    );
    tar.extend_from_slice(&[0; 1024]);
    let dst = tempfile::tempdir().unwrap();
    let report = extract_bytes(&tar, dst.path()).unwrap();
    assert!(report.refused.is_empty(), "{:#?}", report.refused);
    let m = fs::metadata(dst.path().join(&long)).unwrap();
    assert_eq!(
        (m.len(), m.mode() & 0o777, m.mtime()),
        (2, 0o640, 1_234_567_891)
    );
    assert_eq!(
        fs::metadata(dst.path().join(&long_link)).unwrap().ino(),
        m.ino()
    );
    assert!(!dst.path().join("short").exists());
}

// ---------------------------------------------------------------- properties

#[derive(Debug, Clone)]
enum Spec {
    File {
        content: Vec<u8>,
        mode: u32,
    },
    Dir {
        mode: u32,
    },
    /// A relative target without `..`: such links always stay inside.
    Symlink {
        target: String,
    },
    HardLink(prop::sample::Index),
}

fn name() -> impl Strategy<Value = String> {
    "[ab][ab.-]{0,2}"
}

fn spec() -> impl Strategy<Value = (Vec<String>, Spec)> {
    let kind = prop_oneof![
        3 => (
            prop::collection::vec(any::<u8>(), 0..4096),
            prop::sample::select(vec![0o644u32, 0o600, 0o755, 0o640, 0o444]),
        )
            .prop_map(|(content, mode)| Spec::File { content, mode }),
        2 => prop::sample::select(vec![0o755u32, 0o700, 0o750])
            .prop_map(|mode| Spec::Dir { mode }),
        1 => prop::collection::vec(name(), 1..3)
            .prop_map(|c| Spec::Symlink { target: c.join("/") }),
        1 => any::<prop::sample::Index>().prop_map(Spec::HardLink),
    ];
    (prop::collection::vec(name(), 1..4), kind)
}

/// Build what can be built of `specs` (entries colliding with earlier ones
/// are dropped) and stamp mtimes.
fn build_random(root: &Path, specs: &[(Vec<String>, Spec)], base: i64) {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut dirs = Vec::new();
    'next: for (comps, spec) in specs {
        let mut p = root.to_path_buf();
        for c in &comps[..comps.len() - 1] {
            p.push(c);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => continue 'next,
                Err(_) => fs::create_dir(&p).unwrap(),
            }
        }
        p.push(comps.last().unwrap());
        if fs::symlink_metadata(&p).is_ok() {
            continue;
        }
        match spec {
            Spec::File { content, mode } => {
                fs::write(&p, content).unwrap();
                chmod(&p, *mode);
                files.push(p);
            }
            Spec::Dir { mode } => {
                fs::create_dir(&p).unwrap();
                dirs.push((p, *mode));
            }
            Spec::Symlink { target } => symlink(target, &p).unwrap(),
            Spec::HardLink(i) if !files.is_empty() => {
                fs::hard_link(i.get(&files), &p).unwrap();
            }
            Spec::HardLink(_) => {}
        }
    }
    for (d, mode) in dirs {
        chmod(&d, mode);
    }
    stamp_mtimes(root, base);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_trees_round_trip_exactly(
        specs in prop::collection::vec(spec(), 0..14),
        base in 0i64..2_000_000_000,
    ) {
        let src = tempfile::tempdir().unwrap();
        build_random(src.path(), &specs, base);
        let (tar1, stats) = tar_of(src.path());
        let dst = tempfile::tempdir().unwrap();
        let report = extract_bytes(&tar1, dst.path()).unwrap();
        prop_assert!(report.refused.is_empty(), "{:#?}", report.refused);
        prop_assert_eq!(report.files, stats.files);
        prop_assert_eq!(report.hardlinks, stats.hardlinks);
        prop_assert_eq!(snapshot(src.path()), snapshot(dst.path()));
        let (tar2, _) = tar_of(dst.path());
        prop_assert!(tar1 == tar2, "re-serialized tree differs");
    }

    #[test]
    fn damaged_streams_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir(src.path().join("d")).unwrap();
        fs::write(src.path().join("d/f"), b"contents").unwrap();
        fs::write(src.path().join("x".repeat(150)), b"long").unwrap();
        symlink("d/f", src.path().join("s")).unwrap();
        let (mut tar, _) = tar_of(src.path());
        for (i, b) in edits {
            let i = i.index(tar.len());
            tar[i] = b;
        }
        let len = cut.index(tar.len() + 1);
        let dst = tempfile::tempdir().unwrap();
        // Ok or Err, but no panic, and nothing outside the target.
        let _ = extract_bytes(&tar[..len], &dst.path().join("t"));
        let names: BTreeSet<_> = fs::read_dir(dst.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        prop_assert!(names.len() <= 1);
    }
}

// ---------------------------------------------------------------- fidelity

/// What a restore must reproduce of one path, from `lstat` and its content.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    /// `S_IFMT` bits.
    format: u32,
    mode: u32,
    /// Regular files and symlinks only (a directory's size is the file
    /// system's business).
    size: Option<u64>,
    mtime: (i64, i64),
    /// Extended attributes (ACLs included), sorted.
    xattrs: Vec<meta::Xattr>,
    /// Only when the restore runs as root.
    owner: Option<(u32, u32)>,
    rdev: u64,
    link: Option<Vec<u8>>,
    content: Option<blake3::Hash>,
    nlink: u64,
    /// For a multiply linked non-directory: the first path of its inode.
    inode_group: Option<Vec<u8>>,
}

fn lstat_tree(root: &Path, owners: bool) -> BTreeMap<Vec<u8>, Stat> {
    let mut groups: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut out = BTreeMap::new();
    for p in all_paths(root) {
        let rel = p
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        let m = fs::symlink_metadata(&p).unwrap();
        let format = m.mode() & libc::S_IFMT;
        let (is_file, is_link) = (m.is_file(), m.file_type().is_symlink());
        out.insert(
            rel.clone(),
            Stat {
                format,
                mode: m.mode() & 0o7777,
                size: (is_file || is_link).then_some(m.len()),
                mtime: (m.mtime(), m.mtime_nsec()),
                xattrs: super::xattr::read(&p).unwrap(),
                owner: owners.then(|| (m.uid(), m.gid())),
                rdev: m.rdev(),
                link: is_link.then(|| fs::read_link(&p).unwrap().into_os_string().into_vec()),
                content: is_file.then(|| blake3::hash(&fs::read(&p).unwrap())),
                nlink: m.nlink(),
                inode_group: (!m.is_dir() && m.nlink() > 1)
                    .then(|| groups.entry(m.ino()).or_insert(rel).clone()),
            },
        );
    }
    out
}

fn mknod(p: &Path, format: libc::mode_t, mode: libc::mode_t, major: u32, minor: u32) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let r = unsafe { libc::mknod(c.as_ptr(), format | mode, libc::makedev(major, minor)) };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        p.display(),
        io::Error::last_os_error()
    );
}

/// A tree with every entry kind a restore must bring back: regular, empty,
/// large and sparse files, an executable, directories with unusual modes,
/// relative, absolute, climbing and dangling symlinks, a hard link group,
/// a fifo, non-UTF-8 names, old mtimes; as root also devices, owners other
/// than root, setuid and setgid bits.
fn build_every_kind(root: &Path, as_root: bool) {
    let w = |rel: &str, data: &[u8]| fs::write(root.join(rel), data).unwrap();
    w("file.txt", b"plain text\n");
    w("empty", b"");
    let mut large: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    large[1 << 20..2 << 20].fill(0);
    w("large.bin", &large);
    let sparse = fs::File::create(root.join("sparse.img")).unwrap();
    sparse.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"data", 5 << 20).unwrap();
    drop(sparse);
    w("run.sh", b"#!/bin/sh\necho hi\n");
    chmod(&root.join("run.sh"), 0o755);
    for (dir, mode) in [
        ("sticky", 0o1777),
        ("ro", 0o555),
        ("private", 0o700),
        ("odd", 0o751),
    ] {
        fs::create_dir(root.join(dir)).unwrap();
        w(&format!("{dir}/inside"), dir.as_bytes());
        chmod(&root.join(dir), mode);
    }
    fs::create_dir(root.join("sub")).unwrap();
    symlink("file.txt", root.join("rel")).unwrap();
    symlink("/etc/passwd", root.join("abs")).unwrap();
    symlink("/nonexistent/tessera/x", root.join("abs_dangling")).unwrap();
    symlink("no/such/file", root.join("dangling")).unwrap();
    symlink("../../outside", root.join("sub/up")).unwrap();
    symlink("/", root.join("slash")).unwrap();
    w("h1", b"three names, one inode");
    fs::hard_link(root.join("h1"), root.join("sub/h2")).unwrap();
    fs::hard_link(root.join("h1"), root.join("sub/h3")).unwrap();
    mkfifo(&root.join("pipe"), 0o640);
    let bytes_name = |b: &[u8]| root.join(OsStr::from_bytes(b));
    fs::write(bytes_name(b"caf\xe9.txt"), b"latin-1 name").unwrap();
    fs::create_dir(bytes_name(b"dir\xff")).unwrap();
    fs::write(bytes_name(b"dir\xff/\x01\x7f"), b"control bytes").unwrap();
    symlink(OsStr::from_bytes(b"caf\xe9.txt"), bytes_name(b"link\xfe")).unwrap();
    if as_root {
        mknod(&root.join("null"), libc::S_IFCHR, 0o666, 1, 3);
        mknod(&root.join("loop"), libc::S_IFBLK, 0o660, 7, 200);
        w("owned", b"someone else's");
        std::os::unix::fs::chown(root.join("owned"), Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::lchown(root.join("rel"), Some(4321), Some(8765)).unwrap();
        std::os::unix::fs::chown(root.join("odd"), Some(42), Some(43)).unwrap();
        chmod(&root.join("odd"), 0o2751);
        w("suid", b"#!/bin/sh\n");
        std::os::unix::fs::chown(root.join("suid"), Some(0), Some(7)).unwrap();
        chmod(&root.join("suid"), 0o4750);
    }
    set_test_xattrs(root, as_root);
    // Old times, before and around 1980, children before their directory.
    stamp_mtimes(root, 1);
}

fn set_xattr(p: &Path, name: &[u8], value: &[u8]) -> io::Result<()> {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings, `value` valid for its length.
    let r = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A POSIX ACL in the kernel's `system.posix_acl_*` encoding: version 2,
/// then (tag, permissions, id) entries sorted by tag and id.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// Whether the file system under `dir` takes `user.*` extended attributes.
fn user_xattrs_supported(dir: &Path) -> io::Result<()> {
    let probe = dir.join(".xattr-probe");
    fs::write(&probe, b"").unwrap();
    let r = set_xattr(&probe, b"user.probe", b"1");
    fs::remove_file(&probe).unwrap();
    r
}

/// Extended attributes on a file (binary values, a name with `=` and `%`),
/// a hard-link group, a directory, an access ACL and a default ACL; as root
/// also `trusted.*` ones on a symlink and a fifo. Skipped, with a printed
/// reason, where the file system does not take them. Returns whether set.
fn set_test_xattrs(root: &Path, as_root: bool) -> bool {
    if let Err(e) = user_xattrs_supported(root) {
        eprintln!(
            "extended attributes not tested: {} does not take them ({e})",
            root.display()
        );
        return false;
    }
    let set = |rel: &str, name: &str, value: &[u8]| {
        set_xattr(&root.join(rel), name.as_bytes(), value).unwrap()
    };
    set("file.txt", "user.comment", b"hello");
    set("file.txt", "user.bin", b"\0\x01=\n\xff");
    set("file.txt", "user.odd=name%25", b"x");
    set("large.bin", "user.big", &[7u8; 2000]);
    set("h1", "user.shared", b"one inode");
    set("private", "user.dir", b"d");
    const RWX: u16 = 7;
    const RX: u16 = 5;
    const ANY: u32 = u32::MAX;
    // USER_OBJ 1, USER 2, GROUP_OBJ 4, MASK 0x10, OTHER 0x20.
    let access = acl(&[
        (1, RWX, ANY),
        (2, RX, 1000),
        (4, RX, ANY),
        (0x10, RX, ANY),
        (0x20, RX, ANY),
    ]);
    match set_xattr(&root.join("run.sh"), b"system.posix_acl_access", &access) {
        Ok(()) => {
            let default = acl(&[
                (1, RWX, ANY),
                (2, RWX, 1000),
                (4, RX, ANY),
                (0x10, RWX, ANY),
                (0x20, RX, ANY),
            ]);
            set("sub", "system.posix_acl_default", &default);
        }
        Err(e) => eprintln!(
            "POSIX ACLs not tested: {} does not take them ({e})",
            root.display()
        ),
    }
    if as_root {
        set("rel", "trusted.on-a-symlink", b"l");
        set("pipe", "trusted.on-a-fifo", b"p");
        set("file.txt", "trusted.root-only", b"t");
    }
    true
}

/// Issue 13: a restore is byte- and metadata-identical, entry by entry, for
/// a generated tree with every entry kind, through the repository's public
/// API (backup into a local repository, restore into a directory).
#[test]
fn every_entry_kind_round_trips_through_a_repository() {
    let as_root = is_root();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    build_every_kind(&src, as_root);

    let location = dir.path().join("repo");
    let backend = crate::backend::create(
        location.to_str().unwrap(),
        crate::container::format::is_recipe_container,
    )
    .unwrap();
    crate::Repository::init(backend.clone(), &crate::InitOptions::default()).unwrap();
    let mut w = crate::Repository::open_writer(backend.clone(), "fidelity").unwrap();
    let opts = crate::BackupOptions::new("src", crate::catalog::SourceKind::Tree);
    let (backup, stats) = w.backup_tree(&opts, &src, &mut |_| {}).unwrap();
    w.close().unwrap();
    assert!(stats.skipped.is_empty(), "{:?}", stats.skipped);

    let r = crate::Repository::open(backend).unwrap();
    let entry = r.resolve(&backup.backup.id.to_string()).unwrap().clone();
    let out = dir.path().join("out");
    let (_, ext) = r
        .restore_into(&entry, &out, &crate::RestoreOptions::default(), &mut |_| {})
        .unwrap();
    assert!(ext.refused.is_empty(), "{:#?}", ext.refused);
    assert_eq!(
        (
            ext.files,
            ext.dirs,
            ext.symlinks,
            ext.hardlinks,
            ext.specials
        ),
        (
            stats.files,
            stats.dirs,
            stats.symlinks,
            stats.hardlinks,
            stats.specials
        )
    );

    let (before, after) = (lstat_tree(&src, as_root), lstat_tree(&out, as_root));
    assert_eq!(before.len(), after.len());
    // What is compared really was there: sub-second times and attributes.
    assert!(before.values().all(|s| s.mtime.1 != 0));
    if user_xattrs_supported(dir.path()).is_ok() {
        let names: BTreeSet<&[u8]> = before
            .values()
            .flat_map(|s| s.xattrs.iter().map(|(n, _)| n.as_slice()))
            .collect();
        for n in [
            "user.comment",
            "user.odd=name%25",
            "user.shared",
            "user.dir",
        ] {
            assert!(names.contains(n.as_bytes()), "{n} missing: {names:?}");
        }
        if as_root {
            assert!(names.contains(&b"trusted.on-a-symlink"[..]));
        }
    }
    for ((path, a), (path_b, b)) in before.iter().zip(&after) {
        assert_eq!(path, path_b);
        assert_eq!(a, b, "{}", String::from_utf8_lossy(path));
    }
    // Every kind really was there.
    let count = |f: u32| before.values().filter(|s| s.format == f).count();
    assert!(count(libc::S_IFIFO) == 1 && count(libc::S_IFLNK) == 7);
    if as_root {
        assert!(count(libc::S_IFCHR) == 1 && count(libc::S_IFBLK) == 1);
    }
    // Runs of zeros came back as holes.
    let blocks = fs::metadata(out.join("sparse.img")).unwrap().blocks();
    assert!(blocks * 512 < 1 << 20, "sparse.img takes {blocks} blocks");
}

/// Without root, devices are refused with a reason, owners become the
/// running user's and setuid/setgid bits are dropped; the rest is exact.
#[test]
fn unprivileged_restore_reports_devices_and_restores_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    build_every_kind(&src, is_root());
    let (tar, _) = tar_of(&src);
    let out = dir.path().join("out");
    let report = super::extract::extract_as(&mut &tar[..], &out, &[], false, 1).unwrap();
    let refused: Vec<_> = report
        .refused
        .iter()
        .map(|r| (r.path.as_str(), r.reason.as_str()))
        .collect();
    if is_root() {
        assert_eq!(
            refused,
            [
                ("loop", "block devices are restored only by root"),
                ("null", "character devices are restored only by root"),
            ]
        );
    } else {
        assert!(refused.is_empty(), "{refused:?}");
    }
    let before = lstat_tree(&src, false);
    let after = lstat_tree(&out, false);
    for (path, a) in &before {
        let shown = String::from_utf8_lossy(path);
        match after.get(path) {
            None => assert!(matches!(a.format, libc::S_IFCHR | libc::S_IFBLK), "{shown}"),
            Some(b) => {
                let expected = Stat {
                    mode: a.mode & 0o1777,
                    ..a.clone()
                };
                assert_eq!(expected, *b, "{shown}");
            }
        }
    }
}

// ------------------------------------------------------ metadata records

fn record_strategy() -> impl Strategy<Value = meta::Record> {
    (
        0..7u8,
        prop::collection::vec(1u8..=255, 1..40),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<i64>(),
        0..1_000_000_000u32,
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..30),
        (any::<u32>(), any::<u32>()),
        prop::collection::btree_map(
            prop::collection::vec(1u8..=255, 1..20),
            prop::collection::vec(any::<u8>(), 0..50),
            0..4,
        ),
    )
        .prop_map(
            |(k, path, mode, uid, gid, mtime, nsec, size, link, dev, xattrs)| {
                let kind = [
                    meta::Kind::File,
                    meta::Kind::Dir,
                    meta::Kind::Symlink,
                    meta::Kind::Hardlink,
                    meta::Kind::Fifo,
                    meta::Kind::CharDevice,
                    meta::Kind::BlockDevice,
                ][k as usize];
                meta::Record {
                    kind,
                    path,
                    mode,
                    uid,
                    gid,
                    mtime,
                    mtime_nsec: nsec,
                    size: if kind == meta::Kind::File { size } else { 0 },
                    link: if matches!(kind, meta::Kind::Symlink | meta::Kind::Hardlink) {
                        link
                    } else {
                        Vec::new()
                    },
                    device: if matches!(kind, meta::Kind::CharDevice | meta::Kind::BlockDevice) {
                        dev
                    } else {
                        (0, 0)
                    },
                    xattrs: xattrs.into_iter().collect(),
                }
            },
        )
}

fn encode_records(records: &[meta::Record]) -> Vec<u8> {
    let mut w = meta::MetaEncoder::default();
    for r in records {
        w.push(r);
    }
    let (mut names, times) = w.finish();
    names.extend_from_slice(&times);
    names
}

proptest! {
    #[test]
    fn metadata_records_round_trip(mut records in prop::collection::vec(record_strategy(), 0..40)) {
        records.sort_by(|a, b| a.path.cmp(&b.path));
        records.dedup_by(|a, b| a.path == b.path);
        let bytes = encode_records(&records);
        prop_assert_eq!(meta::decode(&bytes).unwrap(), records);
    }

    #[test]
    fn damaged_metadata_is_an_error_never_a_panic(
        records in prop::collection::vec(record_strategy(), 1..10),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut records = records;
        records.sort_by(|a, b| a.path.cmp(&b.path));
        records.dedup_by(|a, b| a.path == b.path);
        let mut bytes = encode_records(&records);
        let i = at.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] = byte;
        }
        let _ = meta::decode(&bytes);
    }
}

#[test]
fn metadata_of_an_unchanged_tree_differs_only_in_the_times_column() {
    let a = vec![
        meta::Record {
            kind: meta::Kind::Dir,
            path: b"d/".to_vec(),
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime: 100,
            mtime_nsec: 5,
            size: 0,
            link: Vec::new(),
            device: (0, 0),
            xattrs: Vec::new(),
        },
        meta::Record {
            kind: meta::Kind::File,
            path: b"d/f".to_vec(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 200,
            mtime_nsec: 7,
            size: 10,
            link: Vec::new(),
            device: (0, 0),
            xattrs: Vec::new(),
        },
    ];
    let mut b = a.clone();
    for r in &mut b {
        r.mtime += 1_000_000;
        r.mtime_nsec = 999;
    }
    let enc = |rs: &[meta::Record]| {
        let mut w = meta::MetaEncoder::default();
        rs.iter().for_each(|r| w.push(r));
        w.finish()
    };
    let ((na, ta), (nb, tb)) = (enc(&a), enc(&b));
    assert_eq!(na, nb, "the names column does not hold times");
    assert_ne!(ta, tb);
}

// ------------------------------------------- extended attributes and times

/// A metadata stream as builds before extended attributes wrote it (count
/// always 0) still decodes: their backups restore.
#[test]
fn metadata_written_before_extended_attributes_still_decodes() {
    let mut old = b"TSMETA1\n\x01".to_vec();
    // file "f", mode 0o644, uid 0, gid 0, size 3, no extended attributes
    old.extend_from_slice(&[0, 0, 1, b'f', 0xa4, 0x03, 0, 0, 3, 0]);
    // mtime 5 (zigzag 10), 7 ns
    old.extend_from_slice(&[10, 7]);
    let records = meta::decode(&old).unwrap();
    assert_eq!(
        records,
        [meta::Record {
            kind: meta::Kind::File,
            path: b"f".to_vec(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 5,
            mtime_nsec: 7,
            size: 3,
            link: Vec::new(),
            device: (0, 0),
            xattrs: Vec::new(),
        }]
    );
    // And a record without attributes still encodes to those bytes.
    assert_eq!(encode_records(&records), old);
}

proptest! {
    #[test]
    fn pax_times_round_trip(secs in -(1i64 << 40)..(1i64 << 40), nsec in 0..1_000_000_000u32) {
        let text = super::serialize::pax_time(secs, nsec);
        prop_assert_eq!(super::extract::parse_time(text.as_bytes()), Some((secs, nsec)));
    }
}

#[test]
fn pax_times_as_other_tars_write_them() {
    let p = |s: &str| super::extract::parse_time(s.as_bytes());
    assert_eq!(p("1234567891.5"), Some((1_234_567_891, 500_000_000)));
    assert_eq!(p("7"), Some((7, 0)));
    assert_eq!(p("-0.25"), Some((-1, 750_000_000)));
    assert_eq!(p("1.1234567899"), Some((1, 123_456_789)));
    for bad in ["", "-", "x", "1.2.3", "1.-2", ".5"] {
        assert_eq!(p(bad), None, "{bad:?}");
    }
}

/// Attributes the target cannot take (an unknown namespace; `user.*` on a
/// symlink, which Linux refuses) are reported entry by entry while the
/// entries and their other attributes are restored.
#[test]
fn extended_attributes_that_cannot_be_set_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    if let Err(e) = user_xattrs_supported(dir.path()) {
        eprintln!(
            "skipped: {} takes no extended attributes ({e})",
            dir.path().display()
        );
        return;
    }
    let record = |kind, path: &[u8], xattrs: Vec<meta::Xattr>| meta::Record {
        kind,
        path: path.to_vec(),
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime: 1_600_000_000,
        mtime_nsec: 123_456_789,
        size: 0,
        link: if kind == meta::Kind::Symlink {
            b"f".to_vec()
        } else {
            Vec::new()
        },
        device: (0, 0),
        xattrs,
    };
    let x = |n: &str, v: &str| (n.as_bytes().to_vec(), v.as_bytes().to_vec());
    let mut f = record(
        meta::Kind::File,
        b"f",
        vec![x("bogus.ns", "1"), x("user.ok", "2")],
    );
    f.size = 4;
    let l = record(meta::Kind::Symlink, b"l", vec![x("user.nope", "3")]);
    let mut tar = Vec::new();
    {
        use super::walk::TreeOut;
        use std::io::Write;
        let mut out = super::serialize::TarOut::new(&mut tar);
        out.entry(&f).unwrap();
        out.write_all(b"data").unwrap();
        out.file_end(&f, true).unwrap();
        out.entry(&l).unwrap();
        out.finish().unwrap();
    }
    let target = dir.path().join("t");
    let report = extract_bytes(&tar, &target).unwrap();
    assert_eq!((report.files, report.symlinks), (1, 1));
    let refused: Vec<_> = report
        .refused
        .iter()
        .map(|r| (r.path.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!(refused[0].0, "f");
    assert!(
        refused[0]
            .1
            .starts_with("restored, but not its extended attributes bogus.ns ("),
        "{refused:?}"
    );
    assert_eq!(refused[1].0, "l");
    assert!(
        refused[1]
            .1
            .starts_with("restored, but not its extended attributes user.nope ("),
        "{refused:?}"
    );
    assert_eq!(
        super::xattr::read(&target.join("f")).unwrap(),
        [x("user.ok", "2")]
    );
    assert_eq!(fs::read(target.join("f")).unwrap(), b"data");
    // The exact mtimes, the symlink's own included.
    for name in ["f", "l"] {
        let m = fs::symlink_metadata(target.join(name)).unwrap();
        assert_eq!(
            (m.mtime(), m.mtime_nsec()),
            (1_600_000_000, 123_456_789),
            "{name}"
        );
    }
}

/// Small files (written by the writer threads) of every shape beside
/// [`build_every_kind`]'s: many in several directories, a sparse one, a
/// hard-link group, one in a read-only directory, each with its own mode.
fn add_small_files(root: &Path) {
    for d in 0..5 {
        let dir = root.join(format!("many{d}"));
        fs::create_dir(&dir).unwrap();
        for i in 0..40u32 {
            let len = (i as usize * 997 + d * 13) % 20_000;
            let data: Vec<u8> = (0..len).map(|j| (j as u32 ^ i) as u8).collect();
            let p = dir.join(format!("f{i}"));
            fs::write(&p, &data).unwrap();
            chmod(&p, 0o600 | (i % 8) << 3);
        }
    }
    let mut small_sparse = vec![0u8; 512 << 10];
    small_sparse[..10].fill(1);
    small_sparse[(512 << 10) - 10..].fill(2);
    fs::write(root.join("many0/sparse.small"), &small_sparse).unwrap();
    fs::write(root.join("many1/linked"), b"one inode, three names").unwrap();
    fs::hard_link(root.join("many1/linked"), root.join("many2/link2")).unwrap();
    fs::hard_link(root.join("many1/linked"), root.join("many4/link3")).unwrap();
    chmod(&root.join("many3"), 0o555);
    if user_xattrs_supported(root).is_ok() {
        set_xattr(
            &root.join("many1/f3"),
            b"user.small",
            b"attr on a small file",
        )
        .unwrap();
    }
}

#[test]
fn restores_with_many_writers_give_exactly_the_tree_of_one_writer() {
    let as_root = is_root();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    build_every_kind(&src, as_root);
    add_small_files(&src);
    stamp_mtimes(&src, 1_000_000_000);

    let location = dir.path().join("repo");
    let backend = crate::backend::create(
        location.to_str().unwrap(),
        crate::container::format::is_recipe_container,
    )
    .unwrap();
    crate::Repository::init(backend.clone(), &crate::InitOptions::default()).unwrap();
    let mut w = crate::Repository::open_writer(backend.clone(), "writers").unwrap();
    let opts = crate::BackupOptions::new("src", crate::catalog::SourceKind::Tree);
    let (backup, _) = w.backup_tree(&opts, &src, &mut |_| {}).unwrap();
    w.close().unwrap();

    let mut r = crate::Repository::open(backend).unwrap();
    let entry = r.resolve(&backup.backup.id.to_string()).unwrap().clone();
    let blocks = |root: &Path| -> BTreeMap<PathBuf, u64> {
        all_paths(root)
            .into_iter()
            .filter(|p| fs::symlink_metadata(p).unwrap().is_file())
            .map(|p| {
                let b = fs::metadata(&p).unwrap().blocks();
                (p.strip_prefix(root).unwrap().to_path_buf(), b)
            })
            .collect()
    };
    let mut trees = Vec::new();
    for writers in [1, 4] {
        r.set_threads(writers);
        let out = dir.path().join(format!("out{writers}"));
        let (_, ext) = r
            .restore_into(&entry, &out, &crate::RestoreOptions::default(), &mut |_| {})
            .unwrap();
        assert!(ext.refused.is_empty(), "{:#?}", ext.refused);
        let counts = (
            ext.files,
            ext.dirs,
            ext.symlinks,
            ext.hardlinks,
            ext.specials,
            ext.bytes,
        );
        trees.push((counts, lstat_tree(&out, as_root), blocks(&out)));
    }
    let (one, many) = (&trees[0], &trees[1]);
    assert_eq!(one.0, many.0);
    assert_eq!(one.1.len(), many.1.len());
    for ((path, a), (path_b, b)) in one.1.iter().zip(&many.1) {
        assert_eq!(path, path_b);
        assert_eq!(a, b, "{}", String::from_utf8_lossy(path));
    }
    // Holes stay holes, also in files the writers wrote.
    assert_eq!(one.2, many.2);
    assert!(many.2[Path::new("many0/sparse.small")] * 512 < 64 << 10);
    // And both are the source.
    assert_eq!(lstat_tree(&src, as_root), many.1);
    let group = &many.1[&b"many4/link3"[..]];
    assert_eq!(group.nlink, 3);
}

/// Many writers into one directory, with files up to the pooled size whose
/// bytes add up to many times the writers' queue (its byte bound makes the
/// parsing thread wait for answers mid-stream): every file is restored byte
/// for byte, and the report counts each once.
#[test]
fn many_writers_in_one_directory_restore_every_byte() {
    let mut raw = RawTar::default();
    raw.dir("d/");
    let mut want = Vec::new();
    let mut total = 0u64;
    for i in 0..120u32 {
        // Sizes from a few bytes to just under 1 MiB, mixed.
        let len = match i % 4 {
            0 => (i as usize * 37) % 200,
            1 => 4096 * (i as usize % 7) + 11,
            2 => 300_000 + i as usize * 1000,
            _ => (1 << 20) - i as usize,
        };
        let data: Vec<u8> = (0..len).map(|k| (k as u32 * 31 + i) as u8).collect();
        total += len as u64;
        let name = format!("d/f{i:03}");
        raw.file(&name, &data);
        want.push((name, data));
    }
    let tar = raw.finish();
    assert!(total > 8 * (4 << 20), "{total} bytes");
    let dir = tempfile::tempdir().unwrap();
    for writers in [1, 4] {
        let target = dir.path().join(format!("w{writers}"));
        let report =
            super::extract::extract_as(&mut &tar[..], &target, &[], false, writers).unwrap();
        assert_eq!((report.files, report.bytes), (120, total), "{writers}");
        assert!(report.refused.is_empty(), "{:?}", report.refused);
        for (name, data) in &want {
            let got = fs::read(target.join(name)).unwrap();
            assert!(got == *data, "{writers} writers: {name} differs");
        }
    }
}

/// The same stream from an input that hands file bytes out shared (as a
/// restore's pipe does) in blocks of several sizes, so that some files and
/// pieces lie inside a block and others straddle two (shared as two
/// slices) or more (copied): every file is restored byte for byte, holes
/// included, and with 1 MiB blocks (the pipe's) nothing is copied.
#[test]
fn shared_input_restores_every_byte() {
    let mut raw = RawTar::default();
    raw.dir("d/");
    let mut want = Vec::new();
    for i in 0..60u32 {
        let len = match i % 4 {
            0 => (i as usize * 37) % 200,
            1 => 4096 * (i as usize % 7) + 11,
            2 => 300_000 + i as usize * 1000,
            // Large files: written piece by piece.
            _ => (3 << 20) + i as usize * 4099,
        };
        let mut data: Vec<u8> = (0..len).map(|k| (k as u32 * 31 + i) as u8).collect();
        if i % 8 == 3 {
            // A zero run that becomes a hole, in a shared piece or not.
            data[(1 << 20)..(1 << 20) + (256 << 10)].fill(0);
        }
        let name = format!("d/f{i:03}");
        raw.file(&name, &data);
        want.push((name, data));
    }
    let tar = raw.finish();
    let dir = tempfile::tempdir().unwrap();
    for block in [4096 + 512, 1 << 20] {
        let target = dir.path().join(format!("b{block}"));
        let mut input = super::input::Blocks::new(tar.clone(), block);
        let report = super::extract::extract_as(&mut input, &target, &[], false, 4).unwrap();
        assert_eq!(report.files, 60, "{block}");
        assert!(report.refused.is_empty(), "{:?}", report.refused);
        assert!(input.shared > 0, "nothing shared with {block}-byte blocks");
        if block == 1 << 20 {
            let bytes: usize = want.iter().map(|(_, d)| d.len()).sum();
            assert_eq!(input.shared, bytes, "file bytes copied");
        }
        for (i, (name, data)) in want.iter().enumerate() {
            let got = fs::read(target.join(name)).unwrap();
            assert!(got == *data, "{block}-byte blocks: {name} differs");
            if i % 8 == 3 {
                let used = fs::metadata(target.join(name)).unwrap().blocks() * 512;
                assert!(
                    used + (256 << 10) <= data.len() as u64 + 4096,
                    "{block}-byte blocks: {name} has no hole ({used} bytes used)"
                );
            }
        }
    }
}

/// Several files over the pooled size (written by the writers piece by
/// piece while the parsing thread reads on), with zero runs that become
/// holes, between empty and small files, each with its own mode and
/// mtime: one writer and several restore the same tree as the source,
/// holes included.
fn add_large_files(root: &Path) {
    let big = |len: usize, seed: u32| -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect()
    };
    fs::create_dir(root.join("large")).unwrap();
    for i in 0..6u32 {
        // Sizes around the pieces' and the threshold's multiples.
        let len = [
            (1 << 20) + 1,
            3 << 20,
            (5 << 20) - 7,
            (2 << 20) + (256 << 10),
            4 << 20,
            (1 << 20) + 4096,
        ][i as usize];
        let mut data = big(len, i);
        if i % 2 == 1 {
            // A zero run across piece boundaries, to the end in the
            // shortest: aligned blocks become holes.
            data[(1 << 20) - 8192..((2 << 20) + 8192).min(len)].fill(0);
        }
        let p = root.join(format!("large/l{i}"));
        fs::write(&p, &data).unwrap();
        chmod(&p, 0o600 | (i % 8) << 3);
        fs::write(root.join(format!("large/s{i}")), big(i as usize * 1000, 7)).unwrap();
        fs::write(root.join(format!("large/e{i}")), b"").unwrap();
    }
    // Mostly a hole, and a hole at the end.
    let sparse = fs::File::create(root.join("large/sparse")).unwrap();
    sparse.set_len(9 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"x", 3 << 20).unwrap();
    drop(sparse);
    fs::hard_link(root.join("large/l2"), root.join("large/l2.link")).unwrap();
}

/// Files over the pooled size restore byte for byte, with their metadata
/// and holes, whatever the writers and the memory ceiling (below one
/// container too).
#[test]
fn large_files_restore_exactly_with_one_or_many_writers_and_any_ceiling() {
    let as_root = is_root();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    add_large_files(&src);
    stamp_mtimes(&src, 1_200_000_000);
    let want = lstat_tree(&src, as_root);
    // Each inode's bytes once (the hard link adds none).
    let mut inodes = HashMap::new();
    for p in all_paths(&src) {
        let m = fs::symlink_metadata(&p).unwrap();
        if m.is_file() {
            inodes.insert(m.ino(), m.len());
        }
    }
    let want_bytes: u64 = inodes.values().sum();

    let location = dir.path().join("repo");
    let backend = crate::backend::create(
        location.to_str().unwrap(),
        crate::container::format::is_recipe_container,
    )
    .unwrap();
    crate::Repository::init(backend.clone(), &crate::InitOptions::default()).unwrap();
    let mut w = crate::Repository::open_writer(backend.clone(), "large").unwrap();
    let opts = crate::BackupOptions::new("src", crate::catalog::SourceKind::Tree);
    let (backup, _) = w.backup_tree(&opts, &src, &mut |_| {}).unwrap();
    w.close().unwrap();
    let mut r = crate::Repository::open(backend).unwrap();
    let entry = r.resolve(&backup.backup.id.to_string()).unwrap().clone();
    let allocated = |root: &Path, name: &str| fs::metadata(root.join(name)).unwrap().blocks() * 512;
    for writers in [1, 2, 4] {
        for memory in [1, 100_000, crate::restore::DEFAULT_MEMORY] {
            r.set_threads(writers);
            let out = dir.path().join(format!("out{writers}-{memory}"));
            let ropts = crate::RestoreOptions {
                memory,
                ..Default::default()
            };
            let (report, ext) = r.restore_into(&entry, &out, &ropts, &mut |_| {}).unwrap();
            assert!(ext.refused.is_empty(), "{:#?}", ext.refused);
            assert_eq!(ext.bytes, want_bytes);
            assert!(report.restored_bytes > want_bytes, "contents and metadata");
            assert_eq!((ext.files, ext.hardlinks), (19, 1), "{writers} {memory}");
            let got = lstat_tree(&out, as_root);
            assert_eq!(got.len(), want.len());
            for ((path, a), (path_b, b)) in want.iter().zip(&got) {
                assert_eq!(path, path_b);
                assert_eq!(
                    a,
                    b,
                    "{writers} writers, memory {memory}: {}",
                    String::from_utf8_lossy(path)
                );
            }
            // Holes stay holes in files written piece by piece.
            assert!(allocated(&out, "large/sparse") < 64 << 10);
            assert!(allocated(&out, "large/l1") <= allocated(&src, "large/l1"));
            assert!(allocated(&out, "large/l1") < 3 << 20);
        }
    }
}

/// A large file the writers refuse (its name taken) or a stream that
/// breaks inside one: the parsing thread passes over, or fails on, the
/// rest of its data without waiting on a writer that stopped, and one
/// writer and several refuse and fail alike.
#[test]
fn a_refused_or_truncated_large_file_ends_as_with_one_writer() {
    let first: Vec<u8> = (0..(3u32 << 20) + 5).map(|i| (i % 249) as u8).collect();
    let second = vec![9u8; (2 << 20) + 3];
    let tar = RawTar::default()
        .file("a", &first)
        .file("a", &second)
        .file("b", b"after")
        .finish();
    let dir = tempfile::tempdir().unwrap();
    for writers in [1, 2, 4] {
        let target = dir.path().join(format!("t{writers}"));
        let report =
            super::extract::extract_as(&mut &tar[..], &target, &[], false, writers).unwrap();
        assert_eq!(refused_reason(&report, "a"), "already exists");
        assert_eq!((report.files, report.bytes), (2, first.len() as u64 + 5));
        assert!(fs::read(target.join("a")).unwrap() == first, "{writers}");
        assert_eq!(fs::read(target.join("b")).unwrap(), b"after");
    }
    // Cut inside the first large file's data, past a few pieces.
    let cut = &tar[..512 + (1 << 20) + 1000];
    for writers in [1, 2, 4] {
        let target = dir.path().join(format!("cut{writers}"));
        let err = super::extract::extract_as(&mut &cut[..], &target, &[], false, writers)
            .unwrap_err()
            .to_string();
        assert!(err.contains("truncated"), "{writers}: {err}");
    }
}

/// A hostile stream names files again, as parents, and as hard link
/// targets while they are still being written: the writers must leave
/// the tree, and give the refusals in the order, of one writer.
#[test]
fn writers_refuse_exactly_what_one_writer_refuses() {
    let tar = RawTar::default()
        .file("a", b"first")
        .file("a", b"again")
        .file("a/under", b"below a file")
        .dir("a/")
        .symlink("a", "elsewhere")
        .hardlink("h", "a")
        .file("b", b"b")
        .hardlink("b", "a")
        .file("c", &[3; 5000])
        .dir("c/d/")
        .file("c/d/e", b"e")
        .hardlink("c2", "c")
        .file("dup", b"1")
        .file("dup", b"2")
        .hardlink("dup2", "dup")
        .dir("z/")
        .file("z/x", b"x")
        .file("z/x/y", b"y")
        .finish();
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for writers in [1, 2, 4] {
        let target = dir.path().join(format!("t{writers}"));
        let report =
            super::extract::extract_as(&mut &tar[..], &target, &[], false, writers).unwrap();
        let refused: Vec<(String, String)> = report
            .refused
            .iter()
            .map(|r| (r.path.clone(), r.reason.clone()))
            .collect();
        runs.push((
            refused,
            (report.files, report.hardlinks, report.dirs, report.bytes),
            lstat_tree(&target, false),
        ));
    }
    // What one writer does, spelled out.
    let reasons: Vec<(&str, &str)> = runs[0]
        .0
        .iter()
        .map(|(p, r)| (p.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("a", "already exists"),
            ("a/under", "parent a was refused"),
            ("a/", "already exists"),
            ("a", "already exists"),
            ("b", "already exists"),
            ("c/d/", "parent c is not a directory"),
            ("c/d/e", "parent c/d was refused"),
            ("dup", "already exists"),
            ("z/x/y", "parent z/x is not a directory"),
        ]
    );
    for other in &runs[1..] {
        assert_eq!(other.0, runs[0].0);
        assert_eq!(other.1, runs[0].1);
        assert_eq!(other.2, runs[0].2);
    }
    assert_eq!(fs::read(dir.path().join("t4/a")).unwrap(), b"first");
    assert_eq!(fs::read(dir.path().join("t4/dup2")).unwrap(), b"1");
}

/// The walk runs on its own thread ahead of the store (issue 17): a tree of
/// many batches still comes out complete, in stream order, with the files'
/// bytes after their entries.
#[test]
fn scan_ahead_keeps_stream_order_over_many_batches() {
    let src = tempfile::tempdir().unwrap();
    let r = src.path();
    let mut expected = Vec::new();
    for d in 0..12 {
        let dir = format!("d{d:02}");
        fs::create_dir(r.join(&dir)).unwrap();
        expected.push(format!("{dir}/"));
        for f in 0..150 {
            let name = format!("{dir}/f{f:03}");
            fs::write(r.join(&name), name.as_bytes()).unwrap();
            expected.push(name);
        }
    }
    expected.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let (tar, stats) = tar_of(r);
    assert_eq!(tar_crate_paths(&tar), expected);
    assert_eq!((stats.files, stats.dirs), (1800, 12));
    let mut a = tar::Archive::new(&tar[..]);
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        if e.header().entry_type() == EntryType::Regular {
            let path = e.path_bytes().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            assert_eq!(data, path, "contents follow their entry");
        }
    }
}

/// A scan nobody stores stops when dropped (its thread is joined, not left
/// walking), and a scan of a missing path fails in the store, naming it.
#[test]
fn dropped_scan_stops_and_missing_path_fails_in_the_store() {
    let src = tempfile::tempdir().unwrap();
    for d in 0..40 {
        let dir = src.path().join(format!("d{d}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..100 {
            fs::write(dir.join(format!("f{f}")), b"x").unwrap();
        }
    }
    drop(Scan::start(
        vec![src.path().to_path_buf()],
        Selection::default(),
    ));

    let missing = src.path().join("not-there");
    let scan = Scan::start(vec![missing], Selection::default());
    let mut out = Vec::new();
    let mut tar = super::serialize::TarOut::new(&mut out);
    let err = super::walk::store(scan, &mut tar, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("not-there"), "{err}");
}

/// A scan held to a byte bound far below one batch (so it waits for the
/// store after every batch) stores the same stream as an unbounded one:
/// every entry, in order.
#[test]
fn a_scan_bounded_by_bytes_stores_every_entry() {
    let src = tempfile::tempdir().unwrap();
    for d in 0..12 {
        let dir = src.path().join(format!("d{d:02}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..90 {
            fs::write(dir.join(format!("f{f:03}")), format!("{d} {f}")).unwrap();
        }
    }
    let tar_of = |scan: Scan| {
        let mut out = Vec::new();
        let mut tar = super::serialize::TarOut::new(&mut out);
        super::walk::store(scan, &mut tar, &mut |_| {}).unwrap();
        drop(tar);
        out
    };
    let paths = vec![src.path().to_path_buf()];
    let whole = tar_of(Scan::start_bounded(
        paths.clone(),
        Selection::default(),
        usize::MAX,
    ));
    let bounded = tar_of(Scan::start_bounded(paths, Selection::default(), 1));
    assert_eq!(bounded, whole);
    // 12 directories of 90 files, each with its (distinct) contents.
    for d in [0, 11] {
        for f in [0, 89] {
            let needle = format!("d{d:02}/f{f:03}");
            let found = whole.windows(needle.len()).any(|w| w == needle.as_bytes());
            assert!(found, "{needle} not stored");
        }
    }
}

// ------------------------------------------------------ the walk's records

/// What a walk hands its output, in order (contents are not kept).
#[derive(Default)]
struct Recorded(Vec<meta::Record>);

impl io::Write for Recorded {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl super::walk::TreeOut for Recorded {
    fn entry(&mut self, r: &meta::Record) -> io::Result<()> {
        self.0.push(r.clone());
        Ok(())
    }
    fn file_end(&mut self, r: &meta::Record, complete: bool) -> io::Result<()> {
        assert!(complete, "{}", String::from_utf8_lossy(&r.path));
        Ok(())
    }
}

fn walked(paths: &[PathBuf]) -> (Vec<meta::Record>, TreeStats) {
    let mut out = Recorded::default();
    let stats = super::walk::walk(paths, &Selection::default(), &mut out, &mut |_| {}).unwrap();
    (out.0, stats)
}

/// The records of every entry below `root`, each read by its whole path
/// (`lstat`, `llistxattr`, `readlink`), as the walk read them before it
/// read entries under their open directory: the reference the walk is
/// held to. Paths get `prefix` in front.
fn records_by_path(root: &Path, prefix: &[u8]) -> Vec<meta::Record> {
    let mut found = Vec::new();
    for p in all_paths(root) {
        let m = fs::symlink_metadata(&p).unwrap();
        let mut path = prefix.to_vec();
        path.extend_from_slice(p.strip_prefix(root).unwrap().as_os_str().as_bytes());
        let ft = m.file_type();
        let kind = if ft.is_dir() {
            path.push(b'/');
            meta::Kind::Dir
        } else if ft.is_symlink() {
            meta::Kind::Symlink
        } else if ft.is_file() {
            meta::Kind::File
        } else if ft.is_fifo() {
            meta::Kind::Fifo
        } else if ft.is_char_device() {
            meta::Kind::CharDevice
        } else {
            meta::Kind::BlockDevice
        };
        let device = match kind {
            meta::Kind::CharDevice | meta::Kind::BlockDevice => {
                (libc::major(m.rdev()), libc::minor(m.rdev()))
            }
            _ => (0, 0),
        };
        let r = meta::Record {
            kind,
            path,
            mode: m.mode() & 0o7777,
            uid: m.uid().into(),
            gid: m.gid().into(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec() as u32,
            size: if ft.is_file() { m.len() } else { 0 },
            link: if ft.is_symlink() {
                fs::read_link(&p).unwrap().into_os_string().into_vec()
            } else {
                Vec::new()
            },
            device,
            xattrs: super::xattr::read(&p).unwrap(),
        };
        found.push((r, (m.dev(), m.ino(), m.nlink())));
    }
    found.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    // Later paths of a multiply linked file are hard links to the first.
    let mut first: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    let mut out = Vec::new();
    for (mut r, (dev, ino, nlink)) in found {
        if r.kind == meta::Kind::File && nlink > 1 {
            if let Some(f) = first.get(&(dev, ino)) {
                r.kind = meta::Kind::Hardlink;
                r.link = f.clone();
                r.size = 0;
                r.xattrs.clear();
            } else {
                first.insert((dev, ino), r.path.clone());
            }
        }
        out.push(r);
    }
    out
}

/// A directory chain deeper than the walk keeps open (read by whole path
/// below it), holding a file with an attribute, a symlink and a hard link.
fn build_deep(root: &Path) {
    let mut d = root.join("deep");
    for i in 0..super::walk::HELD_DIRS + 4 {
        d.push(format!("{}", i % 10));
    }
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("bottom"), b"far down").unwrap();
    let _ = set_xattr(&d.join("bottom"), b"user.deep", b"yes");
    symlink("../bottom", d.join("up")).unwrap();
    fs::hard_link(d.join("bottom"), root.join("deep/top-link")).unwrap();
    mkfifo(&d.join("fifo"), 0o600);
}

/// Issue 33: the walk reads entries by name under their open directory;
/// every record it makes (kind, mode, owner, mtime to the nanosecond,
/// size, symlink target, device numbers, extended attributes, hard links)
/// is what reading each entry by its whole path gives, for every entry
/// kind, below the depth the walk keeps open and above it, from one
/// backup path and from several.
#[test]
fn the_walk_records_what_each_entry_read_by_path_gives() {
    let as_root = is_root();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    build_every_kind(&src, as_root);
    build_deep(&src);

    let (records, stats) = walked(std::slice::from_ref(&src));
    let want = records_by_path(&src, b"");
    assert_eq!(records.len(), want.len());
    for (got, want) in records.iter().zip(&want) {
        assert_eq!(got, want, "{}", String::from_utf8_lossy(&want.path));
    }
    // The cases compared were there.
    let has = |k: meta::Kind| records.iter().filter(|r| r.kind == k).count();
    assert_eq!(has(meta::Kind::Hardlink), 3);
    assert_eq!(has(meta::Kind::Fifo), 2);
    assert!(has(meta::Kind::Symlink) >= 8);
    assert!(records.iter().any(|r| r.mtime_nsec != 0));
    assert!(records.iter().any(|r| r.path.ends_with(b"/bottom")));
    if as_root {
        assert_eq!(has(meta::Kind::CharDevice), 1);
        assert_eq!(has(meta::Kind::BlockDevice), 1);
    }
    if user_xattrs_supported(dir.path()).is_ok() {
        let with = |kind: meta::Kind| {
            records
                .iter()
                .any(|r| r.kind == kind && !r.xattrs.is_empty())
        };
        assert!(with(meta::Kind::File) && with(meta::Kind::Dir));
        if as_root {
            assert!(with(meta::Kind::Symlink) && with(meta::Kind::Fifo));
        }
    }
    assert!(stats.unreadable.is_empty() && stats.skipped.is_empty());

    // Several backup paths: each under its absolute path, read by it.
    let (many, _) = walked(&[src.join("deep"), src.join("private")]);
    let mut prefix = src.as_os_str().as_bytes()[1..].to_vec();
    prefix.push(b'/');
    let ours: Vec<_> = many
        .into_iter()
        .filter(|r| r.path.starts_with(&prefix) && r.path != prefix)
        .collect();
    let mut want = Vec::new();
    for sub in ["deep", "private"] {
        let mut top = prefix.clone();
        top.extend_from_slice(sub.as_bytes());
        top.push(b'/');
        let mut records = records_by_path(&src.join(sub), &top);
        let m = fs::symlink_metadata(src.join(sub)).unwrap();
        records.push(meta::Record {
            kind: meta::Kind::Dir,
            path: top,
            mode: m.mode() & 0o7777,
            uid: m.uid().into(),
            gid: m.gid().into(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec() as u32,
            size: 0,
            link: Vec::new(),
            device: (0, 0),
            xattrs: super::xattr::read(&src.join(sub)).unwrap(),
        });
        want.extend(records);
    }
    want.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(ours.len(), want.len());
    for (got, want) in ours.iter().zip(&want) {
        assert_eq!(got, want, "{}", String::from_utf8_lossy(&want.path));
    }
}

/// Files are created with their permission bits and given an owner or a
/// mode only when creation did not give them (an fstat tells): so a target
/// whose creation rules differ must still get exactly the stored ones. Its
/// default ACL takes the group and other bits off whatever is created in
/// it (as a umask would), and as root its setgid bit and group give new
/// files a group that is not the running user's.
#[test]
fn owners_and_modes_are_exact_whatever_creation_gives() {
    let as_root = is_root();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    let mut modes = vec![0o644, 0o755, 0o640, 0o600, 0o444, 0o000, 0o1644];
    if as_root {
        modes.extend([0o4755, 0o2755, 0o6711]);
    }
    let owners = [(0, 0), (1234, 5678), (0, 5678), (1234, 0)];
    for (i, mode) in modes.iter().enumerate() {
        for (k, &(uid, gid)) in owners.iter().enumerate() {
            // Small files, and large ones that go to a writer in pieces.
            for (size, tag) in [(100 + i * 7 + k, "s"), ((3 << 20) + i + k, "l")] {
                let p = src.join(format!("f{i}-{k}.{tag}"));
                let data: Vec<u8> = (0..size).map(|j| (j * 31 + i) as u8).collect();
                fs::write(&p, &data).unwrap();
                if as_root {
                    std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
                }
                chmod(&p, *mode);
            }
        }
    }
    stamp_mtimes(&src, 1_300_000_000);
    let (tar, _) = tar_of(&src);
    let want: BTreeMap<_, _> = lstat_tree(&src, as_root)
        .into_iter()
        .map(|(k, s)| (k, (s.mode, s.owner, s.content, s.mtime)))
        .collect();
    for writers in [1, 4] {
        let target = dir.path().join(format!("out{writers}"));
        fs::create_dir(&target).unwrap();
        // USER_OBJ rwx, GROUP_OBJ none, OTHER none.
        let default_acl = acl(&[
            (0x01, 7, u32::MAX),
            (0x04, 0, u32::MAX),
            (0x20, 0, u32::MAX),
        ]);
        let acl_set = set_xattr(&target, b"system.posix_acl_default", &default_acl);
        if let Err(e) = &acl_set {
            eprintln!(
                "default ACL not tested: {} does not take it ({e})",
                target.display()
            );
        }
        if as_root {
            std::os::unix::fs::chown(&target, None, Some(4321)).unwrap();
            chmod(&target, 0o2755);
        }
        let report =
            super::extract::extract_as(&mut &tar[..], &target, &[], as_root, writers).unwrap();
        assert!(report.refused.is_empty(), "{:?}", report.refused);
        let got: BTreeMap<_, _> = lstat_tree(&target, as_root)
            .into_iter()
            .map(|(k, s)| (k, (s.mode, s.owner, s.content, s.mtime)))
            .collect();
        assert_eq!(got, want, "{writers} writers");
    }
}
