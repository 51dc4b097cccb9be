//! Decoding: the version gate, Lance's `FragmentReuseIndexDetails` envelope
//! and the ledger content.
//!
//! Order matters. [`parse_details`] checks `index_version` before it looks at
//! a single byte, then resolves where the content lives (validating an external
//! reference completely) — all before any I/O. [`decode_content`] then turns
//! content bytes into validated records.

use prost::Message;
use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};
use uuid::Uuid;

use crate::bitmap;
use crate::external::ExternalContent;
use crate::model::{LegacyVersion, Mapping, TransitionRecord};
use crate::proto::{self, ROW_MAP_CHECKSUMS_FIELD};
use crate::validate;
use crate::violation::{Checked, Violation, WHAT};
use crate::wire::{fields, Payload};

/// `index_version` of a legacy ledger (reuse versions only).
pub const FRI_INDEX_VERSION_LEGACY: u32 = 0;
/// `index_version` of a tagged ledger (legacy versions plus transitions).
pub const FRI_INDEX_VERSION_TAGGED: u32 = 1;
/// The newest `index_version` this build reads and writes.
pub const MAX_SUPPORTED_FRI_INDEX_VERSION: u32 = FRI_INDEX_VERSION_TAGGED;

/// Refuses an `index_version` this build cannot interpret.
///
/// # Errors
/// NotSupported when `index_version` is above
/// [`MAX_SUPPORTED_FRI_INDEX_VERSION`].
pub fn check_index_version(index_version: u32) -> Result<()> {
    if index_version > MAX_SUPPORTED_FRI_INDEX_VERSION {
        return Err(Error::not_supported(format!(
            "FRI index_version {index_version} is not supported by this client \
             (it reads up to {MAX_SUPPORTED_FRI_INDEX_VERSION}). Please upgrade to a newer version of Refract"
        )));
    }
    Ok(())
}

/// Where the ledger content of an FRI entry lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentLocation<'a> {
    /// The encoded content, borrowed from the details.
    Inline(&'a [u8]),
    /// A validated file range to read; check the result with
    /// [`ExternalContent::verify_received`].
    External(ExternalContent),
}

/// Parses the details of FRI entry `fri_uuid` stored with `index_version`.
///
/// Runs before any I/O. Envelope fields other than the content (1, 2) and
/// Refract's row-map checksums are skipped, as Lance's readers skip them.
///
/// # Errors
/// NotSupported for an unknown version; Corrupt for malformed details or not
/// exactly one content field; Corrupt for an external reference leaving the
/// FRI's index directory or an impossible range.
pub fn parse_details<'a>(
    details: &'a [u8],
    index_version: u32,
    fri_uuid: &Uuid,
) -> Result<ContentLocation<'a>> {
    check_index_version(index_version)?;
    let corrupt = |message: String| Error::corrupt(WHAT, message);
    let mut location = None;
    let mut content_fields = 0usize;
    for field in fields(details) {
        let field = field.map_err(|e| corrupt(format!("details: {e}")))?;
        match (field.number, field.payload) {
            (1, Payload::Bytes(bytes)) => {
                content_fields += 1;
                location = Some(ContentLocation::Inline(bytes));
            }
            (2, Payload::Bytes(bytes)) => {
                content_fields += 1;
                let file = proto::ExternalFile::decode(bytes)
                    .map_err(|e| corrupt(format!("external file reference: {e}")))?;
                location = Some(ContentLocation::External(ExternalContent::from_proto(
                    file, fri_uuid,
                )?));
            }
            (1 | 2, _) => {
                return Err(corrupt(format!(
                    "details field {} has the wrong wire type",
                    field.number
                )))
            }
            // Other envelope fields carry nothing the content depends on.
            _ => {}
        }
    }
    match (content_fields, location) {
        (1, Some(location)) => Ok(location),
        (n, _) => Err(corrupt(format!(
            "details must hold exactly one content field, found {n}"
        ))),
    }
}

/// The row-map checksums Refract records in the details envelope, by map id.
/// Empty when the details were written by another Lance writer.
pub(crate) fn row_map_checksums(details: &[u8]) -> Checked<Vec<(Uuid, FileChecksum)>> {
    let mut out = Vec::new();
    for field in fields(details) {
        let field = field.map_err(|e| Violation::invalid(format!("details: {e}")))?;
        if field.number != ROW_MAP_CHECKSUMS_FIELD {
            continue;
        }
        let Payload::Bytes(bytes) = field.payload else {
            return Err(Violation::invalid(
                "row-map checksums have the wrong wire type",
            ));
        };
        let record = proto::RowMapChecksums::decode(bytes)
            .map_err(|e| Violation::invalid(format!("row-map checksums: {e}")))?;
        for map in record.maps {
            let map_id = validate::parse_map_id(&map.map_id)?;
            let checksum = FileChecksum::from_le_bytes(map.block_bytes, &map.crc32c)
                .map_err(|e| Violation::invalid(format!("row-map checksum of {map_id}: {e}")))?;
            out.push((map_id, checksum));
        }
    }
    Ok(out)
}

/// Decoded, individually validated content (lineage not yet checked).
pub(crate) struct DecodedContent {
    pub legacy_versions: Vec<LegacyVersion>,
    pub transitions: Vec<TransitionRecord>,
    pub has_unsupported_transitions: bool,
}

/// Decodes ledger content stored under `index_version` (already gated).
pub(crate) fn decode_content(bytes: &[u8], index_version: u32) -> Checked<DecodedContent> {
    let mut out = DecodedContent {
        legacy_versions: Vec::new(),
        transitions: Vec::new(),
        has_unsupported_transitions: false,
    };
    for field in fields(bytes) {
        let field = field.map_err(|e| Violation::invalid(format!("content: {e}")))?;
        match (field.number, field.payload) {
            (1, Payload::Bytes(version)) => out.legacy_versions.push(legacy_version(version)?),
            (2, Payload::Bytes(_)) if index_version == FRI_INDEX_VERSION_LEGACY => {
                return Err(Violation::invalid(
                    "tagged transitions are not allowed under index_version 0",
                ))
            }
            (2, Payload::Bytes(transition)) => match tagged_transition(transition)? {
                Some(record) => out.transitions.push(record),
                None => out.has_unsupported_transitions = true,
            },
            (1 | 2, _) => {
                return Err(Violation::invalid(format!(
                    "content field {} has the wrong wire type",
                    field.number
                )))
            }
            _ => {}
        }
    }
    Ok(out)
}

fn legacy_version(bytes: &[u8]) -> Checked<LegacyVersion> {
    let version = proto::Version::decode(bytes)
        .map_err(|e| Violation::invalid(format!("legacy version: {e}")))?;
    let groups = version
        .groups
        .into_iter()
        .map(|group| {
            validate::check_sides(&group.old_fragments, &group.new_fragments)?;
            let surviving =
                bitmap::decode_surviving(&group.changed_row_addrs, &group.old_fragments)?;
            Ok(TransitionRecord::from_validated(
                group.old_fragments,
                group.new_fragments,
                Mapping::OrderedCompaction { surviving },
                Some(version.dataset_version),
            ))
        })
        .collect::<Checked<Vec<_>>>()?;
    Ok(LegacyVersion::from_groups(version.dataset_version, groups))
}

/// Field numbers of Lance's `Transition` this build understands.
const KNOWN_TRANSITION_FIELDS: [u32; 4] = [1, 2, 3, 4];

/// Decodes one tagged transition; `None` when it carries a field this build
/// does not know (a future mapping or metadata): neither its mapping nor its
/// metadata is safe to interpret partially, so it is dropped whole.
fn tagged_transition(bytes: &[u8]) -> Checked<Option<TransitionRecord>> {
    let mut mappings = 0usize;
    for field in fields(bytes) {
        let field = field.map_err(|e| Violation::invalid(format!("transition: {e}")))?;
        if !KNOWN_TRANSITION_FIELDS.contains(&field.number) {
            return Ok(None);
        }
        if field.number == 3 || field.number == 4 {
            mappings += 1;
        }
    }
    if mappings != 1 {
        return Err(Violation::invalid(format!(
            "a transition needs exactly one mapping, found {mappings}"
        )));
    }
    let transition = proto::Transition::decode(bytes)
        .map_err(|e| Violation::invalid(format!("transition: {e}")))?;
    validate::check_sides(&transition.sources, &transition.destinations)?;
    let mapping = match transition.mapping {
        Some(proto::transition::Mapping::OrderedCompaction(oc)) => Mapping::OrderedCompaction {
            surviving: bitmap::decode_surviving(&oc.changed_row_addrs, &transition.sources)?,
        },
        Some(proto::transition::Mapping::StablePartition(sp)) => {
            if let Some(base) = sp.base_id {
                return Err(Violation::Unsupported(format!(
                    "stable partition row map {} lives in base path {base}; base paths are not supported",
                    sp.map_id
                )));
            }
            Mapping::StablePartition {
                map_id: validate::parse_map_id(&sp.map_id)?,
                map_size_bytes: sp.map_size_bytes,
                // Filled from the details envelope (`Ledger::attach_row_map_checksums`).
                map_checksum: None,
            }
        }
        // Exactly one mapping field was seen above.
        None => return Err(Violation::invalid("a transition needs exactly one mapping")),
    };
    validate::check_mapping(&mapping, &transition.destinations)?;
    Ok(Some(TransitionRecord::from_validated(
        transition.sources,
        transition.destinations,
        mapping,
        None,
    )))
}
