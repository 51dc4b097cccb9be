//! Validated dataset-relative paths.
//!
//! Every path Refract reads or writes is relative to the dataset root. Paths that
//! come from metadata (manifests, index details, ledgers) are untrusted: they are
//! parsed through [`RelativePath::parse`], which refuses anything that could
//! leave the root (`..`, absolute paths, URLs, backslashes, empty segments, NUL).

use std::fmt;

use refract_core::{Error, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// Directory holding the manifests.
pub const VERSIONS_DIR: &str = "_versions";
/// Directory holding the Lance data files.
pub const DATA_DIR: &str = "data";
/// Directory holding the deletion files.
pub const DELETIONS_DIR: &str = "_deletions";
/// Directory holding one sub-directory per index segment.
pub const INDICES_DIR: &str = "_indices";

/// A validated path relative to the dataset root.
///
/// Invariant: non-empty, segments separated by single `/`, every segment is
/// non-empty, not `.` or `..`, and contains no `\`, `:` followed by `//`, or NUL.
/// A trailing `/` is allowed only to denote a directory (see [`index_dir`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelativePath(String);

impl RelativePath {
    /// Parses and validates `raw`; [`Error::PathEscape`] when it could leave the root.
    pub fn parse(raw: &str) -> Result<RelativePath> {
        validate(raw)?;
        Ok(RelativePath(raw.to_string()))
    }

    /// The path as a string, exactly as validated.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The object-store key of this path (relative to the store root).
    pub fn to_object_path(&self) -> object_store::path::Path {
        // `Path::from` splits on `/` and percent-encodes nothing we allow here
        // except it escapes characters object_store considers illegal; a
        // trailing `/` (directory) yields no empty segment.
        object_store::path::Path::from(self.0.trim_end_matches('/'))
    }

    /// Appends one segment (or several, separated by `/`), validating the result.
    pub fn join(&self, segment: &str) -> Result<RelativePath> {
        let base = self.0.trim_end_matches('/');
        RelativePath::parse(&format!("{base}/{segment}"))
    }

    /// The first path segment (`data`, `_versions`, ...).
    pub fn top_level_dir(&self) -> &str {
        self.0.split('/').next().unwrap_or_default()
    }

    /// The last path segment (file name), without a trailing `/`.
    pub fn file_name(&self) -> &str {
        self.0
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
    }
}

fn escape(raw: &str) -> Error {
    Error::PathEscape {
        path: raw.to_string(),
    }
}

fn validate(raw: &str) -> Result<()> {
    if raw.is_empty()
        || raw.starts_with('/')
        || raw.contains('\\')
        || raw.contains('\0')
        || raw.contains("://")
    {
        return Err(escape(raw));
    }
    // A single trailing slash denotes a directory; strip it before checking segments.
    let body = raw.strip_suffix('/').unwrap_or(raw);
    if body.is_empty() {
        return Err(escape(raw));
    }
    for segment in body.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(escape(raw));
        }
        // A drive letter such as `C:` would be absolute on Windows.
        if segment.ends_with(':') {
            return Err(escape(raw));
        }
    }
    Ok(())
}

impl fmt::Display for RelativePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for RelativePath {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RelativePath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        RelativePath::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// `_versions/{version:020}.manifest` — zero padded so lexical order is numeric order.
pub fn manifest_path(version: u64) -> RelativePath {
    // Digits, a dot and a fixed directory: always valid.
    RelativePath(format!("{VERSIONS_DIR}/{version:020}.manifest"))
}

/// `data/<file_name>`; `file_name` must be a single valid segment.
pub fn data_file_path(file_name: &str) -> Result<RelativePath> {
    single_segment_path(DATA_DIR, file_name)
}

/// `_deletions/<file_name>`; `file_name` must be a single valid segment.
pub fn deletion_file_path(file_name: &str) -> Result<RelativePath> {
    single_segment_path(DELETIONS_DIR, file_name)
}

/// `_indices/<uuid>/` — the directory of one index segment.
pub fn index_dir(uuid: &Uuid) -> RelativePath {
    // A hyphenated uuid is a valid segment.
    RelativePath(format!("{INDICES_DIR}/{}/", uuid.hyphenated()))
}

fn single_segment_path(dir: &str, file_name: &str) -> Result<RelativePath> {
    if file_name.contains('/') {
        return Err(escape(file_name));
    }
    RelativePath::parse(&format!("{dir}/{file_name}"))
}
