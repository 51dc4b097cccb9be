//! Content rules of one transition: digests, row conservation and mapping
//! metadata. Bitmap rules live in [`crate::bitmap`], lineage rules in
//! [`crate::lineage`].

use std::collections::HashSet;

use uuid::Uuid;

use crate::model::FragmentDigestExt;
use crate::model::{FragmentDigest, Mapping};
use crate::violation::{Checked, Violation};

/// The largest valid fragment id + 1: ids fill the high 32 bits of a row
/// address and `u32::MAX` is reserved.
pub const MAX_FRAGMENT_ID_EXCLUSIVE: u64 = u32::MAX as u64;

/// The most physical rows a fragment can have (offsets are 32-bit).
pub const MAX_PHYSICAL_ROWS: u64 = u32::MAX as u64;

/// The most destinations a stable partition can address: row-map labels are
/// UInt16 and the largest value, 65,535, is the row map reader's deleted-row
/// sentinel, so destinations are labelled 0..=65,534. The one limit for the
/// ledger, the row map and the partition options.
pub const MAX_PARTITION_DESTINATIONS: u32 = u16::MAX as u32;

/// Checks both digest lists and row conservation.
pub(crate) fn check_sides(sources: &[FragmentDigest], destinations: &[FragmentDigest]) -> Checked {
    if sources.is_empty() {
        return Err(Violation::invalid("a transition needs at least one source"));
    }
    check_digests("source", sources)?;
    check_digests("destination", destinations)?;
    if let Some(d) = destinations.iter().find(|d| d.num_deleted_rows != 0) {
        return Err(Violation::invalid(format!(
            "destination fragment {} has {} deleted rows; destinations are written without deletions",
            d.id, d.num_deleted_rows
        )));
    }
    check_row_conservation(sources, destinations)
}

/// Checks every digest of one side and that no id repeats within it.
fn check_digests(side: &str, digests: &[FragmentDigest]) -> Checked {
    let mut seen = HashSet::with_capacity(digests.len());
    for d in digests {
        if d.id >= MAX_FRAGMENT_ID_EXCLUSIVE {
            return Err(Violation::invalid(format!(
                "{side} fragment id {} is not below {MAX_FRAGMENT_ID_EXCLUSIVE}",
                d.id
            )));
        }
        if d.physical_rows > MAX_PHYSICAL_ROWS {
            return Err(Violation::invalid(format!(
                "{side} fragment {} has {} physical rows, more than {MAX_PHYSICAL_ROWS}",
                d.id, d.physical_rows
            )));
        }
        if d.num_deleted_rows > d.physical_rows {
            return Err(Violation::invalid(format!(
                "{side} fragment {} has {} deleted rows but only {} physical rows",
                d.id, d.num_deleted_rows, d.physical_rows
            )));
        }
        if !seen.insert(d.id) {
            return Err(Violation::invalid(format!(
                "{side} fragment {} is listed twice",
                d.id
            )));
        }
    }
    Ok(())
}

/// Live source rows must equal destination rows: a rewrite neither loses nor
/// invents rows.
fn check_row_conservation(sources: &[FragmentDigest], destinations: &[FragmentDigest]) -> Checked {
    // Sums cannot overflow: each term is at most u32::MAX (checked above) and
    // the number of digests is bounded by memory, far below 2^32.
    let live: u64 = sources.iter().map(FragmentDigest::live_rows).sum();
    let written: u64 = destinations.iter().map(|d| d.physical_rows).sum();
    if live != written {
        return Err(Violation::invalid(format!(
            "row counts differ: sources hold {live} live rows but destinations hold {written} rows"
        )));
    }
    Ok(())
}

/// Checks mapping metadata against the destinations (the ordered-compaction
/// bitmap is checked against the sources separately).
pub(crate) fn check_mapping(mapping: &Mapping, destinations: &[FragmentDigest]) -> Checked {
    match mapping {
        Mapping::OrderedCompaction { .. } => Ok(()),
        Mapping::StablePartition { map_size_bytes, .. } => {
            if *map_size_bytes == 0 {
                return Err(Violation::invalid("stable partition map_size_bytes is 0"));
            }
            if destinations.is_empty() || destinations.len() > MAX_PARTITION_DESTINATIONS as usize {
                return Err(Violation::invalid(format!(
                    "stable partition has {} destinations; it needs 1 to {MAX_PARTITION_DESTINATIONS}",
                    destinations.len()
                )));
            }
            Ok(())
        }
    }
}

/// Parses a stored `map_id`.
///
/// A value that could act as a path (`/`, `\`, `..`, NUL) is a
/// [`Violation::PathEscape`]: the id names a directory under `_fri/`. Any other
/// non-UUID is [`Violation::Invalid`].
pub(crate) fn parse_map_id(map_id: &str) -> Checked<Uuid> {
    if map_id.contains(['/', '\\', '\0']) || map_id.contains("..") {
        return Err(Violation::PathEscape(format!("_fri/{map_id}")));
    }
    Uuid::try_parse(map_id).map_err(|e| {
        Violation::invalid(format!(
            "stable partition map_id {map_id:?} is not a UUID: {e}"
        ))
    })
}
