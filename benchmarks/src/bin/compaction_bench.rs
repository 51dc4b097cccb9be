//! Compaction benchmark: 2M rows in 2,000 fragments of 1,000 rows compacted to the
//! default target (wall time, rows/s, peak RSS), and planning time and memory at
//! 300,000 fragments. Prints JSON lines.
//!
//! Each phase that touches the table runs in a fresh child process (this binary
//! with `--phase`), so its peak RSS (`VmHWM`) is its own and not what an earlier
//! phase left in the allocator. With `--breakdown`, two more phases split the
//! compaction cost: the read side alone (the scan a task runs, with row
//! addresses and capture) and the write side alone (the rows, already in memory,
//! written to one Lance file).
//!
//! `cargo run --release -p refract-benchmarks --bin compaction_bench -- [--rows N] [--fragment-rows M] [--plan-fragments F] [--plan-bin-fragments B] [--dir PATH] [--plan-only] [--breakdown]`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use arrow_array::{RecordBatch, UInt64Array};
use clap::{Parser, ValueEnum};
use futures::TryStreamExt;
use refract_benchmarks::{copy_dir, current_rss_bytes, emit, peak_rss_bytes, reset_peak_rss};
use refract_cli::commands::data::{append_synthetic, open_or_create};
use refract_cli::commands::Location;
use refract_cli::synthetic::DEFAULT_DIM;
use refract_optimize::compaction::{
    commit_compaction, execute_plan, plan_compaction, plan_tasks, CompactionOptions, FragmentStats,
};
use refract_table::dataset::{Dataset, ROW_ADDRESS_COLUMN};
use refract_table::io::lance_files::LanceFileWriter;
use refract_table::io::paths::data_file_path;
use refract_table::io::PageLayout;
use roaring::RoaringTreemap;
use serde_json::json;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Rows per read batch (the compaction default).
const BATCH_SIZE: usize = 8_192;

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
    /// Small fragments per bin in the budgeted planning scenario (also run at
    /// 64); the default is the largest bin the partition search plans.
    #[arg(long, default_value_t = 4_096)]
    plan_bin_fragments: u64,
    /// Where to put the dataset (default: a temporary directory). Must not hold a
    /// dataset yet.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Skip the compaction scenario.
    #[arg(long)]
    plan_only: bool,
    /// Also time the read side and the write side of compaction on their own.
    #[arg(long)]
    breakdown: bool,
    /// Internal: run one phase on `--dir` in this process.
    #[arg(long, value_enum, hide = true)]
    phase: Option<Phase>,
    /// Internal: compact by decoding and re-encoding (`binary_copy` off).
    #[arg(long, hide = true)]
    re_encode: bool,
}

/// The phases run in child processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    Load,
    ReadSide,
    WriteSide,
    Compact,
    ScanAfter,
}

fn main() -> BenchResult<()> {
    let args = Args::parse();
    if let Some(phase) = args.phase {
        let dir = args.dir.clone().ok_or("--phase needs --dir")?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return runtime.block_on(run_phase(phase, &args, &dir));
    }
    bench_planning(args.plan_fragments)?;
    for bin in [64, args.plan_bin_fragments] {
        bench_budgeted_planning(args.plan_fragments, bin)?;
    }
    if args.plan_only {
        return Ok(());
    }
    let temp = tempfile::tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().join("compaction"));
    std::fs::create_dir_all(&dir)?;
    spawn_phase(Phase::Load, &args, &dir, false)?;
    sync_tree(&dir)?;
    if args.breakdown {
        for phase in [Phase::ReadSide, Phase::WriteSide] {
            spawn_phase(phase, &args, &dir, false)?;
            sync_tree(&dir)?;
        }
    }
    // The same table compacted both ways: copying pages (the default) and
    // decoding/re-encoding, each followed by a full scan of the result.
    let re_encode_dir = dir.with_extension("re-encode");
    copy_dir(&dir, &re_encode_dir)?;
    sync_tree(&re_encode_dir)?;
    for (phase_dir, re_encode) in [(&dir, false), (&re_encode_dir, true)] {
        spawn_phase(Phase::Compact, &args, phase_dir, re_encode)?;
        // The next phase must not pay for this one's page-cache writeback.
        sync_tree(phase_dir)?;
        spawn_phase(Phase::ScanAfter, &args, phase_dir, re_encode)?;
    }
    std::fs::remove_dir_all(&re_encode_dir)?;
    Ok(())
}

/// Flushes every file under `dir` to disk (`fsync`), so phases are measured apart.
fn sync_tree(dir: &Path) -> BenchResult<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            std::fs::File::open(&path)?.sync_all()?;
        }
    }
    Ok(())
}

/// Runs one phase in a child process (its JSON line goes straight to stdout).
fn spawn_phase(phase: Phase, args: &Args, dir: &Path, re_encode: bool) -> BenchResult<()> {
    let phase_name = phase
        .to_possible_value()
        .ok_or("phase has a name")?
        .get_name()
        .to_string();
    let mut command = Command::new(std::env::current_exe()?);
    if re_encode {
        command.arg("--re-encode");
    }
    let status = command
        .arg("--phase")
        .arg(&phase_name)
        .arg("--dir")
        .arg(dir)
        .arg("--rows")
        .arg(args.rows.to_string())
        .arg("--fragment-rows")
        .arg(args.fragment_rows.to_string())
        .status()?;
    if !status.success() {
        return Err(format!("phase {phase_name} failed: {status}").into());
    }
    Ok(())
}

async fn run_phase(phase: Phase, args: &Args, dir: &Path) -> BenchResult<()> {
    let uri = dir.to_string_lossy().to_string();
    let mut dataset = open_or_create(&Location::plain(&uri), DEFAULT_DIM).await?;
    match phase {
        Phase::Load => bench_load(&mut dataset, args).await,
        Phase::ReadSide => bench_read_side(&dataset).await,
        Phase::WriteSide => bench_write_side(&dataset).await,
        Phase::Compact => bench_compaction(&mut dataset, args).await,
        Phase::ScanAfter => bench_scan_after(&dataset, args).await,
    }
}

fn bench_planning(fragments: u64) -> BenchResult<()> {
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
    let before = current_rss_bytes();
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

/// Planning under source budgets, where bins of small fragments are planned by
/// the partition search: 300,000 fragments in bins of `bin` small fragments
/// (rows 1 to 499 of a 1,000-row target, 100 bytes per row), each bin ended by a
/// 2,000-row fragment. Cases: a budget of two fragments (chained merges, the
/// search's slowest greedy simulation), one target's rows or bytes, a budget that
/// admits everything (every bin searched and planned whole), and a layout at its
/// fixed point under a 1,000-row budget (600-row fragments: every bin searched,
/// nothing planned).
fn bench_budgeted_planning(fragments: u64, bin: u64) -> BenchResult<()> {
    let layout = |small_rows: &dyn Fn(u64) -> u64| -> Vec<FragmentStats> {
        (0..fragments)
            .map(|id| {
                let rows = if id % (bin + 1) == bin {
                    2_000
                } else {
                    small_rows(id)
                };
                FragmentStats {
                    id,
                    physical_rows: rows,
                    live_rows: rows,
                    bytes: rows * 100,
                    coverage_key: 0,
                }
            })
            .collect()
    };
    let mixed = layout(&|id| 1 + (id * 7919) % 499);
    let fixed = layout(&|_| 600);
    let budget = |f: fn(&mut CompactionOptions)| {
        let mut options = CompactionOptions {
            target_rows_per_fragment: 1_000,
            ..CompactionOptions::default()
        };
        f(&mut options);
        options
    };
    let cases: [(&str, &[FragmentStats], CompactionOptions); 5] = [
        (
            "fragments_2",
            &mixed,
            budget(|o| o.max_source_fragments = Some(2)),
        ),
        (
            "rows_1000",
            &mixed,
            budget(|o| o.max_source_rows = Some(1_000)),
        ),
        (
            "bytes_100000",
            &mixed,
            budget(|o| o.max_source_bytes = Some(100_000)),
        ),
        (
            "admits_all",
            &mixed,
            budget(|o| o.max_source_fragments = Some(u64::MAX)),
        ),
        (
            "fixed_point",
            &fixed,
            budget(|o| o.max_source_rows = Some(1_000)),
        ),
    ];
    for (case, stats, options) in cases {
        let started = Instant::now();
        let tasks = plan_tasks(stats, &options)?;
        emit(json!({
            "benchmark": "compaction_planning_budgeted",
            "case": case,
            "fragments": fragments,
            "bin_fragments": bin,
            "tasks": tasks.len(),
            "plan_ms": started.elapsed().as_secs_f64() * 1e3,
        }));
    }
    Ok(())
}

async fn bench_load(dataset: &mut Dataset, args: &Args) -> BenchResult<()> {
    if !dataset.fragments().is_empty() {
        return Err(format!("{} already holds a dataset", dataset.store().uri()).into());
    }
    let started = Instant::now();
    append_synthetic(dataset, args.rows, args.fragment_rows, 0, DEFAULT_DIM).await?;
    emit(json!({
        "benchmark": "compaction_load",
        "rows": dataset.count_rows(None).await?,
        "fragments": dataset.fragments().len(),
        "source_bytes": dataset.fragments().iter().map(|f| f.size_bytes()).sum::<u64>(),
        "load_ms": started.elapsed().as_secs_f64() * 1e3,
    }));
    Ok(())
}

async fn bench_compaction(dataset: &mut Dataset, args: &Args) -> BenchResult<()> {
    let fragments_before = dataset.fragments().len();
    let rss_before = current_rss_bytes();
    let load_before = load_average();
    let cpu_before = process_cpu_seconds();
    let options = CompactionOptions {
        binary_copy: !args.re_encode,
        ..CompactionOptions::default()
    };
    // Exactly what `compact_files` does, step by step, so each step is timed.
    let started = Instant::now();
    let plan = plan_compaction(dataset, &options)?;
    let planned = started.elapsed().as_secs_f64();
    let results = execute_plan(dataset, &plan, None).await?;
    let executed = started.elapsed().as_secs_f64();
    let tasks_copied = results.iter().filter(|r| r.pages_copied).count();
    let (committed, metrics) = commit_compaction(dataset, results).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu_before;
    *dataset = committed;
    emit(json!({
        "benchmark": "compaction",
        "mode": mode_name(args),
        "tasks_copied": tasks_copied,
        "rows": args.rows,
        "fragment_rows": args.fragment_rows,
        "fragments_before": fragments_before,
        "fragments_after": dataset.fragments().len(),
        "output_bytes": dataset.fragments().iter().map(|f| f.size_bytes()).sum::<u64>(),
        "compact_ms": elapsed * 1e3,
        "plan_ms": planned * 1e3,
        "execute_ms": (executed - planned) * 1e3,
        "commit_ms": (elapsed - executed) * 1e3,
        "tasks": plan.tasks.len(),
        "cpu_ms": cpu * 1e3,
        "rows_per_cpu_sec": args.rows as f64 / cpu,
        "load_average_1m": load_before,
        "rows_per_sec": args.rows as f64 / elapsed,
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_before_bytes": rss_before,
        "committed_version": metrics.committed_version,
    }));
    Ok(())
}

fn mode_name(args: &Args) -> &'static str {
    if args.re_encode {
        "re_encode"
    } else {
        "page_copy"
    }
}

/// A full scan of the compacted table (all columns), to show what the
/// output's page layout costs readers.
async fn bench_scan_after(dataset: &Dataset, args: &Args) -> BenchResult<()> {
    let started = Instant::now();
    let mut stream = dataset.scan().try_into_stream().await?;
    let mut rows = 0u64;
    while let Some(batch) = stream.try_next().await? {
        rows += batch.num_rows() as u64;
    }
    let elapsed = started.elapsed().as_secs_f64();
    emit(json!({
        "benchmark": "scan_after_compaction",
        "mode": mode_name(args),
        "fragments": dataset.fragments().len(),
        "rows": rows,
        "scan_ms": elapsed * 1e3,
        "rows_per_sec": rows as f64 / elapsed,
        "peak_rss_bytes": peak_rss_bytes(),
    }));
    Ok(())
}

/// User plus system CPU time of this process (all threads) so far, from
/// `/proc/self/stat` in clock ticks of 1/100 s; 0 where unavailable. With other
/// work on the machine, wall time alone understates what compaction costs.
fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The 1-minute load average, to show how busy the shared machine was.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The read side of a task: the same scan (row addresses, batch size, one-pass
/// reads) and a capture of the surviving addresses, with nothing written.
async fn bench_read_side(dataset: &Dataset) -> BenchResult<()> {
    let started = Instant::now();
    let mut stream = dataset
        .scan()
        .with_row_address()
        .batch_size(BATCH_SIZE)
        .one_pass()
        .try_into_stream()
        .await?;
    let mut surviving = RoaringTreemap::new();
    let mut rows = 0u64;
    while let Some(batch) = stream.try_next().await? {
        let addresses = batch
            .column_by_name(ROW_ADDRESS_COLUMN)
            .and_then(|column| column.as_any().downcast_ref::<UInt64Array>())
            .ok_or("scan is missing the row address column")?;
        // One batch holds ascending offsets of one fragment; the task's own
        // capture also inserts whole sorted runs rather than single values.
        surviving |= RoaringTreemap::from_sorted_iter(addresses.values().iter().copied())
            .map_err(|e| format!("row addresses of a batch are not ascending: {e}"))?;
        rows += batch.num_rows() as u64;
    }
    let elapsed = started.elapsed().as_secs_f64();
    emit(json!({
        "benchmark": "compaction_read_side",
        "rows": rows,
        "surviving": surviving.len(),
        "read_ms": elapsed * 1e3,
        "rows_per_sec": rows as f64 / elapsed,
        "peak_rss_bytes": peak_rss_bytes(),
    }));
    Ok(())
}

/// The write side of a task: the rows, already in memory as batches of the
/// task's batch size, written to one Lance file by the writer a task uses. Only the writing is timed; the
/// batches are read first, so this phase's peak RSS includes them.
async fn bench_write_side(dataset: &Dataset) -> BenchResult<()> {
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .batch_size(BATCH_SIZE)
        .try_into_stream()
        .await?
        .try_collect()
        .await?;
    let schema = batches
        .first()
        .map(RecordBatch::schema)
        .ok_or("the table is empty")?;
    let path = data_file_path("compaction-bench-write-side.lance")?;
    let started = Instant::now();
    let mut writer =
        LanceFileWriter::create(dataset.store(), &path, schema, PageLayout::KeepBatches).await?;
    for batch in &batches {
        writer.write(batch).await?;
    }
    let summary = writer.finish().await?;
    let elapsed = started.elapsed().as_secs_f64();
    dataset.store().delete(&path).await?;
    emit(json!({
        "benchmark": "compaction_write_side",
        "rows": summary.num_rows,
        "output_bytes": summary.size_bytes,
        "write_ms": elapsed * 1e3,
        "rows_per_sec": summary.num_rows as f64 / elapsed,
    }));
    Ok(())
}
