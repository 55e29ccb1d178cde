//! Directory trees: the walk, the directory stream's metadata, the
//! deterministic tar stream, and its safe extraction.
//!
//! A directory backup stores its files' contents apart from their metadata
//! (see [`meta`] and `docs/FORMAT.md`, "Backup streams"): the walk
//! ([`walk`]) feeds the ingest each file's contents, which are chunked on
//! their own, and records every entry; the records follow the contents as
//! the metadata section. Restores turn the two back into the tar stream
//! described below (`restore --stdout` can be piped into any `tar`, and
//! extraction reads it), which [`write_tree`] also writes straight from a
//! walk.
//!
//! # Tar stream format (what [`write_tree`] writes and restores give)
//!
//! * GNU tar headers (`ustar  ` magic). Paths of 100 bytes or more use a GNU
//!   `././@LongLink` `L` record, link targets of 100 bytes or more a `K`
//!   record; sizes, uids, gids and mtimes too large for octal use the GNU
//!   base-256 encoding, so files over 8 GiB work.
//! * Entries are paths relative to the root, `/`-separated, directories with a
//!   trailing `/`. There is no entry for the root itself. The stream is sorted
//!   by these path bytes, which is also a depth-first walk: every directory
//!   entry comes just before its contents.
//! * Each header records the permission bits (`mode & 0o7777`), the mtime in
//!   whole seconds (times before 1970 are stored as 0: see PAX below), the numeric uid and
//!   gid; user and group names, atime and ctime are left empty so that a walk
//!   of the same tree by another user or at another time gives the same bytes.
//! * Regular files, directories (empty ones included), symlinks (target bytes
//!   verbatim, never followed) and hard links: the first path of an inode with
//!   more than one link, in stream order, is a regular file and later paths are
//!   `Link` entries naming it. Fifos and character and block devices are
//!   stored (type `6`, `3`, `4`, device numbers in the header); sockets are
//!   not, and are listed in [`TreeStats::skipped`]. Sparseness is not
//!   recorded.
//! * An entry with a sub-second or pre-1970 mtime or with extended
//!   attributes (POSIX ACLs included) is preceded by a PAX `x` record:
//!   `mtime` with nine fraction digits, `SCHILY.xattr.NAME` per attribute
//!   (as GNU tar writes them, `%` and `=` in names escaped).
//! * A file that changes size while it is read is stored with the size seen
//!   when it was opened: zero-filled if it shrank, cut if it grew, so that the
//!   stream stays well-formed.
//! * The stream ends with two zero blocks and no further record padding.
//!
//! # Extraction
//!
//! [`extract`] treats the stream as hostile: entries that would land outside
//! the target, write through a symlink, or overwrite an existing file are
//! refused one by one (listed in [`ExtractReport::refused`]) while the rest is
//! restored. Symlinks are restored as stored, whatever they point to: every
//! entry is created relative to an open directory handle, never following a
//! symlink, so none can lead a later entry out. Malformed streams are errors,
//! never panics.

pub(crate) mod assemble;
mod dirfd;
mod extract;
pub mod input;
pub mod meta;
mod packed;
mod parts;
mod report;
mod select;
mod serialize;
#[cfg(test)]
mod tests;
pub(crate) mod walk;
mod xattr;

pub(crate) use self::extract::list_with_offsets;
pub use self::extract::{
    extract, extract_from, extract_selected, extract_with, include_paths, list, Listed,
};
pub use self::input::{Input, Shared};
pub use self::meta::{Kind, Record};
pub use self::report::{ExtractReport, Refused, TreeStats};
pub use self::select::Selection;
pub use self::serialize::write_tree;
pub use self::walk::{FileId, Scan};
