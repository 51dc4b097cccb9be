//! Four-column tables, user index segments, hand-made rewrites and ledgers,
//! for the FRI writer tests.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_ledger::Ledger;
use refract_optimize::fri::load_ledger;
use refract_table::transaction::{Operation, RewriteGroup, Transaction};
use refract_table::{CommitHook, Dataset, IndexMetadata, OpenOptions};
use roaring::{RoaringBitmap, RoaringTreemap};
use uuid::Uuid;

use super::{memory_uri, write_options};

pub const DIM: i32 = 2;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("cat", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "vector",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), DIM),
            true,
        ),
    ]))
}

/// Rows `start..start + n`: id = i, cat = i % 5 (null when i % 13 == 0),
/// name = "row-i", vector = [i, -i].
pub fn rows(start: i64, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let cats: Int32Array = ids
        .iter()
        .map(|i| (i % 13 != 0).then_some((i % 5) as i32))
        .collect();
    let names: StringArray = ids.iter().map(|i| Some(format!("row-{i}"))).collect();
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), DIM);
    for i in &ids {
        vectors.values().append_value(*i as f32);
        vectors.values().append_value(-(*i as f32));
        vectors.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(cats),
        Arc::new(names),
        Arc::new(vectors.finish()),
    ];
    RecordBatch::try_new(schema(), columns).unwrap()
}

/// A dataset with ids `0..n` in fragments of `per_file` rows (ids 1, 2, …).
pub async fn dataset_with_rows(name: &str, n: usize, per_file: u64) -> Dataset {
    let mut dataset = Dataset::create(&memory_uri(name), schema(), OpenOptions::default())
        .await
        .unwrap();
    dataset
        .append(vec![rows(0, n)], &write_options(per_file))
        .await
        .unwrap();
    dataset
}

/// (row address, id) of every live row of `fragments`, in scan order.
pub async fn addressed_ids(dataset: &Dataset, fragments: &[u64]) -> Vec<(u64, i64)> {
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .fragments(fragments)
        .project(&["id"])
        .with_row_address()
        .try_into_stream()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    batches
        .iter()
        .flat_map(|b| {
            let ids = b.column(0).as_primitive::<Int64Type>().values().to_vec();
            let addrs = b.column(1).as_primitive::<UInt64Type>().values().to_vec();
            addrs.into_iter().zip(ids).collect::<Vec<_>>()
        })
        .collect()
}

pub fn fragment_ids(dataset: &Dataset) -> Vec<u64> {
    dataset.fragments().iter().map(|f| f.id).collect()
}

/// The ids of the fragments at list `positions` (ids change when a rewrite
/// before them relabels them; positions do not).
pub fn ids_at(dataset: &Dataset, positions: std::ops::Range<usize>) -> Vec<u64> {
    dataset.fragments()[positions]
        .iter()
        .map(|f| f.id)
        .collect()
}

/// A user index segment (metadata only) covering `fragments`.
pub fn user_segment(name: &str, fragments: &[u64], version: u64) -> IndexMetadata {
    IndexMetadata {
        uuid: Uuid::new_v4(),
        name: name.to_string(),
        fields: vec!["id".to_string()],
        fragment_bitmap: Some(
            fragments
                .iter()
                .map(|id| *id as u32)
                .collect::<RoaringBitmap>(),
        ),
        index_type: "btree".to_string(),
        details: Vec::new(),
        index_version: 0,
        dataset_version: version,
        files: Vec::new(),
        lance: Default::default(),
    }
}

/// Commits a user segment covering `fragments`; returns its uuid.
pub async fn add_user_index(dataset: &mut Dataset, name: &str, fragments: &[u64]) -> Uuid {
    let segment = user_segment(name, fragments, dataset.version());
    let uuid = segment.uuid;
    *dataset = dataset
        .commit(Operation::CreateIndex {
            new_indices: vec![segment],
            removed_index_uuids: vec![],
        })
        .await
        .unwrap();
    uuid
}

/// An ordered compaction of each run into `outputs` new fragments: live rows
/// in scan order, survivors captured as row addresses. Files are written, the
/// groups are not committed.
pub async fn plan_rewrite(dataset: &Dataset, runs: &[Vec<u64>], outputs: u64) -> Vec<RewriteGroup> {
    let mut groups = Vec::new();
    for run in runs {
        let batches: Vec<RecordBatch> = dataset
            .scan()
            .fragments(run)
            .with_row_address()
            .try_into_stream()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut surviving = RoaringTreemap::new();
        let mut data = Vec::new();
        let mut live = 0u64;
        for batch in &batches {
            let addrs = batch.column(4).as_primitive::<UInt64Type>();
            surviving.extend(addrs.values().iter().copied());
            live += batch.num_rows() as u64;
            data.push(batch.project(&[0, 1, 2, 3]).unwrap());
        }
        let per_file = live.div_ceil(outputs).max(1);
        let new_fragments = dataset
            .write_fragments(
                futures::stream::iter(data.into_iter().map(Ok)),
                &write_options(per_file),
            )
            .await
            .unwrap();
        let mut bytes = Vec::new();
        surviving.serialize_into(&mut bytes).unwrap();
        groups.push(RewriteGroup {
            old_fragment_ids: run.clone(),
            new_fragments,
            surviving_old_addresses: Some(bytes),
        });
    }
    groups
}

/// Commits `groups` as a Rewrite read at `dataset`'s version.
pub async fn commit_rewrite(
    dataset: &Dataset,
    groups: Vec<RewriteGroup>,
    hook: Option<&dyn CommitHook>,
) -> Result<Dataset> {
    let txn = Transaction::new(
        dataset.version(),
        Operation::Rewrite {
            groups,
            new_indices: vec![],
            removed_index_uuids: vec![],
        },
    );
    dataset.commit_transaction(txn, hook).await
}

/// The ledger of the dataset's FRI entry.
pub async fn ledger_of(dataset: &Dataset) -> Option<Ledger> {
    load_ledger(dataset)
        .await
        .unwrap()
        .map(|(_, ledger)| ledger)
}

/// Same as [`ledger_of`] (name used by other test files).
pub async fn ledger(dataset: &Dataset) -> Option<Ledger> {
    ledger_of(dataset).await
}

pub fn is_not_supported_upgrade(err: &Error) -> bool {
    matches!(err, Error::NotSupported { message } if message.contains("upgrade to a writer supporting tagged histories"))
}

/// Minimal protobuf writers for hand-built (hostile or future) ledger bytes.
pub mod pb {
    pub fn varint(mut value: u64, out: &mut Vec<u8>) {
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }

    pub fn field_varint(number: u32, value: u64, out: &mut Vec<u8>) {
        varint(u64::from(number) << 3, out);
        varint(value, out);
    }

    pub fn field_bytes(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
        varint((u64::from(number) << 3) | 2, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }

    pub fn digest(id: u64, rows: u64, deleted: u64) -> Vec<u8> {
        let mut out = Vec::new();
        field_varint(1, id, &mut out);
        field_varint(2, rows, &mut out);
        if deleted > 0 {
            field_varint(3, deleted, &mut out);
        }
        out
    }

    /// Lance's details envelope holding `content` inline.
    pub fn inline_details(content: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        field_bytes(1, content, &mut out);
        out
    }
}

/// An FRI entry with hand-built details.
pub fn raw_fri_entry(details: Vec<u8>, index_version: u32, version: u64) -> IndexMetadata {
    IndexMetadata {
        uuid: Uuid::new_v4(),
        name: refract_ledger::FRI_INDEX_NAME.to_string(),
        fields: vec![],
        fragment_bitmap: None,
        index_type: refract_ledger::FRI_INDEX_TYPE.to_string(),
        details,
        index_version,
        dataset_version: version,
        files: Vec::new(),
        lance: Default::default(),
    }
}
