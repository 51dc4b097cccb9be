//! Shared helpers for Refract benchmarks: JSON-line output and memory readings.
//!
//! Every benchmark binary prints one JSON object per measurement on stdout, so
//! runs can be collected with `> results.jsonl` and compared over time.

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use refract_index::query::Query;
use refract_table::dataset::Dataset;
use serde_json::Value;

/// Error type of the benchmark helpers.
pub type BoxError = Box<dyn std::error::Error>;

/// Prints one JSON measurement line.
pub fn emit(record: Value) {
    println!("{record}");
}

/// Peak resident set size of this process so far, in bytes (`VmHWM`), or 0 where
/// `/proc` is unavailable.
pub fn peak_rss_bytes() -> u64 {
    proc_status_kib("VmHWM:") * 1024
}

/// Current resident set size, in bytes (`VmRSS`).
pub fn current_rss_bytes() -> u64 {
    proc_status_kib("VmRSS:") * 1024
}

/// Resets the peak RSS counter so a later [`peak_rss_bytes`] measures one phase
/// (Linux: writing 5 to `/proc/self/clear_refs`). Returns false when unsupported.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix(field)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

/// One indexed query for `index_type` on the synthetic table against the same
/// query forced to a scan: true when an index served it and the rows are equal.
pub async fn indexed_query_matches_scan(
    dataset: &Dataset,
    index_type: &str,
) -> Result<bool, BoxError> {
    let query = Query::new(dataset).project(&["id"]);
    let query = match index_type {
        "btree" => query.filter("id >= 1000 AND id < 1100")?,
        "bitmap" => query.filter("category = 3 AND id < 5000")?,
        "ngram" => query.filter("contains(text, 'obsid') AND id < 5000")?,
        "ivf_flat" => {
            let vector = first_vector(dataset).await?;
            // Every partition: the indexed answer must equal the exact one.
            query.nearest("vec", &vector, 10, usize::MAX)
        }
        other => return Err(format!("unknown index type '{other}'").into()),
    };
    let indexed = query.clone().execute().await?;
    let scanned = query.use_index(false).execute().await?;
    Ok(indexed.explain.index.is_some() && indexed.batch == scanned.batch)
}

/// The `vec` value of the first row in scan order.
pub async fn first_vector(dataset: &Dataset) -> Result<Vec<f32>, BoxError> {
    let batch: RecordBatch = dataset
        .scan()
        .project(&["vec"])
        .limit(1)
        .try_into_batch()
        .await?;
    let list = batch
        .column(0)
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .ok_or("vec is not a fixed-size list")?;
    if list.is_empty() {
        return Err("empty dataset".into());
    }
    let value = list.value(0);
    let values = value
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or("vec items are not f32")?;
    Ok(values.values().to_vec())
}

/// A dataset URI for a local directory.
pub fn uri(path: &std::path::Path) -> String {
    path.to_string_lossy().to_string()
}

/// Copies a dataset directory, so every scenario starts from identical files.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
