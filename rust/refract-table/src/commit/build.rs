//! Applies an (already rebased) transaction to the latest manifest, producing
//! the candidate manifest of the next version.

use std::collections::HashSet;

use refract_core::{Error, Result};
use refract_ledger::flags::FLAG_DELETION_FILES;
use roaring::RoaringTreemap;
use uuid::Uuid;

use super::gate::covers;
use crate::format::fragment::FIRST_FRAGMENT_ID;
use crate::format::{Fragment, IndexMetadata, Manifest, MAX_FRAGMENT_ID};
use crate::transaction::{Operation, RewriteGroup, Transaction};

/// The next version, ready to publish.
pub(crate) struct Candidate {
    /// The new manifest (its `transaction` is the applied transaction).
    pub manifest: Manifest,
    /// Per rewrite group, the ids assigned to its new fragments.
    pub assigned: Vec<Vec<u64>>,
}

/// Hands out fresh fragment ids above the high-water mark.
struct IdAllocator {
    /// The highest id assigned so far; `None` before the first.
    max: Option<u64>,
}

impl IdAllocator {
    fn next(&mut self) -> Result<u64> {
        let next = self.max.map_or(FIRST_FRAGMENT_ID, |max| max + 1);
        if next > MAX_FRAGMENT_ID {
            return Err(Error::not_supported(
                "fragment ids are exhausted (2^32 - 1 fragments were created)",
            ));
        }
        self.max = Some(next);
        Ok(next)
    }

    fn assign(&mut self, fragments: &[Fragment]) -> Result<Vec<Fragment>> {
        fragments
            .iter()
            .map(|fragment| {
                Ok(Fragment {
                    id: self.next()?,
                    ..fragment.clone()
                })
            })
            .collect()
    }
}

/// Builds version `base.version + 1` from `base` and `txn`. `restored` is the
/// manifest a Restore brings back (loaded by the caller).
pub(crate) fn build_candidate(
    base: &Manifest,
    txn: &Transaction,
    restored: Option<&Manifest>,
    timestamp_ms: i64,
) -> Result<Candidate> {
    let mut next = base.clone();
    let mut ids = IdAllocator {
        max: base.max_fragment_id,
    };
    let mut assigned = Vec::new();
    let applied = match &txn.operation {
        Operation::Append { fragments } => {
            let fragments = ids.assign(fragments)?;
            next.fragments.extend(fragments.iter().cloned());
            Operation::Append { fragments }
        }
        Operation::Delete {
            updated_fragments,
            removed_fragment_ids,
            predicate,
        } => {
            apply_delete(&mut next, updated_fragments, removed_fragment_ids)?;
            Operation::Delete {
                updated_fragments: updated_fragments.clone(),
                removed_fragment_ids: removed_fragment_ids.clone(),
                predicate: predicate.clone(),
            }
        }
        Operation::Rewrite {
            groups,
            new_indices,
            removed_index_uuids,
        } => {
            let groups = apply_rewrite(&mut next, groups, &mut ids, &mut assigned)?;
            apply_index_changes(&mut next, new_indices, removed_index_uuids)?;
            Operation::Rewrite {
                groups,
                new_indices: new_indices.clone(),
                removed_index_uuids: removed_index_uuids.clone(),
            }
        }
        Operation::CreateIndex {
            new_indices,
            removed_index_uuids,
        } => {
            apply_index_changes(&mut next, new_indices, removed_index_uuids)?;
            txn.operation.clone()
        }
        Operation::Partition {
            source_fragment_ids,
            destinations,
            map_id,
            map_size_bytes,
            map_checksum,
            relabelled: _,
        } => {
            // Positionally a partition is one rewrite group: the run is
            // replaced in place; the groups after it are relabelled runs.
            let run = RewriteGroup {
                old_fragment_ids: source_fragment_ids.clone(),
                new_fragments: destinations.clone(),
                surviving_old_addresses: None,
            };
            let mut applied = apply_rewrite(&mut next, &[run], &mut ids, &mut assigned)?;
            let relabelled = applied.split_off(1);
            Operation::Partition {
                source_fragment_ids: source_fragment_ids.clone(),
                destinations: applied
                    .into_iter()
                    .flat_map(|group| group.new_fragments)
                    .collect(),
                map_id: *map_id,
                map_size_bytes: *map_size_bytes,
                map_checksum: map_checksum.clone(),
                relabelled,
            }
        }
        Operation::Lance { name } => {
            return Err(Error::invalid_input(format!(
                "Refract does not commit Lance's {name} operation"
            )))
        }
        Operation::Restore { version } => {
            let restored = restored
                .filter(|restored| restored.version == *version)
                .ok_or_else(|| Error::not_found(format!("version {version} to restore")))?;
            apply_restore(&mut next, restored);
            txn.operation.clone()
        }
    };
    next.max_fragment_id = ids.max.max(next.max_fragment_id);
    next.derive_flags();
    next.lance.transaction_file = format!("{}-{}.txn", txn.read_version, txn.uuid.hyphenated());
    next.version = base.version + 1;
    next.timestamp_ms = timestamp_ms;
    next.transaction = Some(Transaction {
        uuid: txn.uuid,
        read_version: txn.read_version,
        operation: applied,
    });
    Ok(Candidate {
        manifest: next,
        assigned,
    })
}

fn apply_delete(next: &mut Manifest, updated: &[Fragment], removed: &[u64]) -> Result<()> {
    for fragment in updated {
        let slot = next
            .fragments
            .iter_mut()
            .find(|existing| existing.id == fragment.id)
            .ok_or_else(|| missing_fragment(fragment.id))?;
        slot.deletion_file = fragment.deletion_file.clone();
    }
    let removed: HashSet<u64> = removed.iter().copied().collect();
    if let Some(id) = removed.iter().find(|id| next.fragment(**id).is_none()) {
        return Err(missing_fragment(*id));
    }
    next.fragments
        .retain(|fragment| !removed.contains(&fragment.id));
    next.reader_flags |= FLAG_DELETION_FILES;
    next.writer_flags |= FLAG_DELETION_FILES;
    Ok(())
}

/// Replaces each group's contiguous run in place with its new fragments.
///
/// Lance requires the fragment list sorted by id (pylance's `validate()`, and
/// every pylance commit re-sorts it). New fragments take ids above the
/// high-water mark, so every fragment after the first replaced run is
/// *relabelled*: it keeps its data and deletion files under a
/// fresh id. Each run of relabelled fragments is recorded as an extra group,
/// after the given ones, with every physical row surviving (an identity
/// remap), so indices and the FRI move its rows like any rewritten row (one
/// FRI transition per run, not per fragment). Ids are handed out in list order.
fn apply_rewrite(
    next: &mut Manifest,
    groups: &[RewriteGroup],
    ids: &mut IdAllocator,
    assigned: &mut Vec<Vec<u64>>,
) -> Result<Vec<RewriteGroup>> {
    let mut seen = HashSet::new();
    for id in groups.iter().flat_map(|group| &group.old_fragment_ids) {
        if !seen.insert(*id) {
            return Err(Error::invalid_input(format!(
                "fragment {id} appears in more than one rewrite group"
            )));
        }
    }
    // One pass over the fragment list, not one search and splice per group:
    // a commit of 10,000 results stays linear in the fragments it touches.
    let index = next.fragment_index();
    let mut runs: Vec<(usize, usize, usize)> = Vec::with_capacity(groups.len());
    for (at, group) in groups.iter().enumerate() {
        let first = group
            .old_fragment_ids
            .first()
            .ok_or_else(|| Error::invalid_input("a rewrite group has no old fragments"))?;
        let start = index
            .position(*first)
            .ok_or_else(|| missing_fragment(*first))?;
        let end = start + group.old_fragment_ids.len();
        let run_matches = next.fragments.get(start..end).is_some_and(|run| {
            run.iter()
                .map(|fragment| fragment.id)
                .eq(group.old_fragment_ids.iter().copied())
        });
        if !run_matches {
            if let Some(id) = group
                .old_fragment_ids
                .iter()
                .find(|id| !index.contains(**id))
            {
                return Err(missing_fragment(*id));
            }
            return Err(Error::invalid_input(format!(
                "rewrite group {:?} is not a contiguous run of the fragment list in order",
                group.old_fragment_ids
            )));
        }
        runs.push((start, end, at));
    }
    // The runs are disjoint (checked above): replace each in place.
    runs.sort_unstable();
    // Which index segments cover a fragment (one bit per segment).
    let indices = &next.indices;
    let coverage =
        |id: u64| -> Vec<bool> { indices.iter().map(|index| covers(index, id)).collect() };
    let mut applied: Vec<RewriteGroup> = groups.to_vec();
    let mut group_ids: Vec<Vec<u64>> = vec![Vec::new(); groups.len()];
    // Maximal runs of relabelled fragments, one group each: (old, relabelled).
    let mut relabels: Vec<Vec<(Fragment, Fragment)>> = Vec::new();
    let old = std::mem::take(&mut next.fragments);
    let mut kept = old.into_iter().enumerate().peekable();
    // A kept fragment is relabelled only when an id at or above its own is
    // already listed (a replaced run with outputs before it).
    let keep = |fragment: Fragment,
                ids: &mut IdAllocator,
                out: &mut Vec<Fragment>,
                relabels: &mut Vec<Vec<(Fragment, Fragment)>>|
     -> Result<()> {
        let sorted = out.last().is_none_or(|last| last.id < fragment.id);
        if sorted {
            out.push(fragment);
            return Ok(());
        }
        let relabelled = Fragment {
            id: ids.next()?,
            ..fragment.clone()
        };
        out.push(relabelled.clone());
        // Run boundaries were pushed as empty runs (see below). A run also
        // ends where index coverage changes, so each relabel transition's
        // destinations are covered exactly as its sources were.
        let same_coverage = |run: &Vec<(Fragment, Fragment)>| {
            run.last()
                .is_none_or(|(previous, _)| coverage(previous.id) == coverage(fragment.id))
        };
        match relabels.last_mut() {
            Some(run) if same_coverage(run) => run.push((fragment, relabelled)),
            _ => relabels.push(vec![(fragment, relabelled)]),
        }
        Ok(())
    };
    for (start, end, group) in runs {
        while let Some((_, fragment)) = kept.next_if(|(at, _)| *at < start) {
            keep(fragment, ids, &mut next.fragments, &mut relabels)?;
        }
        while kept.next_if(|(at, _)| *at < end).is_some() {}
        let new_fragments = ids.assign(&groups[group].new_fragments)?;
        group_ids[group] = new_fragments.iter().map(|fragment| fragment.id).collect();
        next.fragments.extend(new_fragments.iter().cloned());
        applied[group].new_fragments = new_fragments;
        relabels.push(Vec::new());
    }
    for (_, fragment) in kept {
        keep(fragment, ids, &mut next.fragments, &mut relabels)?;
    }
    assigned.extend(group_ids);
    for run in relabels.into_iter().filter(|run| !run.is_empty()) {
        let group = relabel_group(run)?;
        assigned.push(group.new_fragments.iter().map(|f| f.id).collect());
        applied.push(group);
    }
    Ok(applied)
}

/// The group recording that each `(old, relabelled)` fragment of a run lives
/// on under its new id (same files, same deletions, offsets unchanged): every
/// physical row survives, so the ordered-compaction remap of the group is the
/// identity on offsets and a row deleted in `old` maps to the same, still
/// deleted, offset.
fn relabel_group(run: Vec<(Fragment, Fragment)>) -> Result<RewriteGroup> {
    let mut surviving = RoaringTreemap::new();
    for (old, _) in &run {
        // Manifest fragment ids are below 2^32 (checked on decode and on
        // assignment), so the shift cannot overflow.
        let first = old.id << 32;
        surviving.insert_range(first..first + old.physical_rows);
    }
    let mut bytes = Vec::with_capacity(surviving.serialized_size());
    surviving
        .serialize_into(&mut bytes)
        .map_err(|e| Error::invalid_input(format!("serializing relabelled rows: {e}")))?;
    let (old, relabelled): (Vec<_>, Vec<_>) = run.into_iter().unzip();
    Ok(RewriteGroup {
        old_fragment_ids: old.iter().map(|fragment| fragment.id).collect(),
        new_fragments: relabelled,
        surviving_old_addresses: Some(bytes),
    })
}

fn apply_index_changes(
    next: &mut Manifest,
    new_indices: &[IndexMetadata],
    removed: &[Uuid],
) -> Result<()> {
    for uuid in removed {
        let before = next.indices.len();
        next.indices.retain(|index| index.uuid != *uuid);
        if next.indices.len() == before {
            return Err(Error::conflict(
                format!("index segment {uuid} to replace no longer exists"),
                true,
            ));
        }
    }
    for index in new_indices {
        if next
            .indices
            .iter()
            .any(|existing| existing.uuid == index.uuid)
        {
            return Err(Error::invalid_input(format!(
                "index segment {} already exists",
                index.uuid
            )));
        }
        next.indices.push(index.clone());
    }
    Ok(())
}

/// Restores content; keeps the id high-water mark and sticky flags.
fn apply_restore(next: &mut Manifest, restored: &Manifest) {
    next.schema = restored.schema.clone();
    next.lance = restored.lance.clone();
    next.fragments = restored.fragments.clone();
    next.indices = restored.indices.clone();
    next.max_fragment_id = next.max_fragment_id.max(restored.max_fragment_id);
    next.reader_flags |= restored.reader_flags;
    next.writer_flags |= restored.writer_flags;
}

fn missing_fragment(id: u64) -> Error {
    Error::conflict(
        format!("fragment {id} was removed or rewritten by a concurrent commit"),
        true,
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::format::DataFile;
    use crate::io::data_file_path;

    fn fragment(id: u64, rows: u64) -> Fragment {
        Fragment {
            id,
            files: vec![DataFile {
                path: data_file_path(&format!("f{id}-{rows}.lance")).unwrap(),
                size_bytes: 100,
                num_rows: rows,
                checksum: None,
                layout: Default::default(),
            }],
            physical_rows: rows,
            deletion_file: None,
        }
    }

    fn manifest(ids: &[u64], max: u64) -> Manifest {
        Manifest {
            version: 3,
            schema: Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)])),
            fragments: ids.iter().map(|id| fragment(*id, 10)).collect(),
            max_fragment_id: Some(max),
            reader_flags: 0,
            writer_flags: 0,
            indices: vec![],
            timestamp_ms: 0,
            transaction: None,
            lance: Default::default(),
        }
    }

    fn ids(manifest: &Manifest) -> Vec<u64> {
        manifest.fragments.iter().map(|f| f.id).collect()
    }

    fn build(base: &Manifest, operation: Operation) -> Result<Candidate> {
        build_candidate(base, &Transaction::new(base.version, operation), None, 7)
    }

    #[test]
    fn append_assigns_ids_above_the_high_water_mark() {
        // Fragment 9 was removed earlier; its id is never reused.
        let base = manifest(&[1, 2], 9);
        let candidate = build(
            &base,
            Operation::Append {
                fragments: vec![fragment(0, 5), fragment(0, 6)],
            },
        )
        .unwrap();
        assert_eq!(ids(&candidate.manifest), vec![1, 2, 10, 11]);
        assert_eq!(candidate.manifest.max_fragment_id, Some(11));
        assert_eq!(candidate.manifest.version, 4);
        let Some(Transaction {
            operation: Operation::Append { fragments },
            ..
        }) = &candidate.manifest.transaction
        else {
            panic!("append transaction recorded");
        };
        assert_eq!(
            fragments.iter().map(|f| f.id).collect::<Vec<_>>(),
            vec![10, 11]
        );
    }

    #[test]
    fn fragment_index_finds_fragments_in_any_id_order() {
        let base = manifest(&[5, 2, 9], 9);
        let index = base.fragment_index();
        assert_eq!(index.position(2), Some(1));
        assert_eq!(index.get(9).map(|f| f.id), Some(9));
        assert!(index.contains(5) && !index.contains(3));
        assert!(index.get(3).is_none() && index.position(3).is_none());
    }

    #[test]
    fn rewrite_groups_are_spliced_in_place() {
        let base = manifest(&[1, 2, 3, 4, 5, 6], 6);
        let group = |old: Vec<u64>, new: usize| RewriteGroup {
            old_fragment_ids: old,
            new_fragments: (0..new).map(|_| fragment(0, 3)).collect(),
            surviving_old_addresses: None,
        };
        let candidate = build(
            &base,
            Operation::Rewrite {
                groups: vec![group(vec![5, 6], 1), group(vec![2, 3], 2)],
                new_indices: vec![],
                removed_index_uuids: vec![],
            },
        )
        .unwrap();
        // Ids follow list order: 4 is relabelled between the two runs.
        assert_eq!(ids(&candidate.manifest), vec![1, 7, 8, 9, 10]);
        assert_eq!(candidate.assigned, vec![vec![10], vec![7, 8], vec![9]]);
        assert_eq!(candidate.manifest.max_fragment_id, Some(10));
        let Some(Transaction {
            operation: Operation::Rewrite { groups, .. },
            ..
        }) = &candidate.manifest.transaction
        else {
            panic!("rewrite transaction recorded");
        };
        let relabel = &groups[2];
        assert_eq!(relabel.old_fragment_ids, vec![4]);
        assert_eq!(relabel.new_fragments[0].id, 9);
        assert_eq!(relabel.new_fragments[0].files, base.fragments[3].files);
        let surviving =
            RoaringTreemap::deserialize_from(relabel.surviving_old_addresses.as_deref().unwrap())
                .unwrap();
        assert_eq!(
            surviving.iter().collect::<Vec<_>>(),
            (0..10).map(|offset| 4 << 32 | offset).collect::<Vec<_>>()
        );
    }

    #[test]
    fn relabel_runs_split_where_index_coverage_changes() {
        let mut base = manifest(&[1, 2, 3, 4, 5], 5);
        base.indices.push(IndexMetadata {
            uuid: Uuid::new_v4(),
            name: "id_idx".to_string(),
            fields: vec!["a".to_string()],
            fragment_bitmap: Some([3u32, 4].into_iter().collect()),
            index_type: "btree".to_string(),
            details: vec![],
            index_version: 1,
            dataset_version: 3,
            files: Vec::new(),
            lance: Default::default(),
        });
        let candidate = build(
            &base,
            Operation::Rewrite {
                groups: vec![RewriteGroup {
                    old_fragment_ids: vec![1],
                    new_fragments: vec![fragment(0, 10)],
                    surviving_old_addresses: None,
                }],
                new_indices: vec![],
                removed_index_uuids: vec![],
            },
        )
        .unwrap();
        assert_eq!(ids(&candidate.manifest), vec![6, 7, 8, 9, 10]);
        // 2 (uncovered), then 3 and 4 (covered), then 5 (uncovered).
        assert_eq!(
            candidate.assigned,
            vec![vec![6], vec![7], vec![8, 9], vec![10]]
        );
    }

    #[test]
    fn a_rewrite_at_the_tail_relabels_nothing() {
        let base = manifest(&[1, 2, 3], 3);
        let candidate = build(
            &base,
            Operation::Rewrite {
                groups: vec![RewriteGroup {
                    old_fragment_ids: vec![2, 3],
                    new_fragments: vec![fragment(0, 20)],
                    surviving_old_addresses: None,
                }],
                new_indices: vec![],
                removed_index_uuids: vec![],
            },
        )
        .unwrap();
        assert_eq!(ids(&candidate.manifest), vec![1, 4]);
        assert_eq!(candidate.assigned, vec![vec![4]]);
    }

    #[test]
    fn a_partition_before_the_tail_relabels_what_follows() {
        let base = manifest(&[1, 2, 3, 4], 4);
        let candidate = build(
            &base,
            Operation::Partition {
                source_fragment_ids: vec![2],
                destinations: vec![fragment(0, 4), fragment(0, 6)],
                map_id: None,
                map_size_bytes: 0,
                map_checksum: None,
                relabelled: vec![],
            },
        )
        .unwrap();
        assert_eq!(ids(&candidate.manifest), vec![1, 5, 6, 7, 8]);
        assert_eq!(candidate.assigned, vec![vec![5, 6], vec![7, 8]]);
        let Some(txn) = &candidate.manifest.transaction else {
            panic!("the candidate records its transaction");
        };
        let Operation::Partition {
            destinations,
            relabelled,
            ..
        } = &txn.operation
        else {
            panic!("a Partition stays a Partition");
        };
        assert_eq!(
            destinations.iter().map(|f| f.id).collect::<Vec<_>>(),
            [5, 6]
        );
        assert_eq!(relabelled.len(), 1);
        assert_eq!(relabelled[0].old_fragment_ids, vec![3, 4]);
        assert_eq!(
            relabelled[0].new_fragments[1].files,
            base.fragments[3].files
        );
        // Lance's record round-trips: partition group first, relabelled runs after.
        let decoded = Manifest::decode(&candidate.manifest.encode().unwrap()).unwrap();
        assert_eq!(decoded.transaction, candidate.manifest.transaction);
    }

    #[test]
    fn rewrite_of_a_missing_fragment_is_retryable() {
        let base = manifest(&[1, 3], 3);
        let err = build(
            &base,
            Operation::Rewrite {
                groups: vec![RewriteGroup {
                    old_fragment_ids: vec![2],
                    new_fragments: vec![],
                    surviving_old_addresses: None,
                }],
                new_indices: vec![],
                removed_index_uuids: vec![],
            },
        )
        .err()
        .unwrap();
        assert!(err.is_retryable_conflict(), "{err}");
    }

    #[test]
    fn restore_keeps_the_high_water_mark_and_flags() {
        let mut base = manifest(&[4, 5], 5);
        base.reader_flags = FLAG_DELETION_FILES;
        base.writer_flags = FLAG_DELETION_FILES;
        let mut old = manifest(&[1], 1);
        old.version = 1;
        let txn = Transaction::new(3, Operation::Restore { version: 1 });
        let candidate = build_candidate(&base, &txn, Some(&old), 7).unwrap();
        assert_eq!(ids(&candidate.manifest), vec![1]);
        assert_eq!(candidate.manifest.max_fragment_id, Some(5));
        assert_eq!(candidate.manifest.reader_flags, FLAG_DELETION_FILES);
        assert_eq!(candidate.manifest.version, 4);
    }

    #[test]
    fn removing_an_absent_index_segment_is_retryable() {
        let base = manifest(&[1], 1);
        let err = build(
            &base,
            Operation::CreateIndex {
                new_indices: vec![],
                removed_index_uuids: vec![Uuid::new_v4()],
            },
        )
        .err()
        .unwrap();
        assert!(err.is_retryable_conflict(), "{err}");
    }
}
