//! The catalog: which backups, containers and index segments exist, as
//! manifest generations.
//!
//! A manifest generation is an immutable object
//! [`ObjectKey::Manifest`] (`manifests/<generation>`, 16 hex digits). The repository's state is the newest generation; a
//! mutation publishes generation g+1 only after every object it lists is
//! durable, and deletes superseded objects (older generations included) only
//! after that publish. A crash therefore leaves generation g or g+1 intact,
//! plus unlisted leftovers that the next writer removes.
//!
//! Envelope: `b"TSRAMANI"` | version u32 | JSON length u64 | JSON | XXH3-128 of all before.
//! JSON keeps the manifest inspectable; the checksum keeps it honest.

use crate::backend::{Generation, ObjectKey};
use crate::chunking::ChunkerConfig;
pub use crate::container::ContainerEntry;
use crate::container::ContainerId;
use crate::error::{Error, Result, Subject};
use crate::fingerprint::{Fingerprint, HashAlgo};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const MAGIC: [u8; 8] = *b"TSRAMANI";
pub use crate::version::VERSION;

/// The default [`RepoConfig::frame_size`] (`docs/FORMAT.md`, "Frames",
/// has the measurements behind it).
pub const DEFAULT_FRAME_SIZE: u32 = 256 << 10;

/// Fixed at `init`: how every backup of this repository is chunked and stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoConfig {
    /// Random identity of the repository.
    pub repo_id: String,
    pub hash: HashAlgo,
    pub chunker: ChunkerConfig,
    /// Capacity of a container in (logical) bytes.
    pub container_size: u32,
    /// Plain bytes per frame: consecutive chunks of a container compressed
    /// and sealed together (`docs/FORMAT.md`, "Frames"); 0: one chunk each.
    pub frame_size: u32,
    /// Trace mode: data containers hold metadata only.
    pub trace: bool,
    /// Creation time, unix seconds.
    pub created: u64,
    /// How chunks are laid out (`init --layout`); containers unless chosen.
    #[serde(default, skip_serializing_if = "LayoutKind::is_containers")]
    pub layout: LayoutKind,
    /// Where the data index lives while the repository is open (`init
    /// --index`); memory unless chosen.
    #[serde(default, skip_serializing_if = "crate::index::IndexKind::is_memory")]
    pub index: crate::index::IndexKind,
}

/// Which layout a repository uses, fixed at `init --layout`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    /// Fixed-size containers in stream order (`layout::ContainerLayout`).
    #[default]
    Containers,
    /// MFDedup's lifecycle categories and volumes (`layout::MfdedupLayout`).
    Mfdedup,
}

impl LayoutKind {
    pub fn is_containers(&self) -> bool {
        *self == LayoutKind::Containers
    }
}

impl std::fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LayoutKind::Containers => "containers",
            LayoutKind::Mfdedup => "mfdedup",
        })
    }
}

impl std::str::FromStr for LayoutKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "containers" | "container" => Ok(LayoutKind::Containers),
            "mfdedup" => Ok(LayoutKind::Mfdedup),
            _ => Err(format!(
                "unknown layout '{s}' (expected containers or mfdedup)"
            )),
        }
    }
}

/// What a backup was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A directory: file contents, then metadata records.
    Tree,
    /// A single file's bytes.
    File,
    /// A named stream (stdin).
    Stream,
    /// A fingerprint trace (no bytes).
    Trace,
}

pub use crate::ids::BackupId;

/// One backup (a version) in the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupEntry {
    /// Sequence number, unique within the repository, never reused.
    pub id: BackupId,
    /// Root fingerprint of the recipe tree (hex): the content's identity.
    pub root: String,
    pub root_level: u8,
    /// Source path or stream name.
    pub name: String,
    pub source: SourceKind,
    /// Unix seconds at the start of the backup.
    pub time: u64,
    pub logical_bytes: u64,
    pub chunks: u64,
    /// Bytes and chunks this backup stored anew.
    pub new_bytes: u64,
    pub new_chunks: u64,
    /// Host, user, paths, tags and parent (absent in older manifests).
    #[serde(flatten)]
    pub meta: SnapshotMeta,
    /// The version chain (source) this backup belongs to, when named
    /// explicitly or on the MFDedup layout (where NDF deduplicates against
    /// the chain's previous version only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// A directory backup's stream: its first `content_bytes` are the
    /// files' contents, the rest its metadata (docs/FORMAT.md, "Backup
    /// streams"). None for other backups, and for directory backups of
    /// earlier builds (a tar stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_bytes: Option<u64>,
}

/// What lets people find a backup (`--host`, `--tag`, `--path`) and groups
/// it for retention: recorded at backup time. Every field is optional in the
/// manifest, so manifests written before they existed still decode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// Host name of the machine backed up.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// User who ran the backup.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// Absolute paths backed up (empty for a stream).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The previous backup of the same host and paths when this one was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<BackupId>,
}

impl BackupEntry {
    pub fn root_fp(&self) -> Result<Fingerprint> {
        Fingerprint::from_hex(&self.root)
            .ok_or_else(|| Error::corrupt("manifest", format!("bad root of backup {}", self.id)))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub generation: Generation,
    pub config: RepoConfig,
    pub next_container_id: ContainerId,
    pub next_backup_id: BackupId,
    pub next_segment_id: u64,
    pub backups: Vec<BackupEntry>,
    pub containers: Vec<ContainerEntry>,
    /// Index segment keys, oldest first.
    pub index_segments: Vec<ObjectKey>,
    /// Backups forgotten since the last GC. Their recipes stay until a GC
    /// runs, which walks them to find the containers the deletion involves
    /// (the papers' GS list), then clears this list.
    #[serde(default)]
    pub forgotten: Vec<BackupEntry>,
    /// Each technique's state, under its own name (see [`Sections`]).
    #[serde(flatten)]
    pub sections: Sections,
}

/// The techniques' state in the manifest, each under its own top-level
/// key (`mfdedup`: MFDedup's chains and volumes; `refgraph`: FGC's
/// reference graph; `har_sparse`: HAR's sparse containers). The catalog
/// keeps them as JSON values and merges them as wholes; each technique
/// encodes and decodes its own through [`Section`]. An absent section is
/// the technique's empty state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sections(BTreeMap<String, serde_json::Value>);

/// A technique's state kept in the manifest.
pub trait Section: Serialize + serde::de::DeserializeOwned {
    /// Its key in the manifest's JSON.
    const NAME: &'static str;
}

impl Sections {
    /// The section `S`, if present.
    pub fn get<S: Section>(&self) -> Result<Option<S>> {
        self.0
            .get(S::NAME)
            .map(|v| {
                S::deserialize(v).map_err(|e| {
                    Error::corrupt("manifest", format!("unreadable section {}: {e}", S::NAME))
                })
            })
            .transpose()
    }
    /// Set the section `S` (`None` removes it).
    pub fn put<S: Section>(&mut self, value: Option<&S>) {
        match value {
            Some(v) => {
                let json = serde_json::to_value(v).expect("a section serializes");
                self.0.insert(S::NAME.to_string(), json);
            }
            None => {
                self.0.remove(S::NAME);
            }
        }
    }
    pub fn contains<S: Section>(&self) -> bool {
        self.0.contains_key(S::NAME)
    }
    /// Every section of `other` set over these (a staged publish).
    pub fn overlay(&mut self, other: Sections) {
        self.0.extend(other.0);
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Manifest {
    pub fn new(config: RepoConfig) -> Self {
        Manifest {
            generation: Generation(0),
            config,
            next_container_id: ContainerId(1),
            next_backup_id: BackupId(1),
            next_segment_id: 1,
            backups: Vec::new(),
            containers: Vec::new(),
            index_segments: Vec::new(),
            forgotten: Vec::new(),
            sections: Sections::default(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("manifest serializes");
        crate::framing::encode(&MAGIC, VERSION, &json)
    }

    /// Decode and verify; `name` identifies the object in errors.
    pub fn decode(b: &[u8], name: impl Into<Subject>) -> Result<Self> {
        let name: Subject = name.into();
        let (version, json) = crate::framing::decode(b, &MAGIC, "Tessera manifest", &name)?;
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                object: Box::new(name),
                found: version,
                supported: VERSION,
            });
        }
        let m: Manifest = serde_json::from_slice(json)
            .map_err(|e| Error::corrupt(name.clone(), format!("unreadable: {e}")))?;
        m.validate(&name)?;
        Ok(m)
    }

    /// Internal consistency: ids below their allocators, no duplicates.
    fn validate(&self, name: &Subject) -> Result<()> {
        let bad = |why: String| Err(Error::corrupt(name.clone(), why));
        // Ids are checked sorted, not in a set: at 600 k containers the set
        // was a fifth of every command's opening. A list in id order (most
        // of it: ids are allocated upwards) needs no copy.
        let listed_twice = |c: ContainerId| {
            bad(format!(
                "container id {c:016x} is out of range or listed twice"
            ))
        };
        let increasing = self.containers.windows(2).all(|w| w[0].id < w[1].id);
        if let Some(c) = self
            .containers
            .iter()
            .find(|c| c.id >= self.next_container_id)
        {
            return listed_twice(c.id);
        }
        if !increasing {
            let mut ids: Vec<ContainerId> = self.containers.iter().map(|c| c.id).collect();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                return listed_twice(w[0]);
            }
        }
        let mut bids = std::collections::HashSet::new();
        for b in &self.backups {
            if b.id >= self.next_backup_id || !bids.insert(b.id) {
                return bad(format!(
                    "backup id {} is out of range or listed twice",
                    b.id
                ));
            }
            b.root_fp()?;
        }
        if let Err(e) = self.config.chunker.validate() {
            return bad(format!("bad chunker configuration: {e}"));
        }
        Ok(())
    }

    pub fn backup(&self, id: BackupId) -> Option<&BackupEntry> {
        self.backups.iter().find(|b| b.id == id)
    }
}

/// The containers `next` lists and `base` does not (in `next`'s order),
/// and the ids `base` lists and `next` does not (in `base`'s order). A
/// publish's `next` is mostly `base` with containers appended (a backup)
/// or some removed (a GC): past their common prefix, each side is looked
/// up in the other's sorted ids. Two hash sets of every id took a seventh
/// of a one-chunk backup at 600 k containers.
fn container_diff(
    base: &[ContainerEntry],
    next: &[ContainerEntry],
) -> (Vec<ContainerEntry>, Vec<ContainerId>) {
    let same = base
        .iter()
        .zip(next)
        .take_while(|(b, n)| b.id == n.id)
        .count();
    let (base, next) = (&base[same..], &next[same..]);
    let sorted = |v: &[ContainerEntry]| {
        let mut ids: Vec<ContainerId> = v.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids
    };
    let (in_base, in_next) = (sorted(base), sorted(next));
    let added = next
        .iter()
        .filter(|c| in_base.binary_search(&c.id).is_err())
        .copied()
        .collect();
    let removed = base
        .iter()
        .map(|c| c.id)
        .filter(|id| in_next.binary_search(id).is_err())
        .collect();
    (added, removed)
}

/// One writer's change to the catalog, as the difference between the
/// generation it started from and the one it means to publish, so that it
/// can be merged into a newer generation when another writer published
/// first (compare-and-swap on `manifests/<g+1>` failed). The merge rules
/// (docs/FORMAT.md, "Concurrent commits"):
///
/// * backups: the ones it added are appended, renumbered from the newer
///   generation's `next_backup_id` if another writer took their ids; the
///   ones it removed (forget) are removed if still there;
/// * forgotten: its additions appended (once per id), its removals (a GC's
///   accounted deletions) removed — another writer's forgets stay;
/// * containers and index segments: its removals removed, its additions
///   appended (in order: a later segment's entry wins, and index entries
///   naming a container no longer listed are ignored when loading);
/// * `next_*` allocators: the larger;
/// * sections: a section it changed is taken whole from it when the newer
///   generation left that section as it was, or when the caller names the
///   section as one this change overwrites (HAR's sparse list; FGC's graph,
///   which the publish then grafts); a section both sides changed
///   otherwise refuses the merge (MFDedup's state: its writers hold the
///   exclusive lock, so this only guards against a broken lock).
#[derive(Clone, Debug, Default)]
pub struct Change {
    base_next_backup: BackupId,
    added_backups: Vec<BackupEntry>,
    removed_backups: Vec<BackupId>,
    added_forgotten: Vec<BackupEntry>,
    removed_forgotten: Vec<BackupId>,
    added_containers: Vec<ContainerEntry>,
    removed_containers: Vec<ContainerId>,
    added_segments: Vec<ObjectKey>,
    removed_segments: Vec<ObjectKey>,
    /// Sections it changed: (name, base's value, its value); `None`: absent.
    sections: Vec<(String, Option<serde_json::Value>, Option<serde_json::Value>)>,
    next_container_id: ContainerId,
    next_segment_id: u64,
}

impl Change {
    /// What turns `base` into `next`.
    pub fn between(base: &Manifest, next: &Manifest) -> Change {
        use std::collections::HashSet;
        let ids = |v: &[BackupEntry]| v.iter().map(|b| b.id).collect::<HashSet<_>>();
        let (bb, nb) = (ids(&base.backups), ids(&next.backups));
        let (bf, nf) = (ids(&base.forgotten), ids(&next.forgotten));
        let (added_containers, removed_containers) =
            container_diff(&base.containers, &next.containers);
        let bs: HashSet<_> = base.index_segments.iter().collect();
        let ns: HashSet<_> = next.index_segments.iter().collect();
        Change {
            base_next_backup: base.next_backup_id,
            added_backups: next
                .backups
                .iter()
                .filter(|b| !bb.contains(&b.id))
                .cloned()
                .collect(),
            removed_backups: base
                .backups
                .iter()
                .filter(|b| !nb.contains(&b.id))
                .map(|b| b.id)
                .collect(),
            added_forgotten: next
                .forgotten
                .iter()
                .filter(|b| !bf.contains(&b.id))
                .cloned()
                .collect(),
            removed_forgotten: base
                .forgotten
                .iter()
                .filter(|b| !nf.contains(&b.id))
                .map(|b| b.id)
                .collect(),
            added_containers,
            removed_containers,
            added_segments: next
                .index_segments
                .iter()
                .filter(|k| !bs.contains(k))
                .cloned()
                .collect(),
            removed_segments: base
                .index_segments
                .iter()
                .filter(|k| !ns.contains(k))
                .cloned()
                .collect(),
            sections: base
                .sections
                .0
                .keys()
                .chain(next.sections.0.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter_map(|k| {
                    let (b, n) = (base.sections.0.get(k), next.sections.0.get(k));
                    (b != n).then(|| (k.clone(), b.cloned(), n.cloned()))
                })
                .collect(),
            next_container_id: next.next_container_id,
            next_segment_id: next.next_segment_id,
        }
    }

    /// Whether the change touches nothing.
    pub fn is_empty(&self) -> bool {
        self.added_backups.is_empty()
            && self.removed_backups.is_empty()
            && self.added_forgotten.is_empty()
            && self.removed_forgotten.is_empty()
            && self.added_containers.is_empty()
            && self.removed_containers.is_empty()
            && self.added_segments.is_empty()
            && self.removed_segments.is_empty()
            && self.sections.is_empty()
    }

    /// The change applied to `newer` (another writer's generation): the
    /// merged manifest (its generation still `newer`'s) and the backups
    /// this change added, as merged (renumbered if need be). `overwrites`
    /// names the sections this change may take whole although `newer`
    /// changed them too.
    pub fn apply(
        &self,
        newer: &Manifest,
        overwrites: &[&str],
    ) -> Result<(Manifest, Vec<BackupEntry>)> {
        let mut m = newer.clone();
        for (name, base, ours) in &self.sections {
            if newer.sections.0.get(name) != base.as_ref() && !overwrites.contains(&name.as_str()) {
                return Err(Error::Locked(format!(
                    "another writer changed the manifest's {name} section meanwhile: this change cannot be merged (its writers hold the exclusive lock)"
                )));
            }
            match ours {
                Some(v) => m.sections.0.insert(name.clone(), v.clone()),
                None => m.sections.0.remove(name),
            };
        }
        m.backups.retain(|b| !self.removed_backups.contains(&b.id));
        // Ids this change allocated that another writer allocated too.
        let renumber = m.next_backup_id > self.base_next_backup;
        let mut remap = std::collections::HashMap::new();
        let mut added = Vec::with_capacity(self.added_backups.len());
        for b in &self.added_backups {
            let mut b = b.clone();
            if renumber {
                remap.insert(b.id, m.next_backup_id);
                b.id = m.next_backup_id;
            }
            m.next_backup_id = m.next_backup_id.max(b.id.next());
            added.push(b);
        }
        for b in &mut added {
            if let Some(p) = b.meta.parent.and_then(|p| remap.get(&p)) {
                b.meta.parent = Some(*p);
            }
        }
        m.backups.extend(added.iter().cloned());
        m.forgotten
            .retain(|b| !self.removed_forgotten.contains(&b.id));
        for f in &self.added_forgotten {
            if !m.forgotten.iter().any(|g| g.id == f.id) {
                m.forgotten.push(f.clone());
            }
        }
        m.containers
            .retain(|c| !self.removed_containers.contains(&c.id));
        for c in &self.added_containers {
            if !m.containers.iter().any(|d| d.id == c.id) {
                m.containers.push(*c);
            }
        }
        m.index_segments
            .retain(|k| !self.removed_segments.contains(k));
        for k in &self.added_segments {
            if !m.index_segments.contains(k) {
                m.index_segments.push(k.clone());
            }
        }
        m.next_container_id = m.next_container_id.max(self.next_container_id);
        m.next_segment_id = m.next_segment_id.max(self.next_segment_id);
        Ok((m, added))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ChunkKind;

    fn sample() -> Manifest {
        let mut m = Manifest::new(RepoConfig {
            repo_id: "r".into(),
            hash: HashAlgo::Sha1,
            chunker: ChunkerConfig::default(),
            container_size: 4 << 20,
            frame_size: DEFAULT_FRAME_SIZE,
            trace: false,
            created: 1,
            layout: LayoutKind::Containers,
            index: Default::default(),
        });
        m.generation = Generation(3);
        m.next_container_id = ContainerId(3);
        m.containers.push(ContainerEntry {
            id: ContainerId(2),
            kind: ChunkKind::Data,
            chunks: 1,
            logical_bytes: 10,
            object_bytes: 186,
        });
        m
    }

    proptest::proptest! {
        /// The diff answers as the set difference does, in the lists'
        /// orders, sorted or not, with a common prefix or none.
        #[test]
        fn container_diff_is_the_set_difference(
            base in proptest::collection::btree_set(0u64..64, 0..40),
            next in proptest::collection::btree_set(0u64..64, 0..40),
            shuffle in proptest::bool::ANY,
            shared in 0usize..40,
        ) {
            let entries = |ids: &std::collections::BTreeSet<u64>| -> Vec<ContainerEntry> {
                let mut v: Vec<ContainerEntry> = ids
                    .iter()
                    .map(|&i| ContainerEntry::new(ContainerId(i), ChunkKind::Data, 1, i, i))
                    .collect();
                if shuffle {
                    v.reverse();
                }
                v
            };
            let (mut b, mut n) = (entries(&base), entries(&next));
            // A common prefix (in shuffled order too), as a publish has.
            let prefix: Vec<ContainerEntry> = (100..100 + shared as u64)
                .map(|i| ContainerEntry::new(ContainerId(i), ChunkKind::Recipe, 1, i, i))
                .rev()
                .collect();
            b.splice(0..0, prefix.iter().copied());
            n.splice(0..0, prefix.iter().copied());
            let (added, removed) = container_diff(&b, &n);
            let ids = |v: &[ContainerEntry]| -> Vec<ContainerId> { v.iter().map(|c| c.id).collect() };
            let (bi, ni) = (ids(&b), ids(&n));
            let want_added: Vec<ContainerEntry> =
                n.iter().filter(|c| !bi.contains(&c.id)).copied().collect();
            let want_removed: Vec<ContainerId> =
                b.iter().filter(|c| !ni.contains(&c.id)).map(|c| c.id).collect();
            proptest::prop_assert_eq!(added, want_added);
            proptest::prop_assert_eq!(removed, want_removed);
        }
    }

    /// Container ids: strictly increasing (the rule) or in any order,
    /// each below the allocator and listed once.
    #[test]
    fn container_ids_are_listed_once_below_the_allocator() {
        let with = |ids: &[u64]| {
            let mut m = sample();
            m.next_container_id = ContainerId(10);
            m.containers = ids
                .iter()
                .map(|&i| ContainerEntry {
                    id: ContainerId(i),
                    ..m.containers[0]
                })
                .collect();
            Manifest::decode(&m.encode(), "m")
        };
        for ok in [&[][..], &[1], &[1, 2, 9], &[3, 1, 2], &[9, 0]] {
            assert!(with(ok).is_ok(), "{ok:?}");
        }
        for (bad, id) in [
            (&[1, 2, 2][..], "0000000000000002"),
            (&[2, 1, 2], "0000000000000002"),
            (&[5, 5], "0000000000000005"),
            (&[1, 10], "000000000000000a"),
            (&[12, 1], "000000000000000c"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("container id {id}")), "{bad:?}: {e}");
        }
    }

    #[test]
    fn round_trip_and_corruption() {
        let m = sample();
        let b = m.encode();
        assert_eq!(Manifest::decode(&b, "m").unwrap(), m);
        for i in (0..b.len()).step_by(3) {
            let mut bad = b.clone();
            bad[i] ^= 0x20;
            assert!(Manifest::decode(&bad, "m").is_err(), "flip at {i}");
        }
        assert!(Manifest::decode(&b[..b.len() - 2], "m").is_err());
    }

    /// A section as HAR keeps its sparse containers.
    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Sparse(Vec<ContainerId>);
    impl Section for Sparse {
        const NAME: &'static str = "har_sparse";
    }

    /// The typed ids are serde-transparent: manifests keep bare numbers,
    /// and a section is a top-level key of the manifest's JSON.
    #[test]
    fn ids_are_stored_as_bare_numbers() {
        let mut m = sample();
        m.next_backup_id = BackupId(5);
        m.sections.put(Some(&Sparse(vec![ContainerId(2)])));
        let json = serde_json::to_string(&m).unwrap();
        for field in [
            r#""generation":3,"#,
            r#""next_container_id":3,"#,
            r#""next_backup_id":5,"#,
            r#""id":2,"#,
            r#""har_sparse":[2]"#,
        ] {
            assert!(json.contains(field), "{field} not in {json}");
        }
    }

    /// A manifest written before sections existed (its technique fields
    /// at the top level) decodes with those fields as sections.
    #[test]
    fn sections_are_the_top_level_technique_fields() {
        let m = sample();
        let mut json: serde_json::Value = serde_json::to_value(&m).unwrap();
        json["har_sparse"] = serde_json::json!([2]);
        let m2: Manifest = serde_json::from_value(json).unwrap();
        assert_eq!(
            m2.sections.get::<Sparse>().unwrap(),
            Some(Sparse(vec![ContainerId(2)]))
        );
        assert_eq!(m2.backups, m.backups);
    }

    /// A section both writers changed is refused unless named as one the
    /// change overwrites; one only this writer changed is taken.
    #[test]
    fn sections_merge_whole() {
        let base = sample();
        let mut ours = base.clone();
        ours.sections.put(Some(&Sparse(vec![ContainerId(2)])));
        let change = Change::between(&base, &ours);
        let (m, _) = change.apply(&base, &[]).unwrap();
        assert_eq!(m.sections, ours.sections);
        let mut theirs = base.clone();
        theirs.sections.put(Some(&Sparse(vec![])));
        assert!(change.apply(&theirs, &[]).is_err());
        let (m, _) = change.apply(&theirs, &["har_sparse"]).unwrap();
        assert_eq!(m.sections, ours.sections);
    }

    #[test]
    fn inconsistent_manifest_is_rejected() {
        let mut m = sample();
        m.next_container_id = ContainerId(2);
        let err = Manifest::decode(&m.encode(), "m").unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }
}
