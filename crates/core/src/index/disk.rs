//! The on-disk data-chunk table (`init --index disk`), in the style of
//! DDFS: data fingerprint → container of its newest copy, with RAM per
//! stored chunk bounded by a few bytes instead of the full entry.
//!
//! * **Runs**: immutable files of 40-byte records (fingerprint, container
//!   u64 LE; `u64::MAX` marks a removed fingerprint), sorted by fingerprint.
//!   RAM holds only each run's *fences* (the first 8 bytes of the first
//!   key of every [`FENCE_EVERY`] records) and a directory of them by their
//!   top bits, so a probe compares a few integers in RAM and then reads one
//!   1.25 KiB group. Runs are
//!   tiered: [`FANOUT`] runs of one level merge into one of the next (newest
//!   record of a key wins; removal marks are dropped once no older run can
//!   hold the key), so a stream of N inserts rewrites each record
//!   log_FANOUT(N / flush size) times and a probe visits few runs.
//! * **Overlay**: the changes since the last flush, exact and in memory
//!   (a 64th of the table, at least [`DiskConfig::flush_at`]), flushed as
//!   a new run.
//! * **Summary vector**: a Bloom filter over every fingerprint inserted
//!   ([`super::bloom`]): a new chunk is answered without I/O. Rebuilt
//!   twice as large from the runs when full.
//! * **Background work** ([`DiskConfig::background_merges`]): flushes,
//!   merges and Bloom rebuilds run on their own threads, one of each at a
//!   time, over immutable inputs (a frozen overlay, shared runs, a
//!   snapshot), while lookups and inserts go on against the old state; the
//!   results are installed at the next change. On the 2-core reference
//!   machine this took the disk index from 0.55x to ~0.9x the in-memory
//!   index's ingest (docs/ARCHITECTURE.md).
//! * **Locality-preserved cache**: each flush also writes the flushed
//!   fingerprints grouped by container, in insertion order (a *container
//!   list*, as a DDFS container's metadata section). When a lookup finds a
//!   chunk in a run, the whole list of its container is loaded into an LRU
//!   cache, so the duplicates that follow it in a version series hit in
//!   memory: a cursor walks the list (looking a few places ahead, and
//!   where the stream left the last lists it used), so a repeated stream
//!   needs no hashing and the cache no per-fingerprint map.
//!
//! Exact: the cache holds only current entries. A change to a fingerprint
//! drops it from the cache and invalidates the container list it was listed
//! in (its container loses locality caching, never correctness), so every
//! list still on file names fingerprints that map to its container.
//!
//! The files live in a private directory removed on drop: the repository's
//! index segments stay the durable index, and opening the repository
//! streams them through this table (see docs/FORMAT.md).
//!
//! **I/O errors** (writing a run or a list file, mapping one) are returned
//! as one line naming the file: from the change or [`DiskTable::flush`]
//! that met them, or, met by a background thread, from the next change or
//! flush after it finished. The change itself is always made: a failed
//! flush puts its entries back into the overlay, a failed merge leaves its
//! input runs in place, so every lookup stays exact (from memory and the
//! runs already mapped). A table that failed once writes no more files and
//! returns the first error from every later change or flush (its overlay
//! only grows): the caller gives up on it (a backup fails, the repository
//! is reopened) instead of going on with an index it cannot persist.
//! Lookups read memory and mapped runs only: they return no error. A run
//! or list taken up from a kept run set is verified block by block as
//! lookups first read it (`super::blocksum`): a damaged block panics
//! (naming the file, the set's state removed) rather than answer.

use super::blocksum::{BlockSums, Damage};
use super::bloom::Bloom;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FP_LEN};
use crate::fptable::FpTable;
use crate::zerobuf::ZeroBuf;
use memmap2::Mmap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Bytes of a run record: fingerprint, value.
const REC: usize = FP_LEN + 8;
/// A removed fingerprint's value in a run.
const TOMB: u64 = u64::MAX;
/// Records per fence: one 1.25 KiB group read per probe, 0.25 bytes of
/// fence RAM per record.
pub const FENCE_EVERY: usize = 32;
/// Runs of one level merged into one run of the next.
pub const FANOUT: usize = 4;
/// Changed keys tracked for largest-run-first searches (~3.7 MB at most);
/// a workload that moves more (GC) searches newest first, as before.
/// (Small in unit tests, so their model test crosses it; the integration
/// tests keep every key tracked.)
#[cfg(not(test))]
const SHADOW_MAX: usize = 1 << 16;
#[cfg(test)]
const SHADOW_MAX: usize = 500;

/// Tuning of a [`DiskTable`] (small values in tests exercise every path).
#[derive(Clone, Copy, Debug)]
pub struct DiskConfig {
    /// Overlay entries that trigger a flush to a new run.
    pub flush_at: usize,
    /// Containers whose lists the locality cache holds.
    pub cache_containers: usize,
    /// Merge runs on a background thread (lookups keep using the runs being
    /// merged until the merged one replaces them); off, a flush merges
    /// before it returns (deterministic run counts, for tests).
    pub background_merges: bool,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            flush_at: 1 << 18,
            cache_containers: 256,
            background_merges: true,
        }
    }
}

/// An I/O error on one of the table's files, as one line naming it.
fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("on-disk index {}", path.display()), e)
}

/// A new private file, readable for mapping once written.
fn create(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io_error(path, e))
}

/// Fill the new file `f` at `path` with `write` and map it (unless empty);
/// on an error the file is removed and the error names it.
fn fill(
    path: &Path,
    f: File,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<bool>,
) -> Result<Option<Mmap>> {
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let done = write(&mut w).and_then(|empty| {
        let f = w.into_inner().map_err(|e| e.into_error())?;
        // SAFETY: the file is private to this table and never written again.
        (!empty).then(|| unsafe { Mmap::map(&f) }).transpose()
    });
    done.map_err(|e| {
        let _ = std::fs::remove_file(path);
        io_error(path, e)
    })
}

/// Work on its own thread, or already done: inline when no thread could
/// be spawned (the machine out of threads is no reason to fail).
enum Job<T> {
    Thread(JoinHandle<T>),
    Done(T),
}

impl<T: Send + 'static> Job<T> {
    fn spawn(name: &str, work: impl FnOnce() -> T + Send + 'static) -> Job<T> {
        // The work waits in a slot the thread takes it from, so it is
        // still here to run inline if the thread is never spawned.
        let slot = Arc::new(Mutex::new(Some(work)));
        let theirs = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let work = theirs.lock().unwrap_or_else(|e| e.into_inner()).take();
                work.expect("the work is taken once")()
            });
        match spawned {
            Ok(handle) => Job::Thread(handle),
            Err(_) => {
                let work = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                Job::Done(work.expect("no thread took the work")())
            }
        }
    }
}

impl<T> Job<T> {
    fn is_finished(&self) -> bool {
        match self {
            Job::Thread(h) => h.is_finished(),
            Job::Done(_) => true,
        }
    }

    /// Its result (a panic of the thread, a bug, is re-raised).
    fn join(self) -> T {
        match self {
            Job::Thread(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
            Job::Done(t) => t,
        }
    }

    /// Wait for it, whatever it gives (dropping the table).
    fn wait(self) {
        if let Job::Thread(h) = self {
            let _ = h.join();
        }
    }
}

/// One sorted run file, mapped; the file is removed when the run is
/// dropped (shared with a background merge while one reads it).
struct Run {
    path: PathBuf,
    map: Option<Mmap>,
    len: usize,
    level: u32,
    /// Its name in the kept run set, once it has one (see [`Kept`]).
    kept: Kept,
    /// Block checksums of a run taken up from a kept set, verified as
    /// probes touch its blocks (`None`: written by this table).
    sums: Option<BlockSums>,
    /// [`head`] of the first key of every [`FENCE_EVERY`] records.
    fences: ZeroBuf<u64>,
    /// Where the fences of each value of a head's top [`Run::bits`] bits
    /// begin (one more entry at the end): a probe searches only its
    /// bucket's few fences, not the whole array (a binary search over
    /// megabytes of fences missed the cache at every step: most of a run
    /// probe's time). Any key distribution stays exact; uniform
    /// fingerprints put one or two fences in a bucket.
    dir: ZeroBuf<u32>,
    bits: u32,
}

/// Key order, decided by the first 8 bytes as one integer comparison in
/// all but a 2^-64 share of cases.
#[inline(always)]
fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    head(a).cmp(&head(b)).then_with(|| a.cmp(b))
}

/// The first 8 bytes of a key as an integer ordered as the key is: a fence
/// or a cursor comparison is one integer comparison.
#[inline(always)]
fn head(k: &[u8]) -> u64 {
    u64::from_be_bytes(k[..8].try_into().expect("a fingerprint has 8 bytes"))
}

impl Drop for Run {
    fn drop(&mut self) {
        drop(self.map.take());
        // The private link only: a kept run set's link stays.
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Run {
    #[inline]
    fn rec(&self, i: usize) -> (&[u8], u64) {
        let b = &self.map.as_ref().expect("non-empty run")[i * REC..(i + 1) * REC];
        (
            &b[..FP_LEN],
            u64::from_le_bytes(b[FP_LEN..].try_into().unwrap()),
        )
    }

    /// The directory bucket of a head.
    #[inline]
    fn bucket(bits: u32, h: u64) -> usize {
        if bits == 0 {
            0
        } else {
            (h >> (64 - bits)) as usize
        }
    }

    /// The directory over `fences` (see [`Run::dir`]).
    fn directory(fences: &[u64]) -> (Vec<u32>, u32) {
        // About one bucket per fence: at most 4 bytes per 32 records.
        let bits = fences.len().max(1).ilog2();
        let mut dir = Vec::with_capacity((1 << bits) + 1);
        let mut i = 0;
        for b in 0..1usize << bits {
            while i < fences.len() && Self::bucket(bits, fences[i]) < b {
                i += 1;
            }
            dir.push(i as u32);
        }
        dir.push(fences.len() as u32);
        (dir, bits)
    }

    /// The record of `fp` (its value, maybe [`TOMB`]).
    fn find(&self, fp: &Fingerprint) -> Option<u64> {
        // Groups whose first key's head is <= the key's may hold it; of
        // those, the ones before the last with a smaller head cannot (heads
        // are equal across groups only in a 2^-64 case, still exact here).
        // Fences of earlier buckets are all below the head, of later ones
        // all above: both searches stay in the head's bucket.
        let h = head(&fp.0);
        let b = Self::bucket(self.bits, h);
        let dir = self.dir.as_slice();
        let (lo, hi) = (dir[b] as usize, dir[b + 1] as usize);
        let bucket = &self.fences.as_slice()[lo..hi];
        let last = lo + bucket.partition_point(|&f| f <= h);
        if last == 0 {
            return None;
        }
        let first = (lo + bucket[..last - lo].partition_point(|&f| f < h)).max(1);
        let lo = (first - 1) * FENCE_EVERY;
        let hi = (last * FENCE_EVERY).min(self.len);
        if let (Some(s), Some(m)) = (&self.sums, &self.map) {
            // A kept run's block is read only once verified: a damaged one
            // must not answer "absent".
            if let Err(d) = s.check(m, lo * REC, hi * REC) {
                d.fail();
            }
        }
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let m = (a + b) / 2;
            let (k, v) = self.rec(m);
            match key_cmp(k, &fp.0) {
                std::cmp::Ordering::Less => a = m + 1,
                std::cmp::Ordering::Greater => b = m,
                std::cmp::Ordering::Equal => return Some(v),
            }
        }
        None
    }

    fn fp(&self, i: usize) -> Fingerprint {
        Fingerprint(self.rec(i).0.try_into().unwrap())
    }

    /// Write sorted `(fp, value)` records as a run.
    fn write(
        path: PathBuf,
        level: u32,
        records: impl Iterator<Item = (Fingerprint, u64)>,
    ) -> Result<Run> {
        let f = create(&path)?;
        let mut fences = Vec::new();
        let mut len = 0;
        let map = fill(&path, f, |w| {
            for (fp, v) in records {
                if len % FENCE_EVERY == 0 {
                    fences.push(head(&fp.0));
                }
                w.write_all(&fp.0)?;
                w.write_all(&v.to_le_bytes())?;
                len += 1;
            }
            Ok(len == 0)
        })?;
        let (dir, bits) = Self::directory(&fences);
        // Both are probed at random: on huge pages when large (see ZeroBuf).
        let (fences, dir) = (ZeroBuf::from_slice(&fences), ZeroBuf::from_slice(&dir));
        Ok(Run {
            path,
            map,
            len,
            level,
            kept: Kept::default(),
            sums: None,
            fences,
            dir,
            bits,
        })
    }

    /// Verify every block of a run taken up from a kept set (before a
    /// merge or a scan reads it whole).
    fn verify(&self) -> std::result::Result<(), Damage> {
        match (&self.sums, &self.map) {
            (Some(s), Some(m)) => s.check_all(m),
            _ => Ok(()),
        }
    }

    /// Map a run file of a kept run set (already linked at `path`) with
    /// its fences and block sums (from its checked meta file): nothing of
    /// the run is read here; its blocks are verified as probes touch them.
    fn open(path: PathBuf, f: AdoptedFile, level: u32, state: &Arc<PathBuf>) -> Result<Run> {
        let len = (f.kept.len as usize) / REC;
        if !(f.kept.len as usize).is_multiple_of(REC)
            || f.fences.len() != len.div_ceil(FENCE_EVERY)
            || f.sums.len() as u64 != super::blocksum::blocks_in(f.kept.len)
        {
            return Err(Error::corrupt(
                path.display().to_string(),
                "its meta file does not describe it",
            ));
        }
        let map = map_kept(&path, f.kept.len)?;
        let (dir, bits) = Self::directory(&f.fences);
        let sums = BlockSums::new(f.sums, &path, Arc::clone(state));
        Ok(Run {
            path,
            map,
            len,
            level,
            kept: Kept::known(f.kept),
            sums: Some(sums),
            fences: ZeroBuf::from_slice(&f.fences),
            dir: ZeroBuf::from_slice(&dir),
            bits,
        })
    }
}

/// A sorted file of (fingerprint, value) records kept in a run set beside
/// the table's runs (the recipe chunks, `super::recipes`): searched in
/// place as a run is, its blocks verified as lookups first touch them.
/// It lives in a table's private directory (linked there from the set, or
/// written there for a save) and is removed from it when dropped.
pub struct SortedFile(Run);

impl SortedFile {
    /// Write sorted, distinct `records` to a new file in `table`'s private
    /// directory.
    pub fn write(
        table: &mut DiskTable,
        records: impl Iterator<Item = (Fingerprint, u64)>,
    ) -> Result<SortedFile> {
        let path = table.t.file("recipes");
        Ok(SortedFile(Run::write(path, 0, records)?))
    }

    /// Take up a kept file of the set in `from` (with its checked meta
    /// file's fences and sums): linked into `table`'s private directory
    /// and mapped; nothing of it is read here.
    pub fn adopt(
        table: &mut DiskTable,
        from: &Path,
        f: AdoptedFile,
        state: &Arc<PathBuf>,
    ) -> Result<SortedFile> {
        let path = table.t.file("recipes");
        let kept = from.join(&f.kept.name);
        std::fs::hard_link(&kept, &path).map_err(|e| io_error(&kept, e))?;
        Ok(SortedFile(Run::open(path, f, 0, state)?))
    }

    /// The value of `fp`.
    pub fn get(&self, fp: &Fingerprint) -> Option<u64> {
        self.0.find(fp).filter(|&v| v != TOMB)
    }

    /// Records in the file.
    pub fn len(&self) -> usize {
        self.0.len
    }

    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Every record, in fingerprint order (every block verified first: a
    /// damaged one panics, as a lookup's does).
    pub fn iter(&self) -> impl Iterator<Item = (Fingerprint, u64)> + '_ {
        if let Err(d) = self.0.verify() {
            d.fail();
        }
        (0..self.0.len).map(|i| (self.0.fp(i), self.0.rec(i).1))
    }

    /// Heap bytes (its fences and their directory).
    pub fn memory_bytes(&self) -> usize {
        self.0.fences.len() * 8 + self.0.dir.len() * 4
    }

    /// The file as a save keeps it (see [`DiskTable::state`]).
    pub fn describe(&self, still_kept: impl Fn(&KeptData) -> bool) -> TableFile {
        let r = &self.0;
        let bytes = r.map.as_deref().unwrap_or(&[]);
        r.kept
            .describe(&r.path, bytes, r.fences.as_slice(), &still_kept)
    }

    /// Note its description in the kept run set (see
    /// [`DiskTable::kept_as`]).
    pub fn kept_as(&self, names: &std::collections::HashMap<PathBuf, KeptData>) {
        if let Some(n) = names.get(&self.0.path) {
            *self.0.kept.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(n.clone());
        }
    }
}

/// A file's description in the kept run set (`super::runset`), once it
/// has one: set when adopted from the set, or by the save that first kept
/// it. Files are immutable once written, so it stays true.
#[derive(Default)]
struct Kept(Mutex<Option<KeptData>>);

impl Kept {
    fn known(f: KeptData) -> Kept {
        Kept(Mutex::new(Some(f)))
    }

    /// The file as a kept run set lists it: its description if kept, else
    /// what a save needs to keep it (`bytes`: its content; `fences`: a
    /// run's).
    fn describe(
        &self,
        path: &Path,
        bytes: &[u8],
        fences: &[u64],
        still_kept: &impl Fn(&KeptData) -> bool,
    ) -> TableFile {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let kept = kept.filter(still_kept);
        let fresh = kept.is_none();
        TableFile {
            path: path.to_path_buf(),
            len: bytes.len() as u64,
            sums: if fresh {
                super::blocksum::sums_of(bytes)
            } else {
                Vec::new()
            },
            fences: if fresh { fences.to_vec() } else { Vec::new() },
            kept,
        }
    }
}

/// Map a kept file of `len` bytes (its length checked; its content is
/// verified block by block as it is read).
fn map_kept(path: &Path, len: u64) -> Result<Option<Mmap>> {
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let found = file.metadata().map_err(|e| io_error(path, e))?.len();
    if found != len {
        return Err(Error::corrupt(
            path.display().to_string(),
            format!("{found} bytes, the run set says {len}"),
        ));
    }
    // SAFETY: kept files are never written again once named in a run set.
    (len > 0)
        .then(|| unsafe { Mmap::map(&file) })
        .transpose()
        .map_err(|e| io_error(path, e))
}

/// One flush's container lists: fingerprints grouped by container.
struct ListFile {
    path: PathBuf,
    map: Option<Mmap>,
    kept: Kept,
    /// As [`Run::sums`].
    sums: Option<BlockSums>,
}

impl ListFile {
    /// `count` fingerprints from the `first`.
    fn fps(&self, first: usize, count: usize) -> &[Fingerprint] {
        let m = self.map.as_ref().expect("listed");
        let (from, to) = (first * FP_LEN, (first + count) * FP_LEN);
        if let Some(s) = &self.sums {
            if let Err(d) = s.check(m, from, to) {
                d.fail();
            }
        }
        let b = &m[from..to];
        // SAFETY: a Fingerprint is 32 bytes of alignment 1
        // (`repr(transparent)` over `[u8; 32]`): any 32 bytes are one.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<Fingerprint>(), count) }
    }
}

/// One of a table's files as [`DiskTable::state`] gives it: where it is,
/// its description in the kept run set if it has one, else its block
/// sums and (a run's) fences for the save that keeps it.
#[derive(Clone, Debug)]
pub struct TableFile {
    pub path: PathBuf,
    pub kept: Option<KeptData>,
    pub len: u64,
    pub sums: Vec<u64>,
    pub fences: Vec<u64>,
}

/// A file of a kept run set: its name in the set's directory, its length
/// and checksum (XXH3-128), checked before it is used.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptFile {
    pub name: String,
    pub len: u64,
    pub sum: [u8; 16],
}

/// A run or container-list file of a kept run set: its name and length,
/// and its meta file (its fences and block sums, checked whole).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptData {
    pub name: String,
    pub len: u64,
    pub meta: KeptFile,
}

/// A kept run or list file as an opening takes it up: its description
/// and its meta file's fences (a run's) and block sums.
pub struct AdoptedFile {
    pub kept: KeptData,
    pub fences: Vec<u64>,
    pub sums: Vec<u64>,
}

/// A whole table without its pending changes and its summary vector
/// ([`DiskTable::bloom_mut`]): runs (oldest first, with their levels),
/// container list files, the extents of each container's list in them,
/// the live count and the keys changed since inserted (`None`: too many
/// were, every search goes newest first).
pub struct TableState {
    pub runs: Vec<(TableFile, u32)>,
    pub lists: Vec<TableFile>,
    pub extents: Vec<(u64, ExtentList)>,
    pub len: u64,
    pub shadowed: Option<Vec<Fingerprint>>,
}

/// What an opening takes up from a kept run set (see [`DiskTable::adopt`]).
pub struct Adopted {
    pub runs: Vec<(AdoptedFile, u32)>,
    pub lists: Vec<AdoptedFile>,
    pub extents: Vec<(u64, ExtentList)>,
    pub bloom: Bloom,
    pub len: u64,
    pub shadowed: Option<Vec<Fingerprint>>,
    /// The set's `state`, removed when a damaged block is found.
    pub state: Arc<PathBuf>,
}

/// Where a container's list lies: (list file, first fingerprint, count).
pub type Extent = (u32, u64, u32);

/// A container's extents: nearly always one (its list written by one
/// flush), kept inline. A vector per container was 600 k allocations at
/// 305 M entries, decoded, hashed in and freed at every opening: a third
/// of a one-chunk backup. Kept as a list of extents, as before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtentList {
    One(Extent),
    Many(Vec<Extent>),
}

impl Default for ExtentList {
    fn default() -> Self {
        ExtentList::Many(Vec::new())
    }
}

impl ExtentList {
    pub fn as_slice(&self) -> &[Extent] {
        match self {
            ExtentList::One(e) => std::slice::from_ref(e),
            ExtentList::Many(v) => v,
        }
    }

    pub fn push(&mut self, e: Extent) {
        match self {
            ExtentList::Many(v) if v.is_empty() => *self = ExtentList::One(e),
            ExtentList::Many(v) => v.push(e),
            ExtentList::One(first) => *self = ExtentList::Many(vec![*first, e]),
        }
    }

    /// Heap bytes beyond the list itself.
    fn heap_bytes(&self) -> usize {
        match self {
            ExtentList::One(_) => 0,
            ExtentList::Many(v) => v.capacity() * std::mem::size_of::<Extent>(),
        }
    }
}

impl FromIterator<Extent> for ExtentList {
    fn from_iter<I: IntoIterator<Item = Extent>>(iter: I) -> Self {
        let mut l = ExtentList::default();
        for e in iter {
            l.push(e);
        }
        l
    }
}

impl serde::Serialize for ExtentList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.as_slice())
    }
}

impl<'de> serde::Deserialize<'de> for ExtentList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ExtentList;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of extents")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<ExtentList, A::Error> {
                let mut l = ExtentList::default();
                while let Some(e) = seq.next_element()? {
                    l.push(e);
                }
                Ok(l)
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// The locality-preserved cache: the lists of recently used containers.
/// No map from fingerprint to slot: filling and emptying one cost two hash
/// operations for every fingerprint of every list loaded, twice what the
/// in-memory index spends per lookup. A stream finds its duplicates at a
/// cursor instead (with a short look-ahead, and the places it left the
/// lists it used last), and a chunk met out of order is found in the runs,
/// then in its container's cached list by a scan.
#[derive(Default)]
struct Cache {
    slots: Vec<Slot>,
    /// Container → its slot.
    by_container: FpLikeMap<u32>,
    tick: u64,
    counts: DiskCounts,
}

/// Where lookups were answered (for benchmarks and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskCounts {
    /// At the stream cursor in a cached container list, or a few places
    /// past it, or where the stream left a recently used list (no hashing).
    pub cursor: u64,
    /// In a cached container list after a run probe (no list loaded).
    pub cache: u64,
    /// In the overlay (changes not yet flushed).
    pub overlay: u64,
    /// Known new by the Bloom filter.
    pub bloom_new: u64,
    /// Searched in the runs (a hit, or a Bloom false positive).
    pub run_probes: u64,
    /// Container lists loaded into the cache.
    pub lists_loaded: u64,
}

struct Slot {
    container: u64,
    /// The list (see [`Slot::fps`]): in its list file's mapping when it
    /// lies in one extent (nearly always: no copy of 16 KiB per load),
    /// else gathered into `owned`.
    ptr: *const Fingerprint,
    len: usize,
    /// Keeps the mapping `ptr` points into alive.
    file: Option<Arc<ListFile>>,
    owned: Vec<Fingerprint>,
    used: u64,
}

// SAFETY: `ptr` points into memory the slot owns (`file`'s mapping, shared
// read-only, or `owned`), like a Vec's pointer.
unsafe impl Send for Slot {}

impl Slot {
    fn empty() -> Slot {
        Slot {
            container: TOMB,
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
            file: None,
            owned: Vec::new(),
            used: 0,
        }
    }

    #[inline(always)]
    fn fps(&self) -> &[Fingerprint] {
        // SAFETY: `ptr` and `len` always describe `file`'s mapping range or
        // `owned` (set together in `set_*`, `owned` untouched meanwhile), or
        // are dangling and 0.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn clear(&mut self) {
        self.ptr = std::ptr::NonNull::dangling().as_ptr();
        self.len = 0;
        self.file = None;
        self.owned.clear();
    }

    /// Borrow `count` fingerprints from `first` of a list file.
    fn set_borrowed(&mut self, file: &Arc<ListFile>, first: usize, count: usize) {
        let fps = file.fps(first, count);
        self.clear();
        self.ptr = fps.as_ptr();
        self.len = fps.len();
        self.file = Some(Arc::clone(file));
    }

    /// Take `owned` as the list.
    fn set_owned(&mut self, owned: Vec<Fingerprint>) {
        self.clear();
        self.owned = owned;
        self.ptr = self.owned.as_ptr();
        self.len = self.owned.len();
    }
}

/// Places past the cursor a stream's next duplicate is looked for: the
/// chunks of an older version that the new one dropped or changed.
const LOOKAHEAD: usize = 64;
/// Lists a stream's cursor remembers where it left (duplicates of a
/// version series alternate between the containers of a few older ones).
const RECENT: usize = 4;

impl Cache {
    fn slot_of(&self, container: u64) -> Option<usize> {
        self.by_container.get(&container).map(|&s| s as usize)
    }

    fn evict(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if s.container != TOMB {
            self.by_container.remove(&s.container);
        }
        s.clear();
        s.container = TOMB;
    }

    /// `fp` at `pos` of `slot`'s list or up to [`LOOKAHEAD`] places
    /// later: the position after it.
    #[inline]
    fn near(&self, slot: u32, pos: u32, fp: &Fingerprint) -> Option<u32> {
        let fps = self.slots.get(slot as usize)?.fps();
        let from = (pos as usize).min(fps.len());
        let to = (from + LOOKAHEAD).min(fps.len());
        fps[from..to]
            .iter()
            .position(|k| k == fp)
            .map(|i| (from + i + 1) as u32)
    }

    /// The position of `fp` in `slot`'s list, scanning from `hint`.
    fn find_in(&self, slot: usize, hint: u32, fp: &Fingerprint) -> Option<u32> {
        let fps = self.slots[slot].fps();
        let hint = (hint as usize).min(fps.len());
        fps[hint..]
            .iter()
            .position(|k| k == fp)
            .map(|i| hint + i)
            .or_else(|| fps[..hint].iter().position(|k| k == fp))
            .map(|i| i as u32)
    }

    fn touch(&mut self, slot: u32) {
        self.tick += 1;
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.used = self.tick;
        }
    }
}

/// Where a stream of lookups expects its next fingerprint: the overlay's
/// insertion order, or a cached container list; and where it left the
/// lists it used before.
#[derive(Clone, Copy, Debug)]
pub struct DiskCursor {
    overlay: usize,
    slot: u32,
    pos: u32,
    /// (slot, position) of lists left, most recent first.
    recent: [(u32, u32); RECENT],
}

impl Default for DiskCursor {
    fn default() -> Self {
        DiskCursor {
            overlay: 0,
            slot: u32::MAX,
            pos: 0,
            recent: [(u32::MAX, 0); RECENT],
        }
    }
}

impl DiskCursor {
    /// Move to `slot` at `pos`, remembering where the list it leaves was.
    fn go(&mut self, slot: u32, pos: u32) {
        if slot != self.slot {
            let mut left = (self.slot, self.pos);
            for r in self.recent.iter_mut() {
                std::mem::swap(r, &mut left);
                if left.0 == slot || left.0 == u32::MAX {
                    break;
                }
            }
        }
        self.slot = slot;
        self.pos = pos;
    }
}

/// Fingerprint → u64 on disk (see the module documentation).
pub struct DiskTable {
    t: Tables,
    /// Behind a lock for shared readers (GC, check, restore planning); a
    /// backup's lookups own the table and skip it.
    cache: Mutex<Cache>,
}

/// Everything but the cache.
struct Tables {
    cfg: DiskConfig,
    dir: PathBuf,
    overlay: FpTable,
    /// Oldest first.
    runs: Vec<Arc<Run>>,
    /// The merge running in the background, if any.
    merging: Option<Merging>,
    /// The overlay being flushed in the background: newer than the runs,
    /// older than the overlay.
    frozen: Option<FpTable>,
    /// A cleared overlay, its allocation kept for the next flush.
    spare: FpTable,
    /// The flush in flight, if any.
    flushing: Option<Job<Result<Flushed>>>,
    /// Containers whose lists were invalidated while a flush was in flight
    /// (a set: a GC moving many chunks of one container records it once).
    invalidated: std::collections::HashSet<u64>,
    /// The summary vector being rebuilt larger in the background, if any.
    rebuilding: Option<Rebuilding>,
    lists: Vec<Arc<ListFile>>,
    /// Container → its list extents in the list files.
    extents: FpLikeMap<ExtentList>,
    bloom: Bloom,
    /// The last fingerprint a stream lookup found absent, while nothing
    /// changed since: ingest inserts it next, and need not search again.
    last_miss: Option<Fingerprint>,
    /// Live fingerprints.
    len: usize,
    /// Keys changed or removed since inserted (see [`Tables::shadow`]).
    shadowed: FpTable,
    /// More than [`SHADOW_MAX`] were: every run search goes newest first.
    shadow_full: bool,
    /// Indexes of `runs`, largest first.
    by_size: Vec<u32>,
    /// A flush's entries (kept: a fresh buffer per flush is page faults
    /// and zeroing).
    scratch: Vec<(Fingerprint, u64)>,
    next_file: u64,
    /// The first I/O error met: no file is written after it, and every
    /// change or flush returns it again.
    failed: Option<Failure>,
}

/// The first I/O error a table met, kept to be returned again (an
/// `io::Error` cannot be cloned: its kind and text are).
struct Failure {
    context: String,
    kind: std::io::ErrorKind,
    text: String,
}

impl Failure {
    fn error(&self) -> Error {
        Error::io(
            self.context.clone(),
            std::io::Error::new(self.kind, self.text.clone()),
        )
    }
}

type FpLikeMap<V> = std::collections::HashMap<u64, V, crate::ids::IdBuildHasher>;

static DIRS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl DiskTable {
    /// A table whose files live in a new private directory under `base`.
    pub fn create(base: &Path, cfg: DiskConfig) -> std::io::Result<Self> {
        std::fs::create_dir_all(base)?;
        let n = DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = base.join(format!("tessera-index-{}-{n}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir(&dir)?;
        Ok(DiskTable {
            t: Tables {
                cfg,
                dir,
                overlay: FpTable::default(),
                runs: Vec::new(),
                merging: None,
                frozen: None,
                spare: FpTable::default(),
                flushing: None,
                invalidated: Default::default(),
                rebuilding: None,
                lists: Vec::new(),
                extents: Default::default(),
                bloom: Bloom::new(1 << 16),
                last_miss: None,
                len: 0,
                shadowed: FpTable::default(),
                shadow_full: false,
                by_size: Vec::new(),
                scratch: Vec::new(),
                next_file: 0,
                failed: None,
            },
            cache: Mutex::new(Cache::default()),
        })
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tables and the cache, without locking (the table is owned).
    fn split(&mut self) -> (&mut Tables, &mut Cache) {
        (
            &mut self.t,
            self.cache.get_mut().unwrap_or_else(|e| e.into_inner()),
        )
    }

    pub fn len(&self) -> usize {
        self.t.len
    }

    pub fn is_empty(&self) -> bool {
        self.t.len == 0
    }

    /// Heap bytes: overlays, summary vector(s), fences, list extents, cache.
    /// (Mapped run and list pages are the kernel's page cache.)
    pub fn memory_bytes(&self) -> usize {
        let t = &self.t;
        let fences: usize = t
            .runs
            .iter()
            .map(|r| r.fences.len() * 8 + r.dir.len() * 4)
            .sum();
        let extents: usize = t.extents.values().map(|v| 40 + v.heap_bytes()).sum();
        let c = self.cache();
        let cache = c.by_container.capacity() * 16
            + c.slots
                .iter()
                .map(|s| s.owned.capacity() * FP_LEN)
                .sum::<usize>();
        let scratch = t.scratch.capacity() * std::mem::size_of::<(Fingerprint, u64)>();
        let overlays = t.overlay.memory_bytes()
            + t.spare.memory_bytes()
            + t.frozen.as_ref().map_or(0, |f| f.memory_bytes());
        // A filter being rebuilt counts beside the one answering meanwhile.
        let rebuilding = t
            .rebuilding
            .as_ref()
            .map_or(0, |r| r.bytes + r.pending.capacity() * FP_LEN);
        overlays
            + t.shadowed.memory_bytes()
            + t.bloom.memory_bytes()
            + rebuilding
            + fences
            + extents
            + cache
            + scratch
    }

    /// Where lookups were answered so far.
    pub fn counts(&self) -> DiskCounts {
        self.cache().counts
    }

    /// Runs on disk now.
    pub fn runs(&self) -> usize {
        self.t.runs.len()
    }

    #[inline]
    pub fn get(&self, fp: &Fingerprint) -> Option<u64> {
        self.t.lookup(&mut self.cache(), fp).0
    }

    #[inline]
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        self.get(fp).is_some()
    }

    /// [`get`](Self::get) without locking the cache.
    #[inline]
    pub fn get_mut(&mut self, fp: &Fingerprint) -> Option<u64> {
        let (t, c) = self.split();
        t.lookup(c, fp).0
    }

    /// [`contains`](Self::contains) for one key of a stream: first the
    /// cached list position or overlay position after the previous hit.
    #[inline]
    pub fn contains_seq(&mut self, cursor: &mut DiskCursor, fp: &Fingerprint) -> bool {
        self.get_seq(cursor, fp).is_some()
    }

    /// [`get`](Self::get) for one key of a stream, as
    /// [`contains_seq`](Self::contains_seq).
    #[inline]
    pub fn get_seq(&mut self, cursor: &mut DiskCursor, fp: &Fingerprint) -> Option<u64> {
        let (t, c) = self.split();
        // Every fingerprint in a cached list maps to its container (see the
        // module documentation), so a hit anywhere in one is an answer.
        // First the place after the previous hit: one comparison.
        if let Some(s) = c.slots.get(cursor.slot as usize) {
            if s.fps().get(cursor.pos as usize) == Some(fp) {
                cursor.pos += 1;
                c.counts.cursor += 1;
                return Some(s.container);
            }
        }
        if let Some(v) = t.overlay.value_logged_at(cursor.overlay, fp) {
            // Overlay entries may be removal marks.
            cursor.overlay += 1;
            c.counts.overlay += 1;
            return (v != TOMB).then_some(v);
        }
        // A new chunk: nothing to look for.
        if !t.bloom.may_contain(fp) {
            c.counts.bloom_new += 1;
            t.last_miss = Some(*fp);
            return None;
        }
        // A few places on (chunks the new version dropped), or where the
        // stream left a list it used lately.
        if let Some(next) = c.near(cursor.slot, cursor.pos, fp) {
            cursor.pos = next;
            c.counts.cursor += 1;
            return Some(c.slots[cursor.slot as usize].container);
        }
        for i in 0..RECENT {
            let (slot, pos) = cursor.recent[i];
            if slot == u32::MAX {
                break;
            }
            if let Some(next) = c.near(slot, pos, fp) {
                cursor.go(slot, next);
                c.touch(slot);
                c.counts.cursor += 1;
                return Some(c.slots[slot as usize].container);
            }
        }
        if let Some(v) = t
            .overlay
            .get_seq(&mut cursor.overlay, fp)
            .or_else(|| t.frozen.as_ref().and_then(|f| f.get(fp)))
        {
            c.counts.overlay += 1;
            return (v != TOMB).then_some(v);
        }
        c.counts.run_probes += 1;
        let v = match t.in_runs(fp) {
            None | Some(TOMB) => {
                t.last_miss = Some(*fp);
                return None;
            }
            Some(v) => v,
        };
        // Its container's list, searched from where the stream was in it.
        let hint = |slot: usize| {
            if slot as u32 == cursor.slot {
                cursor.pos
            } else {
                cursor
                    .recent
                    .iter()
                    .find(|r| r.0 == slot as u32)
                    .map_or(0, |r| r.1)
            }
        };
        if let Some((slot, pos)) = t.load_list(c, v, fp, hint) {
            cursor.go(slot, pos + 1);
        }
        Some(v)
    }

    /// Hint that `fp` will be looked up soon.
    #[inline]
    pub fn prefetch(&self, fp: &Fingerprint) {
        self.t.bloom.prefetch(fp);
    }

    /// Hint that `fp` is looked up `ahead` lookups after `cursor`: unless
    /// the cached list at the cursor predicts it there (most duplicates of
    /// a version series), start loading its Bloom block, so a new chunk's
    /// summary-vector miss overlaps the lookups before it.
    #[inline]
    pub fn prefetch_seq(&mut self, cursor: &DiskCursor, ahead: usize, fp: &Fingerprint) {
        let (t, c) = self.split();
        let predicted = c
            .slots
            .get(cursor.slot as usize)
            .and_then(|s| s.fps().get(cursor.pos as usize + ahead))
            == Some(fp);
        if !predicted {
            t.bloom.prefetch(fp);
            // A new chunk is inserted into the overlay: its slot too.
            t.overlay.prefetch(fp);
        }
    }

    /// Insert or replace; returns the previous value. An error (see the
    /// module documentation) leaves the change made.
    pub fn insert(&mut self, fp: Fingerprint, v: u64) -> Result<Option<u64>> {
        assert_ne!(v, TOMB, "container id reserved by the on-disk index");
        let (t, c) = self.split();
        let old = if t.last_miss == Some(fp) {
            None
        } else {
            t.lookup(c, &fp).0
        };
        t.last_miss = None;
        if old == Some(v) {
            return t.check().map(|()| old);
        }
        if old.is_some() {
            t.shadow(fp);
        }
        t.forget_cached(c, old);
        if old.is_none() {
            t.len += 1;
            t.bloom.insert(&fp);
            if let Some(r) = &mut t.rebuilding {
                r.pending.push(fp);
            }
        }
        t.overlay.insert(fp, v);
        t.after_change()?;
        Ok(old)
    }

    /// Remove; returns the value. An error (see the module documentation)
    /// leaves the change made.
    pub fn remove(&mut self, fp: &Fingerprint) -> Result<Option<u64>> {
        let (t, c) = self.split();
        t.last_miss = None;
        let old = t.lookup(c, fp).0;
        if old.is_none() {
            return t.check().map(|()| None);
        }
        t.shadow(*fp);
        t.forget_cached(c, old);
        t.len -= 1;
        // A mark if an older layer (the frozen overlay, then the runs)
        // would otherwise show a value again.
        let older = t.frozen.as_ref().and_then(|f| f.get(fp)).or_else(|| {
            // Every key in a run is in the filter: most removals skip the runs.
            t.bloom.may_contain(fp).then(|| t.in_runs(fp)).flatten()
        });
        if older.is_some_and(|v| v != TOMB) {
            t.overlay.insert(*fp, TOMB);
        } else {
            t.overlay.remove(fp);
        }
        t.after_change()?;
        Ok(old)
    }

    /// Write pending changes as a run (and wait for it; not for a merge).
    /// Returns an error met by it or by background work finished before.
    pub fn flush(&mut self) -> Result<()> {
        let t = &mut self.t;
        t.flush()?;
        t.finish_flush()?;
        if t.merging.as_ref().is_some_and(|m| m.job.is_finished()) {
            t.merge_levels()?;
        }
        Ok(())
    }

    /// The private directory of the table's files.
    pub fn dir(&self) -> &Path {
        &self.t.dir
    }

    /// Everything a later opening needs to take this table up again (see
    /// `super::runset`): pending changes are flushed first, so the runs,
    /// container lists, summary vector and changed-key set are the whole
    /// table. A merge still running is left out: its inputs are the runs.
    /// A file kept before counts as kept if `still_kept` says it is still
    /// there (else a save keeps it anew).
    pub fn state(&mut self, still_kept: impl Fn(&KeptData) -> bool) -> Result<TableState> {
        self.flush()?;
        let t = &mut self.t;
        if t.rebuilding.is_some() {
            t.install_bloom();
        }
        let runs = t
            .runs
            .iter()
            .map(|r| {
                let bytes = r.map.as_deref().unwrap_or(&[]);
                let f = r
                    .kept
                    .describe(&r.path, bytes, r.fences.as_slice(), &still_kept);
                (f, r.level)
            })
            .collect();
        // Only list files an extent still names, numbered anew.
        let mut renumber: Vec<Option<u32>> = vec![None; t.lists.len()];
        let mut lists = Vec::new();
        let mut extents = Vec::with_capacity(t.extents.len());
        for (&c, ext) in &t.extents {
            let ext = ext
                .as_slice()
                .iter()
                .map(|&(f, first, count)| {
                    let n = *renumber[f as usize].get_or_insert_with(|| {
                        let l = &t.lists[f as usize];
                        let bytes = l.map.as_deref().unwrap_or(&[]);
                        lists.push(l.kept.describe(&l.path, bytes, &[], &still_kept));
                        lists.len() as u32 - 1
                    });
                    (n, first, count)
                })
                .collect();
            extents.push((c, ext));
        }
        extents.sort_unstable_by_key(|e| e.0);
        Ok(TableState {
            runs,
            lists,
            extents,
            len: t.len as u64,
            shadowed: (!t.shadow_full).then(|| t.shadowed.iter().map(|(k, _)| k).collect()),
        })
    }

    /// The summary vector, for a save (after [`state`](Self::state): no
    /// rebuild pending).
    pub fn bloom_mut(&mut self) -> &mut Bloom {
        &mut self.t.bloom
    }

    /// Note the descriptions a save gave this table's files in the kept
    /// run set (by their [`TableFile::path`]), so a later save keeps none
    /// again.
    pub fn kept_as(&self, names: &std::collections::HashMap<PathBuf, KeptData>) {
        let set = |k: &Kept, path: &Path| {
            if let Some(n) = names.get(path) {
                *k.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(n.clone());
            }
        };
        for r in &self.t.runs {
            set(&r.kept, &r.path);
        }
        for l in &self.t.lists {
            set(&l.kept, &l.path);
        }
    }

    /// A table taking up a kept run set: each file in `from` is linked
    /// into a new private directory under `base` (so it outlives the set's
    /// later changes while mapped here) and mapped; its length is checked
    /// now, its blocks as they are read ([`BlockSums`]). A file missing or
    /// of another length is an error naming it.
    pub fn adopt(base: &Path, cfg: DiskConfig, from: &Path, state: Adopted) -> Result<DiskTable> {
        let mut table = DiskTable::create(base, cfg).map_err(|e| io_error(base, e))?;
        let t = &mut table.t;
        let link = |t: &mut Tables, what: &str, f: &KeptData| -> Result<PathBuf> {
            let path = t.file(what);
            let kept = from.join(&f.name);
            std::fs::hard_link(&kept, &path).map_err(|e| io_error(&kept, e))?;
            Ok(path)
        };
        for (f, level) in state.runs {
            let path = link(t, "run", &f.kept)?;
            t.runs
                .push(Arc::new(Run::open(path, f, level, &state.state)?));
        }
        for f in state.lists {
            let path = link(t, "lists", &f.kept)?;
            if !f.kept.len.is_multiple_of(FP_LEN as u64)
                || f.sums.len() as u64 != super::blocksum::blocks_in(f.kept.len)
            {
                return Err(Error::corrupt(
                    path.display().to_string(),
                    "its meta file does not describe it",
                ));
            }
            let map = map_kept(&path, f.kept.len)?;
            let sums = BlockSums::new(f.sums, &path, Arc::clone(&state.state));
            t.lists.push(Arc::new(ListFile {
                path,
                map,
                kept: Kept::known(f.kept),
                sums: Some(sums),
            }));
        }
        let list_len = |f: u32| {
            t.lists
                .get(f as usize)
                .map(|l| l.map.as_ref().map_or(0, |m| m.len() / FP_LEN) as u64)
        };
        t.extents.reserve(state.extents.len());
        for (c, ext) in state.extents {
            for &(f, first, count) in ext.as_slice() {
                if list_len(f).is_none_or(|n| first + count as u64 > n) {
                    return Err(Error::corrupt(
                        from.display().to_string(),
                        format!("container {c}'s list lies outside its file"),
                    ));
                }
            }
            t.extents.insert(c, ext);
        }
        t.bloom = state.bloom;
        t.len = state.len as usize;
        match state.shadowed {
            Some(keys) => {
                // Sized once: growing by doubling rehashed every key
                // again (a tenth of a one-chunk backup at 305 M entries).
                t.shadowed.reserve(keys.len());
                for k in keys {
                    t.shadowed.insert(k, 0);
                }
            }
            None => t.shadow_full = true,
        }
        t.order_runs();
        Ok(table)
    }

    /// Every live entry, in fingerprint order (runs merged, overlay on top).
    pub fn iter(&self) -> impl Iterator<Item = (Fingerprint, u64)> + '_ {
        self.t.iter()
    }
}

impl Tables {
    /// The value of `fp` from the runs (newest first), ignoring the
    /// overlay and cache; `Some(TOMB)` if removed.
    fn in_runs(&self, fp: &Fingerprint) -> Option<u64> {
        if self.shadow_full || (!self.shadowed.is_empty() && self.shadowed.contains(fp)) {
            return self.runs.iter().rev().find_map(|r| r.find(fp));
        }
        // Never changed since inserted: at most one run holds it, most
        // likely the largest, so the search can stop at the first hit
        // (a newest-first search visited every run before the old one
        // that held it).
        self.by_size
            .iter()
            .find_map(|&i| self.runs[i as usize].find(fp))
    }

    /// Note that `fp` changed or went: its records may now lie in several
    /// runs (or be a removal mark), so [`in_runs`](Self::in_runs) must
    /// search it newest first. Past [`SHADOW_MAX`] keys every key is.
    fn shadow(&mut self, fp: Fingerprint) {
        if self.shadow_full {
            return;
        }
        if self.shadowed.len() >= SHADOW_MAX {
            self.shadow_full = true;
            self.shadowed = FpTable::default();
        } else {
            self.shadowed.insert(fp, 0);
        }
    }

    /// Runs by size, largest first (after any change to the runs).
    fn order_runs(&mut self) {
        self.by_size = (0..self.runs.len() as u32).collect();
        self.by_size
            .sort_by_key(|&i| std::cmp::Reverse(self.runs[i as usize].len));
    }

    /// The value of `fp` in the overlay or the frozen one being flushed.
    #[inline]
    fn in_overlays(&self, fp: &Fingerprint) -> Option<u64> {
        self.overlay
            .get(fp)
            .or_else(|| self.frozen.as_ref().and_then(|f| f.get(fp)))
    }

    /// The current value of `fp`, and the cache slot and position when it
    /// came from (or was just loaded into) the cache.
    fn lookup(&self, c: &mut Cache, fp: &Fingerprint) -> (Option<u64>, Option<(u32, u32)>) {
        if let Some(v) = self.in_overlays(fp) {
            c.counts.overlay += 1;
            return ((v != TOMB).then_some(v), None);
        }
        if !self.bloom.may_contain(fp) {
            c.counts.bloom_new += 1;
            return (None, None);
        }
        c.counts.run_probes += 1;
        match self.in_runs(fp) {
            None | Some(TOMB) => (None, None),
            Some(v) => (Some(v), self.load_list(c, v, fp, |_| 0)),
        }
    }

    /// Load container `c`'s list into the cache (evicting the least
    /// recently used one) unless it is there or invalidated; the slot and
    /// position of `fp` in it.
    fn load_list(
        &self,
        cache: &mut Cache,
        c: u64,
        fp: &Fingerprint,
        hint: impl Fn(usize) -> u32,
    ) -> Option<(u32, u32)> {
        if let Some(slot) = cache.slot_of(c) {
            let pos = cache.find_in(slot, hint(slot), fp)?;
            cache.counts.cache += 1;
            cache.touch(slot as u32);
            return Some((slot as u32, pos));
        }
        let ext = self.extents.get(&c)?.as_slice();
        let slot = if cache.slots.len() < self.cfg.cache_containers.max(1) {
            cache.slots.push(Slot::empty());
            cache.slots.len() - 1
        } else {
            let lru = (0..cache.slots.len())
                .min_by_key(|&i| cache.slots[i].used)
                .expect("slots");
            cache.evict(lru);
            lru
        };
        let s = &mut cache.slots[slot];
        if let [(file, first, count)] = ext[..] {
            s.set_borrowed(&self.lists[file as usize], first as usize, count as usize);
        } else {
            let mut fps = std::mem::take(&mut s.owned);
            fps.clear();
            for &(file, first, count) in ext {
                fps.extend_from_slice(
                    self.lists[file as usize].fps(first as usize, count as usize),
                );
            }
            s.set_owned(fps);
        }
        s.container = c;
        let at = s
            .fps()
            .iter()
            .position(|k| k == fp)
            .map(|pos| (slot as u32, pos as u32));
        cache.by_container.insert(c, slot as u32);
        cache.tick += 1;
        cache.counts.lists_loaded += 1;
        cache.slots[slot].used = cache.tick;
        at
    }

    /// A change to a fingerprint whose value was `old`: drop `old`'s list
    /// from the cache and invalidate it, as it names the fingerprint.
    fn forget_cached(&mut self, c: &mut Cache, old: Option<u64>) {
        let Some(old) = old else { return };
        if let Some(slot) = c.slot_of(old) {
            c.evict(slot);
        }
        self.extents.remove(&old);
        if self.flushing.is_some() {
            self.invalidated.insert(old);
        }
    }

    /// After a change: install finished background work, flush a full
    /// overlay, grow the summary vector. An error names the file it met
    /// (this change's flush, or background work finished since the last
    /// change); after one, every change returns the first.
    #[inline]
    fn after_change(&mut self) -> Result<()> {
        // Most changes have no file work: a few comparisons decide it.
        let disk = if self.flushing.as_ref().is_some_and(|j| j.is_finished())
            || self.merging.as_ref().is_some_and(|m| m.job.is_finished())
            || self.overlay_full()
            || self.failed.is_some()
        {
            self.disk_work()
        } else {
            Ok(())
        };
        if let Some(r) = &self.rebuilding {
            if r.job.is_finished() {
                self.install_bloom();
            }
        } else if self.len > self.bloom.capacity() {
            self.rebuild_bloom();
        }
        disk
    }

    /// Whether the overlay is due to be flushed. It grows with the table
    /// (a 64th of it): fewer, larger runs, so each record is rewritten by
    /// fewer merges.
    #[inline]
    fn overlay_full(&self) -> bool {
        self.overlay.len() >= self.cfg.flush_at.max(self.len / 64).max(1)
    }

    /// The file work of [`after_change`](Self::after_change), and the
    /// first error if the table failed.
    #[inline(never)]
    fn disk_work(&mut self) -> Result<()> {
        if self.flushing.as_ref().is_some_and(|j| j.is_finished()) {
            self.finish_flush()?;
        }
        // A merge that finished (or failed) is installed at the next change.
        if self.merging.as_ref().is_some_and(|m| m.job.is_finished()) {
            self.merge_levels()?;
        }
        if self.overlay_full() {
            self.flush()?;
        }
        self.check()
    }

    /// The first error the table met, if any (then it writes no more).
    #[inline]
    fn check(&self) -> Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(f) => Err(f.error()),
        }
    }

    /// Note `e` (the first one is kept) and return it.
    fn fail(&mut self, e: Error) -> Error {
        if self.failed.is_none() {
            self.failed = Some(match &e {
                Error::Io { context, source } => Failure {
                    context: context.clone(),
                    kind: source.kind(),
                    text: source.to_string(),
                },
                other => Failure {
                    context: format!("on-disk index {}", self.dir.display()),
                    kind: std::io::ErrorKind::Other,
                    text: other.to_string(),
                },
            });
        }
        e
    }

    fn file(&mut self, what: &str) -> PathBuf {
        self.next_file += 1;
        self.dir.join(format!("{what}-{:08}", self.next_file))
    }

    /// Write the overlay as a new run and its container lists, then merge
    /// full levels. In the background, the overlay is frozen (still
    /// answering lookups) while a thread sorts and writes it; one flush is
    /// in flight at a time, so a full overlay waits for the previous one.
    pub fn flush(&mut self) -> Result<()> {
        self.check()?;
        if self.overlay.is_empty() {
            return Ok(());
        }
        self.finish_flush()?;
        // Insertion order: the container lists keep each container's order.
        // The overlays and the scratch keep their allocations (refilled to
        // the same size, they neither regrow nor fault in fresh pages).
        let mut entries = std::mem::take(&mut self.scratch);
        entries.clear();
        entries.extend(self.overlay.iter());
        let spare = std::mem::take(&mut self.spare);
        self.frozen = Some(std::mem::replace(&mut self.overlay, spare));
        let lists_path = self.file("lists");
        let run_path = self.file("run");
        let file_no = self.lists.len() as u32;
        let job = move || write_flush(entries, file_no, lists_path, run_path);
        if !self.cfg.background_merges {
            self.flushing = Some(Job::Done(job()));
            return self.finish_flush();
        }
        self.flushing = Some(Job::spawn("tessera-index-flush", job));
        Ok(())
    }

    /// Wait for the flush in flight (if any) and install it. A failed one
    /// gives its entries back to the overlay (under the changes made since
    /// it was frozen): the table answers as before, from memory.
    fn finish_flush(&mut self) -> Result<()> {
        let Some(job) = self.flushing.take() else {
            return Ok(());
        };
        match job.join() {
            Ok(done) => self.install_flush(done),
            Err(e) => {
                if let Some(frozen) = self.frozen.take() {
                    let mut newer = std::mem::replace(&mut self.overlay, frozen);
                    for (fp, v) in newer.iter() {
                        self.overlay.insert(fp, v);
                    }
                    newer.clear();
                    self.spare = newer;
                }
                // No list file came: nothing to keep out of the extents.
                self.invalidated.clear();
                Err(self.fail(e))
            }
        }
    }

    /// Put a written flush in place: its list file and extents (but not
    /// of containers invalidated meanwhile: their lists may name a moved
    /// fingerprint), its run; the frozen overlay becomes the spare. Then
    /// merge (an error is the merge's: the flush is in place).
    fn install_flush(&mut self, done: Flushed) -> Result<()> {
        debug_assert_eq!(self.lists.len(), done.file_no as usize);
        self.lists.push(Arc::new(done.list));
        for (c, ext) in done.extents {
            if !self.invalidated.contains(&c) {
                self.extents.entry(c).or_default().push(ext);
            }
        }
        self.invalidated.clear();
        self.runs.push(Arc::new(done.run));
        self.order_runs();
        if let Some(mut f) = self.frozen.take() {
            f.clear();
            self.spare = f;
        }
        self.scratch = done.entries;
        self.merge_levels()
    }

    /// Merge while [`FANOUT`] consecutive runs share a level (the newest
    /// such group first). In the background, one merge runs at a time: a
    /// finished one is installed here, and runs flushed meanwhile wait.
    /// None starts once the table failed.
    fn merge_levels(&mut self) -> Result<()> {
        loop {
            if let Some(m) = &self.merging {
                if !m.job.is_finished() {
                    return Ok(());
                }
                self.install()?;
            }
            if self.failed.is_some() {
                return Ok(());
            }
            let Some(first) = (0..=self.runs.len().saturating_sub(FANOUT))
                .rev()
                .find(|&i| {
                    i + FANOUT <= self.runs.len()
                        && self.runs[i..i + FANOUT]
                            .iter()
                            .all(|r| r.level == self.runs[i].level)
                })
            else {
                return Ok(());
            };
            let inputs: Vec<Arc<Run>> = self.runs[first..first + FANOUT].to_vec();
            let level = inputs[0].level + 1;
            // Removal marks go once no older run can hold the key.
            let drop_tombs = first == 0;
            let path = self.file("run");
            if self.cfg.background_merges {
                let job = Job::spawn("tessera-index-merge", move || {
                    merge(&inputs, path, level, drop_tombs)
                });
                self.merging = Some(Merging { first, job });
                return Ok(());
            }
            // A failed merge leaves its inputs in place.
            let merged = merge(&inputs, path, level, drop_tombs).map_err(|e| self.fail(e))?;
            self.runs.splice(first..first + FANOUT, [Arc::new(merged)]);
            self.order_runs();
        }
    }

    /// Wait for the background merge (if any) and put its run in place of
    /// its inputs. A failed merge leaves them in place (lookups used them
    /// meanwhile and go on doing so); its error is returned. A merge
    /// thread's panic, a bug, is re-raised.
    fn install(&mut self) -> Result<()> {
        let Some(m) = self.merging.take() else {
            return Ok(());
        };
        let merged = m.job.join().map_err(|e| self.fail(e))?;
        self.runs
            .splice(m.first..m.first + FANOUT, [Arc::new(merged)]);
        self.order_runs();
        Ok(())
    }

    /// Size the summary vector for twice the live fingerprints and fill it
    /// from the runs and overlay (superseded records included: a false
    /// positive costs a probe, never a wrong answer). Doubling keeps all
    /// rebuilds together under twice the final size's work. In the
    /// background, the old filter answers meanwhile (over capacity: more
    /// false positives, never a false negative) and the keys inserted
    /// since are added to the new one when it is installed. It reads
    /// memory and mapped runs only: it cannot fail.
    fn rebuild_bloom(&mut self) {
        let runs: Vec<Arc<Run>> = self.runs.clone();
        let overlay: Vec<Fingerprint> = self
            .overlay
            .iter()
            .chain(self.frozen.iter().flat_map(|f| f.iter()))
            .filter_map(|(fp, v)| (v != TOMB).then_some(fp))
            .collect();
        let capacity = self.len * 2;
        let build = move || {
            let mut b = Bloom::new(capacity);
            for r in &runs {
                if let Err(d) = r.verify() {
                    d.fail();
                }
                b.insert_all((0..r.len).filter_map(|i| {
                    let (k, v) = r.rec(i);
                    (v != TOMB).then(|| Fingerprint(k.try_into().unwrap()))
                }));
            }
            b.insert_all(overlay.into_iter());
            b
        };
        if !self.cfg.background_merges {
            self.bloom = build();
            return;
        }
        self.rebuilding = Some(Rebuilding {
            job: Job::spawn("tessera-index-bloom", build),
            pending: Vec::new(),
            bytes: Bloom::bytes_for(capacity),
        });
    }

    /// Wait for the background rebuild (if any), add the keys inserted
    /// since it started, and use its filter.
    fn install_bloom(&mut self) {
        let Some(r) = self.rebuilding.take() else {
            return;
        };
        let mut b = r.job.join();
        b.insert_all(r.pending.into_iter());
        self.bloom = b;
    }

    /// Every live entry, in fingerprint order (runs merged, overlay on top).
    pub fn iter(&self) -> impl Iterator<Item = (Fingerprint, u64)> + '_ {
        // The overlay over the frozen one (being flushed) as one source.
        let mut over: Vec<(Fingerprint, u64)> = self.overlay.iter().collect();
        if let Some(f) = &self.frozen {
            over.extend(f.iter().filter(|(k, _)| self.overlay.get(k).is_none()));
        }
        over.sort_unstable_by(|a, b| key_cmp(&a.0 .0, &b.0 .0));
        for r in &self.runs {
            if let Err(d) = r.verify() {
                d.fail();
            }
        }
        // Sources newest first: overlays, then runs newest to oldest.
        let n = self.runs.len();
        let mut heads = vec![0usize; n + 1];
        let key = move |s: usize,
                        h: usize,
                        over: &Vec<(Fingerprint, u64)>|
              -> Option<(Fingerprint, u64)> {
            if s == 0 {
                over.get(h).copied()
            } else {
                let r = &self.runs[n - s];
                (h < r.len).then(|| (r.fp(h), r.rec(h).1))
            }
        };
        std::iter::from_fn(move || loop {
            // The smallest key among the heads; the newest source wins.
            let mut best: Option<(Fingerprint, u64)> = None;
            for (s, &h) in heads.iter().enumerate() {
                if let Some((k, v)) = key(s, h, &over) {
                    if best.is_none_or(|(b, _)| k < b) {
                        best = Some((k, v));
                    }
                }
            }
            let (k, v) = best?;
            for (s, h) in heads.iter_mut().enumerate() {
                if key(s, *h, &over).is_some_and(|(x, _)| x == k) {
                    *h += 1;
                }
            }
            if v != TOMB {
                return Some((k, v));
            }
        })
    }
}

/// A flush written (on its own thread or inline), to install.
struct Flushed {
    file_no: u32,
    list: ListFile,
    /// Container → its extent in `list`.
    extents: Vec<(u64, Extent)>,
    run: Run,
    /// The scratch buffer, handed back.
    entries: Vec<(Fingerprint, u64)>,
}

/// Write a flush's `entries` (insertion order) as list file `file_no` at
/// `lists_path` and a level-0 run at `run_path`. On an error neither file
/// is left.
fn write_flush(
    mut entries: Vec<(Fingerprint, u64)>,
    file_no: u32,
    lists_path: PathBuf,
    run_path: PathBuf,
) -> Result<Flushed> {
    let mut by_container: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].1 != TOMB)
        .collect();
    by_container.sort_by_key(|&i| entries[i].1);
    let mut extents = Vec::new();
    let f = create(&lists_path)?;
    let map = fill(&lists_path, f, |w| {
        let mut i = 0;
        while i < by_container.len() {
            let c = entries[by_container[i]].1;
            let start = i;
            while i < by_container.len() && entries[by_container[i]].1 == c {
                w.write_all(&entries[by_container[i]].0 .0)?;
                i += 1;
            }
            extents.push((c, (file_no, start as u64, (i - start) as u32)));
        }
        Ok(by_container.is_empty())
    })?;
    entries.sort_unstable_by(|a, b| key_cmp(&a.0 .0, &b.0 .0));
    let run = Run::write(run_path, 0, entries.iter().copied()).inspect_err(|_| {
        let _ = std::fs::remove_file(&lists_path);
    })?;
    Ok(Flushed {
        file_no,
        list: ListFile {
            path: lists_path,
            map,
            kept: Kept::default(),
            sums: None,
        },
        extents,
        run,
        entries,
    })
}

/// A larger summary vector being filled on its own thread from a snapshot
/// of the runs and overlay; `pending` holds the keys inserted since.
struct Rebuilding {
    job: Job<Bloom>,
    pending: Vec<Fingerprint>,
    /// The new filter's size: while it fills, both filters are in RAM.
    bytes: usize,
}

/// A merge on its own thread: the inputs are `runs[first..first + FANOUT]`
/// (runs are only appended meanwhile, so the range stays theirs).
struct Merging {
    first: usize,
    job: Job<Result<Run>>,
}

/// Merge sorted `runs` (oldest first) into one run of `level` at `path`:
/// the newest record of a key wins; removal marks are dropped with
/// `drop_tombs`.
fn merge(runs: &[Arc<Run>], path: PathBuf, level: u32, drop_tombs: bool) -> Result<Run> {
    // Runs taken up from a kept set are read whole: verified first, so a
    // damaged block is never merged into a run trusted from then on.
    for r in runs {
        r.verify().map_err(Damage::error)?;
    }
    let mut at: Vec<usize> = vec![0; runs.len()];
    // At most FANOUT runs: the smallest head is found by a scan of integer
    // heads (cheaper than a heap of 32-byte keys), the newest run winning a
    // tie; every run at that key advances.
    let next = std::iter::from_fn(|| loop {
        let mut best: Option<(usize, u64)> = None;
        for (r, run) in runs.iter().enumerate().rev() {
            if at[r] == run.len {
                continue;
            }
            let h = head(run.rec(at[r]).0);
            let better = match best {
                None => true,
                Some((b, bh)) => h < bh || (h == bh && run.rec(at[r]).0 < runs[b].rec(at[b]).0),
            };
            if better {
                best = Some((r, h));
            }
        }
        let (b, _) = best?;
        let (k, v) = runs[b].rec(at[b]);
        let fp = Fingerprint(k.try_into().expect("a key"));
        for (r, run) in runs.iter().enumerate() {
            if at[r] < run.len && run.rec(at[r]).0 == &fp.0[..] {
                at[r] += 1;
            }
        }
        if drop_tombs && v == TOMB {
            continue;
        }
        return Some((fp, v));
    });
    Run::write(path, level, next)
}

impl Drop for DiskTable {
    fn drop(&mut self) {
        // The merge thread writes in the directory: wait for it first.
        if let Some(m) = self.t.merging.take() {
            m.job.wait();
        }
        if let Some(f) = self.t.flushing.take() {
            f.wait();
        }
        if let Some(r) = self.t.rebuilding.take() {
            r.job.wait();
        }
        self.t.runs.clear();
        self.t.lists.clear();
        let _ = std::fs::remove_dir_all(&self.t.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An extent list is spelled as the vector it replaces (a kept set of
    /// either form reads as the other), keeps its extents in order, and
    /// holds one inline.
    #[test]
    fn extent_lists_read_and_write_as_vectors() {
        for v in [
            vec![],
            vec![(1, 2, 3)],
            vec![(1, 2, 3), (4, 5, 6), (7, 8, 9)],
        ] {
            let l: ExtentList = v.iter().copied().collect();
            assert_eq!(l.as_slice(), &v[..]);
            let json = serde_json::to_string(&l).unwrap();
            assert_eq!(json, serde_json::to_string(&v).unwrap());
            let back: ExtentList = serde_json::from_str(&json).unwrap();
            assert_eq!(back, l);
            assert_eq!(matches!(l, ExtentList::One(_)), v.len() == 1);
        }
        let mut h = std::collections::HashSet::<u64, crate::ids::IdBuildHasher>::default();
        assert!((0..100_000u64).all(|i| h.insert(i)) && h.contains(&99_999));
    }
    use std::collections::HashMap;

    fn fp(i: u64) -> Fingerprint {
        crate::HashAlgo::Blake3.hash(&i.to_le_bytes())
    }

    /// A table in its own directory under the tests' temporary one.
    fn table(flush_at: usize, cache_containers: usize, background_merges: bool) -> DiskTable {
        let dir = std::env::temp_dir().join("tessera-disk-unit");
        let cfg = DiskConfig {
            flush_at,
            cache_containers,
            background_merges,
        };
        DiskTable::create(&dir, cfg).unwrap()
    }

    /// Random inserts, moves and removals with tiny flushes: every answer
    /// (get, contains, the cursor path, len, iteration) equals a hash map's.
    #[test]
    fn matches_a_hash_map_through_flushes_merges_and_cache() {
        for background_merges in [false, true] {
            matches_a_hash_map(background_merges);
        }
    }

    fn matches_a_hash_map(background_merges: bool) {
        let mut t = table(37, 3, background_merges);
        let mut m: HashMap<Fingerprint, u64> = HashMap::new();
        let mut x = 5u64;
        let mut cursor = DiskCursor::default();
        for step in 0..40_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = fp((x >> 8) % 2000);
            match (x >> 40) % 5 {
                0 | 1 => {
                    // Containers of ~20 consecutive inserts, as ingest fills them.
                    let c = step / 20 % 50;
                    assert_eq!(t.insert(key, c).unwrap(), m.insert(key, c));
                }
                2 => assert_eq!(t.remove(&key).unwrap(), m.remove(&key)),
                _ => {
                    let seq = fp(step % 2000);
                    assert_eq!(t.get_seq(&mut cursor, &seq), m.get(&seq).copied());
                    assert_eq!(t.get(&key), m.get(&key).copied());
                }
            }
            assert_eq!(t.len(), m.len());
            if step % 5000 == 0 {
                let all: Vec<_> = t.iter().collect();
                let mut want: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
                want.sort();
                assert_eq!(all, want);
            }
        }
        if background_merges {
            // Merges lag by a flush or more; every one is installed at last.
            assert!(t.runs() > 1, "{} runs", t.runs());
        } else {
            assert!(t.runs() > 1 && t.runs() < 12, "{} runs", t.runs());
        }
    }

    /// Keys whose first bytes are mostly zero (short trace fingerprints
    /// of small numbers) crowd one bucket of a run's fence directory:
    /// lookups stay exact, present and absent, through flushes and merges.
    #[test]
    fn skewed_keys_crowding_one_directory_bucket_are_found() {
        let key = |i: u32| Fingerprint::from_slice(&i.to_be_bytes()).unwrap();
        for background_merges in [false, true] {
            let mut t = table(100, 2, background_merges);
            for i in 0..5000u32 {
                t.insert(key(i * 2 + 1), u64::from(i / 50)).unwrap();
            }
            t.flush().unwrap();
            assert!(t.runs() >= 1);
            for i in 0..5000u32 {
                assert_eq!(t.get(&key(i * 2 + 1)), Some(u64::from(i / 50)), "{i}");
                assert_eq!(t.get(&key(i * 2)), None, "{i}");
            }
            assert_eq!(t.iter().count(), 5000);
        }
    }

    /// A version series re-reads containers in order: after the first
    /// chunk of each container (a run probe loading its list), lookups hit
    /// at the cursor; new chunks are answered by the Bloom filter.
    #[test]
    fn repeated_stream_hits_the_locality_cache() {
        let mut t = table(1000, 4, true);
        for i in 0..10_000u64 {
            t.insert(fp(i), i / 100).unwrap();
        }
        t.flush().unwrap();
        let before = t.counts();
        let mut cursor = DiskCursor::default();
        for i in 0..10_000u64 {
            assert!(t.contains_seq(&mut cursor, &fp(i)));
        }
        for i in 10_000..20_000u64 {
            assert!(!t.contains_seq(&mut cursor, &fp(i)));
        }
        let c = t.counts();
        assert_eq!(c.lists_loaded - before.lists_loaded, 100, "{c:?}");
        // One probe per container, plus the Bloom filter's false positives.
        assert!(
            (100..200).contains(&(c.run_probes - before.run_probes)),
            "{c:?}"
        );
        assert_eq!(c.cursor - before.cursor, 9_900, "{c:?}");
        assert!(c.bloom_new - before.bloom_new > 9_500, "{c:?}");
        // A new version that drops chunks of a container (within the
        // look-ahead) and alternates between two containers: one probe
        // and one list load per container, every other lookup at a cursor
        // or where the stream left the other list.
        let before = t.counts();
        let mut cursor = DiskCursor::default();
        let stream = (0..50)
            .chain(100..150)
            .chain((50..100).filter(|i| i % 5 != 0))
            .chain(150..200);
        for i in stream {
            assert_eq!(t.get_seq(&mut cursor, &fp(i)), Some(i / 100));
        }
        let c = t.counts();
        assert_eq!(c.lists_loaded - before.lists_loaded, 2, "{c:?}");
        assert_eq!(c.run_probes - before.run_probes, 2, "{c:?}");
        assert_eq!(c.cursor - before.cursor, 188, "{c:?}");

        // A moved chunk invalidates its old container's list: the lookup
        // still answers exactly, from the overlay.
        t.insert(fp(5), 999).unwrap();
        assert_eq!(t.get(&fp(5)), Some(999));
        assert_eq!(t.get(&fp(6)), Some(0));
    }

    /// A container whose chunks straddle flushes has its list in several
    /// list files: loading it gathers them all, so the stream finds every
    /// later chunk of the container at the cursor.
    #[test]
    fn a_list_split_across_flushes_is_loaded_whole() {
        let mut t = table(1000, 4, false);
        // Containers of 300: 3 and 6 straddle the flushes at 1000 and 2000.
        for i in 0..3_000u64 {
            t.insert(fp(i), i / 300).unwrap();
        }
        t.flush().unwrap();
        let split =
            t.t.extents
                .values()
                .filter(|e| e.as_slice().len() > 1)
                .count();
        assert_eq!(split, 2, "containers 3 and 6 in two list files");
        let before = t.counts();
        let mut cursor = DiskCursor::default();
        for i in 0..3_000u64 {
            assert_eq!(t.get_seq(&mut cursor, &fp(i)), Some(i / 300));
        }
        let c = t.counts();
        assert_eq!(c.lists_loaded - before.lists_loaded, 10, "{c:?}");
        assert_eq!(c.run_probes - before.run_probes, 10, "{c:?}");
        assert_eq!(c.cursor - before.cursor, 2_990, "{c:?}");
    }

    /// Every answer of `t` equals the model's.
    fn exact(t: &DiskTable, m: &HashMap<Fingerprint, u64>) {
        for (k, v) in m {
            assert_eq!(t.get(k), Some(*v));
        }
        assert_eq!(t.get(&fp(u64::MAX)), None);
        assert_eq!(t.len(), m.len());
        let mut want: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        want.sort();
        assert_eq!(t.iter().collect::<Vec<_>>(), want);
    }

    /// Put a regular file where the table's directory was (as root, a
    /// permission change would not stop the writes).
    fn break_dir(t: &DiskTable) -> PathBuf {
        let dir = t.dir().to_path_buf();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, b"not a directory").unwrap();
        dir
    }

    /// One line: the file under `dir` that could not be written, and why.
    fn names_a_file_in(e: &Error, dir: &Path, file: &str) {
        let msg = e.to_string();
        assert!(matches!(e, Error::Io { .. }), "{msg}");
        let at = format!("on-disk index {}/{file}", dir.display());
        assert!(msg.starts_with(&at), "{msg} (expected {at}…)");
        assert!(!msg.contains('\n'), "{msg}");
    }

    /// The directory replaced by a file under an open table: the change
    /// whose flush cannot create its file (or the flush after it, when the
    /// flush ran on its own thread) returns an error naming the file; no
    /// call panics; every change is still made and every lookup exact;
    /// every later change or flush returns the first error again.
    #[test]
    fn a_directory_gone_is_an_error_naming_the_file() {
        for background_merges in [false, true] {
            let mut t = table(100, 4, background_merges);
            let mut m = HashMap::new();
            for i in 0..250u64 {
                t.insert(fp(i), i / 10).unwrap();
                m.insert(fp(i), i / 10);
            }
            t.flush().unwrap();
            let dir = break_dir(&t);
            let mut err = None;
            for i in 250..1000u64 {
                m.insert(fp(i), i / 10);
                if let Err(e) = t.insert(fp(i), i / 10) {
                    err = Some(e);
                    break;
                }
            }
            if !background_merges {
                assert_eq!(m.len(), 350, "the 100th change since the flush flushes");
            }
            let err = err.unwrap_or_else(|| t.flush().unwrap_err());
            names_a_file_in(&err, &dir, "lists-");
            exact(&t, &m);
            // Changes are made, and fail with the first error.
            let again = t.insert(fp(5000), 7).unwrap_err();
            assert_eq!(again.to_string(), err.to_string());
            m.insert(fp(5000), 7);
            assert_eq!(t.remove(&fp(3)).unwrap_err().to_string(), err.to_string());
            m.remove(&fp(3));
            assert_eq!(t.flush().unwrap_err().to_string(), err.to_string());
            exact(&t, &m);
            drop(t);
            std::fs::remove_file(&dir).unwrap();
        }
    }

    /// A flush on its own thread that cannot write: the change that started
    /// it succeeds, lookups answer from the frozen overlay meanwhile, and
    /// the next change returns the error.
    #[test]
    fn a_failed_background_flush_surfaces_at_the_next_change() {
        let mut t = table(100, 4, true);
        let mut m = HashMap::new();
        for i in 0..99u64 {
            t.insert(fp(i), i / 10).unwrap();
            m.insert(fp(i), i / 10);
        }
        let dir = break_dir(&t);
        // The 100th: the overlay goes to a flush thread.
        t.insert(fp(99), 9).unwrap();
        m.insert(fp(99), 9);
        let flushing = || t.t.flushing.as_ref().expect("a flush in flight");
        while !flushing().is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        exact(&t, &m);
        let err = t.insert(fp(100), 10).unwrap_err();
        m.insert(fp(100), 10);
        names_a_file_in(&err, &dir, "lists-00000001");
        assert_eq!(t.runs(), 0);
        exact(&t, &m);
        drop(t);
        std::fs::remove_file(&dir).unwrap();
    }

    /// A merge that cannot create its run (the name taken): its inputs
    /// stay in place and answer every lookup; the error names the run and
    /// comes from the flush that merged (inline) or, when the merge ran on
    /// its own thread, from the next change after it finished.
    #[test]
    fn a_failed_merge_keeps_its_inputs_and_surfaces_at_the_next_call() {
        for background_merges in [false, true] {
            let mut t = table(100, 4, background_merges);
            let mut m = HashMap::new();
            for i in 0..300u64 {
                t.insert(fp(i), i / 10).unwrap();
                m.insert(fp(i), i / 10);
                if i % 100 == 99 {
                    t.flush().unwrap();
                }
            }
            assert_eq!(t.runs(), 3);
            // The fourth flush writes a list file and a run; the merge of
            // the four runs takes the name after them.
            let merged = format!("run-{:08}", t.t.next_file + 3);
            std::fs::create_dir(t.dir().join(&merged)).unwrap();
            for i in 300..399u64 {
                t.insert(fp(i), i / 10).unwrap();
                m.insert(fp(i), i / 10);
            }
            m.insert(fp(399), 39);
            let err = if background_merges {
                // The flush goes to its thread; installed, it starts the
                // merge on another.
                t.insert(fp(399), 39).unwrap();
                let t = &mut t.t;
                while !t.flushing.as_ref().expect("flushing").is_finished() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                t.finish_flush().unwrap();
                while !t.merging.as_ref().expect("merging").job.is_finished() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                None
            } else {
                Some(t.insert(fp(399), 39).unwrap_err())
            };
            assert_eq!(t.runs(), 4);
            exact(&t, &m);
            let err = err.unwrap_or_else(|| {
                m.insert(fp(400), 40);
                t.insert(fp(400), 40).unwrap_err()
            });
            names_a_file_in(&err, t.dir(), &merged);
            assert_eq!(t.runs(), 4, "the inputs stay");
            exact(&t, &m);
            assert_eq!(t.flush().unwrap_err().to_string(), err.to_string());
        }
    }
}
