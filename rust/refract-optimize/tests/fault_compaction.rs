//! Fault matrices for maintenance: compaction (inline and deferred index remap,
//! budgeted, distributed execute + commit) and index creation/optimization.
//! Every call the operation makes (sampled by default, all with
//! `REFRACT_FAULT_FULL=1`) fails once, cleanly and ambiguously, on a fresh copy
//! of the dataset; see `refract_table::testing::run_fault_matrix` for the checks.
//! Where the dataset has an index, every run also checks that an indexed query
//! returns exactly what a scan returns.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use futures::FutureExt;
use refract_core::Result;
use refract_index::{create_index, optimize_indices, IndexParams, Query};
use refract_optimize::compaction::{
    commit_compaction, compact_files, plan_compaction, CompactionOptions, RewriteResult,
};
use refract_table::io::CallKind;
use refract_table::testing::{
    run_fault_matrix_verified, sample_rows, Coverage, FaultMatrixReport, FaultRig, OperationFn,
    RigBackend, SetupFn, VerifyFn,
};
use refract_table::{Dataset, WriteOptions};
use rstest::rstest;

/// Call indices per kind in the default run.
const SAMPLED_INDICES_PER_KIND: u64 = 5;
/// The filter whose indexed answer is compared with a scan.
const CHECK_FILTER: &str = "id >= 7 AND id < 53";

fn per_file(rows: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows,
        ..WriteOptions::default()
    }
}

fn options(defer_index_remap: bool, max_source_fragments: Option<u64>) -> CompactionOptions {
    CompactionOptions {
        target_rows_per_fragment: 25,
        defer_index_remap,
        max_source_fragments,
        num_threads: Some(2),
        ..CompactionOptions::default()
    }
}

/// 60 rows in six fragments of 10 with some deletions; optionally a btree on `id`.
fn small_fragments(with_index: bool) -> SetupFn {
    Arc::new(move |rig: FaultRig| {
        async move {
            let mut dataset = rig.create_sample().await?;
            dataset
                .append(vec![sample_rows(0, 60)], &per_file(10))
                .await?;
            dataset.delete("id % 7 = 3").await?;
            if with_index {
                create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await?;
            }
            Ok(())
        }
        .boxed_local()
    })
}

/// 60 rows in six fragments of 10 without deletions and a btree on `id`: the
/// run is joined by copying pages when the copy threshold allows it.
fn clean_fragments() -> SetupFn {
    Arc::new(|rig: FaultRig| {
        async move {
            let mut dataset = rig.create_sample().await?;
            dataset
                .append(vec![sample_rows(0, 60)], &per_file(10))
                .await?;
            create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await?;
            Ok(())
        }
        .boxed_local()
    })
}

/// Options that copy pages of any source size.
fn copy_options() -> CompactionOptions {
    CompactionOptions {
        target_rows_per_fragment: 30,
        binary_copy_min_source_rows: 0,
        ..options(false, None)
    }
}

/// [`small_fragments`] with an index built before a further append, so some
/// fragments are not covered.
fn partly_indexed() -> SetupFn {
    Arc::new(|rig: FaultRig| {
        async move {
            let mut dataset = rig.create_sample().await?;
            dataset
                .append(vec![sample_rows(0, 40)], &per_file(10))
                .await?;
            let mut dataset =
                create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await?;
            dataset
                .append(vec![sample_rows(40, 20)], &per_file(10))
                .await?;
            dataset.delete("id % 7 = 3").await?;
            Ok(())
        }
        .boxed_local()
    })
}

fn compact(options: CompactionOptions) -> OperationFn {
    Arc::new(move |mut dataset: Dataset| {
        let options = options.clone();
        async move {
            compact_files(&mut dataset, &options, None).await?;
            Ok(dataset)
        }
        .boxed_local()
    })
}

/// Plans, executes every task as a worker would (results through JSON), and
/// commits the results in reverse task order.
fn distributed(options: CompactionOptions) -> OperationFn {
    Arc::new(move |dataset: Dataset| {
        let options = options.clone();
        async move {
            let plan = plan_compaction(&dataset, &options)?;
            let mut results = Vec::new();
            for task in &plan.tasks {
                let result = task.execute(&dataset).await?;
                let json = serde_json::to_string(&result)
                    .map_err(|e| refract_core::Error::external("encoding a result", e))?;
                let decoded: RewriteResult = serde_json::from_str(&json)
                    .map_err(|e| refract_core::Error::external("decoding a result", e))?;
                results.push(decoded);
            }
            results.reverse();
            let (committed, _) = commit_compaction(&dataset, results).await?;
            Ok(committed)
        }
        .boxed_local()
    })
}

fn build_index() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move { create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await }
            .boxed_local()
    })
}

fn optimize_index() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move { optimize_indices(&dataset, "id_idx").await }.boxed_local()
    })
}

fn ids(batch: &RecordBatch) -> Vec<i64> {
    let mut ids = batch
        .column_by_name("id")
        .map(|c| c.as_primitive::<Int64Type>().values().to_vec())
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// An indexed query returns exactly the rows of a filtered scan.
fn index_equals_scan() -> VerifyFn {
    Arc::new(|dataset: Dataset| {
        async move {
            let indexed = Query::new(&dataset)
                .filter(CHECK_FILTER)?
                .project(&["id"])
                .execute()
                .await?;
            let scanned = dataset
                .scan()
                .project(&["id"])
                .filter(CHECK_FILTER)?
                .try_into_batch()
                .await?;
            let (indexed_ids, scanned_ids) = (ids(&indexed.batch), ids(&scanned));
            if indexed_ids != scanned_ids {
                return Err(refract_core::Error::corrupt(
                    "index",
                    format!("indexed query {indexed_ids:?} != scan {scanned_ids:?}"),
                ));
            }
            Ok(scanned_ids.len() as u64)
        }
        .boxed()
    })
}

fn no_verify() -> VerifyFn {
    Arc::new(|_| async { Result::Ok(0) }.boxed())
}

fn assert_covered(report: &FaultMatrixReport) {
    println!("{report}");
    assert!(
        report.calls.contains_key(&CallKind::ConditionalPut),
        "{report}"
    );
    assert!(report.faults_fired * 2 >= report.runs, "{report}");
    assert!(report.failed > 0, "{report}");
}

#[rstest]
#[case::compact_inline(
    "compact inline",
    small_fragments(false),
    compact(options(false, None)),
    no_verify()
)]
#[case::compact_inline_index(
    "compact inline + index",
    small_fragments(true),
    compact(options(false, None)),
    index_equals_scan()
)]
#[case::compact_deferred_index(
    "compact deferred + index",
    small_fragments(true),
    compact(options(true, None)),
    index_equals_scan()
)]
#[case::compact_budgeted(
    "compact budget 2",
    small_fragments(true),
    compact(options(false, Some(2))),
    index_equals_scan()
)]
#[case::distributed(
    "distributed execute + commit",
    small_fragments(true),
    distributed(options(false, None)),
    index_equals_scan()
)]
#[case::distributed_deferred(
    "distributed deferred",
    small_fragments(true),
    distributed(options(true, None)),
    index_equals_scan()
)]
#[case::compact_page_copy(
    "compact by page copy + index",
    clean_fragments(),
    compact(copy_options()),
    index_equals_scan()
)]
#[case::distributed_page_copy(
    "distributed page copy",
    clean_fragments(),
    distributed(copy_options()),
    index_equals_scan()
)]
#[case::create_index(
    "create index",
    small_fragments(false),
    build_index(),
    index_equals_scan()
)]
#[case::optimize_index(
    "optimize index",
    partly_indexed(),
    optimize_index(),
    index_equals_scan()
)]
#[tokio::test]
async fn maintenance_survives_every_fault(
    #[case] name: &str,
    #[case] setup: SetupFn,
    #[case] operation: OperationFn,
    #[case] verify: VerifyFn,
) {
    let coverage = Coverage::from_env(SAMPLED_INDICES_PER_KIND);
    let report =
        run_fault_matrix_verified(name, RigBackend::Memory, setup, operation, verify, coverage)
            .await;
    assert_covered(&report);
}
