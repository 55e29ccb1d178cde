//! The on-disk index kept across openings (issue 36): a *run set* is one
//! repository's disk table (runs, container lists, summary vector,
//! changed-key set) plus the index's small in-memory tables (recipe chunks,
//! copy lists), saved in the cache directory as of one manifest generation.
//! An opening takes it up and applies only the index segments listed since,
//! instead of streaming every segment into a new table.
//!
//! Layout: `<index dir>/runs-<16 hex digits of XXH3(repo id, location)>/`
//! holds immutable data files under unique names and `state`, the framed,
//! checksummed description naming them (each with its length and XXH3-128).
//! A set is used only if its `state` decodes, names this repository and
//! location, lists index segments the manifest still lists first, in order
//! (a compaction replaces them all), and containers the manifest still
//! lists (a GC that removed one may have left entries naming it); and only
//! if every file it names is there, of its length and checksum. Anything
//! else is rebuilt from the segments, never trusted: it is private,
//! disposable state.
//!
//! Concurrency: files are never rewritten; a save writes its new files
//! under new names (hard links of the table's own files), then the state
//! to a temporary name renamed over `state` (atomic), so a reader sees one
//! whole state or the one before. Saves are one at a time (`save.lock`,
//! created exclusively; a save that finds it skips: another process is
//! saving), and only the saver removes files its new state does not name.
//! A reader whose files were removed under it before it linked them finds
//! them missing and rebuilds; once linked into its private directory they
//! live as long as it maps them.

use super::disk::{DiskConfig, DiskTable, Extent, KeptFile, TableFile, TableState};
use super::{decode_segment, encode_segment, Index};
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FP_LEN};
use crate::framing::checksum;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"TSRARUNS";
const VERSION: u32 = 1;
pub(super) const STATE: &str = "state";
pub(super) const LOCK: &str = "save.lock";
/// A save lock older than this was left by a process that died.
const LOCK_STALE: std::time::Duration = std::time::Duration::from_secs(600);
/// Run sets of other repositories unused this long are removed by a save.
const UNUSED: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// What an opening's index must stand for: the repository and the
/// manifest's index segments and containers.
pub struct Basis<'a> {
    pub repo_id: &'a str,
    pub location: &'a str,
    pub generation: u64,
    /// Index segment names, in the manifest's order.
    pub segments: &'a [String],
    /// Listed container ids, ascending.
    pub containers: &'a [u64],
}

#[derive(serde::Serialize, serde::Deserialize)]
struct State {
    repo_id: String,
    location: String,
    generation: u64,
    segments: Vec<String>,
    /// Listed containers as half-open id ranges.
    containers: Vec<(u64, u64)>,
    runs: Vec<(KeptFile, u32)>,
    lists: Vec<KeptFile>,
    extents: Vec<(u64, Vec<Extent>)>,
    bloom: KeptFile,
    bloom_capacity: usize,
    /// Recipe chunks and copy lists, as an index segment.
    side: KeptFile,
    /// Keys changed since inserted; `None`: too many to track.
    shadow: Option<KeptFile>,
    len: u64,
}

/// How far an opening's index is ahead of the run set it took up: the
/// index segments it applied on top, their entries, and the table's size.
#[derive(Clone, Copy, Debug)]
pub struct Lag {
    pub segments: usize,
    pub entries: usize,
    pub table: usize,
}

impl Lag {
    /// Segments past which a lagging set is saved anyway (each opening
    /// reads every segment the set lags by).
    pub const MAX_SEGMENTS: usize = 16;

    /// Whether saving the set is worth its cost. A save rewrites the
    /// summary vector and the side tables (~40 MB at 14 M entries): for a
    /// lag of a few entries (a small backup's segment) that costs several
    /// times what applying them again at the next opening does. So a set
    /// is saved once its lag reaches a 64th of the table (the overlay's
    /// flush size) or [`MAX_SEGMENTS`](Self::MAX_SEGMENTS) segments; until
    /// then openings apply the lag on top of it, as they apply another
    /// host's segments.
    pub fn worth_saving(&self) -> bool {
        self.segments > 0
            && (self.segments >= Self::MAX_SEGMENTS || self.entries * 64 >= self.table.max(1))
    }
}

/// One repository's run set directory.
pub struct RunSet {
    dir: PathBuf,
}

/// Say on a terminal why an opening rebuilds (seconds on a large index).
pub fn say_rebuilding(reason: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("tessera: building the on-disk index from its segments ({reason})");
    }
}

/// The directory of a repository's kept state under `base`: `prefix`
/// and 16 hex digits of XXH3(repo id, location).
pub(super) fn kept_dir(base: &Path, prefix: &str, repo_id: &str, location: &str) -> PathBuf {
    let key = checksum(format!("{repo_id}\0{location}").as_bytes());
    let hex: String = key[..8].iter().map(|b| format!("{b:02x}")).collect();
    base.join(format!("{prefix}{hex}"))
}

/// The framed JSON `state` file of kept state in `dir` (`what`: "run
/// set", "kept table"), or why it cannot be used: missing, damaged, or
/// written by another format version.
pub(super) fn read_kept_state<T: serde::de::DeserializeOwned>(
    dir: &Path,
    (magic, version): (&[u8; 8], u32),
    what: &str,
) -> std::result::Result<T, String> {
    let path = dir.join(STATE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("no {what} kept yet"))
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let name = path.display().to_string();
    let (found, json) =
        crate::framing::decode(&bytes, magic, &format!("{what} state"), &name.into())
            .map_err(|e| format!("damaged: {e}"))?;
    if found != version {
        return Err(format!("kept by another version ({found})"));
    }
    serde_json::from_slice(json).map_err(|e| format!("damaged: {}: {e}", path.display()))
}

pub(super) fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("kept index {}", path.display()), e)
}

/// `ids` (ascending) as half-open ranges.
pub(super) fn ranges(ids: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &i in ids {
        match out.last_mut() {
            Some(r) if r.1 == i => r.1 = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// Whether every id of `ranges` is in `ids` (ascending).
pub(super) fn all_listed(ranges: &[(u64, u64)], ids: &[u64]) -> bool {
    ranges.iter().all(|&(a, b)| {
        let from = ids.partition_point(|&i| i < a);
        // Ids are distinct: the range is all there iff it spans that many.
        let to = ids.partition_point(|&i| i < b);
        to - from == (b - a) as usize
    })
}

impl RunSet {
    /// The run set of a repository under `base` (the index directory).
    pub fn of(base: &Path, repo_id: &str, location: &str) -> RunSet {
        RunSet {
            dir: kept_dir(base, "runs-", repo_id, location),
        }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn read_state(&self) -> std::result::Result<State, String> {
        read_kept_state(&self.dir, (MAGIC, VERSION), "run set")
    }

    /// A kept file's bytes, checked against its length and checksum.
    fn read_checked(&self, f: &KeptFile) -> Result<Vec<u8>> {
        let path = self.dir.join(&f.name);
        let b = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
        if b.len() as u64 != f.len || checksum(&b) != f.sum {
            return Err(Error::corrupt(
                path.display().to_string(),
                "checksum mismatch",
            ));
        }
        Ok(b)
    }

    /// The kept index if it can stand for `basis`, and how many of its
    /// segments it already holds; else why not (the caller rebuilds). The
    /// table's private files go under `base`.
    pub fn load(
        &self,
        basis: &Basis,
        base: &Path,
        cfg: DiskConfig,
    ) -> std::result::Result<(Index, usize), String> {
        let s = self.read_state()?;
        if s.repo_id != basis.repo_id || s.location != basis.location {
            return Err(format!(
                "kept for repository {} at {}",
                s.repo_id, s.location
            ));
        }
        let n = s.segments.len();
        if n > basis.segments.len() || s.segments[..] != basis.segments[..n] {
            return Err(format!(
                "kept at generation {}, whose index segments were since replaced",
                s.generation
            ));
        }
        if !all_listed(&s.containers, basis.containers) {
            return Err(format!(
                "kept at generation {}, whose containers were since removed",
                s.generation
            ));
        }
        let damaged = |e: Error| format!("damaged: {e}");
        let side = self.read_checked(&s.side).map_err(damaged)?;
        let side = decode_segment(&side, &s.side.name).map_err(damaged)?;
        let shadowed = match &s.shadow {
            None => None,
            Some(f) => {
                let b = self.read_checked(f).map_err(damaged)?;
                Some(
                    b.chunks_exact(FP_LEN)
                        .map(|k| Fingerprint(k.try_into().expect("a whole key")))
                        .collect(),
                )
            }
        };
        let bloom = self.read_checked(&s.bloom).map_err(damaged)?;
        let bloom_words = bloom
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("a whole word")))
            .collect();
        let state = TableState {
            runs: s.runs,
            lists: s.lists,
            extents: s.extents,
            bloom_capacity: s.bloom_capacity,
            bloom_words,
            len: s.len,
            shadowed,
        };
        let table = DiskTable::adopt(base, cfg, &self.dir, state).map_err(damaged)?;
        Ok((Index::from_disk(table, side), n))
    }

    /// Keep `index` (an on-disk one, standing for `basis`) for later
    /// openings. Returns whether it saved: not when another process is
    /// saving, nor over a set kept at a newer generation.
    pub fn save(&self, index: &mut Index, basis: &Basis) -> Result<bool> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io_error(&self.dir, e))?;
        // The set lists the repository's fingerprints: the owner's only.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let private = std::fs::Permissions::from_mode(0o700);
            std::fs::set_permissions(&self.dir, private).map_err(|e| io_error(&self.dir, e))?;
        }
        let Some(_lock) = SaveLock::take(&self.dir.join(LOCK))? else {
            return Ok(false);
        };
        if self
            .read_state()
            .is_ok_and(|s| s.generation > basis.generation)
        {
            return Ok(false);
        }
        let side = encode_segment(&index.side_entries());
        let Some(table) = index.disk_table_mut() else {
            return Err(Error::invalid("only an on-disk index is kept"));
        };
        let st = table.state()?;
        let mut names: HashMap<PathBuf, String> = HashMap::new();
        let mut keep = |f: &TableFile, what: &str| -> Result<KeptFile> {
            let name = match &f.kept_as {
                Some(n) if self.dir.join(n).metadata().is_ok_and(|m| m.len() == f.len) => n.clone(),
                _ => {
                    let n = unique(what);
                    let to = self.dir.join(&n);
                    std::fs::hard_link(&f.path, &to).map_err(|e| io_error(&to, e))?;
                    n
                }
            };
            names.insert(f.path.clone(), name.clone());
            Ok(KeptFile {
                name,
                len: f.len,
                sum: f.sum,
            })
        };
        let runs = st
            .runs
            .iter()
            .map(|(f, level)| Ok((keep(f, "run")?, *level)))
            .collect::<Result<Vec<_>>>()?;
        let lists = st
            .lists
            .iter()
            .map(|f| keep(f, "lists"))
            .collect::<Result<Vec<_>>>()?;
        let words: Vec<u8> = st
            .bloom_words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let bloom = self.write_new("bloom", &words)?;
        let side = self.write_new("side", &side)?;
        let shadow = match &st.shadowed {
            None => None,
            Some(keys) => {
                let b: Vec<u8> = keys.iter().flat_map(|k| k.0).collect();
                Some(self.write_new("shadow", &b)?)
            }
        };
        let state = State {
            repo_id: basis.repo_id.into(),
            location: basis.location.into(),
            generation: basis.generation,
            segments: basis.segments.to_vec(),
            containers: ranges(basis.containers),
            runs,
            lists,
            extents: st.extents,
            bloom,
            bloom_capacity: st.bloom_capacity,
            side,
            shadow,
            len: st.len,
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
        if let Some(t) = index.disk_table_mut() {
            t.kept_as(&names);
        }
        self.remove_unnamed(&state);
        remove_unused_sets(self.dir.parent(), &self.dir, "runs-");
        Ok(true)
    }

    /// A new file of `bytes` under a new name.
    fn write_new(&self, what: &str, bytes: &[u8]) -> Result<KeptFile> {
        let name = unique(what);
        let path = self.dir.join(&name);
        std::fs::write(&path, bytes).map_err(|e| io_error(&path, e))?;
        Ok(KeptFile {
            name,
            len: bytes.len() as u64,
            sum: checksum(bytes),
        })
    }

    /// Remove the files `state` does not name (earlier sets, temporaries
    /// of saves that died). Only a saver holding the lock does.
    fn remove_unnamed(&self, state: &State) {
        let mut named: std::collections::HashSet<&str> = [STATE, LOCK].into();
        named.extend(state.runs.iter().map(|(f, _)| f.name.as_str()));
        named.extend(state.lists.iter().map(|f| f.name.as_str()));
        named.extend([state.bloom.name.as_str(), state.side.name.as_str()]);
        named.extend(state.shadow.iter().map(|f| f.name.as_str()));
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

/// Remove other repositories' run sets (or kept tables: directories named
/// `prefix`…) nobody saved for [`UNUSED`] (a
/// repository deleted or moved leaves its set behind).
pub(super) fn remove_unused_sets(base: Option<&Path>, mine: &Path, prefix: &str) {
    let Some(Ok(entries)) = base.map(std::fs::read_dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let is_set = e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(prefix));
        let unused = std::fs::metadata(path.join(STATE))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > UNUSED));
        if is_set && unused && path != mine {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// A name no other file of any process takes: what, process, time, count.
pub(super) fn unique(what: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{what}-{}-{t:x}-{n}", std::process::id())
}

/// The exclusive save lock, removed when dropped.
pub(super) struct SaveLock(PathBuf);

impl SaveLock {
    /// Take it, or `None` if another live save holds it.
    pub(super) fn take(path: &Path) -> Result<Option<SaveLock>> {
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(_) => return Ok(Some(SaveLock(path.to_path_buf()))),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > LOCK_STALE));
                    if !stale {
                        return Ok(None);
                    }
                    let _ = std::fs::remove_file(path);
                }
                Err(e) => return Err(io_error(path, e)),
            }
        }
        Ok(None)
    }
}

impl Drop for SaveLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_lag_is_not_worth_a_save() {
        let lag = |segments, entries, table| Lag {
            segments,
            entries,
            table,
        };
        assert!(!lag(0, 0, 0).worth_saving(), "nothing applied");
        assert!(!lag(1, 2, 14_000_000).worth_saving(), "one small backup");
        assert!(!lag(15, 200_000, 14_000_000).worth_saving());
        assert!(lag(16, 16, 14_000_000).worth_saving(), "many segments");
        assert!(lag(1, 220_000, 14_000_000).worth_saving(), "a 64th");
        assert!(lag(1, 2, 100).worth_saving(), "a small table");
        assert!(lag(1, 1, 0).worth_saving(), "an empty table");
    }

    #[test]
    fn container_ranges_and_their_subset_test() {
        assert_eq!(ranges(&[1, 2, 3, 7, 9, 10]), vec![(1, 4), (7, 8), (9, 11)]);
        let r = ranges(&[1, 2, 3, 7]);
        assert!(all_listed(&r, &[0, 1, 2, 3, 5, 7, 8]));
        assert!(!all_listed(&r, &[1, 3, 7]));
        assert!(!all_listed(&r, &[1, 2, 3]));
        assert!(all_listed(&[], &[]));
    }
}
