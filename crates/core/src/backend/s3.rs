//! An S3-compatible object store (AWS S3, MinIO, …), location
//! `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]`: a [`CloudStore`] on
//! `object_store`'s S3 client, which publishes with `If-None-Match: *`
//! (write-behind uploads, retries and the rest are the shared store's).
//! What is S3's own: the location, the credentials (environment, else the
//! AWS profile files) and creating a missing bucket for `init`.

use super::cloud::{
    bucket_and_prefix, delegate_to_cloud, one_line, summarize, CloudStore, Service, TransferOptions,
};
use crate::error::{Error, Result};
use crate::object_key::{KeyKind, ObjectKey};
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as S3Path;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
        let (bucket, prefix) = bucket_and_prefix(path, bad)?;
        Ok(S3Location {
            endpoint: format!("{scheme}://{host}"),
            bucket,
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
        let t = TransferOptions::from_env()?;
        Ok(S3Options {
            max_in_flight: t.max_in_flight,
            max_retries: t.max_retries,
            retry_timeout: t.retry_timeout,
            request_timeout: t.request_timeout,
            connect_timeout: t.connect_timeout,
            ..S3Options::default()
        })
    }

    /// The transfer settings every cloud store shares.
    pub fn transfer(&self) -> TransferOptions {
        TransferOptions {
            max_in_flight: self.max_in_flight,
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
            request_timeout: self.request_timeout,
            connect_timeout: self.connect_timeout,
        }
    }
}

/// The S3 store: the shared [`CloudStore`] (which it dereferences to, for
/// [`CloudStore::check_conditional_writes`]) and what creating a bucket
/// needs.
pub struct S3Store {
    cloud: CloudStore,
    s3: Arc<AmazonS3>,
    location: S3Location,
    options: S3Options,
    /// The region requests are signed for (a new bucket is created there).
    region: String,
}

delegate_to_cloud!(S3Store);

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
        let transfer = options.transfer();
        let mut builder = AmazonS3Builder::from_env()
            .with_endpoint(&location.endpoint)
            .with_bucket_name(&location.bucket)
            .with_allow_http(location.endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_retry(transfer.retry_config())
            .with_client_options(transfer.client_options(&location.endpoint));
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
        let s3 = Arc::new(s3);
        let service = Service {
            name: "S3",
            bucket_word: "bucket",
            bucket: location.bucket.clone(),
            endpoint: location.endpoint.clone(),
            missing_bucket: &["NoSuchBucket"],
            credentials_hint:
                "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or the profile",
        };
        let cloud = CloudStore::new(
            s3.clone(),
            location.prefix.clone(),
            location.display(),
            transfer,
            service,
        )?;
        Ok(S3Store {
            cloud,
            s3,
            location,
            options,
            region,
        })
    }

    /// [`open`](Self::open) for `tessera init`: a bucket that does not
    /// exist is created first (as restic does), and the answer says
    /// whether it was. Everything else fails as `open` does.
    pub fn open_creating(location: &str, options: S3Options) -> Result<(S3Store, bool)> {
        let location = S3Location::parse(location)?;
        let store = Self::connect(location, options)?;
        let created = store.probe_or_create(|| store.create_bucket())?;
        Ok((store, created))
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
                &self
                    .options
                    .transfer()
                    .client_options(&self.location.endpoint),
            )
            .map_err(|e| failed(one_line(&e.to_string())))?;
        let response = self.block_on(async {
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
}
