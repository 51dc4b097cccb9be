//! Builders for valid records and raw (unvalidated) protos.

use prost::Message;
use refract_core::Error;
use roaring::RoaringTreemap;
use uuid::Uuid;

use crate::proto;
use crate::{FragmentDigest, Ledger, Mapping, TransitionRecord};

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
        7,
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
    TransitionRecord::new(sources, destinations, mapping, 9).expect("valid stable partition")
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
    let surviving_old_addresses = bitmap_bytes(&survivors(&sources));
    raw_with_bitmap(sources, destinations, surviving_old_addresses)
}

pub fn raw_with_bitmap(
    sources: Vec<FragmentDigest>,
    destinations: Vec<FragmentDigest>,
    surviving_old_addresses: Vec<u8>,
) -> proto::Transition {
    proto::Transition {
        sources,
        destinations,
        mapping: Some(proto::transition::Mapping::OrderedCompaction(
            proto::OrderedCompaction {
                surviving_old_addresses,
            },
        )),
        dataset_version: 3,
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
                map_checksum_block_bytes: 0,
                map_checksum_crc32c: Vec::new(),
            },
        )),
        dataset_version: 4,
    }
}

pub fn raw_group(old: Vec<FragmentDigest>, new: Vec<FragmentDigest>) -> proto::Group {
    proto::Group {
        surviving_old_addresses: bitmap_bytes(&survivors(&old)),
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

pub fn inline_details(content: Vec<u8>, index_version: u32) -> Vec<u8> {
    proto::FriDetails {
        content: Some(proto::fri_details::Content::Inline(
            proto::InlineContent::decode(content.as_slice()).unwrap(),
        )),
        index_version,
    }
    .encode_to_vec()
}

pub fn external_details(path: &str, offset: u64, size: u64, index_version: u32) -> Vec<u8> {
    proto::FriDetails {
        content: Some(proto::fri_details::Content::External(proto::ExternalFile {
            path: path.to_string(),
            offset,
            size,
        })),
        index_version,
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
