//! Running the `refract` binary from the CLI integration tests.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `refract args` and returns what it did.
pub fn refract(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_refract"))
        .args(args)
        .output()
        .expect("the refract binary runs")
}

/// Runs `refract args`, which must succeed; returns its stdout.
pub fn ok(args: &[&str]) -> String {
    let output = refract(args);
    assert!(
        output.status.success(),
        "refract {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Runs `refract args`, which must fail with a one-line `error: ` message;
/// returns that line (with its newline) and the exit code.
pub fn refused(args: &[&str]) -> (String, i32) {
    let output = refract(args);
    assert!(!output.status.success(), "refract {args:?} succeeded");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "refract {args:?}: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    (stderr, output.status.code().unwrap())
}
