//! Index management: a named logical index is the set of segments (manifest
//! index entries) sharing a name. Create, extend (optimize), drop and list.
//!
//! System entries (names starting `__`, no fields, no fragment bitmap — e.g. the
//! fragment reuse index) are never listed, dropped, extended or remapped here;
//! they pass through every commit untouched.

use std::sync::Arc;

use arrow_schema::DataType;
use refract_core::{Error, Result};
use refract_table::format::index::SYSTEM_INDEX_PREFIX;
use refract_table::io::{index_dir, FileJournal};
use refract_table::{Dataset, IndexMetadata, Operation};
use roaring::RoaringBitmap;
use serde::Serialize;
use uuid::Uuid;

use crate::registry::{IndexRegistry, RegisteredType};
use crate::types::{IndexContext, IndexParams};

/// The I/O context of index files of `dataset`.
pub fn index_context(dataset: &Dataset) -> IndexContext {
    IndexContext {
        store: dataset.store().clone(),
        cache: dataset.session().cache().clone(),
    }
}

/// One segment in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentSummary {
    /// Segment uuid.
    pub uuid: Uuid,
    /// Stored fragment coverage (`None` = unknown), ascending.
    pub fragments: Option<Vec<u64>>,
    /// Dataset version the segment was built or remapped at.
    pub dataset_version: u64,
    /// On-disk layout version.
    pub index_version: u32,
}

/// One user index in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexSummary {
    /// Logical name.
    pub name: String,
    /// Indexed columns.
    pub fields: Vec<String>,
    /// Type name.
    pub index_type: String,
    /// Segments in manifest order.
    pub segments: Vec<SegmentSummary>,
}

/// The user indices of `dataset`, in order of first appearance; system entries excluded.
pub fn list_indices(dataset: &Dataset) -> Vec<IndexSummary> {
    let mut out: Vec<IndexSummary> = Vec::new();
    for meta in user_segments(&dataset.manifest().indices) {
        let segment = SegmentSummary {
            uuid: meta.uuid,
            fragments: meta
                .fragment_bitmap
                .as_ref()
                .map(|b| b.iter().map(u64::from).collect()),
            dataset_version: meta.dataset_version,
            index_version: meta.index_version,
        };
        match out.iter_mut().find(|s| s.name == meta.name) {
            Some(summary) => summary.segments.push(segment),
            None => out.push(IndexSummary {
                name: meta.name.clone(),
                fields: meta.fields.clone(),
                index_type: meta.index_type.clone(),
                segments: vec![segment],
            }),
        }
    }
    out
}

/// The index called `name` (system names are never found).
///
/// # Errors
/// NotFound when `dataset` has no user index called `name`.
pub fn describe_index(dataset: &Dataset, name: &str) -> Result<IndexSummary> {
    list_indices(dataset)
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| Error::not_found(format!("index '{name}' in version {}", dataset.version())))
}

/// User (non-system) segments of a manifest index section.
pub fn user_segments(indices: &[IndexMetadata]) -> impl Iterator<Item = &IndexMetadata> {
    indices.iter().filter(|m| !is_system_entry(m))
}

/// True for reserved entries: a `__` name (they also carry no fields).
pub fn is_system_entry(meta: &IndexMetadata) -> bool {
    meta.is_system()
}

/// The segments of the user index `name`.
pub fn segments_of<'a>(dataset: &'a Dataset, name: &'a str) -> Vec<&'a IndexMetadata> {
    user_segments(&dataset.manifest().indices)
        .filter(|m| m.name == name)
        .collect()
}

/// Builds an index `name` of `index_type` on `column` over every fragment and
/// commits it. Uses the built-in registry.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> refract_core::Result<()> {
/// use std::sync::Arc;
///
/// use arrow_array::{Int64Array, RecordBatch};
/// use arrow_schema::{DataType, Field, Schema};
/// use refract_index::{create_index, AccessPath, IndexParams, IndexUse, Query};
/// use refract_table::{Dataset, OpenOptions, WriteOptions};
///
/// let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
/// let mut dataset =
///     Dataset::create("memory://index-example", schema.clone(), OpenOptions::default()).await?;
/// let ids = Arc::new(Int64Array::from_iter_values(0..1_000));
/// let batch = RecordBatch::try_new(schema, vec![ids]).expect("ids match the schema");
/// dataset.append(vec![batch], &WriteOptions::default()).await?;
/// let dataset = create_index(&dataset, "by_id", "id", "btree", &IndexParams::default()).await?;
/// let result = Query::new(&dataset)
///     .filter("id = 42")?
///     .index_use(IndexUse::Always)
///     .execute()
///     .await?;
/// assert_eq!(result.batch.num_rows(), 1);
/// assert_eq!(result.explain.path, AccessPath::Index);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// InvalidInput for an empty or reserved name, an existing index, a missing
/// column or more partitions than live rows; NotSupported for an unregistered
/// type or a column type it cannot index; the errors of building and committing.
pub async fn create_index(
    dataset: &Dataset,
    name: &str,
    column: &str,
    index_type: &str,
    params: &IndexParams,
) -> Result<Dataset> {
    create_index_with(
        dataset,
        &IndexRegistry::with_builtins(),
        name,
        column,
        index_type,
        params,
    )
    .await
}

/// [`create_index`] with an explicit registry (plugins).
///
/// # Errors
/// Those of [`create_index`], against `registry`.
pub async fn create_index_with(
    dataset: &Dataset,
    registry: &IndexRegistry,
    name: &str,
    column: &str,
    index_type: &str,
    params: &IndexParams,
) -> Result<Dataset> {
    validate_name(name)?;
    if !segments_of(dataset, name).is_empty() {
        return Err(Error::invalid_input(format!(
            "index '{name}' already exists"
        )));
    }
    let registered = registry.get(index_type)?;
    check_column(dataset, registered, column)?;
    if let Some(partitions) = params.partitions {
        // Each partition is trained from at least one row.
        let live_rows: u64 = dataset.fragments().iter().map(|f| f.live_rows()).sum();
        if u64::from(partitions) > live_rows {
            return Err(Error::invalid_input(format!(
                "partitions must be at most the table's {live_rows} live rows, got {partitions}"
            )));
        }
    }
    let ids: Vec<u64> = dataset.fragments().iter().map(|f| f.id).collect();
    let meta = build_segment(dataset, registered, name, column, &ids, params).await?;
    dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![meta],
            removed_index_uuids: Vec::new(),
        })
        .await
}

/// Adds a segment to index `name` covering the live fragments no segment of
/// it covers yet. Returns the dataset unchanged (no commit) when there are none.
///
/// # Errors
/// NotFound when there is no user index `name`; NotSupported for a
/// multi-column index, an unregistered type or an unsupported column type;
/// InvalidInput when its column is gone; the errors of building and committing.
pub async fn optimize_indices(dataset: &Dataset, name: &str) -> Result<Dataset> {
    optimize_indices_with(
        dataset,
        &IndexRegistry::with_builtins(),
        name,
        &IndexParams::default(),
    )
    .await
}

/// [`optimize_indices`] with an explicit registry and build parameters.
///
/// # Errors
/// Those of [`optimize_indices`], against `registry`.
pub async fn optimize_indices_with(
    dataset: &Dataset,
    registry: &IndexRegistry,
    name: &str,
    params: &IndexParams,
) -> Result<Dataset> {
    let segments = segments_of(dataset, name);
    let newest = segments
        .iter()
        .max_by_key(|m| m.dataset_version)
        .copied()
        .ok_or_else(|| {
            Error::not_found(format!("index '{name}' in version {}", dataset.version()))
        })?;
    let column = single_field(newest)?;
    let mut covered = RoaringBitmap::new();
    for segment in &segments {
        if let Some(bitmap) = &segment.fragment_bitmap {
            covered |= bitmap;
        }
    }
    let uncovered: Vec<u64> = dataset
        .fragments()
        .iter()
        .map(|f| f.id)
        .filter(|id| u32::try_from(*id).map_or(true, |id| !covered.contains(id)))
        .collect();
    if uncovered.is_empty() {
        return Ok(dataset.clone());
    }
    let registered = registry.get(&newest.index_type)?;
    check_column(dataset, registered, column)?;
    let meta = build_segment(dataset, registered, name, column, &uncovered, params).await?;
    dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![meta],
            removed_index_uuids: Vec::new(),
        })
        .await
}

/// Removes every segment of the user index `name` (files stay until cleanup).
///
/// # Errors
/// InvalidInput for an empty or reserved (`__`) name; NotFound when there is
/// no index `name`; the errors of committing (Conflict, store errors).
pub async fn drop_index(dataset: &Dataset, name: &str) -> Result<Dataset> {
    validate_name(name)?;
    let removed: Vec<Uuid> = segments_of(dataset, name).iter().map(|m| m.uuid).collect();
    if removed.is_empty() {
        return Err(Error::not_found(format!(
            "index '{name}' in version {}",
            dataset.version()
        )));
    }
    dataset
        .commit(Operation::CreateIndex {
            new_indices: Vec::new(),
            removed_index_uuids: removed,
        })
        .await
}

/// Builds one segment of `name` over `fragment_ids` (uncommitted).
///
/// # Errors
/// NotFound for a fragment not in `dataset`; InvalidInput for a missing column
/// or a fragment id above `u32`; the errors of scanning and of the type's build.
pub async fn build_segment(
    dataset: &Dataset,
    registered: &RegisteredType,
    name: &str,
    column: &str,
    fragment_ids: &[u64],
    params: &IndexParams,
) -> Result<IndexMetadata> {
    let uuid = Uuid::new_v4();
    let dir = index_dir(&uuid);
    let journal = Arc::new(FileJournal::new());
    let ctx = index_context(dataset).recording(journal.clone());
    let input = if fragment_ids.is_empty() {
        Box::pin(futures::stream::empty()) as futures::stream::BoxStream<'static, _>
    } else {
        dataset
            .scan()
            .project(&[column])
            .with_row_address()
            .fragments(fragment_ids)
            .one_pass()
            .try_into_stream()
            .await?
    };
    let (details, index_version) = match registered {
        RegisteredType::Streaming(t) => {
            (t.build(&ctx, &dir, input, params).await?, t.index_version())
        }
        RegisteredType::Legacy(t) => (t.build(&ctx, &dir, input, params).await?, t.index_version()),
    };
    let mut bitmap = RoaringBitmap::new();
    for id in fragment_ids {
        bitmap.insert(fragment_id_u32(*id)?);
    }
    Ok(IndexMetadata {
        uuid,
        name: name.to_string(),
        fields: vec![column.to_string()],
        fragment_bitmap: Some(bitmap),
        index_type: registered.name().to_string(),
        details,
        index_version,
        dataset_version: dataset.version(),
        files: journal.take_under(&dir),
        lance: Default::default(),
    })
}

/// The single indexed column of a user segment.
///
/// # Errors
/// NotSupported when the segment indexes no column or more than one.
pub fn single_field(meta: &IndexMetadata) -> Result<&str> {
    match meta.fields.as_slice() {
        [field] => Ok(field.as_str()),
        other => Err(Error::not_supported(format!(
            "index '{}' has {} fields; only single-column indices are supported",
            meta.name,
            other.len()
        ))),
    }
}

/// Fragment ids are u32 in row addresses.
///
/// # Errors
/// InvalidInput when `id` does not fit `u32`.
pub fn fragment_id_u32(id: u64) -> Result<u32> {
    u32::try_from(id).map_err(|_| Error::invalid_input(format!("fragment id {id} exceeds u32")))
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid_input("index name must not be empty"));
    }
    if name.starts_with(SYSTEM_INDEX_PREFIX) {
        return Err(Error::invalid_input(format!(
            "index name '{name}': names starting with '{SYSTEM_INDEX_PREFIX}' are reserved for system entries"
        )));
    }
    Ok(())
}

fn check_column(dataset: &Dataset, registered: &RegisteredType, column: &str) -> Result<DataType> {
    let schema = dataset.schema();
    let field = schema
        .field_with_name(column)
        .map_err(|_| Error::invalid_input(format!("column '{column}' does not exist")))?;
    let supported = match registered {
        RegisteredType::Streaming(t) => t.supports(field.data_type()),
        RegisteredType::Legacy(t) => t.supports(field.data_type()),
    };
    if !supported {
        return Err(Error::not_supported(format!(
            "index type '{}' on column '{column}' of type {}",
            registered.name(),
            field.data_type()
        )));
    }
    Ok(field.data_type().clone())
}

/// Shared handle for callers that keep one registry around.
pub fn shared_builtins() -> Arc<IndexRegistry> {
    Arc::new(IndexRegistry::with_builtins())
}
