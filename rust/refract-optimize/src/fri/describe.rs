//! `describe_fri`: a serializable summary of a table's FRI for `refract fri`.

use refract_core::Result;
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_ledger::{fingerprint_hex, parse_details, ContentLocation, FragmentDigest, Mapping};
use refract_table::commit::fri_entry::{find_fri_entry, load_ledger};
use refract_table::Dataset;
use serde::Serialize;

/// The FRI of one dataset version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FriDescription {
    /// The dataset version described.
    pub dataset_version: u64,
    /// Reader feature flags of the version.
    pub reader_flags: u64,
    /// Writer feature flags of the version.
    pub writer_flags: u64,
    /// True when the paired FRI flag is set (the table was tagged).
    pub fri_flag: bool,
    /// The FRI entry's uuid; `None` when the table has no FRI entry.
    pub fri_uuid: Option<String>,
    /// The entry's index_version (0 legacy, 1 tagged).
    pub index_version: Option<u32>,
    /// "none", "inline" or "external".
    pub storage: String,
    /// Encoded ledger content size in bytes.
    pub size_bytes: u64,
    /// The external content file, when external.
    pub external_path: Option<String>,
    /// True when the ledger holds transitions this client cannot interpret.
    pub has_unsupported_transitions: bool,
    /// Legacy (version 0) reuse versions.
    pub legacy_versions: usize,
    /// Every record (legacy groups first, then transitions), in lineage order.
    pub transitions: Vec<TransitionDescription>,
}

/// One record of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransitionDescription {
    /// "ordered_compaction" or "stable_partition".
    pub kind: String,
    /// True for a group of a legacy (version 0) reuse version.
    pub legacy: bool,
    /// The dataset version a legacy group was planned against; `None` for a
    /// version-1 transition (Lance records none).
    pub dataset_version: Option<u64>,
    /// Sources in scan order.
    pub sources: Vec<DigestDescription>,
    /// Destinations in output (label) order.
    pub destinations: Vec<DigestDescription>,
    /// Hex blake3 fingerprint of the transition's content.
    pub fingerprint: String,
    /// Row map id (stable partition only).
    pub map_id: Option<String>,
    /// Row map size (stable partition only).
    pub map_size_bytes: Option<u64>,
}

/// A fragment digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DigestDescription {
    /// Fragment id.
    pub id: u64,
    /// Physical rows.
    pub physical_rows: u64,
    /// Deleted rows at the time of the rewrite.
    pub num_deleted_rows: u64,
}

fn digests(digests: &[FragmentDigest]) -> Vec<DigestDescription> {
    digests
        .iter()
        .map(|d| DigestDescription {
            id: d.id,
            physical_rows: d.physical_rows,
            num_deleted_rows: d.num_deleted_rows,
        })
        .collect()
}

/// Describes the FRI of `dataset`'s version (decoding and validating the ledger).
///
/// # Errors
/// Corrupt for a ledger that does not decode or validate; NotFound for a
/// missing external ledger; NotSupported for a ledger version this client
/// cannot read.
pub async fn describe_fri(dataset: &Dataset) -> Result<FriDescription> {
    let manifest = dataset.manifest();
    let fri_flag = manifest.reader_flags & FLAG_FRAGMENT_REUSE_INDEX != 0
        && manifest.writer_flags & FLAG_FRAGMENT_REUSE_INDEX != 0;
    let mut description = FriDescription {
        dataset_version: manifest.version,
        reader_flags: manifest.reader_flags,
        writer_flags: manifest.writer_flags,
        fri_flag,
        fri_uuid: None,
        index_version: None,
        storage: "none".to_string(),
        size_bytes: 0,
        external_path: None,
        has_unsupported_transitions: false,
        legacy_versions: 0,
        transitions: Vec::new(),
    };
    let Some(entry) = find_fri_entry(manifest)? else {
        return Ok(description);
    };
    match parse_details(&entry.details, entry.index_version, &entry.uuid)? {
        ContentLocation::Inline(content) => {
            description.storage = "inline".to_string();
            description.size_bytes = content.len() as u64;
        }
        ContentLocation::External(external) => {
            description.storage = "external".to_string();
            description.size_bytes = external.size();
            description.external_path = Some(external.path().to_string());
        }
    }
    description.fri_uuid = Some(entry.uuid.hyphenated().to_string());
    description.index_version = Some(entry.index_version);
    let Some((_, ledger)) = load_ledger(dataset).await? else {
        return Ok(description);
    };
    description.has_unsupported_transitions = ledger.has_unsupported_transitions();
    description.legacy_versions = ledger.legacy_versions().len();
    let legacy = ledger
        .legacy_versions()
        .iter()
        .flat_map(|v| v.groups())
        .map(|record| (true, record));
    let tagged = ledger.transitions().iter().map(|record| (false, record));
    description.transitions = legacy
        .chain(tagged)
        .map(|(legacy, record)| {
            let (map_id, map_size_bytes) = match record.mapping() {
                Mapping::StablePartition {
                    map_id,
                    map_size_bytes,
                    ..
                } => (Some(map_id.hyphenated().to_string()), Some(*map_size_bytes)),
                Mapping::OrderedCompaction { .. } => (None, None),
            };
            TransitionDescription {
                kind: record.mapping().kind().to_string(),
                legacy,
                dataset_version: record.dataset_version(),
                sources: digests(record.sources()),
                destinations: digests(record.destinations()),
                fingerprint: fingerprint_hex(record.fingerprint()),
                map_id,
                map_size_bytes,
            }
        })
        .collect();
    Ok(description)
}
