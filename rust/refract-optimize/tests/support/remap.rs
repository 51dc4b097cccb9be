//! Indexed tables, deferred rewrites and query-equals-scan checks, for the
//! remap / trim / maintain tests (built on the [`super::fri`] fixtures).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use async_trait::async_trait;
use futures::stream::BoxStream;
use refract_core::{Result, Translator};
use refract_index::manage::index_context;
use refract_index::types::btree::BTreeIndexType;
use refract_index::{
    create_index, create_index_with, IndexContext, IndexParams, IndexRegistry, IndexSegmentReader,
    IndexType, LegacyIndexPlugin, Query,
};
use refract_optimize::compaction::{execute_plan, plan_compaction, CompactionOptions};
use refract_optimize::fri::{
    deferred_remap_hook, legacy_deferred_remap_hook, partition_fragments, PartitionBy,
    PartitionOptions,
};
use refract_optimize::remap::{RemapReport, SegmentStatus, UnchangedReason};
use refract_reader::FriResolver;
use refract_table::io::RelativePath;
use refract_table::transaction::{Operation, RewriteGroup, Transaction};
use refract_table::{Dataset, IndexMetadata};
use roaring::RoaringTreemap;

use super::fri::{addressed_ids, commit_rewrite, dataset_with_rows, plan_rewrite};

/// The four indices every scenario carries: (name, column, type).
pub const INDICES: [(&str, &str, &str); 4] = [
    ("by_id", "id", "btree"),
    ("by_cat", "cat", "bitmap"),
    ("by_name", "name", "ngram"),
    ("by_vec", "vector", "ivf_flat"),
];

fn params(index_type: &str) -> IndexParams {
    IndexParams {
        partitions: (index_type == "ivf_flat").then_some(4),
        page_rows: (index_type == "btree").then_some(64),
        ..IndexParams::default()
    }
}

/// Ids `0..rows` in fragments of `per_file` rows, with the four indices.
pub async fn indexed_table(name: &str, rows: usize, per_file: u64) -> Dataset {
    let mut dataset = dataset_with_rows(name, rows, per_file).await;
    for (index, column, index_type) in INDICES {
        dataset =
            refract_index::create_index(&dataset, index, column, index_type, &params(index_type))
                .await
                .unwrap();
    }
    dataset
}

/// Builds one more index (all four types use [`INDICES`] names otherwise).
pub async fn add_index(dataset: &Dataset, name: &str, column: &str, index_type: &str) -> Dataset {
    create_index(dataset, name, column, index_type, &params(index_type))
        .await
        .unwrap()
}

/// Compacts each run into `outputs` fragments, recording version-1 transitions.
pub async fn deferred_rewrite(dataset: &Dataset, runs: &[Vec<u64>], outputs: u64) -> Dataset {
    let groups = plan_rewrite(dataset, runs, outputs).await;
    let hook = deferred_remap_hook();
    commit_rewrite(dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap()
}

/// Same, recording a legacy (version 0) reuse version.
pub async fn legacy_rewrite(dataset: &Dataset, runs: &[Vec<u64>], outputs: u64) -> Dataset {
    let groups = plan_rewrite(dataset, runs, outputs).await;
    let hook = legacy_deferred_remap_hook();
    commit_rewrite(dataset, groups, Some(hook.as_ref()))
        .await
        .unwrap()
}

/// Stable partition of `run` (all fragments when `None`) by hash of `id`.
pub async fn partition(dataset: &mut Dataset, run: Option<Vec<u64>>, destinations: u32) {
    let mut options = PartitionOptions::new(PartitionBy::Hash {
        column: "id".to_string(),
        destinations,
    });
    options.fragments = run;
    partition_fragments(dataset, options).await.unwrap();
}

/// A compaction run with `options` whose rewrite is recorded in the FRI
/// (deferred index remap). Returns false when the plan was empty.
pub async fn deferred_compaction(dataset: &mut Dataset, options: &CompactionOptions) -> bool {
    let options = CompactionOptions {
        defer_index_remap: true,
        ..options.clone()
    };
    let plan = plan_compaction(dataset, &options).unwrap();
    if plan.is_empty() {
        return false;
    }
    let results = execute_plan(dataset, &plan, None).await.unwrap();
    let read_version = results.iter().map(|r| r.read_version).min().unwrap();
    let groups = results
        .iter()
        .map(|r| RewriteGroup {
            old_fragment_ids: r.old_fragment_ids.clone(),
            new_fragments: r.new_fragments().unwrap(),
            surviving_old_addresses: Some(r.surviving_old_addresses.clone()),
        })
        .collect();
    let txn = Transaction::new(
        read_version,
        Operation::Rewrite {
            groups,
            new_indices: vec![],
            removed_index_uuids: vec![],
        },
    );
    let hook = deferred_remap_hook();
    *dataset = dataset
        .checkout_latest()
        .await
        .unwrap()
        .commit_transaction(txn, Some(hook.as_ref()))
        .await
        .unwrap();
    true
}

/// The first column (Int64 ids) of `batch`.
pub fn ids(batch: &RecordBatch) -> Vec<i64> {
    batch
        .column(0)
        .as_primitive::<Int64Type>()
        .values()
        .to_vec()
}

/// Filter queries the four indices answer.
pub const FILTERS: [&str; 6] = [
    "id >= 37 AND id < 301",
    "id = 250",
    "cat = 3",
    "cat IS NULL",
    "contains(name, 'row-1')",
    "contains(name, '7-')",
];

/// Every filter query and a kNN query return, through the FRI resolver and
/// `registry`, exactly what a brute-force scan returns.
pub async fn assert_queries_match(dataset: &Dataset, registry: Arc<IndexRegistry>) {
    for filter in FILTERS {
        let run = |use_index: bool| {
            Query::new(dataset)
                .filter(filter)
                .unwrap()
                .project(&["id"])
                .with_resolver(Arc::new(FriResolver::default()))
                .with_registry(registry.clone())
                .use_index(use_index)
                .execute()
        };
        let indexed = run(true).await.unwrap();
        let brute = run(false).await.unwrap();
        let mut got = ids(&indexed.batch);
        let mut want = ids(&brute.batch);
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(
            got,
            want,
            "filter {filter} at version {}",
            dataset.version()
        );
    }
    let knn = |use_index: bool| {
        Query::new(dataset)
            .nearest("vector", &[120.3, -120.3], 10, 64)
            .project(&["id"])
            .with_resolver(Arc::new(FriResolver::default()))
            .with_registry(registry.clone())
            .use_index(use_index)
            .execute()
    };
    let got = ids(&knn(true).await.unwrap().batch);
    let want = ids(&knn(false).await.unwrap().batch);
    assert_eq!(got, want, "kNN at version {}", dataset.version());
}

/// Segments of index `name`, in manifest order.
pub fn segments(dataset: &Dataset, name: &str) -> Vec<IndexMetadata> {
    dataset
        .manifest()
        .indices
        .iter()
        .filter(|m| m.name == name)
        .cloned()
        .collect()
}

/// The addresses a segment's files hold.
pub async fn stored_addresses(
    dataset: &Dataset,
    registry: &IndexRegistry,
    meta: &IndexMetadata,
) -> RoaringTreemap {
    let ctx = index_context(dataset);
    let registered = registry.get(&meta.index_type).unwrap();
    let reader = registered.open(&ctx, meta).await.unwrap();
    reader.stored_addresses().await.unwrap()
}

/// Addresses of every live row of `fragments` (all when `None`).
pub async fn live_addresses(dataset: &Dataset, fragments: Option<&[u64]>) -> RoaringTreemap {
    let all: Vec<u64> = dataset.fragments().iter().map(|f| f.id).collect();
    addressed_ids(dataset, fragments.unwrap_or(&all))
        .await
        .into_iter()
        .map(|(addr, _)| addr)
        .collect()
}

/// True when every segment in the report is caught up.
pub fn all_caught_up(report: &RemapReport) -> bool {
    report.segments.iter().all(|s| {
        matches!(
            s.status,
            SegmentStatus::Unchanged {
                reason: UnchangedReason::CaughtUp,
                ..
            }
        )
    })
}

/// A third-party type with only the legacy HashMap remap (a btree inside).
pub struct LegacyBTree;

struct MapTranslator<'a>(&'a HashMap<u64, Option<u64>>);

impl Translator for MapTranslator<'_> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        out.clear();
        out.extend(
            batch
                .iter()
                .map(|a| self.0.get(a).copied().unwrap_or(Some(*a))),
        );
        Ok(())
    }
}

#[async_trait]
impl LegacyIndexPlugin for LegacyBTree {
    fn name(&self) -> &'static str {
        "legacy_btree"
    }

    fn supports(&self, data_type: &arrow_schema::DataType) -> bool {
        BTreeIndexType.supports(data_type)
    }

    async fn build(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        input: BoxStream<'_, Result<RecordBatch>>,
        params: &IndexParams,
    ) -> Result<Vec<u8>> {
        BTreeIndexType.build(ctx, dir, input, params).await
    }

    async fn open(
        &self,
        ctx: &IndexContext,
        dir: &RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        BTreeIndexType.open(ctx, dir, details).await
    }

    async fn remap_legacy(
        &self,
        ctx: &IndexContext,
        old_dir: &RelativePath,
        details: &[u8],
        new_dir: &RelativePath,
        mapping: &HashMap<u64, Option<u64>>,
    ) -> Result<Vec<u8>> {
        BTreeIndexType
            .remap(ctx, old_dir, details, new_dir, &MapTranslator(mapping))
            .await
    }
}

/// Built-ins plus [`LegacyBTree`].
pub fn legacy_registry() -> Arc<IndexRegistry> {
    let mut registry = IndexRegistry::with_builtins();
    registry.register_legacy(Arc::new(LegacyBTree));
    Arc::new(registry)
}

/// Builds a `legacy_btree` index called `name` on `id`.
pub async fn add_legacy_index(dataset: &Dataset, name: &str) -> Dataset {
    create_index_with(
        dataset,
        &legacy_registry(),
        name,
        "id",
        "legacy_btree",
        &IndexParams::default(),
    )
    .await
    .unwrap()
}
