//! One error type for the engine. Every variant renders as one clear line that
//! names the object involved, because operators read these at 3 a.m.
//!
//! The object at fault is typed ([`ObjectRef`]) and carries the backup (and
//! offset, and file) it was needed by ([`Subject`]), so callers such as
//! `check` read them as data; the one-line text is rendered from them.

use crate::fingerprint::Fingerprint;
use crate::ids::BackupId;
use crate::object_key::ObjectKey;
use std::fmt;
use std::path::PathBuf;

/// Result alias used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an error is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectRef {
    /// An object as its store names it (`containers/00000000000000a1`): the
    /// store's own errors, before the engine knows what the object is for.
    Stored(ObjectKey),
    /// An object as the engine names it: `container 00000000000000a1`,
    /// `manifest manifests/…`, `index segment index/…`.
    Object(ObjectKey),
    /// `recipe chunk <hex>`
    RecipeChunk(Fingerprint),
    /// `chunk <hex>`
    DataChunk(Fingerprint),
    /// `backup <id>`
    Backup(BackupId),
    /// Anything else, by name (`manifest`, the lock, a tar stream).
    Named(String),
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectRef::Stored(key) => key.fmt(f),
            ObjectRef::Object(key) => match key {
                ObjectKey::Container(id) => write!(f, "container {id:016x}"),
                ObjectKey::Manifest(_) => write!(f, "manifest {key}"),
                ObjectKey::IndexSegment(_) => write!(f, "index segment {key}"),
                ObjectKey::Volume(_) => write!(f, "volume header {key}"),
                ObjectKey::NdfTable(_) => write!(f, "NDF table {key}"),
                ObjectKey::RefGraph(_) => write!(f, "reference graph segment {key}"),
                ObjectKey::Lock
                | ObjectKey::SharedLock(_)
                | ObjectKey::Gc(_)
                | ObjectKey::Config
                | ObjectKey::Sweep
                | ObjectKey::KeySlot(_)
                | ObjectKey::Stray(_) => key.fmt(f),
            },
            ObjectRef::RecipeChunk(fp) => write!(f, "recipe chunk {}", fp.to_hex()),
            ObjectRef::DataChunk(fp) => write!(f, "chunk {}", fp.to_hex()),
            ObjectRef::Backup(id) => write!(f, "backup {id}"),
            ObjectRef::Named(name) => f.write_str(name),
        }
    }
}

/// The object at fault and where it was needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub object: ObjectRef,
    /// The backup whose restore, walk or check needed the object.
    pub backup: Option<BackupId>,
    /// Byte offset in that backup's stream.
    pub offset: Option<u64>,
    /// The file (of a directory backup, or on disk) involved.
    pub path: Option<PathBuf>,
    /// Files of a directory backup that the damage reaches (rendered after
    /// the error's text, with how to restore the rest).
    pub damaged_files: Vec<String>,
}

impl Subject {
    pub fn new(object: ObjectRef) -> Self {
        Subject {
            object,
            backup: None,
            offset: None,
            path: None,
            damaged_files: Vec::new(),
        }
    }

    /// The tail naming the damaged files, if any.
    fn damage_note(&self) -> String {
        if self.damaged_files.is_empty() {
            return String::new();
        }
        format!(
            "; damaged: {} (restore with --skip-damaged to get everything else)",
            self.damaged_files.join(", ")
        )
    }

    /// The container this is about, if it is one.
    pub fn container(&self) -> Option<crate::ids::ContainerId> {
        match &self.object {
            ObjectRef::Object(k) | ObjectRef::Stored(k) => k.container(),
            _ => None,
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.object.fmt(f)?;
        if let Some(b) = self.backup {
            write!(f, " (needed by backup {b}")?;
            if let Some(o) = self.offset {
                write!(f, " at offset {o}")?;
            }
            f.write_str(")")?;
        }
        if let Some(p) = &self.path {
            write!(f, " (file {})", p.display())?;
        }
        Ok(())
    }
}

impl From<ObjectRef> for Subject {
    fn from(o: ObjectRef) -> Self {
        Subject::new(o)
    }
}
impl From<String> for Subject {
    fn from(s: String) -> Self {
        Subject::new(ObjectRef::Named(s))
    }
}
impl From<&String> for Subject {
    fn from(s: &String) -> Self {
        Subject::new(ObjectRef::Named(s.clone()))
    }
}
impl From<&str> for Subject {
    fn from(s: &str) -> Self {
        Subject::new(ObjectRef::Named(s.to_string()))
    }
}
// Boxed in `Error` to keep results small; these let decoders build one.
impl From<ObjectRef> for Box<Subject> {
    fn from(o: ObjectRef) -> Self {
        Box::new(Subject::new(o))
    }
}
impl From<&str> for Box<Subject> {
    fn from(s: &str) -> Self {
        Box::new(s.into())
    }
}

impl From<&ObjectRef> for Subject {
    fn from(o: &ObjectRef) -> Self {
        Subject::new(o.clone())
    }
}

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
    #[error("corrupt {object}: {reason}{}", object.damage_note())]
    Corrupt {
        object: Box<Subject>,
        reason: String,
    },
    /// An object the manifest lists is missing from the store.
    #[error("missing object {}{}", .0, .0.damage_note())]
    MissingObject(Box<Subject>),
    /// The repository is locked by another writer.
    #[error("{0}")]
    Locked(String),
    /// A format version this build does not understand.
    #[error(
        "{object} has format version {found}; this build of Tessera reads version {supported}"
    )]
    UnsupportedVersion {
        object: Box<Subject>,
        found: u32,
        supported: u32,
    },
    /// No password given for an encrypted repository, or none of its key
    /// slots opens with the one given.
    #[error("{0}")]
    Key(String),
    /// A snapshot id that matches no backup (or more than one).
    #[error("{0}")]
    Snapshot(String),
    /// Invalid user input (parameters, paths, trace lines).
    #[error("{0}")]
    Invalid(String),
    /// A fault injected by a test store (`FaultyStore`, feature `testing`).
    #[cfg(feature = "testing")]
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
    pub fn corrupt(object: impl Into<Subject>, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            object: Box::new(object.into()),
            reason: reason.into(),
        }
    }
    pub fn missing(object: impl Into<Subject>) -> Self {
        Error::MissingObject(Box::new(object.into()))
    }
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    /// The object at fault, for errors about one.
    pub fn subject(&self) -> Option<&Subject> {
        match self {
            Error::Corrupt { object, .. }
            | Error::MissingObject(object)
            | Error::UnsupportedVersion { object, .. } => Some(object),
            _ => None,
        }
    }

    fn subject_mut(&mut self) -> Option<&mut Subject> {
        match self {
            Error::Corrupt { object, .. }
            | Error::MissingObject(object)
            | Error::UnsupportedVersion { object, .. } => Some(object),
            _ => None,
        }
    }

    /// What is wrong with the subject, without naming it: the reason of a
    /// corruption or `missing` (the whole text for other errors).
    pub fn problem(&self) -> String {
        match self {
            Error::Corrupt { reason, .. } => reason.clone(),
            Error::MissingObject(_) => "missing".into(),
            Error::UnsupportedVersion {
                found, supported, ..
            } => format!(
                "has format version {found}; this build of Tessera reads version {supported}"
            ),
            other => other.to_string(),
        }
    }

    /// Name the backup (and offset in its stream) that needed the object at
    /// fault; the innermost such context is kept.
    pub fn in_backup(mut self, backup: BackupId, offset: Option<u64>) -> Self {
        if let Some(s) = self.subject_mut() {
            if s.backup.is_none() {
                s.backup = Some(backup);
                s.offset = offset;
            }
        }
        self
    }

    /// Name the object at fault as the engine knows it (a store reports a
    /// container by its key; the engine by its id).
    pub fn about(mut self, object: ObjectRef) -> Self {
        if let Some(s) = self.subject_mut() {
            s.object = object;
        }
        self
    }

    /// Name the files of a directory backup the damage reaches.
    pub fn with_damaged_files(mut self, files: Vec<String>) -> Self {
        if let Some(s) = self.subject_mut() {
            s.damaged_files = files;
        }
        self
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
