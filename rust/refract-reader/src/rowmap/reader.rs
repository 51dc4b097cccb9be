//! Reading a row map: translate source row addresses to destination addresses,
//! loading label chunks lazily through the session's shared cache.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use refract_core::cache::{ByteWeightedCache, CacheKey, CacheNamespace, KeyParts};
use refract_core::checksum::FileChecksum;
use refract_core::{row_address, Error, Result, RowAddress, MAX_TRANSLATION_BATCH};
use refract_table::io::store::DatasetStore;
use refract_table::io::RecordedFile;
use uuid::Uuid;

use super::counts::{CountsMatrix, BLOCK_ROWS};
use super::file::{RowMapFile, MAX_TAIL_BYTES};
use super::labels::{LabelChunk, DELETED_ENTRY};
use super::resident::ResidentPartition;
use super::{name_file, row_map_path};
use refract_table::io::paths::RelativePath;

/// Blocks per cached chunk (32 × 65,536 rows ≈ 8 MiB decoded: a label and an
/// in-block rank per row).
pub const BLOCKS_PER_CHUNK: u64 = 32;
/// Generous estimate of one page's column metadata (encoding description,
/// buffer offsets and sizes).
const PAGE_METADATA_BYTES: u64 = 256;
/// Room for the schema, the offset tables and the footer.
const METADATA_SLACK_BYTES: u64 = 16 << 10;

/// How label chunks are cached (the CLI maps `REFRACT_FRI_ROWMAP_CACHE=0` to
/// `Disabled` and `REFRACT_FRI_ROWMAP_PREWARM=1` to `Prewarm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChunkCacheMode {
    /// Read the needed block on every translation (diagnostics).
    Disabled,
    /// Load chunks on first use and keep them in the shared cache.
    #[default]
    Lazy,
    /// Load every chunk concurrently at open.
    Prewarm,
}

/// A source fragment of the partition, in transition order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowMapSource {
    /// Fragment id.
    pub fragment_id: u64,
    /// Physical rows.
    pub physical_rows: u64,
}

/// Remembers the source of the previous address, so a run of one fragment's
/// addresses searches the sources once: (fragment id, first global row,
/// physical rows).
#[derive(Debug, Default, Clone)]
pub struct SourceCursor {
    last: Option<(u64, u64, u64)>,
}

impl SourceCursor {
    /// The global row of `address` among `sources` ((fragment id, first
    /// global row, physical rows), sorted by id); `InvalidInput` for an
    /// address outside them.
    #[inline]
    pub(super) fn global_row(&mut self, sources: &[(u64, u64, u64)], address: u64) -> Result<u64> {
        let address = RowAddress::from(address);
        let fragment = u64::from(address.fragment_id());
        let offset = u64::from(address.offset());
        let (start, rows) = match self.last {
            Some((id, start, rows)) if id == fragment => (start, rows),
            _ => {
                let slot = sources
                    .binary_search_by_key(&fragment, |(id, _, _)| *id)
                    .map_err(|_| {
                        Error::invalid_input(format!(
                            "address {address} is not in a source of this row map"
                        ))
                    })?;
                let (_, start, rows) = sources[slot];
                self.last = Some((fragment, start, rows));
                (start, rows)
            }
        };
        if offset >= rows {
            return Err(Error::invalid_input(format!(
                "address {address} is beyond the source's {rows} rows"
            )));
        }
        Ok(start + offset)
    }
}

/// An opened, validated row map. Opening reads the counts only; labels are read
/// when translation reaches them.
pub struct RowMapReader {
    file: RowMapFile,
    counts: CountsMatrix,
    fingerprint: [u8; 32],
    /// (fragment id, first global row), sorted by fragment id for lookup.
    source_starts: Vec<(u64, u64, u64)>,
    destinations: Vec<u64>,
    /// `bases[block * width + label]`: the address of the first row of
    /// `label` in `block` (see [`destination_bases`]).
    bases: Vec<u64>,
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
    /// Opens the row map of `map_id` (recorded size `map_size_bytes` and, when
    /// recorded, checksum `map_checksum`: every read of the file is then
    /// verified) for a transition from `sources` to `destinations` (fragment
    /// id, physical rows), validating the counts against both. `fingerprint` identifies the
    /// transition in cache keys. Reads the file's metadata and the counts
    /// buffer — one ranged GET of a tail sized for them, a second only when
    /// they are not all in it — and no labels (unless `mode` is
    /// [`ChunkCacheMode::Prewarm`]).
    ///
    /// # Errors
    /// Corrupt (naming the file) when its size, checksum, counts or labels
    /// disagree with the record or the transition; NotSupported for an unknown
    /// counts version; NotFound for a missing file; External for store failures.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        store: &DatasetStore,
        map_id: &Uuid,
        map_size_bytes: u64,
        map_checksum: Option<&FileChecksum>,
        fingerprint: [u8; 32],
        sources: &[RowMapSource],
        destinations: &[(u64, u64)],
        cache: &ByteWeightedCache,
        mode: ChunkCacheMode,
    ) -> Result<Self> {
        let path = row_map_path(map_id);
        let store = match map_checksum {
            Some(checksum) => store.verifying(&[RecordedFile {
                path: path.clone(),
                size_bytes: map_size_bytes,
                checksum: checksum.clone(),
            }]),
            None => store.clone(),
        };
        Self::open_at(
            &store,
            &path,
            map_size_bytes,
            fingerprint,
            sources,
            destinations,
            cache,
            mode,
        )
        .await
        .map_err(|err| name_file(&path, err))
    }

    /// [`Self::open`] of the file at `path`, errors not yet naming it.
    #[allow(clippy::too_many_arguments)]
    async fn open_at(
        store: &DatasetStore,
        path: &RelativePath,
        map_size_bytes: u64,
        fingerprint: [u8; 32],
        sources: &[RowMapSource],
        destinations: &[(u64, u64)],
        cache: &ByteWeightedCache,
        mode: ChunkCacheMode,
    ) -> Result<Self> {
        let source_rows = sources.iter().try_fold(0u64, |total, source| {
            total
                .checked_add(source.physical_rows)
                .ok_or_else(|| Error::corrupt("row map", "source rows overflow"))
        })?;
        // The recorded size saves a HEAD request; a wrong size is Corrupt.
        let known_size = (map_size_bytes > 0).then_some(map_size_bytes);
        let tail = metadata_bytes_estimate(source_rows, destinations.len());
        let opened = RowMapFile::open(store, path, known_size, tail).await?;
        let file = opened.file;
        let counts = CountsMatrix::decode(&opened.counts)?;
        let destination_rows: Vec<u64> = destinations.iter().map(|(_, rows)| *rows).collect();
        counts.check_against(source_rows, &destination_rows)?;
        if file.num_rows() != counts.num_rows() {
            return Err(Error::corrupt(
                "row map",
                format!(
                    "file holds {} labels, counts say {}",
                    file.num_rows(),
                    counts.num_rows()
                ),
            ));
        }
        let mut source_starts = Vec::with_capacity(sources.len());
        let mut start = 0u64;
        for source in sources {
            source_starts.push((source.fragment_id, start, source.physical_rows));
            start += source.physical_rows;
        }
        source_starts.sort_unstable();
        let destinations: Vec<u64> = destinations.iter().map(|(id, _)| *id).collect();
        let bases = destination_bases(&counts, &destinations)?;
        let reader = Self {
            file,
            counts,
            fingerprint,
            source_starts,
            destinations,
            bases,
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
    ///
    /// # Errors
    /// Corrupt (naming the file) for damaged labels; NotFound or External when
    /// the file cannot be read.
    pub async fn prewarm(&self) -> Result<()> {
        futures::stream::iter(0..self.num_chunks())
            .map(|chunk| self.chunk(chunk))
            .buffer_unordered(8)
            .try_for_each(|_| async { Ok(()) })
            .await
            .map_err(|err| self.name_file(err))
    }

    /// The row-map file's dataset-relative path.
    pub fn path(&self) -> &RelativePath {
        self.file.path()
    }

    /// `err` naming this row map's file when it is Corrupt (see
    /// [`name_file`]).
    pub(super) fn name_file(&self, err: Error) -> Error {
        name_file(self.file.path(), err)
    }

    /// Translates source addresses to destination addresses (`None` = deleted),
    /// keeping input order and duplicates.
    ///
    /// Requests are sorted by row (an ascending batch, the common case, needs
    /// no sort) so each touched chunk (cached) or block (uncached) is fetched
    /// once per batch; untouched ones are never read.
    ///
    /// # Errors
    /// InvalidInput for an address outside the sources or a batch of more than
    /// [`MAX_TRANSLATION_BATCH`]; Corrupt (naming the file) for damaged labels;
    /// NotFound or External when the file cannot be read.
    pub async fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        if batch.len() > MAX_TRANSLATION_BATCH {
            return Err(Error::invalid_input(format!(
                "translation batch of {} addresses exceeds the maximum of {MAX_TRANSLATION_BATCH}",
                batch.len()
            )));
        }
        self.translate_sorted_or_not(batch, out)
            .await
            .map_err(|err| self.name_file(err))
    }

    /// [`Self::translate`], errors not yet naming the file.
    async fn translate_sorted_or_not(
        &self,
        batch: &[u64],
        out: &mut Vec<Option<u64>>,
    ) -> Result<()> {
        let mut sources = SourceCursor::default();
        let mut rows = Vec::with_capacity(batch.len());
        for &address in batch {
            rows.push(self.global_row(address, &mut sources)?);
        }
        out.clear();
        if rows.windows(2).all(|pair| pair[0] <= pair[1]) {
            // Ascending (the rewrite's case): results in input order directly.
            out.reserve(rows.len());
            self.resolve_sorted(rows.iter().copied(), |destination| out.push(destination))
                .await
        } else {
            let mut requests: Vec<(u64, usize)> = rows.into_iter().zip(0..).collect();
            requests.sort_unstable();
            out.resize(batch.len(), None);
            let mut slots = requests.iter().map(|(_, slot)| *slot);
            self.resolve_sorted(requests.iter().map(|(row, _)| *row), |destination| {
                // One result per request, and every slot indexes `out`.
                if let Some(slot) = slots.next() {
                    out[slot] = destination;
                }
            })
            .await
        }
    }

    /// Resolves ascending global `rows` in order, passing each destination to
    /// `emit`: every touched unit is fetched once, ranks walk incrementally.
    async fn resolve_sorted(
        &self,
        rows: impl Iterator<Item = u64>,
        mut emit: impl FnMut(Option<u64>),
    ) -> Result<()> {
        let unit_rows = self.unit_rows();
        // The current unit: its rows and labels.
        let mut current: Option<(std::ops::Range<u64>, Arc<LabelChunk>)> = None;
        for row in rows {
            let chunk = match &current {
                Some((range, chunk)) if range.contains(&row) => chunk,
                _ => {
                    let unit = row / unit_rows;
                    let start = unit * unit_rows;
                    let range = start..start.saturating_add(unit_rows);
                    &current.insert((range, self.unit(unit).await?)).1
                }
            };
            emit(self.destination(chunk, row)?);
        }
        Ok(())
    }

    /// The whole map in memory for synchronous translation: every label unit
    /// loaded (through the cache when enabled). Holds about
    /// [`Self::resident_bytes`].
    ///
    /// # Errors
    /// Corrupt (naming the file) for damaged labels; NotFound or External when
    /// the file cannot be read.
    pub async fn resident(self: Arc<Self>) -> Result<ResidentPartition> {
        let unit_rows = self.unit_rows();
        let count = self.counts.num_rows().div_ceil(unit_rows);
        let units: Vec<Arc<LabelChunk>> = futures::stream::iter(0..count)
            .map(|unit| self.unit(unit))
            .buffered(4)
            .try_collect()
            .await
            .map_err(|err| self.name_file(err))?;
        let path = self.file.path().clone();
        ResidentPartition::new(self, unit_rows, units).map_err(|err| name_file(&path, err))
    }

    /// Bytes [`Self::resident`] holds: four per label.
    pub fn resident_bytes(&self) -> u64 {
        self.counts.num_rows().saturating_mul(4)
    }

    /// Bytes held by the reader itself (labels live in the chunk cache).
    pub fn deep_size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.file.deep_size_bytes()
            + self.counts.deep_size_bytes()
            + self.source_starts.capacity() * 24
            + self.destinations.capacity() * 8
            + self.bases.capacity() * 8
    }

    /// Rows per fetched unit: a chunk with the cache, one block without.
    fn unit_rows(&self) -> u64 {
        let block_rows = u64::from(self.counts.block_rows());
        match self.cache {
            Some(_) => BLOCKS_PER_CHUNK * block_rows,
            None => block_rows,
        }
    }

    /// Unit `index` (see [`Self::unit_rows`]).
    async fn unit(&self, index: u64) -> Result<Arc<LabelChunk>> {
        match &self.cache {
            Some(_) => self.chunk(index).await,
            None => {
                let block_rows = u64::from(self.counts.block_rows());
                let first = index * block_rows;
                let end = (first + block_rows).min(self.counts.num_rows());
                Ok(Arc::new(self.load_rows(first, end).await?))
            }
        }
    }

    /// The global row of `address`; `cursor` remembers the last source so a
    /// run of one fragment's addresses searches the sources once.
    pub(super) fn global_row(&self, address: u64, cursor: &mut SourceCursor) -> Result<u64> {
        cursor.global_row(&self.source_starts, address)
    }

    /// How many labels (destinations) the map has.
    pub(super) fn labels(&self) -> usize {
        self.destinations.len()
    }

    /// The destination fragment of `label`; `Corrupt` for a label the map
    /// does not have.
    pub(super) fn destination_fragment(&self, label: u32) -> Result<u32> {
        self.destinations
            .get(label as usize)
            // Opening checked that every destination id fits 32 bits
            // (`destination_bases`): the truncation keeps it.
            .map(|d| *d as u32)
            .ok_or_else(|| Error::corrupt("row map", format!("label {label} has no destination")))
    }

    /// Per label, the address of the label's first row in `block` (see
    /// [`destination_bases`]).
    #[inline]
    pub(super) fn block_bases(&self, block: u64) -> Result<&[u64]> {
        let width = self.destinations.len();
        usize::try_from(block)
            .ok()
            .and_then(|b| b.checked_mul(width))
            .and_then(|from| self.bases.get(from..from + width))
            .ok_or_else(|| Error::corrupt("row map", format!("block {block} has no bases")))
    }

    /// The destination of global `row`, which lies in `chunk`: `None` for a
    /// deleted row.
    #[inline]
    pub(super) fn destination(&self, chunk: &LabelChunk, row: u64) -> Result<Option<u64>> {
        self.destination_of_entry(chunk_entry(chunk, row)?, row)
    }

    /// The destination of global `row` whose packed label entry is `entry`
    /// (read from its chunk): `None` for a deleted row.
    #[inline]
    pub(super) fn destination_of_entry(&self, entry: u32, row: u64) -> Result<Option<u64>> {
        if entry == DELETED_ENTRY {
            return Ok(None);
        }
        let label = (entry >> 16) as usize;
        // Decoding accepts only `BLOCK_ROWS` (a power of two): a shift.
        let block = (row >> BLOCK_ROWS.trailing_zeros()) as usize;
        let base = self
            .bases
            .get(block * self.destinations.len() + label)
            .ok_or_else(|| {
                Error::corrupt("row map", format!("label {label} has no destination"))
            })?;
        // Ranks were checked against the counts when the chunk was loaded, and
        // the bases against 32-bit offsets: `base + rank` stays inside the
        // destination.
        Ok(Some(base + u64::from(entry & 0xFFFF)))
    }

    /// The chunk `index` through the shared cache (concurrent loads of one
    /// chunk are deduplicated); read directly when the cache is disabled.
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
        let chunk_rows = BLOCKS_PER_CHUNK * u64::from(self.counts.block_rows());
        let first_row = index
            .checked_mul(chunk_rows)
            .ok_or_else(|| Error::invalid_input(format!("row-map chunk {index} does not exist")))?;
        let end_row = first_row
            .saturating_add(chunk_rows)
            .min(self.counts.num_rows());
        self.load_rows(first_row, end_row).await
    }

    /// Reads labels `first_row..end_row` (block aligned at the start).
    async fn load_rows(&self, first_row: u64, end_row: u64) -> Result<LabelChunk> {
        if first_row >= end_row {
            return Err(Error::invalid_input(format!(
                "row-map rows {first_row}..{end_row} do not exist"
            )));
        }
        let block_rows = self.counts.block_rows();
        let arrays = self
            .file
            .read_labels(first_row..end_row, block_rows)
            .await?;
        let loaded: usize = arrays.iter().map(|a| a.len()).sum();
        if loaded as u64 != end_row - first_row {
            return Err(Error::corrupt("row map", "short label read"));
        }
        let first_block = first_row / u64::from(block_rows);
        // Each whole block's per-label counts must agree with the counts
        // matrix ("labels disagree with counts").
        LabelChunk::from_arrays(
            first_row,
            block_rows as usize,
            self.counts.num_destinations() as usize,
            &arrays,
            |i, histogram| self.check_block(first_block + i as u64, histogram),
        )
    }

    /// The per-label row counts of block `block` equal the counts matrix's.
    fn check_block(&self, block: u64, histogram: &[u32]) -> Result<()> {
        for (d, count) in histogram.iter().enumerate() {
            let d16 = u16::try_from(d).map_err(|_| Error::corrupt("row map", "label overflow"))?;
            match (
                self.counts.before(block, d16),
                self.counts.before(block + 1, d16),
            ) {
                (Some(before), Some(after))
                    if after.checked_sub(before) == Some(u64::from(*count)) => {}
                _ => {
                    return Err(Error::corrupt(
                        "row map",
                        format!("labels of block {block} disagree with the counts"),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Per (block, label), the address of the label's first row in the block:
/// the destination's id and the rows of that label in earlier blocks. Both
/// must fit 32 bits, and so must the rows up to the block's end, which bound
/// every rank added to a base.
fn destination_bases(counts: &CountsMatrix, destinations: &[u64]) -> Result<Vec<u64>> {
    let mut bases = Vec::with_capacity(counts.num_blocks() as usize * destinations.len());
    for block in 0..counts.num_blocks() {
        for (label, destination) in destinations.iter().enumerate() {
            let label16 =
                u16::try_from(label).map_err(|_| Error::corrupt("row map", "label overflow"))?;
            let (Some(before), Some(after)) = (
                counts.before(block, label16),
                counts.before(block + 1, label16),
            ) else {
                return Err(Error::corrupt(
                    "row map",
                    format!("label {label} has no counts in block {block}"),
                ));
            };
            let fits = before <= after && after <= (1u64 << 32);
            let fragment = u32::try_from(*destination)
                .ok()
                .filter(|_| fits)
                .ok_or_else(|| {
                    Error::corrupt(
                        "row map",
                        format!("destination {destination} or its offsets overflow 32 bits"),
                    )
                })?;
            bases.push(row_address(fragment, before as u32));
        }
    }
    Ok(bases)
}

/// Bytes of counts and column metadata a row map of `rows` labels and
/// `destinations` destinations holds at its end: the counts matrix, about
/// [`PAGE_METADATA_BYTES`] per page (one page per block) and room for the
/// schema, footer and tables. Opening reads this much of the tail at once.
fn metadata_bytes_estimate(rows: u64, destinations: usize) -> u64 {
    let blocks = rows.div_ceil(u64::from(BLOCK_ROWS));
    let counts = (blocks + 1)
        .saturating_mul(destinations as u64)
        .saturating_mul(8);
    counts
        .saturating_add(blocks.saturating_mul(PAGE_METADATA_BYTES))
        .saturating_add(METADATA_SLACK_BYTES)
        .min(MAX_TAIL_BYTES)
}

/// The packed label entry of global `row` in `chunk`; `Corrupt` when the row
/// is not in the chunk.
#[inline]
pub(super) fn chunk_entry(chunk: &LabelChunk, row: u64) -> Result<u32> {
    row.checked_sub(chunk.first_row)
        .and_then(|p| usize::try_from(p).ok())
        .and_then(|p| chunk.entry(p))
        .ok_or_else(|| Error::corrupt("row map", format!("row {row} is not in its label chunk")))
}
