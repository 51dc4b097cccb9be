//! Deletion files: a serialized roaring bitmap of deleted physical offsets, one
//! immutable file per (fragment, write) under `_deletions/`.
//!
//! Files are never overwritten: each write gets a fresh uuid name, so a reader
//! holding an old manifest keeps seeing the deletions it was committed with.

use refract_core::checksum::FileChecksum;
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
    /// Block checksums of the file (absent in files written before checksums).
    pub checksum: Option<FileChecksum>,
}

/// Writes `dv` for `fragment_id` under a fresh unique name.
///
/// # Errors
/// External when the store fails the write.
pub async fn write_deletion_file(
    store: &DatasetStore,
    fragment_id: u64,
    dv: &DeletionVector,
) -> Result<DeletionFileRef> {
    let name = format!("{fragment_id}-{}.bin", Uuid::new_v4().hyphenated());
    let path = deletion_file_path(&name)?;
    let bytes = bytes::Bytes::from(dv.to_bytes());
    let checksum = FileChecksum::of(&bytes);
    store.put(&path, bytes).await?;
    Ok(DeletionFileRef {
        path,
        num_deleted_rows: dv.len(),
        checksum: Some(checksum),
    })
}

/// Reads the deletion file `file` of a fragment with `physical_rows` rows.
///
/// # Errors
/// NotFound when missing; Corrupt naming the file when its bytes fail their
/// checksum, do not decode, hold an offset `>= physical_rows` or hold another
/// number of offsets than `file` records.
pub async fn read_deletion_file(
    store: &DatasetStore,
    file: &DeletionFileRef,
    physical_rows: u64,
) -> Result<DeletionVector> {
    let path = &file.path;
    let bytes = store.get(path).await?;
    if let Some(checksum) = &file.checksum {
        checksum.verify_whole(&format!("deletion file {path}"), &bytes)?;
    }
    let vector = DeletionVector::from_bytes(&bytes, physical_rows).map_err(|e| match e {
        Error::Corrupt { what, message } => Error::corrupt(format!("{what} in {path}"), message),
        other => other,
    })?;
    if vector.len() != file.num_deleted_rows {
        return Err(Error::corrupt(
            format!("deletion file {path}"),
            format!(
                "it holds {} offsets but the manifest records {}",
                vector.len(),
                file.num_deleted_rows
            ),
        ));
    }
    Ok(vector)
}
