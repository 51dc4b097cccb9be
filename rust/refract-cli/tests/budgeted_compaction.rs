//! `refract compact --until-noop` under source budgets reaches the best layout
//! the budget allows (issue 20): it never stalls while a merge fits, and it
//! writes full outputs when the budget cannot hold the whole run.

mod support;

use std::path::Path;
use support::ok;

use serde_json::Value;

/// A table of `fragments` fragments of `fragment_rows` rows each.
fn table(dir: &Path, fragments: u64, fragment_rows: u64) -> String {
    let uri = dir.join("table").to_string_lossy().to_string();
    ok(&[
        "append",
        &uri,
        "--rows",
        &(fragments * fragment_rows).to_string(),
        "--fragment-rows",
        &fragment_rows.to_string(),
        "--dim",
        "2",
    ]);
    uri
}

/// Live rows of every fragment, in manifest order.
fn fragment_rows(uri: &str) -> Vec<u64> {
    let inspect: Value = serde_json::from_str(&ok(&["inspect", uri, "--json"])).unwrap();
    inspect["fragments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["physical_rows"].as_u64().unwrap() - f["deleted_rows"].as_u64().unwrap())
        .collect()
}

fn ids_in_scan_order(uri: &str) -> Vec<i64> {
    ok(&["scan", uri, "--columns", "id", "--format", "json"])
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// Runs `compact --until-noop` with `budget`, checks it reached its fixed point
/// (a second run commits nothing) and kept every row in order.
fn compact_until_noop(uri: &str, target: u64, budget: &[&str], rows: i64) {
    let target = target.to_string();
    let mut args = vec!["compact", uri, "--target-rows", &target];
    args.extend_from_slice(budget);
    args.push("--until-noop");
    let text = ok(&args);
    assert!(
        text.lines().last().unwrap().ends_with("nothing to compact"),
        "{text}"
    );
    let versions = ok(&["versions", uri]);
    assert_eq!(ok(&args), "round 1: nothing to compact\n");
    assert_eq!(
        ok(&["versions", uri]),
        versions,
        "the fixed point committed"
    );
    assert_eq!(ids_in_scan_order(uri), (0..rows).collect::<Vec<i64>>());
}

#[test]
fn two_fragment_budget_merges_two_of_three_fifties() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(dir.path(), 3, 50);
    assert_eq!(fragment_rows(&uri), vec![50, 50, 50]);
    compact_until_noop(&uri, 100, &["--max-source-fragments", "2"], 150);
    assert_eq!(fragment_rows(&uri), vec![100, 50]);
}

#[test]
fn row_budget_writes_full_outputs_of_twelve_two_hundreds() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(dir.path(), 12, 200);
    compact_until_noop(&uri, 1000, &["--max-source-rows", "1000"], 2400);
    assert_eq!(fragment_rows(&uri), vec![1000, 1000, 400]);
}
