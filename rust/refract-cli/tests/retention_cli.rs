//! Retention, tags and time travel on the command line: `tag`, `cleanup`,
//! `restore`, and `--version` / `--tag` on the read commands, with their
//! exact outputs, exit codes and one-line errors.

mod support;

use std::path::Path;

use serde_json::{json, Value};
use support::{ok, refused};

fn uri(dir: &Path) -> String {
    dir.join("table").to_string_lossy().to_string()
}

/// The ids `refract <args> --format json` prints, in order.
fn ids(args: &[&str]) -> Vec<i64> {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    ok(&args)
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// The version numbers `refract versions` lists.
fn listed_versions(uri: &str) -> Vec<u64> {
    ok(&["versions", uri])
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).unwrap()
}

/// v1 create, v2 ids 0..10 in two fragments, v3 a btree index on id, v4
/// `id < 3` deleted, v5 ids 10..15 appended.
fn history(dir: &Path) -> String {
    let uri = uri(dir);
    ok(&[
        "append",
        &uri,
        "--rows",
        "10",
        "--fragment-rows",
        "5",
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
    ok(&["delete", &uri, "--filter", "id < 3"]);
    ok(&[
        "append",
        &uri,
        "--rows",
        "5",
        "--start",
        "10",
        "--fragment-rows",
        "5",
        "--dim",
        "2",
    ]);
    assert_eq!(listed_versions(&uri), vec![1, 2, 3, 4, 5]);
    uri
}

/// The text lines `refract cleanup` prints for a JSON report.
fn expected_cleanup_text(report: &Value) -> String {
    let expired = report["expired_versions"].as_array().unwrap().len();
    let versions = expired + report["retained_versions"].as_array().unwrap().len();
    let removed = report["removed"].as_array().unwrap();
    let dry_run = report["dry_run"].as_bool().unwrap();
    let mut text = if dry_run {
        format!(
            "cleanup (dry run): would expire {expired} of {versions} version(s), remove {} file(s) and free {} bytes\n",
            removed.len(),
            report["bytes_freed"]
        )
    } else {
        format!(
            "cleanup: expired {expired} of {versions} version(s), removed {} file(s), freed {} bytes\n",
            removed.len(),
            report["bytes_freed"]
        )
    };
    for file in removed {
        text.push_str(&format!(
            "  {} {} ({}, {} bytes)\n",
            if dry_run { "would remove" } else { "removed" },
            file["path"].as_str().unwrap(),
            file["kind"].as_str().unwrap_or("manifest"),
            file["size_bytes"]
        ));
    }
    text
}

fn removed_paths(report: &Value) -> Vec<String> {
    report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn tags_are_created_listed_and_deleted_and_bad_ones_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    assert_eq!(
        ok(&["tag", "create", &uri, "gold"]),
        "tagged version 5 as 'gold'\n"
    );
    assert_eq!(
        ok(&["tag", "create", &uri, "before-delete", "--version", "3"]),
        "tagged version 3 as 'before-delete'\n"
    );
    assert_eq!(
        ok(&["tag", "list", &uri]),
        " version  tag\n       3  before-delete\n       5  gold\n"
    );
    assert_eq!(
        json_of(&["tag", "list", &uri, "--json"]),
        json!([
            {"name": "before-delete", "version": 3},
            {"name": "gold", "version": 5},
        ])
    );

    let refusals: [(&[&str], &str, i32); 6] = [
        (
            &["tag", "create", &uri, "gold", "--version", "2"],
            "error: invalid input: tag 'gold' already exists (it names version 5); delete it first\n",
            1,
        ),
        (
            &["tag", "create", &uri, "future", "--version", "9"],
            "error: not found: cannot tag version 9 as 'future': the version does not exist\n",
            1,
        ),
        (
            &["tag", "create", &uri, "a/b"],
            "error: invalid input: invalid tag name 'a/b': use 1 to 128 ASCII letters, digits, '.', '_' or '-', not starting with '.'\n",
            1,
        ),
        (
            &["tag", "delete", &uri, "nope"],
            "error: not found: tag 'nope' does not exist\n",
            1,
        ),
        (
            &["tag", "create", &uri, "zero", "--version", "0"],
            "error: invalid value '0' for '--version <N>': must be an integer of at least 1 (see --help)\n",
            2,
        ),
        (
            &["tag", "create", &uri],
            "error: the following required arguments were not provided: <NAME> (see --help)\n",
            2,
        ),
    ];
    for (args, message, code) in refusals {
        assert_eq!(refused(args), (message.to_string(), code), "{args:?}");
    }

    assert_eq!(ok(&["tag", "delete", &uri, "gold"]), "deleted tag 'gold'\n");
    assert_eq!(
        ok(&["tag", "list", &uri]),
        " version  tag\n       3  before-delete\n"
    );
    assert_eq!(
        listed_versions(&uri),
        vec![1, 2, 3, 4, 5],
        "tags commit nothing"
    );
}

#[test]
fn time_travel_reads_exactly_what_each_version_held() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    ok(&["tag", "create", &uri, "indexed", "--version", "3"]);
    // v6: a compaction that leaves the index on old addresses, recorded in the FRI.
    ok(&["compact", &uri, "--defer-index-remap"]);

    let all: Vec<i64> = (0..10).collect();
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id", "--version", "2"]),
        all
    );
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id", "--tag", "indexed"]),
        all
    );
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id", "--version", "4"]),
        (3..10).collect::<Vec<i64>>()
    );
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id"]),
        (3..15).collect::<Vec<i64>>()
    );

    let window = ["--filter", "id >= 1 AND id < 5", "--columns", "id"];
    let query_at = |at: &[&str]| {
        let mut args = vec!["query", uri.as_str()];
        args.extend(window);
        args.extend(at);
        ids(&args)
    };
    assert_eq!(query_at(&["--version", "2"]), vec![1, 2, 3, 4]);
    assert_eq!(query_at(&["--tag", "indexed"]), vec![1, 2, 3, 4]);
    assert_eq!(query_at(&["--version", "4"]), vec![3, 4]);
    assert_eq!(query_at(&[]), vec![3, 4]);

    let at_two = json_of(&["inspect", &uri, "--json", "--version", "2"]);
    assert_eq!(
        (&at_two["version"], &at_two["live_rows"], &at_two["indices"]),
        (&json!(2), &json!(10), &json!([]))
    );
    let tagged = json_of(&["inspect", &uri, "--json", "--tag", "indexed"]);
    assert_eq!(
        (&tagged["version"], &tagged["live_rows"]),
        (&json!(3), &json!(10))
    );
    assert_eq!(tagged["indices"][0]["name"], "id_idx");
    let text = ok(&["inspect", &uri, "--version", "4"]);
    assert!(
        text.starts_with(&format!("dataset {uri} at version 4\n")),
        "{text}"
    );

    let fri_before = json_of(&["fri", &uri, "--json", "--version", "5"]);
    assert_eq!(
        (
            &fri_before["dataset_version"],
            &fri_before["fri_uuid"],
            &fri_before["transitions"]
        ),
        (&json!(5), &Value::Null, &json!([]))
    );
    assert_eq!(
        ok(&["fri", &uri, "--tag", "indexed"]),
        "no FRI (fri flag: false)\n"
    );
    let fri_now = json_of(&["fri", &uri, "--json"]);
    assert_eq!(fri_now["dataset_version"], 6);
    // The compaction's group and the run it relabelled.
    assert_eq!(fri_now["transitions"].as_array().unwrap().len(), 2);

    for command in ["scan", "query", "inspect", "fri"] {
        let mut args = vec![command, uri.as_str()];
        if command == "query" {
            args.extend(["--filter", "id = 1"]);
        }
        let with = |extra: &[&'static str]| {
            let mut all = args.clone();
            all.extend(extra);
            refused(&all)
        };
        assert_eq!(
            with(&["--version", "99"]),
            (
                "error: not found: manifest of version 99 (_versions/18446744073709551516.manifest) does not exist\n".to_string(),
                1
            ),
            "{command}"
        );
        assert_eq!(
            with(&["--tag", "nope"]),
            (
                "error: not found: tag 'nope' does not exist\n".to_string(),
                1
            ),
            "{command}"
        );
        assert_eq!(
            with(&["--version", "2", "--tag", "indexed"]),
            (
                "error: the argument '--version <N>' cannot be used with '--tag <NAME>' (see --help)\n".to_string(),
                2
            ),
            "{command}"
        );
    }
}

#[test]
fn a_dry_run_lists_exactly_what_cleanup_removes_and_a_rerun_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    // v6 compacts the three fragments, rewriting the one with deletions.
    ok(&["compact", &uri]);
    let root = dir.path().join("table");

    // The default policy keeps two weeks: nothing here is that old.
    let default = json_of(&["cleanup", &uri, "--dry-run", "--json"]);
    assert_eq!(
        default,
        json!({
            "retained_versions": [1, 2, 3, 4, 5, 6],
            "expired_versions": [],
            "removed": [],
            "bytes_freed": 0,
            "dry_run": true,
        })
    );

    let planned = json_of(&["cleanup", &uri, "--keep-last", "1", "--dry-run", "--json"]);
    assert_eq!(planned["retained_versions"], json!([6]));
    assert_eq!(planned["expired_versions"], json!([1, 2, 3, 4, 5]));
    assert_eq!(planned["dry_run"], true);
    let planned_paths = removed_paths(&planned);
    let kinds: std::collections::BTreeSet<&str> = planned["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["kind"].as_str().unwrap_or("manifest"))
        .collect();
    // The compaction replaced every data file, the deletion file and the
    // index segment (remapped inline), so the old ones go with the manifests.
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        vec![
            "data",
            "deletion",
            "index_segment",
            "manifest",
            "transaction"
        ],
        "{planned}"
    );
    let manifests = planned_paths
        .iter()
        .filter(|path| path.starts_with("_versions/"))
        .count();
    assert_eq!(manifests, 5, "{planned}");
    for path in &planned_paths {
        assert!(root.join(path).exists(), "a dry run deleted {path}");
    }
    let sizes: u64 = planned["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["size_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(planned["bytes_freed"].as_u64().unwrap(), sizes);
    assert_eq!(
        ok(&["cleanup", &uri, "--keep-last", "1", "--dry-run"]),
        expected_cleanup_text(&planned)
    );
    assert_eq!(listed_versions(&uri), vec![1, 2, 3, 4, 5, 6]);

    let text = ok(&["cleanup", &uri, "--keep-last", "1"]);
    let mut done = planned.clone();
    done["dry_run"] = json!(false);
    assert_eq!(text, expected_cleanup_text(&done));
    for path in &planned_paths {
        assert!(!root.join(path).exists(), "cleanup left {path}");
    }
    assert_eq!(listed_versions(&uri), vec![6]);
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id"]),
        (3..15).collect::<Vec<i64>>()
    );
    assert_eq!(
        ids(&[
            "query",
            &uri,
            "--filter",
            "id >= 8 AND id < 12",
            "--columns",
            "id"
        ]),
        vec![8, 9, 10, 11]
    );
    ok(&["verify", &uri, "--all-versions"]);

    // Execute until no-op: the second run finds nothing.
    assert_eq!(
        json_of(&["cleanup", &uri, "--keep-last", "1", "--json"]),
        json!({
            "retained_versions": [6],
            "expired_versions": [],
            "removed": [],
            "bytes_freed": 0,
            "dry_run": false,
        })
    );
    assert_eq!(
        ok(&["cleanup", &uri, "--keep-last", "1"]),
        "cleanup: expired 0 of 1 version(s), removed 0 file(s), freed 0 bytes\n"
    );
    assert_eq!(listed_versions(&uri), vec![6]);
}

#[test]
fn a_tagged_old_version_stays_scannable_after_cleanup_and_untagged_ones_go() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    ok(&["compact", &uri]);
    ok(&["tag", "create", &uri, "original", "--version", "2"]);

    let report = json_of(&["cleanup", &uri, "--older-than", "0s", "--json"]);
    assert_eq!(report["retained_versions"], json!([2, 6]));
    assert_eq!(report["expired_versions"], json!([1, 3, 4, 5]));
    assert_eq!(listed_versions(&uri), vec![2, 6]);
    ok(&["verify", &uri, "--all-versions"]);

    let original: Vec<i64> = (0..10).collect();
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id", "--tag", "original"]),
        original
    );
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id", "--version", "2"]),
        original
    );
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id"]),
        (3..15).collect::<Vec<i64>>()
    );
    assert_eq!(
        ids(&[
            "query",
            &uri,
            "--filter",
            "id >= 8 AND id < 12",
            "--columns",
            "id"
        ]),
        vec![8, 9, 10, 11]
    );
    for gone in ["3", "4", "5"] {
        assert_eq!(
            refused(&["scan", &uri, "--version", gone]),
            (
                format!(
                    "error: not found: manifest of version {gone} (_versions/{:020}.manifest) does not exist\n",
                    u64::MAX - gone.parse::<u64>().unwrap()
                ),
                1
            )
        );
    }

    // Untagged, version 2 expires too.
    ok(&["tag", "delete", &uri, "original"]);
    let report = json_of(&["cleanup", &uri, "--older-than", "0s", "--json"]);
    assert_eq!(report["retained_versions"], json!([6]));
    assert_eq!(report["expired_versions"], json!([2]));
    assert_eq!(listed_versions(&uri), vec![6]);
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id"]),
        (3..15).collect::<Vec<i64>>()
    );
    ok(&["verify", &uri, "--all-versions"]);
}

#[test]
fn orphans_go_only_when_older_than_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    let orphan = dir.path().join("table/data/abandoned.lance");
    std::fs::write(&orphan, b"left by a failed write").unwrap();

    // The default orphan window is two weeks: a fresh file stays.
    assert_eq!(
        ok(&["cleanup", &uri, "--keep-last", "5", "--orphans"]),
        "cleanup: expired 0 of 5 version(s), removed 0 file(s), freed 0 bytes\norphans: removed 0 unreferenced file(s)\n"
    );
    assert!(orphan.exists());

    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let report = json_of(&[
        "cleanup",
        &uri,
        "--keep-last",
        "5",
        "--older-than",
        "1s",
        "--orphans",
        "--json",
    ]);
    assert_eq!(report["orphans_removed"], json!(["data/abandoned.lance"]));
    assert_eq!(report["expired_versions"], json!([]));
    assert!(!orphan.exists());
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id"]),
        (3..15).collect::<Vec<i64>>()
    );
}

/// The reproduction of a link to a directory elsewhere: cleanup, with the
/// default window and with none, never deletes what the link points at, and
/// removes an orphaned link as a link.
#[test]
fn a_link_to_elsewhere_never_lets_cleanup_delete_outside_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(dir.path());
    ok(&["append", &uri, "--rows", "2000", "--fragment-rows", "500"]);
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let precious = outside.join("precious.txt");
    std::fs::write(&precious, b"keep\n").unwrap();
    let month_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(30 * 86_400);
    std::fs::File::options()
        .write(true)
        .open(&precious)
        .unwrap()
        .set_modified(month_ago)
        .unwrap();
    let link = dir.path().join("table/data/evil");
    std::os::unix::fs::symlink(&outside, &link).unwrap();

    assert_eq!(
        ok(&["cleanup", &uri, "--orphans"]),
        "cleanup: expired 0 of 2 version(s), removed 0 file(s), freed 0 bytes\norphans: removed 0 unreferenced file(s)\n"
    );
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep\n");

    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let report = json_of(&["cleanup", &uri, "--older-than", "1s", "--orphans", "--json"]);
    assert_eq!(report["orphans_removed"], json!(["data/evil"]));
    assert!(std::fs::symlink_metadata(&link).is_err(), "the link went");
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep\n");
    assert_eq!(ids(&["scan", &uri, "--columns", "id"]).len(), 2000);
    ok(&["verify", &uri]);
}

#[test]
fn bad_cleanup_arguments_are_one_line_usage_errors_that_remove_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    let accepted =
        "must be a whole number followed by s, m, h, d or w (e.g. 90s, 30m, 12h, 7d, 2w)";
    for bad in ["7x", "-1d", "d", "", "1.5h"] {
        assert_eq!(
            refused(&["cleanup", &uri, "--older-than", bad]),
            (
                format!("error: invalid value '{bad}' for '--older-than <DURATION>': {accepted} (see --help)\n"),
                2
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        refused(&["cleanup", &uri, "--older-than", "36501d"]),
        (
            "error: invalid value '36501d' for '--older-than <DURATION>': must be at most 36500d (100 years) (see --help)\n".to_string(),
            2
        )
    );
    assert_eq!(
        refused(&["cleanup", &uri, "--keep-last", "0"]),
        (
            "error: invalid value '0' for '--keep-last <N>': must be an integer of at least 1 (see --help)\n".to_string(),
            2
        )
    );
    assert_eq!(
        refused(&["cleanup", &uri, "--dry-run", "--orphans"]),
        (
            "error: the argument '--dry-run' cannot be used with '--orphans' (see --help)\n"
                .to_string(),
            2
        )
    );
    assert_eq!(listed_versions(&uri), vec![1, 2, 3, 4, 5]);
}

#[test]
fn restore_commits_a_new_version_equal_to_the_chosen_one() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    assert_eq!(
        ok(&["restore", &uri, "--version", "2"]),
        "restored version 2; version 6\n"
    );
    let original: Vec<i64> = (0..10).collect();
    assert_eq!(ids(&["scan", &uri, "--columns", "id"]), original);
    assert_eq!(
        json_of(&["inspect", &uri, "--json"])["indices"],
        json!([]),
        "version 2 had no index"
    );
    let versions = ok(&["versions", &uri]);
    assert!(
        versions.lines().last().unwrap().ends_with("  Restore")
            && versions
                .lines()
                .last()
                .unwrap()
                .trim_start()
                .starts_with("6 "),
        "{versions}"
    );

    ok(&["tag", "create", &uri, "trimmed", "--version", "4"]);
    assert_eq!(
        ok(&["restore", &uri, "--tag", "trimmed"]),
        "restored tag 'trimmed' (version 4); version 7\n"
    );
    assert_eq!(
        ids(&["scan", &uri, "--columns", "id"]),
        (3..10).collect::<Vec<i64>>()
    );
    assert_eq!(
        ids(&["query", &uri, "--filter", "id < 5", "--columns", "id"]),
        vec![3, 4]
    );

    assert_eq!(
        refused(&["restore", &uri, "--version", "42"]),
        (
            "error: not found: manifest of version 42 (_versions/18446744073709551573.manifest) does not exist\n".to_string(),
            1
        )
    );
    assert_eq!(
        refused(&["restore", &uri, "--tag", "nope"]),
        (
            "error: not found: tag 'nope' does not exist\n".to_string(),
            1
        )
    );
    assert_eq!(
        refused(&["restore", &uri]),
        (
            "error: the following required arguments were not provided: <--version <N>|--tag <NAME>> (see --help)\n".to_string(),
            2
        )
    );
    assert_eq!(listed_versions(&uri), vec![1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn an_indexed_query_at_a_tagged_version_still_translates_after_trim_and_cleanup() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(dir.path());
    // Enough rows that the index path beats a scan.
    ok(&[
        "append",
        &uri,
        "--rows",
        "2000",
        "--fragment-rows",
        "1000",
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
    ok(&["delete", &uri, "--filter", "id < 3"]);
    // v5: the partition writes a row map the index translates through.
    ok(&[
        "partition",
        &uri,
        "--by",
        "category",
        "--destinations",
        "2",
        "--fragments",
        "1,2",
    ]);
    ok(&["tag", "create", &uri, "partitioned"]);
    ok(&["remap", &uri]);
    ok(&["trim", &uri]);
    assert_eq!(listed_versions(&uri), vec![1, 2, 3, 4, 5, 6, 7]);

    let query = [
        "query",
        uri.as_str(),
        "--tag",
        "partitioned",
        "--filter",
        "id IN (2, 4, 1507)",
        "--columns",
        "id",
        "--format",
        "json",
        "--explain",
    ];
    let translated_ids = || {
        let output = support::refract(&query);
        assert!(output.status.success(), "{output:?}");
        let explain = String::from_utf8(output.stderr).unwrap();
        assert!(
            explain
                .contains("(btree): fragments [3, 4], exact, translated through 1 transition(s)"),
            "{explain}"
        );
        let mut ids: Vec<i64> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                serde_json::from_str::<Value>(line).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(translated_ids(), vec![4, 1507]);

    let report = json_of(&["cleanup", &uri, "--older-than", "0s", "--json"]);
    assert_eq!(report["retained_versions"], json!([5, 7]));
    assert_eq!(report["expired_versions"], json!([1, 2, 3, 4, 6]));
    assert_eq!(translated_ids(), vec![4, 1507], "the tag keeps its row map");

    ok(&["tag", "delete", &uri, "partitioned"]);
    let report = json_of(&["cleanup", &uri, "--older-than", "0s", "--json"]);
    assert_eq!(report["expired_versions"], json!([5]));
    let row_maps: Vec<&Value> = report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|file| file["kind"] == "row_map")
        .collect();
    assert_eq!(row_maps.len(), 1, "{report}");
    assert_eq!(listed_versions(&uri), vec![7]);
    let mut latest = ids(&[
        "query",
        &uri,
        "--filter",
        "id IN (2, 4, 1507)",
        "--columns",
        "id",
    ]);
    latest.sort_unstable();
    assert_eq!(latest, vec![4, 1507]);
    ok(&["verify", &uri, "--all-versions", "--deep"]);
}

#[test]
fn maintain_expires_old_versions_after_its_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    let before = ids(&["scan", &uri]);
    let text = ok(&[
        "maintain",
        &uri,
        "--until-noop",
        "--target-rows",
        "100",
        "--keep-last",
        "1",
    ]);
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("retention: expired ") && last.contains(" file(s), freed "),
        "{text}"
    );
    let versions = listed_versions(&uri);
    assert_eq!(versions.len(), 1, "{versions:?}");
    assert_eq!(ids(&["scan", &uri]), before);
    // A bad policy is a usage error before anything runs.
    let (err, code) = refused(&["maintain", &uri, "--keep-last", "0"]);
    assert!(err.contains("--keep-last"), "{err}");
    assert_eq!(code, 2);
    assert_eq!(listed_versions(&uri), versions);
}

#[test]
fn an_older_version_reads_even_when_the_latest_manifest_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let uri = history(dir.path());
    let at_two = ids(&["scan", &uri, "--version", "2"]);
    assert_eq!(at_two, (0..10).collect::<Vec<i64>>());
    let latest = *listed_versions(&uri).last().unwrap();
    let manifest = dir
        .path()
        .join("table/_versions")
        .join(format!("{:020}.manifest", u64::MAX - latest));
    let mut bytes = std::fs::read(&manifest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&manifest, bytes).unwrap();
    let (err, code) = refused(&["scan", &uri]);
    assert_eq!(code, 1);
    assert!(err.contains("corrupt"), "{err}");
    assert_eq!(ids(&["scan", &uri, "--version", "2"]), at_two);
}
