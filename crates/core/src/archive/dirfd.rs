//! Entries read relative to their open directory: the walk opens each
//! directory once, lists it through that descriptor and `lstat`s, opens
//! and reads the links of its children by name under it, so the kernel
//! resolves one path component per entry instead of the entry's whole
//! path again (issue 33: resolving full paths for `lstat` was most of an
//! unchanged backup's kernel time).

use std::fs::Metadata;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

/// What the walk records of an entry and what the files cache keys on: the
/// fields of `lstat`, the same whether read by name under a directory or
/// from an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// `st_mode`: the file type and the permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub rdev: u64,
}

impl Stat {
    /// `lstat` of `name` in the directory `dir` (`None`: `name` is a path,
    /// resolved from the working directory).
    pub(crate) fn at(dir: Option<&Dir>, name: &[u8]) -> io::Result<Stat> {
        let fd = dir.map_or(CWD, |d| d.fd.as_fd());
        let st = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
        Ok(Self::from_raw(&st))
    }

    // The raw field types differ between architectures (and C libraries):
    // a cast that is a no-op on one is needed on another.
    #[allow(clippy::unnecessary_cast)]
    fn from_raw(st: &rustix::fs::Stat) -> Stat {
        Stat {
            mode: st.st_mode as u32,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            size: st.st_size as u64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            nlink: st.st_nlink as u64,
            rdev: st.st_rdev as u64,
        }
    }

    pub(crate) fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode as _)
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub(crate) fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }
}

impl From<&Metadata> for Stat {
    fn from(m: &Metadata) -> Stat {
        Stat {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            dev: m.dev(),
            ino: m.ino(),
            nlink: m.nlink(),
            rdev: m.rdev(),
        }
    }
}

/// An open directory whose children are read by name under it.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
}

/// What a listing gives per child: its name, and whether it is a directory
/// (from the listing's type where the file system gives one, else `lstat`).
pub(crate) type Child = (Vec<u8>, bool);

impl Dir {
    /// Open the directory `name` under `dir` (`None`: `name` is a path),
    /// never following a symlink in its last component unless `follow`.
    pub(crate) fn open(dir: Option<&Dir>, name: &[u8], follow: bool) -> io::Result<Dir> {
        let fd = dir.map_or(CWD, |d| d.fd.as_fd());
        let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOCTTY;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        let fd = rustix::fs::openat(fd, name, flags, Mode::empty())?;
        Ok(Dir { fd })
    }

    /// The directory at `path`, following symlinks (a backup path).
    pub(crate) fn open_path(path: &Path) -> io::Result<Dir> {
        Self::open(None, path.as_os_str().as_encoded_bytes(), true)
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Every child (not `.` and `..`), in the order the file system lists
    /// them.
    pub(crate) fn children(&self) -> io::Result<Vec<Child>> {
        // The listing reads through its own descriptor (its offset moves),
        // so this one stays free for the children's `lstat`s.
        let mut listing = rustix::fs::Dir::new(self.fd.try_clone()?)?;
        let mut out = Vec::new();
        while let Some(entry) = listing.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Unknown => Stat::at(Some(self), name)?.is_dir(),
                t => t == FileType::Directory,
            };
            out.push((name.to_vec(), is_dir));
        }
        Ok(out)
    }

    /// The target of the symlink `name` under this directory.
    pub(crate) fn read_link(&self, name: &[u8]) -> io::Result<Vec<u8>> {
        Ok(rustix::fs::readlinkat(&self.fd, name, Vec::new())?.into_bytes())
    }
}
