//! Feature-flag fencing and the write gate on tables with a version-1 FRI
//! history: one test per row of the classification table in docs/fri.md.

mod support;

use refract_core::Error;
use refract_ledger::flags::{ClientFeatures, FLAG_FRAGMENT_REUSE_INDEX, FLAG_UNKNOWN};
use refract_ledger::{FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord};
use refract_optimize::fri::{
    deferred_remap_hook, fri_uuid, legacy_deferred_remap_hook, load_ledger, new_fri_entry,
    preserve_history,
};
use refract_table::io::manifest_path;
use refract_table::transaction::{Operation, Transaction};
use refract_table::{Dataset, Manifest, OpenOptions, WriteOptions};
use roaring::RoaringTreemap;
use rstest::rstest;
use support::fri::*;
use support::*;

const FRI: u64 = FLAG_FRAGMENT_REUSE_INDEX;

/// Fragments 1..=6 of 100 rows, an index covering 3..=6, and a deferred
/// compaction of the tail [5, 6] (so the table is tagged, fragment 7 is in
/// the history and no fragment was relabelled): fragments 1, 2, 3, 4, 7.
async fn tagged_table(name: &str) -> Dataset {
    let mut dataset = dataset_with_rows(name, 600, 100).await;
    add_user_index(&mut dataset, "by_id", &[3, 4, 5, 6]).await;
    let groups = plan_rewrite(&dataset, &[vec![5, 6]], 1).await;
    let hook = deferred_remap_hook();
    commit_rewrite(&dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap()
}

fn flags(dataset: &Dataset) -> (u64, u64) {
    (
        dataset.manifest().reader_flags & FRI,
        dataset.manifest().writer_flags & FRI,
    )
}

#[tokio::test]
async fn first_tagged_commit_sets_both_flags() {
    let mut dataset = dataset_with_rows("flags", 400, 100).await;
    add_user_index(&mut dataset, "by_id", &[1, 2]).await;
    assert_eq!(flags(&dataset), (0, 0));
    let tagged = tagged_table("flags2").await;
    assert_eq!(flags(&tagged), (FRI, FRI));
    let (entry, ledger) = load_ledger(&tagged).await.unwrap().unwrap();
    assert_eq!(entry.index_version, 1);
    assert_eq!(ledger.transitions().len(), 1);
    assert!(entry.fields.is_empty());
    // Lance's shape: the bitmap holds every fragment the history produced.
    let produced: roaring::RoaringBitmap = ledger.transitions()[0]
        .destinations()
        .iter()
        .map(|d| d.id as u32)
        .collect();
    assert_eq!(entry.fragment_bitmap, Some(produced));
    assert_eq!(entry.name, "__lance_frag_reuse");
    assert_eq!(entry.index_type, "/lance.table.FragmentReuseIndexDetails");
}

#[tokio::test]
async fn flags_survive_restore_and_drain() {
    let tagged = tagged_table("sticky").await;
    // Restore the untagged version 2 (before the index and the rewrite).
    let mut old = tagged.checkout_version(2).await.unwrap();
    assert_eq!(flags(&old), (0, 0));
    old.restore().await.unwrap();
    assert_eq!(flags(&old), (FRI, FRI), "restore keeps the latest flags");
    assert!(fri_uuid(old.manifest()).is_none());

    // Drain: remove the FRI entry entirely.
    let tagged = tagged_table("sticky2").await;
    let uuid = fri_uuid(tagged.manifest()).unwrap();
    let drained = tagged
        .commit(Operation::CreateIndex {
            new_indices: vec![],
            removed_index_uuids: vec![uuid],
        })
        .await
        .unwrap();
    assert!(fri_uuid(drained.manifest()).is_none());
    assert_eq!(flags(&drained), (FRI, FRI), "draining keeps the flags");
    let mut appended = drained.clone();
    appended
        .append(vec![rows(10_000, 10)], &WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(flags(&appended), (FRI, FRI));
}

fn tagged_manifest_without(dataset: &Dataset, reader: u64, writer: u64) -> Manifest {
    let mut manifest = (**dataset.manifest()).clone();
    manifest.reader_flags = reader;
    manifest.writer_flags = writer;
    manifest
}

#[rstest]
#[case::no_bits(0, 0)]
#[case::reader_only(FRI, 0)]
#[case::writer_only(0, FRI)]
#[tokio::test]
async fn publishing_v1_metadata_without_both_bits_is_corrupt(
    #[case] reader: u64,
    #[case] writer: u64,
) {
    let tagged = tagged_table("publish").await;
    let err = tagged_manifest_without(&tagged, reader, writer)
        .encode()
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn publishing_a_v0_entry_on_a_tagged_table_is_refused() {
    let tagged = tagged_table("v0on").await;
    let mut manifest = (**tagged.manifest()).clone();
    for index in &mut manifest.indices {
        if index.is_system() {
            index.index_version = 0;
        }
    }
    assert!(matches!(manifest.encode(), Err(Error::Corrupt { .. })));
    // Through the commit path: a CreateIndex installing a legacy ledger.
    let legacy = new_fri_entry(tagged.store(), &Ledger::new(), tagged.version())
        .await
        .unwrap();
    let err = tagged
        .commit(Operation::CreateIndex {
            new_indices: vec![legacy],
            removed_index_uuids: vec![fri_uuid(tagged.manifest()).unwrap()],
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

#[tokio::test]
async fn pre_fri_client_refuses_tagged_tables_for_read_and_write() {
    let tagged = tagged_table("legacy-client").await;
    let old = OpenOptions {
        features: ClientFeatures::before_fri(),
        store: Some(tagged.store().clone()),
        ..OpenOptions::default()
    };
    let err = Dataset::open_with(tagged.uri(), old.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    // Version 2 predates the tag: readable, but writing lands on the tagged latest.
    let mut before = Dataset::open_with(
        tagged.uri(),
        OpenOptions {
            version: Some(2),
            ..old
        },
    )
    .await
    .unwrap();
    let err = before
        .append(vec![rows(5_000, 5)], &WriteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    assert_eq!(before.latest_version().await.unwrap(), tagged.version());
}

/// Publishes `flags` on top of the latest version by hand (as a newer client would).
async fn publish_with_flags(dataset: &Dataset, reader: u64, writer: u64) -> u64 {
    let mut manifest = (**dataset.manifest()).clone();
    manifest.version += 1;
    manifest.reader_flags |= reader;
    manifest.writer_flags |= writer;
    manifest.transaction = Some(Transaction::new(
        dataset.version(),
        Operation::Append { fragments: vec![] },
    ));
    assert!(dataset
        .store()
        .put_if_absent(&manifest_path(manifest.version), manifest.encode().unwrap())
        .await
        .unwrap());
    manifest.version
}

#[rstest]
#[case::unknown(FLAG_UNKNOWN)]
#[case::far_unknown(FLAG_UNKNOWN << 7)]
#[tokio::test]
async fn unknown_flags_are_refused_on_tagged_tables(#[case] bit: u64) {
    let tagged = tagged_table("unknown").await;
    let version = publish_with_flags(&tagged, 0, bit).await;
    // Writer-only unknown bit: readable, not writable.
    let mut latest = tagged.checkout_version(version).await.unwrap();
    let err = latest
        .append(vec![rows(9_000, 3)], &WriteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    publish_with_flags(&latest, bit, 0).await;
    let err = tagged.checkout_latest().await.unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
}

// ---- Classification table ----

#[tokio::test]
async fn moves_no_rows_append_and_delete_pass() {
    let mut dataset = tagged_table("moves").await;
    let before = fri_uuid(dataset.manifest());
    dataset
        .append(vec![rows(1_000, 10)], &WriteOptions::default())
        .await
        .unwrap();
    dataset.delete("id < 250").await.unwrap();
    assert_eq!(fri_uuid(dataset.manifest()), before);
    assert_eq!(flags(&dataset), (FRI, FRI));
}

#[tokio::test]
async fn user_index_maintenance_passes() {
    let mut dataset = tagged_table("userindex").await;
    let uuid = add_user_index(&mut dataset, "by_cat", &[5]).await;
    let replaced = dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![user_segment("by_cat", &[5, 6], dataset.version())],
            removed_index_uuids: vec![uuid],
        })
        .await
        .unwrap();
    assert_eq!(replaced.manifest().indices.len(), 3);
}

/// Appends two fragments of 100 rows no segment and no history covers, at
/// the tail (so rewriting them relabels nothing); returns their ids.
async fn append_uncovered(dataset: &mut Dataset) -> Vec<u64> {
    dataset
        .append(vec![rows(600, 200)], &write_options(100))
        .await
        .unwrap();
    let ids = fragment_ids(dataset);
    ids[ids.len() - 2..].to_vec()
}

#[tokio::test]
async fn rewrite_with_transition_passes() {
    let dataset = tagged_table("appends").await;
    // 4 is covered by the index, 7 by the history; the run is the tail.
    let groups = plan_rewrite(&dataset, &[vec![4, 7]], 1).await;
    let hook = deferred_remap_hook();
    let next = commit_rewrite(&dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    assert_eq!(ledger_of(&next).await.unwrap().transitions().len(), 2);
}

#[tokio::test]
async fn rewrite_of_uncovered_fragments_passes_without_transition() {
    let mut dataset = tagged_table("uncovered").await;
    let before = fri_uuid(dataset.manifest());
    let appended = append_uncovered(&mut dataset).await;
    let groups = plan_rewrite(&dataset, &[appended], 1).await;
    let next = commit_rewrite(&dataset, groups, None).await.unwrap();
    assert_eq!(fri_uuid(next.manifest()), before);
    assert_eq!(scan_ids(&next).await, (0..800).collect::<Vec<_>>());
}

#[tokio::test]
async fn rewrite_of_index_covered_fragments_without_transition_is_refused() {
    let dataset = tagged_table("covered").await;
    let groups = plan_rewrite(&dataset, &[vec![3, 4]], 1).await;
    let err = commit_rewrite(&dataset, groups, None).await.unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");
    assert_eq!(
        dataset.latest_version().await.unwrap(),
        dataset.version(),
        "nothing was published"
    );
}

#[tokio::test]
async fn rewrite_of_history_covered_fragments_without_transition_is_refused() {
    let dataset = tagged_table("history").await;
    // Fragment 7 was produced by the recorded compaction; no user bitmap names it.
    assert_eq!(fragment_ids(&dataset), vec![1, 2, 3, 4, 7]);
    let groups = plan_rewrite(&dataset, &[vec![7]], 2).await;
    let err = commit_rewrite(&dataset, groups, None).await.unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");
}

#[tokio::test]
async fn inline_compaction_of_history_covered_fragments_records_a_transition() {
    let mut dataset = tagged_table("preserve").await;
    let appended = append_uncovered(&mut dataset).await;
    // Fragment 7 is reached only through the history; the inline path has no
    // segment to remap, so the wrapper records the rewrite in the ledger
    // (and the relabel of the two appended fragments after it).
    let groups = plan_rewrite(&dataset, &[vec![7]], 1).await;
    let hook = preserve_history(None);
    let next = commit_rewrite(&dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    let ledger = ledger_of(&next).await.unwrap();
    assert_eq!(ledger.transitions().len(), 3);
    assert!(ledger.lineage().consumer_of(7).is_some());
    assert!(ledger.lineage().consumer_of(appended[0]).is_some());
    // Without coverage the wrapper records nothing.
    let mut next = next;
    let appended = append_uncovered(&mut next).await;
    let groups = plan_rewrite(&next, &[appended], 1).await;
    let after = commit_rewrite(&next, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    assert_eq!(fri_uuid(after.manifest()), fri_uuid(next.manifest()));
}

#[tokio::test]
async fn inline_remap_of_every_covering_segment_passes() {
    let mut dataset = tagged_table("inline").await;
    let appended = append_uncovered(&mut dataset).await;
    let uuid = add_user_index(&mut dataset, "by_name", &appended).await;
    let groups = plan_rewrite(&dataset, &[appended], 1).await;
    let remapped = user_segment("by_name", &[], dataset.version());
    let txn = Transaction::new(
        dataset.version(),
        Operation::Rewrite {
            groups: groups.clone(),
            new_indices: vec![remapped],
            removed_index_uuids: vec![uuid],
        },
    );
    dataset.commit_transaction(txn, None).await.unwrap();
    // Without the remap the same rewrite is refused.
    let mut again = tagged_table("inline2").await;
    let appended = append_uncovered(&mut again).await;
    add_user_index(&mut again, "by_name", &appended).await;
    let groups = plan_rewrite(&again, &[appended], 1).await;
    let err = commit_rewrite(&again, groups, None).await.unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");
}

#[tokio::test]
async fn partition_without_row_map_over_covered_fragments_is_refused() {
    let dataset = tagged_table("partition").await;
    let groups = plan_rewrite(&dataset, &[vec![3]], 1).await;
    let txn = Transaction::new(
        dataset.version(),
        Operation::Partition {
            source_fragment_ids: vec![3],
            destinations: groups[0].new_fragments.clone(),
            map_id: None,
            map_size_bytes: 0,
            map_checksum: None,
            relabelled: Vec::new(),
        },
    );
    let err = dataset.commit_transaction(txn, None).await.unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");
}

#[tokio::test]
async fn legacy_writer_on_a_tagged_table_is_refused() {
    let dataset = tagged_table("legacywriter").await;
    let groups = plan_rewrite(&dataset, &[vec![3, 4]], 1).await;
    let hook = legacy_deferred_remap_hook();
    let err = commit_rewrite(&dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");
}

#[tokio::test]
async fn restore_of_an_older_history_that_segments_translate_through_is_refused() {
    let tagged = tagged_table("restore-old").await;
    let with_one = tagged.version();
    let groups = plan_rewrite(&tagged, &[vec![3, 4]], 1).await;
    let hook = deferred_remap_hook();
    let latest = commit_rewrite(&tagged, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    assert_ne!(fri_uuid(latest.manifest()), fri_uuid(tagged.manifest()));
    let mut old = latest.checkout_version(with_one).await.unwrap();
    let err = old.restore().await.unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");
    assert_eq!(latest.latest_version().await.unwrap(), latest.version());
}

#[tokio::test]
async fn restore_of_a_version_without_history_passes() {
    let tagged = tagged_table("restore-none").await;
    let mut old = tagged.checkout_version(3).await.unwrap();
    assert!(fri_uuid(old.manifest()).is_none());
    old.restore().await.unwrap();
    assert_eq!(old.version(), tagged.version() + 1);
    assert_eq!(scan_ids(&old).await, (0..600).collect::<Vec<_>>());
}

/// A valid transition of fragments that are not in any table (500 -> 501).
fn foreign_transition() -> TransitionRecord {
    let surviving: RoaringTreemap = (0..10u64).map(|offset| (500u64 << 32) | offset).collect();
    TransitionRecord::new(
        vec![FragmentDigest::new(500, 10, 0)],
        vec![FragmentDigest::new(501, 10, 0)],
        Mapping::OrderedCompaction { surviving },
    )
    .unwrap()
}

async fn replace_history(dataset: &Dataset, ledger: &Ledger) -> refract_core::Result<Dataset> {
    let current = fri_uuid(dataset.manifest()).unwrap();
    let entry = new_fri_entry(dataset.store(), ledger, dataset.version()).await?;
    dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![entry],
            removed_index_uuids: vec![current],
        })
        .await
}

#[tokio::test]
async fn trim_and_extension_pass_but_a_replacement_that_drops_records_is_refused() {
    let dataset = tagged_table("trim").await;
    let (_, ledger) = load_ledger(&dataset).await.unwrap().unwrap();
    let fingerprints: Vec<_> = ledger
        .transitions()
        .iter()
        .map(|t| *t.fingerprint())
        .collect();

    // Drops the compaction's record and adds another one: refused.
    let mut disjoint = Ledger::new();
    disjoint.push_transition(foreign_transition()).unwrap();
    let err = replace_history(&dataset, &disjoint).await.unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");

    // Extension: every record kept, one added.
    let mut extended = ledger.clone();
    extended.push_transition(foreign_transition()).unwrap();
    let after_extend = replace_history(&dataset, &extended).await.unwrap();
    assert_eq!(ledger_len(&after_extend).await, 2);

    // Trim: a subset (the compaction's record removed).
    let mut trimmed = extended.clone();
    assert_eq!(trimmed.remove_transitions(&fingerprints).unwrap(), 1);
    let after_trim = replace_history(&after_extend, &trimmed).await.unwrap();
    assert_eq!(ledger_len(&after_trim).await, 1);
    assert_eq!(ledger_of(&after_trim).await.unwrap().index_version(), 1);
}

async fn ledger_len(dataset: &Dataset) -> usize {
    ledger_of(dataset).await.unwrap().transitions().len()
}

#[tokio::test]
async fn a_second_fri_entry_is_invalid_input() {
    let dataset = tagged_table("stale").await;
    let (_, ledger) = load_ledger(&dataset).await.unwrap().unwrap();
    let entry = new_fri_entry(dataset.store(), &ledger, dataset.version())
        .await
        .unwrap();
    let err = dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![entry],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

/// A ledger holding one transition with a field this build does not know.
fn unsupported_content() -> Vec<u8> {
    let mut transition = Vec::new();
    pb::field_bytes(1, &pb::digest(900, 10, 0), &mut transition);
    pb::field_bytes(2, &pb::digest(901, 10, 0), &mut transition);
    pb::field_bytes(9, b"future mapping", &mut transition);
    let mut content = Vec::new();
    pb::field_bytes(2, &transition, &mut content);
    content
}

#[tokio::test]
async fn unsupported_history_refuses_every_rewrite() {
    let mut dataset = dataset_with_rows("unsupported", 300, 100).await;
    let entry = raw_fri_entry(pb::inline_details(&unsupported_content()), 1, 2);
    dataset = dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![entry],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap();
    assert_eq!(flags(&dataset), (FRI, FRI));
    assert!(ledger_of(&dataset)
        .await
        .unwrap()
        .has_unsupported_transitions());
    // Uncovered fragments, no transition: still refused (the unknown record may cover them).
    let groups = plan_rewrite(&dataset, &[vec![1, 2]], 1).await;
    let err = commit_rewrite(&dataset, groups.clone(), None)
        .await
        .unwrap_err();
    assert!(is_not_supported_upgrade(&err), "{err}");
    // The deferred writer cannot append to it either.
    let hook = deferred_remap_hook();
    let err = commit_rewrite(&dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    // Appends still pass.
    let mut appended = dataset.clone();
    appended
        .append(vec![rows(300, 5)], &WriteOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn map_id_path_escape_in_a_ledger_is_corrupt() {
    let mut transition = Vec::new();
    pb::field_bytes(1, &pb::digest(1, 100, 0), &mut transition);
    pb::field_bytes(2, &pb::digest(2, 100, 0), &mut transition);
    let mut partition = Vec::new();
    pb::field_bytes(1, b"../escape", &mut partition);
    pb::field_varint(2, 64, &mut partition);
    pb::field_bytes(4, &partition, &mut transition);
    let mut content = Vec::new();
    pb::field_bytes(2, &transition, &mut content);
    let err = Ledger::from_content_bytes(&content, 1).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("\"_fri/../escape\""), "{err}");
    // Committing an entry holding it fails at the gate, before publication.
    let dataset = dataset_with_rows("escape", 200, 100).await;
    let entry = raw_fri_entry(pb::inline_details(&content), 1, 2);
    let err = dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![entry],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(dataset.latest_version().await.unwrap(), dataset.version());
}
