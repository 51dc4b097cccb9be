//! `refract._refract.Dataset`: one dataset version, and the table operations
//! (write, scan, delete, versions, tags, retention). The pylance-shaped API
//! is the Python class `refract.Dataset`, which wraps this one.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::TryStreamExt;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use refract_core::Error;
use refract_table::dataset::{Dataset, OpenOptions, WriteOptions};
use refract_table::io::StorageOptions;
use refract_table::{
    cleanup_old_versions, create_tag, delete_tag, list_tags, Operation, RetentionPolicy,
};

use crate::arrow_io::{import_stream, ArrowSchema, ArrowStream, BlockingReader};
use crate::errors::IntoPyResult;
use crate::runtime::{block_on, runtime};

/// Storage options for `uri`: the given ones, then the environment (`AWS_*`,
/// `AZURE_*`, `GOOGLE_*`) for the keys they leave out, as the CLI does.
pub fn open_options(uri: &str, storage_options: Option<HashMap<String, String>>) -> OpenOptions {
    let mut storage: StorageOptions = storage_options.unwrap_or_default().into_iter().collect();
    storage.fill_from_environment(uri, std::env::vars());
    OpenOptions {
        storage_options: storage,
        ..OpenOptions::default()
    }
}

/// Serializes a report for the Python layer (which parses it with `json`).
pub fn to_json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value)
        .map_err(|err| PyValueError::new_err(format!("cannot serialize the report: {err}")))
}

/// One fragment for Python: `(id, physical_rows, deleted_rows, [(path, size_bytes, num_rows)])`.
type FragmentInfo = (u64, u64, u64, Vec<(String, u64, u64)>);

/// One dataset version (immutable: operations return the new version).
#[pyclass(module = "refract._refract", name = "Dataset", frozen)]
pub struct PyDataset {
    /// The Rust handle.
    pub inner: Dataset,
}

impl PyDataset {
    /// Wraps a Rust handle.
    pub fn new(inner: Dataset) -> Self {
        Self { inner }
    }
}

#[pymethods]
impl PyDataset {
    /// Opens `uri` at `version` (the latest when None).
    #[staticmethod]
    #[pyo3(signature = (uri, version=None, storage_options=None))]
    fn open(
        py: Python<'_>,
        uri: String,
        version: Option<u64>,
        storage_options: Option<HashMap<String, String>>,
    ) -> PyResult<Self> {
        let options = OpenOptions {
            version,
            ..open_options(&uri, storage_options)
        };
        let dataset = block_on(py, Dataset::open_with(&uri, options))?.py_result(py)?;
        Ok(Self::new(dataset))
    }

    /// Writes the Arrow stream `data` exports to `uri`: `mode` "create" (a
    /// new dataset; fails when one exists) or "append" (creates the dataset
    /// when absent). Returns the version written.
    #[staticmethod]
    #[pyo3(signature = (data, uri, mode, max_rows_per_file, max_rows_per_group, storage_options=None))]
    fn write(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        uri: String,
        mode: &str,
        max_rows_per_file: u64,
        max_rows_per_group: u64,
        storage_options: Option<HashMap<String, String>>,
    ) -> PyResult<Self> {
        if mode != "create" && mode != "append" {
            return Err(crate::errors::to_py_err(
                py,
                Error::invalid_input(format!(
                    "mode must be \"create\" or \"append\", got \"{mode}\""
                )),
            ));
        }
        let reader = import_stream(data)?;
        let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
        let options = open_options(&uri, storage_options);
        let write_options = WriteOptions {
            max_rows_per_file,
            max_rows_per_group,
        };
        let create = mode == "create";
        let future = async move {
            let dataset = if create {
                Dataset::create(&uri, schema, options).await?
            } else {
                match Dataset::open_with(&uri, options.clone()).await {
                    Ok(dataset) => dataset,
                    Err(Error::NotFound { .. }) => Dataset::create(&uri, schema, options).await?,
                    Err(err) => return Err(err),
                }
            };
            dataset
                .features()
                .check_write(dataset.manifest().writer_flags)?;
            let batches = futures::stream::iter(
                reader.map(|batch| batch.map_err(|e| Error::external("reading the input data", e))),
            );
            let fragments = dataset.write_fragments(batches, &write_options).await?;
            if fragments.is_empty() {
                return Ok(dataset);
            }
            dataset.commit(Operation::Append { fragments }).await
        };
        let dataset = block_on(py, future)?.py_result(py)?;
        Ok(Self::new(dataset))
    }

    /// The URI the dataset was opened with.
    #[getter]
    fn uri(&self) -> String {
        self.inner.uri().to_string()
    }

    /// This handle's version.
    #[getter]
    fn version(&self) -> u64 {
        self.inner.version()
    }

    /// The highest committed version.
    fn latest_version(&self, py: Python<'_>) -> PyResult<u64> {
        block_on(py, self.inner.latest_version())?.py_result(py)
    }

    /// The table schema (`pyarrow.schema(...)` reads it).
    fn schema(&self) -> ArrowSchema {
        ArrowSchema::new(self.inner.schema())
    }

    /// Fragments in scan order: `(id, physical_rows, deleted_rows,
    /// [(path, size_bytes, num_rows)])`.
    fn fragments(&self) -> Vec<FragmentInfo> {
        self.inner
            .fragments()
            .iter()
            .map(|fragment| {
                let files = fragment
                    .files
                    .iter()
                    .map(|file| {
                        (
                            file.path.as_str().to_string(),
                            file.size_bytes,
                            file.num_rows,
                        )
                    })
                    .collect();
                (
                    fragment.id,
                    fragment.physical_rows,
                    fragment.num_deleted_rows(),
                    files,
                )
            })
            .collect()
    }

    /// Scans this version. `stream`: batches are read as the consumer pulls
    /// them; otherwise the whole result is read first (with the GIL released).
    #[pyo3(signature = (columns=None, filter=None, limit=None, with_row_address=false, batch_size=None, fragment_ids=None, stream=false))]
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        py: Python<'_>,
        columns: Option<Vec<String>>,
        filter: Option<String>,
        limit: Option<u64>,
        with_row_address: bool,
        batch_size: Option<usize>,
        fragment_ids: Option<Vec<u64>>,
        stream: bool,
    ) -> PyResult<ArrowStream> {
        let mut scanner = self.inner.scan();
        if let Some(columns) = &columns {
            let names: Vec<&str> = columns.iter().map(String::as_str).collect();
            scanner = scanner.project(&names);
        }
        if let Some(filter) = &filter {
            scanner = scanner.filter(filter).py_result(py)?;
        }
        if let Some(limit) = limit {
            scanner = scanner.limit(limit);
        }
        if with_row_address {
            scanner = scanner.with_row_address();
        }
        if let Some(batch_size) = batch_size {
            scanner = scanner.batch_size(batch_size);
        }
        if let Some(ids) = &fragment_ids {
            scanner = scanner.fragments(ids);
        }
        let schema = scanner.output_schema().py_result(py)?;
        if stream {
            let batches = block_on(py, scanner.try_into_stream())?.py_result(py)?;
            let reader = BlockingReader::new(schema, batches, runtime()?);
            return Ok(ArrowStream::streaming(reader));
        }
        let batches = block_on(py, async move {
            scanner
                .try_into_stream()
                .await?
                .try_collect::<Vec<_>>()
                .await
        })?
        .py_result(py)?;
        Ok(ArrowStream::from_batches(schema, batches))
    }

    /// Live rows, optionally only those matching `filter`.
    #[pyo3(signature = (filter=None))]
    fn count_rows(&self, py: Python<'_>, filter: Option<String>) -> PyResult<u64> {
        block_on(py, self.inner.count_rows(filter.as_deref()))?.py_result(py)
    }

    /// Deletes the rows matching `filter`: `(new version, rows deleted)`.
    fn delete(&self, py: Python<'_>, filter: String) -> PyResult<(Self, u64)> {
        let mut dataset = self.inner.clone();
        let result = block_on(py, async {
            let result = dataset.delete(&filter).await?;
            Ok::<_, Error>(result.rows_deleted)
        })?
        .py_result(py)?;
        Ok((Self::new(dataset), result))
    }

    /// Every committed version: `(version, timestamp_ms, operation)`.
    fn versions(&self, py: Python<'_>) -> PyResult<Vec<(u64, i64, String)>> {
        let versions = block_on(py, self.inner.versions())?.py_result(py)?;
        Ok(versions
            .into_iter()
            .map(|info| (info.version, info.timestamp_ms, info.operation))
            .collect())
    }

    /// A handle on `version`.
    fn checkout_version(&self, py: Python<'_>, version: u64) -> PyResult<Self> {
        let dataset = block_on(py, self.inner.checkout_version(version))?.py_result(py)?;
        Ok(Self::new(dataset))
    }

    /// A handle on the version the tag `name` names.
    fn checkout_tag(&self, py: Python<'_>, name: String) -> PyResult<Self> {
        let dataset = block_on(py, self.inner.checkout_tag(&name))?.py_result(py)?;
        Ok(Self::new(dataset))
    }

    /// A handle on the latest version.
    fn checkout_latest(&self, py: Python<'_>) -> PyResult<Self> {
        let dataset = block_on(py, self.inner.checkout_latest())?.py_result(py)?;
        Ok(Self::new(dataset))
    }

    /// Commits a new version equal to this one; returns it.
    fn restore(&self, py: Python<'_>) -> PyResult<Self> {
        let mut dataset = self.inner.clone();
        block_on(py, dataset.restore())?.py_result(py)?;
        Ok(Self::new(dataset))
    }

    /// Names `version` `name`.
    fn create_tag(&self, py: Python<'_>, name: String, version: u64) -> PyResult<()> {
        block_on(py, create_tag(&self.inner, &name, version))?.py_result(py)
    }

    /// Removes the tag `name`.
    fn delete_tag(&self, py: Python<'_>, name: String) -> PyResult<()> {
        block_on(py, delete_tag(&self.inner, &name))?.py_result(py)
    }

    /// Every tag and the version it names.
    fn list_tags(&self, py: Python<'_>) -> PyResult<BTreeMap<String, u64>> {
        block_on(py, list_tags(&self.inner))?.py_result(py)
    }

    /// Expires versions older than `older_than_seconds` and beyond the
    /// newest `keep_last` (the latest and, with `keep_tagged`, tagged ones
    /// are kept) and deletes the files only they referenced. JSON report.
    #[pyo3(signature = (older_than_seconds=None, keep_last=None, keep_tagged=true, dry_run=false))]
    fn cleanup_old_versions(
        &self,
        py: Python<'_>,
        older_than_seconds: Option<f64>,
        keep_last: Option<u64>,
        keep_tagged: bool,
        dry_run: bool,
    ) -> PyResult<String> {
        let older_than = older_than_seconds
            .map(|seconds| {
                Duration::try_from_secs_f64(seconds).map_err(|_| {
                    Error::invalid_input(format!(
                        "older_than must be a non-negative duration, got {seconds} seconds"
                    ))
                })
            })
            .transpose()
            .py_result(py)?;
        let policy = RetentionPolicy {
            older_than,
            keep_last,
            keep_tagged,
            dry_run,
        };
        let report = block_on(py, cleanup_old_versions(&self.inner, &policy))?.py_result(py)?;
        to_json(&report)
    }

    /// Deletes the data, deletion, index and row-map files that no committed
    /// version references and that are older than `older_than_seconds`
    /// (`refract cleanup --orphans`): the deleted paths, sorted.
    fn cleanup_orphans(&self, py: Python<'_>, older_than_seconds: f64) -> PyResult<Vec<String>> {
        let older_than = Duration::try_from_secs_f64(older_than_seconds)
            .map_err(|_| {
                Error::invalid_input(format!(
                    "older_than must be a non-negative duration, got {older_than_seconds} seconds"
                ))
            })
            .py_result(py)?;
        let report = block_on(
            py,
            refract_table::cleanup::cleanup_orphans(&self.inner, older_than),
        )?
        .py_result(py)?;
        Ok(report
            .deleted
            .iter()
            .map(|path| path.as_str().to_string())
            .collect())
    }

    /// The fragment reuse index of this version, as JSON.
    fn fri(&self, py: Python<'_>) -> PyResult<String> {
        let description =
            block_on(py, refract_optimize::fri::describe_fri(&self.inner))?.py_result(py)?;
        to_json(&description)
    }

    fn __repr__(&self) -> String {
        format!(
            "Dataset(uri={:?}, version={})",
            self.inner.uri(),
            self.inner.version()
        )
    }
}
