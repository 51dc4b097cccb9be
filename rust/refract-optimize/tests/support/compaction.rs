//! Two-column (`id`, `text`) tables of exact fragment sizes, for the
//! compaction tests.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_table::dataset::{Dataset, OpenOptions};

use super::{memory_uri, write_options};

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("text", DataType::Utf8, false),
    ]))
}

pub fn batch(start: i64, rows: u64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + rows as i64).collect();
    let texts: Vec<String> = ids.iter().map(|id| format!("row {id}")).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(texts)),
        ],
    )
    .unwrap()
}

/// A dataset whose fragments have exactly `sizes` rows, ids 0.. in order.
pub async fn dataset_with_fragments(sizes: &[u64]) -> Dataset {
    let uri = memory_uri("compaction");
    let mut dataset = Dataset::create(&uri, schema(), OpenOptions::default())
        .await
        .unwrap();
    let mut next = 0i64;
    for size in sizes {
        dataset
            .append(vec![batch(next, *size)], &write_options(*size))
            .await
            .unwrap();
        next += *size as i64;
    }
    dataset
}

/// Physical rows of each fragment, in order.
pub fn fragment_sizes(dataset: &Dataset) -> Vec<u64> {
    dataset
        .fragments()
        .iter()
        .map(|f| f.physical_rows)
        .collect()
}
