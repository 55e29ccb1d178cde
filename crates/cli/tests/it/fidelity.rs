//! Issue 13: `tessera backup` then `tessera restore --target` gives back a
//! tree identical in content and metadata, entry by entry: every entry
//! kind, non-UTF-8 names, sub-second mtimes, extended attributes and POSIX
//! ACLs (where the test file system takes them), link counts; owners and
//! device nodes when run as root.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::common::{ok, tessera};

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn check(r: libc::c_int, what: &str) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    }
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let n = CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings, `value` valid for its length.
    let r = unsafe {
        libc::lsetxattr(
            c(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    check(r, name)
}

/// The entry's own extended attributes, sorted.
fn xattrs(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let path = c(p);
    let mut names = vec![0u8; 64 * 1024];
    // SAFETY: valid path and buffer.
    let n = unsafe { libc::llistxattr(path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        n >= 0,
        "llistxattr {}: {}",
        p.display(),
        io::Error::last_os_error()
    );
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 64 * 1024];
        // SAFETY: valid strings and buffer.
        let n =
            unsafe { libc::lgetxattr(path.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(n >= 0, "lgetxattr {}", p.display());
        v.truncate(n as usize);
        out.push((name.to_vec(), v));
    }
    out.sort();
    out
}

/// Set a path's own atime and mtime (never following a symlink).
fn set_mtime(p: &Path, secs: i64, nsec: i64) {
    let t = libc::timespec {
        tv_sec: secs,
        tv_nsec: nsec,
    };
    // SAFETY: valid path, two timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c(p).as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(r, "utimensat").unwrap();
}

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every path below `root`, sorted, not following symlinks.
fn paths(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
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

/// Builds the tree; returns whether extended attributes are in it.
fn build(root: &Path, as_root: bool) -> bool {
    let w = |rel: &str, data: &[u8]| fs::write(root.join(rel), data).unwrap();
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    w("file.txt", b"plain\n");
    w("empty", b"");
    let sparse = fs::File::create(root.join("sparse.img")).unwrap();
    sparse.set_len(4 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"data", 3 << 20).unwrap();
    w("sub/deeper/run.sh", b"#!/bin/sh\n");
    fs::set_permissions(
        root.join("sub/deeper/run.sh"),
        fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    w("h1", b"linked");
    fs::hard_link(root.join("h1"), root.join("sub/h2")).unwrap();
    symlink("file.txt", root.join("rel")).unwrap();
    symlink("/etc/hostname", root.join("abs")).unwrap();
    symlink("no/such", root.join("dangling")).unwrap();
    // SAFETY: valid path.
    check(
        unsafe { libc::mkfifo(c(&root.join("pipe")).as_ptr(), 0o640) },
        "mkfifo",
    )
    .unwrap();
    fs::write(root.join(OsStr::from_bytes(b"caf\xe9")), b"latin-1").unwrap();
    if as_root {
        let dev = libc::makedev(1, 3);
        // SAFETY: valid path.
        check(
            unsafe { libc::mknod(c(&root.join("null")).as_ptr(), libc::S_IFCHR | 0o666, dev) },
            "mknod",
        )
        .unwrap();
        std::os::unix::fs::chown(root.join("file.txt"), Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::lchown(root.join("rel"), Some(42), Some(43)).unwrap();
    }
    let probe = set_xattr(&root.join("file.txt"), "user.comment", b"hi");
    let with_xattrs = match probe {
        Ok(()) => {
            set_xattr(&root.join("h1"), "user.shared", &[0, 1, 2, 255]).unwrap();
            set_xattr(&root.join("sub"), "user.dir", b"d").unwrap();
            // USER_OBJ, USER 1000, GROUP_OBJ, MASK, OTHER.
            let access = acl(&[
                (1, 7, u32::MAX),
                (2, 5, 1000),
                (4, 5, u32::MAX),
                (0x10, 5, u32::MAX),
                (0x20, 0, u32::MAX),
            ]);
            match set_xattr(
                &root.join("sub/deeper/run.sh"),
                "system.posix_acl_access",
                &access,
            ) {
                Ok(()) => {
                    let default = acl(&[(1, 7, u32::MAX), (4, 5, u32::MAX), (0x20, 5, u32::MAX)]);
                    set_xattr(
                        &root.join("sub/deeper"),
                        "system.posix_acl_default",
                        &default,
                    )
                    .unwrap();
                }
                Err(e) => eprintln!("POSIX ACLs not tested: {e}"),
            }
            if as_root {
                set_xattr(&root.join("rel"), "trusted.link", b"l").unwrap();
            }
            true
        }
        Err(e) => {
            eprintln!(
                "extended attributes not tested: {} does not take them ({e})",
                root.display()
            );
            false
        }
    };
    for (i, p) in paths(root).iter().rev().enumerate() {
        set_mtime(
            p,
            1_500_000_000 + i as i64 * 7,
            (i as i64 * 123_456_789 + 1) % 1_000_000_000,
        );
    }
    with_xattrs
}

type Stat = (
    u32,
    Option<(u32, u32)>,
    (i64, i64),
    u64,
    u64,
    Option<u64>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(Vec<u8>, Vec<u8>)>,
);

/// Per relative path: mode (type and permissions), owner (as root), mtime
/// with nanoseconds, link count, device, size (files), link target,
/// contents, extended attributes.
fn stat_tree(root: &Path, owners: bool) -> BTreeMap<Vec<u8>, Stat> {
    paths(root)
        .into_iter()
        .map(|p| {
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let link = m
                .file_type()
                .is_symlink()
                .then(|| fs::read_link(&p).unwrap().as_os_str().as_bytes().to_vec());
            let st: Stat = (
                m.mode(),
                owners.then(|| (m.uid(), m.gid())),
                (m.mtime(), m.mtime_nsec()),
                if m.is_dir() { 0 } else { m.nlink() },
                m.rdev(),
                m.is_file().then_some(m.len()),
                link,
                m.is_file().then(|| fs::read(&p).unwrap()),
                xattrs(&p),
            );
            (rel, st)
        })
        .collect()
}

#[test]
fn restore_is_content_and_metadata_identical() {
    let as_root = is_root();
    let t = tempfile::tempdir().unwrap();
    let (repo, src, out) = (
        t.path().join("repo"),
        t.path().join("src"),
        t.path().join("out"),
    );
    fs::create_dir(&src).unwrap();
    let with_xattrs = build(&src, as_root);
    ok(tessera(&repo).arg("init"));
    ok(tessera(&repo).arg("backup").arg(&src));
    ok(tessera(&repo)
        .args(["restore", "latest", "--target"])
        .arg(&out));
    let (before, after) = (stat_tree(&src, as_root), stat_tree(&out, as_root));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (path, a) in &before {
        assert_eq!(a, &after[path], "{}", String::from_utf8_lossy(path));
    }
    // What was compared was there.
    let xattr_names: Vec<&[u8]> = before
        .values()
        .flat_map(|s| s.8.iter().map(|(n, _)| n.as_slice()))
        .collect();
    if with_xattrs {
        assert!(
            xattr_names.contains(&&b"user.shared"[..]),
            "{xattr_names:?}"
        );
    }
    assert_eq!(before[&b"sub/h2"[..]].3, 2, "a hard link group");
    assert!(before.values().all(|s| s.2 .1 != 0), "sub-second mtimes");
}
