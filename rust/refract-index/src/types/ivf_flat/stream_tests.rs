//! Bounds of a streaming ivf_flat build: the training sample's cap, the
//! spilled build's batches and held bytes, every live row in exactly one
//! partition, and exact kNN when every partition is probed.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::stream::{self, BoxStream};
use futures::StreamExt;
use refract_core::Result;
use refract_table::io::RelativePath;
use refract_table::{Dataset, OpenOptions, WriteOptions};

use super::build::assign;
use super::distance::distance;
use super::kmeans::SplitMix64;
use super::layout::{partition_column, vector_values};
use super::stream::{build, output_runs, BuildLimits, BuildReport, SPILL_FILE};
use super::{open_file, IvfFlatDetails, IvfFlatSegment};
use crate::types::addresses::read_addresses;
use crate::types::test_support::{context, seg};
use crate::types::{IndexContext, IndexParams, Metric};

const DIM: usize = 8;

fn item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Float32, true))
}

/// The vector of row `id`: near one of 12 centres, a function of the id alone.
fn vector(id: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(0xC0FFEE ^ id);
    let centre = rng.below(12) as f32 * 10.0;
    (0..DIM)
        .map(|d| centre * ((d % 3) as f32 - 1.0) + (rng.next_f64() * 8.0 - 4.0) as f32)
        .collect()
}

/// One build-input batch of rows `ids` at addresses `ids` (no table).
fn input_batch(ids: std::ops::Range<u64>) -> RecordBatch {
    let values: Vec<f32> = ids.clone().flat_map(vector).collect();
    let list = FixedSizeListArray::try_new(
        item(),
        DIM as i32,
        Arc::new(Float32Array::from(values)),
        None,
    )
    .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("emb", DataType::FixedSizeList(item(), DIM as i32), false),
        Field::new("_rowaddr", DataType::UInt64, false),
    ]));
    let addrs: Vec<u64> = ids.collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(list) as ArrayRef,
            Arc::new(arrow_array::UInt64Array::from(addrs)),
        ],
    )
    .unwrap()
}

fn input(batches: Vec<RecordBatch>) -> BoxStream<'static, Result<RecordBatch>> {
    stream::iter(batches.into_iter().map(Ok)).boxed()
}

fn params(partitions: Option<u32>, sample_rate: Option<u32>) -> IndexParams {
    IndexParams {
        partitions,
        sample_rate,
        ..IndexParams::default()
    }
}

/// Bytes of one row a build holds: 8 values and an address.
const ROW_BYTES: usize = DIM * 4 + 8;

/// Limits that make a few thousand rows spill and take several output
/// passes, in batches of 100 rows.
fn tiny() -> BuildLimits {
    BuildLimits {
        batch_bytes: 100 * ROW_BYTES,
        memory_bytes: 8 << 10,
        ..BuildLimits::default()
    }
}

async fn built(
    ctx: &IndexContext,
    name: &str,
    batches: Vec<RecordBatch>,
    params: &IndexParams,
    limits: BuildLimits,
) -> (Vec<u8>, BuildReport) {
    build(ctx, &seg(name), input(batches), params, limits)
        .await
        .unwrap()
}

/// Every stored row of a segment in file order: (partition, address, vector).
async fn stored_rows(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &[u8],
) -> Vec<(u32, u64, Vec<f32>)> {
    let details = IvfFlatDetails::decode(details).unwrap();
    let file = open_file(ctx, dir, &details).await.unwrap();
    let dim = file.layout.dim;
    let mut rows = Vec::new();
    for batch in file.vectors.read_all(None).await.unwrap() {
        let parts = partition_column(&batch).unwrap().values().to_vec();
        let values = vector_values(&batch, dim).unwrap().to_vec();
        let start = rows.len() as u64;
        let addrs = read_addresses(&file.addresses, start..start + parts.len() as u64, "test")
            .await
            .unwrap();
        for (i, p) in parts.iter().enumerate() {
            rows.push((*p, addrs.value(i), values[i * dim..(i + 1) * dim].to_vec()));
        }
    }
    rows
}

#[tokio::test]
async fn the_trainer_never_sees_more_than_the_cap() {
    let (ctx, _tmp) = context().await;
    let batches = || vec![input_batch(0..1_500), input_batch(1_500..3_000)];
    // 4 partitions × 8 rows: the reservoir holds 32 of the 3,000 rows.
    let (_, report) = built(
        &ctx,
        "rate",
        batches(),
        &params(Some(4), Some(8)),
        BuildLimits::default(),
    )
    .await;
    assert_eq!(
        (report.rows, report.sample_rows, report.training_rows),
        (3_000, 32, 32)
    );
    // The sample allocates its 32 rows, no more.
    assert_eq!(report.sample_bytes, 32 * ROW_BYTES);
    // The absolute row cap beats partitions × rate (4 × 1,000).
    let limits = BuildLimits {
        max_training_rows: 100,
        ..BuildLimits::default()
    };
    let (_, report) = built(
        &ctx,
        "rows",
        batches(),
        &params(Some(4), Some(1_000)),
        limits,
    )
    .await;
    assert_eq!((report.sample_rows, report.training_rows), (100, 100));
    // So does the byte cap: 1,600 bytes of 8 × 4-byte vectors is 50 rows…
    let limits = BuildLimits {
        max_training_bytes: 1_600,
        ..BuildLimits::default()
    };
    let (_, report) = built(
        &ctx,
        "bytes",
        batches(),
        &params(Some(4), Some(1_000)),
        limits,
    )
    .await;
    assert_eq!((report.sample_rows, report.training_rows), (50, 50));
    // …but never below one row per partition.
    let (_, report) = built(
        &ctx,
        "floor",
        batches(),
        &params(Some(80), Some(1_000)),
        limits,
    )
    .await;
    assert_eq!((report.sample_rows, report.training_rows), (80, 80));
    // Without a partition count the reservoir samples for the most partitions
    // there may be (4,096, so all 3,000 rows here) and k-means trains on the
    // cap of the count it gets: √3,000 ≈ 55 partitions × 1 row.
    let (_, report) = built(
        &ctx,
        "default",
        batches(),
        &params(None, Some(1)),
        BuildLimits::default(),
    )
    .await;
    assert_eq!((report.sample_rows, report.training_rows), (3_000, 55));
}

#[tokio::test]
async fn rows_kept_before_spilling_grow_to_the_budget_at_most() {
    let (ctx, _tmp) = context().await;
    // 8 KiB holds 204 rows of 40 bytes; 200 rows in batches of 7 stay in
    // memory, in two chunks of 100 rows allocated once each (a doubling
    // buffer would have reached 224 rows, 8,960 bytes, and copied them).
    let batches = (0..200u64)
        .step_by(7)
        .map(|start| input_batch(start..(start + 7).min(200)))
        .collect();
    let (_, report) = built(&ctx, "m", batches, &params(Some(4), None), tiny()).await;
    assert!(!report.spilled, "{report:?}");
    assert_eq!(report.max_held_bytes, 200 * ROW_BYTES);
    assert_eq!(report.max_batch_rows, 100);
}

#[tokio::test]
async fn spilled_batches_and_held_rows_stay_bounded() {
    let (ctx, _tmp) = context().await;
    // 3,000 rows of 40 bytes against an 8 KiB budget (204 rows): with 6
    // partitions most runs are one partition, streamed as it comes; with 60
    // most runs hold rows of the partitions after their first.
    for partitions in [6u32, 60] {
        let params = params(Some(partitions), None);
        let (s, m) = (format!("s{partitions}"), format!("m{partitions}"));
        // One input batch of 3,000 rows, far above the 100-row batch bound.
        let (spilled, report) = built(&ctx, &s, vec![input_batch(0..3_000)], &params, tiny()).await;
        assert!(report.spilled);
        assert_eq!(report.max_batch_rows, 100);
        // Every output pass fills one buffer of exactly the largest run's
        // held rows, within the budget (one input batch spills before any
        // row is kept).
        let segment = IvfFlatSegment::open(&ctx, &seg(&s), &spilled)
            .await
            .unwrap();
        let lengths = &segment.layout().lengths;
        let runs = output_runs(lengths, ROW_BYTES as u64, (8 << 10) as u64);
        let most_held = runs
            .iter()
            .map(|run| lengths[run.start + 1..run.end].iter().sum::<u64>())
            .max()
            .unwrap() as usize;
        assert_eq!(report.max_held_bytes, most_held * ROW_BYTES, "{report:?}");
        assert!(report.max_held_bytes <= tiny().memory_bytes, "{report:?}");
        if partitions == 60 {
            assert!(most_held > 100, "{lengths:?}");
        }
        // One assignment pass and one output pass per run.
        assert_eq!(report.spill_passes, 1 + runs.len(), "{report:?}");
        assert!(runs.len() >= 3, "{runs:?}");
        // The spill is gone; the segment is the one an in-memory build writes.
        let names: Vec<String> = ctx
            .store
            .list(&seg(&s))
            .await
            .unwrap()
            .iter()
            .map(|o| o.path.to_string())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with(SPILL_FILE)), "{names:?}");
        assert_eq!(names.len(), 2, "{names:?}");
        let (held, report) = built(
            &ctx,
            &m,
            vec![input_batch(0..3_000)],
            &params,
            BuildLimits::default(),
        )
        .await;
        assert!(!report.spilled);
        assert_eq!(spilled, held);
        assert_eq!(
            stored_rows(&ctx, &seg(&s), &spilled).await,
            stored_rows(&ctx, &seg(&m), &held).await
        );
    }
}

fn table_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("vec", DataType::FixedSizeList(item(), DIM as i32), false),
    ]))
}

const FRAGMENT_ROWS: u64 = 1_000;
const FRAGMENTS: u64 = 4;

/// A table of 4 × 1,000 rows with every fifth row deleted; returns it with
/// its live rows' addresses and vectors.
async fn table(dir: &std::path::Path) -> (Dataset, BTreeMap<u64, Vec<f32>>) {
    let uri = dir.join("ds");
    let mut dataset = Dataset::create(
        uri.to_str().unwrap(),
        table_schema(),
        OpenOptions::default(),
    )
    .await
    .unwrap();
    let rows = FRAGMENTS * FRAGMENT_ROWS;
    let values: Vec<f32> = (0..rows).flat_map(vector).collect();
    let list = FixedSizeListArray::try_new(
        item(),
        DIM as i32,
        Arc::new(Float32Array::from(values)),
        None,
    )
    .unwrap();
    let batch = RecordBatch::try_new(
        table_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows as i64)),
            Arc::new(list),
        ],
    )
    .unwrap();
    let options = WriteOptions {
        max_rows_per_file: FRAGMENT_ROWS,
        ..WriteOptions::default()
    };
    dataset.append(vec![batch], &options).await.unwrap();
    dataset.delete("id % 5 = 0").await.unwrap();
    // Row `id` is at offset id % 1,000 of the (id / 1,000)-th fragment.
    let fragments: Vec<u64> = dataset.fragments().iter().map(|f| f.id).collect();
    assert_eq!(fragments.len(), FRAGMENTS as usize);
    let live = (0..rows)
        .filter(|id| id % 5 != 0)
        .map(|id| {
            let fragment = fragments[(id / FRAGMENT_ROWS) as usize];
            ((fragment << 32) | (id % FRAGMENT_ROWS), vector(id))
        })
        .collect();
    (dataset, live)
}

async fn scan(dataset: &Dataset) -> BoxStream<'static, Result<RecordBatch>> {
    dataset
        .scan()
        .project(&["vec"])
        .with_row_address()
        .try_into_stream()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_spilled_build_gives_every_live_row_exactly_one_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let (dataset, live) = table(tmp.path()).await;
    let ctx = crate::manage::index_context(&dataset);
    let at = seg("spilled");
    let params = params(Some(8), None);
    let (details, report) = build(&ctx, &at, scan(&dataset).await, &params, tiny())
        .await
        .unwrap();
    assert!(report.spilled && report.spill_passes > 2, "{report:?}");
    assert_eq!(report.rows, live.len() as u64);
    let segment = IvfFlatSegment::open(&ctx, &at, &details).await.unwrap();
    let layout = segment.layout().clone();
    let rows = stored_rows(&ctx, &at, &details).await;
    // Exactly the live rows, each once, with its own vector.
    let stored: BTreeMap<u64, Vec<f32>> = rows.iter().map(|(_, a, v)| (*a, v.clone())).collect();
    assert_eq!(rows.len(), live.len());
    assert_eq!(stored, live);
    // Grouped by partition as the layout says, each row in its nearest partition.
    let mut counts = vec![0u64; layout.partitions()];
    for (p, _, v) in &rows {
        counts[*p as usize] += 1;
        assert_eq!(*p, assign(&layout.centroids, DIM, Metric::L2, v));
    }
    assert!(rows.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(counts, layout.lengths);

    // Probing every partition is the exact (brute-force) kNN over the live rows.
    for q in [3u64, 1_234, 3_999, 77_777] {
        let query = vector(q);
        let mut exact: Vec<(u64, f32)> = live
            .iter()
            .map(|(a, v)| (*a, distance(Metric::L2, &query, v)))
            .collect();
        exact.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        exact.truncate(20);
        let found = segment
            .nearest(&query, 20, layout.partitions())
            .await
            .unwrap();
        assert_eq!(found, exact, "query {q}");
    }
}
