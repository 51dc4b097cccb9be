//! Shared helpers for Refract benchmarks: JSON-line output and memory readings.
//!
//! Every benchmark binary prints one JSON object per measurement on stdout, so
//! runs can be collected with `> results.jsonl` and compared over time.

#![warn(missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use refract_index::query::{IndexUse, Query};
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
    // Forced: the check is about the index's answer, whatever the planner would pick.
    let query = Query::new(dataset)
        .project(&["id"])
        .index_use(IndexUse::Always);
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

/// A global allocator that counts the bytes the process holds, so a
/// benchmark can report a phase's heap peak next to its RSS peak (the
/// difference is what the system allocator keeps resident beyond live data).
/// Install with `#[global_allocator] static A: CountingAllocator = CountingAllocator;`.
pub struct CountingAllocator;

static HEAP_LIVE: AtomicUsize = AtomicUsize::new(0);
static HEAP_PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters are only updated after it succeeds.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            count_alloc(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count_alloc(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        HEAP_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            HEAP_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            count_alloc(new_size);
        }
        new
    }
}

fn count_alloc(size: usize) {
    let live = HEAP_LIVE.fetch_add(size, Ordering::Relaxed) + size;
    HEAP_PEAK.fetch_max(live, Ordering::Relaxed);
}

/// Bytes the process holds through [`CountingAllocator`] now (0 when it is
/// not the global allocator).
pub fn heap_live_bytes() -> u64 {
    HEAP_LIVE.load(Ordering::Relaxed) as u64
}

/// The most bytes held since the last [`reset_heap_peak`].
pub fn heap_peak_bytes() -> u64 {
    HEAP_PEAK.load(Ordering::Relaxed) as u64
}

/// Starts a new heap peak at the bytes held now.
pub fn reset_heap_peak() {
    HEAP_PEAK.store(HEAP_LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}
