//! Which transitions the history must keep.
//!
//! A transition is kept while some segment still translates through it: the
//! segment's provenance meets the transition's (its rows flow through it) and
//! a destination the rows reach is not directly covered by the segment's
//! index — it is live, or a kept downstream transition carries the rows on.
//! Every transition downstream of a kept one is kept too, so a translation
//! path never breaks in the middle. A segment of unknown coverage pins the
//! whole history.

use refract_reader::history::FriHistory;
use refract_table::IndexMetadata;
use roaring::RoaringBitmap;

use super::lineage::{index_groups, newest_first, segment_walk};
use crate::remap::lineage_reach::contains;

/// Per lineage index: keep it?
/// `live` are the snapshot's fragments, `indices` its index section.
pub(crate) fn retained(
    history: &FriHistory,
    live: &RoaringBitmap,
    indices: &[IndexMetadata],
) -> Vec<bool> {
    let count = history.nodes().len();
    let mut keep = vec![false; count];
    for group in index_groups(indices) {
        if group.iter().any(|m| m.fragment_bitmap.is_none()) {
            return vec![true; count];
        }
        let claims = claims(&group);
        let mut claimed = RoaringBitmap::new();
        for owned in &claims {
            claimed |= owned;
        }
        let mut walks = Vec::with_capacity(group.len());
        let mut direct = RoaringBitmap::new();
        for (meta, owned) in group.iter().zip(&claims) {
            let Some(stored) = &meta.fragment_bitmap else {
                continue;
            };
            let others = &claimed - owned;
            let walked = segment_walk(Some(history), meta, stored, &others);
            direct |= &walked.direct;
            walks.push(walked);
        }
        for walked in &walks {
            let mut needed = vec![false; count];
            for &index in walked.reach.crossed.iter().rev() {
                let Some(node) = history.node(index) else {
                    continue;
                };
                let need = node.destinations.iter().any(|d| {
                    !contains(&direct, *d)
                        && (contains(live, *d)
                            || history.consumer_of(*d).is_some_and(|c| {
                                walked.reach.crosses(c) && needed.get(c).copied().unwrap_or(false)
                            }))
                });
                if let Some(slot) = needed.get_mut(index) {
                    *slot = need;
                }
            }
            for (slot, need) in keep.iter_mut().zip(needed) {
                *slot |= need;
            }
        }
    }
    close_downstream(history, &mut keep);
    keep
}

/// Keeps every consumer of a kept transition's destinations (lineage order
/// puts consumers later, so one forward pass reaches the whole closure).
fn close_downstream(history: &FriHistory, keep: &mut [bool]) {
    for index in 0..keep.len() {
        if !keep.get(index).copied().unwrap_or(false) {
            continue;
        }
        let Some(node) = history.node(index) else {
            continue;
        };
        for destination in &node.destinations {
            if let Some(consumer) = history.consumer_of(*destination) {
                if let Some(slot) = keep.get_mut(consumer) {
                    *slot = true;
                }
            }
        }
    }
}

/// Per segment of `group`, the stored fragments it claims (newest first).
fn claims(group: &[&IndexMetadata]) -> Vec<RoaringBitmap> {
    let mut taken = RoaringBitmap::new();
    let mut owned = vec![RoaringBitmap::new(); group.len()];
    for i in newest_first(group) {
        if let (Some(meta), Some(slot)) = (group.get(i), owned.get_mut(i)) {
            if let Some(stored) = &meta.fragment_bitmap {
                *slot = stored - &taken;
                taken |= &*slot;
            }
        }
    }
    owned
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remap::lineage_reach::tests::{history, legacy_history, partition};
    use uuid::Uuid;

    fn segment(name: &str, stored: Option<&[u32]>, version: u64) -> IndexMetadata {
        IndexMetadata {
            uuid: Uuid::new_v4(),
            name: name.into(),
            fields: vec!["id".into()],
            fragment_bitmap: stored.map(|s| s.iter().copied().collect()),
            index_type: "btree".into(),
            details: vec![],
            index_version: 0,
            dataset_version: version,
            files: Vec::new(),
            lance: Default::default(),
        }
    }

    fn manifest(live: &[u32], indices: Vec<IndexMetadata>) -> (RoaringBitmap, Vec<IndexMetadata>) {
        (live.iter().copied().collect(), indices)
    }

    fn keep(h: &FriHistory, (live, indices): &(RoaringBitmap, Vec<IndexMetadata>)) -> Vec<bool> {
        retained(h, live, indices)
    }

    #[test]
    fn keeps_what_a_segment_translates_through_and_drops_the_rest() {
        // T0: 1,2 → 3 ; T1: 4 → 5. Segment covers 1,2 (translates via T0);
        // nobody covers 4.
        let h = history(vec![partition(&[1, 2], &[3]), partition(&[4], &[5])]);
        let m = manifest(&[3, 5], vec![segment("a", Some(&[1, 2]), 2)]);
        assert_eq!(keep(&h, &m), vec![true, false]);
    }

    #[test]
    fn a_caught_up_index_drains_the_history() {
        let h = history(vec![partition(&[1, 2], &[3])]);
        let m = manifest(&[3], vec![segment("a", Some(&[3]), 9)]);
        assert_eq!(keep(&h, &m), vec![false]);
    }

    #[test]
    fn chains_are_kept_downstream_and_projections_pin_their_transitions() {
        // T0: 1 → 2 ; T1: 2,9 → 3. Segment covers 1 only: partial on T1, which
        // it still needs (3 is live and not directly covered), so both stay.
        let h = history(vec![partition(&[1], &[2]), partition(&[2, 9], &[3])]);
        let m = manifest(&[3], vec![segment("a", Some(&[1]), 2)]);
        assert_eq!(keep(&h, &m), vec![true, true]);
        // A legacy projection stored as {3}: its files hold fragment 1 rows.
        let chain = legacy_history(&[(&[1], &[2], 5), (&[2], &[3], 6)]);
        let projected = manifest(&[3], vec![segment("a", Some(&[3]), 4)]);
        assert_eq!(keep(&chain, &projected), vec![true, true]);
        // The same bitmap built after the rewrites is genuine: nothing needed.
        let genuine = manifest(&[3], vec![segment("a", Some(&[3]), 7)]);
        assert_eq!(keep(&chain, &genuine), vec![false, false]);
        // Only the downstream part is needed: the upstream one is dropped.
        let mid = manifest(&[3], vec![segment("a", Some(&[2]), 6)]);
        assert_eq!(keep(&chain, &mid), vec![false, true]);
    }

    #[test]
    fn unknown_coverage_pins_everything_and_siblings_release_destinations() {
        let h = history(vec![partition(&[1, 2], &[3, 4])]);
        let pinned = manifest(&[3, 4], vec![segment("a", None, 2)]);
        assert_eq!(keep(&h, &pinned), vec![true]);
        // Both destinations re-indexed directly by a newer sibling.
        let covered = manifest(
            &[3, 4],
            vec![
                segment("a", Some(&[1, 2]), 2),
                segment("a", Some(&[3, 4]), 9),
            ],
        );
        assert_eq!(keep(&h, &covered), vec![false]);
        // Only one of them: the other still needs the transition.
        let half = manifest(
            &[3, 4],
            vec![segment("a", Some(&[1, 2]), 2), segment("a", Some(&[3]), 9)],
        );
        assert_eq!(keep(&h, &half), vec![true]);
        // Another index's coverage does not count.
        let other = manifest(
            &[3, 4],
            vec![
                segment("a", Some(&[1, 2]), 2),
                segment("b", Some(&[3, 4]), 9),
            ],
        );
        assert_eq!(keep(&h, &other), vec![true]);
    }
}
