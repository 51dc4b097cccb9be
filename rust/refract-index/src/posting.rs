//! Serialized posting lists (sets of row addresses).
//!
//! A posting is a `RoaringTreemap`, stored as a sequence of
//! `(high u32 LE, byte length u32 LE, portable 32-bit roaring bitmap)` parts
//! with strictly increasing `high` keys. Each part is decoded through the core's
//! framing-checked decoder, so hostile bytes are rejected before roaring
//! allocates anything.

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(addrs in proptest::collection::vec(any::<u64>(), 0..200)) {
            let posting: RoaringTreemap = addrs.into_iter().collect();
            let bytes = encode(&posting);
            prop_assert_eq!(decode(&bytes, "test").unwrap(), posting);
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
