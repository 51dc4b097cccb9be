//! Arbitrary and mutated bytes never panic.

use proptest::prelude::*;

use super::fixtures::*;
use crate::{parse_details, ContentLocation, Ledger};

/// A valid tagged ledger with legacy groups, both mapping kinds and a chain.
pub(super) fn valid_content() -> Vec<u8> {
    content(
        vec![crate::proto::Version {
            dataset_version: 2,
            groups: vec![raw_group(
                vec![d(1, 70_000, 5), d(7, 3, 1)],
                vec![d(2, 69_997, 0)],
            )],
        }],
        vec![
            raw_oc(
                vec![d(2, 69_997, 10)],
                vec![d(3, 40_000, 0), d(4, 29_987, 0)],
            ),
            raw_sp(
                vec![d(3, 40_000, 0)],
                vec![d(5, 20_000, 0), d(6, 20_000, 0)],
                "6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5",
                99,
            ),
        ],
    )
}

/// Decodes through every entry point; only the absence of panics matters.
fn decode_everything(bytes: &[u8]) {
    for version in [0, 1] {
        let _ = Ledger::from_content_bytes(bytes, version);
        if let Ok(ContentLocation::External(ext)) = parse_details(bytes, version, &FRI) {
            let _ = ext.verify_received(bytes);
        }
        let _ = Ledger::decode(bytes, version, &FRI, |_| Ok(bytes.to_vec()));
    }
}

#[test]
fn valid_fixture_decodes() {
    let ledger = Ledger::from_content_bytes(&valid_content(), 1).unwrap();
    assert_eq!(ledger.transitions().len(), 2);
    assert_eq!(ledger.lineage().len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_everything(&bytes);
    }

    #[test]
    fn single_byte_mutations_never_panic(position in any::<prop::sample::Index>(), value in any::<u8>()) {
        let mut bytes = valid_content();
        let i = position.index(bytes.len());
        bytes[i] = value;
        decode_everything(&bytes);
        let details = inline_details_bytes(&bytes);
        decode_everything(&details);
    }

    #[test]
    fn truncations_never_panic(cut in any::<prop::sample::Index>()) {
        let bytes = valid_content();
        decode_everything(&bytes[..cut.index(bytes.len())]);
    }
}

/// Wraps (possibly corrupt) content as the inline field of details.
fn inline_details_bytes(content: &[u8]) -> Vec<u8> {
    let mut details = Vec::new();
    append_bytes_field(&mut details, 1, content);
    details
}
