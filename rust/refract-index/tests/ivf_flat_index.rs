//! ivf_flat index: recall against exact kNN, remap without retraining (equal to
//! the original search modulo translation), bounded translation batches and
//! corrupt files.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use refract_core::{ByteWeightedCache, Error, Result};
use refract_index::types::ivf_flat::kmeans::SplitMix64;
use refract_index::types::ivf_flat::layout::{addresses_path, vectors_path};
use refract_index::types::ivf_flat::{distance, IvfFlatIndex, IvfFlatSegment};
use refract_index::types::{
    IndexContext, IndexParams, IndexQuery, IndexSegmentReader, IndexType, Metric, SearchResult,
};
use refract_index::{Translator, MAX_TRANSLATION_BATCH};
use refract_table::io::{DatasetStore, RelativePath};
use roaring::RoaringTreemap;
use rstest::rstest;

async fn context(name: &str) -> IndexContext {
    let uri = format!("memory://ivf-{name}-{}", uuid::Uuid::new_v4());
    IndexContext {
        store: DatasetStore::open(&uri, true).await.unwrap(),
        cache: ByteWeightedCache::new(16 << 20),
    }
}

fn dir(name: &str) -> RelativePath {
    RelativePath::parse(&format!("_indices/{name}")).unwrap()
}

/// A synthetic dataset: `n` vectors around `clusters` random centres, deterministic.
struct Dataset {
    dim: usize,
    values: Vec<f32>,
    addrs: Vec<u64>,
}

impl Dataset {
    fn clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let centres: Vec<f32> = (0..clusters * dim)
            .map(|_| (rng.next_f64() * 20.0 - 10.0) as f32)
            .collect();
        let mut values = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let c = rng.below(clusters);
            for d in 0..dim {
                values.push(centres[c * dim + d] + (rng.next_f64() * 4.0 - 2.0) as f32);
            }
        }
        // Two fragments: rows 0..n/2 in fragment 0, the rest in fragment 1.
        let half = n / 2;
        let addrs = (0..n as u64)
            .map(|i| {
                if (i as usize) < half {
                    i
                } else {
                    (1 << 32) | (i - half as u64)
                }
            })
            .collect();
        Self { dim, values, addrs }
    }

    fn vector(&self, i: usize) -> &[f32] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }

    fn batches(&self, rows: &[usize], addr: impl Fn(usize) -> u64) -> Vec<RecordBatch> {
        rows.chunks(4096)
            .map(|chunk| {
                let values: Vec<f32> = chunk
                    .iter()
                    .flat_map(|i| self.vector(*i).to_vec())
                    .collect();
                vector_batch(
                    self.dim,
                    values,
                    chunk.iter().map(|i| addr(*i)).collect(),
                    None,
                )
            })
            .collect()
    }

    fn all_batches(&self) -> Vec<RecordBatch> {
        let rows: Vec<usize> = (0..self.addrs.len()).collect();
        self.batches(&rows, |i| self.addrs[i])
    }

    /// Exact k nearest (address, distance), ties by address.
    fn exact(
        &self,
        query: &[f32],
        k: usize,
        metric: Metric,
        keep: impl Fn(u64) -> Option<u64>,
    ) -> Vec<(u64, f32)> {
        let mut all: Vec<(u64, f32)> = (0..self.addrs.len())
            .filter_map(|i| {
                keep(self.addrs[i]).map(|a| (a, distance(metric, query, self.vector(i))))
            })
            .collect();
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }
}

fn vector_batch(
    dim: usize,
    values: Vec<f32>,
    addrs: Vec<u64>,
    nulls: Option<Vec<bool>>,
) -> RecordBatch {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let list = FixedSizeListArray::try_new(
        item.clone(),
        dim as i32,
        Arc::new(Float32Array::from(values)),
        nulls.map(Into::into),
    )
    .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("emb", DataType::FixedSizeList(item, dim as i32), true),
        Field::new("_rowaddr", DataType::UInt64, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(list) as ArrayRef,
            Arc::new(UInt64Array::from(addrs)),
        ],
    )
    .unwrap()
}

fn input(batches: Vec<RecordBatch>) -> BoxStream<'static, Result<RecordBatch>> {
    stream::iter(batches.into_iter().map(Ok)).boxed()
}

fn params(partitions: u32, metric: Metric) -> IndexParams {
    IndexParams {
        partitions: Some(partitions),
        metric: Some(metric),
        ..IndexParams::default()
    }
}

async fn build(
    ctx: &IndexContext,
    at: &RelativePath,
    batches: Vec<RecordBatch>,
    params: &IndexParams,
) -> Vec<u8> {
    IvfFlatIndex
        .build(ctx, at, input(batches), params)
        .await
        .unwrap()
}

fn nearest(vector: &[f32], k: usize, nprobes: usize, metric: Metric) -> IndexQuery {
    IndexQuery::Nearest {
        vector: vector.to_vec(),
        k,
        nprobes,
        metric,
    }
}

async fn scored(segment: &dyn IndexSegmentReader, query: &IndexQuery) -> Vec<(u64, f32)> {
    match segment.search(query).await.unwrap() {
        SearchResult::Scored(rows) => rows,
        other => panic!("expected Scored, got {other:?}"),
    }
}

#[rstest]
#[case::l2(Metric::L2)]
#[case::cosine(Metric::Cosine)]
#[tokio::test]
async fn recall_at_10_with_a_quarter_of_the_partitions(#[case] metric: Metric) {
    const PARTITIONS: usize = 64;
    let data = Dataset::clustered(20_000, 32, 100, 42);
    let ctx = context("recall").await;
    let at = dir("a");
    let details = build(
        &ctx,
        &at,
        data.all_batches(),
        &params(PARTITIONS as u32, metric),
    )
    .await;
    let segment = IvfFlatIndex.open(&ctx, &at, &details).await.unwrap();
    let queries = Dataset::clustered(100, 32, 100, 42 ^ 0xABCD);
    let (mut hits, mut total) = (0usize, 0usize);
    for q in 0..100 {
        let query = queries.vector(q);
        let truth: Vec<u64> = data
            .exact(query, 10, metric, Some)
            .into_iter()
            .map(|(a, _)| a)
            .collect();
        let found = scored(
            segment.as_ref(),
            &nearest(query, 10, PARTITIONS / 4, metric),
        )
        .await;
        assert_eq!(found.len(), 10);
        assert!(found.windows(2).all(|w| w[0].1 <= w[1].1), "not best-first");
        hits += found.iter().filter(|(a, _)| truth.contains(a)).count();
        total += truth.len();
    }
    let recall = hits as f64 / total as f64;
    println!(
        "ivf_flat recall@10 ({metric:?}, nprobes {}/{PARTITIONS}): {recall:.4}",
        PARTITIONS / 4
    );
    assert!(recall >= 0.9, "recall@10 {recall}");
}

#[tokio::test]
async fn probing_every_partition_is_exact() {
    let data = Dataset::clustered(3_000, 8, 10, 7);
    let ctx = context("exact").await;
    let at = dir("a");
    let details = build(&ctx, &at, data.all_batches(), &params(16, Metric::L2)).await;
    let segment = IvfFlatIndex.open(&ctx, &at, &details).await.unwrap();
    for q in [0usize, 17, 2_999] {
        let query = data.vector(q);
        let found = scored(segment.as_ref(), &nearest(query, 25, 16, Metric::L2)).await;
        assert_eq!(found, data.exact(query, 25, Metric::L2, Some));
    }
}

#[tokio::test]
async fn builds_are_deterministic() {
    let data = Dataset::clustered(2_000, 8, 10, 3);
    let ctx = context("determinism").await;
    let (a, b) = (dir("a"), dir("b"));
    let da = build(&ctx, &a, data.all_batches(), &params(12, Metric::L2)).await;
    let db = build(&ctx, &b, data.all_batches(), &params(12, Metric::L2)).await;
    assert_eq!(da, db);
    let sa = IvfFlatSegment::open(&ctx, &a, &da).await.unwrap();
    let sb = IvfFlatSegment::open(&ctx, &b, &db).await.unwrap();
    assert_eq!(sa.layout(), sb.layout());
}

/// A translator that applies `f` and records how it was called.
struct CountingTranslator<F> {
    f: F,
    calls: AtomicUsize,
    max_batch: AtomicUsize,
}

impl<F: Fn(u64) -> Option<u64> + Send + Sync> CountingTranslator<F> {
    fn new(f: F) -> Self {
        Self {
            f,
            calls: AtomicUsize::new(0),
            max_batch: AtomicUsize::new(0),
        }
    }
}

impl<F: Fn(u64) -> Option<u64> + Send + Sync> Translator for CountingTranslator<F> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.max_batch.fetch_max(batch.len(), Ordering::SeqCst);
        out.clear();
        out.extend(batch.iter().map(|a| (self.f)(*a)));
        Ok(())
    }
}

/// Fragment 0 is compacted into fragment 9 without every fourth row (750 of
/// the 6,000 indexed rows: exactly 1/8, so the remap keeps tombstones and
/// copies the vectors file); fragment 1 stays.
fn compaction(addr: u64) -> Option<u64> {
    match addr >> 32 {
        0 if addr.is_multiple_of(4) => None,
        0 => Some((9 << 32) | (addr - addr / 4 - 1)),
        _ => Some(addr),
    }
}

/// Like [`compaction`] without every second row of fragment 0 (1,500 rows,
/// over 1/8: the remap rewrites both files without them).
fn heavy_compaction(addr: u64) -> Option<u64> {
    match addr >> 32 {
        0 if addr.is_multiple_of(2) => None,
        0 => Some((9 << 32) | (addr / 2)),
        _ => Some(addr),
    }
}

#[rstest]
#[case::l2_tombstones(Metric::L2, compaction, false)]
#[case::cosine_tombstones(Metric::Cosine, compaction, false)]
#[case::l2_rewrite(Metric::L2, heavy_compaction, true)]
#[case::cosine_rewrite(Metric::Cosine, heavy_compaction, true)]
#[tokio::test]
async fn remap_keeps_partitions_and_equals_translated_search(
    #[case] metric: Metric,
    #[case] compaction: fn(u64) -> Option<u64>,
    #[case] rewrites: bool,
) {
    let data = Dataset::clustered(6_000, 16, 20, 11);
    let ctx = context("remap").await;
    let (old, new) = (dir("old"), dir("new"));
    let details = build(&ctx, &old, data.all_batches(), &params(24, metric)).await;
    let translator = CountingTranslator::new(compaction);
    let new_details = IvfFlatIndex
        .remap(&ctx, &old, &details, &new, &translator)
        .await
        .unwrap();

    let before = IvfFlatSegment::open(&ctx, &old, &details).await.unwrap();
    let after = IvfFlatSegment::open(&ctx, &new, &new_details)
        .await
        .unwrap();
    // Never retrained: same centroids.
    assert_eq!(after.layout().centroids, before.layout().centroids);
    let survivors = data
        .addrs
        .iter()
        .filter(|a| compaction(**a).is_some())
        .count() as u64;
    let old_vectors = ctx.store.get(&vectors_path(&old).unwrap()).await.unwrap();
    let new_vectors = ctx.store.get(&vectors_path(&new).unwrap()).await.unwrap();
    if rewrites {
        // Sizes shrink by exactly the dropped rows.
        assert_eq!(after.layout().rows(), survivors);
        assert_ne!(new_vectors, old_vectors);
        for p in 0..before.layout().partitions() {
            assert!(after.layout().lengths[p] <= before.layout().lengths[p]);
        }
    } else {
        // The vectors file is the old one, byte for byte; gone rows are tombstones.
        assert_eq!(new_vectors, old_vectors);
        assert_eq!(after.layout(), before.layout());
        assert_eq!(after.layout().rows(), data.addrs.len() as u64);
    }
    // The remapped segment holds exactly the translated survivors.
    let expected: RoaringTreemap = data.addrs.iter().filter_map(|a| compaction(*a)).collect();
    assert_eq!(after.stored_addresses().await.unwrap(), expected);

    // Search equals the original search with addresses translated and deleted rows dropped.
    let queries = Dataset::clustered(20, 16, 20, 99);
    for q in 0..20 {
        let query = queries.vector(q);
        for nprobes in [1, 6, 24] {
            let everything = before
                .nearest(query, data.addrs.len(), nprobes)
                .await
                .unwrap();
            let mut translated: Vec<(u64, f32)> = everything
                .into_iter()
                .filter_map(|(a, d)| compaction(a).map(|n| (n, d)))
                .collect();
            translated.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            translated.truncate(10);
            assert_eq!(
                after.nearest(query, 10, nprobes).await.unwrap(),
                translated,
                "nprobes {nprobes}"
            );
        }
    }
}

#[tokio::test]
async fn remap_translates_in_bounded_batches() {
    const ROWS: usize = 150_000;
    let dim = 4;
    let mut rng = SplitMix64::new(5);
    let values: Vec<f32> = (0..ROWS * dim).map(|_| rng.next_f64() as f32).collect();
    let batches: Vec<RecordBatch> = (0..ROWS)
        .collect::<Vec<_>>()
        .chunks(50_000)
        .map(|c| {
            let v = c
                .iter()
                .flat_map(|i| values[i * dim..(i + 1) * dim].to_vec())
                .collect();
            vector_batch(dim, v, c.iter().map(|i| *i as u64).collect(), None)
        })
        .collect();
    let ctx = context("bounded").await;
    let (old, new) = (dir("old"), dir("new"));
    let details = build(&ctx, &old, batches, &params(4, Metric::L2)).await;
    let translator = CountingTranslator::new(|a| (!a.is_multiple_of(3)).then_some(a + (2 << 32)));
    let new_details = IvfFlatIndex
        .remap(&ctx, &old, &details, &new, &translator)
        .await
        .unwrap();
    let max = translator.max_batch.load(Ordering::SeqCst);
    assert!(
        max <= MAX_TRANSLATION_BATCH,
        "a translator call saw {max} addresses"
    );
    assert!(translator.calls.load(Ordering::SeqCst) >= ROWS.div_ceil(MAX_TRANSLATION_BATCH));
    let after = IvfFlatSegment::open(&ctx, &new, &new_details)
        .await
        .unwrap();
    let expected: RoaringTreemap = (0..ROWS as u64)
        .filter(|a| !a.is_multiple_of(3))
        .map(|a| a + (2 << 32))
        .collect();
    assert_eq!(after.stored_addresses().await.unwrap(), expected);
}

#[tokio::test]
async fn null_vectors_are_skipped_and_empty_builds_answer_nothing() {
    let ctx = context("nulls").await;
    let at = dir("a");
    let batch = vector_batch(
        2,
        vec![1.0, 1.0, 9.0, 9.0, 2.0, 2.0],
        vec![10, 11, 12],
        Some(vec![true, false, true]),
    );
    let details = build(&ctx, &at, vec![batch], &IndexParams::default()).await;
    let segment = IvfFlatIndex.open(&ctx, &at, &details).await.unwrap();
    assert_eq!(
        segment.stored_addresses().await.unwrap(),
        [10u64, 12].into_iter().collect()
    );
    let found = scored(segment.as_ref(), &nearest(&[9.0, 9.0], 5, 8, Metric::L2)).await;
    assert_eq!(found, vec![(12, 98.0), (10, 128.0)]);

    let empty = dir("empty");
    let details = build(&ctx, &empty, vec![], &IndexParams::default()).await;
    let segment = IvfFlatIndex.open(&ctx, &empty, &details).await.unwrap();
    assert_eq!(
        scored(segment.as_ref(), &nearest(&[1.0], 3, 1, Metric::L2)).await,
        vec![]
    );
}

#[tokio::test]
async fn queries_the_index_cannot_answer() {
    let data = Dataset::clustered(500, 4, 5, 1);
    let ctx = context("cannot").await;
    let at = dir("a");
    let details = build(&ctx, &at, data.all_batches(), &params(4, Metric::L2)).await;
    let segment = IvfFlatIndex.open(&ctx, &at, &details).await.unwrap();
    let wrong_dim = nearest(&[1.0, 2.0], 3, 1, Metric::L2);
    let wrong_metric = nearest(&[1.0, 2.0, 3.0, 4.0], 3, 1, Metric::Cosine);
    for query in [
        &wrong_dim,
        &wrong_metric,
        &IndexQuery::Contains("abc".into()),
    ] {
        assert!(!segment.can_answer(query));
        assert!(matches!(
            segment.search(query).await,
            Err(Error::InvalidInput { .. })
        ));
    }
    let ok = nearest(&[1.0, 2.0, 3.0, 4.0], 3, 1, Metric::L2);
    assert!(segment.can_answer(&ok));
    let non_finite = nearest(&[f32::NAN, 2.0, 3.0, 4.0], 3, 1, Metric::L2);
    assert!(matches!(
        segment.search(&non_finite).await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn bad_build_input_is_invalid() {
    let ctx = context("bad-input").await;
    let zero = IvfFlatIndex
        .build(
            &ctx,
            &dir("a"),
            input(vec![vector_batch(2, vec![1.0, 2.0], vec![1], None)]),
            &params(0, Metric::L2),
        )
        .await;
    assert!(matches!(zero, Err(Error::InvalidInput { .. })));
    let nan = IvfFlatIndex
        .build(
            &ctx,
            &dir("b"),
            input(vec![vector_batch(2, vec![f32::NAN, 2.0], vec![1], None)]),
            &IndexParams::default(),
        )
        .await;
    assert!(matches!(nan, Err(Error::InvalidInput { .. })));
    let mixed = IvfFlatIndex
        .build(
            &ctx,
            &dir("c"),
            input(vec![
                vector_batch(2, vec![1.0, 2.0], vec![1], None),
                vector_batch(3, vec![1.0; 3], vec![2], None),
            ]),
            &IndexParams::default(),
        )
        .await;
    assert!(matches!(mixed, Err(Error::InvalidInput { .. })));
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    assert!(IvfFlatIndex.supports(&DataType::FixedSizeList(item, 8)));
    assert!(!IvfFlatIndex.supports(&DataType::Float32));
}

fn assert_corrupt<T>(result: Result<T>) {
    match result {
        Err(Error::Corrupt { .. }) => {}
        Err(other) => panic!("expected Corrupt, got {other}"),
        Ok(_) => panic!("expected Corrupt, got Ok"),
    }
}

#[tokio::test]
async fn corrupt_files_and_details_are_corrupt_errors() {
    let data = Dataset::clustered(500, 4, 5, 2);
    let ctx = context("corrupt").await;
    let at = dir("a");
    let details = build(&ctx, &at, data.all_batches(), &params(4, Metric::L2)).await;
    let translator = CountingTranslator::new(Some);

    assert_corrupt(IvfFlatIndex.open(&ctx, &at, b"[]").await);
    let mut wrong: serde_json::Value = serde_json::from_slice(&details).unwrap();
    wrong["rows"] = serde_json::json!(499);
    let wrong = serde_json::to_vec(&wrong).unwrap();
    assert_corrupt(IvfFlatIndex.open(&ctx, &at, &wrong).await);
    assert_corrupt(
        IvfFlatIndex
            .remap(&ctx, &at, &wrong, &dir("b"), &translator)
            .await,
    );

    let path = vectors_path(&at).unwrap();
    let bytes = ctx.store.get(&path).await.unwrap();
    ctx.store
        .put(&path, bytes.slice(..bytes.len() / 2))
        .await
        .unwrap();
    assert_corrupt(IvfFlatIndex.open(&ctx, &at, &details).await);
    ctx.store
        .put(&path, Bytes::from_static(b"garbage"))
        .await
        .unwrap();
    assert_corrupt(IvfFlatIndex.open(&ctx, &at, &details).await);
    assert_corrupt(
        IvfFlatIndex
            .remap(&ctx, &at, &details, &dir("c"), &translator)
            .await,
    );
}

#[tokio::test]
async fn missing_truncated_or_mismatched_addresses_are_errors() {
    let data = Dataset::clustered(500, 8, 4, 5);
    let ctx = context("addresses").await;
    let at = dir("a");
    let details = build(&ctx, &at, data.all_batches(), &params(4, Metric::L2)).await;
    let path = addresses_path(&at).unwrap();
    let good = ctx.store.get(&path).await.unwrap();

    ctx.store.delete(&path).await.unwrap();
    assert!(matches!(
        IvfFlatIndex.open(&ctx, &at, &details).await,
        Err(Error::NotFound { .. })
    ));
    ctx.store
        .put(&path, good.slice(..good.len() / 2))
        .await
        .unwrap();
    assert_corrupt(IvfFlatIndex.open(&ctx, &at, &details).await);

    // An addresses file of another segment with fewer rows.
    let other = dir("other");
    let small = Dataset::clustered(400, 8, 4, 5);
    build(&ctx, &other, small.all_batches(), &params(4, Metric::L2)).await;
    let fewer = ctx
        .store
        .get(&addresses_path(&other).unwrap())
        .await
        .unwrap();
    ctx.store.put(&path, fewer).await.unwrap();
    assert_corrupt(IvfFlatIndex.open(&ctx, &at, &details).await);
}
