//! Round trips, scan order, projection/filter/limit, take, deletes, schema checks.

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema};
use refract_core::{row_address, Error};
use refract_ledger::flags::FLAG_DELETION_FILES;
use refract_table::{Operation, RewriteGroup, ROW_ADDRESS_COLUMN};
use rstest::rstest;
use std::sync::Arc;

use crate::common::*;

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn all_column_types_round_trip(#[case] backend: Backend) {
    let location = location(backend);
    let dataset = create_with_rows(&location.uri, 100, 1_000).await;
    let reopened = refract_table::Dataset::open(&location.uri).await.unwrap();
    assert_eq!(reopened.version(), 2);
    assert_eq!(reopened.schema(), schema());
    let scanned = reopened.scan().try_into_batch().await.unwrap();
    assert_eq!(scanned, rows(0, 100));
    assert_eq!(dataset.count_rows(None).await.unwrap(), 100);
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn scan_order_across_many_appends(#[case] backend: Backend) {
    let location = location(backend);
    let mut dataset = create(&location.uri).await;
    for append in 0..8i64 {
        dataset
            .append(vec![rows(append * 7, 4), rows(append * 7 + 4, 3)], &opts(3))
            .await
            .unwrap();
    }
    assert_eq!(scan_ids(&dataset).await, (0..56).collect::<Vec<_>>());
    // 7 rows per append cut at 3 rows per file: 3 + 3 + 1.
    assert_eq!(dataset.fragments().len(), 24);
    assert_eq!(fragment_ids(&dataset), (1..=24).collect::<Vec<_>>());
    let rows_per_fragment: Vec<u64> = dataset
        .fragments()
        .iter()
        .take(3)
        .map(|fragment| fragment.physical_rows)
        .collect();
    assert_eq!(rows_per_fragment, vec![3, 3, 1]);
}

#[tokio::test]
async fn projection_filter_limit_and_row_addresses() {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 40, 10).await;
    let batch = dataset
        .scan()
        .project(&["name", "id"])
        .filter("id % 4 = 1")
        .unwrap()
        .with_row_address()
        .limit(5)
        .batch_size(3)
        .try_into_batch()
        .await
        .unwrap();
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, vec!["name", "id", ROW_ADDRESS_COLUMN]);
    assert_eq!(ids_of(std::slice::from_ref(&batch)), vec![1, 5, 9, 13, 17]);
    let addresses = batch
        .column(2)
        .as_primitive::<UInt64Type>()
        .values()
        .to_vec();
    assert_eq!(
        addresses,
        vec![
            row_address(1, 1),
            row_address(1, 5),
            row_address(1, 9),
            row_address(2, 3),
            row_address(2, 7)
        ]
    );
    assert_eq!(dataset.count_rows(Some("id >= 30")).await.unwrap(), 10);
    let only_fragment_3 = dataset.scan().fragments(&[3]).project(&["id"]);
    assert_eq!(
        ids_of(&[only_fragment_3.try_into_batch().await.unwrap()]),
        (20..30).collect::<Vec<_>>()
    );
    let bad = dataset.scan().project(&["nope"]).try_into_batch().await;
    assert!(matches!(bad, Err(Error::InvalidInput { .. })));
}

#[tokio::test]
async fn take_keeps_caller_order_and_duplicates() {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 30, 10).await;
    let addresses = [
        row_address(3, 9),
        row_address(1, 0),
        row_address(2, 4),
        row_address(1, 0),
        row_address(3, 0),
    ];
    let batch = dataset
        .take(&addresses, Some(&["id", "name"]))
        .await
        .unwrap();
    assert_eq!(ids_of(std::slice::from_ref(&batch)), vec![29, 0, 14, 0, 20]);
    assert_eq!(batch.num_columns(), 2);
    let full = dataset.take(&addresses[..1], None).await.unwrap();
    assert_eq!(full, rows(29, 1));
    for missing in [row_address(9, 0), row_address(1, 10)] {
        let err = dataset.take(&[missing], None).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
    }
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test]
async fn delete_then_scan_take_count(#[case] backend: Backend) {
    let location = location(backend);
    let mut dataset = create_with_rows(&location.uri, 100, 25).await;
    let result = dataset.delete("id % 10 = 3").await.unwrap();
    assert_eq!(result.rows_deleted, 10);
    assert_eq!(dataset.version(), 3);
    assert_ne!(dataset.manifest().reader_flags & FLAG_DELETION_FILES, 0);
    let expected: Vec<i64> = (0..100).filter(|i| i % 10 != 3).collect();
    assert_eq!(scan_ids(&dataset).await, expected);
    assert_eq!(dataset.count_rows(None).await.unwrap(), 90);
    assert_eq!(dataset.count_rows(Some("id < 50")).await.unwrap(), 45);
    let err = dataset.take(&[row_address(1, 3)], None).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
    let live = dataset
        .take(&[row_address(2, 4), row_address(1, 4)], Some(&["id"]))
        .await
        .unwrap();
    assert_eq!(ids_of(&[live]), vec![29, 4]);

    // A second delete unions with the existing vector.
    let again = dataset.delete("id % 10 = 3 OR id = 4").await.unwrap();
    assert_eq!(again.rows_deleted, 1);
    assert_eq!(dataset.fragments()[0].num_deleted_rows(), 4);
    let reopened = refract_table::Dataset::open(&location.uri).await.unwrap();
    assert_eq!(reopened.count_rows(None).await.unwrap(), 89);
    // Nothing matches: no new version.
    let none = dataset.delete("id > 1000").await.unwrap();
    assert_eq!(none.rows_deleted, 0);
    assert_eq!(dataset.latest_version().await.unwrap(), 4);
}

#[tokio::test]
async fn deleting_a_whole_fragment_removes_it() {
    let location = location(Backend::Memory);
    let mut dataset = create_with_rows(&location.uri, 100, 25).await;
    dataset.delete("id % 25 = 0").await.unwrap();
    let result = dataset.delete("id >= 25 AND id < 50").await.unwrap();
    assert_eq!(result.rows_deleted, 24);
    assert_eq!(fragment_ids(&dataset), vec![1, 3, 4]);
    assert!(dataset
        .fragments()
        .iter()
        .all(|f| f.deletion_file.is_some()));
    assert_eq!(dataset.count_rows(None).await.unwrap(), 72);
    let expected: Vec<i64> = (0..100)
        .filter(|i| i % 25 != 0 && !(25..50).contains(i))
        .collect();
    assert_eq!(scan_ids(&dataset).await, expected);
    assert_eq!(dataset.manifest().max_fragment_id, Some(4));
}

#[rstest]
#[case::wrong_type(Schema::new(vec![Field::new("id", DataType::Int32, false)]))]
#[case::wrong_name(Schema::new(vec![
    Field::new("key", DataType::Int64, false),
    Field::new("small", DataType::Int32, true),
    Field::new("name", DataType::Utf8, true),
    Field::new("vector", DataType::Utf8, true),
]))]
#[tokio::test]
async fn schema_mismatch_on_append_changes_nothing(#[case] wrong: Schema) {
    let location = location(Backend::Memory);
    let mut dataset = create_with_rows(&location.uri, 10, 100).await;
    let wrong = Arc::new(wrong);
    let columns = wrong
        .fields()
        .iter()
        .map(|field| arrow_array::new_null_array(field.data_type(), 2))
        .collect();
    let nullable = Arc::new(Schema::new(
        wrong
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(nullable, columns).unwrap();
    let err = dataset
        .append(vec![rows(10, 5), batch], &opts(100))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(dataset.version(), 2);
    assert_eq!(dataset.latest_version().await.unwrap(), 2);
    assert_eq!(scan_ids(&dataset).await, (0..10).collect::<Vec<_>>());
    let orphans = dataset
        .list_orphan_files(std::time::Duration::ZERO)
        .await
        .unwrap();
    assert!(orphans.is_empty(), "nothing may be written: {orphans:?}");
}

#[tokio::test]
async fn nulls_in_a_non_nullable_column_are_refused() {
    let location = location(Backend::Memory);
    let mut dataset = create(&location.uri).await;
    let mut columns = rows(0, 3).columns().to_vec();
    columns[0] = Arc::new(arrow_array::Int64Array::from(vec![Some(1), None, Some(3)]));
    let fields: Vec<Field> = schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let err = dataset.append(vec![batch], &opts(100)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(dataset.latest_version().await.unwrap(), 1);
}

#[tokio::test]
async fn rewrite_of_a_middle_run_keeps_scan_order() {
    let location = location(Backend::Memory);
    let dataset = create_with_rows(&location.uri, 50, 10).await;
    assert_eq!(fragment_ids(&dataset), vec![1, 2, 3, 4, 5]);
    let middle = dataset
        .scan()
        .fragments(&[2, 3, 4])
        .try_into_batch()
        .await
        .unwrap();
    let new_fragments = dataset
        .write_fragments(futures::stream::iter(vec![Ok(middle)]), &opts(15))
        .await
        .unwrap();
    assert_eq!(new_fragments.len(), 2);
    let rewritten = dataset
        .commit(Operation::Rewrite {
            groups: vec![RewriteGroup {
                old_fragment_ids: vec![2, 3, 4],
                new_fragments,
                surviving_old_addresses: None,
            }],
            new_indices: vec![],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap();
    // Fragment 5 keeps its place, relabelled 8: Lance lists fragments by id.
    assert_eq!(fragment_ids(&rewritten), vec![1, 6, 7, 8]);
    assert_eq!(rewritten.manifest().max_fragment_id, Some(8));
    assert_eq!(scan_ids(&rewritten).await, (0..50).collect::<Vec<_>>());
    // Positions follow the list; a clone shares the lookup.
    let positions: Vec<_> = [1, 8, 6, 7, 2]
        .iter()
        .map(|id| rewritten.clone().fragment_position(*id))
        .collect();
    assert_eq!(positions, vec![Some(0), Some(3), Some(1), Some(2), None]);
    // Selected fragments scan in list order, each once, whatever the order
    // and repeats of the ids asked for.
    let selected = rewritten
        .scan()
        .fragments(&[8, 6, 8])
        .project(&["id"])
        .try_into_batch()
        .await
        .unwrap();
    let mut expected: Vec<i64> = (10..25).collect();
    expected.extend(40..50);
    assert_eq!(ids_of(&[selected]), expected);
    let gone = rewritten.scan().fragments(&[6, 5]).try_into_batch().await;
    assert!(matches!(gone, Err(Error::NotFound { .. })), "{gone:?}");

    let not_contiguous = rewritten
        .commit(Operation::Rewrite {
            groups: vec![RewriteGroup {
                old_fragment_ids: vec![1, 7],
                new_fragments: vec![],
                surviving_old_addresses: None,
            }],
            new_indices: vec![],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap_err();
    assert!(
        matches!(not_contiguous, Error::InvalidInput { .. }),
        "{not_contiguous}"
    );
}
