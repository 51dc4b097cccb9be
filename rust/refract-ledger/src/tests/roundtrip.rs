//! decode(encode(x)) == x, canonical encoding and the inline/external split.

use roaring::RoaringTreemap;

use super::fixtures::*;
use crate::encode;
use crate::{
    external_path, parse_details, ContentLocation, Ledger, Mapping, TransitionRecord,
    MAX_INLINE_BYTES,
};
use refract_core::checksum::FileChecksum;
use uuid::Uuid;

fn decode_encoded(ledger: &Ledger) -> Ledger {
    let encoded = ledger.encode_details(&FRI).unwrap();
    assert_eq!(encoded.index_version, ledger.index_version());
    let external = encoded.external_file.clone();
    Ledger::decode(&encoded.details, encoded.index_version, &FRI, move |ext| {
        let (path, bytes) = external.expect("only external content is read");
        assert_eq!(ext.path(), path);
        Ok(bytes)
    })
    .unwrap()
}

fn mixed_ledger() -> Ledger {
    let mut ledger = Ledger::from_content_bytes(
        &content(
            vec![crate::proto::Version {
                dataset_version: 2,
                groups: vec![raw_group(vec![d(1, 10, 2)], vec![d(2, 8, 0)])],
            }],
            vec![],
        ),
        0,
    )
    .unwrap();
    ledger
        .push_transition(oc(vec![d(2, 8, 1)], vec![d(3, 7, 0)]))
        .unwrap();
    ledger
        .push_transition(sp(
            vec![d(3, 7, 0), d(4, 3, 3)],
            vec![d(5, 4, 0), d(6, 3, 0)],
            42,
        ))
        .unwrap();
    ledger
        .push_transition(oc(vec![d(20, 5, 5)], vec![]))
        .unwrap();
    ledger
}

#[test]
fn round_trips() {
    for ledger in [Ledger::new(), mixed_ledger()] {
        let back = decode_encoded(&ledger);
        assert_eq!(back, ledger);
        // Encoding is canonical: re-encoding the decoded ledger gives the same bytes.
        assert_eq!(
            back.encode_details(&FRI).unwrap(),
            ledger.encode_details(&FRI).unwrap()
        );
    }
    // A legacy-only ledger stays at index_version 0.
    let legacy = Ledger::from_content_bytes(
        &content(
            vec![crate::proto::Version {
                dataset_version: 2,
                groups: vec![raw_group(vec![d(1, 10, 2)], vec![d(2, 8, 0)])],
            }],
            vec![],
        ),
        0,
    )
    .unwrap();
    let encoded = legacy.encode_details(&FRI).unwrap();
    assert_eq!(encoded.index_version, 0);
    assert_eq!(decode_encoded(&legacy), legacy);
}

#[test]
fn encoding_writes_transitions_in_lineage_order() {
    let stored = tagged(vec![
        raw_oc(vec![d(2, 8, 1)], vec![d(3, 7, 0)]),
        raw_oc(vec![d(1, 8, 0)], vec![d(2, 8, 0)]),
    ]);
    let ledger = Ledger::from_content_bytes(&stored, 1).unwrap();
    let reencoded = ledger.encode_content().unwrap();
    assert_ne!(reencoded, stored);
    assert_eq!(
        reencoded,
        tagged(vec![
            raw_oc(vec![d(1, 8, 0)], vec![d(2, 8, 0)]),
            raw_oc(vec![d(2, 8, 1)], vec![d(3, 7, 0)]),
        ])
    );
}

/// A transition whose bitmap alone exceeds 200 KiB: every other row of a
/// 4M-row fragment survives (bitmap containers of 8 KiB each).
fn large_ledger() -> Ledger {
    let surviving: RoaringTreemap = (0..4_000_000u64)
        .step_by(2)
        .map(|o| 1u64 << 32 | o)
        .collect();
    let record = TransitionRecord::new(
        vec![d(1, 4_000_000, 2_000_000)],
        vec![d(2, 2_000_000, 0)],
        Mapping::OrderedCompaction { surviving },
    )
    .unwrap();
    let mut ledger = Ledger::new();
    ledger.push_transition(record).unwrap();
    ledger
}

#[test]
fn large_content_goes_external_and_round_trips() {
    let ledger = large_ledger();
    let encoded = ledger.encode_details(&FRI).unwrap();
    let (path, bytes) = encoded
        .external_file
        .clone()
        .expect("external above 200 KiB");
    assert_eq!(path, external_path(&FRI));
    assert!(bytes.len() > MAX_INLINE_BYTES);
    assert_eq!(bytes, ledger.encode_content().unwrap());
    assert!(encoded.details.len() < 128);
    match parse_details(&encoded.details, 1, &FRI).unwrap() {
        ContentLocation::External(ext) => {
            assert_eq!(ext.byte_range(), 0..bytes.len() as u64);
        }
        other => panic!("expected external, got {other:?}"),
    }
    assert_eq!(decode_encoded(&ledger), ledger);
}

#[test]
fn inline_limit_is_inclusive() {
    let at_limit = encode::details(vec![0; MAX_INLINE_BYTES], 1, &FRI, &[]);
    assert!(at_limit.external_file.is_none());
    assert!(matches!(
        parse_details(&at_limit.details, 1, &FRI).unwrap(),
        ContentLocation::Inline(c) if c.len() == MAX_INLINE_BYTES
    ));
    let over = encode::details(vec![0; MAX_INLINE_BYTES + 1], 1, &FRI, &[]);
    let (path, bytes) = over.external_file.unwrap();
    assert_eq!(path, external_path(&FRI));
    assert_eq!(bytes.len(), MAX_INLINE_BYTES + 1);
}

#[test]
fn small_content_stays_inline() {
    let encoded = mixed_ledger().encode_details(&FRI).unwrap();
    assert!(encoded.external_file.is_none());
    assert_eq!(encoded.index_version, 1);
}

/// A ledger with an ordered compaction and a checksummed stable partition.
fn checksummed_partition_ledger() -> (Ledger, FileChecksum) {
    let map = vec![7u8; 5000];
    let checksum = FileChecksum::of(&map);
    let partition = TransitionRecord::new(
        vec![d(3, 10, 0)],
        vec![d(4, 6, 0), d(5, 4, 0)],
        Mapping::StablePartition {
            map_id: Uuid::from_u128(0xabc),
            map_size_bytes: map.len() as u64,
            map_checksum: Some(checksum.clone()),
        },
    )
    .unwrap();
    let mut ledger = Ledger::new();
    ledger
        .push_transition(oc(vec![d(1, 10, 2)], vec![d(2, 8, 0)]))
        .unwrap();
    ledger.push_transition(partition).unwrap();
    (ledger, checksum)
}

#[test]
fn row_map_checksums_round_trip_through_the_envelope() {
    let (ledger, checksum) = checksummed_partition_ledger();
    let decoded = decode_encoded(&ledger);
    assert_eq!(decoded, ledger);
    let Mapping::StablePartition { map_checksum, .. } = decoded.transitions()[1].mapping() else {
        panic!("expected the partition second");
    };
    assert_eq!(map_checksum.as_ref(), Some(&checksum));
    // The content alone (what a Lance writer carries forward) has none.
    let content_only = Ledger::from_content_bytes(&ledger.encode_content().unwrap(), 1).unwrap();
    assert!(matches!(
        content_only.transitions()[1].mapping(),
        Mapping::StablePartition {
            map_checksum: None,
            ..
        }
    ));
}

#[test]
fn row_map_checksum_for_an_unknown_map_or_size_is_corrupt() {
    let (ledger, _) = checksummed_partition_ledger();
    let mut details = ledger.encode_details(&FRI).unwrap().details;
    let stray = crate::proto::RowMapChecksums {
        maps: vec![crate::proto::RowMapChecksum {
            map_id: Uuid::from_u128(0xdef).hyphenated().to_string(),
            block_bytes: 1 << 16,
            crc32c: vec![0; 4],
        }],
    };
    prost::encoding::message::encode(crate::proto::ROW_MAP_CHECKSUMS_FIELD, &stray, &mut details);
    let err = Ledger::decode(&details, 1, &FRI, |_| unreachable!()).unwrap_err();
    assert_corrupt_with(&err, "no transition references");

    let mut details = inline_details(ledger.encode_content().unwrap());
    let wrong_size = crate::proto::RowMapChecksums {
        maps: vec![crate::proto::RowMapChecksum {
            map_id: Uuid::from_u128(0xabc).hyphenated().to_string(),
            block_bytes: 1 << 16,
            crc32c: vec![0; 8],
        }],
    };
    prost::encoding::message::encode(
        crate::proto::ROW_MAP_CHECKSUMS_FIELD,
        &wrong_size,
        &mut details,
    );
    let err = Ledger::decode(&details, 1, &FRI, |_| unreachable!()).unwrap_err();
    assert_corrupt_with(&err, "not 5000 bytes");
}

/// Lance's own decoder (lance-table 14.0.2) reads what Refract writes: the
/// same transitions, nothing it cannot interpret.
#[test]
fn lance_decodes_refract_details() {
    use lance_table::system_index::frag_reuse::ledger::FragReuseLedger;
    let (ledger, _) = checksummed_partition_ledger();
    let encoded = ledger.encode_details(&FRI).unwrap();
    let any = prost_types::Any {
        type_url: crate::FRI_INDEX_TYPE.to_string(),
        value: encoded.details,
    };
    let lance = FragReuseLedger::decode_inline(encoded.index_version as i32, &any)
        .unwrap()
        .expect("inline content");
    assert!(!lance.has_unsupported_transitions());
    assert_eq!(lance.transitions().len(), 2);
    for (ours, theirs) in ledger.transitions().iter().zip(lance.transitions()) {
        assert_eq!(ours.sources(), theirs.sources());
        assert_eq!(ours.destinations(), theirs.destinations());
    }
}
