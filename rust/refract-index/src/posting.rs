//! Serialized posting lists (sets of row addresses).
//!
//! A posting is a `RoaringTreemap`, stored as a sequence of
//! `(high u32 LE, byte length u32 LE, portable 32-bit roaring bitmap)` parts
//! with strictly increasing `high` keys. Each part is decoded through the core's
//! framing-checked decoder, so hostile bytes are rejected before roaring
//! allocates anything.
//!
//! Remapping postings (shared by the bitmap and ngram types):
//! * [`translate_posting`] walks one posting in ascending slices of at most
//!   [`MAX_TRANSLATION_BATCH`] addresses and assembles the survivors without
//!   per-element treemap inserts ([`TreemapAssembler`]);
//! * [`TranslationMemo`] is for types whose postings share rows (ngram: a row
//!   sits in one posting per trigram): each stored address is translated once,
//!   in ascending batches of at most [`MAX_TRANSLATION_BATCH`], and its result
//!   kept in a dense per-fragment table (8 bytes per stored row, indexed by
//!   offset; no hash map), so later postings only look results up.

use roaring::{RoaringBitmap, RoaringTreemap};

use refract_core::{DeletionVector, Error, Result, Translator, MAX_TRANSLATION_BATCH};

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
        let (high, len, tail) = header(rest, what)?;
        if parts.last().is_some_and(|(prev, _)| *prev >= high) {
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
        let bitmap = DeletionVector::from_bytes(body, PART_DOMAIN)
            .map_err(|e| Error::corrupt(what, format!("posting part {high}: {e}")))?
            .bitmap()
            .clone();
        parts.push((high, bitmap));
        rest = next;
    }
    Ok(RoaringTreemap::from_bitmaps(parts))
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

/// Offsets buffered per part of a [`TreemapAssembler`] before a bulk append.
const PART_BUFFER: usize = 1_024;

/// Builds a treemap from addresses pushed in any order, fast when they come in
/// ascending order per 32-bit high key (what order-preserving rewrites such as
/// compaction and stable partition produce from an ascending posting): such
/// offsets are buffered per part and bulk-appended ([`RoaringBitmap::append`]),
/// with no per-element search or insert. Memory: one small buffer per part.
#[derive(Debug, Default)]
pub struct TreemapAssembler {
    /// Parts by high key, ascending.
    parts: Vec<AssemblerPart>,
    /// Index into `parts` of the last high key pushed.
    current: usize,
    /// Direct-mapped `(high, index into parts)` by the low bits of `high`, so
    /// interleaved destinations (a stable partition) skip the binary search.
    recent: Vec<(u32, usize)>,
}

/// Entries of [`TreemapAssembler::recent`] (a power of two).
const RECENT_SLOTS: usize = 64;

#[derive(Debug)]
struct AssemblerPart {
    high: u32,
    bitmap: RoaringBitmap,
    /// Ascending offsets above every offset in `bitmap`, not appended yet.
    pending: Vec<u32>,
    /// The largest offset pushed so far.
    last: Option<u32>,
}

impl AssemblerPart {
    fn new(high: u32) -> Self {
        Self {
            high,
            bitmap: RoaringBitmap::new(),
            pending: Vec::new(),
            last: None,
        }
    }

    #[inline]
    fn push(&mut self, low: u32) {
        match self.last {
            Some(last) if low <= last => {
                self.drain();
                self.bitmap.insert(low);
            }
            _ => {
                self.pending.push(low);
                self.last = Some(low);
                if self.pending.len() == PART_BUFFER {
                    self.drain();
                }
            }
        }
    }

    /// Appends the pending offsets to the bitmap.
    fn drain(&mut self) {
        if let Err(err) = self.bitmap.append(self.pending.iter().copied()) {
            // Unreachable: pending offsets ascend above the bitmap's maximum.
            // Insert the rest one by one rather than lose them.
            for low in &self.pending[err.valid_until() as usize..] {
                self.bitmap.insert(*low);
            }
        }
        self.pending.clear();
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
        match self.parts.get_mut(self.current) {
            Some(part) if part.high == high => part.push(low),
            _ => self.seek(high).push(low),
        }
    }

    /// The part of `high`, created if missing; makes it current.
    fn seek(&mut self, high: u32) -> &mut AssemblerPart {
        if self.recent.is_empty() {
            self.recent = vec![(u32::MAX, usize::MAX); RECENT_SLOTS];
        }
        let slot = high as usize & (RECENT_SLOTS - 1);
        let index = match self.recent[slot] {
            (key, index) if key == high && index < self.parts.len() => index,
            _ => self.locate(high, slot),
        };
        self.current = index;
        &mut self.parts[index]
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
        RoaringTreemap::from_bitmaps(self.parts.drain(..).map(|mut part| {
            part.drain();
            (part.high, part.bitmap)
        }))
    }
}

/// Reusable buffers of [`translate_posting`].
#[derive(Debug, Default)]
pub struct TranslateScratch {
    slice: Vec<u64>,
    out: Vec<Option<u64>>,
    assembler: TreemapAssembler,
}

/// Translates `posting` through `translator`; rows that are gone are dropped.
/// Each fragment's part goes through [`Translator::translate_part`] when the
/// translator streams (an in-memory remap); otherwise addresses are translated
/// in ascending slices of at most [`MAX_TRANSLATION_BATCH`]. Either way a dense
/// posting never expands beyond one slice.
pub fn translate_posting(
    posting: &RoaringTreemap,
    translator: &dyn Translator,
    scratch: &mut TranslateScratch,
) -> Result<RoaringTreemap> {
    scratch.slice.clear();
    for (high, part) in posting.bitmaps() {
        let assembler = &mut scratch.assembler;
        if translator.translate_part(high, part, &mut |new| assembler.push(new))? {
            continue;
        }
        for low in part {
            scratch.slice.push((u64::from(high) << 32) | u64::from(low));
            if scratch.slice.len() == MAX_TRANSLATION_BATCH {
                flush_slice(translator, scratch)?;
            }
        }
    }
    flush_slice(translator, scratch)?;
    Ok(scratch.assembler.finish())
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
    /// Addresses translated so far.
    translated: u64,
}

impl TranslationMemo {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    /// Translates `posting`: addresses seen before are looked up, new ones are
    /// translated in ascending batches of at most [`MAX_TRANSLATION_BATCH`].
    /// One pass over the posting: known results go to the output at once,
    /// new addresses after their batch is translated.
    pub fn remap(
        &mut self,
        posting: &RoaringTreemap,
        translator: &dyn Translator,
    ) -> Result<RoaringTreemap> {
        // Parts and tables both ascend by high key: a forward cursor.
        let mut table = 0;
        for (high, part) in posting.bitmaps() {
            let Some(max) = part.max() else { continue };
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
        let old: Vec<FragmentRows> = (1..=3).map(|id| FragmentRows::new(id, rows)).collect();
        let surviving: RoaringTreemap = (1..=3u32)
            .flat_map(|f| (0..rows as u32).map(move |o| row_address(f, o)))
            .filter(|a| (a & 0xffff_ffff) % 7 != 0)
            .collect();
        let live = surviving.len();
        RowAddrRemap::compact(vec![RewriteGroupInput {
            old_fragments: old,
            new_fragments: vec![
                FragmentRows::new(10, live / 2),
                FragmentRows::new(11, live - live / 2),
            ],
            surviving,
        }])
        .unwrap()
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
    fn translate_posting_is_exact_after_compaction_with_deletions() {
        let remap = compaction(50_000);
        // Every fifth row of the three fragments: 30,000 addresses.
        let posting: RoaringTreemap = (1..=3u32)
            .flat_map(|f| (0..50_000u32).step_by(5).map(move |o| row_address(f, o)))
            .collect();
        let recording = Recording::new(&remap);
        let mut scratch = TranslateScratch::default();
        let new = translate_posting(&posting, &recording, &mut scratch).unwrap();
        assert_eq!(new, brute_force(&posting, &remap));
        // Offsets that are multiples of 35 were deleted.
        assert_eq!(new.len(), 30_000 - 3 * 50_000u64.div_ceil(35));
        let first = new.min().unwrap();
        assert_eq!(first >> 32, 10, "survivors start in fragment 10");
        assert_eq!(recording.batches().len(), 1);
        // The remap itself streams each fragment's part: same postings, no batches.
        let chain = RemapChain::from(remap.clone());
        for streaming in [&remap as &dyn Translator, &chain] {
            let again = translate_posting(&posting, streaming, &mut scratch).unwrap();
            assert_eq!(again, new);
        }
    }

    #[test]
    fn translate_posting_slices_cross_the_batch_boundary() {
        let posting: RoaringTreemap = (0..2 * MAX_TRANSLATION_BATCH as u64 + 3).collect();
        let recording = Recording::new(RowAddrRemap::empty());
        let mut scratch = TranslateScratch::default();
        let new = translate_posting(&posting, &recording, &mut scratch).unwrap();
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
        let err = translate_posting(&posting, &Short, &mut scratch).unwrap_err();
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
