//! Compaction benchmark: 2M rows in 2,000 fragments of 1,000 rows compacted to the
//! default target (wall time, rows/s, peak RSS), and planning time and memory at
//! 300,000 fragments. Prints JSON lines.
//!
//! `cargo run --release -p refract-benchmarks --bin compaction_bench -- [--rows N] [--fragment-rows M] [--plan-fragments F] [--dir PATH]`

use std::time::Instant;

use clap::Parser;
use refract_benchmarks::{emit, peak_rss_bytes, reset_peak_rss};
use refract_cli::commands::data::{append_synthetic, open_or_create};
use refract_optimize::compaction::{compact_files, plan_tasks, CompactionOptions, FragmentStats};
use serde_json::json;

#[derive(Debug, Parser)]
struct Args {
    /// Rows in the compaction scenario.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// Rows per source fragment.
    #[arg(long, default_value_t = 1_000)]
    fragment_rows: u64,
    /// Fragments in the planning scenario.
    #[arg(long, default_value_t = 300_000)]
    plan_fragments: u64,
    /// Where to put the dataset (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Skip the compaction scenario.
    #[arg(long)]
    plan_only: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    bench_planning(args.plan_fragments)?;
    if !args.plan_only {
        runtime.block_on(bench_compaction(&args))?;
    }
    Ok(())
}

fn bench_planning(fragments: u64) -> Result<(), Box<dyn std::error::Error>> {
    let stats: Vec<FragmentStats> = (0..fragments)
        .map(|id| FragmentStats {
            id,
            physical_rows: 1_000,
            live_rows: if id % 10 == 0 { 700 } else { 1_000 },
            bytes: 100_000,
            coverage_key: id / 50_000,
        })
        .collect();
    reset_peak_rss();
    let before = refract_benchmarks::current_rss_bytes();
    let started = Instant::now();
    let tasks = plan_tasks(&stats, &CompactionOptions::default())?;
    let elapsed = started.elapsed();
    emit(json!({
        "benchmark": "compaction_planning",
        "fragments": fragments,
        "tasks": tasks.len(),
        "plan_ms": elapsed.as_secs_f64() * 1e3,
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_growth_bytes": peak_rss_bytes().saturating_sub(before),
    }));
    Ok(())
}

async fn bench_compaction(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().join("compaction"));
    std::fs::create_dir_all(&dir)?;
    let uri = dir.to_string_lossy().to_string();
    let mut dataset = open_or_create(&uri, refract_cli::synthetic::DEFAULT_DIM).await?;
    let started = Instant::now();
    append_synthetic(&mut dataset, args.rows, args.fragment_rows, 0, refract_cli::synthetic::DEFAULT_DIM).await?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let fragments_before = dataset.fragments().len();
    reset_peak_rss();
    let started = Instant::now();
    let metrics = compact_files(&mut dataset, &CompactionOptions::default(), None).await?;
    let elapsed = started.elapsed().as_secs_f64();
    emit(json!({
        "benchmark": "compaction",
        "rows": args.rows,
        "fragment_rows": args.fragment_rows,
        "fragments_before": fragments_before,
        "fragments_after": dataset.fragments().len(),
        "load_ms": load_ms,
        "compact_ms": elapsed * 1e3,
        "rows_per_sec": args.rows as f64 / elapsed,
        "peak_rss_bytes": peak_rss_bytes(),
        "committed_version": metrics.committed_version,
    }));
    Ok(())
}
