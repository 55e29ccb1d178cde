//! The settled method of timing a step (issue 33): every step starts from
//! the same memory state and every restore writes into a file system of its
//! own that has never freed an inode.
//!
//! File creation on a busy machine varies 2–4× with the page cache's state,
//! and ext4 slows down for minutes after large deletions (see
//! `peers.rs`). So before each timed step the harness writes back dirty
//! pages, drops the page cache, and reads back only that step's input; and
//! each restore (and the `cp -a` it is compared with) goes to a freshly made
//! ext4 on a loop device. The loop image is one file made once, zero-filled
//! so every block is already allocated on the host file system, and made
//! into a new ext4 (`mkfs.ext4 -E nodiscard`) before every use: no block or
//! inode is freed on the host file system between timed steps, and the disk
//! holds one image however many restores run. The loop device is attached
//! with direct I/O (`losetup --direct-io=on`): a buffered loop device keeps a
//! second page cache of the image, which costs every tool's restore about a
//! CPU-second of kernel time and leaves seconds of write-back to the `sync`
//! after the step (measured in docs/LAB.md).

use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// ext4's block size: files occupy whole blocks.
const BLOCK: u64 = 4096;
/// Room for the journal, inode tables and group descriptors beyond the
/// tree's blocks.
const METADATA_ROOM: u64 = 256 << 20;
/// mkfs.ext4's default bytes-per-inode ratio (`inode_ratio` in mke2fs.conf).
const DEFAULT_INODE_RATIO: u64 = 16384;

/// Why the settled method cannot run here, or `None` when it can: it needs
/// root (dropping the page cache, mounting) and mkfs.ext4, losetup, mount,
/// umount.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    unavailable_for(euid, |prog| on_path(prog).is_some())
}

/// [`unavailable`] for a given effective user and set of programs.
pub fn unavailable_for(euid: u32, have: impl Fn(&str) -> bool) -> Option<String> {
    if euid != 0 {
        return Some(
            "not root: the settled method drops the page cache and mounts loop file systems; \
             figures are warm-cache instead (run as root, or pass --no-settle to choose this)"
                .into(),
        );
    }
    let missing: Vec<&str> = ["mkfs.ext4", "losetup", "mount", "umount"]
        .into_iter()
        .filter(|p| !have(p))
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "{} not found (Debian package e2fsprogs / mount): figures are warm-cache instead",
            missing.join(", ")
        ));
    }
    None
}

/// `prog` in a directory of `PATH` (or the sbin directories root has).
fn on_path(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Write back dirty pages and drop the page cache, dentries and inodes.
pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", b"3\n")
        .context("cannot drop the page cache (/proc/sys/vm/drop_caches)")
}

/// The loop file system's size, and an inode count when mkfs.ext4's default
/// would not hold the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ImageSize {
    pub bytes: u64,
    pub inodes: Option<u64>,
}

/// The size rule: the blocks the tree occupies on ext4 (each file rounded
/// up to whole blocks, a block per directory or symlink), twice that again
/// as free space, and room for metadata; whole MiB. Inodes: the entries and
/// a quarter more, passed only when the default ratio gives fewer.
///
/// Why twice: ext4 delays allocating the blocks of buffered writes, and
/// once its dirty, still unallocated blocks exceed half its free blocks
/// (`ext4_nonda_switch`) the writing thread starts write-back of the whole
/// file system and waits for it. A restore leaves its whole tree dirty, so
/// an image with less free space than twice the tree stalls every tool's
/// writes part-way, as no user's roomy disk does. Measured with the
/// earlier rule (a quarter more: 3.41 GB for the 2.29 GB /usr copy): one
/// Tessera writer waited 0.95 s in `wb_wait_for_completion`; against an
/// 8 GB image, settled pairs took Tessera 3.39/3.08 → 3.23/2.99 s, restic
/// 7.10/7.01 → 7.06/6.94 s and `cp -a` 6.07/5.00 → 4.72/4.25 s.
pub fn image_size_for(file_bytes_in_blocks: u64, other_entries: u64, files: u64) -> ImageSize {
    let used = file_bytes_in_blocks + other_entries * BLOCK;
    let bytes = (3 * used + METADATA_ROOM).div_ceil(1 << 20) << 20;
    let entries = files + other_entries;
    let want = entries + entries / 4 + 1024;
    let inodes = (bytes / DEFAULT_INODE_RATIO < want).then_some(want);
    ImageSize { bytes, inodes }
}

/// Refuse, before writing anything, an image of `bytes` that the file
/// system of `dir` cannot hold (blocks an unprivileged user may still use).
fn room_for(dir: &Path, bytes: u64) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a zeroed out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot read the free space of {}", dir.display()));
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    if free < bytes {
        bail!(
            "{} has {:.2} GB free, the restores' loop image needs {:.2} GB \
             (the tree and twice its size free, see settle.rs): free some space, \
             choose another --work, or pass --no-settle",
            dir.display(),
            free as f64 / 1e9,
            bytes as f64 / 1e9
        );
    }
    Ok(())
}

/// [`image_size_for`] the tree at `root`.
pub fn image_size(root: &Path) -> Result<ImageSize> {
    let (mut in_blocks, mut others, mut files) = (0u64, 0u64, 0u64);
    let dirs = walk(root, |e, ft| {
        if ft.is_file() {
            files += 1;
            in_blocks += e.metadata()?.len().div_ceil(BLOCK) * BLOCK;
        } else if !ft.is_dir() {
            others += 1;
        }
        Ok(())
    })?;
    Ok(image_size_for(in_blocks, others + dirs, files))
}

/// Visit every entry under `root` (directories too, symlinks not
/// followed), depth first; returns how many directories were read, `root`
/// included. The harness's one tree walk.
pub fn walk(
    root: &Path,
    mut each: impl FnMut(&fs::DirEntry, fs::FileType) -> Result<()>,
) -> Result<u64> {
    let mut dirs = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        dirs += 1;
        for e in fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let e = e?;
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(e.path());
            }
            each(&e, ft)?;
        }
    }
    Ok(dirs)
}

/// A loop image that is made into a fresh ext4 for each use. Dropping it
/// unmounts it and deletes the image (the harness does so after the last
/// timed step).
pub struct LoopFs {
    image: PathBuf,
    mount: PathBuf,
    size: ImageSize,
    /// The loop device the image is attached to while mounted.
    device: Option<String>,
}

impl LoopFs {
    /// Make the image at `image`, zero-filled to `size.bytes` (every block
    /// allocated now, so no timed step allocates on the host file system);
    /// it is mounted at `mount` by [`LoopFs::fresh`].
    pub fn create(image: &Path, mount: &Path, size: ImageSize) -> Result<LoopFs> {
        if image.exists() {
            bail!("{} exists already", image.display());
        }
        room_for(image.parent().unwrap_or(Path::new(".")), size.bytes)?;
        let fs = LoopFs {
            image: image.to_path_buf(),
            mount: mount.to_path_buf(),
            size,
            device: None,
        };
        let mut f = fs::File::create(image)
            .with_context(|| format!("cannot create {}", image.display()))?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = size.bytes;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            f.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
        fs::create_dir_all(mount)?;
        Ok(fs)
    }

    pub fn size(&self) -> ImageSize {
        self.size
    }

    /// A new ext4 on the image, attached with direct I/O and mounted:
    /// returns the mount point.
    pub fn fresh(&mut self) -> Result<&Path> {
        self.unmount()?;
        let mut losetup = Command::new("losetup");
        losetup
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&self.image);
        let device = output(losetup)?;
        let mut mkfs = Command::new("mkfs.ext4");
        // nodiscard: discarding would punch holes in the image, freeing
        // blocks on the host file system. Inode tables and journal are
        // written now rather than by a kernel thread during the step.
        mkfs.args([
            "-q",
            "-F",
            "-E",
            "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
        ]);
        if let Some(n) = self.size.inodes {
            mkfs.arg("-N").arg(n.to_string());
        }
        mkfs.arg(&device);
        let mut mount = Command::new("mount");
        mount.arg(&device).arg(&self.mount);
        let made = run(mkfs).and_then(|()| run(mount));
        if let Err(e) = made {
            let _ = Command::new("losetup").arg("-d").arg(&device).status();
            return Err(e);
        }
        self.device = Some(device);
        Ok(&self.mount)
    }

    /// Write back, unmount and detach the loop device (`umount -d`; the
    /// step is over); the image stays.
    pub fn unmount(&mut self) -> Result<()> {
        if self.device.is_some() {
            // SAFETY: sync(2) takes no arguments and cannot fail.
            unsafe { libc::sync() };
            let mut umount = Command::new("umount");
            umount.arg("-d").arg(&self.mount);
            run(umount)?;
            self.device = None;
        }
        Ok(())
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.unmount().is_err() {
            // Busy (an interrupted tool still inside): detach lazily so the
            // image can go.
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
            if let Some(device) = self.device.take() {
                let _ = Command::new("losetup").arg("-d").arg(device).status();
            }
        }
        let _ = fs::remove_file(&self.image);
        let _ = fs::remove_dir(&self.mount);
    }
}

/// Unmount `mount` if a file system is mounted there (one left by a
/// comparison that was killed before it could clean up).
pub fn unmount_stale(mount: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(m), Some(parent)) = (fs::metadata(mount), mount.parent()) else {
        return Ok(());
    };
    if m.dev() != fs::metadata(parent)?.dev() {
        let mut umount = Command::new("umount");
        umount.arg("-d").arg(mount);
        run(umount)?;
    }
    Ok(())
}

/// Run `cmd` and return its standard output, trimmed.
fn output(mut cmd: Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} {:?} failed: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn run(cmd: Command) -> Result<()> {
    output(cmd).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn image_holds_the_tree_with_headroom() {
        // The usr tree: 2.29 GB in 68.5 k files, ~9 k directories.
        let s = image_size_for(2_350_000_000, 9_000, 68_505);
        let used = 2_350_000_000 + 9_000 * BLOCK;
        // Free space after the tree: twice the tree, so ext4 never falls
        // back to write-back from the writing thread.
        assert!(s.bytes - used - METADATA_ROOM >= 2 * used);
        assert!(s.bytes < 3 * used + METADATA_ROOM + (1 << 20));
        assert_eq!(s.bytes % (1 << 20), 0);
        // The default ratio gives ~180 k inodes: enough, so none is asked.
        assert_eq!(s.inodes, None);
    }

    #[test]
    fn many_small_files_ask_for_inodes() {
        // 200 k files of one block: the default ratio gives ~68 k inodes.
        let s = image_size_for(200_000 * BLOCK, 1_000, 200_000);
        let n = s.inodes.expect("inodes for a tree of tiny files");
        assert!(n >= 201_000 + 201_000 / 4);
    }

    #[test]
    fn an_empty_tree_still_gets_metadata_room() {
        let s = image_size_for(0, 1, 0);
        assert!(s.bytes >= METADATA_ROOM);
    }

    #[test]
    fn size_of_a_real_tree_rounds_files_to_blocks() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("sub")).unwrap();
        fs::write(d.path().join("a"), [1u8; 10]).unwrap();
        fs::write(d.path().join("sub/b"), vec![2u8; 5000]).unwrap();
        std::os::unix::fs::symlink("a", d.path().join("l")).unwrap();
        // 1 + 2 blocks of file data; root, sub and the symlink.
        assert_eq!(
            image_size(d.path()).unwrap(),
            image_size_for(3 * BLOCK, 3, 2)
        );
    }

    /// The loop devices attached to `image` (`losetup -j`).
    fn loops_of(image: &Path) -> Vec<String> {
        let mut c = Command::new("losetup");
        c.arg("-j").arg(image);
        output(c)
            .unwrap()
            .lines()
            .filter_map(|l| l.split(':').next())
            .filter(|d| !d.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Needs root, mkfs.ext4 and loop devices: `cargo test -p tessera-lab
    /// -- --ignored fresh_file_system`.
    #[test]
    #[ignore = "needs root and loop devices"]
    fn fresh_file_system_every_time_and_nothing_left() {
        assert_eq!(unavailable(), None, "run as root with mkfs.ext4 and mount");
        let d = tempfile::tempdir().unwrap();
        let (image, mnt) = (d.path().join("t.img"), d.path().join("mnt"));
        let size = image_size_for(1 << 20, 1, 1);
        let mut fs = LoopFs::create(&image, &mnt, size).unwrap();
        assert_eq!(fs::metadata(&image).unwrap().len(), size.bytes);
        let at = fs.fresh().unwrap().to_path_buf();
        fs::write(at.join("left-over"), b"x").unwrap();
        let at = fs.fresh().unwrap().to_path_buf();
        // A new file system: only mkfs's lost+found.
        let names: Vec<_> = fs::read_dir(&at)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["lost+found"]);
        // Attached once, with direct I/O.
        let attached = loops_of(&image);
        assert_eq!(attached.len(), 1, "{attached:?}");
        let dio = format!(
            "/sys/block/{}/loop/dio",
            attached[0].trim_start_matches("/dev/")
        );
        assert_eq!(fs::read_to_string(dio).unwrap().trim(), "1");
        // The image keeps its blocks (nodiscard): nothing freed on the host.
        let blocks = fs::metadata(&image).unwrap().blocks() * 512;
        assert!(blocks >= size.bytes, "{blocks} < {}", size.bytes);
        fs.unmount().unwrap();
        assert!(fs::read_dir(&mnt).unwrap().next().is_none());
        // Detached: no loop device is left holding the image.
        assert_eq!(loops_of(&image), Vec::<String>::new());
        fs.fresh().unwrap();
        drop(fs);
        assert!(!image.exists() && !mnt.exists());
    }

    #[test]
    fn an_image_larger_than_the_free_space_is_refused() {
        let d = tempfile::tempdir().unwrap();
        room_for(d.path(), 1 << 20).unwrap();
        let e = room_for(d.path(), u64::MAX).expect_err("refused");
        assert!(e.to_string().contains("needs"), "{e}");
        assert!(room_for(&d.path().join("missing"), 1).is_err());
    }

    #[test]
    fn not_root_is_refused_with_the_way_out() {
        let why = unavailable_for(1000, |_| true).expect("refused");
        assert!(why.contains("not root"), "{why}");
        assert!(why.contains("--no-settle"), "{why}");
        assert!(why.contains("warm-cache"), "{why}");
    }

    #[test]
    fn missing_programs_are_named() {
        let why = unavailable_for(0, |p| p != "mkfs.ext4").expect("refused");
        assert!(why.starts_with("mkfs.ext4 not found"), "{why}");
        assert_eq!(unavailable_for(0, |_| true), None);
    }
}
