//! Builders for valid records and raw (unvalidated) protos.

use prost::Message;
use refract_core::Error;
use roaring::RoaringTreemap;
use uuid::Uuid;

use crate::proto;
use crate::{FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord};

pub const FRI: Uuid = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);

pub fn d(id: u64, physical_rows: u64, num_deleted_rows: u64) -> FragmentDigest {
    FragmentDigest::new(id, physical_rows, num_deleted_rows)
}

/// Surviving addresses when the first `num_deleted_rows` rows of each source
/// are the deleted ones.
pub fn survivors(sources: &[FragmentDigest]) -> RoaringTreemap {
    let mut t = RoaringTreemap::new();
    for s in sources {
        let base = s.id << 32;
        t.insert_range(base + s.num_deleted_rows..base + s.physical_rows);
    }
    t
}

pub fn oc(sources: Vec<FragmentDigest>, destinations: Vec<FragmentDigest>) -> TransitionRecord {
    let surviving = survivors(&sources);
    TransitionRecord::new(
        sources,
        destinations,
        Mapping::OrderedCompaction { surviving },
    )
    .expect("valid ordered compaction")
}

pub fn sp(
    sources: Vec<FragmentDigest>,
    destinations: Vec<FragmentDigest>,
    map_id: u128,
) -> TransitionRecord {
    let mapping = Mapping::StablePartition {
        map_id: Uuid::from_u128(map_id),
        map_size_bytes: 4096,
        map_checksum: None,
    };
    TransitionRecord::new(sources, destinations, mapping).expect("valid stable partition")
}

pub fn bitmap_bytes(t: &RoaringTreemap) -> Vec<u8> {
    let mut out = Vec::new();
    t.serialize_into(&mut out).unwrap();
    out
}

pub fn raw_oc(
    sources: Vec<FragmentDigest>,
    destinations: Vec<FragmentDigest>,
) -> proto::Transition {
    let changed_row_addrs = bitmap_bytes(&survivors(&sources));
    raw_with_bitmap(sources, destinations, changed_row_addrs)
}

pub fn raw_with_bitmap(
    sources: Vec<FragmentDigest>,
    destinations: Vec<FragmentDigest>,
    changed_row_addrs: Vec<u8>,
) -> proto::Transition {
    proto::Transition {
        sources,
        destinations,
        mapping: Some(proto::transition::Mapping::OrderedCompaction(
            proto::OrderedCompaction { changed_row_addrs },
        )),
    }
}

pub fn raw_sp(
    sources: Vec<FragmentDigest>,
    destinations: Vec<FragmentDigest>,
    map_id: &str,
    map_size_bytes: u64,
) -> proto::Transition {
    proto::Transition {
        sources,
        destinations,
        mapping: Some(proto::transition::Mapping::StablePartition(
            proto::StablePartition {
                map_id: map_id.to_string(),
                map_size_bytes,
                base_id: None,
            },
        )),
    }
}

pub fn raw_group(old: Vec<FragmentDigest>, new: Vec<FragmentDigest>) -> proto::Group {
    proto::Group {
        changed_row_addrs: bitmap_bytes(&survivors(&old)),
        old_fragments: old,
        new_fragments: new,
    }
}

pub fn content(
    legacy_versions: Vec<proto::Version>,
    transitions: Vec<proto::Transition>,
) -> Vec<u8> {
    proto::InlineContent {
        legacy_versions,
        transitions,
    }
    .encode_to_vec()
}

pub fn tagged(transitions: Vec<proto::Transition>) -> Vec<u8> {
    content(vec![], transitions)
}

/// Lance's envelope around inline content.
pub fn inline_details(content: Vec<u8>) -> Vec<u8> {
    proto::FragmentReuseIndexDetails {
        content: Some(proto::Content::Inline(
            proto::InlineContent::decode(content.as_slice()).unwrap(),
        )),
    }
    .encode_to_vec()
}

/// Lance's envelope around a reference to external content; `path` is
/// relative to the FRI's index directory.
pub fn external_details(path: &str, offset: u64, size: u64) -> Vec<u8> {
    proto::FragmentReuseIndexDetails {
        content: Some(proto::Content::External(proto::ExternalFile {
            path: path.to_string(),
            offset,
            size,
        })),
    }
    .encode_to_vec()
}

/// Decodes tagged content and returns the error.
pub fn decode_err(content: &[u8], index_version: u32) -> Error {
    Ledger::from_content_bytes(content, index_version).expect_err("content must be rejected")
}

pub fn assert_corrupt(err: &Error) {
    assert!(
        matches!(err, Error::Corrupt { .. }),
        "expected Corrupt, got {err:?}"
    );
}

/// Asserts a Corrupt error whose message contains `needle`.
pub fn assert_corrupt_with(err: &Error, needle: &str) {
    assert_corrupt(err);
    assert!(
        err.to_string().contains(needle),
        "{err} does not mention {needle:?}"
    );
}

pub fn assert_invalid_input(err: &Error) {
    assert!(
        matches!(err, Error::InvalidInput { .. }),
        "expected InvalidInput, got {err:?}"
    );
}

/// Appends a raw field (tag and bytes payload) to an encoded message.
pub fn append_bytes_field(message: &mut Vec<u8>, number: u32, payload: &[u8]) {
    prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, message);
    prost::encoding::encode_varint(payload.len() as u64, message);
    message.extend_from_slice(payload);
}

/// Wraps encoded transition bytes as one `transitions` entry of content.
pub fn content_with_raw_transitions(transitions: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for t in transitions {
        append_bytes_field(&mut out, 2, t);
    }
    out
}
