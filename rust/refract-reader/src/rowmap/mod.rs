//! Stable-partition row maps: `_fri/<map_id>/stable_partition.lance`.
//!
//! One nullable UInt16 label per physical source row, in source order (sources
//! in transition order, offsets ascending); null marks a deleted row. Labels are
//! grouped in blocks of 65,536 rows, and a cumulative counts matrix (per block,
//! per destination) in the file's global buffer turns a label into a destination
//! offset without reading any other block. See `counts.rs` for the matrix.
//!
//! Reading costs few requests (see `file.rs`): opening reads one tail of the
//! file holding the metadata and the counts (two GETs at most), and loading a
//! label chunk — or, with the chunk cache disabled, a block — is one ranged GET
//! of the pages it needs, which the writer lays out one per block.
//!
//! The writer lives here too so the format has one owner; `partition_fragments`
//! (refract-optimize) calls it.

pub mod counts;
mod file;
pub mod labels;
pub mod reader;
mod resident;
pub mod route;
mod span;
pub mod writer;

pub use counts::{CountsMatrix, BLOCK_ROWS};
pub use reader::{ChunkCacheMode, RowMapReader, RowMapSource, SourceCursor, BLOCKS_PER_CHUNK};
pub use resident::ResidentPartition;
pub use route::{RouteBuffer, ROUTE_BATCH_ROWS};
pub use writer::RowMapWriter;

use refract_core::Result;
use refract_table::io::paths::RelativePath;
use uuid::Uuid;

/// Schema metadata key naming the global buffer that holds the counts matrix.
pub const COUNTS_BUFFER_KEY: &str = "refract:row_map_counts_buffer";

/// Name of the label column.
pub const LABEL_COLUMN: &str = "label";

/// The row-map file of `map_id`.
pub fn row_map_path(map_id: &Uuid) -> Result<RelativePath> {
    RelativePath::parse(&format!("_fri/{map_id}/stable_partition.lance"))
}
