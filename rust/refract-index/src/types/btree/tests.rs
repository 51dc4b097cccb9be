//! btree layout 2: queries against brute force before and after remaps,
//! address-only remaps that copy the values, tombstones, the full-rewrite
//! threshold, damaged files, layout versions.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use futures::stream::{self, StreamExt};
use refract_core::{Error, Result};
use refract_table::io::{LanceFileReader, LanceFileWriter, RelativePath};
use refract_table::io::{PageLayout, ReadOptions};
use refract_table::predicate::Literal;
use roaring::RoaringTreemap;
use rstest::rstest;

use super::{
    data_schema, BTreeDetails, BTreeIndexType, ADDRESSES_FILE, BTREE_VERSION,
    LEGACY_PAGE_DATA_FILE, PAGE_LOOKUP_FILE, VALUES_FILE,
};
use crate::types::test_support::{context, seg};
use crate::types::{
    IndexContext, IndexParams, IndexQuery, IndexType, SearchResult, Translator,
    MAX_TRANSLATION_BATCH,
};

/// The indexed rows as the table sees them: value and current address
/// (`None` once deleted).
#[derive(Debug, Clone)]
struct Truth {
    rows: Vec<(Option<i64>, Option<u64>)>,
}

impl Truth {
    /// `n` rows in 10 fragments, values in `0..distinct` in a scrambled order
    /// (so value order is not address order), every `null_every`-th null.
    fn new(n: usize, distinct: i64, null_every: Option<usize>) -> Self {
        let per_fragment = n.div_ceil(10);
        let rows = (0..n)
            .map(|i| {
                let value = (i as i64 * 7919 + 13) % distinct;
                let value = match null_every {
                    Some(k) if i % k == k - 1 => None,
                    _ => Some(value),
                };
                let addr = (((i / per_fragment) as u64) << 32) | (i % per_fragment) as u64;
                (value, Some(addr))
            })
            .collect();
        Truth { rows }
    }

    /// Rows whose value is not null and whose row is live.
    fn live(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.rows.iter().filter_map(|(v, a)| Some(((*v)?, (*a)?)))
    }

    fn live_addresses(&self) -> RoaringTreemap {
        self.live().map(|(_, a)| a).collect()
    }

    /// Addresses of live rows whose value satisfies `hit`.
    fn matching(&self, hit: impl Fn(i64) -> bool) -> RoaringTreemap {
        self.live()
            .filter(|(v, _)| hit(*v))
            .map(|(_, a)| a)
            .collect()
    }

    /// Compacts every live row (deleting rows whose index satisfies `delete`)
    /// into fragment `fragment`, in address order. Returns the translator.
    fn compact(&mut self, fragment: u64, delete: impl Fn(usize) -> bool) -> Moves {
        let mut order: Vec<usize> = (0..self.rows.len())
            .filter(|i| self.rows[*i].1.is_some())
            .collect();
        order.sort_by_key(|i| self.rows[*i].1);
        let mut moves = HashMap::new();
        let mut next = 0u64;
        for i in order {
            let old = self.rows[i].1.unwrap();
            let new = if delete(i) {
                None
            } else {
                next += 1;
                Some((fragment << 32) | (next - 1))
            };
            moves.insert(old, new);
            self.rows[i].1 = new;
        }
        Moves {
            moves,
            largest_batch: Mutex::new(0),
        }
    }

    /// Input batches for a build: two batches in row order.
    fn batches(&self) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("_rowaddr", DataType::UInt64, false),
        ]));
        let live: Vec<(Option<i64>, u64)> = self
            .rows
            .iter()
            .filter_map(|(v, a)| Some((*v, (*a)?)))
            .collect();
        let half = live.len() / 2;
        [&live[..half], &live[half..]]
            .into_iter()
            .map(|part| {
                let values: Int64Array = part.iter().map(|(v, _)| *v).collect();
                let addrs: UInt64Array = part.iter().map(|(_, a)| Some(*a)).collect();
                RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(values) as ArrayRef, Arc::new(addrs)],
                )
                .unwrap()
            })
            .collect()
    }
}

/// A translator from a table (a missing address is unchanged) that records
/// the largest batch it was given.
struct Moves {
    moves: HashMap<u64, Option<u64>>,
    largest_batch: Mutex<usize>,
}

impl Translator for Moves {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        out.clear();
        out.extend(
            batch
                .iter()
                .map(|a| self.moves.get(a).copied().unwrap_or(Some(*a))),
        );
        let mut largest = self.largest_batch.lock().unwrap();
        *largest = (*largest).max(batch.len());
        Ok(())
    }
}

struct Segment {
    dir: RelativePath,
    details: BTreeDetails,
}

async fn build(ctx: &IndexContext, name: &str, truth: &Truth, page_rows: u32) -> Segment {
    let dir = seg(name);
    let input = stream::iter(truth.batches().into_iter().map(Ok)).boxed();
    let params = IndexParams {
        page_rows: Some(page_rows),
        ..IndexParams::default()
    };
    let details = BTreeIndexType
        .build(ctx, &dir, input, &params)
        .await
        .unwrap();
    Segment {
        dir,
        details: BTreeDetails::from_bytes(&details).unwrap(),
    }
}

async fn remap(ctx: &IndexContext, old: &Segment, name: &str, moves: &Moves) -> Segment {
    let dir = seg(name);
    let details = BTreeIndexType
        .remap(ctx, &old.dir, &old.details.to_bytes().unwrap(), &dir, moves)
        .await
        .unwrap();
    Segment {
        dir,
        details: BTreeDetails::from_bytes(&details).unwrap(),
    }
}

async fn search(ctx: &IndexContext, segment: &Segment, query: &IndexQuery) -> RoaringTreemap {
    let reader = BTreeIndexType
        .open(ctx, &segment.dir, &segment.details.to_bytes().unwrap())
        .await
        .unwrap();
    match reader.search(query).await.unwrap() {
        SearchResult::Exact(found) => found,
        other => panic!("btree answers exactly, got {other:?}"),
    }
}

fn int(v: i64) -> Literal {
    Literal::Int(v)
}

fn range(low: Bound<i64>, high: Bound<i64>) -> IndexQuery {
    IndexQuery::Range {
        low: low.map(int),
        high: high.map(int),
    }
}

fn in_bounds(v: i64, low: &Bound<i64>, high: &Bound<i64>) -> bool {
    let above = match low {
        Bound::Included(l) => v >= *l,
        Bound::Excluded(l) => v > *l,
        Bound::Unbounded => true,
    };
    let below = match high {
        Bound::Included(h) => v <= *h,
        Bound::Excluded(h) => v < *h,
        Bound::Unbounded => true,
    };
    above && below
}

/// The brute-force answer of an equality, range or IN query.
fn brute(truth: &Truth, query: &IndexQuery) -> RoaringTreemap {
    let literal = |l: &Literal| match l {
        Literal::Int(v) => *v,
        other => panic!("integer queries only, got {other:?}"),
    };
    match query {
        IndexQuery::Equals(l) => truth.matching(|v| v == literal(l)),
        IndexQuery::InList(list) => truth.matching(|v| list.iter().any(|l| literal(l) == v)),
        IndexQuery::Range { low, high } => {
            let low = low.as_ref().map(literal);
            let high = high.as_ref().map(literal);
            truth.matching(|v| in_bounds(v, &low, &high))
        }
        other => panic!("not a btree query: {other:?}"),
    }
}

fn queries(distinct: i64) -> Vec<IndexQuery> {
    use Bound::{Excluded, Included, Unbounded};
    vec![
        IndexQuery::Equals(int(0)),
        IndexQuery::Equals(int(5)),
        IndexQuery::Equals(int(distinct - 1)),
        IndexQuery::Equals(int(distinct + 10)),
        IndexQuery::InList(vec![int(1), int(5), int(5), int(distinct / 2), int(-3)]),
        range(Included(10), Included(40)),
        range(Excluded(10), Excluded(40)),
        range(Unbounded, Excluded(3)),
        range(Included(distinct - 3), Unbounded),
        range(Unbounded, Unbounded),
        range(Included(30), Included(20)),
    ]
}

async fn assert_queries_match(ctx: &IndexContext, segment: &Segment, truth: &Truth, distinct: i64) {
    for query in queries(distinct) {
        assert_eq!(
            search(ctx, segment, &query).await,
            brute(truth, &query),
            "{query:?}"
        );
    }
    let reader = BTreeIndexType
        .open(ctx, &segment.dir, &segment.details.to_bytes().unwrap())
        .await
        .unwrap();
    assert_eq!(
        reader.stored_addresses().await.unwrap(),
        truth.live_addresses()
    );
}

async fn file_bytes(ctx: &IndexContext, dir: &RelativePath, name: &str) -> Bytes {
    ctx.store.get(&dir.join(name).unwrap()).await.unwrap()
}

const ROWS: usize = 3000;
const DISTINCT: i64 = 200;
const PAGE_ROWS: u32 = 64;

#[rstest]
#[case::no_deletions(None, 0)]
// Every 20th row: 5 % of the entries, kept as tombstones.
#[case::few_deletions(Some(20), 136)]
// Every 3rd row: 33 %, over the 1/8 limit, so the remap rewrites everything.
#[case::many_deletions(Some(3), 0)]
#[tokio::test]
async fn queries_match_brute_force_before_and_after_remap(
    #[case] delete_every: Option<usize>,
    #[case] tombstones: u64,
) {
    let (ctx, _tmp) = context().await;
    let mut truth = Truth::new(ROWS, DISTINCT, Some(11));
    let old = build(&ctx, "old", &truth, PAGE_ROWS).await;
    assert_eq!(old.details.num_rows, 2728);
    assert_eq!(old.details.tombstones, 0);
    assert_queries_match(&ctx, &old, &truth, DISTINCT).await;

    let moves = truth.compact(20, |i| delete_every.is_some_and(|k| i % k == 0));
    let new = remap(&ctx, &old, "new", &moves).await;
    assert_eq!(new.details.version, BTREE_VERSION);
    assert_eq!(new.details.tombstones, tombstones);
    assert_eq!(new.details.num_rows, truth.live_addresses().len());
    assert_queries_match(&ctx, &new, &truth, DISTINCT).await;
    // The old segment is untouched.
    assert_eq!(old.details.num_rows, 2728);
}

/// The inode and link count of a local file under the store root.
fn inode(root: &std::path::Path, dir: &RelativePath, name: &str) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root.join(dir.as_str()).join(name)).unwrap();
    (meta.ino(), meta.nlink())
}

#[tokio::test]
async fn address_only_remap_copies_values_and_lookup_and_rewrites_addresses() {
    let (ctx, tmp) = context().await;
    // More entries than one translation batch.
    let rows = 2 * MAX_TRANSLATION_BATCH + 1000;
    let mut truth = Truth::new(rows, 5000, None);
    let old = build(&ctx, "old", &truth, 4096).await;
    let moves = truth.compact(30, |_| false);
    let new = remap(&ctx, &old, "new", &moves).await;

    assert_eq!(*moves.largest_batch.lock().unwrap(), MAX_TRANSLATION_BATCH);
    assert_eq!(new.details, old.details);
    for name in [VALUES_FILE, PAGE_LOOKUP_FILE] {
        let before = file_bytes(&ctx, &old.dir, name).await;
        let after = file_bytes(&ctx, &new.dir, name).await;
        assert_eq!(before.len(), after.len(), "{name}");
        assert!(before == after, "{name} differs");
        // A server-side copy: on local disk the same inode, linked twice.
        let (old_inode, links) = inode(tmp.path(), &old.dir, name);
        assert_eq!(inode(tmp.path(), &new.dir, name), (old_inode, 2), "{name}");
        assert_eq!(links, 2);
    }
    let before = file_bytes(&ctx, &old.dir, ADDRESSES_FILE).await;
    let after = file_bytes(&ctx, &new.dir, ADDRESSES_FILE).await;
    assert!(before != after, "addresses were not rewritten");
    assert_queries_match(&ctx, &new, &truth, 5000).await;
}

#[tokio::test]
async fn tombstoned_rows_are_never_returned() {
    let (ctx, _tmp) = context().await;
    let mut truth = Truth::new(ROWS, DISTINCT, None);
    let old = build(&ctx, "old", &truth, PAGE_ROWS).await;
    // Delete every row of value 5 and every row of the values on page 3.
    let page = super::reader::open(&ctx, &old.dir, &old.details)
        .await
        .unwrap()
        .pages()[3]
        .clone();
    let (crate::keys::Key::Int(lo), crate::keys::Key::Int(hi)) = (&page.min, &page.max) else {
        panic!("integer page bounds expected");
    };
    let (lo, hi) = (*lo as i64, *hi as i64);
    let values: Vec<Option<i64>> = truth.rows.iter().map(|(v, _)| *v).collect();
    let gone = |v: i64| v == 5 || (lo..=hi).contains(&v);
    let deleted = values.iter().flatten().filter(|v| gone(**v)).count() as u64;
    let moves = truth.compact(40, |i| values[i].is_some_and(gone));
    let new = remap(&ctx, &old, "new", &moves).await;

    assert_eq!(new.details.tombstones, deleted);
    assert_eq!(new.details.num_rows, ROWS as u64 - deleted);
    for query in [
        IndexQuery::Equals(int(5)),
        IndexQuery::Equals(int(lo)),
        range(Bound::Included(lo), Bound::Included(hi)),
        IndexQuery::InList(vec![int(5), int(hi)]),
    ] {
        assert_eq!(
            search(&ctx, &new, &query).await,
            RoaringTreemap::new(),
            "{query:?}"
        );
    }
    assert_queries_match(&ctx, &new, &truth, DISTINCT).await;
}

#[tokio::test]
async fn tombstones_accumulate_until_the_threshold_forces_a_full_rewrite() {
    let (ctx, _tmp) = context().await;
    let mut truth = Truth::new(ROWS, DISTINCT, None);
    let s0 = build(&ctx, "s0", &truth, PAGE_ROWS).await;
    // 3000 entries: at most 375 tombstones.
    let m1 = truth.compact(1, |i| i % 15 == 0);
    let s1 = remap(&ctx, &s0, "s1", &m1).await;
    assert_eq!((s1.details.num_rows, s1.details.tombstones), (2800, 200));
    let m2 = truth.compact(2, |i| i % 20 == 1);
    let s2 = remap(&ctx, &s1, "s2", &m2).await;
    assert_eq!((s2.details.num_rows, s2.details.tombstones), (2650, 350));
    assert_queries_match(&ctx, &s2, &truth, DISTINCT).await;
    let m3 = truth.compact(3, |i| i % 60 == 2);
    let s3 = remap(&ctx, &s2, "s3", &m3).await;
    assert_eq!((s3.details.num_rows, s3.details.tombstones), (2600, 0));
    assert_eq!(s3.details.num_pages, 41);
    assert_queries_match(&ctx, &s3, &truth, DISTINCT).await;

    // The lookup was cut again over the live rows: full pages, exact bounds.
    let mut live: Vec<i64> = truth.live().map(|(v, _)| v).collect();
    live.sort_unstable();
    let opened = super::reader::open(&ctx, &s3.dir, &s3.details)
        .await
        .unwrap();
    let pages = opened.pages();
    assert_eq!(pages.len(), 41);
    for (i, page) in pages.iter().enumerate() {
        let start = i * PAGE_ROWS as usize;
        let rows = (live.len() - start).min(PAGE_ROWS as usize);
        assert_eq!((page.start, page.rows), (start as u64, rows as u64));
        assert_eq!(page.min, crate::keys::Key::Int(live[start].into()));
        assert_eq!(
            page.max,
            crate::keys::Key::Int(live[start + rows - 1].into())
        );
    }
    // Range queries at every page boundary.
    for pair in pages.windows(2) {
        let (crate::keys::Key::Int(max), crate::keys::Key::Int(min)) = (&pair[0].max, &pair[1].min)
        else {
            panic!("integer page bounds expected");
        };
        let (max, min) = (*max as i64, *min as i64);
        for query in [
            range(Bound::Included(max), Bound::Included(min)),
            range(Bound::Excluded(max), Bound::Included(min)),
            range(Bound::Included(max), Bound::Excluded(min)),
            range(Bound::Unbounded, Bound::Included(max)),
            range(Bound::Excluded(max), Bound::Unbounded),
        ] {
            assert_eq!(
                search(&ctx, &s3, &query).await,
                brute(&truth, &query),
                "{query:?}"
            );
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Missing,
    Truncated,
    FewerRows,
}

#[rstest]
#[case::missing(Damage::Missing)]
#[case::truncated(Damage::Truncated)]
#[case::fewer_rows(Damage::FewerRows)]
#[tokio::test]
async fn damaged_addresses_file_is_a_typed_error(#[case] damage: Damage) {
    let (ctx, _tmp) = context().await;
    let mut truth = Truth::new(500, 50, None);
    let old = build(&ctx, "old", &truth, PAGE_ROWS).await;
    let path = old.dir.join(ADDRESSES_FILE).unwrap();
    let full = ctx.store.get(&path).await.unwrap();
    ctx.store.delete(&path).await.unwrap();
    match damage {
        Damage::Missing => {}
        Damage::Truncated => ctx
            .store
            .put(&path, full.slice(0..full.len() / 2))
            .await
            .unwrap(),
        Damage::FewerRows => {
            let schema = crate::types::addresses::addresses_schema();
            let mut writer =
                LanceFileWriter::create(&ctx.store, &path, schema.clone(), PageLayout::default())
                    .await
                    .unwrap();
            let batch =
                RecordBatch::try_new(schema, vec![Arc::new(UInt64Array::from(vec![1u64; 499]))])
                    .unwrap();
            writer.write(&batch).await.unwrap();
            writer.finish().await.unwrap();
        }
    }
    let details = old.details.to_bytes().unwrap();
    let opened = BTreeIndexType.open(&ctx, &old.dir, &details).await;
    let moves = truth.compact(9, |_| false);
    let remapped = BTreeIndexType
        .remap(&ctx, &old.dir, &details, &seg("new"), &moves)
        .await;
    for err in [opened.err().unwrap(), remapped.unwrap_err()] {
        match damage {
            Damage::Missing => assert!(matches!(err, Error::NotFound { .. }), "{err}"),
            Damage::Truncated | Damage::FewerRows => {
                assert!(matches!(err, Error::Corrupt { .. }), "{err}")
            }
        }
    }
    // A failed remap leaves nothing visible in the new segment directory.
    assert_eq!(ctx.store.list(&seg("new")).await.unwrap(), vec![]);
}

#[test]
fn unknown_layout_versions_are_not_supported() {
    let legacy = br#"{"num_rows":3,"num_pages":1,"page_rows":4}"#;
    let parsed = BTreeDetails::from_bytes(legacy).unwrap();
    assert_eq!((parsed.version, parsed.tombstones), (1, 0));
    for version in [0, 3, 99] {
        let bytes = format!(r#"{{"num_rows":3,"num_pages":1,"page_rows":4,"version":{version}}}"#);
        let err = BTreeDetails::from_bytes(bytes.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::NotSupported { .. }), "{err}");
        assert!(
            err.to_string().contains(&format!("version {version}")),
            "{err}"
        );
    }
    let legacy_tombstones = br#"{"num_rows":3,"num_pages":1,"page_rows":4,"tombstones":1}"#;
    let err = BTreeDetails::from_bytes(legacy_tombstones).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn unknown_layout_versions_are_refused_by_open_and_remap() {
    let (ctx, _tmp) = context().await;
    let mut truth = Truth::new(200, 20, None);
    let old = build(&ctx, "old", &truth, PAGE_ROWS).await;
    let details = BTreeDetails {
        version: BTREE_VERSION + 1,
        ..old.details.clone()
    };
    let bytes = serde_json::to_vec(&details).unwrap();
    let opened = BTreeIndexType.open(&ctx, &old.dir, &bytes).await;
    assert!(matches!(opened, Err(Error::NotSupported { .. })));
    let moves = truth.compact(9, |_| false);
    let remapped = BTreeIndexType
        .remap(&ctx, &old.dir, &bytes, &seg("new"), &moves)
        .await;
    assert!(matches!(remapped, Err(Error::NotSupported { .. })));
}

/// Writes the layout-1 form of a layout-2 segment: one `page_data.lance`.
async fn legacy_copy(ctx: &IndexContext, from: &Segment, name: &str) -> Segment {
    let dir = seg(name);
    let read = |file: &'static str| {
        let path = from.dir.join(file).unwrap();
        let store = ctx.store.clone();
        async move {
            let reader = LanceFileReader::open(&store, &path, ReadOptions::default())
                .await
                .unwrap();
            let batches = reader.read_all(None).await.unwrap();
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(0).as_ref()).collect();
            arrow::compute::concat(&arrays).unwrap()
        }
    };
    let values = read(VALUES_FILE).await;
    let addrs = read(ADDRESSES_FILE).await;
    let schema = data_schema(&DataType::Int64);
    let mut writer = LanceFileWriter::create(
        &ctx.store,
        &dir.join(LEGACY_PAGE_DATA_FILE).unwrap(),
        schema.clone(),
        PageLayout::default(),
    )
    .await
    .unwrap();
    writer
        .write(&RecordBatch::try_new(schema, vec![values, addrs]).unwrap())
        .await
        .unwrap();
    writer.finish().await.unwrap();
    ctx.store
        .copy(
            &from.dir.join(PAGE_LOOKUP_FILE).unwrap(),
            &dir.join(PAGE_LOOKUP_FILE).unwrap(),
        )
        .await
        .unwrap();
    let legacy = format!(
        r#"{{"num_rows":{},"num_pages":{},"page_rows":{}}}"#,
        from.details.num_rows, from.details.num_pages, from.details.page_rows
    );
    Segment {
        dir,
        details: BTreeDetails::from_bytes(legacy.as_bytes()).unwrap(),
    }
}

#[tokio::test]
async fn layout_1_segments_are_read_and_remapped_into_layout_2() {
    let (ctx, _tmp) = context().await;
    let mut truth = Truth::new(ROWS, DISTINCT, Some(7));
    let built = build(&ctx, "built", &truth, PAGE_ROWS).await;
    let legacy = legacy_copy(&ctx, &built, "legacy").await;
    assert_eq!(legacy.details.version, 1);
    assert_queries_match(&ctx, &legacy, &truth, DISTINCT).await;

    let moves = truth.compact(50, |i| i % 50 == 0);
    let new = remap(&ctx, &legacy, "new", &moves).await;
    assert_eq!(new.details.version, BTREE_VERSION);
    // Layout 1 has no values file to copy: the remap rewrites, without tombstones.
    assert_eq!(new.details.tombstones, 0);
    assert_eq!(new.details.num_rows, truth.live_addresses().len());
    let listed: BTreeMap<String, u64> = ctx
        .store
        .list(&new.dir)
        .await
        .unwrap()
        .into_iter()
        .map(|o| {
            (
                o.path.as_str().rsplit('/').next().unwrap().to_string(),
                o.size,
            )
        })
        .collect();
    assert_eq!(
        listed.keys().collect::<Vec<_>>(),
        vec![ADDRESSES_FILE, PAGE_LOOKUP_FILE, VALUES_FILE]
    );
    assert_queries_match(&ctx, &new, &truth, DISTINCT).await;
}

#[tokio::test]
async fn remapping_every_row_away_leaves_an_empty_segment() {
    let (ctx, _tmp) = context().await;
    let mut truth = Truth::new(300, 30, None);
    let old = build(&ctx, "old", &truth, PAGE_ROWS).await;
    let moves = truth.compact(2, |_| true);
    let new = remap(&ctx, &old, "new", &moves).await;
    assert_eq!(new.details, BTreeDetails::empty(PAGE_ROWS));
    assert_eq!(ctx.store.list(&new.dir).await.unwrap(), vec![]);
    assert_queries_match(&ctx, &new, &truth, 30).await;
}
