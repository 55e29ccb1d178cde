//! [`Selection`]: what a directory backup leaves out.
//!
//! Contract between the walker (issue 19: the directory stream) and the
//! CLI's choosing options (issue 13: `--exclude`, `--iexclude`,
//! `--exclude-file`, `--exclude-caches`, `--exclude-if-present`,
//! `--one-file-system`). The walker asks [`Selection::excludes`] for every
//! entry below a backup path and [`Selection::skips_dir`] for every
//! directory before reading it; an excluded entry is not stored at all (a
//! directory: nor anything below it), and is not an error.

use std::path::Path;

/// What a directory backup leaves out. The default leaves out nothing.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Do not cross into other file systems below a backup path (the mount
    /// points themselves are stored, empty).
    pub one_file_system: bool,
}

impl Selection {
    /// Whether the entry at `rel` is left out. `rel` is the entry's path as
    /// stored (relative, `/`-separated, no trailing `/`); `is_dir` tells
    /// whether it is a directory (patterns ending in `/` match only those).
    pub fn excludes(&self, rel: &[u8], is_dir: bool) -> bool {
        let _ = (rel, is_dir);
        false
    }

    /// Whether the directory at `abs` is left out because of what it
    /// contains (`CACHEDIR.TAG`, `--exclude-if-present NAME`).
    pub fn skips_dir(&self, abs: &Path) -> bool {
        let _ = abs;
        false
    }
}
