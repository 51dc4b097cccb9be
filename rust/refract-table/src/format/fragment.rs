//! Fragments and their data files: the Rust model of Lance's `DataFragment`.

use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};

use lance_file::version::ConcreteFileVersion;
use lance_table::format::pb;

use super::sidecar::Checksums;
use crate::io::deletion_file::DeletionFileRef;
use crate::io::lance_files::DATA_FILE_VERSION;
use crate::io::paths::DATA_DIR;
use crate::io::LanceFileSummary;
use crate::io::RelativePath;

/// The largest usable fragment id; `u32::MAX` is reserved as a tombstone.
pub const MAX_FRAGMENT_ID: u64 = u32::MAX as u64 - 1;

/// The id Refract gives a table's first fragment. Lance's writer starts at
/// 0; ids only need to be unique in a table's history, and every later id
/// is the recorded maximum plus one, whoever writes.
pub const FIRST_FRAGMENT_ID: u64 = 1;

/// A fragment can address at most 2^32 rows (offsets are u32).
pub const MAX_PHYSICAL_ROWS: u64 = 1 << 32;

/// One Lance data file of a fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    /// Path relative to the dataset root (`data/<name>`; Lance records the
    /// name relative to `data/`).
    pub path: RelativePath,
    /// File size in bytes.
    pub size_bytes: u64,
    /// Rows in the file (equals the fragment's physical rows; Lance records
    /// the count once per fragment).
    pub num_rows: u64,
    /// Block checksums of the file (absent for files another Lance writer
    /// wrote: those are checked structurally).
    pub checksum: Option<FileChecksum>,
    /// Which dataset fields the file stores, and where.
    pub layout: FileLayout,
}

impl Default for FileLayout {
    /// No fields, in the version Refract writes.
    fn default() -> Self {
        FileLayout {
            fields: Vec::new(),
            column_indices: Vec::new(),
            file_version: DATA_FILE_VERSION,
        }
    }
}

impl DataFile {
    /// The record of a data file just written at `path` (in
    /// [`crate::io::lance_files`]' file version).
    pub fn written(path: RelativePath, summary: &LanceFileSummary) -> DataFile {
        let (fields, column_indices) = summary
            .field_columns
            .iter()
            // Field ids and columns come from a Lance schema: both fit an i32.
            .map(|(field, column)| (*field as i32, *column as i32))
            .unzip();
        DataFile {
            path,
            size_bytes: summary.size_bytes,
            num_rows: summary.num_rows,
            checksum: Some(summary.checksum.clone()),
            layout: FileLayout {
                fields,
                column_indices,
                file_version: DATA_FILE_VERSION,
            },
        }
    }
}

/// The dataset fields a data file stores and the Lance file version it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLayout {
    /// Field ids of the dataset schema stored in the file.
    pub fields: Vec<i32>,
    /// The column of each field in the file (`-1`: no column of its own).
    pub column_indices: Vec<i32>,
    /// Lance file format version of the file.
    pub file_version: ConcreteFileVersion,
}

/// A fragment: a run of rows addressed `id << 32 | offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// Fragment id (a new fragment gets its id when it is committed).
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

    /// Lance's record of the fragment; checksums go to `checksums`.
    pub(crate) fn to_pb(&self, checksums: &mut Checksums) -> pb::DataFragment {
        pb::DataFragment {
            id: self.id,
            files: self
                .files
                .iter()
                .map(|file| {
                    checksums.record(&file.path, file.checksum.as_ref());
                    let (major, minor) = file.layout.file_version.to_data_file_numbers();
                    pb::DataFile {
                        path: name_in_data_dir(&file.path),
                        fields: file.layout.fields.clone(),
                        column_indices: file.layout.column_indices.clone(),
                        file_major_version: major,
                        file_minor_version: minor,
                        file_size_bytes: file.size_bytes,
                        base_id: None,
                    }
                })
                .collect(),
            deletion_file: self.deletion_file.as_ref().map(|deletion| {
                checksums.record(&deletion.path, deletion.checksum.as_ref());
                deletion.to_pb()
            }),
            physical_rows: self.physical_rows,
            ..Default::default()
        }
    }

    /// Converts and validates Lance's record of a fragment (untrusted bytes).
    ///
    /// # Errors
    /// Corrupt for paths leaving the root, unknown file versions, malformed
    /// checksums or broken invariants; NotSupported for features Refract
    /// does not implement (other base paths, row lineage, overlays).
    pub(crate) fn from_pb(message: &pb::DataFragment, checksums: &Checksums) -> Result<Fragment> {
        if message.row_id_sequence.is_some() {
            return Err(Error::not_supported(format!(
                "fragment {} records stable row ids, which Refract does not implement",
                message.id
            )));
        }
        if !message.overlays.is_empty() {
            return Err(Error::not_supported(format!(
                "fragment {} has data overlay files, which Refract does not implement",
                message.id
            )));
        }
        let files = message
            .files
            .iter()
            .map(|file| {
                if file.base_id.is_some() {
                    return Err(Error::not_supported(format!(
                        "data file {} of fragment {} lives under another base path",
                        file.path, message.id
                    )));
                }
                let path =
                    RelativePath::parse_recorded(&format!("{DATA_DIR}/{}", file.path), "manifest")?;
                let file_version = ConcreteFileVersion::from_data_file_numbers(
                    file.file_major_version,
                    file.file_minor_version,
                )
                .map_err(|e| corrupt(format!("data file {path}: {e}")))?;
                if file_version == ConcreteFileVersion::V1 {
                    return Err(Error::not_supported(format!(
                        "data file {path} is in the legacy Lance v1 file format"
                    )));
                }
                let checksum = checksums.lookup(&path, Some(file.file_size_bytes))?;
                Ok(DataFile {
                    path,
                    size_bytes: file.file_size_bytes,
                    num_rows: message.physical_rows,
                    checksum,
                    layout: FileLayout {
                        fields: file.fields.clone(),
                        column_indices: file.column_indices.clone(),
                        file_version,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let deletion_file = message
            .deletion_file
            .as_ref()
            .map(|deletion| DeletionFileRef::from_pb(message.id, deletion, checksums))
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

/// A data file's name relative to `data/`, as Lance records it.
fn name_in_data_dir(path: &RelativePath) -> String {
    let raw = path.as_str();
    raw.strip_prefix(DATA_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(raw)
        .to_string()
}

fn corrupt(message: String) -> Error {
    Error::corrupt("manifest", message)
}
