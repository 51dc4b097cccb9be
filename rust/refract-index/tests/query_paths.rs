//! The planner's choice between the index path and the scan for btree,
//! bitmap and ngram indices at low, medium and high selectivity: the path,
//! the figures it decided on, the exact rows (equal to a brute-force scan on
//! every path) and the requests each path sends.

use std::sync::Arc;

use arrow_array::{
    FixedSizeListArray, Float32Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use refract_index::query::cost::Work;
use refract_index::{create_index, AccessPath, IndexParams, IndexUse, Query, QueryResult};
use refract_table::io::RequestStats;
use refract_table::{Dataset, OpenOptions, WriteOptions};
use rstest::rstest;

const FRAGMENTS: i64 = 20;
const FRAGMENT_ROWS: i64 = 1_000;

/// Level of row `id`: 1 for 10 rows, 2 for every tenth row, 3 for half the
/// rows, 0 for the rest; `text` names the level.
fn level(id: i64) -> i32 {
    if id % 2_000 == 7 {
        1
    } else if id % 10 == 3 {
        2
    } else if id % 2 == 0 {
        3
    } else {
        0
    }
}

const WORDS: [&str; 4] = ["common item", "quartz item", "zephyr item", "jigsaw item"];

/// 20 fragments of 1,000 rows, btree on `id`, bitmap on `level`, ngram on `text`.
async fn table(dir: &tempfile::TempDir) -> String {
    let uri = dir.path().join("t").to_string_lossy().to_string();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("level", DataType::Int32, false),
        Field::new("text", DataType::Utf8, false),
    ]));
    let ids: Vec<i64> = (0..FRAGMENTS * FRAGMENT_ROWS).collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(ids.iter().map(|i| level(*i)).collect::<Int32Array>()),
            Arc::new(
                ids.iter()
                    .map(|i| Some(WORDS[level(*i) as usize]))
                    .collect::<StringArray>(),
            ),
        ],
    )
    .unwrap();
    let mut ds = Dataset::create(&uri, schema, OpenOptions::default())
        .await
        .unwrap();
    let options = WriteOptions {
        max_rows_per_file: FRAGMENT_ROWS as u64,
        ..WriteOptions::default()
    };
    ds.append(vec![batch], &options).await.unwrap();
    for (name, column, kind) in [
        ("id_idx", "id", "btree"),
        ("level_idx", "level", "bitmap"),
        ("text_idx", "text", "ngram"),
    ] {
        ds = create_index(&ds, name, column, kind, &IndexParams::default())
            .await
            .unwrap();
    }
    uri
}

/// Runs the query on a freshly opened dataset (cold caches); the result and
/// the requests it sent.
async fn run(uri: &str, filter: &str, index_use: IndexUse) -> (QueryResult, RequestStats) {
    let ds = Dataset::open(uri).await.unwrap();
    ds.store().reset_stats();
    let result = Query::new(&ds)
        .filter(filter)
        .unwrap()
        .index_use(index_use)
        .execute()
        .await
        .unwrap();
    (result, ds.store().stats())
}

async fn brute_force(uri: &str, filter: &str) -> RecordBatch {
    Dataset::open(uri)
        .await
        .unwrap()
        .scan()
        .filter(filter)
        .unwrap()
        .with_row_address()
        .try_into_batch()
        .await
        .unwrap()
}

/// How the planner must decide.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// The index path.
    Index,
    /// Scanned after searching the index (its answer was too large).
    ScanAfterSearch,
    /// Scanned without searching (the btree page lookup or the bitmap
    /// posting statistics ruled the index out).
    ScanBeforeSearch,
}

#[rstest]
#[case::btree_point("id = 12345", "id_idx", 1, Expect::Index)]
#[case::btree_narrow_range("id >= 5000 AND id < 5100", "id_idx", 100, Expect::Index)]
#[case::btree_tenth_contiguous("id >= 5000 AND id < 7000", "id_idx", 2_000, Expect::Index)]
#[case::btree_most("id >= 2000", "id_idx", 18_000, Expect::ScanAfterSearch)]
#[case::btree_all("id >= 0", "id_idx", 20_000, Expect::ScanBeforeSearch)]
#[case::bitmap_rare("level = 1", "level_idx", 10, Expect::Index)]
#[case::bitmap_rare_in("level IN (1, 9)", "level_idx", 10, Expect::Index)]
#[case::bitmap_tenth_scattered("level = 2", "level_idx", 2_000, Expect::ScanBeforeSearch)]
#[case::bitmap_half("level = 3", "level_idx", 10_000, Expect::ScanBeforeSearch)]
#[case::bitmap_half_in("level IN (1, 3)", "level_idx", 10_010, Expect::ScanBeforeSearch)]
#[case::ngram_rare("contains(text, 'quartz')", "text_idx", 10, Expect::Index)]
#[case::ngram_tenth("contains(text, 'zephyr')", "text_idx", 2_000, Expect::ScanAfterSearch)]
#[case::ngram_half(
    "contains(text, 'jigsaw')",
    "text_idx",
    10_000,
    Expect::ScanAfterSearch
)]
#[tokio::test]
async fn planner_picks_the_cheaper_path_and_rows_equal_the_scan(
    #[case] filter: &str,
    #[case] index: &str,
    #[case] rows: usize,
    #[case] expect: Expect,
) {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(&dir).await;
    let expected = brute_force(&uri, filter).await;
    assert_eq!(expected.num_rows(), rows, "{filter}");
    let (planned, planned_stats) = run(&uri, filter, IndexUse::Auto).await;
    let (forced, _) = run(&uri, filter, IndexUse::Always).await;
    let (scanned, scan_stats) = run(&uri, filter, IndexUse::Never).await;
    for (what, result) in [
        ("planned", &planned),
        ("forced", &forced),
        ("scanned", &scanned),
    ] {
        assert_eq!(
            result.batch, expected,
            "{filter} {what}: {:?}",
            result.explain
        );
    }
    assert_eq!(forced.explain.path, AccessPath::Index);
    assert_eq!(forced.explain.index.as_deref(), Some(index));
    assert_eq!(scanned.explain.path, AccessPath::Scan);
    assert!(scanned.explain.considered.is_empty());

    let explain = &planned.explain;
    assert_eq!(explain.considered.len(), 1, "{explain:?}");
    let considered = &explain.considered[0];
    assert_eq!(considered.index, index);
    assert_eq!(
        considered.scan_work,
        Work {
            fragments: FRAGMENTS as u64,
            ranges: FRAGMENTS as u64,
            rows: (FRAGMENTS * FRAGMENT_ROWS) as u64
        }
    );
    match expect {
        Expect::Index => {
            assert_eq!(explain.path, AccessPath::Index, "{explain:?}");
            assert_eq!(explain.index.as_deref(), Some(index));
            // Every covered fragment is served; the ones without a match are not read.
            assert!(explain.scanned_fragments.is_empty());
            // Only the fragments holding a match are read: one request each
            // (these small files are fetched whole), against one per fragment
            // for the scan.
            let data = |s: &RequestStats| s.by_prefix.get("data").copied().unwrap_or_default();
            let (planned, scan) = (data(&planned_stats), data(&scan_stats));
            let touched = considered.index_work.map(|w| w.fragments);
            assert_eq!(Some(planned.requests), touched, "{filter}");
            assert_eq!(scan.requests, FRAGMENTS as u64);
            assert!(
                planned.bytes_read < scan.bytes_read,
                "{planned:?} vs {scan:?}"
            );
        }
        Expect::ScanAfterSearch | Expect::ScanBeforeSearch => {
            assert_eq!(explain.path, AccessPath::Scan, "{explain:?}");
            assert_eq!(explain.index, None);
            assert!(explain.segments.is_empty());
            assert_eq!(explain.scanned_fragments.len(), FRAGMENTS as usize);
            // The scan path reads exactly the data a plain scan reads.
            assert_eq!(
                planned_stats.by_prefix.get("data"),
                scan_stats.by_prefix.get("data"),
                "{filter}"
            );
        }
    }
    let searched = expect != Expect::ScanBeforeSearch;
    assert_eq!(
        considered.matched_rows.is_some(),
        searched,
        "{considered:?}"
    );
    assert_eq!(considered.index_work.is_some(), searched, "{considered:?}");
    if let Some(matched) = considered.matched_rows {
        // Exact for btree and bitmap, trigram candidates (here exact) for ngram.
        assert_eq!(matched, rows as u64, "{filter}");
    }
    // The bitmap's statistics know its answer before searching: exactly for
    // one posting without deletions.
    let forced_considered = &forced.explain.considered[0];
    if index == "level_idx" {
        assert_eq!(considered.estimated_rows, Some(rows as u64), "{filter}");
        let work = considered.estimated_work.expect("bitmap statistics");
        assert!(work.rows >= rows as u64, "{work:?}");
        if !filter.contains(" IN ") {
            assert_eq!(Some(work), forced_considered.index_work, "{filter}");
        }
    } else {
        assert_eq!(considered.estimated_work, None, "{filter}");
    }
}

#[tokio::test]
async fn a_point_lookup_reads_one_range_of_one_fragment() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(&dir).await;
    let (result, stats) = run(&uri, "id = 12345", IndexUse::Auto).await;
    assert_eq!(
        result.explain.considered[0].index_work,
        Some(Work {
            fragments: 1,
            ranges: 1,
            rows: 1
        })
    );
    // One data request, for the one fragment holding id 12345.
    assert_eq!(result.batch.num_rows(), 1);
    assert_eq!(stats.by_prefix["data"].requests, 1);
}

#[tokio::test]
async fn the_cheaper_of_two_indexed_conjuncts_serves() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(&dir).await;
    // The bitmap conjunct comes first but matches every tenth row; the btree one is narrow.
    let filter = "level = 2 AND id >= 5000 AND id < 5100";
    let (result, _) = run(&uri, filter, IndexUse::Auto).await;
    assert_eq!(result.batch, brute_force(&uri, filter).await);
    assert_eq!(result.batch.num_rows(), 10);
    let considered: Vec<&str> = result
        .explain
        .considered
        .iter()
        .map(|c| c.index.as_str())
        .collect();
    assert_eq!(considered, vec!["level_idx", "id_idx"]);
    assert_eq!(result.explain.index.as_deref(), Some("id_idx"));
    assert_eq!(result.explain.path, AccessPath::Index);
}

/// A point query whose index serves a few large fragments opens their data
/// files (footer, the read columns' page metadata) while it searches: behind
/// a store where every request waits, the cold query waits for the index's
/// round trips and one more for the row, and a warm one for the row alone.
#[tokio::test]
async fn a_cold_point_query_opens_large_fragments_while_it_searches() {
    const ROWS: i64 = 100_000;
    let uri = format!("memory://query-paths-{}", uuid::Uuid::new_v4());
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "vec",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 16),
            false,
        ),
    ]));
    let mut ds = Dataset::create(&uri, schema.clone(), OpenOptions::default())
        .await
        .unwrap();
    for fragment in 0..2 {
        let ids: Vec<i64> = (fragment * ROWS..(fragment + 1) * ROWS).collect();
        // 64 bytes of scrambled floats a row: Lance cannot compress them.
        let values: Float32Array = ids
            .iter()
            .flat_map(|i| {
                (0..16u64).map(move |j| {
                    ((*i as u64 * 16 + j).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as f32
                })
            })
            .collect();
        let vec = FixedSizeListArray::new(
            Arc::new(Field::new("item", DataType::Float32, true)),
            16,
            Arc::new(values),
            None,
        );
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(ids)), Arc::new(vec)],
        )
        .unwrap();
        ds.append(vec![batch], &WriteOptions::default())
            .await
            .unwrap();
    }
    let ds = create_index(&ds, "id_idx", "id", "btree", &IndexParams::default())
        .await
        .unwrap();
    for fragment in ds.fragments() {
        let bytes: u64 = fragment.files.iter().map(|f| f.size_bytes).sum();
        assert!(
            bytes > refract_table::io::lance_files::PREFETCH_LIMIT_BYTES,
            "fragment {} is {bytes} bytes: too small to be opened ahead",
            fragment.id
        );
    }
    let throttled = refract_table::testing::with_latency(
        ds.store().object_store().clone(),
        std::time::Duration::from_millis(100),
    );
    let store = refract_table::io::DatasetStore::from_remote_object_store(throttled, &uri);
    let cold = Dataset::open_with(
        &uri,
        OpenOptions {
            store: Some(store),
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap();
    let point = || async {
        Query::new(&cold)
            .filter("id = 123456")
            .unwrap()
            .project(&["id", "vec"])
            .execute()
            .await
            .unwrap()
    };
    cold.store().reset_stats();
    let result = point().await;
    assert_eq!(result.batch.num_rows(), 1);
    assert_eq!(result.explain.path, AccessPath::Index);
    assert_eq!(cold.store().round_trips(), 4, "{:?}", cold.store().stats());
    cold.store().reset_stats();
    assert_eq!(point().await.batch.num_rows(), 1);
    assert_eq!(cold.store().round_trips(), 1, "{:?}", cold.store().stats());
    // On a store without round trips nothing is opened ahead: the cold query
    // reads fewer data-file bytes than the remote one, which read a row of
    // each fragment ahead.
    let remote_data = {
        let again = Dataset::open_with(
            &uri,
            OpenOptions {
                store: Some(refract_table::io::DatasetStore::from_remote_object_store(
                    ds.store().object_store().clone(),
                    &uri,
                )),
                ..OpenOptions::default()
            },
        )
        .await
        .unwrap();
        again.store().reset_stats();
        run_point(&again).await;
        again.store().stats().requests_under("data")
    };
    let local = Dataset::open(&uri).await.unwrap();
    assert!(!local.store().is_remote());
    local.store().reset_stats();
    run_point(&local).await;
    let local_data = local.store().stats().requests_under("data");
    assert!(
        local_data < remote_data,
        "local {local_data} data requests, remote {remote_data}"
    );
}

async fn run_point(dataset: &Dataset) {
    let result = Query::new(dataset)
        .filter("id = 123456")
        .unwrap()
        .project(&["id", "vec"])
        .execute()
        .await
        .unwrap();
    assert_eq!(result.batch.num_rows(), 1);
}
