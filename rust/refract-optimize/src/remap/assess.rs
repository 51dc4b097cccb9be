//! Eligibility: may a segment be rewritten onto current addresses?
//!
//! A segment is eligible when its provenance (stored fragments, plus the
//! sources recovered for a legacy projected bitmap) contains every source of
//! every transition its rows cross, hop after hop. A stable-partition
//! destination may hold rows of every source, so only a segment holding every
//! source contribution can claim it; a partially covering segment is left
//! unchanged and keeps translating at query time.

use refract_reader::coverage::SegmentPlan;
use refract_reader::history::FriHistory;
use refract_table::IndexMetadata;
use roaring::RoaringBitmap;

use super::lineage_reach::{contains, recover_provenance, walk};
use super::report::{SkipReason, UnchangedReason};

/// What to do with one segment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Rewrite it.
    Remap(Eligible),
    /// It translates but cannot be rewritten.
    Skip(SkipReason, String),
    /// Leave it.
    Unchanged(UnchangedReason, String),
}

/// The scope of an eligible segment's rewrite.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Eligible {
    /// Fragments whose addresses the segment's files may hold.
    pub provenance: RoaringBitmap,
    /// Fragments whose rows the segment returns (claims plus recovered sources).
    pub owned: RoaringBitmap,
    /// Fragments claimed by sibling segments (paths entering them are dropped).
    pub others_claimed: RoaringBitmap,
    /// The restamped coverage: live fragments it serves.
    pub coverage: RoaringBitmap,
    /// Transitions crossed.
    pub transitions: usize,
    /// True when the stored bitmap was a legacy projection.
    pub recovered: bool,
}

/// Decides for `meta`, whose derived plan is `plan`; `claimed` holds every
/// fragment claimed by a segment of the same index.
pub(crate) fn assess(
    history: &FriHistory,
    meta: &IndexMetadata,
    plan: &SegmentPlan,
    claimed: &RoaringBitmap,
) -> Decision {
    let Some(stored) = &meta.fragment_bitmap else {
        return Decision::Skip(
            SkipReason::UnknownCoverage,
            "the segment has no stored fragment bitmap; rebuild the index".to_string(),
        );
    };
    if history.has_unsupported_transitions() {
        return Decision::Skip(
            SkipReason::UnsupportedHistory,
            "the FRI history holds transitions this client cannot read; upgrade Refract"
                .to_string(),
        );
    }
    let provenance = recover_provenance(history, stored, meta.dataset_version);
    let recovered = &provenance - stored;
    let owned = &plan.owned | &recovered;
    let others_claimed = claimed - &owned;
    let reach = walk(history, &provenance, &others_claimed);
    if reach.crossed.is_empty() {
        return Decision::Unchanged(
            UnchangedReason::CaughtUp,
            "no recorded transition moves its rows".to_string(),
        );
    }
    if let Some(first) = reach.partial.first() {
        let missing: Vec<u64> = history
            .node(*first)
            .map(|node| {
                node.sources
                    .iter()
                    .copied()
                    .filter(|s| !contains(&reach.reached, *s))
                    .collect()
            })
            .unwrap_or_default();
        return Decision::Unchanged(
            UnchangedReason::PartialCoverage,
            format!(
                "{} of the {} transitions it crosses have sources it does not cover (first: \
                 fragments {missing:?}); it keeps translating until the index is rebuilt",
                reach.partial.len(),
                reach.crossed.len()
            ),
        );
    }
    if plan.coverage.is_empty() {
        return Decision::Unchanged(
            UnchangedReason::NoLiveCoverage,
            "none of its rows reaches a live fragment it serves".to_string(),
        );
    }
    Decision::Remap(Eligible {
        provenance,
        owned,
        others_claimed,
        coverage: plan.coverage.clone(),
        transitions: reach.crossed.len(),
        recovered: !recovered.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remap::lineage_reach::tests::{bm, history, legacy_history, partition};
    use refract_reader::coverage::Disposition;
    use uuid::Uuid;

    fn meta(stored: Option<&[u32]>, version: u64) -> IndexMetadata {
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

    fn plan(owned: &[u32], coverage: &[u32]) -> SegmentPlan {
        SegmentPlan {
            coverage: bm(coverage),
            owned: bm(owned),
            disposition: Disposition::Translate,
            hops: 1,
        }
    }

    #[test]
    fn full_coverage_is_eligible_with_the_derived_coverage() {
        let h = history(vec![
            partition(&[1, 2], &[3, 4]),
            partition(&[3, 4], &[5, 6]),
        ]);
        let m = meta(Some(&[1, 2]), 2);
        let decision = assess(&h, &m, &plan(&[1, 2], &[5, 6]), &bm(&[1, 2]));
        let Decision::Remap(e) = decision else {
            panic!("{decision:?}")
        };
        assert_eq!(e.coverage, bm(&[5, 6]));
        assert_eq!(e.transitions, 2);
        assert!(!e.recovered);
        assert_eq!(e.provenance, bm(&[1, 2]));
    }

    #[test]
    fn partial_coverage_is_left_translating() {
        let h = history(vec![partition(&[1, 2], &[3])]);
        let a = meta(Some(&[1]), 2);
        let decision = assess(&h, &a, &plan(&[1], &[3]), &bm(&[1, 2]));
        assert!(
            matches!(&decision, Decision::Unchanged(UnchangedReason::PartialCoverage, m) if m.contains("[2]")),
            "{decision:?}"
        );
    }

    #[test]
    fn unknown_coverage_and_unrelated_segments() {
        let h = history(vec![partition(&[1, 2], &[3])]);
        let none = meta(None, 2);
        assert!(matches!(
            assess(&h, &none, &plan(&[], &[]), &RoaringBitmap::new()),
            Decision::Skip(SkipReason::UnknownCoverage, _)
        ));
        let other = meta(Some(&[9]), 2);
        assert!(matches!(
            assess(&h, &other, &plan(&[9], &[9]), &bm(&[9])),
            Decision::Unchanged(UnchangedReason::CaughtUp, _)
        ));
    }

    #[test]
    fn superseded_segments_have_no_live_coverage() {
        // A newer sibling directly covers the only destination.
        let h = history(vec![partition(&[1, 2], &[3])]);
        let old = meta(Some(&[1, 2]), 2);
        let decision = assess(&h, &old, &plan(&[1, 2], &[]), &bm(&[1, 2, 3]));
        assert!(
            matches!(
                decision,
                Decision::Unchanged(UnchangedReason::NoLiveCoverage, _)
            ),
            "the claimed destination stops the walk: {decision:?}"
        );
    }

    #[test]
    fn legacy_projection_is_recovered_and_eligible() {
        let h = legacy_history(&[(&[1, 2], &[3], 5)]);
        let projected = meta(Some(&[3]), 4);
        let decision = assess(&h, &projected, &plan(&[3], &[3]), &bm(&[3]));
        let Decision::Remap(e) = decision else {
            panic!("{decision:?}")
        };
        assert!(e.recovered);
        assert_eq!(e.provenance, bm(&[1, 2, 3]));
        assert_eq!(e.owned, bm(&[1, 2, 3]));
        assert!(e.others_claimed.is_empty());
    }
}
