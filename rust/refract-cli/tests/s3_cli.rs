//! The CLI on a real S3 server (moto, started by `ci/test.sh`): commands
//! print on `s3://` what they print on a local directory, concurrent writers
//! in separate processes lose nothing, and the environment configures the
//! store as `--storage-option` does.
//!
//! Needs `REFRACT_TEST_S3_ENDPOINT`; skips loudly without it unless
//! `REFRACT_TEST_S3_REQUIRED` is set.

mod support;

use std::process::Command;

use refract_table::io::StorageOptions;
use refract_table::testing::s3_test_location;
use support::{ok, refract};

struct S3 {
    uri: String,
    storage: StorageOptions,
}

impl S3 {
    fn new(name: &str) -> Option<S3> {
        let (uri, storage) = s3_test_location(&format!("cli-{name}"))?;
        Some(S3 { uri, storage })
    }

    /// `--storage-option` arguments that reach the server.
    fn options(&self) -> Vec<String> {
        self.storage
            .keys()
            .flat_map(|key| {
                let value = self.storage.get(key).unwrap_or_default();
                ["--storage-option".to_string(), format!("{key}={value}")]
            })
            .collect()
    }

    /// `refract <command> <uri> <rest> --storage-option ...`, which must succeed.
    fn ok(&self, command: &str, rest: &[&str]) -> String {
        let mut args: Vec<String> = vec![command.to_string(), self.uri.clone()];
        args.extend(rest.iter().map(|s| s.to_string()));
        args.extend(self.options());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&args)
    }
}

/// The same commands on a local directory.
fn local(dir: &str, command: &str, rest: &[&str]) -> String {
    let mut args = vec![command, dir];
    args.extend_from_slice(rest);
    ok(&args)
}

#[test]
fn commands_print_on_s3_what_they_print_locally() {
    let Some(s3) = S3::new("same") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().join("t");
    let dir = dir.to_str().unwrap();
    let steps: [(&str, &[&str]); 7] = [
        ("append", &["--rows", "3000", "--fragment-rows", "300"]),
        ("delete", &["--filter", "id % 7 = 1"]),
        (
            "create-index",
            &["--name", "by_id", "--column", "id", "--type", "btree"],
        ),
        (
            "create-index",
            &[
                "--name", "by_cat", "--column", "category", "--type", "bitmap",
            ],
        ),
        ("compact", &["--target-rows", "1000", "--until-noop"]),
        (
            "append",
            &["--rows", "500", "--fragment-rows", "100", "--start", "3000"],
        ),
        ("maintain", &["--target-rows", "1000", "--until-noop"]),
    ];
    for (command, rest) in steps {
        s3.ok(command, rest);
        local(dir, command, rest);
    }
    // The FRI commands and the distributed flow (their reports name random
    // ids, so only their effect on the table is compared).
    let more: [(&str, &[&str]); 6] = [
        ("compact", &["--target-rows", "300", "--defer-index-remap"]),
        ("partition", &["--by", "id", "--destinations", "2"]),
        ("fri", &["--json"]),
        ("remap", &[]),
        ("trim", &[]),
        ("optimize-indices", &[]),
    ];
    for (command, rest) in more {
        s3.ok(command, rest);
        local(dir, command, rest);
    }
    s3.ok(
        "append",
        &["--rows", "400", "--fragment-rows", "50", "--start", "3500"],
    );
    local(
        dir,
        "append",
        &["--rows", "400", "--fragment-rows", "50", "--start", "3500"],
    );
    let work = tempfile::tempdir().unwrap();
    for (name, run) in [
        (
            "s3",
            &(|c: &str, r: &[&str]| s3.ok(c, r)) as &dyn Fn(&str, &[&str]) -> String,
        ),
        ("local", &|c: &str, r: &[&str]| local(dir, c, r)),
    ] {
        let plan = work.path().join(format!("{name}-plan.json"));
        std::fs::write(&plan, run("compact-plan", &["--target-rows", "1000"])).unwrap();
        let plan_text = plan.to_str().unwrap();
        let result = work.path().join(format!("{name}-result.json"));
        std::fs::write(&result, run("compact-exec", &[plan_text, "--task", "0"])).unwrap();
        run("compact-commit", &[result.to_str().unwrap()]);
    }
    let reads: [(&str, &[&str]); 4] = [
        (
            "scan",
            &["--with-row-address", "--columns", "id", "--format", "csv"],
        ),
        ("scan", &["--columns", "id,category", "--format", "csv"]),
        (
            "query",
            &[
                "--filter",
                "id >= 1200 AND id < 1300",
                "--columns",
                "id",
                "--format",
                "csv",
            ],
        ),
        (
            "query",
            &[
                "--filter",
                "category = 3",
                "--columns",
                "id",
                "--format",
                "csv",
            ],
        ),
    ];
    for (command, rest) in reads {
        assert_eq!(
            s3.ok(command, rest),
            local(dir, command, rest),
            "{command} {rest:?}"
        );
    }
    let s3_inspect: serde_json::Value =
        serde_json::from_str(&s3.ok("inspect", &["--json"])).unwrap();
    let local_inspect: serde_json::Value =
        serde_json::from_str(&local(dir, "inspect", &["--json"])).unwrap();
    assert_eq!(s3_inspect["version"], local_inspect["version"]);
    assert_eq!(
        s3_inspect["fragments"].as_array().map(Vec::len),
        local_inspect["fragments"].as_array().map(Vec::len)
    );
    let shown = s3.ok("inspect", &[]);
    assert!(!shown.contains("aws_secret"), "{shown}");
}

#[test]
fn concurrent_appends_in_separate_processes_lose_nothing() {
    let Some(s3) = S3::new("writers") else {
        return;
    };
    s3.ok("append", &["--rows", "10", "--fragment-rows", "10"]);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let start = (1_000 * (w + 1)).to_string();
            let mut args = vec![
                "append".to_string(),
                s3.uri.clone(),
                "--rows".to_string(),
                "50".to_string(),
                "--fragment-rows".to_string(),
                "25".to_string(),
                "--start".to_string(),
                start,
            ];
            args.extend(s3.options());
            Command::new(env!("CARGO_BIN_EXE_refract"))
                .args(&args)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut writer in writers {
        assert!(writer.wait().unwrap().success());
    }
    let csv = s3.ok("scan", &["--columns", "id", "--format", "csv"]);
    let mut ids: Vec<i64> = csv.lines().skip(1).map(|l| l.parse().unwrap()).collect();
    ids.sort_unstable();
    let mut expected: Vec<i64> = (0..10).collect();
    for w in 0..4 {
        expected.extend(1_000 * (w + 1)..1_000 * (w + 1) + 50);
    }
    assert_eq!(ids, expected, "every append landed exactly once");
    let versions = s3.ok("versions", &[]);
    assert!(versions.contains('6'), "six versions: {versions}");
}

#[test]
fn bad_storage_options_are_one_line_usage_or_input_errors() {
    let Some(s3) = S3::new("bad") else {
        return;
    };
    let output = refract(&[
        "inspect",
        &s3.uri,
        "--storage-option",
        "aws_secret_acess_key=hunter2",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("aws_secret_acess_key"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let output = refract(&["inspect", &s3.uri, "--storage-option", "no-equals-sign"]);
    assert_eq!(output.status.code(), Some(2));
}
