//! # refract-table
//!
//! The Refract dataset engine: a versioned, columnar table on an `object_store`.
//! Manifests (`_versions/<n>.manifest`), fragments of Lance data files under
//! `data/`, deletion files under `_deletions/`, transactions and the
//! put-if-absent commit protocol, scan/take/append/delete, index metadata and
//! the `Session` that shares caches between dataset handles.
//! The on-disk layout is described in `docs/format.md`.

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod cleanup;
pub mod commit;
pub mod dataset;
pub mod format;
pub mod io;
pub mod mutation;
pub mod predicate;
pub mod references;
pub mod retention;
pub mod session;
pub mod tags;
pub mod task;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transaction;
pub mod verify;

pub use commit::CommitHook;
pub use dataset::{
    Dataset, OpenOptions, RowSelection, Scanner, VersionEntry, VersionInfo, WriteOptions,
    ROW_ADDRESS_COLUMN,
};
pub use format::{DataFile, DeletionFileRef, Fragment, FragmentIndex, IndexMetadata, Manifest};
pub use mutation::DeleteResult;
pub use retention::{cleanup_old_versions, RemovedFile, RetentionPolicy, RetentionReport};
pub use session::Session;
pub use tags::{create_tag, delete_tag, list_tags, tag_version};
pub use transaction::{Operation, RewriteGroup, Transaction};
pub use verify::{
    verify_dataset, IndexDataReport, UncheckedSegment, VerifyOptions, VerifyProblem,
    VerifyProgress, VerifyReport,
};
