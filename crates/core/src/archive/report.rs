//! What a walk and an extraction report: [`TreeStats`] and
//! [`ExtractReport`] (with its [`Refused`] entries).

use serde::Serialize;

/// Summary of a serialized tree.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TreeStats {
    /// Regular files stored with their content (first path of each inode).
    pub files: u64,
    /// Directories, the root excluded.
    pub dirs: u64,
    pub symlinks: u64,
    /// Paths stored as a hard link to an earlier path.
    pub hardlinks: u64,
    /// File content bytes (the sum of the regular files' sizes).
    pub bytes: u64,
    /// Fifos and device nodes.
    pub specials: u64,
    /// Paths left out of the stream, as `path: reason` (sockets, files that
    /// vanished during the walk).
    pub skipped: Vec<String>,
    /// Paths that could not be read (permission denied), as `path: error`:
    /// left out, so the backup is incomplete (the CLI exits with status 3).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// An entry [`extract`](super::extract()) did not restore, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Refused {
    /// The entry's path as written in the stream (lossily decoded as UTF-8).
    pub path: String,
    pub reason: String,
}

/// What [`extract`](super::extract()) restored.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExtractReport {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    /// Fifos and device nodes.
    pub specials: u64,
    /// File content bytes written.
    pub bytes: u64,
    /// Entries skipped for safety or because they are unsupported.
    pub refused: Vec<Refused>,
    /// `--include` paths that matched no entry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unmatched: Vec<String>,
}
