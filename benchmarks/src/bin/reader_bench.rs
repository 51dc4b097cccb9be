//! FRI reader benchmark: point queries through a stable-partition transition.
//!
//! Builds a local synthetic table of `--rows` rows, a btree on `id`,
//! then stable-partitions every fragment into 64 destinations by hash of
//! `id` (the index keeps its source addresses, so every query translates
//! through the row map). For each row-map chunk cache mode (disabled, lazy,
//! prewarmed) on a fresh session it runs `--queries` random point queries
//! (`id = x`) cold and then warm, recording `_fri` object-store reads and
//! bytes, p50/p99 latency, and QPS at concurrency 16 and 64. Finally the index
//! is rebuilt on the partitioned fragments and the same is measured without
//! translation. Every query's result is checked (exactly one row, the right
//! id). Prints JSON lines.
//!
//! `cargo run --release -p refract-benchmarks --bin reader_bench -- [--rows N] [--fragment-rows M] [--queries Q] [--dir PATH]`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Array, Int64Array};
use clap::Parser;
use refract_benchmarks::emit;
use refract_cli::commands::data::{append_synthetic, open_or_create};
use refract_cli::commands::Location;
use refract_index::{create_index, drop_index, IndexParams, Query, SegmentResolver};
use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use refract_reader::{ChunkCacheMode, FriResolver};
use refract_table::{Dataset, OpenOptions, Session};
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Destinations of the partition.
const DESTINATIONS: u32 = 64;
/// Session cache for every measured configuration (holds the decoded row map
/// of 20M rows, ~40 MiB, plus index pages).
const CACHE_BYTES: u64 = 1 << 30;

#[derive(Debug, Parser)]
struct Args {
    /// Rows in the table.
    #[arg(long, default_value_t = 20_000_000)]
    rows: u64,
    /// Rows per source fragment.
    #[arg(long, default_value_t = 1_000_000)]
    fragment_rows: u64,
    /// Point queries per pass.
    #[arg(long, default_value_t = 1_000)]
    queries: usize,
    /// Where to put the dataset (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let uri = root.join("reader_bench").to_string_lossy().to_string();
    let ids = random_ids(args.rows, args.queries);

    let started = Instant::now();
    let mut ds = build_table(&uri, args.rows, args.fragment_rows).await?;
    ds = create_index(&ds, "id_idx", "id", "btree", &IndexParams::default()).await?;
    let built = started.elapsed();
    let started = Instant::now();
    let metrics = partition_fragments(
        &mut ds,
        PartitionOptions::new(PartitionBy::Hash {
            column: "id".into(),
            destinations: DESTINATIONS,
        }),
    )
    .await?;
    emit(json!({
        "bench": "reader_setup",
        "rows": args.rows,
        "fragment_rows": args.fragment_rows,
        "destinations": metrics.fragments_added,
        "row_map_bytes": metrics.map_size_bytes,
        "build_secs": built.as_secs_f64(),
        "partition_secs": started.elapsed().as_secs_f64(),
    }));

    for (name, mode) in [
        ("cache_disabled", ChunkCacheMode::Disabled),
        ("chunk_cache", ChunkCacheMode::Lazy),
        ("prewarm", ChunkCacheMode::Prewarm),
    ] {
        let resolver: Arc<dyn SegmentResolver> = Arc::new(FriResolver::with_mode(mode));
        measure(&uri, name, resolver, &ids).await?;
    }

    // Without translation: the index rebuilt over the partitioned fragments.
    let ds = Dataset::open(&uri).await?;
    let ds = drop_index(&ds, "id_idx").await?;
    create_index(&ds, "id_idx", "id", "btree", &IndexParams::default()).await?;
    let resolver: Arc<dyn SegmentResolver> = Arc::new(FriResolver::with_mode(ChunkCacheMode::Lazy));
    measure(&uri, "no_translation", resolver, &ids).await?;
    Ok(())
}

/// Deterministic pseudo-random ids in `0..rows`.
fn random_ids(rows: u64, n: usize) -> Vec<i64> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % rows.max(1)) as i64
        })
        .collect()
}

/// The CLI's synthetic table (`id` = 0..rows in order), with 4-dimensional
/// vectors to keep the data small.
async fn build_table(uri: &str, rows: u64, fragment_rows: u64) -> Result<Dataset, BoxError> {
    let at = Location::plain(uri);
    let mut ds = open_or_create(&at, 4).await?;
    append_synthetic(&mut ds, rows, fragment_rows, 0, 4).await?;
    Ok(ds)
}

/// One point query; checks the single returned id; returns its latency.
async fn point_query(
    ds: &Dataset,
    resolver: &Arc<dyn SegmentResolver>,
    id: i64,
) -> Result<Duration, BoxError> {
    let started = Instant::now();
    let result = Query::new(ds)
        .filter(&format!("id = {id}"))?
        .with_resolver(resolver.clone())
        .execute()
        .await?;
    let elapsed = started.elapsed();
    let column = result
        .batch
        .column_by_name("id")
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
        .ok_or("no id column")?;
    if column.len() != 1 || column.value(0) != id {
        return Err(format!("query id = {id} returned {} rows", column.len()).into());
    }
    Ok(elapsed)
}

/// Cold and warm sequential passes, then QPS at 16 and 64 concurrent queries.
async fn measure(
    uri: &str,
    config: &str,
    resolver: Arc<dyn SegmentResolver>,
    ids: &[i64],
) -> Result<(), BoxError> {
    let session = Arc::new(Session::new(CACHE_BYTES));
    let ds = Dataset::open_with(
        uri,
        OpenOptions {
            session: Some(session),
            ..OpenOptions::default()
        },
    )
    .await?;
    for pass in ["cold", "warm"] {
        ds.store().reset_stats();
        let mut latencies = Vec::with_capacity(ids.len());
        let mut first_query_fri_reads = 0;
        for (i, id) in ids.iter().enumerate() {
            latencies.push(point_query(&ds, &resolver, *id).await?);
            if i == 0 {
                first_query_fri_reads = ds.store().stats().requests_under("_fri");
            }
        }
        let stats = ds.store().stats();
        let fri = stats.by_prefix.get("_fri").copied().unwrap_or_default();
        latencies.sort_unstable();
        emit(json!({
            "bench": "reader_point_queries",
            "config": config,
            "pass": pass,
            "queries": ids.len(),
            "fri_reads": fri.requests,
            "fri_bytes": fri.bytes_read,
            "fri_reads_per_query": fri.requests as f64 / ids.len().max(1) as f64,
            "first_query_fri_reads": first_query_fri_reads,
            "p50_ms": percentile(&latencies, 0.50),
            "p99_ms": percentile(&latencies, 0.99),
        }));
    }
    for concurrency in [16usize, 64] {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for worker in 0..concurrency {
            let ds = ds.clone();
            let resolver = resolver.clone();
            let mine: Vec<i64> = ids
                .iter()
                .skip(worker)
                .step_by(concurrency)
                .copied()
                .collect();
            tasks.push(tokio::spawn(async move {
                for id in mine {
                    point_query(&ds, &resolver, id).await?;
                }
                Ok::<(), BoxError>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        let secs = started.elapsed().as_secs_f64();
        emit(json!({
            "bench": "reader_qps",
            "config": config,
            "concurrency": concurrency,
            "queries": ids.len(),
            "qps": ids.len() as f64 / secs.max(1e-9),
        }));
    }
    Ok(())
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1_000.0
}
