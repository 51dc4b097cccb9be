//! Translating one stored posting in place.

use roaring::{RoaringBitmap, RoaringTreemap};

use refract_core::{Error, Result, Translator, MAX_TRANSLATION_BATCH};

use super::assembler::TreemapAssembler;
use super::codec::{decode_part, split_part};
use super::raw::RawPart;

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
        if !self.assembler.is_empty() {
            let _ = self.assembler.finish();
        }
    }
}

/// Translates an encoded posting (see [`encode`](super::encode)) through `translator`,
/// reading it in place; rows that are gone are dropped. A fragment's part
/// whose whole offset range moves by one constant
/// ([`TranslatorFastPaths::shift_of_range`](refract_core::TranslatorFastPaths::shift_of_range)) is shifted straight from its serialized
/// containers, without building a `RoaringBitmap`; other parts are decoded
/// and go through [`TranslatorFastPaths::translate_part`](refract_core::TranslatorFastPaths::translate_part) when the translator streams
/// (an in-memory remap), else in ascending slices of at most
/// [`MAX_TRANSLATION_BATCH`]. Either way a dense posting never expands beyond
/// one slice. Damaged bytes are Corrupt errors naming `what`, as with
/// [`decode`](super::decode).
///
/// # Errors
/// Corrupt, naming `what`, for damaged bytes; those of `translator`'s methods;
/// InvalidInput when it answers a batch with the wrong number of results or
/// shifts a part across a fragment boundary.
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
/// when the translator can ([`TranslatorFastPaths::translate_part`](refract_core::TranslatorFastPaths::translate_part)), else buffered
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
pub(super) fn translate_checked(
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

/// Translates the encoded `postings` (see [`translate_encoded`]) in order. A translator that answers
/// from memory ([`TranslatorFastPaths::worth_memoizing`](refract_core::TranslatorFastPaths::worth_memoizing) is false) is shared by two
/// threads, each translating half of the postings; others are called from
/// this thread only.
///
/// # Errors
/// As [`translate_encoded`]; InvalidInput when a thread panics.
pub fn translate_many(
    postings: &[&[u8]],
    what: &str,
    translator: &dyn Translator,
    scratch: &mut TranslateScratch,
) -> Result<Vec<RoaringTreemap>> {
    let translate = |part: &[&[u8]], scratch: &mut TranslateScratch| -> Result<Vec<_>> {
        part.iter()
            .map(|bytes| translate_encoded(bytes, what, translator, scratch))
            .collect()
    };
    if translator.worth_memoizing() || postings.len() < 2 {
        return translate(postings, scratch);
    }
    // A dense posting is a few bytes of runs, so bytes say little about the
    // work: halves by count.
    let (first, second) = postings.split_at(postings.len() / 2);
    let (head, tail) = std::thread::scope(|threads| {
        let tail = threads.spawn(|| translate(second, &mut TranslateScratch::default()));
        (translate(first, scratch), tail.join())
    });
    let tail =
        tail.map_err(|_| Error::invalid_input(format!("{what}: a remap thread panicked")))?;
    let mut all = head?;
    all.extend(tail?);
    Ok(all)
}
