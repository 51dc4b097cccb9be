//! Deferred compaction: ordered-compaction transitions recorded by the commit
//! hook, their translation, legacy (version 0) histories and their lift, and
//! external ledger content.

mod support;

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use refract_core::{
    Error, FragmentRows, MappingReader, OrderedCompactionMapping, RewriteGroupInput, RowAddrRemap,
};
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_ledger::{
    FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord, MAX_INLINE_BYTES,
};
use refract_optimize::fri::{
    deferred_remap_hook, describe_fri, fri_uuid, legacy_deferred_remap_hook, load_ledger,
    new_fri_entry,
};
use refract_table::io::RelativePath;
use refract_table::transaction::{Operation, RewriteGroup};
use refract_table::{Dataset, Manifest};
use roaring::RoaringTreemap;
use rstest::rstest;
use support::fri::*;
use support::*;

/// The mapping of a recorded ordered-compaction transition.
fn mapping_of(record: &TransitionRecord) -> OrderedCompactionMapping {
    let Mapping::OrderedCompaction { surviving } = record.mapping() else {
        panic!("expected an ordered compaction");
    };
    let rows = |d: &[FragmentDigest]| {
        d.iter()
            .map(|d| FragmentRows::new(d.id, d.physical_rows))
            .collect::<Vec<_>>()
    };
    OrderedCompactionMapping::new(
        rows(record.sources()),
        rows(record.destinations()),
        surviving.clone(),
    )
    .unwrap()
}

/// Every physical address of `record`'s sources.
fn source_addresses(record: &TransitionRecord) -> Vec<u64> {
    record
        .sources()
        .iter()
        .flat_map(|d| (0..d.physical_rows).map(move |offset| (d.id << 32) | offset))
        .collect()
}

/// The compaction's own remap, built from the committed groups and the read manifest.
fn compaction_remap(read: &Manifest, committed: &Manifest) -> RowAddrRemap {
    let Some(txn) = &committed.transaction else {
        panic!("no transaction");
    };
    let Operation::Rewrite { groups, .. } = &txn.operation else {
        panic!("not a rewrite");
    };
    let inputs = groups
        .iter()
        .map(|group: &RewriteGroup| RewriteGroupInput {
            old_fragments: group
                .old_fragment_ids
                .iter()
                .map(|id| FragmentRows::new(*id, read.fragment(*id).unwrap().physical_rows))
                .collect(),
            new_fragments: group
                .new_fragments
                .iter()
                .map(|f| FragmentRows::new(f.id, f.physical_rows))
                .collect(),
            surviving: RoaringTreemap::deserialize_from(
                group.surviving_old_addresses.as_deref().unwrap(),
            )
            .unwrap(),
        })
        .collect();
    RowAddrRemap::compact(inputs).unwrap()
}

async fn translate(mapping: &dyn MappingReader, addresses: &[u64]) -> Vec<Option<u64>> {
    let mut all = Vec::new();
    let mut out = Vec::new();
    for chunk in addresses.chunks(65_536) {
        mapping.translate(chunk, &mut out).await.unwrap();
        all.extend(out.iter().copied());
    }
    all
}

#[tokio::test]
async fn deferred_compaction_records_every_group_and_translates_like_its_remap() {
    let mut dataset = dataset_with_rows("deferred", 800, 100).await;
    dataset
        .delete("id < 30 or (id >= 150 and id < 170) or id = 555")
        .await
        .unwrap();
    // Only the first group is covered; the second is recorded too.
    let index = add_user_index(&mut dataset, "by_id", &[1, 2]).await;
    let read = dataset.clone();
    let before: HashMap<u64, i64> = addressed_ids(&read, &[1, 2, 3, 4, 5, 6, 7, 8])
        .await
        .into_iter()
        .collect();
    let groups = plan_rewrite(&read, &[vec![1, 2, 3], vec![5, 6]], 2).await;
    let hook = deferred_remap_hook();
    let committed = commit_rewrite(&read, groups, Some(hook.as_ref()))
        .await
        .unwrap();

    assert!(committed.manifest().indices.iter().any(|i| i.uuid == index));
    assert_eq!(
        committed.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX,
        FLAG_FRAGMENT_REUSE_INDEX
    );
    let ledger = ledger_of(&committed).await.unwrap();
    // The two groups, then the two runs they relabelled (4; 7 and 8).
    assert_eq!(ledger.transitions().len(), 4);
    let first = &ledger.transitions()[0];
    assert_eq!(
        first.sources(),
        &[
            FragmentDigest::new(1, 100, 30),
            FragmentDigest::new(2, 100, 20),
            FragmentDigest::new(3, 100, 0)
        ]
    );
    // Lance records no planned version in a version-1 transition.
    assert_eq!(first.dataset_version(), None);
    let dest_ids: Vec<u64> = ledger
        .transitions()
        .iter()
        .flat_map(|t| t.destinations().iter().map(|d| d.id))
        .collect();
    let committed_ids = fragment_ids(&committed);
    assert_eq!(committed_ids, vec![9, 10, 11, 12, 13, 14, 15]);
    assert_eq!(dest_ids, vec![9, 10, 12, 13, 11, 14, 15]);
    assert_eq!(
        ledger.transitions()[1].sources(),
        &[
            FragmentDigest::new(5, 100, 0),
            FragmentDigest::new(6, 100, 1)
        ]
    );
    // A relabel moves every physical row: its sources count none as deleted.
    assert_eq!(
        ledger.transitions()[2].sources(),
        &[FragmentDigest::new(4, 100, 0)]
    );
    assert_eq!(
        ledger.transitions()[3].sources(),
        &[
            FragmentDigest::new(7, 100, 0),
            FragmentDigest::new(8, 100, 0)
        ]
    );

    // Every old address (deleted ones included) translates like the compaction's remap,
    // and every survivor lands on a row holding the same id.
    let remap = compaction_remap(read.manifest(), committed.manifest());
    for record in ledger.transitions() {
        let addresses = source_addresses(record);
        let translated = translate(&mapping_of(record), &addresses).await;
        for (address, got) in addresses.iter().zip(&translated) {
            assert_eq!(remap.get(*address), Some(*got), "address {address:#x}");
        }
        let moved: Vec<(u64, u64)> = addresses
            .iter()
            .zip(&translated)
            .filter_map(|(old, new)| new.map(|new| (*old, new)))
            .collect();
        let news: Vec<u64> = moved.iter().map(|(_, new)| *new).collect();
        let taken = committed.take(&news, Some(&["id"])).await.unwrap();
        let ids = taken.column(0).as_primitive::<Int64Type>().values();
        for ((old, _), id) in moved.iter().zip(ids.iter()) {
            assert_eq!(before[old], *id);
        }
    }
    assert_eq!(scan_ids(&committed).await, scan_ids(&read).await);
}

#[tokio::test]
async fn uncovered_deferred_compaction_records_nothing() {
    let dataset = dataset_with_rows("uncovered", 400, 100).await;
    let groups = plan_rewrite(&dataset, &[vec![1, 2, 3, 4]], 1).await;
    let hook = deferred_remap_hook();
    let committed = commit_rewrite(&dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    assert!(fri_uuid(committed.manifest()).is_none());
    assert_eq!(
        committed.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX,
        0
    );
    assert_eq!(scan_ids(&committed).await, (0..400).collect::<Vec<_>>());
}

#[tokio::test]
async fn history_coverage_alone_records_a_transition() {
    // Fragment 7 is produced by a recorded compaction; rewriting it again must extend
    // the chain even though no user bitmap names fragment 7.
    let mut dataset = dataset_with_rows("chain", 600, 100).await;
    add_user_index(&mut dataset, "by_id", &[1, 2]).await;
    let hook = deferred_remap_hook();
    let groups = plan_rewrite(&dataset, &[vec![1, 2]], 1).await;
    let once = commit_rewrite(&dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    // 3..=6 follow the new fragment relabelled.
    assert_eq!(fragment_ids(&once), vec![7, 8, 9, 10, 11]);
    let groups = plan_rewrite(&once, &[vec![7, 8]], 1).await;
    let twice = commit_rewrite(&once, groups, Some(hook.as_ref()))
        .await
        .unwrap();
    let ledger = ledger_of(&twice).await.unwrap();
    // Each commit: its group and the run it relabelled.
    assert_eq!(ledger.transitions().len(), 4);
    assert_eq!(
        ledger.lineage().consumer_of(7).unwrap().destinations()[0].id,
        12
    );
}

#[tokio::test]
async fn legacy_history_is_lifted_byte_for_byte_by_the_first_tagged_commit() {
    let mut dataset = dataset_with_rows("lift", 800, 100).await;
    dataset.delete("id >= 100 and id < 140").await.unwrap();
    add_user_index(&mut dataset, "by_id", &[1, 2, 3, 4, 5, 6, 7, 8]).await;
    let legacy = legacy_deferred_remap_hook();
    let groups = plan_rewrite(&dataset, &[vec![1, 2], vec![3, 4]], 1).await;
    let v1 = commit_rewrite(&dataset, groups, Some(legacy.as_ref()))
        .await
        .unwrap();
    // Fragments 5 and 6, relabelled by v1.
    let groups = plan_rewrite(&v1, &[ids_at(&v1, 2..4)], 1).await;
    let v2 = commit_rewrite(&v1, groups, Some(legacy.as_ref()))
        .await
        .unwrap();
    let (entry, old) = load_ledger(&v2).await.unwrap().unwrap();
    assert_eq!(entry.index_version, 0);
    assert_eq!(old.legacy_versions().len(), 2);
    assert_eq!(
        old.legacy_versions()
            .iter()
            .map(|v| v.dataset_version())
            .collect::<Vec<_>>(),
        vec![dataset.version(), v1.version()]
    );
    assert_eq!(v2.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX, 0);

    // The first tagged commit.
    let tagged = deferred_remap_hook();
    let groups = plan_rewrite(&v2, &[ids_at(&v2, 3..5)], 1).await;
    let v3 = commit_rewrite(&v2, groups, Some(tagged.as_ref()))
        .await
        .unwrap();
    let (entry, lifted) = load_ledger(&v3).await.unwrap().unwrap();
    assert_eq!(entry.index_version, 1);
    assert_eq!(
        v3.manifest().writer_flags & FLAG_FRAGMENT_REUSE_INDEX,
        FLAG_FRAGMENT_REUSE_INDEX
    );
    assert_eq!(lifted.legacy_versions(), old.legacy_versions());
    assert_eq!(lifted.transitions().len(), 1);
    let old_bytes = old.encode_content().unwrap();
    let new_bytes = lifted.encode_content().unwrap();
    assert_eq!(
        &new_bytes[..old_bytes.len()],
        old_bytes.as_slice(),
        "legacy bytes kept"
    );

    // Same translation for every address before and after the lift.
    let before: Vec<&TransitionRecord> = old.lineage().iter().collect();
    let after: Vec<&TransitionRecord> = lifted.lineage().iter().collect();
    assert_eq!(after.len(), before.len() + 1);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b.fingerprint(), a.fingerprint());
        let addresses = source_addresses(b);
        assert_eq!(
            translate(&mapping_of(b), &addresses).await,
            translate(&mapping_of(a), &addresses).await
        );
    }
    assert_eq!(scan_ids(&v3).await, scan_ids(&dataset).await);
}

/// A valid transition over a fragment outside the table with `rows` physical
/// rows of which every other one survives (a bitmap that does not compress).
fn big_transition(rows: u64) -> TransitionRecord {
    let surviving: RoaringTreemap = (0..rows).step_by(2).map(|o| (600u64 << 32) | o).collect();
    let live = surviving.len();
    TransitionRecord::new(
        vec![FragmentDigest::new(600, rows, rows - live)],
        vec![FragmentDigest::new(601, live, 0)],
        Mapping::OrderedCompaction { surviving },
    )
    .unwrap()
}

async fn install(dataset: &Dataset, ledger: &Ledger) -> Dataset {
    let entry = new_fri_entry(dataset.store(), ledger, dataset.version())
        .await
        .unwrap();
    dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![entry],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap()
}

#[rstest]
#[case::inline(100_000, "inline")]
#[case::external(2_000_000, "external")]
#[tokio::test]
async fn large_ledgers_are_stored_externally(#[case] rows: u64, #[case] storage: &str) {
    let dataset = dataset_with_rows("external", 100, 100).await;
    let mut ledger = Ledger::new();
    ledger.push_transition(big_transition(rows)).unwrap();
    let size = ledger.encode_content().unwrap().len();
    assert_eq!(size > MAX_INLINE_BYTES, storage == "external");
    let installed = install(&dataset, &ledger).await;
    installed.store().reset_stats();
    let (_, loaded) = load_ledger(&installed).await.unwrap().unwrap();
    assert_eq!(loaded, ledger);
    // The store counts requests: one ranged read for external content, none inline.
    let stats = installed.store().stats();
    assert_eq!(
        stats.gets + stats.get_ranges,
        u64::from(storage == "external")
    );
    let description = describe_fri(&installed).await.unwrap();
    assert_eq!(description.storage, storage);
    assert_eq!(description.size_bytes, size as u64);
    assert_eq!(description.index_version, Some(1));
    assert!(description.fri_flag);
    assert_eq!(description.transitions.len(), 1);
    assert_eq!(description.transitions[0].kind, "ordered_compaction");
    assert_eq!(description.transitions[0].destinations[0].id, 601);
    let json = serde_json::to_value(&description).unwrap();
    assert_eq!(json["storage"], storage);
}

#[tokio::test]
async fn truncated_external_content_is_corrupt() {
    let dataset = dataset_with_rows("truncated", 100, 100).await;
    let mut ledger = Ledger::new();
    ledger.push_transition(big_transition(2_000_000)).unwrap();
    let installed = install(&dataset, &ledger).await;
    let uuid = fri_uuid(installed.manifest()).unwrap();
    let path = RelativePath::parse(&refract_ledger::external_path(&uuid)).unwrap();
    let bytes = installed.store().get(&path).await.unwrap();
    installed
        .store()
        .put(&path, bytes.slice(..bytes.len() - 1))
        .await
        .unwrap();
    let err = load_ledger(&installed).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn describe_without_history_reports_none() {
    let dataset = dataset_with_rows("describe", 100, 100).await;
    let description = describe_fri(&dataset).await.unwrap();
    assert_eq!(description.storage, "none");
    assert!(description.fri_uuid.is_none());
    assert!(description.transitions.is_empty());
    assert!(!description.fri_flag);
}

/// External details pointing at `path` (relative to the FRI's index
/// directory, as Lance records it) with `offset` and `size`.
fn external_details(path: &str, offset: u64, size: u64) -> Vec<u8> {
    let mut file = Vec::new();
    pb::field_bytes(1, path.as_bytes(), &mut file);
    pb::field_varint(2, offset, &mut file);
    pb::field_varint(3, size, &mut file);
    let mut details = Vec::new();
    pb::field_bytes(2, &file, &mut details);
    details
}

#[rstest]
#[case::other_directory(
    "../00000000-0000-0000-0000-000000000000/details.binpb",
    0,
    10,
    "escape"
)]
#[case::parent("../../data/x.lance", 0, 10, "escape")]
#[case::absolute("/_indices/{uuid}/details.binpb", 0, 10, "escape")]
#[case::overflow("details.binpb", u64::MAX, 2, "corrupt")]
#[tokio::test]
async fn bad_external_references_fail_before_any_read(
    #[case] path: &str,
    #[case] offset: u64,
    #[case] size: u64,
    #[case] kind: &str,
) {
    let dataset = dataset_with_rows("badref", 100, 100).await;
    let mut entry = raw_fri_entry(Vec::new(), 1, dataset.version());
    let path = path.replace("{uuid}", &entry.uuid.hyphenated().to_string());
    entry.details = external_details(&path, offset, size);
    let mut manifest = (**dataset.manifest()).clone();
    manifest.indices.push(entry);
    dataset.store().reset_stats();
    let err = refract_table::commit::fri_entry::load_ledger_of(dataset.store(), &manifest)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{kind}: {err}");
    if kind == "escape" {
        assert!(err.to_string().contains(&format!("{path:?}")), "{err}");
    }
    let stats = dataset.store().stats();
    assert_eq!(
        (stats.gets, stats.get_ranges),
        (0, 0),
        "no I/O before the checks"
    );
}
