//! What `remap_indices` did, per segment (serializable for the CLI).

use serde::Serialize;
use uuid::Uuid;

/// Why a segment was not rewritten although it translates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The segment has no stored fragment bitmap, so what it covers is unknown.
    UnknownCoverage,
    /// The FRI history holds transitions this client cannot read.
    UnsupportedHistory,
    /// The legacy fallback of a plugin without streaming remap would exceed
    /// the materialization budget.
    OverBudget,
    /// The legacy fallback needs the row count of a fragment no longer known
    /// (neither live nor recorded in the history).
    RowsUnknown,
    /// The segment's index type is not registered in this process.
    UnknownIndexType,
    /// The type does not remap this segment's layout or index version.
    UnsupportedLayout,
}

/// Why a segment was left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnchangedReason {
    /// No transition of the history moves its rows: nothing to catch up.
    CaughtUp,
    /// It crosses a transition some of whose sources it does not cover (a
    /// stable-partition or compaction destination mixes its rows with other
    /// contributors'); it keeps translating at query time until rebuilt.
    PartialCoverage,
    /// None of its rows reaches a live fragment it serves (newer segments or
    /// deletions took over); `trim_fri` prunes it once a newer sibling covers it.
    NoLiveCoverage,
}

/// The outcome for one segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SegmentStatus {
    /// Rewritten onto current addresses and committed.
    Remapped {
        /// Uuid of the replacement segment.
        new_uuid: Uuid,
        /// Its (restamped) fragment coverage, ascending.
        coverage: Vec<u64>,
        /// Transitions its rows were translated through.
        transitions: usize,
        /// True when a legacy projected bitmap had its source provenance recovered.
        provenance_recovered: bool,
    },
    /// Translates, but could not be rewritten; it keeps its history.
    Skipped {
        /// Category.
        reason: SkipReason,
        /// Details.
        message: String,
    },
    /// Left unchanged.
    Unchanged {
        /// Category.
        reason: UnchangedReason,
        /// Details.
        message: String,
    },
}

/// One segment's line in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentRemap {
    /// Logical index name.
    pub name: String,
    /// Segment uuid (before the remap).
    pub uuid: Uuid,
    /// What happened.
    #[serde(flatten)]
    pub status: SegmentStatus,
}

/// The result of one `remap_indices` call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RemapReport {
    /// The version the decisions were derived against.
    pub read_version: u64,
    /// The version committed; `None` when nothing was remapped.
    pub committed_version: Option<u64>,
    /// One entry per user segment considered, in manifest order.
    pub segments: Vec<SegmentRemap>,
}

impl RemapReport {
    /// Segments rewritten.
    pub fn remapped(&self) -> usize {
        self.count(|s| matches!(s, SegmentStatus::Remapped { .. }))
    }

    /// Segments skipped (they translate but could not be rewritten).
    pub fn skipped(&self) -> usize {
        self.count(|s| matches!(s, SegmentStatus::Skipped { .. }))
    }

    /// Segments left unchanged with `reason`.
    pub fn unchanged(&self, reason: UnchangedReason) -> usize {
        self.count(|s| matches!(s, SegmentStatus::Unchanged { reason: r, .. } if *r == reason))
    }

    fn count(&self, f: impl Fn(&SegmentStatus) -> bool) -> usize {
        self.segments.iter().filter(|s| f(&s.status)).count()
    }
}
