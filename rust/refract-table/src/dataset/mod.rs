//! `Dataset`: an immutable snapshot handle (store + session + one manifest)
//! and what reads it: versions, scan, take, and writing uncommitted
//! fragments. Committing lives above this module: the protocol in `commit`
//! (`Dataset::commit`, `Dataset::commit_transaction`) and the operations
//! built on it (append, delete, restore) in `mutation`; nothing here calls
//! them.

mod scan;
pub mod selection;
mod take;
mod versions;
pub(crate) mod write;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow_schema::SchemaRef;
use refract_core::{CacheKey, CacheNamespace, DeepSize, DeletionVector, Error, KeyParts, Result};
use refract_ledger::flags::ClientFeatures;

use crate::format::manifest::manifest_error;
use crate::format::{Fragment, Manifest};
use crate::io::deletion_file::read_deletion_file;
use crate::io::paths::{parse_manifest_name, v1_manifest_path, VERSIONS_DIR};
use crate::io::ReadOptions;
use crate::io::{manifest_path, DatasetStore, LanceFileReader, RelativePath, StorageOptions};
use crate::session::Session;

pub use scan::{Scanner, ROW_ADDRESS_COLUMN};
pub use selection::{coalesced_ranges, RowSelection, COALESCE_GAP_ROWS};
pub use versions::{VersionEntry, VersionInfo};
pub use write::WriteOptions;

/// How to open (or create) a dataset.
#[derive(Clone, Default)]
pub struct OpenOptions {
    /// Session to share caches with; a fresh default session when `None`.
    pub session: Option<Arc<Session>>,
    /// Version to check out; the latest when `None`.
    pub version: Option<u64>,
    /// Feature bits this client supports (tests use reduced sets).
    pub features: ClientFeatures,
    /// A pre-built store (tests: fault injection, counting); resolved from the URI when `None`.
    pub store: Option<DatasetStore>,
    /// Options of a cloud store resolved from the URI (keys and values as
    /// object_store configures them; see [`StorageOptions`]).
    pub storage_options: StorageOptions,
}

/// An immutable snapshot of one dataset version.
#[derive(Clone)]
pub struct Dataset {
    store: DatasetStore,
    session: Arc<Session>,
    manifest: Arc<Manifest>,
    /// Positions of the manifest's fragments by id, built on the first lookup
    /// and shared by clones: a worker executing many tasks on one handle
    /// looks each task's fragments up in constant time, not by scanning a
    /// list of (say) 200,000 fragments per task.
    fragment_positions: Arc<OnceLock<HashMap<u64, usize>>>,
    features: ClientFeatures,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("uri", &self.store.uri())
            .field("version", &self.manifest.version)
            .field("fragments", &self.manifest.fragments.len())
            .finish()
    }
}

/// A deletion vector as a cache value.
struct CachedDeletionVector(Arc<DeletionVector>);

impl DeepSize for CachedDeletionVector {
    fn deep_size_bytes(&self) -> usize {
        self.0.bitmap().serialized_size() + std::mem::size_of::<DeletionVector>()
    }
}

impl Dataset {
    /// Creates an empty dataset (version 1) at `uri`; fails if one exists.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> refract_core::Result<()> {
    /// use std::sync::Arc;
    ///
    /// use arrow_array::{Int64Array, RecordBatch};
    /// use arrow_schema::{DataType, Field, Schema};
    /// use refract_table::{Dataset, OpenOptions, WriteOptions};
    ///
    /// let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    /// let mut dataset =
    ///     Dataset::create("memory://create-example", schema.clone(), OpenOptions::default())
    ///         .await?;
    /// let ids = Arc::new(Int64Array::from_iter_values(0..10));
    /// let batch = RecordBatch::try_new(schema, vec![ids]).expect("ids match the schema");
    /// dataset.append(vec![batch], &WriteOptions::default()).await?;
    /// assert_eq!(dataset.version(), 2);
    /// assert_eq!(dataset.count_rows(Some("id >= 5")).await?, 5);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// InvalidInput for a bad URI, storage option or schema, when a dataset
    /// exists there, or for a store without conditional writes; External on
    /// store failures.
    pub async fn create(uri: &str, schema: SchemaRef, options: OpenOptions) -> Result<Dataset> {
        write::validate_table_schema(&schema)?;
        let store = match options.store {
            Some(store) => store,
            None => DatasetStore::open_with_options(uri, true, &options.storage_options).await?,
        };
        let session = options.session.unwrap_or_default();
        if !list_versions(&store).await?.is_empty() {
            return Err(Error::invalid_input(format!(
                "a dataset already exists at {uri}"
            )));
        }
        let manifest = Manifest::first(&schema, chrono::Utc::now().timestamp_millis())?;
        if !store
            .put_if_absent(&manifest_path(1), manifest.encode()?)
            .await?
        {
            return Err(Error::invalid_input(format!(
                "a dataset already exists at {uri}"
            )));
        }
        let dataset = Dataset {
            store,
            session,
            manifest: Arc::new(manifest),
            fragment_positions: Arc::default(),
            features: options.features,
        };
        Ok(dataset.publish_cached(dataset.manifest.clone()).await)
    }

    /// Opens the latest version at `uri` with default options.
    ///
    /// # Errors
    /// Those of [`Self::open_with`].
    pub async fn open(uri: &str) -> Result<Dataset> {
        Self::open_with(uri, OpenOptions::default()).await
    }

    /// Opens `uri`; refuses versions whose reader flags this client does not support.
    ///
    /// # Errors
    /// InvalidInput for a bad URI or storage option; NotFound for a missing local
    /// directory; otherwise those of [`Self::latest_version`] and
    /// [`Self::checkout_version`].
    pub async fn open_with(uri: &str, options: OpenOptions) -> Result<Dataset> {
        let requested = options.version;
        let probe = Self::probe(uri, options).await?;
        let version = match requested {
            Some(version) => version,
            None => probe.latest_version().await?,
        };
        probe.checkout_version(version).await
    }

    /// A handle on the store and session of `uri` holding a placeholder
    /// manifest: only for listing and loading real manifests, never returned
    /// to callers.
    async fn probe(uri: &str, options: OpenOptions) -> Result<Dataset> {
        let store = match options.store {
            Some(store) => store,
            None => DatasetStore::open_with_options(uri, false, &options.storage_options).await?,
        };
        Ok(Dataset {
            store,
            session: options.session.unwrap_or_default(),
            manifest: Arc::new(placeholder_manifest()),
            fragment_positions: Arc::default(),
            features: options.features,
        })
    }

    /// The URI the dataset was opened with.
    pub fn uri(&self) -> &str {
        self.store.uri()
    }

    /// The dataset's store.
    pub fn store(&self) -> &DatasetStore {
        &self.store
    }

    /// The session shared by handles of this dataset.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The client feature set this handle checks flags against.
    pub fn features(&self) -> ClientFeatures {
        self.features
    }

    /// The manifest of this version.
    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.manifest
    }

    /// This handle's version.
    pub fn version(&self) -> u64 {
        self.manifest.version
    }

    /// The table schema.
    pub fn schema(&self) -> SchemaRef {
        self.manifest.schema.clone()
    }

    /// Fragments in scan order.
    pub fn fragments(&self) -> &[Fragment] {
        &self.manifest.fragments
    }

    /// The position of fragment `id` in [`Self::fragments`]. The first call
    /// on a version indexes its fragments once (shared by clones); later
    /// calls take constant time.
    pub fn fragment_position(&self, id: u64) -> Option<usize> {
        self.fragment_positions
            .get_or_init(|| self.manifest.fragment_positions())
            .get(&id)
            .copied()
    }

    /// The highest committed version (listed, not cached).
    ///
    /// # Errors
    /// NotFound when no version is listed; External when listing fails;
    /// PathEscape for a listed key that is not a relative path.
    pub async fn latest_version(&self) -> Result<u64> {
        list_versions(&self.store)
            .await?
            .last()
            .copied()
            .ok_or_else(|| Error::not_found(format!("no dataset at {}", self.store.uri())))
    }

    /// A handle on the latest version.
    ///
    /// # Errors
    /// Those of [`Self::latest_version`] and [`Self::checkout_version`].
    pub async fn checkout_latest(&self) -> Result<Dataset> {
        let latest = self.latest_version().await?;
        self.checkout_version(latest).await
    }

    /// A handle on `version`; refuses unsupported reader flags.
    ///
    /// # Errors
    /// NotFound when the version's manifest is missing; Corrupt when it does not
    /// decode, records another version or names a path leaving the root;
    /// NotSupported for unsupported reader flags; External on store failures.
    pub async fn checkout_version(&self, version: u64) -> Result<Dataset> {
        let manifest = self.load_manifest(version).await?;
        self.features.check_read(manifest.reader_flags)?;
        Ok(self.with_manifest(manifest))
    }

    /// The deletion vector of `fragment` (empty without a deletion file); cached in the session.
    ///
    /// # Errors
    /// NotFound for a missing deletion file; Corrupt when it fails its checksum,
    /// does not decode or disagrees with the fragment; External on store failures.
    pub async fn deletion_vector(&self, fragment: &Fragment) -> Result<Arc<DeletionVector>> {
        let Some(deletion) = &fragment.deletion_file else {
            return Ok(Arc::new(DeletionVector::new()));
        };
        let key = CacheKey::new(
            CacheNamespace::DeletionVector,
            KeyParts::Path(format!("{}/{}", self.store.uri(), deletion.path)),
        );
        let store = self.store.clone();
        let deletion = deletion.clone();
        let physical_rows = fragment.physical_rows;
        let cached = self
            .session
            .cache()
            .get_or_try_insert(key, async move {
                let vector = read_deletion_file(&store, &deletion, physical_rows).await?;
                Ok(CachedDeletionVector(Arc::new(vector)))
            })
            .await?;
        Ok(cached.0.clone())
    }

    /// A reader over the fragment's data file.
    ///
    /// # Errors
    /// NotSupported for a fragment of several data files; NotFound for a missing
    /// file; Corrupt for one that does not decode, fails its size or checksum, or
    /// holds other than the recorded rows or columns; External on store failures.
    pub async fn fragment_reader(&self, fragment: &Fragment) -> Result<LanceFileReader> {
        let file = single_data_file(fragment)?;
        let reader = LanceFileReader::open(
            &self.store,
            &file.path,
            ReadOptions {
                known_size: Some(file.size_bytes),
                checksum: file.checksum.as_ref(),
                ..ReadOptions::default()
            },
        )
        .await?;
        self.check_data_file(fragment, &reader)?;
        Ok(reader)
    }

    /// Checks that an opened data file of `fragment` is what the manifest
    /// says: its rows and every column of the dataset's schema. A file whose
    /// checksum was not recorded (written before checksums) can be damaged
    /// in its own metadata; that is Corrupt, not a bad request.
    ///
    /// # Errors
    /// Corrupt for another row count or a missing or retyped column.
    pub(crate) fn check_data_file(
        &self,
        fragment: &Fragment,
        reader: &LanceFileReader,
    ) -> Result<()> {
        // The manifest's row count is a claim; the file decides what can be read.
        if reader.num_rows() != fragment.physical_rows {
            return Err(Error::corrupt(
                "manifest",
                format!(
                    "fragment {} records {} rows but {} holds {}",
                    fragment.id,
                    fragment.physical_rows,
                    reader.path(),
                    reader.num_rows()
                ),
            ));
        }
        let stored = reader.schema();
        for field in self.schema().fields() {
            let matches = stored
                .field_with_name(field.name())
                .is_ok_and(|found| found.data_type().equals_datatype(field.data_type()));
            if !matches {
                return Err(Error::corrupt(
                    format!("Lance file {}", reader.path()),
                    format!(
                        "the file does not store column {:?} as {} like the dataset's schema",
                        field.name(),
                        field.data_type()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Loads (through the session cache) and validates the manifest of `version`.
    pub(crate) async fn load_manifest(&self, version: u64) -> Result<Arc<Manifest>> {
        let key = manifest_key(&self.store, version);
        let store = self.store.clone();
        self.session
            .cache()
            .get_or_try_insert(key, async move {
                let bytes = match store.get(&manifest_path(version)).await {
                    // A table created with Lance's V1 naming.
                    Err(Error::NotFound { .. }) => store.get(&v1_manifest_path(version)).await?,
                    other => other?,
                };
                let manifest = Manifest::decode(&bytes)?;
                if manifest.version != version {
                    return Err(Error::corrupt(
                        "manifest",
                        format!("the file records version {}", manifest.version),
                    ));
                }
                Ok(manifest)
            })
            .await
            .map_err(|err| manifest_error(version, err))
    }

    /// The manifest of `version` with its transaction: from the manifest, or
    /// (versions of Lance writers before inline transactions) from its
    /// `_transactions/` file, fetched and verified against a recorded checksum.
    ///
    /// # Errors
    /// As [`Self::load_manifest`]; NotFound when the named transaction file
    /// is missing; Corrupt when it fails its checksum or does not decode.
    pub(crate) async fn load_manifest_with_transaction(
        &self,
        version: u64,
    ) -> Result<Arc<Manifest>> {
        let manifest = self.load_manifest(version).await?;
        if manifest.transaction.is_some() || manifest.lance.transaction_file.is_empty() {
            return Ok(manifest);
        }
        let path = crate::io::paths::transaction_file_path(&manifest.lance.transaction_file)?;
        let bytes = self.store.get(&path).await?;
        if let Some(checksum) = &manifest.lance.transaction_file_checksum {
            checksum.verify_whole(&path.to_string(), &bytes)?;
        }
        Ok(Arc::new(manifest.with_transaction_file(&bytes)?))
    }

    /// This handle's store and session on another manifest.
    pub(crate) fn with_manifest(&self, manifest: Arc<Manifest>) -> Dataset {
        Dataset {
            store: self.store.clone(),
            session: self.session.clone(),
            manifest,
            fragment_positions: Arc::default(),
            features: self.features,
        }
    }

    /// A just-published manifest: cache it and return a handle on it.
    pub(crate) async fn publish(&self, manifest: Manifest) -> Dataset {
        self.publish_cached(Arc::new(manifest)).await
    }

    async fn publish_cached(&self, manifest: Arc<Manifest>) -> Dataset {
        self.session
            .cache()
            .insert(
                manifest_key(&self.store, manifest.version),
                manifest.clone(),
            )
            .await;
        self.with_manifest(manifest)
    }
}

/// The data file of a single-file fragment (column groups are not written by this build).
pub(crate) fn single_data_file(fragment: &Fragment) -> Result<&crate::format::DataFile> {
    match fragment.files.as_slice() {
        [file] => Ok(file),
        files => Err(Error::not_supported(format!(
            "fragment {} has {} data files; this build reads single-file fragments only",
            fragment.id,
            files.len()
        ))),
    }
}

fn manifest_key(store: &DatasetStore, version: u64) -> CacheKey {
    CacheKey::new(
        CacheNamespace::Manifest,
        KeyParts::RootVersion {
            root: store.uri().to_string(),
            version,
        },
    )
}

/// Committed versions, ascending (names that are not manifest names are ignored).
pub(crate) async fn list_versions(store: &DatasetStore) -> Result<Vec<u64>> {
    let prefix = RelativePath::parse(VERSIONS_DIR)?;
    let mut versions: Vec<u64> = store
        .list(&prefix)
        .await?
        .iter()
        .filter_map(|object| parse_manifest_name(object.path.file_name()))
        .collect();
    versions.sort_unstable();
    Ok(versions)
}

fn placeholder_manifest() -> Manifest {
    Manifest {
        version: 0,
        schema: Arc::new(arrow_schema::Schema::empty()),
        fragments: Vec::new(),
        max_fragment_id: None,
        reader_flags: 0,
        writer_flags: 0,
        indices: Vec::new(),
        timestamp_ms: 0,
        transaction: None,
        lance: Default::default(),
    }
}
