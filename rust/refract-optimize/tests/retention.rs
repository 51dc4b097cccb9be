//! Version retention under maintenance: rounds of append, delete, indexing,
//! deferred compaction, stable partition, remap, trim and
//! `cleanup_old_versions`, checking after every step that each retained
//! version (and tag) scans and queries exactly as it did when it was
//! written, that the bytes stored stop growing once the window is steady,
//! that cleanup is crash-safe under every failing list, read and delete,
//! and that a reader pinned to a retained version is never disturbed.

mod support;
use support::remap as common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use refract_core::Error;
use refract_index::{optimize_indices, IndexRegistry, Query};
use refract_optimize::compaction::CompactionOptions;
use refract_optimize::maintain::{maintain, MaintainOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_optimize::trim::trim_fri;
use refract_reader::FriResolver;
use refract_table::io::RelativePath;
use refract_table::io::{CallKind, FaultMode};
use refract_table::testing::FaultRig;
use refract_table::{cleanup_old_versions, create_tag, Dataset, RetentionPolicy, RetentionReport};
use support::fri::{fragment_ids, rows};
use support::{scan_ids, write_options};

/// What a version returned when it was written: its scan, in order, and
/// the ids each filter selects through the indices (FRI included).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    scan: Vec<i64>,
    queries: Vec<Vec<i64>>,
}

async fn seen(dataset: &Dataset) -> Seen {
    let mut queries = Vec::new();
    for filter in FILTERS {
        let result = Query::new(dataset)
            .filter(filter)
            .unwrap()
            .project(&["id"])
            .with_resolver(Arc::new(FriResolver::default()))
            .with_registry(Arc::new(IndexRegistry::with_builtins()))
            .use_index(true)
            .execute()
            .await
            .unwrap();
        let mut found = ids(&result.batch);
        found.sort_unstable();
        queries.push(found);
    }
    Seen {
        scan: scan_ids(dataset).await,
        queries,
    }
}

/// Every stored byte under the dataset root.
async fn stored_bytes(dataset: &Dataset) -> u64 {
    let mut total = 0;
    for dir in [
        "_versions",
        "data",
        "_deletions",
        "_indices",
        "_fri",
        "_refs",
    ] {
        let listed = dataset
            .store()
            .list(&RelativePath::parse(dir).unwrap())
            .await
            .unwrap();
        total += listed.iter().map(|o| o.size).sum::<u64>();
    }
    total
}

/// How many files each directory under the root holds (runs on fresh
/// histories differ in ids and timestamps, so in names and a few bytes).
async fn stored_counts(dataset: &Dataset) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for dir in [
        "_versions",
        "_transactions",
        "data",
        "_deletions",
        "_indices",
        "_fri",
        "_refs",
    ] {
        let listed = dataset
            .store()
            .list(&RelativePath::parse(dir).unwrap())
            .await
            .unwrap();
        counts.insert(dir, listed.len());
    }
    counts
}

fn keep_last(n: u64) -> RetentionPolicy {
    RetentionPolicy {
        older_than: None,
        keep_last: Some(n),
        ..RetentionPolicy::default()
    }
}

/// Every listed version and every tag reads as recorded.
async fn assert_history_intact(dataset: &Dataset, history: &BTreeMap<u64, Seen>) {
    let versions: Vec<u64> = dataset
        .versions()
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    for version in versions {
        let old = dataset.checkout_version(version).await.unwrap();
        let recorded = history.get(&version).unwrap_or_else(|| {
            panic!("version {version} was never recorded: {:?}", history.keys())
        });
        assert_eq!(&seen(&old).await, recorded, "version {version}");
    }
    for (tag, version) in refract_table::list_tags(dataset).await.unwrap() {
        let tagged = dataset.checkout_tag(&tag).await.unwrap();
        assert_eq!(&seen(&tagged).await, &history[&version], "tag {tag}");
    }
}

/// Records every version committed since the last recorded one (before
/// any cleanup could touch it).
async fn record_new(dataset: &Dataset, history: &mut BTreeMap<u64, Seen>) {
    let first = history.keys().next_back().map_or(1, |v| v + 1);
    for version in first..=dataset.version() {
        let committed = dataset.checkout_version(version).await.unwrap();
        history.insert(version, seen(&committed).await);
    }
}

/// One round of steady maintenance: as many rows appended as deleted, new
/// data indexed, a deferred compaction, a partition every third round, the
/// remap and trim. Records every version it commits.
async fn steady_round(dataset: &mut Dataset, round: i64, history: &mut BTreeMap<u64, Seen>) {
    let start = 600 + round * 100;
    dataset
        .append(vec![rows(start, 100)], &write_options(50))
        .await
        .unwrap();
    record_new(dataset, history).await;
    dataset
        .delete(&format!("id < {}", (round + 1) * 100))
        .await
        .unwrap();
    record_new(dataset, history).await;
    for (name, _, _) in INDICES {
        *dataset = optimize_indices(dataset, name).await.unwrap();
    }
    record_new(dataset, history).await;
    let compaction = CompactionOptions {
        target_rows_per_fragment: 250,
        ..CompactionOptions::default()
    };
    deferred_compaction(dataset, &compaction).await;
    record_new(dataset, history).await;
    if round % 3 == 2 {
        let ids = fragment_ids(dataset);
        partition(dataset, Some(ids[ids.len() - 2..].to_vec()), 2).await;
        record_new(dataset, history).await;
    }
    remap_indices(dataset, RemapOptions::default())
        .await
        .unwrap();
    record_new(dataset, history).await;
    trim_fri(dataset).await.unwrap();
    record_new(dataset, history).await;
}

#[tokio::test]
async fn retained_versions_read_as_written_and_storage_stops_growing() {
    let mut dataset = indexed_table("retention-loop", 600, 100).await;
    let mut history: BTreeMap<u64, Seen> = BTreeMap::new();
    record_new(&dataset, &mut history).await;
    let mut bytes = Vec::new();
    let mut freed = 0;
    for round in 0..9 {
        steady_round(&mut dataset, round, &mut history).await;
        if round == 1 {
            create_tag(&dataset, "round-1", dataset.version())
                .await
                .unwrap();
        }
        let report = cleanup_old_versions(&dataset, &keep_last(3)).await.unwrap();
        let latest = dataset.version();
        let mut expected: std::collections::BTreeSet<u64> = (latest - 2..=latest).collect();
        if round >= 1 {
            expected.insert(
                refract_table::tag_version(&dataset, "round-1")
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(
            report.retained_versions,
            expected.into_iter().collect::<Vec<_>>(),
            "round {round}"
        );
        freed += report.bytes_freed;
        assert_history_intact(&dataset, &history).await;
        assert_queries_match(&dataset, Arc::new(IndexRegistry::with_builtins())).await;
        bytes.push(stored_bytes(&dataset).await);
    }
    // Execute until no-op: nothing is left to expire.
    let again = cleanup_old_versions(&dataset, &keep_last(3)).await.unwrap();
    assert!(again.is_noop(), "{again:?}");
    // Live rows are constant, so once the window is full the stored bytes
    // stop growing: the last rounds stay within the range of rounds 3-5.
    let window_max = bytes[3..6].iter().copied().max().unwrap();
    eprintln!("stored bytes per round: {bytes:?}; freed {freed}");
    assert!(
        bytes[6..]
            .iter()
            .all(|b| *b <= window_max + window_max / 10),
        "bytes keep growing: {bytes:?}"
    );
    assert!(freed > 0);
}

#[tokio::test]
async fn maintain_expires_old_versions_after_its_rounds() {
    let mut dataset = indexed_table("retention-maintain", 600, 100).await;
    dataset
        .append(vec![rows(600, 200)], &write_options(50))
        .await
        .unwrap();
    dataset.delete("id < 100").await.unwrap();
    let before = seen(&dataset).await;
    let report = maintain(
        &mut dataset,
        MaintainOptions {
            compaction: Some(CompactionOptions {
                target_rows_per_fragment: 250,
                defer_index_remap: true,
                ..CompactionOptions::default()
            }),
            until_noop: true,
            retention: Some(keep_last(1)),
            ..MaintainOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(report.converged);
    let retention = report.retention.unwrap();
    assert_eq!(retention.retained_versions, vec![report.final_version]);
    assert_eq!(
        retention.expired_versions,
        (1..report.final_version).collect::<Vec<_>>()
    );
    assert!(retention.bytes_freed > 0);
    let fresh = Dataset::open(dataset.uri()).await.unwrap();
    assert_eq!(seen(&fresh).await, before);
    // A bad policy is refused before any round runs.
    let version = dataset.version();
    let err = maintain(
        &mut dataset,
        MaintainOptions {
            retention: Some(keep_last(0)),
            ..MaintainOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert_eq!(dataset.checkout_latest().await.unwrap().version(), version);
}

/// A table with history on `rig`'s faulty store: indices, a deferred
/// compaction (FRI), a partition (row map), a remap and a trim, then more
/// writes, so expiring all but the last two versions removes every kind of
/// file.
async fn history_on(rig: &FaultRig) -> Dataset {
    let mut dataset = Dataset::create(rig.uri(), support::fri::schema(), rig.faulty_options())
        .await
        .unwrap();
    dataset
        .append(vec![rows(0, 400)], &write_options(100))
        .await
        .unwrap();
    for (name, column, index_type) in INDICES {
        dataset = add_index(&dataset, name, column, index_type).await;
    }
    let mut history = BTreeMap::new();
    steady_round(&mut dataset, 2, &mut history).await;
    dataset
        .append(vec![rows(10_000, 50)], &write_options(50))
        .await
        .unwrap();
    dataset.delete("id = 150").await.unwrap();
    dataset
}

#[tokio::test]
async fn a_failing_cleanup_leaves_retained_versions_readable_and_a_rerun_finishes() {
    let policy = keep_last(2);
    // The fault-free run: what a finished cleanup leaves, and how many calls
    // of each kind it makes.
    let rig = FaultRig::memory();
    let dataset = cold(&rig, history_on(&rig).await).await;
    let retained_seen = retained(&dataset, &policy).await;
    let dataset = cold(&rig, dataset).await;
    let clean = cleanup_old_versions(&dataset, &policy).await.unwrap();
    let kinds = [
        CallKind::List,
        CallKind::Get,
        CallKind::Head,
        CallKind::Delete,
    ];
    let calls: Vec<u64> = kinds.iter().map(|k| rig.fault.calls(*k)).collect();
    assert!(calls[3] as usize >= clean.removed.len(), "{calls:?}");
    let finished = stored_counts(&dataset).await;
    let mut failures = 0;
    for (kind, count) in kinds.iter().zip(&calls) {
        for n in 0..*count {
            for mode in [FaultMode::Clean, FaultMode::Ambiguous] {
                let rig = FaultRig::memory();
                let dataset = cold(&rig, history_on(&rig).await).await;
                rig.fault.fail_nth(*kind, n, mode);
                let outcome = cleanup_old_versions(&dataset, &policy).await;
                rig.fault.reset();
                let case = format!("{mode:?} fault on {kind:?} #{n}");
                if let Err(err) = &outcome {
                    failures += 1;
                    let line = err.to_string();
                    assert!(!line.contains('\n'), "{case}: {line}");
                    assert!(matches!(err, Error::External { .. }), "{case}: {line}");
                }
                let fresh = rig.open_clean().await.unwrap();
                assert_eq!(retained(&fresh, &policy).await, retained_seen, "{case}");
                let rerun = cleanup_old_versions(&fresh, &policy).await.unwrap();
                if outcome.is_ok() {
                    assert!(rerun.is_noop(), "{case}: {rerun:?}");
                }
                assert!(
                    cleanup_old_versions(&fresh, &policy)
                        .await
                        .unwrap()
                        .is_noop(),
                    "{case}"
                );
                assert_eq!(stored_counts(&fresh).await, finished, "{case}");
            }
        }
    }
    eprintln!("calls {calls:?} of {kinds:?}: {failures} failed runs");
    // Every list, read and delete can fail.
    assert!(calls[1] > 0, "the cleanup reads manifests: {calls:?}");
    assert!(
        failures >= 2 * (calls[0] + calls[1] + calls[3]),
        "{failures} {calls:?}"
    );
}

/// `dataset` reopened through the faulty store with a cold cache (so the
/// cleanup reads every manifest and ledger itself), fault counters reset.
async fn cold(rig: &FaultRig, dataset: Dataset) -> Dataset {
    drop(dataset);
    let fresh = Dataset::open_with(rig.uri(), rig.faulty_options())
        .await
        .unwrap();
    rig.fault.reset();
    fresh
}

/// Each version the policy keeps, read.
async fn retained(dataset: &Dataset, policy: &RetentionPolicy) -> Vec<(u64, Seen)> {
    let dry = RetentionPolicy {
        dry_run: true,
        ..policy.clone()
    };
    let report: RetentionReport = cleanup_old_versions(dataset, &dry).await.unwrap();
    let mut out = Vec::new();
    for version in report.retained_versions {
        let old = dataset.checkout_version(version).await.unwrap();
        out.push((version, seen(&old).await));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_pinned_to_a_tagged_version_is_never_disturbed() {
    let mut dataset = indexed_table("retention-pinned", 600, 100).await;
    create_tag(&dataset, "pinned", dataset.version())
        .await
        .unwrap();
    let pinned = dataset.clone();
    let expected = seen(&pinned).await;
    let reader = tokio::spawn(async move {
        let mut reads = 0;
        for _ in 0..30 {
            assert_eq!(seen(&pinned).await, expected);
            reads += 1;
            tokio::task::yield_now().await;
        }
        reads
    });
    let mut history = BTreeMap::new();
    for round in 0..4 {
        steady_round(&mut dataset, round, &mut history).await;
        cleanup_old_versions(&dataset, &keep_last(1)).await.unwrap();
    }
    assert_eq!(reader.await.unwrap(), 30);
    let versions: Vec<u64> = dataset
        .versions()
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(
        versions.len(),
        2,
        "the tagged version and the latest: {versions:?}"
    );
}
