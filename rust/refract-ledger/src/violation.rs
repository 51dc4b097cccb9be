//! Validation failures, before they are given an error kind.
//!
//! The same rule (say, "deleted rows exceed physical rows") is corruption when
//! it is found in stored bytes and a caller mistake when a writer passes it in.
//! Rules report a [`Violation`]; the entry point that knows the origin turns it
//! into the right [`Error`].

use refract_core::Error;

/// What the error is about, for messages.
pub(crate) const WHAT: &str = "FRI ledger";

/// A broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    /// Inconsistent or malformed content.
    Invalid(String),
    /// A name that would be used as a path component leaves its directory.
    PathEscape(String),
    /// A Lance feature this build does not implement.
    Unsupported(String),
}

/// Where the checked content came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Decoded from stored bytes: violations are corruption.
    Stored,
    /// Passed in by a writer: violations are invalid input.
    Caller,
}

impl Violation {
    /// Builds an [`Violation::Invalid`].
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Violation::Invalid(message.into())
    }

    /// Converts into the error kind that fits `origin`.
    pub(crate) fn into_error(self, origin: Origin) -> Error {
        match (self, origin) {
            (Violation::PathEscape(path), Origin::Stored) => {
                Error::corrupt(WHAT, format!("file path {path:?} leaves the dataset root"))
            }
            (Violation::PathEscape(path), Origin::Caller) => Error::PathEscape { path },
            (Violation::Invalid(message), Origin::Stored) => Error::corrupt(WHAT, message),
            (Violation::Invalid(message), Origin::Caller) => Error::invalid_input(message),
            (Violation::Unsupported(message), _) => Error::not_supported(message),
        }
    }
}

/// Result of a validation rule.
pub(crate) type Checked<T = ()> = std::result::Result<T, Violation>;
