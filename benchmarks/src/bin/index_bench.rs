//! Index benchmark: for each built-in index type on the synthetic table (btree
//! on `id`, bitmap on `category`, ngram on `text`, ivf_flat on `vec`), the build
//! time, the cost of the inline remap inside a compaction (compaction with the
//! index minus compaction without any index, on identical fresh copies), the
//! rebuild time after compaction, the peak extra RSS of the indexed compaction,
//! and the ratio remap / rebuild. Prints JSON lines.
//!
//! `cargo run --release -p refract-benchmarks --bin index_bench -- [--quick] [--rows N] [--fragment-rows M] [--types btree,bitmap,ngram,ivf_flat] [--dir PATH]`

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use refract_benchmarks::{
    copy_dir, current_rss_bytes, emit, heap_live_bytes, heap_peak_bytes,
    indexed_query_matches_scan, peak_rss_bytes, reset_heap_peak, reset_peak_rss, uri,
    CountingAllocator,
};
use refract_cli::commands::data::{append_synthetic, open_or_create};
use refract_cli::commands::Location;
use refract_cli::synthetic::DEFAULT_DIM;
use refract_core::{FragmentRows, RewriteGroupInput, RowAddrRemap, Translator};
use refract_index::manage::index_context;
use refract_index::{
    create_index, list_indices, remap_segment, IndexParams, IndexRegistry, RemapOptions,
    RemapOutcome, MAX_TRANSLATION_BATCH,
};
use refract_optimize::compaction::{compact_files, CompactionOptions, CompactionProgress};
use refract_table::Dataset;
use roaring::{RoaringBitmap, RoaringTreemap};
use serde_json::json;

type BoxError = Box<dyn std::error::Error>;

/// Rows of the `--quick` run.
const QUICK_ROWS: u64 = 200_000;
/// Target: remap ≤ this fraction of a rebuild, for every type…
const REMAP_TARGET: f64 = 0.5;
/// …and ≤ this fraction for ivf_flat (no retraining).
const REMAP_TARGET_IVF: f64 = 0.2;
/// Target: extra peak RSS of the remap per rewritten row.
const RSS_TARGET_BYTES_PER_ROW: f64 = 16.0;

#[derive(Debug, Parser)]
struct Args {
    /// Rows in the table.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// Rows per source fragment.
    #[arg(long, default_value_t = 1_000)]
    fragment_rows: u64,
    /// Index types to measure, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "btree,bitmap,ngram,ivf_flat"
    )]
    types: Vec<String>,
    /// Use 200,000 rows (overrides --rows).
    #[arg(long)]
    quick: bool,
    /// ivf_flat partitions (default: the type's default, √rows).
    #[arg(long)]
    ivf_partitions: Option<u32>,
    /// Fresh copies compacted per scenario (medians are reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Skip the remap timing breakdown (remap map build / translation / segment rewrite).
    #[arg(long)]
    no_breakdown: bool,
    /// Standalone segment rewrites timed in the breakdown (the median is
    /// reported; more than one makes the rewrite dominate a profile).
    #[arg(long, default_value_t = 1)]
    rewrite_repeats: usize,
    /// Where to put the datasets (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl Args {
    fn rows(&self) -> u64 {
        if self.quick {
            QUICK_ROWS
        } else {
            self.rows
        }
    }
}

/// The indexed column of each type.
fn column_of(index_type: &str) -> Result<&'static str, BoxError> {
    Ok(match index_type {
        "btree" => "id",
        "bitmap" => "category",
        "ngram" => "text",
        "ivf_flat" => "vec",
        other => return Err(format!("unknown index type '{other}'").into()),
    })
}

/// One compaction's wall time and memory. The commit phase starts when the
/// last task has finished (progress callback) and holds the inline index remap.
#[derive(Debug, Clone, Copy)]
struct CompactionRun {
    total_ms: f64,
    commit_ms: f64,
    total_extra_rss: u64,
    commit_extra_rss: u64,
    /// Peak live heap of the commit phase above its start (counting allocator).
    commit_extra_heap: u64,
    fragments_after: usize,
}

/// The median of `values` (NaN-free by construction: wall times).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Runs of one scenario, summarised.
struct Runs(Vec<CompactionRun>);

impl Runs {
    fn total_ms(&self) -> f64 {
        median(self.0.iter().map(|r| r.total_ms).collect())
    }
    fn commit_ms(&self) -> f64 {
        median(self.0.iter().map(|r| r.commit_ms).collect())
    }
    fn total_extra_rss(&self) -> u64 {
        self.0.iter().map(|r| r.total_extra_rss).max().unwrap_or(0)
    }
    fn commit_extra_rss(&self) -> u64 {
        self.0.iter().map(|r| r.commit_extra_rss).max().unwrap_or(0)
    }
    fn commit_extra_heap(&self) -> u64 {
        self.0
            .iter()
            .map(|r| r.commit_extra_heap)
            .max()
            .unwrap_or(0)
    }
    fn json(&self) -> serde_json::Value {
        json!({
            "total_ms": self.0.iter().map(|r| r.total_ms).collect::<Vec<_>>(),
            "commit_phase_ms": self.0.iter().map(|r| r.commit_ms).collect::<Vec<_>>(),
            "total_peak_extra_rss_bytes": self.0.iter().map(|r| r.total_extra_rss).collect::<Vec<_>>(),
            "commit_phase_peak_extra_rss_bytes": self.0.iter().map(|r| r.commit_extra_rss).collect::<Vec<_>>(),
            "commit_phase_peak_extra_heap_bytes": self.0.iter().map(|r| r.commit_extra_heap).collect::<Vec<_>>(),
        })
    }
}

/// Returns freed heap memory to the OS, so a later RSS peak shows new
/// allocations instead of reused, already resident pages.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim only releases free heap pages; it has no
        // preconditions and is thread-safe.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Starts a measured phase: trimmed heap, reset peaks; returns the RSS and
/// live-heap baselines.
fn start_phase() -> (u64, u64) {
    trim_heap();
    reset_peak_rss();
    reset_heap_peak();
    (current_rss_bytes(), heap_live_bytes())
}

/// Counts live heap bytes, so the commit phase's heap peak is reported next
/// to its RSS peak.
#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    for t in &args.types {
        column_of(t)?;
    }
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
    std::fs::create_dir_all(&root)?;
    let source = root.join("source");
    let rows = args.rows();
    let repeats = args.repeats.max(1);
    let started = Instant::now();
    let mut dataset = open_or_create(&Location::plain(&uri(&source)), DEFAULT_DIM).await?;
    append_synthetic(&mut dataset, rows, args.fragment_rows, 0, DEFAULT_DIM).await?;
    let fragments = dataset.fragments().len();
    drop(dataset);
    emit(json!({
        "benchmark": "index_bench_load",
        "rows": rows,
        "fragment_rows": args.fragment_rows,
        "fragments": fragments,
        "load_ms": started.elapsed().as_secs_f64() * 1e3,
    }));

    let (baseline, _) = compact_copies(&source, &root.join("scratch"), repeats, None).await?;
    emit(json!({
        "benchmark": "index_bench_compaction_without_index",
        "rows": rows,
        "fragments_before": fragments,
        "fragments_after": baseline.0.first().map(|r| r.fragments_after),
        "median_total_ms": baseline.total_ms(),
        "median_commit_phase_ms": baseline.commit_ms(),
        "runs": baseline.json(),
    }));
    for index_type in &args.types {
        bench_type(args, index_type, &source, &root, &baseline, rows).await?;
    }
    Ok(())
}

/// Compacts `repeats` fresh copies of `source`; keeps the last compacted copy
/// at `keep` when given, deletes the others.
async fn compact_copies(
    source: &Path,
    scratch: &Path,
    repeats: usize,
    keep: Option<&Path>,
) -> Result<(Runs, Option<Dataset>), BoxError> {
    let mut runs = Vec::with_capacity(repeats);
    let mut kept = None;
    for r in 0..repeats {
        let last = r + 1 == repeats;
        let at = match keep {
            Some(path) if last => path.to_path_buf(),
            _ => scratch.to_path_buf(),
        };
        copy_dir(source, &at)?;
        let mut dataset = Dataset::open(&uri(&at)).await?;
        runs.push(compact(&mut dataset).await?);
        if last && keep.is_some() {
            kept = Some(dataset);
        } else {
            drop(dataset);
            std::fs::remove_dir_all(&at)?;
        }
    }
    Ok((Runs(runs), kept))
}

/// Where the commit phase began: time, RSS and live-heap baselines, and the
/// task phase's peak RSS.
type CommitMark = Arc<Mutex<Option<(Instant, u64, u64, u64)>>>;

async fn compact(dataset: &mut Dataset) -> Result<CompactionRun, BoxError> {
    let mark: CommitMark = Arc::new(Mutex::new(None));
    let on_progress = {
        let mark = mark.clone();
        Arc::new(move |p: CompactionProgress| {
            if p.tasks_done == p.tasks_total {
                let task_peak = peak_rss_bytes();
                let (baseline, heap_baseline) = start_phase();
                if let Ok(mut slot) = mark.lock() {
                    *slot = Some((Instant::now(), baseline, heap_baseline, task_peak));
                }
            }
        })
    };
    let (baseline, _) = start_phase();
    let started = Instant::now();
    let metrics = compact_files(dataset, &CompactionOptions::default(), Some(on_progress)).await?;
    let ended = Instant::now();
    let peak = peak_rss_bytes();
    let heap_peak = heap_peak_bytes();
    if metrics.committed_version.is_none() {
        return Err("compaction committed nothing".into());
    }
    let (commit_started, commit_baseline, commit_heap_baseline, task_peak) = mark
        .lock()
        .map_err(|_| "progress mark poisoned")?
        .ok_or("compaction reported no final progress")?;
    Ok(CompactionRun {
        total_ms: (ended - started).as_secs_f64() * 1e3,
        commit_ms: (ended - commit_started).as_secs_f64() * 1e3,
        // The peak counter was reset when the commit phase began; the run's
        // peak is the larger of the task-phase and commit-phase peaks.
        total_extra_rss: peak.max(task_peak).saturating_sub(baseline),
        commit_extra_rss: peak.saturating_sub(commit_baseline),
        commit_extra_heap: heap_peak.saturating_sub(commit_heap_baseline),
        fragments_after: dataset.fragments().len(),
    })
}

fn params(args: &Args, index_type: &str) -> IndexParams {
    IndexParams {
        partitions: (index_type == "ivf_flat")
            .then_some(args.ivf_partitions)
            .flatten(),
        ..IndexParams::default()
    }
}

async fn bench_type(
    args: &Args,
    index_type: &str,
    source: &Path,
    root: &Path,
    baseline: &Runs,
    rows: u64,
) -> Result<(), BoxError> {
    let column = column_of(index_type)?;
    let params = params(args, index_type);
    let indexed_source = root.join(format!("indexed_{index_type}"));
    copy_dir(source, &indexed_source)?;
    let dataset = Dataset::open(&uri(&indexed_source)).await?;
    let started = Instant::now();
    let dataset = create_index(&dataset, index_type, column, index_type, &params).await?;
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    let segment_before = segment_uuids(&dataset, index_type);
    drop(dataset);

    let compacted = root.join(format!("compacted_{index_type}"));
    let (runs, kept) = compact_copies(
        &indexed_source,
        &root.join("scratch"),
        args.repeats.max(1),
        Some(&compacted),
    )
    .await?;
    if !args.no_breakdown {
        breakdown(&indexed_source, index_type, args.rewrite_repeats).await?;
    }
    std::fs::remove_dir_all(&indexed_source)?;
    let dataset = kept.ok_or("the last compacted copy was not kept")?;
    let segment_after = segment_uuids(&dataset, index_type);
    let remapped = !segment_after.is_empty() && segment_after != segment_before;
    let query_matches = indexed_query_matches_scan(&dataset, index_type).await?;

    let started = Instant::now();
    let rebuilt_name = format!("{index_type}_rebuilt");
    let dataset = create_index(&dataset, &rebuilt_name, column, index_type, &params).await?;
    let rebuild_ms = started.elapsed().as_secs_f64() * 1e3;
    drop(dataset);
    std::fs::remove_dir_all(&compacted)?;

    // The remap runs inside the commit phase; the commit phase without an index
    // is the same manifest work minus the remap.
    let remap_ms = runs.commit_ms() - baseline.commit_ms();
    let remap_total_diff_ms = runs.total_ms() - baseline.total_ms();
    let ratio = remap_ms / rebuild_ms;
    let remap_extra_rss = runs
        .commit_extra_rss()
        .saturating_sub(baseline.commit_extra_rss());
    let rss_per_row = remap_extra_rss as f64 / rows as f64;
    let remap_extra_heap = runs
        .commit_extra_heap()
        .saturating_sub(baseline.commit_extra_heap());
    let target = if index_type == "ivf_flat" {
        REMAP_TARGET_IVF
    } else {
        REMAP_TARGET
    };
    emit(json!({
        "benchmark": "index_remap",
        "index_type": index_type,
        "column": column,
        "rows": rows,
        "fragment_rows": args.fragment_rows,
        "build_ms": build_ms,
        "rebuild_ms": rebuild_ms,
        "remap_ms": remap_ms,
        "remap_ms_from_total_diff": remap_total_diff_ms,
        "remap_over_rebuild": ratio,
        "remap_target": target,
        "remap_target_met": ratio <= target,
        "remap_extra_rss_bytes": remap_extra_rss,
        "remap_extra_rss_bytes_per_row": rss_per_row,
        "rss_target_bytes_per_row": RSS_TARGET_BYTES_PER_ROW,
        "remap_extra_heap_bytes": remap_extra_heap,
        "remap_extra_heap_bytes_per_row": remap_extra_heap as f64 / rows as f64,
        "rss_target_met": rss_per_row <= RSS_TARGET_BYTES_PER_ROW,
        "compaction_with_index": {
            "median_total_ms": runs.total_ms(),
            "median_commit_phase_ms": runs.commit_ms(),
            "max_total_peak_extra_rss_bytes": runs.total_extra_rss(),
            "max_commit_phase_peak_extra_rss_bytes": runs.commit_extra_rss(),
            "runs": runs.json(),
        },
        "compaction_without_index": {
            "median_total_ms": baseline.total_ms(),
            "median_commit_phase_ms": baseline.commit_ms(),
            "max_total_peak_extra_rss_bytes": baseline.total_extra_rss(),
            "max_commit_phase_peak_extra_rss_bytes": baseline.commit_extra_rss(),
        },
        "segment_remapped_inline": remapped,
        "post_compaction_query_matches_scan": query_matches,
    }));
    Ok(())
}

fn segment_uuids(dataset: &Dataset, name: &str) -> Vec<String> {
    list_indices(dataset)
        .into_iter()
        .filter(|i| i.name == name)
        .flat_map(|i| i.segments.into_iter().map(|s| s.uuid.to_string()))
        .collect()
}

/// Times the pieces of the inline remap on the indexed, uncompacted copy at
/// `at`, outside compaction: building the compact `RowAddrRemap` for "every
/// fragment into one new fragment", translating every address through it in
/// ≤64K batches, and the whole streaming segment rewrite (`remap_segment`,
/// which includes that translation). The rewritten segment is left unreferenced.
async fn breakdown(at: &Path, index_type: &str, rewrites: usize) -> Result<(), BoxError> {
    let dataset = Dataset::open(&uri(at)).await?;
    let old: Vec<FragmentRows> = dataset
        .fragments()
        .iter()
        .map(|f| FragmentRows {
            id: f.id,
            physical_rows: f.physical_rows,
        })
        .collect();
    let total: u64 = old.iter().map(|f| f.physical_rows).sum();
    let new_id = old.iter().map(|f| f.id).max().unwrap_or(0) + 1;
    let mut surviving = RoaringTreemap::new();
    for f in &old {
        surviving.insert_range((f.id << 32)..((f.id << 32) + f.physical_rows));
    }

    let (rss_before, _) = start_phase();
    let started = Instant::now();
    let remap = RowAddrRemap::compact(vec![RewriteGroupInput {
        old_fragments: old,
        new_fragments: vec![FragmentRows {
            id: new_id,
            physical_rows: total,
        }],
        surviving: surviving.clone(),
    }])?;
    let map_build_ms = started.elapsed().as_secs_f64() * 1e3;
    let map_build_rss = peak_rss_bytes().saturating_sub(rss_before);

    let started = Instant::now();
    let mut batch = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut out = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut translated = 0u64;
    let mut addresses = surviving.iter();
    loop {
        batch.clear();
        batch.extend(addresses.by_ref().take(MAX_TRANSLATION_BATCH));
        if batch.is_empty() {
            break;
        }
        remap.translate(&batch, &mut out)?;
        translated += out.iter().filter(|a| a.is_some()).count() as u64;
    }
    let translate_ms = started.elapsed().as_secs_f64() * 1e3;

    let meta = dataset
        .manifest()
        .indices
        .iter()
        .find(|m| m.name == index_type)
        .ok_or("index segment not found")?
        .clone();
    let mut coverage = RoaringBitmap::new();
    coverage.insert(u32::try_from(new_id)?);
    let options = RemapOptions {
        dataset_version: dataset.version() + 1,
        ..RemapOptions::default()
    };
    let registry = IndexRegistry::with_builtins();
    let ctx = index_context(&dataset);
    let mut segment_times = Vec::with_capacity(rewrites);
    let mut segment_rss = 0;
    for _ in 0..rewrites.max(1) {
        let (rss_before, _) = start_phase();
        let started = Instant::now();
        let outcome =
            remap_segment(&ctx, &registry, &meta, &remap, coverage.clone(), &options).await?;
        segment_times.push(started.elapsed().as_secs_f64() * 1e3);
        segment_rss = segment_rss.max(peak_rss_bytes().saturating_sub(rss_before));
        if !matches!(outcome, RemapOutcome::Remapped(_)) {
            return Err(format!("segment remap skipped: {outcome:?}").into());
        }
    }
    let segment_ms = median(segment_times);
    emit(json!({
        "benchmark": "index_remap_breakdown",
        "index_type": index_type,
        "rows": total,
        "map_build_ms": map_build_ms,
        "map_build_peak_extra_rss_bytes": map_build_rss,
        "translate_all_ms": translate_ms,
        "translated_rows": translated,
        "segment_rewrite_ms": segment_ms,
        "segment_rewrite_peak_extra_rss_bytes": segment_rss,
        "segment_rewrite_minus_translation_ms": segment_ms - translate_ms,
    }));
    Ok(())
}
