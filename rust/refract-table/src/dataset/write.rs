//! Writing: new fragments from a stream of batches, and `append`.

use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use futures::{Stream, StreamExt};
use refract_core::{Error, Result};
use uuid::Uuid;

use super::scan::ROW_ADDRESS_COLUMN;
use super::Dataset;
use crate::format::{DataFile, Fragment};
use crate::io::PageLayout;
use crate::io::{data_file_path, LanceFileWriter};

/// How new data files are cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// Rows per data file (and so per fragment); default 1,048,576.
    pub max_rows_per_file: u64,
    /// Rows per batch handed to the Lance writer; default 65,536.
    pub max_rows_per_group: u64,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            max_rows_per_file: 1_048_576,
            max_rows_per_group: 65_536,
        }
    }
}

impl WriteOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_rows_per_file == 0 || self.max_rows_per_file > crate::format::MAX_PHYSICAL_ROWS
        {
            return Err(Error::invalid_input(format!(
                "max_rows_per_file must be in 1..=2^32, got {}",
                self.max_rows_per_file
            )));
        }
        if self.max_rows_per_group == 0 {
            return Err(Error::invalid_input(
                "max_rows_per_group must be at least 1",
            ));
        }
        Ok(())
    }
}

/// A table schema must have columns and must not use the reserved row-address name.
pub(crate) fn validate_table_schema(schema: &Schema) -> Result<()> {
    if schema.fields().is_empty() {
        return Err(Error::invalid_input(
            "a table schema needs at least one column",
        ));
    }
    if schema.column_with_name(ROW_ADDRESS_COLUMN).is_some() {
        return Err(Error::invalid_input(format!(
            "column name {ROW_ADDRESS_COLUMN} is reserved for row addresses"
        )));
    }
    Ok(())
}

/// Re-labels `batch` with the table schema when its columns match it (same
/// names and types, no nulls in non-nullable columns); InvalidInput otherwise.
pub(crate) fn conform_batch(table: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    let given = batch.schema();
    let mismatch = |detail: String| {
        Error::invalid_input(format!(
            "batch schema does not match the table schema: {detail}"
        ))
    };
    if given.fields().len() != table.fields().len() {
        return Err(mismatch(format!(
            "{} columns given, the table has {}",
            given.fields().len(),
            table.fields().len()
        )));
    }
    for ((expected, actual), column) in table
        .fields()
        .iter()
        .zip(given.fields().iter())
        .zip(batch.columns())
    {
        if expected.name() != actual.name() {
            return Err(mismatch(format!(
                "column '{}' where '{}' was expected",
                actual.name(),
                expected.name()
            )));
        }
        if !expected.data_type().equals_datatype(actual.data_type()) {
            return Err(mismatch(format!(
                "column '{}' has type {} but the table has {}",
                actual.name(),
                actual.data_type(),
                expected.data_type()
            )));
        }
        if !expected.is_nullable() && column.null_count() > 0 {
            return Err(mismatch(format!(
                "column '{}' is not nullable but the batch has nulls",
                actual.name()
            )));
        }
    }
    RecordBatch::try_new(table.clone(), batch.columns().to_vec())
        .map_err(|err| mismatch(err.to_string()))
}

/// One data file being filled.
struct OpenFile {
    writer: LanceFileWriter,
    path: crate::io::RelativePath,
    rows: u64,
}

impl Dataset {
    /// Writes `batches` as new, uncommitted fragments (id 0), cutting a new file
    /// every `max_rows_per_file` rows. Commit them with
    /// [`Operation::Append`](crate::transaction::Operation::Append) or a rewrite.
    ///
    /// # Errors
    /// InvalidInput for out-of-range `options` or a batch that does not match the
    /// table schema; any error `batches` yields; External when writing a data file
    /// fails; Corrupt when a finished file reports another row count.
    pub async fn write_fragments(
        &self,
        batches: impl Stream<Item = Result<RecordBatch>> + Send,
        options: &WriteOptions,
    ) -> Result<Vec<Fragment>> {
        options.validate()?;
        let schema = self.schema();
        let mut batches = std::pin::pin!(batches);
        let mut fragments = Vec::new();
        let mut current: Option<OpenFile> = None;
        while let Some(batch) = batches.next().await {
            let batch = conform_batch(&schema, &batch?)?;
            let mut offset = 0usize;
            while offset < batch.num_rows() {
                let file = match current.as_mut() {
                    Some(file) => file,
                    None => current.insert(self.open_data_file().await?),
                };
                let room = options.max_rows_per_file - file.rows;
                let take = (batch.num_rows() - offset)
                    .min(usize::try_from(room).unwrap_or(usize::MAX))
                    .min(usize::try_from(options.max_rows_per_group).unwrap_or(usize::MAX));
                file.writer.write(&batch.slice(offset, take)).await?;
                file.rows += take as u64;
                offset += take;
                if file.rows >= options.max_rows_per_file {
                    if let Some(full) = current.take() {
                        fragments.push(finish_file(full).await?);
                    }
                }
            }
        }
        if let Some(last) = current.take() {
            fragments.push(finish_file(last).await?);
        }
        Ok(fragments)
    }

    async fn open_data_file(&self) -> Result<OpenFile> {
        let path = data_file_path(&format!("{}.lance", Uuid::new_v4()))?;
        let writer = LanceFileWriter::create_data_file(
            &self.store,
            &path,
            &self.manifest().lance.schema,
            PageLayout::default(),
        )
        .await?;
        Ok(OpenFile {
            writer,
            path,
            rows: 0,
        })
    }
}

async fn finish_file(file: OpenFile) -> Result<Fragment> {
    let summary = file.writer.finish().await?;
    if summary.num_rows != file.rows {
        return Err(Error::corrupt(
            "data file",
            format!(
                "{} reports {} rows after writing {}",
                file.path, summary.num_rows, file.rows
            ),
        ));
    }
    Ok(Fragment {
        id: 0,
        files: vec![DataFile::written(file.path, &summary)],
        physical_rows: summary.num_rows,
        deletion_file: None,
    })
}
