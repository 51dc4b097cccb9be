//! `create-index`, `optimize-indices` and `query`.

use super::location::{Location, VersionSelector};
use std::sync::Arc;

use refract_core::{Error, Result};
use refract_index::manage::{create_index, list_indices, optimize_indices};
use refract_index::query::{AccessPath, Explain, Query};
use refract_index::types::IndexParams;
use refract_table::dataset::Dataset;

use crate::args::{IndexKind, RowFormat};
use crate::output::render_rows;

/// `refract create-index`.
///
/// # Errors
/// Those of opening the dataset and of [`create_index`] (InvalidInput for a
/// bad or taken name or a missing column, NotSupported for the column type).
pub async fn create(
    at: &Location,
    name: &str,
    column: &str,
    kind: IndexKind,
    partitions: Option<u32>,
) -> Result<()> {
    let dataset = at.open().await?;
    let params = IndexParams {
        partitions,
        ..IndexParams::default()
    };
    let started = std::time::Instant::now();
    let dataset = create_index(&dataset, name, column, kind.type_name(), &params).await?;
    crate::out!(
        "created {} index '{name}' on {column} in {:.2?}; version {}",
        kind.type_name(),
        started.elapsed(),
        dataset.version()
    );
    Ok(())
}

/// `refract optimize-indices`.
///
/// # Errors
/// Those of opening the dataset and of [`optimize_indices`] (NotFound for an
/// unknown index name); indices optimized before the failing one stay committed.
pub async fn optimize(at: &Location, name: Option<&str>) -> Result<()> {
    let mut dataset = at.open().await?;
    let names: Vec<String> = match name {
        Some(name) => vec![name.to_string()],
        None => list_indices(&dataset)
            .into_iter()
            .map(|summary| summary.name)
            .collect(),
    };
    for name in names {
        let before = dataset.version();
        dataset = optimize_indices(&dataset, &name).await?;
        if dataset.version() == before {
            crate::out!("index '{name}': every fragment is covered");
        } else {
            crate::out!("index '{name}': new segment; version {}", dataset.version());
        }
    }
    Ok(())
}

/// What `refract query` asks.
#[derive(Debug, Clone, Default)]
pub struct QueryRequest {
    /// Filter expression.
    pub filter: Option<String>,
    /// Vector column and query vector.
    pub nearest: Option<(String, Vec<f32>)>,
    /// Neighbours.
    pub k: usize,
    /// Partitions to probe.
    pub nprobes: usize,
    /// Columns to print.
    pub columns: Option<Vec<String>>,
}

/// Builds the query `request` describes on `dataset`.
///
/// # Errors
/// InvalidInput when the filter does not parse or fit the schema.
pub fn build_query(dataset: &Dataset, request: &QueryRequest) -> Result<Query> {
    // Segments that still store pre-rewrite addresses are served through the
    // FRI reader (translation) instead of being dropped to a scan.
    let mut query = Query::new(dataset).with_resolver(Arc::new(crate::settings::resolver()));
    if let Some(filter) = &request.filter {
        query = query.filter(filter)?;
    }
    if let Some((column, vector)) = &request.nearest {
        query = query.nearest(column, vector, request.k, request.nprobes);
    }
    if let Some(columns) = &request.columns {
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        query = query.project(&names);
    }
    Ok(query)
}

/// The index used, the path taken and why, one line per serving segment,
/// and the scanned fragments.
pub fn render_explain(explain: &Explain) -> String {
    let mut out = format!(
        "index: {}\n",
        explain.index.as_deref().unwrap_or("none (full scan)")
    );
    if !explain.reason.is_empty() {
        let path = match explain.path {
            AccessPath::Index => "index",
            AccessPath::Scan => "scan",
        };
        out.push_str(&format!("path: {path} ({})\n", explain.reason));
    }
    for segment in &explain.segments {
        out.push_str(&format!(
            "  segment {} ({}): fragments {:?}, {}, {}\n",
            segment.uuid,
            segment.index_type,
            segment.fragments,
            segment.result,
            if segment.translated {
                format!("translated through {} transition(s)", segment.hops)
            } else {
                "stored addresses are current".to_string()
            }
        ));
    }
    out.push_str(&format!(
        "  scanned fragments: {:?}\n",
        explain.scanned_fragments
    ));
    out
}

/// `refract query`: against the latest version, or `version`.
///
/// # Errors
/// InvalidInput without a filter or nearest vector; those of
/// [`Location::open_at`], [`build_query`] and [`Query::execute`]; External
/// when the rows cannot be rendered.
pub async fn query(
    at: &Location,
    version: Option<&VersionSelector>,
    request: &QueryRequest,
    explain: bool,
    format: RowFormat,
) -> Result<()> {
    if request.filter.is_none() && request.nearest.is_none() {
        return Err(Error::invalid_input(
            "query needs --filter and/or --nearest with --vector",
        ));
    }
    let dataset = at.open_at(version).await?;
    let result = build_query(&dataset, request)?.execute().await?;
    if explain {
        eprint!("{}", render_explain(&result.explain));
    }
    let text = render_rows(&[result.batch], format)?;
    if format == RowFormat::Table {
        crate::out!("{text}");
    } else {
        crate::output::write_stdout(format_args!("{text}"));
    }
    Ok(())
}
