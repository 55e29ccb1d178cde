//! The store every object-storage service shares (S3, Azure Blob, Google
//! Cloud Storage): one [`CloudStore`] on any `object_store` client, so the
//! services differ only in how their client is built and which conditional
//! write they use (see `s3.rs`, `azure.rs`, `gcs.rs`).
//!
//! The protocol (signing, retries with backoff, listings) is the
//! `object_store` crate's; it is async, so the store owns a small private
//! tokio runtime and the engine's synchronous calls block on it.
//!
//! Built for latency:
//! - **Uploads are written behind**: `put` queues the upload and returns;
//!   at most [`TransferOptions::max_in_flight`] run at once (a further `put`
//!   waits for the oldest). The contract allows it: objects put since the
//!   last [`barrier`](ObjectStore::barrier) may be lost, and `barrier` waits
//!   for every upload and fails if any failed since the last barrier, so a
//!   manifest (published only after a barrier) is never published over an
//!   object that did not arrive; the operation that put it fails instead,
//!   and the next one starts clean. Reads of a key whose upload is still
//!   running are served from the queued bytes.
//! - **Ranged reads** are HTTP range requests.
//! - **Publishing** uses the service's conditional create (`PutMode::Create`:
//!   `If-None-Match: *` on S3 and Azure, generation 0 on GCS): atomic on the
//!   server, so two writers cannot both take the lock or both publish one
//!   generation. A server that ignores it is refused when the repository is
//!   created ([`CloudStore::check_conditional_writes`]).
//! - **Transient errors** (5xx, timeouts, resets) are retried with
//!   exponential backoff by `object_store`, within
//!   [`TransferOptions::retry_timeout`]; a retried conditional write whose
//!   first attempt did arrive reads the object back instead of reporting a
//!   conflict with itself.

use super::local::{validate_key, validate_prefix};
use super::store::{keys_of, ObjectStore};
use crate::error::{Error, ObjectRef, Result};
use crate::object_key::{KeyKind, ObjectKey};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{
    ClientOptions, ObjectStore as Client, ObjectStoreExt as _, PutMode, PutOptions, PutPayload,
    RetryConfig,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;

/// How a cloud store moves bytes: write-behind depth, retries, time limits.
/// The same for every service.
#[derive(Clone, Debug)]
pub struct TransferOptions {
    /// Uploads running at once (write-behind depth).
    pub max_in_flight: usize,
    /// Retries of one request on transient errors.
    pub max_retries: usize,
    /// No retry starts after this long since the first attempt.
    pub retry_timeout: Duration,
    /// One request's time limit.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            max_in_flight: 8,
            max_retries: 6,
            retry_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl TransferOptions {
    /// Defaults, with `TESSERA_S3_MAX_RETRIES`, `TESSERA_S3_RETRY_TIMEOUT`
    /// (seconds) and `TESSERA_S3_IN_FLIGHT` from the environment (named
    /// for S3, which had them first; they apply to every cloud store).
    pub fn from_env() -> Result<TransferOptions> {
        let mut o = TransferOptions::default();
        let num = |var: &str| -> Result<Option<u64>> {
            match std::env::var(var) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| Error::invalid(format!("{var}={v}: not a number"))),
                Err(_) => Ok(None),
            }
        };
        if let Some(n) = num("TESSERA_S3_MAX_RETRIES")? {
            o.max_retries = n as usize;
        }
        if let Some(n) = num("TESSERA_S3_RETRY_TIMEOUT")? {
            o.retry_timeout = Duration::from_secs(n);
        }
        if let Some(n) = num("TESSERA_S3_IN_FLIGHT")? {
            o.max_in_flight = (n as usize).max(1);
        }
        Ok(o)
    }

    /// `object_store`'s retry policy: exponential backoff from 100 ms.
    pub(crate) fn retry_config(&self) -> RetryConfig {
        RetryConfig {
            backoff: object_store::BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }

    /// HTTP client settings; plain HTTP only for an `http://` endpoint.
    pub(crate) fn client_options(&self, endpoint: &str) -> ClientOptions {
        ClientOptions::new()
            .with_allow_http(endpoint.starts_with("http://"))
            .with_timeout(self.request_timeout)
            .with_connect_timeout(self.connect_timeout)
    }
}

/// What a store says about its service in errors: the service's name, what
/// it calls a bucket, how it says one is missing, and where its
/// credentials come from.
#[derive(Clone, Debug)]
pub struct Service {
    /// `S3`, `Azure`, `GCS`: the first word of every error.
    pub name: &'static str,
    /// `bucket` or `container`.
    pub bucket_word: &'static str,
    pub bucket: String,
    /// The server, for "cannot reach" and "access denied".
    pub endpoint: String,
    /// Words of an error response that mean the bucket does not exist.
    pub missing_bucket: &'static [&'static str],
    /// What to check when access is denied.
    pub credentials_hint: &'static str,
}

impl Service {
    /// The server said the bucket (container) does not exist.
    pub(crate) fn is_missing_bucket(&self, e: &object_store::Error) -> bool {
        let s = e.to_string();
        self.missing_bucket.iter().any(|w| s.contains(w))
    }
}

/// Uploads queued or running, in the order they were started.
#[derive(Default)]
struct Uploads {
    /// Bytes of every key whose upload has not finished, by name, with the
    /// sequence number of that upload (a later put of the key replaces it).
    pending: HashMap<String, (u64, Bytes)>,
    running: VecDeque<(String, u64, JoinHandle<object_store::Result<()>>)>,
    next_seq: u64,
    /// The first upload that failed since the last barrier, which reports it.
    failed: Option<String>,
}

/// A repository in a folder of a bucket, on any `object_store` client.
pub struct CloudStore {
    runtime: tokio::runtime::Runtime,
    client: Arc<dyn Client>,
    /// The repository's folder in the bucket, without slashes at either end
    /// (empty: the bucket's root).
    prefix: String,
    /// The location as written, for messages.
    display: String,
    transfer: TransferOptions,
    service: Service,
    uploads: Mutex<Uploads>,
}

impl std::fmt::Debug for CloudStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudStore")
            .field("location", &self.display)
            .finish()
    }
}

impl CloudStore {
    /// A store on `client` (already pointed at its bucket), under `prefix`.
    /// Nothing is asked of the server yet.
    pub fn new(
        client: Arc<dyn Client>,
        prefix: String,
        display: String,
        transfer: TransferOptions,
        service: Service,
    ) -> Result<CloudStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tessera-cloud")
            .enable_all()
            .build()
            .map_err(|e| Error::io("cannot start the object store client's runtime", e))?;
        Ok(CloudStore {
            runtime,
            client,
            prefix,
            display,
            transfer,
            service,
            uploads: Mutex::new(Uploads::default()),
        })
    }

    pub fn service(&self) -> &Service {
        &self.service
    }

    pub fn transfer(&self) -> &TransferOptions {
        &self.transfer
    }

    /// Run a request of the service's own (say, creating a bucket) on the
    /// store's runtime.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// One cheap request that fails clearly on a missing bucket, refused
    /// credentials or an unreachable server.
    pub fn probe(&self) -> Result<()> {
        self.probe_request()
            .map_err(|e| self.error("list", "manifests/", e))
    }

    /// [`probe`](Self::probe) for `tessera init`: a missing bucket (or
    /// container) is made with `create` first; returns whether it was.
    pub(crate) fn probe_or_create(&self, create: impl FnOnce() -> Result<()>) -> Result<bool> {
        match self.probe_request() {
            Ok(()) => Ok(false),
            Err(e) if self.service().is_missing_bucket(&e) => {
                create()?;
                self.probe()?;
                Ok(true)
            }
            Err(e) => Err(self.error("list", "manifests/", e)),
        }
    }

    /// [`probe`](Self::probe), answering the service's own error (to tell
    /// a missing bucket apart).
    pub(crate) fn probe_request(&self) -> object_store::Result<()> {
        let prefix = self.path("manifests");
        let r = self
            .runtime
            .block_on(self.client.list_with_delimiter(Some(&prefix)));
        r.map(drop)
    }

    /// Refuse a server that ignores conditional creates (it would let two
    /// writers take the lock): create a probe object twice and see the
    /// second refused. Called by `create` (`tessera init`).
    pub fn check_conditional_writes(&self) -> Result<()> {
        let key = ObjectKey::Stray("locks/conditional-write-probe".into());
        let nonce = format!("{}-{}", std::process::id(), crate::clock::now_nanos());
        let first = self.put_if_absent(&key, nonce.as_bytes());
        let second = first
            .as_ref()
            .ok()
            .map(|_| self.create_only(&key, Bytes::from_static(b"second")));
        let cleanup = self.delete(&key);
        first?;
        cleanup?;
        match second {
            Some(Ok(true)) => Err(Error::invalid(format!(
                "{} does not support conditional writes (create only if absent); \
                 Tessera needs them to keep two writers from publishing the same generation",
                self.display
            ))),
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    fn path(&self, name: &str) -> StorePath {
        if self.prefix.is_empty() {
            StorePath::from(name)
        } else {
            StorePath::from(format!("{}/{name}", self.prefix))
        }
    }

    /// The key's name relative to the repository, from a listed path.
    fn relative(&self, path: &StorePath) -> Option<String> {
        let full = path.as_ref();
        if self.prefix.is_empty() {
            return Some(full.to_string());
        }
        full.strip_prefix(&self.prefix)?
            .strip_prefix('/')
            .map(str::to_string)
    }

    fn name(key: &ObjectKey) -> Result<String> {
        let name = key.name();
        validate_key(&name)?;
        Ok(name)
    }

    fn uploads(&self) -> MutexGuard<'_, Uploads> {
        self.uploads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A one-line error for a request that failed.
    pub(crate) fn error(&self, op: &str, name: &str, e: object_store::Error) -> Error {
        let s = &self.service;
        let detail = summarize(&one_line(&e.to_string()));
        let hint = if s.missing_bucket.iter().any(|w| detail.contains(w)) {
            format!(
                "{} '{}' does not exist at {} (`tessera init` creates it)",
                s.bucket_word, s.bucket, s.endpoint
            )
        } else if [
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AuthenticationFailed",
            "AuthorizationFailure",
            "AccessDenied",
            "Unauthorized",
        ]
        .iter()
        .any(|w| detail.contains(w))
            || ["401", "403"].iter().any(|c| has_status(&detail, c))
        {
            format!(
                "access denied by {} (check {}): {detail}",
                s.endpoint, s.credentials_hint
            )
        } else if detail.contains("error sending request")
            || detail.contains("Connection refused")
            || detail.contains("connect")
        {
            format!(
                "cannot reach {} (is the server running?): {detail}",
                s.endpoint
            )
        } else {
            detail
        };
        Error::io(
            format!("{} {op} {name} at {}", s.name, self.display),
            std::io::Error::other(hint),
        )
    }

    /// Every object under `folder`. A listing whose response body is cut
    /// off (a connection reset mid-body, which `object_store` does not
    /// retry) is asked for again with backoff, within the retry limits:
    /// listing has no effect, so asking again is safe.
    fn list_retried(
        &self,
        folder: &StorePath,
        prefix: &str,
    ) -> Result<Vec<object_store::ObjectMeta>> {
        let started = std::time::Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            match self
                .runtime
                .block_on(self.client.list(Some(folder)).try_collect::<Vec<_>>())
            {
                Ok(listed) => return Ok(listed),
                Err(e)
                    if body_cut_off(&e)
                        && attempt < self.transfer.max_retries
                        && started.elapsed() + delay < self.transfer.retry_timeout =>
                {
                    attempt += 1;
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(self.error("LIST", prefix, e)),
            }
        }
    }

    fn map_read_error(
        &self,
        op: &str,
        key: &ObjectKey,
        name: &str,
        e: object_store::Error,
    ) -> Error {
        match e {
            object_store::Error::NotFound { .. } => Error::missing(ObjectRef::Stored(key.clone())),
            e => self.error(op, name, e),
        }
    }

    fn truncated(key: &ObjectKey, offset: u64, len: u64, size: u64) -> Error {
        Error::corrupt(
            ObjectRef::Stored(key.clone()),
            format!(
                "truncated: wanted {len} bytes at offset {offset}, but the object has {size} bytes"
            ),
        )
    }

    /// Bytes queued for `name` whose upload has not finished.
    fn pending(&self, name: &str) -> Option<Bytes> {
        self.uploads().pending.get(name).map(|(_, b)| b.clone())
    }

    /// Wait for the uploads selected by `which` (all, or one key's), and
    /// record their outcome.
    fn wait(&self, which: Option<&str>) {
        let handles: Vec<_> = {
            let mut u = self.uploads();
            let (picked, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut u.running)
                .into_iter()
                .partition(|(n, _, _)| which.is_none_or(|w| w == n));
            u.running = kept;
            picked.into_iter().collect()
        };
        for (name, seq, handle) in handles {
            let r = self.runtime.block_on(handle);
            self.finished(name, seq, r);
        }
    }

    fn finished(
        &self,
        name: String,
        seq: u64,
        r: std::result::Result<object_store::Result<()>, tokio::task::JoinError>,
    ) {
        let failure = match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(self.error("PUT", &name, e).to_string()),
            Err(e) => Some(format!(
                "{} PUT {name}: upload task failed: {e}",
                self.service.name
            )),
        };
        let mut u = self.uploads();
        if u.pending.get(&name).is_some_and(|(s, _)| *s == seq) {
            u.pending.remove(&name);
        }
        if let Some(f) = failure {
            u.failed.get_or_insert(f);
        }
    }

    /// Queue an upload, waiting for the oldest while too many run.
    fn upload(&self, name: String, data: Bytes) -> Result<()> {
        // A put of a key still uploading finishes the first, so the last
        // put wins on the server as it does here.
        self.wait(Some(&name));
        let path = self.path(&name);
        let client = self.client.clone();
        let payload = PutPayload::from_bytes(data.clone());
        let handle = self
            .runtime
            .spawn(async move { client.put(&path, payload).await.map(drop) });
        let oldest = {
            let mut u = self.uploads();
            let seq = u.next_seq;
            u.next_seq += 1;
            u.pending.insert(name.clone(), (seq, data));
            u.running.push_back((name, seq, handle));
            if u.running.len() > self.transfer.max_in_flight {
                u.running.pop_front()
            } else {
                None
            }
        };
        if let Some((name, seq, handle)) = oldest {
            let r = self.runtime.block_on(handle);
            self.finished(name, seq, r);
        }
        Ok(())
    }

    /// A conditional create; true if this call created the object.
    fn create_only(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        let name = Self::name(key)?;
        self.wait(Some(&name));
        let path = self.path(&name);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let r = self.runtime.block_on(self.client.put_opts(
            &path,
            PutPayload::from_bytes(data.clone()),
            opts,
        ));
        match r {
            Ok(_) => Ok(true),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                // A retried request whose first attempt arrived finds its own
                // object: that is success, not a conflict.
                match self.runtime.block_on(self.client.get(&path)) {
                    Ok(got) => {
                        let existing = self
                            .runtime
                            .block_on(got.bytes())
                            .map_err(|e| self.error("GET", &name, e))?;
                        // Same bytes: ours (the lock carries a token unique to
                        // its acquisition, a manifest its writer's catalog).
                        Ok(existing == data)
                    }
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(self.error("GET", &name, e)),
                }
            }
            Err(e) => Err(self.error("PUT (if absent)", &name, e)),
        }
    }
}

/// A response whose body did not arrive whole (the request itself was
/// answered): transient, as a reset is.
fn body_cut_off(e: &object_store::Error) -> bool {
    let s = e.to_string();
    s.contains("response body") || s.contains("body error")
}

/// An error response without its XML: the status, the error code and
/// message; other errors as they are, cut at 300 characters.
pub(crate) fn summarize(detail: &str) -> String {
    let tag = |t: &str| {
        let open = format!("<{t}>");
        let start = detail.find(&open)? + open.len();
        let len = detail[start..].find(&format!("</{t}>"))?;
        Some(detail[start..start + len].to_string())
    };
    if let Some(code) = tag("Code") {
        let status = detail
            .find("status code: ")
            .map(|i| &detail[i + 13..])
            .and_then(|s| s.split(':').next())
            .unwrap_or("error");
        let message = tag("Message").unwrap_or_default();
        // Azure's message runs on with a request id and a time.
        let message = message.split(" RequestId:").next().unwrap_or_default();
        return format!("{status}: {code}: {message}");
    }
    let mut s: String = detail.chars().take(300).collect();
    if s.len() < detail.len() {
        s.push('…');
    }
    s
}

pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl ObjectStore for CloudStore {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        let name = Self::name(key)?;
        if let Some(b) = self.pending(&name) {
            return Ok(b.to_vec());
        }
        let path = self.path(&name);
        self.runtime
            .block_on(async {
                let got = self.client.get(&path).await?;
                got.bytes().await
            })
            .map(|b| b.to_vec())
            .map_err(|e| self.map_read_error("GET", key, &name, e))
    }

    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        let name = Self::name(key)?;
        if let Some(b) = self.pending(&name) {
            let size = b.len() as u64;
            return match offset.checked_add(len) {
                Some(end) if end <= size => Ok(b[offset as usize..end as usize].to_vec()),
                _ => Err(Self::truncated(key, offset, len, size)),
            };
        }
        let end = offset.checked_add(len);
        if len == 0 || end.is_none() {
            // Nothing to fetch (or nothing fetchable): the size decides.
            let size = self.size(key)?;
            return match end {
                Some(end) if end <= size => Ok(Vec::new()),
                _ => Err(Self::truncated(key, offset, len, size)),
            };
        }
        let end = end.unwrap_or(u64::MAX);
        let path = self.path(&name);
        match self
            .runtime
            .block_on(self.client.get_range(&path, offset..end))
        {
            Ok(b) if b.len() as u64 == len => Ok(b.to_vec()),
            Ok(_) => {
                let size = self.size(key)?;
                Err(Self::truncated(key, offset, len, size))
            }
            Err(object_store::Error::NotFound { .. }) => {
                Err(Error::missing(ObjectRef::Stored(key.clone())))
            }
            Err(e) => {
                // A range that starts past the end is refused by the server
                // (416); tell it apart from a failure by the size.
                match self.size(key) {
                    Ok(size) if end > size => Err(Self::truncated(key, offset, len, size)),
                    Ok(_) => Err(self.error("GET (range)", &name, e)),
                    Err(size_err) => Err(size_err),
                }
            }
        }
    }

    fn size(&self, key: &ObjectKey) -> Result<u64> {
        let name = Self::name(key)?;
        if let Some(b) = self.pending(&name) {
            return Ok(b.len() as u64);
        }
        let path = self.path(&name);
        self.runtime
            .block_on(self.client.head(&path))
            .map(|m| m.size)
            .map_err(|e| self.map_read_error("HEAD", key, &name, e))
    }

    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        let name = Self::name(key)?;
        self.upload(name, Bytes::copy_from_slice(data))
    }

    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        let name = Self::name(key)?;
        self.upload(name, Bytes::from(data))
    }

    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        self.create_only(key, Bytes::copy_from_slice(data))
    }

    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        let prefix = kind.prefix();
        validate_prefix(prefix)?;
        // Listing sees the server: finish the uploads first.
        self.wait(None);
        if kind.is_single() {
            // The lock and the config are single names, not folders.
            let key = ObjectKey::parse(prefix);
            return match self.size(&key) {
                Ok(_) => Ok(vec![key]),
                Err(Error::MissingObject(_)) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
        }
        let folder = self.path(prefix.trim_end_matches('/'));
        let listed = self.list_retried(&folder, prefix)?;
        let mut names: Vec<String> = listed
            .iter()
            .filter_map(|m| self.relative(&m.location))
            .collect();
        names.sort();
        Ok(keys_of(kind, names))
    }

    fn delete(&self, key: &ObjectKey) -> Result<()> {
        let name = Self::name(key)?;
        self.wait(Some(&name));
        let path = self.path(&name);
        match self.runtime.block_on(self.client.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("DELETE", &name, e)),
        }
    }

    /// Every upload since the last barrier has arrived, or the first that
    /// failed is reported (once: the caller's operation fails with it).
    fn barrier(&self) -> Result<()> {
        self.wait(None);
        match self.uploads().failed.take() {
            Some(f) => Err(Error::io(
                format!("uploads to {} did not all arrive", self.display),
                std::io::Error::other(f),
            )),
            None => Ok(()),
        }
    }

    fn location(&self) -> String {
        self.display.clone()
    }
}

impl Drop for CloudStore {
    fn drop(&mut self) {
        // Uploads nobody waited for are not durable by the contract, but
        // let them finish rather than cut them off mid-request.
        self.wait(None);
    }
}

/// `impl ObjectStore` for a service's store type that wraps a
/// [`CloudStore`] in its field `cloud`: every call goes to it.
macro_rules! delegate_to_cloud {
    ($t:ty) => {
        impl $crate::backend::store::ObjectStore for $t {
            fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
                self.cloud.get(key)
            }
            fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
                self.cloud.get_range(key, offset, len)
            }
            fn size(&self, key: &ObjectKey) -> Result<u64> {
                self.cloud.size(key)
            }
            fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
                self.cloud.put(key, data)
            }
            fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
                self.cloud.put_owned(key, data)
            }
            fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
                self.cloud.put_if_absent(key, data)
            }
            fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
                self.cloud.list(kind)
            }
            fn delete(&self, key: &ObjectKey) -> Result<()> {
                self.cloud.delete(key)
            }
            fn barrier(&self) -> Result<()> {
                self.cloud.barrier()
            }
            fn location(&self) -> String {
                self.cloud.location()
            }
        }

        impl std::ops::Deref for $t {
            type Target = CloudStore;
            fn deref(&self) -> &CloudStore {
                &self.cloud
            }
        }
    };
}
pub(crate) use delegate_to_cloud;

/// Split `BUCKET[/PREFIX]` (after the scheme), checking the prefix is a
/// plain relative path; `bad` builds the caller's error.
pub(crate) fn bucket_and_prefix(
    path: &str,
    bad: impl Fn(&str) -> Error,
) -> Result<(String, String)> {
    let path = path.trim_matches('/');
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    if bucket.is_empty() {
        return Err(bad("no bucket"));
    }
    let prefix = prefix.trim_matches('/').to_string();
    if !prefix.is_empty() {
        validate_key(&prefix).map_err(|_| bad("the prefix is not a plain relative path"))?;
    }
    Ok((bucket.to_string(), prefix))
}

/// Whether `detail` names HTTP status `code` as a number of its own: an
/// elapsed time such as "in 289.240199ms" holds "401" too, and a refused
/// connection was once reported as "access denied" for it.
fn has_status(detail: &str, code: &str) -> bool {
    let number = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit() || c == '.');
    detail.match_indices(code).any(|(i, _)| {
        !number(detail[..i].chars().next_back()) && !number(detail[i + code.len()..].chars().next())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_code_is_a_number_of_its_own() {
        // A refused connection after 289.240199 ms is not "401".
        let refused = "Error performing GET http://127.0.0.1:34001/b in 289.240199ms, after 2 retries - HTTP error: error sending request";
        assert!(!has_status(refused, "401"));
        assert!(has_status("non-2xx status code: 401 Unauthorized", "401"));
        assert!(has_status("status 403", "403"));
        assert!(!has_status("took 14033 ms", "403"));
    }

    #[test]
    fn error_responses_are_summarized() {
        let d = "Generic S3 error: Error performing GET http://h/b in 1ms - Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?> <Error><Code>SignatureDoesNotMatch</Code><Message>The signature differs.</Message><Resource>/b</Resource></Error>";
        assert_eq!(
            summarize(d),
            "403 Forbidden: SignatureDoesNotMatch: The signature differs."
        );
        assert_eq!(summarize("short"), "short");
        assert_eq!(summarize(&"x".repeat(400)).chars().count(), 301);
    }

    #[test]
    fn bucket_and_prefix_split() {
        let bad = |w: &str| Error::invalid(w.to_string());
        assert_eq!(
            bucket_and_prefix("b/some/repo/", bad).unwrap(),
            ("b".to_string(), "some/repo".to_string())
        );
        assert_eq!(
            bucket_and_prefix("b", bad).unwrap(),
            ("b".to_string(), String::new())
        );
        assert!(bucket_and_prefix("", bad).is_err());
        assert!(bucket_and_prefix("b/../x", bad).is_err());
    }
}
