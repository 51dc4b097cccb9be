//! Index queries against the scan: for each index type and selectivity, the
//! wall time, rows and object-store requests of the query as planned (the
//! planner picks the index or the scan), with the index path forced, and as a
//! filtered scan, on one table. Every run opens the dataset afresh (cold
//! session cache, as a CLI call would). Prints JSON lines.
//!
//! The table: `id` int64 (0..rows, in order), `bt_level` and `bm_level` int32
//! and `text` utf8 assigning every row pseudo-randomly to one selectivity
//! level (so matches are scattered over all fragments), and `payload`, eight
//! float32 per row. Indices: btree on `id` (range, contiguous rows) and on
//! `bt_level` (equality, scattered), bitmap on `bm_level` (equality and IN),
//! ngram on `text` (contains).
//!
//! `cargo run --release -p refract-benchmarks --bin query_selectivity_bench -- [--rows N] [--fragment-rows M] [--repeats R] [--dir PATH]`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, StringBuilder};
use arrow_array::{Int32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use clap::Parser;
use refract_benchmarks::{emit, uri, BoxError};
use refract_index::{create_index, AccessPath, IndexParams, IndexUse, Query};
use refract_table::{Dataset, OpenOptions, WriteOptions};
use serde_json::json;

/// Fractions of the table each level matches.
const SELECTIVITIES: [f64; 6] = [0.00001, 0.0001, 0.001, 0.01, 0.1, 0.5];
/// The `text` word of each level (no trigram of one occurs in another or in
/// the filler, so the ngram candidates are exact too).
const WORDS: [&str; 6] = ["quartz", "zephyr", "jigsaw", "vortex", "kumquat", "oxbow"];
/// `text` of the rows in no level.
const FILLER: &str = "common item";
/// Rows generated per appended batch.
const WRITE_BATCH_ROWS: u64 = 100_000;
/// Timing noise allowed when checking the target (the planned query at most
/// this factor of the scan): on a shared machine two identical scans differ
/// by a few percent.
const NOISE: f64 = 1.10;

#[derive(Debug, Parser)]
struct Args {
    /// Rows in the table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rows per fragment.
    #[arg(long, default_value_t = 1_000)]
    fragment_rows: u64,
    /// Runs per query and path (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Where to put the dataset (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("bt_level", DataType::Int32, false),
        Field::new("bm_level", DataType::Int32, false),
        Field::new("text", DataType::Utf8, false),
        Field::new(
            "payload",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 8),
            false,
        ),
    ]))
}

/// SplitMix64.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The level of row `id` (1-based index into [`SELECTIVITIES`]), 0 for none.
fn level_of(id: u64) -> i32 {
    let u = (mix(id) >> 11) as f64 / (1u64 << 53) as f64;
    let mut upper = 0.0;
    for (i, s) in SELECTIVITIES.iter().enumerate() {
        upper += s;
        if u < upper {
            return i as i32 + 1;
        }
    }
    0
}

fn batch(start: u64, rows: u64) -> Result<RecordBatch, BoxError> {
    let ids: Vec<i64> = (start..start + rows).map(|i| i as i64).collect();
    let levels: Int32Array = (start..start + rows).map(level_of).collect();
    let mut text = StringBuilder::new();
    let mut payload = FixedSizeListBuilder::new(Float32Builder::new(), 8)
        .with_field(Arc::new(Field::new("item", DataType::Float32, true)));
    for id in start..start + rows {
        match level_of(id) {
            0 => text.append_value(FILLER),
            level => text.append_value(format!("{} item", WORDS[level as usize - 1])),
        }
        for j in 0..8u64 {
            payload
                .values()
                .append_value((mix(id * 8 + j) >> 40) as f32 / (1u64 << 24) as f32);
        }
        payload.append(true);
    }
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(levels.clone()),
            Arc::new(levels),
            Arc::new(text.finish()),
            Arc::new(payload.finish()),
        ],
    )?)
}

/// One measured run.
struct Run {
    ms: f64,
    /// (slowest − fastest) / median over the repeats of this path.
    spread: f64,
    rows: usize,
    requests: u64,
    bytes_read: u64,
    path: AccessPath,
    reason: String,
}

async fn run_once(uri: &str, filter: &str, index_use: IndexUse) -> Result<Run, BoxError> {
    let started = Instant::now();
    let dataset = Dataset::open(uri).await?;
    let result = Query::new(&dataset)
        .filter(filter)?
        .index_use(index_use)
        .execute()
        .await?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let stats = dataset.store().stats();
    Ok(Run {
        ms,
        spread: 0.0,
        rows: result.batch.num_rows(),
        requests: stats.total_requests(),
        bytes_read: stats.bytes_read,
        path: result.explain.path,
        reason: result.explain.reason,
    })
}

/// Runs the query `repeats` times on each path, the paths interleaved inside
/// every repeat so that drift in the machine's load hits all three alike;
/// returns the median run of each path, in `paths` order.
async fn measure(
    uri: &str,
    filter: &str,
    paths: [IndexUse; 3],
    repeats: usize,
) -> Result<[Run; 3], BoxError> {
    let mut runs: [Vec<Run>; 3] = Default::default();
    for _ in 0..repeats.max(1) {
        for (path, runs) in paths.iter().zip(runs.iter_mut()) {
            runs.push(run_once(uri, filter, *path).await?);
        }
    }
    Ok(runs.map(|mut runs| {
        runs.sort_by(|a, b| a.ms.total_cmp(&b.ms));
        let fastest = runs.first().map_or(0.0, |r| r.ms);
        let slowest = runs.last().map_or(0.0, |r| r.ms);
        let middle = runs.len() / 2;
        let mut median = runs.swap_remove(middle);
        median.spread = (slowest - fastest) / median.ms.max(f64::MIN_POSITIVE);
        median
    }))
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(&args))
}

async fn run(args: &Args) -> Result<(), BoxError> {
    let temp = tempfile::tempdir()?;
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let path = root.join("query_selectivity");
    if path.exists() {
        std::fs::remove_dir_all(&path)?;
    }
    std::fs::create_dir_all(&root)?;
    let uri = uri(&path);
    let started = Instant::now();
    let mut dataset = Dataset::create(&uri, schema(), OpenOptions::default()).await?;
    let options = WriteOptions {
        max_rows_per_file: args.fragment_rows,
        ..WriteOptions::default()
    };
    let mut done = 0;
    while done < args.rows {
        let n = WRITE_BATCH_ROWS.min(args.rows - done);
        dataset.append(vec![batch(done, n)?], &options).await?;
        done += n;
    }
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    for (name, column, kind) in [
        ("id_btree", "id", "btree"),
        ("level_btree", "bt_level", "btree"),
        ("level_bitmap", "bm_level", "bitmap"),
        ("text_ngram", "text", "ngram"),
    ] {
        dataset = create_index(&dataset, name, column, kind, &IndexParams::default()).await?;
    }
    emit(json!({
        "benchmark": "query_selectivity_setup",
        "rows": args.rows,
        "fragment_rows": args.fragment_rows,
        "fragments": dataset.fragments().len(),
        "load_ms": load_ms,
        "index_build_ms": started.elapsed().as_secs_f64() * 1e3,
    }));
    drop(dataset);

    let range_start = args.rows / 3;
    for (i, selectivity) in SELECTIVITIES.iter().enumerate() {
        let level = i + 1;
        let span = ((args.rows as f64) * selectivity).round().max(1.0) as u64;
        let queries = [
            (
                "btree_range",
                format!("id >= {range_start} AND id < {}", range_start + span),
            ),
            ("btree_equality", format!("bt_level = {level}")),
            ("bitmap_equality", format!("bm_level = {level}")),
            ("bitmap_in", format!("bm_level IN ({level}, -1)")),
            ("ngram_contains", format!("contains(text, '{}')", WORDS[i])),
        ];
        for (kind, filter) in queries {
            let [planned, forced, scan] = measure(
                &uri,
                &filter,
                [IndexUse::Auto, IndexUse::Always, IndexUse::Never],
                args.repeats,
            )
            .await?;
            if planned.rows != scan.rows || forced.rows != scan.rows {
                return Err(format!(
                    "{filter}: {} planned / {} forced rows, the scan returns {}",
                    planned.rows, forced.rows, scan.rows
                )
                .into());
            }
            emit(json!({
                "benchmark": "query_selectivity",
                "kind": kind,
                "filter": filter,
                "selectivity": selectivity,
                "rows": args.rows,
                "matched_rows": scan.rows,
                "planned_path": planned.path,
                "planned_reason": planned.reason,
                "planned_ms": planned.ms,
                "index_ms": forced.ms,
                "scan_ms": scan.ms,
                "scan_spread": scan.spread,
                "planned_over_scan": planned.ms / scan.ms,
                "planned_requests": planned.requests,
                "index_requests": forced.requests,
                "scan_requests": scan.requests,
                "planned_bytes_read": planned.bytes_read,
                "index_bytes_read": forced.bytes_read,
                "scan_bytes_read": scan.bytes_read,
                // A difference inside the scan's own spread between repeats
                // is not measurable in this run.
                "target_met": planned.ms <= scan.ms * NOISE.max(1.0 + scan.spread),
            }));
        }
    }
    Ok(())
}
