//! Index segment metadata: the Rust model of Lance's `IndexMetadata`.

use refract_core::{DeletionVector, Error, Result};
use roaring::RoaringBitmap;
use uuid::Uuid;

use std::collections::HashMap;

use lance_table::format::pb;

use super::schema::FieldPaths;
use super::sidecar::Checksums;
use crate::io::{index_dir, RecordedFile, RelativePath};

/// Names starting with this prefix are system entries (e.g. the FRI).
pub const SYSTEM_INDEX_PREFIX: &str = "__";

/// One index segment as recorded in a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexMetadata {
    /// Unique per segment; a rewrite mints a new one.
    pub uuid: Uuid,
    /// Logical index name (shared by the segments of one index).
    pub name: String,
    /// Indexed column names; empty for system entries.
    pub fields: Vec<String>,
    /// Covered fragment ids; `None` = unknown.
    pub fragment_bitmap: Option<RoaringBitmap>,
    /// Index type name.
    pub index_type: String,
    /// Type-specific details, opaque to the engine.
    pub details: Vec<u8>,
    /// On-disk layout version of the index type.
    pub index_version: u32,
    /// Dataset version the segment was built or remapped at.
    pub dataset_version: u64,
    /// Every checksummed file of the segment with its size and checksum,
    /// sorted by path.
    pub files: Vec<RecordedFile>,
    /// Lance's fields Refract does not interpret.
    pub lance: LanceIndexFields,
}

/// What Lance records about a segment that Refract's engine does not
/// interpret, kept so a rewrite of the manifest loses nothing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LanceIndexFields {
    /// Files of the segment recorded without a checksum (another Lance
    /// writer's), root-relative, with their sizes.
    pub unverified_files: Vec<(RelativePath, u64)>,
    /// Creation time, ms since the epoch, when recorded.
    pub created_at: Option<u64>,
    /// Free-form metadata of the segment.
    pub metadata: HashMap<String, String>,
}

/// Type URL prefix of Refract's own index types in `index_details`.
const REFRACT_TYPE_URL_PREFIX: &str = "/refract.index.";

impl IndexMetadata {
    /// System entries (reserved `__` names) pass through index listings untouched.
    pub fn is_system(&self) -> bool {
        self.name.starts_with(SYSTEM_INDEX_PREFIX)
    }

    /// Lance's record of the segment; checksums go to `checksums`, column
    /// names become field ids through `fields`.
    ///
    /// # Errors
    /// Corrupt (the manifest) when an indexed column is not in the schema.
    pub(crate) fn to_pb(
        &self,
        fields: &FieldPaths,
        checksums: &mut Checksums,
    ) -> Result<pb::IndexMetadata> {
        let dir = index_dir(&self.uuid);
        let mut files: Vec<pb::IndexFile> = self
            .files
            .iter()
            .map(|file| {
                checksums.record(&file.path, Some(&file.checksum));
                pb::IndexFile {
                    path: relative_to(&dir, &file.path),
                    size_bytes: file.size_bytes,
                }
            })
            .collect();
        files.extend(
            self.lance
                .unverified_files
                .iter()
                .map(|(path, size)| pb::IndexFile {
                    path: relative_to(&dir, path),
                    size_bytes: *size,
                }),
        );
        Ok(pb::IndexMetadata {
            uuid: Some(pb::Uuid {
                uuid: self.uuid.as_bytes().to_vec(),
            }),
            fields: self
                .fields
                .iter()
                .map(|name| fields.id_of(name))
                .collect::<Result<Vec<_>>>()?,
            name: self.name.clone(),
            dataset_version: self.dataset_version,
            fragment_bitmap: self
                .fragment_bitmap
                .as_ref()
                .map(serialize_bitmap)
                .unwrap_or_default(),
            index_details: (!self.index_type.is_empty()).then(|| prost_types::Any {
                type_url: if self.index_type.contains(['/', '.']) {
                    self.index_type.clone()
                } else {
                    format!("{REFRACT_TYPE_URL_PREFIX}{}", self.index_type)
                },
                value: self.details.clone(),
            }),
            index_version: Some(i32::try_from(self.index_version).unwrap_or(i32::MAX)),
            created_at: self.lance.created_at,
            files,
            metadata: self.lance.metadata.clone(),
            ..Default::default()
        })
    }

    /// Decodes and validates Lance's record of a segment (untrusted bytes).
    ///
    /// # Errors
    /// Corrupt for a malformed uuid, bitmap, field id, path or checksum;
    /// NotSupported for features Refract does not implement.
    pub(crate) fn from_pb(
        message: &pb::IndexMetadata,
        fields: &FieldPaths,
        checksums: &Checksums,
    ) -> Result<IndexMetadata> {
        let uuid = uuid_from_bytes(
            message
                .uuid
                .as_ref()
                .map_or(&[][..], |uuid| uuid.uuid.as_slice()),
            "index uuid",
        )?;
        if message.base_id.is_some() {
            return Err(Error::not_supported(format!(
                "index segment {uuid} lives under another base path"
            )));
        }
        let fragment_bitmap = (!message.fragment_bitmap.is_empty())
            .then(|| {
                // The framing-checked decoder bounds allocations by the input
                // size; ids range over u32 except the tombstone.
                DeletionVector::from_bytes(&message.fragment_bitmap, u64::from(u32::MAX))
                    .map(DeletionVector::into_bitmap)
                    .map_err(|err| {
                        Error::corrupt(
                            "manifest",
                            format!("fragment bitmap of index '{}': {err}", message.name),
                        )
                    })
            })
            .transpose()?;
        let (index_type, details) = match &message.index_details {
            None => (String::new(), Vec::new()),
            Some(any) => (
                any.type_url
                    .strip_prefix(REFRACT_TYPE_URL_PREFIX)
                    .unwrap_or(&any.type_url)
                    .to_string(),
                any.value.clone(),
            ),
        };
        let dir = index_dir(&uuid);
        let mut files = Vec::new();
        let mut unverified_files = Vec::new();
        for file in &message.files {
            let path = RelativePath::parse_recorded(&format!("{dir}{}", file.path), "manifest")?;
            match checksums.lookup(&path, Some(file.size_bytes))? {
                Some(checksum) => files.push(RecordedFile {
                    path,
                    size_bytes: file.size_bytes,
                    checksum,
                }),
                None => unverified_files.push((path, file.size_bytes)),
            }
        }
        Ok(IndexMetadata {
            uuid,
            name: message.name.clone(),
            fields: message
                .fields
                .iter()
                .map(|id| fields.path_of(*id))
                .collect::<Result<Vec<_>>>()?,
            fragment_bitmap,
            index_type,
            details,
            index_version: message
                .index_version
                .map_or(Ok(0), u32::try_from)
                .map_err(|_| {
                    Error::corrupt(
                        "manifest",
                        format!("index '{}' has a negative index_version", message.name),
                    )
                })?,
            dataset_version: message.dataset_version,
            files,
            lance: LanceIndexFields {
                unverified_files,
                created_at: message.created_at,
                metadata: message.metadata.clone(),
            },
        })
    }
}

/// `path` relative to the directory `dir` (which ends in `/`).
fn relative_to(dir: &RelativePath, path: &RelativePath) -> String {
    path.as_str()
        .strip_prefix(dir.as_str())
        .unwrap_or(path.as_str())
        .to_string()
}

/// Serializes a roaring bitmap (portable format).
pub(crate) fn serialize_bitmap(bitmap: &RoaringBitmap) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(bitmap.serialized_size());
    // Writing into a Vec never fails.
    let _ = bitmap.serialize_into(&mut bytes);
    bytes
}

/// Parses 16 raw uuid bytes; anything else is corrupt.
pub(crate) fn uuid_from_bytes(bytes: &[u8], what: &str) -> Result<Uuid> {
    Uuid::from_slice(bytes).map_err(|_| {
        Error::corrupt(
            "manifest",
            format!("{what} has {} bytes, expected 16", bytes.len()),
        )
    })
}
