//! Azure Blob Storage, location `azure:ACCOUNT/CONTAINER[/PREFIX]`: a
//! [`CloudStore`] on `object_store`'s Azure client, which publishes with
//! `If-None-Match: *` (a blob created only if absent).
//!
//! Credentials, in order: [`AzureOptions::access_key`]; a connection string
//! in `AZURE_STORAGE_CONNECTION_STRING` (its `AccountKey`,
//! `SharedAccessSignature` and `BlobEndpoint`); then whatever the crate's
//! `from_env` finds: `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_KEY`,
//! a client secret, workload or managed identity, the Azure CLI. The
//! endpoint is `https://ACCOUNT.blob.core.windows.net` unless
//! [`AzureOptions::endpoint`], the connection string's `BlobEndpoint` or
//! `AZURE_STORAGE_ENDPOINT` says otherwise (Azurite:
//! `http://127.0.0.1:10000/devstoreaccount1`).

use super::cloud::{
    bucket_and_prefix, delegate_to_cloud, one_line, summarize, CloudStore, Service, TransferOptions,
};
use crate::error::{Error, Result};
use crate::object_key::{KeyKind, ObjectKey};
use object_store::azure::{AzureAuthorizer, AzureConfigKey, MicrosoftAzure, MicrosoftAzureBuilder};
use std::sync::Arc;

/// A parsed `azure:` location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureLocation {
    pub account: String,
    pub container: String,
    /// The repository's folder in the container, without slashes at either
    /// end (empty: the container's root).
    pub prefix: String,
}

impl AzureLocation {
    /// Parse `azure:ACCOUNT/CONTAINER[/PREFIX]`.
    pub fn parse(location: &str) -> Result<AzureLocation> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "bad Azure location '{location}': {why} (expected azure:ACCOUNT/CONTAINER[/PREFIX])"
            ))
        };
        let rest = location
            .strip_prefix("azure:")
            .ok_or_else(|| bad("no azure: scheme"))?;
        if rest.contains("://") {
            return Err(bad(
                "give the account name, not a URL (set the endpoint with AZURE_STORAGE_ENDPOINT)",
            ));
        }
        let (account, path) = rest.split_once('/').ok_or_else(|| bad("no container"))?;
        let valid_name = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        };
        if !valid_name(account) {
            return Err(bad("the account is lowercase letters and digits"));
        }
        let (container, prefix) = bucket_and_prefix(path, |w| bad(w))?;
        if !valid_name(&container) {
            return Err(bad("the container is lowercase letters, digits and '-'"));
        }
        Ok(AzureLocation {
            account: account.to_string(),
            container,
            prefix,
        })
    }

    /// The location as written, for messages.
    pub fn display(&self) -> String {
        let mut s = format!("azure:{}/{}", self.account, self.container);
        if !self.prefix.is_empty() {
            s.push('/');
            s.push_str(&self.prefix);
        }
        s
    }
}

/// How an [`AzureStore`] reaches its account.
#[derive(Clone, Debug, Default)]
pub struct AzureOptions {
    pub transfer: TransferOptions,
    /// The blob service's URL (an emulator's, a sovereign cloud's); `None`:
    /// from the environment, else `https://ACCOUNT.blob.core.windows.net`.
    pub endpoint: Option<String>,
    /// The account's shared key; `None`: from the environment.
    pub access_key: Option<String>,
}

impl AzureOptions {
    /// Defaults with the transfer settings from the environment.
    pub fn from_env() -> Result<AzureOptions> {
        Ok(AzureOptions {
            transfer: TransferOptions::from_env()?,
            ..AzureOptions::default()
        })
    }
}

/// The fields of an Azure connection string (`Key=Value;…`) Tessera uses.
#[derive(Debug, Default, PartialEq, Eq)]
struct ConnectionString {
    account_key: Option<String>,
    sas: Option<String>,
    blob_endpoint: Option<String>,
}

impl ConnectionString {
    fn parse(s: &str) -> ConnectionString {
        let mut c = ConnectionString::default();
        for part in s.split(';') {
            let Some((k, v)) = part.split_once('=') else {
                continue;
            };
            let v = v.trim().to_string();
            match k.trim() {
                "AccountKey" => c.account_key = Some(v),
                "SharedAccessSignature" => c.sas = Some(v),
                "BlobEndpoint" => c.blob_endpoint = Some(v.trim_end_matches('/').to_string()),
                _ => {}
            }
        }
        c
    }
}

/// The Azure store: the shared [`CloudStore`] (which it dereferences to)
/// and what creating a container needs.
pub struct AzureStore {
    cloud: CloudStore,
    azure: Arc<MicrosoftAzure>,
    location: AzureLocation,
    /// The blob service's URL, for creating the container.
    endpoint: String,
}

delegate_to_cloud!(AzureStore);

impl AzureStore {
    /// Connect to an existing container: a missing container, refused
    /// credentials or an unreachable server fail here, in one line.
    pub fn open(location: &str, options: AzureOptions) -> Result<AzureStore> {
        let store = Self::connect(AzureLocation::parse(location)?, options)?;
        store.probe()?;
        Ok(store)
    }

    /// [`open`](Self::open) for `tessera init`: a missing container is
    /// created first, and the answer says whether it was.
    pub fn open_creating(location: &str, options: AzureOptions) -> Result<(AzureStore, bool)> {
        let store = Self::connect(AzureLocation::parse(location)?, options)?;
        let created = store.probe_or_create(|| store.create_container())?;
        Ok((store, created))
    }

    fn connect(location: AzureLocation, options: AzureOptions) -> Result<AzureStore> {
        let conn = std::env::var("AZURE_STORAGE_CONNECTION_STRING")
            .map(|s| ConnectionString::parse(&s))
            .unwrap_or_default();
        let mut builder = MicrosoftAzureBuilder::from_env()
            .with_account(&location.account)
            .with_container_name(&location.container)
            .with_retry(options.transfer.retry_config());
        let endpoint = options
            .endpoint
            .clone()
            .or(conn.blob_endpoint)
            .or_else(|| std::env::var("AZURE_STORAGE_ENDPOINT").ok())
            .map(|e| e.trim_end_matches('/').to_string())
            .unwrap_or_else(|| format!("https://{}.blob.core.windows.net", location.account));
        builder = builder
            .with_endpoint(endpoint.clone())
            .with_allow_http(endpoint.starts_with("http://"))
            .with_client_options(options.transfer.client_options(&endpoint));
        if let Some(key) = options.access_key.clone().or(conn.account_key) {
            builder = builder.with_access_key(key);
        } else if let Some(sas) = conn.sas {
            builder = builder.with_config(AzureConfigKey::SasKey, sas);
        }
        let azure = builder.build().map_err(|e| {
            Error::invalid(format!(
                "cannot use {}: {}",
                location.display(),
                one_line(&e.to_string())
            ))
        })?;
        let azure = Arc::new(azure);
        let service = Service {
            name: "Azure",
            bucket_word: "container",
            bucket: location.container.clone(),
            endpoint: endpoint.clone(),
            missing_bucket: &["ContainerNotFound"],
            credentials_hint: "AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_KEY, AZURE_STORAGE_CONNECTION_STRING or the identity",
        };
        let cloud = CloudStore::new(
            azure.clone(),
            location.prefix.clone(),
            location.display(),
            options.transfer,
            service,
        )?;
        Ok(AzureStore {
            cloud,
            azure,
            location,
            endpoint,
        })
    }

    /// Create the container: `PUT CONTAINER?restype=container`, authorized
    /// by the crate's own Azure authorizer with the store's credential
    /// (the crate has no container API). One created meanwhile is fine.
    fn create_container(&self) -> Result<()> {
        use object_store::client::{HttpConnector, ReqwestConnector};
        let failed = |detail: String| {
            Error::io(
                format!(
                    "Azure create container '{}' at {}",
                    self.location.container, self.endpoint
                ),
                std::io::Error::other(detail),
            )
        };
        let client = ReqwestConnector::default()
            .connect(&self.transfer().client_options(&self.endpoint))
            .map_err(|e| failed(one_line(&e.to_string())))?;
        let url = format!(
            "{}/{}?restype=container",
            self.endpoint, self.location.container
        );
        let response = self.block_on(async {
            let credential = self
                .azure
                .credentials()
                .get_credential()
                .await
                .map_err(|e| one_line(&e.to_string()))?;
            let mut request = http::Request::builder()
                .method(http::Method::PUT)
                .uri(url.as_str())
                .header(http::header::CONTENT_LENGTH, "0")
                .body(Vec::new().into())
                .map_err(|e| e.to_string())?;
            AzureAuthorizer::new(&credential, &self.location.account)
                .try_authorize(&mut request)
                .map_err(|e| one_line(&e.to_string()))?;
            let response = client
                .execute(request)
                .await
                .map_err(|e| one_line(&e.to_string()))?;
            let status = response.status();
            let text = response.into_body().bytes().await.unwrap_or_default();
            Ok::<_, String>((status, String::from_utf8_lossy(&text).into_owned()))
        });
        let (status, text) = response.map_err(failed)?;
        if status.is_success() || text.contains("ContainerAlreadyExists") {
            return Ok(());
        }
        Err(failed(format!("{status}: {}", summarize(&one_line(&text)))))
    }
}

impl std::fmt::Debug for AzureStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureStore")
            .field("location", &self.location.display())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let l = AzureLocation::parse("azure:acct/box/some/repo/").unwrap();
        assert_eq!(
            (l.account.as_str(), l.container.as_str(), l.prefix.as_str()),
            ("acct", "box", "some/repo")
        );
        assert_eq!(l.display(), "azure:acct/box/some/repo");
        assert_eq!(AzureLocation::parse("azure:a/b").unwrap().prefix, "");
        for bad in [
            "azure:",
            "azure:acct",
            "azure:acct/",
            "azure:https://acct/box",
            "azure:Acct/box",
            "azure:acct/Box",
            "azure:acct/box/../x",
        ] {
            assert!(
                matches!(AzureLocation::parse(bad), Err(Error::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn connection_strings_parse() {
        let c = ConnectionString::parse(
            "DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=a2V5==;BlobEndpoint=http://127.0.0.1:10000/dev/;",
        );
        assert_eq!(c.account_key.as_deref(), Some("a2V5=="));
        assert_eq!(
            c.blob_endpoint.as_deref(),
            Some("http://127.0.0.1:10000/dev")
        );
        assert_eq!(c.sas, None);
        let c =
            ConnectionString::parse("BlobEndpoint=https://x;SharedAccessSignature=sv=1&sig=a%3D");
        assert_eq!(c.sas.as_deref(), Some("sv=1&sig=a%3D"));
    }
}
