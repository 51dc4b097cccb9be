//! Canonical encoding of the ledger and the inline/external split.

use prost::Message;
use uuid::Uuid;

use crate::bitmap;
use crate::model::{FragmentDigest, LegacyVersion, Mapping, TransitionRecord};
use crate::proto;

/// Largest encoded `InlineContent` kept inline in the index details (200 KiB).
/// Anything bigger goes to an external file.
pub const MAX_INLINE_BYTES: usize = 200 * 1024;

/// File name of external ledger content inside `_indices/<fri uuid>/`.
pub const EXTERNAL_FILE_NAME: &str = "details.binpb";

/// The output of [`crate::Ledger::encode_details`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedDetails {
    /// The index entry's details bytes (an encoded `FriDetails`).
    pub details: Vec<u8>,
    /// The `index_version` to store in the index entry (0 or 1).
    pub index_version: u32,
    /// When the content is too large to inline: the dataset-relative path
    /// (`_indices/<fri uuid>/details.binpb`) and bytes the caller must write
    /// before committing the entry.
    pub external_file: Option<(String, Vec<u8>)>,
}

/// The dataset-relative path of the external content of FRI `fri_uuid`.
pub fn external_path(fri_uuid: &Uuid) -> String {
    format!("_indices/{}/{EXTERNAL_FILE_NAME}", fri_uuid.hyphenated())
}

/// Builds the proto `Transition` of a record's parts.
pub(crate) fn transition_proto(
    sources: &[FragmentDigest],
    destinations: &[FragmentDigest],
    mapping: &Mapping,
    dataset_version: u64,
) -> proto::Transition {
    let mapping = match mapping {
        Mapping::OrderedCompaction { surviving } => {
            proto::transition::Mapping::OrderedCompaction(proto::OrderedCompaction {
                surviving_old_addresses: bitmap::serialize(surviving),
            })
        }
        Mapping::StablePartition {
            map_id,
            map_size_bytes,
            map_checksum,
        } => proto::transition::Mapping::StablePartition(proto::StablePartition {
            map_id: map_id.hyphenated().to_string(),
            map_size_bytes: *map_size_bytes,
            map_checksum_block_bytes: map_checksum.as_ref().map_or(0, |c| c.block_bytes()),
            map_checksum_crc32c: map_checksum
                .as_ref()
                .map_or_else(Vec::new, |c| c.blocks_le_bytes()),
        }),
    };
    proto::Transition {
        sources: sources.to_vec(),
        destinations: destinations.to_vec(),
        mapping: Some(mapping),
        dataset_version,
    }
}

fn record_proto(record: &TransitionRecord) -> proto::Transition {
    transition_proto(
        record.sources(),
        record.destinations(),
        record.mapping(),
        record.dataset_version(),
    )
}

fn legacy_proto(version: &LegacyVersion) -> proto::Version {
    let groups = version
        .groups()
        .iter()
        .map(|group| proto::Group {
            surviving_old_addresses: match group.mapping() {
                Mapping::OrderedCompaction { surviving } => bitmap::serialize(surviving),
                // Legacy groups are only ever built from ordered compactions
                // (see `decode::legacy_version`).
                Mapping::StablePartition { .. } => Vec::new(),
            },
            old_fragments: group.sources().to_vec(),
            new_fragments: group.destinations().to_vec(),
        })
        .collect();
    proto::Version {
        dataset_version: version.dataset_version(),
        groups,
    }
}

/// Encodes the ledger content (legacy versions, then transitions in lineage
/// order).
pub(crate) fn content_bytes(legacy: &[LegacyVersion], transitions: &[TransitionRecord]) -> Vec<u8> {
    proto::InlineContent {
        legacy_versions: legacy.iter().map(legacy_proto).collect(),
        transitions: transitions.iter().map(record_proto).collect(),
    }
    .encode_to_vec()
}

/// Wraps encoded content into details, inline or external.
pub(crate) fn details(content: Vec<u8>, index_version: u32, fri_uuid: &Uuid) -> EncodedDetails {
    if content.len() <= MAX_INLINE_BYTES {
        // Field 1 (`inline`) carries the content bytes as they are, so the
        // content is not decoded and re-encoded; fields in ascending order.
        let mut details = Vec::with_capacity(content.len() + 16);
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut details);
        prost::encoding::encode_varint(content.len() as u64, &mut details);
        details.extend_from_slice(&content);
        if index_version != 0 {
            prost::encoding::uint32::encode(3, &index_version, &mut details);
        }
        return EncodedDetails {
            details,
            index_version,
            external_file: None,
        };
    }
    let path = external_path(fri_uuid);
    let details = proto::FriDetails {
        content: Some(proto::fri_details::Content::External(proto::ExternalFile {
            path: path.clone(),
            offset: 0,
            size: content.len() as u64,
        })),
        index_version,
    };
    EncodedDetails {
        details: details.encode_to_vec(),
        index_version,
        external_file: Some((path, content)),
    }
}
