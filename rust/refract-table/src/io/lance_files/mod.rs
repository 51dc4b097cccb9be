//! Generic Lance file I/O for data files, index files and row maps.
//!
//! All I/O goes through [`DatasetStore::lance_store`], i.e. through the counting
//! store, so every Lance request is visible to request counting and fault
//! injection. Files are written in the stable Lance v2.2 format.
//!
//! Error mapping: a missing file is NotFound; an object-store failure is
//! External; a file Lance cannot decode is Corrupt.

use std::error::Error as StdError;
use std::sync::LazyLock;

use lance_core::cache::LanceCache;
use lance_file::version::ConcreteFileVersion;

/// I/O budget of a streaming reader ([`ReadMode::Streaming`]) for
/// index remaps, which consume the old file in small windows.
pub const STREAMING_READ_BUFFER_BYTES: u64 = 8 * 1024 * 1024;
/// Page buffer per column of a streaming writer
/// ([`PageLayout::Streaming`]) for index remaps.
pub const STREAMING_PAGE_BYTES: u64 = 1024 * 1024;

/// Bytes one reader may have in flight. lance's `max_bandwidth` default is
/// 32 MiB per I/O thread (256 MiB here), which an index remap streaming an old
/// segment fills entirely: its peak RSS followed that budget, not the rows.
/// 64 MiB still covers several 8 MiB pages per column.
pub const READ_BUFFER_BYTES: u64 = 64 * 1024 * 1024;
/// File bytes one read of a row range schedules at once. Lance plans every
/// chunk of a read before decoding it (about 2 % of the bytes planned, kept
/// while the read runs), so a long range is read as consecutive windows of
/// about this many bytes: an index build streaming a 1 GB spill file held
/// 26 MB of plans, growing with the file.
pub const READ_WINDOW_BYTES: u64 = 64 * 1024 * 1024;
use lance_io::utils::CachedFileSize;

use super::upload::StreamingUpload;
use lance_io::ReadBatchParams;
use refract_core::{Error, Result};

use super::checksumming_writer::{ChecksumHandle, ChecksummingWriter};
use super::paths::RelativePath;
use super::recorded_files::RecordedFile;
use super::store::DatasetStore;
use super::verifying_store::verification_failure;
use crate::task::AbortOnDrop;
use refract_core::checksum::FileChecksum;

/// The Lance file format version Refract writes.
pub(crate) const FILE_VERSION: ConcreteFileVersion = ConcreteFileVersion::V2_2;
/// The version of the data files Refract writes (the manifest's default).
pub const DATA_FILE_VERSION: ConcreteFileVersion = FILE_VERSION;
/// Rows per batch for [`LanceFileReader::read_all`] and [`LanceFileReader::take`].
const DEFAULT_BATCH_ROWS: u32 = 65_536;
/// Size of the fixed Lance v2 footer; no valid file is shorter.
const LANCE_FOOTER_LEN: u64 = 40;
/// Batches decoded ahead of the consumer.
const BATCH_READAHEAD: u32 = 4;

/// Where a reader keeps the file's metadata (footer, column and page metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetadataCaching {
    /// The store's shared Lance cache.
    Store,
    /// Nowhere: the reader holds what it needs and drops it with itself.
    None,
}

/// A zero-capacity Lance cache shared by uncached readers (a fresh one per
/// reader would build a cache structure per file for nothing).
static NO_METADATA_CACHE: LazyLock<LanceCache> = LazyLock::new(LanceCache::no_cache);

/// Largest file [`ReadMode::WholeFile`] fetches whole.
pub const PREFETCH_LIMIT_BYTES: u64 = 4 << 20;
/// Block size Lance assumes for a prefetched file: reads of it cost
/// nothing, so coalesce generously.
const PREFETCH_BLOCK_SIZE: usize = 64 << 10;
/// I/O parallelism Lance assumes for a prefetched file.
const PREFETCH_IO_PARALLELISM: usize = 8;

/// What a finished Lance file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanceFileSummary {
    /// Rows written.
    pub num_rows: u64,
    /// File size in bytes.
    pub size_bytes: u64,
    /// Block checksums of the file's bytes, taken as they were written.
    pub checksum: FileChecksum,
    /// (field id, column) of every field the file stores.
    pub field_columns: Vec<(u32, u32)>,
}

/// True if some error in the source chain of `err` satisfies `matches`.
fn caused_by(
    err: &(dyn StdError + 'static),
    matches: impl Fn(&(dyn StdError + 'static)) -> bool,
) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if matches(e) {
            return true;
        }
        current = e.source();
    }
    false
}

/// True if an object-store error is somewhere in the source chain of `err`.
fn caused_by_object_store(err: &(dyn StdError + 'static)) -> bool {
    caused_by(err, |e| e.is::<object_store::Error>())
}

/// True if a task Lance spawned to decode panicked: Lance reports the join
/// error, and only bytes it cannot decode make its decoders panic.
fn caused_by_decoder_panic(err: &(dyn StdError + 'static)) -> bool {
    caused_by(err, |e| {
        e.downcast_ref::<tokio::task::JoinError>()
            .is_some_and(tokio::task::JoinError::is_panic)
    })
}

/// Maps a Lance error raised while doing `action` on `path`: the one place
/// Lance errors become Refract errors. `undecodable_is_corrupt` marks
/// failures that can only come from the file's bytes (opening a file decodes
/// nothing but its footer and metadata). A missing file is NotFound, a store
/// failure External, damage Corrupt naming the dataset-relative file; Lance's
/// text is cleaned of its source locations ([`refract_core::error::clean_text`]).
pub fn lance_error(
    action: &str,
    path: &RelativePath,
    err: lance_core::Error,
    undecodable_is_corrupt: bool,
) -> Error {
    if err.is_not_found() {
        return Error::not_found(format!("Lance file {path} does not exist"));
    }
    if let Some(damage) = verification_failure(&err) {
        return damage;
    }
    if caused_by_decoder_panic(&err) {
        return decoder_panicked(action, path);
    }
    if caused_by_object_store(&err) {
        return Error::external(format!("{action} Lance file {path}"), err);
    }
    let corrupt = matches!(err, lance_core::Error::CorruptFile { .. }) || undecodable_is_corrupt;
    if corrupt {
        Error::corrupt(format!("Lance file {path}"), err.to_string())
    } else {
        Error::external(format!("{action} Lance file {path}"), err)
    }
}

/// The one-line Corrupt error of a Lance decoder that panicked while doing
/// `action` on `path`: only bytes it cannot decode make it panic.
pub(crate) fn decoder_panicked(action: &str, path: &RelativePath) -> Error {
    Error::corrupt(
        format!("Lance file {path}"),
        format!("the Lance decoder panicked while {action} the file"),
    )
}

/// Refuses to overwrite: data and index paths are immutable (Lance caches
/// metadata by path). An existing file is InvalidInput.
pub(crate) async fn ensure_absent(store: &DatasetStore, path: &RelativePath) -> Result<()> {
    match store.head(path).await {
        Ok(_) => Err(Error::invalid_input(format!(
            "Lance file {path} already exists; file paths must be unique"
        ))),
        Err(Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// lance-io panics on an empty file and cannot decode anything shorter than
/// its fixed-size footer: such a file is Corrupt before Lance sees it.
pub(crate) fn check_footer_fits(path: &RelativePath, size: u64) -> Result<()> {
    if size < LANCE_FOOTER_LEN {
        return Err(Error::corrupt(
            format!("Lance file {path}"),
            format!("{size} bytes is shorter than the {LANCE_FOOTER_LEN}-byte footer"),
        ));
    }
    Ok(())
}

mod column_rewrite;
mod in_memory;
mod options;
#[cfg(test)]
mod prefetch_tests;
mod reader;
mod writer;

pub use column_rewrite::ColumnRewriter;
pub use options::{PageLayout, ReadMode, ReadOptions};
pub use reader::LanceFileReader;
pub(crate) use writer::written_summary;
pub use writer::LanceFileWriter;

#[cfg(test)]
mod tests {
    use super::*;

    async fn join_error(panics: bool) -> tokio::task::JoinError {
        let task = tokio::spawn(async move {
            if panics {
                panic!(
                    "the offset + length of the sliced Buffer cannot exceed the existing length"
                );
            }
            std::future::pending::<()>().await;
        });
        if !panics {
            task.abort();
        }
        match task.await {
            Err(join) => join,
            Ok(()) => unreachable!("the task neither panicked nor was cancelled"),
        }
    }

    #[tokio::test]
    async fn a_lance_decode_task_that_panicked_is_corrupt_in_one_line() {
        let path = crate::io::paths::data_file_path("f.lance").unwrap();
        let err = lance_core::Error::wrapped(join_error(true).await.into());
        match lance_error("reading", &path, err, false) {
            Error::Corrupt { what, message } => {
                assert_eq!(what, "Lance file data/f.lance");
                assert_eq!(message, "the Lance decoder panicked while reading the file");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // A cancelled task says nothing about the bytes.
        let err = lance_core::Error::wrapped(join_error(false).await.into());
        assert!(matches!(
            lance_error("reading", &path, err, false),
            Error::External { .. }
        ));
    }
}
