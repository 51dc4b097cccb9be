//! `refract query --explain` names the path the planner took (index or scan)
//! and why, and the rows equal `refract scan` with the same filter on either
//! path.

mod support;

use support::refract;

/// Runs `refract args`; stdout and stderr of a successful run.
fn ok(args: &[&str]) -> (String, String) {
    let output = refract(args);
    assert!(
        output.status.success(),
        "refract {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn explain_names_the_chosen_path_and_rows_equal_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("table").to_string_lossy().to_string();
    ok(&[
        "append",
        &uri,
        "--rows",
        "20000",
        "--fragment-rows",
        "1000",
        "--dim",
        "4",
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
        "create-index",
        &uri,
        "--name",
        "cat_idx",
        "--column",
        "category",
        "--type",
        "bitmap",
    ]);
    let cases = [
        // A point lookup: one row of one fragment.
        (
            "id = 12345",
            "index: id_idx\npath: index (index 'id_idx' matched 1 rows: reading them (1 fragments, 1 ranges, 1 rows; cost 1281) is cheaper than scanning 20000 rows of 20 fragments (cost 45600), at most 0.8 of it)",
        ),
        // 95% of the rows: searched, then scanned.
        (
            "id >= 1000",
            "index: none (full scan)\npath: scan (index 'id_idx' matched 19000 rows: reading them (19 fragments, 19 ranges, 19000 rows; cost 43320) is not clearly cheaper than scanning 20000 rows of 20 fragments (cost 45600))",
        ),
        // Every tenth row of every fragment: the bitmap's posting statistics
        // rule it out before any posting is read.
        (
            "category = 7",
            "index: none (full scan)\npath: scan (index 'cat_idx' answers with rows whose reading costs at least 45420 (20 fragments, 20 ranges, 19820 rows): scanning (cost 45600) is cheaper)",
        ),
    ];
    for (filter, expected) in cases {
        let (rows, explain) = ok(&[
            "query",
            &uri,
            "--filter",
            filter,
            "--explain",
            "--format",
            "json",
        ]);
        let head: Vec<&str> = explain.lines().take(2).collect();
        assert_eq!(head.join("\n"), expected, "{filter}: {explain}");
        let (scanned, _) = ok(&[
            "scan",
            &uri,
            "--filter",
            filter,
            "--with-row-address",
            "--format",
            "json",
        ]);
        assert_eq!(rows, scanned, "{filter}");
        assert!(!rows.is_empty(), "{filter}");
    }
}
