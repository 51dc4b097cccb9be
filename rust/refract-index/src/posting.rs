//! Serialized posting lists (sets of row addresses).
//!
//! A posting is a `RoaringTreemap`, stored as a sequence of
//! `(high u32 LE, byte length u32 LE, portable 32-bit roaring bitmap)` parts
//! with strictly increasing `high` keys. Each part is decoded through the core's
//! framing-checked decoder, so hostile bytes are rejected before roaring
//! allocates anything.
//!
//! Remapping postings (shared by the bitmap and ngram types):
//! * [`translate_encoded`] walks one stored posting, shifting parts that move
//!   by one constant in bulk and translating the others in ascending slices of
//!   at most [`MAX_TRANSLATION_BATCH`] addresses, and assembles the survivors
//!   without per-element treemap inserts ([`TreemapAssembler`]);
//! * [`TranslationMemo`] is for types whose postings share rows (ngram: a row
//!   sits in one posting per trigram): parts that move by one constant are
//!   shifted in bulk; in the others each stored address is translated once,
//!   in ascending batches of at most [`MAX_TRANSLATION_BATCH`], and its result
//!   kept in a dense per-fragment table (8 bytes per stored row, indexed by
//!   offset; no hash map), so later postings only look results up.

use roaring::{RoaringBitmap, RoaringTreemap};

use refract_core::{AddressSink, DeletionVector, Error, Result, Translator, MAX_TRANSLATION_BATCH};

/// Every 32-bit offset is a valid member of a part.
const PART_DOMAIN: u64 = 1 << 32;

/// Encodes `posting`.
pub fn encode(posting: &RoaringTreemap) -> Vec<u8> {
    let mut out = Vec::with_capacity(posting.serialized_size());
    for (high, bitmap) in posting.bitmaps() {
        if bitmap.is_empty() {
            continue;
        }
        let mut part = Vec::with_capacity(bitmap.serialized_size());
        // Serializing into a Vec cannot fail.
        let _ = bitmap.serialize_into(&mut part);
        out.extend_from_slice(&high.to_le_bytes());
        // A 32-bit bitmap serializes to far less than 4 GiB (at most 2^16 8 KiB containers + headers).
        out.extend_from_slice(&(part.len() as u32).to_le_bytes());
        out.extend_from_slice(&part);
    }
    out
}

/// Decodes a posting written by [`encode`]; `what` names it in errors.
pub fn decode(bytes: &[u8], what: &str) -> Result<RoaringTreemap> {
    let mut parts: Vec<(u32, RoaringBitmap)> = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (high, body, next) = split_part(rest, parts.last().map(|(h, _)| *h), what)?;
        parts.push((high, decode_part(body, high, what)?));
        rest = next;
    }
    Ok(RoaringTreemap::from_bitmaps(parts))
}

/// Splits the next `(high, part bytes, rest)` off an encoded posting, checking
/// that `high` follows `previous`.
fn split_part<'a>(
    bytes: &'a [u8],
    previous: Option<u32>,
    what: &str,
) -> Result<(u32, &'a [u8], &'a [u8])> {
    let (high, len, tail) = header(bytes, what)?;
    if previous.is_some_and(|prev| prev >= high) {
        return Err(Error::corrupt(
            what,
            "posting parts are not strictly increasing",
        ));
    }
    if tail.len() < len {
        return Err(Error::corrupt(
            what,
            format!("posting part needs {len} bytes, {} remain", tail.len()),
        ));
    }
    let (body, next) = tail.split_at(len);
    Ok((high, body, next))
}

/// Decodes one part through the core's framing-checked decoder.
fn decode_part(body: &[u8], high: u32, what: &str) -> Result<RoaringBitmap> {
    Ok(DeletionVector::from_bytes(body, PART_DOMAIN)
        .map_err(|e| Error::corrupt(what, format!("posting part {high}: {e}")))?
        .into_bitmap())
}

fn header<'a>(bytes: &'a [u8], what: &str) -> Result<(u32, usize, &'a [u8])> {
    if bytes.len() < 8 {
        return Err(Error::corrupt(what, "truncated posting part header"));
    }
    let (head, tail) = bytes.split_at(8);
    let high = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    Ok((high, len, tail))
}

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
    /// translator moved by one constant ([`Translator::shift_of_range`]).
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
    /// promise of [`Translator::shift_of_range`]: InvalidInput.
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
    fn push_shifted_raw(&mut self, part: &RawPart<'_>, base: u64, what: &str) -> Result<()> {
        let Some((min, max)) = part.bounds else {
            return Ok(());
        };
        let shift = self.seek_shifted(min, max, base)?;
        let target = &mut self.parts[self.current];
        let spare = &mut self.spare;
        let corrupt = |detail: &str| Error::corrupt(what, format!("posting part: {detail}"));
        for container in part.iter() {
            let container = container.ok_or_else(|| corrupt("truncated container"))?;
            let high = u32::from(container.key) << 16;
            match container.store {
                RawStore::Array(bytes) => {
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
                RawStore::Bitmap(bytes) => {
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
                RawStore::Run(bytes) => {
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

/// Roaring's portable-format cookies and sizes (the format
/// `RoaringBitmap::serialize_into` writes).
mod format {
    pub const COOKIE_NO_RUN: u32 = 12_346;
    pub const COOKIE_RUN: u32 = 12_347;
    pub const NO_OFFSET_THRESHOLD: usize = 4;
    pub const ARRAY_LIMIT: usize = 4_096;
    pub const BITMAP_BYTES: usize = 8_192;
    pub const MAX_CONTAINERS: usize = 1 << 16;
}

/// The data of one serialized container.
#[derive(Debug, Clone, Copy)]
enum RawStore<'a> {
    /// `cardinality` ascending little-endian u16 values.
    Array(&'a [u8]),
    /// 1,024 little-endian u64 words, LSB first.
    Bitmap(&'a [u8]),
    /// `(start, length - 1)` little-endian u16 pairs.
    Run(&'a [u8]),
}

/// One serialized container: its key, announced cardinality and data.
#[derive(Debug, Clone, Copy)]
struct RawContainer<'a> {
    key: u16,
    cardinality: usize,
    store: RawStore<'a>,
}

/// A serialized 32-bit roaring bitmap (one posting part) whose framing has
/// been checked — every announced section is present, nothing trails, keys
/// ascend — read in place, without building a `RoaringBitmap`. The contents
/// (value order, cardinalities) are checked while they are read
/// ([`TreemapAssembler::push_shifted_raw`]), as strictly as roaring's own
/// decoder does.
#[derive(Debug)]
struct RawPart<'a> {
    containers: usize,
    /// 4 bytes per container: key and cardinality - 1.
    descriptions: &'a [u8],
    run_flags: Option<&'a [u8]>,
    /// The container data, in order.
    data: &'a [u8],
    /// Smallest and largest offset, `None` when empty.
    bounds: Option<(u32, u32)>,
}

impl<'a> RawPart<'a> {
    fn parse(bytes: &'a [u8], what: &str) -> Result<Self> {
        let corrupt = |detail: &str| Error::corrupt(what, format!("posting part: {detail}"));
        let mut cur = ByteCursor { bytes, pos: 0 };
        let cookie = cur.u32().ok_or_else(|| corrupt("truncated cookie"))?;
        let (containers, has_offsets, run_flags) = if cookie == format::COOKIE_NO_RUN {
            let n = cur.u32().ok_or_else(|| corrupt("truncated size"))? as usize;
            (n, true, None)
        } else if cookie & 0xFFFF == format::COOKIE_RUN {
            let n = (cookie >> 16) as usize + 1;
            let flags = cur
                .take(n.div_ceil(8))
                .ok_or_else(|| corrupt("truncated run flags"))?;
            (n, n >= format::NO_OFFSET_THRESHOLD, Some(flags))
        } else {
            return Err(corrupt("unknown roaring cookie"));
        };
        if containers > format::MAX_CONTAINERS {
            return Err(corrupt("too many containers"));
        }
        let descriptions = cur
            .take(containers * 4)
            .ok_or_else(|| corrupt("truncated descriptions"))?;
        if has_offsets {
            cur.take(containers * 4)
                .ok_or_else(|| corrupt("truncated offsets"))?;
        }
        let mut part = RawPart {
            containers,
            descriptions,
            run_flags,
            data: &bytes[cur.pos..],
            bounds: None,
        };
        let (mut first, mut last) = (None, None);
        let mut previous: Option<u16> = None;
        for container in part.iter() {
            let container = container.ok_or_else(|| corrupt("truncated container"))?;
            if previous.is_some_and(|p| p >= container.key) {
                return Err(corrupt("container keys are not sorted"));
            }
            previous = Some(container.key);
            first.get_or_insert(container);
            last = Some(container);
            cur.pos += container.store.len();
        }
        if cur.pos != bytes.len() {
            return Err(corrupt("trailing bytes"));
        }
        if let (Some(first), Some(last)) = (first, last) {
            let min = first.min().ok_or_else(|| corrupt("empty container"))?;
            let max = last.max().ok_or_else(|| corrupt("empty container"))?;
            part.bounds = Some((min, max));
        }
        Ok(part)
    }

    /// The containers in order; `None` marks truncated data.
    fn iter(&self) -> impl Iterator<Item = Option<RawContainer<'a>>> + '_ {
        let mut data = self.data;
        (0..self.containers).map(move |i| {
            // `descriptions` holds exactly 4 bytes per container.
            let d = &self.descriptions[i * 4..i * 4 + 4];
            let key = u16::from_le_bytes([d[0], d[1]]);
            let cardinality = usize::from(u16::from_le_bytes([d[2], d[3]])) + 1;
            // `run_flags` holds ceil(containers / 8) bytes.
            let is_run = self
                .run_flags
                .is_some_and(|flags| flags[i / 8] & (1 << (i % 8)) != 0);
            let len = if is_run {
                let runs = data.get(..2)?;
                2 + 4 * usize::from(u16::from_le_bytes([runs[0], runs[1]]))
            } else if cardinality <= format::ARRAY_LIMIT {
                2 * cardinality
            } else {
                format::BITMAP_BYTES
            };
            let (body, rest) = data.split_at_checked(len)?;
            data = rest;
            let store = if is_run {
                RawStore::Run(&body[2..])
            } else if cardinality <= format::ARRAY_LIMIT {
                RawStore::Array(body)
            } else {
                RawStore::Bitmap(body)
            };
            Some(RawContainer {
                key,
                cardinality,
                store,
            })
        })
    }
}

impl RawStore<'_> {
    /// Serialized bytes, run count included.
    fn len(&self) -> usize {
        match self {
            RawStore::Array(b) | RawStore::Bitmap(b) => b.len(),
            RawStore::Run(b) => 2 + b.len(),
        }
    }
}

impl RawContainer<'_> {
    fn min(&self) -> Option<u32> {
        let low = match self.store {
            RawStore::Array(b) | RawStore::Run(b) => u16_at(b, 0)?,
            RawStore::Bitmap(b) => {
                let (word, w) = words(b).enumerate().find(|(_, w)| *w != 0)?;
                // word < 1,024 and a bit index < 64: below 65,536.
                (word * 64) as u16 + w.trailing_zeros() as u16
            }
        };
        Some((u32::from(self.key) << 16) | u32::from(low))
    }

    fn max(&self) -> Option<u32> {
        let low = match self.store {
            RawStore::Array(b) => u16_at(b, b.len().checked_sub(2)?)?,
            RawStore::Run(b) => {
                let at = b.len().checked_sub(4)?;
                // A run ending past the container is caught when it is read.
                u16_at(b, at)?.saturating_add(u16_at(b, at + 2)?)
            }
            RawStore::Bitmap(b) => {
                let (word, w) = words(b).enumerate().rev().find(|(_, w)| *w != 0)?;
                // As in `min`.
                (word * 64) as u16 + 63 - w.leading_zeros() as u16
            }
        };
        Some((u32::from(self.key) << 16) | u32::from(low))
    }
}

/// The little-endian u16 at byte `at`.
fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at + 2)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

/// The little-endian u64 words of a bitmap container.
fn words(bytes: &[u8]) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + '_ {
    bytes.chunks_exact(8).map(|c| {
        let mut word = [0u8; 8];
        word.copy_from_slice(c);
        u64::from_le_bytes(word)
    })
}

/// Bounds-checked little-endian reads.
struct ByteCursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteCursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let taken = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(taken)
    }

    fn u32(&mut self) -> Option<u32> {
        let b = self.take(4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Reusable buffers of [`translate_encoded`].
#[derive(Debug, Default)]
pub struct TranslateScratch {
    slice: Vec<u64>,
    out: Vec<Option<u64>>,
    assembler: TreemapAssembler,
}

impl TranslateScratch {
    /// Forgets whatever a translation that failed midway left behind.
    fn reset(&mut self) {
        self.slice.clear();
        if !self.assembler.parts.is_empty() {
            let _ = self.assembler.finish();
        }
    }
}

/// Translates an encoded posting (see [`encode`]) through `translator`,
/// reading it in place; rows that are gone are dropped. A fragment's part
/// whose whole offset range moves by one constant
/// ([`Translator::shift_of_range`]) is shifted straight from its serialized
/// containers, without building a `RoaringBitmap`; other parts are decoded
/// and go through [`Translator::translate_part`] when the translator streams
/// (an in-memory remap), else in ascending slices of at most
/// [`MAX_TRANSLATION_BATCH`]. Either way a dense posting never expands beyond
/// one slice. Damaged bytes are Corrupt errors naming `what`, as with
/// [`decode`].
pub fn translate_encoded(
    bytes: &[u8],
    what: &str,
    translator: &dyn Translator,
    scratch: &mut TranslateScratch,
) -> Result<RoaringTreemap> {
    scratch.reset();
    let mut previous: Option<u32> = None;
    let mut rest = bytes;
    while !rest.is_empty() {
        let (high, body, next) = split_part(rest, previous, what)?;
        previous = Some(high);
        rest = next;
        let raw = RawPart::parse(body, what)?;
        let Some((min, max)) = raw.bounds else {
            continue;
        };
        if let Some(base) = translator.shift_of_range(high, min, max)? {
            scratch.assembler.push_shifted_raw(&raw, base, what)?;
        } else {
            let part = decode_part(body, high, what)?;
            translate_part(high, &part, translator, scratch)?;
        }
    }
    flush_slice(translator, scratch)?;
    Ok(scratch.assembler.finish())
}

/// Translates one part whose offsets do not move by one constant: streamed
/// when the translator can ([`Translator::translate_part`]), else buffered
/// into ascending slices of at most [`MAX_TRANSLATION_BATCH`].
fn translate_part(
    high: u32,
    part: &RoaringBitmap,
    translator: &dyn Translator,
    scratch: &mut TranslateScratch,
) -> Result<()> {
    let assembler = &mut scratch.assembler;
    if translator.translate_part(high, part, assembler)? {
        return Ok(());
    }
    for low in part {
        scratch.slice.push((u64::from(high) << 32) | u64::from(low));
        if scratch.slice.len() == MAX_TRANSLATION_BATCH {
            flush_slice(translator, scratch)?;
        }
    }
    Ok(())
}

/// Translates the buffered slice and assembles its survivors.
fn flush_slice(translator: &dyn Translator, scratch: &mut TranslateScratch) -> Result<()> {
    if scratch.slice.is_empty() {
        return Ok(());
    }
    translate_checked(translator, &scratch.slice, &mut scratch.out)?;
    for new in scratch.out.iter().flatten() {
        scratch.assembler.push(*new);
    }
    scratch.slice.clear();
    Ok(())
}

/// Calls `translator` and checks it answered every address.
fn translate_checked(
    translator: &dyn Translator,
    batch: &[u64],
    out: &mut Vec<Option<u64>>,
) -> Result<()> {
    out.clear();
    translator.translate(batch, out)?;
    if out.len() != batch.len() {
        return Err(Error::invalid_input(format!(
            "translator returned {} results for {} addresses",
            out.len(),
            batch.len()
        )));
    }
    Ok(())
}

/// Memo entry of an address not translated yet.
const UNSET: u64 = u64::MAX;
/// Memo entry of a row that is gone.
const GONE: u64 = u64::MAX - 1;

/// The translated part of one source fragment (high key).
#[derive(Debug)]
struct MemoTable {
    high: u32,
    /// Result per offset: a new address, [`GONE`] or [`UNSET`].
    results: Vec<u64>,
}

/// Postings of at least this many addresses are streamed on two threads when
/// the translator answers from memory; below it a thread costs more than the
/// half posting it would translate.
pub const PARALLEL_MIN_ADDRESSES: u64 = 1 << 16;

/// Translates each stored address once for postings that share rows (see the
/// module docs). Memory: 8 bytes per offset up to the largest stored offset of
/// each fragment, plus one translation batch.
#[derive(Debug, Default)]
pub struct TranslationMemo {
    /// Tables by high key, ascending.
    tables: Vec<MemoTable>,
    /// Addresses waiting for translation (ascending, at most one batch).
    pending: Vec<u64>,
    out: Vec<Option<u64>>,
    assembler: TreemapAssembler,
    /// The second thread's assembler of a posting streamed on two threads.
    second: TreemapAssembler,
    /// Addresses translated so far.
    translated: u64,
}

impl TranslationMemo {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    /// Translates `posting`: a part whose offsets all move by one constant
    /// ([`Translator::shift_of_range`]) is shifted in bulk and needs no memo;
    /// a translator not [worth memoizing](Translator::worth_memoizing) streams
    /// the other parts ([`Translator::translate_part`]) and no table is held
    /// (unless it has no streaming path for some part: then the memo serves
    /// the whole posting); otherwise addresses seen before are looked up and new ones are
    /// translated in ascending batches of at most [`MAX_TRANSLATION_BATCH`].
    /// One pass over the posting: known results go to the output at once,
    /// new addresses after their batch is translated. A posting of at least
    /// [`PARALLEL_MIN_ADDRESSES`] streamed through a translator not worth
    /// memoizing is split in two halves of about equal addresses, translated
    /// on two threads and united.
    pub fn remap(
        &mut self,
        posting: &RoaringTreemap,
        translator: &dyn Translator,
    ) -> Result<RoaringTreemap> {
        if !translator.worth_memoizing() {
            if let Some(remapped) = self.stream(posting, translator)? {
                return Ok(remapped);
            }
        }
        // Parts and tables both ascend by high key: a forward cursor.
        let mut table = 0;
        for (high, part) in posting.bitmaps() {
            let (Some(min), Some(max)) = (part.min(), part.max()) else {
                continue;
            };
            if let Some(base) = translator.shift_of_range(high, min, max)? {
                // The whole part moves by one constant: no lookups, no table.
                self.assembler.push_shifted(part, base)?;
                continue;
            }
            table = self.table_at(table, high, max);
            let mut lows = part.iter();
            loop {
                let results = &self.tables[table].results;
                let mut full = false;
                for low in lows.by_ref() {
                    // `table_at` sized `results` past the part's maximum.
                    match results[low as usize] {
                        GONE => {}
                        UNSET => {
                            self.pending.push((u64::from(high) << 32) | u64::from(low));
                            if self.pending.len() == MAX_TRANSLATION_BATCH {
                                full = true;
                                break;
                            }
                        }
                        new => self.assembler.push(new),
                    }
                }
                if !full {
                    break;
                }
                self.flush(translator)?;
            }
        }
        self.flush(translator)?;
        Ok(self.assembler.finish())
    }

    /// Streams `posting` through `translator` with no memo: on two threads
    /// (halves of about equal addresses, united after) when it holds at
    /// least [`PARALLEL_MIN_ADDRESSES`] in several parts, else on this one.
    /// `None`, with nothing kept, when the translator has no streaming path
    /// for some part: the caller then takes the memo path.
    fn stream(
        &mut self,
        posting: &RoaringTreemap,
        translator: &dyn Translator,
    ) -> Result<Option<RoaringTreemap>> {
        // Only a large posting is split (its parts listed); a small one, or
        // one of a single part, streams on this thread.
        let parts: Vec<(u32, &RoaringBitmap)> = if posting.len() < PARALLEL_MIN_ADDRESSES {
            Vec::new()
        } else {
            posting.bitmaps().collect()
        };
        if parts.len() < 2 {
            let streamed = stream_parts(posting.bitmaps(), translator, &mut self.assembler);
            let remapped = self.assembler.finish();
            return Ok(streamed?.then_some(remapped));
        }
        let half = posting.len() / 2;
        let mut seen = 0;
        let split = parts
            .iter()
            .position(|(_, part)| {
                seen += part.len();
                seen >= half
            })
            .map_or(parts.len(), |i| i + 1)
            // The other thread always gets at least the last part.
            .min(parts.len() - 1);
        let (head, tail) = parts.split_at(split);
        let (first, second) = (&mut self.assembler, &mut self.second);
        let (head_streamed, tail_streamed) = std::thread::scope(|threads| {
            let tail = threads.spawn(|| stream_parts(tail.iter().copied(), translator, second));
            (
                stream_parts(head.iter().copied(), translator, first),
                tail.join(),
            )
        });
        let tail_streamed = tail_streamed
            .map_err(|_| Error::invalid_input("a posting translation thread panicked"))?;
        let (mut head, tail) = (self.assembler.finish(), self.second.finish());
        if !(head_streamed? && tail_streamed?) {
            return Ok(None);
        }
        head |= tail;
        Ok(Some(head))
    }

    /// Stored addresses whose results are held (diagnostics and tests).
    pub fn translated(&self) -> u64 {
        self.translated
    }

    /// The table of `high` at or after `from`, created if missing, holding at
    /// least `max + 1` offsets.
    fn table_at(&mut self, from: usize, high: u32, max: u32) -> usize {
        let from = from.min(self.tables.len());
        let index = from + self.tables[from..].partition_point(|t| t.high < high);
        if self.tables.get(index).is_none_or(|t| t.high != high) {
            self.tables.insert(
                index,
                MemoTable {
                    high,
                    results: Vec::new(),
                },
            );
        }
        let needed = max as usize + 1;
        let results = &mut self.tables[index].results;
        if results.len() < needed {
            results.reserve_exact(needed - results.len());
            results.resize(needed, UNSET);
        }
        index
    }

    /// The existing table of `high` at or after `from`.
    fn find_from(&self, from: usize, high: u32) -> Result<usize> {
        let from = from.min(self.tables.len());
        let index = from + self.tables[from..].partition_point(|t| t.high < high);
        match self.tables.get(index) {
            Some(t) if t.high == high => Ok(index),
            _ => Err(lost()),
        }
    }

    /// Translates the pending addresses, records their results and adds the
    /// survivors to the output being assembled.
    fn flush(&mut self, translator: &dyn Translator) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        translate_checked(translator, &self.pending, &mut self.out)?;
        let mut table = 0;
        for (address, result) in self.pending.iter().zip(&self.out) {
            let high = (*address >> 32) as u32;
            if self.tables.get(table).is_none_or(|t| t.high != high) {
                table = self.find_from(table, high)?;
            }
            let entry = match *result {
                None => GONE,
                Some(new) if new >= GONE => {
                    return Err(Error::invalid_input(format!(
                        "translated row address {new:#x} is out of range"
                    )))
                }
                Some(new) => new,
            };
            // `table_at` sized the table past every pending offset.
            self.tables[table].results[(*address as u32) as usize] = entry;
            if entry != GONE {
                self.assembler.push(entry);
            }
        }
        self.translated += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }
}

/// Streams `parts` into `assembler`: shifted in bulk where a part moves by one
/// constant, else through [`Translator::translate_part`]. False when the
/// translator has no streaming path for a part (the assembler then holds a
/// partial result for the caller to discard).
fn stream_parts<'a>(
    parts: impl IntoIterator<Item = (u32, &'a RoaringBitmap)>,
    translator: &dyn Translator,
    assembler: &mut TreemapAssembler,
) -> Result<bool> {
    for (high, part) in parts {
        let (Some(min), Some(max)) = (part.min(), part.max()) else {
            continue;
        };
        if let Some(base) = translator.shift_of_range(high, min, max)? {
            assembler.push_shifted(part, base)?;
        } else if !translator.translate_part(high, part, assembler)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// An address the memo should hold is missing: a bug, reported, not a panic.
fn lost() -> Error {
    Error::invalid_input("translation memo lost an address (internal error)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use refract_core::{row_address, FragmentRows, RemapChain, RewriteGroupInput, RowAddrRemap};
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Wraps a translator, recording every batch it is given.
    struct Recording<T> {
        inner: T,
        batches: Mutex<Vec<Vec<u64>>>,
    }

    impl<T: Translator> Recording<T> {
        fn new(inner: T) -> Self {
            Self {
                inner,
                batches: Mutex::new(Vec::new()),
            }
        }

        fn batches(&self) -> Vec<Vec<u64>> {
            self.batches.lock().unwrap().clone()
        }
    }

    impl<T: Translator> Translator for Recording<T> {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            self.batches.lock().unwrap().push(batch.to_vec());
            self.inner.translate(batch, out)
        }
    }

    /// Applies `translator` to every address of `posting` one by one.
    fn brute_force(posting: &RoaringTreemap, translator: &dyn Translator) -> RoaringTreemap {
        let mut out = Vec::new();
        posting
            .iter()
            .filter_map(|a| {
                translator.translate(&[a], &mut out).unwrap();
                out[0]
            })
            .collect()
    }

    /// Fragments 1..=3 of `rows` rows each, compacted in read order into
    /// fragments 10 and 11; every row whose offset is a multiple of 7 is deleted.
    fn compaction(rows: u64) -> RowAddrRemap {
        compaction_where(rows as u32, |_, o| o.is_multiple_of(7))
    }

    /// A stable partition of fragments 10 and 11 (rows of `compaction(rows)`)
    /// into fragments 20..=23 by offset and fragment parity, as a direct map.
    fn partition_after(rows: u64) -> RowAddrRemap {
        let mut next = [0u32; 4];
        let mut map = HashMap::new();
        let live = 3 * rows - 3 * rows.div_ceil(7);
        for fragment in [10u32, 11] {
            let count = if fragment == 10 {
                live / 2
            } else {
                live - live / 2
            };
            for offset in 0..count as u32 {
                let label = (offset % 3 + fragment % 2) as usize;
                let old = row_address(fragment, offset);
                // Offsets that are multiples of 11 are deleted by the partition.
                let new = (offset % 11 != 0).then(|| {
                    next[label] += 1;
                    row_address(20 + label as u32, next[label] - 1)
                });
                map.insert(old, new);
            }
        }
        RowAddrRemap::direct(map)
    }

    #[test]
    fn assembler_matches_collect_for_any_order() {
        let addrs = [
            row_address(5, 9),
            row_address(2, 1),
            row_address(5, 3),
            7,
            7,
            3,
        ];
        let mut assembler = TreemapAssembler::new();
        for a in addrs {
            assembler.push(a);
        }
        assert_eq!(
            assembler.finish(),
            addrs.into_iter().collect::<RoaringTreemap>()
        );
        assert!(assembler.finish().is_empty(), "finish leaves it empty");
    }

    #[test]
    fn translation_is_exact_after_compaction_with_deletions() {
        let remap = compaction(50_000);
        // Every fifth row of the three fragments: 30,000 addresses.
        let posting: RoaringTreemap = (1..=3u32)
            .flat_map(|f| (0..50_000u32).step_by(5).map(move |o| row_address(f, o)))
            .collect();
        let recording = Recording::new(&remap);
        let mut scratch = TranslateScratch::default();
        let new = translate_encoded(&encode(&posting), "test", &recording, &mut scratch).unwrap();
        assert_eq!(new, brute_force(&posting, &remap));
        // Offsets that are multiples of 35 were deleted.
        assert_eq!(new.len(), 30_000 - 3 * 50_000u64.div_ceil(35));
        let first = new.min().unwrap();
        assert_eq!(first >> 32, 10, "survivors start in fragment 10");
        assert_eq!(recording.batches().len(), 1);
        // The remap itself streams each fragment's part: same postings, no batches.
        let chain = RemapChain::from(remap.clone());
        for streaming in [&remap as &dyn Translator, &chain] {
            let again =
                translate_encoded(&encode(&posting), "test", streaming, &mut scratch).unwrap();
            assert_eq!(again, new);
        }
    }

    #[test]
    fn translation_slices_cross_the_batch_boundary() {
        let posting: RoaringTreemap = (0..2 * MAX_TRANSLATION_BATCH as u64 + 3).collect();
        let recording = Recording::new(RowAddrRemap::empty());
        let mut scratch = TranslateScratch::default();
        let new = translate_encoded(&encode(&posting), "test", &recording, &mut scratch).unwrap();
        assert_eq!(new, posting);
        let sizes: Vec<usize> = recording.batches().iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![MAX_TRANSLATION_BATCH, MAX_TRANSLATION_BATCH, 3]);
        for batch in recording.batches() {
            assert!(batch.windows(2).all(|w| w[0] < w[1]), "ascending batches");
        }
    }

    #[test]
    fn memo_translates_each_address_once_across_postings() {
        let rows = 60_000u64;
        let compact = compaction(rows);
        let chain = RemapChain::from_remaps([compact, partition_after(rows)]);
        // Three overlapping postings over 180,000 rows: the first two need two
        // batches each, the last one none.
        let postings: Vec<RoaringTreemap> = [2u32, 1, 3]
            .iter()
            .map(|step| {
                (1..=3u32)
                    .flat_map(|f| (0..rows as u32).map(move |o| row_address(f, o)))
                    .filter(|a| ((a & 0xffff_ffff) as u32).is_multiple_of(*step))
                    .collect()
            })
            .collect();
        let recording = Recording::new(&chain);
        let mut memo = TranslationMemo::new();
        for posting in &postings {
            let new = memo.remap(posting, &recording).unwrap();
            assert_eq!(new, brute_force(posting, &chain));
        }
        let batches = recording.batches();
        let translated: Vec<u64> = batches.iter().flatten().copied().collect();
        assert_eq!(translated.len() as u64, 3 * rows, "each stored row once");
        assert_eq!(memo.translated(), 3 * rows);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![65_536, 24_464, 65_536, 24_464]);
        for batch in &batches {
            assert!(batch.windows(2).all(|w| w[0] < w[1]), "ascending batches");
        }
    }

    #[test]
    fn memo_shifts_whole_parts_and_memoizes_only_the_rest() {
        // Fragment 2 loses rows, so only its addresses need the memo;
        // fragments 1 and 3 move by one constant each.
        let rows = 50_000;
        let remap = compaction_where(rows, |f, o| f == 2 && o % 7 == 0);
        let postings = [
            mixed_posting(rows),
            (1..=3u32)
                .flat_map(|f| (0..rows).step_by(5).map(move |o| row_address(f, o)))
                .collect(),
        ];
        let mut memo = TranslationMemo::new();
        for posting in &postings {
            assert_eq!(
                memo.remap(posting, &remap).unwrap(),
                brute_force(posting, &remap)
            );
        }
        // Fragment 2's stored addresses of both postings, each translated once.
        let fragment_two: RoaringTreemap = postings
            .iter()
            .flat_map(|p| p.iter())
            .filter(|a| a >> 32 == 2)
            .collect();
        assert_eq!(memo.translated(), fragment_two.len());
    }

    #[test]
    fn a_translator_not_worth_memoizing_streams_parts_without_a_table() {
        let rows = 50_000;
        let remap = compaction_where(rows, |f, o| f == 2 && o % 7 == 0);
        let streaming = crate::types::test_support::InMemory::new(remap.clone());
        let posting = mixed_posting(rows);
        let mut memo = TranslationMemo::new();
        for _ in 0..2 {
            assert_eq!(
                memo.remap(&posting, &streaming).unwrap(),
                brute_force(&posting, &remap)
            );
        }
        assert_eq!(memo.translated(), 0, "nothing held");
        assert!(memo.tables.is_empty());
        assert!(streaming.parts() > 0, "fragment 2's parts were streamed");
    }

    #[test]
    fn a_large_posting_streams_on_two_threads_with_exact_results() {
        let rows = 200_000;
        let remap = compaction_where(rows, |f, o| f != 1 && o % 5 == 0);
        let posting = mixed_posting(rows);
        assert!(posting.len() >= PARALLEL_MIN_ADDRESSES);
        let streaming = crate::types::test_support::InMemory::new(remap.clone());
        let mut memo = TranslationMemo::new();
        let expected = brute_force(&posting, &remap);
        for _ in 0..2 {
            assert_eq!(memo.remap(&posting, &streaming).unwrap(), expected);
        }
        assert_eq!(memo.translated(), 0, "nothing held");
        // Fragment 1 moved whole (shifted); fragment 2 was streamed on this
        // thread and fragment 3 on the other.
        assert_eq!(streaming.parts(), 2 * 2);
        assert_eq!(streaming.threads(), 1 + 2, "this thread and one per remap");
    }

    #[test]
    fn a_large_posting_is_shared_even_when_its_last_part_holds_the_half() {
        let rows = 200_000;
        let remap = compaction_where(rows, |_, o| o % 5 == 0);
        // Fragment 1 is small, fragment 2 holds most addresses: the split
        // point falls after the last part, and the last part still goes to
        // the other thread.
        let posting: RoaringTreemap = (1..=2u32)
            .flat_map(|f| (0..rows).map(move |o| (f, o)))
            .filter(|(f, o)| if *f == 1 { o % 13 == 0 } else { o % 3 != 0 })
            .map(|(f, o)| row_address(f, o))
            .collect();
        assert!(posting.len() >= PARALLEL_MIN_ADDRESSES);
        let streaming = crate::types::test_support::InMemory::new(remap.clone());
        let remapped = TranslationMemo::new().remap(&posting, &streaming).unwrap();
        assert_eq!(remapped, brute_force(&posting, &remap));
        assert_eq!((streaming.parts(), streaming.threads()), (2, 2));
        // A posting of one part stays on this thread.
        let single: RoaringTreemap = (0..rows)
            .filter(|o| o % 3 != 0)
            .map(|o| row_address(2, o))
            .collect();
        let streaming = crate::types::test_support::InMemory::new(remap.clone());
        let remapped = TranslationMemo::new().remap(&single, &streaming).unwrap();
        assert_eq!(remapped, brute_force(&single, &remap));
        assert_eq!((streaming.parts(), streaming.threads()), (1, 1));
    }

    #[test]
    fn a_large_posting_without_a_streaming_path_falls_back_to_the_memo() {
        /// Not worth memoizing, but with no `translate_part`.
        struct NoParts(RowAddrRemap);
        impl Translator for NoParts {
            fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
                self.0.translate(batch, out)
            }
            fn worth_memoizing(&self) -> bool {
                false
            }
        }
        let rows = 200_000;
        let remap = compaction_where(rows, |_, o| o % 5 == 0);
        let posting = mixed_posting(rows);
        let mut memo = TranslationMemo::new();
        let remapped = memo.remap(&posting, &NoParts(remap.clone())).unwrap();
        assert_eq!(remapped, brute_force(&posting, &remap));
        assert_eq!(memo.translated(), posting.len(), "the memo served it");
        // The half results were discarded: the next posting starts clean.
        let small: RoaringTreemap = [row_address(1, 1)].into_iter().collect();
        assert_eq!(
            memo.remap(&small, &NoParts(remap.clone())).unwrap(),
            brute_force(&small, &remap)
        );
    }

    #[test]
    fn a_shift_that_crosses_a_fragment_is_rejected_on_every_path() {
        // Claims fragment 1 moves by a constant that carries its larger
        // offsets into the next fragment: a broken `shift_of_range` promise.
        struct Crossing;
        impl Translator for Crossing {
            fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
                out.clear();
                out.extend(batch.iter().map(|a| Some(*a)));
                Ok(())
            }
            fn shift_of_range(&self, _: u32, _: u32, _: u32) -> Result<Option<u64>> {
                Ok(Some(row_address(5, u32::MAX - 10)))
            }
        }
        let posting: RoaringTreemap = (0..100u32).map(|o| row_address(1, o)).collect();
        let err = TranslationMemo::new()
            .remap(&posting, &Crossing)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        let mut scratch = TranslateScratch::default();
        let err =
            translate_encoded(&encode(&posting), "test", &Crossing, &mut scratch).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        // The scratch is clean for the next posting.
        let fine = translate_encoded(
            &encode(&posting),
            "test",
            &RowAddrRemap::empty(),
            &mut scratch,
        )
        .unwrap();
        assert_eq!(fine, posting);
    }

    #[test]
    fn memo_rejects_a_translator_that_drops_results() {
        struct Short;
        impl Translator for Short {
            fn translate(&self, _: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
                out.clear();
                Ok(())
            }
        }
        let posting: RoaringTreemap = [1u64, 2].into_iter().collect();
        let err = TranslationMemo::new().remap(&posting, &Short).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        let mut scratch = TranslateScratch::default();
        let err = translate_encoded(&encode(&posting), "test", &Short, &mut scratch).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }

    #[test]
    fn memo_rejects_reserved_translated_addresses() {
        let map = HashMap::from([(5u64, Some(u64::MAX - 1))]);
        let posting: RoaringTreemap = [5u64].into_iter().collect();
        let err = TranslationMemo::new()
            .remap(&posting, &RowAddrRemap::direct(map))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }

    /// A remap compacting fragments 1..=3 of `rows` rows each, in order,
    /// into fragments 10 and 11; `deleted(fragment, offset)` picks deletions.
    fn compaction_where(rows: u32, deleted: impl Fn(u32, u32) -> bool) -> RowAddrRemap {
        let surviving: RoaringTreemap = (1..=3u32)
            .flat_map(|f| (0..rows).map(move |o| (f, o)))
            .filter(|(f, o)| !deleted(*f, *o))
            .map(|(f, o)| row_address(f, o))
            .collect();
        let live = surviving.len();
        RowAddrRemap::compact(vec![RewriteGroupInput {
            old_fragments: (1..=3).map(|f| FragmentRows::new(f, rows.into())).collect(),
            new_fragments: vec![
                FragmentRows::new(10, live / 2),
                FragmentRows::new(11, live - live / 2),
            ],
            surviving,
        }])
        .unwrap()
    }

    /// A posting over fragments 1..=3 with array, bitmap and run containers.
    fn mixed_posting(rows: u32) -> RoaringTreemap {
        let mut posting: RoaringTreemap = (1..=3u32)
            .flat_map(|f| (0..rows).map(move |o| (f, o)))
            .filter(|(f, o)| match f {
                1 => o % 13 == 0,
                2 => o % 3 != 0,
                _ => (o / 1_000) % 2 == 0,
            })
            .map(|(f, o)| row_address(f, o))
            .collect();
        let mut parts: Vec<(u32, RoaringBitmap)> =
            posting.bitmaps().map(|(h, b)| (h, b.clone())).collect();
        for (_, part) in &mut parts {
            part.optimize(); // fragment 3 becomes run containers
        }
        posting = RoaringTreemap::from_bitmaps(parts);
        posting
    }

    /// Forwards to a translator, counting the parts each path served.
    #[derive(Default)]
    struct Paths {
        shifted: std::sync::atomic::AtomicUsize,
        streamed: std::sync::atomic::AtomicUsize,
    }

    struct Counting<'a, T> {
        inner: T,
        paths: &'a Paths,
    }

    impl<T: Translator> Translator for Counting<'_, T> {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            self.inner.translate(batch, out)
        }

        fn translate_part(
            &self,
            fragment: u32,
            part: &RoaringBitmap,
            sink: &mut dyn AddressSink,
        ) -> Result<bool> {
            use std::sync::atomic::Ordering::Relaxed;
            self.paths.streamed.fetch_add(1, Relaxed);
            self.inner.translate_part(fragment, part, sink)
        }

        fn shift_of_range(&self, fragment: u32, min: u32, max: u32) -> Result<Option<u64>> {
            use std::sync::atomic::Ordering::Relaxed;
            let shift = self.inner.shift_of_range(fragment, min, max)?;
            if shift.is_some() {
                self.paths.shifted.fetch_add(1, Relaxed);
            }
            Ok(shift)
        }
    }

    /// `translate_encoded` of `posting` through `remap`, with the number of
    /// parts that took the shift path and the streaming path.
    fn translate_counting_paths(
        posting: &RoaringTreemap,
        remap: &RowAddrRemap,
    ) -> (RoaringTreemap, usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let paths = Paths::default();
        let counting = Counting {
            inner: remap,
            paths: &paths,
        };
        let mut scratch = TranslateScratch::default();
        let got = translate_encoded(&encode(posting), "test", &counting, &mut scratch).unwrap();
        (
            got,
            paths.shifted.load(Relaxed),
            paths.streamed.load(Relaxed),
        )
    }

    #[test]
    fn encoded_translation_shifts_whole_parts_exactly() {
        // No deletions: fragments 1 and 3 each land in one new fragment and
        // move by a constant; fragment 2 straddles fragments 10 and 11.
        let rows = 200_000;
        let remap = compaction_where(rows, |_, _| false);
        let posting = mixed_posting(rows);
        let want = brute_force(&posting, &remap);
        let (got, shifted, streamed) = translate_counting_paths(&posting, &remap);
        assert_eq!(got, want);
        assert_eq!(encode(&got), encode(&want), "same containers");
        assert_eq!(shifted, 2, "fragments 1 and 3");
        assert_eq!(streamed, 1, "fragment 2");
        let mut scratch = TranslateScratch::default();
        // An untouched fragment maps to itself through the shift as well.
        let other: RoaringTreemap = (0..5_000u32).map(|o| row_address(7, o * 3)).collect();
        let got = translate_encoded(&encode(&other), "test", &remap, &mut scratch).unwrap();
        assert_eq!(got, other);
        let empty = translate_encoded(&[], "test", &remap, &mut scratch).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn encoded_translation_with_deletions_is_exact() {
        // Fragment 2 loses rows (row by row), 1 and 3 do not (shifted).
        let rows = 100_000;
        let remap = compaction_where(rows, |f, o| f == 2 && o % 10 < 3);
        let posting = mixed_posting(rows);
        let (got, shifted, streamed) = translate_counting_paths(&posting, &remap);
        let want = brute_force(&posting, &remap);
        assert_eq!(got, want);
        assert_eq!(encode(&got), encode(&want), "same containers");
        assert_eq!(shifted, 2);
        assert_eq!(streamed, 1);
        let mut scratch = TranslateScratch::default();
        // Through ascending batches only, the same result.
        let batches = Recording::new(remap.clone());
        let again = translate_encoded(&encode(&posting), "test", &batches, &mut scratch).unwrap();
        assert_eq!(again, want);
        assert!(batches
            .batches()
            .iter()
            .all(|b| b.len() <= MAX_TRANSLATION_BATCH));
    }

    /// Replaces `at..at + with.len()` of the only part of `posting`'s encoding.
    fn tampered(posting: &RoaringTreemap, at: usize, with: &[u8]) -> Vec<u8> {
        let mut bytes = encode(posting);
        // 8 header bytes precede the part.
        bytes[8 + at..8 + at + with.len()].copy_from_slice(with);
        bytes
    }

    #[test]
    fn damaged_parts_on_the_shift_path_are_corrupt() {
        let remap = compaction_where(70_000, |_, _| false);
        let mut scratch = TranslateScratch::default();
        let mut check =
            |bytes: &[u8], case: &str| match translate_encoded(bytes, "test", &remap, &mut scratch)
            {
                Ok(posting) => panic!("{case}: accepted as {posting:?}"),
                Err(err) => assert!(matches!(err, Error::Corrupt { .. }), "{case}: {err}"),
            };
        // Array container [5, 9, 12]: cookie, size, key, card-1, offset, data.
        let array: RoaringTreemap = [5u32, 9, 12].iter().map(|o| row_address(1, *o)).collect();
        check(&tampered(&array, 16, &[12, 0]), "unsorted array");
        check(&tampered(&array, 0, &[1, 2]), "bad cookie");
        check(&tampered(&array, 4, &[2, 0]), "size beyond the data");
        // A bitmap container (5,000 offsets) announcing 5,001.
        let dense: RoaringTreemap = (0..5_000u32).map(|o| row_address(1, o * 2)).collect();
        check(&tampered(&dense, 10, &[0x88, 0x13]), "cardinality mismatch");
        // Two containers with the same key.
        let two: RoaringTreemap = [1u32, 65_537].iter().map(|o| row_address(1, *o)).collect();
        check(&tampered(&two, 12, &[0, 0]), "keys not ascending");
        // Run container [0..=99, 200..=299]: runs overlapping or touching.
        let mut runs = RoaringBitmap::new();
        runs.insert_range(0..100);
        runs.insert_range(200..300);
        runs.optimize();
        let runs = RoaringTreemap::from_bitmaps([(1, runs)]);
        // Run cookie, flags (1), key, card-1, run count, runs.
        check(&tampered(&runs, 15, &[50, 0]), "overlapping runs");
        check(&tampered(&runs, 15, &[100, 0]), "touching runs");
        check(&tampered(&runs, 13, &[50, 0]), "run cardinality mismatch");
        check(
            &tampered(&runs, 15, &[0xff, 0xff]),
            "run past the container",
        );
        check(&tampered(&runs, 9, &[0, 0]), "no runs");
        // Truncated anywhere, or with a trailing byte inside the part.
        for posting in [&array, &dense, &runs] {
            let bytes = encode(posting);
            for cut in 1..bytes.len() {
                check(&bytes[..cut], "truncated");
            }
            let mut longer = bytes.clone();
            let len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) + 1;
            longer[4..8].copy_from_slice(&len.to_le_bytes());
            longer.push(0);
            check(&longer, "trailing byte");
        }
        // The undamaged ones translate.
        for posting in [&array, &dense, &runs] {
            let got = translate_encoded(&encode(posting), "test", &remap, &mut scratch).unwrap();
            assert_eq!(got, brute_force(posting, &remap));
        }
    }

    #[test]
    fn assembler_builds_roaring_containers_at_every_density() {
        // Per container of fragment 4: 4,095, 4,096 (roaring's array limit)
        // and 4,097 offsets through the bitset, 1,023 and 1,024 around the
        // list limit, one offset, then a full container; then offsets of
        // earlier containers, duplicates and a descending tail.
        let counts = [4_095u32, 4_096, 4_097, 1_023, 1_024, 1, 65_536];
        let mut addrs = Vec::new();
        for (key, count) in counts.iter().enumerate() {
            let step = 65_536 / count;
            addrs.extend((0..*count).map(|i| row_address(4, (key as u32) << 16 | (i * step))));
        }
        addrs.extend([
            row_address(4, 3),
            row_address(4, 65_537),
            row_address(4, 65_537),
        ]);
        addrs.extend(
            (0..3_000u32)
                .rev()
                .map(|i| row_address(4, (8 << 16) | (i * 5))),
        );
        addrs.extend((0..2_000u32).map(|i| row_address(4, (8 << 16) | (i * 7))));
        let mut assembler = TreemapAssembler::new();
        for a in &addrs {
            assembler.push(*a);
        }
        let got = assembler.finish();
        let want: RoaringTreemap = addrs.iter().copied().collect();
        assert_eq!(got, want);
        assert_eq!(encode(&got), encode(&want), "same container kinds");
        assert_eq!(decode(&encode(&got), "test").unwrap(), want);
        // Reused: spare bitsets come back zeroed.
        assembler.push(row_address(4, 1));
        let one: RoaringTreemap = [row_address(4, 1)].into_iter().collect();
        assert_eq!(assembler.finish(), one);
    }

    proptest! {
        #[test]
        fn round_trips(addrs in proptest::collection::vec(any::<u64>(), 0..200)) {
            let posting: RoaringTreemap = addrs.into_iter().collect();
            let bytes = encode(&posting);
            prop_assert_eq!(decode(&bytes, "test").unwrap(), posting);
        }

        #[test]
        fn assembler_equals_collect(
            runs in proptest::collection::vec((0u64..3, 0u64..5_000, 1u64..3_000), 0..8),
        ) {
            // Ascending runs per part, interleaved and overlapping: every path
            // of the assembler (append, buffer drain, out-of-order insert).
            let addrs: Vec<u64> = runs
                .iter()
                .flat_map(|(high, start, len)| (*start..start + len).map(move |o| (high << 32) | o))
                .collect();
            let mut assembler = TreemapAssembler::new();
            for a in &addrs {
                assembler.push(*a);
            }
            prop_assert_eq!(assembler.finish(), addrs.iter().copied().collect::<RoaringTreemap>());
        }

        #[test]
        fn memo_equals_elementwise_translation(
            postings in proptest::collection::vec(
                proptest::collection::btree_set((0u64..4, 0u64..3_000), 0..300), 1..6),
            modulus in 2u64..7,
        ) {
            // A reordering, colliding, deleting map over fragments 0..4.
            let map: HashMap<u64, Option<u64>> = (0..4u64)
                .flat_map(|f| (0..3_000u64).map(move |o| (f << 32) | o))
                .map(|a| (a, (!a.is_multiple_of(modulus)).then_some((9 << 32) | (10_000 - (a & 0xffff) / 2))))
                .collect();
            let remap = RowAddrRemap::direct(map);
            let mut memo = TranslationMemo::new();
            for set in postings {
                let posting: RoaringTreemap = set.iter().map(|(f, o)| (f << 32) | o).collect();
                let new = memo.remap(&posting, &remap).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(new, brute_force(&posting, &remap));
            }
        }

        #[test]
        fn runs_assemble_like_single_pushes(
            runs in proptest::collection::vec(
                (0u32..4, 0u32..200_000, 1u32..5_000, 1u32..30, any::<bool>()), 0..12),
        ) {
            // Ascending runs of destinations interleaved as a partition hands
            // them over, some as runs and some address by address.
            let mut assembler = TreemapAssembler::new();
            let mut want = RoaringTreemap::new();
            for (fragment, start, len, step, as_run) in &runs {
                let lows: Vec<u32> = (0..*len).map(|i| start + i * step).collect();
                want.extend(lows.iter().map(|low| row_address(*fragment, *low)));
                if *as_run {
                    AddressSink::push_run(&mut assembler, *fragment, &lows);
                } else {
                    lows.iter().for_each(|low| AddressSink::push(&mut assembler, row_address(*fragment, *low)));
                }
            }
            let got = assembler.finish();
            prop_assert_eq!(encode(&got), encode(&want));
        }

        #[test]
        fn assembler_equals_collect_across_containers(
            runs in proptest::collection::vec(
                (0u64..3, 0u64..300_000, 1u64..9_000, 1u64..40), 0..10),
        ) {
            // Strided runs of several containers, dense and sparse, in any order.
            let addrs: Vec<u64> = runs
                .iter()
                .flat_map(|(high, start, len, step)| {
                    (0..*len).map(move |i| (high << 32) | (start + i * step))
                })
                .collect();
            let mut assembler = TreemapAssembler::new();
            for a in &addrs {
                assembler.push(*a);
            }
            let got = assembler.finish();
            let want: RoaringTreemap = addrs.iter().copied().collect();
            prop_assert_eq!(encode(&got), encode(&want));
            prop_assert_eq!(got, want);
        }

        #[test]
        fn encoded_translation_equals_brute_force(
            offsets in proptest::collection::vec((1u32..4, 0u32..140_000, 1u32..6_000, 1u32..9), 1..8),
            deleting in proptest::collection::vec(any::<bool>(), 3),
            modulus in 2u32..50,
            optimize in any::<bool>(),
        ) {
            let posting: RoaringTreemap = offsets
                .iter()
                .flat_map(|(f, start, len, step)| {
                    (0..*len).map(move |i| row_address(*f, (start + i * step).min(139_999)))
                })
                .collect();
            let posting = if optimize {
                RoaringTreemap::from_bitmaps(posting.bitmaps().map(|(h, b)| {
                    let mut b = b.clone();
                    b.optimize();
                    (h, b)
                }))
            } else {
                posting
            };
            let remap = compaction_where(140_000, |f, o| {
                deleting[(f - 1) as usize] && o % modulus == 0
            });
            let mut scratch = TranslateScratch::default();
            let got = translate_encoded(&encode(&posting), "test", &remap, &mut scratch)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got, brute_force(&posting, &remap));
        }

        #[test]
        fn encoded_garbage_is_an_error_not_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..96),
        ) {
            let remap = compaction_where(1_000, |_, _| false);
            let mut scratch = TranslateScratch::default();
            let _ = translate_encoded(&bytes, "test", &remap, &mut scratch);
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes, "test");
        }
    }

    #[test]
    fn truncation_inside_a_part_is_corrupt() {
        let posting: RoaringTreemap = [5u64 << 32, (5 << 32) + 9].into_iter().collect();
        let bytes = encode(&posting);
        for cut in 1..bytes.len() {
            let err = decode(&bytes[..cut], "test").unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "cut {cut}: {err}");
        }
    }

    #[test]
    fn parts_out_of_order_are_corrupt() {
        let high: RoaringTreemap = [7u64 << 32].into_iter().collect();
        let low: RoaringTreemap = [1u64].into_iter().collect();
        let mut bytes = encode(&high);
        bytes.extend(encode(&low));
        assert!(matches!(decode(&bytes, "test"), Err(Error::Corrupt { .. })));
    }
}
