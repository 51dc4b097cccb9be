//! Tests of [`super`]: scans against their plans, one-pass reads, read-ahead.

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{Int64Array, StringArray};
use rstest::rstest;

use super::*;
use crate::dataset::{OpenOptions, WriteOptions};
use crate::format::DataFile;
use crate::io::paths::RelativePath;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "vector",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 4),
            true,
        ),
    ]))
}

/// Rows `0..n`: name null every 5th row, vector null every 11th.
fn rows(n: usize) -> RecordBatch {
    let ids: Vec<i64> = (0..n as i64).collect();
    let names: StringArray = ids
        .iter()
        .map(|i| (i % 5 != 0).then(|| format!("row-{i}")))
        .collect();
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 4);
    for i in &ids {
        for k in 0..4 {
            vectors.values().append_value(*i as f32 + k as f32);
        }
        vectors.append(i % 11 != 0);
    }
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(names),
            Arc::new(vectors.finish()),
        ],
    )
    .unwrap()
}

async fn dataset(rows_total: usize, rows_per_file: u64) -> Dataset {
    let uri = format!("memory://scan-one-pass-{}", uuid::Uuid::new_v4());
    let mut dataset = Dataset::create(&uri, schema(), OpenOptions::default())
        .await
        .unwrap();
    let options = WriteOptions {
        max_rows_per_file: rows_per_file,
        ..WriteOptions::default()
    };
    dataset
        .append(vec![rows(rows_total)], &options)
        .await
        .unwrap();
    dataset
}

async fn collect(scanner: Scanner) -> RecordBatch {
    scanner.try_into_batch().await.unwrap()
}

#[rstest]
#[case::one_row_files(40, 1)]
#[case::small_files(300, 7)]
#[case::one_file(300, 1_000)]
// Multi-threaded, so small fragments decoded on their own tasks can finish
// out of order: the scan must still yield them in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pass_scan_yields_exactly_the_default_scan(
    #[case] rows_total: usize,
    #[case] rows_per_file: u64,
) {
    let mut dataset = dataset(rows_total, rows_per_file).await;
    dataset.delete("id % 3 = 0").await.unwrap();
    let plain = collect(dataset.scan().with_row_address().batch_size(5)).await;
    let one_pass = collect(dataset.scan().with_row_address().batch_size(5).one_pass()).await;
    assert_eq!(one_pass, plain);
    let expected_ids: Vec<i64> = (0..rows_total as i64).filter(|i| i % 3 != 0).collect();
    let ids = one_pass
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(ids.values().to_vec(), expected_ids);
    // Projection, filter, limit and a fragment subset behave the same too.
    let subset: Vec<u64> = dataset.fragments().iter().skip(1).map(|f| f.id).collect();
    let narrowed = |scanner: Scanner| {
        scanner
            .project(&["name", "id"])
            .filter("id > 10")
            .unwrap()
            .fragments(&subset)
            .limit(50)
    };
    assert_eq!(
        collect(narrowed(dataset.scan()).one_pass()).await,
        collect(narrowed(dataset.scan())).await
    );
}

#[tokio::test]
async fn one_pass_fetches_each_small_file_whole_in_one_request() {
    let dataset = dataset(120, 10).await;
    assert_eq!(dataset.fragments().len(), 12);
    dataset.store().reset_stats();
    let batch = collect(dataset.scan().one_pass()).await;
    assert_eq!(batch.num_rows(), 120);
    let stats = dataset.store().stats();
    let data_bytes: u64 = dataset.fragments().iter().map(|f| f.size_bytes()).sum();
    assert_eq!(
        (stats.gets, stats.get_ranges, stats.heads, stats.bytes_read),
        (12, 0, 0, data_bytes)
    );
}

#[tokio::test]
async fn a_projected_one_pass_fetches_whole_only_files_below_its_limit() {
    let small = dataset(120, 10).await;
    small.store().reset_stats();
    let ids = collect(small.scan().project(&["id"]).one_pass()).await;
    assert_eq!(ids.num_rows(), 120);
    let stats = small.store().stats();
    assert_eq!((stats.gets, stats.get_ranges), (12, 0));

    let large = dataset(200_000, 100_000).await;
    let sizes: Vec<u64> = large.fragments().iter().map(|f| f.size_bytes()).collect();
    assert!(
        sizes.iter().all(
            |size| (PROJECTED_WHOLE_FILE_LIMIT_BYTES + 1..=PREFETCH_LIMIT_BYTES).contains(size)
        ),
        "fixture files must sit between the two limits: {sizes:?}"
    );
    large.store().reset_stats();
    let ids = collect(large.scan().project(&["id"]).one_pass()).await;
    assert_eq!(ids.num_rows(), 200_000);
    let stats = large.store().stats();
    assert_eq!(stats.gets, 0, "no file is fetched whole for one column");
    assert!(stats.bytes_read < sizes.iter().sum::<u64>());
    large.store().reset_stats();
    let all = collect(large.scan().one_pass()).await;
    assert_eq!(all.num_rows(), 200_000);
    assert_eq!(
        large.store().stats().gets,
        2,
        "every column: each file whole"
    );
}

fn fragment(physical_rows: u64, size_bytes: u64) -> Fragment {
    Fragment {
        id: 1,
        files: vec![DataFile {
            path: RelativePath::parse("data/x.lance").unwrap(),
            size_bytes,
            num_rows: physical_rows,
            checksum: None,
            layout: Default::default(),
        }],
        physical_rows,
        deletion_file: None,
    }
}

#[rstest]
#[case::no_fragments(vec![], 2, 2)]
#[case::small_fragments(vec![fragment(1_000, 130_000); 4], 16, 65)]
#[case::mid_fragments(vec![fragment(16_384, 2_000_000); 4], 4, 4)]
#[case::wide_rows(vec![fragment(1_000, 8 << 20); 4], 2, 2)]
#[case::large_fragments(vec![fragment(1_048_576, 130 << 20); 4], 2, 2)]
fn readahead_keeps_rows_and_bytes_in_flight_bounded(
    #[case] fragments: Vec<Fragment>,
    #[case] local: usize,
    #[case] remote: usize,
) {
    assert_eq!(fragment_readahead(&fragments, false), local);
    assert_eq!(fragment_readahead(&fragments, true), remote.min(64));
}

#[tokio::test]
async fn a_data_file_that_does_not_store_the_schema_is_corrupt() {
    let dataset = dataset(30, 10).await;
    let fragment = dataset.fragments()[0].clone();
    // What a damaged schema in an unchecksummed file reads as: `name` gone.
    let path = crate::io::paths::data_file_path("narrow.lance").unwrap();
    let narrow = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("vector", schema().field(2).data_type().clone(), true),
    ]));
    let full = rows(10);
    let batch = RecordBatch::try_new(
        narrow.clone(),
        vec![full.column(0).clone(), full.column(2).clone()],
    )
    .unwrap();
    let mut writer =
        crate::io::LanceFileWriter::create(dataset.store(), &path, narrow, Default::default())
            .await
            .unwrap();
    writer.write(&batch).await.unwrap();
    writer.finish().await.unwrap();
    let narrow = LanceFileReader::open(dataset.store(), &path, ReadOptions::default())
        .await
        .unwrap();
    match dataset.check_data_file(&fragment, &narrow) {
        Err(Error::Corrupt { what, message }) => {
            assert_eq!(what, "Lance file data/narrow.lance");
            assert!(message.contains("column \"name\""), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Another row count than the manifest records is Corrupt too.
    let own = dataset.fragment_reader(&fragment).await.unwrap();
    let mut claimed = fragment.clone();
    claimed.physical_rows += 1;
    assert!(matches!(
        dataset.check_data_file(&claimed, &own),
        Err(Error::Corrupt { what, .. }) if what == "manifest"
    ));
    dataset.check_data_file(&fragment, &own).unwrap();
}
