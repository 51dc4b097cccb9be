//! ngram index: build, substring candidates, streaming remap (including a dense
//! posting translated in bounded slices) and corrupt files.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::{ArrayRef, LargeBinaryArray, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use refract_core::{ByteWeightedCache, Error, Result};
use refract_index::types::ngram::storage::{postings_path, postings_schema};
use refract_index::types::ngram::trigram::{pack, trigrams, Trigram};
use refract_index::types::ngram::{NgramIndex, NgramSegment};
use refract_index::types::{IndexContext, IndexParams, IndexQuery, IndexType, SearchResult};
use refract_index::{Translator, MAX_TRANSLATION_BATCH};
use refract_table::io::PageLayout;
use refract_table::io::{DatasetStore, LanceFileWriter, RelativePath};
use roaring::RoaringTreemap;
use rstest::rstest;

async fn context(name: &str) -> IndexContext {
    let uri = format!("memory://ngram-{name}-{}", uuid::Uuid::new_v4());
    IndexContext {
        store: DatasetStore::open(&uri, true).await.unwrap(),
        cache: ByteWeightedCache::new(16 << 20),
    }
}

fn dir(name: &str) -> RelativePath {
    RelativePath::parse(&format!("_indices/{name}")).unwrap()
}

fn batch(values: Vec<Option<String>>, addrs: Vec<u64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("text", DataType::Utf8, true),
        Field::new("_rowaddr", DataType::UInt64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(values)),
        Arc::new(UInt64Array::from(addrs)),
    ];
    RecordBatch::try_new(schema, columns).unwrap()
}

fn input(batches: Vec<RecordBatch>) -> BoxStream<'static, Result<RecordBatch>> {
    stream::iter(batches.into_iter().map(Ok)).boxed()
}

const WORDS: [Option<&str>; 8] = [
    Some("apple pie"),
    Some("Pineapple"),
    Some("grape"),
    None,
    Some("ab"),
    Some("APPLESAUCE"),
    Some("banana"),
    Some("crab apple"),
];

/// Address of the i-th synthetic row: two fragments of four rows.
fn addr(i: usize) -> u64 {
    ((i as u64 / 4) << 32) | (i as u64 % 4)
}

fn words_batch() -> RecordBatch {
    batch(
        WORDS.iter().map(|w| w.map(str::to_string)).collect(),
        (0..WORDS.len()).map(addr).collect(),
    )
}

async fn build(ctx: &IndexContext, at: &RelativePath, batches: Vec<RecordBatch>) -> Vec<u8> {
    NgramIndex
        .build(ctx, at, input(batches), &IndexParams::default())
        .await
        .unwrap()
}

fn treemap(addrs: impl IntoIterator<Item = u64>) -> RoaringTreemap {
    addrs.into_iter().collect()
}

#[rstest]
#[case::common_word("apple", vec![0, 1, 5, 7])]
#[case::case_folded("APPLE P", vec![0])]
#[case::inner("ineap", vec![1])]
#[case::absent_trigram("xyz", vec![])]
#[case::multi("anana", vec![6])]
#[tokio::test]
async fn contains_returns_rows_holding_every_trigram(
    #[case] needle: &str,
    #[case] rows: Vec<usize>,
) {
    let ctx = context("contains").await;
    let at = dir("a");
    let details = build(&ctx, &at, vec![words_batch()]).await;
    let segment = NgramIndex.open(&ctx, &at, &details).await.unwrap();
    let query = IndexQuery::Contains(needle.to_string());
    assert!(segment.can_answer(&query));
    let expected = treemap(rows.into_iter().map(addr));
    assert_eq!(
        segment.search(&query).await.unwrap(),
        SearchResult::Candidates(expected)
    );
}

#[rstest]
#[case("ap")]
#[case("")]
#[tokio::test]
async fn short_needles_are_not_answered(#[case] needle: &str) {
    let ctx = context("short").await;
    let at = dir("a");
    let details = build(&ctx, &at, vec![words_batch()]).await;
    let segment = NgramIndex.open(&ctx, &at, &details).await.unwrap();
    let query = IndexQuery::Contains(needle.to_string());
    assert!(!segment.can_answer(&query));
    assert!(!segment.can_answer(&IndexQuery::IsNull));
    assert!(matches!(
        segment.search(&query).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn stored_postings_are_exact_and_skip_nulls_and_short_values() {
    let ctx = context("postings").await;
    let at = dir("a");
    let details = build(&ctx, &at, vec![words_batch()]).await;
    let segment = NgramSegment::open(&ctx, &at, &details).await.unwrap();
    let postings = segment.postings().await.unwrap();
    // Expected postings computed from the definition, row by row.
    let mut expected: std::collections::BTreeMap<Trigram, RoaringTreemap> = Default::default();
    for (i, w) in WORDS.iter().enumerate() {
        for t in w.map(trigrams).unwrap_or_default() {
            expected.entry(t).or_default().insert(addr(i));
        }
    }
    assert_eq!(postings, expected.into_iter().collect::<Vec<_>>());
    use refract_index::types::IndexSegmentReader;
    let stored = segment.stored_addresses().await.unwrap();
    assert_eq!(stored, treemap([0, 1, 2, 5, 6, 7].map(addr)));
}

/// A translator that applies `f` and records how it was called.
struct CountingTranslator<F> {
    f: F,
    calls: AtomicUsize,
    max_batch: AtomicUsize,
    addresses: AtomicUsize,
}

impl<F: Fn(u64) -> Option<u64> + Send + Sync> CountingTranslator<F> {
    fn new(f: F) -> Self {
        Self {
            f,
            calls: AtomicUsize::new(0),
            max_batch: AtomicUsize::new(0),
            addresses: AtomicUsize::new(0),
        }
    }
}

impl<F: Fn(u64) -> Option<u64> + Send + Sync> Translator for CountingTranslator<F> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.max_batch.fetch_max(batch.len(), Ordering::SeqCst);
        self.addresses.fetch_add(batch.len(), Ordering::SeqCst);
        out.clear();
        out.extend(batch.iter().map(|a| (self.f)(*a)));
        Ok(())
    }
}

#[tokio::test]
async fn remap_equals_a_fresh_build_over_translated_rows() {
    let ctx = context("remap").await;
    let (old, new, fresh) = (dir("old"), dir("new"), dir("fresh"));
    let details = build(&ctx, &old, vec![words_batch()]).await;
    // Fragment 0 is rewritten into fragment 5 without its row 1; fragment 1 is untouched.
    let translate = |a: u64| match (a >> 32, a & 0xFFFF_FFFF) {
        (0, 1) => None,
        (0, off) => Some((5 << 32) | (off + 10)),
        _ => Some(a),
    };
    let translator = CountingTranslator::new(translate);
    let new_details = NgramIndex
        .remap(&ctx, &old, &details, &new, &translator)
        .await
        .unwrap();

    let survivors: Vec<usize> = (0..WORDS.len())
        .filter(|i| translate(addr(*i)).is_some())
        .collect();
    let fresh_batch = batch(
        survivors
            .iter()
            .map(|i| WORDS[*i].map(str::to_string))
            .collect(),
        survivors
            .iter()
            .map(|i| translate(addr(*i)).unwrap())
            .collect(),
    );
    let fresh_details = build(&ctx, &fresh, vec![fresh_batch]).await;
    assert_eq!(new_details, fresh_details);

    let remapped = NgramSegment::open(&ctx, &new, &new_details).await.unwrap();
    let rebuilt = NgramSegment::open(&ctx, &fresh, &fresh_details)
        .await
        .unwrap();
    // Trigrams only "Pineapple" had (e.g. "pin") are gone entirely.
    assert!(!remapped.trigrams().contains(&pack(*b"pin")));
    assert_eq!(
        remapped.postings().await.unwrap(),
        rebuilt.postings().await.unwrap()
    );
}

#[tokio::test]
async fn dense_posting_remaps_in_bounded_slices() {
    const ROWS: u64 = 300_000;
    let ctx = context("dense").await;
    let (old, new) = (dir("old"), dir("new"));
    let batches: Vec<RecordBatch> = (0..ROWS)
        .collect::<Vec<_>>()
        .chunks(50_000)
        .map(|chunk| {
            batch(
                chunk
                    .iter()
                    .map(|i| Some(if i % 2 == 0 { "xyz" } else { "xyzw" }.to_string()))
                    .collect(),
                chunk.to_vec(),
            )
        })
        .collect();
    let details = build(&ctx, &old, batches).await;
    // Drop every fifth row, move the rest to fragment 3 with a reversed order.
    let translate = |a: u64| (!a.is_multiple_of(5)).then_some((3 << 32) | (ROWS - a));
    let translator = CountingTranslator::new(translate);
    let new_details = NgramIndex
        .remap(&ctx, &old, &details, &new, &translator)
        .await
        .unwrap();

    let max = translator.max_batch.load(Ordering::SeqCst);
    assert!(
        max <= MAX_TRANSLATION_BATCH,
        "a translator call saw {max} addresses"
    );
    // Each stored address is translated once: "xyz" holds all 300k rows
    // (ceil(300k/64Ki) calls); the rows of "yzw" are already known.
    assert_eq!(translator.calls.load(Ordering::SeqCst), 5);
    assert_eq!(translator.addresses.load(Ordering::SeqCst), ROWS as usize);
    assert_eq!(max, MAX_TRANSLATION_BATCH);

    let segment = NgramSegment::open(&ctx, &new, &new_details).await.unwrap();
    let postings = segment.postings().await.unwrap();
    let xyz = treemap((0..ROWS).filter_map(translate));
    let yzw = treemap((0..ROWS).filter(|a| a % 2 == 1).filter_map(translate));
    assert_eq!(postings, vec![(pack(*b"xyz"), xyz), (pack(*b"yzw"), yzw)]);
}

#[tokio::test]
async fn remap_dropping_every_row_leaves_an_empty_segment() {
    let ctx = context("drop-all").await;
    let (old, new) = (dir("old"), dir("new"));
    let details = build(&ctx, &old, vec![words_batch()]).await;
    let translator = CountingTranslator::new(|_| None);
    let new_details = NgramIndex
        .remap(&ctx, &old, &details, &new, &translator)
        .await
        .unwrap();
    let segment = NgramIndex.open(&ctx, &new, &new_details).await.unwrap();
    let result = segment
        .search(&IndexQuery::Contains("apple".into()))
        .await
        .unwrap();
    assert_eq!(result, SearchResult::Candidates(RoaringTreemap::new()));
}

#[tokio::test]
async fn empty_segments_build_open_and_remap() {
    let ctx = context("empty").await;
    let (old, new) = (dir("old"), dir("new"));
    let details = build(
        &ctx,
        &old,
        vec![batch(vec![None, Some("ab".into())], vec![1, 2])],
    )
    .await;
    let translator = CountingTranslator::new(Some);
    let new_details = NgramIndex
        .remap(&ctx, &old, &details, &new, &translator)
        .await
        .unwrap();
    assert_eq!(new_details, details);
    assert_eq!(translator.calls.load(Ordering::SeqCst), 0);
    let segment = NgramIndex.open(&ctx, &new, &new_details).await.unwrap();
    let result = segment
        .search(&IndexQuery::Contains("abc".into()))
        .await
        .unwrap();
    assert_eq!(result, SearchResult::Candidates(RoaringTreemap::new()));
}

#[tokio::test]
async fn build_rejects_input_without_addresses_or_strings() {
    let ctx = context("bad-input").await;
    let no_addr = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("text", DataType::Utf8, true)])),
        vec![Arc::new(StringArray::from(vec!["abc"])) as ArrayRef],
    )
    .unwrap();
    let err = NgramIndex
        .build(
            &ctx,
            &dir("a"),
            input(vec![no_addr]),
            &IndexParams::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let ints = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("n", DataType::UInt32, false),
            Field::new("_rowaddr", DataType::UInt64, false),
        ])),
        vec![
            Arc::new(UInt32Array::from(vec![1])) as ArrayRef,
            Arc::new(UInt64Array::from(vec![1])),
        ],
    )
    .unwrap();
    let err = NgramIndex
        .build(&ctx, &dir("b"), input(vec![ints]), &IndexParams::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(NgramIndex.supports(&DataType::LargeUtf8));
    assert!(!NgramIndex.supports(&DataType::Int64));
}

fn assert_corrupt<T>(result: Result<T>) {
    match result {
        Err(Error::Corrupt { .. }) => {}
        Err(other) => panic!("expected Corrupt, got {other}"),
        Ok(_) => panic!("expected Corrupt, got Ok"),
    }
}

#[tokio::test]
async fn garbage_postings_file_is_corrupt() {
    let ctx = context("garbage").await;
    let at = dir("a");
    let details = build(&ctx, &at, vec![words_batch()]).await;
    let path = postings_path(&at).unwrap();
    ctx.store
        .put(&path, Bytes::from_static(b"definitely not a lance file"))
        .await
        .unwrap();
    assert_corrupt(NgramIndex.open(&ctx, &at, &details).await);
}

#[tokio::test]
async fn bad_details_are_corrupt() {
    let ctx = context("details").await;
    let at = dir("a");
    let details = build(&ctx, &at, vec![words_batch()]).await;
    assert_corrupt(NgramIndex.open(&ctx, &at, b"{not json").await);
    // Details that disagree with the file's row count.
    let wrong = br#"{"format_version":1,"trigrams":3}"#;
    assert_corrupt(NgramIndex.open(&ctx, &at, wrong).await);
    let translator = CountingTranslator::new(Some);
    assert_corrupt(
        NgramIndex
            .remap(&ctx, &at, wrong, &dir("b"), &translator)
            .await,
    );
    assert!(NgramIndex.open(&ctx, &at, &details).await.is_ok());
}

/// Writes a postings file by hand (bypassing the builder's checks).
async fn write_raw(
    ctx: &IndexContext,
    at: &RelativePath,
    trigrams: Vec<u32>,
    postings: Vec<Vec<u8>>,
) {
    let mut writer = LanceFileWriter::create(
        &ctx.store,
        &postings_path(at).unwrap(),
        postings_schema(),
        PageLayout::default(),
    )
    .await
    .unwrap();
    let batch = RecordBatch::try_new(
        postings_schema(),
        vec![
            Arc::new(UInt32Array::from(trigrams)) as ArrayRef,
            Arc::new(LargeBinaryArray::from_iter_values(postings.iter())),
        ],
    )
    .unwrap();
    writer.write(&batch).await.unwrap();
    writer.finish().await.unwrap();
}

fn serialized(addrs: &[u64]) -> Vec<u8> {
    let mut bytes = Vec::new();
    treemap(addrs.iter().copied())
        .serialize_into(&mut bytes)
        .unwrap();
    bytes
}

#[tokio::test]
async fn undecodable_posting_is_corrupt_on_search_and_remap() {
    let ctx = context("bad-posting").await;
    let at = dir("a");
    write_raw(&ctx, &at, vec![pack(*b"abc")], vec![vec![0xFF, 0x00, 0x13]]).await;
    let details = br#"{"format_version":1,"trigrams":1}"#;
    let segment = NgramIndex.open(&ctx, &at, details).await.unwrap();
    assert_corrupt(segment.search(&IndexQuery::Contains("abc".into())).await);
    let translator = CountingTranslator::new(Some);
    assert_corrupt(
        NgramIndex
            .remap(&ctx, &at, details, &dir("b"), &translator)
            .await,
    );
}

#[tokio::test]
async fn unsorted_trigrams_are_corrupt() {
    let ctx = context("unsorted").await;
    let at = dir("a");
    write_raw(
        &ctx,
        &at,
        vec![pack(*b"bcd"), pack(*b"abc")],
        vec![serialized(&[1]), serialized(&[2])],
    )
    .await;
    let details = br#"{"format_version":1,"trigrams":2}"#;
    assert_corrupt(NgramIndex.open(&ctx, &at, details).await);
    let translator = CountingTranslator::new(Some);
    assert_corrupt(
        NgramIndex
            .remap(&ctx, &at, details, &dir("b"), &translator)
            .await,
    );
}

#[tokio::test]
async fn unknown_format_version_is_not_supported() {
    let ctx = context("version").await;
    let at = dir("a");
    build(&ctx, &at, vec![words_batch()]).await;
    let err = NgramIndex
        .open(&ctx, &at, br#"{"format_version":99,"trigrams":1}"#)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::NotSupported { .. }), "{err}");
}
