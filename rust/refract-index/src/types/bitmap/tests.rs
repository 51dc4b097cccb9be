//! Bitmap remap: exact posting contents and statistics after remaps that
//! shift whole fragments in bulk and remaps that delete rows, across fragment
//! and container boundaries, with nulls and postings that end up empty; and
//! segments whose statistics are missing (older layout) or damaged.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Int32Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use futures::stream;
use refract_core::Error;
use refract_core::{row_address, FragmentRows, RewriteGroupInput, RowAddrRemap, Translator};
use refract_table::io::LanceFileWriter;
use refract_table::io::PageLayout;
use refract_table::io::RelativePath;
use refract_table::predicate::Literal;
use roaring::RoaringTreemap;

use super::{
    file_schema, BitmapDetails, BitmapIndexType, BITMAP_FILE, POSTING_COLUMN, VALUE_COLUMN,
};
use crate::posting;
use crate::query::cost::Work;
use crate::types::test_support::{context, seg, InMemory};
use crate::types::{IndexContext, IndexParams, IndexQuery, IndexType, SearchResult};

/// The indexed rows: `(value, address)` in fragments `0..fragments` of `rows`
/// rows each. Value of row `i` (global): `value(i)`.
struct Table {
    rows: Vec<(Option<i32>, u64)>,
    fragments: u32,
    per_fragment: u32,
}

impl Table {
    fn new(fragments: u32, per_fragment: u32, value: impl Fn(u32) -> Option<i32>) -> Self {
        let rows = (0..fragments)
            .flat_map(|f| (0..per_fragment).map(move |o| (f, o)))
            .map(|(f, o)| (value(f * per_fragment + o), row_address(f, o)))
            .collect();
        Self {
            rows,
            fragments,
            per_fragment,
        }
    }

    fn batches(&self) -> Vec<refract_core::Result<RecordBatch>> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int32, true),
            Field::new("_rowaddr", DataType::UInt64, false),
        ]));
        self.rows
            .chunks(4_096)
            .map(|chunk| {
                let values: Int32Array = chunk.iter().map(|(v, _)| *v).collect();
                let addrs: UInt64Array = chunk.iter().map(|(_, a)| *a).collect();
                Ok(
                    RecordBatch::try_new(schema.clone(), vec![Arc::new(values), Arc::new(addrs)])
                        .unwrap(),
                )
            })
            .collect()
    }

    /// Expected postings (`None` = nulls) after `translator`, empty ones left out.
    fn expected(&self, translator: &dyn Translator) -> BTreeMap<Option<i32>, RoaringTreemap> {
        let mut out = BTreeMap::<Option<i32>, RoaringTreemap>::new();
        let mut results = Vec::new();
        for (value, addr) in &self.rows {
            translator.translate(&[*addr], &mut results).unwrap();
            if let Some(new) = results[0] {
                out.entry(*value).or_default().insert(new);
            }
        }
        out
    }

    /// A compaction of every fragment, in order, into new fragments of
    /// `new_rows` rows (ids from 1,000); `deleted` picks the deleted rows.
    fn compaction(&self, new_rows: u64, deleted: impl Fn(u32, u32) -> bool) -> RowAddrRemap {
        let surviving: RoaringTreemap = (0..self.fragments)
            .flat_map(|f| (0..self.per_fragment).map(move |o| (f, o)))
            .filter(|(f, o)| !deleted(*f, *o))
            .map(|(f, o)| row_address(f, o))
            .collect();
        let live = surviving.len();
        let new_fragments = (0..live.div_ceil(new_rows))
            .map(|i| FragmentRows::new(1_000 + i, new_rows.min(live - i * new_rows)))
            .collect();
        RowAddrRemap::compact(vec![RewriteGroupInput {
            old_fragments: (0..self.fragments)
                .map(|f| FragmentRows::new(f.into(), self.per_fragment.into()))
                .collect(),
            new_fragments,
            surviving,
        }])
        .unwrap()
    }
}

/// Every posting of the segment, searched key by key.
async fn postings(
    ctx: &IndexContext,
    dir: &RelativePath,
    details: &[u8],
    keys: impl Iterator<Item = Option<i32>>,
) -> BTreeMap<Option<i32>, RoaringTreemap> {
    let segment = BitmapIndexType.open(ctx, dir, details).await.unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        let query = match key {
            Some(v) => IndexQuery::Equals(Literal::Int(v.into())),
            None => IndexQuery::IsNull,
        };
        let SearchResult::Exact(found) = segment.search(&query).await.unwrap() else {
            panic!("a bitmap search is exact");
        };
        // The planner's estimates are exact for one posting.
        assert_eq!(segment.estimate_rows(&query), Some(found.len()), "{key:?}");
        assert_eq!(
            segment.estimate_work(&query),
            Some(Work::index(&found)),
            "{key:?}"
        );
        if !found.is_empty() {
            out.insert(key, found);
        }
    }
    out
}

async fn check_remap(table: &Table, remap: &dyn Translator, distinct: i32) {
    let (ctx, _dir) = context().await;
    let details = BitmapIndexType
        .build(
            &ctx,
            &seg("old"),
            Box::pin(stream::iter(table.batches())),
            &IndexParams::default(),
        )
        .await
        .unwrap();
    let new = BitmapIndexType
        .remap(&ctx, &seg("old"), &details, &seg("new"), remap)
        .await
        .unwrap();
    let want = table.expected(remap);
    let keys = || std::iter::once(None).chain((0..distinct).map(Some));
    let got = postings(&ctx, &seg("new"), &new, keys()).await;
    assert_eq!(got, want);
    let parsed = BitmapDetails::from_bytes(&new).unwrap();
    assert_eq!(
        parsed.num_keys,
        want.len() as u64,
        "empty postings are dropped"
    );
    assert_eq!(
        parsed.num_rows,
        want.values().map(RoaringTreemap::len).sum::<u64>()
    );
}

#[tokio::test]
async fn remap_shifting_whole_fragments_is_exact() {
    // 40 fragments of 3,000 rows, no deletion: every fragment's part moves by
    // one constant, into new fragments of 50,000 rows (fragments 16 and 33
    // straddle two of them), so new containers fill from many old parts.
    let table = Table::new(40, 3_000, |i| (i % 13 != 12).then_some((i % 7) as i32));
    let remap = table.compaction(50_000, |_, _| false);
    check_remap(&table, &remap, 7).await;
}

#[tokio::test]
async fn remap_with_deletions_is_exact() {
    // Fragments whose rows are deleted take the row-by-row path, the others
    // the bulk shift; value 5 lives only in fragment 3, which loses every row;
    // value 6 is dense (a run of whole fragments).
    let table = Table::new(12, 7_000, |i| match i / 7_000 {
        3 => Some(5),
        8 | 9 => Some(6),
        _ => (i % 11 != 0).then_some((i % 5) as i32),
    });
    let remap = table.compaction(20_000, |f, o| f == 3 || (f % 2 == 0 && o % 97 == 3));
    check_remap(&table, &remap, 7).await;
}

#[tokio::test]
async fn remap_through_a_batch_translator_is_exact() {
    // A translator without the streaming or shift paths: ascending batches.
    struct Batches(RowAddrRemap);
    impl Translator for Batches {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> refract_core::Result<()> {
            self.0.translate(batch, out)
        }
    }
    let table = Table::new(6, 30_000, |i| (i % 3 != 0).then_some((i % 4) as i32));
    let remap = table.compaction(65_536, |f, o| f == 1 && o < 10_000);
    check_remap(&table, &Batches(remap), 4).await;
}

#[tokio::test]
async fn remap_through_an_in_memory_translator_is_exact_on_two_threads() {
    // Not worth memoizing: each read batch's postings are split over two
    // threads; results must still come out in key order and exact.
    let table = Table::new(8, 9_000, |i| match i % 17 {
        0 => None,
        v => Some(v as i32),
    });
    let remap = table.compaction(30_000, |f, o| f % 3 == 1 && o % 5 == 2);
    let translator = InMemory::new(remap);
    check_remap(&table, &translator, 17).await;
    assert!(translator.parts() > 0);
}

/// Writes `bitmap.lance` under `dir` with the postings of `rows` (keys
/// ascending) and, when `stats` is given, those statistics columns (in
/// [`super::STATS_COLUMNS`] order); returns the details.
async fn write_file(
    ctx: &IndexContext,
    dir: &RelativePath,
    rows: &[(i32, RoaringTreemap)],
    stats: Option<[Vec<u64>; 4]>,
) -> Vec<u8> {
    let values: ArrayRef = Arc::new(rows.iter().map(|(k, _)| Some(*k)).collect::<Int32Array>());
    let encoded: Vec<Vec<u8>> = rows.iter().map(|(_, p)| posting::encode(p)).collect();
    let postings: ArrayRef = Arc::new(
        encoded
            .iter()
            .map(|p| Some(p.as_slice()))
            .collect::<BinaryArray>(),
    );
    let (schema, columns) = match stats {
        Some(stats) => {
            let mut columns = vec![values, postings];
            columns.extend(
                stats
                    .into_iter()
                    .map(|c| Arc::new(UInt64Array::from(c)) as ArrayRef),
            );
            (file_schema(&DataType::Int32), columns)
        }
        None => (
            Arc::new(Schema::new(vec![
                Field::new(VALUE_COLUMN, DataType::Int32, true),
                Field::new(POSTING_COLUMN, DataType::Binary, false),
            ])),
            vec![values, postings],
        ),
    };
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut writer = LanceFileWriter::create(
        &ctx.store,
        &dir.join(BITMAP_FILE).unwrap(),
        schema,
        PageLayout::default(),
    )
    .await
    .unwrap();
    writer.write(&batch).await.unwrap();
    writer.finish().await.unwrap();
    BitmapDetails {
        num_keys: rows.len() as u64,
        num_rows: rows.iter().map(|(_, p)| p.len()).sum(),
    }
    .to_bytes()
    .unwrap()
}

fn two_postings() -> Vec<(i32, RoaringTreemap)> {
    vec![
        (
            1,
            [row_address(0, 3), row_address(2, 9)].into_iter().collect(),
        ),
        (4, (0..500).map(|o| row_address(1, o)).collect()),
    ]
}

#[tokio::test]
async fn segments_without_statistics_answer_without_estimates() {
    let (ctx, _dir) = context().await;
    let details = write_file(&ctx, &seg("old"), &two_postings(), None).await;
    let segment = BitmapIndexType
        .open(&ctx, &seg("old"), &details)
        .await
        .unwrap();
    let query = IndexQuery::Equals(Literal::Int(4));
    let SearchResult::Exact(found) = segment.search(&query).await.unwrap() else {
        panic!("a bitmap search is exact");
    };
    assert_eq!(found, two_postings()[1].1);
    assert_eq!(segment.estimate_rows(&query), None);
    assert_eq!(segment.estimate_work(&query), None);
}

#[tokio::test]
async fn unions_are_estimated_by_lower_bounds() {
    let (ctx, _dir) = context().await;
    let rows = two_postings();
    let stats = |f: fn(&Work) -> u64, rows_of: bool| -> Vec<u64> {
        two_postings()
            .iter()
            .map(|(_, p)| if rows_of { p.len() } else { f(&Work::index(p)) })
            .collect()
    };
    let details = write_file(
        &ctx,
        &seg("s"),
        &rows,
        Some([
            stats(|_| 0, true),
            stats(|w| w.fragments, false),
            stats(|w| w.ranges, false),
            stats(|w| w.rows, false),
        ]),
    )
    .await;
    let segment = BitmapIndexType
        .open(&ctx, &seg("s"), &details)
        .await
        .unwrap();
    let both = IndexQuery::InList(vec![Literal::Int(1), Literal::Int(4)]);
    let union = &rows[0].1 | &rows[1].1;
    let exact = Work::index(&union);
    let estimate = segment.estimate_work(&both).unwrap();
    // 2 fragments hold posting 1, 1 holds posting 4; 500 rows read at least.
    assert_eq!(
        estimate,
        Work {
            fragments: 2,
            ranges: 2,
            rows: 502
        }
    );
    assert!(estimate.cost() <= exact.cost(), "{estimate:?} vs {exact:?}");
    assert_eq!(segment.estimate_rows(&both), Some(502));
}

#[tokio::test]
async fn damaged_statistics_are_corrupt() {
    let (ctx, _dir) = context().await;
    let rows = two_postings();
    // Fewer rows read than the posting holds: not written by a build.
    let details = write_file(
        &ctx,
        &seg("a"),
        &rows,
        Some([vec![2, 500], vec![2, 1], vec![2, 1], vec![2, 499]]),
    )
    .await;
    let err = BitmapIndexType
        .open(&ctx, &seg("a"), &details)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::Corrupt { .. }) && err.to_string().contains("statistics"),
        "{err}"
    );
    // Counts that do not add up to the details.
    let details = write_file(
        &ctx,
        &seg("b"),
        &rows,
        Some([vec![2, 400], vec![2, 1], vec![2, 1], vec![2, 500]]),
    )
    .await;
    let err = BitmapIndexType
        .open(&ctx, &seg("b"), &details)
        .await
        .err()
        .unwrap();
    assert!(matches!(&err, Error::Corrupt { .. }), "{err}");
    // Counts that add up but disagree with a posting: that search fails.
    let mut swapped = rows.clone();
    swapped[0].1 = (0..3).map(|o| row_address(0, o)).collect();
    swapped[1].1 = (0..499).map(|o| row_address(1, o)).collect();
    let details = write_file(
        &ctx,
        &seg("c"),
        &swapped,
        Some([vec![2, 500], vec![1, 1], vec![1, 1], vec![2, 500]]),
    )
    .await;
    let segment = BitmapIndexType
        .open(&ctx, &seg("c"), &details)
        .await
        .unwrap();
    let err = segment
        .search(&IndexQuery::Equals(Literal::Int(1)))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::Corrupt { .. }) && err.to_string().contains("count"),
        "{err}"
    );
}
