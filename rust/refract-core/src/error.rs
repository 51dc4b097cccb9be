//! The error type shared by every Refract crate.
//!
//! One enum keeps error *kinds* stable across crate boundaries: a caller can match
//! on `Error::Conflict { retryable: true, .. }` whether it came from the table
//! engine or from compaction. External failures (object store, Lance, Arrow) are
//! carried as boxed sources with a short description of what was being done.
//!
//! Every message is one line, and none shows where a dependency's code raised
//! it: snafu-based libraries (Lance) append the source location of the error
//! (`…/lance-file-x/src/reader.rs:123:45`, a path into the build machine's
//! cargo registry) to their text. [`clean_text`] removes that; the message
//! constructors and the display of [`Error::External`] apply it, so no caller
//! has to.

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
    InvalidInput {
        /// What is wrong, naming the option or argument.
        message: String,
    },

    /// Stored bytes are corrupt, truncated or inconsistent.
    #[snafu(display("corrupt {what}: {message}"))]
    Corrupt {
        /// The damaged thing (a file, a ledger, a manifest).
        what: String,
        /// What is wrong with it.
        message: String,
    },

    /// The operation or stored feature is not supported by this client.
    #[snafu(display("not supported: {message}"))]
    NotSupported {
        /// What is not supported.
        message: String,
    },

    /// A file, version, index or fragment does not exist.
    #[snafu(display("not found: {message}"))]
    NotFound {
        /// What does not exist.
        message: String,
    },

    /// A concurrent commit won the race. `retryable` tells whether running the
    /// operation again against the new version may succeed.
    #[snafu(display("commit conflict (retryable: {retryable}): {message}"))]
    Conflict {
        /// What conflicted.
        message: String,
        /// Whether retrying against the new version may succeed.
        retryable: bool,
    },

    /// A path taken from metadata or input leaves the dataset root.
    #[snafu(display("path escapes the dataset root: {path}"))]
    PathEscape {
        /// The offending path.
        path: String,
    },

    /// A materialized remap would exceed its memory budget; declined before allocating.
    #[snafu(display(
        "materialized remap over budget: estimated {estimated_bytes} bytes > budget {budget_bytes} bytes"
    ))]
    OverBudget {
        /// Estimated size of the map.
        estimated_bytes: u64,
        /// The budget it exceeds.
        budget_bytes: u64,
    },

    /// A materialized remap needs the physical row count of a fragment that is not known.
    #[snafu(display("physical row count unknown for fragment {fragment_id}"))]
    FragmentRowsUnknown {
        /// The fragment whose row count is unknown.
        fragment_id: u64,
    },

    /// A materialized remap needs the set of fragments an index stores, which is not known.
    #[snafu(display("stored fragments of the index segment are unknown"))]
    StoredFragmentsUnknown,

    /// An I/O or library failure while doing `context`. Displayed through
    /// [`clean_text`].
    #[snafu(display("{context}: {}", clean_text(&source.to_string())))]
    External {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: BoxedError,
    },
}

/// Result alias used across Refract.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds an [`Error::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error::InvalidInput {
            message: clean_text(&message.into()),
        }
    }

    /// Builds an [`Error::Corrupt`].
    pub fn corrupt(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Corrupt {
            what: clean_text(&what.into()),
            message: clean_text(&message.into()),
        }
    }

    /// Builds an [`Error::NotSupported`].
    pub fn not_supported(message: impl Into<String>) -> Self {
        Error::NotSupported {
            message: clean_text(&message.into()),
        }
    }

    /// Builds an [`Error::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::NotFound {
            message: clean_text(&message.into()),
        }
    }

    /// Builds an [`Error::Conflict`].
    pub fn conflict(message: impl Into<String>, retryable: bool) -> Self {
        Error::Conflict {
            message: clean_text(&message.into()),
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

/// `text` as one line without dependency source locations: line breaks and
/// runs of whitespace become one space, and every word that is a source
/// location (a path holding a `/` and ending in `.rs:<line>` or
/// `.rs:<line>:<column>`) or a path into a cargo registry or toolchain
/// (`/.cargo/`, `/registry/src/`, `/.rustup/`, `/rustc/`) is dropped with the
/// comma that introduced it. Everything else is kept as written.
pub fn clean_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if is_source_location(word) {
            // Drop the ", " that introduced the location ("message, <location>").
            let kept = out.trim_end().trim_end_matches(',').trim_end().len();
            out.truncate(kept);
            // A word after the location may have followed its own separator.
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// True for a word naming a place in Rust source or in a dependency's files
/// (see [`clean_text`]). Surrounding punctuation is ignored.
fn is_source_location(word: &str) -> bool {
    let word =
        word.trim_matches(|c: char| matches!(c, ',' | ';' | '(' | ')' | '[' | ']' | '"' | '\''));
    const FOREIGN_DIRS: [&str; 4] = ["/.cargo/", "/registry/src/", "/.rustup/", "/rustc/"];
    if FOREIGN_DIRS.iter().any(|dir| word.contains(dir)) {
        return true;
    }
    if !word.contains('/') {
        return false;
    }
    // `<path>.rs:<line>` or `<path>.rs:<line>:<column>`.
    let Some((path, position)) = word.split_once(".rs:") else {
        return false;
    };
    !path.is_empty()
        && !position.is_empty()
        && position.split(':').count() <= 2
        && position
            .split(':')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCATION: &str = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/lance-file-1.0.0/src/reader.rs:123:45";

    #[test]
    fn source_locations_and_their_commas_are_dropped() {
        let text = format!("Encountered corrupt file data/a.lance: LanceError(IO): bad footer, {LOCATION}, {LOCATION}");
        assert_eq!(
            clean_text(&text),
            "Encountered corrupt file data/a.lance: LanceError(IO): bad footer"
        );
        assert_eq!(
            clean_text("oops, rust/lance-io/src/scheduler.rs:88 then more"),
            "oops then more"
        );
        assert_eq!(
            clean_text(&format!("Wrapped error: x ({LOCATION})")),
            "Wrapped error: x"
        );
    }

    #[test]
    fn registry_paths_are_dropped_and_lines_joined() {
        assert_eq!(
            clean_text("first line\nsecond\tline at /root/.cargo/registry/src/x/lib"),
            "first line second line at"
        );
    }

    #[test]
    fn ordinary_words_stay() {
        for text in [
            "row map _fri/1b4e28ba-2fa1-11d2-883f-0016d3cca427/stable_partition.lance: label 7",
            "manifest of version 3 (_versions/00000000000000000003.manifest): bad",
            "column a.rs:1 is odd",
            "ratio 1:2 of data/x.rs:y",
        ] {
            assert_eq!(clean_text(text), text);
        }
    }

    #[test]
    fn constructors_and_external_display_are_clean() {
        let err = Error::corrupt("Lance file data/a.lance", format!("bad, {LOCATION}"));
        assert_eq!(err.to_string(), "corrupt Lance file data/a.lance: bad");
        let err = Error::invalid_input(format!("no\nway, {LOCATION}"));
        assert_eq!(err.to_string(), "invalid input: no way");
        let source = std::io::Error::other(format!("disk said no, {LOCATION}"));
        let err = Error::external("reading data/a.lance", source);
        assert_eq!(err.to_string(), "reading data/a.lance: disk said no");
    }
}
