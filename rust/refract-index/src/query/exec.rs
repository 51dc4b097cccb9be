//! Filter execution (see the module docs of [`crate::query`]).

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::index_dir;
use refract_table::io::lance_files::PREFETCH_LIMIT_BYTES;
use refract_table::predicate::Expr;
use refract_table::{Dataset, IndexMetadata, RowSelection, ROW_ADDRESS_COLUMN};
use roaring::{RoaringBitmap, RoaringTreemap};

use super::cost::{index_wins, Work, INDEX_COST_MARGIN};
use super::plan::{conjuncts, indexable};
use super::{AccessPath, CostEstimate, Explain, IndexUse, Query, QueryResult, SegmentExplain};
use crate::manage::{index_context, user_segments};
use crate::resolver::ResolvedSegment;
use crate::translate::MAX_TRANSLATION_BATCH;
use crate::types::{IndexQuery, IndexSegmentReader, SearchResult};

/// Addresses fetched per `take` call.
const TAKE_CHUNK: usize = 65_536;

/// A segment that serves some live fragments for the chosen query.
pub(crate) struct Served {
    pub(crate) resolved: ResolvedSegment,
    pub(crate) reader: Arc<dyn IndexSegmentReader>,
}

/// The index chosen for a query and the segments serving it.
pub(crate) struct Chosen {
    pub(crate) name: String,
    pub(crate) served: Vec<Served>,
}

impl Chosen {
    /// Union of the served coverages.
    pub(crate) fn covered(&self) -> RoaringBitmap {
        let mut covered = RoaringBitmap::new();
        for s in &self.served {
            covered |= &s.resolved.coverage;
        }
        covered
    }
}

pub(crate) async fn execute(query: &Query) -> Result<QueryResult> {
    let dataset = &query.dataset;
    let output = output_columns(query)?;
    let mut explain = Explain::default();
    let mut route: Option<Route> = None;
    match (&query.filter, query.index_use) {
        (None, _) => explain.reason = "no filter".to_string(),
        (Some(_), IndexUse::Never) => explain.reason = "index use disabled".to_string(),
        (Some(filter), _) => {
            let parts = conjuncts(filter);
            for candidate in indexable(&parts) {
                let Some(chosen) = choose(query, &candidate.column, &candidate.query).await? else {
                    continue;
                };
                let conjunct = parts.get(candidate.position).cloned();
                route = consider(query, chosen, &candidate.query, conjunct, &mut explain).await?;
                if route.is_some() {
                    break;
                }
            }
            if explain.considered.is_empty() {
                explain.reason = "no index answers a conjunct of the filter".to_string();
            }
        }
    }
    let Route {
        covered,
        selection,
        exact,
    } = route.unwrap_or_default();
    // Covered fragments the index found no row in are not read at all.
    let fragments: Vec<u64> = dataset
        .fragments()
        .iter()
        .map(|f| f.id)
        .filter(|id| {
            selection.get(*id).is_some()
                || u32::try_from(*id).map_or(true, |id| !covered.contains(id))
        })
        .collect();
    explain.scanned_fragments = uncovered_fragments(dataset, &covered);
    let batch = scan(
        dataset,
        &output,
        query.filter.as_ref(),
        &fragments,
        selection,
        exact,
    )
    .await?;
    Ok(QueryResult { batch, explain })
}

/// How the covered fragments are read when an index wins.
#[derive(Default)]
struct Route {
    /// Fragments the index serves.
    covered: RoaringBitmap,
    /// The rows it returned.
    selection: RowSelection,
    /// When every serving segment answered exactly: the conjunct each
    /// returned row must satisfy, and the index to blame if one does not.
    exact: Option<(Expr, String)>,
}

/// Decides whether `chosen` serves the query: declines before searching when
/// the segments' own estimate already rules the index out, else searches and
/// compares reading the live matches with scanning the covered fragments.
/// Returns the covered fragments and the rows to read when the index wins.
async fn consider(
    query: &Query,
    chosen: Chosen,
    index_query: &IndexQuery,
    conjunct: Option<Expr>,
    explain: &mut Explain,
) -> Result<Option<Route>> {
    let dataset = &query.dataset;
    let forced = query.index_use == IndexUse::Always;
    let covered = chosen.covered();
    let scan_work = Work::scan(dataset, &covered);
    let scan_cost = scan_work.cost();
    let estimated_rows: Option<u64> = chosen
        .served
        .iter()
        .map(|s| s.reader.estimate_rows(index_query))
        .sum();
    // Segments serve disjoint fragments, so their reads add up. A segment's
    // statistics describe its stored layout: they bound today's reads only
    // when its addresses are current and it still serves every fragment it
    // indexed (compaction regroups rows; a dropped fragment's rows are gone).
    let estimated_work: Option<Work> = chosen
        .served
        .iter()
        .map(|s| {
            let stored_layout_is_current = s.resolved.translator.is_none()
                && s.resolved.meta.fragment_bitmap.as_ref() == Some(&s.resolved.coverage);
            stored_layout_is_current
                .then(|| s.reader.estimate_work(index_query))
                .flatten()
        })
        .sum();
    let mut estimate = CostEstimate {
        index: chosen.name.clone(),
        estimated_rows,
        estimated_work,
        matched_rows: None,
        index_work: None,
        scan_work,
    };
    if !forced {
        if let Some(reason) =
            decline_before_search(&chosen.name, estimated_rows, estimated_work, &scan_work)
        {
            explain.reason = reason;
            explain.considered.push(estimate);
            return Ok(None);
        }
    }
    let mut segments = Vec::new();
    let read = with_filter_columns(&output_columns(query)?, query.filter.as_ref());
    let (addrs, ()) = futures::join!(
        search_segments(&chosen, index_query, &mut segments),
        preopen(dataset, &covered, &read)
    );
    let addrs = addrs?;
    let all_exact = segments.iter().all(|s| s.result == "exact");
    let live = drop_deleted(dataset, addrs).await?;
    let index_work = Work::index(&live);
    let index_cost = index_work.cost();
    estimate.matched_rows = Some(live.len());
    estimate.index_work = Some(index_work);
    explain.considered.push(estimate);
    let reading = format!(
        "index '{}' matched {} rows: reading them ({} fragments, {} ranges, {} rows; cost {index_cost})",
        chosen.name,
        live.len(),
        index_work.fragments,
        index_work.ranges,
        index_work.rows
    );
    let scanning = format!(
        "scanning {} rows of {} fragments (cost {scan_cost})",
        scan_work.rows, scan_work.fragments
    );
    if forced {
        explain.reason = format!("index use forced; {reading}");
    } else if index_wins(index_cost, scan_cost) {
        explain.reason =
            format!("{reading} is cheaper than {scanning}, at most {INDEX_COST_MARGIN} of it");
    } else {
        explain.reason = format!("{reading} is not clearly cheaper than {scanning}");
        return Ok(None);
    }
    let source = format!(
        "index '{}' ({})",
        chosen.name,
        segments
            .iter()
            .map(|s| index_dir(&s.uuid).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    explain.index = Some(chosen.name);
    explain.segments = segments;
    explain.path = AccessPath::Index;
    Ok(Some(Route {
        covered,
        selection: RowSelection::from_addresses(&live),
        exact: conjunct.filter(|_| all_exact).map(|expr| (expr, source)),
    }))
}

/// Why the index is declined before searching, when its segments' own
/// estimates (lower bounds) already cost more than scanning `scan_work`.
fn decline_before_search(
    name: &str,
    estimated_rows: Option<u64>,
    estimated_work: Option<Work>,
    scan_work: &Work,
) -> Option<String> {
    let scan_cost = scan_work.cost();
    if let Some(work) = estimated_work {
        if !index_wins(work.cost(), scan_cost) {
            return Some(format!(
                "index '{name}' answers with rows whose reading costs at least {} ({} fragments, {} ranges, {} rows): scanning (cost {scan_cost}) is cheaper",
                work.cost(),
                work.fragments,
                work.ranges,
                work.rows
            ));
        }
    }
    let lower = estimated_rows?;
    (!index_wins(Work::best_case(lower, scan_work).cost(), scan_cost)).then(|| {
        format!(
            "index '{name}' matches at least {lower} of the {} rows it covers: scanning (cost {scan_cost}) is cheaper",
            scan_work.rows
        )
    })
}

/// Finds a user index on `column` whose segments can answer `index_query`.
pub(crate) async fn choose(
    query: &Query,
    column: &str,
    index_query: &IndexQuery,
) -> Result<Option<Chosen>> {
    let dataset = &query.dataset;
    let mut names: Vec<&str> = Vec::new();
    for meta in user_segments(&dataset.manifest().indices) {
        if meta.fields.len() == 1
            && meta.fields.first().is_some_and(|f| f == column)
            && !names.contains(&meta.name.as_str())
        {
            names.push(&meta.name);
        }
    }
    for name in names {
        let segments: Vec<IndexMetadata> = user_segments(&dataset.manifest().indices)
            .filter(|m| m.name == name)
            .cloned()
            .collect();
        let served = serve(query, &segments, index_query).await?;
        if !served.is_empty() {
            return Ok(Some(Chosen {
                name: name.to_string(),
                served,
            }));
        }
    }
    Ok(None)
}

/// Resolves and opens the segments that serve fragments and can answer the query.
/// A segment of an unregistered type, or one that cannot answer, serves nothing
/// (its fragments are scanned).
async fn serve(
    query: &Query,
    segments: &[IndexMetadata],
    index_query: &IndexQuery,
) -> Result<Vec<Served>> {
    let ctx = index_context(&query.dataset);
    let resolved = query.resolver.resolve(&query.dataset, segments).await?;
    let mut served = Vec::new();
    for resolved in resolved {
        if resolved.coverage.is_empty() {
            continue;
        }
        let Ok(registered) = query.registry.get(&resolved.meta.index_type) else {
            tracing::warn!(
                index = %resolved.meta.name,
                index_type = %resolved.meta.index_type,
                "index type not registered; scanning its fragments"
            );
            continue;
        };
        let reader = registered.open(&ctx, &resolved.meta).await?;
        if reader.can_answer(index_query) {
            served.push(Served { resolved, reader });
        }
    }
    Ok(served)
}

/// Most covered fragments [`preopen`] opens.
const PREOPEN_FRAGMENTS: u64 = 4;

/// `columns`, then the columns of `filter` not among them: what a read
/// that checks `filter` on its rows needs.
fn with_filter_columns(columns: &[String], filter: Option<&Expr>) -> Vec<String> {
    let mut read = columns.to_vec();
    for column in filter.iter().flat_map(|expr| expr.columns()) {
        if !read.contains(&column) {
            read.push(column);
        }
    }
    read
}

/// Opens the fragments the answer can come from while the index is
/// searched: their deletion vectors, data-file metadata and the page
/// metadata of the `columns` read (one row of each), all kept in the
/// session's caches. The fetch that follows then reads only data, so a cold
/// point query waits for the index's round trips and one more, not for the
/// data file's own three. Only for a few fragments (a wide coverage would
/// open files the answer never touches) and only for files larger than
/// [`PREFETCH_LIMIT_BYTES`]: a smaller one costs the fetch one or two reads,
/// which opening it ahead would not save. Failures are left to the fetch,
/// which reports them if it reads the file at all. Only on remote stores: on
/// a local disk a request costs no round trip, and the opening read would be
/// work the fetch may never need.
async fn preopen(dataset: &Dataset, covered: &RoaringBitmap, columns: &[String]) {
    if covered.len() > PREOPEN_FRAGMENTS || !dataset.store().is_remote() {
        return;
    }
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let columns = columns.as_slice();
    let opens = covered
        .iter()
        .filter_map(|id| dataset.manifest().fragment(u64::from(id)))
        .filter(|fragment| {
            let bytes: u64 = fragment.files.iter().map(|f| f.size_bytes).sum();
            fragment.physical_rows > 0 && bytes > PREFETCH_LIMIT_BYTES
        })
        .map(|fragment| async move {
            let (_, reader) = futures::join!(
                dataset.deletion_vector(fragment),
                dataset.fragment_reader(fragment)
            );
            let Ok(reader) = reader else { return };
            if reader.opened_warm() {
                // Opened before: its page metadata is most likely cached too.
                return;
            }
            if let Ok(rows) = reader.read_range(0..1, Some(columns), 1).await {
                let _ = rows.try_collect::<Vec<_>>().await;
            }
        });
    futures::future::join_all(opens).await;
}

/// Searches every served segment; returns current addresses (exact matches
/// or candidates: the scan rechecks the whole filter on every row).
async fn search_segments(
    chosen: &Chosen,
    index_query: &IndexQuery,
    segments: &mut Vec<SegmentExplain>,
) -> Result<RoaringTreemap> {
    let mut all = RoaringTreemap::new();
    for served in &chosen.served {
        // The translator's row maps load while the segment is searched.
        let prepare = async {
            match &served.resolved.translator {
                Some(translator) => translator.prepare().await,
                None => Ok(()),
            }
        };
        let (found, prepared) = futures::join!(served.reader.search(index_query), prepare);
        let found = found?;
        prepared?;
        let (stored, kind) = match found {
            SearchResult::Exact(set) => (set, "exact"),
            SearchResult::Candidates(set) => (set, "candidates"),
            SearchResult::Scored(_) => {
                return Err(Error::invalid_input(format!(
                    "segment {} returned scored results for a filter",
                    served.resolved.meta.uuid
                )))
            }
        };
        all |= current_addresses(&served.resolved, stored).await?;
        segments.push(segment_explain(&served.resolved, kind));
    }
    Ok(all)
}

pub(crate) fn segment_explain(resolved: &ResolvedSegment, kind: &str) -> SegmentExplain {
    SegmentExplain {
        uuid: resolved.meta.uuid,
        index_type: resolved.meta.index_type.clone(),
        fragments: resolved.coverage.iter().map(u64::from).collect(),
        translated: resolved.translator.is_some(),
        hops: resolved.hops,
        result: kind.to_string(),
    }
}

/// Stored addresses → current addresses inside the segment's coverage.
async fn current_addresses(
    resolved: &ResolvedSegment,
    stored: RoaringTreemap,
) -> Result<RoaringTreemap> {
    let in_coverage =
        |addr: u64| u32::try_from(addr >> 32).is_ok_and(|frag| resolved.coverage.contains(frag));
    let Some(translator) = &resolved.translator else {
        // Whole fragments in or out: keep their bitmaps, no per-row inserts.
        return Ok(RoaringTreemap::from_bitmaps(
            stored
                .bitmaps()
                .filter(|(frag, _)| resolved.coverage.contains(*frag))
                .map(|(frag, offsets)| (frag, offsets.clone())),
        ));
    };
    let mut out = RoaringTreemap::new();
    let mut batch = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut translated = Vec::with_capacity(MAX_TRANSLATION_BATCH);
    let mut iter = stored.iter();
    loop {
        batch.clear();
        batch.extend(iter.by_ref().take(MAX_TRANSLATION_BATCH));
        if batch.is_empty() {
            return Ok(out);
        }
        translator
            .translate_batch(&batch, &mut translated)
            .await
            .map_err(|err| stored_address_error(resolved, err))?;
        if translated.len() != batch.len() {
            return Err(Error::invalid_input(format!(
                "translator returned {} results for {} addresses",
                translated.len(),
                batch.len()
            )));
        }
        out.extend(
            translated
                .iter()
                .flatten()
                .copied()
                .filter(|a| in_coverage(*a)),
        );
    }
}

/// An address the translator refuses (not a row of a fragment it maps) was
/// read from the segment's files, not given by a caller: the segment is
/// damaged, so the error is Corrupt naming its directory.
pub(crate) fn stored_address_error(resolved: &ResolvedSegment, err: Error) -> Error {
    match err {
        Error::InvalidInput { message } => Error::corrupt(
            format!(
                "{} segment {}",
                resolved.meta.index_type,
                index_dir(&resolved.meta.uuid)
            ),
            format!("a stored address does not translate: {message}"),
        ),
        other => other,
    }
}

/// Removes addresses of deleted rows and of fragments not in the manifest.
pub(crate) async fn drop_deleted(
    dataset: &Dataset,
    addrs: RoaringTreemap,
) -> Result<RoaringTreemap> {
    let mut live = Vec::new();
    for (frag, offsets) in addrs.bitmaps() {
        let Some(fragment) = dataset.manifest().fragment(u64::from(frag)) else {
            continue;
        };
        let deleted = dataset.deletion_vector(fragment).await?;
        live.push((frag, offsets - deleted.bitmap()));
    }
    Ok(RoaringTreemap::from_bitmaps(live))
}

/// Live fragments (in scan order) not in `covered`.
pub(crate) fn uncovered_fragments(dataset: &Dataset, covered: &RoaringBitmap) -> Vec<u64> {
    dataset
        .fragments()
        .iter()
        .map(|f| f.id)
        .filter(|id| u32::try_from(*id).map_or(true, |id| !covered.contains(id)))
        .collect()
}

/// The projected columns (default: all).
pub(crate) fn output_columns(query: &Query) -> Result<Vec<String>> {
    let schema = query.dataset.schema();
    match &query.projection {
        Some(columns) => {
            for c in columns {
                if schema.field_with_name(c).is_err() {
                    return Err(Error::invalid_input(format!("column '{c}' does not exist")));
                }
            }
            Ok(columns.clone())
        }
        None => Ok(schema.fields().iter().map(|f| f.name().clone()).collect()),
    }
}

/// Output schema: projected fields, `_rowaddr`, optionally `_distance`.
pub(crate) fn output_schema(
    dataset: &Dataset,
    columns: &[String],
    distance: bool,
) -> Result<SchemaRef> {
    let schema = dataset.schema();
    let mut fields = Vec::with_capacity(columns.len() + 2);
    for c in columns {
        let field = schema
            .field_with_name(c)
            .map_err(|_| Error::invalid_input(format!("column '{c}' does not exist")))?;
        fields.push(field.clone());
    }
    fields.push(Field::new(ROW_ADDRESS_COLUMN, DataType::UInt64, false));
    if distance {
        fields.push(Field::new(super::DISTANCE_COLUMN, DataType::Float32, false));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Fetches `ordered` addresses (kept in that order) as `columns` + `_rowaddr`,
/// keeping rows that match `residual`.
pub(crate) async fn fetch_ordered(
    dataset: &Dataset,
    ordered: &[u64],
    columns: &[String],
    residual: Option<&Expr>,
) -> Result<RecordBatch> {
    let out_schema = output_schema(dataset, columns, false)?;
    let read = with_filter_columns(columns, residual);
    let read_refs: Vec<&str> = read.iter().map(String::as_str).collect();
    let mut batches = Vec::new();
    for chunk in ordered.chunks(TAKE_CHUNK) {
        let rows = dataset.take(chunk, Some(&read_refs)).await?;
        let mut cols: Vec<ArrayRef> = rows.columns().to_vec();
        cols.push(Arc::new(UInt64Array::from(chunk.to_vec())));
        let mut fields: Vec<Field> = rows
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(ROW_ADDRESS_COLUMN, DataType::UInt64, false));
        let full = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
            .map_err(|e| Error::external("assembling fetched rows", e))?;
        let kept = match residual {
            Some(expr) => {
                let mask = expr.evaluate(&full)?;
                arrow::compute::filter_record_batch(&full, &mask)
                    .map_err(|e| Error::external("filtering fetched rows", e))?
            }
            None => full,
        };
        batches.push(project(&kept, &out_schema)?);
    }
    concat(&out_schema, &batches)
}

/// Scans `fragments` (only the selected rows of those `selection` restricts)
/// with `filter`, returning `columns` + `_rowaddr` in scan order. With
/// `exact`, a selected row that does not satisfy its conjunct fails the query
/// as Corrupt (see [`refract_table::Scanner::expect_selected_match`]).
async fn scan(
    dataset: &Dataset,
    columns: &[String],
    filter: Option<&Expr>,
    fragments: &[u64],
    selection: RowSelection,
    exact: Option<(Expr, String)>,
) -> Result<RecordBatch> {
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut scanner = dataset
        .scan()
        .project(&refs)
        .with_row_address()
        .fragments(fragments)
        .select_rows(selection);
    if let Some(expr) = filter {
        scanner = scanner.filter_expr(expr.clone());
    }
    if let Some((conjunct, source)) = exact {
        scanner = scanner.expect_selected_match(conjunct, source);
    }
    let schema = output_schema(dataset, columns, false)?;
    let batches: Vec<RecordBatch> = scanner.try_into_stream().await?.try_collect().await?;
    let relabeled = batches
        .iter()
        .map(|b| project(b, &schema))
        .collect::<Result<Vec<_>>>()?;
    concat(&schema, &relabeled)
}

/// Picks `schema`'s columns from `batch` by name.
pub(crate) fn project(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            batch
                .column_by_name(f.name())
                .cloned()
                .ok_or_else(|| Error::invalid_input(format!("result lacks column '{}'", f.name())))
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::external("assembling query output", e))
}

pub(crate) fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<RecordBatch> {
    arrow::compute::concat_batches(schema, batches)
        .map_err(|e| Error::external("concatenating query output", e))
}
