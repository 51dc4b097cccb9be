//! Concurrency stress: several writers, each on its own thread and runtime,
//! share one dataset (in memory and in a local directory) and run random
//! appends, deletes, bounded compactions (inline and deferred index remap),
//! index builds, stable partitions (by `id` range, so the resulting order is
//! known exactly), `remap_indices` and `trim_fri`; retryable conflicts are
//! retried against the latest version.
//!
//! At the end, every version's rows equal (exactly, in order) the model computed
//! from the committed operations in version order (a partition is checked to
//! keep the multiset and to order its run stably by label), every delete
//! reported the number of rows the model says it deleted, an indexed query
//! through the FRI resolver equals a brute-force scan and the model, and every
//! version is readable.
//!
//! Size: `REFRACT_STRESS_OPS` operations per writer (default 16), seed
//! `REFRACT_STRESS_SEED` (default 1, printed).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use refract_core::{Error, Result};
use refract_index::manage::segments_of;
use refract_index::{create_index, optimize_indices, IndexParams, Query};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::fri::{partition_fragments, PartitionBy, PartitionOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_reader::FriResolver;
use refract_table::cleanup::cleanup_orphans;
use refract_table::testing::{sample_rows, sample_schema};
use refract_table::{Dataset, Operation, WriteOptions};
use rstest::rstest;

const WRITERS: u64 = 3;
const DEFAULT_OPS_PER_WRITER: u64 = 16;
/// Attempts per operation before a retryable conflict fails the test.
const MAX_ATTEMPTS: usize = 50;
/// The filter whose indexed answer is compared with the model (ids 1000..2600000).
const CHECK_FILTER: &str = "id >= 1000 AND id < 2600000";

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What a writer committed, keyed by the version it produced.
#[derive(Debug, Clone)]
enum Committed {
    Append(Vec<i64>),
    Delete {
        modulus: i64,
        residue: i64,
        rows_deleted: u64,
    },
    /// A stable partition of every fragment at its read version by `id`
    /// range: label = number of boundaries <= id.
    Partition {
        boundaries: Vec<i64>,
    },
}

#[derive(Default)]
struct Log {
    by_version: BTreeMap<u64, Committed>,
    ops: u64,
    retries: u64,
    compactions: u64,
    index_builds: u64,
    partitions: u64,
    /// Partitions that committed (a partition of an empty table does not).
    partitions_committed: u64,
    remaps: u64,
    trims: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `op` against the latest version until it succeeds; retries only
/// retryable conflicts.
async fn with_retries<T, F, Fut>(uri: &str, log: &Mutex<Log>, mut op: F) -> T
where
    F: FnMut(Dataset) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    for attempt in 0..MAX_ATTEMPTS {
        let dataset = Dataset::open(uri).await.expect("open latest");
        match op(dataset).await {
            Ok(value) => return value,
            Err(err) if err.is_retryable_conflict() => {
                log.lock().unwrap().retries += 1;
                assert!(attempt + 1 < MAX_ATTEMPTS, "still conflicting: {err}");
            }
            Err(err) => panic!("non-retryable error: {err}"),
        }
    }
    unreachable!("the loop returns or panics")
}

/// How compactions treat indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Remap {
    /// Every compaction remaps indices inline.
    Inline,
    /// Every compaction defers (records FRI transitions).
    Deferred,
    /// Each compaction picks at random.
    Mixed,
}

async fn writer(uri: String, id: u64, seed: u64, ops: u64, remap: Remap, log: Arc<Mutex<Log>>) {
    let mut rng = Rng(seed ^ (id.wrapping_mul(0x1000_0001)));
    for step in 0..ops {
        let choice = rng.below(20);
        match choice {
            0..=6 => {
                let start = (id * 1_000_000 + step * 1_000) as i64;
                let n = 5 + rng.below(40) as usize;
                let per_file = 5 + rng.below(20);
                let version = with_retries(&uri, &log, |mut dataset| async move {
                    let options = WriteOptions {
                        max_rows_per_file: per_file,
                        ..WriteOptions::default()
                    };
                    dataset
                        .append(vec![sample_rows(start, n)], &options)
                        .await?;
                    Ok(dataset.version())
                })
                .await;
                let ids = (start..start + n as i64).collect();
                log.lock()
                    .unwrap()
                    .by_version
                    .insert(version, Committed::Append(ids));
            }
            7..=9 => {
                let modulus = 3 + rng.below(9) as i64;
                let residue = rng.below(modulus as u64) as i64;
                let predicate = format!("id % {modulus} = {residue}");
                let (version, rows_deleted) = with_retries(&uri, &log, |mut dataset| {
                    let predicate = predicate.clone();
                    async move {
                        let result = dataset.delete(&predicate).await?;
                        Ok((dataset.version(), result.rows_deleted))
                    }
                })
                .await;
                if rows_deleted > 0 {
                    log.lock().unwrap().by_version.insert(
                        version,
                        Committed::Delete {
                            modulus,
                            residue,
                            rows_deleted,
                        },
                    );
                }
            }
            10..=13 => {
                let options = CompactionOptions {
                    target_rows_per_fragment: 20 + rng.below(60),
                    defer_index_remap: match remap {
                        Remap::Inline => false,
                        Remap::Deferred => true,
                        Remap::Mixed => rng.below(2) == 0,
                    },
                    max_source_fragments: (rng.below(2) == 0).then(|| 2 + rng.below(3)),
                    num_threads: Some(2),
                    ..CompactionOptions::default()
                };
                with_retries(&uri, &log, |mut dataset| {
                    let options = options.clone();
                    async move {
                        compact_files(&mut dataset, &options, None)
                            .await
                            .map(|_| ())
                    }
                })
                .await;
                log.lock().unwrap().compactions += 1;
            }
            14..=15 => {
                let count = 1 + rng.below(3);
                let mut boundaries: Vec<i64> = (0..count)
                    .map(|_| rng.below(WRITERS * 1_000_000) as i64)
                    .collect();
                boundaries.sort_unstable();
                boundaries.dedup();
                let committed = with_retries(&uri, &log, |mut dataset| {
                    let by = PartitionBy::Range {
                        column: "id".to_string(),
                        boundaries: boundaries.clone(),
                    };
                    async move {
                        let metrics =
                            partition_fragments(&mut dataset, PartitionOptions::new(by)).await?;
                        Ok(metrics.committed_version)
                    }
                })
                .await;
                let mut log = log.lock().unwrap();
                log.partitions += 1;
                if let Some(version) = committed {
                    log.partitions_committed += 1;
                    log.by_version
                        .insert(version, Committed::Partition { boundaries });
                }
            }
            16..=17 => {
                with_retries(&uri, &log, |mut dataset| async move {
                    remap_indices(&mut dataset, RemapOptions::default())
                        .await
                        .map(|_| ())
                })
                .await;
                log.lock().unwrap().remaps += 1;
            }
            18 => {
                with_retries(&uri, &log, |mut dataset| async move {
                    trim_fri(&mut dataset).await.map(|_| ())
                })
                .await;
                log.lock().unwrap().trims += 1;
            }
            _ => {
                with_retries(&uri, &log, |dataset| async move {
                    if segments_of(&dataset, "id_idx").is_empty() {
                        match create_index(
                            &dataset,
                            "id_idx",
                            "id",
                            "btree",
                            &IndexParams::default(),
                        )
                        .await
                        {
                            // Another writer created it first: optimize instead next time.
                            Err(Error::InvalidInput { message })
                                if message.contains("already exists") =>
                            {
                                Ok(())
                            }
                            other => other.map(|_| ()),
                        }
                    } else {
                        optimize_indices(&dataset, "id_idx").await.map(|_| ())
                    }
                })
                .await;
                log.lock().unwrap().index_builds += 1;
            }
        }
        log.lock().unwrap().ops += 1;
    }
}

fn count_under(paths: &[refract_table::io::RelativePath], dir: &str) -> usize {
    paths.iter().filter(|p| p.top_level_dir() == dir).count()
}

fn ids_of(batch: &RecordBatch) -> Vec<i64> {
    batch
        .column_by_name("id")
        .map(|c| c.as_primitive::<Int64Type>().values().to_vec())
        .unwrap_or_default()
}

/// Replays the committed operations in version order; returns the rows of every version.
async fn model(latest: &Dataset, log: &Log) -> BTreeMap<u64, Vec<i64>> {
    let mut states: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    states.insert(1, Vec::new());
    for version in 2..=latest.version() {
        let dataset = latest.checkout_version(version).await.expect("checkout");
        let txn = dataset
            .manifest()
            .transaction
            .clone()
            .expect("every version after 1 records its transaction");
        let mut rows = states[&(version - 1)].clone();
        match (&txn.operation, log.by_version.get(&version)) {
            (Operation::Append { .. }, Some(Committed::Append(ids))) => rows.extend(ids),
            (
                Operation::Delete { .. },
                Some(Committed::Delete {
                    modulus,
                    residue,
                    rows_deleted,
                }),
            ) => {
                // A delete removes the matching rows it saw at its read version.
                // (A concurrent delete may have removed some of them already.)
                let matched: HashSet<i64> = states[&txn.read_version]
                    .iter()
                    .copied()
                    .filter(|id| id % modulus == *residue)
                    .collect();
                assert_eq!(
                    matched.len() as u64,
                    *rows_deleted,
                    "version {version}: rows deleted"
                );
                rows.retain(|id| !matched.contains(id));
            }
            (Operation::Partition { .. }, Some(Committed::Partition { boundaries })) => {
                rows = partitioned(&rows, &states[&txn.read_version], boundaries);
            }
            (Operation::Rewrite { .. } | Operation::CreateIndex { .. }, None) => {}
            (operation, logged) => {
                panic!(
                    "version {version}: {} committed, writer logged {logged:?}",
                    operation.name()
                )
            }
        }
        states.insert(version, rows);
    }
    states
}

/// The rows after a stable partition by `id` range of every fragment of the
/// read version: the rows that existed then (still in `rows`, in order) move
/// into label order, stably; rows appended since (at the end) stay put.
fn partitioned(rows: &[i64], at_read_version: &[i64], boundaries: &[i64]) -> Vec<i64> {
    let sources: HashSet<i64> = at_read_version.iter().copied().collect();
    let label = |id: &i64| boundaries.iter().filter(|b| **b <= *id).count();
    let (mut moved, kept): (Vec<i64>, Vec<i64>) =
        rows.iter().copied().partition(|id| sources.contains(id));
    let source_count = moved.len();
    assert!(
        rows[..source_count].iter().all(|id| sources.contains(id)),
        "rows appended after the partition's read version precede its sources"
    );
    moved.sort_by_key(label); // stable: keeps the order within a label
    moved.extend(kept);
    moved
}

/// Every version scans to exactly its model rows, in order, and an indexed
/// query through the FRI resolver equals a brute-force scan and the model;
/// returns the rows compared.
async fn check_every_version(latest: &Dataset, states: &BTreeMap<u64, Vec<i64>>) -> usize {
    let mut rows_checked = 0usize;
    for (version, expected) in states {
        let dataset = latest.checkout_version(*version).await.expect("checkout");
        let batch = dataset
            .scan()
            .project(&["id"])
            .try_into_batch()
            .await
            .expect("scan");
        assert_eq!(ids_of(&batch), *expected, "version {version}");
        rows_checked += expected.len();
        let query = |use_index: bool| {
            Query::new(&dataset)
                .filter(CHECK_FILTER)
                .unwrap()
                .project(&["id"])
                .with_resolver(Arc::new(FriResolver::default()))
                .use_index(use_index)
                .execute()
        };
        let mut brute = ids_of(&query(false).await.expect("brute-force query").batch);
        brute.sort_unstable();
        let mut modelled: Vec<i64> = expected
            .iter()
            .copied()
            .filter(|id| (1000..2_600_000).contains(id))
            .collect();
        modelled.sort_unstable();
        assert_eq!(brute, modelled, "version {version}: brute-force query");
        rows_checked += modelled.len();
        let indexed = query(true)
            .await
            .unwrap_or_else(|err| panic!("version {version}: indexed query: {err}"));
        let mut indexed_ids = ids_of(&indexed.batch);
        indexed_ids.sort_unstable();
        assert_eq!(indexed_ids, modelled, "version {version}: indexed query");
        rows_checked += modelled.len();
    }
    rows_checked
}

async fn run_stress(uri: String, remap: Remap) {
    let ops = env_u64("REFRACT_STRESS_OPS", DEFAULT_OPS_PER_WRITER);
    let seed = env_u64("REFRACT_STRESS_SEED", 1);
    let base = Dataset::create(&uri, sample_schema(), Default::default())
        .await
        .expect("create");
    let log = Arc::new(Mutex::new(Log::default()));
    std::thread::scope(|scope| {
        for id in 0..WRITERS {
            let (uri, log) = (uri.clone(), log.clone());
            scope.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(writer(uri, id, seed, ops, remap, log));
            });
        }
    });
    let log = Arc::try_unwrap(log)
        .ok()
        .expect("writers done")
        .into_inner()
        .unwrap();
    let latest = base.checkout_latest().await.expect("latest");
    let states = model(&latest, &log).await;
    let mut rows_checked = check_every_version(&latest, &states).await;
    // Nothing is in flight now: every unreferenced file may go, and every
    // version must read exactly the same afterwards.
    let cleanup = cleanup_orphans(&latest, Duration::ZERO)
        .await
        .expect("cleanup");
    // A fresh handle (new session and store): no cached deletion vector or
    // file metadata can hide a file the cleanup removed.
    let fresh = Dataset::open(&uri).await.expect("reopen");
    rows_checked += check_every_version(&fresh, &states).await;
    println!(
        "stress {uri} ({remap:?}): seed {seed}, {} writers x {ops} ops = {} ops ({} compactions, {} index builds, {} partitions ({} committed), {} remaps, {} trims), {} retries, {} versions, {rows_checked} rows checked, {} live rows",
        WRITERS,
        log.ops,
        log.compactions,
        log.index_builds,
        log.partitions,
        log.partitions_committed,
        log.remaps,
        log.trims,
        log.retries,
        latest.version(),
        states[&latest.version()].len()
    );
    println!(
        "stress {uri}: cleanup deleted {} orphans ({} data, {} deletion, {} index, {} row map), kept {} referenced files",
        cleanup.deleted.len(),
        count_under(&cleanup.deleted, "data"),
        count_under(&cleanup.deleted, "_deletions"),
        count_under(&cleanup.deleted, "_indices"),
        count_under(&cleanup.deleted, "_fri"),
        cleanup.kept_referenced
    );
}

#[rstest]
#[case::memory_inline(true, Remap::Inline)]
#[case::memory_deferred(true, Remap::Deferred)]
#[case::local_inline(false, Remap::Inline)]
#[case::local_deferred(false, Remap::Deferred)]
#[case::memory_mixed(true, Remap::Mixed)]
#[case::local_mixed(false, Remap::Mixed)]
#[tokio::test]
async fn concurrent_maintenance_loses_nothing(#[case] memory: bool, #[case] remap: Remap) {
    let dir = tempfile::tempdir().unwrap();
    let uri = if memory {
        format!("memory://stress-{}", uuid::Uuid::new_v4())
    } else {
        dir.path().join("table").to_str().unwrap().to_string()
    };
    run_stress(uri, remap).await;
}

/// The smallest sequence the stress run found: a deferred compaction records a
/// transition; a later inline compaction of the fragments it produced must
/// still commit (remapping inline or recording its own transition).
#[tokio::test]
async fn inline_compaction_after_a_deferred_one_commits() {
    let mut dataset = btree_indexed_table("mix", &[(0, 60)]).await;
    let deferred = CompactionOptions {
        target_rows_per_fragment: 25,
        defer_index_remap: true,
        ..CompactionOptions::default()
    };
    compact_files(&mut dataset, &deferred, None).await.unwrap();
    dataset.delete("id % 2 = 0").await.unwrap();
    let inline = CompactionOptions {
        target_rows_per_fragment: 100,
        ..CompactionOptions::default()
    };
    compact_files(&mut dataset, &inline, None).await.unwrap();
    let ids = ids_of(
        &dataset
            .scan()
            .project(&["id"])
            .try_into_batch()
            .await
            .unwrap(),
    );
    assert_eq!(ids, (0..60).filter(|id| id % 2 == 1).collect::<Vec<i64>>());
}

/// A deferred compaction whose sources lose a row to a concurrent delete
/// between execute and commit: the rewrite is rebased over the delete and its
/// FRI transition must describe the rebased rewrite.
#[tokio::test]
async fn deferred_compaction_rebased_over_a_concurrent_delete_commits() {
    let mut dataset = btree_indexed_table("race", &[(0, 60)]).await;
    dataset.delete("id % 7 = 5").await.unwrap();
    let deferred = CompactionOptions {
        target_rows_per_fragment: 25,
        defer_index_remap: true,
        ..CompactionOptions::default()
    };
    let plan = refract_optimize::compaction::plan_compaction(&dataset, &deferred).unwrap();
    let mut results = Vec::new();
    for task in &plan.tasks {
        results.push(task.execute(&dataset).await.unwrap());
    }
    let mut deleter = dataset.clone();
    deleter.delete("id = 3").await.unwrap();
    let (committed, _) = refract_optimize::compaction::commit_compaction(&dataset, results)
        .await
        .unwrap();
    let ids = ids_of(
        &committed
            .scan()
            .project(&["id"])
            .try_into_batch()
            .await
            .unwrap(),
    );
    assert_eq!(
        ids,
        (0..60)
            .filter(|id| *id != 3 && id % 7 != 5)
            .collect::<Vec<i64>>()
    );
}

/// A range partition moves the rows of its run into label order, keeping the
/// order within each label (the model `partitioned` relies on exactly this).
#[tokio::test]
async fn a_range_partition_orders_its_run_stably_by_label() {
    let mut dataset = btree_indexed_table("partition", &[(40, 20), (0, 40)]).await;
    dataset.delete("id % 9 = 4").await.unwrap();
    let before = ids_of(
        &dataset
            .scan()
            .project(&["id"])
            .try_into_batch()
            .await
            .unwrap(),
    );
    let boundaries = vec![30, 50];
    let by = PartitionBy::Range {
        column: "id".to_string(),
        boundaries: boundaries.clone(),
    };
    let metrics = partition_fragments(&mut dataset, PartitionOptions::new(by))
        .await
        .unwrap();
    assert_eq!(metrics.fragments_added, 3);
    let after = ids_of(
        &dataset
            .scan()
            .project(&["id"])
            .try_into_batch()
            .await
            .unwrap(),
    );
    // Label 0: ids < 30; label 1: 30..50 in their old order (40..50 came
    // first); label 2: ids >= 50.
    let expected: Vec<i64> = [0..30, 40..50, 30..40, 50..60]
        .into_iter()
        .flatten()
        .filter(|id| id % 9 != 4)
        .collect();
    assert_eq!(after, expected);
    assert_eq!(partitioned(&before, &before, &boundaries), expected);
    let indexed = Query::new(&dataset)
        .filter("id >= 25 AND id < 45")
        .unwrap()
        .project(&["id"])
        .with_resolver(Arc::new(FriResolver::default()))
        .execute()
        .await
        .unwrap();
    let mut got = ids_of(&indexed.batch);
    got.sort_unstable();
    assert_eq!(got, (25..45).filter(|id| id % 9 != 4).collect::<Vec<i64>>());
}

/// `trim_fri` drops transitions from the latest ledger but leaves their row
/// maps on storage: a version from before the trim still translates through
/// them, so its indexed queries keep answering exactly. Once retention
/// expires every version that references a row map, it is deleted.
#[tokio::test]
async fn indexed_queries_at_a_version_before_a_trim_still_translate() {
    let mut dataset = btree_indexed_table("trim", &[(0, 60)]).await;
    let uri = dataset.uri().to_string();
    let by = PartitionBy::Range {
        column: "id".to_string(),
        boundaries: vec![20, 40],
    };
    partition_fragments(&mut dataset, PartitionOptions::new(by))
        .await
        .unwrap();
    let partitioned_version = dataset.version();
    remap_indices(&mut dataset, RemapOptions::default())
        .await
        .unwrap();
    let trim = trim_fri(&mut dataset).await.unwrap();
    assert_eq!(trim.row_maps_released.len(), 1, "{trim:?}");
    let old = Dataset::open_with(
        &uri,
        refract_table::OpenOptions {
            version: Some(partitioned_version),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let indexed = Query::new(&old)
        .filter("id >= 7 AND id < 53")
        .unwrap()
        .project(&["id"])
        .with_resolver(Arc::new(FriResolver::default()))
        .index_use(refract_index::IndexUse::Always)
        .execute()
        .await
        .unwrap();
    let mut got = ids_of(&indexed.batch);
    got.sort_unstable();
    assert_eq!(got, (7..53).collect::<Vec<i64>>());
    assert_eq!(indexed.explain.path, refract_index::AccessPath::Index);

    // Retention: once no retained version references the row map, it goes.
    let policy = refract_table::RetentionPolicy {
        older_than: None,
        keep_last: Some(1),
        ..Default::default()
    };
    let report = refract_table::cleanup_old_versions(&dataset, &policy)
        .await
        .unwrap();
    let removed: Vec<&str> = report.removed.iter().map(|f| f.path.as_str()).collect();
    assert!(
        removed.contains(&trim.row_maps_released[0].as_str()),
        "{removed:?}"
    );
    let row_map = refract_table::io::RelativePath::parse(&trim.row_maps_released[0]).unwrap();
    assert!(matches!(
        dataset.store().head(&row_map).await,
        Err(Error::NotFound { .. })
    ));
    let fresh = Dataset::open(&uri).await.unwrap();
    assert!(matches!(
        fresh.checkout_version(partitioned_version).await,
        Err(Error::NotFound { .. })
    ));
}

/// A fresh in-memory table of 10-row fragments holding `runs` of
/// `sample_rows(start, rows)` appended in order, with a btree on `id`.
async fn btree_indexed_table(name: &str, runs: &[(i64, usize)]) -> Dataset {
    let uri = format!("memory://{name}-{}", uuid::Uuid::new_v4());
    let mut dataset = Dataset::create(&uri, sample_schema(), Default::default())
        .await
        .unwrap();
    let ten = WriteOptions {
        max_rows_per_file: 10,
        ..WriteOptions::default()
    };
    for (start, rows) in runs {
        dataset
            .append(vec![sample_rows(*start, *rows)], &ten)
            .await
            .unwrap();
    }
    create_index(&dataset, "id_idx", "id", "btree", &IndexParams::default())
        .await
        .unwrap()
}
