//! `Operation::Partition` in the engine: proto round trip, positional splice,
//! rebase rules; and the FRI flag rules at publication.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use refract_core::Error;
use refract_table::transaction::{Operation, Transaction};
use refract_table::{Dataset, Fragment, OpenOptions, Session, WriteOptions};
use rstest::rstest;
use uuid::Uuid;

fn batch(start: i64, n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from_iter_values(start..start + n))],
    )
    .unwrap()
}

/// Fragments 1..=4 of 10 rows.
async fn table() -> Dataset {
    let uri = format!("memory://partition-op-{}", Uuid::new_v4());
    let schema = batch(0, 1).schema();
    let mut dataset = Dataset::create(&uri, schema, OpenOptions::default())
        .await
        .unwrap();
    let options = WriteOptions {
        max_rows_per_file: 10,
        ..WriteOptions::default()
    };
    dataset.append(vec![batch(0, 40)], &options).await.unwrap();
    dataset
}

async fn destinations(dataset: &Dataset, rows: &[i64]) -> Vec<Fragment> {
    let mut fragments = Vec::new();
    let mut start = 1_000;
    for n in rows {
        let written = dataset
            .write_fragments(
                futures::stream::iter([Ok(batch(start, *n))]),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
        fragments.extend(written);
        start += n;
    }
    fragments
}

fn partition(sources: Vec<u64>, destinations: Vec<Fragment>, map_id: Option<Uuid>) -> Operation {
    Operation::Partition {
        source_fragment_ids: sources,
        destinations,
        map_size_bytes: if map_id.is_some() { 123 } else { 0 },
        map_id,
        map_checksum: None,
        relabelled: Vec::new(),
    }
}

#[rstest]
#[case::with_map(Some(Uuid::from_u128(7)))]
#[case::without_map(None)]
#[tokio::test]
async fn partition_replaces_the_run_in_place_and_round_trips(#[case] map_id: Option<Uuid>) {
    let dataset = table().await;
    let dests = destinations(&dataset, &[5, 7, 8]).await;
    let committed = dataset
        .commit(partition(vec![2, 3], dests, map_id))
        .await
        .unwrap();
    let ids: Vec<u64> = committed.fragments().iter().map(|f| f.id).collect();
    // 4 follows the destinations under a fresh id, so ids stay sorted.
    assert_eq!(ids, vec![1, 5, 6, 7, 8]);
    // Decode from storage with a fresh session.
    let reopened = Dataset::open_with(
        committed.uri(),
        OpenOptions {
            session: Some(Arc::new(Session::new(1 << 20))),
            store: Some(committed.store().clone()),
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap();
    let txn = reopened.manifest().transaction.clone().unwrap();
    let Operation::Partition {
        source_fragment_ids,
        destinations,
        map_id: stored,
        map_size_bytes,
        relabelled,
        ..
    } = txn.operation
    else {
        panic!("expected a Partition");
    };
    assert_eq!(source_fragment_ids, vec![2, 3]);
    assert_eq!(relabelled.len(), 1);
    assert_eq!(relabelled[0].old_fragment_ids, vec![4]);
    assert_eq!(relabelled[0].new_fragments[0].id, 8);
    assert_eq!(
        destinations.iter().map(|f| f.id).collect::<Vec<_>>(),
        vec![5, 6, 7]
    );
    assert_eq!(stored, map_id);
    assert_eq!(map_size_bytes, if map_id.is_some() { 123 } else { 0 });
    assert_eq!(
        reopened.versions().await.unwrap().last().unwrap().operation,
        "Partition"
    );
}

#[tokio::test]
async fn partition_of_a_non_contiguous_run_is_invalid_input() {
    let dataset = table().await;
    let dests = destinations(&dataset, &[5]).await;
    let err = dataset
        .commit(partition(vec![1, 3], dests, None))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

#[derive(Debug, Clone, Copy)]
enum Theirs {
    Append,
    DeleteSource,
    DeleteOther,
    RewriteSource,
    PartitionOther,
}

#[rstest]
#[case::append(Theirs::Append, true)]
#[case::delete_of_a_source(Theirs::DeleteSource, false)]
#[case::delete_elsewhere(Theirs::DeleteOther, true)]
#[case::rewrite_of_a_source(Theirs::RewriteSource, false)]
#[case::partition_elsewhere(Theirs::PartitionOther, true)]
#[tokio::test]
async fn partition_rebase_rules(#[case] theirs: Theirs, #[case] rebases: bool) {
    let dataset = table().await;
    let ours = partition(vec![2, 3], destinations(&dataset, &[20]).await, None);
    let mut other = dataset.clone();
    match theirs {
        Theirs::Append => other
            .append(vec![batch(100, 3)], &WriteOptions::default())
            .await
            .unwrap(),
        Theirs::DeleteSource => {
            other.delete("id = 15").await.unwrap();
        }
        Theirs::DeleteOther => {
            other.delete("id = 35").await.unwrap();
        }
        Theirs::RewriteSource | Theirs::PartitionOther => {
            let sources = if matches!(theirs, Theirs::RewriteSource) {
                vec![3, 4]
            } else {
                vec![4]
            };
            let dests = destinations(&other, &[sources.len() as i64 * 10]).await;
            other.commit(partition(sources, dests, None)).await.unwrap();
        }
    }
    let result = dataset
        .commit_transaction(Transaction::new(dataset.version(), ours), None)
        .await;
    match result {
        Ok(committed) => {
            assert!(rebases, "{theirs:?} should conflict");
            assert_eq!(committed.version(), dataset.version() + 2);
        }
        Err(err) => {
            assert!(!rebases, "{theirs:?} should rebase: {err}");
            assert!(err.is_retryable_conflict(), "{err}");
        }
    }
}
