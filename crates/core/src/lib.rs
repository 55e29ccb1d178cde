//! # tessera-core
//!
//! The Tessera deduplication engine: chunking, fingerprinting, immutable
//! containers, Merkle-tree recipes, the fingerprint index and the catalog of
//! manifest generations. No CLI code and no printing live here; callers get
//! structured reports and errors.

pub mod archive;
pub mod backend;
pub mod cache;
pub mod catalog;
pub mod check;
pub mod chunking;
pub mod clock;
pub mod container;
pub mod context;
pub mod error;
pub mod fgc;
pub mod fingerprint;
mod fptable;
mod framing;
pub mod gc;
mod growbuf;
pub mod ids;
pub mod index;
pub mod ingest;
pub mod layout;
pub mod lock;
pub mod metrics;
pub mod object_key;
mod publish;
pub mod recipe;
pub mod repo;
pub mod restore;
pub mod retention;
pub mod rewrite;
pub mod salvage;
pub mod seal;
pub mod sweep;
pub mod trace;
pub mod units;
pub mod version;
mod zerobuf;

pub use backend::{Generation, ObjectKey, ObjectStore};
pub use catalog::BackupId;
pub use container::ContainerId;
pub use context::PasswordSource;
pub use error::{Error, ObjectRef, Result, Subject};
pub use fingerprint::{Fingerprint, Fingerprinter, HashAlgo};
pub use ingest::{BackupOptions, BackupReport};
pub use repo::{InitOptions, Repository, SealOptions, Writer};
pub use restore::{RestoreOptions, RestoreReport};
pub use seal::keys::{KdfParams, Password};
pub use seal::{CipherKind, Compression, Encryption};
