//! Building a treemap from pushed addresses, one roaring container at a time.

use roaring::{RoaringBitmap, RoaringTreemap};

use refract_core::{AddressSink, Error, Result};

use refract_core::roaring_format::{words, ContainerData};

use super::raw::RawPart;

/// Offsets of one container (a 65,536-offset block of a part) kept as an
/// ascending list before the container switches to a bitset. A bitset costs a
/// fixed ~1 µs to turn into a roaring container, so it pays off only once a
/// container holds many offsets; sparse containers stay lists.
const DENSE_AFTER: usize = 1_024;
/// Bytes of one container's bitset (65,536 bits).
const CONTAINER_BYTES: usize = 1 << 13;
/// Spare bitsets an assembler keeps for reuse across postings.
const SPARE_BITSETS: usize = 16;
/// Roaring's array/bitmap container threshold. `from_lsb0_bytes` stores a
/// container of exactly this many offsets as a bitmap, which roaring's own
/// invariant (and serialization) reserves for larger ones, so such a
/// container is appended offset by offset instead.
const ARRAY_LIMIT: u32 = 4_096;

/// One container's bitset, LSB-first bytes.
type Bitset = Box<[u8; CONTAINER_BYTES]>;

/// Builds a treemap from addresses pushed in any order, fast when they come in
/// ascending order per container of each 32-bit high key (what
/// order-preserving rewrites such as compaction and stable partition produce
/// from an ascending posting). Each part buffers its current container: as an
/// ascending offset list while sparse, as a bitset once dense (any order
/// within the container is then fine), and hands it to roaring in one piece
/// when a later container starts — no per-element search or insert. Offsets
/// of an earlier container are inserted directly. Memory: per part one list of
/// at most `DENSE_AFTER` (1,024) offsets and at most one 8 KiB bitset.
#[derive(Debug, Default)]
pub struct TreemapAssembler {
    /// Parts by high key, ascending.
    parts: Vec<AssemblerPart>,
    /// Index into `parts` of the last high key pushed.
    current: usize,
    /// Direct-mapped `(high, index into parts)` by the low bits of `high`, so
    /// interleaved destinations (a stable partition) skip the binary search.
    recent: Vec<(u32, usize)>,
    /// Zeroed bitsets of finished parts, for reuse.
    spare: Vec<Bitset>,
}

/// Entries of [`TreemapAssembler::recent`] (a power of two).
const RECENT_SLOTS: usize = 64;

/// Container key meaning "no current container" (keys are at most `u16::MAX`).
const NO_KEY: u32 = u32::MAX;

#[derive(Debug)]
struct AssemblerPart {
    high: u32,
    /// Finished containers; every key is below `key`.
    bitmap: RoaringBitmap,
    /// Key (`offset >> 16`) of the container being buffered, or [`NO_KEY`].
    key: u32,
    /// Its ascending low 16 bits while the container is sparse.
    lows: Vec<u16>,
    /// Its bitset once dense (`None` while sparse); zeroed when idle.
    dense: Option<Bitset>,
}

impl AssemblerPart {
    fn new(high: u32) -> Self {
        Self {
            high,
            bitmap: RoaringBitmap::new(),
            key: NO_KEY,
            lows: Vec::new(),
            dense: None,
        }
    }

    #[inline]
    fn push(&mut self, low: u32, spare: &mut Vec<Bitset>) {
        let key = low >> 16;
        if key != self.key {
            self.switch(low, spare);
            return;
        }
        // Truncation keeps the container-relative offset.
        let index = low as u16;
        if let Some(bits) = self.dense.as_mut() {
            bits[usize::from(index >> 3)] |= 1 << (index & 7);
            return;
        }
        match self.lows.last() {
            Some(last) if index <= *last => {
                if index != *last {
                    self.densify(spare);
                    self.push(low, spare);
                }
            }
            _ => {
                self.lows.push(index);
                if self.lows.len() == DENSE_AFTER {
                    self.densify(spare);
                }
            }
        }
    }

    /// `low` is outside the current container: starts a later one, or inserts
    /// into an earlier (finished) one.
    #[cold]
    fn switch(&mut self, low: u32, spare: &mut Vec<Bitset>) {
        let key = low >> 16;
        if self.key != NO_KEY && key < self.key {
            self.bitmap.insert(low);
            return;
        }
        self.flush(spare);
        self.key = key;
        // Truncation keeps the container-relative offset.
        self.lows.push(low as u16);
    }

    /// Moves the sparse list into a bitset.
    fn densify(&mut self, spare: &mut Vec<Bitset>) {
        let mut bits = spare
            .pop()
            .unwrap_or_else(|| Box::new([0u8; CONTAINER_BYTES]));
        for index in self.lows.drain(..) {
            bits[usize::from(index >> 3)] |= 1 << (index & 7);
        }
        self.dense = Some(bits);
    }

    /// Hands the current container to `bitmap`; no container is current after.
    fn flush(&mut self, spare: &mut Vec<Bitset>) {
        if self.key == NO_KEY {
            return;
        }
        let base = self.key << 16;
        if let Some(mut bits) = self.dense.take() {
            let count: u32 = bits.iter().map(|b| b.count_ones()).sum();
            if count == ARRAY_LIMIT {
                let offsets = set_bits(&bits).map(|index| base | u32::from(index));
                append_ascending(&mut self.bitmap, offsets);
            } else if count > 0 {
                let container = RoaringBitmap::from_lsb0_bytes(base, &bits[..]);
                if self.bitmap.is_empty() {
                    self.bitmap = container;
                } else {
                    self.bitmap |= container;
                }
            }
            bits.fill(0);
            spare.push(bits);
        } else {
            let offsets = self.lows.iter().map(|index| base | u32::from(*index));
            append_ascending(&mut self.bitmap, offsets);
            self.lows.clear();
        }
        self.key = NO_KEY;
    }

    /// The finished bitmap; its bitset (zeroed) goes back to `spare`.
    fn finish(mut self, spare: &mut Vec<Bitset>) -> (u32, RoaringBitmap) {
        self.flush(spare);
        (self.high, self.bitmap)
    }
}

/// Offsets of the set bits of a container bitset, ascending.
fn set_bits(bits: &[u8; CONTAINER_BYTES]) -> impl Iterator<Item = u16> + Clone + '_ {
    bits.iter().enumerate().flat_map(|(byte, b)| {
        // byte < 8,192, so byte * 8 + bit < 65,536.
        (0..8u16)
            .filter(move |bit| b & (1 << bit) != 0)
            .map(move |bit| byte as u16 * 8 + bit)
    })
}

/// Appends ascending `offsets`, all above `bitmap`'s maximum.
fn append_ascending(bitmap: &mut RoaringBitmap, offsets: impl Iterator<Item = u32> + Clone) {
    if let Err(err) = bitmap.append(offsets.clone()) {
        // Unreachable: the offsets ascend above the bitmap's maximum. Insert
        // the rest one by one rather than lose them.
        for offset in offsets.skip(err.valid_until() as usize) {
            bitmap.insert(offset);
        }
    }
}

impl TreemapAssembler {
    /// True when nothing was pushed since the last [`Self::finish`].
    pub(super) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `address`.
    #[inline]
    pub fn push(&mut self, address: u64) {
        let high = (address >> 32) as u32;
        // Truncation keeps the low 32 bits, the part-relative offset.
        let low = address as u32;
        if self.parts.get(self.current).is_none_or(|p| p.high != high) {
            self.seek(high);
        }
        // `seek` made `current` a valid index.
        self.parts[self.current].push(low, &mut self.spare);
    }

    /// Adds `fragment << 32 | low` for every `low` of `lows` (ascending: one
    /// part lookup for the run).
    pub fn push_run(&mut self, fragment: u32, lows: &[u32]) {
        self.seek(fragment);
        let target = &mut self.parts[self.current];
        for low in lows {
            target.push(*low, &mut self.spare);
        }
    }

    /// Adds `base + o` (wrapping) for every offset `o` of `part`: a run that a
    /// translator moved by one constant ([`TranslatorFastPaths::shift_of_range`](refract_core::TranslatorFastPaths::shift_of_range)).
    ///
    /// # Errors
    /// InvalidInput when `base` moves the offsets of `part` across a fragment
    /// boundary (a broken `shift_of_range` promise); nothing is added then.
    pub fn push_shifted(&mut self, part: &RoaringBitmap, base: u64) -> Result<()> {
        let (Some(min), Some(max)) = (part.min(), part.max()) else {
            return Ok(());
        };
        let shift = self.seek_shifted(min, max, base)?;
        let target = &mut self.parts[self.current];
        for offset in part {
            target.push(shift.wrapping_add(offset), &mut self.spare);
        }
        Ok(())
    }

    /// Makes the part that `base + min ..= base + max` lands in current and
    /// returns the low half of `base`, which moves every offset of the run
    /// within that part. A run that would cross into another part breaks the
    /// promise of [`TranslatorFastPaths::shift_of_range`](refract_core::TranslatorFastPaths::shift_of_range): InvalidInput.
    fn seek_shifted(&mut self, min: u32, max: u32, base: u64) -> Result<u32> {
        let first = base.wrapping_add(u64::from(min));
        let last = base.wrapping_add(u64::from(max));
        if first >> 32 != last >> 32 {
            return Err(Error::invalid_input(
                "a constant shift crossed a fragment boundary",
            ));
        }
        self.seek((first >> 32) as u32);
        // Truncation keeps the low half; no carry between `first` and `last`.
        Ok(base as u32)
    }

    /// [`Self::push_shifted`] for a serialized part read in place, checking
    /// its contents on the way (value order, cardinalities, run bounds).
    pub(super) fn push_shifted_raw(
        &mut self,
        part: &RawPart<'_>,
        base: u64,
        what: &str,
    ) -> Result<()> {
        let Some((min, max)) = part.bounds else {
            return Ok(());
        };
        let shift = self.seek_shifted(min, max, base)?;
        let target = &mut self.parts[self.current];
        let spare = &mut self.spare;
        let corrupt = |detail: &str| Error::corrupt(what, format!("posting part: {detail}"));
        for container in part.containers() {
            let high = u32::from(container.key) << 16;
            match container.data {
                ContainerData::Array(bytes) => {
                    let mut previous: Option<u16> = None;
                    for pair in bytes.chunks_exact(2) {
                        let low = u16::from_le_bytes([pair[0], pair[1]]);
                        if previous.is_some_and(|p| p >= low) {
                            return Err(corrupt("array values are not sorted"));
                        }
                        previous = Some(low);
                        target.push(shift.wrapping_add(high | u32::from(low)), spare);
                    }
                }
                ContainerData::Bitmap(bytes) => {
                    let mut count = 0usize;
                    for (i, mut word) in words(bytes).enumerate() {
                        count += word.count_ones() as usize;
                        // i < 1,024, so i * 64 + bit < 65,536.
                        let at = high | (i as u32 * 64);
                        while word != 0 {
                            let bit = word.trailing_zeros();
                            target.push(shift.wrapping_add(at | bit), spare);
                            word &= word - 1;
                        }
                    }
                    if count != container.cardinality {
                        return Err(corrupt("bitmap cardinality mismatch"));
                    }
                }
                ContainerData::Run(bytes) => {
                    if bytes.is_empty() {
                        return Err(corrupt("run container with no runs"));
                    }
                    let mut last_end: Option<u16> = None;
                    let mut count = 0usize;
                    for run in bytes.chunks_exact(4) {
                        let start = u16::from_le_bytes([run[0], run[1]]);
                        let length = u16::from_le_bytes([run[2], run[3]]);
                        let end = start
                            .checked_add(length)
                            .ok_or_else(|| corrupt("run past the container"))?;
                        if last_end.is_some_and(|e| start <= e.saturating_add(1)) {
                            return Err(corrupt("runs overlap or touch"));
                        }
                        last_end = Some(end);
                        count += usize::from(length) + 1;
                        for low in start..=end {
                            target.push(shift.wrapping_add(high | u32::from(low)), spare);
                        }
                    }
                    if count != container.cardinality {
                        return Err(corrupt("run cardinality mismatch"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes the part of `high` current, creating it if missing.
    fn seek(&mut self, high: u32) {
        if self.recent.is_empty() {
            self.recent = vec![(u32::MAX, usize::MAX); RECENT_SLOTS];
        }
        let slot = high as usize & (RECENT_SLOTS - 1);
        self.current = match self.recent[slot] {
            (key, index) if key == high && index < self.parts.len() => index,
            _ => self.locate(high, slot),
        };
    }

    /// Finds or inserts the part of `high` by binary search and caches it.
    #[cold]
    fn locate(&mut self, high: u32, slot: usize) -> usize {
        let index = match self.parts.binary_search_by_key(&high, |part| part.high) {
            Ok(index) => index,
            Err(index) => {
                self.parts.insert(index, AssemblerPart::new(high));
                // Indices at and after `index` moved.
                self.recent.fill((u32::MAX, usize::MAX));
                index
            }
        };
        self.recent[slot] = (high, index);
        index
    }

    /// The assembled treemap; the assembler is left empty for reuse.
    pub fn finish(&mut self) -> RoaringTreemap {
        self.current = 0;
        self.recent.fill((u32::MAX, usize::MAX));
        let spare = &mut self.spare;
        let parts: Vec<(u32, RoaringBitmap)> = self
            .parts
            .drain(..)
            .map(|part| part.finish(spare))
            .collect();
        spare.truncate(SPARE_BITSETS);
        RoaringTreemap::from_bitmaps(parts)
    }
}

impl AddressSink for TreemapAssembler {
    #[inline]
    fn push(&mut self, address: u64) {
        TreemapAssembler::push(self, address);
    }

    fn push_run(&mut self, fragment: u32, lows: &[u32]) {
        TreemapAssembler::push_run(self, fragment, lows);
    }
}
