//! Fixtures shared by refract-optimize's integration tests: one module tree
//! that each test mounts with `mod support;` (a directory, so cargo builds no
//! test binary of its own for it). Each test uses a part of it.
//!
//! - [`compaction`]: two-column (`id`, `text`) tables of exact fragment sizes;
//! - [`fri`]: four-column tables (`id`, `cat`, `name`, `vector`), user index
//!   segments, hand-made rewrites and ledgers;
//! - [`partition`]: the checks of a stable partition;
//! - [`remap`]: indexed tables, deferred rewrites, query-equals-scan checks;
//! - [`store_story`]: the maintenance story run on every object store.
#![allow(dead_code)]

pub mod compaction;
pub mod fri;
pub mod partition;
pub mod remap;
pub mod store_story;

use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use futures::TryStreamExt;
use refract_table::{Dataset, WriteOptions};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh, uniquely named in-memory dataset URI.
pub fn memory_uri(name: &str) -> String {
    format!(
        "memory://{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Write options with files of at most `rows_per_file` rows.
pub fn write_options(rows_per_file: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows_per_file,
        ..WriteOptions::default()
    }
}

/// The `id` column of a full scan, in scan order.
pub async fn scan_ids(dataset: &Dataset) -> Vec<i64> {
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .project(&["id"])
        .try_into_stream()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}
