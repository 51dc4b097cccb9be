//! What a new user meets first, with the README open: the spellings it uses,
//! CSV of every column, the distributed flow keeping its options and being
//! safe to re-run, range-checked numbers, and a round limit that says so.

mod support;

use std::path::Path;
use support::{ok, refused};

use serde_json::Value;

fn table(dir: &Path, rows: u64, fragment_rows: u64) -> String {
    let uri = dir.join("table").to_string_lossy().to_string();
    ok(&[
        "append",
        &uri,
        "--rows",
        &rows.to_string(),
        "--fragment-rows",
        &fragment_rows.to_string(),
        "--dim",
        "2",
    ]);
    uri
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

#[test]
fn ivf_flat_is_spelled_as_the_readme_and_inspect_spell_it() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(dir.path(), 40, 20);
    ok(&[
        "create-index",
        &uri,
        "--name",
        "v",
        "--column",
        "vec",
        "--type",
        "ivf_flat",
        "--partitions",
        "2",
    ]);
    // The older spelling stays an alias.
    ok(&[
        "create-index",
        &uri,
        "--name",
        "w",
        "--column",
        "vec",
        "--type",
        "ivf-flat",
        "--partitions",
        "2",
    ]);
    let inspect: Value = serde_json::from_str(&ok(&["inspect", &uri, "--json"])).unwrap();
    let types: Vec<&str> = inspect["indices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|index| index["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["ivf_flat", "ivf_flat"], "{inspect}");
}

#[test]
fn csv_prints_every_column_of_an_appended_table() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(dir.path(), 2, 2);
    let csv = ok(&["scan", &uri, "--format", "csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "id,category,text,vec");
    assert_eq!(lines.len(), 3, "{csv}");
    // The vector is one quoted field holding a list of two numbers.
    let vector = lines[1].split_once(",\"[").expect("a quoted list").1;
    assert!(vector.ends_with("]\""), "{csv}");
    assert_eq!(vector.split(", ").count(), 2, "{csv}");
    let none = ok(&["query", &uri, "--filter", "id > 99", "--format", "csv"]);
    assert_eq!(none.lines().count(), 1, "{none}");
    assert!(none.starts_with("id,category,text,vec"), "{none}");
}

#[test]
fn the_distributed_flow_keeps_the_plan_options_and_is_safe_to_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(dir.path(), 60, 10);
    ok(&[
        "create-index",
        &uri,
        "--name",
        "id_idx",
        "--column",
        "id",
        "--type",
        "btree",
    ]);
    let plan_path = dir.path().join("plan.json");
    std::fs::write(
        &plan_path,
        ok(&[
            "compact-plan",
            &uri,
            "--target-rows",
            "30",
            "--defer-index-remap",
        ]),
    )
    .unwrap();
    let result_path = dir.path().join("result_0.json");
    std::fs::write(
        &result_path,
        ok(&[
            "compact-exec",
            &uri,
            plan_path.to_str().unwrap(),
            "--task",
            "0",
        ]),
    )
    .unwrap();
    let result = result_path.to_str().unwrap();
    let first: Value =
        serde_json::from_str(&ok(&["compact-commit", &uri, result, "--json"])).unwrap();
    assert_eq!(first["fragments_removed"], 3);
    assert_eq!(first["fragments_added"], 1);
    // Deferred, as planned: the rewrite is a transition of the FRI ledger.
    let fri: Value = serde_json::from_str(&ok(&["fri", &uri, "--json"])).unwrap();
    // Its group, and the run 4..=6 it relabelled after it.
    assert_eq!(fri["transitions"].as_array().unwrap().len(), 2, "{fri}");
    assert_eq!(fri["transitions"][0]["kind"], "ordered_compaction");

    // A coordinator that died after its commit runs it again: same report.
    let again: Value =
        serde_json::from_str(&ok(&["compact-commit", &uri, result, "--json"])).unwrap();
    assert_eq!(again, first);
    let versions = ok(&["versions", &uri]);
    assert_eq!(ids_in_scan_order(&uri), (0..60).collect::<Vec<i64>>());
    ok(&["compact-commit", &uri, result]);
    assert_eq!(ok(&["versions", &uri]), versions, "nothing was committed");

    // Results of plans made with different options are refused together.
    let other_plan = dir.path().join("other.json");
    std::fs::write(
        &other_plan,
        ok(&["compact-plan", &uri, "--target-rows", "60"]),
    )
    .unwrap();
    let other_result = dir.path().join("other_0.json");
    std::fs::write(
        &other_result,
        ok(&[
            "compact-exec",
            &uri,
            other_plan.to_str().unwrap(),
            "--task",
            "0",
        ]),
    )
    .unwrap();
    let mut deferred: Value =
        serde_json::from_str(&std::fs::read_to_string(&other_result).unwrap()).unwrap();
    deferred["options"]["defer_index_remap"] = Value::Bool(true);
    deferred["task_index"] = Value::from(1);
    let deferred_path = dir.path().join("other_1.json");
    std::fs::write(&deferred_path, deferred.to_string()).unwrap();
    let (error, _) = refused(&[
        "compact-commit",
        &uri,
        other_result.to_str().unwrap(),
        deferred_path.to_str().unwrap(),
    ]);
    assert!(error.contains("different options"), "{error}");
    assert_eq!(ok(&["versions", &uri]), versions);
}

#[test]
fn numeric_options_name_their_valid_range_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(dir.path(), 45, 15);
    let versions = ok(&["versions", &uri]);
    let cases: [(&[&str], &str, &str); 14] = [
        (
            &["compact", &uri, "--target-rows", "-5"],
            "--target-rows",
            "at least 1",
        ),
        (
            &["compact", &uri, "--target-rows", "0"],
            "--target-rows",
            "at least 1",
        ),
        (&["scan", &uri, "--limit", "-1"], "--limit", "at least 0"),
        (
            &["compact", &uri, "--exclude", "-1"],
            "--exclude",
            "from 0 to 4294967295",
        ),
        (
            &["compact", &uri, "--exclude", "99999999999"],
            "--exclude",
            "from 0 to 4294967295",
        ),
        (
            &["compact", &uri, "--max-source-fragments", "0"],
            "--max-source-fragments",
            "at least 1",
        ),
        (
            &["compact", &uri, "--materialize-deletions-threshold", "1.5"],
            "--materialize-deletions-threshold",
            "from 0 to 1",
        ),
        (
            &["remap", &uri, "--budget-bytes", "0"],
            "--budget-bytes",
            "at least 1",
        ),
        (
            &[
                "query",
                &uri,
                "--nearest",
                "vec",
                "--vector",
                "0,0",
                "--nprobes",
                "0",
            ],
            "--nprobes",
            "at least 1",
        ),
        (
            &[
                "query",
                &uri,
                "--nearest",
                "vec",
                "--vector",
                "0,0",
                "--k",
                "0",
            ],
            "--k",
            "at least 1",
        ),
        (
            &["partition", &uri, "--by", "id", "--destinations", "0"],
            "--destinations",
            "from 1 to 65535",
        ),
        (
            &["append", &uri, "--rows", "10", "--dim", "-3"],
            "--dim",
            "from 1 to 65536",
        ),
        (
            &["maintain", &uri, "--until-noop", "--max-rounds", "0"],
            "--max-rounds",
            "at least 1",
        ),
        (
            &["compact-exec", &uri, "plan.json", "--task", "-2"],
            "--task",
            "at least 0",
        ),
    ];
    for (args, option, range) in cases {
        let (error, code) = refused(args);
        assert!(
            error.contains(option) && error.contains(range),
            "{args:?}: {error}"
        );
        assert_eq!(code, 2, "{args:?}: usage errors exit with 2");
    }
    // A range that depends on the table is checked when the table is open.
    let (error, _) = refused(&[
        "create-index",
        &uri,
        "--name",
        "v",
        "--column",
        "vec",
        "--type",
        "ivf_flat",
        "--partitions",
        "100000",
    ]);
    assert!(
        error.contains("partitions") && error.contains("45 live rows"),
        "{error}"
    );
    assert_eq!(ok(&["versions", &uri]), versions, "nothing was committed");
}

#[test]
fn until_noop_stops_at_max_rounds_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let uri = table(dir.path(), 80, 10);
    // Two fragments per round: eight fragments need several rounds.
    let text = ok(&[
        "compact",
        &uri,
        "--target-rows",
        "40",
        "--max-source-fragments",
        "2",
        "--until-noop",
        "--max-rounds",
        "2",
    ]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("round 1: compacted 2 fragments"),
        "{text}"
    );
    assert!(lines[1].starts_with("round 2: compacted"), "{text}");
    assert!(lines[2].starts_with("stopped at --max-rounds 2"), "{text}");
    let json = ok(&[
        "compact",
        &uri,
        "--target-rows",
        "40",
        "--max-source-fragments",
        "2",
        "--until-noop",
        "--max-rounds",
        "1",
        "--json",
    ]);
    let last: Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    assert_eq!(last, serde_json::json!({ "stopped_at_max_rounds": 1 }));
    let text = ok(&[
        "maintain",
        &uri,
        "--target-rows",
        "40",
        "--max-source-fragments",
        "2",
        "--until-noop",
        "--max-rounds",
        "1",
    ]);
    assert!(text.contains("converged: false"), "{text}");
    assert!(text.contains("stopped at --max-rounds 1"), "{text}");
    // Without a limit in the way, the loop reaches its fixed point.
    let text = ok(&[
        "compact",
        &uri,
        "--target-rows",
        "40",
        "--max-source-fragments",
        "2",
        "--until-noop",
    ]);
    assert!(
        text.lines().last().unwrap().ends_with("nothing to compact"),
        "{text}"
    );
    assert_eq!(ids_in_scan_order(&uri), (0..80).collect::<Vec<i64>>());
}
