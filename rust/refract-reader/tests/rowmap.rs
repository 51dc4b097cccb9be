//! Row-map chunk cache: cached (lazy and prewarmed) translation equals the
//! uncached reader and an in-test reference on a multi-chunk map with a short
//! final chunk, on memory and local-directory stores, for files written one
//! page per block and for files in the earlier layout (a few large pages,
//! counts buffer first); exact request counts cold and warm; deduplicated
//! concurrent loads.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt16Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use refract_core::cache::ByteWeightedCache;
use refract_core::{Error, RowAddress, MAX_TRANSLATION_BATCH};
use refract_optimize::fri::RowMapWriter;
use refract_reader::rowmap::{
    row_map_path, ChunkCacheMode, CountsMatrix, ResidentPartition, RouteBuffer, RowMapReader,
    RowMapSource, BLOCK_ROWS, COUNTS_BUFFER_KEY, LABEL_COLUMN, ROUTE_BATCH_ROWS,
};
use refract_table::io::lance_files::LanceFileWriter;
use refract_table::io::DatasetStore;
use refract_table::io::PageLayout;
use refract_table::testing::s3_test_location;
use roaring::RoaringBitmap;
use rstest::rstest;
use tempfile::TempDir;
use uuid::Uuid;

/// 750,000 + 750,000 + 600,000 rows: 33 blocks, so chunk 0 is full (32
/// blocks) and chunk 1 holds one short block of 2,848 rows.
const SOURCES: [(u64, u64); 3] = [(11, 750_000), (12, 750_000), (13, 600_000)];
const DESTINATIONS: [u64; 5] = [20, 21, 22, 23, 24];
const TOTAL: u64 = 2_100_000;

/// Label of global row `row`: `None` (deleted) for one row in eleven.
fn label(row: u64) -> Option<u16> {
    let h = row.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    (!h.is_multiple_of(11)).then_some((h % 5) as u16)
}

/// Where the row map lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Memory,
    /// A temporary directory through the local object store (4 KiB blocks).
    LocalDir,
    /// A fresh prefix on the test S3 server (`REFRACT_TEST_S3_ENDPOINT`,
    /// started by `ci/test.sh`; 64 KiB blocks).
    S3,
}

/// How the row map's pages are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// [`RowMapWriter`]: one page per block, counts after the pages.
    PagePerBlock,
    /// The earlier writer: `LanceFileWriter` fed 100,003-label pieces (a few
    /// large pages), counts buffer queued before any page was flushed.
    Legacy,
}

struct Fixture {
    store: DatasetStore,
    /// Keeps a local store's directory alive.
    _dir: Option<TempDir>,
    map_id: Uuid,
    size: u64,
    /// Expected translation per global row.
    expected: Vec<Option<u64>>,
    /// Source address per global row.
    addresses: Vec<u64>,
    destinations: Vec<(u64, u64)>,
}

async fn store_at(place: Place) -> (DatasetStore, Option<TempDir>) {
    match place {
        Place::S3 => {
            let (uri, options) = s3_test_location("rowmap").expect("checked by the caller");
            let store = DatasetStore::open_with_options(&uri, true, &options)
                .await
                .unwrap();
            (store, None)
        }
        Place::Memory => {
            let uri = format!("memory://rowmap-{}", Uuid::new_v4());
            (DatasetStore::open(&uri, true).await.unwrap(), None)
        }
        Place::LocalDir => {
            let dir = tempfile::tempdir().unwrap();
            let store = DatasetStore::open(dir.path().to_str().unwrap(), true)
                .await
                .unwrap();
            (store, Some(dir))
        }
    }
}

/// Labels per source, in source order.
fn source_labels() -> Vec<Vec<Option<u16>>> {
    let mut row = 0u64;
    SOURCES
        .iter()
        .map(|(_, rows)| {
            let labels = (row..row + rows).map(label).collect();
            row += rows;
            labels
        })
        .collect()
}

/// Writes the map with [`RowMapWriter`], in pieces that do not line up with
/// blocks; returns its size.
async fn write_page_per_block(store: &DatasetStore, map_id: &Uuid) -> u64 {
    let mut writer = RowMapWriter::create(store, map_id, DESTINATIONS.len() as u32)
        .await
        .unwrap();
    for labels in source_labels() {
        for piece in labels.chunks(100_003) {
            writer
                .push(UInt16Array::from(piece.to_vec()))
                .await
                .unwrap();
        }
    }
    let written = writer.finish().await.unwrap();
    assert_eq!(written.num_rows, TOTAL);
    written.size_bytes
}

/// Writes the map exactly as the earlier `RowMapWriter` did; returns its size.
async fn write_legacy(store: &DatasetStore, map_id: &Uuid) -> u64 {
    let schema = Arc::new(Schema::new(vec![Field::new(
        LABEL_COLUMN,
        DataType::UInt16,
        true,
    )]));
    let path = row_map_path(map_id);
    let mut writer = LanceFileWriter::create(store, &path, schema.clone(), PageLayout::default())
        .await
        .unwrap();
    let all: Vec<Option<u16>> = source_labels().concat();
    let histograms: Vec<Vec<u64>> = all
        .chunks(BLOCK_ROWS as usize)
        .map(|block| {
            let mut histogram = vec![0u64; DESTINATIONS.len()];
            for l in block.iter().flatten() {
                histogram[usize::from(*l)] += 1;
            }
            histogram
        })
        .collect();
    for labels in source_labels() {
        for piece in labels.chunks(100_003) {
            let column = Arc::new(UInt16Array::from(piece.to_vec()));
            let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
            writer.write(&batch).await.unwrap();
        }
    }
    let counts =
        CountsMatrix::from_histograms(TOTAL, DESTINATIONS.len() as u32, &histograms).unwrap();
    let buffer = writer
        .add_global_buffer(Bytes::from(counts.encode()))
        .unwrap();
    writer.add_schema_metadata(COUNTS_BUFFER_KEY, &buffer.to_string());
    writer.finish().await.unwrap().size_bytes
}

async fn fixture() -> Fixture {
    fixture_with(Place::Memory, Layout::PagePerBlock).await
}

async fn fixture_with(place: Place, layout: Layout) -> Fixture {
    let (store, dir) = store_at(place).await;
    let map_id = Uuid::new_v4();
    let size = match layout {
        Layout::PagePerBlock => write_page_per_block(&store, &map_id).await,
        Layout::Legacy => write_legacy(&store, &map_id).await,
    };
    let mut counts = [0u64; 5];
    let mut expected = Vec::with_capacity(TOTAL as usize);
    let mut addresses = Vec::with_capacity(TOTAL as usize);
    let mut row = 0u64;
    for (fragment, rows) in SOURCES {
        for offset in 0..rows {
            let l = label(row);
            addresses.push(RowAddress::new(fragment as u32, offset as u32).0);
            expected.push(l.map(|d| {
                let at = counts[usize::from(d)];
                counts[usize::from(d)] += 1;
                RowAddress::new(DESTINATIONS[usize::from(d)] as u32, at as u32).0
            }));
            row += 1;
        }
    }
    Fixture {
        store,
        _dir: dir,
        map_id,
        size,
        expected,
        addresses,
        destinations: DESTINATIONS.iter().copied().zip(counts).collect(),
    }
}

fn sources() -> Vec<RowMapSource> {
    SOURCES
        .iter()
        .map(|(fragment_id, physical_rows)| RowMapSource {
            fragment_id: *fragment_id,
            physical_rows: *physical_rows,
        })
        .collect()
}

async fn open(f: &Fixture, cache: &ByteWeightedCache, mode: ChunkCacheMode) -> RowMapReader {
    let sources = sources();
    RowMapReader::open(
        &f.store,
        &f.map_id,
        f.size,
        None,
        [7u8; 32],
        &sources,
        &f.destinations,
        cache,
        mode,
    )
    .await
    .unwrap()
}

async fn translate(reader: &RowMapReader, batch: &[u64]) -> Vec<Option<u64>> {
    let mut out = vec![Some(1)];
    reader.translate(batch, &mut out).await.unwrap();
    out
}

/// Point, shuffled batch with duplicates, and full sweep, all checked against
/// the reference.
async fn check_reader(f: &Fixture, reader: &RowMapReader) {
    let points = [
        0u64,
        65_535,
        65_536,
        749_999,
        750_000,
        2_097_151,
        2_097_152,
        TOTAL - 1,
    ];
    for row in points {
        let got = translate(reader, &[f.addresses[row as usize]]).await;
        assert_eq!(got, vec![f.expected[row as usize]], "row {row}");
    }
    let batch_rows: Vec<usize> = (0..20_000u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) % TOTAL) as usize)
        .chain([5, 5, 2_099_999, 5])
        .collect();
    let batch: Vec<u64> = batch_rows.iter().map(|r| f.addresses[*r]).collect();
    let want: Vec<Option<u64>> = batch_rows.iter().map(|r| f.expected[*r]).collect();
    assert_eq!(translate(reader, &batch).await, want);
    for (i, chunk) in f.addresses.chunks(MAX_TRANSLATION_BATCH).enumerate() {
        let start = i * MAX_TRANSLATION_BATCH;
        let want = &f.expected[start..start + chunk.len()];
        assert_eq!(translate(reader, chunk).await, want, "sweep batch {i}");
    }
    check_ordered_batches(f, reader).await;
}

/// Ascending (sparse, dense, with duplicates), descending and interleaved
/// batches across block (65,536), source (750,000) and chunk (2,097,152)
/// boundaries, each equal to the reference.
async fn check_ordered_batches(f: &Fixture, reader: &RowMapReader) {
    let ascending: Vec<usize> = (0..TOTAL as usize).step_by(37).collect();
    let dense: Vec<usize> = (65_000..67_000)
        .chain(749_000..751_000)
        .chain(2_096_000..2_099_000)
        .collect();
    let duplicates: Vec<usize> = [0usize, 0, 1, 65_535, 65_535, 65_536, 65_536, 749_999]
        .into_iter()
        .chain([750_000, 750_000, 2_097_151, 2_097_152, 2_097_152, 2_099_999])
        .collect();
    let descending: Vec<usize> = dense.iter().rev().copied().collect();
    // Two ascending runs: a restart inside a block the walk has passed.
    let restarted: Vec<usize> = (65_536..70_000)
        .step_by(3)
        .chain((65_536..70_000).step_by(5))
        .collect();
    let cases = [
        ("ascending", ascending),
        ("dense", dense),
        ("duplicates", duplicates),
        ("descending", descending),
        ("restarted", restarted),
    ];
    for (name, rows) in cases {
        for (i, rows) in rows.chunks(MAX_TRANSLATION_BATCH).enumerate() {
            let batch: Vec<u64> = rows.iter().map(|r| f.addresses[*r]).collect();
            let want: Vec<Option<u64>> = rows.iter().map(|r| f.expected[*r]).collect();
            assert_eq!(translate(reader, &batch).await, want, "{name} batch {i}");
        }
    }
}

#[rstest]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_translates_like_the_reference(
    #[values(
        ChunkCacheMode::Disabled,
        ChunkCacheMode::Lazy,
        ChunkCacheMode::Prewarm
    )]
    mode: ChunkCacheMode,
    #[values(Place::Memory, Place::LocalDir)] place: Place,
    #[values(Layout::PagePerBlock, Layout::Legacy)] layout: Layout,
) {
    let f = fixture_with(place, layout).await;
    let cache = ByteWeightedCache::new(256 << 20);
    let reader = open(&f, &cache, mode).await;
    assert_eq!(reader.num_chunks(), 2);
    assert_eq!(reader.counts().num_blocks(), 33);
    check_reader(&f, &reader).await;
    let cached = cache.entry_count().await;
    match mode {
        ChunkCacheMode::Disabled => assert_eq!(cached, 0),
        _ => assert_eq!(cached, 2),
    }
}

/// The resident form of the fixture's map, opened in `mode`.
async fn resident_of(f: &Fixture, mode: ChunkCacheMode) -> ResidentPartition {
    let cache = ByteWeightedCache::new(256 << 20);
    Arc::new(open(f, &cache, mode).await)
        .resident()
        .await
        .unwrap()
}

/// The resident form resolves runs like the reference: a sweep of every row
/// (gathers that cross 65,536-row units, sources and the 2,097,152-row
/// chunk), a strided run, and short descending and chunk-straddling runs.
#[rstest]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resident_runs_translate_like_the_reference(
    #[values(ChunkCacheMode::Disabled, ChunkCacheMode::Lazy)] mode: ChunkCacheMode,
) {
    let f = fixture().await;
    let resident = resident_of(&f, mode).await;
    let runs: Vec<Vec<usize>> = vec![
        (0..TOTAL as usize).collect(),
        (0..TOTAL as usize).step_by(37).collect(),
        (65_500..65_600).rev().collect(),
        (2_097_100..2_097_200).collect(),
    ];
    for (i, rows) in runs.iter().enumerate() {
        let mut got = Vec::with_capacity(rows.len());
        resident
            .translate_run(rows.iter().map(|r| f.addresses[*r]), |result| {
                got.push(result);
                Ok(())
            })
            .unwrap();
        let want: Vec<Option<u64>> = rows.iter().map(|r| f.expected[*r]).collect();
        assert_eq!(got, want, "run {i}");
    }
}

/// `route_part` hands every surviving row of a part to its destination
/// exactly as the reference translates it, grouped by destination: each
/// destination's offsets ascend across all its groups, and no group is larger
/// than the buffer. Parts cross block (65,536-row) and chunk (2,097,152-row)
/// boundaries; one buffer serves them all.
#[rstest]
#[tokio::test]
async fn resident_parts_route_like_the_reference(
    #[values(ChunkCacheMode::Disabled, ChunkCacheMode::Lazy)] mode: ChunkCacheMode,
) {
    let f = fixture().await;
    let resident = resident_of(&f, mode).await;
    let mut buffer = RouteBuffer::default();
    let mut first_row = 0u64;
    for (source, rows) in SOURCES {
        let rows32 = rows as u32;
        let parts: Vec<RoaringBitmap> = vec![
            (0..rows32).collect(),
            (0..rows32).step_by(37).collect(),
            (65_000..66_000).collect(),
            [0, rows32 - 1].into_iter().collect(),
            RoaringBitmap::new(),
        ];
        for part in parts {
            let mut routed: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            resident
                .route_part(source as u32, &part, &mut buffer, |fragment, lows| {
                    assert!(!lows.is_empty() && lows.len() <= ROUTE_BATCH_ROWS);
                    routed.entry(fragment).or_default().extend_from_slice(lows);
                    Ok(())
                })
                .unwrap();
            let mut want: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            for offset in &part {
                if let Some(new) = f.expected[(first_row + u64::from(offset)) as usize] {
                    let new = RowAddress(new);
                    want.entry(new.fragment_id())
                        .or_default()
                        .push(new.offset());
                }
            }
            assert_eq!(routed, want, "source {source} part {part:?}");
        }
        first_row += rows;
    }
    // The chunk boundary: global row 2,097,152 is offset 597,152 of source 13.
    let part: RoaringBitmap = (597_000..597_300).collect();
    let mut routed = 0;
    resident
        .route_part(13, &part, &mut buffer, |_, lows| {
            routed += lows.len();
            Ok(())
        })
        .unwrap();
    let live = part
        .iter()
        .filter(|o| f.expected[(1_500_000 + u64::from(*o)) as usize].is_some())
        .count();
    assert_eq!(routed, live);
    // An offset past the source's rows, and a fragment that is no source.
    for (fragment, part) in [
        (13u32, RoaringBitmap::from_iter([0u32, 600_000])),
        (14, RoaringBitmap::from_iter([0u32])),
    ] {
        let err = resident
            .route_part(fragment, &part, &mut buffer, |_, _| Ok(()))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }
}

/// `_fri` requests since the last reset.
fn fri_requests(f: &Fixture) -> u64 {
    f.store.stats().requests_under("_fri")
}

/// Exact `_fri` requests: opening costs one tail read (plus one for a counts
/// buffer written before the pages), each chunk load one ranged GET, a warm
/// query none; without the cache every touched block costs one GET.
#[rstest]
#[case::memory_page_per_block(Place::Memory, Layout::PagePerBlock, 1)]
#[case::local_page_per_block(Place::LocalDir, Layout::PagePerBlock, 1)]
#[case::memory_legacy(Place::Memory, Layout::Legacy, 2)]
#[case::local_legacy(Place::LocalDir, Layout::Legacy, 2)]
#[case::s3_page_per_block(Place::S3, Layout::PagePerBlock, 1)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_counts_cold_warm_and_prewarmed(
    #[case] place: Place,
    #[case] layout: Layout,
    #[case] opening: u64,
) {
    if place == Place::S3 && s3_test_location("request counts on S3").is_none() {
        return;
    }
    let f = fixture_with(place, layout).await;
    let lazy_cache = ByteWeightedCache::new(256 << 20);
    f.store.reset_stats();
    let lazy = open(&f, &lazy_cache, ChunkCacheMode::Lazy).await;
    assert_eq!(fri_requests(&f), opening, "opening");
    assert_eq!(f.store.stats().heads, 0, "the recorded size saves a HEAD");
    assert_eq!(lazy_cache.entry_count().await, 0, "opening reads no labels");
    f.store.reset_stats();
    translate(&lazy, &[f.addresses[2_099_000]]).await; // chunk 1: one short block
    assert_eq!(fri_requests(&f), 1, "cold short chunk");
    f.store.reset_stats();
    translate(&lazy, &[f.addresses[5]]).await; // chunk 0, a full one
    assert_eq!(fri_requests(&f), 1, "cold full chunk");
    f.store.reset_stats();
    translate(&lazy, &[f.addresses[2_098_000], f.addresses[2_099_999]]).await;
    translate(&lazy, &[f.addresses[6], f.addresses[2_000_000]]).await;
    assert_eq!(fri_requests(&f), 0, "warm");

    let prewarm_cache = ByteWeightedCache::new(256 << 20);
    f.store.reset_stats();
    let prewarmed = open(&f, &prewarm_cache, ChunkCacheMode::Prewarm).await;
    assert_eq!(prewarm_cache.entry_count().await, 2);
    assert_eq!(fri_requests(&f), opening + 2, "opening + one GET per chunk");
    f.store.reset_stats();
    check_reader(&f, &prewarmed).await;
    assert_eq!(fri_requests(&f), 0, "prewarmed");

    // Without the cache each query reads the blocks it touches again, one
    // GET per block.
    let none = open(
        &f,
        &ByteWeightedCache::new(256 << 20),
        ChunkCacheMode::Disabled,
    )
    .await;
    f.store.reset_stats();
    translate(
        &none,
        &[f.addresses[10], f.addresses[70_000], f.addresses[11]],
    )
    .await;
    assert_eq!(fri_requests(&f), 2, "two blocks");
    f.store.reset_stats();
    translate(&none, &[f.addresses[10]]).await;
    assert_eq!(fri_requests(&f), 1, "a block again");
}

/// One page per block: a chunk load fetches exactly its pages, so the short
/// final chunk (one block of 2,848 labels) reads far less than a full one,
/// and a single block less than its chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_and_block_reads_fetch_only_their_pages() {
    let f = fixture_with(Place::LocalDir, Layout::PagePerBlock).await;
    let cache = ByteWeightedCache::new(256 << 20);
    let lazy = open(&f, &cache, ChunkCacheMode::Lazy).await;
    let bytes = |f: &Fixture| f.store.stats().bytes_read;
    f.store.reset_stats();
    translate(&lazy, &[f.addresses[5]]).await;
    let full_chunk = bytes(&f);
    f.store.reset_stats();
    translate(&lazy, &[f.addresses[2_099_000]]).await;
    let short_chunk = bytes(&f);
    let none = open(&f, &cache, ChunkCacheMode::Disabled).await;
    f.store.reset_stats();
    translate(&none, &[f.addresses[5]]).await;
    let block = bytes(&f);
    assert!(
        short_chunk * 10 < block && block * 10 < full_chunk,
        "short chunk {short_chunk}, block {block}, full chunk {full_chunk}"
    );
    assert!(full_chunk < f.size, "{full_chunk} of {}", f.size);
}

/// Sources of [`metadata_beyond_the_largest_tail_costs_one_more_request`]:
/// 4.4M rows, 68 blocks.
const BIG_SOURCES: [(u64, u64); 3] = [(11, 1_500_000), (12, 1_500_000), (13, 1_400_000)];

/// A counts matrix larger than the largest opening tail read (65,535
/// destinations × 68 blocks × 4 bytes ≈ 17.8 MB > 16 MiB): opening costs
/// exactly one more ranged GET, for everything before the tail, and
/// translation still matches the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_beyond_the_largest_tail_costs_one_more_request() {
    let (store, _dir) = store_at(Place::LocalDir).await;
    let map_id = Uuid::new_v4();
    let width = u32::from(u16::MAX);
    let mut writer = RowMapWriter::create(&store, &map_id, width).await.unwrap();
    let total: u64 = BIG_SOURCES.iter().map(|(_, rows)| rows).sum();
    let labels: Vec<Option<u16>> = (0..total).map(label).collect();
    for piece in labels.chunks(100_003) {
        writer
            .push(UInt16Array::from(piece.to_vec()))
            .await
            .unwrap();
    }
    let written = writer.finish().await.unwrap();
    let destinations: Vec<(u64, u64)> = written
        .destination_rows
        .iter()
        .enumerate()
        .map(|(d, rows)| (100 + d as u64, *rows))
        .collect();
    let cache = ByteWeightedCache::new(256 << 20);
    store.reset_stats();
    let reader = RowMapReader::open(
        &store,
        &map_id,
        written.size_bytes,
        Some(&written.checksum),
        [9u8; 32],
        &BIG_SOURCES
            .iter()
            .map(|(fragment_id, physical_rows)| RowMapSource {
                fragment_id: *fragment_id,
                physical_rows: *physical_rows,
            })
            .collect::<Vec<_>>(),
        &destinations,
        &cache,
        ChunkCacheMode::Lazy,
    )
    .await
    .unwrap();
    assert_eq!(store.stats().requests_under("_fri"), 2, "tail + the rest");
    let mut seen = vec![0u64; destinations.len()];
    let mut expected = Vec::with_capacity(labels.len());
    for l in &labels {
        expected.push(l.map(|d| {
            let at = seen[usize::from(d)];
            seen[usize::from(d)] += 1;
            RowAddress::new(100 + u32::from(d), at as u32).0
        }));
    }
    let global = |row: usize| {
        let mut rest = row as u64;
        for (fragment, rows) in BIG_SOURCES {
            if rest < rows {
                return RowAddress::new(fragment as u32, rest as u32).0;
            }
            rest -= rows;
        }
        unreachable!("row {row} is beyond the sources")
    };
    store.reset_stats();
    for row in [0usize, 65_536, 1_500_000, 4_399_999] {
        let got = translate(&reader, &[global(row)]).await;
        assert_eq!(got, vec![expected[row]], "row {row}");
    }
    // Rows 0 to 1,500,000 lie in chunk 0 and row 4,399,999 in chunk 2: one
    // GET each, nothing more (the open read only the file's metadata).
    assert_eq!(
        store.stats().requests_under("_fri"),
        2,
        "one GET per chunk not yet read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_loads_of_a_chunk_run_once() {
    let f = Arc::new(fixture().await);
    let cache = ByteWeightedCache::new(256 << 20);
    let reader = Arc::new(open(&f, &cache, ChunkCacheMode::Lazy).await);
    let loads = cache.stats().loads;
    let mut tasks = Vec::new();
    for i in 0..8usize {
        let reader = reader.clone();
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let row = 100 + i * 1_000;
            let got = translate(&reader, &[f.addresses[row]]).await;
            assert_eq!(got, vec![f.expected[row]]);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(cache.stats().loads - loads, 1);
}

#[tokio::test]
async fn bad_requests_are_rejected() {
    let f = fixture().await;
    let reader = open(&f, &ByteWeightedCache::new(64 << 20), ChunkCacheMode::Lazy).await;
    let mut out = Vec::new();
    for address in [RowAddress::new(99, 0).0, RowAddress::new(13, 600_000).0] {
        let err = reader.translate(&[address], &mut out).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }
    let too_many = vec![f.addresses[0]; MAX_TRANSLATION_BATCH + 1];
    let err = reader.translate(&too_many, &mut out).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

#[tokio::test]
async fn counts_that_disagree_with_the_transition_are_corrupt() {
    let f = fixture().await;
    let sources = [RowMapSource {
        fragment_id: 11,
        physical_rows: TOTAL,
    }];
    let mut wrong = f.destinations.clone();
    wrong[0].1 += 1;
    let cache = ByteWeightedCache::new(1 << 20);
    let err = RowMapReader::open(
        &f.store,
        &f.map_id,
        f.size,
        None,
        [1; 32],
        &sources,
        &wrong,
        &cache,
        ChunkCacheMode::Lazy,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    let missing = RowMapReader::open(
        &f.store,
        &Uuid::new_v4(),
        f.size,
        None,
        [1; 32],
        &sources,
        &f.destinations,
        &cache,
        ChunkCacheMode::Lazy,
    )
    .await
    .unwrap_err();
    assert!(matches!(missing, Error::NotFound { .. }), "{missing}");
}
