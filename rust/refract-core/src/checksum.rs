//! Block checksums of stored files.
//!
//! Every file the engine writes is checksummed as it is written, in blocks:
//! a [`FileChecksum`] is the CRC-32C (Castagnoli, hardware-accelerated) of
//! each consecutive block of the file. A reader that fetches a byte range
//! widens it to whole blocks ([`FileChecksum::covering`]) and verifies the
//! blocks it fetched ([`FileChecksum::verify`]), so ranged reads of large
//! files are checked without reading the rest of the file.
//!
//! Blocks are [`BASE_BLOCK_BYTES`] doubled as often as needed to keep a file
//! at most [`MAX_BLOCKS`] blocks: small files verify at fine grain, and the
//! checksum of a huge file stays small enough for the manifest. A builder
//! checksums base blocks as bytes stream past and merges them (CRC
//! combination, no second pass) when the file's size is known.
//!
//! Invariant (checked by [`FileChecksum::new`] and
//! [`FileChecksum::check_size`]): `block_bytes` is a power of two at least
//! [`BASE_BLOCK_BYTES`], and a file of `size` bytes has exactly
//! `size.div_ceil(block_bytes)` block checksums (none for an empty file).

use std::ops::Range;
use std::sync::LazyLock;

use crc_fast::CrcAlgorithm;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The finest block: 64 KiB, so a ranged read of a small page reads little extra.
pub const BASE_BLOCK_BYTES: u64 = 64 * 1024;

/// The most blocks one file's checksum holds (4 KiB of checksums): files up
/// to 64 MiB verify in 64 KiB blocks.
pub const MAX_BLOCKS: usize = 1024;

const ALGORITHM: CrcAlgorithm = CrcAlgorithm::Crc32Iscsi;

/// CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    // CRC-32 values fit in 32 bits; crc-fast returns them widened to u64.
    crc_fast::checksum(ALGORITHM, bytes) as u32
}

/// The CRC-32C polynomial, bit-reflected (the register shifts right).
const POLYNOMIAL_REFLECTED: u32 = 0x82F6_3B78;

/// A 32 × 32 matrix over GF(2) acting on a CRC register, one column per bit.
type Operator = [u32; 32];

/// `ZERO_OPERATORS[j]` feeds 2^j zero bits through a CRC-32C register. Built
/// once: combining CRCs with them costs one matrix-vector product per set bit
/// of the length, where recomputing the operator (as `crc_fast`'s combine
/// does) costs dozens of matrix squarings per call — 70 ms to merge the
/// blocks of a 265 MB file.
static ZERO_OPERATORS: LazyLock<[Operator; 67]> = LazyLock::new(|| {
    let mut operators = [[0u32; 32]; 67];
    operators[0][0] = POLYNOMIAL_REFLECTED;
    for (bit, column) in operators[0].iter_mut().enumerate().skip(1) {
        *column = 1 << (bit - 1);
    }
    for j in 1..operators.len() {
        operators[j] = square(&operators[j - 1]);
    }
    operators
});

fn apply(operator: &Operator, mut register: u32) -> u32 {
    let mut result = 0;
    for column in operator {
        if register == 0 {
            break;
        }
        if register & 1 != 0 {
            result ^= column;
        }
        register >>= 1;
    }
    result
}

fn square(operator: &Operator) -> Operator {
    let mut squared = [0u32; 32];
    for (out, column) in squared.iter_mut().zip(operator) {
        *out = apply(operator, *column);
    }
    squared
}

/// The CRC-32C of `a ‖ b` from the CRC-32C of `a`, that of `b` and `b`'s
/// length in bytes.
fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    let mut register = crc_a;
    for byte_bit in 0..64 {
        if len_b >> byte_bit & 1 != 0 {
            // 2^byte_bit bytes are 2^(byte_bit + 3) bits.
            register = apply(&ZERO_OPERATORS[byte_bit + 3], register);
        }
    }
    register ^ crc_b
}

/// The block checksums of one file. Serializes as `{block_bytes, blocks}`;
/// deserializing validates like [`FileChecksum::new`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredChecksum", into = "StoredChecksum")]
pub struct FileChecksum {
    block_bytes: u64,
    blocks: Vec<u32>,
}

impl FileChecksum {
    /// A checksum from stored parts; InvalidInput unless `block_bytes` is a
    /// power of two at least [`BASE_BLOCK_BYTES`] and there are at most
    /// [`MAX_BLOCKS`] blocks.
    ///
    /// # Errors
    /// InvalidInput as above (callers decoding stored metadata map it to Corrupt).
    pub fn new(block_bytes: u64, blocks: Vec<u32>) -> Result<Self> {
        if block_bytes < BASE_BLOCK_BYTES || !block_bytes.is_power_of_two() {
            return Err(Error::invalid_input(format!(
                "checksum block size {block_bytes} is not a power of two of at least {BASE_BLOCK_BYTES} bytes"
            )));
        }
        if blocks.len() > MAX_BLOCKS {
            return Err(Error::invalid_input(format!(
                "{} checksum blocks, at most {MAX_BLOCKS} are allowed",
                blocks.len()
            )));
        }
        Ok(Self {
            block_bytes,
            blocks,
        })
    }

    /// The checksum of `bytes`, a whole file.
    pub fn of(bytes: &[u8]) -> Self {
        let mut builder = ChecksumBuilder::new();
        builder.update(bytes);
        builder.finish()
    }

    /// Bytes per block (the last block may be shorter).
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// The CRC-32C of each block, in file order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// The checksums as stored: little-endian u32 per block.
    pub fn blocks_le_bytes(&self) -> Vec<u8> {
        self.blocks
            .iter()
            .flat_map(|crc| crc.to_le_bytes())
            .collect()
    }

    /// Parses [`Self::blocks_le_bytes`].
    ///
    /// # Errors
    /// InvalidInput when the length is not a multiple of four or the parts
    /// are invalid (see [`Self::new`]).
    pub fn from_le_bytes(block_bytes: u64, bytes: &[u8]) -> Result<Self> {
        if !bytes.len().is_multiple_of(4) {
            return Err(Error::invalid_input(format!(
                "{} bytes of block checksums is not a whole number of 4-byte checksums",
                bytes.len()
            )));
        }
        let blocks = bytes
            .chunks_exact(4)
            .map(|chunk| u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
            .collect();
        Self::new(block_bytes, blocks)
    }

    /// Checks that the checksum describes a file of `size` bytes.
    ///
    /// # Errors
    /// Corrupt naming `file` when the block count does not match the size.
    pub fn check_size(&self, file: &str, size: u64) -> Result<()> {
        let expected = size.div_ceil(self.block_bytes);
        if self.blocks.len() as u64 != expected {
            return Err(Error::corrupt(
                file,
                format!(
                    "the checksum covers {} blocks of {} bytes but the file is {size} bytes",
                    self.blocks.len(),
                    self.block_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The whole blocks holding `range` of a file of `size` bytes (the
    /// range is clipped to the file).
    pub fn covering(&self, range: Range<u64>, size: u64) -> Range<u64> {
        let start = range.start.min(size) / self.block_bytes * self.block_bytes;
        let end = range
            .end
            .min(size)
            .div_ceil(self.block_bytes)
            .saturating_mul(self.block_bytes)
            .min(size);
        start..end.max(start)
    }

    /// Verifies `bytes`, the contents of a file of `size` bytes from the
    /// block-aligned offset `start` to a block boundary or the end of the file.
    ///
    /// # Errors
    /// Corrupt naming `file` and the first block whose bytes do not match;
    /// InvalidInput when `bytes` is not a whole run of blocks.
    pub fn verify(&self, file: &str, size: u64, start: u64, bytes: &[u8]) -> Result<()> {
        let end = start.saturating_add(bytes.len() as u64);
        if !start.is_multiple_of(self.block_bytes)
            || end > size
            || (!end.is_multiple_of(self.block_bytes) && end != size)
        {
            return Err(Error::invalid_input(format!(
                "bytes {start}..{end} of {file} are not whole checksum blocks of a {size}-byte file"
            )));
        }
        self.check_size(file, size)?;
        let first = start / self.block_bytes;
        let step = usize::try_from(self.block_bytes).unwrap_or(usize::MAX);
        for (index, block) in bytes.chunks(step).enumerate() {
            let number = first + index as u64;
            let expected = usize::try_from(number)
                .ok()
                .and_then(|number| self.blocks.get(number));
            if expected != Some(&crc32c(block)) {
                let from = number * self.block_bytes;
                return Err(Error::corrupt(
                    file,
                    format!(
                        "checksum mismatch in block {number} (bytes {from}..{})",
                        from + block.len() as u64
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Verifies a whole file (see [`Self::verify`]).
    ///
    /// # Errors
    /// Corrupt when the size or any block does not match.
    pub fn verify_whole(&self, file: &str, bytes: &[u8]) -> Result<()> {
        self.verify(file, bytes.len() as u64, 0, bytes)
    }
}

/// The serialized form of a [`FileChecksum`].
#[derive(Serialize, Deserialize)]
struct StoredChecksum {
    block_bytes: u64,
    blocks: Vec<u32>,
}

impl TryFrom<StoredChecksum> for FileChecksum {
    type Error = Error;

    fn try_from(stored: StoredChecksum) -> Result<Self> {
        FileChecksum::new(stored.block_bytes, stored.blocks)
    }
}

impl From<FileChecksum> for StoredChecksum {
    fn from(checksum: FileChecksum) -> Self {
        StoredChecksum {
            block_bytes: checksum.block_bytes,
            blocks: checksum.blocks,
        }
    }
}

/// Checksums a file as its bytes are written, in order.
#[derive(Debug, Clone)]
pub struct ChecksumBuilder {
    /// CRC state of the base block being filled.
    current: crc_fast::Digest,
    /// Bytes in the base block being filled.
    filled: u64,
    /// Finished base blocks.
    blocks: Vec<u32>,
}

impl Default for ChecksumBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChecksumBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self {
            current: crc_fast::Digest::new(ALGORITHM),
            filled: 0,
            blocks: Vec::new(),
        }
    }

    /// Bytes seen so far.
    pub fn len(&self) -> u64 {
        self.blocks.len() as u64 * BASE_BLOCK_BYTES + self.filled
    }

    /// True before any byte was seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the next bytes of the file.
    pub fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = usize::try_from(BASE_BLOCK_BYTES - self.filled).unwrap_or(usize::MAX);
            let (head, rest) = bytes.split_at(room.min(bytes.len()));
            self.current.update(head);
            self.filled += head.len() as u64;
            bytes = rest;
            if self.filled == BASE_BLOCK_BYTES {
                self.blocks.push(self.current.finalize_reset() as u32);
                self.filled = 0;
            }
        }
    }

    /// The checksum of everything seen, in blocks of the smallest size that
    /// keeps at most [`MAX_BLOCKS`] blocks.
    pub fn finish(mut self) -> FileChecksum {
        let mut lengths = vec![BASE_BLOCK_BYTES; self.blocks.len()];
        if self.filled > 0 {
            self.blocks.push(self.current.finalize() as u32);
            lengths.push(self.filled);
        }
        let mut block_bytes = BASE_BLOCK_BYTES;
        let mut blocks = self.blocks;
        while blocks.len() > MAX_BLOCKS {
            let mut merged = Vec::with_capacity(blocks.len().div_ceil(2));
            let mut merged_lengths = Vec::with_capacity(merged.capacity());
            for (pair, pair_lengths) in blocks.chunks(2).zip(lengths.chunks(2)) {
                match (pair, pair_lengths) {
                    ([a, b], [la, lb]) => {
                        merged.push(crc32c_combine(*a, *b, *lb));
                        merged_lengths.push(la + lb);
                    }
                    _ => {
                        merged.push(pair[0]);
                        merged_lengths.push(pair_lengths[0]);
                    }
                }
            }
            blocks = merged;
            lengths = merged_lengths;
            block_bytes *= 2;
        }
        FileChecksum {
            block_bytes,
            blocks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 5) as u8)
            .collect()
    }

    #[test]
    fn combining_crcs_equals_the_crc_of_the_concatenation() {
        let bytes = file(300_000);
        for split in [0, 1, 7, 4096, 65_536, 65_537, 131_072, 299_999, 300_000] {
            let (a, b) = bytes.split_at(split);
            let combined = crc32c_combine(crc32c(a), crc32c(b), b.len() as u64);
            assert_eq!(combined, crc32c(&bytes), "split at {split}");
        }
    }

    #[test]
    fn combining_agrees_with_crc_fast_for_any_length() {
        for (i, len) in [
            0u64,
            1,
            3,
            1 << 16,
            (1 << 16) + 5,
            1 << 30,
            u64::MAX / 3,
            u64::MAX,
        ]
        .into_iter()
        .enumerate()
        {
            let (a, b) = (
                0x1234_5678u32.wrapping_mul(i as u32 + 1),
                0x9abc_def0u32 ^ i as u32,
            );
            let expected = crc_fast::checksum_combine(ALGORITHM, a.into(), b.into(), len) as u32;
            assert_eq!(crc32c_combine(a, b, len), expected, "length {len}");
        }
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn small_files_use_base_blocks_and_an_empty_file_has_none() {
        let empty = FileChecksum::of(&[]);
        assert_eq!(empty.blocks(), &[] as &[u32]);
        empty.check_size("f", 0).unwrap();
        let bytes = file(150_000);
        let sum = FileChecksum::of(&bytes);
        assert_eq!(sum.block_bytes(), BASE_BLOCK_BYTES);
        assert_eq!(
            sum.blocks(),
            &[
                crc32c(&bytes[..65_536]),
                crc32c(&bytes[65_536..131_072]),
                crc32c(&bytes[131_072..])
            ]
        );
    }

    #[test]
    fn large_files_merge_blocks_to_at_most_the_limit() {
        // 1,201 base blocks: merged once, into 601 blocks of 128 KiB.
        let bytes = file(1_200 * 65_536 + 10);
        let sum = FileChecksum::of(&bytes);
        assert_eq!(sum.block_bytes(), 2 * BASE_BLOCK_BYTES);
        assert_eq!(sum.blocks().len(), 601);
        for (index, chunk) in bytes.chunks(2 * 65_536).enumerate() {
            assert_eq!(sum.blocks()[index], crc32c(chunk), "block {index}");
        }
        sum.verify_whole("f", &bytes).unwrap();
    }

    #[test]
    fn streaming_in_odd_pieces_equals_one_pass() {
        let bytes = file(1_000_003);
        let mut builder = ChecksumBuilder::new();
        for piece in bytes.chunks(7_919) {
            builder.update(piece);
        }
        assert_eq!(builder.len(), bytes.len() as u64);
        assert_eq!(builder.finish(), FileChecksum::of(&bytes));
    }

    #[test]
    fn covering_widens_to_blocks_and_clips_to_the_file() {
        let sum = FileChecksum::of(&file(200_000));
        assert_eq!(sum.covering(70_000..70_010, 200_000), 65_536..131_072);
        assert_eq!(sum.covering(190_000..250_000, 200_000), 131_072..200_000);
        assert_eq!(sum.covering(0..0, 200_000), 0..0);
    }

    #[test]
    fn every_flipped_bit_is_found_and_named_by_block() {
        let bytes = file(140_000);
        let sum = FileChecksum::of(&bytes);
        for position in (0..bytes.len()).step_by(997) {
            let mut damaged = bytes.clone();
            damaged[position] ^= 1 << (position % 8);
            let err = sum.verify_whole("data/x.lance", &damaged).unwrap_err();
            let block = position / 65_536;
            assert!(
                matches!(&err, Error::Corrupt { what, message }
                    if what == "data/x.lance" && message.contains(&format!("block {block} "))),
                "{err}"
            );
        }
    }

    #[test]
    fn ranged_verification_checks_only_the_blocks_read() {
        let bytes = file(200_000);
        let sum = FileChecksum::of(&bytes);
        let mut damaged = bytes.clone();
        damaged[10] ^= 4;
        let range = sum.covering(70_000..140_000, 200_000);
        let start = usize::try_from(range.start).unwrap();
        let end = usize::try_from(range.end).unwrap();
        sum.verify("f", 200_000, range.start, &damaged[start..end])
            .unwrap();
        assert!(matches!(
            sum.verify("f", 200_000, 0, &damaged[..65_536]),
            Err(Error::Corrupt { .. })
        ));
        // Not block-aligned: a caller bug, not damage.
        assert!(matches!(
            sum.verify("f", 200_000, 10, &bytes[10..65_536]),
            Err(Error::InvalidInput { .. })
        ));
    }

    #[test]
    fn a_truncated_or_extended_file_is_corrupt() {
        let bytes = file(100_000);
        let sum = FileChecksum::of(&bytes);
        assert!(matches!(
            sum.verify_whole("f", &bytes[..60_000]),
            Err(Error::Corrupt { .. })
        ));
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 40_000]);
        assert!(matches!(
            sum.verify_whole("f", &longer),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn stored_parts_are_validated() {
        assert!(FileChecksum::new(1000, vec![]).is_err());
        assert!(FileChecksum::new(BASE_BLOCK_BYTES / 2, vec![]).is_err());
        assert!(FileChecksum::new(BASE_BLOCK_BYTES, vec![0; MAX_BLOCKS + 1]).is_err());
        assert!(FileChecksum::from_le_bytes(BASE_BLOCK_BYTES, &[1, 2, 3]).is_err());
        let sum = FileChecksum::of(&file(70_000));
        assert_eq!(
            FileChecksum::from_le_bytes(sum.block_bytes(), &sum.blocks_le_bytes()).unwrap(),
            sum
        );
    }
}
