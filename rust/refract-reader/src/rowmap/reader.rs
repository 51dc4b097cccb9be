//! Reading a row map: translate source row addresses to destination addresses,
//! loading label chunks lazily through the session's shared cache.

use std::sync::Arc;

use arrow_array::{Array, UInt16Array};
use futures::{StreamExt, TryStreamExt};
use refract_core::cache::{ByteWeightedCache, CacheKey, CacheNamespace, KeyParts};
use refract_core::{Error, Result, RowAddress};
use refract_table::io::lance_files::LanceFileReader;
use refract_table::io::store::DatasetStore;
use uuid::Uuid;

use super::counts::CountsMatrix;
use super::labels::LabelChunk;
use super::{row_map_path, COUNTS_BUFFER_KEY, LABEL_COLUMN};

/// Blocks per cached chunk (32 × 65,536 labels ≈ 4 MiB decoded).
pub const BLOCKS_PER_CHUNK: u64 = 32;

/// How label chunks are cached, normally taken from the environment
/// (`REFRACT_FRI_ROWMAP_CACHE=0` disables the cache, `REFRACT_FRI_ROWMAP_PREWARM=1`
/// loads every chunk at open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkCacheMode {
    /// Read the needed block on every translation.
    Disabled,
    /// Load chunks on first use and keep them in the shared cache.
    Lazy,
    /// Load every chunk concurrently at open.
    Prewarm,
}

impl ChunkCacheMode {
    /// The mode the diagnostic environment variables ask for.
    pub fn from_env() -> Self {
        let flag = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_string());
        if flag("REFRACT_FRI_ROWMAP_CACHE").as_deref() == Some("0") {
            ChunkCacheMode::Disabled
        } else if flag("REFRACT_FRI_ROWMAP_PREWARM").as_deref() == Some("1") {
            ChunkCacheMode::Prewarm
        } else {
            ChunkCacheMode::Lazy
        }
    }
}

/// A source fragment of the partition, in transition order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowMapSource {
    /// Fragment id.
    pub fragment_id: u64,
    /// Physical rows.
    pub physical_rows: u64,
}

/// An opened, validated row map. Opening reads the counts only; labels are read
/// when translation reaches them.
pub struct RowMapReader {
    file: LanceFileReader,
    counts: CountsMatrix,
    fingerprint: [u8; 32],
    /// (fragment id, first global row), sorted by fragment id for lookup.
    source_starts: Vec<(u64, u64, u64)>,
    destinations: Vec<u64>,
    cache: Option<ByteWeightedCache>,
}

impl std::fmt::Debug for RowMapReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowMapReader")
            .field("rows", &self.counts.num_rows())
            .field("destinations", &self.destinations)
            .finish()
    }
}

impl RowMapReader {
    /// Opens the row map of `map_id` for a transition from `sources` to
    /// `destinations` (fragment id, physical rows), validating the counts against
    /// both. `fingerprint` identifies the transition in cache keys.
    pub async fn open(
        store: &DatasetStore,
        map_id: &Uuid,
        fingerprint: [u8; 32],
        sources: &[RowMapSource],
        destinations: &[(u64, u64)],
        cache: &ByteWeightedCache,
        mode: ChunkCacheMode,
    ) -> Result<Self> {
        let file = LanceFileReader::open(store, &row_map_path(map_id)?, None).await?;
        let counts = read_counts(&file).await?;
        let source_rows = sources.iter().try_fold(0u64, |total, source| {
            total
                .checked_add(source.physical_rows)
                .ok_or_else(|| Error::corrupt("row map", "source rows overflow"))
        })?;
        let destination_rows: Vec<u64> = destinations.iter().map(|(_, rows)| *rows).collect();
        counts.check_against(source_rows, &destination_rows)?;
        if file.num_rows() != counts.num_rows() {
            return Err(Error::corrupt(
                "row map",
                format!("file holds {} labels, counts say {}", file.num_rows(), counts.num_rows()),
            ));
        }
        let mut source_starts = Vec::with_capacity(sources.len());
        let mut start = 0u64;
        for source in sources {
            source_starts.push((source.fragment_id, start, source.physical_rows));
            start += source.physical_rows;
        }
        source_starts.sort_unstable();
        let reader = Self {
            file,
            counts,
            fingerprint,
            source_starts,
            destinations: destinations.iter().map(|(id, _)| *id).collect(),
            cache: (mode != ChunkCacheMode::Disabled).then(|| cache.clone()),
        };
        if mode == ChunkCacheMode::Prewarm {
            reader.prewarm().await?;
        }
        Ok(reader)
    }

    /// The validated counts.
    pub fn counts(&self) -> &CountsMatrix {
        &self.counts
    }

    /// Number of label chunks.
    pub fn num_chunks(&self) -> u64 {
        self.counts.num_blocks().div_ceil(BLOCKS_PER_CHUNK)
    }

    /// Loads every chunk into the cache, concurrently.
    pub async fn prewarm(&self) -> Result<()> {
        futures::stream::iter(0..self.num_chunks())
            .map(|chunk| self.chunk(chunk))
            .buffer_unordered(8)
            .try_for_each(|_| async { Ok(()) })
            .await
    }

    /// Translates source addresses to destination addresses (`None` = deleted),
    /// keeping input order and duplicates. An address outside the sources is
    /// `InvalidInput`.
    pub async fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        out.clear();
        out.reserve(batch.len());
        // Consecutive addresses usually share a chunk; keep the last one loaded.
        let mut loaded: Option<(u64, Arc<LabelChunk>)> = None;
        for &address in batch {
            let row = self.global_row(address)?;
            let (chunk_index, position) = self.locate(row);
            let chunk = match &loaded {
                Some((index, chunk)) if *index == chunk_index => chunk.clone(),
                _ => {
                    let chunk = self.chunk(chunk_index).await?;
                    loaded = Some((chunk_index, chunk.clone()));
                    chunk
                }
            };
            out.push(self.destination(&chunk, row, position)?);
        }
        Ok(())
    }

    fn global_row(&self, address: u64) -> Result<u64> {
        let address = RowAddress::from(address);
        let fragment = u64::from(address.fragment_id());
        let offset = u64::from(address.offset());
        let slot = self
            .source_starts
            .binary_search_by_key(&fragment, |(id, _, _)| *id)
            .map_err(|_| Error::invalid_input(format!("address {address} is not in a source of this row map")))?;
        let (_, start, rows) = self.source_starts[slot];
        if offset >= rows {
            return Err(Error::invalid_input(format!(
                "address {address} is beyond the source's {rows} rows"
            )));
        }
        Ok(start + offset)
    }

    fn locate(&self, row: u64) -> (u64, usize) {
        let chunk_rows = BLOCKS_PER_CHUNK * u64::from(self.counts.block_rows());
        (row / chunk_rows, (row % chunk_rows) as usize)
    }

    fn destination(&self, chunk: &LabelChunk, row: u64, position: usize) -> Result<Option<u64>> {
        let Some((label, rank)) = chunk.label_and_rank(position) else {
            return Ok(None);
        };
        let block = row / u64::from(self.counts.block_rows());
        let before = self
            .counts
            .before(block, label)
            .ok_or_else(|| Error::corrupt("row map", format!("label {label} has no destination")))?;
        let fragment = *self
            .destinations
            .get(usize::from(label))
            .ok_or_else(|| Error::corrupt("row map", format!("label {label} has no destination")))?;
        let offset = u32::try_from(before + rank)
            .map_err(|_| Error::corrupt("row map", "destination offset overflows"))?;
        let fragment = u32::try_from(fragment)
            .map_err(|_| Error::corrupt("row map", "destination id overflows"))?;
        Ok(Some(RowAddress::new(fragment, offset).into()))
    }

    /// The chunk `index`, from the cache or the file. Without a cache only the
    /// needed rows are read and nothing is kept.
    async fn chunk(&self, index: u64) -> Result<Arc<LabelChunk>> {
        match &self.cache {
            Some(cache) => {
                let key = CacheKey::new(
                    CacheNamespace::RowMapBlocks,
                    KeyParts::FingerprintChunk {
                        fingerprint: self.fingerprint,
                        chunk: index,
                    },
                );
                cache.get_or_try_insert(key, self.load_chunk(index)).await
            }
            None => Ok(Arc::new(self.load_chunk(index).await?)),
        }
    }

    async fn load_chunk(&self, index: u64) -> Result<LabelChunk> {
        let block_rows = u64::from(self.counts.block_rows());
        let first_row = index * BLOCKS_PER_CHUNK * block_rows;
        let end_row = (first_row + BLOCKS_PER_CHUNK * block_rows).min(self.counts.num_rows());
        if first_row >= end_row {
            return Err(Error::invalid_input(format!("row-map chunk {index} does not exist")));
        }
        let batches: Vec<_> = self
            .file
            .read_range(first_row..end_row, Some(&[LABEL_COLUMN]), block_rows as u32)
            .await?
            .try_collect()
            .await?;
        let mut arrays = Vec::with_capacity(batches.len());
        for batch in &batches {
            let labels = batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt16Array>()
                .ok_or_else(|| Error::corrupt("row map", "label column is not UInt16"))?;
            arrays.push(labels.clone());
        }
        let loaded: usize = arrays.iter().map(|a| a.len()).sum();
        if loaded as u64 != end_row - first_row {
            return Err(Error::corrupt("row map", "short label read"));
        }
        Ok(LabelChunk::from_arrays(
            first_row,
            block_rows as usize,
            self.counts.num_destinations() as usize,
            &arrays,
        ))
    }
}

async fn read_counts(file: &LanceFileReader) -> Result<CountsMatrix> {
    let schema = file.schema();
    let buffer = schema
        .metadata()
        .get(COUNTS_BUFFER_KEY)
        .and_then(|value| value.parse::<u32>().ok())
        .ok_or_else(|| Error::corrupt("row map", "the counts buffer is not named in the schema"))?;
    let label_field = schema
        .field_with_name(LABEL_COLUMN)
        .map_err(|_| Error::corrupt("row map", "no label column"))?;
    if label_field.data_type() != &arrow_schema::DataType::UInt16 {
        return Err(Error::corrupt("row map", "label column is not UInt16"));
    }
    let bytes = file.read_global_buffer(buffer).await?;
    CountsMatrix::decode(&bytes)
}
