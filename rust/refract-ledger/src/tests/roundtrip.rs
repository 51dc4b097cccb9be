//! decode(encode(x)) == x, canonical encoding and the inline/external split.

use roaring::RoaringTreemap;

use super::fixtures::*;
use crate::encode;
use crate::{
    external_path, parse_details, ContentLocation, Ledger, Mapping, TransitionRecord,
    MAX_INLINE_BYTES,
};

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
        3,
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
    let at_limit = encode::details(vec![0; MAX_INLINE_BYTES], 1, &FRI);
    assert!(at_limit.external_file.is_none());
    assert!(matches!(
        parse_details(&at_limit.details, 1, &FRI).unwrap(),
        ContentLocation::Inline(c) if c.len() == MAX_INLINE_BYTES
    ));
    let over = encode::details(vec![0; MAX_INLINE_BYTES + 1], 1, &FRI);
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
