//! Printing rows and summaries.

use std::fmt;
use std::io::{ErrorKind, Write};

use std::sync::Arc;

use arrow::util::display::{ArrayFormatter, FormatOptions};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use refract_core::{Error, Result};

use crate::args::RowFormat;

/// Writes `text` to standard output. A closed pipe (`refract scan … | head`)
/// ends the process quietly with status 0: the reader has all it wanted, and
/// a line is printed only after the work it reports has committed or failed,
/// so the exit never interrupts a commit. Any other write
/// error ends the process with status 1 and a message. `println!` would
/// panic on both.
pub fn write_stdout(text: fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("error: writing to standard output: {e}");
            std::process::exit(1);
        }
    }
}

/// `println!` through [`write_stdout`], so a closed pipe is not a panic.
#[macro_export]
macro_rules! out {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Renders `batches` in `format` to a string (no trailing newline for tables).
///
/// # Errors
/// External when Arrow cannot format or write the rows.
pub fn render_rows(batches: &[RecordBatch], format: RowFormat) -> Result<String> {
    match format {
        RowFormat::Table => arrow::util::pretty::pretty_format_batches(batches)
            .map(|table| table.to_string())
            .map_err(|e| Error::external("formatting rows", e)),
        RowFormat::Json => {
            let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
            for batch in batches {
                writer
                    .write(batch)
                    .map_err(|e| Error::external("writing JSON rows", e))?;
            }
            writer
                .finish()
                .map_err(|e| Error::external("writing JSON rows", e))?;
            utf8(writer.into_inner())
        }
        RowFormat::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(Vec::new());
            for batch in batches {
                writer
                    .write(&nested_as_text(batch)?)
                    .map_err(|e| Error::external("writing CSV rows", e))?;
            }
            utf8(writer.into_inner())
        }
    }
}

/// `batch` with every nested column (vectors, lists, structs) rendered as
/// text, e.g. `[0.5, -1.0]`, which CSV cannot hold otherwise; the CSV writer
/// quotes the values that contain commas. Null stays an empty field.
fn nested_as_text(batch: &RecordBatch) -> Result<RecordBatch> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| f.data_type().is_nested())
    {
        return Ok(batch.clone());
    }
    let options = FormatOptions::default().with_null("");
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if !field.data_type().is_nested() {
            fields.push(field.clone());
            columns.push(column.clone());
            continue;
        }
        let formatter = ArrayFormatter::try_new(column.as_ref(), &options)
            .map_err(|e| Error::external("formatting a nested column", e))?;
        let text: StringArray = (0..column.len())
            .map(|row| {
                column
                    .is_valid(row)
                    .then(|| formatter.value(row).to_string())
            })
            .collect();
        fields.push(Arc::new(Field::new(field.name(), DataType::Utf8, true)));
        columns.push(Arc::new(text) as ArrayRef);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::external("formatting a nested column", e))
}

/// A report as pretty-printed JSON (what every `--json` prints).
///
/// # Errors
/// External when `value` cannot be serialized.
pub fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string_pretty(value).map_err(|e| Error::external("serializing the report", e))
}

fn utf8(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| Error::external("rendering rows as text", e))
}

/// Renders a two-column text table of `(label, value)` rows.
pub fn render_summary(title: &str, rows: &[(String, String)]) -> String {
    let width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    let mut out = format!("{title}\n");
    for (label, value) in rows {
        out.push_str(&format!("  {label:<width$}  {value}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    use arrow_array::Int64Array;

    fn sample() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap()
    }

    #[test]
    fn json_is_one_object_per_line() {
        let text = render_rows(&[sample()], RowFormat::Json).unwrap();
        assert_eq!(text, "{\"id\":1}\n{\"id\":2}\n");
    }

    #[test]
    fn csv_has_a_header() {
        let text = render_rows(&[sample()], RowFormat::Csv).unwrap();
        assert_eq!(text, "id\n1\n2\n");
    }

    #[test]
    fn csv_prints_vectors_as_quoted_lists() {
        let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        vectors.values().append_slice(&[0.5, -1.0]);
        vectors.append(true);
        vectors.values().append_slice(&[0.0, 0.0]);
        vectors.append(false);
        let vectors = vectors.finish();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("vec", vectors.data_type().clone(), true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(vec![1, 2])), Arc::new(vectors)],
        )
        .unwrap();
        let text = render_rows(std::slice::from_ref(&batch), RowFormat::Csv).unwrap();
        assert_eq!(text, "id,vec\n1,\"[0.5, -1.0]\"\n2,\n");
        let empty = render_rows(&[batch.slice(0, 0)], RowFormat::Csv).unwrap();
        assert_eq!(empty, "id,vec\n");
    }
}
