//! Writes sorted `(value, _rowaddr)` rows as fixed-size pages plus the page
//! lookup. Used by build and by remap, so a remapped segment gets a freshly
//! cut lookup (no empty pages, exact min/max) rather than a stale copy.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_core::{Error, Result};
use refract_table::io::{LanceFileWriter, RelativePath};

use super::{concat, data_schema, BTreeDetails, PAGE_DATA_FILE, PAGE_LOOKUP_FILE};
use crate::types::IndexContext;

/// Lookup columns.
pub(crate) const MIN_COLUMN: &str = "min";
pub(crate) const MAX_COLUMN: &str = "max";
pub(crate) const ROW_START_COLUMN: &str = "row_start";
pub(crate) const NUM_ROWS_COLUMN: &str = "num_rows";

/// The schema of `page_lookup.lance`.
pub(crate) fn lookup_schema(value_type: &DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(MIN_COLUMN, value_type.clone(), false),
        Field::new(MAX_COLUMN, value_type.clone(), false),
        Field::new(ROW_START_COLUMN, DataType::UInt64, false),
        Field::new(NUM_ROWS_COLUMN, DataType::UInt64, false),
    ]))
}

/// Accepts sorted rows in any batch sizes; emits pages of exactly `page_rows`
/// rows (the last may be shorter, none is empty).
pub(crate) struct PageWriter {
    ctx: IndexContext,
    dir: RelativePath,
    value_type: DataType,
    page_rows: u32,
    data: Option<LanceFileWriter>,
    pending: Option<RecordBatch>,
    mins: Vec<ArrayRef>,
    maxs: Vec<ArrayRef>,
    starts: Vec<u64>,
    counts: Vec<u64>,
    rows: u64,
}

impl PageWriter {
    pub(crate) fn new(
        ctx: IndexContext,
        dir: RelativePath,
        value_type: DataType,
        page_rows: u32,
    ) -> Self {
        Self {
            ctx,
            dir,
            value_type,
            page_rows,
            data: None,
            pending: None,
            mins: Vec::new(),
            maxs: Vec::new(),
            starts: Vec::new(),
            counts: Vec::new(),
            rows: 0,
        }
    }

    /// Appends rows that sort after everything pushed before.
    pub(crate) async fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        // Re-label with the index schema: batches read back from a file may
        // carry different nullability or metadata.
        let batch = RecordBatch::try_new(data_schema(&self.value_type), batch.columns().to_vec())
            .map_err(|e| {
            Error::invalid_input(format!("btree rows do not fit the page schema: {e}"))
        })?;
        let mut buffer = match self.pending.take() {
            Some(pending) => concat_batches(&pending, &batch)?,
            None => batch,
        };
        let page = self.page_rows as usize;
        while buffer.num_rows() >= page {
            let head = buffer.slice(0, page);
            buffer = buffer.slice(page, buffer.num_rows() - page);
            self.write_page(&head).await?;
        }
        if buffer.num_rows() > 0 {
            self.pending = Some(buffer);
        }
        Ok(())
    }

    /// Flushes the last page, writes the lookup and returns the details.
    pub(crate) async fn finish(mut self) -> Result<BTreeDetails> {
        if let Some(tail) = self.pending.take() {
            self.write_page(&tail).await?;
        }
        let details = BTreeDetails {
            num_rows: self.rows,
            num_pages: self.starts.len() as u64,
            page_rows: self.page_rows,
        };
        let Some(data) = self.data.take() else {
            // No rows: an empty segment has no files.
            return Ok(details);
        };
        let summary = data.finish().await?;
        if summary.num_rows != self.rows {
            return Err(Error::corrupt(
                "btree page data",
                format!(
                    "wrote {} rows, file reports {}",
                    self.rows, summary.num_rows
                ),
            ));
        }
        self.write_lookup().await?;
        Ok(details)
    }

    async fn write_page(&mut self, page: &RecordBatch) -> Result<()> {
        let n = page.num_rows();
        if n == 0 {
            return Ok(());
        }
        let data = match self.data.as_mut() {
            Some(data) => data,
            None => {
                let path = self.dir.join(PAGE_DATA_FILE)?;
                let schema = data_schema(&self.value_type);
                self.data
                    .insert(LanceFileWriter::create(&self.ctx.store, &path, schema).await?)
            }
        };
        data.write(page).await?;
        let values = page.column(0);
        // Copy the bounds out: a slice would keep the whole page's value
        // buffer alive until the lookup is written (every row of the segment).
        self.mins.push(detached(&values.slice(0, 1))?);
        self.maxs.push(detached(&values.slice(n - 1, 1))?);
        self.starts.push(self.rows);
        self.counts.push(n as u64);
        self.rows += n as u64;
        Ok(())
    }

    async fn write_lookup(&mut self) -> Result<()> {
        let schema = lookup_schema(&self.value_type);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                concat(&self.mins)?,
                concat(&self.maxs)?,
                Arc::new(UInt64Array::from(std::mem::take(&mut self.starts))),
                Arc::new(UInt64Array::from(std::mem::take(&mut self.counts))),
            ],
        )
        .map_err(|e| Error::external("assembling the btree page lookup", e))?;
        let path = self.dir.join(PAGE_LOOKUP_FILE)?;
        let mut writer = LanceFileWriter::create(&self.ctx.store, &path, schema).await?;
        writer.write(&batch).await?;
        writer.finish().await?;
        Ok(())
    }
}

/// A copy of `array` that owns its (small) buffers.
fn detached(array: &ArrayRef) -> Result<ArrayRef> {
    arrow::compute::concat(&[array.as_ref()])
        .map_err(|e| Error::external("copying btree page bounds", e))
}

fn concat_batches(a: &RecordBatch, b: &RecordBatch) -> Result<RecordBatch> {
    arrow::compute::concat_batches(&a.schema(), [a, b])
        .map_err(|e| Error::external("buffering btree rows", e))
}
