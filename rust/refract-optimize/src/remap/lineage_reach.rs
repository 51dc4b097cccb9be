//! Where a segment's rows can go: its provenance (stored fragments plus any
//! source fragments recovered for a legacy projected bitmap) walked forward
//! through the lineage.
//!
//! Everything here works on fragment-id bitmaps and transition indices; no
//! row address is touched, so the cost is proportional to the history, never
//! to a segment or a row map.

use refract_reader::history::FriHistory;
use roaring::RoaringBitmap;

/// The forward walk of one segment through the lineage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reach {
    /// Fragments the segment's rows may sit in at some hop (provenance
    /// included), minus fragments claimed by sibling segments.
    pub reached: RoaringBitmap,
    /// Transitions (lineage indices, ascending) some of its rows go through.
    pub crossed: Vec<usize>,
    /// Crossed transitions with a source the segment's rows do not reach:
    /// the destinations hold rows of other contributors too.
    pub partial: Vec<usize>,
}

impl Reach {
    /// True when `transition` is crossed.
    pub fn crosses(&self, transition: usize) -> bool {
        self.crossed.binary_search(&transition).is_ok()
    }
}

/// Walks `provenance` forward through `history` in lineage order. A path
/// entering a fragment in `others_claimed` stops there: the sibling that
/// claims it returns those rows, so this segment's copy is dropped.
pub fn walk(
    history: &FriHistory,
    provenance: &RoaringBitmap,
    others_claimed: &RoaringBitmap,
) -> Reach {
    let mut reach = Reach {
        reached: provenance.clone(),
        ..Reach::default()
    };
    for (index, node) in history.nodes().iter().enumerate() {
        let hit = node
            .sources
            .iter()
            .filter(|s| contains(&reach.reached, **s))
            .count();
        if hit == 0 {
            continue;
        }
        reach.crossed.push(index);
        if hit < node.sources.len() {
            reach.partial.push(index);
        }
        for destination in &node.destinations {
            if !contains(others_claimed, *destination) {
                insert(&mut reach.reached, *destination);
            }
        }
    }
    reach
}

/// Recovers the source provenance of a legacy projected bitmap.
///
/// A legacy writer could persist a segment's load-time remapped bitmap: it
/// then names the destinations of a rewrite while the segment's files still
/// hold the sources' addresses. Such a transition is recognised by metadata
/// alone: every destination is in the segment's provenance, some source is
/// not, and the segment was built no later than the version the rewrite was
/// planned against (so the destinations did not exist when it was built).
/// Only legacy groups record that version, and only legacy writers projected.
/// The sources are added back; later transitions are visited first so a
/// chain of projections is unwound completely.
pub fn recover_provenance(
    history: &FriHistory,
    stored: &RoaringBitmap,
    segment_version: u64,
) -> RoaringBitmap {
    let mut provenance = stored.clone();
    for node in history.nodes().iter().rev() {
        let projected = !node.destinations.is_empty()
            && node
                .record
                .dataset_version()
                .is_some_and(|planned| segment_version <= planned)
            && node.destinations.iter().all(|d| contains(&provenance, *d))
            && !node.sources.iter().all(|s| contains(&provenance, *s));
        if projected {
            for source in &node.sources {
                insert(&mut provenance, *source);
            }
        }
    }
    provenance
}

/// Bitmap membership of a u64 fragment id (ids beyond u32 are never members;
/// the ledger validates ids below `u32::MAX`).
pub(crate) fn contains(bitmap: &RoaringBitmap, id: u64) -> bool {
    u32::try_from(id).is_ok_and(|id| bitmap.contains(id))
}

/// Inserts a u64 fragment id (ignored beyond u32; see [`contains`]).
pub(crate) fn insert(bitmap: &mut RoaringBitmap, id: u64) {
    if let Ok(id) = u32::try_from(id) {
        bitmap.insert(id);
    }
}

/// A bitmap of u64 fragment ids.
pub(crate) fn bitmap_of(ids: impl IntoIterator<Item = u64>) -> RoaringBitmap {
    let mut bitmap = RoaringBitmap::new();
    for id in ids {
        insert(&mut bitmap, id);
    }
    bitmap
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use refract_ledger::{FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord};
    use uuid::Uuid;

    /// A stable partition `sources → destinations`. Every fragment has 12
    /// physical rows; rows are conserved by deleting source rows (so there
    /// must be at least as many sources as destinations).
    pub(crate) fn partition(sources: &[u64], destinations: &[u64]) -> TransitionRecord {
        const ROWS: u64 = 12;
        let mut excess = ROWS * (sources.len() - destinations.len()) as u64;
        let sources = sources
            .iter()
            .map(|s| {
                let deleted = excess.min(ROWS);
                excess -= deleted;
                FragmentDigest::new(*s, ROWS, deleted)
            })
            .collect();
        TransitionRecord::new(
            sources,
            destinations
                .iter()
                .map(|d| FragmentDigest::new(*d, ROWS, 0))
                .collect(),
            Mapping::StablePartition {
                map_id: Uuid::new_v4(),
                map_size_bytes: 100,
                map_checksum: None,
            },
        )
        .unwrap()
    }

    pub(crate) fn history(records: Vec<TransitionRecord>) -> FriHistory {
        let mut ledger = Ledger::new();
        for record in records {
            ledger.push_transition(record).unwrap();
        }
        FriHistory::from_ledger(Uuid::new_v4(), &ledger).unwrap()
    }

    /// A legacy history: one version per `(sources, destinations, planned
    /// at)`, each an ordered compaction of 12-row sources into destinations
    /// of equal size.
    pub(crate) fn legacy_history(versions: &[(&[u64], &[u64], u64)]) -> FriHistory {
        let mut ledger = Ledger::new();
        for (sources, destinations, planned) in versions {
            let rows = 12 * sources.len() as u64 / destinations.len() as u64;
            let surviving = sources
                .iter()
                .flat_map(|s| (0..12u64).map(move |offset| s << 32 | offset))
                .collect();
            let record = TransitionRecord::new(
                sources
                    .iter()
                    .map(|s| FragmentDigest::new(*s, 12, 0))
                    .collect(),
                destinations
                    .iter()
                    .map(|d| FragmentDigest::new(*d, rows, 0))
                    .collect(),
                Mapping::OrderedCompaction { surviving },
            )
            .unwrap();
            ledger = refract_ledger::append_legacy_version(&ledger, *planned, &[record]).unwrap();
        }
        FriHistory::from_ledger(Uuid::new_v4(), &ledger).unwrap()
    }

    pub(crate) fn bm(ids: &[u32]) -> RoaringBitmap {
        ids.iter().copied().collect()
    }

    #[test]
    fn multi_hop_chain_is_crossed_completely() {
        // 1,2 → 3,4 ; 3,4 → 5
        let h = history(vec![partition(&[1, 2], &[3, 4]), partition(&[3, 4], &[5])]);
        let reach = walk(&h, &bm(&[1, 2]), &RoaringBitmap::new());
        assert_eq!(reach.crossed, vec![0, 1]);
        assert!(reach.partial.is_empty());
        assert_eq!(reach.reached, bm(&[1, 2, 3, 4, 5]));
    }

    #[test]
    fn a_missing_source_contribution_is_partial() {
        // 1,2 → 3 ; 3,9 → 5: fragment 9 belongs to someone else.
        let h = history(vec![partition(&[1, 2], &[3]), partition(&[3, 9], &[5])]);
        let reach = walk(&h, &bm(&[1, 2]), &RoaringBitmap::new());
        assert_eq!(reach.crossed, vec![0, 1]);
        assert_eq!(reach.partial, vec![1]);
        let one = walk(&h, &bm(&[1]), &RoaringBitmap::new());
        assert_eq!(one.partial, vec![0, 1]);
    }

    #[test]
    fn a_sibling_claim_stops_the_path() {
        // 1,2 → 3,4 ; 4,9 → 5 with 4 claimed by a newer sibling: the segment's
        // rows of 4 are dropped, so the second transition is not crossed.
        let h = history(vec![partition(&[1, 2], &[3, 4]), partition(&[4, 9], &[5])]);
        let reach = walk(&h, &bm(&[1, 2]), &bm(&[4]));
        assert_eq!(reach.crossed, vec![0]);
        assert!(reach.partial.is_empty());
        assert_eq!(reach.reached, bm(&[1, 2, 3]));
    }

    #[test]
    fn untouched_segments_cross_nothing() {
        let h = history(vec![partition(&[1, 2], &[3])]);
        let reach = walk(&h, &bm(&[7, 8]), &RoaringBitmap::new());
        assert!(reach.crossed.is_empty());
        assert_eq!(reach.reached, bm(&[7, 8]));
    }

    #[test]
    fn projected_legacy_bitmaps_recover_their_sources_through_chains() {
        // 1,2 → 3,4 (planned at 5) ; 4 → 6 (planned at 8). A segment built at
        // version 4 whose bitmap was projected to {3, 6}.
        let h = legacy_history(&[(&[1, 2], &[3, 4], 5), (&[4], &[6], 8)]);
        let recovered = recover_provenance(&h, &bm(&[3, 6]), 4);
        assert_eq!(recovered, bm(&[1, 2, 3, 4, 6]));
        // Built after the rewrite was planned: the bitmap is genuine.
        assert_eq!(recover_provenance(&h, &bm(&[3, 6]), 9), bm(&[3, 6]));
        // Built at 6, after the first rewrite but before the second.
        assert_eq!(recover_provenance(&h, &bm(&[3, 6]), 6), bm(&[3, 4, 6]));
        // Partial projection is not recognised (a legacy projection is whole).
        assert_eq!(recover_provenance(&h, &bm(&[3]), 4), bm(&[3]));
        // Already holding the sources: nothing to recover.
        assert_eq!(recover_provenance(&h, &bm(&[1, 2]), 4), bm(&[1, 2]));
        // Version-1 transitions record no planned version and are never
        // projections (only legacy writers projected).
        let tagged = history(vec![partition(&[1, 2], &[3, 4]), partition(&[4], &[6])]);
        assert_eq!(recover_provenance(&tagged, &bm(&[3, 6]), 4), bm(&[3, 6]));
    }
}
