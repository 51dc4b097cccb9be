//! The command-line shapes scripts depend on: exact JSON keys and values,
//! exit codes, and the distributed compaction flow through files.

mod support;

use std::path::Path;
use std::process::Command;
use support::{ok, refract};

use serde_json::Value;

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn uri(dir: &Path) -> String {
    dir.join("table").to_string_lossy().to_string()
}

#[test]
fn append_scan_delete_inspect_have_stable_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(dir.path());
    ok(&[
        "append",
        &uri,
        "--rows",
        "25",
        "--fragment-rows",
        "10",
        "--start",
        "100",
        "--dim",
        "4",
    ]);
    let rows = json_lines(&ok(&[
        "scan",
        &uri,
        "--columns",
        "id,category",
        "--format",
        "json",
        "--limit",
        "3",
    ]));
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"id": 100, "category": 0}),
            serde_json::json!({"id": 101, "category": 1}),
            serde_json::json!({"id": 102, "category": 2}),
        ]
    );
    ok(&["delete", &uri, "--filter", "id % 10 = 3 OR id >= 120"]);
    let rows = json_lines(&ok(&[
        "scan",
        &uri,
        "--columns",
        "id",
        "--format",
        "json",
        "--with-row-address",
    ]));
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(
        ids,
        (100..120).filter(|id| id % 10 != 3).collect::<Vec<i64>>()
    );
    assert!(rows.iter().all(|r| r["_rowaddr"].is_u64()));

    let inspect: Value = serde_json::from_str(&ok(&["inspect", &uri, "--json"])).unwrap();
    let fragments = inspect["fragments"].as_array().unwrap();
    let shape: Vec<(u64, u64)> = fragments
        .iter()
        .map(|f| {
            (
                f["physical_rows"].as_u64().unwrap(),
                f["deleted_rows"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![(10, 1), (10, 1)],
        "the fragment of ids 120..125 is gone"
    );
    assert!(fragments
        .iter()
        .all(|f| f["id"].is_u64() && f["data_files"].as_array().unwrap().len() == 1));
    assert!(inspect["version"].is_u64());
    assert_eq!(inspect["indices"], serde_json::json!([]));
}

#[test]
fn csv_has_a_header_and_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(dir.path());
    ok(&["append", &uri, "--rows", "3", "--dim", "2"]);
    let csv = ok(&["scan", &uri, "--columns", "id,category", "--format", "csv"]);
    assert_eq!(csv, "id,category\n0,0\n1,1\n2,2\n");

    let missing = dir
        .path()
        .join("nothing-here")
        .to_string_lossy()
        .to_string();
    let output = refract(&["scan", &missing]);
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");

    let output = refract(&["scan", &uri, "--filter", "id >"]);
    assert!(!output.status.success());
    assert!(String::from_utf8(output.stderr)
        .unwrap()
        .contains("position"));
}

#[test]
fn distributed_compaction_through_files_keeps_order() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(dir.path());
    ok(&[
        "append",
        &uri,
        "--rows",
        "60",
        "--fragment-rows",
        "10",
        "--dim",
        "2",
    ]);
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
    let plan = ok(&[
        "compact-plan",
        &uri,
        "--target-rows",
        "25",
        "--exclude",
        "3",
    ]);
    let plan_path = dir.path().join("plan.json");
    std::fs::write(&plan_path, &plan).unwrap();
    let tasks = serde_json::from_str::<Value>(&plan).unwrap()["tasks"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(tasks, 2, "fragment 3 splits the run in two bins");
    let mut results = Vec::new();
    for task in (0..tasks).rev() {
        let path = dir.path().join(format!("result_{task}.json"));
        std::fs::write(
            &path,
            ok(&[
                "compact-exec",
                &uri,
                plan_path.to_str().unwrap(),
                "--task",
                &task.to_string(),
            ]),
        )
        .unwrap();
        results.push(path.to_string_lossy().to_string());
    }
    let mut args = vec!["compact-commit", uri.as_str(), "--json"];
    args.extend(results.iter().map(String::as_str));
    let metrics: Value = serde_json::from_str(&ok(&args)).unwrap();
    assert_eq!(metrics["fragments_removed"], 5);
    assert_eq!(metrics["fragments_added"], 2);
    assert_eq!(metrics["files_removed"], 5);
    assert_eq!(metrics["files_added"], 2);
    assert!(metrics["committed_version"].is_u64());

    let rows = json_lines(&ok(&["scan", &uri, "--columns", "id", "--format", "json"]));
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (0..60).collect::<Vec<i64>>());
    let query = json_lines(&ok(&[
        "query",
        &uri,
        "--filter",
        "id >= 28 AND id < 31",
        "--columns",
        "id",
        "--format",
        "json",
    ]));
    let ids: Vec<i64> = query.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![28, 29, 30]);

    // The commit relabelled fragment 3 as 8 (ids follow list order: 1, 2 -> 7,
    // then 3 -> 8, then 4..=6 -> 9): the exclusion names it by its new id.
    let again: Value = serde_json::from_str(&ok(&[
        "compact",
        &uri,
        "--target-rows",
        "25",
        "--exclude",
        "8",
        "--json",
    ]))
    .unwrap();
    assert_eq!(again["committed_version"], Value::Null);
}

#[test]
fn inspect_lists_segments_and_fri_describes_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(dir.path());
    ok(&[
        "append",
        &uri,
        "--rows",
        "40",
        "--fragment-rows",
        "10",
        "--dim",
        "2",
    ]);
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
    ok(&[
        "compact",
        &uri,
        "--target-rows",
        "40",
        "--defer-index-remap",
    ]);
    let inspect: Value = serde_json::from_str(&ok(&["inspect", &uri, "--json"])).unwrap();
    let user: Vec<&Value> = inspect["indices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["system"] == false)
        .collect();
    assert_eq!(user.len(), 1);
    assert_eq!(user[0]["name"], "id_idx");
    assert_eq!(user[0]["type"], "btree");
    assert_eq!(
        user[0]["fragments"],
        serde_json::json!([1, 2, 3, 4]),
        "stored coverage is untouched by a deferred remap"
    );
    let fri: Value = serde_json::from_str(&ok(&["fri", &uri, "--json"])).unwrap();
    assert_eq!(fri["transitions"].as_array().unwrap().len(), 1);
    assert_eq!(fri["transitions"][0]["kind"], "ordered_compaction");
    let remap: Value = serde_json::from_str(&ok(&["remap", &uri, "--json"])).unwrap();
    assert!(remap["committed_version"].is_u64());
    let trim: Value = serde_json::from_str(&ok(&["trim", &uri, "--json"])).unwrap();
    assert_eq!(trim["transitions_kept"], 0);
    let fri: Value = serde_json::from_str(&ok(&["fri", &uri, "--json"])).unwrap();
    assert_eq!(fri["fri_uuid"], Value::Null);
    assert_eq!(fri["fri_flag"], true, "draining the history keeps the flag");
}

#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(dir.path());
    ok(&[
        "append",
        &uri,
        "--rows",
        "50000",
        "--fragment-rows",
        "50000",
    ]);
    // `refract scan … | head -1`: the reader goes away after one line.
    let mut scan = Command::new(env!("CARGO_BIN_EXE_refract"))
        .args(["scan", &uri, "--columns", "id,text", "--format", "csv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(scan.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("id,"), "{first}");
    let output = scan.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "status {:?}: {stderr}",
        output.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
