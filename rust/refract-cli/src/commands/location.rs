//! Where a command's dataset lives: its URI and the storage options that
//! configure a cloud store there.

use refract_core::Result;
use refract_table::dataset::{Dataset, OpenOptions};
use refract_table::io::StorageOptions;

/// A dataset URI with its storage options.
#[derive(Debug, Clone)]
pub struct Location {
    /// The dataset URI as given.
    pub uri: String,
    /// `--storage-option` values, then the environment (`AWS_*`, `AZURE_*`,
    /// `GOOGLE_*`) for the keys they leave out.
    pub storage: StorageOptions,
}

impl Location {
    /// The dataset at `uri`, configured by `given` and then the environment.
    pub fn new(uri: &str, given: &StorageOptions) -> Self {
        let mut storage = given.clone();
        storage.fill_from_environment(uri, std::env::vars());
        crate::settings::apply_local_write_mode(uri, &mut storage);
        Self {
            uri: uri.to_string(),
            storage,
        }
    }

    /// The dataset at `uri` with no storage options (local paths, tests).
    pub fn plain(uri: &str) -> Self {
        Self {
            uri: uri.to_string(),
            storage: StorageOptions::new(),
        }
    }

    /// Options that open this location.
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            storage_options: self.storage.clone(),
            ..OpenOptions::default()
        }
    }

    /// Opens the latest version.
    ///
    /// # Errors
    /// As [`Dataset::open_with`].
    pub async fn open(&self) -> Result<Dataset> {
        Dataset::open_with(&self.uri, self.open_options()).await
    }

    /// Opens the version `selected` names, or the latest when `None` (time
    /// travel for read-only commands).
    ///
    /// # Errors
    /// As [`Self::open`]; NotFound naming the version or tag when it does
    /// not exist.
    pub async fn open_at(&self, selected: Option<&VersionSelector>) -> Result<Dataset> {
        match selected {
            None => self.open().await,
            // Straight to that manifest: a damaged latest one does not block
            // reading an older version.
            Some(VersionSelector::Number(version)) => {
                let options = OpenOptions {
                    version: Some(*version),
                    ..self.open_options()
                };
                Dataset::open_with(&self.uri, options).await
            }
            Some(VersionSelector::Tag(name)) => self.open().await?.checkout_tag(name).await,
        }
    }
}

/// A committed version named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSelector {
    /// `--version N`.
    Number(u64),
    /// `--tag NAME`: the version the tag names.
    Tag(String),
}

impl std::fmt::Display for VersionSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionSelector::Number(version) => write!(f, "version {version}"),
            VersionSelector::Tag(name) => write!(f, "tag '{name}'"),
        }
    }
}
