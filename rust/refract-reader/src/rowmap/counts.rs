//! The cumulative counts matrix of a stable-partition row map, in Lance's
//! format (`lance_core::utils::stable_partition::CountsMatrix`, which owns
//! the encoding and its structural checks).
//!
//! For block `b` and destination `d`, `before(b, d)` is the number of rows with
//! label `d` in blocks `0..b`. A row in block `b` with label `d` lands at
//! destination offset `before(b, d) + rank`, where `rank` counts earlier rows of
//! block `b` with the same label. `before(num_blocks, d)` is the total, which
//! must equal the destination's physical rows.
//!
//! Encoding (Lance's, little endian), stored in the row-map file's global
//! buffer named by the schema metadata `lance:stable_partition:counts_buffer_index`:
//! `magic "LSPC" | version u32 = 1 | representation u32 = 0 (dense grid) |
//! num_destinations u32 | block_rows u32 | total_rows u64 | counts u32 ×
//! num_blocks × num_destinations` (cumulative through the end of each block).
//! Every size is checked against the buffer length before anything is allocated.

use lance_core::utils::stable_partition as lance;
use refract_core::{Error, Result};

/// Rows per block of a row map (Lance's default, the only size Refract's
/// chunked reader reads).
pub const BLOCK_ROWS: u32 = lance::DEFAULT_BLOCK_ROWS;
/// Most destinations a stable partition may have: the ledger's limit.
use refract_ledger::MAX_PARTITION_DESTINATIONS as MAX_DESTINATIONS;

/// The validated counts matrix of one row map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountsMatrix {
    inner: lance::CountsMatrix,
}

/// Builds a counts matrix from the labels of a row map, one per physical
/// source row in scan order (`None` = deleted).
#[derive(Debug)]
pub struct CountsBuilder {
    inner: lance::CountsMatrixBuilder,
}

impl CountsBuilder {
    /// A builder for `num_destinations` destinations.
    ///
    /// # Errors
    /// InvalidInput for a destination count outside `1..=65,535`.
    pub fn new(num_destinations: u32) -> Result<Self> {
        check_destinations(num_destinations)?;
        let inner = lance::CountsMatrixBuilder::try_new(num_destinations, BLOCK_ROWS)
            .map_err(|e| Error::invalid_input(e.to_string()))?;
        Ok(Self { inner })
    }

    /// Records the label of the next physical source row.
    ///
    /// # Errors
    /// InvalidInput for a label not below the destination count.
    pub fn push(&mut self, label: Option<u16>) -> Result<()> {
        self.inner
            .push(label)
            .map_err(|e| Error::invalid_input(e.to_string()))
    }

    /// The finished, validated matrix.
    ///
    /// # Errors
    /// Corrupt when the counts are inconsistent (never for labels pushed
    /// through [`Self::push`]).
    pub fn finish(self) -> Result<CountsMatrix> {
        CountsMatrix::checked(self.inner.finish())
    }
}

impl CountsMatrix {
    /// Builds the matrix from per-block label histograms (`per_block[b][d]`);
    /// the rows of a block beyond its histogram's total are deleted rows.
    ///
    /// # Errors
    /// InvalidInput for a destination count outside `1..=65,535` or a histogram
    /// of another width; Corrupt when a block's histogram holds more rows than
    /// the block, or all of them more than `num_rows`.
    pub fn from_histograms(
        num_rows: u64,
        num_destinations: u32,
        per_block: &[Vec<u64>],
    ) -> Result<Self> {
        let mut builder = CountsBuilder::new(num_destinations)?;
        let block_rows = u64::from(BLOCK_ROWS);
        let mut pushed = 0u64;
        for (block, histogram) in per_block.iter().enumerate() {
            if histogram.len() != num_destinations as usize {
                return Err(Error::invalid_input(
                    "row-map histogram has the wrong width",
                ));
            }
            let start = block as u64 * block_rows;
            let len = num_rows.saturating_sub(start).min(block_rows);
            let labelled: u64 = histogram.iter().sum();
            if labelled > len {
                return Err(corrupt(format!(
                    "block {block} grows by {labelled} rows but holds {len}"
                )));
            }
            for (label, count) in histogram.iter().enumerate() {
                // `label < num_destinations <= 65,536` (checked by the builder).
                let label = u16::try_from(label).ok();
                for _ in 0..*count {
                    builder.push(label)?;
                }
            }
            for _ in labelled..len {
                builder.push(None)?;
            }
            pushed += len;
        }
        if pushed != num_rows {
            return Err(corrupt(format!(
                "histograms cover {pushed} rows, not {num_rows}"
            )));
        }
        builder.finish()
    }

    /// Validates a matrix Lance's codec produced.
    fn checked(inner: lance::CountsMatrix) -> Result<Self> {
        if inner.block_rows() != BLOCK_ROWS {
            return Err(corrupt(format!(
                "block size {}, expected {BLOCK_ROWS}",
                inner.block_rows()
            )));
        }
        check_destinations(inner.num_destinations())
            .map_err(|_| corrupt(format!("{} destinations", inner.num_destinations())))?;
        inner.validate().map_err(|e| corrupt(lance_message(&e)))?;
        Ok(Self { inner })
    }

    /// Rows per block.
    pub fn block_rows(&self) -> u32 {
        self.inner.block_rows()
    }

    /// Labels in the map (physical rows of all sources).
    pub fn num_rows(&self) -> u64 {
        self.inner.total_rows()
    }

    /// Number of destinations.
    pub fn num_destinations(&self) -> u32 {
        self.inner.num_destinations()
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> u64 {
        self.inner.num_blocks() as u64
    }

    /// Rows with label `destination` in blocks before `block` (`block` up to
    /// [`Self::num_blocks`], which gives the totals).
    pub fn before(&self, block: u64, destination: u16) -> Option<u64> {
        if u32::from(destination) >= self.num_destinations() || block > self.num_blocks() {
            return None;
        }
        // `block <= num_blocks`, which fits in usize (it sized a Vec).
        let block = usize::try_from(block).ok()?;
        Some(u64::from(self.inner.count_before(block, destination)))
    }

    /// Bytes held, heap included.
    pub fn deep_size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.inner.num_blocks() * self.num_destinations() as usize * 4
    }

    /// Total rows per destination.
    pub fn totals(&self) -> Vec<u64> {
        (0..self.num_destinations())
            // Destinations are at most 65,536, so every label fits in u16.
            .filter_map(|label| u16::try_from(label).ok())
            .map(|label| u64::from(self.inner.total(label)))
            .collect()
    }

    /// Encodes the matrix for the file's global buffer.
    pub fn encode(&self) -> Vec<u8> {
        self.inner.encode()
    }

    /// Decodes and validates an encoded matrix. Sizes are checked against the
    /// buffer before allocating.
    ///
    /// # Errors
    /// Corrupt for a truncated or inconsistent buffer (bad magic, an unknown
    /// version or representation, sizes, or counts that do not add up).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let inner = lance::CountsMatrix::decode(bytes).map_err(|e| corrupt(lance_message(&e)))?;
        Self::checked(inner)
    }

    /// Rows in `block` (the last block may be short).
    pub fn block_len(&self, block: u64) -> u64 {
        let start = block * u64::from(self.block_rows());
        self.num_rows()
            .saturating_sub(start)
            .min(u64::from(self.block_rows()))
    }

    /// Checks the totals against the destinations' physical rows and the row
    /// count against the sources' physical rows.
    ///
    /// # Errors
    /// Corrupt when the row count is not `source_rows` or the totals are not
    /// `destination_rows`.
    pub fn check_against(&self, source_rows: u64, destination_rows: &[u64]) -> Result<()> {
        if source_rows != self.num_rows() {
            return Err(corrupt(format!(
                "row map has {} labels but the sources hold {source_rows} rows",
                self.num_rows()
            )));
        }
        if self.totals() != destination_rows {
            return Err(corrupt(
                "row-map totals do not match the destinations' physical rows",
            ));
        }
        Ok(())
    }
}

fn check_destinations(num_destinations: u32) -> Result<()> {
    if num_destinations == 0 || num_destinations > MAX_DESTINATIONS {
        return Err(Error::invalid_input(format!(
            "a stable partition needs 1..={MAX_DESTINATIONS} destinations, got {num_destinations}"
        )));
    }
    Ok(())
}

/// Lance's message without its source location suffix, on one line.
fn lance_message(error: &lance_core::Error) -> String {
    let text = error.to_string();
    let text = text.split(", /").next().unwrap_or(&text);
    text.replace('\n', " ")
}

/// What a Corrupt error of the counts names (the reader adds the file).
pub(super) const WHAT: &str = "row-map counts";

fn corrupt(message: impl Into<String>) -> Error {
    Error::corrupt(WHAT, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> CountsMatrix {
        // 70,000 rows: block 0 full, block 1 holds 4,464 rows.
        CountsMatrix::from_histograms(70_000, 2, &[vec![30_000, 35_536], vec![4_000, 400]]).unwrap()
    }

    #[test]
    fn the_destination_limit_is_the_ledgers() {
        let limit = refract_ledger::MAX_PARTITION_DESTINATIONS;
        let one_row_each = |n: u32| {
            let mut histogram = vec![0u64; n as usize];
            histogram[0] = 1;
            CountsMatrix::from_histograms(1, n, &[histogram])
        };
        let matrix = one_row_each(limit).unwrap();
        assert_eq!(CountsMatrix::decode(&matrix.encode()).unwrap(), matrix);
        assert!(one_row_each(limit + 1).is_err());
        // A stored matrix announcing one more destination is refused too.
        let mut bytes = matrix.encode();
        // num_destinations sits after magic, version and representation.
        bytes[12..16].copy_from_slice(&(limit + 1).to_le_bytes());
        assert!(matches!(
            CountsMatrix::decode(&bytes),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn round_trip_and_lookups() {
        let matrix = sample();
        let decoded = CountsMatrix::decode(&matrix.encode()).unwrap();
        assert_eq!(decoded, matrix);
        assert_eq!(matrix.num_blocks(), 2);
        assert_eq!(matrix.before(1, 0), Some(30_000));
        assert_eq!(matrix.before(1, 1), Some(35_536));
        assert_eq!(matrix.totals(), vec![34_000, 35_936]);
        assert_eq!(matrix.block_len(1), 4_464);
        assert!(matrix.check_against(70_000, &[34_000, 35_936]).is_ok());
        assert!(matrix.check_against(70_001, &[34_000, 35_936]).is_err());
        assert!(matrix.check_against(70_000, &[34_000, 35_935]).is_err());
    }

    #[test]
    fn block_growth_beyond_its_length_is_corrupt() {
        let err =
            CountsMatrix::from_histograms(70_000, 2, &[vec![30_000, 35_536], vec![4_000, 500]]);
        assert!(matches!(err, Err(Error::Corrupt { .. })));
    }

    /// The sample's encoding with `value` written at byte `at`, decoded.
    fn decode_patched(at: usize, value: &[u8]) -> Result<CountsMatrix> {
        let mut bytes = sample().encode();
        bytes[at..at + value.len()].copy_from_slice(value);
        CountsMatrix::decode(&bytes)
    }

    #[test]
    fn decreasing_counts_are_corrupt() {
        // Cell (1, 0) sits after the 28-byte header and block 0's two cells.
        let err = decode_patched(28 + 2 * 4, &20_000u32.to_le_bytes());
        assert!(matches!(err, Err(Error::Corrupt { .. })));
    }

    #[test]
    fn huge_declared_sizes_are_rejected_before_allocating() {
        assert!(decode_patched(20, &u64::MAX.to_le_bytes()).is_err());
        let mut bytes = sample().encode();
        bytes.truncate(bytes.len() - 1);
        assert!(CountsMatrix::decode(&bytes).is_err());
    }

    #[test]
    fn unknown_versions_and_representations_are_corrupt() {
        for at in [4, 8] {
            let err = decode_patched(at, &2u32.to_le_bytes());
            assert!(matches!(err, Err(Error::Corrupt { .. })));
        }
    }

    #[test]
    fn the_encoding_is_lances() {
        let bytes = sample().encode();
        assert_eq!(&bytes[..4], b"LSPC");
        let lance = lance::CountsMatrix::decode(&bytes).unwrap();
        assert_eq!(lance.total(0), 34_000);
        assert_eq!(lance.count_before(1, 1), 35_536);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = CountsMatrix::decode(&bytes);
        }

        #[test]
        fn mutated_encodings_never_panic(index in 0usize..80, value in any::<u8>()) {
            let mut bytes = sample().encode();
            let i = index % bytes.len();
            bytes[i] = value;
            let _ = CountsMatrix::decode(&bytes);
        }
    }
}
