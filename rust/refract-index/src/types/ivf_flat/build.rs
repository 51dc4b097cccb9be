//! The parts of an ivf_flat build: reading input batches, the partition
//! count, training, assignment, and the in-memory partition plan (see
//! [`super::stream`] for how a build runs them in bounded memory).

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use refract_core::{Error, Result};

use super::distance::partition_distance;
use super::kmeans::{train, KMeansParams};
use super::layout::{vectors_batch, IvfLayout};
use crate::types::entries::value_and_addresses;
use crate::types::{IndexParams, Metric};

/// Upper bound of the default partition count (`sqrt(rows)`).
pub const MAX_DEFAULT_PARTITIONS: usize = 4096;
/// Default training rows per partition.
pub const DEFAULT_SAMPLE_RATE: usize = 256;
/// Default Lloyd iterations.
pub const DEFAULT_MAX_ITERATIONS: usize = 20;

/// The non-null vectors of one build-input batch, row-major, with their
/// addresses in scan order.
#[derive(Debug, Default)]
pub struct BatchVectors {
    /// Vector dimension.
    pub dim: usize,
    /// `addrs.len() × dim` values.
    pub values: Vec<f32>,
    /// Stored row addresses.
    pub addrs: Vec<u64>,
}

impl BatchVectors {
    /// Reads one input batch; null vectors are skipped (they have no
    /// neighbours). `dim` is the dimension of earlier batches (0: none yet).
    ///
    /// # Errors
    /// InvalidInput when the batch lacks `_rowaddr` or a value column, the
    /// column is not a non-empty `FixedSizeList<Float32>`, its dimension differs
    /// from `dim`, or a vector holds null or non-finite values.
    pub fn read(batch: &RecordBatch, dim: usize) -> Result<Self> {
        let (column, addrs) = value_and_addresses(batch)?;
        let list = column.as_fixed_size_list_opt().ok_or_else(|| {
            Error::invalid_input(format!(
                "ivf_flat indexes FixedSizeList<Float32>, not {}",
                column.data_type()
            ))
        })?;
        let items = list
            .values()
            .as_primitive_opt::<Float32Type>()
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "ivf_flat needs Float32 items, not {}",
                    list.value_type()
                ))
            })?;
        let batch_dim = usize::try_from(list.value_length()).unwrap_or(0);
        if batch_dim == 0 {
            return Err(Error::invalid_input(
                "ivf_flat needs vectors of at least one dimension",
            ));
        }
        if dim != 0 && dim != batch_dim {
            return Err(Error::invalid_input(format!(
                "vector dimension changed from {dim} to {batch_dim}"
            )));
        }
        let mut out = Self {
            dim: batch_dim,
            values: Vec::with_capacity(addrs.len() * batch_dim),
            addrs: Vec::with_capacity(addrs.len()),
        };
        for (row, addr) in addrs.values().iter().enumerate() {
            if list.is_null(row) {
                continue;
            }
            let start = usize::try_from(list.value_offset(row))
                .map_err(|_| Error::invalid_input("negative list offset"))?;
            let vector = items
                .values()
                .get(start..start + batch_dim)
                .ok_or_else(|| Error::invalid_input("vector values shorter than the list"))?;
            let has_null_item =
                items.null_count() > 0 && (start..start + batch_dim).any(|i| items.is_null(i));
            if has_null_item || vector.iter().any(|x| !x.is_finite()) {
                return Err(Error::invalid_input(format!(
                    "vector at row address {addr} has null or non-finite values"
                )));
            }
            out.values.extend_from_slice(vector);
            out.addrs.push(*addr);
        }
        Ok(out)
    }

    /// Rows read.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// True when the batch had no non-null vector.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }
}

/// The indexed vectors of a build held in memory, in scan order: chunks of
/// `chunk_rows` rows, each allocated once at its full size (the last one
/// cut so the chunks hold `max_rows` at most), so holding rows never moves
/// or reallocates them, and the memory is the rows rounded up to a chunk.
#[derive(Debug)]
pub struct CollectedVectors {
    dim: usize,
    chunk_rows: usize,
    max_rows: usize,
    chunks: Vec<Chunk>,
    /// Rows the chunks can hold.
    allocated_rows: usize,
    len: usize,
}

/// Row-major values and addresses of up to one chunk of rows.
#[derive(Debug)]
struct Chunk {
    /// The collection's row this chunk starts at.
    start: usize,
    values: Vec<f32>,
    addrs: Vec<u64>,
}

impl CollectedVectors {
    /// An empty collection of `dim`-value vectors in chunks of `chunk_rows`
    /// rows (at least one) holding `max_rows` rows at most before rows past
    /// it get chunks of their own.
    pub fn new(dim: usize, chunk_rows: usize, max_rows: usize) -> Self {
        Self {
            dim: dim.max(1),
            chunk_rows: chunk_rows.max(1),
            max_rows,
            chunks: Vec::new(),
            allocated_rows: 0,
            len: 0,
        }
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Appends the vectors of one batch of this dimension.
    pub fn append(&mut self, vectors: &BatchVectors) {
        let dim = self.dim;
        let mut rest_addrs = vectors.addrs.as_slice();
        let mut rest_values = vectors.values.as_slice();
        while !rest_addrs.is_empty() {
            if self
                .chunks
                .last()
                .is_none_or(|c| c.addrs.len() == c.addrs.capacity())
            {
                let room = self.max_rows.saturating_sub(self.allocated_rows);
                let rows = if room == 0 {
                    self.chunk_rows
                } else {
                    self.chunk_rows.min(room)
                };
                self.chunks.push(Chunk {
                    start: self.len,
                    values: Vec::with_capacity(rows * dim),
                    addrs: Vec::with_capacity(rows),
                });
                self.allocated_rows += rows;
            }
            // A chunk was pushed above unless the last one has room.
            let Some(chunk) = self.chunks.last_mut() else {
                return;
            };
            let take = (chunk.addrs.capacity() - chunk.addrs.len()).min(rest_addrs.len());
            chunk.addrs.extend_from_slice(&rest_addrs[..take]);
            chunk.values.extend_from_slice(&rest_values[..take * dim]);
            rest_addrs = &rest_addrs[take..];
            rest_values = &rest_values[take * dim..];
            self.len += take;
        }
    }

    /// Rows collected.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no vector was collected.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the chunks allocated (vector values and addresses).
    pub fn allocated_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| {
                c.values.capacity() * std::mem::size_of::<f32>()
                    + c.addrs.capacity() * std::mem::size_of::<u64>()
            })
            .sum()
    }

    /// The chunks in order: their vector values and addresses.
    pub fn chunks(&self) -> impl Iterator<Item = (&[f32], &[u64])> {
        self.chunks
            .iter()
            .map(|c| (c.values.as_slice(), c.addrs.as_slice()))
    }

    /// Every vector in order.
    pub fn vectors(&self) -> impl Iterator<Item = &[f32]> {
        self.chunks
            .iter()
            .flat_map(move |c| c.values.chunks_exact(self.dim))
    }

    /// The vector and address of row `row`; None past the last row.
    fn row(&self, row: usize) -> Option<(&[f32], u64)> {
        // Chunks are in row order; the one holding `row` is the last that
        // starts at or before it.
        let index = self.chunks.partition_point(|c| c.start <= row);
        let chunk = self.chunks.get(index.checked_sub(1)?)?;
        let at = row - chunk.start;
        let addr = *chunk.addrs.get(at)?;
        let vector = chunk.values.get(at * self.dim..(at + 1) * self.dim)?;
        Some((vector, addr))
    }
}

/// The capacity, in rows, a buffer of `capacity` rows grows to when it must
/// hold `needed` rows: double, but never past `limit` unless `needed` is
/// more. A buffer that fits its limit never holds up to twice it, as plain
/// `Vec` growth would.
pub fn capped_growth(capacity: usize, needed: usize, limit: usize) -> usize {
    capacity.saturating_mul(2).min(limit).max(needed)
}

/// The partition count for `rows` rows: the parameter, else `sqrt(rows)`
/// capped; never more than the rows.
///
/// # Errors
/// InvalidInput when `params.partitions` is 0.
pub fn partition_count(params: &IndexParams, rows: usize) -> Result<usize> {
    let wanted = match params.partitions {
        Some(0) => return Err(Error::invalid_input("partitions must be at least 1")),
        Some(p) => p as usize,
        None => ((rows as f64).sqrt().round() as usize).clamp(1, MAX_DEFAULT_PARTITIONS),
    };
    Ok(wanted.min(rows.max(1)))
}

/// Training rows per partition: the parameter, else [`DEFAULT_SAMPLE_RATE`].
///
/// # Errors
/// InvalidInput when `params.sample_rate` is 0.
pub fn sample_rate(params: &IndexParams) -> Result<usize> {
    match params.sample_rate {
        Some(0) => Err(Error::invalid_input("sample_rate must be at least 1")),
        Some(rate) => Ok(rate as usize),
        None => Ok(DEFAULT_SAMPLE_RATE),
    }
}

/// Trains `k` centroids on `sample` (row-major, non-empty), using at most
/// `max_training_rows` of its rows (a deterministic subsample when it holds more).
///
/// # Errors
/// InvalidInput when `sample` is empty or not a multiple of `dim` values, or
/// `dim` or `k` is 0.
pub fn train_centroids(
    sample: &[f32],
    dim: usize,
    k: usize,
    max_training_rows: usize,
    params: &IndexParams,
    metric: Metric,
) -> Result<Vec<f32>> {
    let mut kmeans = KMeansParams::new(k);
    kmeans.max_training_rows = max_training_rows;
    kmeans.max_iters = params
        .max_iterations
        .map_or(DEFAULT_MAX_ITERATIONS, |i| i as usize);
    kmeans.spherical = metric == Metric::Cosine;
    Ok(train(sample, dim, &kmeans)?.as_flat().to_vec())
}

/// Index of the centroid nearest to `v` under the partitioning metric (lowest index on ties).
pub fn assign(centroids: &[f32], dim: usize, metric: Metric, v: &[f32]) -> u32 {
    let mut best = (0u32, f32::INFINITY);
    for (i, c) in centroids.chunks_exact(dim).enumerate() {
        let d = partition_distance(metric, v, c);
        if d < best.1 {
            // There are at most u32::MAX partitions: the count is checked when encoding the layout.
            best = (i as u32, d);
        }
    }
    best.0
}

/// Where every collected row goes: the layout (centroids, partition sizes),
/// each row's partition and the file order (rows grouped by partition, scan
/// order kept inside a partition).
#[derive(Debug)]
pub struct PartitionPlan {
    /// Centroids and partition sizes.
    pub layout: IvfLayout,
    /// Partition of each collected row.
    pub assignment: Vec<u32>,
    /// Collected-row indices in file order.
    pub order: Vec<usize>,
}

impl PartitionPlan {
    /// Assigns every vector of `vectors` to its nearest centroid.
    pub fn new(vectors: &CollectedVectors, centroids: Vec<f32>, metric: Metric) -> Self {
        let dim = vectors.dim();
        let partitions = centroids.len() / dim;
        let assignment: Vec<u32> = vectors
            .vectors()
            .map(|v| assign(&centroids, dim, metric, v))
            .collect();
        let mut lengths = vec![0u64; partitions];
        for p in &assignment {
            // `assign` returns an index of `centroids`, so `p < partitions`.
            lengths[*p as usize] += 1;
        }
        // Counting sort: stable, so scan order is kept inside each partition.
        let mut next: Vec<usize> = Vec::with_capacity(partitions);
        let mut acc = 0usize;
        for len in &lengths {
            next.push(acc);
            acc += *len as usize;
        }
        let mut order = vec![0usize; assignment.len()];
        for (row, p) in assignment.iter().enumerate() {
            // Same bound as above; the slots of partition p stay below the
            // start of p + 1, so `*slot < order.len()`.
            let slot = &mut next[*p as usize];
            order[*slot] = row;
            *slot += 1;
        }
        let layout = IvfLayout {
            dim,
            centroids,
            lengths,
        };
        Self {
            layout,
            assignment,
            order,
        }
    }

    /// The file batches, at most `batch_rows` rows each, built lazily:
    /// the vectors-file batch and the matching addresses.
    pub fn batches<'a>(
        &'a self,
        vectors: &'a CollectedVectors,
        batch_rows: usize,
    ) -> impl Iterator<Item = Result<(RecordBatch, UInt64Array)>> + 'a {
        let dim = self.layout.dim;
        self.order.chunks(batch_rows.max(1)).map(move |chunk| {
            let mut parts = Vec::with_capacity(chunk.len());
            let mut addrs = Vec::with_capacity(chunk.len());
            let mut values = Vec::with_capacity(chunk.len() * dim);
            for r in chunk {
                // `order` and `assignment` index the collected rows.
                let (vector, addr) = vectors
                    .row(*r)
                    .ok_or_else(|| Error::invalid_input(format!("row {r} was not collected")))?;
                parts.push(self.assignment[*r]);
                addrs.push(addr);
                values.extend_from_slice(vector);
            }
            Ok((vectors_batch(dim, parts, values)?, UInt64Array::from(addrs)))
        })
    }
}

/// True if ivf_flat can index a column of `data_type`.
pub fn supports(data_type: &DataType) -> bool {
    matches!(data_type, DataType::FixedSizeList(item, size) if *size > 0 && item.data_type() == &DataType::Float32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(rows: std::ops::Range<u64>) -> BatchVectors {
        BatchVectors {
            dim: 2,
            values: rows.clone().flat_map(|r| [r as f32, -(r as f32)]).collect(),
            addrs: rows.map(|r| r + 1_000).collect(),
        }
    }

    #[test]
    fn collected_rows_fill_chunks_allocated_once_up_to_the_limit() {
        // Chunks of 4 rows, at most 10 rows: 4 + 4 + 2, then 4 again.
        let mut collected = CollectedVectors::new(2, 4, 10);
        collected.append(&batch(0..3));
        collected.append(&batch(3..9));
        assert_eq!(collected.len(), 9);
        let sizes: Vec<usize> = collected.chunks().map(|(_, a)| a.len()).collect();
        assert_eq!(sizes, vec![4, 4, 1]);
        assert_eq!(collected.allocated_bytes(), 10 * (2 * 4 + 8));
        collected.append(&batch(9..12));
        let sizes: Vec<usize> = collected.chunks().map(|(_, a)| a.len()).collect();
        assert_eq!(sizes, vec![4, 4, 2, 2]);
        assert_eq!(collected.allocated_bytes(), 14 * (2 * 4 + 8));
        // Rows come back in order, by position and all together.
        for r in 0..12u64 {
            let (vector, addr) = collected.row(r as usize).unwrap();
            assert_eq!((vector, addr), (&[r as f32, -(r as f32)][..], r + 1_000));
        }
        assert!(collected.row(12).is_none());
        let all: Vec<f32> = collected.vectors().flatten().copied().collect();
        assert_eq!(all, batch(0..12).values);
    }
}
