//! The checks of a stable partition, shared by the partition tests.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use futures::TryStreamExt;
use refract_ledger::Mapping;
use refract_optimize::fri::{load_ledger, PartitionMetrics};
use refract_reader::rowmap::{row_map_path, ChunkCacheMode, RowMapReader, RowMapSource};
use refract_table::transaction::Operation;
use refract_table::Dataset;

use super::fri::addressed_ids;

/// The destinations the latest commit (a Partition) wrote.
pub fn destinations(dataset: &Dataset) -> Vec<u64> {
    match &dataset.manifest().transaction.as_ref().unwrap().operation {
        Operation::Partition { destinations, .. } => destinations.iter().map(|f| f.id).collect(),
        other => panic!("expected a Partition, got {}", other.name()),
    }
}

/// The (old, new) ids of the fragments the latest commit (a Partition)
/// relabelled, in list order.
pub fn relabelled(dataset: &Dataset) -> Vec<(u64, u64)> {
    match &dataset.manifest().transaction.as_ref().unwrap().operation {
        Operation::Partition { relabelled, .. } => relabelled
            .iter()
            .flat_map(|group| {
                group
                    .old_fragment_ids
                    .iter()
                    .zip(&group.new_fragments)
                    .map(|(old, new)| (*old, new.id))
            })
            .collect(),
        other => panic!("expected a Partition, got {}", other.name()),
    }
}

/// (id, cat) of every row of `fragment`, in scan order.
pub async fn fragment_rows(dataset: &Dataset, fragment: u64) -> Vec<(i64, Option<i32>)> {
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .fragments(&[fragment])
        .project(&["id", "cat"])
        .try_into_stream()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    batches
        .iter()
        .flat_map(|b| {
            let ids = b.column(0).as_primitive::<Int64Type>();
            let cats = b.column(1).as_primitive::<Int32Type>();
            (0..b.num_rows())
                .map(|i| (ids.value(i), (!cats.is_null(i)).then(|| cats.value(i))))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Checks the partition `before` -> `after` of `sources`: full content (as a
/// multiset), relative order within each destination (ids grow in source
/// order in the fixtures), `label(cat)` = destination position, untouched
/// fragments around the run, and — when a row map was written — that it
/// validates and translates every source address onto a row with the same id.
pub async fn check_partition(
    before: &Dataset,
    after: &Dataset,
    sources: &[u64],
    metrics: &PartitionMetrics,
    label: Option<&dyn Fn(Option<i32>) -> usize>,
    keyed_by_cat: bool,
) {
    let dests = destinations(after);
    assert_eq!(metrics.fragments_added, dests.len() as u64);
    // Positional: the run is replaced in place; the fragments after it live
    // on under fresh ids (same files), so ids stay sorted.
    let old: Vec<u64> = before.fragments().iter().map(|f| f.id).collect();
    let start = old.iter().position(|id| *id == sources[0]).unwrap();
    let tail = &old[start + sources.len()..];
    let relabels = relabelled(after);
    assert_eq!(
        relabels.iter().map(|(old, _)| *old).collect::<Vec<_>>(),
        if dests.is_empty() {
            vec![]
        } else {
            tail.to_vec()
        }
    );
    let mut expected = old[..start].to_vec();
    expected.extend(&dests);
    expected.extend(relabels.iter().map(|(_, new)| *new));
    if dests.is_empty() {
        expected.extend(tail);
    }
    let listed: Vec<u64> = after.fragments().iter().map(|f| f.id).collect();
    assert_eq!(listed, expected);
    assert!(
        listed.windows(2).all(|w| w[0] < w[1]),
        "ids sorted: {listed:?}"
    );
    for (old_id, new_id) in &relabels {
        let files = |dataset: &Dataset, id: u64| {
            let fragment = dataset.fragments().iter().find(|f| f.id == id).unwrap();
            (
                fragment.files.clone(),
                fragment.physical_rows,
                fragment.num_deleted_rows(),
            )
        };
        assert_eq!(files(before, *old_id), files(after, *new_id));
    }

    let before_rows = addressed_ids(before, sources).await;
    let mut all = Vec::new();
    let mut labels = Vec::new();
    let mut home: HashMap<Option<i32>, u64> = HashMap::new();
    for dest in &dests {
        let rows = fragment_rows(after, *dest).await;
        assert!(!rows.is_empty(), "destination {dest} is empty");
        assert!(
            rows.windows(2).all(|w| w[0].0 < w[1].0),
            "order within {dest}"
        );
        if let Some(label) = label {
            let first_label = label(rows[0].1);
            assert!(rows.iter().all(|(_, cat)| label(*cat) == first_label));
            labels.push(first_label);
        }
        if keyed_by_cat {
            for (_, cat) in &rows {
                // Labels are a function of the value: one destination per value.
                assert_eq!(*home.entry(*cat).or_insert(*dest), *dest, "cat {cat:?}");
            }
        }
        all.extend(rows.iter().map(|(id, _)| *id));
    }
    assert!(
        labels.windows(2).all(|w| w[0] < w[1]),
        "destinations in label order"
    );
    let mut expected_ids: Vec<i64> = before_rows.iter().map(|(_, id)| *id).collect();
    all.sort_unstable();
    expected_ids.sort_unstable();
    assert_eq!(all, expected_ids, "content kept");
    assert_eq!(metrics.rows_written, expected_ids.len() as u64);

    let Some(map_id) = metrics.map_id else {
        return;
    };
    let (_, ledger) = load_ledger(after).await.unwrap().unwrap();
    let record = ledger.lineage().consumer_of(sources[0]).unwrap();
    let Mapping::StablePartition {
        map_id: recorded_id,
        map_size_bytes,
        map_checksum,
    } = record.mapping()
    else {
        panic!("a partition records a stable-partition mapping");
    };
    assert_eq!(
        (*recorded_id, *map_size_bytes),
        (map_id, metrics.map_size_bytes)
    );
    // The recorded checksum is the checksum of the file as stored.
    let checksum = map_checksum
        .clone()
        .expect("the row map's checksum is recorded");
    let stored = after
        .store()
        .checksum_of(&row_map_path(&map_id))
        .await
        .unwrap();
    assert_eq!(
        (stored.size_bytes, &stored.checksum),
        (metrics.map_size_bytes, &checksum)
    );
    assert_eq!(
        record
            .destinations()
            .iter()
            .map(|d| d.id)
            .collect::<Vec<_>>(),
        dests
    );
    let source_rows: Vec<RowMapSource> = record
        .sources()
        .iter()
        .map(|d| RowMapSource {
            fragment_id: d.id,
            physical_rows: d.physical_rows,
        })
        .collect();
    let dest_rows: Vec<(u64, u64)> = record
        .destinations()
        .iter()
        .map(|d| (d.id, d.physical_rows))
        .collect();
    let reader = RowMapReader::open(
        after.store(),
        &map_id,
        metrics.map_size_bytes,
        Some(&checksum),
        *record.fingerprint(),
        &source_rows,
        &dest_rows,
        after.session().cache(),
        ChunkCacheMode::Lazy,
    )
    .await
    .unwrap();
    let live: HashMap<u64, i64> = before_rows.into_iter().collect();
    let addresses: Vec<u64> = record
        .sources()
        .iter()
        .flat_map(|d| (0..d.physical_rows).map(move |o| (d.id << 32) | o))
        .collect();
    let mut out = Vec::new();
    for chunk in addresses.chunks(65_536) {
        reader.translate(chunk, &mut out).await.unwrap();
        let moved: Vec<(u64, u64)> = chunk
            .iter()
            .zip(&out)
            .filter_map(|(old, new)| {
                assert_eq!(new.is_some(), live.contains_key(old), "address {old:#x}");
                new.map(|new| (*old, new))
            })
            .collect();
        let news: Vec<u64> = moved.iter().map(|(_, new)| *new).collect();
        let taken = after.take(&news, Some(&["id"])).await.unwrap();
        let ids = taken.column(0).as_primitive::<Int64Type>().values();
        for ((old, _), id) in moved.iter().zip(ids.iter()) {
            assert_eq!(live[old], *id);
        }
    }
}
