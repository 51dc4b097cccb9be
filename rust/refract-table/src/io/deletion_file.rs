//! Deletion files: deleted physical offsets of one fragment, one immutable
//! file per (fragment, write) under `_deletions/`, in either of Lance's two
//! forms: `{fragment}-{read_version}-{id}.bin` (a serialized roaring bitmap,
//! what Refract writes) or `.arrow` (an Arrow IPC file with one non-null
//! `row_id: uint32` column, what Lance writes for few deletions).
//!
//! Files are never overwritten: each write gets a fresh random id, so a reader
//! holding an old manifest keeps seeing the deletions it was committed with.

use std::io::Cursor;

use arrow::ipc::reader::FileReader;
use arrow_array::{Array, UInt32Array};
use arrow_schema::DataType;
use lance_table::format::pb;
use lance_table::format::pb::deletion_file::DeletionFileType;
use refract_core::checksum::FileChecksum;
use refract_core::{DeletionVector, Error, Result};
use roaring::RoaringBitmap;
use uuid::Uuid;

use super::paths::{deletion_file_path, RelativePath};
use super::store::DatasetStore;
use crate::format::sidecar::Checksums;

/// Which of Lance's two forms a deletion file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionFileKind {
    /// An Arrow IPC file of offsets (`.arrow`).
    Arrow,
    /// A serialized roaring bitmap (`.bin`).
    Bitmap,
}

impl DeletionFileKind {
    fn suffix(self) -> &'static str {
        match self {
            DeletionFileKind::Arrow => "arrow",
            DeletionFileKind::Bitmap => "bin",
        }
    }
}

/// Where a deletion file was written and how many rows it deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionFileRef {
    /// `_deletions/{fragment}-{read_version}-{id}.{arrow|bin}`.
    pub path: RelativePath,
    /// Its form.
    pub kind: DeletionFileKind,
    /// The version the deleting write read (part of the name).
    pub read_version: u64,
    /// Random id of the write (part of the name).
    pub id: u64,
    /// Number of deleted offsets in the file.
    pub num_deleted_rows: u64,
    /// Block checksums of the file (absent for files another Lance writer wrote).
    pub checksum: Option<FileChecksum>,
}

impl DeletionFileRef {
    /// Lance's record of the file (its path follows from the fields).
    pub(crate) fn to_pb(&self) -> pb::DeletionFile {
        pb::DeletionFile {
            file_type: match self.kind {
                DeletionFileKind::Arrow => DeletionFileType::ArrowArray,
                DeletionFileKind::Bitmap => DeletionFileType::Bitmap,
            } as i32,
            read_version: self.read_version,
            id: self.id,
            num_deleted_rows: self.num_deleted_rows,
            base_id: None,
        }
    }

    /// # Errors
    /// Corrupt for an unknown file type; NotSupported for another base path.
    pub(crate) fn from_pb(
        fragment_id: u64,
        message: &pb::DeletionFile,
        checksums: &Checksums,
    ) -> Result<DeletionFileRef> {
        if message.base_id.is_some() {
            return Err(Error::not_supported(format!(
                "the deletion file of fragment {fragment_id} lives under another base path"
            )));
        }
        let kind = match DeletionFileType::try_from(message.file_type) {
            Ok(DeletionFileType::ArrowArray) => DeletionFileKind::Arrow,
            Ok(DeletionFileType::Bitmap) => DeletionFileKind::Bitmap,
            Err(_) => {
                return Err(Error::corrupt(
                    "manifest",
                    format!(
                        "deletion file of fragment {fragment_id} has unknown type {}",
                        message.file_type
                    ),
                ))
            }
        };
        let path = file_path(fragment_id, message.read_version, message.id, kind)?;
        // A deletion file's size is not recorded: the checksum says it.
        let checksum = checksums.lookup(&path, None)?;
        Ok(DeletionFileRef {
            path,
            kind,
            read_version: message.read_version,
            id: message.id,
            num_deleted_rows: message.num_deleted_rows,
            checksum,
        })
    }
}

fn file_path(
    fragment_id: u64,
    read_version: u64,
    id: u64,
    kind: DeletionFileKind,
) -> Result<RelativePath> {
    deletion_file_path(&format!(
        "{fragment_id}-{read_version}-{id}.{}",
        kind.suffix()
    ))
}

/// The same deletions under the name Lance derives for fragment
/// `fragment_id`: a fragment renumbered at commit (its id is assigned then)
/// needs its deletion file under its final id. Copies the bytes; the old
/// name is left to orphan cleanup.
///
/// # Errors
/// NotFound when `file` is missing; External for store failures.
pub(crate) async fn copy_for_fragment(
    store: &DatasetStore,
    file: &DeletionFileRef,
    fragment_id: u64,
) -> Result<DeletionFileRef> {
    let path = file_path(fragment_id, file.read_version, file.id, file.kind)?;
    if path == file.path {
        return Ok(file.clone());
    }
    let bytes = store.get(&file.path).await?;
    store.put(&path, bytes).await?;
    Ok(DeletionFileRef {
        path,
        ..file.clone()
    })
}

/// Writes `dv` for `fragment_id` (a write that read `read_version`) under a
/// fresh unique name, as a roaring bitmap.
///
/// # Errors
/// External when the store fails the write.
pub async fn write_deletion_file(
    store: &DatasetStore,
    fragment_id: u64,
    read_version: u64,
    dv: &DeletionVector,
) -> Result<DeletionFileRef> {
    // The top bit set keeps every id the same length (in names and in the
    // manifest's varints), so equal histories take equal bytes.
    let id = Uuid::new_v4().as_u64_pair().0 | 1 << 63;
    let kind = DeletionFileKind::Bitmap;
    let path = file_path(fragment_id, read_version, id, kind)?;
    let bytes = bytes::Bytes::from(dv.to_bytes());
    let checksum = FileChecksum::of(&bytes);
    store.put(&path, bytes).await?;
    Ok(DeletionFileRef {
        path,
        kind,
        read_version,
        id,
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
    let vector = match file.kind {
        DeletionFileKind::Bitmap => {
            DeletionVector::from_bytes(&bytes, physical_rows).map_err(|e| match e {
                Error::Corrupt { what, message } => {
                    Error::corrupt(format!("{what} in {path}"), message)
                }
                other => other,
            })?
        }
        DeletionFileKind::Arrow => read_arrow_offsets(&bytes, physical_rows)
            .map_err(|message| Error::corrupt(format!("deletion file {path}"), message))?,
    };
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

/// Offsets of an Arrow deletion file: exactly one batch of one non-null
/// `uint32` column, every offset below `physical_rows`.
fn read_arrow_offsets(
    bytes: &[u8],
    physical_rows: u64,
) -> std::result::Result<DeletionVector, String> {
    // arrow-ipc verifies flatbuffers but may panic on values it does not
    // support; decoding touches only `bytes` and locals, so a caught panic
    // leaves nothing broken behind.
    let batches = std::panic::catch_unwind(|| -> std::result::Result<Vec<_>, String> {
        let reader = FileReader::try_new(Cursor::new(bytes), None).map_err(|e| e.to_string())?;
        reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())
    })
    .map_err(|_| "the Arrow IPC file holds an unsupported value".to_string())??;
    let [batch] = batches.as_slice() else {
        return Err(format!("expected one batch, found {}", batches.len()));
    };
    let column = match batch.columns() {
        [column] if column.data_type() == &DataType::UInt32 => column,
        _ => return Err("expected a single uint32 column".to_string()),
    };
    let offsets = column
        .as_any()
        .downcast_ref::<UInt32Array>()
        .ok_or_else(|| "expected a single uint32 column".to_string())?;
    if offsets.null_count() > 0 {
        return Err("offsets must not be null".to_string());
    }
    let mut bitmap = RoaringBitmap::new();
    for offset in offsets.values().iter().copied() {
        if u64::from(offset) >= physical_rows {
            return Err(format!(
                "offset {offset} is beyond the fragment's {physical_rows} rows"
            ));
        }
        bitmap.insert(offset);
    }
    Ok(DeletionVector::from_bitmap(bitmap))
}
