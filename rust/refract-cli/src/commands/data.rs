//! `append`, `delete` and `scan`.

use super::location::{Location, VersionSelector};
use arrow_array::RecordBatch;
use refract_core::{Error, Result};
use refract_table::dataset::{Dataset, WriteOptions};

use crate::args::RowFormat;
use crate::output::render_rows;
use crate::synthetic;

/// Rows per fragment when `--fragment-rows` is not given.
pub const DEFAULT_FRAGMENT_ROWS: u64 = 1_048_576;

/// Opens the dataset `at`, or creates it with the synthetic schema of `dim` dimensions.
///
/// # Errors
/// Those of opening other than NotFound (Corrupt, NotSupported, External);
/// those of [`Dataset::create`] when there is nothing to open.
pub async fn open_or_create(at: &Location, dim: i32) -> Result<Dataset> {
    match at.open().await {
        Ok(dataset) => Ok(dataset),
        Err(Error::NotFound { .. }) => {
            Dataset::create(&at.uri, synthetic::schema(dim), at.open_options()).await
        }
        Err(e) => Err(e),
    }
}

/// Appends `rows` synthetic rows starting at id `start` to `dataset`.
///
/// # Errors
/// InvalidInput for a zero `fragment_rows` or a non-positive `dim`; the errors
/// of appending (a Conflict, store errors). Earlier slices stay committed.
pub async fn append_synthetic(
    dataset: &mut Dataset,
    rows: u64,
    fragment_rows: u64,
    start: i64,
    dim: i32,
) -> Result<()> {
    if fragment_rows == 0 {
        return Err(Error::invalid_input("--fragment-rows must be positive"));
    }
    let options = WriteOptions {
        max_rows_per_file: fragment_rows,
        ..WriteOptions::default()
    };
    // Generate and append in slices so memory stays bounded on big appends;
    // each slice is a whole number of fragments.
    let slice_rows = fragment_rows
        .max(1)
        .saturating_mul((DEFAULT_FRAGMENT_ROWS / fragment_rows).max(1));
    let mut done = 0u64;
    while done < rows {
        let n = slice_rows.min(rows - done);
        let batches = synthetic::batches(start + done as i64, n, n.min(65_536), dim)?;
        dataset.append(batches, &options).await?;
        done += n;
    }
    Ok(())
}

/// `refract append`.
///
/// # Errors
/// Those of [`open_or_create`] and [`append_synthetic`].
pub async fn append(
    at: &Location,
    rows: u64,
    fragment_rows: Option<u64>,
    start: i64,
    dim: i32,
) -> Result<()> {
    let mut dataset = open_or_create(at, dim).await?;
    let fragment_rows = fragment_rows.unwrap_or(DEFAULT_FRAGMENT_ROWS);
    append_synthetic(&mut dataset, rows, fragment_rows, start, dim).await?;
    crate::out!(
        "appended {rows} rows; version {}, {} fragments",
        dataset.version(),
        dataset.fragments().len()
    );
    Ok(())
}

/// `refract delete`.
///
/// # Errors
/// Those of opening; InvalidInput for a filter that does not parse or fit the
/// schema; the errors of reading and committing.
pub async fn delete(at: &Location, filter: &str) -> Result<()> {
    let mut dataset = at.open().await?;
    let result = dataset.delete(filter).await?;
    crate::out!(
        "deleted {} rows; version {}",
        result.rows_deleted,
        dataset.version()
    );
    Ok(())
}

/// What `refract scan` reads.
#[derive(Debug, Clone, Default)]
pub struct ScanRequest {
    /// Columns to project (all when `None`).
    pub columns: Option<Vec<String>>,
    /// Filter expression.
    pub filter: Option<String>,
    /// Maximum number of rows.
    pub limit: Option<u64>,
    /// Add `_rowaddr`.
    pub with_row_address: bool,
}

/// Reads the rows `request` names.
///
/// # Errors
/// InvalidInput for an unknown column or a bad filter; Corrupt, NotFound or
/// External when data files cannot be read.
pub async fn read_rows(dataset: &Dataset, request: &ScanRequest) -> Result<RecordBatch> {
    let mut scanner = dataset.scan();
    if let Some(columns) = &request.columns {
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        scanner = scanner.project(&names);
    }
    if let Some(filter) = &request.filter {
        scanner = scanner.filter(filter)?;
    }
    if let Some(limit) = request.limit {
        scanner = scanner.limit(limit);
    }
    if request.with_row_address {
        scanner = scanner.with_row_address();
    }
    scanner.try_into_batch().await
}

/// `refract scan`: rows of the latest version, or of `version`.
///
/// # Errors
/// Those of [`Location::open_at`] and [`read_rows`]; External when the rows
/// cannot be rendered.
pub async fn scan(
    at: &Location,
    version: Option<&VersionSelector>,
    request: &ScanRequest,
    format: RowFormat,
) -> Result<()> {
    let dataset = at.open_at(version).await?;
    let rows = read_rows(&dataset, request).await?;
    let text = render_rows(&[rows], format)?;
    if format == RowFormat::Table {
        crate::out!("{text}");
    } else {
        crate::output::write_stdout(format_args!("{text}"));
    }
    Ok(())
}
