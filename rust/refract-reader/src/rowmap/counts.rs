//! The cumulative counts matrix of a stable-partition row map.
//!
//! For block `b` and destination `d`, `before(b, d)` is the number of rows with
//! label `d` in blocks `0..b`. A row in block `b` with label `d` lands at
//! destination offset `before(b, d) + rank`, where `rank` counts earlier rows of
//! block `b` with the same label. Row `b = num_blocks` holds the totals, which
//! must equal the destinations' physical rows.
//!
//! Encoding (little endian), stored in the row-map file's global buffer:
//! `magic "RFRM" | format_version u32 = 1 | block_rows u32 | num_rows u64 |
//! num_destinations u32 | num_blocks u64 | counts u64 × (num_blocks + 1) × num_destinations`.
//! Every size is checked against the buffer length before anything is allocated.

use refract_core::{Error, Result};

/// Rows per block of a row map.
pub const BLOCK_ROWS: u32 = 65_536;
/// Magic bytes of the counts buffer.
pub const MAGIC: &[u8; 4] = b"RFRM";
/// The only counts format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Most destinations a stable partition may have: the ledger's limit.
use refract_ledger::MAX_PARTITION_DESTINATIONS as MAX_DESTINATIONS;
const HEADER_BYTES: usize = 4 + 4 + 4 + 8 + 4 + 8;

/// The validated counts matrix of one row map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountsMatrix {
    block_rows: u32,
    num_rows: u64,
    num_destinations: u32,
    /// Row-major: `(num_blocks + 1) × num_destinations`.
    counts: Vec<u64>,
}

impl CountsMatrix {
    /// Builds the matrix from per-block label histograms (`per_block[b][d]`).
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
        if num_destinations == 0 || num_destinations > MAX_DESTINATIONS {
            return Err(Error::invalid_input(format!(
                "a stable partition needs 1..={MAX_DESTINATIONS} destinations, got {num_destinations}"
            )));
        }
        let width = num_destinations as usize;
        let mut counts = Vec::with_capacity((per_block.len() + 1) * width);
        let mut running = vec![0u64; width];
        counts.extend_from_slice(&running);
        for histogram in per_block {
            if histogram.len() != width {
                return Err(Error::invalid_input(
                    "row-map histogram has the wrong width",
                ));
            }
            for (total, count) in running.iter_mut().zip(histogram) {
                *total += count;
            }
            counts.extend_from_slice(&running);
        }
        let matrix = Self {
            block_rows: BLOCK_ROWS,
            num_rows,
            num_destinations,
            counts,
        };
        matrix.validate()?;
        Ok(matrix)
    }

    /// Rows per block.
    pub fn block_rows(&self) -> u32 {
        self.block_rows
    }

    /// Labels in the map (physical rows of all sources).
    pub fn num_rows(&self) -> u64 {
        self.num_rows
    }

    /// Number of destinations.
    pub fn num_destinations(&self) -> u32 {
        self.num_destinations
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> u64 {
        self.num_rows.div_ceil(u64::from(self.block_rows))
    }

    /// Rows with label `destination` in blocks before `block`.
    pub fn before(&self, block: u64, destination: u16) -> Option<u64> {
        let width = self.num_destinations as usize;
        let row = usize::try_from(block).ok()?;
        if usize::from(destination) >= width {
            return None;
        }
        self.counts
            .get(row * width + usize::from(destination))
            .copied()
    }

    /// Bytes held, heap included.
    pub fn deep_size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.counts.capacity() * 8
    }

    /// Total rows per destination.
    pub fn totals(&self) -> Vec<u64> {
        let width = self.num_destinations as usize;
        let start = self.counts.len().saturating_sub(width);
        self.counts[start..].to_vec()
    }

    /// Encodes the matrix for the file's global buffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.counts.len() * 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.block_rows.to_le_bytes());
        out.extend_from_slice(&self.num_rows.to_le_bytes());
        out.extend_from_slice(&self.num_destinations.to_le_bytes());
        out.extend_from_slice(&self.num_blocks().to_le_bytes());
        for count in &self.counts {
            out.extend_from_slice(&count.to_le_bytes());
        }
        out
    }

    /// Decodes and validates an encoded matrix. Sizes are checked against the
    /// buffer before allocating.
    ///
    /// # Errors
    /// NotSupported for an unknown format version; Corrupt for a truncated or
    /// inconsistent buffer (bad magic, sizes, or counts that do not add up).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut cursor = Cursor { bytes, position: 0 };
        if cursor.take(4)? != MAGIC {
            return Err(corrupt("bad magic"));
        }
        let version = cursor.u32()?;
        if version != FORMAT_VERSION {
            return Err(Error::not_supported(format!(
                "row-map counts format version {version}; please upgrade"
            )));
        }
        let block_rows = cursor.u32()?;
        let num_rows = cursor.u64()?;
        let num_destinations = cursor.u32()?;
        let num_blocks = cursor.u64()?;
        if block_rows != BLOCK_ROWS {
            return Err(corrupt(format!(
                "block size {block_rows}, expected {BLOCK_ROWS}"
            )));
        }
        if num_destinations == 0 || num_destinations > MAX_DESTINATIONS {
            return Err(corrupt(format!("{num_destinations} destinations")));
        }
        if num_blocks != num_rows.div_ceil(u64::from(block_rows)) {
            return Err(corrupt("block count does not match the row count"));
        }
        let cells = num_blocks
            .checked_add(1)
            .and_then(|rows| rows.checked_mul(u64::from(num_destinations)))
            .ok_or_else(|| corrupt("counts matrix size overflows"))?;
        let remaining = (bytes.len() - cursor.position) as u64;
        if cells.checked_mul(8) != Some(remaining) {
            return Err(corrupt(format!(
                "counts matrix needs {cells} cells but the buffer holds {remaining} bytes"
            )));
        }
        // Bounded by the buffer length, checked just above.
        let mut counts = Vec::with_capacity(cells as usize);
        for _ in 0..cells {
            counts.push(cursor.u64()?);
        }
        let matrix = Self {
            block_rows,
            num_rows,
            num_destinations,
            counts,
        };
        matrix.validate()?;
        Ok(matrix)
    }

    /// Counts start at zero, never decrease, grow per block by at most the
    /// block's length in total, and never exceed the row count.
    fn validate(&self) -> Result<()> {
        let width = self.num_destinations as usize;
        let Some(first) = self.counts.get(..width) else {
            return Err(corrupt("counts matrix is empty"));
        };
        if first.iter().any(|count| *count != 0) {
            return Err(corrupt("counts do not start at zero"));
        }
        let rows: Vec<&[u64]> = self.counts.chunks_exact(width).collect();
        for (block, pair) in rows.windows(2).enumerate() {
            let block_len = self.block_len(block as u64);
            let mut growth = 0u64;
            for (before, after) in pair[0].iter().zip(pair[1]) {
                if after < before {
                    return Err(corrupt(format!("counts decrease in block {block}")));
                }
                growth += after - before;
            }
            if growth > block_len {
                return Err(corrupt(format!(
                    "block {block} grows by {growth} rows but holds {block_len}"
                )));
            }
        }
        let total: u64 = self.totals().iter().sum();
        if total > self.num_rows {
            return Err(corrupt("more labelled rows than rows"));
        }
        Ok(())
    }

    /// Rows in `block` (the last block may be short).
    pub fn block_len(&self, block: u64) -> u64 {
        let start = block * u64::from(self.block_rows);
        self.num_rows
            .saturating_sub(start)
            .min(u64::from(self.block_rows))
    }

    /// Checks the totals against the destinations' physical rows and the row
    /// count against the sources' physical rows.
    ///
    /// # Errors
    /// Corrupt when the row count is not `source_rows` or the totals are not
    /// `destination_rows`.
    pub fn check_against(&self, source_rows: u64, destination_rows: &[u64]) -> Result<()> {
        if source_rows != self.num_rows {
            return Err(corrupt(format!(
                "row map has {} labels but the sources hold {source_rows} rows",
                self.num_rows
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

/// What a Corrupt error of the counts names (the reader adds the file).
pub(super) const WHAT: &str = "row-map counts";

fn corrupt(message: impl Into<String>) -> Error {
    Error::corrupt(WHAT, message)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .position
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| corrupt("truncated"))?;
        let slice = &self.bytes[self.position..end];
        self.position = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32> {
        let mut buf = [0u8; 4];
        buf.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(buf))
    }

    fn u64(&mut self) -> Result<u64> {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(buf))
    }
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
        // num_destinations sits after magic, version, block rows and num_rows.
        bytes[20..24].copy_from_slice(&(limit + 1).to_le_bytes());
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

    #[test]
    fn decreasing_counts_are_corrupt() {
        let mut bytes = sample().encode();
        // Cell (1, 0) sits after the header and the zero row.
        let cell = HEADER_BYTES + 2 * 8;
        bytes[cell..cell + 8].copy_from_slice(&40_000u64.to_le_bytes());
        assert!(matches!(
            CountsMatrix::decode(&bytes),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn huge_declared_sizes_are_rejected_before_allocating() {
        let mut bytes = sample().encode();
        bytes[12..20].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(CountsMatrix::decode(&bytes).is_err());
        bytes = sample().encode();
        bytes.truncate(bytes.len() - 1);
        assert!(CountsMatrix::decode(&bytes).is_err());
    }

    #[test]
    fn newer_format_version_asks_for_an_upgrade() {
        let mut bytes = sample().encode();
        bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(
            CountsMatrix::decode(&bytes),
            Err(Error::NotSupported { .. })
        ));
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
