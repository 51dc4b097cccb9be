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
//! This module owns the format (the layout above and the counts matrix); the
//! writer lives where row maps are written, next to `partition_fragments`
//! (`refract_optimize::fri::RowMapWriter`).

mod counts;
mod file;
mod labels;
mod reader;
mod resident;
mod route;
mod span;

pub use counts::{CountsBuilder, CountsMatrix, BLOCK_ROWS};
pub use reader::{ChunkCacheMode, RowMapReader, RowMapSource, BLOCKS_PER_CHUNK};

// The translators' performance internals: crate-private, public to this
// crate's tests with `testing`.
#[cfg(feature = "testing")]
pub use reader::SourceCursor;
#[cfg(not(feature = "testing"))]
pub(crate) use reader::SourceCursor;
#[cfg(feature = "testing")]
pub use resident::ResidentPartition;
#[cfg(not(feature = "testing"))]
pub(crate) use resident::ResidentPartition;
#[cfg(not(feature = "testing"))]
pub(crate) use route::RouteBuffer;
#[cfg(feature = "testing")]
pub use route::{RouteBuffer, ROUTE_BATCH_ROWS};

use refract_core::Error;
use refract_table::io::paths::RelativePath;

/// Schema metadata key naming the global buffer that holds the counts matrix
/// (its index as a decimal string), as Lance names it.
pub const COUNTS_BUFFER_KEY: &str = "lance:stable_partition:counts_buffer_index";

/// Name of the label column.
pub const LABEL_COLUMN: &str = "label";

pub use refract_table::io::paths::row_map_path;

/// What the format's checks (counts, labels, label units, routing) call the
/// thing they found damaged, not knowing which file it came from.
const UNNAMED: [&str; 2] = ["row map", counts::WHAT];

/// Names the row-map file at `path` in a Corrupt error the format's checks
/// raised while reading it (see [`UNNAMED`]); each public entry point of the
/// reader passes its errors through here. Other errors — those of a caller's
/// callback among them — pass unchanged.
pub(crate) fn name_file(path: &RelativePath, err: Error) -> Error {
    match err {
        Error::Corrupt { what, message } if UNNAMED.contains(&what.as_str()) => {
            let message = if what == "row map" {
                message
            } else {
                format!("{what}: {message}")
            };
            Error::corrupt(format!("row map {path}"), message)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    #[test]
    fn the_formats_unnamed_corruption_gains_the_file() {
        let path = row_map_path(&Uuid::nil());
        let named = |err: Error| name_file(&path, err).to_string();
        assert_eq!(
            named(Error::corrupt("row map", "label 7 is not below 3")),
            format!("corrupt row map {path}: label 7 is not below 3")
        );
        assert_eq!(
            named(Error::corrupt(counts::WHAT, "bad magic")),
            format!("corrupt row map {path}: row-map counts: bad magic")
        );
        // Errors of other origins and kinds are left alone.
        for err in [
            Error::corrupt(
                "FRI ledger",
                "a translated address went back in lineage order",
            ),
            Error::invalid_input("address 3:9 is beyond the source's 5 rows"),
        ] {
            let before = err.to_string();
            assert_eq!(named(err), before);
        }
    }
}
