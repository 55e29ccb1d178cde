//! One error type for the engine. Every variant renders as one clear line that
//! names the object involved, because operators read these at 3 a.m.

use std::path::PathBuf;

/// Result alias used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a named path or object.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// No repository exists at this location.
    #[error("no Tessera repository at {0} (create one with `tessera init`)")]
    NoRepository(PathBuf),
    /// `init` on a location that already holds a repository.
    #[error("a repository already exists at {0}")]
    RepositoryExists(PathBuf),
    /// An object (container, manifest, recipe chunk, lock, …) failed validation.
    #[error("corrupt {object}: {reason}")]
    Corrupt { object: String, reason: String },
    /// An object the manifest lists is missing from the backend.
    #[error("missing object {0}")]
    MissingObject(String),
    /// The repository is locked by another writer.
    #[error("{0}")]
    Locked(String),
    /// A format version this build does not understand.
    #[error(
        "{object} has format version {found}; this build of Tessera reads version {supported}"
    )]
    UnsupportedVersion {
        object: String,
        found: u32,
        supported: u32,
    },
    /// A snapshot id that matches no backup (or more than one).
    #[error("{0}")]
    Snapshot(String),
    /// Invalid user input (parameters, paths, trace lines).
    #[error("{0}")]
    Invalid(String),
    /// A fault injected by a test backend.
    #[error("injected fault at operation {0}")]
    Injected(u64),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
    pub fn corrupt(object: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            object: object.into(),
            reason: reason.into(),
        }
    }
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
}

/// Attach a context line to `std::io::Result`s.
pub trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(context(), e))
    }
}
