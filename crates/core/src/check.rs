//! `tessera check`: verify that everything the newest manifest promises is
//! there and intact, and say exactly which backups (and files) a problem
//! touches.
//!
//! Levels of effort:
//! - always: every listed container's header and metadata (checksummed) are
//!   read, every index entry must name a listed container that holds the
//!   chunk, every retained backup's recipe tree is walked (recipe containers
//!   are read whole and verified, recipe chunks rehashed) and every data
//!   chunk it references must be indexed and present in its container's
//!   metadata;
//! - `--read-data`: every data container (or a deterministic subset) is read
//!   whole, its checksums verified and every chunk's fingerprint recomputed.
//!
//! Problems are collected, never fatal: one bad container must not hide the
//! next. For a directory backup the damaged byte ranges are mapped back to
//! the files of its tar stream (see [`crate::salvage`]).

use crate::backend::{Generation, KeyKind};
use crate::catalog::{BackupEntry, BackupId, ContainerEntry, SourceKind};
use crate::container::format::object_name;
use crate::container::{ChunkKind, ChunkMeta, ContainerId};
use crate::context::Context;
use crate::error::{Error, Result, Subject};
use crate::fingerprint::{Fingerprint, FpMap};
use crate::recipe::RecipeReader;
use crate::salvage;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};

/// How much chunk data `check` reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadData {
    /// Metadata and recipes only.
    #[default]
    None,
    /// Every data container.
    All,
    /// Part `n` of `m` (1-based): the containers whose position in the
    /// manifest is `n-1` modulo `m`, so `m` runs cover everything.
    Subset { n: u64, m: u64 },
}

impl ReadData {
    /// Parse `N/M` as used by `--read-data-subset`.
    pub fn parse_subset(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("bad subset '{s}': expected N/M with 1 ≤ N ≤ M, e.g. 1/10");
        let (n, m) = s.split_once('/').ok_or_else(bad)?;
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        let m: u64 = m.trim().parse().map_err(|_| bad())?;
        if n == 0 || m == 0 || n > m {
            return Err(bad());
        }
        Ok(ReadData::Subset { n, m })
    }

    fn selects(&self, position: usize) -> bool {
        match *self {
            ReadData::None => false,
            ReadData::All => true,
            ReadData::Subset { n, m } => position as u64 % m == n - 1,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions {
    pub read_data: ReadData,
}

/// One problem: the object at fault and what it affects.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// The object at fault (`container 00000000000000a1`, `index segment …`,
    /// `backup 3`, `manifest`).
    pub object: String,
    pub problem: String,
    /// Retained backups that cannot be restored completely because of it.
    pub backups: Vec<BackupId>,
    /// Paths inside directory backups whose bytes are affected.
    pub files: Vec<String>,
}

/// What `check` verified and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    pub generation: Generation,
    pub backups: usize,
    pub containers: usize,
    pub index_entries: usize,
    pub recipe_chunks_checked: u64,
    pub data_chunks_referenced: u64,
    /// Data containers read whole and verified (`--read-data`).
    pub data_containers_read: u64,
    /// Chunks whose fingerprint was recomputed.
    pub chunks_rehashed: u64,
    /// Objects no manifest lists (left by an interrupted mutation): removed by
    /// the next writer or by `--repair-leftovers`; not a problem.
    pub leftovers: Vec<String>,
    pub problems: Vec<Problem>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// A data chunk a backup cannot restore: the container the index names
/// (`ContainerId(u64::MAX)` if none) and the chunk's (offset, length) in the backup.
type DamagedChunk = (ContainerId, (u64, u64));

/// Why a recipe walk stopped, and the recipe container it was reading.
type WalkError = (Option<ContainerId>, Error);

/// What the container pass learned, for the index and backup passes.
#[derive(Default)]
struct Containers {
    /// Container id → its problem's index in the report, so affected
    /// backups can be added.
    bad: HashMap<ContainerId, usize>,
    /// Container id → chunk fingerprints it holds (from its metadata).
    contents: HashMap<ContainerId, FpMap<(ChunkKind, u32)>>,
}

/// A container as read: its chunks' metadata, the kind its header says, and
/// the chunks whose bytes do not match their fingerprints (if read whole).
type ReadContainer = (Vec<ChunkMeta>, ChunkKind, Vec<Fingerprint>);

impl Context {
    /// Every listed container's header and metadata (and its data, when
    /// read whole) against the manifest.
    fn check_containers(&self, opts: &CheckOptions, report: &mut CheckReport) -> Containers {
        let mut out = Containers::default();
        for (pos, c) in self.manifest.containers.iter().enumerate() {
            let name = object_name(c.id);
            let problem = match self.read_for_check(c, pos, opts, report) {
                // The problem's `object` names the container; a corruption or
                // loss of just that object gives only what is wrong.
                Err(e @ (Error::Corrupt { .. } | Error::MissingObject(_)))
                    if e.subject() == Some(&Subject::new(name.clone())) =>
                {
                    Some(e.problem())
                }
                Err(e) => Some(e.to_string()),
                Ok((metas, kind, bad)) => {
                    let mut map = FpMap::default();
                    for meta in metas.iter().filter(|m| !bad.contains(&m.fp)) {
                        map.insert(meta.fp, (meta.kind, meta.len));
                    }
                    out.contents.insert(c.id, map);
                    container_problem(c, &metas, kind, &bad)
                }
            };
            if let Some(p) = problem {
                out.bad.insert(c.id, report.problems.len());
                report.problems.push(Problem {
                    object: name.to_string(),
                    problem: p,
                    backups: Vec::new(),
                    files: Vec::new(),
                });
            }
        }
        out
    }

    /// Read a container for [`check_containers`](Self::check_containers):
    /// recipe containers are small and the recipe walk reads them whole
    /// anyway; data containers only when `--read-data` selects them.
    fn read_for_check(
        &self,
        c: &ContainerEntry,
        pos: usize,
        opts: &CheckOptions,
        report: &mut CheckReport,
    ) -> Result<ReadContainer> {
        let whole = c.kind == ChunkKind::Recipe
            || (!self.manifest.config.trace && opts.read_data.selects(pos));
        if !whole {
            return self
                .store
                .read_meta(c.id)
                .map(|(h, metas)| (metas, h.kind, Vec::new()));
        }
        match self.store.read(c.id) {
            Ok(cont) => {
                report.data_containers_read += (c.kind == ChunkKind::Data) as u64;
                let algo = self.fingerprinter();
                let mut bad = Vec::new();
                for meta in &cont.meta {
                    report.chunks_rehashed += 1;
                    if algo.hash(cont.bytes(meta)) != meta.fp {
                        bad.push(meta.fp);
                    }
                }
                Ok((cont.meta.clone(), cont.header.kind, bad))
            }
            // The data section is damaged: find out which chunks.
            Err(e) => match self.salvage(c.id) {
                Some((metas, kind, bad)) => {
                    report.data_containers_read += (c.kind == ChunkKind::Data) as u64;
                    report.chunks_rehashed += metas.len() as u64;
                    Ok((metas, kind, bad))
                }
                None => Err(e),
            },
        }
    }

    /// Every index entry names a listed container holding that chunk.
    fn check_index(&self, containers: &Containers, report: &mut CheckReport) {
        let mut stale = 0u64;
        let mut first_stale = None;
        for e in self.index.entries() {
            let held = containers
                .contents
                .get(&e.container)
                .and_then(|m| m.get(&e.fp))
                .is_some_and(|(k, _)| *k == e.kind);
            let known_bad = containers.bad.contains_key(&e.container);
            if !held && !known_bad {
                stale += 1;
                first_stale.get_or_insert(e);
            }
        }
        if let Some(e) = first_stale {
            report.problems.push(Problem {
                object: "index".into(),
                problem: format!(
                    "{stale} entries point at chunks their container does not hold (first: {:?} chunk {} in {})",
                    e.kind,
                    e.fp.to_hex(),
                    object_name(e.container)
                ),
                backups: Vec::new(),
                files: Vec::new(),
            });
        }
    }

    /// Walk every retained backup; charge its damage to the bad containers
    /// it falls in, or report it against the backup.
    fn check_backups(&self, containers: &Containers, report: &mut CheckReport) -> Result<()> {
        let bad_container = &containers.bad;
        let mut recipes = self.recipe_reader(16)?;
        let mut seen_data: FpMap<()> = FpMap::default();
        for b in &self.manifest.backups {
            let (damage, walk_error) = self.check_backup(
                b,
                &containers.contents,
                &mut recipes,
                report,
                &mut seen_data,
            );
            let mut affected: BTreeSet<usize> = BTreeSet::new();
            // A recipe that cannot be walked because its container is bad is
            // that container's problem.
            let walk_error = match walk_error {
                Some((Some(cid), e)) if bad_container.contains_key(&cid) => {
                    affected.insert(bad_container[&cid]);
                    let _ = e;
                    None
                }
                other => other.map(|(_, e)| e),
            };
            for &(cid, _) in &damage {
                if let Some(&i) = bad_container.get(&cid) {
                    affected.insert(i);
                }
            }
            let orphan: Vec<(u64, u64)> = damage
                .iter()
                .filter(|(cid, _)| !bad_container.contains_key(cid))
                .map(|&(_, r)| r)
                .collect();
            let all: Vec<(u64, u64)> = damage.iter().map(|&(_, r)| r).collect();
            let files = if all.is_empty() || b.source != SourceKind::Tree {
                Vec::new()
            } else {
                self.damaged_files(b, &all)
            };
            for i in affected {
                let p = &mut report.problems[i];
                p.backups.push(b.id);
                p.files
                    .extend(files.iter().map(|f| format!("{}: {f}", b.id)));
            }
            if !orphan.is_empty() {
                report.problems.push(Problem {
                    object: format!("backup {}", b.id),
                    problem: format!(
                        "{} chunks are not in the index or not in the container it names (first at offset {})",
                        orphan.len(),
                        orphan[0].0
                    ),
                    backups: vec![b.id],
                    files: files.clone(),
                });
            }
            if let Some(e) = walk_error {
                report.problems.push(Problem {
                    object: format!("backup {}", b.id),
                    problem: format!("recipe unreadable: {e}"),
                    backups: vec![b.id],
                    files: Vec::new(),
                });
            }
        }
        report.data_chunks_referenced = seen_data.len() as u64;
        Ok(())
    }

    /// Read a container whose data checksum fails without that check, and
    /// rehash every chunk: returns its metadata, kind and the fingerprints of
    /// the damaged chunks, or None if even the header or metadata is bad.
    fn salvage(&self, id: ContainerId) -> Option<(Vec<ChunkMeta>, ChunkKind, Vec<Fingerprint>)> {
        let (object, h, metas) = self.salvage_object(id)?;
        let algo = self.fingerprinter();
        let sealer = self.store.sealer();
        let bad = metas
            .iter()
            .enumerate()
            .filter(|&(i, m)| {
                salvage::chunk_bytes(&object, &metas, i, sealer)
                    .is_none_or(|b| algo.hash(&b) != m.fp)
            })
            .map(|(_, m)| m.fp)
            .collect();
        Some((metas, h.kind, bad))
    }

    /// Walk one backup's recipe; return the damaged data chunks as
    /// (container, (offset, len)) and the error that stopped the walk, if any.
    fn check_backup(
        &self,
        b: &BackupEntry,
        contents: &HashMap<ContainerId, FpMap<(ChunkKind, u32)>>,
        recipes: &mut RecipeReader,
        report: &mut CheckReport,
        seen: &mut FpMap<()>,
    ) -> (Vec<DamagedChunk>, Option<WalkError>) {
        let mut damage = Vec::new();
        let loads = recipes.loads();
        let walk = (|| -> Result<()> {
            let root = b.root_fp()?;
            let mut walker = recipes.entries(root, b.root_level)?;
            let mut offset = 0u64;
            while let Some(e) = walker.next()? {
                seen.insert(e.fp, ());
                let held = self.locate_copy(ChunkKind::Data, &e.fp, e.copy).map(|cid| {
                    let ok = contents
                        .get(&cid)
                        .and_then(|m| m.get(&e.fp))
                        .is_some_and(|&(k, len)| k == ChunkKind::Data && len as u64 == e.size);
                    (cid, ok)
                });
                match held {
                    Some((_, true)) => {}
                    Some((cid, false)) => damage.push((cid, (offset, e.size))),
                    None => damage.push((ContainerId(u64::MAX), (offset, e.size))),
                }
                offset += e.size;
            }
            if offset != b.logical_bytes {
                return Err(Error::corrupt(
                    format!("backup {}", b.id),
                    format!(
                        "recipe covers {offset} bytes, the catalog says {}",
                        b.logical_bytes
                    ),
                ));
            }
            Ok(())
        })();
        report.recipe_chunks_checked += recipes.loads() - loads;
        // The container of this walk's last load (none if it loaded nothing).
        let last_recipe_container = (recipes.loads() > loads)
            .then(|| recipes.last_container())
            .flatten();
        (damage, walk.err().map(|e| (last_recipe_container, e)))
    }
}
/// [`Repository::check`](crate::Repository::check).
pub(crate) fn check(repo: &Context, opts: &CheckOptions) -> Result<CheckReport> {
    let m = &repo.manifest;
    let mut report = CheckReport {
        generation: m.generation,
        backups: m.backups.len(),
        containers: m.containers.len(),
        index_entries: {
            let (d, r) = repo.need_index()?.len();
            d + r
        },
        leftovers: repo.find_leftovers()?,
        ..Default::default()
    };
    let containers = repo.check_containers(opts, &mut report);
    repo.check_index(&containers, &mut report);
    repo.check_backups(&containers, &mut report)?;
    Ok(report)
}

/// What is wrong with a container as read, if anything: the kind its
/// header says, its chunk count, chunks whose bytes do not match.
fn container_problem(
    c: &ContainerEntry,
    metas: &[ChunkMeta],
    kind: ChunkKind,
    bad: &[Fingerprint],
) -> Option<String> {
    if kind != c.kind {
        Some(format!(
            "holds {kind:?} chunks, the manifest lists it for {:?} chunks",
            c.kind
        ))
    } else if metas.len() as u32 != c.chunks {
        Some(format!(
            "holds {} chunks, the manifest says {}",
            metas.len(),
            c.chunks
        ))
    } else {
        bad.first().map(|fp| {
            format!(
                "data corrupted: {} of its {} chunks do not match their fingerprints (first: {})",
                bad.len(),
                metas.len(),
                fp.to_hex()
            )
        })
    }
}

/// Check whatever is at `backend`, including a repository that cannot be
/// opened: a lost or unreadable manifest is a problem to report, not a
/// reason to stop without a report.
pub fn check_backend(
    backend: std::sync::Arc<dyn crate::backend::ObjectStore>,
    opts: &CheckOptions,
) -> Result<CheckReport> {
    check_backend_with(backend, opts, &crate::context::no_password)
}

/// [`check_backend`] of a repository that may be encrypted: `password` is
/// asked for if it is. Index segments that cannot be read (missing,
/// tampered, swapped) are reported each, and the rest is checked without
/// them.
pub fn check_backend_with(
    backend: std::sync::Arc<dyn crate::backend::ObjectStore>,
    opts: &CheckOptions,
    password: crate::context::PasswordSource,
) -> Result<CheckReport> {
    let problem = |object: &str, problem: String| CheckReport {
        problems: vec![Problem {
            object: object.into(),
            problem,
            backups: Vec::new(),
            files: Vec::new(),
        }],
        ..Default::default()
    };
    let mut bad_segments = Vec::new();
    match crate::layout::open(
        backend.clone(),
        password,
        crate::context::IndexLoad::Now,
        Some(&mut bad_segments),
    ) {
        Ok((cx, _layout)) => {
            let mut report = check(&cx, opts)?;
            let segments = bad_segments.into_iter().map(|(key, e)| Problem {
                object: crate::error::ObjectRef::Object(key).to_string(),
                problem: e.problem(),
                backups: Vec::new(),
                files: Vec::new(),
            });
            report.problems.splice(0..0, segments);
            Ok(report)
        }
        Err(Error::NoRepository(p)) => {
            let containers = backend.list(KeyKind::Container)?.len();
            let segments = backend.list(KeyKind::IndexSegment)?.len();
            if containers + segments == 0 {
                return Err(Error::NoRepository(p));
            }
            Ok(problem(
                "manifest",
                format!(
                    "no manifest generation found, yet {containers} containers and {segments} index segments exist: the manifest was deleted or lost, so no backup can be listed"
                ),
            ))
        }
        Err(
            e
            @ (Error::Corrupt { .. } | Error::MissingObject(_) | Error::UnsupportedVersion { .. }),
        ) => Ok(problem("repository", e.to_string())),
        Err(e) => Err(e),
    }
}

/// `--read-data-subset N/M`, parsed where the command line is.
impl std::str::FromStr for ReadData {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        ReadData::parse_subset(s)
    }
}
