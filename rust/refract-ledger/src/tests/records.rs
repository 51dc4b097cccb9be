//! Per-record rules: digests, row conservation, bitmaps, mappings, unknown
//! transitions. Each rule is checked on stored bytes (Corrupt) and, where a
//! writer can express it, on `TransitionRecord::new` (InvalidInput).

use prost::Message;
use refract_core::Error;
use roaring::RoaringTreemap;
use rstest::rstest;
use uuid::Uuid;

use super::fixtures::*;
use crate::{FragmentDigest, Ledger, Mapping, TransitionRecord};

const MAP: &str = "6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5";

#[rstest]
#[case::id_u32_max(vec![d(u32::MAX as u64, 4, 0)], vec![d(2, 4, 0)], "source fragment id 4294967295")]
#[case::id_huge(vec![d(u64::MAX, 4, 0)], vec![d(2, 4, 0)], "source fragment id 18446744073709551615")]
#[case::dest_id_u32_max(vec![d(1, 4, 0)], vec![d(u32::MAX as u64, 4, 0)], "destination fragment id 4294967295")]
#[case::rows_over_u32(vec![d(1, u32::MAX as u64 + 1, u32::MAX as u64 + 1)], vec![], "physical rows, more than")]
#[case::deleted_over_physical(vec![d(1, 4, 5)], vec![], "5 deleted rows but only 4")]
#[case::duplicate_source(vec![d(1, 4, 0), d(1, 4, 0)], vec![d(2, 8, 0)], "source fragment 1 is listed twice")]
#[case::duplicate_destination(vec![d(1, 8, 0)], vec![d(2, 4, 0), d(2, 4, 0)], "destination fragment 2 is listed twice")]
#[case::destination_with_deletions(vec![d(1, 8, 0)], vec![d(2, 8, 1)], "written without deletions")]
#[case::no_sources(vec![], vec![], "at least one source")]
#[case::rows_not_conserved(vec![d(1, 8, 2)], vec![d(2, 7, 0)], "row counts differ")]
#[case::rows_invented(vec![d(1, 8, 0)], vec![d(2, 4, 0), d(3, 5, 0)], "row counts differ")]
fn bad_digests_are_rejected(
    #[case] sources: Vec<FragmentDigest>,
    #[case] destinations: Vec<FragmentDigest>,
    #[case] needle: &str,
) {
    // Stored: bitmap built from whatever the digests claim (may be empty).
    let bitmap = bitmap_bytes(&survivors_clamped(&sources));
    let stored = tagged(vec![raw_with_bitmap(
        sources.clone(),
        destinations.clone(),
        bitmap,
    )]);
    assert_corrupt_with(&decode_err(&stored, 1), needle);
    // Same rule through the legacy path.
    let legacy = content(
        vec![crate::proto::Version {
            dataset_version: 1,
            groups: vec![crate::proto::Group {
                changed_row_addrs: bitmap_bytes(&survivors_clamped(&sources)),
                old_fragments: sources.clone(),
                new_fragments: destinations.clone(),
            }],
        }],
        vec![],
    );
    assert_corrupt_with(&decode_err(&legacy, 0), needle);
    // Writer input.
    let surviving = survivors_clamped(&sources);
    let err = TransitionRecord::new(
        sources,
        destinations,
        Mapping::OrderedCompaction { surviving },
    )
    .unwrap_err();
    assert_invalid_input(&err);
    assert!(err.to_string().contains(needle), "{err}");
}

/// Like `survivors` but tolerant of inconsistent digests.
fn survivors_clamped(sources: &[FragmentDigest]) -> RoaringTreemap {
    let mut t = RoaringTreemap::new();
    for s in sources.iter().filter(|s| s.id < u32::MAX as u64) {
        let base = s.id << 32;
        let physical = s.physical_rows.min(u32::MAX as u64);
        t.insert_range(base + s.num_deleted_rows.min(physical)..base + physical);
    }
    t
}

#[test]
fn all_deleted_source_with_no_destinations_is_valid() {
    let stored = tagged(vec![raw_oc(vec![d(1, 5, 5)], vec![])]);
    let ledger = Ledger::from_content_bytes(&stored, 1).unwrap();
    assert_eq!(ledger.transitions().len(), 1);
    assert!(ledger.transitions()[0].destinations().is_empty());
}

fn addrs(values: &[(u64, u64)]) -> RoaringTreemap {
    values.iter().map(|(f, o)| f << 32 | o).collect()
}

#[rstest]
#[case::outside_sources(addrs(&[(1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (9, 0)]), "3 fragments but the transition has 2 sources")]
#[case::beyond_physical_rows(addrs(&[(1, 1), (1, 2), (1, 4), (2, 0), (2, 1)]), "offset 4 of fragment 1 is beyond")]
#[case::too_few_survivors(addrs(&[(1, 1), (1, 2), (2, 0), (2, 1)]), "keeps 2 rows of fragment 1")]
#[case::too_many_survivors(addrs(&[(1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1)]), "keeps 4 rows of fragment 1")]
#[case::missing_source(addrs(&[(1, 1), (1, 2), (1, 3)]), "keeps 3 rows but the sources have 5")]
#[case::foreign_fragment(addrs(&[(1, 1), (1, 2), (1, 3), (9, 0), (9, 1)]), "fragment 9, which is not a source")]
fn bitmap_must_match_sources(#[case] bitmap: RoaringTreemap, #[case] needle: &str) {
    // Fragment 1: 4 rows, 1 deleted; fragment 2: 2 rows, none deleted. Each
    // bitmap breaks exactly one rule and is otherwise consistent.
    let sources = vec![d(1, 4, 1), d(2, 2, 0)];
    let destinations = vec![d(3, 5, 0)];
    let stored = tagged(vec![raw_with_bitmap(
        sources.clone(),
        destinations.clone(),
        bitmap_bytes(&bitmap),
    )]);
    assert_corrupt_with(&decode_err(&stored, 1), needle);
    let err = TransitionRecord::new(
        sources,
        destinations,
        Mapping::OrderedCompaction { surviving: bitmap },
    )
    .unwrap_err();
    assert_invalid_input(&err);
    if needle != "3 fragments but the transition has 2 sources" {
        // The header scan only runs on stored bytes; the typed check reports
        // the same fact without the fragment count.
        assert!(err.to_string().contains(needle), "{err}");
    }
}

#[test]
fn bitmap_offsets_beyond_physical_rows_in_a_later_container_are_rejected() {
    // Count matches (3 live rows) but one offset lies in container 1 while the
    // fragment has only 3 physical rows.
    let sources = vec![d(1, 3, 0)];
    let bitmap = addrs(&[(1, 0), (1, 1), (1, 70_000)]);
    let stored = tagged(vec![raw_with_bitmap(
        sources,
        vec![d(2, 3, 0)],
        bitmap_bytes(&bitmap),
    )]);
    assert_corrupt(&decode_err(&stored, 1));
}

fn valid_bitmap() -> Vec<u8> {
    bitmap_bytes(&survivors(&[d(1, 4, 0)]))
}

#[rstest]
#[case::empty(vec![], "truncated")]
#[case::truncated(valid_bitmap()[..valid_bitmap().len() - 1].to_vec(), "truncated")]
#[case::trailing({ let mut b = valid_bitmap(); b.push(0); b }, "1 trailing bytes")]
#[case::bad_cookie({ let mut b = valid_bitmap(); b[12] ^= 0xff; b }, "unknown roaring cookie")]
#[case::huge_partition_count({ let mut b = valid_bitmap(); b[..8].copy_from_slice(&u64::MAX.to_le_bytes()); b }, "18446744073709551615 fragments")]
#[case::huge_container_count({
    // Partition count 1, key 1, no-run cookie claiming 65,536 containers.
    let mut b = 1u64.to_le_bytes().to_vec();
    b.extend(1u32.to_le_bytes());
    b.extend(12346u32.to_le_bytes());
    b.extend(65_536u32.to_le_bytes());
    b
}, "truncated")]
#[case::over_container_limit({
    let mut b = 1u64.to_le_bytes().to_vec();
    b.extend(1u32.to_le_bytes());
    b.extend(12346u32.to_le_bytes());
    b.extend(u32::MAX.to_le_bytes());
    b
}, "too many containers")]
fn malformed_bitmaps_are_corrupt(#[case] bitmap: Vec<u8>, #[case] needle: &str) {
    let stored = tagged(vec![raw_with_bitmap(
        vec![d(1, 4, 0)],
        vec![d(2, 4, 0)],
        bitmap,
    )]);
    assert_corrupt_with(&decode_err(&stored, 1), needle);
}

#[test]
fn run_encoded_and_array_encoded_bitmaps_decode_to_the_same_record() {
    let sources = vec![d(1, 3000, 0)];
    let plain = survivors(&sources);
    let mut runs = plain.clone();
    // Force run containers in the serialized form.
    let runs_bitmaps: Vec<_> = runs
        .bitmaps()
        .map(|(k, b)| {
            let mut b = b.clone();
            b.optimize();
            (k, b)
        })
        .collect();
    runs = RoaringTreemap::from_bitmaps(runs_bitmaps);
    let mut no_runs = plain.clone();
    let no_runs_bitmaps: Vec<_> = no_runs
        .bitmaps()
        .map(|(k, b)| {
            let mut b = b.clone();
            b.remove_run_compression();
            (k, b)
        })
        .collect();
    no_runs = RoaringTreemap::from_bitmaps(no_runs_bitmaps);
    let a = bitmap_bytes(&runs);
    let b = bitmap_bytes(&no_runs);
    assert_ne!(
        a, b,
        "the two serializations must differ for this test to mean anything"
    );
    let la = Ledger::from_content_bytes(
        &tagged(vec![raw_with_bitmap(
            sources.clone(),
            vec![d(2, 3000, 0)],
            a,
        )]),
        1,
    )
    .unwrap();
    let lb = Ledger::from_content_bytes(
        &tagged(vec![raw_with_bitmap(sources, vec![d(2, 3000, 0)], b)]),
        1,
    )
    .unwrap();
    assert_eq!(
        la.transitions()[0].fingerprint(),
        lb.transitions()[0].fingerprint()
    );
    assert_eq!(la, lb);
}

#[test]
fn stable_partition_decodes() {
    let stored = tagged(vec![raw_sp(
        vec![d(1, 10, 2)],
        vec![d(2, 5, 0), d(3, 3, 0)],
        MAP,
        512,
    )]);
    let ledger = Ledger::from_content_bytes(&stored, 1).unwrap();
    assert_eq!(
        ledger.transitions()[0].mapping(),
        &Mapping::StablePartition {
            map_id: Uuid::parse_str(MAP).unwrap(),
            map_size_bytes: 512,
            map_checksum: None,
        }
    );
    assert_eq!(ledger.transitions()[0].dataset_version(), None);
}

#[test]
fn a_row_map_in_another_base_path_is_not_supported() {
    let mut transition = raw_sp(vec![d(1, 10, 2)], vec![d(2, 8, 0)], MAP, 512);
    if let Some(crate::proto::transition::Mapping::StablePartition(sp)) = &mut transition.mapping {
        sp.base_id = Some(1);
    }
    let err = decode_err(&tagged(vec![transition]), 1);
    assert!(
        matches!(&err, Error::NotSupported { message } if message.contains("base path") && !message.contains('\n')),
        "{err:?}"
    );
}

#[rstest]
#[case::parent("../escape")]
#[case::slash("a/b")]
#[case::backslash("..\\x")]
fn stored_path_like_map_id_is_corrupt(#[case] map_id: &str) {
    let stored = tagged(vec![raw_sp(vec![d(1, 4, 0)], vec![d(2, 4, 0)], map_id, 10)]);
    let err = decode_err(&stored, 1);
    let named = format!("{:?}", format!("_fri/{map_id}"));
    assert!(
        matches!(&err, Error::Corrupt { what, message } if what == "FRI ledger" && message.contains(&named)),
        "{err:?}"
    );
}

#[rstest]
#[case::not_uuid("not-a-uuid", 10, 1)]
#[case::empty("", 10, 1)]
#[case::zero_size(MAP, 0, 1)]
#[case::no_destinations(MAP, 10, 0)]
fn bad_stable_partitions_are_corrupt(#[case] map_id: &str, #[case] size: u64, #[case] dests: u64) {
    let (sources, destinations) = if dests == 0 {
        (vec![d(1, 4, 4)], vec![])
    } else {
        (vec![d(1, 4, 0)], vec![d(2, 4, 0)])
    };
    let stored = tagged(vec![raw_sp(sources, destinations, map_id, size)]);
    assert_corrupt(&decode_err(&stored, 1));
}

#[test]
fn writer_stable_partition_rules_are_invalid_input() {
    let id = Uuid::parse_str(MAP).unwrap();
    let err = TransitionRecord::new(
        vec![d(1, 4, 0)],
        vec![d(2, 4, 0)],
        Mapping::StablePartition {
            map_id: id,
            map_size_bytes: 0,
            map_checksum: None,
        },
    )
    .unwrap_err();
    assert_invalid_input(&err);
    // The edge: 65,535 destinations (labels 0..=65,534) are fine, one more is not.
    let partition = |n: u64| {
        TransitionRecord::new(
            vec![d(1, n, 0)],
            (0..n).map(|i| d(100 + i, 1, 0)).collect(),
            Mapping::StablePartition {
                map_id: id,
                map_size_bytes: 1,
                map_checksum: None,
            },
        )
    };
    let limit = u64::from(crate::MAX_PARTITION_DESTINATIONS);
    assert_eq!(limit, 65_535);
    assert!(partition(limit).is_ok());
    let err = partition(limit + 1).unwrap_err();
    assert_invalid_input(&err);
    assert!(err.to_string().contains("it needs 1 to 65535"), "{err}");
    let too_many: Vec<_> = (0..65_537u64).map(|i| d(100 + i, 1, 0)).collect();
    let err = TransitionRecord::new(
        vec![d(1, 65_537, 0)],
        too_many,
        Mapping::StablePartition {
            map_id: id,
            map_size_bytes: 1,
            map_checksum: None,
        },
    )
    .unwrap_err();
    assert_invalid_input(&err);
}

#[test]
fn duplicate_map_id_across_transitions_is_corrupt() {
    let stored = tagged(vec![
        raw_sp(vec![d(1, 4, 0)], vec![d(2, 4, 0)], MAP, 10),
        raw_sp(vec![d(3, 4, 0)], vec![d(4, 4, 0)], MAP, 10),
    ]);
    assert_corrupt(&decode_err(&stored, 1));
}

fn encoded(t: &crate::proto::Transition) -> Vec<u8> {
    t.encode_to_vec()
}

#[test]
fn transition_without_mapping_is_corrupt() {
    let mut t = raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]);
    t.mapping = None;
    assert_corrupt(&decode_err(
        &content_with_raw_transitions(&[encoded(&t)]),
        1,
    ));
}

#[rstest]
#[case::duplicate_ordered(3)]
#[case::conflicting_partition(4)]
fn transition_with_two_mappings_is_corrupt(#[case] extra: u32) {
    let t = raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]);
    let mut bytes = encoded(&t);
    let second = if extra == 3 {
        crate::proto::OrderedCompaction {
            changed_row_addrs: bitmap_bytes(&survivors(&[d(1, 4, 0)])),
        }
        .encode_to_vec()
    } else {
        crate::proto::StablePartition {
            map_id: MAP.into(),
            map_size_bytes: 3,
            base_id: None,
        }
        .encode_to_vec()
    };
    append_bytes_field(&mut bytes, extra, &second);
    assert_corrupt(&decode_err(&content_with_raw_transitions(&[bytes]), 1));
}

#[rstest]
#[case::future_mapping(6)]
#[case::future_metadata(15)]
fn transition_with_unknown_field_is_dropped_and_flagged(#[case] number: u32) {
    // A future mapping: no known mapping field, one unknown field.
    let mut future = raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]);
    if number == 6 {
        future.mapping = None;
    }
    let mut future = encoded(&future);
    append_bytes_field(&mut future, number, b"opaque");
    let known = encoded(&raw_oc(vec![d(5, 4, 0)], vec![d(6, 4, 0)]));
    let ledger =
        Ledger::from_content_bytes(&content_with_raw_transitions(&[future, known]), 1).unwrap();
    assert!(ledger.has_unsupported_transitions());
    assert_eq!(ledger.transitions().len(), 1);
    assert_eq!(ledger.transitions()[0].sources()[0].id, 5);
    assert!(!ledger.lineage().contains_fragment(1));
    assert!(!ledger.is_empty());
    // Writers must not drop the unknown record by re-encoding.
    assert!(matches!(
        ledger.encode_details(&FRI),
        Err(Error::NotSupported { .. })
    ));
    let mut writer = ledger.clone();
    let push = writer.push_transition(oc(vec![d(7, 1, 0)], vec![d(8, 1, 0)]));
    assert!(matches!(push, Err(Error::NotSupported { .. })));
    assert_eq!(writer, ledger);
    assert!(matches!(
        writer.remove_transitions([]),
        Err(Error::NotSupported { .. })
    ));
}

#[test]
fn unknown_envelope_fields_are_ignored() {
    let mut bytes = tagged(vec![raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)])]);
    append_bytes_field(&mut bytes, 9, b"future envelope");
    let ledger = Ledger::from_content_bytes(&bytes, 1).unwrap();
    assert!(!ledger.has_unsupported_transitions());
    assert_eq!(ledger.transitions().len(), 1);
}

#[rstest]
#[case::truncated(tagged(vec![raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)])]).split_last().unwrap().1.to_vec())]
#[case::wrong_wire_type(vec![0x10, 0x01])]
#[case::garbage(vec![0xff; 7])]
fn malformed_content_is_corrupt(#[case] bytes: Vec<u8>) {
    assert_corrupt(&decode_err(&bytes, 1));
}
