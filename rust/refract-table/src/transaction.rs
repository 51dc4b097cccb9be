//! Transactions: what a commit changes, recorded in the manifest it produces so
//! later commits that raced it can be rebased.

use std::collections::HashMap;

use lance_table::format::pb;
use lance_table::format::pb::transaction as pt;
use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};
use uuid::Uuid;

use crate::format::index::uuid_from_bytes;
use crate::format::schema::FieldPaths;
use crate::format::sidecar::{Checksums, GroupSurvivors, PartitionRecord, Sidecar};
use crate::format::{Fragment, IndexMetadata};
use crate::io::paths::row_map_path;

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
        /// The fragments after the run that the commit relabelled to keep
        /// fragment ids sorted, as groups of an identity rewrite (see
        /// docs/format.md "Relabelled fragments"). Empty until applied.
        relabelled: Vec<RewriteGroup>,
    },
    /// Makes `version` current again (as a new version).
    Restore {
        /// The version restored.
        version: u64,
    },
    /// An operation another Lance writer committed that Refract does not
    /// rebase over (`Overwrite`, `Merge`, `Update`, ...): a commit racing it
    /// gets a retryable conflict.
    Lance {
        /// Lance's name of the operation.
        name: String,
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

    /// Lance's record of the transaction. What Lance cannot express
    /// (surviving addresses, the stable-partition row map, checksums) goes
    /// to `sidecar` and `checksums`.
    ///
    /// # Errors
    /// InvalidInput for an operation only another Lance writer commits;
    /// Corrupt when an index names a column the schema does not have.
    pub(crate) fn to_pb(
        &self,
        fields: &FieldPaths,
        checksums: &mut Checksums,
        sidecar: &mut Sidecar,
    ) -> Result<pb::Transaction> {
        Ok(pb::Transaction {
            read_version: self.read_version,
            uuid: self.uuid.hyphenated().to_string(),
            operation: Some(self.operation.to_pb(fields, checksums, sidecar)?),
            ..Default::default()
        })
    }

    /// Decodes Lance's record of a transaction; `indices` are the segments of
    /// the version it produced (where a rewrite's new segments are found).
    ///
    /// # Errors
    /// Corrupt for malformed uuids, fragments or indices.
    pub(crate) fn from_pb(
        message: &pb::Transaction,
        sidecar: Option<&Sidecar>,
        fields: &FieldPaths,
        checksums: &Checksums,
        indices: &[IndexMetadata],
    ) -> Result<Transaction> {
        let uuid = Uuid::parse_str(&message.uuid).map_err(|_| {
            Error::corrupt(
                "manifest",
                format!("transaction uuid {:?} is not a uuid", message.uuid),
            )
        })?;
        let operation = match &message.operation {
            None => Operation::Lance {
                name: "Unknown".to_string(),
            },
            Some(operation) => Operation::from_pb(operation, sidecar, fields, checksums, indices)?,
        };
        Ok(Transaction {
            uuid,
            read_version: message.read_version,
            operation,
        })
    }
}

impl Operation {
    /// Short name, for version listings.
    pub fn name(&self) -> &str {
        match self {
            Operation::Append { .. } => "Append",
            Operation::Delete { .. } => "Delete",
            Operation::Rewrite { .. } => "Rewrite",
            Operation::CreateIndex { .. } => "CreateIndex",
            Operation::Restore { .. } => "Restore",
            Operation::Partition { .. } => "Partition",
            Operation::Lance { name } => name,
        }
    }

    fn to_pb(
        &self,
        fields: &FieldPaths,
        checksums: &mut Checksums,
        sidecar: &mut Sidecar,
    ) -> Result<pt::Operation> {
        let fragments = fragments_to_pb;
        let indices =
            |list: &[IndexMetadata], checksums: &mut Checksums| -> Result<Vec<pb::IndexMetadata>> {
                list.iter()
                    .map(|index| index.to_pb(fields, checksums))
                    .collect()
            };
        Ok(match self {
            Operation::Append { fragments: list } => pt::Operation::Append(pt::Append {
                fragments: fragments(list, checksums),
            }),
            Operation::Delete {
                updated_fragments,
                removed_fragment_ids,
                predicate,
            } => pt::Operation::Delete(pt::Delete {
                updated_fragments: fragments(updated_fragments, checksums),
                deleted_fragment_ids: removed_fragment_ids.clone(),
                predicate: predicate.clone(),
            }),
            Operation::Rewrite {
                groups,
                new_indices,
                removed_index_uuids,
            } => {
                record_survivors(sidecar, groups, 0);
                sidecar.new_index_uuids =
                    uuids_to_bytes(new_indices.iter().map(|index| index.uuid));
                sidecar.removed_index_uuids = uuids_to_bytes(removed_index_uuids.iter().copied());
                let rewritten_indices = if new_indices.len() == removed_index_uuids.len() {
                    removed_index_uuids
                        .iter()
                        .zip(new_indices)
                        .map(|(old, new)| {
                            let new_pb = new.to_pb(fields, checksums)?;
                            Ok(pt::rewrite::RewrittenIndex {
                                old_id: Some(pb_uuid(*old)),
                                new_id: new_pb.uuid.clone(),
                                new_index_details: new_pb.index_details,
                                new_index_version: u32::try_from(new_pb.index_version.unwrap_or(0))
                                    .unwrap_or(0),
                                new_index_files: new_pb.files,
                            })
                        })
                        .collect::<Result<Vec<_>>>()?
                } else {
                    Vec::new()
                };
                pt::Operation::Rewrite(pt::Rewrite {
                    groups: groups
                        .iter()
                        .map(|group| group_to_pb(group, checksums))
                        .collect(),
                    rewritten_indices,
                    ..Default::default()
                })
            }
            Operation::CreateIndex {
                new_indices,
                removed_index_uuids,
            } => pt::Operation::CreateIndex(pt::CreateIndex {
                new_indices: indices(new_indices, checksums)?,
                removed_indices: removed_index_uuids
                    .iter()
                    .map(|uuid| pb::IndexMetadata {
                        uuid: Some(pb_uuid(*uuid)),
                        ..Default::default()
                    })
                    .collect(),
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
                relabelled,
            } => {
                if let Some(id) = map_id {
                    checksums.record(&row_map_path(id), map_checksum.as_ref());
                }
                sidecar.partition = Some(PartitionRecord {
                    map_id: map_id.map_or_else(Vec::new, |id| id.as_bytes().to_vec()),
                    map_size_bytes: *map_size_bytes,
                });
                // Lance's record: the partition is the first group, the
                // relabelled runs follow.
                record_survivors(sidecar, relabelled, 1);
                let partition = pt::rewrite::RewriteGroup {
                    old_fragments: id_only_fragments(source_fragment_ids),
                    new_fragments: fragments(destinations, checksums),
                };
                pt::Operation::Rewrite(pt::Rewrite {
                    groups: std::iter::once(partition)
                        .chain(relabelled.iter().map(|group| group_to_pb(group, checksums)))
                        .collect(),
                    ..Default::default()
                })
            }
            Operation::Lance { name } => {
                return Err(Error::invalid_input(format!(
                    "Refract does not commit Lance's {name} operation"
                )))
            }
        })
    }

    fn from_pb(
        message: &pt::Operation,
        sidecar: Option<&Sidecar>,
        fields: &FieldPaths,
        checksums: &Checksums,
        indices: &[IndexMetadata],
    ) -> Result<Operation> {
        let fragments = |list: &[pb::DataFragment]| -> Result<Vec<Fragment>> {
            list.iter()
                .map(|fragment| Fragment::from_pb(fragment, checksums))
                .collect()
        };
        Ok(match message {
            pt::Operation::Append(append) => Operation::Append {
                fragments: fragments(&append.fragments)?,
            },
            pt::Operation::Delete(delete) => Operation::Delete {
                updated_fragments: fragments(&delete.updated_fragments)?,
                removed_fragment_ids: delete.deleted_fragment_ids.clone(),
                predicate: delete.predicate.clone(),
            },
            pt::Operation::Rewrite(rewrite) => {
                let old_ids = |group: &pt::rewrite::RewriteGroup| -> Vec<u64> {
                    group
                        .old_fragments
                        .iter()
                        .map(|fragment| fragment.id)
                        .collect()
                };
                let survivors: HashMap<u32, &Vec<u8>> = sidecar
                    .map(|sidecar| {
                        sidecar
                            .survivors
                            .iter()
                            .map(|entry| (entry.group, &entry.addresses))
                            .collect()
                    })
                    .unwrap_or_default();
                let group_at = |at: usize, group: &pt::rewrite::RewriteGroup| {
                    Ok(RewriteGroup {
                        old_fragment_ids: old_ids(group),
                        new_fragments: fragments(&group.new_fragments)?,
                        surviving_old_addresses: u32::try_from(at)
                            .ok()
                            .and_then(|at| survivors.get(&at))
                            .map(|bytes| (*bytes).clone()),
                    })
                };
                if let Some(partition) = sidecar.and_then(|sidecar| sidecar.partition.as_ref()) {
                    let Some((group, relabelled)) = rewrite.groups.split_first() else {
                        return Err(Error::corrupt(
                            "manifest",
                            "a stable partition records no group".to_string(),
                        ));
                    };
                    let map_id = if partition.map_id.is_empty() {
                        None
                    } else {
                        Some(uuid_from_bytes(&partition.map_id, "partition map id")?)
                    };
                    let map_checksum = match &map_id {
                        Some(id) => {
                            checksums.lookup(&row_map_path(id), Some(partition.map_size_bytes))?
                        }
                        None => None,
                    };
                    return Ok(Operation::Partition {
                        source_fragment_ids: old_ids(group),
                        destinations: fragments(&group.new_fragments)?,
                        map_id,
                        map_size_bytes: partition.map_size_bytes,
                        map_checksum,
                        relabelled: relabelled
                            .iter()
                            .enumerate()
                            .map(|(at, group)| group_at(at + 1, group))
                            .collect::<Result<Vec<_>>>()?,
                    });
                }
                let groups = rewrite
                    .groups
                    .iter()
                    .enumerate()
                    .map(|(at, group)| group_at(at, group))
                    .collect::<Result<Vec<_>>>()?;
                let (new_uuids, removed_index_uuids) = match sidecar {
                    Some(sidecar) => (
                        uuids_from_bytes(&sidecar.new_index_uuids)?,
                        uuids_from_bytes(&sidecar.removed_index_uuids)?,
                    ),
                    None => {
                        let pairs = rewrite
                            .rewritten_indices
                            .iter()
                            .map(|pair| {
                                Ok((
                                    pb_uuid_value(pair.new_id.as_ref())?,
                                    pb_uuid_value(pair.old_id.as_ref())?,
                                ))
                            })
                            .collect::<Result<Vec<_>>>()?;
                        pairs.into_iter().unzip()
                    }
                };
                let new_indices = new_uuids
                    .iter()
                    .filter_map(|uuid| indices.iter().find(|index| index.uuid == *uuid).cloned())
                    .collect();
                Operation::Rewrite {
                    groups,
                    new_indices,
                    removed_index_uuids,
                }
            }
            pt::Operation::CreateIndex(create) => Operation::CreateIndex {
                new_indices: create
                    .new_indices
                    .iter()
                    .map(|index| IndexMetadata::from_pb(index, fields, checksums))
                    .collect::<Result<Vec<_>>>()?,
                removed_index_uuids: create
                    .removed_indices
                    .iter()
                    .map(|index| pb_uuid_value(index.uuid.as_ref()))
                    .collect::<Result<Vec<_>>>()?,
            },
            pt::Operation::Restore(restore) => Operation::Restore {
                version: restore.version,
            },
            other => Operation::Lance {
                name: lance_operation_name(other).to_string(),
            },
        })
    }

    /// Ids of existing fragments this operation modifies or removes.
    pub(crate) fn touched_fragment_ids(&self) -> Vec<u64> {
        match self {
            Operation::Append { .. }
            | Operation::CreateIndex { .. }
            | Operation::Restore { .. }
            | Operation::Lance { .. } => Vec::new(),
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
                relabelled,
                ..
            } => source_fragment_ids
                .iter()
                .chain(relabelled.iter().flat_map(|group| &group.old_fragment_ids))
                .copied()
                .collect(),
        }
    }
}

/// Lance's name of an operation Refract does not model.
fn lance_operation_name(operation: &pt::Operation) -> &'static str {
    match operation {
        pt::Operation::Append(_) => "Append",
        pt::Operation::Delete(_) => "Delete",
        pt::Operation::Overwrite(_) => "Overwrite",
        pt::Operation::CreateIndex(_) => "CreateIndex",
        pt::Operation::Rewrite(_) => "Rewrite",
        pt::Operation::Merge(_) => "Merge",
        pt::Operation::Restore(_) => "Restore",
        pt::Operation::ReserveFragments(_) => "ReserveFragments",
        pt::Operation::Update(_) => "Update",
        pt::Operation::Project(_) => "Project",
        pt::Operation::UpdateConfig(_) => "UpdateConfig",
        pt::Operation::DataReplacement(_) => "DataReplacement",
        pt::Operation::UpdateMemWalState(_) => "UpdateMemWalState",
        pt::Operation::Clone(_) => "Clone",
        pt::Operation::UpdateBases(_) => "UpdateBases",
        pt::Operation::DataOverlay(_) => "DataOverlay",
    }
}

/// Records the surviving addresses of `groups` in the sidecar, the first of
/// them being group `first` of the stored Rewrite.
fn record_survivors(sidecar: &mut Sidecar, groups: &[RewriteGroup], first: usize) {
    for (at, group) in groups.iter().enumerate() {
        if let Some(addresses) = &group.surviving_old_addresses {
            sidecar.survivors.push(GroupSurvivors {
                // Groups are bounded by fragments (u32 ids).
                group: u32::try_from(first + at).unwrap_or(u32::MAX),
                addresses: addresses.clone(),
            });
        }
    }
}

/// Lance's record of one rewrite group.
fn group_to_pb(group: &RewriteGroup, checksums: &mut Checksums) -> pt::rewrite::RewriteGroup {
    pt::rewrite::RewriteGroup {
        old_fragments: id_only_fragments(&group.old_fragment_ids),
        new_fragments: fragments_to_pb(&group.new_fragments, checksums),
    }
}

fn fragments_to_pb(list: &[Fragment], checksums: &mut Checksums) -> Vec<pb::DataFragment> {
    list.iter()
        .map(|fragment| fragment.to_pb(checksums))
        .collect()
}

/// Lance records replaced fragments in full; their ids are what a rebase
/// (Lance's or Refract's) reads.
fn id_only_fragments(ids: &[u64]) -> Vec<pb::DataFragment> {
    ids.iter()
        .map(|id| pb::DataFragment {
            id: *id,
            ..Default::default()
        })
        .collect()
}

fn pb_uuid(uuid: Uuid) -> pb::Uuid {
    pb::Uuid {
        uuid: uuid.as_bytes().to_vec(),
    }
}

fn pb_uuid_value(uuid: Option<&pb::Uuid>) -> Result<Uuid> {
    uuid_from_bytes(
        uuid.map_or(&[][..], |uuid| uuid.uuid.as_slice()),
        "index uuid",
    )
}

fn uuids_to_bytes(uuids: impl Iterator<Item = Uuid>) -> Vec<Vec<u8>> {
    uuids.map(|uuid| uuid.as_bytes().to_vec()).collect()
}

fn uuids_from_bytes(bytes: &[Vec<u8>]) -> Result<Vec<Uuid>> {
    bytes
        .iter()
        .map(|raw| uuid_from_bytes(raw, "index uuid"))
        .collect()
}
