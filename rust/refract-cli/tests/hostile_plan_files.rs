//! Hostile plan and result files for `refract compact-exec` / `compact-commit`:
//! whatever a file says, the tool returns an error (never a panic), and a
//! commit never publishes a version that loses, duplicates or invents rows or
//! references a file outside the dataset root.
//!
//! Mutation cases: `REFRACT_FUZZ_CASES` (default 256). (This crate has no
//! proptest/rstest dev-dependency: cases are loops, mutations come from a
//! seeded splitmix64.)

use std::path::PathBuf;

use refract_cli::args::Command;
use refract_cli::commands::run;
use refract_core::Error;
use refract_optimize::compaction::{plan_compaction, plan_from_json, CompactionOptions};
use refract_table::testing::{sample_rows, sample_schema, snapshot};
use refract_table::{Dataset, WriteOptions};
use serde_json::Value;

/// An edit applied to a serialized plan.
type PlanEdit = fn(&mut Value);

fn fuzz_cases() -> u32 {
    std::env::var("REFRACT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn options() -> CompactionOptions {
    CompactionOptions {
        target_rows_per_fragment: 25,
        ..CompactionOptions::default()
    }
}

/// A local dataset of 60 rows in six fragments of 10, with deletions.
async fn dataset(dir: &tempfile::TempDir) -> Dataset {
    let uri = dir.path().join("table").to_str().unwrap().to_string();
    let mut dataset = Dataset::create(&uri, sample_schema(), Default::default())
        .await
        .unwrap();
    let options = WriteOptions {
        max_rows_per_file: 10,
        ..WriteOptions::default()
    };
    dataset
        .append(vec![sample_rows(0, 60)], &options)
        .await
        .unwrap();
    dataset.delete("id % 7 = 3").await.unwrap();
    dataset
}

fn valid_plan_json(dataset: &Dataset) -> String {
    serde_json::to_string(&plan_compaction(dataset, &options()).unwrap()).unwrap()
}

/// splitmix64: deterministic mutation positions and values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[test]
fn arbitrary_and_mutated_plan_text_is_an_error_not_a_panic() {
    let mut rng = Rng(7);
    let alphabet: Vec<char> = "{}[]\":,0123456789-eE.truefalsnl \\xyz_é\u{0}"
        .chars()
        .collect();
    for _ in 0..fuzz_cases() {
        let len = (rng.next() % 300) as usize;
        let text: String = (0..len)
            .map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize])
            .collect();
        let _ = plan_from_json(&text);

        let mut mutated: Vec<char> = PLAN_FIXTURE.chars().collect();
        for _ in 0..1 + rng.next() % 3 {
            let at = (rng.next() % mutated.len() as u64) as usize;
            mutated[at] = alphabet[(rng.next() % alphabet.len() as u64) as usize];
        }
        let _ = plan_from_json(&mutated.into_iter().collect::<String>());
        let cut = (rng.next() % PLAN_FIXTURE.len() as u64) as usize;
        assert!(plan_from_json(&PLAN_FIXTURE[..cut]).is_err());
    }
    plan_from_json(PLAN_FIXTURE).unwrap();
}

/// A plan as `compact-plan` prints it (fixed, so mutations need no dataset).
const PLAN_FIXTURE: &str = r#"{"read_version":3,"options":{"target_rows_per_fragment":25,"max_rows_per_group":65536,"max_bytes_per_file":null,"materialize_deletions":true,"materialize_deletions_threshold":0.1,"num_threads":null,"batch_size":null,"defer_index_remap":false,"max_source_fragments":null,"max_source_rows":null,"max_source_bytes":null,"excluded_fragment_ids":[]},"tasks":[{"task_index":0,"read_version":3,"plan":{"fragment_ids":[1,2,3],"output_rows":[26],"partial":false},"options":{"target_rows_per_fragment":25,"max_rows_per_group":65536,"max_bytes_per_file":null,"materialize_deletions":true,"materialize_deletions_threshold":0.1,"num_threads":null,"batch_size":null,"defer_index_remap":false,"max_source_fragments":null,"max_source_rows":null,"max_source_bytes":null,"excluded_fragment_ids":[]}}]}"#;

#[test]
fn hostile_plans_are_invalid_input() {
    let cases = [
        (
            "deep nesting",
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        ),
        (
            "huge number",
            PLAN_FIXTURE.replace("\"output_rows\":[26]", "\"output_rows\":[1e300]"),
        ),
        ("negative id", PLAN_FIXTURE.replace("[1,2,3]", "[-1,2,3]")),
        (
            "zero batch",
            PLAN_FIXTURE.replace("\"batch_size\":null", "\"batch_size\":0"),
        ),
        (
            "task options differ from the plan's",
            PLAN_FIXTURE.replace(
                "\"excluded_fragment_ids\":[]}}]}",
                "\"excluded_fragment_ids\":[9]}}]}",
            ),
        ),
        ("task without options", {
            let mut plan: Value = serde_json::from_str(PLAN_FIXTURE).unwrap();
            plan["tasks"][0].as_object_mut().unwrap().remove("options");
            plan.to_string()
        }),
        (
            "bad target",
            PLAN_FIXTURE.replace(
                "\"target_rows_per_fragment\":25",
                "\"target_rows_per_fragment\":0",
            ),
        ),
        (
            "inconsistent task",
            PLAN_FIXTURE.replace("\"task_index\":0", "\"task_index\":7"),
        ),
    ];
    for (name, text) in cases {
        assert_ne!(text, PLAN_FIXTURE, "{name}: the edit must apply");
        let err = plan_from_json(&text).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{name}: {err:?}");
    }
}

/// Edits the first task of a valid plan, runs `compact-exec` on it, and returns its error.
fn exec_with(edit: impl FnOnce(&mut Value)) -> Error {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let dataset = runtime.block_on(dataset(&dir));
    let mut plan: Value = serde_json::from_str(&valid_plan_json(&dataset)).unwrap();
    edit(&mut plan["tasks"][0]["plan"]);
    let path = dir.path().join("plan.json");
    std::fs::write(&path, plan.to_string()).unwrap();
    let err = runtime
        .block_on(run(
            Command::CompactExec {
                uri: dataset.uri().to_string(),
                plan: path,
                task: 0,
            },
            &Default::default(),
        ))
        .unwrap_err();
    let after = runtime.block_on(Dataset::open(dataset.uri())).unwrap();
    assert_eq!(after.version(), dataset.version(), "exec never commits");
    err
}

#[test]
fn hostile_tasks_are_refused() {
    let cases: [(&str, PlanEdit); 6] = [
        ("unknown fragment", |p| {
            p["fragment_ids"] = serde_json::json!([1, 2, 99])
        }),
        ("not contiguous", |p| {
            p["fragment_ids"] = serde_json::json!([1, 3])
        }),
        ("out of order", |p| {
            p["fragment_ids"] = serde_json::json!([2, 1])
        }),
        ("more output rows than input", |p| {
            p["output_rows"] = serde_json::json!([1_000_000_000_000u64])
        }),
        ("fewer output rows than input", |p| {
            p["output_rows"] = serde_json::json!([1])
        }),
        ("zero-row outputs", |p| {
            p["output_rows"] = serde_json::json!([0, 0, 0])
        }),
    ];
    for (name, edit) in cases {
        let err = exec_with(edit);
        assert!(
            matches!(err, Error::InvalidInput { .. } | Error::Corrupt { .. }),
            "{name}: {err:?}"
        );
    }
}

/// Executes the first task for real, edits its result, runs `compact-commit`.
/// Returns the commit outcome and whether the rows are exactly as before.
fn commit_with(edit: impl FnOnce(&mut Value, &Dataset)) -> (Result<(), Error>, bool) {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let dataset = runtime.block_on(dataset(&dir));
    let before = runtime.block_on(snapshot(&dataset)).unwrap();
    let plan = plan_compaction(&dataset, &options()).unwrap();
    let result = runtime.block_on(plan.tasks[0].execute(&dataset)).unwrap();
    let mut result = serde_json::to_value(&result).unwrap();
    edit(&mut result, &dataset);
    let path: PathBuf = dir.path().join("result.json");
    std::fs::write(&path, result.to_string()).unwrap();
    let outcome = runtime.block_on(run(
        Command::CompactCommit {
            uri: dataset.uri().to_string(),
            results: vec![path],
            json: true,
        },
        &Default::default(),
    ));
    let latest = runtime.block_on(Dataset::open(dataset.uri())).unwrap();
    // An unreadable latest version is a change too.
    let unchanged = runtime
        .block_on(snapshot(&latest))
        .is_ok_and(|rows| rows == before);
    (outcome, unchanged)
}

type ResultEdit = fn(&mut Value, &Dataset);

#[test]
fn hostile_results_are_refused_and_change_nothing() {
    let cases: [(&str, ResultEdit); 5] = [
        ("path escapes", |r, _| {
            r["new_files"][0]["path"] = "../../outside.lance".into()
        }),
        ("absolute path", |r, _| {
            r["new_files"][0]["path"] = "/etc/passwd".into()
        }),
        ("garbage survivors", |r, _| {
            r["surviving_old_addresses"] = serde_json::json!([1, 2, 3])
        }),
        ("unknown source", |r, _| {
            r["old_fragment_ids"] = serde_json::json!([97, 98, 99])
        }),
        ("future read version", |r, _| {
            r["read_version"] = 1_000.into()
        }),
    ];
    for (name, edit) in cases {
        let (outcome, unchanged) = commit_with(edit);
        let err = outcome.unwrap_err();
        assert!(
            !matches!(err, Error::External { .. }),
            "{name}: a hostile result is the caller's input or corrupt: {err:?}"
        );
        assert!(unchanged, "{name}");
    }
}

/// A result that lies about its rows or points at someone else's file would make
/// the committed version lose or duplicate rows; it must be refused.
#[test]
fn lying_results_never_commit_a_wrong_version() {
    let mut failures = Vec::new();
    let cases: [(&str, ResultEdit); 3] = [
        ("row count lies", |r, _| {
            r["new_files"][0]["num_rows"] = 5.into()
        }),
        ("file of another fragment", |r, d| {
            let other = &d.fragments().last().unwrap().files[0];
            r["new_files"][0]["path"] = other.path.as_str().into();
        }),
        ("missing file", |r, _| {
            r["new_files"][0]["path"] = "data/never-written.lance".into()
        }),
    ];
    for (name, edit) in cases {
        let (outcome, unchanged) = commit_with(edit);
        failures.extend(
            (outcome.is_ok() || !unchanged)
                .then(|| format!("{name}: outcome {outcome:?}, rows unchanged: {unchanged}")),
        );
    }
    assert!(
        failures.is_empty(),
        "committed lying results: {failures:#?}"
    );
}
