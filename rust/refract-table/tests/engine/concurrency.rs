//! Concurrent commits: rebase, merge, conflicts, ambiguous puts.

use std::sync::Arc;

use object_store::memory::InMemory;
use refract_table::io::{CallKind, DatasetStore, FaultInjectingStore, FaultMode};
use refract_table::{Dataset, OpenOptions, Operation, RewriteGroup, Transaction};
use rstest::rstest;

use crate::common::*;

#[rstest]
#[case::a_first(true)]
#[case::b_first(false)]
#[tokio::test]
async fn concurrent_appenders_both_land(#[case] a_first: bool) {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 5, 10).await;
    let mut a = Dataset::open(&location.uri).await.unwrap();
    let mut b = Dataset::open(&location.uri).await.unwrap();
    let (a_rows, b_rows) = (rows(100, 3), rows(200, 4));
    if a_first {
        a.append(vec![a_rows], &opts(10)).await.unwrap();
        b.append(vec![b_rows], &opts(10)).await.unwrap();
    } else {
        b.append(vec![b_rows], &opts(10)).await.unwrap();
        a.append(vec![a_rows], &opts(10)).await.unwrap();
    }
    let latest = base.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), 4);
    let mut expected: Vec<i64> = (0..5).collect();
    let (first, second): (Vec<i64>, Vec<i64>) = if a_first {
        ((100..103).collect(), (200..204).collect())
    } else {
        ((200..204).collect(), (100..103).collect())
    };
    expected.extend(first);
    expected.extend(second);
    assert_eq!(scan_ids(&latest).await, expected);
    assert_eq!(fragment_ids(&latest), vec![1, 2, 3]);
}

#[rstest]
#[case::memory(Backend::Memory)]
#[case::local(Backend::Local)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_in_parallel_all_land(#[case] backend: Backend) {
    let location = location(backend);
    let base = create(&location.uri).await;
    let mut tasks = Vec::new();
    for writer in 0..4i64 {
        let mut handle = base.clone();
        tasks.push(tokio::spawn(async move {
            handle
                .append(vec![rows(writer * 1000, 10)], &opts(100))
                .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let latest = base.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), 5);
    let mut ids = scan_ids(&latest).await;
    ids.sort_unstable();
    let mut expected: Vec<i64> = (0..4)
        .flat_map(|writer| writer * 1000..writer * 1000 + 10)
        .collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
}

#[rstest]
#[case::overlapping("id % 2 = 0", "id % 3 = 0")]
#[case::together_empty_a_fragment("id < 15", "id >= 5 AND id < 20")]
#[tokio::test]
async fn concurrent_deletes_merge(#[case] first: &str, #[case] second: &str) {
    let location = location(Backend::Memory);
    create_with_rows(&location.uri, 40, 10).await;
    let mut a = Dataset::open(&location.uri).await.unwrap();
    let mut b = Dataset::open(&location.uri).await.unwrap();
    a.delete(first).await.unwrap();
    b.delete(second).await.unwrap();
    assert_eq!(b.version(), 4);
    let reference_location = crate::common::location(Backend::Memory);
    let mut reference = create_with_rows(&reference_location.uri, 40, 10).await;
    reference
        .delete(&format!("({first}) OR ({second})"))
        .await
        .unwrap();
    assert_eq!(scan_ids(&b).await, scan_ids(&reference).await);
    assert_eq!(fragment_ids(&b), fragment_ids(&reference));
    assert_eq!(
        b.count_rows(None).await.unwrap(),
        reference.count_rows(None).await.unwrap()
    );
}

fn rewrite(old: Vec<u64>, new_fragments: Vec<refract_table::Fragment>) -> Operation {
    Operation::Rewrite {
        groups: vec![RewriteGroup {
            old_fragment_ids: old,
            new_fragments,
            surviving_old_addresses: None,
        }],
        new_indices: vec![],
        removed_index_uuids: vec![],
    }
}

async fn rewrite_of(dataset: &Dataset, old: &[u64]) -> Operation {
    let batch = dataset
        .scan()
        .fragments(old)
        .try_into_batch()
        .await
        .unwrap();
    let fragments = dataset
        .write_fragments(futures::stream::iter(vec![Ok(batch)]), &opts(1_000))
        .await
        .unwrap();
    rewrite(old.to_vec(), fragments)
}

#[tokio::test]
async fn delete_of_other_fragments_rebases_over_a_rewrite() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 30, 10).await;
    let mut deleter = base.clone();
    base.commit(rewrite_of(&base, &[1, 2]).await).await.unwrap();
    deleter.delete("id = 25").await.unwrap();
    let expected: Vec<i64> = (0..30).filter(|i| *i != 25).collect();
    assert_eq!(scan_ids(&deleter).await, expected);
}

#[tokio::test]
async fn rewrite_conflicts() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let first = rewrite_of(&base, &[3, 4]).await;
    let overlapping = rewrite_of(&base, &[2, 3]).await;
    let disjoint = rewrite_of(&base, &[1, 2]).await;
    base.commit(first).await.unwrap();
    let err = base.commit(overlapping).await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    let after = base.commit(disjoint).await.unwrap();
    // Fragment 5 (the first rewrite's output) is relabelled 7, after the new 6.
    assert_eq!(fragment_ids(&after), vec![6, 7]);
    assert_eq!(scan_ids(&after).await, (0..40).collect::<Vec<_>>());

    // Sources a rewrite relabelled are gone under their old ids: a raw
    // Rewrite naming them is a retryable conflict (compaction's commit
    // renames them; see refract-optimize's `relabelled`).
    let location = crate::common::location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let first = rewrite_of(&base, &[1, 2]).await;
    let later = rewrite_of(&base, &[3, 4]).await;
    let after = base.commit(first).await.unwrap();
    assert_eq!(fragment_ids(&after), vec![5, 6, 7]);
    let err = base.commit(later).await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");

    // A rewrite racing a delete of its sources: a retryable conflict for now.
    let location = crate::common::location(Backend::Memory);
    let base = create_with_rows(&location.uri, 20, 10).await;
    let pending = rewrite_of(&base, &[1, 2]).await;
    let mut deleter = base.clone();
    deleter.delete("id = 1").await.unwrap();
    let err = base.commit(pending).await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
}

#[tokio::test]
async fn restore_with_an_intervening_commit_conflicts() {
    let location = location(Backend::Memory);
    let mut dataset = create_with_rows(&location.uri, 10, 10).await;
    let old = dataset.checkout_version(1).await.unwrap();
    let stale = Transaction::new(2, Operation::Restore { version: 1 });
    dataset.append(vec![rows(10, 1)], &opts(10)).await.unwrap();
    let err = old.commit_transaction(stale, None).await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
}

/// Fails the next call of `kind` (the store counts calls since construction).
fn arm(fault: &FaultInjectingStore, kind: CallKind, mode: FaultMode) {
    fault.fail_nth(kind, fault.calls(kind), mode);
}

async fn fault_dataset() -> (Arc<FaultInjectingStore>, Dataset) {
    let fault = Arc::new(FaultInjectingStore::new(Arc::new(InMemory::new())));
    let uri = format!("memory://fault-{}", uuid::Uuid::new_v4());
    let store = DatasetStore::from_object_store(fault.clone(), &uri);
    let dataset = Dataset::create(
        &uri,
        schema(),
        OpenOptions {
            store: Some(store),
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap();
    (fault, dataset)
}

#[tokio::test]
async fn ambiguous_manifest_put_is_detected_as_our_commit() {
    let (fault, mut dataset) = fault_dataset().await;
    arm(&fault, CallKind::ConditionalPut, FaultMode::Ambiguous);
    dataset.append(vec![rows(0, 5)], &opts(10)).await.unwrap();
    assert_eq!(fault.fired().len(), 1);
    assert_eq!(dataset.version(), 2);
    assert_eq!(dataset.latest_version().await.unwrap(), 2);
    assert_eq!(scan_ids(&dataset).await, (0..5).collect::<Vec<_>>());
}

#[tokio::test]
async fn retrying_an_ambiguously_committed_transaction_never_commits_twice() {
    let (fault, dataset) = fault_dataset().await;
    let fragments = dataset
        .write_fragments(futures::stream::iter(vec![Ok(rows(0, 5))]), &opts(10))
        .await
        .unwrap();
    let txn = Transaction::new(1, Operation::Append { fragments });
    // The put lands but reports an error, and reading it back fails too.
    arm(&fault, CallKind::ConditionalPut, FaultMode::Ambiguous);
    arm(&fault, CallKind::Get, FaultMode::Clean);
    assert!(dataset.commit_transaction(txn.clone(), None).await.is_err());
    assert_eq!(fault.fired().len(), 2);
    let retried = dataset.commit_transaction(txn, None).await.unwrap();
    assert_eq!(retried.version(), 2);
    assert_eq!(retried.latest_version().await.unwrap(), 2);
    assert_eq!(scan_ids(&retried).await, (0..5).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_cleanly_failed_commit_leaves_the_previous_version() {
    let (fault, mut dataset) = fault_dataset().await;
    dataset.append(vec![rows(0, 5)], &opts(10)).await.unwrap();
    arm(&fault, CallKind::ConditionalPut, FaultMode::Clean);
    let err = dataset.append(vec![rows(5, 5)], &opts(10)).await;
    assert!(err.is_err());
    assert_eq!(fault.fired().len(), 1);
    assert_eq!(dataset.version(), 2);
    let latest = dataset.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), 2);
    assert_eq!(scan_ids(&latest).await, (0..5).collect::<Vec<_>>());
    let orphans = latest
        .list_orphan_files(std::time::Duration::ZERO)
        .await
        .unwrap();
    // The data file and the transaction file of the commit that failed.
    assert_eq!(orphans.len(), 2, "{orphans:?}");
    assert!(orphans[0].as_str().starts_with("_transactions/"));
    assert!(orphans[1].as_str().starts_with("data/"));
}

fn index_over(fragments: &[u32]) -> refract_table::IndexMetadata {
    refract_table::IndexMetadata {
        uuid: uuid::Uuid::new_v4(),
        name: "id_idx".to_string(),
        fields: vec!["id".to_string()],
        fragment_bitmap: Some(fragments.iter().copied().collect()),
        index_type: "btree".to_string(),
        details: vec![1, 2, 3],
        index_version: 1,
        dataset_version: 2,
        files: Vec::new(),
        lance: Default::default(),
    }
}

#[tokio::test]
async fn create_index_conflicts_only_with_rewrites_of_covered_fragments() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 40, 10).await;
    let covering = Operation::CreateIndex {
        new_indices: vec![index_over(&[1, 2])],
        removed_index_uuids: vec![],
    };
    // Fragment 1 precedes the rewritten run (3 and 4 are relabelled by it).
    let elsewhere_index = index_over(&[1]);
    let elsewhere = Operation::CreateIndex {
        new_indices: vec![elsewhere_index.clone()],
        removed_index_uuids: vec![],
    };
    base.commit(rewrite_of(&base, &[2]).await).await.unwrap();
    let err = base.commit(covering).await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    let indexed = base.commit(elsewhere).await.unwrap();
    assert_eq!(indexed.manifest().indices, vec![elsewhere_index]);
    assert!(!indexed.manifest().indices[0].is_system());
}

/// Records what the hook saw and adds an index entry over the new fragments.
struct AddIndexHook {
    seen: std::sync::Mutex<Vec<Vec<u64>>>,
}

#[async_trait::async_trait]
impl refract_table::CommitHook for AddIndexHook {
    async fn before_publish(
        &self,
        dataset: &Dataset,
        candidate: &mut refract_table::Manifest,
        assigned: &[Vec<u64>],
    ) -> refract_core::Result<()> {
        assert_eq!(candidate.version, dataset.version() + 1);
        self.seen.lock().unwrap().extend(assigned.iter().cloned());
        let ids: Vec<u32> = assigned.iter().flatten().map(|id| *id as u32).collect();
        candidate.indices.push(index_over(&ids));
        Ok(())
    }
}

#[tokio::test]
async fn commit_hook_sees_assigned_ids_and_may_add_indices() {
    let location = location(Backend::Memory);
    let base = create_with_rows(&location.uri, 30, 10).await;
    let mut other = base.clone();
    other.append(vec![rows(30, 5)], &opts(10)).await.unwrap();
    let hook = AddIndexHook {
        seen: std::sync::Mutex::new(Vec::new()),
    };
    let rewrite = rewrite_of(&base, &[1, 2]).await;
    let committed = base
        .commit_transaction(Transaction::new(base.version(), rewrite), Some(&hook))
        .await
        .unwrap();
    // Rebased over the append (fragment 4), so the rewrite output is fragment
    // 5; 3 and 4 follow it relabelled (one group) to keep ids sorted.
    assert_eq!(*hook.seen.lock().unwrap(), vec![vec![5], vec![6, 7]]);
    assert_eq!(fragment_ids(&committed), vec![5, 6, 7]);
    let bitmap = committed.manifest().indices[0].fragment_bitmap.clone();
    assert_eq!(bitmap.unwrap().iter().collect::<Vec<_>>(), vec![5, 6, 7]);
    let reopened = Dataset::open(&location.uri).await.unwrap();
    assert_eq!(reopened.manifest().indices, committed.manifest().indices);
}

/// Strips the inline transaction from the stored manifest of `version`, as
/// Lance writers before inline transactions stored it (the transaction then
/// lives only in `_transactions/`).
async fn strip_inline_transaction(dataset: &Dataset, version: u64) -> String {
    let path = refract_table::io::manifest_path(version);
    let bytes = dataset.store().get(&path).await.unwrap();
    let mut parts = refract_table::testing::open_manifest(&bytes).unwrap();
    assert!(parts.transaction.take().is_some());
    dataset.store().put(&path, parts.seal()).await.unwrap();
    format!("_transactions/{}", parts.manifest.transaction_file)
}

#[tokio::test]
async fn a_commit_rebases_over_a_version_whose_transaction_is_only_in_its_file() {
    let location = location(Backend::Memory);
    create_with_rows(&location.uri, 40, 10).await;
    let mut ours = Dataset::open(&location.uri).await.unwrap();
    let mut theirs = Dataset::open(&location.uri).await.unwrap();
    theirs.delete("id < 5").await.unwrap();
    strip_inline_transaction(&theirs, theirs.version()).await;

    ours.delete("id >= 35").await.unwrap();
    assert_eq!(ours.version(), 4);
    assert_eq!(scan_ids(&ours).await, (5..35).collect::<Vec<_>>());
    let operations: Vec<String> = ours
        .versions()
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.operation)
        .collect();
    assert_eq!(operations, ["Create", "Append", "Delete", "Delete"]);
}

#[rstest]
#[case::missing(None)]
#[case::garbage(Some(&b"\x0a\xffnot a transaction"[..]))]
#[tokio::test]
async fn a_bad_transaction_file_fails_the_commit_and_changes_nothing(
    #[case] replacement: Option<&'static [u8]>,
) {
    let location = location(Backend::Memory);
    create_with_rows(&location.uri, 40, 10).await;
    let mut ours = Dataset::open(&location.uri).await.unwrap();
    let mut theirs = Dataset::open(&location.uri).await.unwrap();
    theirs.delete("id < 5").await.unwrap();
    let txn = strip_inline_transaction(&theirs, theirs.version()).await;
    let txn_path = refract_table::io::RelativePath::parse(&txn).unwrap();
    match replacement {
        None => theirs.store().delete(&txn_path).await.unwrap(),
        Some(bytes) => theirs
            .store()
            .put(&txn_path, bytes::Bytes::from_static(bytes))
            .await
            .unwrap(),
    }

    let err = ours.delete("id >= 35").await.unwrap_err();
    match replacement {
        None => assert!(
            matches!(err, refract_core::Error::NotFound { .. }),
            "{err:?}"
        ),
        Some(_) => assert!(
            matches!(err, refract_core::Error::Corrupt { .. }),
            "{err:?}"
        ),
    }
    assert!(err.to_string().contains(&txn), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
    let latest = theirs.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), 3);
    assert_eq!(scan_ids(&latest).await, (5..40).collect::<Vec<_>>());
}
