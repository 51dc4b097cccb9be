//! Deterministic synthetic rows for `refract append` and `refract demo`.
//!
//! Row `i` (for id `K + i`) always has the same values, so scripted checks can
//! predict every column: `id` int64, `category` int32 = id % 10, `text` two words
//! from a fixed vocabulary, `vec` FixedSizeList<float32, D> of pseudo-random values.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, StringBuilder};
use arrow_array::{Int32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_core::{Error, Result};

/// Default vector dimension of the `vec` column.
pub const DEFAULT_DIM: i32 = 32;
/// Largest vector dimension `append` writes.
pub const MAX_DIM: i32 = 65_536;

const VOCABULARY: [&str; 16] = [
    "amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo",
    "juniper", "krypton", "lumen", "meadow", "nebula", "obsidian", "prism",
];

/// The schema of synthetic rows with vectors of `dim` dimensions.
pub fn schema(dim: i32) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("category", DataType::Int32, false),
        Field::new("text", DataType::Utf8, false),
        Field::new(
            "vec",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), dim),
            false,
        ),
    ]))
}

/// SplitMix64: a tiny, well-mixed deterministic hash.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The `text` value of row `id`.
pub fn text_for(id: i64) -> String {
    let h = mix(id as u64);
    let first = VOCABULARY[(h % 16) as usize];
    let second = VOCABULARY[((h >> 8) % 16) as usize];
    format!("{first} {second}")
}

/// Component `j` of the `vec` value of row `id`, in [-1, 1).
pub fn vector_component(id: i64, j: i32) -> f32 {
    let h = mix((id as u64).wrapping_mul(1_000_003).wrapping_add(j as u64));
    ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// Builds one batch with ids `start .. start + rows`.
///
/// # Errors
/// InvalidInput when `dim` is not positive; External if Arrow refuses the
/// columns.
pub fn batch(start: i64, rows: usize, dim: i32) -> Result<RecordBatch> {
    if dim <= 0 {
        return Err(Error::invalid_input("--dim must be positive"));
    }
    let ids: Vec<i64> = (0..rows as i64).map(|i| start + i).collect();
    let categories: Int32Array = ids.iter().map(|id| (id % 10) as i32).collect();
    let mut texts = StringBuilder::with_capacity(rows, rows * 16);
    let mut vectors = FixedSizeListBuilder::with_capacity(
        Float32Builder::with_capacity(rows * dim as usize),
        dim,
        rows,
    )
    .with_field(Arc::new(Field::new("item", DataType::Float32, true)));
    for &id in &ids {
        texts.append_value(text_for(id));
        for j in 0..dim {
            vectors.values().append_value(vector_component(id, j));
        }
        vectors.append(true);
    }
    RecordBatch::try_new(
        schema(dim),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(categories),
            Arc::new(texts.finish()),
            Arc::new(vectors.finish()),
        ],
    )
    .map_err(|e| Error::external("building synthetic batch", e))
}

/// Batches covering ids `start .. start + rows`, at most `batch_rows` rows each.
///
/// # Errors
/// Those of [`batch`]: InvalidInput when `dim` is not positive.
pub fn batches(start: i64, rows: u64, batch_rows: u64, dim: i32) -> Result<Vec<RecordBatch>> {
    let batch_rows = batch_rows.max(1);
    let mut out = Vec::new();
    let mut done = 0u64;
    while done < rows {
        let n = batch_rows.min(rows - done);
        out.push(batch(start + done as i64, n as usize, dim)?);
        done += n;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, StringArray};

    #[test]
    fn rows_are_deterministic_and_shaped() {
        let a = batch(100, 5, 4).unwrap();
        let b = batch(100, 5, 4).unwrap();
        assert_eq!(a, b);
        let ids = a.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values().to_vec(), vec![100, 101, 102, 103, 104]);
        let cats = a.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(cats.values().to_vec(), vec![0, 1, 2, 3, 4]);
        let texts = a.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(texts.value(0), text_for(100));
        assert_eq!(texts.value(0).split(' ').count(), 2);
        assert_eq!(a.column(3).len(), 5);
    }

    #[test]
    fn batches_split_exactly() {
        let parts = batches(0, 10, 4, 2).unwrap();
        let sizes: Vec<usize> = parts.iter().map(|b| b.num_rows()).collect();
        assert_eq!(sizes, vec![4, 4, 2]);
    }

    #[test]
    fn zero_dim_is_invalid() {
        assert!(matches!(batch(0, 1, 0), Err(Error::InvalidInput { .. })));
    }
}
