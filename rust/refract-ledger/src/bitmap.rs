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

use refract_core::roaring_format::{BitmapFrame, ByteCursor};

use crate::model::FragmentDigest;
use crate::model::FragmentDigestExt;
use crate::violation::{Checked, Violation};

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

/// Walks the treemap headers; returns each partition's key and byte range.
fn scan_treemap(
    bytes: &[u8],
    rows: &HashMap<u64, SourceRows>,
) -> Checked<Vec<(u32, Range<usize>)>> {
    let truncated = || Violation::invalid("surviving bitmap is truncated");
    let mut cur = ByteCursor::new(bytes);
    let count = cur.u64().ok_or_else(truncated)?;
    if count > rows.len() as u64 {
        return Err(Violation::invalid(format!(
            "surviving bitmap has {count} fragments but the transition has {} sources",
            rows.len()
        )));
    }
    let mut out = Vec::new();
    let mut previous: Option<u32> = None;
    for _ in 0..count {
        let key = cur.u32().ok_or_else(truncated)?;
        if previous.is_some_and(|p| key <= p) {
            return Err(Violation::invalid(
                "surviving bitmap fragments are not strictly ascending",
            ));
        }
        previous = Some(key);
        let source = source_for(key, rows)?;
        let start = cur.position();
        let frame = BitmapFrame::read(&mut cur)
            .map_err(|e| Violation::invalid(format!("surviving bitmap: {e}")))?;
        if frame.cardinality() != source.live {
            return Err(Violation::invalid(format!(
                "surviving bitmap keeps {} rows of fragment {key} but its digest has {} live rows",
                frame.cardinality(),
                source.live
            )));
        }
        if let Some(high) = frame.max_key() {
            if u64::from(high) * ROWS_PER_CONTAINER >= source.physical {
                return Err(Violation::invalid(format!(
                    "surviving bitmap of fragment {key} has offsets beyond its {} physical rows",
                    source.physical
                )));
            }
        }
        out.push((key, start..cur.position()));
    }
    if cur.remaining() != 0 {
        return Err(Violation::invalid(format!(
            "surviving bitmap has {} trailing bytes",
            cur.remaining()
        )));
    }
    Ok(out)
}
