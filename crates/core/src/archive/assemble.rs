//! A directory backup's stream back into the tar stream users get
//! (`restore --stdout`) and extraction reads: the metadata records, read
//! first, give the headers; the content section gives each file's bytes.

use std::io::{self, Write};

use super::extract::Listed;
use super::meta::{Kind, Record, SUBJECT};
use super::serialize::TarOut;
use super::walk::TreeOut;
use crate::error::{Error, Result};

/// Write the tar stream of a directory backup: feed it the backup's stream
/// (its first `content_bytes` are the files' contents in record order; the
/// metadata after them is ignored), then call [`TarAssembler::finish`].
pub(crate) struct TarAssembler<W: Write> {
    tar: TarOut<W>,
    records: Vec<Record>,
    next: usize,
    /// Bytes left of the file being written, if inside one.
    in_file: Option<u64>,
    /// Content bytes not yet fed.
    content_left: u64,
}

impl<W: Write> TarAssembler<W> {
    /// Refuses records whose file sizes do not add up to `content_bytes`.
    pub(crate) fn new(out: W, records: Vec<Record>, content_bytes: u64) -> Result<Self> {
        let sum = records
            .iter()
            .filter(|r| r.kind == Kind::File)
            .try_fold(0u64, |a, r| a.checked_add(r.size));
        if sum != Some(content_bytes) {
            return Err(Error::corrupt(
                SUBJECT,
                format!(
                    "file sizes add up to {}, the backup holds {content_bytes} content bytes",
                    sum.map_or("more than 2^64".into(), |s| s.to_string())
                ),
            ));
        }
        Ok(TarAssembler {
            tar: TarOut::new(out),
            records,
            next: 0,
            in_file: None,
            content_left: content_bytes,
        })
    }

    /// Write the headers of the entries before the next file with contents
    /// (and that file's header).
    fn advance(&mut self) -> io::Result<()> {
        while self.in_file.is_none() && self.next < self.records.len() {
            let r = &self.records[self.next];
            self.tar.entry(r)?;
            if r.kind == Kind::File && r.size > 0 {
                self.in_file = Some(r.size);
            } else {
                self.next += 1;
            }
        }
        Ok(())
    }

    /// The remaining headers and the end-of-archive marker.
    pub(crate) fn finish(mut self) -> Result<W> {
        let short = |left| {
            Error::corrupt(
                SUBJECT,
                format!("the content section ends {left} bytes early"),
            )
        };
        if self.content_left > 0 {
            return Err(short(self.content_left));
        }
        self.advance().map_err(write_error)?;
        if let Some(left) = self.in_file {
            return Err(short(left));
        }
        self.tar.finish().map_err(write_error)
    }
}

fn write_error(e: io::Error) -> Error {
    Error::io("cannot write restored data", e)
}

impl<W: Write> Write for TarAssembler<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len();
        let mut data = &data[..(self.content_left.min(n as u64) as usize)];
        self.content_left -= data.len() as u64;
        while !data.is_empty() {
            self.advance()?;
            let Some(left) = self.in_file else {
                // Cannot happen once `new` checked the sizes.
                return Err(io::Error::other("contents beyond the last file"));
            };
            let k = left.min(data.len() as u64) as usize;
            self.tar.write_all(&data[..k])?;
            data = &data[k..];
            if left == k as u64 {
                let r = &self.records[self.next];
                self.tar.file_end(r, true)?;
                self.in_file = None;
                self.next += 1;
            } else {
                self.in_file = Some(left - k as u64);
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tar.flush()
    }
}

/// An entry as `tessera ls` shows it.
pub(crate) fn listed(r: &Record) -> Listed {
    let kind = match r.kind {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "symlink",
        Kind::Hardlink => "hardlink",
        Kind::Fifo => "fifo",
        Kind::CharDevice => "chardev",
        Kind::BlockDevice => "blockdev",
    };
    let has_link = matches!(r.kind, Kind::Symlink | Kind::Hardlink);
    Listed {
        path: String::from_utf8_lossy(&r.path).into_owned(),
        kind,
        size: r.size,
        mode: r.mode,
        mtime: u64::try_from(r.mtime).unwrap_or(0),
        link: has_link.then(|| String::from_utf8_lossy(&r.link).into_owned()),
    }
}

/// Paths of the files whose contents overlap one of `ranges` (offsets in
/// the backup's stream, whose first `content_bytes` are contents); damage
/// in the metadata after them is named as such.
pub(crate) fn paths_overlapping(
    records: &[Record],
    content_bytes: u64,
    ranges: &[(u64, u64)],
) -> Vec<String> {
    let overlaps = |a: u64, z: u64| ranges.iter().any(|&(o, l)| o < z && o + l > a);
    let mut out = Vec::new();
    let mut at = 0u64;
    for r in records.iter().filter(|r| r.kind == Kind::File) {
        if r.size > 0 && overlaps(at, at + r.size) {
            out.push(String::from_utf8_lossy(&r.path).into_owned());
        }
        at += r.size;
    }
    if overlaps(content_bytes, u64::MAX) {
        out.push("(the directory metadata: names, modes, owners and times)".into());
    }
    out
}
