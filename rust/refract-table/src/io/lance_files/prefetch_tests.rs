//! Prefetched and ranged reads of small Lance files.

use arrow_array::{Int64Array, StringArray};
use arrow_schema::{DataType, Field};
use bytes::Bytes;
use futures::TryStreamExt;
use rstest::rstest;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema as ArrowSchema;

use super::*;

async fn memory_store() -> DatasetStore {
    let uri = format!("memory://lance-prefetch-{}", uuid::Uuid::new_v4());
    DatasetStore::open(&uri, true).await.unwrap()
}

fn path(raw: &str) -> RelativePath {
    RelativePath::parse(raw).unwrap()
}

fn batch(start: i64, n: usize) -> RecordBatch {
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let names: StringArray = ids
        .iter()
        .map(|i| (i % 3 != 0).then(|| format!("name-{i}")))
        .collect();
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from(ids)), Arc::new(names)],
    )
    .unwrap()
}

/// Writes batches of 100 rows; `keep` selects the writer that keeps its input.
/// Opens `at` with a known size (or none) in `mode`, no checksum.
async fn open(
    store: &DatasetStore,
    at: &RelativePath,
    known_size: Option<u64>,
    mode: ReadMode,
) -> Result<LanceFileReader> {
    let options = ReadOptions {
        known_size,
        mode,
        ..ReadOptions::default()
    };
    LanceFileReader::open(store, at, options).await
}

async fn write(store: &DatasetStore, at: &RelativePath, rows: usize, keep: bool) -> u64 {
    let schema = batch(0, 0).schema();
    let mut writer = if keep {
        LanceFileWriter::create(store, at, schema, PageLayout::KeepBatches).await
    } else {
        LanceFileWriter::create(store, at, schema, PageLayout::default()).await
    }
    .unwrap();
    for start in (0..rows).step_by(100) {
        writer
            .write(&batch(start as i64, 100.min(rows - start)))
            .await
            .unwrap();
    }
    writer.finish().await.unwrap().size_bytes
}

#[rstest]
#[case::copying_writer(false)]
#[case::keeping_writer(true)]
#[tokio::test]
async fn prefetched_and_uncached_readers_read_what_was_written(#[case] keep: bool) {
    let store = memory_store().await;
    let at = path("data/a.lance");
    let size = write(&store, &at, 1_050, keep).await;
    let expected = batch(0, 1_050);
    for reader in [
        open(&store, &at, Some(size), ReadMode::WholeFile)
            .await
            .unwrap(),
        open(&store, &at, Some(size), ReadMode::OnePass)
            .await
            .unwrap(),
        open(&store, &at, Some(size), ReadMode::Cached)
            .await
            .unwrap(),
    ] {
        assert_eq!(reader.num_rows(), 1_050);
        let batches = reader.read_all(None).await.unwrap();
        let read = arrow_select::concat::concat_batches(&reader.schema(), &batches).unwrap();
        assert_eq!(read.columns(), expected.columns());
        let taken = reader.take(&[7, 3, 1_049], Some(&["id"])).await.unwrap();
        let ids = taken
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values().to_vec(), vec![7, 3, 1_049]);
    }
}

#[tokio::test]
async fn prefetching_costs_one_whole_get() {
    let store = memory_store().await;
    let at = path("data/a.lance");
    let size = write(&store, &at, 500, false).await;
    store.reset_stats();
    let reader = open(&store, &at, Some(size), ReadMode::WholeFile)
        .await
        .unwrap();
    reader.read_all(None).await.unwrap();
    let stats = store.stats();
    assert_eq!(
        (stats.gets, stats.get_ranges, stats.heads, stats.bytes_read),
        (1, 0, 0, size)
    );
}

#[tokio::test]
async fn prefetching_refuses_bad_sizes_and_missing_files() {
    let store = memory_store().await;
    let at = path("data/a.lance");
    let size = write(&store, &at, 200, false).await;
    let wrong = open(&store, &at, Some(size + 1), ReadMode::WholeFile).await;
    assert!(matches!(wrong, Err(Error::Corrupt { .. })), "{wrong:?}");
    let short = open(&store, &at, Some(10), ReadMode::WholeFile).await;
    assert!(matches!(short, Err(Error::Corrupt { .. })), "{short:?}");
    let huge = open(
        &store,
        &at,
        Some(PREFETCH_LIMIT_BYTES + 1),
        ReadMode::WholeFile,
    )
    .await;
    assert!(matches!(huge, Err(Error::InvalidInput { .. })), "{huge:?}");
    let unsized_read = open(&store, &at, None, ReadMode::WholeFile).await;
    assert_eq!(
        unsized_read.unwrap_err().to_string(),
        "invalid input: Lance file data/a.lance is fetched whole only with its size known"
    );
    let missing = open(
        &store,
        &path("data/b.lance"),
        Some(size),
        ReadMode::WholeFile,
    )
    .await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
    // Bytes that are not a Lance file decode to Corrupt, not a panic.
    let junk = path("data/junk.lance");
    store
        .put(&junk, Bytes::from(vec![7u8; 4_096]))
        .await
        .unwrap();
    let garbage = open(&store, &junk, Some(4_096), ReadMode::WholeFile).await;
    assert!(matches!(garbage, Err(Error::Corrupt { .. })), "{garbage:?}");
}

/// A cached open keeps the decoded footer: opening the same file again costs
/// no request, and the reader reads what was written. One-pass opens keep
/// nothing and read the footer every time.
#[tokio::test]
async fn a_warm_cached_open_reads_no_footer() {
    let store = memory_store().await;
    let at = path("data/a.lance");
    let size = write(&store, &at, 1_050, false).await;
    store.reset_stats();
    open(&store, &at, Some(size), ReadMode::Cached)
        .await
        .unwrap();
    let cold = store.stats().total_requests();
    assert!(cold >= 1, "the footer is read once");
    store.reset_stats();
    let warm = open(&store, &at, Some(size), ReadMode::Cached)
        .await
        .unwrap();
    assert_eq!(store.stats().total_requests(), 0, "warm open");
    let taken = warm.take(&[1_049], Some(&["id"])).await.unwrap();
    let ids = taken
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(ids.values().to_vec(), vec![1_049]);
    for _ in 0..2 {
        store.reset_stats();
        open(&store, &at, Some(size), ReadMode::OnePass)
            .await
            .unwrap();
        assert_eq!(store.stats().total_requests(), cold, "one-pass opens");
    }
}

/// A long range is read in windows (Lance plans a whole read up front):
/// the batches are exactly those of one read.
#[tokio::test]
async fn a_range_read_in_windows_yields_the_batches_of_one_read() {
    let store = memory_store().await;
    let at = path("data/long.lance");
    let size = write(&store, &at, 5_000, false).await;
    let reader = open(&store, &at, Some(size), ReadMode::OnePass)
        .await
        .unwrap();
    let bytes_per_row = size / 5_000;
    // About 3 batches a window: 128 × 3 = 384 rows, 13 windows.
    assert_eq!(reader.window_rows(128, bytes_per_row * 400), 384);
    assert_eq!(reader.window_rows(128, 1), 128, "at least one batch");
    let (projection, _) = reader.projection(None).unwrap();
    let whole: Vec<RecordBatch> = reader
        .stream_range(37..4_990, projection.clone(), 128)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let windowed: Vec<RecordBatch> = reader
        .read_windows(37..4_990, projection, 128, bytes_per_row * 400)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let sizes: Vec<usize> = windowed.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(sizes.len(), 39);
    assert_eq!(sizes.iter().sum::<usize>(), 4_953);
    assert_eq!(windowed, whole);
    let ids = windowed[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(ids.value(0), 37);
}
