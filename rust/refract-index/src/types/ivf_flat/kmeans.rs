//! Deterministic k-means: seeded k-means++ initialisation, capped Lloyd iterations.
//!
//! The same input, parameters and seed always give the same centroids, so a
//! rebuild is reproducible and tests can compare builds exactly. For cosine the
//! data is trained on the unit sphere (spherical k-means): on unit vectors
//! squared L2 equals `2 - 2·cos`, so L2 assignment gives cosine assignment.

use refract_core::{Error, Result};

use super::distance::{l2_squared, normalize_in_place};

/// SplitMix64: a tiny, well-mixed, seedable generator (no external crate needed
/// for reproducible sampling).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        // 53 random mantissa bits.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform index in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        // Multiply-shift maps 64 random bits onto 0..n without modulo bias worth caring about here.
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// Training parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KMeansParams {
    /// Number of centroids (clamped to the number of training rows).
    pub k: usize,
    /// Lloyd iterations at most; training also stops when assignments settle.
    pub max_iters: usize,
    /// Seed of the sampling and initialisation.
    pub seed: u64,
    /// At most this many rows (sampled deterministically) are used for training.
    pub max_training_rows: usize,
    /// Train on unit vectors (cosine metric).
    pub spherical: bool,
}

impl KMeansParams {
    /// Defaults for `k` centroids.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            max_iters: 20,
            seed: 0x5EED_1F7F_1A7F_0001,
            max_training_rows: k.saturating_mul(256).max(1),
            spherical: false,
        }
    }
}

/// Trained centroids, row-major `k × dim`.
#[derive(Debug, Clone, PartialEq)]
pub struct Centroids {
    dim: usize,
    data: Vec<f32>,
}

impl Centroids {
    /// Wraps row-major centroid values; the length must be a multiple of `dim`.
    ///
    /// # Errors
    /// Corrupt (ivf centroids) when `data` is empty, `dim` is 0 or the length
    /// is not a multiple of `dim`.
    pub fn from_flat(dim: usize, data: Vec<f32>) -> Result<Self> {
        if dim == 0 || !data.len().is_multiple_of(dim) || data.is_empty() {
            return Err(Error::corrupt(
                "ivf centroids",
                format!(
                    "{} values do not form centroids of dimension {dim}",
                    data.len()
                ),
            ));
        }
        Ok(Self { dim, data })
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of centroids.
    pub fn len(&self) -> usize {
        self.data.len() / self.dim
    }

    /// Always false: construction refuses empty centroid sets.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The flat row-major values.
    pub fn as_flat(&self) -> &[f32] {
        &self.data
    }

    /// Centroid `i`, if it exists.
    pub fn get(&self, i: usize) -> Option<&[f32]> {
        self.data.get(i * self.dim..(i + 1) * self.dim)
    }

    /// Iterates the centroids in partition order.
    pub fn iter(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.dim)
    }
}

/// Index of the row of `centroids` nearest to `v` by squared L2 (lowest index on ties).
fn nearest_l2(centroids: &[f32], dim: usize, v: &[f32]) -> (usize, f32) {
    let mut best = (0, f32::INFINITY);
    for (i, c) in centroids.chunks_exact(dim).enumerate() {
        let d = l2_squared(v, c);
        if d < best.1 {
            best = (i, d);
        }
    }
    best
}

/// Trains `params.k` centroids on `data` (row-major `n × dim`, finite values).
///
/// # Errors
/// InvalidInput when `data` is empty or not a multiple of `dim` values, or
/// `dim` or `params.k` is 0.
pub fn train(data: &[f32], dim: usize, params: &KMeansParams) -> Result<Centroids> {
    if dim == 0 || !data.len().is_multiple_of(dim) {
        return Err(Error::invalid_input(format!(
            "k-means input of {} values is not a multiple of dimension {dim}",
            data.len()
        )));
    }
    let n = data.len() / dim;
    if n == 0 || params.k == 0 {
        return Err(Error::invalid_input(
            "k-means needs at least one row and one partition",
        ));
    }
    let mut rng = SplitMix64::new(params.seed);
    let mut sample = sample_rows(data, dim, params.max_training_rows.max(1), &mut rng);
    if params.spherical {
        sample.chunks_exact_mut(dim).for_each(normalize_in_place);
    }
    let k = params.k.min(sample.len() / dim);
    let mut centroids = init_plus_plus(&sample, dim, k, &mut rng);
    lloyd(
        &sample,
        dim,
        &mut centroids,
        params.max_iters,
        params.spherical,
    );
    Centroids::from_flat(dim, centroids)
}

/// A deterministic sample of at most `max_rows` rows (all rows when fewer), in input order.
fn sample_rows(data: &[f32], dim: usize, max_rows: usize, rng: &mut SplitMix64) -> Vec<f32> {
    let n = data.len() / dim;
    if n <= max_rows {
        return data.to_vec();
    }
    // Partial Fisher-Yates over row indices, then restore input order.
    let mut indices: Vec<usize> = (0..n).collect();
    for i in 0..max_rows {
        let j = i + rng.below(n - i);
        indices.swap(i, j);
    }
    indices.truncate(max_rows);
    indices.sort_unstable();
    // Every index is below n = data.len() / dim, so each slice is in bounds.
    indices
        .iter()
        .flat_map(|&i| &data[i * dim..(i + 1) * dim])
        .copied()
        .collect()
}

/// k-means++ seeding: each next centroid is drawn with probability ∝ D².
fn init_plus_plus(sample: &[f32], dim: usize, k: usize, rng: &mut SplitMix64) -> Vec<f32> {
    let n = sample.len() / dim;
    // Callers pass i < n = sample.len() / dim (and k ≥ 1 centroids exist after
    // the first push), so these slices are in bounds.
    let row = |i: usize| &sample[i * dim..(i + 1) * dim];
    let mut centroids = Vec::with_capacity(k * dim);
    centroids.extend_from_slice(row(rng.below(n)));
    let mut d2: Vec<f64> = (0..n)
        .map(|i| f64::from(l2_squared(row(i), &centroids[..dim])))
        .collect();
    while centroids.len() < k * dim {
        let total: f64 = d2.iter().sum();
        let pick = if total > 0.0 && total.is_finite() {
            let target = rng.next_f64() * total;
            let mut acc = 0.0;
            let mut chosen = n - 1;
            for (i, w) in d2.iter().enumerate() {
                acc += w;
                if acc > target {
                    chosen = i;
                    break;
                }
            }
            chosen
        } else {
            // Every row coincides with a centroid: any row is as good as another.
            rng.below(n)
        };
        let start = centroids.len();
        centroids.extend_from_slice(row(pick));
        let newest = &centroids[start..];
        for (i, w) in d2.iter_mut().enumerate() {
            *w = w.min(f64::from(l2_squared(row(i), newest)));
        }
    }
    centroids
}

/// Lloyd iterations until assignments settle or `max_iters` is reached. An
/// empty cluster keeps its previous centroid.
fn lloyd(sample: &[f32], dim: usize, centroids: &mut [f32], max_iters: usize, spherical: bool) {
    let n = sample.len() / dim;
    let k = centroids.len() / dim;
    let mut assignment = vec![usize::MAX; n];
    let mut sums = vec![0f64; k * dim];
    let mut counts = vec![0usize; k];
    for _ in 0..max_iters {
        let mut changed = false;
        for (i, v) in sample.chunks_exact(dim).enumerate() {
            let (c, _) = nearest_l2(centroids, dim, v);
            if assignment[i] != c {
                assignment[i] = c;
                changed = true;
            }
        }
        if !changed {
            break;
        }
        sums.iter_mut().for_each(|s| *s = 0.0);
        counts.iter_mut().for_each(|c| *c = 0);
        for (v, &c) in sample.chunks_exact(dim).zip(&assignment) {
            // `nearest_l2` returns an index below k.
            counts[c] += 1;
            for (s, x) in sums[c * dim..(c + 1) * dim].iter_mut().zip(v) {
                *s += f64::from(*x);
            }
        }
        for (c, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let centroid = &mut centroids[c * dim..(c + 1) * dim];
            for (x, s) in centroid.iter_mut().zip(&sums[c * dim..(c + 1) * dim]) {
                *x = (*s / count as f64) as f32;
            }
            if spherical {
                normalize_in_place(centroid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blobs() -> Vec<f32> {
        // Three well separated blobs of 50 points in 2-D.
        let mut rng = SplitMix64::new(1);
        let mut data = Vec::new();
        for center in [[0.0f32, 0.0], [100.0, 0.0], [0.0, 100.0]] {
            for _ in 0..50 {
                data.push(center[0] + rng.next_f64() as f32);
                data.push(center[1] + rng.next_f64() as f32);
            }
        }
        data
    }

    #[test]
    fn finds_separated_blobs() {
        let c = train(&blobs(), 2, &KMeansParams::new(3)).unwrap();
        let mut found: Vec<(i32, i32)> = c
            .iter()
            .map(|v| ((v[0] / 50.0).round() as i32, (v[1] / 50.0).round() as i32))
            .collect();
        found.sort_unstable();
        assert_eq!(found, vec![(0, 0), (0, 2), (2, 0)]);
    }

    #[test]
    fn training_is_deterministic() {
        let a = train(&blobs(), 2, &KMeansParams::new(5)).unwrap();
        let b = train(&blobs(), 2, &KMeansParams::new(5)).unwrap();
        assert_eq!(a, b);
        let mut other_seed = KMeansParams::new(5);
        other_seed.max_training_rows = 20;
        assert_eq!(train(&blobs(), 2, &other_seed).unwrap().len(), 5);
    }

    #[test]
    fn k_is_clamped_to_rows_and_duplicates_are_fine() {
        let data = vec![1.0f32; 8];
        let c = train(&data, 2, &KMeansParams::new(10)).unwrap();
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|v| v == [1.0, 1.0]));
    }

    #[test]
    fn spherical_centroids_are_unit_length() {
        let mut params = KMeansParams::new(3);
        params.spherical = true;
        let c = train(&blobs(), 2, &params).unwrap();
        for v in c.iter() {
            let n = super::super::distance::norm(v);
            assert!((n - 1.0).abs() < 1e-4 || n == 0.0, "norm {n}");
        }
    }

    #[test]
    fn bad_shapes_are_invalid_input() {
        assert!(matches!(
            train(&[1.0, 2.0, 3.0], 2, &KMeansParams::new(1)),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(
            train(&[], 2, &KMeansParams::new(1)),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(
            Centroids::from_flat(3, vec![1.0; 4]),
            Err(Error::Corrupt { .. })
        ));
    }
}
