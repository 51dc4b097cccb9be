//! Damaged stored files through the `refract` binary: manifests (old and
//! latest), the FRI row map and every file of each built-in index type,
//! truncated or with bits flipped where the damage is structural (a length,
//! an offset, a magic number, a tag). The operation that reads the file
//! fails with a one-line `corrupt` error naming the dataset-relative file
//! (and, for a manifest, its version), and no message shows a path of the
//! build machine or a dependency's source location.
//!
//! `verify` reads every file a version references and finds any flipped
//! bit (bit-flip sweeps of every file kind live in refract-optimize's
//! `tests/bit_flips.rs`).

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use support::{ok, refract};

use serde_json::Value;

/// Runs `args`, which must fail with a one-line Corrupt error naming `file`
/// (dataset-relative); returns the message.
fn fails_corrupt(args: &[&str], file: &str) -> String {
    let output = refract(args);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        !output.status.success(),
        "refract {args:?} succeeded on a damaged {file}"
    );
    // The whole of stderr is the one error line: a Lance panic caught and
    // reported as Corrupt prints no panic report before it.
    let message = stderr
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("no error line: {stderr:?}"));
    assert!(
        message.starts_with("error: corrupt "),
        "refract {args:?}: not a corrupt error: {message}"
    );
    assert!(message.contains(file), "{file} not named in: {message}");
    assert_clean(message);
    message.to_string()
}

/// One line, no source location, no path of the build machine.
fn assert_clean(text: &str) {
    assert!(!text.contains('\n'), "more than one line: {text}");
    for foreign in ["/root/", ".cargo", "registry/src", ".rs:"] {
        assert!(!text.contains(foreign), "{foreign:?} in: {text}");
    }
}

fn table_uri(dir: &Path) -> String {
    dir.join("table").to_string_lossy().to_string()
}

fn manifest_name(version: u64) -> String {
    format!("_versions/{:020}.manifest", u64::MAX - version)
}

/// How a file is damaged.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// The first `n` bytes are kept.
    TruncateTo(usize),
    /// The last `n` bytes are dropped.
    DropTail(usize),
    /// Every bit of the byte at `at` (from the start) is flipped.
    FlipByte(usize),
    /// Every bit of the byte `n` bytes before the end is flipped.
    FlipFromEnd(usize),
}

fn damage(path: &Path, damage: Damage) {
    let mut bytes = fs::read(path).unwrap();
    let len = bytes.len();
    match damage {
        Damage::TruncateTo(n) => bytes.truncate(n),
        Damage::DropTail(n) => bytes.truncate(len - n),
        Damage::FlipByte(at) => bytes[at] ^= 0xFF,
        Damage::FlipFromEnd(n) => bytes[len - n] ^= 0xFF,
    }
    fs::write(path, bytes).unwrap();
}

/// A dataset of three appends (versions 1 to 3: create, append, append).
fn three_versions(dir: &Path) -> String {
    let uri = table_uri(dir);
    for start in ["0", "100"] {
        ok(&[
            "append",
            &uri,
            "--rows",
            "100",
            "--fragment-rows",
            "50",
            "--start",
            start,
            "--dim",
            "4",
        ]);
    }
    uri
}

#[test]
fn versions_lists_a_damaged_old_manifest_and_the_latest_still_opens() {
    for how in [Damage::TruncateTo(20), Damage::FlipByte(0)] {
        let dir = tempfile::tempdir().unwrap();
        let uri = three_versions(dir.path());
        let manifest = manifest_name(2);
        damage(&dir.path().join("table").join(&manifest), how);

        let stdout = ok(&["versions", &uri]);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 4, "{stdout}");
        let words = |line: &str| {
            line.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(words(lines[0]), ["version", "timestamp_ms", "operation"]);
        assert_eq!(words(lines[1])[0], "1");
        assert_eq!(words(lines[1])[2], "Create");
        assert_eq!(words(lines[3])[0], "3");
        assert_eq!(words(lines[3])[2], "Append");
        // The damaged version: number, `-`, then the one-line reason.
        let damaged = lines[2];
        let prefix = format!(
            "{:>8}  {:>15}  unreadable: corrupt manifest of version 2 ({manifest}): ",
            2, "-"
        );
        assert!(damaged.starts_with(&prefix), "{how:?}: {damaged}");
        assert_clean(damaged);

        // The latest version opens and reads.
        let inspect: Value = serde_json::from_str(&ok(&["inspect", &uri, "--json"])).unwrap();
        assert_eq!(inspect["version"], 3);
        assert_eq!(inspect["live_rows"], 200);
    }
}

#[test]
fn a_damaged_latest_manifest_fails_open_and_is_listed_as_unreadable() {
    for how in [Damage::DropTail(7), Damage::FlipByte(0)] {
        let dir = tempfile::tempdir().unwrap();
        let uri = three_versions(dir.path());
        let manifest = manifest_name(3);
        damage(&dir.path().join("table").join(&manifest), how);
        let message = fails_corrupt(&["inspect", &uri], &manifest);
        assert!(
            message.starts_with(&format!(
                "error: corrupt manifest of version 3 ({manifest}): "
            )),
            "{message}"
        );
        fails_corrupt(&["scan", &uri], &manifest);
        let stdout = ok(&["versions", &uri]);
        let last = stdout.lines().last().unwrap();
        assert!(
            last.starts_with(&format!(
                "{:>8}  {:>15}  unreadable: corrupt manifest of version 3 ({manifest}): ",
                3, "-"
            )),
            "{how:?}: {last}"
        );
    }
}

/// Files under `dir` (recursively), relative to `root`, sorted.
fn files_under(root: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = vec![root.join(dir)];
    while let Some(path) = stack.pop() {
        for entry in fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap().path();
            if entry.is_dir() {
                stack.push(entry);
            } else {
                let relative = entry.strip_prefix(root).unwrap();
                out.push(relative.to_string_lossy().to_string());
            }
        }
    }
    out.sort();
    out
}

/// A dataset of 2,000 rows in 8 fragments with a btree index on `id`, then a
/// stable partition by `category` into 3 destinations, recorded in the FRI
/// (the index keeps its stored addresses): an indexed query translates
/// through the row map. Returns the URI and the row map's relative path.
fn partitioned(dir: &Path) -> (String, String) {
    let uri = table_uri(dir);
    ok(&[
        "append",
        &uri,
        "--rows",
        "2000",
        "--fragment-rows",
        "250",
        "--dim",
        "4",
    ]);
    ok(&[
        "create-index",
        &uri,
        "--name",
        "ids",
        "--column",
        "id",
        "--type",
        "btree",
    ]);
    let report = ok(&["partition", &uri, "--by", "category", "--destinations", "3"]);
    assert!(
        report.contains("transition recorded in the FRI"),
        "{report}"
    );
    let maps = files_under(&dir.join("table"), "_fri");
    let [map] = maps.as_slice() else {
        panic!("expected one row map, found {maps:?}");
    };
    assert!(map.ends_with("/stable_partition.lance"), "{map}");
    (uri, map.clone())
}

/// The ids an indexed query `id < 4` returns (few enough rows that the
/// planner takes the index path).
fn query_ids(uri: &str) -> Vec<i64> {
    let stdout = ok(&[
        "query",
        uri,
        "--filter",
        "id < 4",
        "--columns",
        "id",
        "--format",
        "json",
    ]);
    let mut ids: Vec<i64> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn a_damaged_row_map_fails_translated_queries_and_remap_as_corrupt() {
    let cases = [
        Damage::DropTail(1),
        Damage::TruncateTo(100),
        // The footer's magic number and its offsets.
        Damage::FlipFromEnd(1),
        Damage::FlipFromEnd(33),
        Damage::FlipFromEnd(40),
    ];
    let built = tempfile::tempdir().unwrap();
    let (_, map) = partitioned(built.path());
    for how in cases {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(built.path(), dir.path());
        let uri = table_uri(dir.path());
        assert_eq!(query_ids(&uri), (0..4).collect::<Vec<_>>());
        damage(&dir.path().join("table").join(&map), how);
        let query = ["query", &uri, "--filter", "id < 4", "--columns", "id"];
        fails_corrupt(&query, &map);
        fails_corrupt(&["remap", &uri], &map);
    }
}

/// One built-in index type under test: how to build it and a query it serves.
struct IndexCase {
    kind: &'static str,
    column: &'static str,
    query: &'static [&'static str],
}

const INDEX_CASES: [IndexCase; 4] = [
    IndexCase {
        kind: "btree",
        column: "id",
        query: &["--filter", "id = 7"],
    },
    IndexCase {
        kind: "bitmap",
        column: "category",
        query: &["--filter", "category = 3"],
    },
    IndexCase {
        kind: "ngram",
        column: "text",
        query: &["--filter", "contains(text, 'umen')"],
    },
    IndexCase {
        kind: "ivf-flat",
        column: "vec",
        query: &[
            "--nearest",
            "vec",
            "--vector",
            "0.1,0.2,0.3,0.4",
            "--k",
            "5",
        ],
    },
];

/// Appends the 600 rows (3 fragments of 200) every indexed fixture holds.
fn append_rows(uri: &str) {
    ok(&[
        "append",
        uri,
        "--rows",
        "600",
        "--fragment-rows",
        "200",
        "--dim",
        "4",
    ]);
}

/// Builds `case`'s index named `name`.
fn create_index(uri: &str, case: &IndexCase, name: &str) {
    let mut build = vec![
        "create-index",
        uri,
        "--name",
        name,
        "--column",
        case.column,
        "--type",
        case.kind,
    ];
    if case.kind == "ivf-flat" {
        build.extend(["--partitions", "4"]);
    }
    ok(&build);
}

/// A dataset of 600 rows in 3 fragments with one `case` index; returns the
/// URI and the segment's files (relative to the dataset root).
fn indexed(dir: &Path, case: &IndexCase) -> (String, Vec<String>) {
    let uri = table_uri(dir);
    append_rows(&uri);
    create_index(&uri, case, "ix");
    let inspect: Value = serde_json::from_str(&ok(&["inspect", &uri, "--json"])).unwrap();
    let uuid = inspect["indices"][0]["uuid"].as_str().unwrap().to_string();
    let files = files_under(&dir.join("table"), &format!("_indices/{uuid}"));
    assert!(!files.is_empty());
    (uri, files)
}

/// Copies the dataset under `from` into `to` (a fresh copy to damage).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap().path();
        let target = to.join(entry.file_name().unwrap());
        if entry.is_dir() {
            copy_tree(&entry, &target);
        } else {
            fs::copy(&entry, &target).unwrap();
        }
    }
}

#[test]
fn every_file_of_every_index_type_damaged_fails_its_query_as_corrupt() {
    for case in &INDEX_CASES {
        let built = tempfile::tempdir().unwrap();
        let (_, files) = indexed(built.path(), case);
        for file in &files {
            for how in [
                Damage::DropTail(1),
                Damage::FlipFromEnd(1),
                // (A flipped low byte of the column-metadata offset, 40 bytes from
                // the end, goes unnoticed in the ngram file: not claimed.)
                Damage::TruncateTo(0),
            ] {
                let dir = tempfile::tempdir().unwrap();
                copy_tree(built.path(), dir.path());
                let uri = table_uri(dir.path());
                let mut query = vec!["query", uri.as_str()];
                query.extend(case.query);
                ok(&query);
                damage(&dir.path().join("table").join(file), how);
                fails_corrupt(&query, file);
            }
        }
    }
}

/// Every file of a dataset with all four index types and a deletion file,
/// relative to the dataset root (manifests excluded).
fn all_files(dir: &Path) -> Vec<String> {
    let root = dir.join("table");
    let mut files = Vec::new();
    for sub in ["data", "_deletions", "_indices"] {
        files.extend(files_under(&root, sub));
    }
    files.sort();
    files
}

#[test]
fn verify_finds_every_flipped_bit_and_names_the_file() {
    let built = tempfile::tempdir().unwrap();
    let uri = table_uri(built.path());
    append_rows(&uri);
    for case in &INDEX_CASES {
        create_index(&uri, case, &format!("ix_{}", case.column));
    }
    ok(&["delete", &uri, "--filter", "id % 9 = 4"]);
    let clean: Value = serde_json::from_str(&ok(&["verify", &uri, "--json"])).unwrap();
    let files = all_files(built.path());
    assert_eq!(clean["problems"], serde_json::json!([]));
    // ...and the latest version's transaction file.
    assert_eq!(
        clean["files_verified"].as_u64(),
        Some(files.len() as u64 + 1),
        "{clean:#}"
    );
    assert_eq!(clean["files_without_checksum"], 0);
    let text = ok(&["verify", &uri]);
    assert!(
        text.starts_with(&format!("verified {} files (", files.len() + 1)),
        "{text}"
    );
    let deep: Value = serde_json::from_str(&ok(&["verify", &uri, "--deep", "--json"])).unwrap();
    assert_eq!(deep["problems"], serde_json::json!([]));
    assert_eq!(
        deep["index_data"]["segments_checked"].as_u64(),
        Some(INDEX_CASES.len() as u64),
        "{deep:#}"
    );
    assert_eq!(
        deep["index_data"]["segments_unchecked"],
        serde_json::json!([])
    );
    let deep_text = ok(&["verify", &uri, "--deep"]);
    assert!(
        deep_text.contains(&format!(
            "compared {} index segments ({} entries) with their data",
            INDEX_CASES.len(),
            deep["index_data"]["entries_checked"]
        )),
        "{deep_text}"
    );

    for (n, file) in files.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(built.path(), dir.path());
        let uri = table_uri(dir.path());
        let path = dir.path().join("table").join(file);
        let mut bytes = fs::read(&path).unwrap();
        // A different bit and place in every file.
        let at = (n * 7919) % bytes.len();
        bytes[at] ^= 1 << (n % 8);
        fs::write(&path, bytes).unwrap();
        // A damaged index file fails the deep check of its segment too, as
        // one clean line (never a panic); the file check names the file.
        let args: &[&str] = if n % 4 == 0 {
            &["verify", &uri, "--json", "--deep"]
        } else {
            &["verify", &uri, "--json"]
        };
        let output = refract(args);
        assert_eq!(output.status.code(), Some(1), "{file}: verify succeeded");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        let problems: Vec<&Value> = report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["file"] == file.as_str())
            .collect();
        assert_eq!(problems.len(), 1, "{file}: {report:#}");
        for other in report["problems"].as_array().unwrap() {
            let name = other["file"].as_str().unwrap();
            assert!(
                name == file || (file.starts_with(name) && name.starts_with("_indices/")),
                "{file}: only the file and its segment are named: {report:#}"
            );
        }
        let error = problems[0]["error"].as_str().unwrap();
        assert!(
            error.contains("checksum mismatch in block"),
            "{file}: {error}"
        );
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            stderr.starts_with("error: corrupt dataset ")
                && stderr.ends_with(&format!(
                    "{} file(s) failed verification\n",
                    report["problems"].as_array().unwrap().len()
                )),
            "{stderr}"
        );
    }
}
