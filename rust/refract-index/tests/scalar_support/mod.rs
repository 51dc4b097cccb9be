//! Shared fixtures for the btree/bitmap integration tests: a small dataset, a
//! brute-force reference, and a test-only compaction that remaps indices inline
//! through the real commit hook path.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use arrow_array::{Int32Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::materialize::MaterializeBudget;
use refract_core::remap::{FragmentRows, RewriteGroupInput};
use refract_core::{Result, RowAddrRemap};
use refract_index::{
    apply_index_rewrite, remap_indices_for_rewrite, IndexRegistry, IndexUse, Query, RewrittenGroup,
    SkipReport,
};
use refract_table::{
    CommitHook, Dataset, Manifest, OpenOptions, Operation, RewriteGroup, Transaction, WriteOptions,
    ROW_ADDRESS_COLUMN,
};
use roaring::RoaringTreemap;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::Int32, true),
        Field::new("s", DataType::Utf8, true),
    ]))
}

/// Rows `start..start+n`: x = (i * 7) % 50 (null every 13th), s = "k{i % 17}" (null every 11th).
pub fn rows(start: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n).collect();
    let xs: Int32Array = ids
        .iter()
        .map(|i| (i % 13 != 5).then_some(((i * 7) % 50) as i32))
        .collect();
    let ss: StringArray = ids
        .iter()
        .map(|i| (i % 11 != 3).then(|| format!("k{}", i % 17)))
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(ids)), Arc::new(xs), Arc::new(ss)],
    )
    .unwrap()
}

pub fn write_options(rows_per_file: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows_per_file,
        ..WriteOptions::default()
    }
}

/// A dataset of `fragments` fragments of `per_fragment` rows in a temp dir.
pub async fn dataset(dir: &tempfile::TempDir, fragments: i64, per_fragment: i64) -> Dataset {
    let uri = dir.path().join("ds");
    let mut ds = Dataset::create(uri.to_str().unwrap(), schema(), OpenOptions::default())
        .await
        .unwrap();
    ds.append(
        vec![rows(0, fragments * per_fragment)],
        &write_options(per_fragment as u64),
    )
    .await
    .unwrap();
    ds
}

/// The reference: a plain filtered scan with row addresses.
pub async fn brute_force(ds: &Dataset, filter: &str) -> RecordBatch {
    ds.scan()
        .filter(filter)
        .unwrap()
        .with_row_address()
        .try_into_batch()
        .await
        .unwrap()
}

/// Asserts that the query equals the scan exactly, both with the index path
/// forced and with the planner's choice; returns the forced run's explain.
pub async fn assert_query_matches(ds: &Dataset, filter: &str) -> refract_index::Explain {
    let expected = brute_force(ds, filter).await;
    let mut explains = Vec::new();
    for index_use in [IndexUse::Always, IndexUse::Auto] {
        let result = Query::new(ds)
            .filter(filter)
            .unwrap()
            .index_use(index_use)
            .execute()
            .await
            .unwrap();
        assert_eq!(
            result.batch.columns(),
            expected.columns(),
            "filter {filter} ({index_use:?}): query result differs from scan (explain {:?})",
            result.explain
        );
        assert_eq!(
            result.batch.schema().fields().len(),
            expected.schema().fields().len()
        );
        explains.push(result.explain);
    }
    explains.swap_remove(0)
}

/// Addresses of every live row of `fragment_ids`.
pub async fn live_addresses(ds: &Dataset, fragment_ids: &[u64]) -> RoaringTreemap {
    let batch = ds
        .scan()
        .project(&[])
        .with_row_address()
        .fragments(fragment_ids)
        .try_into_batch()
        .await
        .unwrap();
    let addrs = batch
        .column_by_name(ROW_ADDRESS_COLUMN)
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    addrs.values().iter().copied().collect()
}

/// Inline index remap, as compaction would do it from its commit hook.
pub struct RemapHook {
    pub registry: IndexRegistry,
    pub budget: MaterializeBudget,
    pub old: Vec<FragmentRows>,
    pub surviving: RoaringTreemap,
    pub new_rows: Vec<u64>,
    pub skipped: Mutex<Vec<SkipReport>>,
}

#[async_trait]
impl CommitHook for RemapHook {
    async fn before_publish(
        &self,
        dataset: &Dataset,
        candidate: &mut Manifest,
        assigned: &[Vec<u64>],
    ) -> Result<()> {
        let new_ids = assigned.first().cloned().unwrap_or_default();
        let new_fragments: Vec<FragmentRows> = new_ids
            .iter()
            .zip(&self.new_rows)
            .map(|(id, rows)| FragmentRows::new(*id, *rows))
            .collect();
        let mut inputs = vec![RewriteGroupInput {
            old_fragments: self.old.clone(),
            new_fragments,
            surviving: self.surviving.clone(),
        }];
        let mut groups = vec![RewrittenGroup {
            old_fragment_ids: self.old.iter().map(|f| f.id).collect(),
            new_fragment_ids: new_ids,
        }];
        // The fragments the commit relabelled after the run move too.
        let Some(Operation::Rewrite {
            groups: applied, ..
        }) = candidate.transaction.as_ref().map(|txn| &txn.operation)
        else {
            panic!("a rewrite commit");
        };
        for (relabel, ids) in applied.iter().zip(assigned).skip(1) {
            let rows = |id: &u64| dataset.manifest().fragment(*id).unwrap().physical_rows;
            inputs.push(RewriteGroupInput {
                old_fragments: relabel
                    .old_fragment_ids
                    .iter()
                    .map(|id| FragmentRows::new(*id, rows(id)))
                    .collect(),
                new_fragments: relabel
                    .old_fragment_ids
                    .iter()
                    .zip(ids)
                    .map(|(old, new)| FragmentRows::new(*new, rows(old)))
                    .collect(),
                surviving: RoaringTreemap::deserialize_from(
                    relabel.surviving_old_addresses.as_deref().unwrap(),
                )
                .unwrap(),
            });
            groups.push(RewrittenGroup {
                old_fragment_ids: relabel.old_fragment_ids.clone(),
                new_fragment_ids: ids.clone(),
            });
        }
        let remap = RowAddrRemap::compact(inputs)?;
        let rewrite = remap_indices_for_rewrite(
            dataset,
            candidate,
            &remap,
            &groups,
            &self.registry,
            self.budget,
        )
        .await?;
        apply_index_rewrite(candidate, &rewrite);
        self.skipped.lock().unwrap().extend(rewrite.skipped);
        Ok(())
    }
}

/// Rewrites the contiguous run `old_ids` into fresh fragments (deleted rows
/// dropped), remapping indices inline. Returns the new version and skip reports.
pub async fn compact(
    ds: &Dataset,
    old_ids: &[u64],
    registry: IndexRegistry,
    budget: MaterializeBudget,
) -> (Dataset, Vec<SkipReport>) {
    let surviving = live_addresses(ds, old_ids).await;
    let data = ds.scan().fragments(old_ids).try_into_batch().await.unwrap();
    let new_fragments = ds
        .write_fragments(
            futures::stream::iter(vec![Ok(data)]),
            &write_options(1_000_000),
        )
        .await
        .unwrap();
    let old: Vec<FragmentRows> = old_ids
        .iter()
        .map(|id| FragmentRows::new(*id, ds.manifest().fragment(*id).unwrap().physical_rows))
        .collect();
    let hook = RemapHook {
        registry,
        budget,
        old,
        surviving,
        new_rows: new_fragments.iter().map(|f| f.physical_rows).collect(),
        skipped: Mutex::new(Vec::new()),
    };
    let txn = Transaction::new(
        ds.version(),
        Operation::Rewrite {
            groups: vec![RewriteGroup {
                old_fragment_ids: old_ids.to_vec(),
                new_fragments,
                surviving_old_addresses: None,
            }],
            new_indices: Vec::new(),
            removed_index_uuids: Vec::new(),
        },
    );
    let next = ds.commit_transaction(txn, Some(&hook)).await.unwrap();
    let skipped = hook.skipped.into_inner().unwrap();
    (next, skipped)
}

/// Collects a stream of batches (helper for direct file inspection).
pub async fn collect(
    stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
) -> Vec<RecordBatch> {
    stream.try_collect().await.unwrap()
}
