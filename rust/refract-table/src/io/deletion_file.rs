//! Deletion files: a serialized roaring bitmap of deleted physical offsets, one
//! immutable file per (fragment, write) under `_deletions/`.
//!
//! Files are never overwritten: each write gets a fresh uuid name, so a reader
//! holding an old manifest keeps seeing the deletions it was committed with.

use refract_core::{DeletionVector, Error, Result};
use uuid::Uuid;

use super::paths::{deletion_file_path, RelativePath};
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
    let name = format!("{fragment_id}-{}.bin", Uuid::new_v4().hyphenated());
    let path = deletion_file_path(&name)?;
    let bytes = bytes::Bytes::from(dv.to_bytes());
    store.put(&path, bytes).await?;
    Ok(DeletionFileRef {
        path,
        num_deleted_rows: dv.len(),
    })
}

/// Reads the deletion file at `path` of a fragment with `physical_rows` rows.
/// Missing → NotFound; undecodable bytes or an offset `>= physical_rows` → Corrupt.
pub async fn read_deletion_file(
    store: &DatasetStore,
    path: &RelativePath,
    physical_rows: u64,
) -> Result<DeletionVector> {
    let bytes = store.get(path).await?;
    DeletionVector::from_bytes(&bytes, physical_rows).map_err(|e| match e {
        Error::Corrupt { what, message } => Error::corrupt(format!("{what} in {path}"), message),
        other => other,
    })
}
