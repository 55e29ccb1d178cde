//! Typed identifiers. Each is a sequence number allocated from the manifest
//! and never reused; the types keep a container id from being passed where
//! a backup id or a generation is meant. All three are serde-transparent
//! (manifests, `--json` and CSV keep bare numbers) and print as the number,
//! as they did when they were bare `u64`s.
//!
//! [`ChunkKind`] is the one identifier that is not a number: whether a chunk
//! holds data or a recipe.

/// Defines one id type: derives, serde-transparent, `next`, `Display`.
macro_rules! sequence_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone,
            Copy,
            Debug,
            Default,
            PartialEq,
            Eq,
            PartialOrd,
            Ord,
            Hash,
            serde::Serialize,
            serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl $name {
            /// The id allocated after this one.
            pub fn next(self) -> $name {
                $name(self.0 + 1)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

sequence_id!(
    /// A container. Written little endian in container headers and index
    /// segments; `{:016x}` gives the object-name spelling.
    ContainerId
);

sequence_id!(
    /// A backup: the number users type (`tessera forget 3`).
    BackupId
);

sequence_id!(
    /// A manifest generation: the repository's state is its newest one.
    Generation
);

impl std::fmt::LowerHex for ContainerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::LowerHex::fmt(&self.0, f)
    }
}

impl std::str::FromStr for BackupId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.parse().map(BackupId)
    }
}

/// Backup ids are compared with the numbers users type.
impl PartialEq<u64> for BackupId {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

/// What a chunk holds: user data (recipe level 0) or a recipe chunk. Its
/// byte in container headers and metadata entries is spelled in
/// `container::format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkKind {
    Data,
    Recipe,
}

impl ChunkKind {
    /// Both kinds, data first.
    pub const ALL: [ChunkKind; 2] = [ChunkKind::Data, ChunkKind::Recipe];
}

/// Container ids are numbers handed out in order: one multiply spreads
/// them over a table's buckets (SipHash was half of each insert).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Hash maps and sets keyed by ids ([`IdHasher`]).
pub type IdBuildHasher = std::hash::BuildHasherDefault<IdHasher>;
