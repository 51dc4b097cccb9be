//! Coverage and translation over version-1 lineage: every query equals a
//! brute-force scan in every state, and the resolver's plan (coverage,
//! translation, hops) is exactly the expected one.

mod common;

use std::collections::BTreeMap;

use common::*;
use refract_core::RowAddress;
use refract_reader::{ChunkCacheMode, Disposition, Exclusion, FriReader, ListedEntry};
use refract_table::Dataset;
use rstest::rstest;
use uuid::Uuid;

/// (coverage, translated, hops) per segment of `name`, in manifest order.
async fn plan(ds: &Dataset, name: &str) -> Vec<(Vec<u64>, bool, usize)> {
    let reader = FriReader::open(ds, ChunkCacheMode::Lazy).await.unwrap();
    reader
        .resolve(&segments(ds, name))
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                r.coverage.iter().map(u64::from).collect(),
                r.translator.is_some(),
                r.hops,
            )
        })
        .collect()
}

/// Disposition per segment uuid of `name`.
async fn dispositions(ds: &Dataset, name: &str) -> BTreeMap<Uuid, Disposition> {
    let reader = FriReader::open(ds, ChunkCacheMode::Lazy).await.unwrap();
    let listing = reader.listing().unwrap().clone();
    segments(ds, name)
        .iter()
        .map(|m| match listing.entry(&m.uuid).unwrap() {
            ListedEntry::Segment { plan, .. } => (m.uuid, plan.disposition),
            ListedEntry::System(_) => panic!("user segment listed as system"),
        })
        .collect()
}

#[tokio::test]
async fn ordered_compaction_translates_one_hop() {
    let mut t = Table::new(4, 60).await;
    t.index_all().await;
    check_all(&t.ds).await;
    let dest = t.compact(&[1, 2, 3], 100).await;
    assert_eq!(dest, vec![5, 6]);
    // Fragment 4 follows the run, relabelled 7.
    assert_eq!(plan(&t.ds, "id_idx").await, vec![(vec![5, 6, 7], true, 1)]);
    let results = check_all(&t.ds).await;
    let explain = &results[2].explain;
    assert_eq!(explain.index.as_deref(), Some("id_idx"));
    assert_eq!(explain.segments.len(), 1);
    assert!(explain.segments[0].translated);
    assert_eq!(explain.segments[0].hops, 1);
    assert!(explain.scanned_fragments.is_empty());
}

#[rstest]
#[case::inline(Storage::Inline)]
#[case::external(Storage::External)]
#[tokio::test]
async fn compaction_partition_compaction_is_three_hops(#[case] storage: Storage) {
    let mut t = Table::new(4, 60).await;
    t.storage = storage;
    t.index_all().await;
    t.delete("id % 10 = 3").await;
    let compacted = t.compact(&[2, 3], 200).await;
    assert_eq!(compacted, vec![5]);
    check_all(&t.ds).await;
    // fragments: 1(0..60) 5(60..180) 6(180..240, 4 relabelled); partition 5
    // and 6 by id % 3.
    t.delete("id = 100 OR id = 200").await;
    let parts = t.partition(&[5, 6], 3, |id| (id % 3) as u16).await;
    assert_eq!(parts, vec![7, 8, 9]);
    check_all(&t.ds).await;
    assert_eq!(
        plan(&t.ds, "id_idx").await,
        vec![(vec![1, 7, 8, 9], true, 2)]
    );
    t.delete("id = 31 OR id = 32").await;
    // 8 and 9 follow, relabelled 11 and 12.
    let last = t.compact(&[1, 7], 1_000).await;
    assert_eq!(last, vec![10]);
    assert_eq!(
        plan(&t.ds, "id_idx").await,
        vec![(vec![10, 11, 12], true, 3)]
    );
    let results = check_all(&t.ds).await;
    for r in &results {
        assert!(r.explain.scanned_fragments.is_empty(), "{:?}", r.explain);
    }
    assert_eq!(results[0].explain.segments[0].hops, 3);
}

#[tokio::test]
async fn partial_destination_coverage_keeps_the_covered_destination() {
    let mut t = Table::new(3, 50).await;
    t.index_all().await; // covers 1, 2, 3
    let unindexed = t.append(150, 50).await; // 4
    assert_eq!(unindexed, 4);
    // T1: {1} -> {5}, relabelling {2, 3, 4} -> {6, 7, 8}; T2: {7, 8} -> {9}:
    // 9 mixes covered and uncovered rows.
    assert_eq!(t.compact(&[1], 100).await, vec![5]);
    assert_eq!(t.compact(&[7, 8], 200).await, vec![9]);
    assert_eq!(plan(&t.ds, "id_idx").await, vec![(vec![5, 6], true, 1)]);
    let results = check_all(&t.ds).await;
    for r in &results {
        assert_eq!(r.explain.scanned_fragments, vec![9], "{:?}", r.explain);
    }
}

#[tokio::test]
async fn direct_destination_coverage_wins_over_lineage() {
    let mut t = Table::new(3, 50).await;
    t.index_all().await;
    let old = segments(&t.ds, "id_idx")[0].uuid;
    assert_eq!(t.compact(&[2, 3], 100).await, vec![4]);
    // A newer segment built directly on the destination takes it over.
    t.index_fragments(&[4]).await;
    let all = segments(&t.ds, "id_idx");
    assert_eq!(
        plan(&t.ds, "id_idx").await,
        vec![(vec![1], true, 0), (vec![4], true, 0)]
    );
    // Fragment 4 is a lineage destination, so even its direct segment goes
    // through the (zero-hop) checks rather than the identity path.
    let d = dispositions(&t.ds, "id_idx").await;
    assert_eq!(d[&old], Disposition::Translate);
    assert_eq!(d[&all[1].uuid], Disposition::Translate);
    let results = check_all(&t.ds).await;
    assert_eq!(results[0].explain.segments.len(), 2);
    // Compacting everything: the old segment's fragment 1 and the new one's
    // fragment 4 meet in 5, served by both, each with its own rows.
    assert_eq!(t.compact(&[1, 4], 500).await, vec![5]);
    assert_eq!(
        plan(&t.ds, "id_idx").await,
        vec![(vec![5], true, 1), (vec![5], true, 1)]
    );
    check_all(&t.ds).await;
}

#[tokio::test]
async fn older_segments_stop_at_a_newer_direct_intermediate() {
    let mut t = Table::new(2, 50).await;
    t.index_all().await; // S1 covers 1, 2
    assert_eq!(t.compact(&[1, 2], 500).await, vec![3]);
    t.index_fragments(&[3]).await; // S2 covers 3 directly
    assert_eq!(t.compact(&[3], 500).await, vec![4]);
    let all = segments(&t.ds, "id_idx");
    let d = dispositions(&t.ds, "id_idx").await;
    assert_eq!(
        d[&all[0].uuid],
        Disposition::Excluded(Exclusion::NoDerivedCoverage)
    );
    assert_eq!(d[&all[1].uuid], Disposition::Translate);
    assert_eq!(
        plan(&t.ds, "id_idx").await,
        vec![(vec![], false, 0), (vec![4], true, 1)]
    );
    let results = check_all(&t.ds).await;
    assert_eq!(results[0].explain.segments.len(), 1);
    assert_eq!(results[0].explain.segments[0].uuid, all[1].uuid);
}

#[tokio::test]
async fn reconverging_branches_return_each_row_once() {
    let mut t = Table::new(1, 120).await;
    t.index_all().await; // S1 covers 1
                         // 1 -> {2, 3} by parity; S2 indexes 2 only; then {2, 3} -> 4.
    assert_eq!(t.partition(&[1], 2, |id| (id % 2) as u16).await, vec![2, 3]);
    t.index_fragments(&[2]).await;
    assert_eq!(t.compact(&[2, 3], 500).await, vec![4]);
    assert_eq!(
        plan(&t.ds, "id_idx").await,
        vec![(vec![4], true, 2), (vec![4], true, 2)]
    );
    // S1's even rows went through 2, which S2 holds directly: dropped.
    let reader = FriReader::open(&t.ds, ChunkCacheMode::Lazy).await.unwrap();
    let resolved = reader.resolve(&segments(&t.ds, "id_idx")).await.unwrap();
    let stored: Vec<u64> = (0..120u32).map(|o| RowAddress::new(1, o).0).collect();
    let mut out = Vec::new();
    let s1 = resolved[0].translator.as_ref().unwrap();
    s1.translate_batch(&stored, &mut out).await.unwrap();
    for (offset, result) in out.iter().enumerate() {
        if offset % 2 == 0 {
            assert_eq!(*result, None, "even row {offset} must be left to S2");
        } else {
            // Odd rows: the 60 rows of 3 follow the 60 rows of 2 in 4.
            assert_eq!(*result, Some(RowAddress::new(4, 60 + offset as u32 / 2).0));
        }
    }
    // S2 translates its rows of 2 into the first half of 4.
    let s2 = resolved[1].translator.as_ref().unwrap();
    let stored2: Vec<u64> = (0..60u32).rev().map(|o| RowAddress::new(2, o).0).collect();
    s2.translate_batch(&stored2, &mut out).await.unwrap();
    let expected: Vec<Option<u64>> = (0..60u32)
        .rev()
        .map(|o| Some(RowAddress::new(4, o).0))
        .collect();
    assert_eq!(out, expected);
    let result = check(&t.ds, "id >= 0", ChunkCacheMode::Lazy).await;
    let mut ids = ids_of(&result);
    ids.sort_unstable();
    assert_eq!(ids, (0..120).collect::<Vec<_>>());
    check_all(&t.ds).await;
}

#[tokio::test]
async fn deleted_rows_never_come_back() {
    let mut t = Table::new(3, 80).await;
    t.index_all().await;
    t.delete("id < 20 OR id % 9 = 0").await; // before the rewrite: not in survivors
    let parts = t.partition(&[1, 2], 2, |id| (id % 2) as u16).await;
    t.delete("id = 50 OR id = 51").await; // after: deletion files on destinations
    check_all(&t.ds).await;
    t.delete("id >= 160 AND id < 240").await; // fragment 3 fully deleted
    check_all(&t.ds).await;
    let result = check(&t.ds, "id < 60", ChunkCacheMode::Lazy).await;
    let expected: Vec<i64> = (20..60)
        .filter(|i| i % 9 != 0 && *i != 50 && *i != 51)
        .collect();
    let mut got = ids_of(&result);
    got.sort_unstable();
    assert_eq!(got, expected);
    assert_eq!(parts.len(), 2);
}

#[tokio::test]
async fn every_segment_translates_in_batches_of_at_most_64k() {
    // 70,000 rows in one fragment: the executor hands the translator two
    // batches; results still equal the scan.
    let mut t = Table::new(1, 70_000).await;
    t.index_all().await;
    assert_eq!(t.compact(&[1], 40_000).await, vec![2, 3]);
    let result = check(&t.ds, "id >= 0", ChunkCacheMode::Lazy).await;
    assert_eq!(ids_of(&result).len(), 70_000);
}

#[tokio::test]
async fn nearest_neighbour_queries_translate_too() {
    let mut t = Table::new(4, 60).await;
    let params = refract_index::IndexParams {
        partitions: Some(4),
        ..refract_index::IndexParams::default()
    };
    t.ds = refract_index::create_index(&t.ds, "vec_idx", "vec", "ivf_flat", &params)
        .await
        .unwrap();
    t.delete("id % 5 = 0").await;
    t.compact(&[1, 2], 70).await; // 3, 4 relabelled 6, 7
    t.partition(&[6, 7], 2, |id| (id % 2) as u16).await;
    for probe in [3i64, 77, 150, 239] {
        let vector: Vec<f32> = (0..DIM).map(|j| component(probe, j) + 0.01).collect();
        let run = |use_index: bool| {
            let q = refract_index::Query::new(&t.ds)
                .nearest("vec", &vector, 10, 4)
                .use_index(use_index)
                .with_resolver(std::sync::Arc::new(refract_reader::FriResolver::with_mode(
                    ChunkCacheMode::Lazy,
                )));
            async move { q.execute().await.unwrap() }
        };
        let fri = run(true).await;
        let brute = run(false).await;
        assert_eq!(fri.batch, brute.batch, "probe {probe}");
        assert_eq!(fri.explain.segments.len(), 1);
        assert!(fri.explain.segments[0].translated);
        assert!(fri.explain.scanned_fragments.is_empty());
        if probe % 5 != 0 {
            assert_eq!(ids_of(&fri)[0], probe, "the nearest row is the probe's own");
        }
    }
}
