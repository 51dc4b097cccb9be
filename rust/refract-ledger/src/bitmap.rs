//! Surviving-address bitmaps of ordered compactions.
//!
//! Stored bitmaps are untrusted. Before roaring sees them, [`decode_surviving`]
//! walks the serialized structure (the portable roaring format, per 32-bit
//! high key) using only the headers: it checks that every high key is a source
//! fragment, that each source's cardinality equals its live rows, that no
//! container lies beyond the source's physical rows and that the sizes fit
//! inside the input exactly. Only then are the inner bitmaps deserialized, so a
//! few hostile header bytes can never make roaring allocate large buffers.

use std::collections::HashMap;
use std::ops::Range;

use roaring::{RoaringBitmap, RoaringTreemap};

use crate::model::FragmentDigest;
use crate::violation::{Checked, Violation};

const SERIAL_COOKIE_NO_RUNCONTAINER: u32 = 12346;
const SERIAL_COOKIE: u32 = 12347;
const NO_OFFSET_THRESHOLD: usize = 4;
const MAX_CONTAINERS: usize = 1 << 16;
const ARRAY_LIMIT: usize = 4096;
const BITMAP_CONTAINER_BYTES: usize = 8192;
const ROWS_PER_CONTAINER: u64 = 1 << 16;

/// Per-source facts the bitmap must agree with.
#[derive(Clone, Copy)]
struct SourceRows {
    physical: u64,
    live: u64,
}

fn source_rows(sources: &[FragmentDigest]) -> HashMap<u64, SourceRows> {
    sources
        .iter()
        .map(|d| {
            let rows = SourceRows {
                physical: d.physical_rows,
                live: d.live_rows(),
            };
            (d.id, rows)
        })
        .collect()
}

/// Decodes a stored surviving-address bitmap, validated against `sources`
/// (whose digests must already be valid) and canonicalized.
pub(crate) fn decode_surviving(
    bytes: &[u8],
    sources: &[FragmentDigest],
) -> Checked<RoaringTreemap> {
    let rows = source_rows(sources);
    let inner = scan_treemap(bytes, &rows)?;
    let mut bitmaps = Vec::with_capacity(inner.len());
    for (key, range) in inner {
        // `range` was produced by the scan and lies within `bytes`.
        let mut slice = bytes.get(range).unwrap_or_default();
        let bitmap = RoaringBitmap::deserialize_from(&mut slice)
            .map_err(|e| Violation::invalid(format!("surviving bitmap of fragment {key}: {e}")))?;
        if !slice.is_empty() {
            return Err(Violation::invalid(format!(
                "surviving bitmap of fragment {key} has {} unread bytes",
                slice.len()
            )));
        }
        bitmaps.push((key, bitmap));
    }
    let treemap = RoaringTreemap::from_bitmaps(
        bitmaps
            .into_iter()
            .map(|(key, b)| (key, canonical_bitmap(b)))
            .filter(|(_, b)| !b.is_empty()),
    );
    check_against(&treemap, &rows)?;
    Ok(treemap)
}

/// Checks a surviving-address bitmap against validated source digests: every
/// address lies in a source and below its physical rows, and each source keeps
/// exactly its live rows.
pub(crate) fn check_surviving(surviving: &RoaringTreemap, sources: &[FragmentDigest]) -> Checked {
    check_against(surviving, &source_rows(sources))
}

fn check_against(surviving: &RoaringTreemap, rows: &HashMap<u64, SourceRows>) -> Checked {
    let mut matched: u64 = 0;
    for (key, bitmap) in surviving.bitmaps() {
        if bitmap.is_empty() {
            continue;
        }
        let source = source_for(key, rows)?;
        let count = bitmap.len();
        if count != source.live {
            return Err(Violation::invalid(format!(
                "surviving bitmap keeps {count} rows of fragment {key} but its digest has {} live rows",
                source.live
            )));
        }
        if let Some(max) = bitmap.max() {
            if u64::from(max) >= source.physical {
                return Err(Violation::invalid(format!(
                    "surviving address offset {max} of fragment {key} is beyond its {} physical rows",
                    source.physical
                )));
            }
        }
        matched += count;
    }
    // Each present source matched exactly, so the totals agree only if no
    // source with live rows is missing from the bitmap.
    let live: u64 = rows.values().map(|s| s.live).sum();
    if matched != live {
        return Err(Violation::invalid(format!(
            "surviving bitmap keeps {matched} rows but the sources have {live} live rows"
        )));
    }
    Ok(())
}

fn source_for(key: u32, rows: &HashMap<u64, SourceRows>) -> Checked<SourceRows> {
    rows.get(&u64::from(key)).copied().ok_or_else(|| {
        Violation::invalid(format!(
            "surviving bitmap holds addresses of fragment {key}, which is not a source"
        ))
    })
}

/// The canonical form: empty partitions dropped, each container in its
/// smallest representation chosen from its content alone (runs removed first
/// so the result does not depend on how the bitmap was built).
pub(crate) fn canonical(surviving: &RoaringTreemap) -> RoaringTreemap {
    RoaringTreemap::from_bitmaps(
        surviving
            .bitmaps()
            .filter(|(_, b)| !b.is_empty())
            .map(|(key, b)| (key, canonical_bitmap(b.clone()))),
    )
}

fn canonical_bitmap(mut bitmap: RoaringBitmap) -> RoaringBitmap {
    bitmap.remove_run_compression();
    bitmap.optimize();
    bitmap
}

/// Serializes a bitmap (portable roaring treemap format).
pub(crate) fn serialize(surviving: &RoaringTreemap) -> Vec<u8> {
    let mut out = Vec::with_capacity(surviving.serialized_size());
    // Writing into a Vec cannot fail.
    let _ = surviving.serialize_into(&mut out);
    out
}

/// Byte cursor over the serialized form; every read is bounds-checked.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize) -> Checked<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len());
        match end {
            Some(end) => {
                // `pos <= end <= bytes.len()` by the filter above.
                let out = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(Violation::invalid("surviving bitmap is truncated")),
        }
    }

    // `take(n)` returns exactly `n` bytes, so the fixed indices below hold.
    fn u16(&mut self) -> Checked<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Checked<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Checked<u64> {
        let lo = u64::from(self.u32()?);
        let hi = u64::from(self.u32()?);
        Ok(lo | hi << 32)
    }
}

/// Walks the treemap headers; returns each partition's key and byte range.
fn scan_treemap(
    bytes: &[u8],
    rows: &HashMap<u64, SourceRows>,
) -> Checked<Vec<(u32, Range<usize>)>> {
    let mut cur = Cursor { bytes, pos: 0 };
    let count = cur.u64()?;
    if count > rows.len() as u64 {
        return Err(Violation::invalid(format!(
            "surviving bitmap has {count} fragments but the transition has {} sources",
            rows.len()
        )));
    }
    let mut out = Vec::new();
    let mut previous: Option<u32> = None;
    for _ in 0..count {
        let key = cur.u32()?;
        if previous.is_some_and(|p| key <= p) {
            return Err(Violation::invalid(
                "surviving bitmap fragments are not strictly ascending",
            ));
        }
        previous = Some(key);
        let source = source_for(key, rows)?;
        let start = cur.pos;
        let summary = scan_bitmap(&mut cur)?;
        if summary.cardinality != source.live {
            return Err(Violation::invalid(format!(
                "surviving bitmap keeps {} rows of fragment {key} but its digest has {} live rows",
                summary.cardinality, source.live
            )));
        }
        if let Some(high) = summary.max_container {
            if u64::from(high) * ROWS_PER_CONTAINER >= source.physical {
                return Err(Violation::invalid(format!(
                    "surviving bitmap of fragment {key} has offsets beyond its {} physical rows",
                    source.physical
                )));
            }
        }
        out.push((key, start..cur.pos));
    }
    if cur.pos != bytes.len() {
        return Err(Violation::invalid(format!(
            "surviving bitmap has {} trailing bytes",
            bytes.len() - cur.pos
        )));
    }
    Ok(out)
}

struct BitmapSummary {
    cardinality: u64,
    max_container: Option<u16>,
}

/// Walks one 32-bit roaring bitmap's headers and skips its containers.
fn scan_bitmap(cur: &mut Cursor<'_>) -> Checked<BitmapSummary> {
    let cookie = cur.u32()?;
    let (size, has_offsets, run_flags) = if cookie == SERIAL_COOKIE_NO_RUNCONTAINER {
        let size = cur.u32()? as usize;
        (size, true, None)
    } else if cookie & 0xFFFF == SERIAL_COOKIE {
        let size = (cookie >> 16) as usize + 1;
        let flags = cur.take(size.div_ceil(8))?;
        (size, size >= NO_OFFSET_THRESHOLD, Some(flags))
    } else {
        return Err(Violation::invalid(
            "surviving bitmap has an unknown roaring cookie",
        ));
    };
    if size > MAX_CONTAINERS {
        return Err(Violation::invalid(
            "surviving bitmap has too many containers",
        ));
    }
    let descriptions = cur.take(size * 4)?;
    if has_offsets {
        cur.take(size * 4)?;
    }
    let mut cardinality = 0u64;
    let mut max_container = None;
    for (i, description) in descriptions.chunks_exact(4).enumerate() {
        let key = u16::from_le_bytes([description[0], description[1]]);
        let card = usize::from(u16::from_le_bytes([description[2], description[3]])) + 1;
        let is_run =
            run_flags.is_some_and(|f| f.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0));
        if is_run {
            let runs = usize::from(cur.u16()?);
            cur.take(runs * 4)?;
        } else if card <= ARRAY_LIMIT {
            cur.take(card * 2)?;
        } else {
            cur.take(BITMAP_CONTAINER_BYTES)?;
        }
        cardinality += card as u64;
        max_container = max_container.max(Some(key));
    }
    Ok(BitmapSummary {
        cardinality,
        max_container,
    })
}
