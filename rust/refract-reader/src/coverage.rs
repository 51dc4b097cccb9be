//! Coverage planning for the segments of one logical index over a version-1
//! history.
//!
//! Rules (all in memory; persisted metadata is never changed):
//!
//! * **Claims.** Every fragment named by some segment's stored bitmap is
//!   *claimed* by the newest such segment (higher `dataset_version`, then later
//!   in the manifest). Only the claimant's rows of that fragment count: an
//!   older segment that also stored it, or a path translated into it, would
//!   return those rows a second time.
//! * **Direct coverage wins.** A live fragment claimed by a usable segment is
//!   served by that segment alone.
//! * **Lineage.** An unclaimed live fragment is walked back to its producer
//!   transition. A transition resolves only when *every* source resolves — a
//!   claimed source to its claimant, an unclaimed one through its own
//!   producer — to the union of the contributors. Every contributor serves the
//!   destination (each returns only the rows it holds). Failing to resolve one
//!   destination never affects another.
//! * **Newer segments take over.** The backward walk stops at the first
//!   claimed fragment, so once a newer segment directly covers an
//!   intermediate or destination fragment, older segments no longer
//!   contribute along that path; translation drops such paths too.
//! * **Exclusions.** A segment without a stored bitmap (unknown coverage) is
//!   excluded. When the history holds unsupported transitions, a segment
//!   whose stored coverage is not entirely live is excluded: a dropped
//!   transition may have consumed any of its fragments, so neither identity
//!   nor translation can be proven. Excluded segments still claim their
//!   fragments (conservatively, nothing is derived through them), so those
//!   rows are scanned. A segment left with empty coverage is dropped too.
//! * **Identity** (no translator) only for a segment whose stored fragments
//!   are all live, untouched by lineage, claimed by itself, and only when the
//!   history has no unsupported transitions. Everything else translates.

use std::collections::BTreeSet;

use refract_table::IndexMetadata;
use roaring::RoaringBitmap;

use crate::history::FriHistory;

/// Why a segment serves nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exclusion {
    /// No stored fragment bitmap: coverage is unknown.
    UnknownCoverage,
    /// The history has unsupported transitions and the segment's stored
    /// coverage is not entirely live.
    UnsupportedHistory,
    /// No live fragment derives from this segment (superseded, deleted, or a
    /// destination whose other sources are uncovered).
    NoDerivedCoverage,
}

/// How a segment's stored addresses reach current ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Stored addresses are current; no translation.
    Identity,
    /// Addresses go through the lineage (and the claim and coverage checks).
    Translate,
    /// The segment serves nothing; its fragments are scanned.
    Excluded(Exclusion),
}

/// The plan of one segment.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentPlan {
    /// Live fragments it serves (empty when excluded).
    pub coverage: RoaringBitmap,
    /// Fragments of its stored bitmap that it claims (its rows there count).
    pub owned: RoaringBitmap,
    /// Identity, translate or excluded.
    pub disposition: Disposition,
    /// Most transitions between a stored fragment and a served one.
    pub hops: usize,
}

/// The plan of one logical index (segments in the order given).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexPlan {
    /// Per segment, same order as the input.
    pub segments: Vec<SegmentPlan>,
    /// Every claimed fragment (a translated path entering one is dropped).
    pub claimed: RoaringBitmap,
}

/// Plans the segments of one logical index against `live` fragments.
pub fn plan_index(
    history: &FriHistory,
    live: &RoaringBitmap,
    segments: &[IndexMetadata],
) -> IndexPlan {
    let unsupported = history.has_unsupported_transitions();
    let excluded: Vec<Option<Exclusion>> = segments
        .iter()
        .map(|meta| match &meta.fragment_bitmap {
            None => Some(Exclusion::UnknownCoverage),
            Some(stored) if unsupported && !stored.is_subset(live) => {
                Some(Exclusion::UnsupportedHistory)
            }
            Some(_) => None,
        })
        .collect();
    let owned = claims(segments);
    let mut claimed = RoaringBitmap::new();
    for bitmap in &owned {
        claimed |= bitmap;
    }
    let claimant = |fragment: u64| -> Option<usize> {
        let id = u32::try_from(fragment).ok()?;
        if !claimed.contains(id) {
            return None;
        }
        owned.iter().position(|bitmap| bitmap.contains(id))
    };
    let usable = |segment: usize| excluded.get(segment).is_some_and(Option::is_none);
    let resolved = resolve_transitions(history, &claimant, &usable);

    let mut coverage = vec![RoaringBitmap::new(); segments.len()];
    let mut hops = vec![0usize; segments.len()];
    for id in live {
        let fragment = u64::from(id);
        let owners = match claimant(fragment) {
            Some(segment) if usable(segment) => Some((BTreeSet::from([segment]), 0)),
            Some(_) => None,
            None => history
                .producer_of(fragment)
                .and_then(|t| resolved.get(t).cloned().flatten()),
        };
        if let Some((owners, depth)) = owners {
            for owner in owners {
                if let (Some(bitmap), Some(h)) = (coverage.get_mut(owner), hops.get_mut(owner)) {
                    bitmap.insert(id);
                    *h = (*h).max(depth);
                }
            }
        }
    }

    let plans = segments
        .iter()
        .enumerate()
        .map(|(i, meta)| {
            let cov = coverage.get(i).cloned().unwrap_or_default();
            let own = owned.get(i).cloned().unwrap_or_default();
            let disposition = match excluded.get(i).copied().flatten() {
                Some(reason) => Disposition::Excluded(reason),
                None if cov.is_empty() => Disposition::Excluded(Exclusion::NoDerivedCoverage),
                None => {
                    let stored = meta.fragment_bitmap.as_ref();
                    let identity = !unsupported
                        && stored.is_some_and(|s| {
                            s.is_subset(live)
                                && *s == own
                                && *s == cov
                                && !s.iter().any(|f| history.touches(u64::from(f)))
                        });
                    if identity {
                        Disposition::Identity
                    } else {
                        Disposition::Translate
                    }
                }
            };
            let served = !matches!(disposition, Disposition::Excluded(_));
            SegmentPlan {
                coverage: if served { cov } else { RoaringBitmap::new() },
                owned: own,
                disposition,
                hops: if served {
                    hops.get(i).copied().unwrap_or(0)
                } else {
                    0
                },
            }
        })
        .collect();
    IndexPlan {
        segments: plans,
        claimed,
    }
}

/// Per segment, the stored fragments it claims: newest segment first.
fn claims(segments: &[IndexMetadata]) -> Vec<RoaringBitmap> {
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|i| {
        let version = segments.get(*i).map_or(0, |m| m.dataset_version);
        (std::cmp::Reverse(version), std::cmp::Reverse(*i))
    });
    let mut taken = RoaringBitmap::new();
    let mut owned = vec![RoaringBitmap::new(); segments.len()];
    for i in order {
        let (Some(meta), Some(slot)) = (segments.get(i), owned.get_mut(i)) else {
            continue;
        };
        if let Some(stored) = &meta.fragment_bitmap {
            let mine = stored - &taken;
            taken |= &mine;
            *slot = mine;
        }
    }
    owned
}

/// Contributors and depth per transition (lineage order, so every producer
/// is resolved before its consumers): `None` when some source is uncovered.
type Resolved = Vec<Option<(BTreeSet<usize>, usize)>>;

fn resolve_transitions(
    history: &FriHistory,
    claimant: &dyn Fn(u64) -> Option<usize>,
    usable: &dyn Fn(usize) -> bool,
) -> Resolved {
    let mut resolved: Resolved = Vec::with_capacity(history.nodes().len());
    for (index, node) in history.nodes().iter().enumerate() {
        let mut contributors = BTreeSet::new();
        let mut depth = 0usize;
        let mut complete = true;
        for source in &node.sources {
            let found = match claimant(*source) {
                Some(segment) if usable(segment) => Some((BTreeSet::from([segment]), 0)),
                Some(_) => None,
                // Producers come earlier in lineage order.
                None => history
                    .producer_of(*source)
                    .filter(|p| *p < index)
                    .and_then(|p| resolved.get(p).cloned().flatten()),
            };
            match found {
                Some((set, d)) => {
                    contributors.extend(set);
                    depth = depth.max(d);
                }
                None => {
                    complete = false;
                    break;
                }
            }
        }
        resolved.push(complete.then_some((contributors, depth + 1)));
    }
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;
    use refract_ledger::{FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord};
    use roaring::RoaringTreemap;
    use uuid::Uuid;

    /// An ordered compaction of `sources` (10 rows each, none deleted) into
    /// `destinations` (rows split evenly).
    fn oc(sources: &[u64], destinations: &[u64]) -> TransitionRecord {
        let total = sources.len() as u64 * 10;
        let each = total / destinations.len() as u64;
        let mut surviving = RoaringTreemap::new();
        for s in sources {
            surviving.insert_range((s << 32)..(s << 32) + 10);
        }
        TransitionRecord::new(
            sources
                .iter()
                .map(|s| FragmentDigest::new(*s, 10, 0))
                .collect(),
            destinations
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let rows = if i + 1 == destinations.len() {
                        total - each * i as u64
                    } else {
                        each
                    };
                    FragmentDigest::new(*d, rows, 0)
                })
                .collect(),
            Mapping::OrderedCompaction { surviving },
        )
        .unwrap()
    }

    fn history(records: Vec<TransitionRecord>) -> FriHistory {
        let mut ledger = Ledger::new();
        for r in records {
            ledger.push_transition(r).unwrap();
        }
        FriHistory::from_ledger(Uuid::nil(), &ledger).unwrap()
    }

    fn seg(version: u64, fragments: Option<&[u32]>) -> IndexMetadata {
        IndexMetadata {
            uuid: Uuid::new_v4(),
            name: "idx".into(),
            fields: vec!["x".into()],
            fragment_bitmap: fragments.map(|f| f.iter().copied().collect()),
            index_type: "btree".into(),
            details: vec![],
            index_version: 0,
            dataset_version: version,
            files: Vec::new(),
            lance: Default::default(),
        }
    }

    fn bitmap(ids: &[u32]) -> RoaringBitmap {
        ids.iter().copied().collect()
    }

    fn ids(b: &RoaringBitmap) -> Vec<u32> {
        b.iter().collect()
    }

    #[test]
    fn destinations_need_every_source_and_keep_their_own_resolution() {
        // {1} -> {10}; {2, 3} -> {11}; the segment covers 1 and 2 only.
        let h = history(vec![oc(&[1], &[10]), oc(&[2, 3], &[11])]);
        let plan = plan_index(&h, &bitmap(&[10, 11]), &[seg(1, Some(&[1, 2]))]);
        let s = &plan.segments[0];
        assert_eq!(ids(&s.coverage), vec![10]);
        assert_eq!(s.disposition, Disposition::Translate);
        assert_eq!(s.hops, 1);
        assert_eq!(ids(&plan.claimed), vec![1, 2]);
    }

    #[test]
    fn the_newest_segment_claims_shared_fragments() {
        let h = history(vec![oc(&[1, 2], &[10])]);
        let old = seg(1, Some(&[1, 2, 3]));
        let new = seg(2, Some(&[2, 3]));
        let plan = plan_index(&h, &bitmap(&[10, 3]), &[old, new]);
        assert_eq!(ids(&plan.segments[0].owned), vec![1]);
        assert_eq!(ids(&plan.segments[1].owned), vec![2, 3]);
        // 10 mixes rows of both; 3 is the newer one's alone.
        assert_eq!(ids(&plan.segments[0].coverage), vec![10]);
        assert_eq!(ids(&plan.segments[1].coverage), vec![3, 10]);
    }

    #[test]
    fn untouched_live_segments_take_the_identity_path() {
        let h = history(vec![oc(&[1], &[10])]);
        let plan = plan_index(&h, &bitmap(&[10, 5]), &[seg(1, Some(&[5]))]);
        assert_eq!(plan.segments[0].disposition, Disposition::Identity);
        assert_eq!(ids(&plan.segments[0].coverage), vec![5]);
    }

    #[test]
    fn unknown_coverage_is_excluded() {
        let h = history(vec![oc(&[1], &[10])]);
        let plan = plan_index(&h, &bitmap(&[10]), &[seg(1, None)]);
        assert_eq!(
            plan.segments[0].disposition,
            Disposition::Excluded(Exclusion::UnknownCoverage)
        );
        assert!(plan.segments[0].coverage.is_empty());
    }

    #[test]
    fn a_newer_claim_on_an_intermediate_cuts_older_paths() {
        // 1 -> 2 -> 3; the old segment holds 1, the new one 2.
        let h = history(vec![oc(&[1], &[2]), oc(&[2], &[3])]);
        let plan = plan_index(&h, &bitmap(&[3]), &[seg(1, Some(&[1])), seg(2, Some(&[2]))]);
        assert_eq!(
            plan.segments[0].disposition,
            Disposition::Excluded(Exclusion::NoDerivedCoverage)
        );
        assert_eq!(ids(&plan.segments[1].coverage), vec![3]);
        assert_eq!(plan.segments[1].hops, 1);
    }
}
