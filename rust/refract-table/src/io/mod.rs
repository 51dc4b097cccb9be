//! Storage: object-store resolution, request counting, path validation, Lance files and deletion files.

mod checksumming_writer;
pub mod cloud;
pub mod counting;
pub mod deletion_file;
pub mod direct_local;
#[cfg(any(test, feature = "testing"))]
pub mod fault;
pub mod lance_concat;
pub mod lance_files;
mod no_follow;
mod object_stream;
pub mod paths;
pub mod read_ahead;
pub mod recorded_files;
pub mod store;
pub mod upload;
mod verifying_store;

pub use cloud::{Cloud, StorageOptions};
pub use counting::{CountingStore, PrefixStats, RequestStats};
pub use deletion_file::{read_deletion_file, write_deletion_file, DeletionFileRef};
pub use direct_local::{DirectLocalStore, DIRECT_WRITES_OPTION};
#[cfg(any(test, feature = "testing"))]
pub use fault::{is_injected_fault, CallKind, FaultInjectingStore, FaultMode, InjectedFault};
pub use lance_concat::{concat_lance_files, ConcatInput, ConcatOutcome};
pub use lance_files::{
    ColumnRewriter, LanceFileReader, LanceFileSummary, LanceFileWriter, PageLayout, ReadMode,
    ReadOptions, STREAMING_PAGE_BYTES, STREAMING_READ_BUFFER_BYTES,
};
pub use paths::{data_file_path, deletion_file_path, index_dir, manifest_path, RelativePath};
pub use read_ahead::{read_ahead, WindowSize};
pub use recorded_files::{FileJournal, RecordedFile};
pub use store::{DatasetStore, ObjectInfo};

#[cfg(test)]
mod tests;
