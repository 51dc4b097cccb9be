//! pylance's BTREE and BITMAP layouts through Refract's remap: exact pages,
//! lookups, postings, metadata and file version afterwards; damaged or
//! unsupported segments refused before anything is written. (pylance itself
//! reading the remapped files is tested in `python/tests/test_lance_indices.py`.)

use std::sync::Arc;

use arrow_array::{Array, BinaryArray, Int64Array, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lance_file::version::ConcreteFileVersion;
use refract_core::{row_address, Error, FragmentRows, RewriteGroupInput, RowAddrRemap};
use refract_table::io::{LanceFileReader, LanceFileWriter, PageLayout, ReadOptions, RelativePath};
use roaring::RoaringTreemap;

use super::bitmap::BITMAP_LOOKUP_FILE;
use super::btree::{PAGE_DATA_FILE, PAGE_LOOKUP_FILE};
use super::{LanceBTreeIndex, LanceBitmapIndex, LanceIndex};
use crate::posting::codec::lance;
use crate::types::test_support::{context, seg};
use crate::types::{IndexContext, IndexType};

const FRAGMENTS: u32 = 3;
const PER_FRAGMENT: u32 = 1_000;

/// Value of row `offset` of fragment `fragment`: runs of three equal
/// values, some nulls, and a value of its own for every row the compaction
/// drops (so some keys lose every row).
fn value(fragment: u32, offset: u32) -> Option<i64> {
    let global = fragment * PER_FRAGMENT + offset;
    if offset.is_multiple_of(7) {
        return Some(1_000_000 + i64::from(global));
    }
    (global % 97 != 5).then_some(i64::from(global / 3))
}

/// Compaction of the three fragments into fragments 10 and 11 (2,000 and
/// the rest), dropping rows whose offset is a multiple of 7.
fn compaction() -> RowAddrRemap {
    let gone = |offset: u32| offset.is_multiple_of(7);
    let surviving: RoaringTreemap = (0..FRAGMENTS)
        .flat_map(|f| (0..PER_FRAGMENT).map(move |o| (f, o)))
        .filter(|(_, o)| !gone(*o))
        .map(|(f, o)| row_address(f, o))
        .collect();
    let live = surviving.len();
    RowAddrRemap::compact(vec![RewriteGroupInput {
        old_fragments: (0..FRAGMENTS)
            .map(|f| FragmentRows::new(f.into(), PER_FRAGMENT.into()))
            .collect(),
        new_fragments: vec![
            FragmentRows::new(10, 2_000),
            FragmentRows::new(11, live - 2_000),
        ],
        surviving,
    }])
    .unwrap()
}

fn translate(remap: &RowAddrRemap, address: u64) -> Option<u64> {
    let mut out = Vec::new();
    refract_core::Translator::translate(remap, &[address], &mut out).unwrap();
    out[0]
}

/// `(value, address)` of every row, sorted as pylance sorts them: by value,
/// nulls last, then by address.
fn sorted_rows() -> Vec<(Option<i64>, u64)> {
    let mut rows: Vec<_> = (0..FRAGMENTS)
        .flat_map(|f| (0..PER_FRAGMENT).map(move |o| (value(f, o), row_address(f, o))))
        .collect();
    rows.sort_by_key(|(v, a)| (v.is_none(), *v, *a));
    rows
}

fn with_metadata(schema: Schema, pairs: &[(&str, &str)]) -> SchemaRef {
    let metadata = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(schema.with_metadata(metadata))
}

async fn write_v2_0(
    ctx: &IndexContext,
    path: RelativePath,
    schema: SchemaRef,
    batches: &[RecordBatch],
) {
    let mut writer = LanceFileWriter::create_versioned(
        &ctx.store,
        &path,
        schema,
        PageLayout::Buffered,
        ConcreteFileVersion::V2_0,
    )
    .await
    .unwrap();
    for batch in batches {
        writer.write(batch).await.unwrap();
    }
    writer.finish().await.unwrap();
}

async fn read(ctx: &IndexContext, path: RelativePath) -> (LanceFileReader, RecordBatch) {
    let file = LanceFileReader::open(&ctx.store, &path, ReadOptions::default())
        .await
        .unwrap();
    let batches = file.read_all(None).await.unwrap();
    let all = arrow::compute::concat_batches(&file.schema(), &batches).unwrap();
    (file, all)
}

fn data_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("values", DataType::Int64, true),
        Field::new("ids", DataType::UInt64, false),
    ]))
}

fn lookup_schema(metadata: &[(&str, &str)]) -> SchemaRef {
    with_metadata(
        Schema::new(vec![
            Field::new("min", DataType::Int64, true),
            Field::new("max", DataType::Int64, true),
            Field::new("null_count", DataType::UInt32, false),
            Field::new("page_idx", DataType::UInt32, false),
        ]),
        metadata,
    )
}

/// pylance's pages and lookup of `rows` in pages of `page`.
fn btree_batches(rows: &[(Option<i64>, u64)], page: usize) -> (Vec<RecordBatch>, RecordBatch) {
    let mut pages = Vec::new();
    let (mut mins, mut maxs, mut nulls) = (Vec::new(), Vec::new(), Vec::new());
    for chunk in rows.chunks(page) {
        mins.push(chunk[0].0);
        maxs.push(chunk[chunk.len() - 1].0);
        nulls.push(chunk.iter().filter(|(v, _)| v.is_none()).count() as u32);
        pages.push(
            RecordBatch::try_new(
                data_schema(),
                vec![
                    Arc::new(chunk.iter().map(|(v, _)| *v).collect::<Int64Array>()),
                    Arc::new(chunk.iter().map(|(_, a)| *a).collect::<UInt64Array>()),
                ],
            )
            .unwrap(),
        );
    }
    let count = nulls.len() as u32;
    let lookup = RecordBatch::try_new(
        lookup_schema(&[]),
        vec![
            Arc::new(Int64Array::from(mins)),
            Arc::new(Int64Array::from(maxs)),
            Arc::new(UInt32Array::from(nulls)),
            Arc::new(UInt32Array::from_iter_values(0..count)),
        ],
    )
    .unwrap();
    (pages, lookup)
}

async fn write_btree(
    ctx: &IndexContext,
    dir: &RelativePath,
    page: usize,
    metadata: &[(&str, &str)],
) {
    let (pages, lookup) = btree_batches(&sorted_rows(), page);
    write_v2_0(
        ctx,
        dir.join(PAGE_DATA_FILE).unwrap(),
        data_schema(),
        &pages,
    )
    .await;
    let lookup = lookup.with_schema(lookup_schema(metadata)).unwrap();
    write_v2_0(
        ctx,
        dir.join(PAGE_LOOKUP_FILE).unwrap(),
        lookup.schema(),
        &[lookup],
    )
    .await;
}

#[tokio::test]
async fn a_btree_remap_recuts_pages_and_lookup_in_pylances_layout() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let metadata = [("batch_size", "256"), ("range_partitioned", "false")];
    write_btree(&ctx, &old, 256, &metadata).await;
    let remap = compaction();
    let details = LanceBTreeIndex::new()
        .remap(&ctx, &old, b"", &new, &remap)
        .await
        .unwrap();
    assert!(details.is_empty(), "the (empty) details message is kept");

    let expected: Vec<(Option<i64>, u64)> = sorted_rows()
        .into_iter()
        .filter_map(|(v, a)| translate(&remap, a).map(|new| (v, new)))
        .collect();
    let (data, rows) = read(&ctx, new.join(PAGE_DATA_FILE).unwrap()).await;
    assert_eq!(data.file_version().unwrap(), ConcreteFileVersion::V2_0);
    let values = rows
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    let ids = rows
        .column(1)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    let got: Vec<(Option<i64>, u64)> = (0..rows.num_rows())
        .map(|i| (values.is_valid(i).then(|| values.value(i)), ids.value(i)))
        .collect();
    assert_eq!(got, expected);

    let (lookup_file, lookup) = read(&ctx, new.join(PAGE_LOOKUP_FILE).unwrap()).await;
    assert_eq!(
        lookup_file.file_version().unwrap(),
        ConcreteFileVersion::V2_0
    );
    let (_, want) = btree_batches(&expected, 256);
    assert_eq!(lookup.columns(), want.columns());
    assert_eq!(
        lookup_file.schema().metadata.get("batch_size").unwrap(),
        "256"
    );
    assert_eq!(
        lookup_file
            .schema()
            .metadata
            .get("range_partitioned")
            .unwrap(),
        "false"
    );

    // The remapped segment lists exactly the translated addresses.
    let reader = LanceBTreeIndex::new().open(&ctx, &new, b"").await.unwrap();
    let stored = reader.stored_addresses().await.unwrap();
    assert_eq!(stored, expected.iter().map(|(_, a)| *a).collect());
}

#[rstest::rstest]
#[case::rows_gone(compaction())]
#[case::every_row_kept(compaction_keeping_every_row())]
#[tokio::test]
async fn a_btree_page_that_disagrees_with_its_lookup_is_corrupt_and_nothing_is_written(
    #[case] remap: RowAddrRemap,
) {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let rows = sorted_rows();
    let (pages, lookup) = btree_batches(&rows, 512);
    write_v2_0(
        &ctx,
        old.join(PAGE_DATA_FILE).unwrap(),
        data_schema(),
        &pages,
    )
    .await;
    // A flipped max in the lookup of page 2.
    let mut maxs: Vec<Option<i64>> = lookup
        .column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .iter()
        .collect();
    maxs[2] = maxs[2].map(|m| m ^ 1);
    let damaged = RecordBatch::try_new(
        lookup.schema(),
        vec![
            lookup.column(0).clone(),
            Arc::new(Int64Array::from(maxs)),
            lookup.column(2).clone(),
            lookup.column(3).clone(),
        ],
    )
    .unwrap();
    let damaged = damaged
        .with_schema(lookup_schema(&[("batch_size", "512")]))
        .unwrap();
    write_v2_0(
        &ctx,
        old.join(PAGE_LOOKUP_FILE).unwrap(),
        damaged.schema(),
        &[damaged],
    )
    .await;
    let err = LanceBTreeIndex::new()
        .remap(&ctx, &old, b"", &new, &remap)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { .. }) && err.to_string().contains("page 2"),
        "{err}"
    );
    for file in [PAGE_LOOKUP_FILE, PAGE_DATA_FILE] {
        assert!(matches!(
            ctx.store.head(&new.join(file).unwrap()).await,
            Err(Error::NotFound { .. })
        ));
    }
}

#[tokio::test]
async fn a_btree_remap_that_drops_no_row_rewrites_ids_and_keeps_values_and_lookup() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    write_btree(&ctx, &old, 256, &[("batch_size", "256")]).await;
    let remap = compaction_keeping_every_row();
    LanceBTreeIndex::new()
        .remap(&ctx, &old, b"", &new, &remap)
        .await
        .unwrap();
    let (data, rows) = read(&ctx, new.join(PAGE_DATA_FILE).unwrap()).await;
    let (was_data, was) = read(&ctx, old.join(PAGE_DATA_FILE).unwrap()).await;
    assert_eq!(data.file_version().unwrap(), ConcreteFileVersion::V2_0);
    assert_eq!(data.schema(), was_data.schema());
    assert_eq!(rows.column(0), was.column(0));
    let want: UInt64Array = sorted_rows()
        .iter()
        .map(|(_, a)| translate(&remap, *a))
        .collect();
    assert_eq!(rows.column(1).as_ref(), &want as &dyn Array);
    let (lookup_file, lookup) = read(&ctx, new.join(PAGE_LOOKUP_FILE).unwrap()).await;
    let (was_lookup_file, was_lookup) = read(&ctx, old.join(PAGE_LOOKUP_FILE).unwrap()).await;
    assert_eq!(lookup, was_lookup);
    assert_eq!(lookup_file.schema(), was_lookup_file.schema());
}

#[tokio::test]
async fn a_btree_lookup_of_another_page_count_is_corrupt() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    // Pages of 256 rows, a lookup claiming pages of 512.
    write_btree(&ctx, &old, 256, &[("batch_size", "512")]).await;
    let err = LanceBTreeIndex::new()
        .remap(&ctx, &old, b"", &new, &compaction())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn a_range_partitioned_btree_is_not_supported_before_anything_is_written() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    write_btree(
        &ctx,
        &old,
        256,
        &[("batch_size", "256"), ("range_partitioned", "true")],
    )
    .await;
    let err = LanceBTreeIndex::new()
        .remap(&ctx, &old, b"", &new, &compaction())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    assert!(matches!(
        ctx.store.head(&new.join(PAGE_DATA_FILE).unwrap()).await,
        Err(Error::NotFound { .. })
    ));
    assert!(LanceBTreeIndex::new().check_index_version(1).is_ok());
    assert!(matches!(
        LanceBTreeIndex::new().check_index_version(2),
        Err(Error::NotSupported { .. })
    ));
}

fn bitmap_schema(metadata: &[(&str, &str)]) -> SchemaRef {
    with_metadata(
        Schema::new(vec![
            Field::new("keys", DataType::Int64, true),
            Field::new("bitmaps", DataType::Binary, true),
        ]),
        metadata,
    )
}

/// pylance's bitmap rows for `rows`: the null key first, then keys ascending.
fn bitmap_batch(rows: &[(Option<i64>, u64)], schema: SchemaRef) -> RecordBatch {
    let mut keys: std::collections::BTreeMap<(bool, Option<i64>), RoaringTreemap> =
        Default::default();
    for (v, a) in rows {
        keys.entry((v.is_some(), *v)).or_default().insert(*a);
    }
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(keys.keys().map(|(_, v)| *v).collect::<Int64Array>()),
            Arc::new(
                keys.values()
                    .map(|posting| Some(lance::encode(posting)))
                    .collect::<BinaryArray>(),
            ),
        ],
    )
    .unwrap()
}

#[tokio::test]
async fn a_bitmap_remap_translates_every_posting_and_drops_emptied_keys() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let rows = sorted_rows();
    let batch = bitmap_batch(
        &rows,
        bitmap_schema(&[("lance:index_stats", "{\"num_bitmaps\":0}")]),
    );
    write_v2_0(
        &ctx,
        old.join(BITMAP_LOOKUP_FILE).unwrap(),
        batch.schema(),
        &[batch],
    )
    .await;
    let remap = compaction();
    LanceBitmapIndex::new()
        .remap(&ctx, &old, b"", &new, &remap)
        .await
        .unwrap();
    let expected_rows: Vec<_> = rows
        .iter()
        .filter_map(|(v, a)| translate(&remap, *a).map(|new| (*v, new)))
        .collect();
    let expected = bitmap_batch(&expected_rows, bitmap_schema(&[]));
    let (file, got) = read(&ctx, new.join(BITMAP_LOOKUP_FILE).unwrap()).await;
    assert_eq!(file.file_version().unwrap(), ConcreteFileVersion::V2_0);
    assert_eq!(got.columns(), expected.columns());
    assert_eq!(
        file.schema().metadata.get("lance:index_stats").unwrap(),
        &format!("{{\"num_bitmaps\":{}}}", expected.num_rows())
    );
    // The keys of the dropped rows are gone.
    let dropped = rows
        .iter()
        .filter(|(v, _)| v.is_some_and(|v| v >= 1_000_000))
        .count();
    assert_eq!(
        expected.num_rows() + dropped,
        bitmap_batch(&rows, bitmap_schema(&[])).num_rows()
    );
}

#[tokio::test]
async fn a_bitmap_posting_with_a_wrong_part_count_is_corrupt() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let posting: RoaringTreemap = [row_address(0, 1), row_address(1, 2)].into_iter().collect();
    let mut bytes = lance::encode(&posting);
    bytes[0] = 3;
    let batch = RecordBatch::try_new(
        bitmap_schema(&[]),
        vec![
            Arc::new(Int64Array::from(vec![Some(1)])),
            Arc::new(BinaryArray::from(vec![Some(bytes.as_slice())])),
        ],
    )
    .unwrap();
    write_v2_0(
        &ctx,
        old.join(BITMAP_LOOKUP_FILE).unwrap(),
        batch.schema(),
        &[batch],
    )
    .await;
    let err = LanceBitmapIndex::new()
        .remap(&ctx, &old, b"", &new, &compaction())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[test]
fn lances_posting_form_is_lance_selects_row_addr_tree_map() {
    let posting: RoaringTreemap = (0..5_000u64)
        .map(|i| row_address((i % 3) as u32, (i * 7) as u32))
        .collect();
    let ours = lance::encode(&posting);
    let mut theirs = Vec::new();
    lance_select::mask::RowAddrTreeMap::from(posting.clone())
        .serialize_into(&mut theirs)
        .unwrap();
    assert_eq!(ours, theirs);
    let parts = lance::parts(&ours, "test").unwrap();
    assert_eq!(crate::posting::decode(parts, "test").unwrap(), posting);
    // A whole-fragment selection (length 0) cannot be translated row by row.
    let full = [1u32.to_le_bytes(), 4u32.to_le_bytes(), 0u32.to_le_bytes()].concat();
    assert!(matches!(
        lance::parts(&full, "test"),
        Err(Error::NotSupported { .. })
    ));
}

fn ngram_schema() -> SchemaRef {
    let postings = Field::new("posting_list", DataType::Binary, false)
        .with_metadata([("lance-encoding:compression".to_string(), "none".to_string())].into());
    Arc::new(Schema::new(vec![
        Field::new("tokens", DataType::UInt32, true),
        postings,
    ]))
}

fn ngram_batch(tokens: &[u32], postings: &[RoaringTreemap]) -> RecordBatch {
    let bytes: Vec<Vec<u8>> = postings
        .iter()
        .map(|p| {
            let mut out = Vec::new();
            p.serialize_into(&mut out).unwrap();
            out
        })
        .collect();
    RecordBatch::try_new(
        ngram_schema(),
        vec![
            Arc::new(UInt32Array::from(tokens.to_vec())),
            Arc::new(
                bytes
                    .iter()
                    .map(|b| Some(b.as_slice()))
                    .collect::<BinaryArray>(),
            ),
        ],
    )
    .unwrap()
}

#[tokio::test]
async fn an_ngram_remap_translates_postings_and_keeps_every_token() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let every = |step: u32| -> RoaringTreemap {
        (0..FRAGMENTS)
            .flat_map(|f| {
                (0..PER_FRAGMENT)
                    .step_by(step as usize)
                    .map(move |o| row_address(f, o))
            })
            .collect()
    };
    // Token 9's rows are all dropped (offsets that are multiples of 7).
    let postings = vec![every(1), every(3), every(7)];
    let batch = ngram_batch(&[2, 5, 9], &postings);
    write_v2_0(
        &ctx,
        old.join(super::ngram::POSTINGS_FILE).unwrap(),
        batch.schema(),
        &[batch],
    )
    .await;
    let remap = compaction();
    LanceIndex::<super::ngram::NgramLayout>::new()
        .remap(&ctx, &old, b"", &new, &remap)
        .await
        .unwrap();
    let translated: Vec<RoaringTreemap> = postings
        .iter()
        .map(|p| p.iter().filter_map(|a| translate(&remap, a)).collect())
        .collect();
    assert!(translated[2].is_empty());
    let (file, got) = read(&ctx, new.join(super::ngram::POSTINGS_FILE).unwrap()).await;
    assert_eq!(file.file_version().unwrap(), ConcreteFileVersion::V2_0);
    assert_eq!(file.schema(), ngram_schema());
    let want = ngram_batch(&[2, 5, 9], &translated);
    assert_eq!(got.column(0), want.column(0));
    let decoded: Vec<RoaringTreemap> = got
        .column(1)
        .as_any()
        .downcast_ref::<BinaryArray>()
        .unwrap()
        .iter()
        .map(|b| RoaringTreemap::deserialize_from(b.unwrap()).unwrap())
        .collect();
    assert_eq!(decoded, translated);
}

#[tokio::test]
async fn ngram_tokens_out_of_order_are_corrupt() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let posting: RoaringTreemap = [row_address(0, 1)].into_iter().collect();
    let batch = ngram_batch(&[4, 4], &[posting.clone(), posting]);
    write_v2_0(
        &ctx,
        old.join(super::ngram::POSTINGS_FILE).unwrap(),
        batch.schema(),
        &[batch],
    )
    .await;
    let err = LanceIndex::<super::ngram::NgramLayout>::new()
        .remap(&ctx, &old, b"", &new, &compaction())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

/// Fragments 0..3 compacted into fragment 10 with every row kept.
fn compaction_keeping_every_row() -> RowAddrRemap {
    let surviving: RoaringTreemap = (0..FRAGMENTS)
        .flat_map(|f| (0..PER_FRAGMENT).map(move |o| row_address(f, o)))
        .collect();
    RowAddrRemap::compact(vec![RewriteGroupInput {
        old_fragments: (0..FRAGMENTS)
            .map(|f| FragmentRows::new(f.into(), PER_FRAGMENT.into()))
            .collect(),
        new_fragments: vec![FragmentRows::new(10, surviving.len())],
        surviving,
    }])
    .unwrap()
}

/// pylance's IVF files: `auxiliary.idx` (row ids by partition, codes, two
/// global buffers) and an empty `index.idx` of sub-index `kind`.
async fn write_ivf(ctx: &IndexContext, dir: &RelativePath, kind: &str) -> Vec<u64> {
    write_ivf_storage(ctx, dir, kind, false).await
}

/// [`write_ivf`], the codes in a struct column of a v2.0 file when `nested`
/// (two physical columns for one field: a layout whose pages are not
/// copied).
async fn write_ivf_storage(
    ctx: &IndexContext,
    dir: &RelativePath,
    kind: &str,
    nested: bool,
) -> Vec<u64> {
    let ids: Vec<u64> = (0..FRAGMENTS)
        .flat_map(|f| (0..PER_FRAGMENT).map(move |o| row_address(f, o)))
        .rev()
        .collect();
    let codes: Arc<dyn Array> = Arc::new(UInt32Array::from_iter_values(0..ids.len() as u32));
    let (codes_field, codes) = if nested {
        let inner = arrow_schema::Fields::from(vec![Field::new("c", DataType::UInt32, true)]);
        let array = arrow_array::StructArray::new(inner.clone(), vec![codes], None);
        (
            Field::new("codes", DataType::Struct(inner), true),
            Arc::new(array) as Arc<dyn Array>,
        )
    } else {
        (Field::new("codes", DataType::UInt32, true), codes)
    };
    let storage_schema = with_metadata(
        Schema::new(vec![
            Field::new("_rowid", DataType::UInt64, true),
            codes_field,
        ]),
        &[("lance:ivf", "1"), ("distance_type", "l2")],
    );
    let batch = RecordBatch::try_new(
        storage_schema.clone(),
        vec![Arc::new(UInt64Array::from(ids.clone())), codes],
    )
    .unwrap();
    let mut writer = LanceFileWriter::create_versioned(
        &ctx.store,
        &dir.join(super::ivf::AUXILIARY_FILE).unwrap(),
        storage_schema,
        PageLayout::Buffered,
        if nested {
            ConcreteFileVersion::V2_0
        } else {
            ConcreteFileVersion::V2_2
        },
    )
    .await
    .unwrap();
    writer
        .add_global_buffer(bytes::Bytes::from_static(b"ivf model"))
        .unwrap();
    writer
        .add_global_buffer(bytes::Bytes::from_static(b"codebook"))
        .unwrap();
    writer.write(&batch).await.unwrap();
    writer.finish().await.unwrap();
    let index_schema = with_metadata(
        Schema::new(vec![Field::new("__flat_marker", DataType::UInt64, false)]),
        &[(
            "lance:index",
            &format!("{{\"type\":\"{kind}\",\"distance_type\":\"l2\"}}"),
        )],
    );
    write_v2_0(
        ctx,
        dir.join(super::ivf::INDEX_FILE).unwrap(),
        index_schema,
        &[],
    )
    .await;
    ids
}

#[rstest::rstest]
#[case::pages_copied(false)]
#[case::reencoded(true)]
#[tokio::test]
async fn an_ivf_remap_rewrites_row_ids_only_and_keeps_buffers(#[case] nested: bool) {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let ids = write_ivf_storage(&ctx, &old, "IVF_PQ", nested).await;
    let remap = compaction_keeping_every_row();
    LanceIndex::<super::ivf::IvfLayout>::new()
        .remap(&ctx, &old, b"", &new, &remap)
        .await
        .unwrap();
    let (file, got) = read(&ctx, new.join(super::ivf::AUXILIARY_FILE).unwrap()).await;
    let (was_file, was) = read(&ctx, old.join(super::ivf::AUXILIARY_FILE).unwrap()).await;
    assert_eq!(
        file.file_version().unwrap(),
        was_file.file_version().unwrap()
    );
    assert_eq!(file.schema(), was.schema());
    let want: UInt64Array = ids.iter().map(|a| translate(&remap, *a)).collect();
    assert_eq!(got.column(0).as_ref(), &want as &dyn Array);
    assert_eq!(got.column(1), was.column(1));
    assert_eq!(&file.read_global_buffer(1).await.unwrap()[..], b"ivf model");
    assert_eq!(&file.read_global_buffer(2).await.unwrap()[..], b"codebook");
    let (index, _) = read(&ctx, new.join(super::ivf::INDEX_FILE).unwrap()).await;
    assert_eq!(index.num_rows(), 0);
}

#[tokio::test]
async fn an_ivf_remap_that_drops_rows_or_meets_a_graph_is_not_supported() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    write_ivf(&ctx, &old, "IVF_FLAT").await;
    let err = LanceIndex::<super::ivf::IvfLayout>::new()
        .remap(&ctx, &old, b"", &new, &compaction())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
    let aux = new.join(super::ivf::AUXILIARY_FILE).unwrap();
    assert!(matches!(
        ctx.store.head(&aux).await,
        Err(Error::NotFound { .. })
    ));

    let hnsw = seg("hnsw");
    write_ivf(&ctx, &hnsw, "IVF_HNSW_SQ").await;
    let err = LanceIndex::<super::ivf::IvfLayout>::new()
        .remap(
            &ctx,
            &hnsw,
            b"",
            &seg("hnsw2"),
            &compaction_keeping_every_row(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
}

/// Records the largest batch it is asked to translate.
struct LargestBatch<'a> {
    inner: &'a RowAddrRemap,
    largest: std::sync::atomic::AtomicUsize,
}

impl refract_core::Translator for LargestBatch<'_> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> refract_core::Result<()> {
        self.largest
            .fetch_max(batch.len(), std::sync::atomic::Ordering::Relaxed);
        refract_core::Translator::translate(self.inner, batch, out)
    }
}

#[tokio::test]
async fn a_btree_page_larger_than_a_translation_batch_is_translated_in_bounded_batches() {
    let (ctx, _tmp) = context().await;
    let (old, new) = (seg("old"), seg("new"));
    let rows: Vec<(Option<i64>, u64)> = (0..70_000u32)
        .map(|o| (Some(i64::from(o)), row_address(0, o)))
        .collect();
    let (pages, lookup) = btree_batches(&rows, 100_000);
    write_v2_0(
        &ctx,
        old.join(PAGE_DATA_FILE).unwrap(),
        data_schema(),
        &pages,
    )
    .await;
    let lookup = lookup
        .with_schema(lookup_schema(&[("batch_size", "100000")]))
        .unwrap();
    write_v2_0(
        &ctx,
        old.join(PAGE_LOOKUP_FILE).unwrap(),
        lookup.schema(),
        &[lookup],
    )
    .await;
    let surviving: RoaringTreemap = rows.iter().map(|(_, a)| *a).collect();
    let remap = RowAddrRemap::compact(vec![RewriteGroupInput {
        old_fragments: vec![FragmentRows::new(0, 70_000)],
        new_fragments: vec![FragmentRows::new(10, 70_000)],
        surviving,
    }])
    .unwrap();
    let counting = LargestBatch {
        inner: &remap,
        largest: Default::default(),
    };
    LanceBTreeIndex::new()
        .remap(&ctx, &old, b"", &new, &counting)
        .await
        .unwrap();
    let largest = counting.largest.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        largest > 0 && largest <= crate::types::MAX_TRANSLATION_BATCH,
        "{largest}"
    );
    let (_, got) = read(&ctx, new.join(PAGE_DATA_FILE).unwrap()).await;
    let ids = got
        .column(1)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    assert_eq!(ids.len(), 70_000);
    assert!(ids
        .values()
        .iter()
        .zip(0u32..)
        .all(|(a, o)| *a == row_address(10, o)));
}
