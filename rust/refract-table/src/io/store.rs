//! `DatasetStore`: the object store rooted at one dataset.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::ObjectStore;
use refract_core::Result;

use super::counting::RequestStats;
use super::paths::RelativePath;

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
    object_store: Arc<dyn ObjectStore>,
    lance_store: Arc<lance_io::object_store::ObjectStore>,
}

impl std::fmt::Debug for DatasetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetStore")
            .field("uri", &self.uri)
            .finish()
    }
}

impl DatasetStore {
    /// Resolves a URI: a plain local path (default; created if missing when
    /// `create` is true), `file:///abs/path`, or `memory://name` (a process-wide
    /// registry of in-memory stores keyed by name).
    pub async fn open(uri: &str, create: bool) -> Result<DatasetStore> {
        let _ = (uri, create);
        todo!()
    }

    /// Wraps an arbitrary object store (rooted at the dataset root) as a dataset root.
    pub fn from_object_store(store: Arc<dyn ObjectStore>, uri: &str) -> DatasetStore {
        let _ = (store, uri);
        todo!()
    }

    /// The URI this store was opened with.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The rooted object store; paths are relative to the dataset root.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.object_store
    }

    /// The Lance view of [`Self::object_store`], for Lance file readers and writers.
    pub fn lance_store(&self) -> &Arc<lance_io::object_store::ObjectStore> {
        &self.lance_store
    }

    /// A snapshot of the request counter.
    pub fn stats(&self) -> RequestStats {
        todo!()
    }

    /// Zeroes the request counter.
    pub fn reset_stats(&self) {
        todo!()
    }

    /// Reads a whole object; NotFound when missing.
    pub async fn get(&self, path: &RelativePath) -> Result<Bytes> {
        let _ = path;
        todo!()
    }

    /// Reads a byte range of an object.
    pub async fn get_range(&self, path: &RelativePath, range: Range<u64>) -> Result<Bytes> {
        let _ = (path, range);
        todo!()
    }

    /// The size of an object.
    pub async fn head(&self, path: &RelativePath) -> Result<u64> {
        let _ = path;
        todo!()
    }

    /// Writes (overwrites) an object.
    pub async fn put(&self, path: &RelativePath, bytes: Bytes) -> Result<()> {
        let _ = (path, bytes);
        todo!()
    }

    /// Writes an object only if absent; `false` if it already existed. The commit primitive.
    pub async fn put_if_absent(&self, path: &RelativePath, bytes: Bytes) -> Result<bool> {
        let _ = (path, bytes);
        todo!()
    }

    /// Lists every object under `prefix` (recursively), sorted by path.
    pub async fn list(&self, prefix: &RelativePath) -> Result<Vec<ObjectInfo>> {
        let _ = prefix;
        todo!()
    }

    /// Deletes an object; a missing object is not an error.
    pub async fn delete(&self, path: &RelativePath) -> Result<()> {
        let _ = path;
        todo!()
    }
}
