//! Fragment statistics and candidacy: which fragments a run may rewrite.

use refract_core::{Error, Result};
use serde::{Deserialize, Serialize};

use super::options::CompactionOptions;

/// What the planner needs to know about one fragment, in manifest order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FragmentStats {
    /// Fragment id.
    pub id: u64,
    /// Rows stored in the data files, deleted ones included.
    pub physical_rows: u64,
    /// Rows not deleted.
    pub live_rows: u64,
    /// Bytes of the data files (what reading the fragment costs).
    pub bytes: u64,
    /// Opaque key of the set of index segments covering the fragment (0 = not
    /// indexed). Fragments with different keys never share a task.
    pub coverage_key: u64,
}

impl FragmentStats {
    /// Estimated bytes of the live rows: `bytes * live / physical`.
    pub fn estimated_live_bytes(&self) -> u64 {
        if self.physical_rows == 0 {
            return 0;
        }
        let estimate =
            u128::from(self.bytes) * u128::from(self.live_rows) / u128::from(self.physical_rows);
        // live <= physical (validated), so the estimate is at most `bytes`.
        u64::try_from(estimate).unwrap_or(self.bytes)
    }
}

/// Why a fragment may be rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidacy {
    /// Not rewritten: full, or excluded.
    None,
    /// Deleted fraction over the threshold: rewrites even alone.
    Itself,
    /// Below target: rewrites together with adjacent candidates.
    WithNeighbors,
}

/// The candidacy rules of one run.
#[derive(Debug, Clone)]
pub struct CandidateRules {
    target: u64,
    /// `Some(threshold)` when deletions are materialized.
    deletion_threshold: Option<f64>,
    /// `Some(max_bytes_per_file)` when outputs are capped by bytes.
    max_bytes_per_file: Option<u64>,
    /// Sorted, deduplicated excluded ids.
    excluded: Vec<u64>,
}

impl CandidateRules {
    /// Rules for `options` (assumed validated).
    pub fn new(options: &CompactionOptions) -> Self {
        let mut excluded = options.excluded_fragment_ids.clone();
        excluded.sort_unstable();
        excluded.dedup();
        Self {
            target: options.target_rows_per_fragment,
            deletion_threshold: options
                .materialize_deletions
                .then_some(options.materialize_deletions_threshold),
            max_bytes_per_file: options.max_bytes_per_file,
            excluded,
        }
    }

    /// Classifies one fragment.
    pub fn candidacy(&self, fragment: &FragmentStats) -> Candidacy {
        if self.excluded.binary_search(&fragment.id).is_ok() {
            Candidacy::None
        } else if self.has_deletions_to_materialize(fragment) {
            Candidacy::Itself
        } else if self.is_small(fragment) {
            Candidacy::WithNeighbors
        } else {
            Candidacy::None
        }
    }

    /// Deleted fraction strictly above the threshold (and materialization on).
    pub fn has_deletions_to_materialize(&self, fragment: &FragmentStats) -> bool {
        let Some(threshold) = self.deletion_threshold else {
            return false;
        };
        let deleted = fragment.physical_rows.saturating_sub(fragment.live_rows);
        deleted > 0 && deleted as f64 > threshold * fragment.physical_rows as f64
    }

    /// Below target by rows, and (with a byte cap) below a quarter of the cap by
    /// bytes. Outputs split by the byte cap are never below a quarter of it (see
    /// `balance`), so they do not become candidates again and runs converge.
    pub fn is_small(&self, fragment: &FragmentStats) -> bool {
        fragment.live_rows < self.target && !self.is_byte_full(fragment)
    }

    fn is_byte_full(&self, fragment: &FragmentStats) -> bool {
        self.max_bytes_per_file
            .is_some_and(|cap| u128::from(fragment.bytes) * 4 >= u128::from(cap))
    }
}

/// Rejects statistics that cannot describe a fragment.
pub fn validate_fragments(fragments: &[FragmentStats]) -> Result<()> {
    match fragments.iter().find(|f| f.live_rows > f.physical_rows) {
        Some(bad) => Err(Error::invalid_input(format!(
            "fragment {}: live_rows {} exceeds physical_rows {}",
            bad.id, bad.live_rows, bad.physical_rows
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn fragment(id: u64, physical: u64, live: u64, bytes: u64) -> FragmentStats {
        FragmentStats {
            id,
            physical_rows: physical,
            live_rows: live,
            bytes,
            coverage_key: 0,
        }
    }

    fn rules(f: impl FnOnce(&mut CompactionOptions)) -> CandidateRules {
        let mut options = CompactionOptions {
            target_rows_per_fragment: 100,
            ..Default::default()
        };
        f(&mut options);
        CandidateRules::new(&options)
    }

    #[rstest]
    #[case::full(fragment(1, 100, 100, 0), Candidacy::None)]
    #[case::small(fragment(1, 99, 99, 0), Candidacy::WithNeighbors)]
    #[case::deleted_at_threshold(fragment(1, 100, 90, 0), Candidacy::WithNeighbors)]
    #[case::deleted_over_threshold(fragment(1, 100, 89, 0), Candidacy::Itself)]
    #[case::big_deleted_over_threshold(fragment(1, 1000, 800, 0), Candidacy::Itself)]
    #[case::big_deleted_under_threshold(fragment(1, 1000, 950, 0), Candidacy::None)]
    #[case::all_deleted(fragment(1, 10, 0, 0), Candidacy::Itself)]
    #[case::empty(fragment(1, 0, 0, 0), Candidacy::WithNeighbors)]
    fn default_threshold(#[case] f: FragmentStats, #[case] expected: Candidacy) {
        assert_eq!(rules(|_| {}).candidacy(&f), expected);
    }

    #[test]
    fn live_rows_not_physical_rows_decide_smallness() {
        // 150 physical, 95 live (deleted fraction 0.37 but materialization off).
        let f = fragment(1, 150, 95, 0);
        assert_eq!(
            rules(|o| o.materialize_deletions = false).candidacy(&f),
            Candidacy::WithNeighbors
        );
    }

    #[test]
    fn threshold_zero_materializes_any_deletion_and_one_none() {
        let f = fragment(1, 1000, 999, 0);
        assert_eq!(
            rules(|o| o.materialize_deletions_threshold = 0.0).candidacy(&f),
            Candidacy::Itself
        );
        let g = fragment(1, 1000, 0, 0);
        assert_eq!(
            rules(|o| o.materialize_deletions_threshold = 1.0).candidacy(&g),
            Candidacy::WithNeighbors
        );
    }

    #[test]
    fn excluded_is_never_a_candidate() {
        let r = rules(|o| o.excluded_fragment_ids = vec![7, 7, u64::MAX]);
        assert_eq!(r.candidacy(&fragment(7, 100, 1, 0)), Candidacy::None);
        assert_eq!(
            r.candidacy(&fragment(8, 10, 10, 0)),
            Candidacy::WithNeighbors
        );
    }

    #[rstest]
    #[case::quarter(250, Candidacy::None)]
    #[case::below_quarter(249, Candidacy::WithNeighbors)]
    fn byte_full_fragments_are_not_small(#[case] bytes: u64, #[case] expected: Candidacy) {
        let r = rules(|o| o.max_bytes_per_file = Some(1000));
        assert_eq!(r.candidacy(&fragment(1, 10, 10, bytes)), expected);
    }

    #[test]
    fn live_above_physical_is_invalid_input() {
        let err = validate_fragments(&[fragment(4, 1, 2, 0)]).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { ref message } if message.contains("fragment 4"))
        );
    }

    #[test]
    fn estimated_live_bytes_scale_with_live_fraction() {
        assert_eq!(fragment(1, 100, 25, 1000).estimated_live_bytes(), 250);
        assert_eq!(fragment(1, 0, 0, 1000).estimated_live_bytes(), 0);
    }
}
