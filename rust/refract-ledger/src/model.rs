//! The typed, validated in-memory model of the ledger's records.
//!
//! A [`TransitionRecord`] can only be obtained through validation (decoding or
//! [`TransitionRecord::new`]), so holders can rely on its invariants: valid
//! digests, row conservation, a mapping consistent with the digests and a
//! fingerprint that matches the content.

use refract_core::checksum::FileChecksum;
use refract_core::Result;
use roaring::RoaringTreemap;
use uuid::Uuid;

use crate::bitmap;
use crate::fingerprint::{fingerprint, Fingerprint};
use crate::validate;
use crate::violation::{Checked, Origin};

pub use crate::proto::FragmentDigest;

/// Construction and row arithmetic for Lance's [`FragmentDigest`] message.
pub trait FragmentDigestExt {
    /// A digest of fragment `id` with `physical_rows` rows of which
    /// `num_deleted_rows` are deleted.
    fn new(id: u64, physical_rows: u64, num_deleted_rows: u64) -> Self;

    /// Rows that are not deleted (0 when the digest is inconsistent).
    fn live_rows(&self) -> u64;
}

impl FragmentDigestExt for FragmentDigest {
    fn new(id: u64, physical_rows: u64, num_deleted_rows: u64) -> Self {
        Self {
            id,
            physical_rows,
            num_deleted_rows,
        }
    }

    fn live_rows(&self) -> u64 {
        self.physical_rows.saturating_sub(self.num_deleted_rows)
    }
}

/// How a transition maps source addresses onto destination addresses.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapping {
    /// Order-preserving compaction: the k-th surviving source row (sources in
    /// order, offsets ascending) becomes the k-th destination row.
    OrderedCompaction {
        /// Surviving source row addresses (`fragment_id << 32 | offset`).
        surviving: RoaringTreemap,
    },
    /// Stable partition: labels per source row in `_fri/<map_id>/stable_partition.lance`.
    StablePartition {
        /// Names the row-map directory `_fri/<map_id>/`.
        map_id: Uuid,
        /// Size of the row-map file in bytes.
        map_size_bytes: u64,
        /// Block checksums of the row-map file (absent before checksums).
        map_checksum: Option<FileChecksum>,
    },
}

impl Mapping {
    /// Short name for messages and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Mapping::OrderedCompaction { .. } => "ordered_compaction",
            Mapping::StablePartition { .. } => "stable_partition",
        }
    }
}

/// One validated rewrite: ordered sources become ordered destinations.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionRecord {
    sources: Vec<FragmentDigest>,
    destinations: Vec<FragmentDigest>,
    mapping: Mapping,
    fingerprint: Fingerprint,
    dataset_version: Option<u64>,
}

impl TransitionRecord {
    /// Validates a writer's transition and computes its fingerprint.
    ///
    /// # Errors
    /// InvalidInput for bad digests, rows not conserved, a bitmap that does not
    /// match the sources, a stable partition with no or more than
    /// [`crate::MAX_PARTITION_DESTINATIONS`] destinations, or an empty row map.
    pub fn new(
        sources: Vec<FragmentDigest>,
        destinations: Vec<FragmentDigest>,
        mapping: Mapping,
    ) -> Result<Self> {
        Self::checked(sources, destinations, mapping, None)
            .map_err(|v| v.into_error(Origin::Caller))
    }

    /// Validates content from any origin.
    pub(crate) fn checked(
        sources: Vec<FragmentDigest>,
        destinations: Vec<FragmentDigest>,
        mapping: Mapping,
        dataset_version: Option<u64>,
    ) -> Checked<Self> {
        validate::check_sides(&sources, &destinations)?;
        let mapping = match mapping {
            Mapping::OrderedCompaction { surviving } => {
                bitmap::check_surviving(&surviving, &sources)?;
                Mapping::OrderedCompaction {
                    surviving: bitmap::canonical(&surviving),
                }
            }
            partition @ Mapping::StablePartition { .. } => partition,
        };
        validate::check_mapping(&mapping, &destinations)?;
        Ok(Self::from_validated(
            sources,
            destinations,
            mapping,
            dataset_version,
        ))
    }

    /// Builds a record from content that already passed validation, with a
    /// canonical bitmap.
    pub(crate) fn from_validated(
        sources: Vec<FragmentDigest>,
        destinations: Vec<FragmentDigest>,
        mapping: Mapping,
        dataset_version: Option<u64>,
    ) -> Self {
        let fingerprint = fingerprint(&sources, &destinations, &mapping);
        Self {
            sources,
            destinations,
            mapping,
            fingerprint,
            dataset_version,
        }
    }

    /// Rewritten fragments, in scan order.
    pub fn sources(&self) -> &[FragmentDigest] {
        &self.sources
    }

    /// Written fragments, in output (or label) order.
    pub fn destinations(&self) -> &[FragmentDigest] {
        &self.destinations
    }

    /// The mapping from source to destination addresses.
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// blake3 of the canonical encoding of sources, destinations and mapping
    /// (not the dataset version). Identical for a lifted legacy group and the
    /// equivalent version-1 transition.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The dataset version a legacy (version 0) group was planned against;
    /// `None` for a version-1 transition, which Lance records without one.
    pub fn dataset_version(&self) -> Option<u64> {
        self.dataset_version
    }

    /// Sets the row map's checksum of a stable partition (no-op otherwise);
    /// the fingerprint does not cover it.
    pub(crate) fn set_map_checksum(&mut self, checksum: FileChecksum) {
        if let Mapping::StablePartition { map_checksum, .. } = &mut self.mapping {
            *map_checksum = Some(checksum);
        }
    }

    /// True when `fragment_id` is one of the sources.
    pub fn consumes(&self, fragment_id: u64) -> bool {
        self.sources.iter().any(|d| d.id == fragment_id)
    }

    /// True when `fragment_id` is one of the destinations.
    pub fn produces(&self, fragment_id: u64) -> bool {
        self.destinations.iter().any(|d| d.id == fragment_id)
    }
}

/// A legacy (version 0) reuse version: the groups of one deferred compaction.
///
/// Every group is held as an ordered-compaction [`TransitionRecord`] carrying
/// the version's dataset version, so legacy and tagged history share one
/// lineage and one fingerprint space.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyVersion {
    dataset_version: u64,
    groups: Vec<TransitionRecord>,
}

impl LegacyVersion {
    /// Built by decoding only: every group is an ordered compaction carrying
    /// `dataset_version`.
    pub(crate) fn from_groups(dataset_version: u64, groups: Vec<TransitionRecord>) -> Self {
        Self {
            dataset_version,
            groups,
        }
    }

    /// The dataset version the compaction was planned against.
    pub fn dataset_version(&self) -> u64 {
        self.dataset_version
    }

    /// The groups, each as an ordered-compaction transition.
    pub fn groups(&self) -> &[TransitionRecord] {
        &self.groups
    }

    /// Keeps the groups for which `keep` returns true.
    pub(crate) fn retain_groups(&mut self, keep: impl FnMut(&TransitionRecord) -> bool) {
        self.groups.retain(keep);
    }
}

/// Lifts a legacy version to version-1 transitions: one ordered-compaction
/// transition per group, in group order, each with the version's dataset
/// version. Their fingerprints equal those of the equivalent tagged
/// transitions.
pub fn lift_legacy(version: &LegacyVersion) -> Vec<TransitionRecord> {
    version.groups.clone()
}
