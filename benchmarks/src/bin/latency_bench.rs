//! Latency mode: the same work on an in-memory copy of a table and on such a
//! copy behind object_store's `ThrottledStore`, which waits a fixed time per GET,
//! PUT, HEAD, LIST and DELETE as a remote store's round trip would. Reports
//! wall time and requests side by side for compaction (inline index remap),
//! a cold and a warm indexed point query, the same through a stable-partition
//! transition (row-map chunk cache on and off), and `maintain --until-noop`.
//! Prints JSON lines.
//!
//! `cargo run --release -p refract-benchmarks --bin latency_bench -- [--rows N] [--fragment-rows M] [--wait-ms W] [--dir PATH]`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use refract_benchmarks::{copy_dir, emit, BoxError};
use refract_cli::commands::data::{append_synthetic, open_or_create};
use refract_cli::commands::Location;
use refract_cli::synthetic::DEFAULT_DIM;
use refract_index::query::Query;
use refract_index::{create_index, IndexParams};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use refract_optimize::maintain::{maintain, MaintainOptions};
use refract_reader::ChunkCacheMode;
use refract_reader::FriResolver;
use refract_table::dataset::{Dataset, OpenOptions};
use refract_table::io::DatasetStore;
use serde_json::json;

#[derive(Debug, Parser)]
struct Args {
    /// Rows in the table.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// Rows per source fragment.
    #[arg(long, default_value_t = 1_000)]
    fragment_rows: u64,
    /// Wait per request of the throttled store, in milliseconds.
    #[arg(long, default_value_t = 20)]
    wait_ms: u64,
    /// Where to put the datasets (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(&args))
}

/// The files under `dir`, copied into a fresh in-memory store (object_store's
/// throttle wraps streamed bodies only, so it cannot sit on a local disk).
async fn memory_copy(dir: &Path) -> Result<Arc<InMemory>, BoxError> {
    let memory = Arc::new(InMemory::new());
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path.strip_prefix(dir)?.to_string_lossy().to_string();
            let bytes = std::fs::read(&path)?;
            memory
                .put(&ObjectPath::from(relative), PutPayload::from(bytes))
                .await?;
        }
    }
    Ok(memory)
}

/// `memory` as a dataset store, throttled by `wait` per request when `wait`
/// is non-zero.
fn store_on(memory: &Arc<InMemory>, wait: Duration) -> DatasetStore {
    let inner: Arc<dyn ObjectStore> = memory.clone();
    if wait.is_zero() {
        return DatasetStore::from_object_store(inner, "memory://latency");
    }
    let throttled = refract_table::testing::with_latency(inner, wait);
    DatasetStore::from_remote_object_store(throttled, "memory://latency")
}

/// Where one pass of the benchmark runs.
enum Place {
    /// A copy of the table on local disk (`DirectLocalStore`, no throttle).
    Disk(PathBuf),
    /// An in-memory copy, throttled by the wait when it is non-zero.
    Memory(Arc<InMemory>, Duration),
}

impl Place {
    fn label(&self) -> &'static str {
        match self {
            Place::Disk(_) => "local_disk",
            Place::Memory(_, wait) if wait.is_zero() => "memory",
            Place::Memory(..) => "memory_throttled",
        }
    }

    fn wait_ms(&self) -> u128 {
        match self {
            Place::Disk(_) => 0,
            Place::Memory(_, wait) => wait.as_millis(),
        }
    }

    async fn open(&self) -> Result<Dataset, BoxError> {
        match self {
            Place::Disk(dir) => Ok(Dataset::open(&dir.to_string_lossy()).await?),
            Place::Memory(memory, wait) => {
                let options = OpenOptions {
                    store: Some(store_on(memory, *wait)),
                    ..OpenOptions::default()
                };
                Ok(Dataset::open_with("memory://latency", options).await?)
            }
        }
    }
}

async fn run(args: &Args) -> Result<(), BoxError> {
    let root = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("refract-latency-{}", std::process::id())),
    };
    let source = root.join("source");
    std::fs::create_dir_all(&source)?;
    let started = Instant::now();
    let mut dataset =
        open_or_create(&Location::plain(&source.to_string_lossy()), DEFAULT_DIM).await?;
    append_synthetic(&mut dataset, args.rows, args.fragment_rows, 0, DEFAULT_DIM).await?;
    let dataset = create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await?;
    emit(json!({
        "benchmark": "latency_setup",
        "rows": args.rows,
        "fragments": dataset.fragments().len(),
        "load_ms": started.elapsed().as_secs_f64() * 1e3,
    }));
    let disk = root.join("disk");
    copy_dir(&source, &disk)?;
    measure(args, &Place::Disk(disk.clone())).await?;
    std::fs::remove_dir_all(&disk)?;
    for wait_ms in [0, args.wait_ms] {
        let wait = Duration::from_millis(wait_ms);
        let memory = memory_copy(&source).await?;
        measure(args, &Place::Memory(memory, wait)).await?;
    }
    if args.dir.is_none() {
        std::fs::remove_dir_all(&root)?;
    }
    Ok(())
}

async fn measure(args: &Args, place: &Place) -> Result<(), BoxError> {
    // Compaction with inline remap of the btree.
    let mut dataset = place.open().await?;
    dataset.store().reset_stats();
    let started = Instant::now();
    let metrics = compact_files(&mut dataset, &CompactionOptions::default(), None).await?;
    let stats = dataset.store().stats();
    emit(json!({
        "benchmark": "latency_compaction",
        "place": place.label(),
        "wait_ms": place.wait_ms(),
        "rows": args.rows,
        "fragments_removed": metrics.fragments_removed,
        "fragments_added": metrics.fragments_added,
        "wall_ms": started.elapsed().as_secs_f64() * 1e3,
        "requests": stats.total_requests(),
        "bytes_read": stats.bytes_read,
    }));
    // A point query on a freshly opened table (cold), then again (warm).
    let dataset = place.open().await?;
    for pass in ["cold", "warm"] {
        dataset.store().reset_stats();
        let started = Instant::now();
        let result = Query::new(&dataset)
            .filter(&format!("id = {}", args.rows / 2))?
            .project(&["id"])
            .execute()
            .await?;
        let stats = dataset.store().stats();
        emit(json!({
            "benchmark": "latency_point_query",
            "place": place.label(),
        "wait_ms": place.wait_ms(),
            "pass": pass,
            "rows_returned": result.batch.num_rows(),
            "wall_ms": started.elapsed().as_secs_f64() * 1e3,
            "requests": stats.total_requests(),
            "store_round_trips": dataset.store().round_trips(),
        }));
    }
    // A stable partition recorded in the FRI (the btree stays on the old
    // addresses), then point queries translated through its row map: cold
    // (fresh open) and warm, with the row-map chunk cache and without it.
    let mut dataset = place.open().await?;
    let partition = PartitionOptions::new(PartitionBy::Hash {
        column: "id".to_string(),
        destinations: 4,
    });
    partition_fragments(&mut dataset, partition).await?;
    for mode in [ChunkCacheMode::Lazy, ChunkCacheMode::Disabled] {
        let dataset = place.open().await?;
        for pass in ["cold", "warm"] {
            dataset.store().reset_stats();
            let started = Instant::now();
            let result = Query::new(&dataset)
                .filter(&format!("id = {}", args.rows / 3))?
                .project(&["id"])
                .with_resolver(Arc::new(FriResolver::with_mode(mode)))
                .execute()
                .await?;
            let wall = started.elapsed();
            let stats = dataset.store().stats();
            emit(json!({
                    "benchmark": "latency_fri_point_query",
                    "place": place.label(),
            "wait_ms": place.wait_ms(),
                    "chunk_cache": format!("{mode:?}"),
                    "pass": pass,
                    "rows_returned": result.batch.num_rows(),
                    "translated_segments": result.explain.segments.iter().filter(|s| s.translated).count(),
                    "wall_ms": wall.as_secs_f64() * 1e3,
                    "requests": stats.total_requests(),
                    "fri_requests": stats.requests_under("_fri"),
                "requests_by_dir": stats
                    .by_prefix
                    .iter()
                    .map(|(dir, p)| (dir.clone(), p.requests))
                    .collect::<std::collections::BTreeMap<_, _>>(),
                "gets": stats.gets,
                "get_ranges": stats.get_ranges,
                "heads": stats.heads,
                "lists": stats.lists,
                    // Wall time in round trips: the sequential requests, when the
                    // work between them is small against `wait`.
                    "round_trips": (place.wait_ms() > 0)
                        .then(|| wall.as_secs_f64() * 1e3 / place.wait_ms() as f64),
                    // The longest chain of requests waiting on each other.
                    "store_round_trips": dataset.store().round_trips(),
                }));
        }
    }
    // Maintenance to a fixed point (remap, trim; compaction has little left).
    let mut dataset = place.open().await?;
    dataset.store().reset_stats();
    let started = Instant::now();
    let report = maintain(
        &mut dataset,
        MaintainOptions {
            until_noop: true,
            ..MaintainOptions::default()
        },
    )
    .await?;
    let stats = dataset.store().stats();
    emit(json!({
        "benchmark": "latency_maintain_until_noop",
        "place": place.label(),
        "wait_ms": place.wait_ms(),
        "rounds": report.rounds.len(),
        "wall_ms": started.elapsed().as_secs_f64() * 1e3,
        "requests": stats.total_requests(),
    }));
    Ok(())
}
