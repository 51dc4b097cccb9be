//! The ledger: validated legacy versions and transitions, their lineage, and
//! the writer operations (push, remove, encode).

use std::collections::HashSet;

use refract_core::{Error, Result};
use uuid::Uuid;

use crate::decode::{
    self, ContentLocation, DecodedContent, FRI_INDEX_VERSION_LEGACY, FRI_INDEX_VERSION_TAGGED,
};
use crate::encode::{self, EncodedDetails};
use crate::external::ExternalContent;
use crate::fingerprint::Fingerprint;
use crate::lineage::{order_records, Lineage, LineageIndex, RecordRef};
use crate::model::{LegacyVersion, Mapping, TransitionRecord};
use crate::violation::{Checked, Origin, Violation};

/// A validated FRI ledger.
///
/// Invariants: every record is valid on its own; lineage over legacy groups
/// and transitions has one producer and one consumer per fragment, consistent
/// physical rows and no cycle; transitions are in topological order (stable
/// among independent ones); stable-partition `map_id`s are unique.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ledger {
    legacy_versions: Vec<LegacyVersion>,
    transitions: Vec<TransitionRecord>,
    has_unsupported_transitions: bool,
    tagged: bool,
    lineage: LineageIndex,
}

impl Ledger {
    /// An empty, legacy-version (index_version 0) ledger. Pushing the first
    /// transition makes it tagged.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes an FRI entry's details.
    ///
    /// The version gate and the external reference checks run before
    /// `read_external` is called; it is called at most once, only for external
    /// content, and its result must have exactly the recorded size. For async
    /// storage, use [`crate::parse_details`], read the range yourself, then
    /// [`Ledger::from_content_bytes`].
    ///
    /// # Errors
    /// Those of [`crate::parse_details`] and [`Ledger::from_content_bytes`];
    /// whatever `read_external` returns; Corrupt when it returns other than the
    /// recorded number of bytes.
    pub fn decode(
        details: &[u8],
        index_version: u32,
        fri_uuid: &Uuid,
        read_external: impl FnOnce(&ExternalContent) -> Result<Vec<u8>>,
    ) -> Result<Self> {
        let mut ledger = match decode::parse_details(details, index_version, fri_uuid)? {
            ContentLocation::Inline(content) => Self::from_content_bytes(content, index_version)?,
            ContentLocation::External(external) => {
                let bytes = read_external(&external)?;
                external.verify_received(&bytes)?;
                Self::from_content_bytes(&bytes, index_version)?
            }
        };
        ledger.attach_row_map_checksums(details)?;
        Ok(ledger)
    }

    /// Gives each stable partition the row-map checksum Refract recorded in
    /// the details envelope. Details another Lance writer rebuilt carry none:
    /// those row maps are then read unverified, never against a stale record.
    ///
    /// # Errors
    /// Corrupt when the recorded checksums are malformed, name a map the
    /// ledger does not reference, or do not cover the map's recorded size.
    pub fn attach_row_map_checksums(&mut self, details: &[u8]) -> Result<()> {
        let checksums =
            decode::row_map_checksums(details).map_err(|v| v.into_error(Origin::Stored))?;
        for (map_id, checksum) in checksums {
            let record = self
                .transitions
                .iter_mut()
                .find(|t| matches!(t.mapping(), Mapping::StablePartition { map_id: id, .. } if *id == map_id))
                .ok_or_else(|| {
                    Error::corrupt(
                        crate::violation::WHAT,
                        format!("a row-map checksum names map {map_id}, which no transition references"),
                    )
                })?;
            if let Mapping::StablePartition { map_size_bytes, .. } = record.mapping() {
                checksum.check_size("row map", *map_size_bytes).map_err(|_| {
                    Error::corrupt(
                        crate::violation::WHAT,
                        format!(
                            "the row-map checksum of {map_id} covers {} blocks of {} bytes, not {map_size_bytes} bytes",
                            checksum.blocks().len(),
                            checksum.block_bytes()
                        ),
                    )
                })?;
            }
            record.set_map_checksum(checksum);
        }
        Ok(())
    }

    /// Decodes encoded `InlineContent` (the inline payload or the external
    /// file's bytes) stored under `index_version`.
    ///
    /// # Errors
    /// NotSupported for an unknown version; Corrupt for malformed or
    /// inconsistent content; PathEscape for a path-like stable-partition
    /// `map_id`.
    pub fn from_content_bytes(content: &[u8], index_version: u32) -> Result<Self> {
        decode::check_index_version(index_version)?;
        let decoded = decode::decode_content(content, index_version)
            .map_err(|v| v.into_error(Origin::Stored))?;
        let DecodedContent {
            legacy_versions,
            transitions,
            has_unsupported_transitions,
        } = decoded;
        let mut ledger = Self::assemble(legacy_versions, transitions)
            .map_err(|v| v.into_error(Origin::Stored))?;
        ledger.has_unsupported_transitions = has_unsupported_transitions;
        ledger.tagged = index_version >= FRI_INDEX_VERSION_TAGGED;
        Ok(ledger)
    }

    /// Checks lineage and map ids, orders the transitions.
    fn assemble(
        legacy_versions: Vec<LegacyVersion>,
        transitions: Vec<TransitionRecord>,
    ) -> Checked<Self> {
        check_unique_map_ids(&transitions)?;
        let mut refs = Vec::new();
        let mut records = Vec::new();
        for (v, version) in legacy_versions.iter().enumerate() {
            for (g, group) in version.groups().iter().enumerate() {
                refs.push(RecordRef::Legacy {
                    version: v,
                    group: g,
                });
                records.push(group);
            }
        }
        let legacy_count = refs.len();
        let flat = order_records(
            &records
                .into_iter()
                .chain(transitions.iter())
                .collect::<Vec<_>>(),
        )?;
        // Transitions take their lineage order; `position[i]` is the new
        // position of serialized transition i.
        let ordered: Vec<usize> = flat
            .order
            .iter()
            .filter_map(|&i| i.checked_sub(legacy_count))
            .collect();
        // `ordered` is a permutation of 0..transitions.len() (Kahn visits every
        // record once), so the indexing below stays in bounds.
        let mut position = vec![0usize; transitions.len()];
        for (new, &old) in ordered.iter().enumerate() {
            position[old] = new;
        }
        refs.extend(position.iter().map(|&p| RecordRef::Transition(p)));
        let mut slots: Vec<Option<TransitionRecord>> = transitions.into_iter().map(Some).collect();
        // `ordered` is a permutation of 0..transitions.len(): each slot is taken once.
        let transitions = ordered
            .iter()
            .filter_map(|&old| slots[old].take())
            .collect();
        Ok(Self {
            legacy_versions,
            transitions,
            has_unsupported_transitions: false,
            tagged: false,
            lineage: LineageIndex::from_flat(flat, &refs),
        })
    }

    /// Legacy (version 0) history, as stored.
    pub fn legacy_versions(&self) -> &[LegacyVersion] {
        &self.legacy_versions
    }

    /// Version-1 transitions this build understands, in lineage order.
    pub fn transitions(&self) -> &[TransitionRecord] {
        &self.transitions
    }

    /// True when decoding dropped transitions with a mapping (or field) this
    /// build does not know. Readers must then deny every segment the identity
    /// fast path, and writers must not re-encode the ledger.
    pub fn has_unsupported_transitions(&self) -> bool {
        self.has_unsupported_transitions
    }

    /// The `index_version` this ledger is stored with: 1 once it has been
    /// tagged (decoded as version 1 or given a transition; it stays 1 when
    /// the transitions are trimmed away), else 0.
    pub fn index_version(&self) -> u32 {
        if self.tagged {
            FRI_INDEX_VERSION_TAGGED
        } else {
            FRI_INDEX_VERSION_LEGACY
        }
    }

    /// True when there is no history at all (nothing to translate through).
    pub fn is_empty(&self) -> bool {
        self.lineage.is_empty_index() && !self.has_unsupported_transitions
    }

    /// Lineage queries over legacy groups and transitions.
    pub fn lineage(&self) -> Lineage<'_> {
        Lineage::new(&self.lineage, &self.legacy_versions, &self.transitions)
    }

    /// Appends a writer's transition.
    ///
    /// # Errors
    /// NotSupported when the ledger holds unsupported transitions
    /// (they would be lost); InvalidInput when the transition breaks lineage
    /// (a fragment produced or consumed twice, inconsistent physical rows, a
    /// cycle) or reuses a `map_id`. On error the ledger is unchanged.
    pub fn push_transition(&mut self, record: TransitionRecord) -> Result<()> {
        self.ensure_maintainable()?;
        let mut transitions = self.transitions.clone();
        transitions.push(record);
        let mut next = Self::assemble(self.legacy_versions.clone(), transitions)
            .map_err(|v| v.into_error(Origin::Caller))?;
        next.tagged = true;
        *self = next;
        Ok(())
    }

    /// Removes the transitions and legacy groups whose fingerprint is listed
    /// (for trim); legacy versions left without groups are dropped. Returns how
    /// many records were removed.
    ///
    /// # Errors
    /// NotSupported when the ledger holds unsupported transitions.
    pub fn remove_transitions<'f>(
        &mut self,
        fingerprints: impl IntoIterator<Item = &'f Fingerprint>,
    ) -> Result<usize> {
        self.ensure_maintainable()?;
        let remove: HashSet<&Fingerprint> = fingerprints.into_iter().collect();
        let before = self.lineage().len();
        let mut legacy_versions = self.legacy_versions.clone();
        for version in &mut legacy_versions {
            version.retain_groups(|g| !remove.contains(g.fingerprint()));
        }
        legacy_versions.retain(|v| !v.groups().is_empty());
        let transitions: Vec<_> = self
            .transitions
            .iter()
            .filter(|t| !remove.contains(t.fingerprint()))
            .cloned()
            .collect();
        // Removing records cannot create a lineage violation; an error here
        // would mean the ledger's invariants were already broken.
        let mut next = Self::assemble(legacy_versions, transitions)
            .map_err(|v| v.into_error(Origin::Stored))?;
        next.tagged = self.tagged;
        let removed = before - next.lineage().len();
        *self = next;
        Ok(removed)
    }

    /// The canonical encoding of the content (`InlineContent`).
    ///
    /// # Errors
    /// NotSupported when the ledger holds unsupported transitions.
    pub fn encode_content(&self) -> Result<Vec<u8>> {
        self.ensure_maintainable()?;
        Ok(encode::content_bytes(
            &self.legacy_versions,
            &self.transitions,
        ))
    }

    /// Encodes the details of a new FRI entry `fri_uuid` in Lance's envelope:
    /// inline up to [`crate::MAX_INLINE_BYTES`], otherwise a reference to
    /// `details.binpb` in `_indices/<fri_uuid>/`, whose bytes the caller
    /// writes; then the row-map checksums Lance has no field for.
    ///
    /// # Errors
    /// NotSupported when the ledger holds unsupported transitions.
    pub fn encode_details(&self, fri_uuid: &Uuid) -> Result<EncodedDetails> {
        let content = self.encode_content()?;
        Ok(encode::details(
            content,
            self.index_version(),
            fri_uuid,
            &self.transitions,
        ))
    }

    fn ensure_maintainable(&self) -> Result<()> {
        if self.has_unsupported_transitions {
            return Err(Error::not_supported(
                "the FRI ledger holds transitions this client does not understand; \
                 upgrade to a newer version of Refract before rewriting this table's history",
            ));
        }
        Ok(())
    }
}

/// Two transitions must not share a row map: maintaining one could delete the
/// other's file.
fn check_unique_map_ids(transitions: &[TransitionRecord]) -> Checked {
    let mut seen = HashSet::new();
    for t in transitions {
        if let Mapping::StablePartition { map_id, .. } = t.mapping() {
            if !seen.insert(*map_id) {
                return Err(Violation::invalid(format!(
                    "stable partition map_id {map_id} is used by more than one transition"
                )));
            }
        }
    }
    Ok(())
}
