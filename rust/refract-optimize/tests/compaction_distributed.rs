//! Distributed execution (plan → execute anywhere → commit in any order) and
//! concurrency: appends and deletes racing a compaction, overlapping rewrites.

mod support;
use support::compaction as common;

use common::{batch, dataset_with_fragments, fragment_sizes};
use refract_core::Error;
use refract_optimize::compaction::{
    commit_compaction, plan_compaction, plan_from_json, CompactionOptions, CompactionPlan,
    RewriteResult,
};
use refract_table::dataset::{Dataset, WriteOptions};
use refract_table::io::RequestStats;
use support::scan_ids;

fn options(target: u64) -> CompactionOptions {
    CompactionOptions {
        target_rows_per_fragment: target,
        ..CompactionOptions::default()
    }
}

#[tokio::test]
async fn tasks_committed_last_first_keep_order() {
    // Three bins separated by big fragments → three tasks.
    let dataset = dataset_with_fragments(&[10, 10, 500, 10, 10, 500, 10, 10]).await;
    let expected = scan_ids(&dataset).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    assert_eq!(plan.tasks.len(), 3);
    // The plan survives a JSON round trip, as it would between machines.
    let plan = plan_from_json(&serde_json::to_string(&plan).unwrap()).unwrap();
    let mut results = Vec::new();
    for task in &plan.tasks {
        let worker = Dataset::open(dataset.uri()).await.unwrap();
        let result = task.execute(&worker).await.unwrap();
        let text = serde_json::to_string(&result).unwrap();
        results.push(serde_json::from_str::<RewriteResult>(&text).unwrap());
    }
    // Commit the last task alone first, then the others in reverse order.
    let last = results.pop().unwrap();
    let (after_last, metrics) = commit_compaction(&dataset, vec![last]).await.unwrap();
    assert_eq!(metrics.fragments_removed, 2);
    assert_eq!(scan_ids(&after_last).await, expected);
    results.reverse();
    let (after_all, metrics) = commit_compaction(&after_last, results).await.unwrap();
    assert_eq!(metrics.fragments_removed, 4);
    assert_eq!(metrics.fragments_added, 2);
    assert_eq!(scan_ids(&after_all).await, expected);
    assert_eq!(fragment_sizes(&after_all), vec![20, 500, 20, 500, 20]);
    // Ids are fresh: never reused, above every earlier id.
    let max_before = dataset.manifest().max_fragment_id.unwrap();
    let new_ids: Vec<u64> = after_all
        .fragments()
        .iter()
        .filter(|f| f.physical_rows == 20)
        .map(|f| f.id)
        .collect();
    assert!(new_ids.iter().all(|id| *id > max_before), "{new_ids:?}");
}

#[tokio::test]
async fn concurrent_append_lands_with_the_compaction() {
    let dataset = dataset_with_fragments(&[10, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    let results = vec![plan.tasks[0].execute(&dataset).await.unwrap()];
    let mut other = Dataset::open(dataset.uri()).await.unwrap();
    other
        .append(vec![batch(30, 5)], &WriteOptions::default())
        .await
        .unwrap();
    let (committed, _) = commit_compaction(&dataset, results).await.unwrap();
    assert_eq!(scan_ids(&committed).await, (0..35).collect::<Vec<i64>>());
    assert_eq!(fragment_sizes(&committed), vec![30, 5]);
}

#[tokio::test]
async fn concurrent_delete_of_rewritten_rows_is_translated_not_lost() {
    let dataset = dataset_with_fragments(&[10, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    let results = vec![plan.tasks[0].execute(&dataset).await.unwrap()];
    let mut other = Dataset::open(dataset.uri()).await.unwrap();
    other.delete("id = 3 OR id = 17 OR id = 29").await.unwrap();
    let (committed, _) = commit_compaction(&dataset, results).await.unwrap();
    let expected: Vec<i64> = (0..30).filter(|id| ![3, 17, 29].contains(id)).collect();
    assert_eq!(scan_ids(&committed).await, expected);
    assert_eq!(committed.count_rows(None).await.unwrap(), 27);
    assert_eq!(committed.fragments().len(), 1);
    assert_eq!(committed.fragments()[0].num_deleted_rows(), 3);
}

#[tokio::test]
async fn concurrent_delete_removing_a_whole_source_fragment_is_translated() {
    let dataset = dataset_with_fragments(&[10, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    let results = vec![plan.tasks[0].execute(&dataset).await.unwrap()];
    let mut other = Dataset::open(dataset.uri()).await.unwrap();
    other.delete("id >= 10 AND id < 20").await.unwrap();
    let (committed, _) = commit_compaction(&dataset, results).await.unwrap();
    let expected: Vec<i64> = (0..30).filter(|id| !(10..20).contains(id)).collect();
    assert_eq!(scan_ids(&committed).await, expected);
}

#[tokio::test]
async fn overlapping_rewrites_second_gets_a_retryable_conflict() {
    let dataset = dataset_with_fragments(&[10, 10, 10]).await;
    let plan = plan_compaction(&dataset, &options(100)).unwrap();
    let first = plan.tasks[0].execute(&dataset).await.unwrap();
    let second = plan.tasks[0].execute(&dataset).await.unwrap();
    let (committed, _) = commit_compaction(&dataset, vec![first]).await.unwrap();
    let err = commit_compaction(&dataset, vec![second])
        .await
        .err()
        .unwrap();
    assert!(err.is_retryable_conflict(), "{err}");
    assert!(matches!(err, Error::Conflict { .. }));
    let latest = committed.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), committed.version());
    assert_eq!(scan_ids(&latest).await, (0..30).collect::<Vec<i64>>());
}

#[tokio::test]
async fn invalid_options_are_rejected_naming_the_option() {
    let dataset = dataset_with_fragments(&[10]).await;
    let bad = CompactionOptions {
        max_source_fragments: Some(0),
        ..CompactionOptions::default()
    };
    match plan_compaction(&dataset, &bad) {
        Err(Error::InvalidInput { message }) => {
            assert!(message.contains("max_source_fragments"), "{message}")
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[tokio::test]
async fn deferred_rewrite_over_a_delete_that_removed_a_source_records_a_valid_transition() {
    use std::sync::Arc;

    use arrow_array::{Array, Int64Array};
    use refract_index::manage::create_index;
    use refract_index::query::Query;
    use refract_index::types::IndexParams;
    use refract_reader::FriResolver;

    let dataset = dataset_with_fragments(&[10, 10, 10]).await;
    let dataset = create_index(&dataset, "id_btree", "id", "btree", &IndexParams::default())
        .await
        .unwrap();
    let options = CompactionOptions {
        target_rows_per_fragment: 100,
        defer_index_remap: true,
        ..CompactionOptions::default()
    };
    let plan = plan_compaction(&dataset, &options).unwrap();
    let results = vec![plan.tasks[0].execute(&dataset).await.unwrap()];
    let mut other = Dataset::open(dataset.uri()).await.unwrap();
    other
        .delete("(id >= 10 AND id < 20) OR id = 25")
        .await
        .unwrap();
    let (committed, _) = commit_compaction(&dataset, results).await.unwrap();
    let expected: Vec<i64> = (0..30)
        .filter(|id| !(10..20).contains(id) && *id != 25)
        .collect();
    assert_eq!(scan_ids(&committed).await, expected);
    for filter in ["id >= 0", "id = 25", "id = 15", "id = 26"] {
        let indexed = Query::new(&committed)
            .with_resolver(Arc::new(FriResolver::default()))
            .filter(filter)
            .unwrap()
            .project(&["id"])
            .index_use(refract_index::IndexUse::Always)
            .execute()
            .await
            .unwrap();
        let ids = indexed.batch.column_by_name("id").unwrap();
        let ids = ids.as_any().downcast_ref::<Int64Array>().unwrap();
        let got: Vec<i64> = (0..ids.len()).map(|i| ids.value(i)).collect();
        let want: Vec<i64> = match filter {
            "id >= 0" => expected.clone(),
            "id = 26" => vec![26],
            _ => vec![],
        };
        assert_eq!(got, want, "filter {filter}");
        assert!(
            indexed.explain.index.is_some(),
            "the segment must still serve through the FRI"
        );
    }
}

#[tokio::test]
async fn compaction_can_run_on_a_spawned_task() {
    let dataset = dataset_with_fragments(&[10, 10, 10]).await;
    let handle = tokio::spawn(async move {
        let mut dataset = dataset;
        let metrics =
            refract_optimize::compaction::compact_files(&mut dataset, &options(100), None)
                .await
                .unwrap();
        (metrics, scan_ids(&dataset).await)
    });
    let (metrics, ids) = handle.await.unwrap();
    assert_eq!(metrics.fragments_removed, 3);
    assert_eq!(ids, (0..30).collect::<Vec<i64>>());
}

/// A table of `2 * tasks` one-row fragments and its plan of `tasks`
/// two-fragment compactions.
async fn one_row_fragments(tasks: u64) -> (Dataset, CompactionPlan) {
    let uri = support::memory_uri("one-row-fragments");
    let mut dataset = Dataset::create(&uri, common::schema(), Default::default())
        .await
        .unwrap();
    dataset
        .append(vec![batch(0, 2 * tasks)], &support::write_options(1))
        .await
        .unwrap();
    let plan = plan_compaction(&dataset, &options(2)).unwrap();
    assert_eq!(plan.tasks.len() as u64, tasks);
    (dataset, plan)
}

/// Requests of one commit of `tasks` two-fragment results on a table of
/// `2 * tasks` one-row fragments (from a handle at the read version).
async fn commit_requests(tasks: u64) -> RequestStats {
    let (dataset, plan) = one_row_fragments(tasks).await;
    let mut results = Vec::new();
    for task in &plan.tasks {
        results.push(task.execute(&dataset).await.unwrap());
    }
    dataset.store().reset_stats();
    let (after, metrics) = commit_compaction(&dataset, results).await.unwrap();
    assert_eq!(metrics.fragments_removed, 2 * tasks);
    assert_eq!(after.fragments().len() as u64, tasks);
    dataset.store().stats()
}

#[tokio::test]
async fn commit_requests_are_a_constant_per_result() {
    // Work that grows with the table per result (a manifest per result, a
    // file read twice) would show as a growing step between the sizes.
    let (small, medium, large) = (
        commit_requests(4).await,
        commit_requests(8).await,
        commit_requests(16).await,
    );
    let step = |a: &RequestStats, b: &RequestStats| {
        (
            b.heads - a.heads,
            b.gets - a.gets,
            b.get_ranges - a.get_ranges,
            b.requests_under("data") - a.requests_under("data"),
            b.total_requests() - a.total_requests(),
        )
    };
    let per_four = step(&small, &medium);
    let (heads, gets, ranges, data, total) = per_four;
    assert_eq!(
        step(&medium, &large),
        (2 * heads, 2 * gets, 2 * ranges, 2 * data, 2 * total),
        "eight more results cost twice four more"
    );
    // Each result adds exactly its new file's checks: one HEAD and its reads,
    // all under data/; nothing else grows.
    assert_eq!(per_four.0, 4, "one HEAD per new file");
    assert_eq!(per_four.3, per_four.4, "every added request reads data/");
    for dir in ["_versions", "_indices", "_transactions", ""] {
        assert_eq!(
            small.requests_under(dir),
            large.requests_under(dir),
            "{dir}"
        );
    }
}

/// Requests of executing the first task of a plan over `tasks` two-fragment
/// bins of one-row fragments (from a handle at the read version).
async fn first_task_requests(tasks: u64) -> RequestStats {
    let (dataset, plan) = one_row_fragments(tasks).await;
    dataset.store().reset_stats();
    let result = plan.tasks[0].execute(&dataset).await.unwrap();
    assert_eq!(result.new_files.len(), 1);
    assert_eq!(result.old_fragment_ids.len(), 2);
    dataset.store().stats()
}

#[tokio::test]
async fn task_execution_reads_only_its_sources_whatever_the_table_size() {
    // A task reads its own sources and writes its output; a table 16 times
    // larger adds no request (a lookup or listing over the table would).
    let small = first_task_requests(4).await;
    let large = first_task_requests(64).await;
    assert_eq!(small, large);
    assert!(small.total_requests() > 0);
    assert_eq!(small.requests_under("_versions"), 0);
}

#[tokio::test]
async fn verification_reports_the_first_bad_file_in_result_order() {
    let dataset = dataset_with_fragments(&[1; 12]).await;
    let plan = plan_compaction(&dataset, &options(2)).unwrap();
    assert_eq!(plan.tasks.len(), 6);
    let mut results = Vec::new();
    for task in &plan.tasks {
        results.push(task.execute(&dataset).await.unwrap());
    }
    let good = results.clone();
    // Task 4's file is missing, task 2's declares a byte too many; the files
    // are checked concurrently, yet the error names the first in order and
    // nothing commits.
    results[4].new_files[0].path = "data/never-written.lance".to_string();
    results[2].new_files[0].size_bytes += 1;
    let err = commit_compaction(&dataset, results.clone())
        .await
        .err()
        .unwrap();
    let size = good[2].new_files[0].size_bytes;
    let expected = format!(
        "compaction result of task 2: {} has {size} bytes, not {}",
        good[2].new_files[0].path,
        size + 1
    );
    assert!(err.to_string().contains(&expected), "{err}");
    results[2] = good[2].clone();
    let err = commit_compaction(&dataset, results).await.err().unwrap();
    assert!(
        err.to_string()
            .contains("compaction result of task 4: data/never-written.lance does not exist"),
        "{err}"
    );
    let latest = dataset.checkout_latest().await.unwrap();
    assert_eq!(latest.version(), dataset.version(), "nothing committed");
    let (after, metrics) = commit_compaction(&dataset, good).await.unwrap();
    assert_eq!(metrics.fragments_removed, 12);
    assert_eq!(scan_ids(&after).await, (0..12).collect::<Vec<i64>>());
}
