//! Ambiguous commits: the manifest put lands but reports an error, and the
//! read-back that would recognise it fails too, so the caller sees an error for a
//! commit that happened. Retrying the same transaction — right away, or after
//! other writers committed — must return that version, never apply it twice.

use arrow_array::RecordBatch;
use refract_table::io::{CallKind, FaultMode};
use refract_table::testing::{sample_rows, snapshot, FaultRig, RigBackend};
use refract_table::{Dataset, IndexMetadata, Operation, RewriteGroup, Transaction, WriteOptions};
use rstest::rstest;

fn per_file(rows: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows,
        ..WriteOptions::default()
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Append,
    Rewrite,
    CreateIndex,
    Restore,
}

/// The operation of `kind`, computed against `dataset` (writes its files first).
async fn operation(kind: Kind, dataset: &Dataset) -> Operation {
    match kind {
        Kind::Append => Operation::Append {
            fragments: write(dataset, sample_rows(500, 7)).await,
        },
        Kind::Rewrite => {
            let batch = dataset
                .scan()
                .fragments(&[1, 2])
                .try_into_batch()
                .await
                .unwrap();
            Operation::Rewrite {
                groups: vec![RewriteGroup {
                    old_fragment_ids: vec![1, 2],
                    new_fragments: write(dataset, batch).await,
                    surviving_old_addresses: None,
                }],
                new_indices: vec![],
                removed_index_uuids: vec![],
            }
        }
        Kind::CreateIndex => Operation::CreateIndex {
            new_indices: vec![IndexMetadata {
                uuid: uuid::Uuid::new_v4(),
                name: "id_idx".to_string(),
                fields: vec!["id".to_string()],
                fragment_bitmap: Some([1u32, 2].into_iter().collect()),
                index_type: "btree".to_string(),
                details: vec![],
                index_version: 1,
                dataset_version: dataset.version(),
                files: Vec::new(),
                lance: Default::default(),
            }],
            removed_index_uuids: vec![],
        },
        Kind::Restore => Operation::Restore { version: 2 },
    }
}

/// Whole-object reads a commit of `kind` makes before its manifest put (a
/// restore reads the restored manifest), so the next one is the read-back.
fn gets_before_put(kind: Kind) -> u64 {
    match kind {
        Kind::Restore => 1,
        Kind::Append | Kind::Rewrite | Kind::CreateIndex => 0,
    }
}

async fn write(dataset: &Dataset, batch: RecordBatch) -> Vec<refract_table::Fragment> {
    dataset
        .write_fragments(futures::stream::iter(vec![Ok(batch)]), &per_file(100))
        .await
        .unwrap()
}

/// 40 rows in fragments 1 and 2, then a delete (version 3).
async fn setup(rig: &FaultRig) {
    let mut dataset = rig.create_sample().await.unwrap();
    dataset
        .append(vec![sample_rows(0, 40)], &per_file(20))
        .await
        .unwrap();
    dataset.delete("id % 4 = 1").await.unwrap();
}

/// Commits `kind` on a clean rig and returns the rows after it.
async fn expected_after(kind: Kind, backend: RigBackend) -> RecordBatch {
    let rig = FaultRig::new(backend).unwrap();
    setup(&rig).await;
    let dataset = rig.open_clean().await.unwrap();
    let committed = dataset
        .commit(operation(kind, &dataset).await)
        .await
        .unwrap();
    snapshot(&committed).await.unwrap()
}

#[rstest]
#[tokio::test]
async fn a_commit_reported_as_failed_is_never_applied_twice(
    #[values(Kind::Append, Kind::Rewrite, Kind::CreateIndex, Kind::Restore)] kind: Kind,
    #[values(RigBackend::Memory, RigBackend::Local)] backend: RigBackend,
    #[values(false, true)] others_commit_in_between: bool,
) {
    let after = expected_after(kind, backend).await;
    let rig = FaultRig::new(backend).unwrap();
    setup(&rig).await;
    let dataset = rig.open_faulty().await.unwrap();
    let txn = Transaction::new(dataset.version(), operation(kind, &dataset).await);
    rig.fault.reset();
    // The put lands but errors; the read-back of that version fails.
    rig.fault
        .fail_nth(CallKind::ConditionalPut, 0, FaultMode::Ambiguous);
    rig.fault
        .fail_nth(CallKind::Get, gets_before_put(kind), FaultMode::Clean);
    let err = dataset
        .commit_transaction(txn.clone(), None)
        .await
        .unwrap_err();
    assert_eq!(rig.fault.fired().len(), 2, "{err}");
    let committed = rig.open_clean().await.unwrap();
    assert_eq!(committed.version(), 4, "the put landed");
    assert_eq!(snapshot(&committed).await.unwrap(), after);

    let mut expected_rows = after.num_rows();
    if others_commit_in_between {
        let mut other = rig.open_clean().await.unwrap();
        other
            .append(vec![sample_rows(900, 3)], &per_file(100))
            .await
            .unwrap();
        expected_rows += 3;
    }
    let latest_before_retry = rig.open_clean().await.unwrap().version();
    let retried = dataset.commit_transaction(txn, None).await.unwrap();
    assert_eq!(
        retried.version(),
        4,
        "the retry returns the ambiguous commit"
    );
    let latest = rig.open_clean().await.unwrap();
    assert_eq!(
        latest.version(),
        latest_before_retry,
        "nothing new committed"
    );
    let rows = snapshot(&latest).await.unwrap();
    assert_eq!(rows.num_rows(), expected_rows);
    assert_eq!(rows.slice(0, after.num_rows()), after);
}

#[tokio::test]
async fn a_commit_whose_put_never_landed_is_applied_by_the_retry() {
    let rig = FaultRig::memory();
    setup(&rig).await;
    let dataset = rig.open_faulty().await.unwrap();
    let txn = Transaction::new(dataset.version(), operation(Kind::Append, &dataset).await);
    rig.fault.reset();
    rig.fault
        .fail_nth(CallKind::ConditionalPut, 0, FaultMode::Clean);
    dataset
        .commit_transaction(txn.clone(), None)
        .await
        .unwrap_err();
    assert_eq!(rig.open_clean().await.unwrap().version(), 3);
    let retried = dataset.commit_transaction(txn, None).await.unwrap();
    assert_eq!(retried.version(), 4);
    let ids = snapshot(&retried).await.unwrap();
    assert_eq!(ids.num_rows(), 30 + 7);
}
