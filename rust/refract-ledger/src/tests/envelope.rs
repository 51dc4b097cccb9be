//! Version gate, details envelope and external content.

use std::cell::Cell;

use refract_core::Error;
use rstest::rstest;

use super::fixtures::*;
use crate::{
    external_path, parse_details, ContentLocation, Ledger, EXTERNAL_FILE_NAME, MAX_EXTERNAL_BYTES,
};

fn never_read(_: &crate::ExternalContent) -> refract_core::Result<Vec<u8>> {
    panic!("external content must not be read")
}

#[rstest]
#[case(0)]
#[case(1)]
fn supported_versions_decode(#[case] version: u32) {
    let details = inline_details(content(vec![], vec![]));
    let ledger = Ledger::decode(&details, version, &FRI, never_read).unwrap();
    assert!(ledger.is_empty());
    assert_eq!(ledger.index_version(), version);
}

#[rstest]
#[case(2)]
#[case(3)]
#[case(u32::MAX)]
fn newer_versions_are_not_supported_before_any_io(#[case] version: u32) {
    // External content with a valid path: the gate must refuse before reading.
    let details = external_details(EXTERNAL_FILE_NAME, 0, 10);
    let err = Ledger::decode(&details, version, &FRI, never_read).unwrap_err();
    let Error::NotSupported { message } = &err else {
        panic!("expected NotSupported, got {err:?}");
    };
    assert!(
        message.contains(&format!("index_version {version}")),
        "{message}"
    );
    assert!(message.contains("Please upgrade"), "{message}");
    // Even garbage details are refused by version first.
    let err = Ledger::decode(&[0xff, 0xff], version, &FRI, never_read).unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }));
    let err = Ledger::from_content_bytes(&[], version).unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }));
}

#[test]
fn tagged_content_under_version_zero_is_corrupt() {
    let bytes = tagged(vec![raw_oc(vec![d(1, 10, 0)], vec![d(2, 10, 0)])]);
    assert_corrupt(&decode_err(&bytes, 0));
    assert!(Ledger::from_content_bytes(&bytes, 1).is_ok());
}

#[test]
fn unknown_envelope_fields_are_skipped_as_lance_skips_them() {
    let mut details = inline_details(content(vec![], vec![]));
    append_bytes_field(&mut details, 9, b"written by a newer Lance");
    prost::encoding::uint32::encode(3, &1, &mut details);
    let ledger = Ledger::decode(&details, 1, &FRI, never_read).unwrap();
    assert!(ledger.is_empty());
}

#[rstest]
#[case::none(vec![])]
#[case::two_inline(vec![1, 1])]
#[case::inline_and_external(vec![1, 2])]
fn details_need_exactly_one_content_field(#[case] fields: Vec<u32>) {
    let mut details = Vec::new();
    for number in fields {
        let payload = if number == 1 {
            Vec::new()
        } else {
            let ext = external_details(EXTERNAL_FILE_NAME, 0, 0);
            // Strip the envelope: the ExternalFile message follows a
            // one-byte key and a one-byte length.
            ext[2..].to_vec()
        };
        append_bytes_field(&mut details, number, &payload);
    }
    let err = Ledger::decode(&details, 0, &FRI, never_read).unwrap_err();
    assert_corrupt(&err);
}

#[test]
fn external_content_is_read_once_and_checked() {
    let ledger_content = tagged(vec![raw_oc(vec![d(1, 10, 2)], vec![d(2, 8, 0)])]);
    let size = ledger_content.len() as u64;
    let path = external_path(&FRI);
    let details = external_details(EXTERNAL_FILE_NAME, 5, size);

    let calls = Cell::new(0);
    let ledger = Ledger::decode(&details, 1, &FRI, |ext| {
        calls.set(calls.get() + 1);
        assert_eq!(ext.path(), path);
        assert_eq!(ext.byte_range(), 5..5 + size);
        Ok(ledger_content.clone())
    })
    .unwrap();
    assert_eq!(calls.get(), 1);
    assert_eq!(
        ledger,
        Ledger::from_content_bytes(&ledger_content, 1).unwrap()
    );

    // A short or long read is corrupt.
    for delta in [-1i64, 1] {
        let len = (size as i64 + delta) as usize;
        let err = Ledger::decode(&details, 1, &FRI, |_| Ok(vec![0; len])).unwrap_err();
        assert_corrupt(&err);
    }
}

#[rstest]
#[case::overflow(u64::MAX, 2)]
#[case::oversized(0, MAX_EXTERNAL_BYTES + 1)]
fn external_range_is_checked_before_io(#[case] offset: u64, #[case] size: u64) {
    let details = external_details(EXTERNAL_FILE_NAME, offset, size);
    let err = Ledger::decode(&details, 1, &FRI, never_read).unwrap_err();
    assert_corrupt(&err);
    assert_corrupt(&parse_details(&details, 1, &FRI).unwrap_err());
}

#[rstest]
#[case::parent("../../etc/passwd")]
#[case::absolute("/etc/passwd")]
#[case::sibling_fri("../00000000-0000-0000-0000-000000000001/details.binpb")]
fn external_path_escape_is_refused_before_io(#[case] path: &str) {
    let details = external_details(path, 0, 4);
    let err = Ledger::decode(&details, 1, &FRI, never_read).unwrap_err();
    assert_corrupt(&err);
    assert!(err.to_string().contains(&format!("{path:?}")), "{err}");
}

#[test]
fn parse_details_borrows_inline_content() {
    let c = content(vec![], vec![raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)])]);
    let details = inline_details(c.clone());
    assert_eq!(
        parse_details(&details, 1, &FRI).unwrap(),
        ContentLocation::Inline(&c[..])
    );
}

#[test]
fn malformed_details_are_corrupt() {
    assert_corrupt(&parse_details(&[0x0a, 0x05, 0x00], 0, &FRI).unwrap_err());
    // `inline` with a varint wire type.
    assert_corrupt(&parse_details(&[0x08, 0x01], 0, &FRI).unwrap_err());
}
