//! A whole stable-partition row map held in memory, for synchronous
//! translation (the remap rewrite's prepared translator): the reader (its
//! sources and per-block destination bases) plus every label unit, so
//! translating a row is a source search (cached per fragment), one entry read
//! and one base read.

use std::sync::Arc;

use refract_core::{row_address, Error, Result, RowAddress};
use roaring::RoaringBitmap;

use super::counts::BLOCK_ROWS;
use super::labels::{LabelChunk, DELETED_ENTRY};
use super::reader::{chunk_entry, RowMapReader, SourceCursor};
use super::route::RouteBuffer;

/// Rows whose label entries [`ResidentPartition::translate_run`] loads
/// together.
const GATHER_ROWS: usize = 64;

/// A row map in memory: the reader and all its label units.
#[derive(Debug, Clone)]
pub struct ResidentPartition {
    map: Arc<RowMapReader>,
    /// `log2` of the rows of one unit.
    unit_shift: u32,
    units: Vec<Arc<LabelChunk>>,
}

impl ResidentPartition {
    /// Assembles the resident form of `map` from its `units` of `unit_rows`
    /// rows each (a power of two, as the format requires).
    pub(super) fn new(
        map: Arc<RowMapReader>,
        unit_rows: u64,
        units: Vec<Arc<LabelChunk>>,
    ) -> Result<Self> {
        if !unit_rows.is_power_of_two() {
            return Err(Error::corrupt(
                "row map",
                format!("units of {unit_rows} rows are not a power of two"),
            ));
        }
        Ok(Self {
            map,
            unit_shift: unit_rows.trailing_zeros(),
            units,
        })
    }

    /// The destination of source `address`: `None` for a deleted row.
    ///
    /// # Errors
    /// InvalidInput for an address outside the sources; Corrupt (naming the
    /// row map) when its entries contradict its counts.
    #[inline]
    pub fn translate(&self, address: u64, sources: &mut SourceCursor) -> Result<Option<u64>> {
        self.translate_unnamed(address, sources)
            .map_err(|err| self.map.name_file(err))
    }

    /// [`Self::translate`], errors not yet naming the file.
    #[inline]
    fn translate_unnamed(&self, address: u64, sources: &mut SourceCursor) -> Result<Option<u64>> {
        let row = self.map.global_row(address, sources)?;
        self.map
            .destination(self.unit(row >> self.unit_shift, row)?, row)
    }

    /// [`Self::translate`] of every address of `run` (any order), passing
    /// each result to `sink`: one source search per fragment and one unit
    /// lookup per gather, then an entry and a base read per address.
    /// Addresses go in gathers of up to `GATHER_ROWS` (64) rows of one unit whose
    /// label entries are loaded in one tight loop before any is resolved, so
    /// the loads (the cost of a large map: each one misses the caches)
    /// overlap instead of waiting on each other.
    ///
    /// # Errors
    /// Those of [`Self::translate`], and whatever `sink` returns.
    pub fn translate_run(
        &self,
        run: impl Iterator<Item = u64>,
        sink: impl FnMut(Option<u64>) -> Result<()>,
    ) -> Result<()> {
        self.translate_run_unnamed(run, sink)
            .map_err(|err| self.map.name_file(err))
    }

    /// [`Self::translate_run`], errors not yet naming the file.
    fn translate_run_unnamed(
        &self,
        run: impl Iterator<Item = u64>,
        mut sink: impl FnMut(Option<u64>) -> Result<()>,
    ) -> Result<()> {
        let mut sources = SourceCursor::default();
        let mut rows = [0u64; GATHER_ROWS];
        let mut entries = [0u32; GATHER_ROWS];
        let mut run = run.peekable();
        loop {
            let mut unit: Option<(u64, &LabelChunk)> = None;
            let mut gathered = 0;
            while let Some(&address) = run.peek() {
                if gathered == GATHER_ROWS {
                    break;
                }
                let row = self.map.global_row(address, &mut sources)?;
                let index = row >> self.unit_shift;
                match unit {
                    Some((at, _)) if at == index => {}
                    // A new unit starts the next gather.
                    Some(_) => break,
                    None => unit = Some((index, self.unit(index, row)?)),
                }
                rows[gathered] = row;
                gathered += 1;
                run.next();
            }
            let Some((_, chunk)) = unit else {
                return Ok(());
            };
            let (rows, entries) = (&rows[..gathered], &mut entries[..gathered]);
            for (entry, row) in entries.iter_mut().zip(rows) {
                *entry = chunk_entry(chunk, *row)?;
            }
            for (entry, row) in entries.iter().zip(rows) {
                sink(self.map.destination_of_entry(*entry, *row)?)?;
            }
        }
    }

    /// Translates the rows `part` of source `fragment` and hands the
    /// survivors to `emit(destination fragment, offsets)` grouped by
    /// destination, each group ascending (the partition keeps every
    /// destination's rows in source order). `buffer` holds at most
    /// [`super::ROUTE_BATCH_ROWS`] rows, so a large part comes in several
    /// groups per destination, still ascending from one to the next. Per
    /// row: one entry read and one base read, no source search and no
    /// per-row call.
    ///
    /// # Errors
    /// InvalidInput for an offset outside the source; Corrupt (naming the
    /// row map) when its entries contradict its counts; whatever `emit` returns.
    pub fn route_part(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        buffer: &mut RouteBuffer,
        emit: impl FnMut(u32, &[u32]) -> Result<()>,
    ) -> Result<()> {
        self.route_part_unnamed(fragment, part, buffer, emit)
            .map_err(|err| self.map.name_file(err))
    }

    /// [`Self::route_part`], errors not yet naming the file.
    fn route_part_unnamed(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        buffer: &mut RouteBuffer,
        mut emit: impl FnMut(u32, &[u32]) -> Result<()>,
    ) -> Result<()> {
        let (Some(min), Some(max)) = (part.min(), part.max()) else {
            return Ok(());
        };
        let mut sources = SourceCursor::default();
        // The last offset must be a row of the source; then every offset is.
        self.map
            .global_row(row_address(fragment, max), &mut sources)?;
        let start = self
            .map
            .global_row(row_address(fragment, min), &mut sources)?
            - u64::from(min);
        buffer.reset(self.map.labels());
        let mut emit = |label: u32, lows: &[u32]| emit(self.map.destination_fragment(label)?, lows);
        let block_shift = BLOCK_ROWS.trailing_zeros();
        // The current block ends before row `block_end`; offsets ascend, so
        // a row at or past it starts the next block (and maybe unit).
        let mut block_end = 0u64;
        let mut bases: &[u64] = &[];
        let mut entries: &[u32] = &[];
        let mut unit_first = 0u64;
        for offset in part {
            let row = start + u64::from(offset);
            if row >= block_end {
                let block = row >> block_shift;
                bases = self.map.block_bases(block)?;
                block_end = (block + 1) << block_shift;
                // Units hold whole blocks, so the block lies in this unit.
                let unit = self.unit(row >> self.unit_shift, row)?;
                unit_first = unit.first_row;
                entries = unit.entries();
            }
            let entry = usize::try_from(row - unit_first)
                .ok()
                .and_then(|at| entries.get(at))
                .copied()
                .ok_or_else(|| not_in_unit(row))?;
            if entry == DELETED_ENTRY {
                continue;
            }
            let label = entry >> 16;
            let base = bases.get(label as usize).ok_or_else(|| {
                Error::corrupt("row map", format!("label {label} has no destination"))
            })?;
            // Loading checked ranks against the counts and opening checked
            // bases against 32-bit offsets: the low half plus the rank stays
            // inside the destination (truncation keeps the offset).
            let low = (*base as u32).wrapping_add(entry & 0xFFFF);
            if buffer.push(label, low) {
                buffer.flush(&mut emit)?;
            }
        }
        buffer.flush(&mut emit)
    }

    /// The unit `index` holding `row`.
    #[inline]
    fn unit(&self, index: u64, row: u64) -> Result<&LabelChunk> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.units.get(i))
            .map(|chunk| &**chunk)
            .ok_or_else(|| Error::corrupt("row map", format!("row {row} has no resident label")))
    }

    /// `Some(base)` when every offset `o` in `min..=max` of source `fragment`
    /// is a live row moving to `base + o` (one destination, consecutive
    /// offsets). Two lookups: a destination offset counts the rows of its
    /// label before it in source order, so ends `max - min` apart in one
    /// destination mean every row between has that label.
    ///
    /// # Errors
    /// Corrupt (naming the row map) when a label or base is missing.
    pub fn shift_of_range(&self, fragment: u32, (min, max): (u32, u32)) -> Result<Option<u64>> {
        if min > max {
            return Ok(None);
        }
        let mut sources = SourceCursor::default();
        let (Some(to_first), Some(to_last)) = (
            self.translate(row_address(fragment, min), &mut sources)?,
            self.translate(row_address(fragment, max), &mut sources)?,
        ) else {
            return Ok(None);
        };
        let same_fragment = RowAddress(to_first).fragment_id() == RowAddress(to_last).fragment_id();
        let consecutive = to_last.checked_sub(to_first) == Some(u64::from(max - min));
        Ok((same_fragment && consecutive).then(|| to_first.wrapping_sub(u64::from(min))))
    }
}

/// A row missing from the unit that should hold it.
fn not_in_unit(row: u64) -> Error {
    Error::corrupt("row map", format!("row {row} is not in its label unit"))
}
