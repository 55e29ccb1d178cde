//! The in-memory index kept across openings (issue 36): a *kept table* is
//! one repository's in-memory data and recipe tables, written as files in
//! their in-memory form ([`crate::fptable::TableShape`]) plus the copy
//! lists, in the cache directory as of one manifest generation. An opening
//! maps the tables privately instead of reading every index segment and
//! building them (which fills ~0.8 GB of fresh memory at 14 M entries),
//! and applies only the index segments listed since. Pages are read as
//! lookups touch them; an opening's changes stay in its process.
//!
//! Layout: `<index dir>/table-<16 hex digits of XXH3(repo id, location)>/`
//! holds immutable files under unique names (`data-*`, `recipe-*`,
//! `side-*`) and `state`, the framed, checksummed description naming them
//! (each table file with its shape and the XXH3-128 of each 64 MiB piece).
//! It is used under the run set's rules ([`super::runset`]): `state`
//! names this repository and location and the table format of this build,
//! lists index segments the manifest still lists first, in order, and
//! containers the manifest still lists; every file has its length and
//! checksums (every piece verified at every opening, on every core).
//! Anything else is rebuilt from the segments, never trusted: private,
//! disposable state. Saves are the run set's too: new files under new
//! names, `state` renamed over atomically, one save at a time
//! (`save.lock`), only the saver removes what its state does not name; a
//! reader that opened a file keeps it while it maps it.

use super::disk::KeptFile;
use super::runset::{
    all_listed, begin_save, io_error, kept_dir, ranges, read_kept_state, remove_unused_sets,
    unique, Basis, Lag, LOCK, STATE,
};
use super::{decode_segment, encode_segment, Index};
use crate::error::{Error, Result};
use crate::fptable::{FpTable, TableShape, KEPT_FORMAT};
use crate::framing::checksum;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"TSRATABL";
const VERSION: u32 = 1;
/// A table file is checksummed in pieces of this size, verified in
/// parallel.
const PIECE: u64 = 64 << 20;

/// One kept table file: its shape and the checksum of each piece.
#[derive(serde::Serialize, serde::Deserialize)]
struct TableFile {
    name: String,
    shape: TableShape,
    /// XXH3-128 of each [`PIECE`] bytes of the file, in order.
    sums: Vec<[u8; 16]>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct State {
    repo_id: String,
    location: String,
    generation: u64,
    segments: Vec<String>,
    /// Listed containers as half-open id ranges.
    containers: Vec<(u64, u64)>,
    /// The tables' byte format ([`KEPT_FORMAT`]).
    format: String,
    data: TableFile,
    recipe: TableFile,
    /// The copy lists, as an index segment.
    side: KeptFile,
}

/// Whether an opening that applied `lag` on top of a kept table should
/// save it again. Applying entries to a mapped table copies each slot page
/// it writes, and a save writes the whole table (~0.8 GB at 14 M entries):
/// so a table is saved once the lag reaches a 256th of it (~55 k entries at
/// 14 M, whose inserts copy ~0.2 GB of pages) or
/// [`Lag::MAX_SEGMENTS`] segments; a small backup's segment is applied
/// again by each opening (~1 ms).
pub fn worth_saving(lag: &Lag) -> bool {
    lag.segments > 0 && (lag.segments >= Lag::MAX_SEGMENTS || lag.entries * 256 >= lag.table.max(1))
}

/// Say on a terminal why an opening builds the table (seconds on a large
/// index).
pub fn say_rebuilding(reason: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("tessera: building the index table from its segments ({reason})");
    }
}

/// One repository's kept table directory.
pub struct KeptTable {
    dir: PathBuf,
}

/// A writer computing the checksum of each [`PIECE`] of what it writes.
struct Pieces<W: Write> {
    out: W,
    piece: u64,
    hash: xxhash_rust::xxh3::Xxh3,
    in_piece: u64,
    sums: Vec<[u8; 16]>,
}

impl<W: Write> Pieces<W> {
    fn new(out: W, piece: u64) -> Self {
        Pieces {
            out,
            piece,
            hash: xxhash_rust::xxh3::Xxh3::new(),
            in_piece: 0,
            sums: Vec::new(),
        }
    }
    /// The sums, the last (partial) piece's included.
    fn finish(mut self) -> std::io::Result<(W, Vec<[u8; 16]>)> {
        if self.in_piece > 0 {
            self.sums.push(self.hash.digest128().to_le_bytes());
        }
        self.out.flush()?;
        Ok((self.out, self.sums))
    }
}

impl<W: Write> Write for Pieces<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min((self.piece - self.in_piece) as usize);
        let n = self.out.write(&buf[..n])?;
        self.hash.update(&buf[..n]);
        self.in_piece += n as u64;
        if self.in_piece == self.piece {
            self.sums.push(self.hash.digest128().to_le_bytes());
            self.hash.reset();
            self.in_piece = 0;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl KeptTable {
    /// The kept table of a repository under `base` (the index directory).
    pub fn of(base: &Path, repo_id: &str, location: &str) -> KeptTable {
        KeptTable {
            dir: kept_dir(base, "table-", repo_id, location),
        }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether a table of any generation is kept here (its state file
    /// exists; whether it can be used is for [`load`](Self::load)).
    pub fn is_kept(&self) -> bool {
        self.dir.join(STATE).exists()
    }

    fn read_state(&self) -> std::result::Result<State, String> {
        read_kept_state(&self.dir, (MAGIC, VERSION), "kept table")
    }

    /// The kept index if it can stand for `basis`, and how many of its
    /// segments it already holds; else why not (the caller rebuilds).
    pub fn load(&self, basis: &Basis) -> std::result::Result<(Index, usize), String> {
        // A save may remove the files of the state just read: read the
        // new state once more.
        match self.load_once(basis) {
            Err((_, true)) => self.load_once(basis),
            r => r,
        }
        .map_err(|(reason, _)| reason)
    }

    /// [`load`](Self::load), once; an error says whether a file was missing.
    fn load_once(&self, basis: &Basis) -> std::result::Result<(Index, usize), (String, bool)> {
        let s = self.read_state().map_err(|r| (r, false))?;
        let stale = |r: String| (r, false);
        if s.repo_id != basis.repo_id || s.location != basis.location {
            return Err(stale(format!(
                "kept for repository {} at {}",
                s.repo_id, s.location
            )));
        }
        if s.format != KEPT_FORMAT {
            return Err(stale(format!("kept in another format ({})", s.format)));
        }
        let n = s.segments.len();
        if n > basis.segments.len() || s.segments[..] != basis.segments[..n] {
            return Err(stale(format!(
                "kept at generation {}, whose index segments were since replaced",
                s.generation
            )));
        }
        if !all_listed(&s.containers, basis.containers) {
            return Err(stale(format!(
                "kept at generation {}, whose containers were since removed",
                s.generation
            )));
        }
        let side = self.read_checked(&s.side)?;
        let side =
            decode_segment(&side, &s.side.name).map_err(|e| (format!("damaged: {e}"), false))?;
        let data = self.map(&s.data)?;
        let recipe = self.map(&s.recipe)?;
        Ok((Index::from_tables(data, recipe, side), n))
    }

    /// A kept file's bytes, checked against its length and checksum.
    fn read_checked(&self, f: &KeptFile) -> std::result::Result<Vec<u8>, (String, bool)> {
        let path = self.dir.join(&f.name);
        let b = std::fs::read(&path).map_err(|e| {
            let missing = e.kind() == std::io::ErrorKind::NotFound;
            (format!("damaged: {}: {e}", path.display()), missing)
        })?;
        if b.len() as u64 != f.len || checksum(&b) != f.sum {
            return Err((
                format!("damaged: {}: checksum mismatch", path.display()),
                false,
            ));
        }
        Ok(b)
    }

    /// A kept table file, every piece verified (on every core), mapped.
    fn map(&self, f: &TableFile) -> std::result::Result<FpTable, (String, bool)> {
        let path = self.dir.join(&f.name);
        let damaged = |what: String| (format!("damaged: {}: {what}", path.display()), false);
        let file = std::fs::File::open(&path).map_err(|e| {
            let missing = e.kind() == std::io::ErrorKind::NotFound;
            (format!("damaged: {}: {e}", path.display()), missing)
        })?;
        let len = file.metadata().map_err(|e| damaged(e.to_string()))?.len();
        if len != f.shape.file_len() || f.sums.len() as u64 != len.div_ceil(PIECE) {
            return Err(damaged(format!("{len} bytes, not its shape's")));
        }
        if len > 0 {
            // SAFETY: a kept file is never rewritten (saves write new
            // names); this mapping only reads it and is dropped here.
            let bytes = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
                .map_err(|e| damaged(e.to_string()))?;
            if !verify_pieces(&bytes, &f.sums, PIECE) {
                return Err(damaged("checksum mismatch".into()));
            }
        }
        FpTable::map_kept(&file, &f.shape).map_err(damaged)
    }

    /// Keep `index` (an in-memory one, standing for `basis`) for later
    /// openings. Returns whether it saved: not when another process is
    /// saving, nor over a table kept at a newer generation.
    pub fn save(&self, index: &Index, basis: &Basis) -> Result<bool> {
        let Some((data, recipe)) = index.tables() else {
            return Err(Error::invalid("only an in-memory index is kept as a table"));
        };
        let kept = || self.read_state().ok().map(|s| s.generation);
        let Some(_lock) = begin_save(&self.dir, basis.generation, kept)? else {
            return Ok(false);
        };
        let data = self.write_table("data", data)?;
        let recipe = self.write_table("recipe", recipe)?;
        let side = encode_segment(&index.copy_entries());
        let side_name = unique("side");
        let side_path = self.dir.join(&side_name);
        std::fs::write(&side_path, &side).map_err(|e| io_error(&side_path, e))?;
        let state = State {
            repo_id: basis.repo_id.into(),
            location: basis.location.into(),
            generation: basis.generation,
            segments: basis.segments.to_vec(),
            containers: ranges(basis.containers),
            format: KEPT_FORMAT.into(),
            data,
            recipe,
            side: KeptFile {
                name: side_name,
                len: side.len() as u64,
                sum: checksum(&side),
            },
        };
        let json = serde_json::to_vec(&state).map_err(|e| Error::invalid(e.to_string()))?;
        let tmp = self.dir.join(unique("state.tmp"));
        let framed = crate::framing::encode(MAGIC, VERSION, &json);
        std::fs::write(&tmp, framed).map_err(|e| io_error(&tmp, e))?;
        let to = self.dir.join(STATE);
        std::fs::rename(&tmp, &to).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io_error(&to, e)
        })?;
        self.remove_unnamed(&state);
        remove_unused_sets(self.dir.parent(), &self.dir, "table-");
        Ok(true)
    }

    /// A table written to a new file (removed again if writing fails).
    fn write_table(&self, what: &str, table: &FpTable) -> Result<TableFile> {
        let name = unique(what);
        let path = self.dir.join(&name);
        let written = (|| {
            let file = std::fs::File::create(&path)?;
            let mut w = Pieces::new(std::io::BufWriter::with_capacity(1 << 20, file), PIECE);
            let shape = table.write_kept(&mut w)?;
            let (_, sums) = w.finish()?;
            Ok(TableFile {
                name: name.clone(),
                shape,
                sums,
            })
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&path);
            io_error(&path, e)
        })
    }

    /// Remove the files `state` does not name (earlier tables, files of
    /// saves that died). Only a saver holding the lock does.
    fn remove_unnamed(&self, state: &State) {
        let named: std::collections::HashSet<&str> = [
            STATE,
            LOCK,
            &state.data.name,
            &state.recipe.name,
            &state.side.name,
        ]
        .into();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_name().to_str().is_some_and(|n| named.contains(n)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Whether every `piece` bytes of `bytes` have their sum, checked on
/// every core.
fn verify_pieces(bytes: &[u8], sums: &[[u8; 16]], piece: u64) -> bool {
    let pieces: Vec<&[u8]> = bytes.chunks(piece as usize).collect();
    if pieces.len() != sums.len() {
        return false;
    }
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(pieces.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let bad = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= pieces.len() || bad.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                if checksum(pieces[i]) != sums[i] {
                    bad.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    !bad.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_lag_is_not_worth_saving_the_table() {
        let lag = |segments, entries, table| Lag {
            segments,
            entries,
            table,
        };
        assert!(!worth_saving(&lag(0, 0, 0)), "nothing applied");
        assert!(!worth_saving(&lag(1, 2, 14_000_000)), "one small backup");
        assert!(!worth_saving(&lag(15, 50_000, 14_000_000)));
        assert!(worth_saving(&lag(16, 16, 14_000_000)), "many segments");
        assert!(worth_saving(&lag(1, 60_000, 14_000_000)), "a 256th");
        assert!(worth_saving(&lag(1, 1, 0)), "an empty table");
    }

    /// Pieces of a written stream have the sums of its slices, whatever
    /// the write sizes.
    #[test]
    fn piece_sums_match_the_bytes() {
        let piece = 1 << 16;
        let bytes: Vec<u8> = (0..(piece as usize * 2 + 12345))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let mut w = Pieces::new(Vec::new(), piece);
        for part in bytes.chunks(7_003) {
            w.write_all(part).unwrap();
        }
        let (out, sums) = w.finish().unwrap();
        assert_eq!(out, bytes);
        assert_eq!(sums.len(), 3);
        assert!(verify_pieces(&bytes, &sums, piece));
        let mut bad = bytes.clone();
        bad[piece as usize + 5] ^= 1;
        assert!(!verify_pieces(&bad, &sums, piece));
        assert!(!verify_pieces(&bytes[..bytes.len() - 1], &sums, piece));
        assert!(!verify_pieces(&bytes[..piece as usize * 2], &sums, piece));
    }
}
