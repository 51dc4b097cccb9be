//! Nearest-neighbour execution: index hits from serving segments merged with
//! exact distances over the unserved live fragments.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::{Dataset, ROW_ADDRESS_COLUMN};
use roaring::RoaringTreemap;

use super::exec::{
    choose, drop_deleted, fetch_ordered, output_columns, output_schema, segment_explain,
    stored_address_error, uncovered_fragments,
};
use super::{Explain, NearestRequest, Query, QueryResult};
use crate::resolver::ResolvedSegment;
use crate::translate::MAX_TRANSLATION_BATCH;
use crate::types::{IndexQuery, Metric, SearchResult};

pub(crate) async fn execute(query: &Query, req: &NearestRequest) -> Result<QueryResult> {
    let dataset = &query.dataset;
    check_vector_column(dataset, req)?;
    let output = output_columns(query)?;
    let index_query = IndexQuery::Nearest {
        vector: req.vector.clone(),
        k: req.k,
        nprobes: req.nprobes,
        metric: req.metric,
    };
    let mut explain = Explain::default();
    let mut hits: Vec<(f32, u64)> = Vec::new();
    let mut covered = roaring::RoaringBitmap::new();
    if query.index_use != super::IndexUse::Never && req.k > 0 {
        if let Some(chosen) = choose(query, &req.column, &index_query).await? {
            covered = chosen.covered();
            for served in &chosen.served {
                hits.extend(segment_hits(query, req, served).await?);
                explain
                    .segments
                    .push(segment_explain(&served.resolved, "scored"));
            }
            explain.index = Some(chosen.name);
        }
    }
    let uncovered = uncovered_fragments(dataset, &covered);
    if !uncovered.is_empty() && req.k > 0 {
        hits.extend(brute_force(query, req, &uncovered).await?);
    }
    explain.scanned_fragments = uncovered;
    let best = best_k(dataset, hits, req.k);
    let addrs: Vec<u64> = best.iter().map(|(_, a)| *a).collect();
    let rows = fetch_ordered(dataset, &addrs, &output, None).await?;
    let schema = output_schema(dataset, &output, true)?;
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(Float32Array::from(
        best.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
    )));
    let batch = RecordBatch::try_new(schema, columns)
        .map_err(|e| Error::external("assembling nearest results", e))?;
    Ok(QueryResult { batch, explain })
}

/// The live, filter-matching hits of one serving segment. A segment's top `k`
/// may include deleted, withdrawn or non-matching rows, so the search widens
/// (doubling) until it yields `k` usable hits or the probed partitions run out.
async fn segment_hits(
    query: &Query,
    req: &NearestRequest,
    served: &super::exec::Served,
) -> Result<Vec<(f32, u64)>> {
    let mut want = req.k;
    loop {
        let index_query = IndexQuery::Nearest {
            vector: req.vector.clone(),
            k: want,
            nprobes: req.nprobes,
            metric: req.metric,
        };
        let SearchResult::Scored(scored) = served.reader.search(&index_query).await? else {
            return Err(Error::invalid_input(format!(
                "segment {} did not return scored results for a nearest query",
                served.resolved.meta.uuid
            )));
        };
        let exhausted = scored.len() < want;
        let live =
            keep_live_matching(query, current_scored(&served.resolved, scored).await?).await?;
        if exhausted || live.len() >= req.k {
            return Ok(live);
        }
        want = want.saturating_mul(2);
    }
}

fn check_vector_column(dataset: &Dataset, req: &NearestRequest) -> Result<()> {
    let schema = dataset.schema();
    let field = schema
        .field_with_name(&req.column)
        .map_err(|_| Error::invalid_input(format!("column '{}' does not exist", req.column)))?;
    match field.data_type() {
        DataType::FixedSizeList(item, dim)
            if item.data_type() == &DataType::Float32
                && usize::try_from(*dim).is_ok_and(|d| d == req.vector.len()) =>
        {
            Ok(())
        }
        other => Err(Error::invalid_input(format!(
            "nearest on '{}' needs FixedSizeList<Float32, {}>, the column is {other}",
            req.column,
            req.vector.len()
        ))),
    }
}

/// Translates scored stored addresses and keeps those inside the coverage.
async fn current_scored(
    resolved: &ResolvedSegment,
    scored: Vec<(u64, f32)>,
) -> Result<Vec<(f32, u64)>> {
    let in_coverage =
        |addr: u64| u32::try_from(addr >> 32).is_ok_and(|frag| resolved.coverage.contains(frag));
    let Some(translator) = &resolved.translator else {
        return Ok(scored
            .into_iter()
            .filter(|(a, _)| in_coverage(*a))
            .map(|(a, d)| (d, a))
            .collect());
    };
    let mut out = Vec::with_capacity(scored.len());
    let mut translated = Vec::new();
    for chunk in scored.chunks(MAX_TRANSLATION_BATCH) {
        let addrs: Vec<u64> = chunk.iter().map(|(a, _)| *a).collect();
        translator
            .translate_batch(&addrs, &mut translated)
            .await
            .map_err(|err| stored_address_error(resolved, err))?;
        if translated.len() != addrs.len() {
            return Err(Error::invalid_input("translator result length mismatch"));
        }
        for ((_, d), new) in chunk.iter().zip(&translated) {
            if let Some(a) = new.filter(|a| in_coverage(*a)) {
                out.push((*d, a));
            }
        }
    }
    Ok(out)
}

/// Drops deleted rows and (with a filter) rows that do not match it.
async fn keep_live_matching(query: &Query, hits: Vec<(f32, u64)>) -> Result<Vec<(f32, u64)>> {
    let dataset = &query.dataset;
    let all: RoaringTreemap = hits.iter().map(|(_, a)| *a).collect();
    let mut keep = drop_deleted(dataset, all).await?;
    if let Some(filter) = &query.filter {
        let ordered: Vec<u64> = keep.iter().collect();
        let matching = fetch_ordered(dataset, &ordered, &[], Some(filter)).await?;
        let addrs = matching
            .column_by_name(ROW_ADDRESS_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .ok_or_else(|| Error::invalid_input("fetched rows lack _rowaddr"))?;
        keep = addrs.values().iter().copied().collect();
    }
    Ok(hits
        .into_iter()
        .filter(|(_, a)| keep.contains(*a))
        .collect())
}

/// Exact distances for every (filtered) row of `fragments`.
async fn brute_force(
    query: &Query,
    req: &NearestRequest,
    fragments: &[u64],
) -> Result<Vec<(f32, u64)>> {
    let mut scanner = query
        .dataset
        .scan()
        .project(&[req.column.as_str()])
        .with_row_address()
        .fragments(fragments);
    if let Some(filter) = &query.filter {
        scanner = scanner.filter_expr(filter.clone());
    }
    let mut stream = scanner.try_into_stream().await?;
    let mut out = Vec::new();
    while let Some(batch) = stream.try_next().await? {
        let vectors = batch
            .column_by_name(&req.column)
            .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>())
            .ok_or_else(|| Error::invalid_input("vector column is not a fixed-size list"))?;
        let addrs = batch
            .column_by_name(ROW_ADDRESS_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .ok_or_else(|| Error::invalid_input("scan lacks _rowaddr"))?;
        for i in 0..vectors.len() {
            if vectors.is_null(i) {
                continue;
            }
            let value = vectors.value(i);
            let Some(values) = value.as_any().downcast_ref::<Float32Array>() else {
                return Err(Error::invalid_input("vector items are not Float32"));
            };
            if values.null_count() > 0 {
                continue;
            }
            out.push((
                distance(req.metric, &req.vector, values.values()),
                addrs.value(i),
            ));
        }
    }
    Ok(out)
}

/// Distance under `metric` (smaller is closer); see [`Metric`].
pub fn distance(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::L2 => a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum(),
        Metric::Dot => -a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>(),
        Metric::Cosine => {
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
            let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
            if na == 0.0 || nb == 0.0 {
                1.0
            } else {
                1.0 - dot / (na * nb)
            }
        }
    }
}

/// The `k` best hits by (distance, scan order), deduplicated by address.
fn best_k(dataset: &Dataset, mut hits: Vec<(f32, u64)>, k: usize) -> Vec<(f32, u64)> {
    let positions: BTreeMap<u64, u64> = dataset
        .fragments()
        .iter()
        .enumerate()
        .map(|(i, f)| (f.id, i as u64))
        .collect();
    let scan_key = |a: u64| {
        let position = positions.get(&(a >> 32)).copied().unwrap_or(u64::MAX >> 32);
        (position << 32) | (a & 0xFFFF_FFFF)
    };
    hits.sort_by(|x, y| x.0.total_cmp(&y.0).then(scan_key(x.1).cmp(&scan_key(y.1))));
    let mut seen = RoaringTreemap::new();
    hits.retain(|(_, a)| seen.insert(*a));
    hits.truncate(k);
    hits
}
