//! The portable roaring format (the RoaringFormatSpec, what
//! `RoaringBitmap::serialize_into` writes) as stored bytes: its constants and
//! one framing walk, shared by every reader of stored bitmaps (deletion
//! vectors, the FRI ledger's surviving rows, index postings).
//!
//! [`BitmapFrame::read`] checks the framing of one 32-bit bitmap — the
//! cookie, the container count, every announced section present, container
//! keys strictly ascending — without decoding container contents, so a
//! decoder that runs next never allocates for data that is not there, and a
//! caller can walk the containers in place. Callers turn [`FramingError`]
//! into their own error (a `Corrupt` naming the file, a ledger violation).

use std::fmt;

/// Cookie of a bitmap without run containers (followed by a u32 count).
pub const COOKIE_NO_RUN: u32 = 12_346;
/// Cookie of a bitmap with run containers (low 16 bits; the high 16 bits
/// hold the container count minus one).
pub const COOKIE_RUN: u32 = 12_347;
/// With run containers, offsets are stored only from this many containers.
pub const NO_OFFSET_THRESHOLD: usize = 4;
/// Containers in one 32-bit bitmap at most (one per 16-bit key).
pub const MAX_CONTAINERS: usize = 1 << 16;
/// Cardinality up to which a non-run container is an array.
pub const ARRAY_LIMIT: usize = 4_096;
/// Bytes of a bitmap container (65,536 bits).
pub const BITMAP_BYTES: usize = 8_192;

/// Bounds-checked little-endian reads over a byte slice.
#[derive(Debug, Clone)]
pub struct ByteCursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteCursor<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes; `None` (and nothing consumed) when fewer are left.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let taken = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(taken)
    }

    /// The next little-endian u16.
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    /// The next little-endian u32.
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next little-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Some(u64::from_le_bytes(word))
    }
}

/// What is wrong with a bitmap's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// The bytes end inside the named section.
    Truncated(&'static str),
    /// The first u32 is no roaring cookie.
    UnknownCookie(u32),
    /// More containers than 16-bit keys.
    TooManyContainers(usize),
    /// Container keys do not strictly ascend.
    KeysNotAscending,
    /// Bytes follow the bitmap where none may.
    TrailingBytes(usize),
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FramingError::Truncated(section) => write!(f, "truncated {section}"),
            FramingError::UnknownCookie(cookie) => write!(f, "unknown roaring cookie {cookie:#x}"),
            FramingError::TooManyContainers(n) => {
                write!(f, "too many containers ({n}; at most {MAX_CONTAINERS})")
            }
            FramingError::KeysNotAscending => f.write_str("container keys are not sorted"),
            FramingError::TrailingBytes(n) => write!(f, "{n} trailing bytes after the bitmap"),
        }
    }
}

impl std::error::Error for FramingError {}

/// The data of one container, in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerData<'a> {
    /// `cardinality` ascending little-endian u16 values.
    Array(&'a [u8]),
    /// 1,024 little-endian u64 words, least significant bit first.
    Bitmap(&'a [u8]),
    /// `(start, length - 1)` little-endian u16 pairs (the run count before
    /// them is not included).
    Run(&'a [u8]),
}

impl ContainerData<'_> {
    /// Stored bytes, a run container's count included.
    pub fn stored_len(&self) -> usize {
        match self {
            ContainerData::Array(b) | ContainerData::Bitmap(b) => b.len(),
            ContainerData::Run(b) => 2 + b.len(),
        }
    }
}

/// One container: its key, announced cardinality and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerFrame<'a> {
    /// The high 16 bits of its values.
    pub key: u16,
    /// The cardinality its description announces (1..=65,536).
    pub cardinality: usize,
    /// Its data.
    pub data: ContainerData<'a>,
}

impl ContainerFrame<'_> {
    /// Its smallest value, read from the data; `None` for an empty bitmap
    /// container or short data.
    pub fn min(&self) -> Option<u32> {
        let low = match self.data {
            ContainerData::Array(b) | ContainerData::Run(b) => u16_at(b, 0)?,
            ContainerData::Bitmap(b) => {
                let (word, w) = words(b).enumerate().find(|(_, w)| *w != 0)?;
                // word < 1,024 and a bit index < 64: below 65,536.
                (word * 64) as u16 + w.trailing_zeros() as u16
            }
        };
        Some((u32::from(self.key) << 16) | u32::from(low))
    }

    /// Its largest value, read from the data (a run reaching past the
    /// container saturates; its reader rejects it).
    pub fn max(&self) -> Option<u32> {
        let low = match self.data {
            ContainerData::Array(b) => u16_at(b, b.len().checked_sub(2)?)?,
            ContainerData::Run(b) => {
                let at = b.len().checked_sub(4)?;
                u16_at(b, at)?.saturating_add(u16_at(b, at + 2)?)
            }
            ContainerData::Bitmap(b) => {
                let (word, w) = words(b).enumerate().rev().find(|(_, w)| *w != 0)?;
                // As in `min`.
                (word * 64) as u16 + 63 - w.leading_zeros() as u16
            }
        };
        Some((u32::from(self.key) << 16) | u32::from(low))
    }
}

/// The little-endian u16 at byte `at`.
pub fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

/// The little-endian u64 words of a bitmap container.
pub fn words(bytes: &[u8]) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + '_ {
    bytes.chunks_exact(8).map(|c| {
        let mut word = [0u8; 8];
        word.copy_from_slice(c);
        u64::from_le_bytes(word)
    })
}

/// One 32-bit bitmap whose framing has been checked: every section present,
/// keys strictly ascending. Container contents (value order, whether the
/// announced cardinality is right) are for the reader of the data to check.
#[derive(Debug, Clone, Copy)]
pub struct BitmapFrame<'a> {
    containers: usize,
    /// 4 bytes per container: key, cardinality - 1.
    descriptions: &'a [u8],
    run_flags: Option<&'a [u8]>,
    /// The container data, in order, exactly.
    data: &'a [u8],
}

impl<'a> BitmapFrame<'a> {
    /// Reads one bitmap at `cursor`, leaving it just after the bitmap.
    ///
    /// # Errors
    /// [`FramingError`] naming what is wrong; the cursor is then somewhere
    /// inside the bitmap.
    pub fn read(cursor: &mut ByteCursor<'a>) -> Result<Self, FramingError> {
        let cookie = cursor.u32().ok_or(FramingError::Truncated("cookie"))?;
        let (containers, has_offsets, run_flags) = if cookie == COOKIE_NO_RUN {
            let n = cursor.u32().ok_or(FramingError::Truncated("size"))? as usize;
            (n, true, None)
        } else if cookie & 0xFFFF == COOKIE_RUN {
            let n = (cookie >> 16) as usize + 1;
            let flags = cursor
                .take(n.div_ceil(8))
                .ok_or(FramingError::Truncated("run flags"))?;
            (n, n >= NO_OFFSET_THRESHOLD, Some(flags))
        } else {
            return Err(FramingError::UnknownCookie(cookie));
        };
        if containers > MAX_CONTAINERS {
            return Err(FramingError::TooManyContainers(containers));
        }
        let descriptions = cursor
            .take(containers * 4)
            .ok_or(FramingError::Truncated("descriptions"))?;
        if has_offsets {
            cursor
                .take(containers * 4)
                .ok_or(FramingError::Truncated("offsets"))?;
        }
        let start = cursor.position();
        let mut frame = BitmapFrame {
            containers,
            descriptions,
            run_flags,
            data: &[],
        };
        let mut previous: Option<u16> = None;
        for i in 0..containers {
            let (key, cardinality, is_run) = frame.description(i);
            if previous.is_some_and(|p| p >= key) {
                return Err(FramingError::KeysNotAscending);
            }
            previous = Some(key);
            let len = if is_run {
                let runs = cursor.u16().ok_or(FramingError::Truncated("container"))?;
                4 * usize::from(runs)
            } else if cardinality <= ARRAY_LIMIT {
                2 * cardinality
            } else {
                BITMAP_BYTES
            };
            cursor
                .take(len)
                .ok_or(FramingError::Truncated("container"))?;
        }
        frame.data = &cursor.bytes[start..cursor.position()];
        Ok(frame)
    }

    /// Reads `bytes` as exactly one bitmap.
    ///
    /// # Errors
    /// As [`BitmapFrame::read`], and [`FramingError::TrailingBytes`].
    pub fn read_exact(bytes: &'a [u8]) -> Result<Self, FramingError> {
        let mut cursor = ByteCursor::new(bytes);
        let frame = Self::read(&mut cursor)?;
        match cursor.remaining() {
            0 => Ok(frame),
            n => Err(FramingError::TrailingBytes(n)),
        }
    }

    /// Number of containers.
    pub fn len(&self) -> usize {
        self.containers
    }

    /// True without containers (an empty bitmap).
    pub fn is_empty(&self) -> bool {
        self.containers == 0
    }

    /// Sum of the announced container cardinalities.
    pub fn cardinality(&self) -> u64 {
        (0..self.containers)
            .map(|i| self.description(i).1 as u64)
            .sum()
    }

    /// The largest container key, `None` when empty.
    pub fn max_key(&self) -> Option<u16> {
        self.containers
            .checked_sub(1)
            .map(|last| self.description(last).0)
    }

    /// The containers in key order.
    pub fn containers(&self) -> impl Iterator<Item = ContainerFrame<'a>> + '_ {
        let mut data = self.data;
        (0..self.containers).map(move |i| {
            let (key, cardinality, is_run) = self.description(i);
            // `read` checked that every container's data is present, in this
            // order and with these lengths, and that nothing else is there.
            let (store, rest) = if is_run {
                let runs = usize::from(u16_at(data, 0).unwrap_or(0));
                let (body, rest) = data.split_at((2 + 4 * runs).min(data.len()));
                (ContainerData::Run(body.get(2..).unwrap_or_default()), rest)
            } else if cardinality <= ARRAY_LIMIT {
                let (body, rest) = data.split_at((2 * cardinality).min(data.len()));
                (ContainerData::Array(body), rest)
            } else {
                let (body, rest) = data.split_at(BITMAP_BYTES.min(data.len()));
                (ContainerData::Bitmap(body), rest)
            };
            data = rest;
            ContainerFrame {
                key,
                cardinality,
                data: store,
            }
        })
    }

    /// Key, cardinality and run flag of container `i` (`i < containers`).
    fn description(&self, i: usize) -> (u16, usize, bool) {
        // `descriptions` holds exactly 4 bytes per container.
        let d = &self.descriptions[i * 4..i * 4 + 4];
        let key = u16::from_le_bytes([d[0], d[1]]);
        let cardinality = usize::from(u16::from_le_bytes([d[2], d[3]])) + 1;
        // `run_flags` holds ceil(containers / 8) bytes.
        let is_run = self
            .run_flags
            .is_some_and(|flags| flags[i / 8] & (1 << (i % 8)) != 0);
        (key, cardinality, is_run)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use roaring::RoaringBitmap;

    use super::*;

    fn serialized(bitmap: &RoaringBitmap) -> Vec<u8> {
        let mut bytes = Vec::new();
        bitmap.serialize_into(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn frames_every_container_kind_in_place() {
        // Even values only (no runs): an array and a bitmap (5,000 > 4,096).
        let mut bitmap: RoaringBitmap = (0..10).map(|v| v * 2).collect();
        bitmap.extend((0..5_000).map(|v| (1 << 16) + v * 2));
        // Contiguous: a run after optimize.
        bitmap.extend((2 << 16) + 100..(2 << 16) + 60_000);
        bitmap.optimize();
        let bytes = serialized(&bitmap);
        let frame = BitmapFrame::read_exact(&bytes).unwrap();
        assert_eq!(frame.len(), 3);
        assert_eq!(frame.cardinality(), bitmap.len());
        assert_eq!(frame.max_key(), Some(2));
        let containers: Vec<_> = frame.containers().collect();
        assert!(matches!(containers[0].data, ContainerData::Array(_)));
        assert!(matches!(containers[1].data, ContainerData::Bitmap(_)));
        assert!(matches!(containers[2].data, ContainerData::Run(_)));
        let bounds: Vec<(Option<u32>, Option<u32>)> =
            containers.iter().map(|c| (c.min(), c.max())).collect();
        assert_eq!(
            bounds,
            vec![
                (Some(0), Some(18)),
                (Some(1 << 16), Some((1 << 16) + 9_998)),
                (Some((2 << 16) + 100), Some((2 << 16) + 59_999)),
            ]
        );
        let stored: usize = containers.iter().map(|c| c.data.stored_len()).sum();
        assert!(stored < bytes.len());
    }

    #[test]
    fn names_what_is_wrong() {
        let bytes = serialized(&(0..100).collect());
        assert_eq!(
            BitmapFrame::read_exact(&bytes[..bytes.len() - 1]).unwrap_err(),
            FramingError::Truncated("container")
        );
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(
            BitmapFrame::read_exact(&trailing).unwrap_err(),
            FramingError::TrailingBytes(1)
        );
        assert_eq!(
            BitmapFrame::read_exact(&[1, 2, 3, 4]).unwrap_err(),
            FramingError::UnknownCookie(0x0403_0201)
        );
        let mut huge = COOKIE_NO_RUN.to_le_bytes().to_vec();
        huge.extend(70_000u32.to_le_bytes());
        assert_eq!(
            BitmapFrame::read_exact(&huge).unwrap_err(),
            FramingError::TooManyContainers(70_000)
        );
        // Two containers, keys 5 then 5.
        let mut unsorted = COOKIE_NO_RUN.to_le_bytes().to_vec();
        unsorted.extend(2u32.to_le_bytes());
        unsorted.extend([5, 0, 0, 0, 5, 0, 0, 0]);
        unsorted.extend([0; 8]);
        unsorted.extend([1, 0, 2, 0]);
        assert_eq!(
            BitmapFrame::read_exact(&unsorted).unwrap_err(),
            FramingError::KeysNotAscending
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(frame) = BitmapFrame::read_exact(&bytes) {
                for container in frame.containers() {
                    let _ = (container.min(), container.max());
                }
            }
        }

        #[test]
        fn real_bitmaps_frame_with_their_cardinality(
            values in proptest::collection::btree_set(0u32..400_000, 0..3_000),
            optimize in any::<bool>(),
        ) {
            let mut bitmap: RoaringBitmap = values.iter().copied().collect();
            if optimize {
                bitmap.optimize();
            }
            let bytes = serialized(&bitmap);
            let frame = BitmapFrame::read_exact(&bytes).unwrap();
            prop_assert_eq!(frame.cardinality(), bitmap.len());
            prop_assert_eq!(frame.containers().next().and_then(|c| c.min()), bitmap.min());
            prop_assert_eq!(frame.containers().last().and_then(|c| c.max()), bitmap.max());
        }
    }
}
