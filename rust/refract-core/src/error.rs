//! The error type shared by every Refract crate.
//!
//! One enum keeps error *kinds* stable across crate boundaries: a caller can match
//! on `Error::Conflict { retryable: true, .. }` whether it came from the table
//! engine or from compaction. External failures (object store, Lance, Arrow) are
//! carried as boxed sources with a short description of what was being done.

use snafu::Snafu;

/// A boxed external error.
pub type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors returned by Refract.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub))]
#[non_exhaustive]
pub enum Error {
    /// A caller-supplied argument or option is invalid. `message` names the option.
    #[snafu(display("invalid input: {message}"))]
    InvalidInput { message: String },

    /// Stored bytes are corrupt, truncated or inconsistent.
    #[snafu(display("corrupt {what}: {message}"))]
    Corrupt { what: String, message: String },

    /// The operation or stored feature is not supported by this client.
    #[snafu(display("not supported: {message}"))]
    NotSupported { message: String },

    /// A file, version, index or fragment does not exist.
    #[snafu(display("not found: {message}"))]
    NotFound { message: String },

    /// A concurrent commit won the race. `retryable` tells whether running the
    /// operation again against the new version may succeed.
    #[snafu(display("commit conflict (retryable: {retryable}): {message}"))]
    Conflict { message: String, retryable: bool },

    /// A path taken from metadata or input leaves the dataset root.
    #[snafu(display("path escapes the dataset root: {path}"))]
    PathEscape { path: String },

    /// A materialized remap would exceed its memory budget; declined before allocating.
    #[snafu(display(
        "materialized remap over budget: estimated {estimated_bytes} bytes > budget {budget_bytes} bytes"
    ))]
    OverBudget {
        estimated_bytes: u64,
        budget_bytes: u64,
    },

    /// A materialized remap needs the physical row count of a fragment that is not known.
    #[snafu(display("physical row count unknown for fragment {fragment_id}"))]
    FragmentRowsUnknown { fragment_id: u64 },

    /// A materialized remap needs the set of fragments an index stores, which is not known.
    #[snafu(display("stored fragments of the index segment are unknown"))]
    StoredFragmentsUnknown,

    /// An I/O or library failure while doing `context`.
    #[snafu(display("{context}: {source}"))]
    External { context: String, source: BoxedError },
}

/// Result alias used across Refract.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds an [`Error::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error::InvalidInput {
            message: message.into(),
        }
    }

    /// Builds an [`Error::Corrupt`].
    pub fn corrupt(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Corrupt {
            what: what.into(),
            message: message.into(),
        }
    }

    /// Builds an [`Error::NotSupported`].
    pub fn not_supported(message: impl Into<String>) -> Self {
        Error::NotSupported {
            message: message.into(),
        }
    }

    /// Builds an [`Error::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::NotFound {
            message: message.into(),
        }
    }

    /// Builds an [`Error::Conflict`].
    pub fn conflict(message: impl Into<String>, retryable: bool) -> Self {
        Error::Conflict {
            message: message.into(),
            retryable,
        }
    }

    /// Wraps an external error with a description of what was being done.
    pub fn external(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::External {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// True for a conflict that a retry against the latest version may resolve.
    pub fn is_retryable_conflict(&self) -> bool {
        matches!(
            self,
            Error::Conflict {
                retryable: true,
                ..
            }
        )
    }
}
