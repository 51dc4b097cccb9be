//! The decoded history of one FRI entry, cached per FRI uuid.
//!
//! An FRI uuid names immutable content (every update mints a new uuid), so the
//! validated ledger is decoded once per uuid and shared by every snapshot and
//! query that sees that entry. The history keeps the supported records in
//! lineage (topological) order with per-fragment producer and consumer
//! lookups; for a version-0 entry it also holds the legacy remap chain.

use std::collections::HashMap;
use std::sync::Arc;

use refract_core::cache::{ByteWeightedCache, CacheKey, CacheNamespace, DeepSize, KeyParts};
use refract_core::{Error, FragmentRows, RemapChain, Result, RewriteGroupInput, RowAddrRemap};
use refract_ledger::{Fingerprint, Ledger, Mapping, TransitionRecord, FRI_INDEX_VERSION_LEGACY};
use refract_table::commit::fri_entry::decode_entry;
use refract_table::io::DatasetStore;
use refract_table::IndexMetadata;
use uuid::Uuid;

/// One supported transition, as the reader walks it.
#[derive(Debug, Clone)]
pub struct TransitionNode {
    /// The validated record.
    pub record: TransitionRecord,
    /// Source ids, in order.
    pub sources: Vec<u64>,
    /// Destination ids, in order.
    pub destinations: Vec<u64>,
}

impl TransitionNode {
    /// The transition's content fingerprint.
    pub fn fingerprint(&self) -> &Fingerprint {
        self.record.fingerprint()
    }
}

/// The legacy (version 0) read path: the chain of compact remaps, oldest
/// first, and the groups (old ids, new ids) in the same order.
#[derive(Debug, Clone)]
pub struct LegacyPath {
    /// Every legacy version's groups as one remap, oldest first.
    pub chain: RemapChain,
    /// (old fragment ids, new fragment ids) per group, oldest version first.
    pub groups: Vec<(Vec<u64>, Vec<u64>)>,
}

/// The decoded, validated history of one FRI entry.
#[derive(Debug)]
pub struct FriHistory {
    uuid: Uuid,
    index_version: u32,
    has_unsupported_transitions: bool,
    nodes: Vec<TransitionNode>,
    producer: HashMap<u64, usize>,
    consumer: HashMap<u64, usize>,
    legacy: Option<LegacyPath>,
    weight: usize,
}

impl FriHistory {
    /// Builds the history of entry `uuid` from a validated ledger.
    ///
    /// # Errors
    /// For a version-0 ledger: Corrupt when a legacy group is not an ordered
    /// compaction; InvalidInput when a version's groups do not form a compact
    /// remap (see `RowAddrRemap::compact`).
    pub fn from_ledger(uuid: Uuid, ledger: &Ledger) -> Result<Self> {
        let nodes: Vec<TransitionNode> = ledger
            .lineage()
            .iter()
            .map(|record| TransitionNode {
                sources: record.sources().iter().map(|d| d.id).collect(),
                destinations: record.destinations().iter().map(|d| d.id).collect(),
                record: record.clone(),
            })
            .collect();
        let mut producer = HashMap::new();
        let mut consumer = HashMap::new();
        for (index, node) in nodes.iter().enumerate() {
            // The ledger validated one producer and one consumer per fragment.
            producer.extend(node.destinations.iter().map(|id| (*id, index)));
            consumer.extend(node.sources.iter().map(|id| (*id, index)));
        }
        let legacy = if ledger.index_version() == FRI_INDEX_VERSION_LEGACY {
            Some(legacy_path(ledger)?)
        } else {
            None
        };
        let weight = estimate_weight(&nodes, legacy.as_ref());
        Ok(Self {
            uuid,
            index_version: ledger.index_version(),
            has_unsupported_transitions: ledger.has_unsupported_transitions(),
            nodes,
            producer,
            consumer,
            legacy,
            weight,
        })
    }

    /// The FRI entry uuid.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The stored `index_version`.
    pub fn index_version(&self) -> u32 {
        self.index_version
    }

    /// True when decoding dropped transitions this client does not understand.
    pub fn has_unsupported_transitions(&self) -> bool {
        self.has_unsupported_transitions
    }

    /// Supported transitions in lineage order (legacy groups lifted first).
    pub fn nodes(&self) -> &[TransitionNode] {
        &self.nodes
    }

    /// The node at `index`.
    pub fn node(&self, index: usize) -> Option<&TransitionNode> {
        self.nodes.get(index)
    }

    /// The transition that wrote `fragment`.
    pub fn producer_of(&self, fragment: u64) -> Option<usize> {
        self.producer.get(&fragment).copied()
    }

    /// The transition that rewrote `fragment`.
    pub fn consumer_of(&self, fragment: u64) -> Option<usize> {
        self.consumer.get(&fragment).copied()
    }

    /// True when some supported transition produced or consumed `fragment`.
    pub fn touches(&self, fragment: u64) -> bool {
        self.producer.contains_key(&fragment) || self.consumer.contains_key(&fragment)
    }

    /// The legacy path of a version-0 entry; `None` for a tagged one.
    pub fn legacy(&self) -> Option<&LegacyPath> {
        self.legacy.as_ref()
    }
}

impl DeepSize for FriHistory {
    fn deep_size_bytes(&self) -> usize {
        self.weight
    }
}

/// The chain and groups of a version-0 ledger.
fn legacy_path(ledger: &Ledger) -> Result<LegacyPath> {
    let mut chain = RemapChain::new();
    let mut groups = Vec::new();
    for version in ledger.legacy_versions() {
        let mut inputs = Vec::with_capacity(version.groups().len());
        for group in version.groups() {
            let Mapping::OrderedCompaction { surviving } = group.mapping() else {
                // Legacy groups are always decoded as ordered compactions.
                return Err(Error::corrupt(
                    "FRI ledger",
                    "legacy group is not a compaction",
                ));
            };
            inputs.push(RewriteGroupInput {
                old_fragments: rows_of(group.sources()),
                new_fragments: rows_of(group.destinations()),
                surviving: surviving.clone(),
            });
            groups.push((
                group.sources().iter().map(|d| d.id).collect(),
                group.destinations().iter().map(|d| d.id).collect(),
            ));
        }
        chain.push(RowAddrRemap::compact(inputs)?);
    }
    Ok(LegacyPath { chain, groups })
}

/// (id, physical rows) of digests.
pub(crate) fn rows_of(digests: &[refract_ledger::FragmentDigest]) -> Vec<FragmentRows> {
    digests
        .iter()
        .map(|d| FragmentRows::new(d.id, d.physical_rows))
        .collect()
}

/// Decoded size: records (bitmaps in their serialized size, digests), lookup
/// maps and the legacy chain.
fn estimate_weight(nodes: &[TransitionNode], legacy: Option<&LegacyPath>) -> usize {
    let records: usize = nodes
        .iter()
        .map(|node| {
            let bitmap = match node.record.mapping() {
                Mapping::OrderedCompaction { surviving } => surviving.serialized_size(),
                Mapping::StablePartition { .. } => 0,
            };
            let ids = node.sources.len() + node.destinations.len();
            256 + bitmap + ids * (24 + 8 + 48)
        })
        .sum();
    let chain = legacy.map_or(0, |l| l.chain.deep_size_bytes() as usize);
    std::mem::size_of::<FriHistory>() + records + chain
}

/// The cache key of the history of FRI `uuid`.
fn history_key(uuid: &Uuid) -> CacheKey {
    CacheKey::new(CacheNamespace::FriLedger, KeyParts::Uuid(uuid.as_u128()))
}

/// Loads the history of the FRI `entry`, decoding it at most once per uuid
/// (concurrent loads are deduplicated by the cache). External content is read
/// with one ranged request of exactly the recorded size.
///
/// # Errors
/// NotSupported for an unknown `index_version`; Corrupt or PathEscape for
/// damaged details or content; NotFound for a missing external file; External
/// for store failures; those of [`FriHistory::from_ledger`].
pub async fn load_history(
    store: &DatasetStore,
    cache: &ByteWeightedCache,
    entry: &IndexMetadata,
) -> Result<Arc<FriHistory>> {
    let store = store.clone();
    let entry = entry.clone();
    cache
        .get_or_try_insert(history_key(&entry.uuid), async move {
            let ledger = decode_entry(&store, &entry).await?;
            FriHistory::from_ledger(entry.uuid, &ledger)
        })
        .await
}
