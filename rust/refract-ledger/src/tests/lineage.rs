//! Lineage rules and ordering, legacy lifting and fingerprints.

use rstest::rstest;

use super::fixtures::*;
use crate::proto;
use crate::{lift_legacy, FragmentDigest, Ledger, Mapping, TransitionRecord};

fn ids(records: &[TransitionRecord]) -> Vec<u64> {
    records.iter().map(|t| t.sources()[0].id).collect()
}

#[test]
fn independent_transitions_keep_serialized_order() {
    let order = [30u64, 10, 50, 20, 40];
    let stored = tagged(
        order
            .iter()
            .map(|&s| raw_oc(vec![d(s, 4, 1)], vec![d(s + 1, 3, 0)]))
            .collect(),
    );
    let ledger = Ledger::from_content_bytes(&stored, 1).unwrap();
    assert_eq!(ids(ledger.transitions()), order.to_vec());
}

#[test]
fn chain_serialized_out_of_order_is_sorted() {
    // 1 -> 2 -> 3 -> 4, serialized as [2->3, 3->4, independent 9->10, 1->2].
    let stored = tagged(vec![
        raw_oc(vec![d(2, 8, 1)], vec![d(3, 7, 0)]),
        raw_oc(vec![d(3, 7, 2)], vec![d(4, 5, 0)]),
        raw_oc(vec![d(9, 2, 0)], vec![d(10, 2, 0)]),
        raw_oc(vec![d(1, 8, 0)], vec![d(2, 8, 0)]),
    ]);
    let ledger = Ledger::from_content_bytes(&stored, 1).unwrap();
    // Kahn picks the earliest ready record: 9->10 (serialized 2) is ready
    // before 1->2 (serialized 3); 2->3 waits for 1->2.
    assert_eq!(ids(ledger.transitions()), vec![9, 1, 2, 3]);
    let lineage = ledger.lineage();
    assert_eq!(lineage.producer_of(3).unwrap().sources()[0].id, 2);
    assert_eq!(lineage.consumer_of(3).unwrap().destinations()[0].id, 4);
    assert!(lineage.producer_of(1).is_none());
    assert!(lineage.consumer_of(4).is_none());
    assert!(lineage.contains_fragment(4) && !lineage.contains_fragment(5));
    assert_eq!(lineage.len(), 4);
    let walked: Vec<u64> = lineage.iter().map(|t| t.sources()[0].id).collect();
    assert_eq!(walked, vec![9, 1, 2, 3]);
}

#[rstest]
#[case::duplicate_producer(vec![
    raw_oc(vec![d(1, 4, 0)], vec![d(3, 4, 0)]),
    raw_oc(vec![d(2, 4, 0)], vec![d(3, 4, 0)]),
], "fragment 3 is produced by more than one")]
#[case::duplicate_consumer(vec![
    raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]),
    raw_oc(vec![d(1, 4, 0)], vec![d(3, 4, 0)]),
], "fragment 1 is consumed by more than one")]
#[case::self_cycle(vec![raw_oc(vec![d(1, 4, 0)], vec![d(1, 4, 0)])], "both produces and consumes fragment 1")]
#[case::two_cycle(vec![
    raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]),
    raw_oc(vec![d(2, 4, 0)], vec![d(1, 4, 0)]),
], "cycle among 2")]
#[case::three_cycle(vec![
    raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]),
    raw_oc(vec![d(2, 4, 0)], vec![d(3, 4, 0)]),
    raw_oc(vec![d(3, 4, 0)], vec![d(1, 4, 0)]),
], "cycle among 3")]
#[case::inconsistent_physical_rows(vec![
    raw_oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]),
    raw_oc(vec![d(2, 5, 1)], vec![d(3, 4, 0)]),
], "inconsistent physical_rows for fragment 2")]
fn lineage_violations_are_corrupt(
    #[case] transitions: Vec<proto::Transition>,
    #[case] needle: &str,
) {
    assert_corrupt_with(&decode_err(&tagged(transitions), 1), needle);
}

#[test]
fn deletions_may_grow_between_transitions() {
    let stored = tagged(vec![
        raw_oc(vec![d(1, 6, 0)], vec![d(2, 6, 0)]),
        raw_oc(vec![d(2, 6, 4)], vec![d(3, 2, 0)]),
    ]);
    assert!(Ledger::from_content_bytes(&stored, 1).is_ok());
}

#[test]
fn push_transition_enforces_lineage_and_leaves_ledger_unchanged() {
    let mut ledger = Ledger::new();
    assert_eq!(ledger.index_version(), 0);
    ledger
        .push_transition(oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]))
        .unwrap();
    assert_eq!(ledger.index_version(), 1);
    let before = ledger.clone();
    for bad in [
        oc(vec![d(1, 4, 0)], vec![d(3, 4, 0)]), // 1 consumed twice
        oc(vec![d(5, 4, 0)], vec![d(2, 4, 0)]), // 2 produced twice
        oc(vec![d(2, 5, 0)], vec![d(6, 5, 0)]), // 2 has 4 physical rows
        oc(vec![d(2, 4, 0)], vec![d(1, 4, 0)]), // cycle
    ] {
        let err = ledger.push_transition(bad).unwrap_err();
        assert_invalid_input(&err);
        assert_eq!(ledger, before);
    }
    let partition = sp(vec![d(2, 4, 0)], vec![d(7, 2, 0), d(8, 2, 0)], 77);
    ledger.push_transition(partition).unwrap();
    let dup_map = sp(vec![d(7, 2, 0)], vec![d(9, 2, 0)], 77);
    assert_invalid_input(&ledger.push_transition(dup_map).unwrap_err());
    assert_eq!(ledger.transitions().len(), 2);
}

#[test]
fn remove_transitions_trims_by_fingerprint() {
    let mut ledger = Ledger::new();
    let a = oc(vec![d(1, 4, 0)], vec![d(2, 4, 0)]);
    let b = oc(vec![d(2, 4, 1)], vec![d(3, 3, 0)]);
    let c = oc(vec![d(10, 4, 0)], vec![d(11, 4, 0)]);
    for t in [a.clone(), b.clone(), c.clone()] {
        ledger.push_transition(t).unwrap();
    }
    assert_eq!(
        ledger
            .remove_transitions([a.fingerprint(), c.fingerprint()])
            .unwrap(),
        2
    );
    assert_eq!(ledger.transitions(), std::slice::from_ref(&b));
    assert!(ledger.lineage().producer_of(2).is_none());
    assert_eq!(ledger.remove_transitions([a.fingerprint()]).unwrap(), 0);
    assert_eq!(ledger.remove_transitions([b.fingerprint()]).unwrap(), 1);
    assert!(ledger.is_empty());
    // Draining keeps the ledger tagged.
    assert_eq!(ledger.index_version(), 1);
}

fn legacy_content() -> Vec<u8> {
    content(
        vec![
            proto::Version {
                dataset_version: 5,
                groups: vec![
                    raw_group(vec![d(1, 10, 3), d(2, 5, 0)], vec![d(3, 12, 0)]),
                    raw_group(vec![d(4, 6, 6)], vec![]),
                ],
            },
            proto::Version {
                dataset_version: 8,
                groups: vec![raw_group(vec![d(3, 12, 2)], vec![d(5, 10, 0)])],
            },
        ],
        vec![],
    )
}

#[test]
fn legacy_groups_lift_to_transitions_with_equal_fingerprints() {
    let legacy = Ledger::from_content_bytes(&legacy_content(), 0).unwrap();
    assert_eq!(legacy.index_version(), 0);
    assert_eq!(legacy.legacy_versions().len(), 2);
    let lifted = lift_legacy(&legacy.legacy_versions()[0]);
    assert_eq!(lifted.len(), 2);
    assert!(lifted.iter().all(|t| t.dataset_version() == Some(5)));

    // The equivalent tagged transition (which records no dataset version)
    // has the same fingerprint.
    let equivalent = TransitionRecord::new(
        vec![d(1, 10, 3), d(2, 5, 0)],
        vec![d(3, 12, 0)],
        Mapping::OrderedCompaction {
            surviving: survivors(&[d(1, 10, 3), d(2, 5, 0)]),
        },
    )
    .unwrap();
    assert_eq!(lifted[0].fingerprint(), equivalent.fingerprint());
    assert_eq!(lifted[0].sources(), equivalent.sources());
    assert_ne!(lifted[0].fingerprint(), lifted[1].fingerprint());

    // Lineage spans legacy groups: fragment 3 goes from group 0 to version 8.
    let lineage = legacy.lineage();
    assert_eq!(
        lineage.producer_of(3).unwrap().fingerprint(),
        equivalent.fingerprint()
    );
    assert_eq!(lineage.consumer_of(3).unwrap().dataset_version(), Some(8));
    assert_eq!(equivalent.dataset_version(), None);
    assert_eq!(lineage.len(), 3);
}

#[test]
fn tagged_transition_may_continue_a_legacy_chain() {
    let mut ledger = Ledger::from_content_bytes(&legacy_content(), 0).unwrap();
    // Fragment 5 was produced by the second legacy version with 10 rows.
    ledger
        .push_transition(oc(vec![d(5, 10, 1)], vec![d(6, 9, 0)]))
        .unwrap();
    assert_eq!(ledger.index_version(), 1);
    assert_eq!(
        ledger.lineage().consumer_of(5).unwrap().destinations()[0].id,
        6
    );
    // A transition re-consuming a legacy source is a duplicate consumer.
    assert_invalid_input(
        &ledger
            .push_transition(oc(vec![d(1, 10, 3)], vec![d(7, 7, 0)]))
            .unwrap_err(),
    );
    // Trim can remove legacy groups by fingerprint too.
    let first = lift_legacy(&ledger.legacy_versions()[0]);
    let fps: Vec<_> = first.iter().map(|t| *t.fingerprint()).collect();
    assert_eq!(ledger.remove_transitions(&fps).unwrap(), 2);
    assert_eq!(ledger.legacy_versions().len(), 1);
    assert_eq!(ledger.legacy_versions()[0].dataset_version(), 8);
}

#[test]
fn fingerprint_covers_content_only() {
    let sources = vec![d(1, 10, 3)];
    let make = |_attempt: u64, dest: Vec<FragmentDigest>| {
        TransitionRecord::new(
            sources.clone(),
            dest,
            Mapping::OrderedCompaction {
                surviving: survivors(&sources),
            },
        )
        .unwrap()
    };
    let a = make(1, vec![d(2, 7, 0)]);
    assert_eq!(a.fingerprint(), make(2, vec![d(2, 7, 0)]).fingerprint());
    assert_ne!(a.fingerprint(), make(1, vec![d(3, 7, 0)]).fingerprint());
    assert_ne!(
        a.fingerprint(),
        make(1, vec![d(2, 3, 0), d(3, 4, 0)]).fingerprint()
    );
    let partition = sp(sources.clone(), vec![d(2, 7, 0)], 1);
    assert_ne!(a.fingerprint(), partition.fingerprint());
    // The row map's checksum is not content: Lance's messages do not carry it.
    let checksummed = TransitionRecord::new(
        sources.clone(),
        vec![d(2, 7, 0)],
        Mapping::StablePartition {
            map_id: uuid::Uuid::from_u128(1),
            map_size_bytes: 4096,
            map_checksum: Some(refract_core::checksum::FileChecksum::of(&[0u8; 4096])),
        },
    )
    .unwrap();
    assert_eq!(partition.fingerprint(), checksummed.fingerprint());
    assert_ne!(
        partition.fingerprint(),
        sp(sources, vec![d(2, 7, 0)], 2).fingerprint()
    );
    assert_eq!(crate::fingerprint_hex(a.fingerprint()).len(), 64);
}
