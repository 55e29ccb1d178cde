//! The on-disk index kept across openings (issue 36): a *run set* is one
//! repository's disk table (runs, container lists, summary vector,
//! changed-key set) plus the index's small in-memory tables (recipe chunks,
//! copy lists), saved in the cache directory as of one manifest generation.
//! An opening takes it up and applies only the index segments listed since,
//! instead of streaming every segment into a new table.
//!
//! Layout: `<index dir>/runs-<16 hex digits of XXH3(repo id, location)>/`
//! holds immutable data files under unique names and `state`, the framed,
//! checksummed description naming them. A set is used only if its `state`
//! decodes, names this repository and location, lists index segments the
//! manifest still lists first, in order (a compaction replaces them all),
//! and containers the manifest still lists (a GC that removed one may have
//! left entries naming it); and only if every file it names is there, of
//! its length. Anything else is rebuilt from the segments, never trusted:
//! it is private, disposable state.
//!
//! What an opening reads does not grow with the index (version 2 of the
//! set): each run and container-list file has a small meta file (its
//! fences, the XXH3-64 of each 64 KiB block) checked whole, and its blocks
//! are verified as lookups first touch them (`super::blocksum`); the
//! summary vector is kept in pieces loaded, and verified, as they are
//! first touched (`super::bloom`). The recipe chunks (version 3) are a
//! sorted file searched in place as a run is (`super::recipes`); version
//! 2 decoded them from the side file at every opening, and is converted.
//! The small files (copy lists, changed keys) are checked whole. A damaged block found later fails loudly and
//! removes `state`, so the next opening rebuilds.
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

use super::blocksum::Damage;
use super::bloom::{Bloom, KeptBloom, PieceFile, PieceLoader, PIECE_WORDS};
use super::disk::{
    Adopted, AdoptedFile, DiskConfig, DiskTable, ExtentList, KeptData, KeptFile, SortedFile,
    TableFile,
};
use super::{decode_segment, encode_segment, Index};
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FP_LEN};
use crate::framing::checksum;
use crate::ids::ChunkKind;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"TSRARUNS";
/// 3: the recipe chunks in a sorted file searched in place (2: decoded
/// from the side file at each opening; 2 added meta files and block sums,
/// the summary vector in pieces; 1 checked every file whole at each
/// opening).
const VERSION: u32 = 3;
/// A run's or list's meta file: magic, version, the file's length and
/// name, its fences, its block sums.
const META_MAGIC: &[u8; 8] = b"TSRAMETA";
const META_VERSION: u32 = 1;
/// Piece files past which a save writes the whole summary vector anew
/// (each opening opens every piece file).
const MAX_PIECE_FILES: usize = 8;
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
    runs: Vec<(KeptData, u32)>,
    lists: Vec<KeptData>,
    extents: Vec<(u64, ExtentList)>,
    bloom: KeptBloom,
    /// Copy lists, as an index segment.
    side: KeptFile,
    /// Recipe chunks, as a sorted run-like file (`None`: there are none,
    /// or version 2, whose side file holds them).
    #[serde(default)]
    recipes: Option<KeptData>,
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

    /// Whether saving the set is worth its cost. A save rewrites the side
    /// tables (~14 MB at 14 M entries) and the filter pieces the lag
    /// touched (all of them past a few thousand keys): for a
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

/// Say on a terminal that an opening converts an older run set.
fn say_converting(from: u32) {
    if std::io::stderr().is_terminal() {
        eprintln!(
            "tessera: converting the kept on-disk index (run set version {from} to {VERSION})"
        );
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
    read_kept_state_since(dir, (magic, version, version), what).map(|(t, _)| t)
}

/// [`read_kept_state`] of any version from `oldest` to `version`, and
/// which it is.
fn read_kept_state_since<T: serde::de::DeserializeOwned>(
    dir: &Path,
    (magic, oldest, version): (&[u8; 8], u32, u32),
    what: &str,
) -> std::result::Result<(T, u32), String> {
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
    if !(oldest..=version).contains(&found) {
        return Err(format!("kept by another version ({found})"));
    }
    serde_json::from_slice(json)
        .map(|t| (t, found))
        .map_err(|e| format!("damaged: {}: {e}", path.display()))
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

    /// The state, of this version or one this build converts (2), and its
    /// version.
    fn read_any_state(&self) -> std::result::Result<(State, u32), String> {
        read_kept_state_since(&self.dir, (MAGIC, 2, VERSION), "run set")
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
        let (s, version) = self.read_any_state()?;
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
        let (copies, old_recipes): (Vec<_>, Vec<_>) = decode_segment(&side, &s.side.name)
            .map_err(damaged)?
            .into_iter()
            .partition(|e| e.kind == ChunkKind::Data);
        if version == VERSION && !old_recipes.is_empty() {
            return Err(format!("damaged: {}: not copy lists", s.side.name));
        }
        // What a conversion keeps the set as: what it stood for.
        let kept_basis = (s.generation, s.segments.clone(), s.containers.clone());
        let recipes = s
            .recipes
            .map(|k| self.adopted(k))
            .transpose()
            .map_err(damaged)?;
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
        let state = std::sync::Arc::new(self.dir.join(STATE));
        let runs = s
            .runs
            .into_iter()
            .map(|(k, level)| Ok((self.adopted(k)?, level)))
            .collect::<Result<Vec<_>>>()
            .map_err(damaged)?;
        let lists = s
            .lists
            .into_iter()
            .map(|k| self.adopted(k))
            .collect::<Result<Vec<_>>>()
            .map_err(damaged)?;
        let loader = PieceFiles::open(&self.dir, &s.bloom, &state).map_err(damaged)?;
        let adopted = Adopted {
            runs,
            lists,
            extents: s.extents,
            bloom: Bloom::adopt(s.bloom, std::sync::Arc::new(loader)),
            len: s.len,
            shadowed,
            state: state.clone(),
        };
        let mut table = DiskTable::adopt(base, cfg, &self.dir, adopted).map_err(damaged)?;
        let recipes = recipes
            .map(|f| SortedFile::adopt(&mut table, &self.dir, f, &state))
            .transpose()
            .map_err(damaged)?;
        let mut index = Index::from_disk(table, recipes, copies);
        if version < VERSION {
            // Version 2 kept the recipe chunks in the side file: they go
            // to a sorted file, everything else is kept as it is.
            say_converting(version);
            for e in old_recipes {
                index.insert(e).map_err(damaged)?;
            }
            let (generation, segments, ranges) = kept_basis;
            let containers: Vec<u64> = ranges.iter().flat_map(|&(a, b)| a..b).collect();
            let was = Basis {
                repo_id: basis.repo_id,
                location: basis.location,
                generation,
                segments: &segments,
                containers: &containers,
            };
            // A cache: failing to convert it costs the next opening this
            // conversion again.
            if let Err(e) = self.save(&mut index, &was) {
                say_rebuilding(&format!("could not keep it: {e}"));
            }
        }
        Ok((index, n))
    }

    /// A kept run or list file with its meta file's fences and sums (the
    /// meta file checked whole and naming the file).
    fn adopted(&self, kept: KeptData) -> Result<AdoptedFile> {
        let meta = self.read_checked(&kept.meta)?;
        let (name, len, fences, sums) = decode_meta(&meta).ok_or_else(|| {
            Error::corrupt(
                self.dir.join(&kept.meta.name).display().to_string(),
                "not a meta file",
            )
        })?;
        if name != kept.name || len != kept.len {
            return Err(Error::corrupt(
                self.dir.join(&kept.meta.name).display().to_string(),
                format!("describes {name} of {len} bytes, not {}", kept.name),
            ));
        }
        Ok(AdoptedFile { kept, fences, sums })
    }

    /// Keep `index` (an on-disk one, standing for `basis`) for later
    /// openings. Returns whether it saved: not when another process is
    /// saving, nor over a set kept at a newer generation.
    pub fn save(&self, index: &mut Index, basis: &Basis) -> Result<bool> {
        let kept = || self.read_state().ok().map(|s| s.generation);
        let Some(_lock) = begin_save(&self.dir, basis.generation, kept)? else {
            return Ok(false);
        };
        let side = encode_segment(&index.copy_entries());
        // A file kept before is named again (not rewritten) if it is still
        // there: only a saver holding the lock removes files.
        let there =
            |name: &str, len: u64| self.dir.join(name).metadata().is_ok_and(|m| m.len() == len);
        let still = |k: &KeptData| there(&k.name, k.len) && there(&k.meta.name, k.meta.len);
        let recipe_file = index.recipes_for_save(still)?;
        let Some(table) = index.disk_table_mut() else {
            return Err(Error::invalid("only an on-disk index is kept"));
        };
        let st = table.state(still)?;
        let mut names: HashMap<PathBuf, KeptData> = HashMap::new();
        let mut keep = |f: &TableFile, what: &str| -> Result<KeptData> {
            let kept = match &f.kept {
                Some(k) if still(k) => k.clone(),
                _ => {
                    let name = unique(what);
                    let to = self.dir.join(&name);
                    std::fs::hard_link(&f.path, &to).map_err(|e| io_error(&to, e))?;
                    let meta = encode_meta(&name, f.len, &f.fences, &f.sums);
                    let meta = self.write_new(&format!("meta-{what}"), &meta)?;
                    KeptData {
                        name,
                        len: f.len,
                        meta,
                    }
                }
            };
            names.insert(f.path.clone(), kept.clone());
            Ok(kept)
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
        let recipes = recipe_file.map(|f| keep(&f, "recipes")).transpose()?;
        let bloom = self.keep_bloom(table.bloom_mut())?;
        // The side tables and changed keys as kept before, if unchanged.
        let before = self.read_state().ok();
        let side = self.write_unless(before.as_ref().map(|s| &s.side), "side", &side)?;
        let shadow = match &st.shadowed {
            None => None,
            Some(keys) => {
                let b: Vec<u8> = keys.iter().flat_map(|k| k.0).collect();
                let was = before.as_ref().and_then(|s| s.shadow.as_ref());
                Some(self.write_unless(was, "shadow", &b)?)
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
            side,
            recipes,
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
        index.recipes_kept_as(&names);
        if let Some(t) = index.disk_table_mut() {
            t.kept_as(&names);
            t.bloom_mut().saved(state.bloom.clone());
        }
        self.remove_unnamed(&state);
        remove_unused_sets(self.dir.parent(), &self.dir, "runs-");
        Ok(true)
    }

    /// Keep the summary vector: the pieces changed since it was loaded or
    /// saved go to a new piece file, the others stay where they are; the
    /// whole filter is written when it was never kept (new, or grown),
    /// when a file holding its pieces is gone, or past
    /// [`MAX_PIECE_FILES`]. Nothing is marked saved here (the caller does,
    /// once the state naming the files is in place).
    fn keep_bloom(&self, b: &Bloom) -> Result<KeptBloom> {
        let pieces = b.pieces();
        let there = |f: &PieceFile| {
            self.dir
                .join(&f.name)
                .metadata()
                .is_ok_and(|m| m.len() == f.len)
        };
        let prev = b.kept().filter(|k| {
            k.capacity == b.capacity()
                && k.files.len() < MAX_PIECE_FILES
                && k.files.iter().all(there)
                && k.places(pieces).is_some()
        });
        let (mut files, write): (Vec<PieceFile>, Vec<usize>) = match prev {
            Some(k) => (
                k.files.clone(),
                (0..pieces).filter(|&p| b.is_dirty(p)).collect(),
            ),
            None => (Vec::new(), (0..pieces).collect()),
        };
        if !write.is_empty() {
            files.push(self.write_pieces(b, &write)?);
        }
        // Files all of whose pieces a later file holds are dropped.
        let kept = KeptBloom {
            capacity: b.capacity(),
            files,
        };
        let places = kept.places(pieces).expect("every piece is kept");
        let mut used = vec![false; kept.files.len()];
        for &(f, _) in &places {
            used[f as usize] = true;
        }
        let mut i = 0;
        let files = kept
            .files
            .into_iter()
            .filter(|_| {
                i += 1;
                used[i - 1]
            })
            .collect();
        Ok(KeptBloom {
            capacity: b.capacity(),
            files,
        })
    }

    /// A new piece file of `pieces` (ascending) of `b`: their words (u64
    /// LE), then the XXH3-64 of each piece (u64 LE).
    fn write_pieces(&self, b: &Bloom, pieces: &[usize]) -> Result<PieceFile> {
        use std::io::Write;
        let name = unique("bloom");
        let path = self.dir.join(&name);
        let f = std::fs::File::create(&path).map_err(|e| io_error(&path, e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        let mut sums = Vec::with_capacity(pieces.len() * 8);
        let mut len = 0u64;
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        let mut bytes = Vec::with_capacity(PIECE_WORDS * 8);
        for &p in pieces {
            bytes.clear();
            bytes.extend(b.piece(p).iter().flat_map(|w| w.to_le_bytes()));
            sums.extend(super::blocksum::sum(&bytes).to_le_bytes());
            w.write_all(&bytes).map_err(|e| io_error(&path, e))?;
            len += bytes.len() as u64;
            match ranges.last_mut() {
                Some(r) if r.1 == p as u32 => r.1 += 1,
                _ => ranges.push((p as u32, p as u32 + 1)),
            }
        }
        w.write_all(&sums).map_err(|e| io_error(&path, e))?;
        w.flush().map_err(|e| io_error(&path, e))?;
        Ok(PieceFile {
            name,
            len: len + sums.len() as u64,
            sums: checksum(&sums),
            ranges,
        })
    }

    /// `bytes` as the file `was` if it holds them (and is there), else as
    /// a new file.
    fn write_unless(&self, was: Option<&KeptFile>, what: &str, bytes: &[u8]) -> Result<KeptFile> {
        if let Some(k) = was {
            let there = self
                .dir
                .join(&k.name)
                .metadata()
                .is_ok_and(|m| m.len() == k.len);
            if there && k.len == bytes.len() as u64 && k.sum == checksum(bytes) {
                return Ok(k.clone());
            }
        }
        self.write_new(what, bytes)
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
        let files = state.runs.iter().map(|(f, _)| f).chain(&state.lists);
        for f in files.chain(&state.recipes) {
            named.extend([f.name.as_str(), f.meta.name.as_str()]);
        }
        named.extend(state.bloom.files.iter().map(|f| f.name.as_str()));
        named.insert(state.side.name.as_str());
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

/// A run's or list's meta file (see [`META_MAGIC`]).
fn encode_meta(name: &str, len: u64, fences: &[u64], sums: &[u64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(40 + name.len() + 8 * (fences.len() + sums.len()));
    b.extend_from_slice(META_MAGIC);
    b.extend_from_slice(&META_VERSION.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&(name.len() as u32).to_le_bytes());
    b.extend_from_slice(name.as_bytes());
    for part in [fences, sums] {
        b.extend_from_slice(&(part.len() as u64).to_le_bytes());
        b.extend(part.iter().flat_map(|w| w.to_le_bytes()));
    }
    b
}

/// The name, length, fences and block sums a meta file gives, or `None`
/// if it is not one.
fn decode_meta(b: &[u8]) -> Option<(String, u64, Vec<u64>, Vec<u64>)> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = b.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    if take(8)? != META_MAGIC || take(4)? != META_VERSION.to_le_bytes() {
        return None;
    }
    let len = u64::from_le_bytes(take(8)?.try_into().ok()?);
    let n = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let name = String::from_utf8(take(n)?.to_vec()).ok()?;
    let mut words = || -> Option<Vec<u64>> {
        let n = usize::try_from(u64::from_le_bytes(take(8)?.try_into().ok()?)).ok()?;
        let raw = take(n.checked_mul(8)?)?;
        Some(
            raw.chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .collect(),
        )
    };
    let fences = words()?;
    let sums = words()?;
    (at == b.len()).then_some((name, len, fences, sums))
}

/// The piece files of a kept summary vector, open (a file removed by a
/// later save stays readable), each piece verified as it is loaded.
struct PieceFiles {
    /// Each file, its path, and the XXH3-64 of each piece it holds.
    files: Vec<(std::fs::File, PathBuf, Vec<u64>)>,
    /// Each piece's file and position in it.
    at: Vec<(u32, u32)>,
    state: std::sync::Arc<PathBuf>,
}

impl PieceFiles {
    /// Open the files of `kept` in `dir`, checking each one's length and
    /// its trailer of piece sums (nothing else is read).
    fn open(dir: &Path, kept: &KeptBloom, state: &std::sync::Arc<PathBuf>) -> Result<PieceFiles> {
        let words = Bloom::bytes_for(kept.capacity) / 8;
        let pieces = words.div_ceil(PIECE_WORDS);
        let corrupt =
            |p: &Path, why: &str| Error::corrupt(p.display().to_string(), why.to_string());
        let at = kept
            .places(pieces)
            .ok_or_else(|| corrupt(dir, "the summary vector's pieces are not all kept"))?;
        let piece_bytes = |p: u32| ((words - p as usize * PIECE_WORDS).min(PIECE_WORDS) * 8) as u64;
        let mut files = Vec::with_capacity(kept.files.len());
        for f in &kept.files {
            let path = dir.join(&f.name);
            let file = std::fs::File::open(&path).map_err(|e| io_error(&path, e))?;
            let found = file.metadata().map_err(|e| io_error(&path, e))?.len();
            let held: u64 = f.ranges.iter().map(|&(a, b)| u64::from(b - a)).sum();
            let data: u64 = f
                .ranges
                .iter()
                .flat_map(|&(a, b)| a..b)
                .map(piece_bytes)
                .sum();
            if found != f.len || f.len != data + held * 8 {
                return Err(corrupt(
                    &path,
                    &format!("{found} bytes, the run set says {}", f.len),
                ));
            }
            let mut trailer = vec![0u8; held as usize * 8];
            read_at(&file, &mut trailer, data).map_err(|e| io_error(&path, e))?;
            if checksum(&trailer) != f.sums {
                return Err(corrupt(&path, "checksum mismatch (piece sums)"));
            }
            let sums = trailer
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .collect();
            files.push((file, path, sums));
        }
        Ok(PieceFiles {
            files,
            at,
            state: std::sync::Arc::clone(state),
        })
    }
}

impl PieceLoader for PieceFiles {
    fn load(&self, piece: usize, into: &mut [u64]) -> std::result::Result<(), Damage> {
        let (f, slot) = self.at[piece];
        let (file, path, sums) = &self.files[f as usize];
        let damage = |what: String| Damage {
            file: path.clone(),
            what,
            state: Some(std::sync::Arc::clone(&self.state)),
        };
        let mut bytes = vec![0u8; into.len() * 8];
        let offset = slot as u64 * (PIECE_WORDS * 8) as u64;
        read_at(file, &mut bytes, offset).map_err(|e| damage(e.to_string()))?;
        if super::blocksum::sum(&bytes) != sums[slot as usize] {
            return Err(damage(format!("piece {piece} checksum mismatch")));
        }
        for (w, b) in into.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
        Ok(())
    }
}

/// Read exactly `buf.len()` bytes of `file` at `offset`.
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
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

/// Start a save into the kept directory `dir` (a run set or a kept table):
/// made private, as it lists the repository's fingerprints, and the save
/// lock taken. `None`: another process is saving, or what is kept there
/// (`kept`: its generation) is newer than `generation`.
pub(super) fn begin_save(
    dir: &Path,
    generation: u64,
    kept: impl FnOnce() -> Option<u64>,
) -> Result<Option<SaveLock>> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o700);
        std::fs::set_permissions(dir, private).map_err(|e| io_error(dir, e))?;
    }
    let Some(lock) = SaveLock::take(&dir.join(LOCK))? else {
        return Ok(None);
    };
    if kept().is_some_and(|g| g > generation) {
        return Ok(None);
    }
    Ok(Some(lock))
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

    /// A save writes only the summary vector's pieces changed since the
    /// last one (a new piece file beside the old), the filter taken up
    /// from the files holds every key, and the whole filter is written
    /// again past MAX_PIECE_FILES files or when a file is gone.
    #[test]
    fn a_save_writes_only_the_changed_pieces_of_the_filter() {
        let tmp = tempfile::tempdir().unwrap();
        let set = RunSet {
            dir: tmp.path().join("runs-x"),
        };
        std::fs::create_dir_all(&set.dir).unwrap();
        let key = |i: u32| crate::HashAlgo::Blake3.hash(&i.to_le_bytes());
        let mut b = Bloom::new(1_000_000);
        let pieces = b.pieces() as u32;
        assert!(pieces > 8, "{pieces}");
        b.insert_all((0..100_000).map(key));
        let first = set.keep_bloom(&b).unwrap();
        assert_eq!(first.files.len(), 1);
        assert_eq!(first.files[0].ranges, vec![(0, pieces)]);
        b.saved(first.clone());
        b.insert(&key(1_000_000));
        let second = set.keep_bloom(&b).unwrap();
        assert_eq!(second.files.len(), 2, "{second:?}");
        assert_eq!(second.files[0], first.files[0], "the old file stays");
        let new = &second.files[1];
        assert_eq!(new.ranges.len(), 1);
        assert_eq!(new.ranges[0].1 - new.ranges[0].0, 1, "one piece written");
        assert_eq!(new.len, (PIECE_WORDS * 8 + 8) as u64);
        b.saved(second.clone());
        let state = std::sync::Arc::new(set.dir.join(STATE));
        let files = PieceFiles::open(&set.dir, &second, &state).unwrap();
        let again = Bloom::adopt(second.clone(), std::sync::Arc::new(files));
        assert!((0..100_000).all(|i| again.may_contain(&key(i))));
        assert!(again.may_contain(&key(1_000_000)));
        let stranger = (2_000_000..2_010_000).filter(|&i| again.may_contain(&key(i)));
        assert_eq!(
            stranger.count(),
            (2_000_000..2_010_000)
                .filter(|&i| b.may_contain(&key(i)))
                .count()
        );
        // More saves: at the bound, one file of the whole filter again.
        let (mut most, mut whole) = (0, false);
        for j in 0..200 {
            b.insert(&key(3_000_000 + j));
            let k = set.keep_bloom(&b).unwrap();
            most = most.max(k.files.len());
            whole = k.files.len() == 1 && k.files[0].ranges == vec![(0, pieces)];
            b.saved(k);
            if whole {
                break;
            }
        }
        assert_eq!(most, MAX_PIECE_FILES);
        assert!(whole, "rewritten whole at the bound");
        // A file gone: the whole filter is written anew.
        let last = b.kept().unwrap().files.last().unwrap().name.clone();
        std::fs::remove_file(set.dir.join(last)).unwrap();
        b.insert(&key(4_000_000));
        let k = set.keep_bloom(&b).unwrap();
        assert_eq!(k.files.len(), 1);
        assert_eq!(k.files[0].ranges, vec![(0, pieces)]);
        // A piece file whose trailer does not match the state: refused.
        let path = set.dir.join(&k.files[0].name);
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 2] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(PieceFiles::open(&set.dir, &k, &state).is_err());
    }

    /// A meta file says what it describes; anything else is no meta file.
    /// A set kept by version 2 (recipe chunks in the side file, no recipe
    /// file) is converted at its opening, not rebuilt: the runs stay, the
    /// recipe chunks go to a sorted file, the side file keeps the copy
    /// lists alone; the index answers as the saved one did, and the next
    /// opening takes up version 3 as it is.
    #[test]
    fn a_version_2_set_is_converted_not_rebuilt() {
        use crate::ids::ContainerId;
        use crate::index::IndexEntry;
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let cfg = DiskConfig {
            flush_at: 500,
            ..DiskConfig::default()
        };
        let fp = |i: u32| crate::HashAlgo::Blake3.hash(&i.to_le_bytes());
        let entry = |i: u32, kind, copy| IndexEntry {
            fp: fp(i),
            container: ContainerId(u64::from(i % 300)),
            kind,
            copy,
        };
        let mut index = Index::on_disk(base, cfg).unwrap();
        for i in 0..3000 {
            index.insert(entry(i, ChunkKind::Data, 0)).unwrap();
        }
        for i in 3000..3400 {
            index.insert(entry(i, ChunkKind::Recipe, 0)).unwrap();
        }
        // A rewritten chunk: two copies (a copy list).
        index.insert(entry(7, ChunkKind::Data, 1)).unwrap();
        let all = |ix: &Index| {
            let mut v: Vec<IndexEntry> = ix.entries().collect();
            crate::index::sort_entries(&mut v);
            v
        };
        let want = all(&index);
        let segments = vec!["index/0000000000000001".to_string()];
        let containers: Vec<u64> = (0..300).collect();
        let basis = Basis {
            repo_id: "r",
            location: "l",
            generation: 5,
            segments: &segments,
            containers: &containers,
        };
        let set = RunSet::of(base, "r", "l");
        assert!(set.save(&mut index, &basis).unwrap());
        drop(index);
        // Made version 2: the recipe chunks into the side file.
        let (mut st, v) = set.read_any_state().unwrap();
        assert_eq!(v, VERSION);
        let recipes = st.recipes.take().expect("a recipe file");
        let mut side = want.clone();
        side.retain(|e| e.kind == ChunkKind::Recipe || e.copy == 1 || e.fp == fp(7));
        st.side = set.write_new("side", &encode_segment(&side)).unwrap();
        let json = serde_json::to_vec(&st).unwrap();
        let v2 = crate::framing::encode(MAGIC, 2, &json);
        std::fs::write(set.dir.join(STATE), v2).unwrap();

        let (ix, held) = set.load(&basis, base, cfg).unwrap();
        assert_eq!(held, 1);
        assert_eq!(all(&ix), want);
        for e in &want {
            assert_eq!(
                ix.get_copy(e.kind, &e.fp, e.copy),
                Some(e.container),
                "{e:?}"
            );
        }
        let (st, v) = set.read_any_state().unwrap();
        assert_eq!(v, VERSION, "converted");
        let kept = st.recipes.clone().expect("a recipe file");
        assert_eq!(kept.len, 400 * 40);
        assert!(!set.dir.join(&recipes.name).exists(), "the old one removed");
        let side = set.read_checked(&st.side).unwrap();
        let side = decode_segment(&side, "side").unwrap();
        assert!(side.iter().all(|e| e.kind == ChunkKind::Data), "{side:?}");
        assert_eq!(side.len(), 2, "the copy list alone");
        drop(ix);
        let state_inode = std::fs::read(set.dir.join(STATE)).unwrap();
        let (ix, _) = set.load(&basis, base, cfg).unwrap();
        assert_eq!(all(&ix), want);
        assert_eq!(
            std::fs::read(set.dir.join(STATE)).unwrap(),
            state_inode,
            "taken up as it is"
        );
    }

    #[test]
    fn meta_files_round_trip_and_refuse_garbage() {
        let m = encode_meta("run-1", 80, &[1, 2], &[7]);
        assert_eq!(
            decode_meta(&m),
            Some(("run-1".to_string(), 80, vec![1, 2], vec![7]))
        );
        assert_eq!(decode_meta(&m[..m.len() - 1]), None);
        let mut longer = m.clone();
        longer.push(0);
        assert_eq!(decode_meta(&longer), None);
        assert_eq!(decode_meta(b"TSRARUNS"), None);
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
