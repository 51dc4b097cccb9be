//! Hostile row maps: real Lance files whose counts buffer (or the schema
//! metadata naming it, or the label column) lies. Opening or translating must
//! fail with a clear error — never return a wrong address, never panic, never
//! allocate from an unchecked size. Each case writes its own file with
//! `LanceFileWriter`, exactly as `RowMapWriter` does, except for the lie.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, RecordBatch, UInt16Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use refract_core::cache::ByteWeightedCache;
use refract_core::{Error, RowAddress};
use refract_reader::rowmap::{
    row_map_path, ChunkCacheMode, CountsMatrix, RowMapReader, RowMapSource, BLOCK_ROWS,
    COUNTS_BUFFER_KEY, LABEL_COLUMN,
};
use refract_table::io::lance_files::LanceFileWriter;
use refract_table::io::DatasetStore;
use refract_table::io::PageLayout;
use rstest::rstest;
use uuid::Uuid;

/// Two sources: 40,000 + 30,000 rows, so two blocks (65,536 + 4,464 rows).
const SOURCES: [(u64, u64); 2] = [(3, 40_000), (4, 30_000)];
const ROWS: u64 = 70_000;
/// Two destinations.
const DESTINATIONS: [u64; 2] = [10, 11];
/// Header bytes of an encoded counts matrix, Lance's layout (magic, version,
/// representation, destinations, block rows, rows).
const HEADER_BYTES: usize = 4 + 4 + 4 + 4 + 4 + 8;

/// Label of global row `row`: deleted for one row in nine, else `row % 3 == 0`
/// → destination 1.
fn label(row: u64) -> Option<u16> {
    (row % 9 != 8).then_some(u16::from(row.is_multiple_of(3)))
}

fn labels() -> Vec<Option<u16>> {
    (0..ROWS).map(label).collect()
}

/// The honest counts of `labels` with `destinations` destinations.
fn honest_counts(labels: &[Option<u16>], destinations: u32) -> CountsMatrix {
    let histograms: Vec<Vec<u64>> = labels
        .chunks(BLOCK_ROWS as usize)
        .map(|block| {
            let mut histogram = vec![0u64; destinations as usize];
            for l in block.iter().flatten() {
                histogram[usize::from(*l)] += 1;
            }
            histogram
        })
        .collect();
    CountsMatrix::from_histograms(labels.len() as u64, destinations, &histograms).unwrap()
}

fn destination_rows(labels: &[Option<u16>]) -> Vec<(u64, u64)> {
    DESTINATIONS
        .iter()
        .enumerate()
        .map(|(d, id)| {
            let rows = labels.iter().filter(|l| **l == Some(d as u16)).count();
            (*id, rows as u64)
        })
        .collect()
}

/// How the file lies.
#[derive(Debug, Clone)]
enum Lie {
    /// Nothing: an honest row map (the control).
    None,
    /// The counts buffer bytes are replaced by these.
    Counts(Vec<u8>),
    /// The schema metadata names this (instead of the counts buffer's index).
    BufferName(String),
    /// No schema metadata naming the counts buffer.
    NoBufferName,
    /// The label column is Int32.
    LabelType,
}

async fn store() -> DatasetStore {
    DatasetStore::open(&format!("memory://hostile-rowmap-{}", Uuid::new_v4()), true)
        .await
        .unwrap()
}

/// Writes the row map of `map_id` with `labels` and `lie`; returns its size.
async fn write(store: &DatasetStore, map_id: &Uuid, labels: &[Option<u16>], lie: &Lie) -> u64 {
    let data_type = match lie {
        Lie::LabelType => DataType::Int32,
        _ => DataType::UInt16,
    };
    let schema = Arc::new(Schema::new(vec![Field::new(LABEL_COLUMN, data_type, true)]));
    let mut writer = LanceFileWriter::create(
        store,
        &row_map_path(map_id),
        schema.clone(),
        PageLayout::default(),
    )
    .await
    .unwrap();
    for piece in labels.chunks(20_000) {
        let column: ArrayRef = match lie {
            Lie::LabelType => Arc::new(Int32Array::from(
                piece.iter().map(|l| l.map(i32::from)).collect::<Vec<_>>(),
            )),
            _ => Arc::new(UInt16Array::from(piece.to_vec())),
        };
        let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
        writer.write(&batch).await.unwrap();
    }
    let counts = match lie {
        Lie::Counts(bytes) => bytes.clone(),
        _ => honest_counts(labels, DESTINATIONS.len() as u32).encode(),
    };
    let buffer = writer.add_global_buffer(Bytes::from(counts)).unwrap();
    match lie {
        Lie::BufferName(name) => writer.add_schema_metadata(COUNTS_BUFFER_KEY, name),
        Lie::NoBufferName => {}
        _ => writer.add_schema_metadata(COUNTS_BUFFER_KEY, &buffer.to_string()),
    }
    writer.finish().await.unwrap().size_bytes
}

async fn open(
    store: &DatasetStore,
    map_id: &Uuid,
    size: u64,
    sources: &[(u64, u64)],
    destinations: &[(u64, u64)],
) -> refract_core::Result<RowMapReader> {
    let sources: Vec<RowMapSource> = sources
        .iter()
        .map(|(fragment_id, physical_rows)| RowMapSource {
            fragment_id: *fragment_id,
            physical_rows: *physical_rows,
        })
        .collect();
    RowMapReader::open(
        store,
        map_id,
        size,
        None,
        [9; 32],
        &sources,
        destinations,
        &ByteWeightedCache::new(64 << 20),
        ChunkCacheMode::Lazy,
    )
    .await
}

/// Source address of global row `row`.
fn address(row: u64) -> u64 {
    let (fragment, offset) = if row < SOURCES[0].1 {
        (SOURCES[0].0, row)
    } else {
        (SOURCES[1].0, row - SOURCES[0].1)
    };
    RowAddress::new(fragment as u32, offset as u32).0
}

/// Expected destination address of every row, by ranking labels.
fn expected(labels: &[Option<u16>]) -> Vec<Option<u64>> {
    let mut next = [0u64; 2];
    labels
        .iter()
        .map(|l| {
            l.map(|d| {
                let d = usize::from(d);
                let at = next[d];
                next[d] += 1;
                RowAddress::new(DESTINATIONS[d] as u32, at as u32).0
            })
        })
        .collect()
}

/// Row `row` of block 0 and one of block 1, probed on their own.
const PROBES: [u64; 4] = [0, 65_535, 65_536, ROWS - 1];

/// Counts bytes of the honest matrix with `before(b, d)` (rows of
/// destination `d` in blocks before `b`, `b >= 1`) set to `value`. Lance
/// stores the counts through the end of each block: cell `(b - 1, d)`.
fn with_cell(b: usize, d: usize, value: u64) -> Vec<u8> {
    let mut bytes = honest_counts(&labels(), 2).encode();
    let at = HEADER_BYTES + ((b - 1) * 2 + d) * 4;
    let value = u32::try_from(value).unwrap();
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    bytes
}

/// Counts with header fields (little-endian bytes at byte offsets) replaced.
fn with_header(fields: &[(usize, Vec<u8>)]) -> Vec<u8> {
    let mut bytes = honest_counts(&labels(), 2).encode();
    for (at, value) in fields {
        bytes[*at..*at + value.len()].copy_from_slice(value);
    }
    bytes
}

/// Byte offsets of the block size (u32) and the row count (u64) in the header.
const BLOCK_ROWS_AT: usize = 16;
const NUM_ROWS_AT: usize = 20;

fn le64(value: u64) -> Vec<u8> {
    value.to_le_bytes().to_vec()
}

#[tokio::test]
async fn an_honest_row_map_translates_exactly() {
    let store = store().await;
    let map_id = Uuid::new_v4();
    let labels = labels();
    let size = write(&store, &map_id, &labels, &Lie::None).await;
    let reader = open(&store, &map_id, size, &SOURCES, &destination_rows(&labels))
        .await
        .unwrap();
    let want = expected(&labels);
    let mut out = Vec::new();
    for row in PROBES {
        reader.translate(&[address(row)], &mut out).await.unwrap();
        assert_eq!(out, vec![want[row as usize]], "row {row}");
    }
}

/// The counts move rows between blocks but keep every total: the open
/// succeeds (totals agree), and translating a row of either block must fail
/// as Corrupt rather than return an address shifted by the lie.
#[rstest]
#[case::block_one_claims_more_of_destination_zero(1, 0, -5)]
#[case::block_one_claims_fewer_of_destination_zero(1, 0, 5)]
#[case::block_one_claims_more_of_destination_one(1, 1, -1)]
#[tokio::test]
async fn per_block_counts_that_lie_are_corrupt_at_translation(
    #[case] block: usize,
    #[case] destination: usize,
    #[case] shift: i64,
) {
    let labels = labels();
    let honest = honest_counts(&labels, 2);
    let cell = honest.before(block as u64, destination as u16).unwrap();
    let lying = with_cell(block, destination, cell.checked_add_signed(shift).unwrap());
    let store = store().await;
    let map_id = Uuid::new_v4();
    let size = write(&store, &map_id, &labels, &Lie::Counts(lying)).await;
    let reader = open(&store, &map_id, size, &SOURCES, &destination_rows(&labels))
        .await
        .expect("totals and sizes agree, so the open succeeds");
    let mut out = Vec::new();
    for row in PROBES {
        let err = reader
            .translate(&[address(row)], &mut out)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "row {row}: {err}");
    }
}

/// Lies caught when opening: each must be a Corrupt error (Lance's codec
/// treats an unknown version or representation as damage too), before any
/// label is read.
#[rstest]
#[case::more_rows_than_the_file(Lie::Counts(with_header(&[(NUM_ROWS_AT, le64(ROWS + 1))])), 1, "Corrupt")]
#[case::fewer_rows_than_the_file(Lie::Counts(with_header(&[(NUM_ROWS_AT, le64(ROWS - 1))])), -1, "Corrupt")]
#[case::huge_row_count(Lie::Counts(with_header(&[(NUM_ROWS_AT, le64(1 << 40))])), 0, "Corrupt")]
#[case::max_row_count(Lie::Counts(with_header(&[(NUM_ROWS_AT, le64(u64::MAX))])), 0, "Corrupt")]
#[case::other_block_size(
    Lie::Counts(with_header(&[(BLOCK_ROWS_AT, 35_000u32.to_le_bytes().to_vec())])),
    0,
    "Corrupt"
)]
#[case::zero_block_size(
    Lie::Counts(with_header(&[(BLOCK_ROWS_AT, 0u32.to_le_bytes().to_vec())])),
    0,
    "Corrupt"
)]
#[case::totals_above_the_destinations(Lie::Counts(with_cell(2, 0, 1 << 20)), 0, "Corrupt")]
#[case::decreasing(Lie::Counts(with_cell(1, 1, 0)), 0, "Corrupt")]
#[case::truncated_buffer(Lie::Counts(honest_counts(&labels(), 2).encode()[..40].to_vec()), 0, "Corrupt")]
#[case::empty_buffer(Lie::Counts(Vec::new()), 0, "Corrupt")]
#[case::not_a_counts_buffer(Lie::Counts(b"not the counts you are looking for".to_vec()), 0, "Corrupt")]
#[case::unknown_version(Lie::Counts({ let mut b = honest_counts(&labels(), 2).encode(); b[4] = 2; b }), 0, "Corrupt")]
#[case::unknown_representation(Lie::Counts({ let mut b = honest_counts(&labels(), 2).encode(); b[8] = 1; b }), 0, "Corrupt")]
#[case::names_a_missing_buffer(Lie::BufferName("7".to_string()), 0, "Corrupt")]
#[case::names_lance_schema_buffer(Lie::BufferName("0".to_string()), 0, "Corrupt")]
#[case::names_no_number(Lie::BufferName("counts".to_string()), 0, "Corrupt")]
#[case::names_nothing(Lie::NoBufferName, 0, "Corrupt")]
#[case::labels_not_uint16(Lie::LabelType, 0, "Corrupt")]
#[tokio::test]
async fn lies_caught_at_open(#[case] lie: Lie, #[case] source_shift: i64, #[case] kind: &str) {
    let labels = labels();
    let store = store().await;
    let map_id = Uuid::new_v4();
    let size = write(&store, &map_id, &labels, &lie).await;
    // The transition agrees with the lie where it can (so only the file's
    // own inconsistency is left to catch).
    let mut sources = SOURCES.to_vec();
    sources[1].1 = sources[1].1.checked_add_signed(source_shift).unwrap();
    store.reset_stats();
    let err = open(&store, &map_id, size, &sources, &destination_rows(&labels))
        .await
        .unwrap_err();
    let got = match err {
        Error::Corrupt { .. } => "Corrupt",
        Error::NotSupported { .. } => "NotSupported",
        _ => "other",
    };
    assert_eq!(got, kind, "{lie:?}: {err}");
    // The file is smaller than the opening tail read: one GET, no labels
    // read separately.
    assert_eq!(
        store.stats().requests_under("_fri"),
        1,
        "{lie:?}: opening read labels: {:?}",
        store.stats()
    );
}

/// Labels that name a destination the counts do not have (the counts are
/// honest about the other labels): translation is Corrupt.
#[tokio::test]
async fn labels_beyond_the_destinations_are_corrupt_at_translation() {
    let mut labels = labels();
    // Row 5 claims destination 7; the counts (built without it) still agree
    // with the transition.
    let counts = honest_counts(&labels, 2).encode();
    labels[5] = Some(7);
    let store = store().await;
    let map_id = Uuid::new_v4();
    let size = write(&store, &map_id, &labels, &Lie::Counts(counts)).await;
    let mut honest_labels = labels.clone();
    honest_labels[5] = label(5);
    let reader = open(
        &store,
        &map_id,
        size,
        &SOURCES,
        &destination_rows(&honest_labels),
    )
    .await
    .unwrap();
    // Both blocks share one cached chunk, which is refused as a whole.
    let mut out = Vec::new();
    for row in [6, ROWS - 1] {
        let err = reader
            .translate(&[address(row)], &mut out)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "row {row}: {err}");
    }
}
