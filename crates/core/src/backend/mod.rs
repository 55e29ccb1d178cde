//! Object stores: a flat namespace of immutable objects named by
//! [`ObjectKey`]s.
//!
//! An object is written once and never modified; the only way to change the
//! repository's state is to publish a new manifest generation, which is why
//! `put` must be atomic (a reader sees the whole object or none of it), and
//! why [`put_if_absent`] exists: write-if-absent is how object stores
//! publish. Durability is batched: objects put since the last [`barrier`]
//! may be lost in a crash, so the engine passes a barrier before it
//! publishes the manifest that references them.
//!
//! The engine does not call a store directly: every object goes through the
//! sealing layer ([`crate::seal::SealedStore`]). Wrappers count requests
//! ([`CountingStore`]) and inject faults ([`FaultyStore`]).
//!
//! [`put_if_absent`]: ObjectStore::put_if_absent
//! [`barrier`]: ObjectStore::barrier

use crate::error::Result;

pub mod azure;
mod cached;
pub mod cloud;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod contract;
mod counting;
#[cfg(feature = "testing")]
mod faulty;
pub mod gcs;
mod local;
mod memory;
pub mod rclone;
pub mod s3;
pub mod sftp;
mod sftp_session;
mod store;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod test_servers;
#[cfg(test)]
mod tests;

pub use crate::object_key::{Generation, KeyKind, ObjectKey};
pub use azure::{AzureLocation, AzureOptions, AzureStore};
pub use cached::{CacheCounters, CachedStore, ContainerFilter};
pub use cloud::{CloudStore, TransferOptions};
pub use counting::{CountingStore, IoCounters};
#[cfg(feature = "testing")]
pub use faulty::FaultyStore;
pub use gcs::{GcsLocation, GcsOptions, GcsStore};
pub use local::LocalStore;
pub use memory::MemoryStore;
pub use s3::{S3Location, S3Options, S3Store};
pub use sftp::{SftpLocation, SftpStore};
pub(crate) use store::page_size;
pub use store::{list_all, ObjectBytes, ObjectStore};

/// The backend of a repository location, as given by `--repo` or
/// `TESSERA_REPO`: the one place a location is turned into a backend.
/// A plain path (or `file:PATH`) is a local directory;
/// `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]` is an S3-compatible store,
/// `azure:ACCOUNT/CONTAINER[/PREFIX]` Azure Blob Storage and
/// `gs:BUCKET[/PREFIX]` Google Cloud Storage,
/// `sftp:[USER@]HOST[:PORT]/PATH` a directory reached by `ssh` and
/// `rclone:REMOTE:PATH` any rclone remote (each behind a local cache of
/// its metadata objects, see [`CachedStore`], which keeps the container
/// objects `containers` accepts: pass
/// `container::format::is_recipe_container`); a location with a URL scheme
/// Tessera does not serve is refused rather than taken for a directory
/// named after it.
pub fn open(
    location: &str,
    containers: ContainerFilter,
) -> Result<std::sync::Arc<dyn ObjectStore>> {
    if location == "memory:" {
        return Err(crate::error::Error::invalid(
            "a memory: repository exists only inside the process that created it",
        ));
    }
    if let Some(store) = open_cloud(location, false, containers)? {
        return Ok(store.0);
    }
    if let Some(store) = open_sftp(location, false, containers)? {
        return Ok(store);
    }
    Ok(std::sync::Arc::new(LocalStore::open(&local_path(
        location,
    )?)?))
}

/// [`open`], creating a local directory (and its parents) if needed; for `init`.
/// `memory:` is a fresh in-memory repository (the lab's scratch runs). A
/// missing bucket (container) is created (see [`create_reporting`]); a
/// server that ignores conditional writes is refused here.
pub fn create(
    location: &str,
    containers: ContainerFilter,
) -> Result<std::sync::Arc<dyn ObjectStore>> {
    create_reporting(location, containers).map(|(store, _)| store)
}

/// [`create`], also saying whether it created a bucket or container
/// (`init` tells the user: a bucket is billed and named outside the
/// repository).
pub fn create_reporting(
    location: &str,
    containers: ContainerFilter,
) -> Result<(std::sync::Arc<dyn ObjectStore>, bool)> {
    if location == "memory:" {
        return Ok((std::sync::Arc::new(MemoryStore::new()), false));
    }
    if let Some(made) = open_cloud(location, true, containers)? {
        return Ok(made);
    }
    if let Some(store) = open_sftp(location, true, containers)? {
        return Ok((store, false));
    }
    Ok((
        std::sync::Arc::new(LocalStore::create(&local_path(location)?)?),
        false,
    ))
}

/// The cloud store a location names (`None`: not a cloud location), with
/// the options from the environment, behind the metadata cache; with
/// `create`, a missing bucket is created (and the answer says so) and
/// conditional writes are checked.
fn open_cloud(
    location: &str,
    create: bool,
    containers: ContainerFilter,
) -> Result<Option<(std::sync::Arc<dyn ObjectStore>, bool)>> {
    let (store, created): (Box<dyn CloudBacked>, bool) = if location.starts_with("s3:") {
        let options = S3Options::from_env()?;
        if create {
            let (s, c) = S3Store::open_creating(location, options)?;
            (Box::new(s), c)
        } else {
            (Box::new(S3Store::open(location, options)?), false)
        }
    } else if location.starts_with("azure:") {
        let options = AzureOptions::from_env()?;
        if create {
            let (s, c) = AzureStore::open_creating(location, options)?;
            (Box::new(s), c)
        } else {
            (Box::new(AzureStore::open(location, options)?), false)
        }
    } else if location.starts_with("gs:") {
        let options = GcsOptions::from_env()?;
        if create {
            let (s, c) = GcsStore::open_creating(location, options)?;
            (Box::new(s), c)
        } else {
            (Box::new(GcsStore::open(location, options)?), false)
        }
    } else {
        return Ok(None);
    };
    Ok(Some((behind_cache(store, create, containers)?, created)))
}

/// The SFTP or rclone store a location names (`None`: neither), behind
/// the metadata cache unless `TESSERA_CACHE_DIR=off`; `create` makes the
/// directory.
fn open_sftp(
    location: &str,
    create: bool,
    containers: ContainerFilter,
) -> Result<Option<std::sync::Arc<dyn ObjectStore>>> {
    let transfer = TransferOptions::from_env()?;
    let store: std::sync::Arc<dyn ObjectStore> = if location.starts_with("sftp:") {
        if create {
            std::sync::Arc::new(SftpStore::create(location, transfer)?)
        } else {
            std::sync::Arc::new(SftpStore::open(location, transfer)?)
        }
    } else if location.starts_with("rclone:") {
        std::sync::Arc::new(rclone::open(location, transfer, create)?)
    } else {
        return Ok(None);
    };
    let dir = CachedStore::<std::sync::Arc<dyn ObjectStore>>::default_dir(&store.location());
    Ok(Some(match dir {
        Some(dir) => std::sync::Arc::new(CachedStore::new(store, dir, containers)),
        None => store,
    }))
}

/// An S3 store with the given options, behind the metadata cache (keeping
/// the container objects `containers` accepts) unless
/// `TESSERA_CACHE_DIR=off`; `create` checks conditional writes first.
pub fn open_s3(
    location: &str,
    options: S3Options,
    create: bool,
    containers: ContainerFilter,
) -> Result<std::sync::Arc<dyn ObjectStore>> {
    behind_cache(
        Box::new(S3Store::open(location, options)?),
        create,
        containers,
    )
}

/// A store of one of the cloud services: an [`ObjectStore`] that is a
/// [`CloudStore`] underneath.
pub trait CloudBacked: ObjectStore + std::ops::Deref<Target = CloudStore> {}
impl<T: ObjectStore + std::ops::Deref<Target = CloudStore>> CloudBacked for T {}

/// A cloud store behind the metadata cache (unless
/// `TESSERA_CACHE_DIR=off`); `create` checks conditional writes first.
pub fn behind_cache(
    store: Box<dyn CloudBacked>,
    create: bool,
    containers: ContainerFilter,
) -> Result<std::sync::Arc<dyn ObjectStore>> {
    if create {
        store.check_conditional_writes()?;
    }
    let dir = CachedStore::<std::sync::Arc<dyn ObjectStore>>::default_dir(&store.location());
    let store: std::sync::Arc<dyn ObjectStore> =
        std::sync::Arc::from(store as Box<dyn ObjectStore>);
    Ok(match dir {
        Some(dir) => std::sync::Arc::new(CachedStore::new(store, dir, containers)),
        None => store,
    })
}

/// The directory of a local location, or an error naming an unknown scheme.
fn local_path(location: &str) -> Result<std::path::PathBuf> {
    if let Some(path) = location.strip_prefix("file:") {
        return Ok(path.into());
    }
    if let Some((scheme, rest)) = location.split_once(':') {
        let url_like = scheme.len() >= 2
            && scheme
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'+')
            && rest.starts_with("//");
        if url_like {
            return Err(crate::error::Error::invalid(format!(
                "unsupported repository location '{location}': scheme '{scheme}:' is not served by this build (use a local path)"
            )));
        }
    }
    Ok(location.into())
}
