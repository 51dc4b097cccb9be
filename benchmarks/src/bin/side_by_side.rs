//! The Refract side of the side-by-side suite (`benchmarks/peer/run.py`): one
//! step on one local dataset per process, printing one JSON line.
//!
//! * `load`: appends synthetic rows (`refract_cli::synthetic`) in runs of
//!   `ROWS:FRAGMENT_ROWS`, and lists the data files in fragment order so the
//!   runner can hand the same rows, in the same order, to the peer;
//! * `index`: builds one index (btree on `id`, bitmap on `category`, ngram on
//!   `text`, ivf_flat on `vec`), named after its type;
//! * `compact`: `compact_files`, once or until a round commits nothing;
//! * `remap`: `remap_indices` for every index (after a deferred compaction);
//! * `query`: a cold filtered query (the dataset opened inside the clock),
//!   with the index if one covers the filter.
//!
//! `ms` is the wall time of the step alone (the dataset is opened before the
//! clock starts, except for `query`); `peak_rss_bytes` is this process's
//! `VmHWM` and `rss_before_bytes` its `VmRSS` when the clock started;
//! `requests` counts what the step sent to the store.
//!
//! `target/release/side_by_side <load|index|compact|remap|query> --dir PATH [...]`,
//! or `--uri s3://bucket/prefix --storage-option KEY=VALUE ...` for a dataset
//! on an object store (every step but `load`).

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, Subcommand};
use refract_benchmarks::{current_rss_bytes, emit, peak_rss_bytes, uri};
use refract_cli::args::storage_option;
use refract_cli::commands::data::{append_synthetic, open_or_create};
use refract_cli::commands::Location;
use refract_cli::synthetic::DEFAULT_DIM;
use refract_index::{create_index, IndexParams, Query};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_table::io::StorageOptions;
use refract_table::{Dataset, OpenOptions};
use serde_json::json;

type BoxError = Box<dyn std::error::Error>;

#[derive(Debug, Parser)]
struct Args {
    /// The dataset directory.
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// The dataset's URI, instead of `--dir` (e.g. `s3://bucket/prefix`).
    #[arg(long, global = true, conflicts_with = "dir")]
    uri: Option<String>,
    /// A storage option of the `--uri` store, KEY=VALUE; repeatable.
    #[arg(long = "storage-option", value_name = "KEY=VALUE", global = true, value_parser = storage_option)]
    storage_options: Vec<(String, String)>,
    #[command(subcommand)]
    step: Step,
}

#[derive(Debug, Subcommand)]
enum Step {
    /// Create the dataset from runs of `ROWS:FRAGMENT_ROWS` (ids continue across runs).
    Load {
        #[arg(long, value_delimiter = ',', required = true)]
        runs: Vec<String>,
    },
    /// Build one index named after its type.
    Index {
        #[arg(long = "type")]
        index_type: String,
        /// ivf_flat partitions.
        #[arg(long)]
        partitions: Option<u32>,
        /// ivf_flat k-means iterations.
        #[arg(long)]
        max_iterations: Option<u32>,
    },
    /// Compact (default options unless given).
    Compact {
        #[arg(long)]
        target_rows: Option<u64>,
        #[arg(long)]
        max_source_fragments: Option<u64>,
        #[arg(long)]
        defer_index_remap: bool,
        /// Repeat until a round commits nothing (at most this many rounds).
        #[arg(long)]
        until_noop: Option<usize>,
    },
    /// Remap every index onto the current fragments.
    Remap,
    /// Open the dataset and run one filtered query.
    Query {
        #[arg(long)]
        filter: String,
    },
}

/// Where the dataset is and how to reach its store.
struct Target {
    location: String,
    storage_options: StorageOptions,
}

impl Target {
    async fn open(&self) -> Result<Dataset, BoxError> {
        let options = OpenOptions {
            storage_options: self.storage_options.clone(),
            ..OpenOptions::default()
        };
        Ok(Dataset::open_with(&self.location, options).await?)
    }
}

fn column_of(index_type: &str) -> Result<&'static str, BoxError> {
    Ok(match index_type {
        "btree" => "id",
        "bitmap" => "category",
        "ngram" => "text",
        "ivf_flat" => "vec",
        other => return Err(format!("unknown index type '{other}'").into()),
    })
}

fn fragment_rows(dataset: &Dataset) -> Vec<u64> {
    dataset
        .fragments()
        .iter()
        .map(|fragment| fragment.live_rows())
        .collect()
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let location = match (&args.uri, &args.dir) {
        (Some(location), _) => location.clone(),
        (None, Some(dir)) => uri(dir),
        (None, None) => return Err("--dir or --uri is required".into()),
    };
    let target = Target {
        location,
        storage_options: args.storage_options.iter().cloned().collect(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args.step, args.dir, target))
}

async fn run(step: Step, dir: Option<PathBuf>, target: Target) -> Result<(), BoxError> {
    let location = target.location.clone();
    match step {
        Step::Load { runs } => {
            let dir = dir.ok_or("load writes a local dataset: --dir is required")?;
            let mut dataset = open_or_create(&Location::plain(&location), DEFAULT_DIM).await?;
            if !dataset.fragments().is_empty() {
                return Err(format!("{location} already holds a dataset").into());
            }
            let rss_before = current_rss_bytes();
            let started = Instant::now();
            let mut start = 0i64;
            for run in &runs {
                let (rows, per_fragment) = run
                    .split_once(':')
                    .ok_or_else(|| format!("run '{run}' is not ROWS:FRAGMENT_ROWS"))?;
                let (rows, per_fragment): (u64, u64) = (rows.parse()?, per_fragment.parse()?);
                append_synthetic(&mut dataset, rows, per_fragment, start, DEFAULT_DIM).await?;
                start += rows as i64;
            }
            let ms = started.elapsed().as_secs_f64() * 1e3;
            let files: Vec<Vec<String>> = dataset
                .fragments()
                .iter()
                .map(|fragment| {
                    fragment
                        .files
                        .iter()
                        .map(|file| uri(&dir.join(file.path.as_str())))
                        .collect()
                })
                .collect();
            emit(json!({
                "step": "load",
                "rows": start,
                "fragments": dataset.fragments().len(),
                "fragment_rows": fragment_rows(&dataset),
                "files": files,
                "ms": ms,
                "peak_rss_bytes": peak_rss_bytes(),
                "rss_before_bytes": rss_before,
            }));
        }
        Step::Index {
            index_type,
            partitions,
            max_iterations,
        } => {
            let dataset = target.open().await?;
            let params = IndexParams {
                partitions,
                max_iterations,
                ..IndexParams::default()
            };
            let rss_before = current_rss_bytes();
            let started = Instant::now();
            create_index(
                &dataset,
                &index_type,
                column_of(&index_type)?,
                &index_type,
                &params,
            )
            .await?;
            emit(json!({
                "step": "index",
                "index_type": index_type,
                "ms": started.elapsed().as_secs_f64() * 1e3,
                "peak_rss_bytes": peak_rss_bytes(),
                "rss_before_bytes": rss_before,
            }));
        }
        Step::Compact {
            target_rows,
            max_source_fragments,
            defer_index_remap,
            until_noop,
        } => {
            let mut dataset = target.open().await?;
            let mut options = CompactionOptions {
                max_source_fragments,
                defer_index_remap,
                ..CompactionOptions::default()
            };
            if let Some(target) = target_rows {
                options.target_rows_per_fragment = target;
            }
            let fragments_before = dataset.fragments().len();
            let max_rounds = until_noop.unwrap_or(1);
            let rss_before = current_rss_bytes();
            let started = Instant::now();
            let mut rounds = 0usize;
            let mut converged = false;
            let mut fragments_removed = 0u64;
            for _ in 0..max_rounds {
                let metrics = compact_files(&mut dataset, &options, None).await?;
                if metrics.committed_version.is_none() {
                    converged = true;
                    break;
                }
                rounds += 1;
                fragments_removed += metrics.fragments_removed;
            }
            emit(json!({
                "step": "compact",
                "ms": started.elapsed().as_secs_f64() * 1e3,
                "rounds": rounds,
                "converged": converged || until_noop.is_none(),
                "fragments_before": fragments_before,
                "fragments_removed": fragments_removed,
                "fragment_rows": fragment_rows(&dataset),
                "requests": dataset.store().stats().total_requests(),
                "peak_rss_bytes": peak_rss_bytes(),
                "rss_before_bytes": rss_before,
            }));
        }
        Step::Remap => {
            let mut dataset = target.open().await?;
            let rss_before = current_rss_bytes();
            let started = Instant::now();
            let report = remap_indices(&mut dataset, RemapOptions::default()).await?;
            emit(json!({
                "step": "remap",
                "ms": started.elapsed().as_secs_f64() * 1e3,
                "report": format!("{report:?}").chars().take(400).collect::<String>(),
                "peak_rss_bytes": peak_rss_bytes(),
                "rss_before_bytes": rss_before,
            }));
        }
        Step::Query { filter } => {
            let rss_before = current_rss_bytes();
            let started = Instant::now();
            let dataset = target.open().await?;
            let result = Query::new(&dataset).filter(&filter)?.execute().await?;
            emit(json!({
                "step": "query",
                "ms": started.elapsed().as_secs_f64() * 1e3,
                "rows": result.batch.num_rows(),
                "requests": dataset.store().stats().total_requests(),
                "round_trips": dataset.store().round_trips(),
                "explain": format!("{:?}", result.explain).chars().take(400).collect::<String>(),
                "peak_rss_bytes": peak_rss_bytes(),
                "rss_before_bytes": rss_before,
            }));
        }
    }
    Ok(())
}
