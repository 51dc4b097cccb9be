//! Index-aware kNN queries end to end on a dataset: six covered fragments with
//! deletions under one ivf_flat segment plus an appended fragment no segment
//! covers. Probing every partition equals the exact (brute-force) search,
//! a quarter of the partitions keeps recall@10 ≥ 0.9, deleted rows never come
//! back, the uncovered fragment is searched exactly, and `explain` says so.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::{Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_index::types::ivf_flat::kmeans::SplitMix64;
use refract_index::{create_index, Explain, IndexParams, Metric, Query};
use refract_table::{Dataset, OpenOptions, WriteOptions, ROW_ADDRESS_COLUMN};
use rstest::rstest;

const DIM: usize = 24;
const CLUSTERS: usize = 40;
const FRAGMENTS: i64 = 6;
const FRAGMENT_ROWS: i64 = 1_000;
const APPENDED_ROWS: i64 = 500;
const PARTITIONS: usize = 32;
const K: usize = 10;
const QUERIES: usize = 40;
const INDEX: &str = "vec_ivf";

fn schema() -> SchemaRef {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("vec", DataType::FixedSizeList(item, DIM as i32), false),
    ]))
}

/// Deterministic clustered vectors: centres in [-10, 10)^DIM, points within ±12 (clusters overlap, so probing a quarter of the partitions can miss).
struct Generator {
    centres: Vec<f32>,
}

impl Generator {
    fn new() -> Self {
        let mut rng = SplitMix64::new(7);
        let centres = (0..CLUSTERS * DIM)
            .map(|_| (rng.next_f64() * 20.0 - 10.0) as f32)
            .collect();
        Self { centres }
    }

    /// One point near a random centre.
    fn point(&self, rng: &mut SplitMix64) -> Vec<f32> {
        let c = rng.below(CLUSTERS);
        (0..DIM)
            .map(|d| self.centres[c * DIM + d] + (rng.next_f64() * 24.0 - 12.0) as f32)
            .collect()
    }

    /// The vector of row `id` (a function of the id alone).
    fn row(&self, id: i64) -> Vec<f32> {
        self.point(&mut SplitMix64::new(0x5EED ^ id as u64))
    }

    /// Query vectors from the same distribution, never equal to a row.
    fn queries(&self) -> Vec<Vec<f32>> {
        let mut rng = SplitMix64::new(0xABCD);
        (0..QUERIES).map(|_| self.point(&mut rng)).collect()
    }

    fn batch(&self, start: i64, n: i64) -> RecordBatch {
        let ids: Vec<i64> = (start..start + n).collect();
        let values: Vec<f32> = ids.iter().flat_map(|id| self.row(*id)).collect();
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let vectors = FixedSizeListArray::try_new(
            item,
            DIM as i32,
            Arc::new(Float32Array::from(values)),
            None,
        )
        .unwrap();
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from(ids)), Arc::new(vectors)],
        )
        .unwrap()
    }
}

fn write_options(rows: i64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows as u64,
        ..WriteOptions::default()
    }
}

/// The scenario: 6 × 1,000 rows indexed by ivf_flat, rows with id % 7 = 0
/// deleted afterwards, then 500 more rows appended in a fragment no segment covers.
struct Scenario {
    _dir: tempfile::TempDir,
    dataset: Dataset,
    generator: Generator,
    covered: Vec<u64>,
    appended: u64,
}

async fn scenario(metric: Metric) -> Scenario {
    let dir = tempfile::tempdir().unwrap();
    let generator = Generator::new();
    let uri = dir.path().join("ds");
    let mut dataset = Dataset::create(uri.to_str().unwrap(), schema(), OpenOptions::default())
        .await
        .unwrap();
    dataset
        .append(
            vec![generator.batch(0, FRAGMENTS * FRAGMENT_ROWS)],
            &write_options(FRAGMENT_ROWS),
        )
        .await
        .unwrap();
    let params = IndexParams {
        partitions: Some(PARTITIONS as u32),
        metric: Some(metric),
        ..IndexParams::default()
    };
    let mut dataset = create_index(&dataset, INDEX, "vec", "ivf_flat", &params)
        .await
        .unwrap();
    let covered: Vec<u64> = dataset.fragments().iter().map(|f| f.id).collect();
    assert_eq!(covered.len(), FRAGMENTS as usize);
    dataset.delete("id % 7 = 0").await.unwrap();
    dataset
        .append(
            vec![generator.batch(FRAGMENTS * FRAGMENT_ROWS, APPENDED_ROWS)],
            &write_options(APPENDED_ROWS),
        )
        .await
        .unwrap();
    let appended = dataset.fragments().last().unwrap().id;
    assert!(!covered.contains(&appended));
    Scenario {
        _dir: dir,
        dataset,
        generator,
        covered,
        appended,
    }
}

async fn knn(
    dataset: &Dataset,
    vector: &[f32],
    k: usize,
    nprobes: usize,
    metric: Metric,
    use_index: bool,
) -> (RecordBatch, Explain) {
    let result = Query::new(dataset)
        .nearest("vec", vector, k, nprobes)
        .metric(metric)
        .project(&["id"])
        .use_index(use_index)
        .execute()
        .await
        .unwrap();
    (result.batch, result.explain)
}

fn ids(batch: &RecordBatch) -> Vec<i64> {
    let ids = batch
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    ids.values().to_vec()
}

fn addresses(batch: &RecordBatch) -> Vec<u64> {
    let addrs = batch
        .column_by_name(ROW_ADDRESS_COLUMN)
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    addrs.values().to_vec()
}

/// Checks the explain of an indexed query: the one segment served exactly the
/// covered fragments, untranslated, and only the appended fragment was scanned.
fn assert_indexed_explain(scenario: &Scenario, explain: &Explain) {
    let segment_uuid = scenario
        .dataset
        .manifest()
        .indices
        .iter()
        .find(|m| m.name == INDEX)
        .unwrap()
        .uuid;
    assert_eq!(explain.index.as_deref(), Some(INDEX));
    assert_eq!(explain.segments.len(), 1, "{explain:?}");
    let segment = &explain.segments[0];
    assert_eq!(segment.uuid, segment_uuid);
    assert_eq!(segment.index_type, "ivf_flat");
    assert_eq!(segment.fragments, scenario.covered);
    assert!(!segment.translated);
    assert_eq!(segment.hops, 0);
    assert_eq!(segment.result, "scored");
    assert_eq!(explain.scanned_fragments, vec![scenario.appended]);
}

#[rstest]
#[case::l2(Metric::L2)]
#[case::cosine(Metric::Cosine)]
#[tokio::test]
async fn probing_every_partition_equals_exact_search(#[case] metric: Metric) {
    let s = scenario(metric).await;
    for (i, q) in s.generator.queries().iter().enumerate() {
        let (indexed, explain) = knn(&s.dataset, q, K, PARTITIONS, metric, true).await;
        let (exact, exact_explain) = knn(&s.dataset, q, K, PARTITIONS, metric, false).await;
        assert_eq!(indexed.num_rows(), K);
        assert_eq!(
            indexed,
            exact,
            "query {i}: indexed ids {:?} != exact ids {:?}",
            ids(&indexed),
            ids(&exact)
        );
        assert_indexed_explain(&s, &explain);
        assert_eq!(exact_explain.index, None);
        assert!(exact_explain.segments.is_empty());
        let all: Vec<u64> = s.dataset.fragments().iter().map(|f| f.id).collect();
        assert_eq!(exact_explain.scanned_fragments, all);
    }
}

#[tokio::test]
async fn recall_at_10_with_a_quarter_of_the_partitions() {
    let s = scenario(Metric::L2).await;
    let nprobes = PARTITIONS / 4;
    let mut found = 0usize;
    for q in s.generator.queries() {
        let (indexed, _) = knn(&s.dataset, &q, K, nprobes, Metric::L2, true).await;
        let (exact, _) = knn(&s.dataset, &q, K, PARTITIONS, Metric::L2, false).await;
        assert_eq!(indexed.num_rows(), K);
        let truth: BTreeSet<i64> = ids(&exact).into_iter().collect();
        found += ids(&indexed).iter().filter(|id| truth.contains(id)).count();
    }
    let recall = found as f64 / (QUERIES * K) as f64;
    println!(
        "knn recall@{K} at nprobes {nprobes}/{PARTITIONS} over {QUERIES} queries: {recall:.4}"
    );
    assert!(recall >= 0.9, "recall@{K} = {recall}");
}

#[rstest]
#[case::one_probe(1)]
#[case::every_partition(PARTITIONS)]
#[tokio::test]
async fn deleted_rows_never_appear(#[case] nprobes: usize) {
    let s = scenario(Metric::L2).await;
    // Query with the vectors of deleted rows themselves: each is its own
    // nearest neighbour in the index, at distance 0.
    for deleted_id in [0i64, 7, 700, 3_997, 5_999] {
        let q = s.generator.row(deleted_id);
        let (indexed, _) = knn(&s.dataset, &q, 50, nprobes, Metric::L2, true).await;
        assert_eq!(indexed.num_rows(), 50);
        let found = ids(&indexed);
        assert!(
            found
                .iter()
                .all(|id| id % 7 != 0 || *id >= FRAGMENTS * FRAGMENT_ROWS),
            "deleted row returned for query at row {deleted_id}: {found:?}"
        );
        if nprobes == PARTITIONS {
            let (exact, _) = knn(&s.dataset, &q, 50, nprobes, Metric::L2, false).await;
            assert_eq!(indexed, exact, "query at deleted row {deleted_id}");
        }
    }
}

#[tokio::test]
async fn uncovered_fragment_is_searched_exactly() {
    let s = scenario(Metric::L2).await;
    let first_appended = FRAGMENTS * FRAGMENT_ROWS;
    for id in [
        first_appended,
        first_appended + 123,
        first_appended + APPENDED_ROWS - 1,
    ] {
        let q = s.generator.row(id);
        // One probe: the index contributes little, the uncovered fragment all its rows.
        let (indexed, explain) = knn(&s.dataset, &q, K, 1, Metric::L2, true).await;
        assert_indexed_explain(&s, &explain);
        assert_eq!(ids(&indexed)[0], id);
        assert_eq!(
            addresses(&indexed)[0],
            (s.appended << 32) | (id - first_appended) as u64
        );
        let distances = indexed
            .column_by_name("_distance")
            .unwrap()
            .as_any()
            .downcast_ref::<Float32Array>()
            .unwrap();
        assert_eq!(distances.value(0), 0.0);
        // Every exact top-k row of the uncovered fragment is in the result.
        let (exact, _) = knn(&s.dataset, &q, K, PARTITIONS, Metric::L2, false).await;
        let result: BTreeSet<i64> = ids(&indexed).into_iter().collect();
        for exact_id in ids(&exact).into_iter().filter(|i| *i >= first_appended) {
            assert!(
                result.contains(&exact_id),
                "uncovered row {exact_id} missing"
            );
        }
    }
}

#[tokio::test]
async fn k_larger_than_the_live_rows_returns_every_live_row_in_order() {
    let s = scenario(Metric::L2).await;
    let live = s.dataset.count_rows(None).await.unwrap() as usize;
    let q = &s.generator.queries()[0];
    let (indexed, _) = knn(&s.dataset, q, live + 100, PARTITIONS, Metric::L2, true).await;
    let (exact, _) = knn(&s.dataset, q, live + 100, PARTITIONS, Metric::L2, false).await;
    assert_eq!(indexed.num_rows(), live);
    assert_eq!(indexed, exact);
    let distances = indexed
        .column_by_name("_distance")
        .unwrap()
        .as_any()
        .downcast_ref::<Float32Array>()
        .unwrap();
    assert!(distances.values().windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(distances.null_count(), 0);
}

#[tokio::test]
async fn more_partitions_than_live_rows_is_refused_before_building() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("ds");
    let mut dataset = Dataset::create(uri.to_str().unwrap(), schema(), OpenOptions::default())
        .await
        .unwrap();
    dataset
        .append(vec![Generator::new().batch(0, 20)], &write_options(10))
        .await
        .unwrap();
    dataset.delete("id < 5").await.unwrap();
    let params = IndexParams {
        partitions: Some(16),
        ..IndexParams::default()
    };
    let err = create_index(&dataset, INDEX, "vec", "ivf_flat", &params)
        .await
        .unwrap_err();
    assert!(
        matches!(err, refract_core::Error::InvalidInput { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "invalid input: partitions must be at most the table's 15 live rows, got 16"
    );
    let latest = dataset.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), dataset.version(), "nothing committed");
    let fits = IndexParams {
        partitions: Some(15),
        ..IndexParams::default()
    };
    create_index(&dataset, INDEX, "vec", "ivf_flat", &fits)
        .await
        .unwrap();
}
