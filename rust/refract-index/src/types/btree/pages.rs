//! Writes sorted `(value, _rowaddr)` rows as fixed-size pages of
//! `values.lance` and `addresses.lance` plus the page lookup. Used by build
//! and by the full-rewrite remap, so such a segment gets a freshly cut lookup
//! (no empty pages, exact min/max, no tombstones).

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use refract_core::{Error, Result};
use refract_table::io::PageLayout;
use refract_table::io::{LanceFileWriter, RelativePath};

use super::files::values_schema;
use super::{
    concat, data_schema, BTreeDetails, ADDRESSES_FILE, BTREE_VERSION, PAGE_LOOKUP_FILE, VALUES_FILE,
};
use crate::types::addresses::addresses_schema;
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
    files: Option<DataWriters>,
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
            files: None,
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
            version: BTREE_VERSION,
            tombstones: 0,
        };
        let Some(files) = self.files.take() else {
            // No rows: an empty segment has no files.
            return Ok(details);
        };
        files.finish(self.rows).await?;
        self.write_lookup().await?;
        Ok(details)
    }

    async fn write_page(&mut self, page: &RecordBatch) -> Result<()> {
        let n = page.num_rows();
        if n == 0 {
            return Ok(());
        }
        let files = match self.files.as_mut() {
            Some(files) => files,
            None => {
                let files = DataWriters::create(&self.ctx, &self.dir, &self.value_type).await?;
                self.files.insert(files)
            }
        };
        files.write(page).await?;
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
        let mut writer =
            LanceFileWriter::create(&self.ctx.store, &path, schema, PageLayout::default()).await?;
        writer.write(&batch).await?;
        writer.finish().await?;
        Ok(())
    }
}

/// The writers of `values.lance` and `addresses.lance`, fed page by page.
struct DataWriters {
    values: LanceFileWriter,
    addresses: LanceFileWriter,
}

impl DataWriters {
    async fn create(ctx: &IndexContext, dir: &RelativePath, value_type: &DataType) -> Result<Self> {
        let values = LanceFileWriter::create(
            &ctx.store,
            &dir.join(VALUES_FILE)?,
            values_schema(value_type),
            PageLayout::default(),
        )
        .await?;
        let addresses = match LanceFileWriter::create(
            &ctx.store,
            &dir.join(ADDRESSES_FILE)?,
            addresses_schema(),
            PageLayout::default(),
        )
        .await
        {
            Ok(addresses) => addresses,
            Err(err) => {
                values.abort().await;
                return Err(err);
            }
        };
        Ok(DataWriters { values, addresses })
    }

    /// Writes the two columns of a `(value, _rowaddr)` page. Pages come from
    /// [`PageWriter::push`], which labels them with the two-column
    /// `data_schema`, so columns 0 and 1 exist.
    async fn write(&mut self, page: &RecordBatch) -> Result<()> {
        let values = RecordBatch::try_new(self.values.schema(), vec![page.column(0).clone()])
            .map_err(|e| Error::external("assembling btree values", e))?;
        let addresses = RecordBatch::try_new(self.addresses.schema(), vec![page.column(1).clone()])
            .map_err(|e| Error::external("assembling btree addresses", e))?;
        self.values.write(&values).await?;
        self.addresses.write(&addresses).await
    }

    /// Completes both files and checks they hold `rows` rows.
    async fn finish(self, rows: u64) -> Result<()> {
        let values = self.values.finish().await?;
        let addresses = self.addresses.finish().await?;
        for (what, written) in [
            ("values", values.num_rows),
            ("addresses", addresses.num_rows),
        ] {
            if written != rows {
                return Err(Error::corrupt(
                    format!("btree {what}"),
                    format!("wrote {rows} rows, the file reports {written}"),
                ));
            }
        }
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
