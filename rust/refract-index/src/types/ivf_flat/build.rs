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
    /// neighbours). `dim` is the dimension of earlier batches (0: none yet);
    /// another one is InvalidInput.
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

/// The indexed vectors of a build held in memory, row-major, with their
/// addresses in scan order.
#[derive(Debug, Default)]
pub struct CollectedVectors {
    /// Vector dimension (0 until the first batch).
    pub dim: usize,
    /// `addrs.len() × dim` values.
    pub values: Vec<f32>,
    /// Stored row addresses.
    pub addrs: Vec<u64>,
}

impl CollectedVectors {
    /// Appends vectors read from one batch (of this dimension, or the first).
    pub fn append(&mut self, vectors: BatchVectors) {
        self.dim = vectors.dim;
        if self.values.is_empty() {
            self.values = vectors.values;
            self.addrs = vectors.addrs;
        } else {
            self.values.extend_from_slice(&vectors.values);
            self.addrs.extend_from_slice(&vectors.addrs);
        }
    }

    /// Rows collected.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// True when no vector was collected.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
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
/// capped; never more than the rows. Zero is InvalidInput.
pub fn partition_count(params: &IndexParams, rows: usize) -> Result<usize> {
    let wanted = match params.partitions {
        Some(0) => return Err(Error::invalid_input("partitions must be at least 1")),
        Some(p) => p as usize,
        None => ((rows as f64).sqrt().round() as usize).clamp(1, MAX_DEFAULT_PARTITIONS),
    };
    Ok(wanted.min(rows.max(1)))
}

/// Training rows per partition: the parameter, else [`DEFAULT_SAMPLE_RATE`].
/// Zero is InvalidInput.
pub fn sample_rate(params: &IndexParams) -> Result<usize> {
    match params.sample_rate {
        Some(0) => Err(Error::invalid_input("sample_rate must be at least 1")),
        Some(rate) => Ok(rate as usize),
        None => Ok(DEFAULT_SAMPLE_RATE),
    }
}

/// Trains `k` centroids on `sample` (row-major, non-empty), using at most
/// `max_training_rows` of its rows (a deterministic subsample when it holds more).
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
        let dim = vectors.dim.max(1);
        let partitions = centroids.len() / dim;
        let assignment: Vec<u32> = vectors
            .values
            .chunks_exact(dim)
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
            // Every index in `order` is a collected row, so these lookups hold.
            let parts = chunk.iter().map(|r| self.assignment[*r]).collect();
            let addrs: UInt64Array = chunk.iter().map(|r| vectors.addrs[*r]).collect();
            let values = chunk
                .iter()
                .flat_map(|r| &vectors.values[r * dim..(r + 1) * dim])
                .copied()
                .collect();
            Ok((vectors_batch(dim, parts, values)?, addrs))
        })
    }
}

/// True if ivf_flat can index a column of `data_type`.
pub fn supports(data_type: &DataType) -> bool {
    matches!(data_type, DataType::FixedSizeList(item, size) if *size > 0 && item.data_type() == &DataType::Float32)
}
