//! Row-address columns of index files and their translation.
//!
//! Index types that store one row address per entry (btree values, ivf_flat
//! vectors) keep the addresses in a file of their own, `addresses.lance`, so a
//! remap rewrites only that file and copies the rest server-side. A null
//! address is a tombstone: the entry's row is gone and queries skip it.
//!
//! Stored addresses follow the index's order (values, partitions), which is
//! usually not address order. The core's translators keep a cursor that only
//! helps while addresses ascend, so an unsorted batch is translated in
//! ascending address order: `(address, position)` pairs are sorted,
//! translated, and the results are scattered back to their positions. A batch
//! that already ascends is translated as it is.

use refract_table::io::PageLayout;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use refract_core::{Error, Result};
use refract_table::io::{
    DatasetStore, LanceFileReader, LanceFileWriter, RelativePath, STREAMING_PAGE_BYTES,
};

use crate::types::encoding_hints::without_dictionary_or_runs;
use crate::types::{Translator, MAX_TRANSLATION_BATCH};

/// File name of the addresses file inside a segment directory.
pub const ADDRESSES_FILE: &str = "addresses.lance";
/// The stored row-address column.
pub const ADDR_COLUMN: &str = "_rowaddr";
/// Most rows one [`read_column`] call returns, so memory does not follow the
/// segment size.
pub(crate) const MAX_COLUMN_READ_ROWS: u64 = 4 * MAX_TRANSLATION_BATCH as u64;
/// An address-only remap keeps at most `entries / TOMBSTONE_DIVISOR`
/// tombstones (one in eight); one that would keep more rewrites the whole
/// segment without them, so dead entries never pile up.
pub const TOMBSTONE_DIVISOR: u64 = 8;

/// Splits `rows` into consecutive pieces of at most `max` rows (`max` ≥ 1).
pub(crate) fn bounded_pieces(rows: Range<u64>, max: u64) -> impl Iterator<Item = Range<u64>> {
    let end = rows.end;
    let max = max.max(1);
    (rows.start..end)
        .step_by(usize::try_from(max).unwrap_or(usize::MAX))
        .map(move |start| start..end.min(start.saturating_add(max)))
}

/// The address-only remap shared by the index types: streams the addresses
/// of `old` through `translator` into a new addresses file at `new_path`, in
/// reads of [`MAX_COLUMN_READ_ROWS`] and translation batches of
/// [`MAX_TRANSLATION_BATCH`]; rows that are gone become tombstones. Returns
/// the tombstones of the new file (old ones included), or `None` — with
/// nothing written — as soon as they would exceed
/// `entries / TOMBSTONE_DIVISOR`. `what` names the index in errors.
pub(crate) async fn write_translated_addresses(
    store: &DatasetStore,
    old: &LanceFileReader,
    new_path: &RelativePath,
    translator: &dyn Translator,
    what: &str,
) -> Result<Option<u64>> {
    let entries = old.num_rows();
    let limit = entries / TOMBSTONE_DIVISOR;
    let mut writer = LanceFileWriter::create(
        store,
        new_path,
        addresses_schema(),
        PageLayout::Streaming {
            page_bytes: STREAMING_PAGE_BYTES,
        },
    )
    .await?;
    let mut tombstones = 0u64;
    match translate_into(old, &mut writer, translator, limit, &mut tombstones, what).await {
        Ok(true) => {}
        Ok(false) => {
            writer.abort().await;
            return Ok(None);
        }
        Err(err) => {
            writer.abort().await;
            return Err(err);
        }
    }
    let written = writer.finish().await?.num_rows;
    if written != entries {
        return Err(Error::corrupt(
            what,
            format!("wrote {entries} addresses, the file reports {written}"),
        ));
    }
    Ok(Some(tombstones))
}

/// The loop of [`write_translated_addresses`]; `false` once the tombstones
/// exceed `limit`.
async fn translate_into(
    old: &LanceFileReader,
    writer: &mut LanceFileWriter,
    translator: &dyn Translator,
    limit: u64,
    tombstones: &mut u64,
    what: &str,
) -> Result<bool> {
    let schema = addresses_schema();
    let mut translation = AddressTranslation::default();
    for piece in bounded_pieces(0..old.num_rows(), MAX_COLUMN_READ_ROWS) {
        let read = read_addresses(old, piece, what).await?;
        for start in (0..read.len()).step_by(MAX_TRANSLATION_BATCH) {
            let slice = read.slice(start, MAX_TRANSLATION_BATCH.min(read.len() - start));
            let new = translation.translate(&slice, translator)?;
            *tombstones += new.null_count() as u64;
            if *tombstones > limit {
                return Ok(false);
            }
            let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(new)])
                .map_err(|e| Error::external("assembling translated addresses", e))?;
            writer.write(&batch).await?;
        }
    }
    Ok(true)
}

/// The schema of an addresses file (a null address is a tombstone).
///
/// Addresses are (nearly) unique, so Lance's dictionary and run-length
/// encodings never pay off for them, yet by default the writer tries both on
/// every page (sampling the values into a hash set, counting runs).
pub(crate) fn addresses_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![without_dictionary_or_runs(Field::new(
        ADDR_COLUMN,
        DataType::UInt64,
        true,
    ))]))
}

/// True when `schema` is an addresses file's: one nullable UInt64 `_rowaddr`.
pub(crate) fn is_addresses_schema(schema: &Schema) -> bool {
    schema.fields().len() == 1
        && schema.field(0).name() == ADDR_COLUMN
        && schema.field(0).data_type() == &DataType::UInt64
}

/// Reads `column` of the file rows `rows` (at most [`MAX_COLUMN_READ_ROWS`])
/// as one array. `what` names the index in errors.
pub(crate) async fn read_column(
    reader: &LanceFileReader,
    column: &str,
    rows: Range<u64>,
    what: &str,
) -> Result<ArrayRef> {
    let len = rows.end.saturating_sub(rows.start);
    if len > MAX_COLUMN_READ_ROWS {
        return Err(Error::invalid_input(format!(
            "{what} read of {len} rows exceeds the {MAX_COLUMN_READ_ROWS}-row bound"
        )));
    }
    // MAX_COLUMN_READ_ROWS (262,144) fits in u32.
    let batches: Vec<RecordBatch> = reader
        .read_range(rows, Some(&[column]), MAX_COLUMN_READ_ROWS as u32)
        .await?
        .try_collect()
        .await?;
    let mut arrays = Vec::with_capacity(batches.len());
    for batch in &batches {
        let array = batch.column_by_name(column).ok_or_else(|| {
            Error::corrupt(what, format!("{} has no column {column}", reader.path()))
        })?;
        arrays.push(array.clone());
    }
    let joined = match arrays.len() {
        1 => arrays.swap_remove(0),
        _ => {
            let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
            arrow::compute::concat(&refs).map_err(|e| Error::external("concatenating rows", e))?
        }
    };
    if joined.len() as u64 != len {
        return Err(Error::corrupt(
            what,
            format!(
                "{} returned {} rows for a range of {len}",
                reader.path(),
                joined.len()
            ),
        ));
    }
    Ok(joined)
}

/// Reads the addresses of the file rows `rows` (nulls are tombstones).
pub(crate) async fn read_addresses(
    reader: &LanceFileReader,
    rows: Range<u64>,
    what: &str,
) -> Result<UInt64Array> {
    let column = read_column(reader, ADDR_COLUMN, rows, what).await?;
    column
        .as_any()
        .downcast_ref::<UInt64Array>()
        .cloned()
        .ok_or_else(|| Error::corrupt(what, format!("{} is not UInt64", ADDR_COLUMN)))
}

/// Whether unsorted batches are sorted by address before translation.
/// Measured on 10M shuffled values (see docs/benchmarks.md): sorting first
/// is faster than translating in value order.
const SORT_BEFORE_TRANSLATING: bool = true;

/// Reusable buffers for translating batches of at most [`MAX_TRANSLATION_BATCH`]
/// addresses (bounded: about 40 bytes per address of one batch).
#[derive(Debug, Default)]
pub(crate) struct AddressTranslation {
    /// `address << 32 | position`: sorting orders by address, then position.
    pairs: Vec<u128>,
    addresses: Vec<u64>,
    translated: Vec<Option<u64>>,
    result: Vec<Option<u64>>,
}

impl AddressTranslation {
    /// Translates `old` (nulls are tombstones and stay null) through
    /// `translator`; an address that translates to `None` becomes null.
    pub(crate) fn translate(
        &mut self,
        old: &UInt64Array,
        translator: &dyn Translator,
    ) -> Result<UInt64Array> {
        if old.len() > MAX_TRANSLATION_BATCH {
            return Err(Error::invalid_input(format!(
                "{} addresses exceed the translation batch of {MAX_TRANSLATION_BATCH}",
                old.len()
            )));
        }
        let values = old.values();
        let ascending = values.windows(2).all(|w| w[0] <= w[1]);
        if old.null_count() == 0 && (ascending || !SORT_BEFORE_TRANSLATING) {
            self.call(values.as_ref(), translator)?;
            return Ok(self.translated.iter().copied().collect());
        }
        self.pairs.clear();
        self.pairs.extend(
            values
                .iter()
                .enumerate()
                .filter(|(position, _)| old.is_valid(*position))
                .map(|(position, address)| (u128::from(*address) << 32) | position as u128),
        );
        if SORT_BEFORE_TRANSLATING && !ascending {
            self.pairs.sort_unstable();
        }
        let mut addresses = std::mem::take(&mut self.addresses);
        addresses.clear();
        addresses.extend(self.pairs.iter().map(|pair| (pair >> 32) as u64));
        let called = self.call(&addresses, translator);
        self.addresses = addresses;
        called?;
        self.result.clear();
        self.result.resize(old.len(), None);
        for (pair, new) in self.pairs.iter().zip(&self.translated) {
            // Positions are below MAX_TRANSLATION_BATCH, checked above.
            let position = (pair & u128::from(u32::MAX)) as usize;
            if let Some(slot) = self.result.get_mut(position) {
                *slot = *new;
            }
        }
        Ok(self.result.iter().copied().collect())
    }

    /// One translator call; checks it answered every address.
    fn call(&mut self, addresses: &[u64], translator: &dyn Translator) -> Result<()> {
        self.translated.clear();
        translator.translate(addresses, &mut self.translated)?;
        if self.translated.len() != addresses.len() {
            return Err(Error::invalid_input(format!(
                "translator returned {} results for {} addresses",
                self.translated.len(),
                addresses.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Moves addresses by a table; missing means unchanged; records batches.
    struct Table(HashMap<u64, Option<u64>>, std::sync::Mutex<Vec<Vec<u64>>>);

    impl Translator for Table {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            out.clear();
            out.extend(
                batch
                    .iter()
                    .map(|a| self.0.get(a).copied().unwrap_or(Some(*a))),
            );
            self.1.lock().unwrap().push(batch.to_vec());
            Ok(())
        }
    }

    fn table(entries: &[(u64, Option<u64>)]) -> Table {
        Table(entries.iter().copied().collect(), Default::default())
    }

    #[test]
    fn unsorted_batches_are_translated_ascending_and_scattered_back() {
        let translator = table(&[(9, Some(90)), (3, None), (5, Some(50))]);
        let old = UInt64Array::from(vec![Some(9), None, Some(3), Some(5), Some(1), Some(9)]);
        let new = AddressTranslation::default()
            .translate(&old, &translator)
            .unwrap();
        assert_eq!(
            new.iter().collect::<Vec<_>>(),
            vec![Some(90), None, None, Some(50), Some(1), Some(90)]
        );
        assert_eq!(*translator.1.lock().unwrap(), vec![vec![1, 3, 5, 9, 9]]);
    }

    #[test]
    fn ascending_batches_are_translated_as_they_are() {
        let translator = table(&[(2, Some(20)), (4, None)]);
        let old = UInt64Array::from(vec![1, 2, 2, 4]);
        let new = AddressTranslation::default()
            .translate(&old, &translator)
            .unwrap();
        assert_eq!(
            new.iter().collect::<Vec<_>>(),
            vec![Some(1), Some(20), Some(20), None]
        );
        assert_eq!(*translator.1.lock().unwrap(), vec![vec![1, 2, 2, 4]]);
    }

    #[test]
    fn oversized_batches_are_refused() {
        let old = UInt64Array::from(vec![0u64; MAX_TRANSLATION_BATCH + 1]);
        let err = AddressTranslation::default()
            .translate(&old, &table(&[]))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }
}
