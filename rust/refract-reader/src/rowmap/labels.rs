//! Decoded label chunks, as cached in the session's index cache.

use arrow_array::{Array, UInt16Array};
use refract_core::DeepSize;

/// Sentinel for a deleted row (null label).
pub const DELETED: u16 = u16::MAX;
/// Rows between rank checkpoints.
pub const CHECKPOINT_STRIDE: usize = 1_024;
/// Checkpoints are kept only for maps with at most this many destinations, so
/// they never outweigh the labels themselves.
pub const MAX_CHECKPOINT_DESTINATIONS: usize = 256;

/// The labels of consecutive blocks, plus per-stride rank checkpoints so a point
/// lookup scans at most [`CHECKPOINT_STRIDE`] labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelChunk {
    /// First row (global source row index) of the chunk.
    pub first_row: u64,
    /// Rows per block.
    pub block_rows: usize,
    /// One label per row; [`DELETED`] for nulls.
    pub labels: Vec<u16>,
    /// `checkpoints[s * width + d]` = rows with label `d` from the start of the
    /// block containing stride `s` up to (excluding) the stride's first row.
    checkpoints: Vec<u32>,
    width: usize,
}

impl LabelChunk {
    /// Builds a chunk from decoded label arrays (nulls become [`DELETED`]).
    pub fn from_arrays(
        first_row: u64,
        block_rows: usize,
        num_destinations: usize,
        arrays: &[UInt16Array],
    ) -> Self {
        let total: usize = arrays.iter().map(|a| a.len()).sum();
        let mut labels = Vec::with_capacity(total);
        for array in arrays {
            if array.null_count() == 0 {
                labels.extend_from_slice(array.values());
            } else {
                labels.extend(array.iter().map(|label| label.unwrap_or(DELETED)));
            }
        }
        let width = if num_destinations <= MAX_CHECKPOINT_DESTINATIONS {
            num_destinations
        } else {
            0
        };
        let checkpoints = build_checkpoints(&labels, block_rows, width);
        Self {
            first_row,
            block_rows,
            labels,
            checkpoints,
            width,
        }
    }

    /// Rows in the chunk.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when the chunk holds no rows.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The label of chunk-relative row `position` and its rank among rows with
    /// the same label earlier in the same block. `None` for a deleted row or a
    /// position outside the chunk.
    pub fn label_and_rank(&self, position: usize) -> Option<(u16, u64)> {
        let label = *self.labels.get(position)?;
        if label == DELETED {
            return None;
        }
        let block_start = position - position % self.block_rows;
        let (scan_from, mut rank) = if self.width > 0 && usize::from(label) < self.width {
            let stride = position / CHECKPOINT_STRIDE;
            let start = stride * CHECKPOINT_STRIDE;
            let base = self
                .checkpoints
                .get(stride * self.width + usize::from(label))
                .copied()
                .unwrap_or(0);
            (start.max(block_start), u64::from(base))
        } else {
            (block_start, 0)
        };
        rank += self.labels[scan_from..position]
            .iter()
            .filter(|l| **l == label)
            .count() as u64;
        Some((label, rank))
    }
}

fn build_checkpoints(labels: &[u16], block_rows: usize, width: usize) -> Vec<u32> {
    if width == 0 {
        return Vec::new();
    }
    let strides = labels.len().div_ceil(CHECKPOINT_STRIDE);
    let mut checkpoints = Vec::with_capacity(strides * width);
    let mut running = vec![0u32; width];
    for stride in 0..strides {
        let start = stride * CHECKPOINT_STRIDE;
        if start.is_multiple_of(block_rows) {
            running.iter_mut().for_each(|count| *count = 0);
        }
        checkpoints.extend_from_slice(&running);
        let end = (start + CHECKPOINT_STRIDE).min(labels.len());
        for label in &labels[start..end] {
            if let Some(count) = running.get_mut(usize::from(*label)) {
                *count += 1;
            }
        }
    }
    checkpoints
}

impl DeepSize for LabelChunk {
    fn deep_size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.labels.capacity() * 2 + self.checkpoints.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_match_a_linear_count() {
        let block_rows = 4_096;
        let raw: Vec<Option<u16>> = (0..10_000u32)
            .map(|i| {
                if i % 7 == 0 {
                    None
                } else {
                    Some((i * 31 % 5) as u16)
                }
            })
            .collect();
        let chunk = LabelChunk::from_arrays(0, block_rows, 5, &[UInt16Array::from(raw.clone())]);
        for position in [0usize, 1, 1_023, 1_024, 1_025, 4_095, 4_096, 4_097, 9_999] {
            let expected = raw[position].map(|label| {
                let block_start = position - position % block_rows;
                let rank = raw[block_start..position]
                    .iter()
                    .filter(|l| **l == Some(label))
                    .count() as u64;
                (label, rank)
            });
            assert_eq!(
                chunk.label_and_rank(position),
                expected,
                "position {position}"
            );
        }
        assert_eq!(chunk.label_and_rank(10_000), None);
    }
}
