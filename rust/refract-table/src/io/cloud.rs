//! Datasets on cloud object stores: S3 (`s3://`, `s3a://`), Azure Blob
//! Storage (`az://`, `azure://`, `abfs://`, `abfss://`) and Google Cloud
//! Storage (`gs://`), built with object_store's own builders from the URI and
//! a [`StorageOptions`] map whose keys are object_store's configuration keys
//! (lowercase, as Lance spells them: `aws_endpoint`, `allow_http`, ...).
//!
//! The library never reads the environment: a caller that wants `AWS_*`,
//! `AZURE_*` and `GOOGLE_*` variables to fill what the map leaves out passes
//! them to [`StorageOptions::fill_from_environment`] (the CLI does).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use refract_core::error::clean_text;
use refract_core::{Error, Result};
use url::Url;

/// Attempts per request on a cloud store before its error is reported.
const CLOUD_MAX_RETRIES: usize = 5;
/// How long one request may keep retrying.
const CLOUD_RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// The smallest part a multipart upload may use on S3 and GCS (all but the last).
pub(crate) const CLOUD_MIN_PART_BYTES: usize = 5 << 20;

/// Which cloud a URI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    /// Amazon S3 or an S3-compatible server.
    S3,
    /// Azure Blob Storage (or ADLS Gen2).
    Azure,
    /// Google Cloud Storage.
    Gcs,
}

impl Cloud {
    /// The cloud of a URI scheme; `None` for local and memory schemes.
    pub fn of_scheme(scheme: &str) -> Option<Cloud> {
        match scheme {
            "s3" | "s3a" => Some(Cloud::S3),
            "az" | "azure" | "abfs" | "abfss" | "adl" => Some(Cloud::Azure),
            "gs" => Some(Cloud::Gcs),
            _ => None,
        }
    }

    /// The prefix of the environment variables that configure this cloud.
    fn environment_prefix(self) -> &'static str {
        match self {
            Cloud::S3 => "AWS_",
            Cloud::Azure => "AZURE_",
            Cloud::Gcs => "GOOGLE_",
        }
    }

    /// True when `key` is one of object_store's configuration keys for this cloud.
    fn knows(self, key: &str) -> bool {
        match self {
            Cloud::S3 => AmazonS3ConfigKey::from_str(key).is_ok(),
            Cloud::Azure => AzureConfigKey::from_str(key).is_ok(),
            Cloud::Gcs => GoogleConfigKey::from_str(key).is_ok(),
        }
    }
}

/// Options of a dataset's object store, keyed by object_store's configuration
/// keys in lowercase. Values may be credentials: `Debug` prints keys only, and
/// no error quotes a value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StorageOptions {
    options: BTreeMap<String, String>,
}

impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.options.keys()).finish()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for StorageOptions {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut options = StorageOptions::default();
        for (key, value) in iter {
            options.insert(key, value);
        }
        options
    }
}

impl StorageOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` (lowercased) to `value`, replacing an earlier value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.options
            .insert(key.into().to_ascii_lowercase(), value.into());
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// True when no option is set.
    pub fn is_empty(&self) -> bool {
        self.options.is_empty()
    }

    /// The keys set, ascending.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.options.keys().map(String::as_str)
    }

    /// Fills what is not set yet from environment variables given by the
    /// caller (e.g. `std::env::vars()`): for the cloud `uri` names, every
    /// variable with its prefix (`AWS_`, `AZURE_`, `GOOGLE_`) whose lowercased
    /// name is one of that cloud's keys. Other variables, and every variable
    /// for a local or memory URI, are ignored.
    pub fn fill_from_environment(
        &mut self,
        uri: &str,
        variables: impl IntoIterator<Item = (String, String)>,
    ) {
        let Some(cloud) = scheme_of(uri).and_then(Cloud::of_scheme) else {
            return;
        };
        for (name, value) in variables {
            if !name.starts_with(cloud.environment_prefix()) {
                continue;
            }
            let key = name.to_ascii_lowercase();
            if cloud.knows(&key) && !self.options.contains_key(&key) {
                self.options.insert(key, value);
            }
        }
    }

    /// Refuses every key `cloud` does not know, naming the first one.
    fn check_keys(&self, cloud: Cloud, uri: &str) -> Result<()> {
        match self.options.keys().find(|key| !cloud.knows(key)) {
            Some(key) => Err(Error::invalid_input(format!(
                "unknown storage option {key:?} for {} (see object_store's configuration keys)",
                redacted_uri(uri)
            ))),
            None => Ok(()),
        }
    }
}

/// The scheme of `uri` when it has one (`memory`, `file`, `s3`, ...).
pub(crate) fn scheme_of(uri: &str) -> Option<&str> {
    let (scheme, _) = uri.split_once("://")?;
    let valid = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

/// `uri` without user info or query (either may hold a secret).
pub(crate) fn redacted_uri(uri: &str) -> String {
    match Url::parse(uri) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string()
        }
        Err(_) => uri.split(['?', '@']).next().unwrap_or_default().to_string(),
    }
}

/// How a cloud store behaves, for the layers above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CloudTraits {
    /// Every request is a network round trip (read in larger blocks, keep
    /// more requests in flight).
    pub(crate) remote: bool,
    /// `PutMode::Create` is atomic on this store (commits are safe).
    pub(crate) conditional_put: bool,
    /// The smallest multipart part the store accepts (all but the last).
    pub(crate) min_part_bytes: usize,
}

/// A cloud store rooted at the dataset prefix of `uri`, with how it behaves.
///
/// # Errors
/// InvalidInput for a malformed URI, an unknown option key or a value the
/// builder refuses (named by the builder's message, never quoting a secret).
pub(crate) fn open_cloud(
    cloud: Cloud,
    uri: &str,
    options: &StorageOptions,
) -> Result<(Arc<dyn ObjectStore>, CloudTraits)> {
    options.check_keys(cloud, uri)?;
    let url = Url::parse(uri)
        .map_err(|e| Error::invalid_input(format!("invalid URI {}: {e}", redacted_uri(uri))))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid_input(format!(
            "{} names no bucket or container",
            redacted_uri(uri)
        )));
    }
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: CLOUD_MAX_RETRIES,
        retry_timeout: CLOUD_RETRY_TIMEOUT,
    };
    let built: object_store::Result<Arc<dyn ObjectStore>> = match cloud {
        Cloud::S3 => {
            // As Lance does: copies that must not overwrite use a multipart copy.
            let mut builder = AmazonS3Builder::new()
                .with_url(uri)
                .with_retry(retry)
                .with_config(AmazonS3ConfigKey::CopyIfNotExists, "multipart");
            for (key, value) in &options.options {
                // Keys were checked above.
                if let Ok(key) = AmazonS3ConfigKey::from_str(key) {
                    builder = builder.with_config(key, value);
                }
            }
            builder.build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        Cloud::Azure => {
            let mut builder = MicrosoftAzureBuilder::new().with_url(uri).with_retry(retry);
            for (key, value) in &options.options {
                if let Ok(key) = AzureConfigKey::from_str(key) {
                    builder = builder.with_config(key, value);
                }
            }
            builder.build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        Cloud::Gcs => {
            let mut builder = GoogleCloudStorageBuilder::new()
                .with_url(uri)
                .with_retry(retry);
            for (key, value) in &options.options {
                if let Ok(key) = GoogleConfigKey::from_str(key) {
                    builder = builder.with_config(key, value);
                }
            }
            builder.build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
    };
    let store = built.map_err(|e| {
        Error::invalid_input(format!(
            "cannot open {}: {}",
            redacted_uri(uri),
            clean_text(&e.to_string())
        ))
    })?;
    let prefix = url.path().trim_matches('/');
    let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
        store
    } else {
        let prefix = Path::parse(prefix).map_err(|e| {
            Error::invalid_input(format!(
                "invalid dataset prefix in {}: {e}",
                redacted_uri(uri)
            ))
        })?;
        Arc::new(PrefixStore::new(store, prefix))
    };
    let conditional_put = match cloud {
        Cloud::S3 => options
            .get("aws_conditional_put")
            .or_else(|| options.get("conditional_put"))
            .is_none_or(|mode| !mode.eq_ignore_ascii_case("disabled")),
        Cloud::Azure | Cloud::Gcs => true,
    };
    let min_part_bytes = match cloud {
        Cloud::S3 | Cloud::Gcs => CLOUD_MIN_PART_BYTES,
        // Azure blocks have no minimum size.
        Cloud::Azure => 0,
    };
    Ok((
        store,
        CloudTraits {
            remote: true,
            conditional_put,
            min_part_bytes,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> StorageOptions {
        pairs.iter().copied().collect()
    }

    #[test]
    fn schemes_map_to_clouds() {
        assert_eq!(Cloud::of_scheme("s3"), Some(Cloud::S3));
        assert_eq!(Cloud::of_scheme("s3a"), Some(Cloud::S3));
        assert_eq!(Cloud::of_scheme("az"), Some(Cloud::Azure));
        assert_eq!(Cloud::of_scheme("abfss"), Some(Cloud::Azure));
        assert_eq!(Cloud::of_scheme("gs"), Some(Cloud::Gcs));
        assert_eq!(Cloud::of_scheme("file"), None);
        assert_eq!(Cloud::of_scheme("memory"), None);
    }

    #[test]
    fn unknown_keys_are_refused_by_name_without_values() {
        let opts = options(&[
            ("aws_region", "us-east-1"),
            ("aws_secret_acess_key", "hunter2"),
        ]);
        let err = opts.check_keys(Cloud::S3, "s3://b/p").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidInput { .. }), "{text}");
        assert!(text.contains("\"aws_secret_acess_key\""), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains('\n'), "{text}");
        // An S3 key means nothing to GCS.
        assert!(options(&[("aws_region", "x")])
            .check_keys(Cloud::Gcs, "gs://b")
            .is_err());
        assert!(options(&[("google_service_account", "/k.json")])
            .check_keys(Cloud::Gcs, "gs://b")
            .is_ok());
        assert!(
            options(&[("azure_storage_account_name", "a"), ("allow_http", "true")])
                .check_keys(Cloud::Azure, "az://c")
                .is_ok()
        );
    }

    #[test]
    fn keys_are_lowercased_and_debug_hides_values() {
        let opts = options(&[("AWS_Secret_Access_Key", "hunter2")]);
        assert_eq!(opts.get("aws_secret_access_key"), Some("hunter2"));
        let shown = format!("{opts:?}");
        assert_eq!(shown, "{\"aws_secret_access_key\"}");
    }

    #[test]
    fn the_environment_fills_only_missing_keys_of_the_uris_cloud() {
        let vars = [
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ENDPOINT", "http://127.0.0.1:9"),
            ("AWS_PROFILE_NOT_A_KEY", "x"),
            ("AZURE_STORAGE_ACCOUNT_NAME", "acct"),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let mut opts = options(&[("aws_region", "us-east-1")]);
        opts.fill_from_environment("s3://bucket/table", vars.clone());
        assert_eq!(opts.get("aws_region"), Some("us-east-1"));
        assert_eq!(opts.get("aws_endpoint"), Some("http://127.0.0.1:9"));
        assert_eq!(opts.keys().count(), 2);
        let mut local = StorageOptions::new();
        local.fill_from_environment("/tmp/table", vars.clone());
        assert!(local.is_empty());
        let mut azure = StorageOptions::new();
        azure.fill_from_environment("az://c/t", vars);
        assert_eq!(azure.get("azure_storage_account_name"), Some("acct"));
        assert_eq!(azure.keys().count(), 1);
    }

    #[test]
    fn builders_open_each_cloud_and_root_the_prefix() {
        let s3 = options(&[
            ("aws_endpoint", "http://127.0.0.1:9"),
            ("aws_region", "us-east-1"),
            ("allow_http", "true"),
            ("aws_access_key_id", "k"),
            ("aws_secret_access_key", "s"),
        ]);
        let (_, traits) = open_cloud(Cloud::S3, "s3://bucket/a/table", &s3).unwrap();
        assert!(traits.conditional_put);
        assert_eq!(traits.min_part_bytes, CLOUD_MIN_PART_BYTES);
        let mut disabled = s3.clone();
        disabled.insert("aws_conditional_put", "disabled");
        let (_, traits) = open_cloud(Cloud::S3, "s3://bucket/t", &disabled).unwrap();
        assert!(!traits.conditional_put);
        let azure = options(&[("azure_storage_use_emulator", "true")]);
        let (_, traits) = open_cloud(Cloud::Azure, "az://container/t", &azure).unwrap();
        assert_eq!(traits.min_part_bytes, 0);
        assert!(traits.remote);
        let gcs = options(&[("google_bucket", "b")]);
        assert!(open_cloud(Cloud::Gcs, "gs://bucket/t", &gcs).is_ok());
    }

    #[test]
    fn malformed_values_and_uris_are_one_line_invalid_input() {
        let bad = options(&[("allow_http", "perhaps"), ("aws_region", "us-east-1")]);
        let err = open_cloud(Cloud::S3, "s3://bucket/t", &bad).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        assert!(!err.to_string().contains('\n'), "{err}");
        let err = open_cloud(Cloud::S3, "s3:///t", &StorageOptions::new()).unwrap_err();
        assert!(err.to_string().contains("names no bucket"), "{err}");
    }

    #[test]
    fn redaction_drops_user_info_and_query() {
        assert_eq!(
            redacted_uri("s3://key:secret@bucket/t?token=x"),
            "s3://bucket/t"
        );
    }
}
