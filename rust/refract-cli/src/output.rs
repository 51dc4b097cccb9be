//! Printing rows and summaries.

use arrow_array::RecordBatch;
use refract_core::{Error, Result};

use crate::args::RowFormat;

/// Renders `batches` in `format` to a string (no trailing newline for tables).
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
                    .write(batch)
                    .map_err(|e| Error::external("writing CSV rows", e))?;
            }
            utf8(writer.into_inner())
        }
    }
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
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

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
}
