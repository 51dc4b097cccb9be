//! The bounded, deterministic training sample of an ivf_flat build.
//!
//! A build sees its rows once, as a stream, and learns how many there are
//! only at the end; the sample is a reservoir (Algorithm R) of at most
//! [`training_cap`] rows, so training memory never follows the table. The
//! reservoir draws from a fixed seed and the rows arrive in scan order, so the
//! same table always gives the same sample.

use super::build::capped_growth;
use super::kmeans::SplitMix64;

/// Training rows at most, whatever the partition count and sample rate
/// (1,024 partitions × the default 256 rows per partition).
pub const MAX_TRAINING_ROWS: usize = 262_144;
/// Vector bytes of the training sample at most (64 MiB: 262,144 rows of 64
/// dimensions, fewer of wider vectors).
pub const MAX_TRAINING_BYTES: usize = 64 << 20;
/// Seed of the reservoir's draws (distinct from the k-means seed).
const RESERVOIR_SEED: u64 = 0x5EED_1F7F_5A3F_0002;

/// The training rows for `partitions` partitions of `dim`-value vectors:
/// `partitions × sample_rate`, at most `max_rows` and `max_bytes` of vector
/// values, and never fewer than `partitions` (each centroid needs a row).
pub fn training_cap(
    partitions: usize,
    sample_rate: usize,
    dim: usize,
    max_rows: usize,
    max_bytes: usize,
) -> usize {
    let by_bytes = max_bytes / dim.max(1).saturating_mul(std::mem::size_of::<f32>());
    partitions
        .saturating_mul(sample_rate)
        .min(max_rows)
        .min(by_bytes)
        .max(partitions)
        .max(1)
}

/// A uniform sample of at most `cap` of the vectors offered, in offer order.
#[derive(Debug)]
pub struct Reservoir {
    cap: usize,
    dim: usize,
    rng: SplitMix64,
    /// Vectors offered so far.
    seen: u64,
    /// `slots × dim` values of the kept vectors.
    values: Vec<f32>,
    /// The offer position of each kept vector (to restore offer order).
    positions: Vec<u64>,
}

impl Reservoir {
    /// An empty reservoir of at most `cap` vectors of `dim` values.
    pub fn new(cap: usize, dim: usize) -> Self {
        Self {
            cap,
            dim,
            rng: SplitMix64::new(RESERVOIR_SEED),
            seen: 0,
            values: Vec::new(),
            positions: Vec::new(),
        }
    }

    /// Offers the next vector (`dim` values) of the stream.
    pub fn offer(&mut self, vector: &[f32]) {
        let position = self.seen;
        self.seen += 1;
        let held = self.positions.len();
        if held < self.cap {
            if held == self.positions.capacity() {
                // Doubling, but never past the cap: the sample's memory is its cap at most.
                let rows = capped_growth(held, held + 1, self.cap);
                self.positions.reserve_exact(rows - held);
                self.values
                    .reserve_exact(rows * self.dim - self.values.len());
            }
            self.values.extend_from_slice(vector);
            self.positions.push(position);
            return;
        }
        // Algorithm R: keep the vector with probability cap / seen, in a uniform slot.
        let draw = self
            .rng
            .below(usize::try_from(self.seen).unwrap_or(usize::MAX));
        if draw < self.cap {
            let slot = &mut self.values[draw * self.dim..(draw + 1) * self.dim];
            slot.copy_from_slice(vector);
            self.positions[draw] = position;
        }
    }

    /// Bytes the sample has allocated (vector values and positions).
    pub fn allocated_bytes(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<f32>()
            + self.positions.capacity() * std::mem::size_of::<u64>()
    }

    /// Vectors held.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// True when nothing was offered.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The kept vectors, row-major, in the order they were offered (so a
    /// stream no longer than the cap comes back unchanged).
    pub fn into_values(self) -> Vec<f32> {
        let mut slots: Vec<usize> = (0..self.positions.len()).collect();
        slots.sort_unstable_by_key(|s| self.positions[*s]);
        // Every slot index is below positions.len() = values.len() / dim.
        slots
            .iter()
            .flat_map(|s| &self.values[s * self.dim..(s + 1) * self.dim])
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(reservoir: &mut Reservoir, n: usize) {
        for i in 0..n {
            reservoir.offer(&[i as f32, -(i as f32)]);
        }
    }

    #[test]
    fn a_short_stream_comes_back_whole_and_in_order() {
        let mut r = Reservoir::new(10, 2);
        offered(&mut r, 7);
        assert_eq!(r.len(), 7);
        let expected: Vec<f32> = (0..7).flat_map(|i| [i as f32, -(i as f32)]).collect();
        assert_eq!(r.into_values(), expected);
    }

    #[test]
    fn a_long_stream_keeps_cap_distinct_rows_in_order_deterministically() {
        let mut a = Reservoir::new(100, 2);
        offered(&mut a, 10_000);
        assert_eq!(a.len(), 100);
        let values = a.into_values();
        let firsts: Vec<f32> = values.chunks_exact(2).map(|v| v[0]).collect();
        assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{firsts:?}");
        assert!(values.chunks_exact(2).all(|v| v[1] == -v[0]));
        // Rows from the whole stream, not just its head.
        assert!(firsts.iter().any(|f| *f >= 5_000.0), "{firsts:?}");
        let mut b = Reservoir::new(100, 2);
        offered(&mut b, 10_000);
        assert_eq!(b.into_values(), values);
    }

    #[test]
    fn the_sample_allocates_its_cap_at_most() {
        // 100 rows of 2 values and a position: 1,600 bytes, not the 2,048 of
        // doubling to 128 rows.
        let mut r = Reservoir::new(100, 2);
        offered(&mut r, 10_000);
        assert_eq!(r.allocated_bytes(), 100 * (2 * 4 + 8));
        // Below the cap it grows by doubling.
        let mut r = Reservoir::new(100, 2);
        offered(&mut r, 5);
        assert_eq!(r.allocated_bytes(), 8 * (2 * 4 + 8));
    }

    #[test]
    fn the_cap_follows_rate_rows_and_bytes_but_never_drops_below_partitions() {
        assert_eq!(training_cap(4, 256, 32, 1_000_000, 1 << 30), 1_024);
        assert_eq!(
            training_cap(4096, 256, 32, MAX_TRAINING_ROWS, 1 << 30),
            262_144
        );
        // 1 MiB of 128-value vectors is 2,048 rows.
        assert_eq!(training_cap(64, 256, 128, 1_000_000, 1 << 20), 2_048);
        assert_eq!(training_cap(5_000, 256, 128, 1_000, 1 << 20), 5_000);
        assert_eq!(training_cap(0, 256, 8, 10, 10), 1);
    }
}
