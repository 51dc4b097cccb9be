//! `refract demo`: the main job, end to end on a local dataset.
//!
//! The story: load a table in many small fragments, delete rows, build all four
//! index types, compact with inline index remap, and check after every step that
//! the table's content and order are exactly what the synthetic model predicts and
//! that every indexed query equals a brute-force scan. It ends by expiring every
//! version but the latest and reporting the bytes that freed.

use std::path::PathBuf;
use std::time::Instant;

use arrow_array::{Array, Int64Array};
use indicatif::{ProgressBar, ProgressStyle};
use refract_core::{Error, Result};
use std::sync::Arc;

use refract_index::manage::{build_segment, create_index, optimize_indices, segments_of};
use refract_index::query::{IndexUse, Query};
use refract_index::registry::IndexRegistry;
use refract_index::types::IndexParams;
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::fri::describe::describe_fri;
use refract_optimize::fri::labels::PartitionBy;
use refract_optimize::fri::partition::{partition_fragments, PartitionOptions};
use refract_optimize::maintain::{maintain, MaintainOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_table::cleanup::cleanup_orphans;
use refract_table::dataset::Dataset;
use refract_table::{cleanup_old_versions, RetentionPolicy};

use refract_table::io::StorageOptions;

use super::compact::progress_bar;
use super::data::{append_synthetic, open_or_create, read_rows, ScanRequest};
use super::location::Location;
use crate::output::render_summary;
use crate::synthetic;

/// Rows the demo starts with.
const DEMO_ROWS: u64 = 200_000;
/// Rows appended later, then compacted with deferred remap and partitioned.
const LATE_ROWS: u64 = 60_000;
/// Rows per fragment of the late append.
const LATE_FRAGMENT_ROWS: u64 = 6_000;
/// Rows per fragment of the demo's appends (small on purpose: compaction has work).
const DEMO_FRAGMENT_ROWS: u64 = 10_000;
/// Vector dimension of the demo table.
const DEMO_DIM: i32 = 16;
/// Partitions of the demo's ivf_flat index.
const DEMO_PARTITIONS: u32 = 16;

/// `nprobes` that probes every partition of every segment (segments added by
/// `optimize_indices` pick their own partition count).
const PROBE_ALL: usize = 1 << 20;

/// The indices the demo builds: (name, column, type).
const INDICES: [(&str, &str, &str); 4] = [
    ("id_btree", "id", "btree"),
    ("category_bitmap", "category", "bitmap"),
    ("text_ngram", "text", "ngram"),
    ("vec_ivf", "vec", "ivf_flat"),
];

/// Filters checked against a brute-force scan after every maintenance step.
const CHECK_FILTERS: [&str; 8] = [
    "id >= 209990 AND id < 212010",
    "id = 255555 OR id = 201234",
    "id = 123457",
    "id >= 41000 AND id < 41100",
    "id IN (5, 77777, 199999, 3)",
    "category = 7 AND id < 5000",
    "contains(text, 'nebula') AND id < 20000",
    "category IN (1, 2) AND id >= 150000 AND id < 150300",
];

/// The summary the demo prints at the end.
#[derive(Default)]
struct Summary {
    rows: Vec<(String, String)>,
    checks_passed: usize,
}

impl Summary {
    fn add(&mut self, label: impl Into<String>, value: impl Into<String>) {
        self.rows.push((label.into(), value.into()));
    }
}

/// Runs the demo at `uri` (a dataset URI that must hold no dataset yet, e.g.
/// `s3://bucket/prefix`), else in `dir` (a fresh directory under the system
/// temp dir by default).
pub async fn run(
    dir: Option<PathBuf>,
    uri: Option<String>,
    storage: &StorageOptions,
) -> Result<()> {
    let uri = match uri {
        Some(uri) => uri,
        None => prepare_dir(dir)?.to_string_lossy().to_string(),
    };
    let at = Location::new(&uri, storage);
    crate::out!("refract demo: dataset at {uri}");
    let mut summary = Summary::default();
    let mut deleted: Vec<(i64, i64)> = Vec::new();

    let started = Instant::now();
    if at.open().await.is_ok() {
        return Err(Error::invalid_input(format!(
            "a dataset already exists at {uri}; the demo needs a fresh location"
        )));
    }
    let mut dataset = open_or_create(&at, DEMO_DIM).await?;
    let bar = spinner("appending rows");
    append_synthetic(&mut dataset, DEMO_ROWS, DEMO_FRAGMENT_ROWS, 0, DEMO_DIM).await?;
    bar.finish_and_clear();
    summary.add(
        "append",
        format!(
            "{DEMO_ROWS} rows in {} fragments ({:.2?})",
            dataset.fragments().len(),
            started.elapsed()
        ),
    );
    let fragments_before = dataset.fragments().len();

    let started = Instant::now();
    let result = dataset
        .delete("id % 10 = 3 OR (id >= 40000 AND id < 60000)")
        .await?;
    deleted.push((-1, 3));
    deleted.push((40_000, 60_000));
    summary.add(
        "delete",
        format!(
            "{} rows deleted ({:.2?})",
            result.rows_deleted,
            started.elapsed()
        ),
    );
    check_content(&dataset, &deleted, &mut summary).await?;

    for (name, column, index_type) in INDICES {
        let started = Instant::now();
        let bar = spinner(&format!("building {index_type} index '{name}'"));
        let params = IndexParams {
            partitions: (index_type == "ivf_flat").then_some(DEMO_PARTITIONS),
            ..IndexParams::default()
        };
        dataset = create_index(&dataset, name, column, index_type, &params).await?;
        bar.finish_and_clear();
        summary.add(
            format!("index {name}"),
            format!(
                "{index_type} on {column} built in {:.2?}",
                started.elapsed()
            ),
        );
    }
    check_queries(&dataset, "after index build", &mut summary).await?;

    let options = CompactionOptions {
        target_rows_per_fragment: 50_000,
        ..CompactionOptions::default()
    };
    let started = Instant::now();
    let mut rounds = 0;
    loop {
        let (bar, callback) = progress_bar(&format!("compaction round {}", rounds + 1));
        let metrics = compact_files(&mut dataset, &options, Some(callback)).await?;
        bar.finish_and_clear();
        if metrics.committed_version.is_none() {
            break;
        }
        rounds += 1;
        check_content(&dataset, &deleted, &mut summary).await?;
    }
    summary.add(
        "compaction (inline remap)",
        format!(
            "{rounds} committing round(s), {fragments_before} → {} fragments, indices remapped in the commit ({:.2?})",
            dataset.fragments().len(),
            started.elapsed()
        ),
    );
    check_queries(&dataset, "after compaction", &mut summary).await?;

    fri_story(&mut dataset, &mut deleted, &mut summary).await?;

    let cleaned = cleanup_orphans(&dataset, std::time::Duration::ZERO).await?;
    summary.add(
        "cleanup",
        format!("{} unreferenced file(s) deleted", cleaned.deleted.len()),
    );
    retention(&dataset, &deleted, &mut summary).await?;
    summary.add(
        "fragments",
        format!(
            "{fragments_before} at the start → {} at the end",
            dataset.fragments().len()
        ),
    );
    summary.add("query checks passed", summary.checks_passed.to_string());
    crate::out!("{}", render_summary("summary", &summary.rows));
    crate::out!(
        "final: version {}, {} fragments, {} live rows",
        dataset.version(),
        dataset.fragments().len(),
        dataset.count_rows(None).await?
    );
    Ok(())
}

/// New data goes through the deferred path: index segments keep their files,
/// compaction and a stable partition are recorded in the FRI ledger, queries
/// translate, then `remap_indices` catches the segments up and `trim_fri`
/// drains the history.
async fn fri_story(
    dataset: &mut Dataset,
    deleted: &mut Vec<(i64, i64)>,
    summary: &mut Summary,
) -> Result<()> {
    let bar = spinner("appending late rows and indexing them");
    append_synthetic(
        dataset,
        LATE_ROWS,
        LATE_FRAGMENT_ROWS,
        DEMO_ROWS as i64,
        DEMO_DIM,
    )
    .await?;
    let late_fragments: Vec<u64> = dataset
        .fragments()
        .iter()
        .rev()
        .take((LATE_ROWS / LATE_FRAGMENT_ROWS) as usize)
        .map(|f| f.id)
        .collect();
    for (name, _, _) in INDICES {
        *dataset = optimize_indices(dataset, name).await?;
    }
    bar.finish_and_clear();
    dataset.delete("id >= 210000 AND id < 212000").await?;
    deleted.push((210_000, 212_000));
    summary.add(
        "late append",
        format!(
            "{LATE_ROWS} rows in {} fragments, indexed by new segments",
            late_fragments.len()
        ),
    );

    let options = CompactionOptions {
        target_rows_per_fragment: 30_000,
        defer_index_remap: true,
        excluded_fragment_ids: dataset
            .fragments()
            .iter()
            .map(|f| f.id)
            .filter(|id| !late_fragments.contains(id))
            .collect(),
        ..CompactionOptions::default()
    };
    let (bar, callback) = progress_bar("deferred compaction");
    let metrics = compact_files(dataset, &options, Some(callback)).await?;
    bar.finish_and_clear();
    summary.add(
        "compaction (deferred)",
        format!(
            "{} → {} fragments, segments untouched, transitions recorded",
            metrics.fragments_removed, metrics.fragments_added
        ),
    );
    check_content(dataset, deleted, summary).await?;

    let compacted: Vec<u64> = dataset
        .fragments()
        .iter()
        .rev()
        .take(metrics.fragments_added as usize)
        .map(|f| f.id)
        .rev()
        .collect();
    let mut partition = PartitionOptions::new(PartitionBy::Hash {
        column: "category".into(),
        destinations: 4,
    });
    partition.fragments = Some(compacted);
    let started = Instant::now();
    let partitioned = partition_fragments(dataset, partition).await?;
    summary.add(
        "stable partition",
        format!(
            "{} → {} fragments by hash(category), row map of {} bytes ({:.2?})",
            partitioned.fragments_removed,
            partitioned.fragments_added,
            partitioned.map_size_bytes,
            started.elapsed()
        ),
    );
    check_multiset(dataset, deleted, summary).await?;
    let transitions_before = describe_fri(dataset).await?.transitions.len();
    check_queries(dataset, "through the FRI", summary).await?;

    for (name, column, index_type) in INDICES {
        let started = Instant::now();
        let report = remap_indices(
            dataset,
            RemapOptions {
                names: Some(vec![name.to_string()]),
                chunk_cache: crate::settings::chunk_cache_mode(),
                ..RemapOptions::default()
            },
        )
        .await?;
        let remap_time = started.elapsed();
        let rebuild_time = time_rebuild(dataset, name, column, index_type).await?;
        summary.add(
            format!("remap {name}"),
            format!("{} segment(s) remapped in {remap_time:.2?}; rebuilding them takes {rebuild_time:.2?}", report.remapped()),
        );
    }
    let trimmed = trim_fri(dataset).await?;
    let transitions_after = describe_fri(dataset).await?.transitions.len();
    summary.add(
        "FRI transitions",
        format!("{transitions_before} before remap → {transitions_after} after trim ({} row map(s) released)", trimmed.row_maps_released.len()),
    );
    check_queries(dataset, "after remap and trim", summary).await?;

    let report = maintain(
        dataset,
        MaintainOptions {
            until_noop: true,
            compaction: Some(CompactionOptions {
                target_rows_per_fragment: 30_000,
                ..CompactionOptions::default()
            }),
            ..MaintainOptions::default()
        },
    )
    .await?;
    let last_noop = report.rounds.last().is_some_and(|round| round.is_noop());
    if !report.converged || !last_noop {
        return Err(Error::corrupt(
            "demo",
            "maintenance did not reach a fixed point",
        ));
    }
    summary.add(
        "maintain --until-noop",
        format!(
            "{} round(s); the last committed nothing",
            report.rounds.len()
        ),
    );
    check_multiset(dataset, deleted, summary).await?;
    check_queries(dataset, "at the fixed point", summary).await?;
    Ok(())
}

/// Expires every version but the latest (a throwaway table keeps no
/// history), deleting the files only older versions referenced, and checks
/// the table still reads and queries exactly.
async fn retention(dataset: &Dataset, deleted: &[(i64, i64)], summary: &mut Summary) -> Result<()> {
    let bar = spinner("expiring old versions");
    let policy = RetentionPolicy {
        older_than: None,
        keep_last: Some(1),
        ..RetentionPolicy::default()
    };
    let report = cleanup_old_versions(dataset, &policy).await;
    bar.finish_and_clear();
    let report = report?;
    summary.add(
        "retention (keep the latest)",
        format!(
            "{} version(s) expired, {} file(s) removed, {:.1} MB ({} bytes) freed",
            report.expired_versions.len(),
            report.removed.len(),
            report.bytes_freed as f64 / 1e6,
            report.bytes_freed
        ),
    );
    check_multiset(dataset, deleted, summary).await?;
    check_queries(dataset, "after retention", summary).await?;
    Ok(())
}

/// How long building `name`'s current segments from scratch takes (the files
/// are not committed; cleanup removes them).
async fn time_rebuild(
    dataset: &Dataset,
    name: &str,
    column: &str,
    index_type: &str,
) -> Result<std::time::Duration> {
    let registry = IndexRegistry::with_builtins();
    let registered = registry.get(index_type)?;
    let params = IndexParams {
        partitions: (index_type == "ivf_flat").then_some(DEMO_PARTITIONS),
        ..IndexParams::default()
    };
    let started = Instant::now();
    for segment in segments_of(dataset, name) {
        let fragments: Vec<u64> = segment
            .fragment_bitmap
            .as_ref()
            .map(|b| b.iter().map(u64::from).collect())
            .unwrap_or_default();
        build_segment(dataset, registered, name, column, &fragments, &params).await?;
    }
    Ok(started.elapsed())
}

fn prepare_dir(dir: Option<PathBuf>) -> Result<PathBuf> {
    let dir = match dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("refract-demo-{}", std::process::id())),
    };
    let non_empty = std::fs::read_dir(&dir)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if non_empty {
        return Err(Error::invalid_input(format!(
            "--dir {} is not empty; the demo needs a fresh directory",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::external("creating the demo directory", e))?;
    Ok(dir)
}

fn spinner(message: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// True when `id` was deleted by one of the demo's deletes: `(-1, m)` means
/// `id % 10 = m` among the first `DEMO_ROWS` rows (the delete ran before the
/// late append), otherwise a half-open id range.
fn is_deleted(id: i64, deleted: &[(i64, i64)]) -> bool {
    deleted.iter().any(|&(start, end)| {
        if start < 0 {
            id < DEMO_ROWS as i64 && id % 10 == end
        } else {
            (start..end).contains(&id)
        }
    })
}

/// Scans the table and checks content and order against the synthetic model.
async fn check_content(
    dataset: &Dataset,
    deleted: &[(i64, i64)],
    summary: &mut Summary,
) -> Result<()> {
    let request = ScanRequest {
        columns: Some(vec!["id".into()]),
        ..ScanRequest::default()
    };
    let rows = read_rows(dataset, &request).await?;
    let ids = int64_column(&rows, "id")?;
    let total = if ids.last().is_some_and(|id| *id >= DEMO_ROWS as i64) {
        DEMO_ROWS + LATE_ROWS
    } else {
        DEMO_ROWS
    };
    let expected = (0..total as i64).filter(|id| !is_deleted(*id, deleted));
    if !ids.iter().copied().eq(expected) {
        return Err(Error::corrupt(
            "demo dataset",
            format!(
                "version {}: full scan does not match the expected rows and order",
                dataset.version()
            ),
        ));
    }
    summary.checks_passed += 1;
    Ok(())
}

/// After a stable partition rows are grouped by destination, so the table
/// holds exactly the expected rows (each once) in a new order.
async fn check_multiset(
    dataset: &Dataset,
    deleted: &[(i64, i64)],
    summary: &mut Summary,
) -> Result<()> {
    let request = ScanRequest {
        columns: Some(vec!["id".into()]),
        ..ScanRequest::default()
    };
    let mut ids = int64_column(&read_rows(dataset, &request).await?, "id")?;
    ids.sort_unstable();
    let expected = (0..(DEMO_ROWS + LATE_ROWS) as i64).filter(|id| !is_deleted(*id, deleted));
    if !ids.iter().copied().eq(expected) {
        return Err(Error::corrupt(
            "demo dataset",
            format!("version {}: rows lost or duplicated", dataset.version()),
        ));
    }
    summary.checks_passed += 1;
    Ok(())
}

fn int64_column(batch: &arrow_array::RecordBatch, name: &str) -> Result<Vec<i64>> {
    let column = batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
        .ok_or_else(|| Error::corrupt("query result", format!("no int64 column {name}")))?;
    Ok((0..column.len()).map(|i| column.value(i)).collect())
}

/// Every check filter (and a kNN query probing all partitions) with indices
/// equals the same query as a brute-force scan.
async fn check_queries(dataset: &Dataset, when: &str, summary: &mut Summary) -> Result<()> {
    let started = Instant::now();
    let mut translated = 0usize;
    for filter in CHECK_FILTERS {
        // The index path is forced so every check exercises the index.
        let indexed = Query::new(dataset)
            .with_resolver(Arc::new(crate::settings::resolver()))
            .filter(filter)?
            .project(&["id"])
            .index_use(IndexUse::Always)
            .execute()
            .await?;
        let scanned = Query::new(dataset)
            .filter(filter)?
            .project(&["id"])
            .use_index(false)
            .execute()
            .await?;
        if int64_column(&indexed.batch, "id")? != int64_column(&scanned.batch, "id")? {
            return Err(Error::corrupt(
                "demo",
                format!("{when}: indexed query `{filter}` differs from a scan"),
            ));
        }
        translated += indexed
            .explain
            .segments
            .iter()
            .filter(|s| s.translated)
            .count();
        summary.checks_passed += 1;
    }
    let vector: Vec<f32> = (0..DEMO_DIM)
        .map(|j| synthetic::vector_component(4242, j))
        .collect();
    let indexed = Query::new(dataset)
        .with_resolver(Arc::new(crate::settings::resolver()))
        .nearest("vec", &vector, 10, PROBE_ALL)
        .project(&["id"])
        .execute()
        .await?;
    let exact = Query::new(dataset)
        .nearest("vec", &vector, 10, PROBE_ALL)
        .project(&["id"])
        .use_index(false)
        .execute()
        .await?;
    let (indexed_ids, exact_ids) = (
        int64_column(&indexed.batch, "id")?,
        int64_column(&exact.batch, "id")?,
    );
    if indexed_ids != exact_ids {
        return Err(Error::corrupt(
            "demo",
            format!("{when}: kNN with every partition probed differs from exact search: {indexed_ids:?} vs {exact_ids:?} ({:?})", indexed.explain),
        ));
    }
    summary.checks_passed += 1;
    summary.add(
        format!("queries {when}"),
        format!(
            "{} indexed queries equal brute force ({} segment(s) translated) ({:.2?})",
            CHECK_FILTERS.len() + 1,
            translated,
            started.elapsed()
        ),
    );
    Ok(())
}
