//! Fault matrices on a data file too large to be read whole: 20,000 rows with
//! a 64-dimension vector (about 5.3 MB, above the 4 MiB up to which small
//! files are fetched in one GET), so scans, compaction reads and index builds
//! take ranged reads (`GetRange`), and those fail too.
//!
//! The large table is built once per fixture and copied object by object into
//! each fresh rig, so a fault run costs the operation, not the setup. Each test
//! counts, per call kind, the faults that actually fired during the operation
//! and asserts that `GetRange` faults did.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::{FutureExt, TryStreamExt};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use refract_core::{Error, Result};
use refract_index::{create_index, IndexParams, Query};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use refract_table::io::CallKind;
use refract_table::testing::{
    run_fault_matrix_verified, snapshot, Coverage, FaultMatrixReport, FaultRig, OperationFn,
    RigBackend, SetupFn, VerifyFn,
};
use refract_table::{Dataset, WriteOptions};
use rstest::rstest;

/// Call indices per kind in the default run (always the first and the last).
const SAMPLED_INDICES_PER_KIND: u64 = 5;
/// Rows of the table, all in one data file.
const ROWS: i64 = 20_000;
/// Vector dimension: 20,000 × 64 × 4 bytes ≈ 5.1 MB of vectors.
const DIM: i32 = 64;
/// Data files up to this size are fetched whole by one-pass scans
/// (`refract_table::io::lance_files::PREFETCH_LIMIT_BYTES`).
const WHOLE_FILE_LIMIT: u64 = 4 << 20;
/// The filter whose indexed answer is compared with a scan.
const CHECK_FILTER: &str = "id >= 1000 AND id < 1500";
/// The kNN query vector.
const QUERY_VECTOR: [f32; DIM as usize] = [8000.0; DIM as usize];
/// More than a tenth of the rows, so compaction rewrites the lone fragment.
const DELETE: &str = "id % 6 = 1";

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "vector",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), DIM),
            false,
        ),
    ]))
}

/// Pseudo-random components (splitmix64), so the file does not compress.
fn component(id: i64, j: i32) -> f32 {
    let mut z = (id as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(j as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z >> 40) as f32 / 1024.0
}

fn rows(n: i64) -> RecordBatch {
    let ids: Vec<i64> = (0..n).collect();
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), DIM);
    for id in &ids {
        for j in 0..DIM {
            vectors.values().append_value(component(*id, j));
        }
        vectors.append(true);
    }
    let columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids)), Arc::new(vectors.finish())];
    RecordBatch::try_new(schema(), columns).unwrap()
}

/// Every object of the template table.
type Objects = Vec<(object_store::path::Path, PutPayload)>;

/// Builds the large table (deleted rows, optionally a btree on `id`) into a
/// fresh rig and returns its objects.
async fn build_template(with_index: bool) -> Result<Objects> {
    let rig = FaultRig::memory();
    let mut dataset = Dataset::create(rig.uri(), schema(), rig.clean_options()).await?;
    let one_file = WriteOptions {
        max_rows_per_file: ROWS as u64,
        ..WriteOptions::default()
    };
    dataset.append(vec![rows(ROWS)], &one_file).await?;
    let size = dataset.fragments()[0].files[0].size_bytes;
    assert!(size > WHOLE_FILE_LIMIT, "the data file is {size} bytes");
    if with_index {
        dataset = create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await?;
    }
    dataset.delete(DELETE).await?;
    let store = rig.fault.inner().clone();
    let listed: Vec<object_store::ObjectMeta> = store.list(None).try_collect().await.unwrap();
    let mut objects = Vec::with_capacity(listed.len());
    for meta in listed {
        let bytes = store
            .get(&meta.location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        objects.push((meta.location, PutPayload::from(bytes)));
    }
    Ok(objects)
}

/// Copies the template (built on first use) into each fresh rig; remembers
/// the rig so the operation can report which faults fired.
fn copy_of_template(with_index: bool, current: Arc<Mutex<Option<FaultRig>>>) -> SetupFn {
    let template: Arc<Mutex<Option<Arc<Objects>>>> = Arc::default();
    Arc::new(move |rig: FaultRig| {
        let (template, current) = (template.clone(), current.clone());
        async move {
            let cached = template.lock().unwrap().clone();
            let objects = match cached {
                Some(objects) => objects,
                None => {
                    let objects = Arc::new(build_template(with_index).await?);
                    *template.lock().unwrap() = Some(objects.clone());
                    objects
                }
            };
            for (path, payload) in objects.iter() {
                rig.fault
                    .inner()
                    .put(path, payload.clone())
                    .await
                    .map_err(|e| Error::external("copying the template", e))?;
            }
            *current.lock().unwrap() = Some(rig);
            Ok(())
        }
        .boxed_local()
    })
}

/// Faults that fired during the operation, per kind.
type Fired = Arc<Mutex<BTreeMap<CallKind, u64>>>;

/// Wraps `operation` to count the faults that fired while it ran (the driver
/// resets the injector right after the operation returns).
// `OperationFn` is neither Send nor Sync by design (the driver awaits it in place).
#[allow(clippy::arc_with_non_send_sync)]
fn counting_fired(
    operation: OperationFn,
    current: Arc<Mutex<Option<FaultRig>>>,
    fired: Fired,
) -> OperationFn {
    Arc::new(move |dataset: Dataset| {
        let (operation, current, fired) = (operation.clone(), current.clone(), fired.clone());
        async move {
            let result = operation(dataset).await;
            if let Some(rig) = current.lock().unwrap().as_ref() {
                for fault in rig.fault.fired() {
                    *fired.lock().unwrap().entry(fault.kind).or_default() += 1;
                }
            }
            result
        }
        .boxed_local()
    })
}

/// A full scan of every column; the dataset is unchanged.
fn full_scan() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move {
            let batch = snapshot(&dataset).await?;
            let expected = ROWS - ROWS / 6 - i64::from(ROWS % 6 > 1);
            if batch.num_rows() as i64 != expected {
                return Err(Error::corrupt(
                    "scan",
                    format!("{} rows, expected {expected}", batch.num_rows()),
                ));
            }
            Ok(dataset)
        }
        .boxed_local()
    })
}

fn compact() -> OperationFn {
    Arc::new(|mut dataset: Dataset| {
        async move {
            let metrics = compact_files(&mut dataset, &CompactionOptions::default(), None).await?;
            if metrics.fragments_removed != 1 {
                return Err(Error::invalid_input(format!(
                    "expected the lone fragment to be rewritten: {metrics:?}"
                )));
            }
            Ok(dataset)
        }
        .boxed_local()
    })
}

fn build_btree() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move { create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default()).await }
            .boxed_local()
    })
}

fn build_ivf_flat() -> OperationFn {
    Arc::new(|dataset: Dataset| {
        async move {
            let params = IndexParams {
                partitions: Some(8),
                ..IndexParams::default()
            };
            create_index(&dataset, "vec_idx", "vector", "ivf_flat", &params).await
        }
        .boxed_local()
    })
}

/// A hash partition into 3 destinations (the btree makes it write a row map).
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

fn sorted_ids(batch: &RecordBatch) -> Vec<i64> {
    let mut ids = batch
        .column_by_name("id")
        .map(|c| c.as_primitive::<Int64Type>().values().to_vec())
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// An indexed query returns exactly the rows of a filtered scan, and (when
/// the vector index exists) an indexed kNN query the exact nearest neighbours.
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
                return Err(Error::corrupt(
                    "index",
                    format!(
                        "indexed query ({} rows) != scan ({} rows)",
                        a.len(),
                        b.len()
                    ),
                ));
            }
            if refract_index::manage::segments_of(&dataset, "vec_idx").is_empty() {
                return Ok(b.len() as u64);
            }
            // kNN probing every partition is exact.
            let knn = |use_index: bool| {
                Query::new(&dataset)
                    .nearest("vector", &QUERY_VECTOR, 10, 8)
                    .project(&["id"])
                    .use_index(use_index)
                    .execute()
            };
            let (a_knn, b_knn) = (
                sorted_ids(&knn(true).await?.batch),
                sorted_ids(&knn(false).await?.batch),
            );
            if a_knn != b_knn || b_knn.len() != 10 {
                return Err(Error::corrupt(
                    "index",
                    format!("indexed kNN {a_knn:?} != exact kNN {b_knn:?}"),
                ));
            }
            Ok((b.len() + b_knn.len()) as u64)
        }
        .boxed()
    })
}

#[rstest]
#[case::scan("scan (large file)", false, full_scan(), false)]
#[case::compact_inline_index("compact inline + index (large file)", true, compact(), true)]
#[case::create_btree("create btree (large file)", false, build_btree(), true)]
#[case::create_ivf_flat("create ivf_flat (large file)", false, build_ivf_flat(), true)]
#[case::partition("partition (large file)", true, partition(), true)]
#[tokio::test]
async fn ranged_reads_fail_too(
    #[case] name: &str,
    #[case] with_index: bool,
    #[case] operation: OperationFn,
    #[case] commits: bool,
) {
    let current: Arc<Mutex<Option<FaultRig>>> = Arc::default();
    let fired: Fired = Arc::default();
    let setup = copy_of_template(with_index, current.clone());
    let operation = counting_fired(operation, current, fired.clone());
    let verify = if commits {
        index_equals_scan()
    } else {
        Arc::new(|_: Dataset| async { Result::Ok(0u64) }.boxed()) as VerifyFn
    };
    let coverage = Coverage::from_env(SAMPLED_INDICES_PER_KIND);
    let report =
        run_fault_matrix_verified(name, RigBackend::Memory, setup, operation, verify, coverage)
            .await;
    let fired = fired.lock().unwrap().clone();
    println!("{report}; fired per kind {fired:?}");
    assert_ranged(&report, &fired, commits);
}

fn assert_ranged(report: &FaultMatrixReport, fired: &BTreeMap<CallKind, u64>, commits: bool) {
    let ranged = report.calls.get(&CallKind::GetRange).copied().unwrap_or(0);
    assert!(ranged > 0, "the operation takes ranged reads: {report}");
    assert!(
        fired.get(&CallKind::GetRange).copied().unwrap_or(0) > 0,
        "GetRange faults fired: {fired:?}"
    );
    assert_eq!(fired.values().sum::<u64>(), report.faults_fired, "{report}");
    assert_eq!(
        report.calls.contains_key(&CallKind::ConditionalPut),
        commits,
        "{report}"
    );
    assert!(report.faults_fired * 2 >= report.runs, "{report}");
    if commits {
        assert!(report.failed > 0, "{report}");
    }
}
