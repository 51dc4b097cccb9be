//! Indices: create, extend, drop, list, and index-aware queries.

use std::sync::Arc;

use pyo3::prelude::*;
use refract_core::Error;
use refract_index::manage::{create_index, drop_index, list_indices, optimize_indices};
use refract_index::query::Query;
use refract_index::types::{IndexParams, Metric};
use refract_reader::{ChunkCacheMode, FriResolver};

use crate::arrow_io::ArrowStream;
use crate::dataset::{to_json, PyDataset};
use crate::errors::{to_py_err, IntoPyResult};
use crate::runtime::block_on;

/// The metric named `name` ("l2", "cosine", "dot"; any case).
fn metric(name: &str) -> refract_core::Result<Metric> {
    match name.to_ascii_lowercase().as_str() {
        "l2" | "euclidean" => Ok(Metric::L2),
        "cosine" => Ok(Metric::Cosine),
        "dot" => Ok(Metric::Dot),
        other => Err(Error::invalid_input(format!(
            "metric must be one of l2, cosine, dot, got \"{other}\""
        ))),
    }
}

/// Builds the index `name` of `index_type` on `column` over every fragment
/// and commits it; returns the new version.
#[pyfunction]
#[pyo3(signature = (dataset, name, column, index_type, partitions=None, sample_rate=None, max_iterations=None, metric_name=None, page_rows=None))]
#[allow(clippy::too_many_arguments)]
pub fn create_index_py(
    py: Python<'_>,
    dataset: &PyDataset,
    name: String,
    column: String,
    index_type: String,
    partitions: Option<u32>,
    sample_rate: Option<u32>,
    max_iterations: Option<u32>,
    metric_name: Option<String>,
    page_rows: Option<u32>,
) -> PyResult<PyDataset> {
    let params = IndexParams {
        partitions,
        sample_rate,
        max_iterations,
        metric: metric_name
            .as_deref()
            .map(metric)
            .transpose()
            .py_result(py)?,
        page_rows,
    };
    let future = create_index(&dataset.inner, &name, &column, &index_type, &params);
    let next = block_on(py, future)?.py_result(py)?;
    Ok(PyDataset::new(next))
}

/// Adds a segment to each named index (every index when None) for the
/// fragments none of its segments covers; returns the last version.
#[pyfunction]
#[pyo3(signature = (dataset, names=None))]
pub fn optimize_indices_py(
    py: Python<'_>,
    dataset: &PyDataset,
    names: Option<Vec<String>>,
) -> PyResult<PyDataset> {
    let names = names.unwrap_or_else(|| {
        list_indices(&dataset.inner)
            .into_iter()
            .map(|summary| summary.name)
            .collect()
    });
    let mut current = dataset.inner.clone();
    let next = block_on(py, async move {
        for name in names {
            current = optimize_indices(&current, &name).await?;
        }
        Ok::<_, Error>(current)
    })?
    .py_result(py)?;
    Ok(PyDataset::new(next))
}

/// Removes every segment of the index `name`; returns the new version.
#[pyfunction]
pub fn drop_index_py(py: Python<'_>, dataset: &PyDataset, name: String) -> PyResult<PyDataset> {
    let next = block_on(py, drop_index(&dataset.inner, &name))?.py_result(py)?;
    Ok(PyDataset::new(next))
}

/// The user indices, as JSON.
#[pyfunction]
pub fn list_indices_py(dataset: &PyDataset) -> PyResult<String> {
    to_json(&list_indices(&dataset.inner))
}

/// Runs an index-aware query: `(rows, explain JSON)`. `nearest` is
/// `(column, vector, k, nprobes)`. Segments that store pre-rewrite addresses
/// are served through the FRI (translation), as in `refract query`.
#[pyfunction]
#[pyo3(signature = (dataset, filter=None, columns=None, nearest=None, metric_name=None, use_index=true))]
pub fn query_py(
    py: Python<'_>,
    dataset: &PyDataset,
    filter: Option<String>,
    columns: Option<Vec<String>>,
    nearest: Option<(String, Vec<f32>, usize, usize)>,
    metric_name: Option<String>,
    use_index: bool,
) -> PyResult<(ArrowStream, String)> {
    if filter.is_none() && nearest.is_none() {
        return Err(to_py_err(
            py,
            Error::invalid_input("query needs a filter and/or nearest"),
        ));
    }
    let mut query = Query::new(&dataset.inner)
        .with_resolver(Arc::new(FriResolver::with_mode(ChunkCacheMode::Lazy)))
        .use_index(use_index);
    if let Some(filter) = &filter {
        query = query.filter(filter).py_result(py)?;
    }
    if let Some((column, vector, k, nprobes)) = &nearest {
        query = query.nearest(column, vector, *k, *nprobes);
        if let Some(name) = &metric_name {
            query = query.metric(metric(name).py_result(py)?);
        }
    }
    if let Some(columns) = &columns {
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        query = query.project(&names);
    }
    let result = block_on(py, query.execute())?.py_result(py)?;
    let explain = to_json(&result.explain)?;
    let schema = result.batch.schema();
    Ok((
        ArrowStream::from_batches(schema, vec![result.batch]),
        explain,
    ))
}
