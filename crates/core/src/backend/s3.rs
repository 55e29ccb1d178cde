//! An S3-compatible object store (AWS S3, MinIO, …), location
//! `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]`.
//!
//! The protocol (signing, retries with backoff, XML listings) is the
//! `object_store` crate's; it is async, so the store owns a small private
//! tokio runtime and the engine's synchronous calls block on it.
//!
//! Built for latency:
//! - **Uploads are written behind**: `put` queues the upload and returns;
//!   at most [`S3Options::max_in_flight`] run at once (a further `put` waits
//!   for the oldest). The contract allows it: objects put since the last
//!   [`barrier`](ObjectStore::barrier) may be lost, and `barrier` waits for
//!   every upload and fails if any failed since the last barrier, so a
//!   manifest (published only after a barrier) is never published over an
//!   object that did not arrive; the operation that put it fails instead,
//!   and the next one starts clean. Reads of a key whose upload is still
//!   running are served from the queued bytes.
//! - **Ranged reads** are HTTP range requests.
//! - **Publishing** uses conditional writes (`If-None-Match: *`):
//!   `put_if_absent` is atomic on the server, so two writers cannot both
//!   take the lock or both publish one generation. A server that ignores
//!   the header is refused when the repository is created (see
//!   [`S3Store::check_conditional_writes`]).
//! - **Transient errors** (5xx, timeouts, resets) are retried with
//!   exponential backoff by `object_store`, within
//!   [`S3Options::retry_timeout`]; a retried conditional write whose first
//!   attempt did arrive reads the object back instead of reporting a
//!   conflict with itself.

use super::local::{validate_key, validate_prefix};
use super::store::{keys_of, ObjectStore};
use crate::error::{Error, ObjectRef, Result};
use crate::object_key::{KeyKind, ObjectKey};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as S3Path;
use object_store::{
    ClientOptions, ObjectStore as _, ObjectStoreExt as _, PutMode, PutOptions, PutPayload,
    RetryConfig,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;

/// A parsed `s3:` location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Location {
    /// `http://HOST[:PORT]` or `https://…`, without a trailing slash.
    pub endpoint: String,
    pub bucket: String,
    /// The repository's folder in the bucket, without slashes at either end
    /// (empty: the bucket's root).
    pub prefix: String,
}

impl S3Location {
    /// Parse `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]`.
    pub fn parse(location: &str) -> Result<S3Location> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "bad S3 location '{location}': {why} (expected s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX])"
            ))
        };
        let url = location
            .strip_prefix("s3:")
            .ok_or_else(|| bad("no s3: scheme"))?;
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("no http:// or https:// endpoint"))?;
        if scheme != "http" && scheme != "https" {
            return Err(bad("the endpoint must be http:// or https://"));
        }
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let path = path.trim_matches('/');
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket"));
        }
        let prefix = prefix.trim_matches('/').to_string();
        if !prefix.is_empty() {
            validate_key(&prefix).map_err(|_| bad("the prefix is not a plain relative path"))?;
        }
        Ok(S3Location {
            endpoint: format!("{scheme}://{host}"),
            bucket: bucket.to_string(),
            prefix,
        })
    }

    /// The location as written, for messages.
    pub fn display(&self) -> String {
        let mut s = format!("s3:{}/{}", self.endpoint, self.bucket);
        if !self.prefix.is_empty() {
            s.push('/');
            s.push_str(&self.prefix);
        }
        s
    }
}

/// Credentials, when not taken from the environment.
#[derive(Clone, Debug, Default)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

/// How an [`S3Store`] talks to its server.
#[derive(Clone, Debug)]
pub struct S3Options {
    /// Uploads running at once (write-behind depth).
    pub max_in_flight: usize,
    /// Retries of one request on transient errors.
    pub max_retries: usize,
    /// No retry starts after this long since the first attempt.
    pub retry_timeout: Duration,
    /// One request's time limit.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// `None`: `AWS_ACCESS_KEY_ID` and friends, else the profile in
    /// `~/.aws/credentials` (`AWS_PROFILE`, else `default`).
    pub credentials: Option<S3Credentials>,
    /// `None`: `AWS_REGION` (or `AWS_DEFAULT_REGION`, or the profile's),
    /// else `us-east-1`.
    pub region: Option<String>,
}

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            max_in_flight: 8,
            max_retries: 6,
            retry_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(5),
            credentials: None,
            region: None,
        }
    }
}

impl S3Options {
    /// Defaults, with `TESSERA_S3_MAX_RETRIES`, `TESSERA_S3_RETRY_TIMEOUT`
    /// (seconds) and `TESSERA_S3_IN_FLIGHT` from the environment.
    pub fn from_env() -> Result<S3Options> {
        let mut o = S3Options::default();
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

pub struct S3Store {
    runtime: tokio::runtime::Runtime,
    s3: Arc<AmazonS3>,
    location: S3Location,
    options: S3Options,
    /// The region requests are signed for (a new bucket is created there).
    region: String,
    uploads: Mutex<Uploads>,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("location", &self.location.display())
            .finish()
    }
}

impl S3Store {
    /// Connect to an existing bucket; the repository is looked for by the
    /// caller. A missing bucket or refused credentials fail here, with a
    /// one-line message.
    pub fn open(location: &str, options: S3Options) -> Result<S3Store> {
        let location = S3Location::parse(location)?;
        let store = Self::connect(location, options)?;
        store.probe()?;
        Ok(store)
    }

    fn connect(location: S3Location, options: S3Options) -> Result<S3Store> {
        let mut builder = AmazonS3Builder::from_env()
            .with_endpoint(&location.endpoint)
            .with_bucket_name(&location.bucket)
            .with_allow_http(location.endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_retry(RetryConfig {
                backoff: object_store::BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(5),
                    base: 2.0,
                },
                max_retries: options.max_retries,
                retry_timeout: options.retry_timeout,
            })
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(location.endpoint.starts_with("http://"))
                    .with_timeout(options.request_timeout)
                    .with_connect_timeout(options.connect_timeout),
            );
        let profile = Profile::load();
        let creds = options.credentials.clone().or_else(|| {
            if std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
                None
            } else {
                profile.credentials.clone()
            }
        });
        if let Some(c) = creds {
            builder = builder
                .with_access_key_id(c.access_key_id)
                .with_secret_access_key(c.secret_access_key);
            if let Some(t) = c.session_token {
                builder = builder.with_token(t);
            }
        }
        let region = options
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .or(profile.region)
            .unwrap_or_else(|| "us-east-1".to_string());
        builder = builder.with_region(&region);
        let s3 = builder.build().map_err(|e| {
            Error::invalid(format!(
                "cannot use {}: {}",
                location.display(),
                one_line(&e.to_string())
            ))
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tessera-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::io("cannot start the S3 client's runtime", e))?;
        Ok(S3Store {
            runtime,
            s3: Arc::new(s3),
            location,
            options,
            region,
            uploads: Mutex::new(Uploads::default()),
        })
    }

    /// [`open`](Self::open) for `tessera init`: a bucket that does not
    /// exist is created first (as restic does), and the answer says
    /// whether it was. Everything else fails as `open` does.
    pub fn open_creating(location: &str, options: S3Options) -> Result<(S3Store, bool)> {
        let location = S3Location::parse(location)?;
        let store = Self::connect(location, options)?;
        match store.probe_request() {
            Ok(()) => Ok((store, false)),
            Err(e) if no_such_bucket(&e) => {
                store.create_bucket()?;
                store.probe()?;
                Ok((store, true))
            }
            Err(e) => Err(store.error("list", "manifests/", e)),
        }
    }

    /// Create the bucket: `PUT /BUCKET` (with its region's location
    /// constraint outside us-east-1), signed by `object_store`'s own SigV4
    /// signer and sent through its HTTP client (the crate has no bucket
    /// API). A bucket another client created meanwhile is fine.
    fn create_bucket(&self) -> Result<()> {
        use object_store::client::{HttpConnector, ReqwestConnector};
        use object_store::signer::Signer;
        let failed = |detail: String| {
            Error::io(
                format!(
                    "S3 create bucket '{}' at {}",
                    self.location.bucket, self.location.endpoint
                ),
                std::io::Error::other(detail),
            )
        };
        let body = if self.region == "us-east-1" {
            String::new()
        } else {
            format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                self.region
            )
        };
        let client = ReqwestConnector::default()
            .connect(
                &ClientOptions::new()
                    .with_allow_http(self.location.endpoint.starts_with("http://"))
                    .with_timeout(self.options.request_timeout)
                    .with_connect_timeout(self.options.connect_timeout),
            )
            .map_err(|e| failed(one_line(&e.to_string())))?;
        let response = self.runtime.block_on(async {
            // The bucket's own URL: the signer's URL of the empty path.
            let url = self
                .s3
                .signed_url(
                    http::Method::PUT,
                    &S3Path::from(""),
                    Duration::from_secs(300),
                )
                .await
                .map_err(|e| one_line(&e.to_string()))?;
            let request = http::Request::builder()
                .method(http::Method::PUT)
                .uri(url.as_str())
                .body(body.into())
                .map_err(|e| e.to_string())?;
            let response = client
                .execute(request)
                .await
                .map_err(|e| one_line(&e.to_string()))?;
            let status = response.status();
            let text = response.into_body().bytes().await.unwrap_or_default();
            Ok::<_, String>((status, String::from_utf8_lossy(&text).into_owned()))
        });
        let (status, text) = response.map_err(failed)?;
        if status.is_success() || text.contains("BucketAlreadyOwnedByYou") {
            return Ok(());
        }
        Err(failed(format!("{status}: {}", summarize(&one_line(&text)))))
    }

    /// One cheap request that fails clearly on a missing bucket, refused
    /// credentials or an unreachable server.
    fn probe(&self) -> Result<()> {
        self.probe_request()
            .map_err(|e| self.error("list", "manifests/", e))
    }

    fn probe_request(&self) -> object_store::Result<()> {
        let prefix = self.path("manifests");
        let r = self
            .runtime
            .block_on(self.s3.list_with_delimiter(Some(&prefix)));
        r.map(drop)
    }

    /// Refuse a server that ignores `If-None-Match: *` (it would let two
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
                "{} does not support conditional writes (If-None-Match: *); \
                 Tessera needs them to keep two writers from publishing the same generation",
                self.location.display()
            ))),
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    fn path(&self, name: &str) -> S3Path {
        if self.location.prefix.is_empty() {
            S3Path::from(name)
        } else {
            S3Path::from(format!("{}/{name}", self.location.prefix))
        }
    }

    /// The key's name relative to the repository, from a listed path.
    fn relative(&self, path: &S3Path) -> Option<String> {
        let full = path.as_ref();
        if self.location.prefix.is_empty() {
            return Some(full.to_string());
        }
        full.strip_prefix(&self.location.prefix)?
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
    fn error(&self, op: &str, name: &str, e: object_store::Error) -> Error {
        let detail = summarize(&one_line(&e.to_string()));
        let hint = if detail.contains("NoSuchBucket") {
            format!(
                "bucket '{}' does not exist at {} (`tessera init` creates it)",
                self.location.bucket, self.location.endpoint
            )
        } else if [
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "403",
        ]
        .iter()
        .any(|w| detail.contains(w))
        {
            format!(
                "access denied by {} (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or the profile): {detail}",
                self.location.endpoint
            )
        } else if detail.contains("error sending request")
            || detail.contains("Connection refused")
            || detail.contains("connect")
        {
            format!(
                "cannot reach {} (is the server running?): {detail}",
                self.location.endpoint
            )
        } else {
            detail
        };
        Error::io(
            format!("S3 {op} {name} at {}", self.location.display()),
            std::io::Error::other(hint),
        )
    }

    /// Every object under `folder`. A listing whose response body is cut
    /// off (a connection reset mid-body, which `object_store` does not
    /// retry) is asked for again with backoff, within the retry limits:
    /// listing has no effect, so asking again is safe.
    fn list_retried(&self, folder: &S3Path, prefix: &str) -> Result<Vec<object_store::ObjectMeta>> {
        let started = std::time::Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            match self
                .runtime
                .block_on(self.s3.list(Some(folder)).try_collect::<Vec<_>>())
            {
                Ok(listed) => return Ok(listed),
                Err(e)
                    if body_cut_off(&e)
                        && attempt < self.options.max_retries
                        && started.elapsed() + delay < self.options.retry_timeout =>
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
            Err(e) => Some(format!("S3 PUT {name}: upload task failed: {e}")),
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
        let s3 = self.s3.clone();
        let payload = PutPayload::from_bytes(data.clone());
        let handle = self
            .runtime
            .spawn(async move { s3.put(&path, payload).await.map(drop) });
        let oldest = {
            let mut u = self.uploads();
            let seq = u.next_seq;
            u.next_seq += 1;
            u.pending.insert(name.clone(), (seq, data));
            u.running.push_back((name, seq, handle));
            if u.running.len() > self.options.max_in_flight {
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
        let r = self.runtime.block_on(self.s3.put_opts(
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
                match self.runtime.block_on(self.s3.get(&path)) {
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

/// Credentials and region from the AWS shared files, for a profile.
#[derive(Default)]
struct Profile {
    credentials: Option<S3Credentials>,
    region: Option<String>,
}

impl Profile {
    /// `AWS_PROFILE` (else `default`) from `AWS_SHARED_CREDENTIALS_FILE`
    /// (else `~/.aws/credentials`) and `AWS_CONFIG_FILE` (else
    /// `~/.aws/config`); nothing if the files are absent.
    fn load() -> Profile {
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let file = |var: &str, default: &str| {
            std::env::var_os(var)
                .map(std::path::PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
        };
        let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
        let read = |p: Option<std::path::PathBuf>, section: &str| {
            p.and_then(|p| std::fs::read_to_string(p).ok())
                .map(|text| ini_section(&text, section))
                .unwrap_or_default()
        };
        let creds = read(file("AWS_SHARED_CREDENTIALS_FILE", "credentials"), &profile);
        let config_section = if profile == "default" {
            "default".to_string()
        } else {
            format!("profile {profile}")
        };
        let config = read(file("AWS_CONFIG_FILE", "config"), &config_section);
        let credentials = match (
            creds.get("aws_access_key_id"),
            creds.get("aws_secret_access_key"),
        ) {
            (Some(id), Some(secret)) => Some(S3Credentials {
                access_key_id: id.clone(),
                secret_access_key: secret.clone(),
                session_token: creds.get("aws_session_token").cloned(),
            }),
            _ => None,
        };
        Profile {
            credentials,
            region: config.get("region").cloned(),
        }
    }
}

/// `key = value` pairs of one `[section]` of an INI file.
fn ini_section(text: &str, section: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
        } else if inside {
            if let Some((k, v)) = line.split_once('=') {
                out.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
    }
    out
}

/// An S3 error response without its XML: the status, the error code and
/// message; other errors as they are, cut at 300 characters.
/// A response whose body did not arrive whole (the request itself was
/// answered): transient, as a reset is.
/// The server says the bucket does not exist.
fn no_such_bucket(e: &object_store::Error) -> bool {
    e.to_string().contains("NoSuchBucket")
}

fn body_cut_off(e: &object_store::Error) -> bool {
    let s = e.to_string();
    s.contains("response body") || s.contains("body error")
}

fn summarize(detail: &str) -> String {
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
        return format!("{status}: {code}: {message}");
    }
    let mut s: String = detail.chars().take(300).collect();
    if s.len() < detail.len() {
        s.push('…');
    }
    s
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl ObjectStore for S3Store {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        let name = Self::name(key)?;
        if let Some(b) = self.pending(&name) {
            return Ok(b.to_vec());
        }
        let path = self.path(&name);
        self.runtime
            .block_on(async {
                let got = self.s3.get(&path).await?;
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
        match self.runtime.block_on(self.s3.get_range(&path, offset..end)) {
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
            .block_on(self.s3.head(&path))
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
        match self.runtime.block_on(self.s3.delete(&path)) {
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
                format!("uploads to {} did not all arrive", self.location.display()),
                std::io::Error::other(f),
            )),
            None => Ok(()),
        }
    }

    fn location(&self) -> String {
        self.location.display()
    }
}

impl Drop for S3Store {
    fn drop(&mut self) {
        // Uploads nobody waited for are not durable by the contract, but
        // let them finish rather than cut them off mid-request.
        self.wait(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let l = S3Location::parse("s3:http://127.0.0.1:9000/bucket/some/repo/").unwrap();
        assert_eq!(l.endpoint, "http://127.0.0.1:9000");
        assert_eq!(l.bucket, "bucket");
        assert_eq!(l.prefix, "some/repo");
        assert_eq!(l.display(), "s3:http://127.0.0.1:9000/bucket/some/repo");
        let l = S3Location::parse("s3:https://s3.amazonaws.com/b").unwrap();
        assert_eq!((l.bucket.as_str(), l.prefix.as_str()), ("b", ""));
        for bad in [
            "s3:",
            "s3:bucket/x",
            "s3:ftp://h/b",
            "s3:http:///b",
            "s3:http://host",
            "s3:http://host/",
            "s3:http://host/b/../x",
        ] {
            assert!(
                matches!(S3Location::parse(bad), Err(Error::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn profiles_are_read_from_ini_sections() {
        let text = "[default]\naws_access_key_id = A\n[other]\n# c\naws_access_key_id=B\nAWS_Secret_Access_Key = S\n";
        assert_eq!(ini_section(text, "default")["aws_access_key_id"], "A");
        let other = ini_section(text, "other");
        assert_eq!(other["aws_access_key_id"], "B");
        assert_eq!(other["aws_secret_access_key"], "S");
        assert!(ini_section(text, "none").is_empty());
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
}
