//! Command-line shapes of `refract`. Scripts depend on these; keep them stable.

use clap::{Parser, Subcommand, ValueEnum};

/// Refract: table maintenance for columnar data.
#[derive(Debug, Parser)]
#[command(name = "refract", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format of row-returning commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RowFormat {
    /// A pretty-printed table.
    Table,
    /// One JSON object per row, one per line.
    Json,
    /// Comma-separated values with a header.
    Csv,
}

/// Every `refract` subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the end-to-end demo on a local dataset.
    Demo {
        /// Directory for the demo dataset (default: a fresh temporary directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Append synthetic rows, creating the dataset if absent.
    Append {
        /// Dataset URI (local path, file://, memory://).
        uri: String,
        /// Number of rows to append.
        #[arg(long)]
        rows: u64,
        /// Rows per fragment (default: everything in one fragment, up to 1,048,576).
        #[arg(long)]
        fragment_rows: Option<u64>,
        /// First id.
        #[arg(long, default_value_t = 0)]
        start: i64,
        /// Dimension of the `vec` column.
        #[arg(long, default_value_t = crate::synthetic::DEFAULT_DIM)]
        dim: i32,
    },
    /// Delete the rows matching a filter.
    Delete {
        /// Dataset URI.
        uri: String,
        /// Filter expression, e.g. "id % 10 = 3".
        #[arg(long)]
        filter: String,
    },
    /// Print rows.
    Scan {
        /// Dataset URI.
        uri: String,
        /// Comma-separated columns to print.
        #[arg(long, value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// Filter expression.
        #[arg(long)]
        filter: Option<String>,
        /// Maximum number of rows.
        #[arg(long)]
        limit: Option<u64>,
        /// Add the `_rowaddr` column.
        #[arg(long)]
        with_row_address: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = RowFormat::Table)]
        format: RowFormat,
    },
    /// Describe the current version: flags, fragments, indices.
    Inspect {
        /// Dataset URI.
        uri: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List versions.
    Versions {
        /// Dataset URI.
        uri: String,
    },
}
