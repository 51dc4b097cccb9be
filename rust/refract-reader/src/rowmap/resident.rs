//! A whole stable-partition row map held in memory, for synchronous
//! translation (the remap rewrite's prepared translator): the reader (its
//! sources and per-block destination bases) plus every label unit, so
//! translating a row is a source search (cached per fragment), one entry read
//! and one base read.

use std::sync::Arc;

use refract_core::{row_address, Error, Result, RowAddress};

use super::labels::LabelChunk;
use super::reader::{chunk_entry, RowMapReader, SourceCursor};

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

    /// The destination of source `address`: `None` for a deleted row; an
    /// address outside the sources is `InvalidInput`.
    #[inline]
    pub fn translate(&self, address: u64, sources: &mut SourceCursor) -> Result<Option<u64>> {
        let row = self.map.global_row(address, sources)?;
        self.map
            .destination(self.unit(row >> self.unit_shift, row)?, row)
    }

    /// [`Self::translate`] of every address of `run` (any order), passing
    /// each result to `sink`: one source search per fragment and one unit
    /// lookup per gather, then an entry and a base read per address.
    /// Addresses go in gathers of up to [`GATHER_ROWS`] rows of one unit whose
    /// label entries are loaded in one tight loop before any is resolved, so
    /// the loads (the cost of a large map: each one misses the caches)
    /// overlap instead of waiting on each other.
    pub fn translate_run(
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
