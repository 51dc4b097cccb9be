//! The operations that commit a new version on a [`Dataset`] handle:
//! append, delete and restore. They sit above both the read side
//! (`dataset`) and the commit protocol (`commit`), which never call them.

mod append;
mod delete;
mod restore;

pub use delete::DeleteResult;

#[cfg(doc)]
use crate::dataset::Dataset;
