//! Shared fixtures: a four-type schema, deterministic rows, dataset locations.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use refract_table::{Dataset, OpenOptions, WriteOptions};
use tempfile::TempDir;

/// Where a test dataset lives.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Memory,
    Local,
}

/// A dataset location that keeps its temp dir alive.
pub struct Location {
    pub uri: String,
    _dir: Option<TempDir>,
}

pub fn location(backend: Backend) -> Location {
    match backend {
        Backend::Memory => Location {
            uri: format!("memory://{}", uuid::Uuid::new_v4()),
            _dir: None,
        },
        Backend::Local => {
            let dir = tempfile::tempdir().unwrap();
            let uri = dir.path().join("table").to_str().unwrap().to_string();
            Location {
                uri,
                _dir: Some(dir),
            }
        }
    }
}

pub const VECTOR_DIM: i32 = 4;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                VECTOR_DIM,
            ),
            true,
        ),
    ]))
}

/// Rows `start..start + n`: id = i, small = i * 2 (null when i % 7 == 0),
/// name = "row-i" (null when i % 5 == 0), vector = [i, i + .25, i + .5, i + .75] (null when i % 11 == 0).
pub fn rows(start: i64, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let small: Int32Array = ids
        .iter()
        .map(|i| (i % 7 != 0).then_some((*i as i32) * 2))
        .collect();
    let names: StringArray = ids
        .iter()
        .map(|i| (i % 5 != 0).then(|| format!("row-{i}")))
        .collect();
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), VECTOR_DIM);
    for i in &ids {
        for k in 0..VECTOR_DIM {
            vectors.values().append_value(*i as f32 + k as f32 * 0.25);
        }
        vectors.append(i % 11 != 0);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(small),
        Arc::new(names),
        Arc::new(vectors.finish()),
    ];
    RecordBatch::try_new(schema(), columns).unwrap()
}

pub fn opts(max_rows_per_file: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file,
        ..WriteOptions::default()
    }
}

pub async fn create(uri: &str) -> Dataset {
    Dataset::create(uri, schema(), OpenOptions::default())
        .await
        .unwrap()
}

/// A dataset with `n` rows (ids 0..n) in fragments of `per_file` rows.
pub async fn create_with_rows(uri: &str, n: usize, per_file: u64) -> Dataset {
    let mut dataset = create(uri).await;
    dataset
        .append(vec![rows(0, n)], &opts(per_file))
        .await
        .unwrap();
    dataset
}

/// The `id` column of a full scan, in scan order.
pub async fn scan_ids(dataset: &Dataset) -> Vec<i64> {
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .project(&["id"])
        .try_into_stream()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    ids_of(&batches)
}

pub fn ids_of(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|batch| {
            batch
                .column_by_name("id")
                .unwrap()
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

pub fn fragment_ids(dataset: &Dataset) -> Vec<u64> {
    dataset
        .fragments()
        .iter()
        .map(|fragment| fragment.id)
        .collect()
}
