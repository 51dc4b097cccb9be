//! Canonical encoding of the ledger and the inline/external split.

use prost::Message;
use uuid::Uuid;

use crate::bitmap;
use crate::model::{FragmentDigest, LegacyVersion, Mapping, TransitionRecord};
use crate::proto::{self, ROW_MAP_CHECKSUMS_FIELD};

/// Largest encoded `InlineContent` kept inline in the index details (200 KiB).
/// Anything bigger goes to an external file.
pub const MAX_INLINE_BYTES: usize = 200 * 1024;

/// File name of external ledger content inside `_indices/<fri uuid>/`.
pub const EXTERNAL_FILE_NAME: &str = "details.binpb";

/// The output of [`crate::Ledger::encode_details`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedDetails {
    /// The index entry's details bytes (an encoded `FragmentReuseIndexDetails`).
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

/// Builds Lance's `Transition` of a record's parts. Lance treats a transition
/// carrying any other field as one it cannot interpret, so nothing else is
/// written into it.
pub(crate) fn transition_proto(
    sources: &[FragmentDigest],
    destinations: &[FragmentDigest],
    mapping: &Mapping,
) -> proto::Transition {
    let mapping = match mapping {
        Mapping::OrderedCompaction { surviving } => {
            proto::transition::Mapping::OrderedCompaction(proto::OrderedCompaction {
                changed_row_addrs: bitmap::serialize(surviving),
            })
        }
        Mapping::StablePartition {
            map_id,
            map_size_bytes,
            ..
        } => proto::transition::Mapping::StablePartition(proto::StablePartition {
            map_id: map_id.hyphenated().to_string(),
            map_size_bytes: *map_size_bytes,
            base_id: None,
        }),
    };
    proto::Transition {
        sources: sources.to_vec(),
        destinations: destinations.to_vec(),
        mapping: Some(mapping),
    }
}

fn record_proto(record: &TransitionRecord) -> proto::Transition {
    transition_proto(record.sources(), record.destinations(), record.mapping())
}

fn legacy_proto(version: &LegacyVersion) -> proto::Version {
    let groups = version
        .groups()
        .iter()
        .map(|group| proto::Group {
            changed_row_addrs: match group.mapping() {
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

/// The row-map checksums of `transitions`, for the details envelope.
fn row_map_checksums(transitions: &[TransitionRecord]) -> proto::RowMapChecksums {
    let maps = transitions
        .iter()
        .filter_map(|record| match record.mapping() {
            Mapping::StablePartition {
                map_id,
                map_checksum: Some(checksum),
                ..
            } => Some(proto::RowMapChecksum {
                map_id: map_id.hyphenated().to_string(),
                block_bytes: checksum.block_bytes(),
                crc32c: checksum.blocks_le_bytes(),
            }),
            _ => None,
        })
        .collect();
    proto::RowMapChecksums { maps }
}

/// Wraps encoded content into Lance's details envelope, inline or external
/// (`ExternalFile.path` relative to the FRI's index directory, as Lance
/// resolves it), followed by the row-map checksums of `transitions`.
pub(crate) fn details(
    content: Vec<u8>,
    index_version: u32,
    fri_uuid: &Uuid,
    transitions: &[TransitionRecord],
) -> EncodedDetails {
    let checksums = row_map_checksums(transitions);
    let (mut details, external_file) = if content.len() <= MAX_INLINE_BYTES {
        // Field 1 (`inline`) carries the content bytes as they are, so the
        // content is not decoded and re-encoded.
        let mut details = Vec::with_capacity(content.len() + 16);
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut details);
        prost::encoding::encode_varint(content.len() as u64, &mut details);
        details.extend_from_slice(&content);
        (details, None)
    } else {
        let envelope = proto::FragmentReuseIndexDetails {
            content: Some(proto::Content::External(proto::ExternalFile {
                path: EXTERNAL_FILE_NAME.to_string(),
                offset: 0,
                size: content.len() as u64,
            })),
        };
        (
            envelope.encode_to_vec(),
            Some((external_path(fri_uuid), content)),
        )
    };
    if !checksums.maps.is_empty() {
        prost::encoding::message::encode(ROW_MAP_CHECKSUMS_FIELD, &checksums, &mut details);
    }
    EncodedDetails {
        details,
        index_version,
        external_file,
    }
}
