//! Extended attributes (POSIX ACLs included: they are the
//! `system.posix_acl_access` and `system.posix_acl_default` attributes) read
//! and written without following symlinks, through `libc` directly.
//!
//! Reading takes every attribute the process may read (`user.*`, and as
//! root `trusted.*` too); writing goes through an open descriptor when there
//! is one, otherwise `lsetxattr` on `/proc/self/fd/<directory>/<name>`, which
//! reaches the entry through an open directory handle and never follows it.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::meta::Xattr;

/// The extended attributes of `path` itself (a symlink's own), sorted by
/// name. A file system without extended attributes gives none; an
/// attribute removed between listing and reading is left out.
pub(crate) fn read(path: &Path) -> io::Result<Vec<Xattr>> {
    let c = CString::new(path.as_os_str().as_bytes())?;
    read_with(
        // SAFETY: `c` is NUL-terminated and `buf` is valid for its length.
        |buf| unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) },
        |name, buf| {
            // SAFETY: both strings are NUL-terminated, `buf` is valid.
            unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            }
        },
    )
}

/// [`read`] of the file open as `fd`: no path to resolve again.
pub(crate) fn read_fd(fd: BorrowedFd<'_>) -> io::Result<Vec<Xattr>> {
    let fd = fd.as_raw_fd();
    read_with(
        // SAFETY: `buf` is valid for its length; a bad descriptor is EBADF.
        |buf| unsafe { libc::flistxattr(fd, buf.as_mut_ptr().cast(), buf.len()) },
        |name, buf| {
            // SAFETY: `name` is NUL-terminated, `buf` is valid.
            unsafe { libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
        },
    )
}

/// The attributes `list` names, each read by `get`, sorted by name.
fn read_with(
    mut list: impl FnMut(&mut [u8]) -> isize,
    mut get: impl FnMut(&CStr, &mut [u8]) -> isize,
) -> io::Result<Vec<Xattr>> {
    let names = match fill(&mut list) {
        Ok(n) => n,
        Err(e) if unsupported(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let cname = CString::new(name)?;
        match fill(|buf| get(&cname, buf)) {
            Ok(v) => out.push((name.to_vec(), v)),
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "cannot read extended attribute {}: {e}",
                        String::from_utf8_lossy(name)
                    ),
                ))
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Call a `*listxattr`/`*getxattr`-style function until its answer fits.
fn fill(mut call: impl FnMut(&mut [u8]) -> isize) -> io::Result<Vec<u8>> {
    // Most entries have no attributes: one call with a small buffer.
    let mut buf = vec![0u8; 256];
    loop {
        let n = call(&mut buf);
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => {
                let need = call(&mut []);
                if need < 0 {
                    return Err(io::Error::last_os_error());
                }
                buf.resize((need as usize).max(buf.len() * 2), 0);
            }
            Some(libc::EINTR) => {}
            _ => return Err(e),
        }
    }
}

fn unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTSUP)
}

/// Set `attrs` on the open file `fd`. Returns the attributes that could not
/// be set, with why.
pub(crate) fn set_fd(fd: RawFd, attrs: &[Xattr]) -> Vec<(String, io::Error)> {
    set_each(attrs, |name, value| {
        // SAFETY: `name` is NUL-terminated, `value` valid for its length.
        unsafe { libc::fsetxattr(fd, name.as_ptr(), value.as_ptr().cast(), value.len(), 0) }
    })
}

/// Set `attrs` on the entry `name` of the open directory `dir`, never
/// following it if it is a symlink.
pub(crate) fn set_at(dir: RawFd, name: &CStr, attrs: &[Xattr]) -> Vec<(String, io::Error)> {
    let mut path = format!("/proc/self/fd/{dir}/").into_bytes();
    path.extend_from_slice(name.to_bytes());
    let path = CString::new(path).expect("no NUL in a descriptor path");
    set_each(attrs, |n, value| {
        // SAFETY: both strings are NUL-terminated, `value` valid.
        unsafe {
            libc::lsetxattr(
                path.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        }
    })
}

fn set_each(
    attrs: &[Xattr],
    mut set: impl FnMut(&CStr, &[u8]) -> libc::c_int,
) -> Vec<(String, io::Error)> {
    let mut failed = Vec::new();
    for (name, value) in attrs {
        let shown = String::from_utf8_lossy(name).into_owned();
        let Ok(c) = CString::new(name.as_slice()) else {
            failed.push((shown, io::Error::from(io::ErrorKind::InvalidInput)));
            continue;
        };
        loop {
            if set(&c, value) == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                failed.push((shown, e));
                break;
            }
        }
    }
    failed
}
