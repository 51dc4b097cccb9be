//! Decoded label chunks, as cached in the session's index cache.
//!
//! A chunk holds, per source row, its label *and* its rank among the rows of
//! the same label earlier in its block, packed in one `u32`
//! (`label << 16 | rank`). The rank fits 16 bits because a block holds at
//! most 65,536 rows. So a lookup is one array read whatever the access
//! pattern — dense or sparse, ascending or not — at 4 bytes per row (the
//! labels alone would be 2 bytes, but then every lookup pays a rank count).

use arrow_array::{Array, UInt16Array};
use refract_core::{DeepSize, Error, Result};

/// Sentinel for a deleted row (null label).
pub const DELETED: u16 = u16::MAX;
/// The packed entry of a deleted row.
pub(crate) const DELETED_ENTRY: u32 = u32::MAX;
/// Most rows a block may hold so every rank fits 16 bits.
pub const MAX_BLOCK_ROWS: usize = 1 << 16;

/// The labels and in-block ranks of consecutive blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelChunk {
    /// First row (global source row index) of the chunk.
    pub first_row: u64,
    /// Per row: `label << 16 | rank`, or `u32::MAX` for a deleted row.
    entries: Vec<u32>,
}

impl LabelChunk {
    /// Builds a chunk from decoded label arrays (nulls are deleted rows) whose
    /// first row starts a block of `block_rows`. Every label must be below
    /// `num_destinations` (`Corrupt` otherwise). `on_block(i, counts)` sees
    /// the per-label row counts of the chunk's `i`-th block, so callers can
    /// check them against the counts matrix without another pass.
    pub fn from_arrays(
        first_row: u64,
        block_rows: usize,
        num_destinations: usize,
        arrays: &[UInt16Array],
        mut on_block: impl FnMut(usize, &[u32]) -> Result<()>,
    ) -> Result<Self> {
        if block_rows == 0 || block_rows > MAX_BLOCK_ROWS {
            return Err(Error::corrupt(
                "row map",
                format!("blocks of {block_rows} rows are not between 1 and {MAX_BLOCK_ROWS}"),
            ));
        }
        if num_destinations > usize::from(DELETED) {
            return Err(Error::corrupt(
                "row map",
                format!("{num_destinations} destinations leave no label for deleted rows"),
            ));
        }
        let total: usize = arrays.iter().map(|a| a.len()).sum();
        // One contiguous label slice first (a copy when nothing is null), so
        // the ranking loop below runs block by block without per-row checks.
        let mut labels = Vec::with_capacity(total);
        for array in arrays {
            if array.null_count() == 0 {
                labels.extend_from_slice(array.values());
            } else {
                labels.extend(array.iter().map(|label| label.unwrap_or(DELETED)));
            }
        }
        let mut entries = Vec::with_capacity(total);
        // Rows of each label so far in the current block.
        let mut running = vec![0u32; num_destinations];
        for (block, rows) in labels.chunks(block_rows).enumerate() {
            running.iter_mut().for_each(|count| *count = 0);
            for label in rows {
                if *label == DELETED {
                    entries.push(DELETED_ENTRY);
                    continue;
                }
                let count = running.get_mut(usize::from(*label)).ok_or_else(|| {
                    Error::corrupt(
                        "row map",
                        format!("label {label} is not below {num_destinations}"),
                    )
                })?;
                // `count` < `block_rows` ≤ 65,536: fits the low 16 bits.
                entries.push((u32::from(*label) << 16) | *count);
                *count += 1;
            }
            on_block(block, &running)?;
        }
        Ok(Self { first_row, entries })
    }

    /// The packed entry of chunk-relative row `position` (`label << 16 |
    /// rank`, or [`DELETED_ENTRY`]); `None` outside the chunk.
    #[inline]
    pub(crate) fn entry(&self, position: usize) -> Option<u32> {
        self.entries.get(position).copied()
    }

    /// Every packed entry, by chunk-relative row.
    #[inline]
    pub(crate) fn entries(&self) -> &[u32] {
        &self.entries
    }

    /// The label of chunk-relative row `position` and its rank among rows with
    /// the same label earlier in the same block. `None` for a deleted row or a
    /// position outside the chunk. (The tests' view of an entry.)
    #[cfg(test)]
    pub fn label_and_rank(&self, position: usize) -> Option<(u16, u64)> {
        let entry = *self.entries.get(position)?;
        if entry == DELETED_ENTRY {
            return None;
        }
        Some(((entry >> 16) as u16, u64::from(entry & 0xFFFF)))
    }
}

impl DeepSize for LabelChunk {
    fn deep_size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.entries.capacity() * 4
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

    fn chunk_of(raw: &[Option<u16>], block_rows: usize, destinations: usize) -> LabelChunk {
        LabelChunk::from_arrays(
            0,
            block_rows,
            destinations,
            &[UInt16Array::from(raw.to_vec())],
            |_, _| Ok(()),
        )
        .unwrap()
    }

    #[test]
    fn ranks_match_a_linear_count() {
        let block_rows = 4_096;
        let raw = sample(10_000, 5);
        let chunk = chunk_of(&raw, block_rows, 5);
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
        assert_eq!(
            chunk.deep_size_bytes(),
            10_000 * 4 + size_of::<LabelChunk>()
        );
    }

    #[test]
    fn ranks_fill_a_whole_block_of_one_label() {
        // The largest rank a block can hold is 65,535: it must not spill into
        // the label bits.
        let raw = vec![Some(3u16); MAX_BLOCK_ROWS + 2];
        let chunk = chunk_of(&raw, MAX_BLOCK_ROWS, 4);
        assert_eq!(chunk.label_and_rank(MAX_BLOCK_ROWS - 1), Some((3, 65_535)));
        assert_eq!(chunk.label_and_rank(MAX_BLOCK_ROWS), Some((3, 0)));
        assert_eq!(chunk.label_and_rank(MAX_BLOCK_ROWS + 1), Some((3, 1)));
    }

    #[test]
    fn block_counts_are_reported_per_block() {
        let raw = vec![Some(0u16), Some(1), None, Some(1), Some(1), None, Some(0)];
        let mut seen = Vec::new();
        LabelChunk::from_arrays(0, 3, 2, &[UInt16Array::from(raw)], |block, counts| {
            seen.push((block, counts.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![(0, vec![1, 1]), (1, vec![0, 2]), (2, vec![1, 0])]
        );
        // A failing check fails the build.
        let err =
            LabelChunk::from_arrays(0, 3, 2, &[UInt16Array::from(vec![Some(0u16)])], |_, _| {
                Err(Error::corrupt("row map", "disagree"))
            })
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    #[test]
    fn out_of_range_labels_and_block_sizes_are_corrupt() {
        let err =
            LabelChunk::from_arrays(0, 4, 2, &[UInt16Array::from(vec![Some(2u16)])], |_, _| {
                Ok(())
            })
            .unwrap_err();
        assert!(err.to_string().contains("label 2 is not below 2"), "{err}");
        let err = LabelChunk::from_arrays(
            0,
            4,
            usize::from(DELETED) + 1,
            &[UInt16Array::from(vec![Some(0u16)])],
            |_, _| Ok(()),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("no label for deleted rows"),
            "{err}"
        );
        for block_rows in [0, MAX_BLOCK_ROWS + 1] {
            let err = LabelChunk::from_arrays(
                0,
                block_rows,
                2,
                &[UInt16Array::from(vec![Some(0u16)])],
                |_, _| Ok(()),
            )
            .unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        }
    }

    #[test]
    fn labels_split_over_several_arrays_rank_across_them() {
        let raw = sample(3_000, 16);
        let arrays: Vec<UInt16Array> = raw
            .chunks(700)
            .map(|piece| UInt16Array::from(piece.to_vec()))
            .collect();
        let chunk = LabelChunk::from_arrays(0, 1_024, 16, &arrays, |_, _| Ok(())).unwrap();
        for position in 0..3_000 {
            assert_eq!(
                chunk.label_and_rank(position),
                reference(&raw, 1_024, position)
            );
        }
    }

    proptest! {
        #[test]
        fn any_lookup_matches_the_reference(
            raw in proptest::collection::vec(proptest::option::weighted(0.9, 0u16..6), 1..3_000),
            positions in proptest::collection::vec(0usize..3_100, 1..400),
            block_shift in 0u32..12,
        ) {
            let block_rows = 1usize << block_shift;
            let chunk = chunk_of(&raw, block_rows, 6);
            for position in positions {
                prop_assert_eq!(
                    chunk.label_and_rank(position),
                    reference(&raw, block_rows, position)
                );
            }
        }
    }
}
