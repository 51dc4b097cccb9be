//! Compaction options and their validation.

use refract_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// Default number of live rows a compacted fragment aims for.
pub const DEFAULT_TARGET_ROWS_PER_FRAGMENT: u64 = 1_048_576;
/// Default number of rows per row group written by the executor.
pub const DEFAULT_MAX_ROWS_PER_GROUP: u64 = 1024;
/// Default deleted fraction above which a fragment rewrites itself.
pub const DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD: f64 = 0.1;

/// Default smallest source fragment whose pages are copied rather than
/// re-encoded (about one full page of a narrow column).
pub const DEFAULT_BINARY_COPY_MIN_SOURCE_ROWS: u64 = 65_536;

/// Options of one compaction run. Validate with [`CompactionOptions::validate`];
/// the planner does so itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionOptions {
    /// Live rows a compacted fragment aims for; drives candidacy and output sizing.
    pub target_rows_per_fragment: u64,
    /// Rows per row group in written files (executor only).
    pub max_rows_per_group: u64,
    /// Upper bound on the estimated bytes of one output fragment.
    pub max_bytes_per_file: Option<u64>,
    /// Whether fragments with many deletions rewrite themselves.
    pub materialize_deletions: bool,
    /// Deleted fraction (strictly) above which a fragment rewrites itself, in `[0, 1]`.
    pub materialize_deletions_threshold: f64,
    /// Tasks executed in parallel by `compact_files` (`None`: number of CPUs).
    pub num_threads: Option<usize>,
    /// Rows per batch read by the executor (`None`: reader default).
    pub batch_size: Option<usize>,
    /// Record the rewrite in the FRI ledger instead of rewriting indices inline.
    pub defer_index_remap: bool,
    /// Cumulative cap on source fragments per run.
    pub max_source_fragments: Option<u64>,
    /// Cumulative cap on source live rows per run.
    pub max_source_rows: Option<u64>,
    /// Cumulative cap on source bytes per run.
    pub max_source_bytes: Option<u64>,
    /// Fragments that are never rewritten; they also break candidate runs.
    /// Ids name fragments of the version planned: a commit that replaces a run
    /// before one relabels it (same files, a higher id, as Lance keeps the
    /// list sorted by id), so carry the ids to the next run with
    /// [`follow_fragment_ids`](crate::compaction::follow_fragment_ids).
    pub excluded_fragment_ids: Vec<u64>,
    /// Join runs of fragments without deletions by copying their encoded
    /// pages instead of decoding and re-encoding the rows (executor only; the
    /// output keeps the sources' page sizes). Tasks that cannot be copied
    /// (deletions, several data files per fragment, another file version or
    /// schema) are re-encoded either way.
    pub binary_copy: bool,
    /// Pages are copied only when every source fragment has at least this
    /// many rows: copying keeps page sizes, and a big file of the tiny pages
    /// of many small fragments scans several times slower than a re-encoded one.
    pub binary_copy_min_source_rows: u64,
}

impl Default for CompactionOptions {
    fn default() -> Self {
        Self {
            target_rows_per_fragment: DEFAULT_TARGET_ROWS_PER_FRAGMENT,
            max_rows_per_group: DEFAULT_MAX_ROWS_PER_GROUP,
            max_bytes_per_file: None,
            materialize_deletions: true,
            materialize_deletions_threshold: DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD,
            num_threads: None,
            batch_size: None,
            defer_index_remap: false,
            max_source_fragments: None,
            max_source_rows: None,
            max_source_bytes: None,
            excluded_fragment_ids: Vec::new(),
            binary_copy: true,
            binary_copy_min_source_rows: DEFAULT_BINARY_COPY_MIN_SOURCE_ROWS,
        }
    }
}

impl CompactionOptions {
    /// Rejects values that make compaction meaningless.
    ///
    /// # Errors
    /// InvalidInput naming the option and its valid range.
    pub fn validate(&self) -> Result<()> {
        positive(
            "target_rows_per_fragment",
            Some(self.target_rows_per_fragment),
        )?;
        positive("max_rows_per_group", Some(self.max_rows_per_group))?;
        positive("max_bytes_per_file", self.max_bytes_per_file)?;
        positive("max_source_fragments", self.max_source_fragments)?;
        positive("max_source_rows", self.max_source_rows)?;
        positive("max_source_bytes", self.max_source_bytes)?;
        positive("num_threads", self.num_threads.map(|n| n as u64))?;
        positive("batch_size", self.batch_size.map(|n| n as u64))?;
        let threshold = self.materialize_deletions_threshold;
        if !(0.0..=1.0).contains(&threshold) {
            return Err(Error::invalid_input(format!(
                "CompactionOptions::materialize_deletions_threshold must be within [0, 1], got {threshold}"
            )));
        }
        Ok(())
    }

    /// True when any source budget is set.
    pub fn has_source_budget(&self) -> bool {
        self.max_source_fragments.is_some()
            || self.max_source_rows.is_some()
            || self.max_source_bytes.is_some()
    }
}

/// `Some(0)` is rejected: "no limit" is spelled `None`.
fn positive(name: &str, value: Option<u64>) -> Result<()> {
    match value {
        Some(0) => Err(Error::invalid_input(format!(
            "CompactionOptions::{name} must be greater than 0 (use None for no limit)"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn set(f: impl FnOnce(&mut CompactionOptions)) -> CompactionOptions {
        let mut options = CompactionOptions::default();
        f(&mut options);
        options
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let options = CompactionOptions::default();
        assert!(options.validate().is_ok());
        assert_eq!(options.target_rows_per_fragment, 1_048_576);
        assert_eq!(options.max_rows_per_group, 1024);
        assert!(options.materialize_deletions);
        assert_eq!(options.materialize_deletions_threshold, 0.1);
        assert!(!options.has_source_budget());
    }

    #[rstest]
    #[case::target(set(|o| o.target_rows_per_fragment = 0), "target_rows_per_fragment")]
    #[case::group(set(|o| o.max_rows_per_group = 0), "max_rows_per_group")]
    #[case::file_bytes(set(|o| o.max_bytes_per_file = Some(0)), "max_bytes_per_file")]
    #[case::fragments(set(|o| o.max_source_fragments = Some(0)), "max_source_fragments")]
    #[case::rows(set(|o| o.max_source_rows = Some(0)), "max_source_rows")]
    #[case::bytes(set(|o| o.max_source_bytes = Some(0)), "max_source_bytes")]
    #[case::threads(set(|o| o.num_threads = Some(0)), "num_threads")]
    #[case::batch(set(|o| o.batch_size = Some(0)), "batch_size")]
    #[case::negative(set(|o| o.materialize_deletions_threshold = -0.01), "materialize_deletions_threshold")]
    #[case::above_one(set(|o| o.materialize_deletions_threshold = 1.5), "materialize_deletions_threshold")]
    #[case::nan(set(|o| o.materialize_deletions_threshold = f64::NAN), "materialize_deletions_threshold")]
    #[case::infinite(set(|o| o.materialize_deletions_threshold = f64::INFINITY), "materialize_deletions_threshold")]
    fn bad_value_is_invalid_input_naming_the_option(
        #[case] options: CompactionOptions,
        #[case] name: &str,
    ) {
        match options.validate() {
            Err(Error::InvalidInput { message }) => {
                assert!(message.contains(name), "{message} should name {name}")
            }
            other => panic!("expected InvalidInput naming {name}, got {other:?}"),
        }
    }

    #[rstest]
    #[case(set(|o| o.materialize_deletions_threshold = 0.0))]
    #[case(set(|o| o.materialize_deletions_threshold = 1.0))]
    #[case(set(|o| { o.max_source_fragments = Some(1); o.max_source_rows = Some(1); o.max_source_bytes = Some(1) }))]
    #[case(set(|o| { o.num_threads = Some(1); o.batch_size = Some(1); o.max_bytes_per_file = Some(1) }))]
    fn boundary_values_are_accepted(#[case] options: CompactionOptions) {
        assert!(options.validate().is_ok());
    }

    #[test]
    fn options_round_trip_through_json() {
        let options = set(|o| {
            o.max_source_rows = Some(7);
            o.excluded_fragment_ids = vec![3, 1];
        });
        let json = serde_json::to_string(&options).unwrap();
        let back: CompactionOptions = serde_json::from_str(&json).unwrap();
        assert_eq!(back, options);
        let partial: CompactionOptions =
            serde_json::from_str(r#"{"max_source_fragments":2}"#).unwrap();
        assert_eq!(partial.max_source_fragments, Some(2));
        assert_eq!(
            partial.target_rows_per_fragment,
            DEFAULT_TARGET_ROWS_PER_FRAGMENT
        );
    }
}
