//! Fault matrices for the table-level operations: every call the operation
//! makes (per kind; sampled by default, all with `REFRACT_FAULT_FULL=1`) fails
//! once, cleanly and ambiguously, on a fresh copy of the same dataset; the
//! checks are those of `refract_table::testing::run_fault_matrix`.

use std::sync::Arc;

use futures::FutureExt;
use refract_table::io::CallKind;
use refract_table::testing::{
    run_fault_matrix, sample_rows, Coverage, FaultMatrixReport, FaultRig, OperationFn, RigBackend,
    SetupFn,
};
use refract_table::{Dataset, IndexMetadata, Operation, RewriteGroup, WriteOptions};
use rstest::rstest;

/// Call indices per kind in the default run; the full run covers all of them.
const SAMPLED_INDICES_PER_KIND: u64 = 6;

fn per_file(rows: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows,
        ..WriteOptions::default()
    }
}

/// 60 rows (ids 0..60) in three fragments of 20.
fn three_fragments() -> SetupFn {
    Arc::new(|rig: FaultRig| {
        async move {
            let mut dataset = rig.create_sample().await?;
            dataset
                .append(vec![sample_rows(0, 60)], &per_file(20))
                .await
        }
        .boxed_local()
    })
}

/// Three fragments, then a delete, so fragment 2 carries a deletion file.
fn with_deletions() -> SetupFn {
    Arc::new(|rig: FaultRig| {
        async move {
            let mut dataset = rig.create_sample().await?;
            dataset
                .append(vec![sample_rows(0, 60)], &per_file(20))
                .await?;
            dataset.delete("id >= 20 AND id < 25").await.map(|_| ())
        }
        .boxed_local()
    })
}

fn append() -> OperationFn {
    Arc::new(|mut dataset: Dataset| {
        async move {
            dataset
                .append(vec![sample_rows(100, 30)], &per_file(20))
                .await?;
            Ok(dataset)
        }
        .boxed_local()
    })
}

fn delete(predicate: &'static str) -> OperationFn {
    Arc::new(move |mut dataset: Dataset| {
        async move {
            dataset.delete(predicate).await?;
            Ok(dataset)
        }
        .boxed_local()
    })
}

/// Rewrites fragments 1 and 2 (with their deletions materialized) into one fragment in place.
fn rewrite() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move {
            let batch = dataset.scan().fragments(&[1, 2]).try_into_batch().await?;
            let new_fragments = dataset
                .write_fragments(futures::stream::iter(vec![Ok(batch)]), &per_file(1_000))
                .await?;
            dataset
                .commit(Operation::Rewrite {
                    groups: vec![RewriteGroup {
                        old_fragment_ids: vec![1, 2],
                        new_fragments,
                        surviving_old_addresses: None,
                    }],
                    new_indices: vec![],
                    removed_index_uuids: vec![],
                })
                .await
        }
        .boxed_local()
    })
}

/// Makes version 2 current again.
fn restore() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move {
            let mut old = dataset.checkout_version(2).await?;
            old.restore().await?;
            Ok(old)
        }
        .boxed_local()
    })
}

/// Adds an index segment entry over fragments 1..=3 (metadata only).
fn create_index_entry() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move {
            let segment = IndexMetadata {
                uuid: uuid::Uuid::new_v4(),
                name: "id_idx".to_string(),
                fields: vec!["id".to_string()],
                fragment_bitmap: Some([1u32, 2, 3].into_iter().collect()),
                index_type: "btree".to_string(),
                details: vec![],
                index_version: 1,
                dataset_version: dataset.version(),
                files: Vec::new(),
                lance: Default::default(),
            };
            dataset
                .commit(Operation::CreateIndex {
                    new_indices: vec![segment],
                    removed_index_uuids: vec![],
                })
                .await
        }
        .boxed_local()
    })
}

fn assert_covered(report: &FaultMatrixReport) {
    println!("{report}");
    assert!(report.runs > 0, "{report}");
    // Every operation commits a manifest, so a conditional put is always faulted.
    assert!(
        report.calls.contains_key(&CallKind::ConditionalPut),
        "{report}"
    );
    // An armed fault may not fire only when the faulted run takes a different path.
    assert!(report.faults_fired * 2 >= report.runs, "{report}");
    assert!(report.failed > 0, "{report}");
}

#[rstest]
#[case::memory(RigBackend::Memory)]
#[case::local(RigBackend::Local)]
#[tokio::test]
async fn append_of_many_rows_survives_every_fault(#[case] backend: RigBackend) {
    let setup = three_fragments();
    let append_many: OperationFn = Arc::new(|mut dataset: Dataset| {
        async move {
            dataset
                .append(vec![sample_rows(1_000, 5_000)], &per_file(2_000))
                .await?;
            Ok(dataset)
        }
        .boxed_local()
    });
    let coverage = Coverage::from_env(SAMPLED_INDICES_PER_KIND);
    let report = run_fault_matrix("append 5000 rows", backend, setup, append_many, coverage).await;
    assert_covered(&report);
}

#[rstest]
#[case::append("append", three_fragments(), append())]
#[case::delete_some_rows("delete rows", three_fragments(), delete("id % 3 = 0"))]
#[case::delete_a_whole_fragment("delete fragment", with_deletions(), delete("id < 25"))]
#[case::rewrite("rewrite commit", with_deletions(), rewrite())]
#[case::restore("restore", with_deletions(), restore())]
#[case::create_index("create index entry", three_fragments(), create_index_entry())]
#[tokio::test]
async fn no_fault_loses_duplicates_or_mixes_rows(
    #[case] name: &str,
    #[case] setup: SetupFn,
    #[case] operation: OperationFn,
) {
    let coverage = Coverage::from_env(SAMPLED_INDICES_PER_KIND);
    for backend in [RigBackend::Memory, RigBackend::Local] {
        let report =
            run_fault_matrix(name, backend, setup.clone(), operation.clone(), coverage).await;
        assert_covered(&report);
    }
}
