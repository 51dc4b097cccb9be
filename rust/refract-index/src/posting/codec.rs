//! The stored form of a posting: `(high, length, portable roaring part)` parts.

use roaring::{RoaringBitmap, RoaringTreemap};

use refract_core::{DeletionVector, Error, Result};

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
///
/// # Errors
/// Corrupt, naming `what`, for a truncated part header or body, parts not in
/// strictly ascending order, or a part that does not decode.
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
pub(super) fn split_part<'a>(
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
pub(super) fn decode_part(body: &[u8], high: u32, what: &str) -> Result<RoaringBitmap> {
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

/// Lance's form of a posting (`RowAddrTreeMap`, which pylance's BITMAP index
/// stores): a `u32 LE` part count, then the parts of [`encode`]. A part of
/// length zero means "every row of the fragment", which Lance's own remap
/// cannot translate either.
pub mod lance {
    use super::*;

    /// Encodes `posting` in Lance's form.
    pub fn encode(posting: &RoaringTreemap) -> Vec<u8> {
        let parts = super::encode(posting);
        let count = posting.bitmaps().filter(|(_, b)| !b.is_empty()).count();
        let mut out = Vec::with_capacity(4 + parts.len());
        // At most 2^32 fragments (the high halves of u64 addresses).
        out.extend_from_slice(&(count as u32).to_le_bytes());
        out.extend_from_slice(&parts);
        out
    }

    /// The parts of a posting in Lance's form, checked against its count,
    /// ready for [`decode`](super::decode) or
    /// [`translate_encoded`](crate::posting::translate_encoded).
    ///
    /// # Errors
    /// Corrupt, naming `what`, for a missing or wrong count, truncated or
    /// unordered parts; NotSupported for a whole-fragment part.
    pub fn parts<'a>(bytes: &'a [u8], what: &str) -> Result<&'a [u8]> {
        let (count, body) = bytes
            .split_first_chunk::<4>()
            .ok_or_else(|| Error::corrupt(what, "posting shorter than its part count"))?;
        let count = u32::from_le_bytes(*count);
        let (mut seen, mut previous, mut rest) = (0u32, None, body);
        while !rest.is_empty() {
            let (high, part, next) = split_part(rest, previous, what)?;
            if part.is_empty() {
                return Err(Error::not_supported(format!(
                    "{what}: posting selects every row of fragment {high}"
                )));
            }
            (seen, previous, rest) = (seen.saturating_add(1), Some(high), next);
        }
        if seen != count {
            return Err(Error::corrupt(
                what,
                format!("posting declares {count} parts and holds {seen}"),
            ));
        }
        Ok(body)
    }
}
