//! Google Cloud Storage, location `gs:BUCKET[/PREFIX]`: a [`CloudStore`]
//! on `object_store`'s GCS client, which publishes with
//! `x-goog-if-generation-match: 0` (an object created only if absent).
//!
//! Credentials, in order: [`GcsOptions::service_account_key`]; then what
//! the crate's `from_env` finds: `GOOGLE_SERVICE_ACCOUNT` (a key file),
//! `GOOGLE_SERVICE_ACCOUNT_KEY` (its JSON), the application default
//! credentials (`GOOGLE_APPLICATION_CREDENTIALS` or gcloud's file), the
//! instance's metadata server. The server is `https://storage.googleapis.com`
//! unless [`GcsOptions::endpoint`] or `GOOGLE_BASE_URL` says otherwise (an
//! emulator such as fake-gcs-server, which serves listings, reads and
//! bucket creation but not the XML-API uploads this client sends; the
//! tests put a proxy between them, `crates/core/tests/it/gcs.rs`).

use super::cloud::{
    bucket_and_prefix, delegate_to_cloud, one_line, CloudStore, Service, TransferOptions,
};
use crate::error::{Error, Result};
use crate::object_key::{KeyKind, ObjectKey};
use object_store::gcp::{GoogleCloudStorage, GoogleCloudStorageBuilder};
use std::sync::Arc;

/// The public service.
const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";

/// A service-account key that tells the crate to send no token: for an
/// emulator, which checks none.
const NO_AUTH_KEY: &str =
    r#"{"disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}"#;

/// A parsed `gs:` location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcsLocation {
    pub bucket: String,
    /// The repository's folder in the bucket, without slashes at either end
    /// (empty: the bucket's root).
    pub prefix: String,
}

impl GcsLocation {
    /// Parse `gs:BUCKET[/PREFIX]` (also `gs://BUCKET[/PREFIX]`, as gsutil
    /// writes it).
    pub fn parse(location: &str) -> Result<GcsLocation> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "bad GCS location '{location}': {why} (expected gs:BUCKET[/PREFIX])"
            ))
        };
        let rest = location
            .strip_prefix("gs:")
            .ok_or_else(|| bad("no gs: scheme"))?;
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (bucket, prefix) = bucket_and_prefix(rest, |w| bad(w))?;
        let valid = bucket.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.')
        });
        if !valid || bucket.len() < 3 {
            return Err(bad(
                "the bucket is 3 or more lowercase letters, digits, '-', '_' and '.'",
            ));
        }
        Ok(GcsLocation { bucket, prefix })
    }

    /// The location as written, for messages.
    pub fn display(&self) -> String {
        let mut s = format!("gs:{}", self.bucket);
        if !self.prefix.is_empty() {
            s.push('/');
            s.push_str(&self.prefix);
        }
        s
    }
}

/// How a [`GcsStore`] reaches its service.
#[derive(Clone, Debug, Default)]
pub struct GcsOptions {
    pub transfer: TransferOptions,
    /// The server's URL (an emulator's); `None`: `GOOGLE_BASE_URL`, else
    /// the public service.
    pub endpoint: Option<String>,
    /// A service account's JSON key; `None`: from the environment.
    pub service_account_key: Option<String>,
    /// Send no credentials (an emulator checks none).
    pub anonymous: bool,
    /// The project a new bucket is billed to; `None`:
    /// `GOOGLE_CLOUD_PROJECT`, else the service account's.
    pub project: Option<String>,
}

impl GcsOptions {
    /// Defaults with the transfer settings from the environment.
    pub fn from_env() -> Result<GcsOptions> {
        Ok(GcsOptions {
            transfer: TransferOptions::from_env()?,
            ..GcsOptions::default()
        })
    }
}

/// The GCS store: the shared [`CloudStore`] (which it dereferences to) and
/// what creating a bucket needs.
pub struct GcsStore {
    cloud: CloudStore,
    gcs: Arc<GoogleCloudStorage>,
    location: GcsLocation,
    endpoint: String,
    project: Option<String>,
}

delegate_to_cloud!(GcsStore);

impl GcsStore {
    /// Connect to an existing bucket: a missing bucket, refused credentials
    /// or an unreachable server fail here, in one line.
    pub fn open(location: &str, options: GcsOptions) -> Result<GcsStore> {
        let store = Self::connect(GcsLocation::parse(location)?, options)?;
        store.probe()?;
        Ok(store)
    }

    /// [`open`](Self::open) for `tessera init`: a missing bucket is created
    /// first, and the answer says whether it was.
    pub fn open_creating(location: &str, options: GcsOptions) -> Result<(GcsStore, bool)> {
        let store = Self::connect(GcsLocation::parse(location)?, options)?;
        let created = store.probe_or_create(|| store.create_bucket())?;
        Ok((store, created))
    }

    fn connect(location: GcsLocation, options: GcsOptions) -> Result<GcsStore> {
        let endpoint = options
            .endpoint
            .clone()
            .or_else(|| std::env::var("GOOGLE_BASE_URL").ok())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
            .trim_end_matches('/')
            .to_string();
        let mut builder = GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(&location.bucket)
            .with_base_url(&endpoint)
            .with_retry(options.transfer.retry_config())
            .with_client_options(options.transfer.client_options(&endpoint));
        let key = if options.anonymous {
            Some(NO_AUTH_KEY.to_string())
        } else {
            options.service_account_key.clone()
        };
        let key_project = key.as_deref().and_then(project_of_key);
        if let Some(key) = key {
            builder = builder.with_service_account_key(key);
        }
        let gcs = builder.build().map_err(|e| {
            Error::invalid(format!(
                "cannot use {}: {}",
                location.display(),
                one_line(&e.to_string())
            ))
        })?;
        let gcs = Arc::new(gcs);
        let project = options
            .project
            .clone()
            .or_else(|| std::env::var("GOOGLE_CLOUD_PROJECT").ok())
            .or(key_project)
            .or_else(|| {
                let file = std::env::var("GOOGLE_SERVICE_ACCOUNT")
                    .or_else(|_| std::env::var("GOOGLE_APPLICATION_CREDENTIALS"))
                    .ok()?;
                project_of_key(&std::fs::read_to_string(file).ok()?)
            });
        let service = Service {
            name: "GCS",
            bucket_word: "bucket",
            bucket: location.bucket.clone(),
            endpoint: endpoint.clone(),
            // The XML API's code; fake-gcs-server's words.
            missing_bucket: &["NoSuchBucket", "no bucket named"],
            credentials_hint: "GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT",
        };
        let cloud = CloudStore::new(
            gcs.clone(),
            location.prefix.clone(),
            location.display(),
            options.transfer,
            service,
        )?;
        Ok(GcsStore {
            cloud,
            gcs,
            location,
            endpoint,
            project,
        })
    }

    /// Create the bucket through the JSON API (`POST /storage/v1/b`), with
    /// the store's own token (the crate has no bucket API). A bucket
    /// created meanwhile is fine.
    fn create_bucket(&self) -> Result<()> {
        use object_store::client::{HttpConnector, ReqwestConnector};
        let failed = |detail: String| {
            Error::io(
                format!(
                    "GCS create bucket '{}' at {}",
                    self.location.bucket, self.endpoint
                ),
                std::io::Error::other(detail),
            )
        };
        let project = self
            .project
            .clone()
            .ok_or_else(|| failed("no project to bill it to (set GOOGLE_CLOUD_PROJECT)".into()))?;
        let client = ReqwestConnector::default()
            .connect(&self.transfer().client_options(&self.endpoint))
            .map_err(|e| failed(one_line(&e.to_string())))?;
        let url = format!("{}/storage/v1/b?project={project}", self.endpoint);
        let body = serde_json::json!({ "name": self.location.bucket }).to_string();
        let response = self.block_on(async {
            let token = self
                .gcs
                .credentials()
                .get_credential()
                .await
                .map_err(|e| one_line(&e.to_string()))?;
            let mut request = http::Request::builder()
                .method(http::Method::POST)
                .uri(url.as_str())
                .header(http::header::CONTENT_TYPE, "application/json");
            if !token.bearer.is_empty() {
                request = request.header(
                    http::header::AUTHORIZATION,
                    format!("Bearer {}", token.bearer),
                );
            }
            let request = request
                .body(body.into_bytes().into())
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
        // 409: it exists (made by someone else since the probe).
        if status.is_success() || status == http::StatusCode::CONFLICT {
            return Ok(());
        }
        let mut text = one_line(&text);
        text.truncate(300);
        Err(failed(format!("{status}: {text}")))
    }
}

/// The `project_id` of a service account's JSON key.
fn project_of_key(json: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get("project_id")?.as_str().map(str::to_string)
}

impl std::fmt::Debug for GcsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsStore")
            .field("location", &self.location.display())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let l = GcsLocation::parse("gs:my-bucket/some/repo/").unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("my-bucket", "some/repo")
        );
        assert_eq!(l.display(), "gs:my-bucket/some/repo");
        assert_eq!(GcsLocation::parse("gs://b.x/p").unwrap().bucket, "b.x");
        assert!(GcsLocation::parse("gs:ab").is_err());
        for bad in ["gs:", "gs:/", "gs:ab", "gs:Big", "gs:bkt/../x", "gcs:bkt"] {
            assert!(
                matches!(GcsLocation::parse(bad), Err(Error::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn projects_come_from_keys() {
        assert_eq!(
            project_of_key(r#"{"type":"service_account","project_id":"p-1"}"#).as_deref(),
            Some("p-1")
        );
        assert_eq!(project_of_key(NO_AUTH_KEY), None);
        assert_eq!(project_of_key("not json"), None);
    }
}
