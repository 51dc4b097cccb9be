//! Superseded segments: those every row of which now lands in fragments that
//! newer sibling segments cover directly. They serve nothing, and their
//! stored coverage would otherwise keep history alive, so `trim_fri` removes
//! them first (a removal-only commit). The newest segment of an index is never
//! removed, so pruning never drops an index.

use refract_reader::history::FriHistory;
use refract_table::IndexMetadata;
use roaring::RoaringBitmap;
use uuid::Uuid;

use super::lineage::{index_groups, newest_first, segment_walk};

/// Segments of `indices` superseded by newer siblings, given the `live`
/// fragments. Nothing is pruned when the history holds transitions this
/// client cannot read (where rows go is then unknown).
pub(crate) fn superseded(
    history: Option<&FriHistory>,
    live: &RoaringBitmap,
    indices: &[IndexMetadata],
) -> Vec<Uuid> {
    if history.is_some_and(FriHistory::has_unsupported_transitions) {
        return Vec::new();
    }
    let mut pruned = Vec::new();
    for group in index_groups(indices) {
        // Newest first: each segment is judged against the kept newer ones.
        let mut kept_direct = RoaringBitmap::new();
        let mut kept_any = false;
        for position in newest_first(&group) {
            let Some(meta) = group.get(position) else {
                continue;
            };
            let Some(stored) = &meta.fragment_bitmap else {
                // Unknown coverage proves nothing and is never pruned.
                kept_any = true;
                continue;
            };
            let walked = segment_walk(history, meta, stored, &kept_direct);
            let serves = &(&walked.reach.reached & live) - &kept_direct;
            if kept_any && serves.is_empty() {
                pruned.push(meta.uuid);
            } else {
                kept_direct |= &walked.direct;
                kept_any = true;
            }
        }
    }
    pruned
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remap::lineage_reach::tests::{bm, history, partition};

    fn segment(stored: Option<&[u32]>, version: u64) -> IndexMetadata {
        IndexMetadata {
            uuid: Uuid::new_v4(),
            name: "idx".into(),
            fields: vec!["id".into()],
            fragment_bitmap: stored.map(bm),
            index_type: "btree".into(),
            details: vec![],
            index_version: 0,
            dataset_version: version,
            files: Vec::new(),
            lance: Default::default(),
        }
    }

    #[test]
    fn a_segment_whose_rows_all_land_in_newer_coverage_is_pruned() {
        let h = history(vec![partition(&[1, 2], &[3, 4])]);
        let old = segment(Some(&[1, 2]), 2);
        let newer = segment(Some(&[3, 4]), 9);
        let indices = vec![old.clone(), newer.clone()];
        assert_eq!(superseded(Some(&h), &bm(&[3, 4]), &indices), vec![old.uuid]);
        // One destination left uncovered: the old segment still serves it.
        let half = vec![old.clone(), segment(Some(&[3]), 9)];
        assert!(superseded(Some(&h), &bm(&[3, 4]), &half).is_empty());
    }

    #[test]
    fn the_newest_segment_and_unknown_coverage_are_never_pruned() {
        let lone = segment(Some(&[1]), 2);
        assert!(superseded(None, &bm(&[5]), &[lone]).is_empty());
        let unknown = segment(None, 1);
        let newer = segment(Some(&[1]), 9);
        assert!(superseded(None, &bm(&[1]), &[unknown, newer]).is_empty());
    }

    #[test]
    fn without_history_direct_overlap_decides_and_pruning_cascades() {
        let a = segment(Some(&[1, 2]), 1);
        let b = segment(Some(&[1]), 2);
        let c = segment(Some(&[1, 2, 3]), 3);
        let live = bm(&[1, 2, 3]);
        let mut pruned = superseded(None, &live, &[a.clone(), b.clone(), c]);
        pruned.sort();
        let mut want = vec![a.uuid, b.uuid];
        want.sort();
        assert_eq!(pruned, want);
        // An older segment with a live fragment nobody newer covers stays.
        let keep = segment(Some(&[7]), 1);
        assert!(superseded(None, &bm(&[1, 7]), &[keep, b]).is_empty());
    }
}
