//! Decoded label chunks, as cached in the session's index cache.

use arrow_array::{Array, UInt16Array};
use refract_core::DeepSize;

/// Sentinel for a deleted row (null label).
pub const DELETED: u16 = u16::MAX;
/// Fewest rows between rank checkpoints.
pub const MIN_CHECKPOINT_STRIDE: usize = 64;
/// Checkpoint rows per destination: a stride of `width × 4` rows holds `width`
/// two-byte counts, so checkpoints weigh at most half a byte per row (a
/// quarter of the labels' own weight).
const STRIDE_ROWS_PER_DESTINATION: usize = 4;

/// The labels of consecutive blocks, plus per-stride rank checkpoints so a point
/// lookup scans fewer than [`LabelChunk::stride`] labels.
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
    checkpoints: Vec<u16>,
    /// Destinations with checkpoints (0: none, every rank scans from the
    /// block start).
    width: usize,
    /// Rows between checkpoints (a power of two dividing `block_rows` when
    /// `width > 0`).
    stride: usize,
    /// `log2(stride)` when `width > 0`.
    stride_shift: u32,
    /// `block_rows - 1` when `block_rows` is a power of two (always, for
    /// files of this format): block starts without a division.
    block_mask: Option<usize>,
}

/// The checkpoint stride for `num_destinations` in blocks of `block_rows`,
/// or `None` when checkpoints would not fit the weight budget or the block.
fn checkpoint_stride(block_rows: usize, num_destinations: usize) -> Option<usize> {
    let stride = num_destinations
        .checked_mul(STRIDE_ROWS_PER_DESTINATION)?
        .checked_next_power_of_two()?
        .max(MIN_CHECKPOINT_STRIDE);
    // Counts within a block must fit u16, and strides must tile each block.
    let fits = block_rows <= usize::from(u16::MAX) + 1
        && stride < block_rows
        && block_rows.is_multiple_of(stride);
    fits.then_some(stride)
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
        let (width, stride) = match checkpoint_stride(block_rows, num_destinations) {
            Some(stride) => (num_destinations, stride),
            None => (0, block_rows.max(1)),
        };
        let checkpoints = build_checkpoints(&labels, block_rows, width, stride);
        Self {
            first_row,
            block_rows,
            labels,
            checkpoints,
            width,
            stride,
            stride_shift: stride.trailing_zeros(),
            block_mask: block_rows.is_power_of_two().then(|| block_rows - 1),
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

    /// Rows between rank checkpoints (the block length without checkpoints).
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The label of chunk-relative row `position` and its rank among rows with
    /// the same label earlier in the same block. `None` for a deleted row or a
    /// position outside the chunk.
    pub fn label_and_rank(&self, position: usize) -> Option<(u16, u64)> {
        let label = *self.labels.get(position)?;
        if label == DELETED {
            return None;
        }
        Some((label, self.rank_from_checkpoint(position, label)))
    }

    /// Like [`Self::label_and_rank`], but continues from `cursor`'s last rank
    /// of the same label when that is nearer than the checkpoint: ascending
    /// positions then cost the labels between them, not a rescan.
    pub fn label_and_rank_with(
        &self,
        position: usize,
        cursor: &mut RankCursor,
    ) -> Option<(u16, u64)> {
        let label = *self.labels.get(position)?;
        if label == DELETED {
            return None;
        }
        if self.width > 0 && usize::from(label) < self.width {
            return Some((label, self.rank_sequential(position, label, cursor)));
        }
        let slot = usize::from(label);
        let block_start = self.block_start(position);
        let checkpoint = self.scan_start(position, block_start, label);
        let rank = match cursor.last.get(slot).copied() {
            Some((last, rank)) if last != usize::MAX && last >= checkpoint && last <= position => {
                rank + count_label(&self.labels[last..position], label)
            }
            _ => self.rank_from_checkpoint(position, label),
        };
        if cursor.last.len() <= slot {
            cursor.last.resize(slot + 1, (usize::MAX, 0));
        }
        cursor.last[slot] = (position, rank);
        Some((label, rank))
    }

    /// The rank of `label` at `position` from the cursor's running counts of
    /// every label: a walk that moves forward inside one stride only counts
    /// the labels it passes (one increment each, whatever their label), and
    /// any other move restarts from the stride's checkpoint. Needs
    /// checkpoints (`width > 0`) and `label < width`.
    fn rank_sequential(&self, position: usize, label: u16, cursor: &mut RankCursor) -> u64 {
        let block_start = self.block_start(position);
        let stride_start = ((position >> self.stride_shift) << self.stride_shift).max(block_start);
        let walk = &mut cursor.walk;
        let continues = walk.chunk == Some(self.first_row)
            && walk.position >= stride_start
            && walk.position <= position;
        if !continues {
            walk.chunk = Some(self.first_row);
            walk.counts.clear();
            if stride_start == block_start {
                // A block's first stride starts from zero.
                walk.counts.resize(self.width, 0);
            } else {
                let stride = position >> self.stride_shift;
                let at = stride * self.width;
                match self.checkpoints.get(at..at + self.width) {
                    Some(counts) => walk.counts.extend(counts.iter().map(|c| u32::from(*c))),
                    None => walk.counts.resize(self.width, 0),
                }
            }
            walk.position = stride_start;
        }
        for passed in &self.labels[walk.position..position] {
            // DELETED and out-of-range labels have no count.
            if let Some(count) = walk.counts.get_mut(usize::from(*passed)) {
                *count += 1;
            }
        }
        walk.position = position;
        walk.counts
            .get(usize::from(label))
            .copied()
            .map_or(0, u64::from)
    }

    /// Where a rank scan of `label` at `position` starts: its stride's first
    /// row when the label has checkpoints, else its block's first row.
    fn scan_start(&self, position: usize, block_start: usize, label: u16) -> usize {
        if usize::from(label) < self.width {
            // The stride is a power of two when there are checkpoints.
            ((position >> self.stride_shift) << self.stride_shift).max(block_start)
        } else {
            block_start
        }
    }

    /// The first position of the block holding `position`.
    #[inline]
    fn block_start(&self, position: usize) -> usize {
        match self.block_mask {
            Some(mask) => position & !mask,
            None => position - position % self.block_rows,
        }
    }

    /// The rank of `label` at `position` from the nearest checkpoint.
    fn rank_from_checkpoint(&self, position: usize, label: u16) -> u64 {
        let block_start = self.block_start(position);
        let start = self.scan_start(position, block_start, label);
        let base = if start == block_start {
            // A block's first stride starts from zero, as does a label
            // without checkpoints (scanned from the block start).
            0
        } else {
            let stride = position >> self.stride_shift;
            self.checkpoints
                .get(stride * self.width + usize::from(label))
                .copied()
                .map_or(0, u64::from)
        };
        base + count_label(&self.labels[start..position], label)
    }
}

/// Rows of `labels` equal to `label`. Counts in pieces of at most
/// `u16::MAX` rows with a `u16` accumulator, which the compiler vectorizes
/// with eight or more lanes per register (a `u64` sum gets two).
#[inline]
fn count_label(labels: &[u16], label: u16) -> u64 {
    labels
        .chunks(usize::from(u16::MAX))
        .map(|piece| {
            let matches = piece
                .iter()
                .fold(0u16, |count, l| count.wrapping_add(u16::from(*l == label)));
            // A piece holds at most `u16::MAX` rows, so the count never wraps.
            u64::from(matches)
        })
        .sum()
}

/// The last rank computed per label during one walk over one chunk; makes
/// ascending lookups incremental. Reset (or create a new one) for another chunk.
#[derive(Debug, Default, Clone)]
pub struct RankCursor {
    /// Per label: (chunk-relative position, its rank), `usize::MAX` if unset.
    last: Vec<(usize, u64)>,
    /// Running counts of every label, for chunks with checkpoints.
    walk: SequentialWalk,
}

/// Counts of every label from its block's start up to `position` (excluded)
/// in the chunk starting at row `chunk`.
#[derive(Debug, Default, Clone)]
struct SequentialWalk {
    chunk: Option<u64>,
    position: usize,
    counts: Vec<u32>,
}

impl RankCursor {
    /// A cursor with nothing remembered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets every remembered rank (for a walk over another chunk).
    pub fn reset(&mut self) {
        self.last.clear();
        self.walk.chunk = None;
    }
}

fn build_checkpoints(labels: &[u16], block_rows: usize, width: usize, stride: usize) -> Vec<u16> {
    if width == 0 {
        return Vec::new();
    }
    let strides = labels.len().div_ceil(stride);
    let mut checkpoints = Vec::with_capacity(strides * width);
    let mut running = vec![0u16; width];
    for s in 0..strides {
        let start = s * stride;
        if start.is_multiple_of(block_rows) {
            running.iter_mut().for_each(|count| *count = 0);
        }
        checkpoints.extend_from_slice(&running);
        let end = (start + stride).min(labels.len());
        for label in &labels[start..end] {
            if let Some(count) = running.get_mut(usize::from(*label)) {
                // At most `block_rows - stride` < 65,536 rows precede a
                // checkpoint within its block (see `checkpoint_stride`); the
                // last stride's total is never stored.
                *count = count.wrapping_add(1);
            }
        }
    }
    checkpoints
}

impl DeepSize for LabelChunk {
    fn deep_size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.labels.capacity() * 2 + self.checkpoints.capacity() * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The label and rank of `position` by a linear count from its block start.
    fn reference(raw: &[Option<u16>], block_rows: usize, position: usize) -> Option<(u16, u64)> {
        let label = (*raw.get(position)?)?;
        let block_start = position - position % block_rows;
        let rank = raw[block_start..position]
            .iter()
            .filter(|l| **l == Some(label))
            .count() as u64;
        Some((label, rank))
    }

    fn sample(len: u32, destinations: u32) -> Vec<Option<u16>> {
        (0..len)
            .map(|i| {
                if i % 7 == 0 {
                    None
                } else {
                    Some((i.wrapping_mul(2_654_435_761) >> 7) as u16 % destinations as u16)
                }
            })
            .collect()
    }

    #[test]
    fn ranks_match_a_linear_count() {
        let block_rows = 4_096;
        let raw = sample(10_000, 5);
        let chunk = LabelChunk::from_arrays(0, block_rows, 5, &[UInt16Array::from(raw.clone())]);
        assert_eq!(chunk.stride(), 64);
        for position in [
            0usize, 1, 63, 64, 65, 1_023, 1_024, 4_095, 4_096, 4_097, 9_999,
        ] {
            assert_eq!(
                chunk.label_and_rank(position),
                reference(&raw, block_rows, position),
                "position {position}"
            );
        }
        assert_eq!(chunk.label_and_rank(10_000), None);
    }

    #[test]
    fn checkpoints_weigh_at_most_half_a_byte_per_row() {
        assert_eq!(checkpoint_stride(65_536, 16), Some(64));
        assert_eq!(checkpoint_stride(65_536, 17), Some(128));
        assert_eq!(checkpoint_stride(65_536, 256), Some(1_024));
        assert_eq!(checkpoint_stride(65_536, 8_192), Some(32_768));
        assert_eq!(checkpoint_stride(65_536, 16_384), None);
        assert_eq!(checkpoint_stride(4_096, 1_024), None);
        let raw = sample(131_072, 16);
        let chunk = LabelChunk::from_arrays(0, 65_536, 16, &[UInt16Array::from(raw)]);
        // 2,048 strides × 16 two-byte counts, next to 262,144 bytes of labels.
        assert_eq!(chunk.checkpoints.len(), 2_048 * 16);
        assert!(chunk.deep_size_bytes() >= 131_072 * 2 + 2_048 * 16 * 2);
    }

    #[test]
    fn cursor_walks_match_the_reference_across_blocks() {
        let block_rows = 1_024;
        for destinations in [1u32, 5, 16, 300] {
            let raw = sample(5_000, destinations);
            let chunk = LabelChunk::from_arrays(
                0,
                block_rows,
                destinations as usize,
                &[UInt16Array::from(raw.clone())],
            );
            let mut cursor = RankCursor::new();
            // Ascending with duplicates, then descending, over block edges.
            let walk: Vec<usize> = (0..5_000)
                .step_by(3)
                .chain([4_999, 4_999, 1_023, 1_024, 0, 2_047, 2_048, 1_000])
                .collect();
            for position in walk {
                assert_eq!(
                    chunk.label_and_rank_with(position, &mut cursor),
                    reference(&raw, block_rows, position),
                    "{destinations} destinations, position {position}"
                );
            }
        }
    }

    #[test]
    fn running_counts_match_the_reference_for_every_step() {
        // Dense, strided and sparse ascending walks, then a walk that moves
        // back, reuses one cursor across two chunks and repeats positions.
        let block_rows = 4_096;
        let raw = sample(20_000, 16);
        let chunk = LabelChunk::from_arrays(0, block_rows, 16, &[UInt16Array::from(raw.clone())]);
        let other_raw = sample(5_000, 16);
        let other = LabelChunk::from_arrays(
            20_000,
            block_rows,
            16,
            &[UInt16Array::from(other_raw.clone())],
        );
        for step in [1usize, 3, 10, 63, 64, 65, 100, 5_000] {
            let mut cursor = RankCursor::new();
            for position in (0..20_000).step_by(step) {
                assert_eq!(
                    chunk.label_and_rank_with(position, &mut cursor),
                    reference(&raw, block_rows, position),
                    "step {step}, position {position}"
                );
            }
        }
        let mut cursor = RankCursor::new();
        for position in [5usize, 70, 70, 69, 4_095, 4_096, 4_100, 10, 4_200, 19_999] {
            assert_eq!(
                chunk.label_and_rank_with(position, &mut cursor),
                reference(&raw, block_rows, position),
                "position {position}"
            );
            let near = position % 5_000;
            assert_eq!(
                other.label_and_rank_with(near, &mut cursor),
                reference(&other_raw, block_rows, near),
                "other chunk, position {near}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_walk_matches_the_reference(
            raw in proptest::collection::vec(proptest::option::weighted(0.9, 0u16..6), 1..3_000),
            positions in proptest::collection::vec(0usize..3_100, 1..400),
            block_shift in 7u32..12,
            ascending in any::<bool>(),
        ) {
            let block_rows = 1usize << block_shift;
            let chunk = LabelChunk::from_arrays(0, block_rows, 6, &[UInt16Array::from(raw.clone())]);
            let mut positions = positions;
            if ascending {
                positions.sort_unstable();
            }
            let mut cursor = RankCursor::new();
            for position in positions {
                let want = reference(&raw, block_rows, position);
                prop_assert_eq!(chunk.label_and_rank(position), want);
                prop_assert_eq!(chunk.label_and_rank_with(position, &mut cursor), want);
            }
        }
    }
}
