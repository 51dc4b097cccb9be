//! The page lookup: loading and validating `page_lookup.lance`.

use arrow_array::{Array, RecordBatch, UInt64Array};
use arrow_schema::DataType;
use refract_core::{Error, Result};
use refract_table::io::LanceFileReader;

use super::pages::{MAX_COLUMN, MIN_COLUMN, NUM_ROWS_COLUMN, ROW_START_COLUMN};
use crate::keys::{downcast, Key, KeyColumn};

const WHAT: &str = "btree page lookup";

/// One page: rows `[start, start + rows)` of the data file, values in `[min, max]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEntry {
    /// Smallest value on the page.
    pub min: Key,
    /// Largest value on the page.
    pub max: Key,
    /// First row of the page in `values.lance` (layout 1: `page_data.lance`).
    pub start: u64,
    /// Rows on the page (at least 1).
    pub rows: u64,
}

/// Reads every page entry and checks that the pages tile `[0, data_rows)` in
/// order with non-decreasing, non-overlapping value intervals.
pub(crate) async fn load(
    reader: &LanceFileReader,
    value_type: &DataType,
    data_rows: u64,
) -> Result<Vec<PageEntry>> {
    let batches = reader.read_all(None).await?;
    let mut pages = Vec::new();
    for batch in &batches {
        append_entries(batch, value_type, &mut pages)?;
    }
    validate(&pages, data_rows)?;
    Ok(pages)
}

fn append_entries(
    batch: &RecordBatch,
    value_type: &DataType,
    pages: &mut Vec<PageEntry>,
) -> Result<()> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| Error::corrupt(WHAT, format!("missing column {name}")))
    };
    let mins = column(MIN_COLUMN)?;
    let maxs = column(MAX_COLUMN)?;
    if mins.data_type() != value_type || maxs.data_type() != value_type {
        return Err(Error::corrupt(
            WHAT,
            format!("min/max type differs from the value type {value_type}"),
        ));
    }
    let starts = column(ROW_START_COLUMN)?;
    let counts = column(NUM_ROWS_COLUMN)?;
    let starts = downcast::<UInt64Array>(&starts)?;
    let counts = downcast::<UInt64Array>(&counts)?;
    let mins = KeyColumn::new(&mins)?;
    let maxs = KeyColumn::new(&maxs)?;
    for i in 0..batch.num_rows() {
        let (Some(min), Some(max)) = (mins.key_at(i), maxs.key_at(i)) else {
            return Err(Error::corrupt(
                WHAT,
                format!("page {} has a null bound", pages.len()),
            ));
        };
        if starts.is_null(i) || counts.is_null(i) {
            return Err(Error::corrupt(
                WHAT,
                format!("page {} has a null extent", pages.len()),
            ));
        }
        pages.push(PageEntry {
            min,
            max,
            start: starts.value(i),
            rows: counts.value(i),
        });
    }
    Ok(())
}

fn validate(pages: &[PageEntry], data_rows: u64) -> Result<()> {
    let mut next_start = 0u64;
    let mut prev_max: Option<&Key> = None;
    for (i, page) in pages.iter().enumerate() {
        if page.start != next_start || page.rows == 0 {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "page {i} covers rows {}+{}, expected to start at {next_start} with at least one row",
                    page.start, page.rows
                ),
            ));
        }
        if page.min > page.max || prev_max.is_some_and(|prev| prev > &page.min) {
            return Err(Error::corrupt(
                WHAT,
                format!("page {i} is out of value order"),
            ));
        }
        next_start = page
            .start
            .checked_add(page.rows)
            .ok_or_else(|| Error::corrupt(WHAT, format!("page {i} row count overflows")))?;
        prev_max = Some(&page.max);
    }
    if next_start != data_rows {
        return Err(Error::corrupt(
            WHAT,
            format!("pages cover {next_start} rows, the values file holds {data_rows}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(min: i128, max: i128, start: u64, rows: u64) -> PageEntry {
        PageEntry {
            min: Key::Int(min),
            max: Key::Int(max),
            start,
            rows,
        }
    }

    #[test]
    fn accepts_a_tiling() {
        validate(&[page(1, 3, 0, 2), page(3, 9, 2, 5)], 7).unwrap();
        validate(&[], 0).unwrap();
    }

    #[test]
    fn rejects_gaps_overlaps_and_bad_totals() {
        for (pages, rows) in [
            (vec![page(1, 3, 0, 2), page(3, 9, 3, 5)], 8),
            (vec![page(1, 3, 0, 2), page(2, 9, 2, 5)], 7),
            (vec![page(4, 3, 0, 2)], 2),
            (vec![page(1, 3, 0, 0)], 0),
            (vec![page(1, 3, 0, 2)], 3),
        ] {
            let err = validate(&pages, rows).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        }
    }
}
