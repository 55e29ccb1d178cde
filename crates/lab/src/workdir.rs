//! One `lab run` per work directory at a time.
//!
//! Why: each approach's local repository is `<work>/repos/<approach>`, and
//! opening it removes whatever is there. A second run given the same
//! `--out` would remove the first run's repository under its running
//! writer, which goes on and fails much later, at the first read of a lost
//! container. An advisory lock (`flock`) held for the whole run refuses
//! the second run at once; the kernel drops it when the process ends, so a
//! killed run leaves nothing to clean up.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// The lock file's name inside the work directory.
const LOCK_NAME: &str = ".lab-run.lock";

/// Held while a run uses its work directory; released on drop.
#[derive(Debug)]
pub struct WorkDirLock {
    _file: File,
}

impl WorkDirLock {
    /// Take the work directory `work` (created if missing) for this
    /// process, or fail naming the process that holds it.
    pub fn acquire(work: &Path) -> Result<Self> {
        std::fs::create_dir_all(work)
            .with_context(|| format!("cannot create {}", work.display()))?;
        let path = work.join(LOCK_NAME);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        if !try_lock(&file) {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            bail!(
                "{} is in use by another `tessera lab run` (process {}); give this run another --out",
                work.display(),
                holder.trim()
            );
        }
        file.set_len(0)
            .and_then(|()| write!(file, "{}", std::process::id()))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(WorkDirLock { _file: file })
    }
}

/// An exclusive `flock` on `file` without waiting; false if another open
/// file description holds it.
fn try_lock(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor; flock passes no memory.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_run_on_the_same_work_directory_is_refused_until_the_first_ends() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("out/work");
        let first = WorkDirLock::acquire(&work).unwrap();
        let err = WorkDirLock::acquire(&work).unwrap_err().to_string();
        assert!(err.contains("in use by another"), "{err}");
        assert!(
            err.contains(&std::process::id().to_string()),
            "names the holder: {err}"
        );
        // Another work directory is free.
        let other = WorkDirLock::acquire(&dir.path().join("other/work")).unwrap();
        drop(first);
        WorkDirLock::acquire(&work).unwrap();
        drop(other);
    }
}
