//! Names of objects in a store: the one place object names are spelled.
//!
//! A repository holds five kinds of objects, each under its own prefix with
//! a 16-hex-digit number: `manifests/<generation>`, `containers/<id>`,
//! `index/<id>`, `refgraph/<n>` (FGC), plus the single `lock` and `sweep`; and,
//! unsealed because they are read before any key, the single `config` and
//! the key slots `keys/<id>`. Names found by listing that do not
//! parse as one of these (a crash's or an operator's litter under a known
//! prefix) are carried as [`ObjectKey::Stray`], so they can still be reported
//! and deleted.

use std::fmt;

pub use crate::ids::{ContainerId, Generation};

/// The kinds of object, by the prefix their names share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    Manifest,
    Container,
    IndexSegment,
    Lock,
    /// The repository's unsealed config (format version, encryption).
    Config,
    /// Key slots: the master key wrapped under one password each.
    KeySlot,
    /// MFDedup volume headers (`volumes/<id>`).
    Volume,
    /// MFDedup NDF fingerprint tables, one per version (`ndf/<id>`).
    NdfTable,
    /// FGC's reference graph segments (`refgraph/…`).
    RefGraph,
    /// Shared locks, one per holder (`locks/<token>`): backups, GCs and
    /// readers running at once (see [`crate::lock`]).
    SharedLock,
    /// Online GC's coordination objects (`gc/lock`, `gc/state`,
    /// `gc/resurrect/<token>-<n>`; see [`crate::gc::online`]).
    Gc,
    /// The single `sweep` marker: an interrupted or failed writer may have
    /// left objects no manifest lists (see [`crate::sweep`]).
    Sweep,
}

impl KeyKind {
    pub const ALL: [KeyKind; 12] = [
        KeyKind::Manifest,
        KeyKind::Container,
        KeyKind::IndexSegment,
        KeyKind::Lock,
        KeyKind::Config,
        KeyKind::KeySlot,
        KeyKind::Volume,
        KeyKind::NdfTable,
        KeyKind::RefGraph,
        KeyKind::SharedLock,
        KeyKind::Gc,
        KeyKind::Sweep,
    ];

    /// Kinds whose one object's whole name is the prefix.
    pub fn is_single(self) -> bool {
        matches!(self, KeyKind::Lock | KeyKind::Config | KeyKind::Sweep)
    }

    /// What every name of this kind starts with (the whole name for the lock).
    pub fn prefix(self) -> &'static str {
        match self {
            KeyKind::Manifest => "manifests/",
            KeyKind::Container => "containers/",
            KeyKind::IndexSegment => "index/",
            KeyKind::Lock => "lock",
            KeyKind::Config => "config",
            KeyKind::KeySlot => "keys/",
            KeyKind::Volume => "volumes/",
            KeyKind::NdfTable => "ndf/",
            KeyKind::RefGraph => "refgraph/",
            KeyKind::SharedLock => "locks/",
            KeyKind::Gc => "gc/",
            KeyKind::Sweep => "sweep",
        }
    }

    /// The kind a name belongs to by its prefix, whether or not it parses.
    pub fn of_name(name: &str) -> Option<KeyKind> {
        match name {
            "lock" => Some(KeyKind::Lock),
            "config" => Some(KeyKind::Config),
            "sweep" => Some(KeyKind::Sweep),
            _ => KeyKind::ALL
                .into_iter()
                .find(|k| !k.is_single() && name.starts_with(k.prefix())),
        }
    }
}

/// The name of one stored object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKey {
    Manifest(Generation),
    Container(ContainerId),
    IndexSegment(u64),
    Lock,
    Config,
    KeySlot(u64),
    /// An MFDedup volume header (the categories of one volume and their sizes).
    Volume(u64),
    /// An MFDedup NDF table: the distinct data fingerprints of one version.
    NdfTable(u64),
    /// A segment of FGC's reference graph.
    RefGraph(u64),
    /// One holder's shared lock, named by its token.
    SharedLock(String),
    /// An online-GC object, by its name under `gc/`.
    Gc(String),
    /// The marker saying the next writer alone must sweep leftovers.
    Sweep,
    /// A listed name that is none of the above (`containers/junk`): kept
    /// whole so it can be reported and deleted, never written by the engine.
    Stray(String),
}

impl ObjectKey {
    /// The key a name spells; a name that does not parse is a
    /// [`Stray`](ObjectKey::Stray).
    pub fn parse(name: &str) -> ObjectKey {
        let numbered = |prefix: &str| {
            let hex = name.strip_prefix(prefix)?;
            if hex.len() != 16 {
                return None;
            }
            u64::from_str_radix(hex, 16).ok()
        };
        let parsed = match KeyKind::of_name(name) {
            Some(KeyKind::Manifest) => {
                numbered("manifests/").map(|g| ObjectKey::Manifest(Generation(g)))
            }
            Some(KeyKind::Container) => {
                numbered("containers/").map(|n| ObjectKey::Container(ContainerId(n)))
            }
            Some(KeyKind::IndexSegment) => numbered("index/").map(ObjectKey::IndexSegment),
            Some(KeyKind::Lock) => Some(ObjectKey::Lock),
            Some(KeyKind::Config) => Some(ObjectKey::Config),
            Some(KeyKind::Sweep) => Some(ObjectKey::Sweep),
            Some(KeyKind::KeySlot) => numbered("keys/").map(ObjectKey::KeySlot),
            Some(KeyKind::Volume) => numbered("volumes/").map(ObjectKey::Volume),
            Some(KeyKind::NdfTable) => numbered("ndf/").map(ObjectKey::NdfTable),
            Some(KeyKind::RefGraph) => numbered("refgraph/").map(ObjectKey::RefGraph),
            Some(KeyKind::SharedLock) => name
                .strip_prefix("locks/")
                .filter(|t| !t.is_empty() && !t.contains('/'))
                .map(|t| ObjectKey::SharedLock(t.to_string())),
            Some(KeyKind::Gc) => name
                .strip_prefix("gc/")
                .filter(|t| !t.is_empty() && !t.ends_with('/'))
                .map(|t| ObjectKey::Gc(t.to_string())),
            None => None,
        };
        // Only the canonical spelling parses, so a key's name round-trips
        // (`containers/00000000000000A1` is a stray, not container a1).
        match parsed {
            Some(k) if k.name() == name => k,
            _ => ObjectKey::Stray(name.to_string()),
        }
    }

    /// The object's name in the store.
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// The kind by prefix; `None` for a stray outside every prefix.
    pub fn kind(&self) -> Option<KeyKind> {
        match self {
            ObjectKey::Manifest(_) => Some(KeyKind::Manifest),
            ObjectKey::Container(_) => Some(KeyKind::Container),
            ObjectKey::IndexSegment(_) => Some(KeyKind::IndexSegment),
            ObjectKey::Lock => Some(KeyKind::Lock),
            ObjectKey::Config => Some(KeyKind::Config),
            ObjectKey::KeySlot(_) => Some(KeyKind::KeySlot),
            ObjectKey::Volume(_) => Some(KeyKind::Volume),
            ObjectKey::NdfTable(_) => Some(KeyKind::NdfTable),
            ObjectKey::RefGraph(_) => Some(KeyKind::RefGraph),
            ObjectKey::SharedLock(_) => Some(KeyKind::SharedLock),
            ObjectKey::Gc(_) => Some(KeyKind::Gc),
            ObjectKey::Sweep => Some(KeyKind::Sweep),
            ObjectKey::Stray(name) => KeyKind::of_name(name),
        }
    }

    /// The container this key names, if it is a (well-formed) container key.
    pub fn container(&self) -> Option<ContainerId> {
        match self {
            ObjectKey::Container(id) => Some(*id),
            _ => None,
        }
    }

    /// The generation this key names, if it is a (well-formed) manifest key.
    pub fn generation(&self) -> Option<Generation> {
        match self {
            ObjectKey::Manifest(g) => Some(*g),
            _ => None,
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectKey::Manifest(g) => write!(f, "manifests/{:016x}", g.0),
            ObjectKey::Container(id) => write!(f, "containers/{id:016x}"),
            ObjectKey::IndexSegment(id) => write!(f, "index/{id:016x}"),
            ObjectKey::Lock => f.write_str("lock"),
            ObjectKey::Config => f.write_str("config"),
            ObjectKey::KeySlot(id) => write!(f, "keys/{id:016x}"),
            ObjectKey::Volume(id) => write!(f, "volumes/{id:016x}"),
            ObjectKey::NdfTable(id) => write!(f, "ndf/{id:016x}"),
            ObjectKey::RefGraph(id) => write!(f, "refgraph/{id:016x}"),
            ObjectKey::SharedLock(t) => write!(f, "locks/{t}"),
            ObjectKey::Gc(name) => write!(f, "gc/{name}"),
            ObjectKey::Sweep => f.write_str("sweep"),
            ObjectKey::Stray(name) => f.write_str(name),
        }
    }
}

/// Keys sort by name, as stores list them.
impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(&other.name())
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl From<&str> for ObjectKey {
    fn from(name: &str) -> Self {
        ObjectKey::parse(name)
    }
}

impl PartialEq<str> for ObjectKey {
    fn eq(&self, other: &str) -> bool {
        self.name() == other
    }
}

impl PartialEq<&str> for ObjectKey {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl PartialEq<String> for ObjectKey {
    fn eq(&self, other: &String) -> bool {
        self.name() == *other
    }
}

/// Stored (in manifests, reports) as its name: the format is unchanged.
impl serde::Serialize for ObjectKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ObjectKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(ObjectKey::parse(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strays_are_kept() {
        for k in [
            ObjectKey::Manifest(Generation(42)),
            ObjectKey::Container(ContainerId(0xa1)),
            ObjectKey::IndexSegment(u64::MAX),
            ObjectKey::Lock,
            ObjectKey::Config,
            ObjectKey::KeySlot(2),
            ObjectKey::Volume(7),
            ObjectKey::NdfTable(8),
            ObjectKey::RefGraph(7),
            ObjectKey::SharedLock("12-0-99".into()),
            ObjectKey::Gc("resurrect/12-0-99-3".into()),
            ObjectKey::Sweep,
        ] {
            assert_eq!(ObjectKey::parse(&k.name()), k);
        }
        assert_eq!(
            ObjectKey::Manifest(Generation(42)).name(),
            "manifests/000000000000002a"
        );
        for stray in [
            "manifests/xyz",
            "containers/00000000000000A1",
            "containers/a1",
            "index/",
            "lockfile",
        ] {
            assert_eq!(ObjectKey::parse(stray), ObjectKey::Stray(stray.into()));
        }
        assert_eq!(
            ObjectKey::parse("containers/junk").kind(),
            Some(KeyKind::Container)
        );
        assert_eq!(ObjectKey::parse("other").kind(), None);
    }

    #[test]
    fn serialized_as_the_name() {
        let k = ObjectKey::IndexSegment(3);
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, "\"index/0000000000000003\"");
        assert_eq!(serde_json::from_str::<ObjectKey>(&json).unwrap(), k);
    }
}
