//! One column written anew, the others' encoded pages copied.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::types::Float32Type;
use arrow_array::{
    ArrayRef, FixedSizeListArray, Int32Array, RecordBatch, StructArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema};
use bytes::Bytes;
use rstest::rstest;

use super::*;

async fn memory_store() -> DatasetStore {
    let uri = format!("memory://column-rewrite-{}", uuid::Uuid::new_v4());
    DatasetStore::open(&uri, true).await.unwrap()
}

fn path(raw: &str) -> RelativePath {
    RelativePath::parse(raw).unwrap()
}

const DIM: i32 = 4;

fn schema() -> Arc<ArrowSchema> {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let metadata = HashMap::from([("lance:test".to_string(), "kept".to_string())]);
    Arc::new(
        ArrowSchema::new(vec![
            Field::new("_rowid", DataType::UInt64, false),
            Field::new("vec", DataType::FixedSizeList(item, DIM), true),
        ])
        .with_metadata(metadata),
    )
}

fn vectors(start: u64, n: usize) -> ArrayRef {
    let rows = (start..start + n as u64)
        .map(|r| Some((0..DIM).map(move |d| Some(r as f32 + d as f32 / 10.0))));
    Arc::new(FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(rows, DIM))
}

fn ids(start: u64, n: usize) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(start..start + n as u64))
}

/// A file of `rows` rows in `version`, batches of 1,000, with one global buffer.
async fn source(
    store: &DatasetStore,
    at: &RelativePath,
    rows: usize,
    version: ConcreteFileVersion,
) -> LanceFileReader {
    let mut writer =
        LanceFileWriter::create_versioned(store, at, schema(), PageLayout::default(), version)
            .await
            .unwrap();
    writer
        .add_global_buffer(Bytes::from_static(b"ivf model"))
        .unwrap();
    for start in (0..rows).step_by(1000) {
        let n = 1000.min(rows - start);
        let batch = RecordBatch::try_new(
            schema(),
            vec![ids(start as u64, n), vectors(start as u64, n)],
        )
        .unwrap();
        writer.write(&batch).await.unwrap();
    }
    writer.finish().await.unwrap();
    LanceFileReader::open(store, at, ReadOptions::default())
        .await
        .unwrap()
}

/// The bytes of every page of `column`, in order.
async fn column_bytes(reader: &LanceFileReader, column: usize) -> Vec<Bytes> {
    let ranges = reader.metadata().column_infos[column]
        .page_infos
        .iter()
        .flat_map(|p| p.buffer_offsets_and_sizes.iter())
        .map(|&(offset, size)| offset..offset + size)
        .collect();
    reader.read_raw(ranges).await.unwrap()
}

async fn rewrite_ids(
    store: &DatasetStore,
    from: &LanceFileReader,
    to: &RelativePath,
    pieces: &[(u64, usize)],
) -> Result<LanceFileSummary> {
    let mut rewriter = ColumnRewriter::start(store, from, to, "_rowid").await?;
    for &(start, n) in pieces {
        rewriter.write(ids(start, n)).await?;
    }
    rewriter.finish().await
}

/// Why the rewrite of `_rowid` from `from` to `to` cannot start.
async fn start_err(store: &DatasetStore, from: &LanceFileReader, to: &RelativePath) -> Error {
    match ColumnRewriter::start(store, from, to, "_rowid").await {
        Ok(_) => panic!("the rewrite of {to} started"),
        Err(e) => e,
    }
}

#[rstest]
#[case::v2_0(ConcreteFileVersion::V2_0)]
#[case::v2_2(ConcreteFileVersion::V2_2)]
#[tokio::test]
async fn the_new_column_is_written_and_the_others_are_copied_byte_for_byte(
    #[case] version: ConcreteFileVersion,
) {
    let store = memory_store().await;
    // 1,100,000 ids are 8.8 MB: two chunks of the new column.
    let rows = 1_100_000;
    let old = source(&store, &path("a/old.lance"), rows, version).await;
    let to = path("a/new.lance");
    let pieces: Vec<(u64, usize)> = (0..11)
        .map(|i| ((1 << 32) + i * 100_000, 100_000))
        .collect();
    let summary = rewrite_ids(&store, &old, &to, &pieces).await.unwrap();
    assert_eq!(summary.num_rows, rows as u64);

    let options = ReadOptions {
        checksum: Some(&summary.checksum),
        ..ReadOptions::default()
    };
    let new = LanceFileReader::open(&store, &to, options).await.unwrap();
    assert_eq!(new.file_version().unwrap(), version);
    assert_eq!(new.schema(), old.schema());
    assert_eq!(new.schema().metadata()["lance:test"], "kept");
    assert_eq!(new.global_buffers(), old.global_buffers());
    assert_eq!(&new.read_global_buffer(1).await.unwrap()[..], b"ivf model");
    assert_eq!(column_bytes(&new, 1).await, column_bytes(&old, 1).await);
    assert!(new.metadata().column_infos[0].page_infos.len() >= 2);

    let batches = new.read_all(None).await.unwrap();
    let read = arrow::compute::concat_batches(&new.schema(), &batches).unwrap();
    assert_eq!(read.column(0).as_ref(), ids(1 << 32, rows).as_ref());
    assert_eq!(read.column(1).as_ref(), vectors(0, rows).as_ref());
}

#[tokio::test]
async fn too_few_or_too_many_values_are_refused_and_leave_nothing() {
    let store = memory_store().await;
    let old = source(
        &store,
        &path("b/old.lance"),
        3_000,
        ConcreteFileVersion::V2_0,
    )
    .await;
    for (n, to) in [(2_999, "b/short.lance"), (3_001, "b/long.lance")] {
        let to = path(to);
        let err = rewrite_ids(&store, &old, &to, &[(0, n)]).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput { message } if message.contains(&format!("{n} new values")) && message.contains("3000 rows")),
            "{err:?}"
        );
        assert!(matches!(store.head(&to).await, Err(Error::NotFound { .. })));
    }
}

#[tokio::test]
async fn values_of_another_type_or_column_are_invalid_input() {
    let store = memory_store().await;
    let old = source(&store, &path("c/old.lance"), 10, ConcreteFileVersion::V2_0).await;
    let err = ColumnRewriter::start(&store, &old, &path("c/x.lance"), "nope")
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::InvalidInput { message } if message.contains("\"nope\"")),
        "{err:?}"
    );

    let to = path("c/new.lance");
    let mut rewriter = ColumnRewriter::start(&store, &old, &to, "_rowid")
        .await
        .unwrap();
    let err = rewriter
        .write(Arc::new(Int32Array::from(vec![1, 2])))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    rewriter.abort().await;
    assert!(matches!(store.head(&to).await, Err(Error::NotFound { .. })));
}

#[tokio::test]
async fn a_struct_column_is_not_supported_before_anything_is_written() {
    let store = memory_store().await;
    let inner = Fields::from(vec![Field::new("x", DataType::Int32, true)]);
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("_rowid", DataType::UInt64, false),
        Field::new("s", DataType::Struct(inner.clone()), true),
    ]));
    let at = path("d/old.lance");
    let mut writer = LanceFileWriter::create_versioned(
        &store,
        &at,
        schema.clone(),
        PageLayout::default(),
        ConcreteFileVersion::V2_0,
    )
    .await
    .unwrap();
    let s = StructArray::new(inner, vec![Arc::new(Int32Array::from(vec![1, 2]))], None);
    writer
        .write(&RecordBatch::try_new(schema, vec![ids(0, 2), Arc::new(s)]).unwrap())
        .await
        .unwrap();
    writer.finish().await.unwrap();
    let old = LanceFileReader::open(&store, &at, ReadOptions::default())
        .await
        .unwrap();
    let to = path("d/new.lance");
    let err = start_err(&store, &old, &to).await;
    assert!(
        matches!(&err, Error::NotSupported { message } if message.contains("\"s\"")),
        "{err:?}"
    );
    assert!(matches!(store.head(&to).await, Err(Error::NotFound { .. })));
}

#[tokio::test]
async fn an_existing_output_is_refused() {
    let store = memory_store().await;
    let at = path("e/old.lance");
    let old = source(&store, &at, 10, ConcreteFileVersion::V2_0).await;
    let err = start_err(&store, &old, &at).await;
    assert!(
        matches!(&err, Error::InvalidInput { message } if message.contains("already exists")),
        "{err:?}"
    );
    assert_eq!(old.read_all(None).await.unwrap()[0].num_rows(), 10);
}

#[test]
fn page_buffers_are_read_in_bounded_aligned_contiguous_pieces() {
    use lance_encoding::decoder::PageEncoding;
    use lance_encoding::format::pb;
    let buffers = [(64, COPY_PIECE_BYTES * 2 + 100), (0, 0), (1 << 30, 10)];
    let page = PageInfo {
        num_rows: 1,
        priority: 0,
        encoding: PageEncoding::Legacy(pb::ArrayEncoding::default()),
        buffer_offsets_and_sizes: Arc::from(buffers.to_vec()),
    };
    let pieces = copy_pieces(std::slice::from_ref(&page));
    let ranges: Vec<_> = pieces
        .iter()
        .map(|p| (p.first_of_buffer, p.range.clone()))
        .collect();
    let (a, b) = (64, 64 + COPY_PIECE_BYTES);
    let c = b + COPY_PIECE_BYTES;
    assert_eq!(
        ranges,
        vec![
            (true, a..b),
            (false, b..c),
            (false, c..c + 100),
            (true, 0..0),
            (true, (1 << 30)..(1 << 30) + 10),
        ]
    );
    // Every piece but a buffer's last keeps the next one aligned.
    assert_eq!(COPY_PIECE_BYTES % 64, 0);
}
