//! `refract demo`: the main job, end to end on a local dataset.

use std::path::PathBuf;
use std::time::Instant;

use refract_core::{Error, Result};
use refract_table::dataset::Dataset;

use super::data::{append_synthetic, open_or_create, read_rows, ScanRequest};
use crate::output::render_summary;
use crate::synthetic;

/// Rows the demo starts with.
const DEMO_ROWS: u64 = 200_000;
/// Rows per fragment of the demo's appends (small on purpose: compaction has work).
const DEMO_FRAGMENT_ROWS: u64 = 10_000;

/// A step's name and what it measured, for the final summary.
struct Step {
    name: String,
    detail: String,
}

/// Runs the demo in `dir` (a fresh directory under the system temp dir by default).
pub async fn run(dir: Option<PathBuf>) -> Result<()> {
    let dir = match dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("refract-demo-{}", std::process::id())),
    };
    if dir.exists() && std::fs::read_dir(&dir).map(|mut d| d.next().is_some()).unwrap_or(false) {
        return Err(Error::invalid_input(format!(
            "--dir {} is not empty; the demo needs a fresh directory",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::external("creating the demo directory", e))?;
    let uri = dir.to_string_lossy().to_string();
    println!("refract demo: dataset at {uri}");
    let mut steps = Vec::new();

    let started = Instant::now();
    let mut dataset = open_or_create(&uri, synthetic::DEFAULT_DIM).await?;
    append_synthetic(&mut dataset, DEMO_ROWS, DEMO_FRAGMENT_ROWS, 0, synthetic::DEFAULT_DIM).await?;
    steps.push(Step {
        name: "append".into(),
        detail: format!(
            "{DEMO_ROWS} rows in {} fragments ({:.2?})",
            dataset.fragments().len(),
            started.elapsed()
        ),
    });

    let started = Instant::now();
    let deleted = dataset.delete("id % 10 = 3 OR (id >= 40000 AND id < 60000)").await?;
    steps.push(Step {
        name: "delete".into(),
        detail: format!("{} rows deleted ({:.2?})", deleted.rows_deleted, started.elapsed()),
    });

    check_scan(&dataset, &mut steps).await?;

    let rows: Vec<(String, String)> = steps
        .into_iter()
        .map(|step| (step.name, step.detail))
        .collect();
    println!("{}", render_summary("summary", &rows));
    println!(
        "final: version {}, {} fragments, {} live rows",
        dataset.version(),
        dataset.fragments().len(),
        dataset.count_rows(None).await?
    );
    Ok(())
}

/// Scans the table and checks content and order against the synthetic model.
async fn check_scan(dataset: &Dataset, steps: &mut Vec<Step>) -> Result<()> {
    let started = Instant::now();
    let request = ScanRequest {
        columns: Some(vec!["id".into()]),
        ..ScanRequest::default()
    };
    let rows = read_rows(dataset, &request).await?;
    let ids = rows
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .ok_or_else(|| Error::corrupt("scan", "id column is not int64"))?;
    let expected: Vec<i64> = (0..DEMO_ROWS as i64)
        .filter(|id| id % 10 != 3 && !(40_000..60_000).contains(id))
        .collect();
    if ids.values().as_ref() != expected.as_slice() {
        return Err(Error::corrupt(
            "demo dataset",
            "full scan does not match the expected rows and order",
        ));
    }
    steps.push(Step {
        name: "scan check".into(),
        detail: format!(
            "{} rows, content and order verified ({:.2?})",
            expected.len(),
            started.elapsed()
        ),
    });
    Ok(())
}
