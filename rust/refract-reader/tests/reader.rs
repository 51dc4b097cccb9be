//! Open paths (no FRI, legacy, tagged), unsupported mappings and versions,
//! system entries, metadata-only lookups, caching and snapshot isolation.

mod common;

use std::sync::Arc;

use common::*;
use refract_core::Error;
use refract_index::{Query, ResolvedSegment, SegmentResolver};
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_reader::{
    fri_statistics, fri_uuid, has_fri, ChunkCacheMode, Disposition, Exclusion, FriContent,
    FriReader, FriResolver, ListedEntry, FRI_INDEX_NAME,
};
use refract_table::io::RelativePath;
use refract_table::{Dataset, IndexMetadata, Operation};
use roaring::RoaringBitmap;
use uuid::Uuid;

fn summary(resolved: &[ResolvedSegment]) -> Vec<(Vec<u64>, bool, usize)> {
    resolved
        .iter()
        .map(|r| {
            (
                r.coverage.iter().map(u64::from).collect(),
                r.translator.is_some(),
                r.hops,
            )
        })
        .collect()
}

async fn fri_query(ds: &Dataset, filter: &str) -> refract_core::Result<refract_index::QueryResult> {
    // Forced: these tests are about the answers served through the FRI.
    Query::new(ds)
        .filter(filter)?
        .with_resolver(Arc::new(FriResolver::with_mode(ChunkCacheMode::Lazy)))
        .index_use(refract_index::IndexUse::Always)
        .execute()
        .await
}

fn disposition(reader: &FriReader, uuid: &Uuid) -> Disposition {
    match reader.listing().unwrap().entry(uuid).unwrap() {
        ListedEntry::Segment { plan, .. } => plan.disposition,
        ListedEntry::System(_) => panic!("not a user segment"),
    }
}

#[tokio::test]
async fn without_an_fri_the_resolver_is_direct() {
    let mut t = Table::new(3, 40).await;
    t.index_all().await;
    t.delete("id < 5").await;
    assert!(!has_fri(t.ds.manifest()));
    let reader = FriReader::open(&t.ds, ChunkCacheMode::Lazy).await.unwrap();
    assert!(reader.history().is_none());
    assert_eq!(reader.query_indices(), t.ds.manifest().indices);
    let segs = segments(&t.ds, "id_idx");
    let fri = reader.resolve(&segs).await.unwrap();
    let direct = refract_index::DirectResolver
        .resolve(&t.ds, &segs)
        .await
        .unwrap();
    assert_eq!(summary(&fri), summary(&direct));
    assert_eq!(summary(&fri), vec![(vec![1, 2, 3], false, 0)]);
    check_all(&t.ds).await;
}

#[tokio::test]
async fn version_zero_takes_the_legacy_path() {
    let mut t = Table::new(4, 50).await;
    t.legacy = true;
    t.index_all().await;
    t.delete("id % 4 = 1").await;
    t.compact(&[1, 2], 500).await; // 5, relabelling 3, 4 as 6, 7
    t.compact(&[5, 6], 500).await; // 8, relabelling 7 as 9
    let entry =
        t.ds.manifest()
            .indices
            .iter()
            .find(|m| m.name == FRI_INDEX_NAME)
            .unwrap();
    assert_eq!(entry.index_version, 0, "{:?}", t.ds.manifest().transaction);
    assert_eq!(t.ds.manifest().reader_flags & FLAG_FRAGMENT_REUSE_INDEX, 0);
    t.ds.store().reset_stats();
    let reader = FriReader::open(&t.ds, ChunkCacheMode::Lazy).await.unwrap();
    let history = reader.history().unwrap();
    assert_eq!(history.index_version(), 0);
    let legacy = history.legacy().unwrap();
    assert_eq!(legacy.chain.steps().len(), 4);
    assert_eq!(
        legacy.groups,
        vec![
            (vec![1, 2], vec![5]),
            (vec![3, 4], vec![6, 7]),
            (vec![5, 6], vec![8]),
            (vec![7], vec![9])
        ]
    );
    let resolved = reader.resolve(&segments(&t.ds, "id_idx")).await.unwrap();
    // A legacy chain takes one hop per reuse version.
    assert_eq!(summary(&resolved), vec![(vec![8, 9], true, 4)]);
    check_all(&t.ds).await;
    let stats = t.ds.store().stats();
    assert_eq!(stats.requests_under("_fri"), 0, "{:?}", stats.by_prefix);
}

#[tokio::test]
async fn legacy_partial_group_is_scanned() {
    let mut t = Table::new(2, 50).await;
    t.legacy = true;
    t.index_all().await; // covers 1, 2
    let extra = t.append(100, 50).await; // 3, unindexed
    t.compact(&[2, extra], 500).await; // 4 mixes covered and uncovered rows
    let reader = FriReader::open(&t.ds, ChunkCacheMode::Lazy).await.unwrap();
    let resolved = reader.resolve(&segments(&t.ds, "id_idx")).await.unwrap();
    assert_eq!(summary(&resolved), vec![(vec![1], true, 0)]);
    for r in check_all(&t.ds).await {
        assert_eq!(r.explain.scanned_fragments, vec![4]);
    }
}

#[tokio::test]
async fn an_unknown_mapping_denies_identity_and_scans_what_it_may_have_moved() {
    let mut t = Table::new(3, 40).await;
    t.index_all().await; // S1: 1, 2, 3
    let four = t.append(120, 40).await;
    t.index_fragments(&[four]).await; // S2: 4 (all live)
    let moved = t.compact_unknown(&[1, 2]).await;
    assert_eq!(moved, vec![5]);
    let segs = segments(&t.ds, "id_idx");
    let reader = FriReader::open(&t.ds, ChunkCacheMode::Lazy).await.unwrap();
    assert!(reader.history().unwrap().has_unsupported_transitions());
    assert_eq!(
        disposition(&reader, &segs[0].uuid),
        Disposition::Excluded(Exclusion::UnsupportedHistory)
    );
    // S2 is untouched by anything the reader knows, yet gets no identity.
    assert_eq!(disposition(&reader, &segs[1].uuid), Disposition::Translate);
    assert_eq!(
        summary(&reader.resolve(&segs).await.unwrap()),
        vec![(vec![], false, 0), (vec![4], true, 0)]
    );
    for r in check_all(&t.ds).await {
        assert_eq!(r.explain.scanned_fragments, vec![5, 3]);
    }
    // The listing queries plan with leaves the excluded segment out.
    let listed: Vec<Uuid> = reader.query_indices().iter().map(|m| m.uuid).collect();
    assert!(!listed.contains(&segs[0].uuid));
    assert!(listed.contains(&segs[1].uuid));
}

/// Copies segment `from`'s files to a new uuid and commits a segment of the
/// same index claiming `bitmap` (a "projected" coverage with stale addresses).
async fn commit_projected_copy(t: &mut Table, from: &IndexMetadata, bitmap: RoaringBitmap) -> Uuid {
    let uuid = Uuid::new_v4();
    let store = t.ds.store().clone();
    let dir = RelativePath::parse(&format!("_indices/{}", from.uuid)).unwrap();
    for object in store.list(&dir).await.unwrap() {
        let bytes = store.get(&object.path).await.unwrap();
        let name = object.path.file_name().to_string();
        let target = RelativePath::parse(&format!("_indices/{uuid}/{name}")).unwrap();
        store.put(&target, bytes).await.unwrap();
    }
    let meta = IndexMetadata {
        uuid,
        fragment_bitmap: Some(bitmap),
        dataset_version: t.ds.version(),
        ..from.clone()
    };
    t.ds =
        t.ds.commit(Operation::CreateIndex {
            new_indices: vec![meta],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap();
    uuid
}

#[tokio::test]
async fn projected_coverage_under_unknown_transitions_is_an_error_not_stale_rows() {
    let mut t = Table::new(2, 40).await;
    t.index_all().await; // S1 stores addresses of 1, 2
    t.compact_unknown(&[1, 2]).await; // 3, through a mapping we cannot read
    let s1 = segments(&t.ds, "id_idx")[0].clone();
    // A future writer projected S1 onto 3 without rewriting its addresses.
    commit_projected_copy(&mut t, &s1, [3u32].into_iter().collect()).await;
    let Err(err) = fri_query(&t.ds, "id = 5").await else {
        panic!("stale addresses must not be returned");
    };
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    assert!(err.to_string().contains("upgrade"), "{err}");
}

#[rstest::rstest]
#[case(2)]
#[case(7)]
#[tokio::test]
async fn a_newer_fri_version_asks_for_an_upgrade_but_metadata_lookups_work(#[case] version: u32) {
    let mut t = Table::new(2, 30).await;
    t.index_all().await;
    t.compact(&[1, 2], 100).await;
    let (mut entry, _) = t.fri_entry().await;
    entry.index_version = version;
    let uuid = entry.uuid;
    t.install_raw(entry).await;
    let err = fri_query(&t.ds, "id = 5").await.err().unwrap();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("index_version {version}")),
        "{err}"
    );
    assert_eq!(fri_uuid(t.ds.manifest()), Some(uuid));
    let stats = fri_statistics(t.ds.manifest()).unwrap();
    assert_eq!(stats.index_version, version);
    assert!(matches!(stats.content, FriContent::Unreadable { .. }));
}

#[tokio::test]
async fn a_corrupt_ledger_fails_queries_but_not_bookkeeping() {
    let mut t = Table::new(2, 30).await;
    t.index_all().await;
    t.compact(&[1, 2], 100).await;
    let (mut entry, _) = t.fri_entry().await;
    entry.details = inline_details(&[0x12, 0xFF, 0x01, 0x02]);
    let uuid = entry.uuid;
    t.install_raw(entry).await;
    let err = fri_query(&t.ds, "id = 5").await.err().unwrap();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(fri_uuid(t.ds.manifest()), Some(uuid));
    let stats = fri_statistics(t.ds.manifest()).unwrap();
    assert_eq!(stats.content, FriContent::Inline { bytes: 4 });
}

#[tokio::test]
async fn a_missing_external_file_is_not_found() {
    let mut t = Table::new(2, 30).await;
    t.storage = Storage::External;
    t.index_all().await;
    t.compact(&[1, 2], 100).await;
    let uuid = fri_uuid(t.ds.manifest()).unwrap();
    let path = RelativePath::parse(&format!("_indices/{uuid}/details.binpb")).unwrap();
    t.ds.store().delete(&path).await.unwrap();
    let err = fri_query(&t.ds, "id = 5").await.err().unwrap();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert!(matches!(
        fri_statistics(t.ds.manifest()).unwrap().content,
        FriContent::External { .. }
    ));
}

#[tokio::test]
async fn system_entries_pass_through_untouched() {
    let mut t = Table::new(3, 30).await;
    t.index_all().await;
    t.compact(&[2, 3], 100).await;
    let wal = IndexMetadata {
        uuid: Uuid::new_v4(),
        name: "__mem_wal".into(),
        fields: vec![],
        fragment_bitmap: None,
        index_type: "mem_wal".into(),
        details: b"generation 7".to_vec(),
        index_version: 3,
        dataset_version: t.ds.version(),
        files: Vec::new(),
        lance: Default::default(),
    };
    let blind = IndexMetadata {
        uuid: Uuid::new_v4(),
        fragment_bitmap: None,
        ..segments(&t.ds, "id_idx")[0].clone()
    };
    t.ds =
        t.ds.commit(Operation::CreateIndex {
            new_indices: vec![wal.clone(), blind.clone()],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap();
    let reader = FriReader::open(&t.ds, ChunkCacheMode::Lazy).await.unwrap();
    let listed = reader.query_indices();
    assert!(
        listed.contains(&wal),
        "the second system entry must survive"
    );
    let fri =
        t.ds.manifest()
            .indices
            .iter()
            .find(|m| m.name == FRI_INDEX_NAME)
            .unwrap();
    assert!(listed.contains(fri));
    assert!(
        listed.iter().all(|m| m.uuid != blind.uuid),
        "unknown coverage is not served"
    );
    assert_eq!(
        disposition(&reader, &blind.uuid),
        Disposition::Excluded(Exclusion::UnknownCoverage)
    );
    // Derived coverage is in memory only: the manifest still has the stored bitmaps.
    let stored = &segments(&t.ds, "id_idx")[0];
    assert_eq!(
        stored
            .fragment_bitmap
            .as_ref()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let derived = listed.iter().find(|m| m.uuid == stored.uuid).unwrap();
    assert_eq!(
        derived
            .fragment_bitmap
            .as_ref()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        vec![1, 4]
    );
    check_all(&t.ds).await;
}

#[tokio::test]
async fn the_derived_listing_is_cached_per_snapshot_and_old_snapshots_stay_correct() {
    let mut t = Table::new(4, 30).await;
    t.storage = Storage::External;
    t.index_all().await;
    t.partition(&[1, 2], 2, |id| (id % 2) as u16).await; // 5, 6; 3, 4 relabelled 7, 8
    let before = t.ds.clone();
    let a = FriReader::open(&before, ChunkCacheMode::Lazy)
        .await
        .unwrap();
    let loads = before.session().cache().stats().loads;
    before.store().reset_stats();
    let b = FriReader::open(&before, ChunkCacheMode::Lazy)
        .await
        .unwrap();
    assert!(Arc::ptr_eq(a.listing().unwrap(), b.listing().unwrap()));
    assert!(Arc::ptr_eq(a.history().unwrap(), b.history().unwrap()));
    assert_eq!(
        before.session().cache().stats().loads,
        loads,
        "a warm open loads nothing"
    );
    assert_eq!(
        before.store().stats().total_requests(),
        0,
        "a warm open reads nothing"
    );

    // A later rewrite: the old handle keeps its own listing and answers.
    t.compact(&[7, 8], 100).await; // 9
    let after = FriReader::open(&t.ds, ChunkCacheMode::Lazy).await.unwrap();
    assert!(!Arc::ptr_eq(a.listing().unwrap(), after.listing().unwrap()));
    assert_eq!(a.listing().unwrap().manifest_version(), before.version());
    check_all(&before).await;
    check_all(&t.ds).await;
    let again = FriReader::open(&before, ChunkCacheMode::Lazy)
        .await
        .unwrap();
    assert!(Arc::ptr_eq(a.listing().unwrap(), again.listing().unwrap()));
}

#[tokio::test]
async fn row_map_reads_are_bounded_cold_and_zero_warm_across_history_updates() {
    let mut t = Table::new(2, 3_000).await;
    t.index_all().await;
    t.partition(&[1, 2], 4, |id| (id % 4) as u16).await; // one chunk
    let ds = t.ds.clone();
    ds.store().reset_stats();
    check(&ds, "id = 4321", ChunkCacheMode::Lazy).await;
    // The row map is checksummed and small: the tail read that opens it
    // fetches (and verifies) the block that also holds the touched chunk,
    // which is then read from that verified span. One request, within the
    // bound chunks touched + 2.
    let cold = ds.store().stats().requests_under("_fri");
    assert_eq!(cold, 1, "cold _fri reads");
    ds.store().reset_stats();
    for filter in FILTERS {
        check(&ds, filter, ChunkCacheMode::Lazy).await;
    }
    assert_eq!(ds.store().stats().requests_under("_fri"), 0, "warm queries");
    // A new FRI uuid for an unrelated rewrite keeps the bound row map and chunks.
    let more = t.append(6_000, 10).await;
    t.compact(&[more], 100).await;
    assert_ne!(fri_uuid(t.ds.manifest()), fri_uuid(ds.manifest()));
    t.ds.store().reset_stats();
    check(&t.ds, "id = 4321", ChunkCacheMode::Lazy).await;
    assert_eq!(t.ds.store().stats().requests_under("_fri"), 0);
}

/// `prepare` binds the stable partition's row map before any batch, so a
/// query can overlap that read with its index search: afterwards,
/// translating reads nothing more from `_fri`. A translator whose segment
/// needs no row map prepares without a request.
#[tokio::test]
async fn prepare_reads_the_row_map_before_the_first_batch() {
    let mut t = Table::new(2, 3_000).await;
    t.index_all().await;
    t.partition(&[1, 2], 4, |id| (id % 4) as u16).await;
    let ds = t.ds.clone();
    let reader = FriReader::open(&ds, ChunkCacheMode::Lazy).await.unwrap();
    let resolved = reader.resolve(&segments(&ds, "id_idx")).await.unwrap();
    let [segment] = resolved.as_slice() else {
        panic!("one segment: {resolved:?}");
    };
    let translator = segment.translator.as_ref().expect("translated");
    ds.store().reset_stats();
    translator.prepare().await.unwrap();
    assert_eq!(
        ds.store().stats().requests_under("_fri"),
        1,
        "row map opened"
    );
    ds.store().reset_stats();
    let stored = refract_core::row_address(1, 321);
    let mut out = Vec::new();
    translator
        .translate_batch(&[stored], &mut out)
        .await
        .unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].is_some_and(|new| new >> 32 > 2), "{out:?}");
    assert_eq!(
        ds.store().stats().total_requests(),
        0,
        "nothing left to read"
    );

    // Before the partition: no translation, nothing to prepare.
    let mut plain = Table::new(2, 100).await;
    plain.index_all().await;
    plain.compact(&[1, 2], 200).await;
    let reader = FriReader::open(&plain.ds, ChunkCacheMode::Lazy)
        .await
        .unwrap();
    let resolved = reader
        .resolve(&segments(&plain.ds, "id_idx"))
        .await
        .unwrap();
    plain.ds.store().reset_stats();
    for segment in &resolved {
        if let Some(translator) = &segment.translator {
            translator.prepare().await.unwrap();
        }
    }
    assert_eq!(
        plain.ds.store().stats().total_requests(),
        0,
        "ordered compactions live in the ledger"
    );
}

/// Opens `ds`'s table again through a store where every request waits
/// `wait`, so requests in flight together overlap and the store's round-trip
/// count is the query's critical path.
async fn behind_latency(ds: &Dataset, wait: std::time::Duration) -> Dataset {
    let throttled = refract_table::testing::with_latency(ds.store().object_store().clone(), wait);
    let store = refract_table::io::DatasetStore::from_remote_object_store(throttled, ds.uri());
    Dataset::open_with(
        ds.uri(),
        refract_table::OpenOptions {
            store: Some(store),
            ..refract_table::OpenOptions::default()
        },
    )
    .await
    .unwrap()
}

/// A cold point query waits for the index's files, then the row: two round
/// trips on a table of small files (each read whole), three through one
/// stable-partition transition (the row map opens alongside the segment,
/// its chunk comes with it), and one warm.
#[tokio::test]
async fn a_cold_point_query_waits_two_round_trips_three_through_a_partition() {
    let mut t = Table::new(2, 3_000).await;
    t.index_all().await;
    let wait = std::time::Duration::from_millis(100);
    let point = |ds: &Dataset| {
        Query::new(ds)
            .filter("id = 4321")
            .unwrap()
            .project(&["id"])
            .with_resolver(Arc::new(FriResolver::with_mode(ChunkCacheMode::Lazy)))
    };
    let cold = behind_latency(&t.ds, wait).await;
    cold.store().reset_stats();
    let result = point(&cold).execute().await.unwrap();
    assert_eq!(result.batch.num_rows(), 1);
    assert_eq!(result.explain.path, refract_index::AccessPath::Index);
    assert_eq!(cold.store().round_trips(), 2, "{:?}", cold.store().stats());

    t.partition(&[1, 2], 4, |id| (id % 4) as u16).await;
    let cold = behind_latency(&t.ds, wait).await;
    cold.store().reset_stats();
    let result = point(&cold).execute().await.unwrap();
    assert_eq!(result.batch.num_rows(), 1);
    assert_eq!(result.explain.segments.len(), 1);
    assert!(result.explain.segments[0].translated);
    assert_eq!(cold.store().round_trips(), 3, "{:?}", cold.store().stats());
    // Warm: the row, and nothing of `_fri`.
    cold.store().reset_stats();
    let result = point(&cold).execute().await.unwrap();
    assert_eq!(result.batch.num_rows(), 1);
    assert_eq!(cold.store().stats().requests_under("_fri"), 0);
    assert_eq!(cold.store().round_trips(), 1, "{:?}", cold.store().stats());
}
