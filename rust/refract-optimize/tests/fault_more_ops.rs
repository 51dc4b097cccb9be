//! Fault matrices for the operations the first reliability pass left out:
//! `create_index` for bitmap, ngram and ivf_flat, `optimize_indices` for ngram
//! and ivf_flat, `drop_index`, and `maintain` run until a round commits
//! nothing (deferred budgeted compaction, remap, reindex and trim over a
//! history holding a compaction and a stable partition).
//!
//! Every call the operation makes (sampled by default, all of them with
//! `REFRACT_FAULT_FULL=1`) fails once, cleanly and ambiguously, on a fresh copy
//! of the dataset; `refract_table::testing::run_fault_matrix_verified` checks
//! rows, versions, error kinds, cleanup and retry. After every run and every
//! retry each filter the four index types answer, and a kNN query, return
//! through the FRI resolver exactly what a brute-force scan returns.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use futures::FutureExt;
use refract_core::{Error, Result};
use refract_index::manage::segments_of;
use refract_index::{
    create_index, drop_index, optimize_indices_with, IndexParams, IndexRegistry, Query,
};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use refract_optimize::maintain::{maintain, MaintainOptions};
use refract_reader::FriResolver;
use refract_table::io::CallKind;
use refract_table::testing::{
    run_fault_matrix_verified, Coverage, FaultMatrixReport, FaultRig, OperationFn, RigBackend,
    SetupFn, VerifyFn,
};
use refract_table::{Dataset, WriteOptions};
use rstest::rstest;

mod support;
use support::fri::schema;

/// Call indices per kind in the default run.
const SAMPLED_INDICES_PER_KIND: u64 = 5;
/// Rows of the fixture table.
const ROWS: i64 = 60;
/// Filters the btree, bitmap and ngram indices answer (and one none does).
const FILTERS: [&str; 6] = [
    "id >= 7 AND id < 53",
    "cat = 3",
    "cat IN (0, 4)",
    "contains(name, 'ow-1')",
    "contains(name, '7-')",
    "id = 41",
];
/// The kNN query vector: between rows 20 and 21.
const QUERY_VECTOR: [f32; 2] = [20.3, -20.3];

/// The four index types: (name, column, type).
const BTREE: (&str, &str, &str) = ("by_id", "id", "btree");
const BITMAP: (&str, &str, &str) = ("by_cat", "cat", "bitmap");
const NGRAM: (&str, &str, &str) = ("by_name", "name", "ngram");
const IVF_FLAT: (&str, &str, &str) = ("by_vec", "vector", "ivf_flat");

/// Rows `start..start + n`: cat = id % 5 (null when id % 13 == 0), name =
/// "row-<id>-", vector = [id, -id].
fn rows(start: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n).collect();
    let cats: Int32Array = ids
        .iter()
        .map(|i| (i % 13 != 0).then_some((i % 5) as i32))
        .collect();
    let names: StringArray = ids.iter().map(|i| Some(format!("row-{i}-"))).collect();
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 2);
    for i in &ids {
        vectors.values().append_value(*i as f32);
        vectors.values().append_value(-(*i as f32));
        vectors.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(cats),
        Arc::new(names),
        Arc::new(vectors.finish()),
    ];
    RecordBatch::try_new(schema(), columns).unwrap()
}

fn params(index_type: &str) -> IndexParams {
    IndexParams {
        partitions: (index_type == "ivf_flat").then_some(4),
        page_rows: (index_type == "btree").then_some(8),
        ..IndexParams::default()
    }
}

async fn build(
    dataset: &Dataset,
    (name, column, index_type): (&str, &str, &str),
) -> Result<Dataset> {
    create_index(dataset, name, column, index_type, &params(index_type)).await
}

/// What the setup builds before the operation under test.
#[derive(Debug, Clone)]
struct Fixture {
    /// Indices built over the first `indexed_rows` rows.
    indices: Vec<(&'static str, &'static str, &'static str)>,
    /// Rows present when the indices are built (the rest is appended after).
    indexed_rows: i64,
    /// Run a deferred compaction and a stable partition of the last three
    /// fragments after the deletes, leaving an FRI history of two transitions.
    history: bool,
}

impl Fixture {
    fn plain() -> Self {
        Fixture {
            indices: Vec::new(),
            indexed_rows: ROWS,
            history: false,
        }
    }

    fn indexed(indices: &[(&'static str, &'static str, &'static str)]) -> Self {
        Fixture {
            indices: indices.to_vec(),
            indexed_rows: ROWS,
            history: false,
        }
    }

    /// The indices cover the first 40 rows only.
    fn partly_indexed(index: (&'static str, &'static str, &'static str)) -> Self {
        Fixture {
            indices: vec![index],
            indexed_rows: 40,
            history: false,
        }
    }

    fn with_history() -> Self {
        Fixture {
            indices: vec![BTREE, BITMAP, NGRAM, IVF_FLAT],
            indexed_rows: ROWS,
            history: true,
        }
    }

    /// Rows in fragments of 10, the indices, the rest of the rows, deletions,
    /// and optionally the history.
    fn setup(self) -> SetupFn {
        Arc::new(move |rig: FaultRig| {
            let fixture = self.clone();
            async move {
                let per_file = WriteOptions {
                    max_rows_per_file: 10,
                    ..WriteOptions::default()
                };
                let mut dataset = Dataset::create(rig.uri(), schema(), rig.clean_options()).await?;
                dataset
                    .append(vec![rows(0, fixture.indexed_rows)], &per_file)
                    .await?;
                for index in &fixture.indices {
                    dataset = build(&dataset, *index).await?;
                }
                if fixture.indexed_rows < ROWS {
                    let rest = ROWS - fixture.indexed_rows;
                    dataset
                        .append(vec![rows(fixture.indexed_rows, rest)], &per_file)
                        .await?;
                }
                dataset.delete("id % 7 = 3").await?;
                if fixture.history {
                    let deferred = CompactionOptions {
                        target_rows_per_fragment: 25,
                        defer_index_remap: true,
                        max_source_fragments: Some(3),
                        ..CompactionOptions::default()
                    };
                    compact_files(&mut dataset, &deferred, None).await?;
                    let ids: Vec<u64> = dataset.fragments().iter().map(|f| f.id).collect();
                    let mut options = PartitionOptions::new(PartitionBy::Hash {
                        column: "id".to_string(),
                        destinations: 2,
                    });
                    options.fragments = Some(ids[ids.len().saturating_sub(3)..].to_vec());
                    partition_fragments(&mut dataset, options).await?;
                    dataset.delete("id = 44").await?;
                }
                Ok(())
            }
            .boxed_local()
        })
    }
}

fn create(index: (&'static str, &'static str, &'static str)) -> OperationFn {
    Arc::new(move |dataset: Dataset| async move { build(&dataset, index).await }.boxed_local())
}

fn optimize(index: (&'static str, &'static str, &'static str)) -> OperationFn {
    Arc::new(move |dataset: Dataset| {
        async move {
            let registry = IndexRegistry::with_builtins();
            let (name, _, index_type) = index;
            optimize_indices_with(&dataset, &registry, name, &params(index_type)).await
        }
        .boxed_local()
    })
}

fn drop(name: &'static str) -> OperationFn {
    Arc::new(move |dataset: Dataset| async move { drop_index(&dataset, name).await }.boxed_local())
}

/// `maintain` with a deferred compaction budgeted to two source fragments (so
/// it takes several rounds), reindexing, until a round commits nothing.
fn maintain_until_noop() -> OperationFn {
    Arc::new(|mut dataset: Dataset| {
        async move {
            let options = MaintainOptions {
                compaction: Some(CompactionOptions {
                    target_rows_per_fragment: 20,
                    defer_index_remap: true,
                    max_source_fragments: Some(2),
                    ..CompactionOptions::default()
                }),
                reindex: true,
                until_noop: true,
                ..MaintainOptions::default()
            };
            let report = maintain(&mut dataset, options).await?;
            if !report.converged {
                return Err(Error::invalid_input(format!(
                    "maintain did not converge: {report:?}"
                )));
            }
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

/// Runs `query` through the FRI resolver with and without indices.
async fn indexed_and_brute(query: impl Fn(bool) -> Query) -> Result<(Vec<i64>, Vec<i64>)> {
    let indexed = query(true).execute().await?;
    let brute = query(false).execute().await?;
    Ok((sorted_ids(&indexed.batch), sorted_ids(&brute.batch)))
}

/// Every filter and a kNN query return through the FRI resolver exactly what a
/// brute-force scan returns (kNN probes every partition, so it is exact).
fn queries_equal_brute_force() -> VerifyFn {
    Arc::new(|dataset: Dataset| {
        async move {
            let resolver = Arc::new(FriResolver::default());
            let mut compared = 0u64;
            for filter in FILTERS {
                let (indexed, brute) = indexed_and_brute(|use_index| {
                    Query::new(&dataset)
                        .filter(filter)
                        .expect("the filters parse")
                        .project(&["id"])
                        .with_resolver(resolver.clone())
                        .use_index(use_index)
                })
                .await?;
                if indexed != brute {
                    return Err(Error::corrupt(
                        "index",
                        format!("{filter}: indexed {indexed:?} != brute force {brute:?}"),
                    ));
                }
                compared += brute.len() as u64;
            }
            let (indexed, brute) = indexed_and_brute(|use_index| {
                Query::new(&dataset)
                    .nearest("vector", &QUERY_VECTOR, 10, 64)
                    .project(&["id"])
                    .with_resolver(resolver.clone())
                    .use_index(use_index)
            })
            .await?;
            if indexed != brute {
                return Err(Error::corrupt(
                    "index",
                    format!("kNN: indexed {indexed:?} != brute force {brute:?}"),
                ));
            }
            Ok(compared + brute.len() as u64)
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
    assert_eq!(report.faults_fired, report.runs, "{report}");
    assert!(report.failed > 0, "{report}");
    assert!(report.rows_checked > 0, "{report}");
}

#[rstest]
#[case::create_bitmap("create index bitmap", Fixture::plain(), create(BITMAP))]
#[case::create_ngram("create index ngram", Fixture::plain(), create(NGRAM))]
#[case::create_ivf_flat("create index ivf_flat", Fixture::plain(), create(IVF_FLAT))]
#[case::optimize_ngram("optimize ngram", Fixture::partly_indexed(NGRAM), optimize(NGRAM))]
#[case::optimize_ivf_flat(
    "optimize ivf_flat",
    Fixture::partly_indexed(IVF_FLAT),
    optimize(IVF_FLAT)
)]
#[case::drop_bitmap("drop index", Fixture::indexed(&[BTREE, BITMAP]), drop(BITMAP.0))]
#[case::maintain("maintain until noop", Fixture::with_history(), maintain_until_noop())]
#[tokio::test]
async fn more_operations_survive_every_fault(
    #[case] name: &str,
    #[case] fixture: Fixture,
    #[case] operation: OperationFn,
) {
    let coverage = Coverage::from_env(SAMPLED_INDICES_PER_KIND);
    let report = run_fault_matrix_verified(
        name,
        RigBackend::Memory,
        fixture.setup(),
        operation,
        queries_equal_brute_force(),
        coverage,
    )
    .await;
    assert_covered(&report);
}

/// The operations do what they say when nothing fails (so a matrix whose
/// "after" state equals its "before" state still tests something).
#[tokio::test]
async fn the_operations_change_the_indices_as_expected() {
    let rig = FaultRig::memory();
    Fixture::indexed(&[BTREE, BITMAP]).setup()(rig.clone())
        .await
        .unwrap();
    let dropped = drop(BITMAP.0)(rig.open_clean().await.unwrap())
        .await
        .unwrap();
    assert!(segments_of(&dropped, BITMAP.0).is_empty());
    assert_eq!(segments_of(&dropped, BTREE.0).len(), 1);
    let err = drop(BITMAP.0)(dropped).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");

    let rig = FaultRig::memory();
    Fixture::partly_indexed(IVF_FLAT).setup()(rig.clone())
        .await
        .unwrap();
    let optimized = optimize(IVF_FLAT)(rig.open_clean().await.unwrap())
        .await
        .unwrap();
    assert_eq!(segments_of(&optimized, IVF_FLAT.0).len(), 2);

    let rig = FaultRig::memory();
    Fixture::with_history().setup()(rig.clone()).await.unwrap();
    let before = rig.open_clean().await.unwrap();
    assert!(refract_reader::has_fri(before.manifest()));
    let fragments_before = before.fragments().len();
    let after = maintain_until_noop()(before).await.unwrap();
    assert!(
        !refract_reader::has_fri(after.manifest()),
        "maintain drains the history"
    );
    assert!(after.fragments().len() < fragments_before);
    let rows = queries_equal_brute_force()(after).await.unwrap();
    assert!(rows > 0);
}
