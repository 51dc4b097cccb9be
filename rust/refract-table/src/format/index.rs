//! Index segment metadata: the Rust model of `IndexMetadata`.

use refract_core::{DeletionVector, Error, Result};
use roaring::RoaringBitmap;
use uuid::Uuid;

use super::fragment::{checksum_from_proto, checksum_to_proto};
use super::proto;
use crate::io::{RecordedFile, RelativePath};

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
    /// Every file of the segment with its size and checksum, sorted by path
    /// (empty for segments written before checksums).
    pub files: Vec<RecordedFile>,
}

impl IndexMetadata {
    /// System entries (reserved `__` names) pass through index listings untouched.
    pub fn is_system(&self) -> bool {
        self.name.starts_with(SYSTEM_INDEX_PREFIX)
    }

    /// Encodes to protobuf. Serializing a bitmap into a Vec cannot fail.
    pub(crate) fn to_proto(&self) -> proto::IndexMetadata {
        proto::IndexMetadata {
            uuid: self.uuid.as_bytes().to_vec(),
            name: self.name.clone(),
            fields: self.fields.clone(),
            fragment_bitmap: self.fragment_bitmap.as_ref().map(serialize_bitmap),
            index_type: self.index_type.clone(),
            details: self.details.clone(),
            index_version: self.index_version,
            dataset_version: self.dataset_version,
            files: self.files.iter().map(stored_file_to_proto).collect(),
        }
    }

    /// Decodes and validates a stored segment.
    pub(crate) fn from_proto(message: &proto::IndexMetadata) -> Result<IndexMetadata> {
        let fragment_bitmap = message
            .fragment_bitmap
            .as_deref()
            .map(|bytes| {
                // The framing-checked decoder bounds allocations by the input
                // size; ids range over u32 except the tombstone.
                DeletionVector::from_bytes(bytes, u64::from(u32::MAX))
                    .map(DeletionVector::into_bitmap)
                    .map_err(|err| {
                        Error::corrupt(
                            "manifest",
                            format!("fragment bitmap of index '{}': {err}", message.name),
                        )
                    })
            })
            .transpose()?;
        Ok(IndexMetadata {
            uuid: uuid_from_bytes(&message.uuid, "index uuid")?,
            name: message.name.clone(),
            fields: message.fields.clone(),
            fragment_bitmap,
            index_type: message.index_type.clone(),
            details: message.details.clone(),
            index_version: message.index_version,
            dataset_version: message.dataset_version,
            files: message
                .files
                .iter()
                .map(stored_file_from_proto)
                .collect::<Result<Vec<_>>>()?,
        })
    }
}

/// The stored form of a file reference.
pub(crate) fn stored_file_to_proto(file: &RecordedFile) -> proto::StoredFile {
    proto::StoredFile {
        path: file.path.as_str().to_string(),
        size_bytes: file.size_bytes,
        checksum: Some(checksum_to_proto(&file.checksum)),
    }
}

/// Decodes a stored file reference (the path is untrusted); Corrupt (the
/// manifest) without a checksum or with one that does not cover the size.
pub(crate) fn stored_file_from_proto(stored: &proto::StoredFile) -> Result<RecordedFile> {
    let path = RelativePath::parse_recorded(&stored.path, "manifest")?;
    let checksum = checksum_from_proto(stored.checksum.as_ref(), &path, stored.size_bytes)?
        .ok_or_else(|| {
            Error::corrupt("manifest", format!("{path} is recorded without a checksum"))
        })?;
    Ok(RecordedFile {
        path,
        size_bytes: stored.size_bytes,
        checksum,
    })
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
