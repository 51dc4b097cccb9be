//! `DatasetStore`: the object store rooted at one dataset.
//!
//! Every request for a dataset — including the ones Lance makes while reading and
//! writing data files — goes through one [`CountingStore`] wrapped around the
//! rooted store, so request counting and fault injection see all of them. Lance
//! is handed the same store under a non-`file` URL scheme: with `file`, lance-io
//! bypasses custom stores and does direct local I/O.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use lance_core::cache::LanceCache;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use refract_core::{Error, Result};
use url::Url;

use super::cloud::{open_cloud, redacted_uri, scheme_of, Cloud, CloudTraits, StorageOptions};
use super::counting::{CountingStore, RequestStats};
use super::direct_local::{DirectLocalStore, DIRECT_WRITES_OPTION};
use super::object_stream::byte_stream;
use super::paths::RelativePath;
use super::recorded_files::{verify_checksum_stream, verify_stream, FileJournal, RecordedFile};
use super::verifying_store::{verification_failure, VerifyingStore};
use futures::stream::BoxStream;
use futures::StreamExt;
use refract_core::checksum::{ChecksumBuilder, FileChecksum};

/// Block size given to lance-io: the local-disk default, so sparse takes read
/// small ranges instead of coalescing into 64 KiB blocks.
const LANCE_BLOCK_SIZE: usize = 4096;
/// Concurrent requests lance-io may issue per file.
const LANCE_IO_PARALLELISM: usize = 16;
/// Block size given to lance-io on cloud stores: ranged reads closer than this
/// coalesce, since each request is a round trip.
const CLOUD_BLOCK_SIZE: usize = 64 << 10;
/// Concurrent requests lance-io may issue per file on cloud stores, where
/// each one waits a round trip.
const CLOUD_IO_PARALLELISM: usize = 32;
/// Retries lance-io makes on a failed download.
const LANCE_DOWNLOAD_RETRIES: usize = 3;
/// Bytes of Lance file metadata (footers, page chunk tables) cached per store.
/// Entries are keyed by path, which is safe because data paths are never reused.
const LANCE_METADATA_CACHE_BYTES: usize = 64 << 20;
/// The URL under which lance-io sees our store (any scheme but `file`).
const LANCE_STORE_URL: &str = "refract:///";

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Path relative to the dataset root.
    pub path: RelativePath,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time.
    pub last_modified: DateTime<Utc>,
}

/// A dataset root on an object store. Every byte Refract reads or writes for a
/// dataset goes through this.
#[derive(Clone)]
pub struct DatasetStore {
    uri: String,
    counting: Arc<CountingStore<Arc<dyn ObjectStore>>>,
    object_store: Arc<dyn ObjectStore>,
    lance_store: Arc<lance_io::object_store::ObjectStore>,
    lance_cache: Arc<LanceCache>,
    traits: CloudTraits,
    /// Where files written through this view are recorded ([`Self::recording`]).
    journal: Option<Arc<FileJournal>>,
    /// Files whose reads this view verifies ([`Self::verifying`]).
    verified: Arc<HashMap<RelativePath, RecordedFile>>,
}

/// How a store on local disk or in memory behaves.
const LOCAL_TRAITS: CloudTraits = CloudTraits {
    remote: false,
    conditional_put: true,
    min_part_bytes: 0,
};

impl std::fmt::Debug for DatasetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetStore")
            .field("uri", &self.uri)
            .finish()
    }
}

/// The Lance view of `store`, tuned for local or remote latency.
fn lance_view(
    store: Arc<dyn ObjectStore>,
    traits: CloudTraits,
) -> Arc<lance_io::object_store::ObjectStore> {
    let cloud = traits.remote;
    // Invariant: LANCE_STORE_URL is a constant, syntactically valid URL.
    let url = Url::parse(LANCE_STORE_URL).expect("LANCE_STORE_URL is a valid URL");
    Arc::new(lance_io::object_store::ObjectStore::new(
        store,
        url,
        Some(if cloud {
            CLOUD_BLOCK_SIZE
        } else {
            LANCE_BLOCK_SIZE
        }),
        None,
        false,
        false,
        if cloud {
            CLOUD_IO_PARALLELISM
        } else {
            LANCE_IO_PARALLELISM
        },
        LANCE_DOWNLOAD_RETRIES,
        None,
    ))
}

/// In-memory stores by name, so two opens of `memory://x` share data.
static MEMORY_STORES: LazyLock<Mutex<HashMap<String, Arc<InMemory>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn memory_store(name: &str) -> Arc<InMemory> {
    // The registry only ever gains entries; a poisoned lock still holds valid stores.
    let mut stores = MEMORY_STORES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    stores
        .entry(name.to_string())
        .or_insert_with(|| Arc::new(InMemory::new()))
        .clone()
}

impl DatasetStore {
    /// Resolves a URI: a plain local path (default; relative paths are resolved
    /// against the current directory; the directory is created if missing when
    /// `create` is true), `file:///abs/path`, or `memory://name` (a process-wide
    /// registry of in-memory stores keyed by name, so two opens of `memory://x`
    /// see the same data). Other schemes are InvalidInput naming the scheme.
    ///
    /// [`Self::uri`] of a local store is its canonical absolute path.
    ///
    /// # Errors
    /// InvalidInput for an unsupported scheme or a malformed URI; NotFound for
    /// a missing local directory when `create` is false.
    pub async fn open(uri: &str, create: bool) -> Result<DatasetStore> {
        Self::open_with_options(uri, create, &StorageOptions::new()).await
    }

    /// Like [`Self::open`], also opening cloud URIs: `s3://bucket/prefix`
    /// (and `s3a://`), `az://container/prefix` (and `azure://`, `abfs[s]://`)
    /// and `gs://bucket/prefix`, configured by `options` (see
    /// [`StorageOptions`]). Nothing is requested from the store here.
    ///
    /// # Errors
    /// As [`Self::open`]; InvalidInput for an unknown option key, a value the
    /// store's builder refuses, or any option given for a local or memory URI.
    pub async fn open_with_options(
        uri: &str,
        create: bool,
        options: &StorageOptions,
    ) -> Result<DatasetStore> {
        if let Some(cloud) = scheme_of(uri).and_then(Cloud::of_scheme) {
            let (store, traits) = open_cloud(cloud, uri, options)?;
            return Ok(DatasetStore::around(store, &redacted_uri(uri), traits));
        }
        let direct_writes = match options.get(DIRECT_WRITES_OPTION) {
            None => true,
            Some(value) => match value.trim().to_ascii_lowercase().as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(Error::invalid_input(format!(
                        "storage option {DIRECT_WRITES_OPTION:?} takes true or false"
                    )))
                }
            },
        };
        if let Some(key) = options.keys().find(|key| *key != DIRECT_WRITES_OPTION) {
            return Err(Error::invalid_input(format!(
                "storage option {key:?} does not apply to {uri} (options configure cloud stores; local ones take only {DIRECT_WRITES_OPTION:?})"
            )));
        }
        match scheme_of(uri) {
            Some("memory") => {
                let name = uri.strip_prefix("memory://").unwrap_or_default();
                let store: Arc<dyn ObjectStore> = memory_store(name);
                Ok(DatasetStore::from_object_store(store, uri))
            }
            Some("file") => {
                let url = Url::parse(uri)
                    .map_err(|e| Error::invalid_input(format!("invalid file URI {uri:?}: {e}")))?;
                let path = url.to_file_path().map_err(|()| {
                    Error::invalid_input(format!("file URI {uri:?} is not an absolute local path"))
                })?;
                Self::open_local(&path, create, direct_writes).await
            }
            Some(other) => Err(Error::invalid_input(format!(
                "unsupported URI scheme {other:?} in {:?} (supported: local paths, file://, memory://, s3://, az://, abfs[s]://, gs://)",
                redacted_uri(uri)
            ))),
            None => {
                if uri.is_empty() {
                    return Err(Error::invalid_input("dataset URI is empty"));
                }
                let path = FsPath::new(uri);
                let absolute = if path.is_absolute() {
                    path.to_path_buf()
                } else {
                    std::env::current_dir()
                        .map_err(|e| Error::external("resolving the current directory", e))?
                        .join(path)
                };
                Self::open_local(&absolute, create, direct_writes).await
            }
        }
    }

    async fn open_local(path: &FsPath, create: bool, direct_writes: bool) -> Result<DatasetStore> {
        if create {
            tokio::fs::create_dir_all(path).await.map_err(|e| {
                Error::external(format!("creating dataset directory {}", path.display()), e)
            })?;
        }
        let canonical: PathBuf = match tokio::fs::canonicalize(path).await {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::not_found(format!(
                    "dataset directory {} does not exist",
                    path.display()
                )))
            }
            Err(e) => {
                return Err(Error::external(
                    format!("resolving dataset directory {}", path.display()),
                    e,
                ))
            }
        };
        if !canonical.is_dir() {
            return Err(Error::invalid_input(format!(
                "dataset root {} is not a directory",
                canonical.display()
            )));
        }
        // Large writes bypass the page cache; listings and deletes never
        // follow a link (see `direct_local`).
        let local =
            DirectLocalStore::with_direct_writes(&canonical, direct_writes).map_err(|e| {
                Error::external(format!("opening local store at {}", canonical.display()), e)
            })?;
        let store: Arc<dyn ObjectStore> = Arc::new(local);
        let uri = canonical.display().to_string();
        Ok(DatasetStore::from_object_store(store, &uri))
    }

    /// Wraps an arbitrary object store, rooted at the dataset root, as a dataset
    /// root (tests: fault injection, counting). Requests are counted from here on.
    pub fn from_object_store(store: Arc<dyn ObjectStore>, uri: &str) -> DatasetStore {
        Self::around(store, uri, LOCAL_TRAITS)
    }

    /// Like [`Self::from_object_store`] for a store where every request is a
    /// network round trip (a custom cloud client, or a throttled store that
    /// simulates one): reads use larger blocks and keep more requests in
    /// flight, and uploads use parts of at least 5 MiB.
    pub fn from_remote_object_store(store: Arc<dyn ObjectStore>, uri: &str) -> DatasetStore {
        let traits = CloudTraits {
            remote: true,
            conditional_put: true,
            min_part_bytes: super::cloud::CLOUD_MIN_PART_BYTES,
        };
        Self::around(store, uri, traits)
    }

    fn around(store: Arc<dyn ObjectStore>, uri: &str, traits: CloudTraits) -> DatasetStore {
        let counting = Arc::new(CountingStore::new(store));
        let object_store: Arc<dyn ObjectStore> = counting.clone();
        let lance_store = lance_view(object_store.clone(), traits);
        DatasetStore {
            uri: uri.to_string(),
            counting,
            object_store,
            lance_store,
            lance_cache: Arc::new(LanceCache::with_capacity(LANCE_METADATA_CACHE_BYTES)),
            traits,
            journal: None,
            verified: Arc::default(),
        }
    }

    /// A view of this store that records every file written through it
    /// (Lance files, puts, copies) in `journal`, with its size and checksum.
    pub fn recording(&self, journal: Arc<FileJournal>) -> DatasetStore {
        DatasetStore {
            journal: Some(journal),
            ..self.clone()
        }
    }

    /// A view of this store whose reads of `files` are verified against
    /// their checksums: every read through [`Self::object_store`],
    /// [`Self::lance_store`], [`Self::get`] or [`Self::get_range`] checks the
    /// blocks it touches; [`Self::head`] of them needs no request; and
    /// [`Self::copy`] from them verifies the whole source first.
    pub fn verifying(&self, files: &[RecordedFile]) -> DatasetStore {
        if files.is_empty() {
            return self.clone();
        }
        let mut verifying = VerifyingStore::new(self.object_store.clone());
        let mut known = (*self.verified).clone();
        for file in files {
            verifying.verify_file(
                file.path.to_object_path(),
                file.path.to_string(),
                file.size_bytes,
                file.checksum.clone(),
            );
            known.insert(file.path.clone(), file.clone());
        }
        let object_store: Arc<dyn ObjectStore> = Arc::new(verifying);
        DatasetStore {
            lance_store: lance_view(object_store.clone(), self.traits),
            object_store,
            verified: Arc::new(known),
            ..self.clone()
        }
    }

    /// Notes a file written through this view (see [`Self::recording`]).
    pub(crate) fn record_written(
        &self,
        path: &RelativePath,
        size_bytes: u64,
        checksum: FileChecksum,
    ) {
        if let Some(journal) = &self.journal {
            journal.record(RecordedFile {
                path: path.clone(),
                size_bytes,
                checksum,
            });
        }
    }

    /// True when written files are recorded (see [`Self::recording`]).
    pub(crate) fn is_recording(&self) -> bool {
        self.journal.is_some()
    }

    /// True when every request is a network round trip (cloud stores, and
    /// stores opened with [`Self::from_remote_object_store`]).
    pub fn is_remote(&self) -> bool {
        self.traits.remote
    }

    /// The smallest multipart part the store accepts (all but the last); 0
    /// when any size goes.
    pub(crate) fn min_part_bytes(&self) -> usize {
        self.traits.min_part_bytes
    }

    /// The URI this store was opened with (canonical absolute path for local stores).
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The rooted, counting object store; paths are relative to the dataset root.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.object_store
    }

    /// The Lance view of [`Self::object_store`], for Lance file readers and writers.
    pub fn lance_store(&self) -> &Arc<lance_io::object_store::ObjectStore> {
        &self.lance_store
    }

    /// The Lance metadata cache shared by readers of this store.
    pub(crate) fn lance_cache(&self) -> &LanceCache {
        &self.lance_cache
    }

    /// A snapshot of the request counter.
    pub fn stats(&self) -> RequestStats {
        self.counting.stats()
    }

    /// Zeroes the request counter.
    pub fn reset_stats(&self) {
        self.counting.reset()
    }

    /// The most multipart parts uploading at once since the last
    /// [`Self::reset_stats`].
    pub fn max_parts_in_flight(&self) -> u64 {
        self.counting.max_parts_in_flight()
    }

    /// Round trips since the last [`Self::reset_stats`]: the longest chain
    /// of requests each started after the one before it returned (see
    /// [`CountingStore::round_trips`]).
    pub fn round_trips(&self) -> u64 {
        self.counting.round_trips()
    }

    /// Reads a whole object.
    ///
    /// # Errors
    /// NotFound when missing; Corrupt when a file this view verifies does not
    /// match its checksum; External for other store failures.
    pub async fn get(&self, path: &RelativePath) -> Result<Bytes> {
        let result = self
            .object_store
            .get(&path.to_object_path())
            .await
            .map_err(|e| store_error("reading", path, e))?;
        result
            .bytes()
            .await
            .map_err(|e| store_error("reading", path, e))
    }

    /// Reads a byte range of an object.
    ///
    /// # Errors
    /// InvalidInput for a reversed range; NotFound when missing; Corrupt when a
    /// file this view verifies does not match its checksum; External otherwise.
    pub async fn get_range(&self, path: &RelativePath, range: Range<u64>) -> Result<Bytes> {
        if range.start > range.end {
            return Err(Error::invalid_input(format!(
                "byte range {range:?} of {path} is reversed"
            )));
        }
        self.object_store
            .get_range(&path.to_object_path(), range)
            .await
            .map_err(|e| store_error("reading a range of", path, e))
    }

    /// The size of an object.
    ///
    /// # Errors
    /// NotFound when missing; External for other store failures.
    pub async fn head(&self, path: &RelativePath) -> Result<u64> {
        if let Some(known) = self.verified.get(path) {
            return Ok(known.size_bytes);
        }
        let meta = self
            .object_store
            .head(&path.to_object_path())
            .await
            .map_err(|e| store_error("reading the size of", path, e))?;
        Ok(meta.size)
    }

    /// Writes (overwrites) an object atomically.
    ///
    /// # Errors
    /// External when the store refuses or fails the write.
    pub async fn put(&self, path: &RelativePath, bytes: Bytes) -> Result<()> {
        let checksum = self.is_recording().then(|| FileChecksum::of(&bytes));
        let size = bytes.len() as u64;
        self.object_store
            .put(&path.to_object_path(), PutPayload::from_bytes(bytes))
            .await
            .map_err(|e| store_error("writing", path, e))?;
        if let Some(checksum) = checksum {
            self.record_written(path, size, checksum);
        }
        Ok(())
    }

    /// Writes an object only if absent; `false` if it already existed. The commit
    /// primitive: atomic on every supported store, including local disk.
    ///
    /// # Errors
    /// InvalidInput when the store was configured without conditional writes
    /// (`aws_conditional_put=disabled`): a commit there could overwrite a
    /// concurrent one, so none is made.
    pub async fn put_if_absent(&self, path: &RelativePath, bytes: Bytes) -> Result<bool> {
        if !self.traits.conditional_put {
            return Err(Error::invalid_input(format!(
                "refusing to write {path} at {}: the store is configured without conditional writes (aws_conditional_put=disabled), so a concurrent commit could be lost",
                self.uri
            )));
        }
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let checksum = self.is_recording().then(|| FileChecksum::of(&bytes));
        let size = bytes.len() as u64;
        match self
            .object_store
            .put_opts(
                &path.to_object_path(),
                PutPayload::from_bytes(bytes),
                options,
            )
            .await
        {
            Ok(_) => {
                if let Some(checksum) = checksum {
                    self.record_written(path, size, checksum);
                }
                Ok(true)
            }
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(store_error("writing (if absent)", path, e)),
        }
    }

    /// Lists every object under `prefix` (recursively), sorted by path.
    ///
    /// # Errors
    /// PathEscape for a listed key that is not a valid relative path; External
    /// when listing fails.
    pub async fn list(&self, prefix: &RelativePath) -> Result<Vec<ObjectInfo>> {
        let metas: Vec<object_store::ObjectMeta> = self
            .object_store
            .list(Some(&prefix.to_object_path()))
            .try_collect()
            .await
            .map_err(|e| store_error("listing", prefix, e))?;
        let mut infos = metas
            .into_iter()
            .map(|meta| {
                Ok(ObjectInfo {
                    path: RelativePath::parse(meta.location.as_ref())?,
                    size: meta.size,
                    last_modified: meta.last_modified,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        infos.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(infos)
    }

    /// Copies an object inside the store: a hard link on the local file
    /// system, a server-side copy on object stores. Overwrites `to`;
    /// NotFound when `from` is missing. A source this view verifies
    /// ([`Self::verifying`]) is read and checked first, so damage is never
    /// carried into a new file; a recording view ([`Self::recording`]) reads
    /// an unverified source once to record the copy's checksum.
    ///
    /// # Errors
    /// Corrupt when a verified source does not match its checksum; NotFound
    /// and External as for reads and writes.
    pub async fn copy(&self, from: &RelativePath, to: &RelativePath) -> Result<()> {
        let source = match self.verified.get(from) {
            Some(known) => {
                verify_stream(known, self.stream_unverified(from).await?).await?;
                Some(known.clone())
            }
            None if self.is_recording() => Some(self.checksum_of(from).await?),
            None => None,
        };
        self.object_store
            .copy(&from.to_object_path(), &to.to_object_path())
            .await
            .map_err(|e| store_error("copying", from, e))?;
        if let Some(source) = source {
            self.record_written(to, source.size_bytes, source.checksum);
        }
        Ok(())
    }

    /// The bytes of `path` as they come from the store, in pieces, without
    /// verification (the caller checks them).
    async fn stream_unverified(
        &self,
        path: &RelativePath,
    ) -> Result<BoxStream<'static, Result<Bytes>>> {
        let result = self
            .counting
            .get(&path.to_object_path())
            .await
            .map_err(|e| store_error("reading", path, e))?;
        Ok(byte_stream(result, path))
    }

    /// Reads `path` once, in pieces, and returns its size and checksum.
    ///
    /// # Errors
    /// NotFound when missing; External on store failures.
    pub async fn checksum_of(&self, path: &RelativePath) -> Result<RecordedFile> {
        let mut pieces = self.stream_unverified(path).await?;
        let mut builder = ChecksumBuilder::new();
        while let Some(piece) = pieces.next().await {
            builder.update(&piece?);
        }
        Ok(RecordedFile {
            path: path.clone(),
            size_bytes: builder.len(),
            checksum: builder.finish(),
        })
    }

    /// Reads the whole of `file` in pieces and checks it against its
    /// recorded size and checksum, holding one piece in memory at a time.
    ///
    /// # Errors
    /// Corrupt naming the file and block on a mismatch; NotFound when missing.
    pub async fn verify_file(&self, file: &RecordedFile) -> Result<()> {
        verify_stream(file, self.stream_unverified(&file.path).await?).await
    }

    /// Like [`Self::verify_file`] for a file whose metadata records a
    /// checksum but no size (deletion files); returns the size read.
    ///
    /// # Errors
    /// As [`Self::verify_file`].
    pub async fn verify_checksum(
        &self,
        path: &RelativePath,
        checksum: &FileChecksum,
    ) -> Result<u64> {
        verify_checksum_stream(path, None, checksum, self.stream_unverified(path).await?).await
    }

    /// Deletes an object; a missing object is not an error.
    ///
    /// # Errors
    /// External when the store fails the delete.
    pub async fn delete(&self, path: &RelativePath) -> Result<()> {
        match self.object_store.delete(&path.to_object_path()).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error("deleting", path, e)),
        }
    }
}

/// Maps an object-store error: a failed verification is its Corrupt error,
/// NotFound stays NotFound, everything else is External.
pub(crate) fn store_error(action: &str, path: &RelativePath, err: object_store::Error) -> Error {
    if let Some(damage) = verification_failure(&err) {
        return damage;
    }
    match err {
        object_store::Error::NotFound { .. } => Error::not_found(format!("{path} does not exist")),
        other => Error::external(format!("{action} {path}"), other),
    }
}

#[cfg(test)]
mod copy_tests {
    use super::*;

    #[tokio::test]
    async fn a_local_store_takes_only_the_direct_writes_option() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().to_str().unwrap();
        for value in ["false", "0", "TRUE", "1"] {
            let options: StorageOptions = [(DIRECT_WRITES_OPTION, value)].into_iter().collect();
            DatasetStore::open_with_options(uri, false, &options)
                .await
                .unwrap();
        }
        let bad: StorageOptions = [(DIRECT_WRITES_OPTION, "sometimes")].into_iter().collect();
        let err = DatasetStore::open_with_options(uri, false, &bad)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: storage option \"refract_direct_writes\" takes true or false"
        );
        let foreign: StorageOptions = [("aws_region", "x")].into_iter().collect();
        let err = DatasetStore::open_with_options(uri, false, &foreign)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput { message } if message.contains("\"aws_region\" does not apply")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn copy_duplicates_an_object_and_reports_a_missing_source() {
        let store = DatasetStore::open(&format!("memory://copy-{}", uuid::Uuid::new_v4()), true)
            .await
            .unwrap();
        let from = RelativePath::parse("_indices/a/values.lance").unwrap();
        let to = RelativePath::parse("_indices/b/values.lance").unwrap();
        store
            .put(&from, Bytes::from_static(b"sorted values"))
            .await
            .unwrap();
        store.copy(&from, &to).await.unwrap();
        assert_eq!(
            store.get(&to).await.unwrap(),
            Bytes::from_static(b"sorted values")
        );
        assert_eq!(
            store.get(&from).await.unwrap(),
            Bytes::from_static(b"sorted values")
        );
        let missing = RelativePath::parse("_indices/c/values.lance").unwrap();
        let err = store.copy(&missing, &to).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
    }

    async fn store_with(path: &RelativePath, bytes: &'static [u8]) -> DatasetStore {
        let store = DatasetStore::open(&format!("memory://views-{}", uuid::Uuid::new_v4()), true)
            .await
            .unwrap();
        store.put(path, Bytes::from_static(bytes)).await.unwrap();
        store
    }

    #[tokio::test]
    async fn a_verifying_view_knows_sizes_and_never_copies_a_damaged_file() {
        let from = RelativePath::parse("_indices/a/values.lance").unwrap();
        let to = RelativePath::parse("_indices/b/values.lance").unwrap();
        let store = store_with(&from, b"sorted values").await;
        let recorded = store.checksum_of(&from).await.unwrap();
        let view = store.verifying(std::slice::from_ref(&recorded));
        store.reset_stats();
        assert_eq!(view.head(&from).await.unwrap(), 13);
        assert_eq!(store.stats().heads, 0, "a recorded size needs no HEAD");
        // Damaged after recording: the copy reads and refuses it.
        store
            .put(&from, Bytes::from_static(b"sorted valueZ"))
            .await
            .unwrap();
        let err = view.copy(&from, &to).await.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { what, message }
                if what == from.as_str() && message.contains("checksum mismatch in block 0")),
            "{err}"
        );
        assert!(matches!(store.head(&to).await, Err(Error::NotFound { .. })));
    }

    #[tokio::test]
    async fn a_recording_view_records_puts_and_copies_with_their_checksums() {
        let from = RelativePath::parse("_indices/a/values.lance").unwrap();
        let to = RelativePath::parse("_indices/b/values.lance").unwrap();
        let extra = RelativePath::parse("_indices/b/lookup.lance").unwrap();
        let store = store_with(&from, b"sorted values").await;
        let journal = Arc::new(FileJournal::new());
        let view = store.recording(journal.clone());
        view.copy(&from, &to).await.unwrap();
        view.put(&extra, Bytes::from_static(b"lookup"))
            .await
            .unwrap();
        let written = journal.take_under(&RelativePath::parse("_indices/b").unwrap());
        let expected = vec![
            RecordedFile {
                path: extra.clone(),
                size_bytes: 6,
                checksum: FileChecksum::of(b"lookup"),
            },
            RecordedFile {
                path: to.clone(),
                size_bytes: 13,
                checksum: FileChecksum::of(b"sorted values"),
            },
        ];
        assert_eq!(written, expected);
        // The plain store records nothing.
        store
            .put(&extra, Bytes::from_static(b"again"))
            .await
            .unwrap();
        assert!(journal
            .take_under(&RelativePath::parse("_indices/b").unwrap())
            .is_empty());
    }
}
