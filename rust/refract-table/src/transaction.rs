//! Transactions: what a commit changes, recorded in the manifest it produces so
//! later commits that raced it can be rebased.

use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};
use uuid::Uuid;

use crate::format::fragment::checksum_to_proto;
use crate::format::index::uuid_from_bytes;
use crate::format::proto;
use crate::format::{Fragment, IndexMetadata};

/// One commit attempt: an operation computed against `read_version`.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// Identifies this commit; lets an ambiguous put be recognised as ours.
    pub uuid: Uuid,
    /// The version the operation was computed against.
    pub read_version: u64,
    /// The change.
    pub operation: Operation,
}

/// The changes a transaction can make.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// New fragments at the end of the list; ids are assigned at commit (incoming ids ignored).
    Append {
        /// The fragments, in order.
        fragments: Vec<Fragment>,
    },
    /// Rows deleted by a predicate.
    Delete {
        /// Fragments with their new deletion files.
        updated_fragments: Vec<Fragment>,
        /// Fragments whose rows are now all deleted.
        removed_fragment_ids: Vec<u64>,
        /// The predicate (history only).
        predicate: String,
    },
    /// Compaction: contiguous runs replaced in place, plus rewritten index segments.
    Rewrite {
        /// The replaced runs.
        groups: Vec<RewriteGroup>,
        /// Index segments added (e.g. remapped copies).
        new_indices: Vec<IndexMetadata>,
        /// Index segments removed.
        removed_index_uuids: Vec<Uuid>,
    },
    /// New index segments, and the segments they replace.
    CreateIndex {
        /// Segments added.
        new_indices: Vec<IndexMetadata>,
        /// Segments removed.
        removed_index_uuids: Vec<Uuid>,
    },
    /// Stable partition: the contiguous run `source_fragment_ids` is replaced in
    /// place by `destinations` (label order); ids are assigned at commit.
    Partition {
        /// The replaced run, in manifest order.
        source_fragment_ids: Vec<u64>,
        /// The destinations, in label order.
        destinations: Vec<Fragment>,
        /// The row map `_fri/<map_id>/stable_partition.lance`, when one was written.
        map_id: Option<Uuid>,
        /// Size of the row-map file (0 without one).
        map_size_bytes: u64,
        /// Block checksums of the row-map file (absent without one, and in
        /// transactions written before checksums).
        map_checksum: Option<FileChecksum>,
    },
    /// Makes `version` current again (as a new version).
    Restore {
        /// The version restored.
        version: u64,
    },
}

/// One compaction group.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteGroup {
    /// A contiguous run of the manifest, in order.
    pub old_fragment_ids: Vec<u64>,
    /// The replacements in write order; ids assigned at commit.
    pub new_fragments: Vec<Fragment>,
    /// Serialized `RoaringTreemap` of surviving old addresses (rebasing concurrent deletes).
    pub surviving_old_addresses: Option<Vec<u8>>,
}

impl Transaction {
    /// A new transaction with a fresh uuid.
    pub fn new(read_version: u64, operation: Operation) -> Self {
        Self {
            uuid: Uuid::new_v4(),
            read_version,
            operation,
        }
    }

    pub(crate) fn to_proto(&self) -> proto::Transaction {
        proto::Transaction {
            uuid: self.uuid.as_bytes().to_vec(),
            read_version: self.read_version,
            operation: Some(self.operation.to_proto()),
        }
    }

    pub(crate) fn from_proto(message: &proto::Transaction) -> Result<Transaction> {
        let operation = message.operation.as_ref().ok_or_else(|| {
            Error::corrupt(
                "manifest",
                "transaction has no operation (written by a newer client?)",
            )
        })?;
        Ok(Transaction {
            uuid: uuid_from_bytes(&message.uuid, "transaction uuid")?,
            read_version: message.read_version,
            operation: Operation::from_proto(operation)?,
        })
    }
}

impl Operation {
    /// Short name, for version listings.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Append { .. } => "Append",
            Operation::Delete { .. } => "Delete",
            Operation::Rewrite { .. } => "Rewrite",
            Operation::CreateIndex { .. } => "CreateIndex",
            Operation::Restore { .. } => "Restore",
            Operation::Partition { .. } => "Partition",
        }
    }

    fn to_proto(&self) -> proto::transaction::Operation {
        use proto::transaction as pt;
        match self {
            Operation::Append { fragments } => pt::Operation::Append(pt::Append {
                fragments: fragments.iter().map(Fragment::to_proto).collect(),
            }),
            Operation::Delete {
                updated_fragments,
                removed_fragment_ids,
                predicate,
            } => pt::Operation::Delete(pt::Delete {
                updated_fragments: updated_fragments.iter().map(Fragment::to_proto).collect(),
                removed_fragment_ids: removed_fragment_ids.clone(),
                predicate: predicate.clone(),
            }),
            Operation::Rewrite {
                groups,
                new_indices,
                removed_index_uuids,
            } => pt::Operation::Rewrite(pt::Rewrite {
                groups: groups
                    .iter()
                    .map(|group| pt::RewriteGroup {
                        old_fragment_ids: group.old_fragment_ids.clone(),
                        new_fragments: group.new_fragments.iter().map(Fragment::to_proto).collect(),
                        surviving_old_addresses: group.surviving_old_addresses.clone(),
                    })
                    .collect(),
                new_indices: new_indices.iter().map(IndexMetadata::to_proto).collect(),
                removed_index_uuids: uuids_to_proto(removed_index_uuids),
            }),
            Operation::CreateIndex {
                new_indices,
                removed_index_uuids,
            } => pt::Operation::CreateIndex(pt::CreateIndex {
                new_indices: new_indices.iter().map(IndexMetadata::to_proto).collect(),
                removed_index_uuids: uuids_to_proto(removed_index_uuids),
            }),
            Operation::Restore { version } => {
                pt::Operation::Restore(pt::Restore { version: *version })
            }
            Operation::Partition {
                source_fragment_ids,
                destinations,
                map_id,
                map_size_bytes,
                map_checksum,
            } => pt::Operation::Partition(pt::Partition {
                source_fragment_ids: source_fragment_ids.clone(),
                destinations: destinations.iter().map(Fragment::to_proto).collect(),
                map_id: map_id.map_or_else(Vec::new, |id| id.as_bytes().to_vec()),
                map_size_bytes: *map_size_bytes,
                map_checksum: map_checksum.as_ref().map(checksum_to_proto),
            }),
        }
    }

    fn from_proto(message: &proto::transaction::Operation) -> Result<Operation> {
        use proto::transaction as pt;
        Ok(match message {
            pt::Operation::Append(append) => Operation::Append {
                fragments: fragments_from_proto(&append.fragments)?,
            },
            pt::Operation::Delete(delete) => Operation::Delete {
                updated_fragments: fragments_from_proto(&delete.updated_fragments)?,
                removed_fragment_ids: delete.removed_fragment_ids.clone(),
                predicate: delete.predicate.clone(),
            },
            pt::Operation::Rewrite(rewrite) => Operation::Rewrite {
                groups: rewrite
                    .groups
                    .iter()
                    .map(|group| {
                        Ok(RewriteGroup {
                            old_fragment_ids: group.old_fragment_ids.clone(),
                            new_fragments: fragments_from_proto(&group.new_fragments)?,
                            surviving_old_addresses: group.surviving_old_addresses.clone(),
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
                new_indices: indices_from_proto(&rewrite.new_indices)?,
                removed_index_uuids: uuids_from_proto(&rewrite.removed_index_uuids)?,
            },
            pt::Operation::CreateIndex(create) => Operation::CreateIndex {
                new_indices: indices_from_proto(&create.new_indices)?,
                removed_index_uuids: uuids_from_proto(&create.removed_index_uuids)?,
            },
            pt::Operation::Restore(restore) => Operation::Restore {
                version: restore.version,
            },
            pt::Operation::Partition(partition) => Operation::Partition {
                source_fragment_ids: partition.source_fragment_ids.clone(),
                destinations: fragments_from_proto(&partition.destinations)?,
                map_id: if partition.map_id.is_empty() {
                    None
                } else {
                    Some(uuid_from_bytes(&partition.map_id, "partition map id")?)
                },
                map_size_bytes: partition.map_size_bytes,
                map_checksum: partition
                    .map_checksum
                    .as_ref()
                    .map(|stored| {
                        let checksum = FileChecksum::from_le_bytes(stored.block_bytes, &stored.crc32c)
                            .map_err(|e| {
                                Error::corrupt("manifest", format!("row-map checksum of a partition: {e}"))
                            })?;
                        if checksum.check_size("row map", partition.map_size_bytes).is_err() {
                            return Err(Error::corrupt(
                                "manifest",
                                format!(
                                    "the row-map checksum of a partition covers {} blocks of {} bytes, not {} bytes",
                                    checksum.blocks().len(),
                                    checksum.block_bytes(),
                                    partition.map_size_bytes
                                ),
                            ));
                        }
                        Ok(checksum)
                    })
                    .transpose()?,
            },
        })
    }

    /// Ids of existing fragments this operation modifies or removes.
    pub(crate) fn touched_fragment_ids(&self) -> Vec<u64> {
        match self {
            Operation::Append { .. }
            | Operation::CreateIndex { .. }
            | Operation::Restore { .. } => Vec::new(),
            Operation::Delete {
                updated_fragments,
                removed_fragment_ids,
                ..
            } => updated_fragments
                .iter()
                .map(|fragment| fragment.id)
                .chain(removed_fragment_ids.iter().copied())
                .collect(),
            Operation::Rewrite { groups, .. } => groups
                .iter()
                .flat_map(|group| group.old_fragment_ids.iter().copied())
                .collect(),
            Operation::Partition {
                source_fragment_ids,
                ..
            } => source_fragment_ids.clone(),
        }
    }
}

fn fragments_from_proto(messages: &[proto::DataFragment]) -> Result<Vec<Fragment>> {
    messages.iter().map(Fragment::from_proto).collect()
}

fn indices_from_proto(messages: &[proto::IndexMetadata]) -> Result<Vec<IndexMetadata>> {
    messages.iter().map(IndexMetadata::from_proto).collect()
}

fn uuids_to_proto(uuids: &[Uuid]) -> Vec<Vec<u8>> {
    uuids.iter().map(|uuid| uuid.as_bytes().to_vec()).collect()
}

fn uuids_from_proto(bytes: &[Vec<u8>]) -> Result<Vec<Uuid>> {
    bytes
        .iter()
        .map(|raw| uuid_from_bytes(raw, "removed index uuid"))
        .collect()
}
