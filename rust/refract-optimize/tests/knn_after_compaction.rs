//! kNN queries after an inline compaction: the ivf_flat segment is rewritten in
//! the Rewrite commit (new uuid, coverage restamped to the new fragment, deleted
//! rows dropped), probing every partition still equals the exact search,
//! recall@10 at a quarter of the partitions stays ≥ 0.9, deleted rows never
//! come back, and a fragment appended afterwards is scanned exactly.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::{Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_index::manage::index_context;
use refract_index::types::ivf_flat::kmeans::SplitMix64;
use refract_index::types::ivf_flat::IvfFlatIndex;
use refract_index::types::IndexType;
use refract_index::{create_index, Explain, IndexParams, Metric, Query};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_table::io::index_dir;
use refract_table::{Dataset, IndexMetadata, OpenOptions, WriteOptions, ROW_ADDRESS_COLUMN};
use roaring::RoaringTreemap;

const DIM: usize = 16;
const CLUSTERS: usize = 30;
const FRAGMENTS: i64 = 5;
const FRAGMENT_ROWS: i64 = 1_000;
const APPENDED_ROWS: i64 = 300;
const PARTITIONS: usize = 24;
const K: usize = 10;
const QUERIES: usize = 30;
const INDEX: &str = "vec_ivf";

fn schema() -> SchemaRef {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("vec", DataType::FixedSizeList(item, DIM as i32), false),
    ]))
}

/// Deterministic clustered vectors: centres in [-10, 10)^DIM, points within ±2.
struct Generator {
    centres: Vec<f32>,
}

impl Generator {
    fn new() -> Self {
        let mut rng = SplitMix64::new(11);
        let centres = (0..CLUSTERS * DIM)
            .map(|_| (rng.next_f64() * 20.0 - 10.0) as f32)
            .collect();
        Self { centres }
    }

    fn point(&self, rng: &mut SplitMix64) -> Vec<f32> {
        let c = rng.below(CLUSTERS);
        (0..DIM)
            .map(|d| self.centres[c * DIM + d] + (rng.next_f64() * 4.0 - 2.0) as f32)
            .collect()
    }

    /// The vector of row `id` (a function of the id alone).
    fn row(&self, id: i64) -> Vec<f32> {
        self.point(&mut SplitMix64::new(0xF00D ^ id as u64))
    }

    fn queries(&self) -> Vec<Vec<f32>> {
        let mut rng = SplitMix64::new(0xBEEF);
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

/// The compacted scenario and what it is checked against.
struct Compacted {
    _dir: tempfile::TempDir,
    dataset: Dataset,
    generator: Generator,
    segment: IndexMetadata,
    old_uuid: uuid::Uuid,
    compacted: Vec<u64>,
    appended: u64,
}

/// 5 × 1,000 rows indexed by ivf_flat; rows with id % 7 = 0 deleted; an inline
/// compaction into one fragment; then 300 rows appended in an uncovered fragment.
async fn compacted() -> Compacted {
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
        metric: Some(Metric::L2),
        ..IndexParams::default()
    };
    let mut dataset = create_index(&dataset, INDEX, "vec", "ivf_flat", &params)
        .await
        .unwrap();
    let old_uuid = segment_of(&dataset).uuid;
    dataset.delete("id % 7 = 0").await.unwrap();
    let options = CompactionOptions {
        target_rows_per_fragment: 100_000,
        ..CompactionOptions::default()
    };
    let metrics = compact_files(&mut dataset, &options, None).await.unwrap();
    assert!(metrics.committed_version.is_some());
    let compacted: Vec<u64> = dataset.fragments().iter().map(|f| f.id).collect();
    assert_eq!(compacted.len(), 1, "one compacted fragment expected");
    dataset
        .append(
            vec![generator.batch(FRAGMENTS * FRAGMENT_ROWS, APPENDED_ROWS)],
            &write_options(APPENDED_ROWS),
        )
        .await
        .unwrap();
    let appended = dataset.fragments().last().unwrap().id;
    let segment = segment_of(&dataset);
    Compacted {
        _dir: dir,
        dataset,
        generator,
        segment,
        old_uuid,
        compacted,
        appended,
    }
}

fn segment_of(dataset: &Dataset) -> IndexMetadata {
    let segments: Vec<&IndexMetadata> = dataset
        .manifest()
        .indices
        .iter()
        .filter(|m| m.name == INDEX)
        .collect();
    assert_eq!(segments.len(), 1);
    segments[0].clone()
}

async fn knn(
    dataset: &Dataset,
    vector: &[f32],
    k: usize,
    nprobes: usize,
    use_index: bool,
) -> (RecordBatch, Explain) {
    let result = Query::new(dataset)
        .nearest("vec", vector, k, nprobes)
        .project(&["id"])
        .use_index(use_index)
        .execute()
        .await
        .unwrap();
    (result.batch, result.explain)
}

fn ids(batch: &RecordBatch) -> Vec<i64> {
    batch
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

fn assert_explain(c: &Compacted, explain: &Explain) {
    assert_eq!(explain.index.as_deref(), Some(INDEX));
    assert_eq!(explain.segments.len(), 1, "{explain:?}");
    let segment = &explain.segments[0];
    assert_eq!(segment.uuid, c.segment.uuid);
    assert_eq!(segment.fragments, c.compacted);
    assert!(!segment.translated);
    assert_eq!(segment.hops, 0);
    assert_eq!(segment.result, "scored");
    assert_eq!(explain.scanned_fragments, vec![c.appended]);
}

#[tokio::test]
async fn segment_is_rewritten_to_exactly_the_live_rows() {
    let c = compacted().await;
    assert_ne!(c.segment.uuid, c.old_uuid);
    let coverage: Vec<u64> = c
        .segment
        .fragment_bitmap
        .as_ref()
        .unwrap()
        .iter()
        .map(u64::from)
        .collect();
    assert_eq!(coverage, c.compacted);
    let ctx = index_context(&c.dataset);
    let reader = IvfFlatIndex
        .open(&ctx, &index_dir(&c.segment.uuid), &c.segment.details)
        .await
        .unwrap();
    let stored = reader.stored_addresses().await.unwrap();
    let live = c
        .dataset
        .scan()
        .project(&[])
        .with_row_address()
        .fragments(&c.compacted)
        .try_into_batch()
        .await
        .unwrap();
    let live: RoaringTreemap = live
        .column_by_name(ROW_ADDRESS_COLUMN)
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap()
        .values()
        .iter()
        .copied()
        .collect();
    let expected_live =
        (FRAGMENTS * FRAGMENT_ROWS) as u64 - (FRAGMENTS * FRAGMENT_ROWS / 7 + 1) as u64;
    assert_eq!(live.len(), expected_live);
    assert_eq!(stored, live);
}

#[tokio::test]
async fn probing_every_partition_equals_exact_search() {
    let c = compacted().await;
    for (i, q) in c.generator.queries().iter().enumerate() {
        let (indexed, explain) = knn(&c.dataset, q, K, PARTITIONS, true).await;
        let (exact, _) = knn(&c.dataset, q, K, PARTITIONS, false).await;
        assert_eq!(indexed.num_rows(), K);
        assert_eq!(
            indexed,
            exact,
            "query {i}: {:?} != {:?}",
            ids(&indexed),
            ids(&exact)
        );
        assert_explain(&c, &explain);
    }
}

#[tokio::test]
async fn recall_at_10_with_a_quarter_of_the_partitions() {
    let c = compacted().await;
    let nprobes = PARTITIONS / 4;
    let mut found = 0usize;
    for q in c.generator.queries() {
        let (indexed, _) = knn(&c.dataset, &q, K, nprobes, true).await;
        let (exact, _) = knn(&c.dataset, &q, K, PARTITIONS, false).await;
        let truth: BTreeSet<i64> = ids(&exact).into_iter().collect();
        found += ids(&indexed).iter().filter(|id| truth.contains(id)).count();
    }
    let recall = found as f64 / (QUERIES * K) as f64;
    println!("knn after compaction: recall@{K} at nprobes {nprobes}/{PARTITIONS} over {QUERIES} queries: {recall:.4}");
    assert!(recall >= 0.9, "recall@{K} = {recall}");
}

#[tokio::test]
async fn deleted_rows_never_appear_and_appended_rows_are_found() {
    let c = compacted().await;
    for deleted_id in [0i64, 7, 2_002, 4_998] {
        let q = c.generator.row(deleted_id);
        let (indexed, explain) = knn(&c.dataset, &q, 40, 1, true).await;
        assert_explain(&c, &explain);
        assert_eq!(indexed.num_rows(), 40);
        let found = ids(&indexed);
        assert!(
            found
                .iter()
                .all(|id| id % 7 != 0 || *id >= FRAGMENTS * FRAGMENT_ROWS),
            "deleted row returned near {deleted_id}: {found:?}"
        );
    }
    let first_appended = FRAGMENTS * FRAGMENT_ROWS;
    for id in [first_appended, first_appended + APPENDED_ROWS - 1] {
        let (indexed, _) = knn(&c.dataset, &c.generator.row(id), K, 1, true).await;
        assert_eq!(ids(&indexed)[0], id);
        let rowaddr = indexed
            .column_by_name(ROW_ADDRESS_COLUMN)
            .unwrap()
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .value(0);
        assert_eq!(rowaddr, (c.appended << 32) | (id - first_appended) as u64);
        let distance = indexed
            .column_by_name("_distance")
            .unwrap()
            .as_any()
            .downcast_ref::<Float32Array>()
            .unwrap();
        assert_eq!(distance.value(0), 0.0);
        assert!(!distance.is_null(0));
    }
}
