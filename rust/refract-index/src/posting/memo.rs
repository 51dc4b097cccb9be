//! Translating postings that share rows, each address once.

use roaring::{RoaringBitmap, RoaringTreemap};

use refract_core::roaring_format::ByteCursor;
use refract_core::{Error, Result, Translator, MAX_TRANSLATION_BATCH};

use super::assembler::TreemapAssembler;
use super::raw::RawPart;
use super::translate::translate_checked;

/// Memo entry of an address not translated yet.
const UNSET: u64 = u64::MAX;
/// Memo entry of a row that is gone.
const GONE: u64 = u64::MAX - 1;

/// The translated part of one source fragment (high key).
#[derive(Debug)]
pub(super) struct MemoTable {
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
    pub(super) tables: Vec<MemoTable>,
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

    /// [`Self::remap`] of a posting stored as roaring serializes a treemap
    /// (`u64` LE part count, then per part a `u32` LE high key and a portable
    /// bitmap). When every part moves by one constant (a compaction without
    /// deletions), the parts are shifted straight from their stored
    /// containers, without building the treemap first; otherwise it is
    /// decoded and goes through [`Self::remap`]. `what` names the posting in
    /// errors.
    ///
    /// # Errors
    /// Corrupt, naming `what`, for damaged bytes; those of [`Self::remap`].
    pub fn remap_serialized(
        &mut self,
        bytes: &[u8],
        what: &str,
        translator: &dyn Translator,
    ) -> Result<RoaringTreemap> {
        if let Some(shifted) = self.shift_serialized(bytes, what, translator)? {
            return Ok(shifted);
        }
        let mut rest = bytes;
        let posting = RoaringTreemap::deserialize_from(&mut rest)
            .map_err(|e| Error::corrupt(what, e.to_string()))?;
        if !rest.is_empty() {
            return Err(Error::corrupt(what, "trailing bytes after the last part"));
        }
        self.remap(&posting, translator)
    }

    /// The shifted posting when every part of `bytes` moves by one constant;
    /// `None` (nothing pushed) otherwise.
    fn shift_serialized(
        &mut self,
        bytes: &[u8],
        what: &str,
        translator: &dyn Translator,
    ) -> Result<Option<RoaringTreemap>> {
        let corrupt = |detail: &str| Error::corrupt(what, detail.to_string());
        let mut cursor = ByteCursor::new(bytes);
        let count = cursor
            .u64()
            .ok_or_else(|| corrupt("truncated part count"))?;
        // Each part takes at least 12 bytes (key, cookie, size).
        let mut parts =
            Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(bytes.len() / 12));
        let mut previous: Option<u32> = None;
        for _ in 0..count {
            let high = cursor.u32().ok_or_else(|| corrupt("truncated part key"))?;
            if previous.is_some_and(|p| p >= high) {
                return Err(corrupt("part keys are not ascending"));
            }
            previous = Some(high);
            let part = RawPart::read(&mut cursor, what)?;
            let Some((min, max)) = part.bounds else {
                continue;
            };
            match translator.shift_of_range(high, min, max)? {
                Some(base) => parts.push((part, base)),
                None => return Ok(None),
            }
        }
        if cursor.remaining() != 0 {
            return Err(corrupt("trailing bytes after the last part"));
        }
        for (part, base) in &parts {
            if let Err(err) = self.assembler.push_shifted_raw(part, *base, what) {
                // Leave no half-assembled posting behind for the next call.
                self.assembler.finish();
                return Err(err);
            }
        }
        Ok(Some(self.assembler.finish()))
    }

    /// Translates `posting`: a part whose offsets all move by one constant
    /// ([`TranslatorFastPaths::shift_of_range`](refract_core::TranslatorFastPaths::shift_of_range)) is shifted in bulk and needs no memo;
    /// a translator not [worth memoizing](refract_core::TranslatorFastPaths::worth_memoizing) streams
    /// the other parts ([`TranslatorFastPaths::translate_part`](refract_core::TranslatorFastPaths::translate_part)) and no table is held
    /// (unless it has no streaming path for some part: then the memo serves
    /// the whole posting); otherwise addresses seen before are looked up and new ones are
    /// translated in ascending batches of at most [`MAX_TRANSLATION_BATCH`].
    /// One pass over the posting: known results go to the output at once,
    /// new addresses after their batch is translated. A posting of at least
    /// [`PARALLEL_MIN_ADDRESSES`] streamed through a translator not worth
    /// memoizing is split in two halves of about equal addresses, translated
    /// on two threads and united.
    ///
    /// # Errors
    /// Those of `translator`'s methods; InvalidInput when it breaks their contract
    /// (a wrong result count, an out-of-range address, a shift crossing a fragment
    /// boundary) or a translation thread panics.
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
/// constant, else through [`TranslatorFastPaths::translate_part`](refract_core::TranslatorFastPaths::translate_part). False when the
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
