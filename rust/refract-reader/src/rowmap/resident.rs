//! A whole stable-partition row map held in memory, for synchronous
//! translation (the remap rewrite's prepared translator).
//!
//! Besides the label units, it keeps one destination base address per
//! (block, label) — `destination << 32 | rows of that label in earlier
//! blocks` — so translating a row is a source search (cached per fragment),
//! one entry read and one base read: `base + rank`.

use std::sync::Arc;

use refract_core::{row_address, Error, Result, RowAddress};

use super::counts::CountsMatrix;
use super::labels::{LabelChunk, DELETED_ENTRY};
use super::reader::SourceCursor;

/// A row map in memory: labels with ranks, and per-block destination bases.
#[derive(Debug, Clone)]
pub struct ResidentPartition {
    /// (fragment id, first global row, physical rows), sorted by id.
    sources: Vec<(u64, u64, u64)>,
    /// `log2` of the rows of one unit.
    unit_shift: u32,
    units: Vec<Arc<LabelChunk>>,
    /// `log2` of the rows of one block.
    block_shift: u32,
    /// Destinations (labels) per block.
    width: usize,
    /// `bases[block * width + label]`: the address of the first row of
    /// `label` in `block`.
    bases: Vec<u64>,
}

impl ResidentPartition {
    /// Assembles the resident form of a validated map: `units` of
    /// `unit_rows` rows each (both powers of two, as the format requires).
    pub(super) fn new(
        counts: &CountsMatrix,
        destinations: &[u64],
        sources: Vec<(u64, u64, u64)>,
        unit_rows: u64,
        units: Vec<Arc<LabelChunk>>,
    ) -> Result<Self> {
        let block_rows = u64::from(counts.block_rows());
        if !unit_rows.is_power_of_two() || !block_rows.is_power_of_two() {
            return Err(Error::corrupt(
                "row map",
                format!(
                    "units of {unit_rows} rows or blocks of {block_rows} are not powers of two"
                ),
            ));
        }
        let width = destinations.len();
        let mut bases = Vec::with_capacity(counts.num_blocks() as usize * width);
        for block in 0..counts.num_blocks() {
            for (label, destination) in destinations.iter().enumerate() {
                bases.push(base_of(counts, block, label, *destination)?);
            }
        }
        Ok(Self {
            sources,
            unit_shift: unit_rows.trailing_zeros(),
            units,
            block_shift: block_rows.trailing_zeros(),
            width,
            bases,
        })
    }

    /// The destination of source `address`: `None` for a deleted row; an
    /// address outside the sources is `InvalidInput`.
    #[inline]
    pub fn translate(&self, address: u64, sources: &mut SourceCursor) -> Result<Option<u64>> {
        let row = sources.global_row(&self.sources, address)?;
        self.resolve(self.unit(row >> self.unit_shift, row)?, row)
    }

    /// [`Self::translate`] of every address of `run` (any order), passing
    /// each result to `sink`: one source search per fragment and one unit
    /// lookup per unit change, then an entry and a base read per address.
    pub fn translate_run(
        &self,
        run: impl Iterator<Item = u64>,
        mut sink: impl FnMut(Option<u64>) -> Result<()>,
    ) -> Result<()> {
        let mut sources = SourceCursor::default();
        let mut unit: Option<(u64, &LabelChunk)> = None;
        for address in run {
            let row = sources.global_row(&self.sources, address)?;
            let index = row >> self.unit_shift;
            let chunk = match unit {
                Some((at, chunk)) if at == index => chunk,
                _ => {
                    let chunk = self.unit(index, row)?;
                    unit = Some((index, chunk));
                    chunk
                }
            };
            sink(self.resolve(chunk, row)?)?;
        }
        Ok(())
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

    /// The destination of global `row`, which lies in `chunk`.
    #[inline]
    fn resolve(&self, chunk: &LabelChunk, row: u64) -> Result<Option<u64>> {
        let entry = chunk
            .entry(row.wrapping_sub(chunk.first_row) as usize)
            .ok_or_else(|| Error::corrupt("row map", format!("row {row} has no resident label")))?;
        if entry == DELETED_ENTRY {
            return Ok(None);
        }
        let label = (entry >> 16) as usize;
        let slot = ((row >> self.block_shift) as usize) * self.width + label;
        let base = self.bases.get(slot).ok_or_else(|| {
            Error::corrupt("row map", format!("label {label} has no destination"))
        })?;
        // The chunk's ranks were checked against the counts: `base + rank`
        // stays inside the destination.
        Ok(Some(base + u64::from(entry & 0xFFFF)))
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

/// The address of the first row of `label` in `block`: the destination's id
/// and the rows of that label in earlier blocks (both must fit 32 bits, and
/// so must the rows up to the block's end, which bound every rank added).
fn base_of(counts: &CountsMatrix, block: u64, label: usize, destination: u64) -> Result<u64> {
    let label16 = u16::try_from(label).map_err(|_| Error::corrupt("row map", "label overflow"))?;
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
    let fragment = u32::try_from(destination)
        .ok()
        .filter(|_| fits)
        .ok_or_else(|| {
            Error::corrupt(
                "row map",
                format!("destination {destination} or its offsets overflow 32 bits"),
            )
        })?;
    Ok(row_address(fragment, before as u32))
}
