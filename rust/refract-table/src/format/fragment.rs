//! Fragments and their data files: the Rust model of `DataFragment`.

use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};

use super::proto;
use crate::io::deletion_file::DeletionFileRef;
use crate::io::RelativePath;

/// The largest usable fragment id; `u32::MAX` is reserved as a tombstone.
pub const MAX_FRAGMENT_ID: u64 = u32::MAX as u64 - 1;

/// A fragment can address at most 2^32 rows (offsets are u32).
pub const MAX_PHYSICAL_ROWS: u64 = 1 << 32;

/// One Lance data file of a fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    /// Path relative to the dataset root.
    pub path: RelativePath,
    /// File size in bytes.
    pub size_bytes: u64,
    /// Rows in the file (equals the fragment's physical rows).
    pub num_rows: u64,
    /// Block checksums of the file (absent in files written before checksums).
    pub checksum: Option<FileChecksum>,
}

/// A fragment: a run of rows addressed `id << 32 | offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// Fragment id; 0 means "not yet assigned" in an uncommitted fragment.
    pub id: u64,
    /// Data files (column groups), each holding all physical rows.
    pub files: Vec<DataFile>,
    /// Rows physically present, deleted ones included.
    pub physical_rows: u64,
    /// Deleted offsets, if any.
    pub deletion_file: Option<DeletionFileRef>,
}

impl Fragment {
    /// Rows marked deleted.
    pub fn num_deleted_rows(&self) -> u64 {
        self.deletion_file
            .as_ref()
            .map_or(0, |deletion| deletion.num_deleted_rows)
    }

    /// Rows a scan returns.
    pub fn live_rows(&self) -> u64 {
        self.physical_rows.saturating_sub(self.num_deleted_rows())
    }

    /// Bytes of all data files.
    pub fn size_bytes(&self) -> u64 {
        self.files.iter().map(|file| file.size_bytes).sum()
    }

    /// Checks the invariants every stored fragment satisfies.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.id > MAX_FRAGMENT_ID {
            return Err(corrupt(format!(
                "fragment id {} exceeds the largest fragment id {MAX_FRAGMENT_ID}",
                self.id
            )));
        }
        if self.physical_rows > MAX_PHYSICAL_ROWS {
            return Err(corrupt(format!(
                "fragment {} has {} physical rows, more than a fragment can address",
                self.id, self.physical_rows
            )));
        }
        if self.files.is_empty() {
            return Err(corrupt(format!("fragment {} has no data files", self.id)));
        }
        if let Some(file) = self
            .files
            .iter()
            .find(|file| file.num_rows != self.physical_rows)
        {
            return Err(corrupt(format!(
                "data file {} of fragment {} has {} rows but the fragment has {} physical rows",
                file.path, self.id, file.num_rows, self.physical_rows
            )));
        }
        if self.num_deleted_rows() > self.physical_rows {
            return Err(corrupt(format!(
                "fragment {} deletes {} of {} physical rows",
                self.id,
                self.num_deleted_rows(),
                self.physical_rows
            )));
        }
        Ok(())
    }

    pub(crate) fn to_proto(&self) -> proto::DataFragment {
        proto::DataFragment {
            id: self.id,
            files: self
                .files
                .iter()
                .map(|file| proto::DataFile {
                    path: file.path.as_str().to_string(),
                    size_bytes: file.size_bytes,
                    num_rows: file.num_rows,
                    checksum: file.checksum.as_ref().map(checksum_to_proto),
                })
                .collect(),
            physical_rows: self.physical_rows,
            deletion_file: self
                .deletion_file
                .as_ref()
                .map(|deletion| proto::DeletionFile {
                    path: deletion.path.as_str().to_string(),
                    num_deleted_rows: deletion.num_deleted_rows,
                    checksum: deletion.checksum.as_ref().map(checksum_to_proto),
                }),
        }
    }

    /// Converts and validates a stored fragment (paths are untrusted).
    pub(crate) fn from_proto(message: &proto::DataFragment) -> Result<Fragment> {
        let files = message
            .files
            .iter()
            .map(|file| {
                let path = RelativePath::parse_recorded(&file.path, "manifest")?;
                let checksum = checksum_from_proto(file.checksum.as_ref(), &path, file.size_bytes)?;
                Ok(DataFile {
                    path,
                    size_bytes: file.size_bytes,
                    num_rows: file.num_rows,
                    checksum,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let deletion_file = message
            .deletion_file
            .as_ref()
            .map(|deletion| {
                let path = RelativePath::parse_recorded(&deletion.path, "manifest")?;
                // A deletion file's size is not recorded: the checksum says it.
                let checksum = deletion
                    .checksum
                    .as_ref()
                    .map(|stored| decode_checksum(stored, &path))
                    .transpose()?;
                Ok::<_, Error>(DeletionFileRef {
                    path,
                    num_deleted_rows: deletion.num_deleted_rows,
                    checksum,
                })
            })
            .transpose()?;
        let fragment = Fragment {
            id: message.id,
            files,
            physical_rows: message.physical_rows,
            deletion_file,
        };
        fragment.validate()?;
        Ok(fragment)
    }
}

fn corrupt(message: String) -> Error {
    Error::corrupt("manifest", message)
}

/// The stored form of a checksum.
pub(crate) fn checksum_to_proto(checksum: &FileChecksum) -> proto::Checksum {
    proto::Checksum {
        block_bytes: checksum.block_bytes(),
        crc32c: checksum.blocks_le_bytes(),
    }
}

/// A stored checksum of the file at `path`; Corrupt (the manifest) when
/// malformed.
pub(crate) fn decode_checksum(
    stored: &proto::Checksum,
    path: &RelativePath,
) -> Result<FileChecksum> {
    FileChecksum::from_le_bytes(stored.block_bytes, &stored.crc32c)
        .map_err(|e| corrupt(format!("checksum of {path}: {e}")))
}

/// A stored checksum, if any, of a file of `size` bytes at `path`; Corrupt
/// (the manifest) when malformed or not covering `size` bytes.
pub(crate) fn checksum_from_proto(
    stored: Option<&proto::Checksum>,
    path: &RelativePath,
    size: u64,
) -> Result<Option<FileChecksum>> {
    let Some(stored) = stored else {
        return Ok(None);
    };
    let checksum = decode_checksum(stored, path)?;
    if checksum.check_size("manifest", size).is_err() {
        return Err(corrupt(format!(
            "the checksum of {path} covers {} blocks of {} bytes, not a {size}-byte file",
            checksum.blocks().len(),
            checksum.block_bytes()
        )));
    }
    Ok(Some(checksum))
}
