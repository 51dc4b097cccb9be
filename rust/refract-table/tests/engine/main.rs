//! Engine tests: format, scan/take/append/delete, versions, commits and conflicts.
//! One test binary (modules below) keeps link time down.

mod common;
mod concurrency;
mod delete_rebase;
mod format_errors;
mod read_write;
mod row_selection;
mod versions;
