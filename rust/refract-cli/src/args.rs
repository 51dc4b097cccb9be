//! Command-line shapes of `refract`. Scripts depend on these; keep them stable.

use clap::{Parser, Subcommand, ValueEnum};

use refract_ledger::MAX_PARTITION_DESTINATIONS as MAX_DESTINATIONS;
use refract_optimize::maintain::DEFAULT_MAX_ROUNDS;

use crate::commands::location::VersionSelector;
use crate::duration::duration;
use crate::ranges::{fraction, integer, MAX_FRAGMENT_ID};

/// Refract: table maintenance for columnar data.
#[derive(Debug, Parser)]
#[command(name = "refract", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// A storage option of a cloud store, KEY=VALUE with object_store's
    /// lowercase keys (aws_endpoint, aws_region, allow_http,
    /// azure_storage_account_name, google_service_account, ...); repeatable.
    /// AWS_*, AZURE_* and GOOGLE_* environment variables fill the keys left out.
    #[arg(long = "storage-option", value_name = "KEY=VALUE", global = true, value_parser = storage_option)]
    pub storage_options: Vec<(String, String)>,
}

/// Parses one `KEY=VALUE` storage option (the key lowercased); the value is
/// never echoed (it may be a secret).
///
/// # Errors
/// A message naming the expected form when `text` has no `=` or no key.
pub fn storage_option(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_ascii_lowercase(), value.to_string()))
        }
        _ => Err("expected KEY=VALUE (e.g. aws_region=us-east-1)".to_string()),
    }
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
        #[arg(long, conflicts_with = "uri")]
        dir: Option<std::path::PathBuf>,
        /// Dataset URI for the demo instead of a directory, e.g. s3://bucket/prefix
        /// (configured by --storage-option and the environment); must hold no dataset.
        #[arg(long)]
        uri: Option<String>,
    },
    /// Append synthetic rows, creating the dataset if absent.
    Append {
        /// Dataset URI (local path, file://, memory://, s3://, az://, abfs://, abfss://, gs://).
        uri: String,
        /// Number of rows to append.
        #[arg(long, allow_negative_numbers = true, value_parser = integer(1u64, None))]
        rows: u64,
        /// Rows per fragment (default: everything in one fragment, up to 1,048,576).
        #[arg(long, allow_negative_numbers = true, value_parser = integer(1u64, None))]
        fragment_rows: Option<u64>,
        /// First id.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        start: i64,
        /// Dimension of the `vec` column.
        #[arg(
            long,
            default_value_t = crate::synthetic::DEFAULT_DIM,
            allow_negative_numbers = true,
            value_parser = integer(1i32, Some(crate::synthetic::MAX_DIM))
        )]
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
        #[arg(long, allow_negative_numbers = true, value_parser = integer(0u64, None))]
        limit: Option<u64>,
        /// Add the `_rowaddr` column.
        #[arg(long)]
        with_row_address: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = RowFormat::Table)]
        format: RowFormat,
        /// Which version to read.
        #[command(flatten)]
        at: TimeTravelArgs,
    },
    /// Describe the current version: flags, fragments, indices.
    Inspect {
        /// Dataset URI.
        uri: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Which version to describe.
        #[command(flatten)]
        at: TimeTravelArgs,
    },
    /// List versions.
    Versions {
        /// Dataset URI.
        uri: String,
    },
    /// Read every file the latest version references and check it against
    /// its recorded checksum; exit 1 when any is damaged or missing.
    Verify {
        /// Dataset URI.
        uri: String,
        /// Check the files of every listed version, not only the latest.
        #[arg(long)]
        all_versions: bool,
        /// Also compare every index segment, entry for entry, with the data
        /// of the fragments it serves (reads all indexed columns).
        #[arg(long)]
        deep: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Compact fragments (plan, execute and commit in one go).
    Compact {
        /// Dataset URI.
        uri: String,
        /// Compaction options.
        #[command(flatten)]
        options: CompactArgs,
        /// Repeat until a round commits nothing; one line per round.
        #[arg(long)]
        until_noop: bool,
        /// Most rounds with --until-noop.
        #[arg(
            long,
            default_value_t = DEFAULT_MAX_ROUNDS,
            allow_negative_numbers = true,
            value_parser = integer(1usize, None)
        )]
        max_rounds: usize,
        /// Print the metrics as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Plan a compaction and print the plan as JSON (for distributed execution).
    CompactPlan {
        /// Dataset URI.
        uri: String,
        /// Compaction options.
        #[command(flatten)]
        options: CompactArgs,
    },
    /// Execute one task of a plan and print its result as JSON.
    CompactExec {
        /// Dataset URI.
        uri: String,
        /// The plan file written by `compact-plan`.
        plan: std::path::PathBuf,
        /// Index of the task to run.
        #[arg(long, allow_negative_numbers = true, value_parser = integer(0usize, None))]
        task: usize,
    },
    /// Build an index over every fragment.
    CreateIndex {
        /// Dataset URI.
        uri: String,
        /// Index name.
        #[arg(long)]
        name: String,
        /// Column to index.
        #[arg(long)]
        column: String,
        /// Index type.
        #[arg(long = "type", value_enum)]
        index_type: IndexKind,
        /// ivf_flat: number of partitions (at most the table's live rows).
        #[arg(long, allow_negative_numbers = true, value_parser = integer(1u32, None))]
        partitions: Option<u32>,
    },
    /// Add a segment for fragments no segment of the index covers yet.
    OptimizeIndices {
        /// Dataset URI.
        uri: String,
        /// Only this index (default: every user index).
        #[arg(long)]
        name: Option<String>,
    },
    /// Query with indices: a filter and/or a nearest-neighbour search.
    Query {
        /// Dataset URI.
        uri: String,
        /// Filter expression.
        #[arg(long)]
        filter: Option<String>,
        /// Vector column for nearest-neighbour search.
        #[arg(long)]
        nearest: Option<String>,
        /// Query vector, comma-separated.
        #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
        vector: Option<Vec<f32>>,
        /// Neighbours to return.
        #[arg(
            long,
            default_value_t = 10,
            allow_negative_numbers = true,
            value_parser = integer(1usize, None)
        )]
        k: usize,
        /// Partitions to probe.
        #[arg(
            long,
            default_value_t = 8,
            allow_negative_numbers = true,
            value_parser = integer(1usize, None)
        )]
        nprobes: usize,
        /// Comma-separated columns to print.
        #[arg(long, value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// Print how the query was served.
        #[arg(long)]
        explain: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = RowFormat::Table)]
        format: RowFormat,
        /// Which version to query.
        #[command(flatten)]
        at: TimeTravelArgs,
    },
    /// Stable-partition fragments into destinations by a column (hash buckets).
    Partition {
        /// Dataset URI.
        uri: String,
        /// Column whose value picks the destination.
        #[arg(long)]
        by: String,
        /// Number of destinations.
        #[arg(
            long,
            allow_negative_numbers = true,
            value_parser = integer(1u32, Some(MAX_DESTINATIONS))
        )]
        destinations: u32,
        /// A contiguous run of fragment ids (default: every fragment).
        #[arg(
            long,
            value_delimiter = ',',
            allow_negative_numbers = true,
            value_parser = integer(0u64, Some(MAX_FRAGMENT_ID))
        )]
        fragments: Option<Vec<u64>>,
        /// Print the metrics as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describe the fragment-reuse-index ledger.
    Fri {
        /// Dataset URI.
        uri: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Which version's ledger to describe.
        #[command(flatten)]
        at: TimeTravelArgs,
    },
    /// Rewrite eligible index segments onto current row addresses.
    Remap {
        /// Dataset URI.
        uri: String,
        /// Only this index.
        #[arg(long)]
        name: Option<String>,
        /// Memory budget of the materialized fallback for legacy plugins.
        #[arg(long, allow_negative_numbers = true, value_parser = integer(1u64, None))]
        budget_bytes: Option<u64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove FRI history no index segment still needs.
    Trim {
        /// Dataset URI.
        uri: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Compaction, then remap, then trim; optionally until nothing changes.
    Maintain {
        /// Dataset URI.
        uri: String,
        /// Compaction options.
        #[command(flatten)]
        options: CompactArgs,
        /// Repeat rounds until one commits nothing.
        #[arg(long)]
        until_noop: bool,
        /// Most rounds with --until-noop.
        #[arg(
            long,
            default_value_t = DEFAULT_MAX_ROUNDS,
            allow_negative_numbers = true,
            value_parser = integer(1usize, None)
        )]
        max_rounds: usize,
        /// Also index live fragments no segment stores directly.
        #[arg(long)]
        reindex: bool,
        /// After the rounds, expire versions older than this (90s, 30m, 12h,
        /// 7d, 2w) that --keep-last does not keep; tagged versions stay.
        #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
        older_than: Option<std::time::Duration>,
        /// After the rounds, keep only the newest N versions (and those
        /// --older-than keeps, and tagged ones).
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = integer(1u64, None))]
        keep_last: Option<u64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Commit task results (in any order) as one compaction.
    CompactCommit {
        /// Dataset URI.
        uri: String,
        /// Result files written by `compact-exec`.
        results: Vec<std::path::PathBuf>,
        /// Print the metrics as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Expire old versions and delete the files only they referenced; the
    /// latest version and every tagged version are always kept. Without
    /// --older-than and --keep-last, versions younger than 14 days are kept.
    Cleanup {
        /// Dataset URI.
        uri: String,
        /// Keep versions committed less than this long ago (90s, 30m, 12h,
        /// 7d, 2w); with --orphans, also the minimum age of an orphaned file
        /// (default 14d there).
        #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
        older_than: Option<std::time::Duration>,
        /// Keep the newest N versions.
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = integer(1u64, None))]
        keep_last: Option<u64>,
        /// List what would be removed without removing anything.
        #[arg(long, conflicts_with = "orphans")]
        dry_run: bool,
        /// Also delete files no version references (left by failed or
        /// abandoned writes) that are older than --older-than (default 14d).
        #[arg(long)]
        orphans: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create, delete or list tags: named versions that cleanup keeps.
    Tag {
        /// What to do with tags.
        #[command(subcommand)]
        action: TagAction,
    },
    /// Commit a new version whose content equals an earlier one.
    #[command(group(clap::ArgGroup::new("restore_target").args(["version", "tag"]).required(true)))]
    Restore {
        /// Dataset URI.
        uri: String,
        /// The version to restore.
        #[command(flatten)]
        target: TimeTravelArgs,
    },
}

/// `refract tag` subcommands.
#[derive(Debug, Subcommand)]
pub enum TagAction {
    /// Name a version (default: the latest).
    Create {
        /// Dataset URI.
        uri: String,
        /// Tag name: 1 to 128 ASCII letters, digits, '.', '_' or '-', not
        /// starting with '.'.
        name: String,
        /// The version to tag (default: the latest).
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = integer(1u64, None))]
        version: Option<u64>,
    },
    /// Remove a tag (the version stays until cleanup expires it).
    Delete {
        /// Dataset URI.
        uri: String,
        /// Tag name.
        name: String,
    },
    /// List every tag and the version it names.
    List {
        /// Dataset URI.
        uri: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Time travel: which committed version a command reads (default: the latest).
#[derive(Debug, Clone, Default, clap::Args)]
#[group(multiple = false)]
pub struct TimeTravelArgs {
    /// Read this version instead of the latest.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = integer(1u64, None))]
    pub version: Option<u64>,
    /// Read the version this tag names.
    #[arg(long, value_name = "NAME")]
    pub tag: Option<String>,
}

impl TimeTravelArgs {
    /// The version named, if any (clap makes `--version` and `--tag`
    /// mutually exclusive).
    pub fn selector(self) -> Option<VersionSelector> {
        match (self.version, self.tag) {
            (Some(version), _) => Some(VersionSelector::Number(version)),
            (None, Some(name)) => Some(VersionSelector::Tag(name)),
            (None, None) => None,
        }
    }
}

/// Built-in index types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IndexKind {
    /// Sorted pages with a page lookup: equality, range, IN.
    Btree,
    /// Value → row bitmap: equality, IN, IS NULL.
    Bitmap,
    /// Trigram postings: `contains(col, 'x')`.
    Ngram,
    /// k-means partitions of vectors: nearest neighbours.
    #[value(name = "ivf_flat", alias = "ivf-flat")]
    IvfFlat,
}

impl IndexKind {
    /// The registry name of the type.
    pub fn type_name(self) -> &'static str {
        match self {
            IndexKind::Btree => "btree",
            IndexKind::Bitmap => "bitmap",
            IndexKind::Ngram => "ngram",
            IndexKind::IvfFlat => "ivf_flat",
        }
    }
}

/// Compaction options shared by `compact` and `compact-plan`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CompactArgs {
    /// Target rows per output fragment.
    #[arg(long, allow_negative_numbers = true, value_parser = integer(1u64, None))]
    pub target_rows: Option<u64>,
    /// Most source fragments one run may rewrite.
    #[arg(long, allow_negative_numbers = true, value_parser = integer(1u64, None))]
    pub max_source_fragments: Option<u64>,
    /// Most live source rows one run may rewrite.
    #[arg(long, allow_negative_numbers = true, value_parser = integer(1u64, None))]
    pub max_source_rows: Option<u64>,
    /// Most source bytes one run may rewrite.
    #[arg(long, allow_negative_numbers = true, value_parser = integer(1u64, None))]
    pub max_source_bytes: Option<u64>,
    /// Fragment ids never to rewrite.
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        value_parser = integer(0u64, Some(MAX_FRAGMENT_ID))
    )]
    pub exclude: Vec<u64>,
    /// Deleted fraction above which a fragment compacts itself.
    #[arg(long, allow_negative_numbers = true, value_parser = fraction(0.0, 1.0))]
    pub materialize_deletions_threshold: Option<f64>,
    /// Do not rewrite fragments just to drop deleted rows.
    #[arg(long)]
    pub no_materialize_deletions: bool,
    /// Leave indices untouched and record the rewrite in the FRI ledger.
    #[arg(long)]
    pub defer_index_remap: bool,
    /// Always decode and re-encode rows, never copy encoded pages.
    #[arg(long)]
    pub no_binary_copy: bool,
}
