//! Tests of the storage layer over both an in-memory store and a local directory.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{
    Array, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::ObjectStoreExt;
use refract_core::{DeletionVector, Error};
use rstest::rstest;
use tempfile::TempDir;

use super::*;

#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    Local,
}

/// A fresh, empty dataset root; the `TempDir` (local only) must outlive the store.
async fn fresh(backend: Backend) -> (DatasetStore, Option<TempDir>) {
    match backend {
        Backend::Memory => {
            let uri = format!("memory://io-test-{}", uuid::Uuid::new_v4());
            (DatasetStore::open(&uri, true).await.unwrap(), None)
        }
        Backend::Local => {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("dataset");
            let store = DatasetStore::open(root.to_str().unwrap(), true)
                .await
                .unwrap();
            (store, Some(dir))
        }
    }
}

fn path(raw: &str) -> RelativePath {
    RelativePath::parse(raw).unwrap()
}

fn test_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "vec",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 8),
            true,
        ),
        Field::new("flag", DataType::Boolean, false),
        Field::new("score", DataType::Float64, true),
    ]))
}

/// Rows `start..start+len`; every column is a function of the row id, with nulls
/// in the nullable columns at ids divisible by 3, 5, 7 and 11.
fn test_batch(start: i64, len: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + len).collect();
    let small = Int32Array::from_iter(ids.iter().map(|&i| (i % 3 != 0).then_some((i * 2) as i32)));
    let names = StringArray::from_iter(
        ids.iter()
            .map(|&i| (i % 5 != 0).then(|| format!("row-{i}"))),
    );
    let mut vecs = FixedSizeListBuilder::new(Float32Builder::new(), 8)
        .with_field(Arc::new(Field::new("item", DataType::Float32, true)));
    for &i in &ids {
        for k in 0..8 {
            vecs.values().append_value(i as f32 + k as f32 / 8.0);
        }
        vecs.append(i % 7 != 0);
    }
    let flags = BooleanArray::from_iter(ids.iter().map(|&i| Some(i % 2 == 0)));
    let scores =
        Float64Array::from_iter(ids.iter().map(|&i| (i % 11 != 0).then_some(i as f64 * 0.5)));
    RecordBatch::try_new(
        test_schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(small),
            Arc::new(names),
            Arc::new(vecs.finish()),
            Arc::new(flags),
            Arc::new(scores),
        ],
    )
    .unwrap()
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow_select::concat::concat_batches(&test_schema(), batches).unwrap()
}

fn ids_of(batch: &RecordBatch) -> Vec<i64> {
    batch
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

/// Writes rows 0..rows in batches of 100 to `data/<name>`.
async fn write_test_file(store: &DatasetStore, name: &str, rows: i64) -> RelativePath {
    let file = data_file_path(name).unwrap();
    let mut writer = LanceFileWriter::create(store, &file, test_schema(), PageLayout::default())
        .await
        .unwrap();
    let mut start = 0;
    while start < rows {
        let len = 100.min(rows - start);
        writer.write(&test_batch(start, len)).await.unwrap();
        start += len;
    }
    let summary = writer.finish().await.unwrap();
    assert_eq!(summary.num_rows, rows as u64);
    assert_eq!(store.head(&file).await.unwrap(), summary.size_bytes);
    file
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn lance_round_trip_preserves_every_column(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = write_test_file(&store, "rt.lance", 250).await;
    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(reader.num_rows(), 250);
    assert_eq!(reader.schema().fields(), test_schema().fields());
    let all = concat(&reader.read_all(None).await.unwrap());
    assert_eq!(all, test_batch(0, 250));
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn streaming_writer_and_reader_round_trip_with_tiny_buffers(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = data_file_path("streamed.lance").unwrap();
    // 4 KiB pages: many pages per column for 3,000 rows.
    let mut writer = LanceFileWriter::create(
        &store,
        &file,
        test_schema(),
        PageLayout::Streaming { page_bytes: 4_096 },
    )
    .await
    .unwrap();
    for start in (0..3_000).step_by(250) {
        writer.write(&test_batch(start, 250)).await.unwrap();
    }
    assert_eq!(writer.finish().await.unwrap().num_rows, 3_000);
    // A read budget far below one page still reads every row, in order.
    let reader = LanceFileReader::open(
        &store,
        &file,
        ReadOptions {
            mode: ReadMode::Streaming {
                read_buffer_bytes: 1_024,
            },
            ..ReadOptions::default()
        },
    )
    .await
    .unwrap();
    let all = concat(&reader.read_all(None).await.unwrap());
    assert_eq!(all, test_batch(0, 3_000));
    let window: Vec<RecordBatch> = reader
        .read_range(1_234..1_250, None, 8)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(concat(&window), test_batch(1_234, 16));

    let zero_page = LanceFileWriter::create(
        &store,
        &data_file_path("zero.lance").unwrap(),
        test_schema(),
        PageLayout::Streaming { page_bytes: 0 },
    )
    .await;
    assert!(matches!(zero_page, Err(Error::InvalidInput { .. })));
    let zero_budget = LanceFileReader::open(
        &store,
        &file,
        ReadOptions {
            mode: ReadMode::Streaming {
                read_buffer_bytes: 0,
            },
            ..ReadOptions::default()
        },
    )
    .await;
    assert!(matches!(zero_budget, Err(Error::InvalidInput { .. })));
    let nothing = store.head(&data_file_path("zero.lance").unwrap()).await;
    assert!(
        matches!(nothing, Err(Error::NotFound { .. })),
        "{nothing:?}"
    );
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn range_reads_return_exact_rows(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = write_test_file(&store, "range.lance", 300).await;
    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();

    let batches: Vec<RecordBatch> = reader
        .read_range(95..213, None, 50)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(batches.iter().all(|b| b.num_rows() <= 50));
    assert_eq!(concat(&batches), test_batch(95, 118));

    let projected: Vec<RecordBatch> = reader
        .read_range(10..12, Some(&["score", "id"]), 1024)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let projected = &projected[0];
    assert_eq!(projected.num_rows(), 2);
    let mut names: Vec<&str> = projected
        .schema_ref()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["id", "score"]);
    assert_eq!(ids_of(projected), [10, 11]);

    let empty: Vec<RecordBatch> = reader
        .read_range(7..7, None, 10)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(empty.is_empty());

    assert!(matches!(
        reader.read_range(250..301, None, 10).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        reader.read_range(0..1, None, 0).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        reader.read_range(0..1, Some(&["nope"]), 10).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn streaming_uploads_keep_at_most_parts_in_flight_uploading() {
    use lance_io::traits::Writer;
    use tokio::io::AsyncWriteExt;

    let (store, _dir) = fresh(Backend::Memory).await;
    let bytes: Vec<u8> = (0..64_000u32).map(|i| (i % 251) as u8).collect();
    let file = data_file_path("many.bin").unwrap();
    store.reset_stats();
    let mut upload =
        upload::StreamingUpload::new(store.object_store().clone(), file.to_object_path(), 1_000);
    // Written in one go: the sink fills parts as fast as it may start them.
    upload.write_all(&bytes).await.unwrap();
    assert_eq!(Writer::shutdown(&mut upload).await.unwrap().size, 64_000);
    assert_eq!(store.stats().puts, 1 + 64);
    // On one thread the parts run only when the writer waits for room, so
    // the writer reaches the bound exactly and never passes it.
    assert_eq!(store.max_parts_in_flight(), upload::PARTS_IN_FLIGHT as u64);
    assert_eq!(store.get(&file).await.unwrap(), bytes);
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn streaming_uploads_put_small_files_once_and_big_ones_in_parts(#[case] backend: Backend) {
    use lance_io::traits::Writer;
    use tokio::io::AsyncWriteExt;

    let (store, _dir) = fresh(backend).await;
    let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    // Below one part: a single PUT.
    let small = data_file_path("small.bin").unwrap();
    store.reset_stats();
    let mut upload =
        upload::StreamingUpload::new(store.object_store().clone(), small.to_object_path(), 4_096);
    upload.write_all(&bytes[..4_000]).await.unwrap();
    assert_eq!(upload.tell().await.unwrap(), 4_000);
    assert_eq!(Writer::shutdown(&mut upload).await.unwrap().size, 4_000);
    assert_eq!(store.stats().puts, 1);
    assert_eq!(store.get(&small).await.unwrap(), &bytes[..4_000]);
    // Written twice is an error, not a second object.
    assert!(upload.write_all(b"x").await.is_err());
    assert!(Writer::shutdown(&mut upload).await.is_err());

    // Three parts and a tail: a multipart upload (start + 3 parts).
    let big = data_file_path("big.bin").unwrap();
    store.reset_stats();
    let mut upload =
        upload::StreamingUpload::new(store.object_store().clone(), big.to_object_path(), 3_000);
    for piece in bytes.chunks(700) {
        upload.write_all(piece).await.unwrap();
    }
    assert_eq!(Writer::shutdown(&mut upload).await.unwrap().size, 10_000);
    assert_eq!(store.stats().puts, 1 + 4);
    assert_eq!(store.get(&big).await.unwrap(), bytes);

    // Abandoned midway: nothing visible.
    let dropped = data_file_path("dropped.bin").unwrap();
    let mut upload = upload::StreamingUpload::new(
        store.object_store().clone(),
        dropped.to_object_path(),
        1_000,
    );
    upload.write_all(&bytes).await.unwrap();
    drop(upload);
    assert!(matches!(
        store.head(&dropped).await,
        Err(Error::NotFound { .. })
    ));
    let objects = store
        .list(&RelativePath::parse("data").unwrap())
        .await
        .unwrap();
    let names: Vec<&str> = objects.iter().map(|o| o.path.as_str()).collect();
    assert_eq!(names, ["data/big.bin", "data/small.bin"]);
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn read_ahead_streams_every_window_in_order(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = write_test_file(&store, "ahead.lance", 300).await;
    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();
    for (window, ahead) in [(7, 1), (50, 3), (300, 1), (1_000, 2)] {
        let batches: Vec<RecordBatch> = read_ahead(&reader, WindowSize::rows(window), ahead)
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert!(batches.iter().all(|b| b.num_rows() <= window as usize));
        assert_eq!(concat(&batches), test_batch(0, 300), "window {window}");
    }
    // A consumer that stops early just drops the stream.
    let mut partial = read_ahead(&reader, WindowSize::rows(10), 1).unwrap();
    assert_eq!(ids_of(&partial.try_next().await.unwrap().unwrap())[0], 0);
    drop(partial);
    for (window, ahead) in [(0, 1), (1, 0)] {
        assert!(matches!(
            read_ahead(&reader, WindowSize::rows(window), ahead),
            Err(Error::InvalidInput { .. })
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_reads_at_most_ahead_windows_beyond_the_consumer() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::{Duration, Instant};
    let (store, _dir) = fresh(Backend::Memory).await;
    let file = write_test_file(&store, "bound.lance", 300).await;
    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();
    for ahead in [1usize, 3] {
        let reads = Arc::new(AtomicUsize::new(0));
        let counter = reads.clone();
        let mut stream =
            read_ahead::read_ahead_counting(&reader, WindowSize::rows(10), ahead, move || {
                counter.fetch_add(1, SeqCst);
            })
            .unwrap();
        // The consumer takes window 0 and keeps working on it.
        assert_eq!(ids_of(&stream.try_next().await.unwrap().unwrap())[0], 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while reads.load(SeqCst) < 1 + ahead && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Given time, the reader still stops at `ahead` windows past it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(reads.load(SeqCst), 1 + ahead, "ahead {ahead}");
        // Taking one more frees one slot: exactly one more read.
        stream.try_next().await.unwrap().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while reads.load(SeqCst) < 2 + ahead && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(reads.load(SeqCst), 2 + ahead, "ahead {ahead}");
    }
}

/// The row counts of the windows `size` reads from `reader`, checking that
/// together they are the whole file in order.
async fn window_rows(reader: &LanceFileReader, size: WindowSize, rows: i64) -> Vec<usize> {
    let batches: Vec<RecordBatch> = read_ahead(reader, size, 2)
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(concat(&batches), test_batch(0, rows), "{size:?}");
    batches.iter().map(RecordBatch::num_rows).collect()
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn read_ahead_sizes_windows_by_bytes(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = write_test_file(&store, "bytes.lance", 300).await;
    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();
    // Rows larger than the target: one row per window.
    let tiny = window_rows(&reader, WindowSize::bytes(1, 64), 300).await;
    assert_eq!(tiny, vec![1; 300]);
    // Room for every row: windows double from one row up to the cap.
    let roomy = window_rows(&reader, WindowSize::bytes(1 << 30, 64), 300).await;
    assert_eq!(roomy[..7], [1, 2, 4, 8, 16, 32, 64]);
    assert!(roomy[7..].iter().all(|&rows| rows <= 64));
    // In between: windows settle near the rows that fit the target.
    let whole: Vec<RecordBatch> = reader
        .read_range(0..300, None, 300)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let bytes_per_row = read_ahead::data_bytes(&whole[0]) / 300;
    let settled = window_rows(&reader, WindowSize::bytes(bytes_per_row * 5, 64), 300).await;
    assert_eq!(settled[..3], [1, 2, 4], "{settled:?}");
    assert!(
        settled.iter().all(|&rows| (1..=7).contains(&rows)),
        "{settled:?}"
    );
    assert!(matches!(
        read_ahead(&reader, WindowSize::bytes(0, 8), 1),
        Err(Error::InvalidInput { .. })
    ));
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn take_keeps_caller_order_and_duplicates(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = write_test_file(&store, "take.lance", 300).await;
    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();

    let offsets = [250u32, 3, 250, 0, 299, 3, 120];
    let taken = reader.take(&offsets, None).await.unwrap();
    assert_eq!(ids_of(&taken), [250, 3, 250, 0, 299, 3, 120]);
    // Every column follows its row, not just the id.
    let expected = concat(
        &offsets
            .iter()
            .map(|&o| test_batch(i64::from(o), 1))
            .collect::<Vec<_>>(),
    );
    assert_eq!(taken, expected);

    let sorted = reader.take(&[1, 2, 5], Some(&["id"])).await.unwrap();
    assert_eq!(sorted.num_columns(), 1);
    assert_eq!(ids_of(&sorted), [1, 2, 5]);

    let none = reader.take(&[], Some(&["id", "name"])).await.unwrap();
    assert_eq!(none.num_rows(), 0);
    assert_eq!(none.num_columns(), 2);

    assert!(matches!(
        reader.take(&[300], None).await,
        Err(Error::InvalidInput { .. })
    ));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]
    #[test]
    fn take_matches_direct_indexing(offsets in proptest::collection::vec(0u32..120, 0..40)) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let (store, _dir) = fresh(Backend::Memory).await;
            let file = write_test_file(&store, "prop.lance", 120).await;
            let reader = LanceFileReader::open(&store, &file, ReadOptions::default()).await.unwrap();
            let taken = reader.take(&offsets, Some(&["id"])).await.unwrap();
            let expected: Vec<i64> = offsets.iter().map(|&o| i64::from(o)).collect();
            assert_eq!(ids_of(&taken), expected);
        });
    }
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn global_buffers_and_schema_metadata_round_trip(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = data_file_path("gb.lance").unwrap();
    let mut writer = LanceFileWriter::create(&store, &file, test_schema(), PageLayout::default())
        .await
        .unwrap();
    let first = writer
        .add_global_buffer(Bytes::from_static(b"first"))
        .unwrap();
    writer.write(&test_batch(0, 10)).await.unwrap();
    let second = writer
        .add_global_buffer(Bytes::from_static(b"second"))
        .unwrap();
    writer.add_schema_metadata("refract:kind", "test");
    writer.finish().await.unwrap();
    assert_eq!((first, second), (1, 2));

    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(
        reader.read_global_buffer(first).await.unwrap().as_ref(),
        b"first"
    );
    assert_eq!(
        reader.read_global_buffer(second).await.unwrap().as_ref(),
        b"second"
    );
    assert!(matches!(
        reader.read_global_buffer(3).await,
        Err(Error::InvalidInput { .. })
    ));
    assert_eq!(
        reader
            .schema()
            .metadata()
            .get("refract:kind")
            .map(String::as_str),
        Some("test")
    );
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn writer_rejects_mismatched_batches_and_existing_paths(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = data_file_path("mismatch.lance").unwrap();
    let mut writer = LanceFileWriter::create(&store, &file, test_schema(), PageLayout::default())
        .await
        .unwrap();
    let other = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)])),
        vec![Arc::new(Int32Array::from(vec![1]))],
    )
    .unwrap();
    assert!(matches!(
        writer.write(&other).await,
        Err(Error::InvalidInput { .. })
    ));
    // Same columns, wrong type of one column.
    let batch = test_batch(0, 3);
    let mut fields: Vec<Field> = test_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[1] = Field::new("small", DataType::Int64, true);
    let mut columns = batch.columns().to_vec();
    columns[1] = Arc::new(Int64Array::from(vec![Some(1), None, Some(3)]));
    let wrong = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    assert!(matches!(
        writer.write(&wrong).await,
        Err(Error::InvalidInput { .. })
    ));
    writer.write(&batch).await.unwrap();
    writer.finish().await.unwrap();

    assert!(matches!(
        LanceFileWriter::create(&store, &file, test_schema(), PageLayout::default()).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn dropped_writer_leaves_nothing(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let file = data_file_path("dropped.lance").unwrap();
    let mut writer = LanceFileWriter::create(&store, &file, test_schema(), PageLayout::default())
        .await
        .unwrap();
    writer.write(&test_batch(0, 10)).await.unwrap();
    drop(writer);
    assert!(store.list(&path("data")).await.unwrap().is_empty());
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn missing_and_truncated_lance_files_are_errors(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let missing = data_file_path("missing.lance").unwrap();
    assert!(matches!(
        LanceFileReader::open(&store, &missing, ReadOptions::default()).await,
        Err(Error::NotFound { .. })
    ));

    let file = write_test_file(&store, "whole.lance", 300).await;
    let bytes = store.get(&file).await.unwrap();
    for (name, len) in [
        ("half.lance", bytes.len() / 2),
        ("no-footer.lance", bytes.len() - 8),
        ("tiny.lance", 10),
        ("empty.lance", 0),
    ] {
        let truncated = data_file_path(name).unwrap();
        store.put(&truncated, bytes.slice(..len)).await.unwrap();
        match LanceFileReader::open(&store, &truncated, ReadOptions::default()).await {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("{name}: expected Corrupt, got {other:?}"),
        }
        // With the size the manifest recorded for the intact file.
        match LanceFileReader::open(
            &store,
            &truncated,
            ReadOptions {
                known_size: Some(bytes.len() as u64),
                ..ReadOptions::default()
            },
        )
        .await
        {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("{name} with known size: expected Corrupt, got {other:?}"),
        }
    }
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn request_counting_sees_lance_io(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    store.reset_stats();
    let file = write_test_file(&store, "counted.lance", 300).await;
    let written = store.stats();
    assert!(written.puts >= 1, "{written:?}");
    assert!(written.bytes_written > 0, "{written:?}");
    assert!(written.requests_under("data") >= 2, "{written:?}");

    store.reset_stats();
    let size = store.head(&file).await.unwrap();
    let reader = LanceFileReader::open(
        &store,
        &file,
        ReadOptions {
            known_size: Some(size),
            ..ReadOptions::default()
        },
    )
    .await
    .unwrap();
    reader.read_all(None).await.unwrap();
    let read = store.stats();
    assert_eq!(read.heads, 1, "{read:?}");
    assert!(read.get_ranges + read.gets > 0, "{read:?}");
    assert!(read.bytes_read > 0, "{read:?}");
    let data = read.by_prefix.get("data").copied().unwrap_or_default();
    assert_eq!(data.requests, read.total_requests(), "{read:?}");
    assert_eq!(data.bytes_read, read.bytes_read, "{read:?}");
    assert_eq!(read.puts + read.conditional_puts + read.deletes, 0);
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn object_operations(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let manifest = manifest_path(1);
    assert!(store
        .put_if_absent(&manifest, Bytes::from_static(b"v1"))
        .await
        .unwrap());
    assert!(!store
        .put_if_absent(&manifest, Bytes::from_static(b"other"))
        .await
        .unwrap());
    assert_eq!(store.get(&manifest).await.unwrap().as_ref(), b"v1");
    assert_eq!(
        store.get_range(&manifest, 1..2).await.unwrap().as_ref(),
        b"1"
    );
    assert_eq!(store.head(&manifest).await.unwrap(), 2);

    store
        .put(&manifest_path(2), Bytes::from_static(b"v2"))
        .await
        .unwrap();
    store
        .put(&path("data/a.lance"), Bytes::from_static(b"a"))
        .await
        .unwrap();
    let listed = store.list(&path("_versions")).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|o| o.path.as_str()).collect();
    // Lance's V2 names list the newest version first.
    assert_eq!(
        names,
        [manifest_path(2).as_str(), manifest_path(1).as_str()]
    );
    assert_eq!(listed[0].size, 2);
    assert!(store.list(&path("_indices")).await.unwrap().is_empty());

    let missing = path("data/missing");
    assert!(matches!(
        store.get(&missing).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.head(&missing).await,
        Err(Error::NotFound { .. })
    ));
    store.delete(&missing).await.unwrap();
    store.delete(&manifest).await.unwrap();
    assert!(matches!(
        store.get(&manifest).await,
        Err(Error::NotFound { .. })
    ));

    let stats = store.stats();
    assert_eq!(stats.conditional_puts, 2);
    assert_eq!(stats.puts, 2);
    assert_eq!(stats.lists, 2);
    assert_eq!(stats.deletes, 2);
    // 2 conditional puts, get, get_range, head, put, list, delete, get.
    assert_eq!(stats.by_prefix["_versions"].requests, 9);
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn deletion_files_round_trip_and_detect_corruption(#[case] backend: Backend) {
    let (store, _dir) = fresh(backend).await;
    let mut dv = DeletionVector::new();
    for offset in [0, 5, 99, 70_000] {
        dv.insert(offset);
    }
    let written = write_deletion_file(&store, 7, 1, &dv).await.unwrap();
    assert_eq!(written.num_deleted_rows, 4);
    assert_eq!(written.path.top_level_dir(), "_deletions");
    assert!(written.path.file_name().starts_with("7-"));
    assert!(written.path.file_name().ends_with(".bin"));
    let back = read_deletion_file(&store, &written, 100_000).await.unwrap();
    assert_eq!(back, dv);

    // A second write never reuses the name.
    let again = write_deletion_file(&store, 7, 1, &dv).await.unwrap();
    assert_ne!(again.path, written.path);

    // Offsets beyond the fragment, garbage bytes, truncation, a flipped bit
    // and another count than recorded are Corrupt, with or without a checksum.
    assert!(matches!(
        read_deletion_file(&store, &written, 1_000).await,
        Err(Error::Corrupt { .. })
    ));
    let recount = DeletionFileRef {
        num_deleted_rows: 5,
        ..written.clone()
    };
    assert!(matches!(
        read_deletion_file(&store, &recount, 100_000).await,
        Err(Error::Corrupt { .. })
    ));
    let bytes = store.get(&written.path).await.unwrap();
    let mut flipped = bytes.to_vec();
    *flipped.last_mut().unwrap() ^= 1;
    for body in [
        Bytes::from_static(b"not a bitmap"),
        bytes.slice(..bytes.len() - 1),
        Bytes::from(flipped),
    ] {
        store.put(&written.path, body.clone()).await.unwrap();
        let err = read_deletion_file(&store, &written, 100_000)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { what, .. } if what.contains(written.path.as_str())),
            "{err}"
        );
    }
    // Without a checksum (written before checksums existed) the same bytes
    // still decode.
    store.put(&written.path, bytes).await.unwrap();
    let legacy = DeletionFileRef {
        checksum: None,
        ..written.clone()
    };
    assert_eq!(
        read_deletion_file(&store, &legacy, 100_000).await.unwrap(),
        dv
    );
    let missing = DeletionFileRef {
        path: path("_deletions/none.bin"),
        ..legacy
    };
    assert!(matches!(
        read_deletion_file(&store, &missing, 10).await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn memory_uris_share_one_store_per_name() {
    let name = format!("memory://shared-{}", uuid::Uuid::new_v4());
    let a = DatasetStore::open(&name, true).await.unwrap();
    let b = DatasetStore::open(&name, false).await.unwrap();
    let other = DatasetStore::open(&format!("{name}-other"), true)
        .await
        .unwrap();
    a.put(&path("x"), Bytes::from_static(b"1")).await.unwrap();
    assert_eq!(b.get(&path("x")).await.unwrap().as_ref(), b"1");
    assert!(matches!(
        other.get(&path("x")).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(a.uri(), name);
}

#[tokio::test]
async fn local_uris_resolve_and_create() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a/b");

    // Missing without create → NotFound, nothing created.
    assert!(matches!(
        DatasetStore::open(root.to_str().unwrap(), false).await,
        Err(Error::NotFound { .. })
    ));
    assert!(!root.exists());

    let store = DatasetStore::open(root.to_str().unwrap(), true)
        .await
        .unwrap();
    assert!(root.is_dir());
    store
        .put(&path("data/f"), Bytes::from_static(b"f"))
        .await
        .unwrap();
    assert!(root.join("data/f").is_file());

    // file:// sees the same directory.
    let url = url::Url::from_directory_path(&root).unwrap();
    let via_url = DatasetStore::open(url.as_str(), false).await.unwrap();
    assert_eq!(via_url.get(&path("data/f")).await.unwrap().as_ref(), b"f");
    assert_eq!(via_url.uri(), store.uri());

    // A relative path is resolved against the current directory.
    let cwd = std::env::current_dir().unwrap();
    let ups = cwd.components().count() - 1;
    let relative = format!(
        "{}{}",
        "../".repeat(ups),
        root.strip_prefix("/").unwrap().display()
    );
    let via_relative = DatasetStore::open(&relative, false).await.unwrap();
    assert_eq!(
        via_relative.get(&path("data/f")).await.unwrap().as_ref(),
        b"f"
    );
    assert_eq!(via_relative.uri(), store.uri());

    // Nothing outside the root is visible.
    std::fs::write(dir.path().join("a/outside"), b"o").unwrap();
    assert!(RelativePath::parse("../outside").is_err());
    let listed = store.list(&path("data")).await.unwrap();
    assert_eq!(listed.len(), 1);
}

#[rstest]
#[case("hdfs://namenode/table", "hdfs")]
#[case("ftp://host/table", "ftp")]
#[case("http://host/t", "http")]
#[tokio::test]
async fn unknown_schemes_are_invalid_input(#[case] uri: &str, #[case] scheme: &str) {
    match DatasetStore::open(uri, true).await {
        Err(Error::InvalidInput { message }) => {
            assert!(message.contains(&format!("{scheme:?}")), "{message}")
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[tokio::test]
async fn fault_injection_through_a_dataset_store() {
    let fault = Arc::new(FaultInjectingStore::new(Arc::new(InMemory::new())));
    let store = DatasetStore::from_object_store(fault.clone(), "memory://faulty");

    // Clean commit failure: nothing written, retry succeeds.
    fault.fail_nth(CallKind::ConditionalPut, 0, FaultMode::Clean);
    let err = store
        .put_if_absent(&manifest_path(1), Bytes::from_static(b"m"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::External { .. }), "{err:?}");
    assert!(matches!(
        store.head(&manifest_path(1)).await,
        Err(Error::NotFound { .. })
    ));
    assert!(store
        .put_if_absent(&manifest_path(1), Bytes::from_static(b"m"))
        .await
        .unwrap());

    // Ambiguous commit failure: error, but the manifest is there.
    fault.fail_nth(CallKind::ConditionalPut, 2, FaultMode::Ambiguous);
    assert!(store
        .put_if_absent(&manifest_path(2), Bytes::from_static(b"m2"))
        .await
        .is_err());
    assert_eq!(
        fault
            .inner()
            .head(&manifest_path(2).to_object_path())
            .await
            .unwrap()
            .size,
        2
    );

    // Lance file writes go through the same store: a clean fault on its single
    // put leaves no file, an ambiguous one leaves a complete, readable file.
    let puts_before = fault.calls(CallKind::Put);
    fault.fail_nth(CallKind::Put, puts_before, FaultMode::Clean);
    let file = data_file_path("f1.lance").unwrap();
    let mut writer = LanceFileWriter::create(&store, &file, test_schema(), PageLayout::default())
        .await
        .unwrap();
    writer.write(&test_batch(0, 20)).await.unwrap();
    assert!(writer.finish().await.is_err());
    assert!(store.list(&path("data")).await.unwrap().is_empty());

    let puts_before = fault.calls(CallKind::Put);
    fault.fail_nth(CallKind::Put, puts_before, FaultMode::Ambiguous);
    let mut writer = LanceFileWriter::create(&store, &file, test_schema(), PageLayout::default())
        .await
        .unwrap();
    writer.write(&test_batch(0, 20)).await.unwrap();
    assert!(writer.finish().await.is_err());
    let reader = LanceFileReader::open(&store, &file, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(
        concat(&reader.read_all(None).await.unwrap()),
        test_batch(0, 20)
    );

    // A read fault surfaces as an External error, not Corrupt or a panic. (A new
    // file: the footer of f1 is already in the store's Lance metadata cache.)
    let other = data_file_path("f2.lance").unwrap();
    let mut writer = LanceFileWriter::create(&store, &other, test_schema(), PageLayout::default())
        .await
        .unwrap();
    writer.write(&test_batch(0, 20)).await.unwrap();
    writer.finish().await.unwrap();
    // lance-io makes 4 attempts per read (3 retries), so fail all of them. A file
    // smaller than one block is read whole, a larger one by ranges: arm both.
    for kind in [CallKind::Get, CallKind::GetRange] {
        let before = fault.calls(kind);
        for attempt in 0..4 {
            fault.fail_nth(kind, before + attempt, FaultMode::Clean);
        }
    }
    let err = LanceFileReader::open(&store, &other, ReadOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::External { .. }), "{err:?}");
    let read_faults = fault.fired()[4..].to_vec();
    assert_eq!(read_faults.len(), 4, "{read_faults:?}");
}

/// Handles are shared across tasks: they must be `Send + Sync` (writers `Send`).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    const fn assert_send<T: Send>() {}
    assert_send_sync::<DatasetStore>();
    assert_send_sync::<LanceFileReader>();
    assert_send_sync::<FaultInjectingStore>();
    assert_send::<LanceFileWriter>();
};
