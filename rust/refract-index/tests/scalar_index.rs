//! btree and bitmap: index-aware queries equal a brute-force scan, before and
//! after deletions and an inline remap; multi-segment indices; remapped files
//! hold exactly the live addresses; legacy plugin decline; corrupt files;
//! system entries.

mod scalar_support;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, Int32Array, UInt64Array};
use async_trait::async_trait;
use futures::stream::BoxStream;
use refract_core::materialize::MaterializeBudget;
use refract_core::{Error, Result};
use refract_index::types::btree::{BTreeIndexType, ADDRESSES_FILE, PAGE_LOOKUP_FILE, VALUES_FILE};
use refract_index::types::{
    IndexContext, IndexParams, IndexSegmentReader, IndexType, LegacyIndexPlugin, Translator,
};
use refract_index::{
    create_index, create_index_with, describe_index, drop_index, list_indices, optimize_indices,
    IndexRegistry, IndexUse, Query,
};
use refract_table::io::ReadOptions;
use refract_table::io::{index_dir, LanceFileReader, RelativePath};
use refract_table::{Dataset, IndexMetadata, Operation, Session};
use rstest::rstest;
use scalar_support::*;

const FILTERS: &[&str] = &[
    "x = 7",
    "x = 1000",
    "x < 16",
    "x <= 15",
    "x > 47",
    "x >= 16 AND x <= 31",
    "x > 16 AND x < 31",
    "x IN (1, 2, 49, 100)",
    "x IS NULL",
    "x > 10 AND s = 'k5'",
    "x = 7 OR x = 8",
    "s = 'k3'",
    "s IN ('k1', 'k16', 'zz')",
    "s IS NULL",
    "s >= 'k15'",
    "s < 'k10' AND id % 2 = 0",
];

fn ids(ds: &Dataset) -> Vec<u64> {
    ds.fragments().iter().map(|f| f.id).collect()
}

fn small_pages() -> IndexParams {
    IndexParams {
        page_rows: Some(16),
        ..IndexParams::default()
    }
}

/// Three fragments of 200 rows with a btree on x and a bitmap on s.
async fn indexed(dir: &tempfile::TempDir) -> Dataset {
    let ds = dataset(dir, 3, 200).await;
    let ds = create_index(&ds, "x_idx", "x", "btree", &small_pages())
        .await
        .unwrap();
    create_index(&ds, "s_idx", "s", "bitmap", &IndexParams::default())
        .await
        .unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    Fresh,
    AfterDelete,
    AfterRemap,
}

#[rstest]
#[case::fresh(Stage::Fresh)]
#[case::after_delete(Stage::AfterDelete)]
#[case::after_remap(Stage::AfterRemap)]
#[tokio::test]
async fn queries_equal_brute_force(#[case] stage: Stage) {
    let dir = tempfile::tempdir().unwrap();
    let mut ds = indexed(&dir).await;
    if !matches!(stage, Stage::Fresh) {
        ds.delete("id % 5 = 0 OR (id > 190 AND id < 230)")
            .await
            .unwrap();
    }
    if matches!(stage, Stage::AfterRemap) {
        let (next, skipped) = compact(
            &ds,
            &ids(&ds)[0..2],
            IndexRegistry::with_builtins(),
            MaterializeBudget::default(),
        )
        .await;
        assert!(skipped.is_empty(), "{skipped:?}");
        ds = next;
    }
    for filter in FILTERS {
        let explain = assert_query_matches(&ds, filter).await;
        let expect_index = match *filter {
            "x IS NULL" | "x = 7 OR x = 8" => None,
            f if f.starts_with('s') => Some("s_idx"),
            _ => Some("x_idx"),
        };
        assert_eq!(explain.index.as_deref(), expect_index, "{filter}");
        if expect_index.is_some() {
            assert!(
                explain.scanned_fragments.is_empty(),
                "{filter}: {explain:?}"
            );
        }
    }
}

#[tokio::test]
async fn remap_restamps_coverage_and_uuid() {
    let dir = tempfile::tempdir().unwrap();
    let mut ds = indexed(&dir).await;
    ds.delete("id % 3 = 0").await.unwrap();
    let before = describe_index(&ds, "x_idx").unwrap();
    let (ds, _) = compact(
        &ds,
        &ids(&ds)[1..3],
        IndexRegistry::with_builtins(),
        MaterializeBudget::default(),
    )
    .await;
    let after = describe_index(&ds, "x_idx").unwrap();
    assert_eq!(after.segments.len(), 1);
    assert_ne!(after.segments[0].uuid, before.segments[0].uuid);
    let new_id = ds.fragments()[1].id;
    assert_eq!(ds.fragments().len(), 2);
    assert_eq!(after.segments[0].fragments, Some(vec![ids(&ds)[0], new_id]));
    assert_eq!(after.segments[0].dataset_version, ds.version());
}

/// Reads the values and addresses of a btree segment directly: (value, address) rows.
async fn btree_rows(ds: &Dataset, meta: &IndexMetadata) -> Vec<(i32, u64)> {
    let read = |name: &'static str| async move {
        let path = index_dir(&meta.uuid).join(name).unwrap();
        let file = LanceFileReader::open(ds.store(), &path, ReadOptions::default())
            .await
            .unwrap();
        let batches = file.read_all(None).await.unwrap();
        let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(0).as_ref()).collect();
        arrow::compute::concat(&arrays).unwrap()
    };
    let values = read(VALUES_FILE).await;
    let addrs = read(ADDRESSES_FILE).await;
    let values = values.as_any().downcast_ref::<Int32Array>().unwrap();
    let addrs = addrs.as_any().downcast_ref::<UInt64Array>().unwrap();
    assert_eq!(addrs.null_count(), 0, "no tombstones expected");
    values
        .values()
        .iter()
        .copied()
        .zip(addrs.values().iter().copied())
        .collect()
}

#[tokio::test]
async fn remapped_files_hold_exactly_the_live_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let mut ds = indexed(&dir).await;
    ds.delete("id % 4 = 1").await.unwrap();
    let (ds, _) = compact(
        &ds,
        &ids(&ds)[0..3],
        IndexRegistry::with_builtins(),
        MaterializeBudget::default(),
    )
    .await;
    let new_ids: Vec<u64> = ds.fragments().iter().map(|f| f.id).collect();
    let live = live_addresses(&ds, &new_ids).await;
    let non_null_x = {
        let batch = ds
            .scan()
            .filter("x IS NOT NULL")
            .unwrap()
            .with_row_address()
            .try_into_batch()
            .await
            .unwrap();
        let addrs = batch
            .column_by_name("_rowaddr")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap();
        addrs
            .values()
            .iter()
            .copied()
            .collect::<roaring::RoaringTreemap>()
    };
    let registry = IndexRegistry::with_builtins();
    let ctx = refract_index::manage::index_context(&ds);
    for meta in &ds.manifest().indices {
        let reader = registry
            .get(&meta.index_type)
            .unwrap()
            .open(&ctx, meta)
            .await
            .unwrap();
        let stored = reader.stored_addresses().await.unwrap();
        match meta.name.as_str() {
            "x_idx" => assert_eq!(stored, non_null_x),
            "s_idx" => assert_eq!(stored, live),
            other => panic!("unexpected index {other}"),
        }
    }
    // The btree page data is sorted by (value, address) and its lookup has no
    // empty page and exact min/max.
    let meta = ds
        .manifest()
        .indices
        .iter()
        .find(|m| m.name == "x_idx")
        .unwrap();
    let rows = btree_rows(&ds, meta).await;
    assert!(rows.windows(2).all(|w| w[0] < w[1]), "pages not sorted");
    assert_eq!(rows.len() as u64, non_null_x.len());
    let lookup = LanceFileReader::open(
        ds.store(),
        &index_dir(&meta.uuid).join(PAGE_LOOKUP_FILE).unwrap(),
        ReadOptions::default(),
    )
    .await
    .unwrap();
    let mut start = 0usize;
    for batch in lookup.read_all(None).await.unwrap() {
        let mins = batch
            .column_by_name("min")
            .unwrap()
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap()
            .clone();
        let maxs = batch
            .column_by_name("max")
            .unwrap()
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap()
            .clone();
        let counts = batch
            .column_by_name("num_rows")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .clone();
        for i in 0..batch.num_rows() {
            let n = counts.value(i) as usize;
            assert!(n > 0 && n <= 16);
            assert_eq!(mins.value(i), rows[start].0);
            assert_eq!(maxs.value(i), rows[start + n - 1].0);
            start += n;
        }
    }
    assert_eq!(start, rows.len());
}

#[tokio::test]
async fn multi_segment_index_create_append_optimize() {
    let dir = tempfile::tempdir().unwrap();
    let mut ds = indexed(&dir).await;
    ds.append(vec![rows(600, 150)], &write_options(100))
        .await
        .unwrap();
    let appended: Vec<u64> = ds.fragments()[3..].iter().map(|f| f.id).collect();
    assert_eq!(appended.len(), 2);
    let explain = assert_query_matches(&ds, "x < 20").await;
    assert_eq!(explain.index.as_deref(), Some("x_idx"));
    assert_eq!(explain.scanned_fragments, appended);

    let ds = optimize_indices(&ds, "x_idx").await.unwrap();
    let summary = describe_index(&ds, "x_idx").unwrap();
    assert_eq!(summary.segments.len(), 2);
    assert_eq!(summary.segments[1].fragments, Some(appended.clone()));
    let explain = assert_query_matches(&ds, "x < 20").await;
    assert!(explain.scanned_fragments.is_empty());
    assert_eq!(explain.segments.len(), 2);
    assert_eq!(explain.segments[1].fragments, appended);
    for filter in FILTERS {
        assert_query_matches(&ds, filter).await;
    }
    // Nothing left to cover: no commit.
    let again = optimize_indices(&ds, "x_idx").await.unwrap();
    assert_eq!(again.version(), ds.version());
}

#[tokio::test]
async fn drop_and_list() {
    let dir = tempfile::tempdir().unwrap();
    let ds = indexed(&dir).await;
    let names: Vec<String> = list_indices(&ds).into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["x_idx", "s_idx"]);
    let ds = drop_index(&ds, "x_idx").await.unwrap();
    let names: Vec<String> = list_indices(&ds).into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["s_idx"]);
    assert!(matches!(
        drop_index(&ds, "x_idx").await,
        Err(Error::NotFound { .. })
    ));
    let explain = assert_query_matches(&ds, "x = 7").await;
    assert_eq!(explain.index, None);
    assert!(matches!(
        create_index(&ds, "s_idx", "s", "bitmap", &IndexParams::default()).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        create_index(&ds, "y", "nope", "btree", &IndexParams::default()).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        create_index(&ds, "y", "x", "nope", &IndexParams::default()).await,
        Err(Error::NotSupported { .. })
    ));
}

fn system_entry() -> IndexMetadata {
    IndexMetadata {
        uuid: uuid::Uuid::new_v4(),
        name: "__fragment_reuse".into(),
        fields: Vec::new(),
        fragment_bitmap: None,
        index_type: "fri".into(),
        details: vec![1, 2, 3],
        index_version: 1,
        dataset_version: 1,
        files: Vec::new(),
        lance: Default::default(),
    }
}

#[tokio::test]
async fn system_entries_are_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut ds = indexed(&dir).await;
    let system = system_entry();
    ds = ds
        .commit(Operation::CreateIndex {
            new_indices: vec![system.clone()],
            removed_index_uuids: Vec::new(),
        })
        .await
        .unwrap();
    assert!(list_indices(&ds).iter().all(|s| !s.name.starts_with("__")));
    assert!(matches!(
        drop_index(&ds, &system.name).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        describe_index(&ds, &system.name),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        create_index(&ds, "__mine", "x", "btree", &IndexParams::default()).await,
        Err(Error::InvalidInput { .. })
    ));
    ds.delete("id % 7 = 0").await.unwrap();
    let (ds, skipped) = compact(
        &ds,
        &ids(&ds)[0..3],
        IndexRegistry::with_builtins(),
        MaterializeBudget::default(),
    )
    .await;
    assert!(skipped.is_empty());
    let kept: Vec<&IndexMetadata> = ds
        .manifest()
        .indices
        .iter()
        .filter(|m| m.is_system())
        .collect();
    assert_eq!(kept, vec![&system]);
    assert_query_matches(&ds, "x = 7").await;
}

/// A third-party type that only has the legacy HashMap remap: it builds and
/// searches as a btree, and remaps by wrapping the map as a translator.
struct LegacyBTree;

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
        input: BoxStream<'_, Result<arrow_array::RecordBatch>>,
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

fn legacy_registry() -> IndexRegistry {
    let mut registry = IndexRegistry::with_builtins();
    registry.register_legacy(Arc::new(LegacyBTree));
    registry
}

#[rstest]
#[case::declined(1, true)]
#[case::fits(MaterializeBudget::default().budget_bytes, false)]
#[tokio::test]
async fn legacy_plugin_fallback(#[case] budget_bytes: u64, #[case] declined: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut ds = dataset(&dir, 3, 200).await;
    let registry = legacy_registry();
    ds = create_index_with(
        &ds,
        &registry,
        "legacy",
        "x",
        "legacy_btree",
        &small_pages(),
    )
    .await
    .unwrap();
    let before = ds.manifest().indices[0].clone();
    ds.delete("id % 6 = 0").await.unwrap();
    let (ds, skipped) = compact(
        &ds,
        &ids(&ds)[0..2],
        registry.clone(),
        MaterializeBudget { budget_bytes },
    )
    .await;
    let after = ds.manifest().indices[0].clone();
    if declined {
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].uuid, before.uuid);
        assert_eq!(skipped[0].reason, refract_index::DeclineReason::OverBudget);
        assert!(
            skipped[0].message.contains("budget"),
            "{}",
            skipped[0].message
        );
        assert_eq!(
            after, before,
            "a declined segment keeps its entry and history"
        );
    } else {
        assert!(skipped.is_empty());
        assert_ne!(after.uuid, before.uuid);
    }
    for filter in ["x = 7", "x < 16", "x IN (3, 4)"] {
        let expected = brute_force(&ds, filter).await;
        let result = Query::new(&ds)
            .with_registry(Arc::new(registry.clone()))
            .filter(filter)
            .unwrap()
            .index_use(IndexUse::Always)
            .execute()
            .await
            .unwrap();
        assert_eq!(result.batch.columns(), expected.columns(), "{filter}");
        if declined {
            // The declined segment still names 1, 2 and 3, none live: the
            // commit relabelled 3 too, so every fragment is scanned.
            assert_eq!(result.explain.index, None);
        } else {
            assert_eq!(result.explain.index.as_deref(), Some("legacy"));
            assert!(result.explain.scanned_fragments.is_empty());
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    LookupGarbage,
    DataTruncated,
    Details,
}

#[rstest]
#[case::lookup_garbage(Damage::LookupGarbage)]
#[case::data_truncated(Damage::DataTruncated)]
#[case::details(Damage::Details)]
#[tokio::test]
async fn corrupt_index_is_an_error_not_a_panic(#[case] damage: Damage) {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(&dir, 2, 100).await;
    let ds = create_index(&ds, "x_idx", "x", "btree", &small_pages())
        .await
        .unwrap();
    let meta = ds.manifest().indices[0].clone();
    let seg_dir = index_dir(&meta.uuid);
    let mut details = meta.details.clone();
    match damage {
        Damage::LookupGarbage => {
            let path = seg_dir.join(PAGE_LOOKUP_FILE).unwrap();
            ds.store()
                .put(&path, bytes::Bytes::from_static(b"not a lance file at all"))
                .await
                .unwrap();
        }
        Damage::DataTruncated => {
            let path = seg_dir.join(VALUES_FILE).unwrap();
            let full = ds.store().get(&path).await.unwrap();
            ds.store()
                .put(&path, full.slice(0..full.len() / 2))
                .await
                .unwrap();
        }
        Damage::Details => details = b"{\"num_rows\": \"many\"}".to_vec(),
    }
    // A fresh session so nothing decoded before the damage is reused.
    let ctx = IndexContext {
        store: ds.store().clone(),
        cache: Session::default().cache().clone(),
    };
    let err = match BTreeIndexType.open(&ctx, &seg_dir, &details).await {
        Err(err) => err,
        Ok(reader) => reader
            .search(&refract_index::IndexQuery::Equals(
                refract_table::predicate::Literal::Int(7),
            ))
            .await
            .expect_err("a damaged segment must not answer"),
    };
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}
