//! Deletion files: a serialized roaring bitmap of deleted physical offsets, one
//! immutable file per (fragment, write) under `_deletions/`.

use refract_core::{DeletionVector, Result};

use super::paths::RelativePath;
use super::store::DatasetStore;

/// Where a deletion file was written and how many rows it deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionFileRef {
    /// `_deletions/<fragment_id>-<uuid>.bin`.
    pub path: RelativePath,
    /// Number of deleted offsets in the file.
    pub num_deleted_rows: u64,
}

/// Writes `dv` for `fragment_id` under a fresh unique name.
pub async fn write_deletion_file(
    store: &DatasetStore,
    fragment_id: u64,
    dv: &DeletionVector,
) -> Result<DeletionFileRef> {
    let _ = (store, fragment_id, dv);
    todo!()
}

/// Reads a deletion file of a fragment with `physical_rows` rows; Corrupt on bad bytes.
pub async fn read_deletion_file(
    store: &DatasetStore,
    path: &RelativePath,
    physical_rows: u64,
) -> Result<DeletionVector> {
    let _ = (store, path, physical_rows);
    todo!()
}
