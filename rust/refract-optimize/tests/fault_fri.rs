//! Fault matrices for the FRI maintenance operations: stable partition (row
//! map + ledger transition), `remap_indices` after a deferred compaction, and
//! `trim_fri` after a remap. Sampled call indices by default, all of them with
//! `REFRACT_FAULT_FULL=1`; every run also checks that an indexed query returns
//! exactly what a scan returns.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use futures::FutureExt;
use refract_index::{create_index, IndexParams, Query};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_table::cleanup::cleanup_orphans;
use refract_table::io::CallKind;
use refract_table::testing::{
    run_fault_matrix_verified, sample_rows, Coverage, FaultMatrixReport, FaultRig, OperationFn,
    RigBackend, SetupFn, VerifyFn,
};
use refract_table::{Dataset, WriteOptions};
use rstest::rstest;

const SAMPLED_INDICES_PER_KIND: u64 = 5;
const CHECK_FILTER: &str = "id >= 7 AND id < 53";

/// How far the setup takes the dataset before the operation under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// 60 rows in six fragments, deletions, a btree index.
    Indexed,
    /// ... then a deferred compaction (a ledger transition, index not remapped).
    Deferred,
    /// ... then `remap_indices` (the transition is no longer needed).
    Remapped,
}

fn setup(stage: Stage) -> SetupFn {
    Arc::new(move |rig: FaultRig| {
        async move {
            let mut dataset = rig.create_sample().await?;
            let options = WriteOptions {
                max_rows_per_file: 10,
                ..WriteOptions::default()
            };
            dataset.append(vec![sample_rows(0, 60)], &options).await?;
            dataset.delete("id % 7 = 3").await?;
            let mut dataset =
                create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await?;
            if stage >= Stage::Deferred {
                let options = CompactionOptions {
                    target_rows_per_fragment: 25,
                    defer_index_remap: true,
                    ..CompactionOptions::default()
                };
                compact_files(&mut dataset, &options, None).await?;
            }
            if stage >= Stage::Remapped {
                remap_indices(&mut dataset, RemapOptions::default()).await?;
            }
            Ok(())
        }
        .boxed_local()
    })
}

fn partition() -> OperationFn {
    Arc::new(|mut dataset: Dataset| {
        async move {
            let by = PartitionBy::Hash {
                column: "id".to_string(),
                destinations: 3,
            };
            partition_fragments(&mut dataset, PartitionOptions::new(by)).await?;
            Ok(dataset)
        }
        .boxed_local()
    })
}

fn remap() -> OperationFn {
    Arc::new(|mut dataset: Dataset| {
        async move {
            remap_indices(&mut dataset, RemapOptions::default()).await?;
            Ok(dataset)
        }
        .boxed_local()
    })
}

fn trim() -> OperationFn {
    Arc::new(|mut dataset: Dataset| {
        async move {
            trim_fri(&mut dataset).await?;
            Ok(dataset)
        }
        .boxed_local()
    })
}

fn sorted_ids(batch: &RecordBatch) -> Vec<i64> {
    let mut ids = batch
        .column_by_name("id")
        .map(|c| c.as_primitive::<Int64Type>().values().to_vec())
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

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
            let (a, b) = (sorted_ids(&indexed.batch), sorted_ids(&scanned));
            if a != b {
                return Err(refract_core::Error::corrupt(
                    "index",
                    format!("indexed query {a:?} != scan {b:?}"),
                ));
            }
            Ok(b.len() as u64)
        }
        .boxed()
    })
}

fn assert_covered(report: &FaultMatrixReport) {
    println!("{report}");
    assert!(
        report.calls.contains_key(&CallKind::ConditionalPut),
        "the operation must commit: {report}"
    );
    assert!(report.faults_fired * 2 >= report.runs, "{report}");
    assert!(report.failed > 0, "{report}");
}

#[rstest]
#[case::partition("partition", Stage::Indexed, partition())]
#[case::partition_after_deferred("partition after deferred", Stage::Deferred, partition())]
#[case::remap("remap_indices", Stage::Deferred, remap())]
#[case::trim("trim_fri", Stage::Remapped, trim())]
#[tokio::test]
async fn fri_maintenance_survives_every_fault(
    #[case] name: &str,
    #[case] stage: Stage,
    #[case] operation: OperationFn,
) {
    let coverage = Coverage::from_env(SAMPLED_INDICES_PER_KIND);
    let report = run_fault_matrix_verified(
        name,
        RigBackend::Memory,
        setup(stage),
        operation,
        index_equals_scan(),
        coverage,
    )
    .await;
    assert_covered(&report);
}

/// Files under `_fri/` (row maps), sorted.
async fn row_map_files(rig: &FaultRig) -> Vec<refract_table::io::RelativePath> {
    let prefix = refract_table::io::RelativePath::parse("_fri").unwrap();
    let listed = rig.clean_store().list(&prefix).await.unwrap();
    listed.into_iter().map(|object| object.path).collect()
}

#[tokio::test]
async fn cleanup_removes_the_row_map_of_a_failed_partition_and_keeps_live_ones() {
    let rig = FaultRig::memory();
    setup(Stage::Indexed)(rig.clone()).await.unwrap();
    // A partition whose commit fails cleanly leaves its row map behind.
    let faulty = rig.open_faulty().await.unwrap();
    rig.fault.fail_nth(
        CallKind::ConditionalPut,
        0,
        refract_table::io::FaultMode::Clean,
    );
    partition()(faulty).await.unwrap_err();
    let abandoned = row_map_files(&rig).await;
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    // A committed partition's row map is live.
    partition()(rig.open_clean().await.unwrap()).await.unwrap();
    let all = row_map_files(&rig).await;
    assert_eq!(all.len(), 2, "{all:?}");

    let latest = rig.open_clean().await.unwrap();
    let report = cleanup_orphans(&latest, std::time::Duration::ZERO)
        .await
        .unwrap();
    let deleted_maps: Vec<_> = report
        .deleted
        .iter()
        .filter(|path| path.top_level_dir() == "_fri")
        .cloned()
        .collect();
    assert_eq!(deleted_maps, abandoned);
    let live: Vec<_> = all.into_iter().filter(|p| !abandoned.contains(p)).collect();
    assert_eq!(row_map_files(&rig).await, live);
    // The index still answers through the live row map.
    let rows = index_equals_scan()(rig.open_clean().await.unwrap())
        .await
        .unwrap();
    assert!(rows > 0);
    rig.check_every_version_readable().await.unwrap();
}
