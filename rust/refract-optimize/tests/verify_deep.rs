//! `verify_index_data` (`refract verify --deep`): every index segment is
//! compared entry for entry with the data of the fragments it serves — after
//! deletions, through the FRI after a deferred compaction and after the remap
//! that drains it — and a segment whose files are intact but whose content
//! does not match its data is reported by directory and fragment.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use refract_index::manage::{index_context, segments_of};
use refract_index::types::btree::BTreeIndexType;
use refract_index::types::ngram::trigram::trigrams;
use refract_index::types::IndexType;
use refract_index::{create_index, IndexParams, IndexRegistry};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_reader::verify_index_data;
use refract_table::io::{index_dir, FileJournal};
use refract_table::{
    verify_dataset, Dataset, IndexMetadata, OpenOptions, Operation, VerifyOptions, VerifyReport,
    WriteOptions, ROW_ADDRESS_COLUMN,
};
use roaring::RoaringBitmap;

const DIM: i32 = 4;
const FRAGMENTS: i64 = 4;
const FRAGMENT_ROWS: i64 = 250;

fn schema() -> SchemaRef {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("vec", DataType::FixedSizeList(item, DIM), false),
    ]))
}

/// `name` is null for every seventh id and repeats every 40 ids.
fn name_of(id: i64) -> Option<String> {
    (id % 7 != 0).then(|| format!("name-{:03}", id % 40))
}

fn rows(start: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n).collect();
    let names: StringArray = ids.iter().map(|id| name_of(*id)).collect();
    let values: Float32Array = ids
        .iter()
        .flat_map(|id| (0..i64::from(DIM)).map(move |d| ((id * 7 + d * 13) % 17) as f32))
        .collect();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let vectors = FixedSizeListArray::new(item, DIM, Arc::new(values), None);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(names),
        Arc::new(vectors),
    ];
    RecordBatch::try_new(schema(), columns).unwrap()
}

/// Four 250-row fragments, rows with `id % 9 == 4` deleted, one index of
/// each built-in type.
async fn indexed_table() -> (Dataset, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap().to_string();
    let mut dataset = Dataset::create(&uri, schema(), OpenOptions::default())
        .await
        .unwrap();
    let options = WriteOptions {
        max_rows_per_file: FRAGMENT_ROWS as u64,
        ..WriteOptions::default()
    };
    dataset
        .append(vec![rows(0, FRAGMENTS * FRAGMENT_ROWS)], &options)
        .await
        .unwrap();
    let params = IndexParams {
        partitions: Some(4),
        ..IndexParams::default()
    };
    for (name, column, index_type) in [
        ("id_btree", "id", "btree"),
        ("name_bitmap", "name", "bitmap"),
        ("name_ngram", "name", "ngram"),
        ("vec_ivf", "vec", "ivf_flat"),
    ] {
        dataset = create_index(&dataset, name, column, index_type, &params)
            .await
            .unwrap();
    }
    dataset.delete("id % 9 = 4").await.unwrap();
    (dataset, dir)
}

/// The entries the four indices must hold for the live rows: a btree, a
/// bitmap (nulls included) and an ivf_flat entry per row, an ngram entry per
/// distinct trigram of each non-null name.
fn expected_entries() -> u64 {
    let live: Vec<i64> = (0..FRAGMENTS * FRAGMENT_ROWS)
        .filter(|id| id % 9 != 4)
        .collect();
    let trigram_entries: usize = live
        .iter()
        .filter_map(|id| name_of(*id))
        .map(|name| trigrams(&name).len())
        .sum();
    3 * live.len() as u64 + trigram_entries as u64
}

async fn deep_report(dataset: &Dataset) -> VerifyReport {
    let mut report = verify_dataset(dataset, VerifyOptions::default(), None)
        .await
        .unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let record = |p: refract_reader::IndexCheckProgress| seen.lock().unwrap().push(p);
    verify_index_data(
        dataset,
        &IndexRegistry::with_builtins(),
        &mut report,
        Some(&record),
    )
    .await
    .unwrap();
    let seen = seen.into_inner().unwrap();
    let total = seen.first().map_or(0, |p| p.segments_total);
    assert_eq!(
        seen.iter().map(|p| p.segments_done).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>()
    );
    report
}

#[tokio::test]
async fn every_index_type_matches_its_data_after_deletes() {
    let (dataset, _dir) = indexed_table().await;
    let report = deep_report(&dataset).await;
    assert!(report.is_clean(), "{report:?}");
    let index_data = report.index_data.unwrap();
    assert_eq!(index_data.segments_checked, 4);
    assert_eq!(index_data.entries_checked, expected_entries());
    assert!(index_data.segments_unchecked.is_empty());
}

#[tokio::test]
async fn translated_segments_match_through_the_fri_and_after_remap() {
    let (mut dataset, _dir) = indexed_table().await;
    let options = CompactionOptions {
        target_rows_per_fragment: 2 * FRAGMENT_ROWS as u64,
        defer_index_remap: true,
        ..CompactionOptions::default()
    };
    let metrics = compact_files(&mut dataset, &options, None).await.unwrap();
    assert_eq!(metrics.fragments_removed, 4, "{metrics:?}");
    let report = deep_report(&dataset).await;
    assert!(report.is_clean(), "{report:?}");
    let index_data = report.index_data.clone().unwrap();
    assert_eq!(index_data.segments_checked, 4);
    assert_eq!(index_data.entries_checked, expected_entries());

    remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    let after = deep_report(&dataset).await;
    assert!(after.is_clean(), "{after:?}");
    assert_eq!(after.index_data, Some(index_data));
}

/// Replaces `id_btree` with a btree built, with valid checksums, from the
/// live ids after `edit`.
async fn replace_btree(dataset: &Dataset, edit: impl Fn(&mut Vec<i64>, &mut Vec<u64>)) -> Dataset {
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .project(&["id"])
        .with_row_address()
        .try_into_stream()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut ids = Vec::new();
    let mut addresses = Vec::new();
    for batch in &batches {
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        ids.extend(column.values().iter().copied());
        let rows = batch
            .column_by_name(ROW_ADDRESS_COLUMN)
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap();
        addresses.extend(rows.values().iter().copied());
    }
    edit(&mut ids, &mut addresses);
    let input = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        (
            ROW_ADDRESS_COLUMN,
            Arc::new(arrow_array::UInt64Array::from(addresses)) as ArrayRef,
        ),
    ])
    .unwrap();
    let uuid = uuid::Uuid::new_v4();
    let dir = index_dir(&uuid);
    let journal = Arc::new(FileJournal::new());
    let ctx = index_context(dataset).recording(journal.clone());
    let details = BTreeIndexType
        .build(
            &ctx,
            &dir,
            Box::pin(futures::stream::iter([Ok(input)])),
            &IndexParams::default(),
        )
        .await
        .unwrap();
    let old = segments_of(dataset, "id_btree")[0].clone();
    let fragments: RoaringBitmap = dataset.fragments().iter().map(|f| f.id as u32).collect();
    let new = IndexMetadata {
        uuid,
        name: old.name.clone(),
        fields: old.fields.clone(),
        fragment_bitmap: Some(fragments),
        index_type: old.index_type.clone(),
        details,
        index_version: BTreeIndexType.index_version(),
        dataset_version: dataset.version(),
        files: journal.take_under(&dir),
        lance: Default::default(),
    };
    dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![new],
            removed_index_uuids: vec![old.uuid],
        })
        .await
        .unwrap()
}

fn btree_problems(report: &VerifyReport, dataset: &Dataset) -> Vec<String> {
    let dir = index_dir(&segments_of(dataset, "id_btree")[0].uuid).to_string();
    report
        .problems
        .iter()
        .map(|p| {
            assert_eq!(p.file, dir, "{report:?}");
            p.error.clone()
        })
        .collect()
}

/// Live rows of fragment `f` (fragment ids start at 1).
fn live_in_fragment(f: i64) -> usize {
    ((f - 1) * FRAGMENT_ROWS..f * FRAGMENT_ROWS)
        .filter(|id| id % 9 != 4)
        .count()
}

#[tokio::test]
async fn a_segment_with_swapped_values_is_named_with_both_fragments() {
    let (dataset, _dir) = indexed_table().await;
    // The first live row (fragment 1) and the last (fragment 4) trade ids.
    let lying = replace_btree(&dataset, |ids, _| {
        let last = ids.len() - 1;
        ids.swap(0, last);
    })
    .await;
    let files = verify_dataset(&lying, VerifyOptions::default(), None)
        .await
        .unwrap();
    assert!(files.is_clean(), "every file is intact: {files:?}");
    let report = deep_report(&lying).await;
    assert_eq!(
        btree_problems(&report, &lying),
        [1, 4]
            .iter()
            .map(|f| format!(
                "index 'id_btree' (btree) does not match fragment {f}: it holds {} entries for the fragment, as the data implies, but not the same ones",
                live_in_fragment(*f)
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(report.index_data.unwrap().segments_checked, 4);
}

#[tokio::test]
async fn missing_and_phantom_rows_are_counted_per_fragment() {
    let (dataset, _dir) = indexed_table().await;
    // Drop the first live row (fragment 1); add an entry for a row fragment
    // 4 does not have; point one entry at a deleted row of fragment 2 (id
    // 256: ignored, as queries ignore it).
    let lying = replace_btree(&dataset, |ids, addresses| {
        ids.remove(0);
        addresses.remove(0);
        ids.push(5_000);
        addresses.push((4u64 << 32) | 999_999);
        ids.push(6_000);
        addresses.push((2u64 << 32) | 6);
    })
    .await;
    let report = deep_report(&lying).await;
    let line = |f: i64, held: usize| {
        format!(
            "index 'id_btree' (btree) does not match fragment {f}: it holds {held} entries for the fragment, the data implies {}",
            live_in_fragment(f)
        )
    };
    assert_eq!(
        btree_problems(&report, &lying),
        vec![
            line(1, live_in_fragment(1) - 1),
            line(4, live_in_fragment(4) + 1)
        ]
    );
}
