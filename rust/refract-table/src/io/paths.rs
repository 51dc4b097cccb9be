//! Validated dataset-relative paths.
//!
//! Every path Refract reads or writes is relative to the dataset root. Paths that
//! come from metadata (manifests, index details, ledgers) are untrusted: they are
//! parsed through [`RelativePath::parse_recorded`], which refuses (as Corrupt)
//! anything that could leave the root: `..`, absolute paths, URLs, backslashes,
//! empty segments, NUL, and any of these spelt with percent escapes (`%2e%2e`),
//! which a store or an HTTP client could decode.

use std::fmt;

use percent_encoding::percent_decode_str;
use refract_core::{Error, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// Directory holding the manifests.
pub const VERSIONS_DIR: &str = "_versions";
/// Directory holding one Lance transaction file per commit.
pub const TRANSACTIONS_DIR: &str = "_transactions";
/// Directory holding the Lance data files.
pub const DATA_DIR: &str = "data";
/// Directory holding the deletion files.
pub const DELETIONS_DIR: &str = "_deletions";
/// Directory holding one sub-directory per index segment.
pub const INDICES_DIR: &str = "_indices";
/// Directory holding one sub-directory per stable-partition row map.
pub const FRI_DIR: &str = "_fri";
/// The directories whose files cleanup lists and may delete (everything a
/// version references except its manifest and tags).
pub const COLLECTABLE_DIRS: [&str; 5] = [
    DATA_DIR,
    DELETIONS_DIR,
    INDICES_DIR,
    FRI_DIR,
    TRANSACTIONS_DIR,
];
/// Directory holding one small JSON file per tag.
pub const TAGS_DIR: &str = "_refs/tags";
/// File name of a row map inside its directory.
const ROW_MAP_FILE: &str = "stable_partition.lance";

/// A validated path relative to the dataset root.
///
/// Invariant: non-empty, segments separated by single `/`, every segment is
/// non-empty, not `.` or `..`, and contains no `\`, `:` followed by `//`, or NUL,
/// whether written plainly or with percent escapes. A trailing `/` is allowed
/// only to denote a directory (see [`index_dir`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelativePath(String);

impl RelativePath {
    /// Parses and validates `raw`.
    ///
    /// # Errors
    /// [`Error::PathEscape`] when `raw` could leave the root: empty, absolute,
    /// a URL, `.`/`..` or empty segments, a backslash, NUL or drive letter.
    pub fn parse(raw: &str) -> Result<RelativePath> {
        validate(raw)?;
        Ok(RelativePath(raw.to_string()))
    }

    /// Parses a path read from stored bytes (a manifest, a transaction, an
    /// index or FRI record), where one leaving the root means the bytes are
    /// damaged or forged.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming `what` (the record holding the path) when
    /// [`Self::parse`] refuses `raw`.
    pub fn parse_recorded(raw: &str, what: &str) -> Result<RelativePath> {
        RelativePath::parse(raw)
            .map_err(|_| Error::corrupt(what, format!("file path {raw:?} leaves the dataset root")))
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
    ///
    /// # Errors
    /// [`Error::PathEscape`] when `segment` makes the path invalid (see
    /// [`Self::parse`]).
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
        if !is_plain_segment(segment) {
            return Err(escape(raw));
        }
        // A store or HTTP client may decode `%2e%2e` into `..` (and `%2f`
        // into `/`): the decoded form must be a plain segment too.
        if segment.contains('%') {
            let decoded = percent_decode_str(segment).decode_utf8_lossy();
            if !is_plain_segment(&decoded) || decoded.contains(['/', '\\', '\0']) {
                return Err(escape(raw));
            }
        }
    }
    Ok(())
}

/// Not empty, not `.` or `..`, and no drive letter such as `C:` (which would
/// be absolute on Windows).
fn is_plain_segment(segment: &str) -> bool {
    !segment.is_empty() && segment != "." && segment != ".." && !segment.ends_with(':')
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

/// `_versions/{u64::MAX - version:020}.manifest` — Lance's V2 naming: the
/// newest version sorts first in a listing.
pub fn manifest_path(version: u64) -> RelativePath {
    // Digits, a dot and a fixed directory: always valid.
    RelativePath(format!(
        "{VERSIONS_DIR}/{:020}.manifest",
        u64::MAX - version
    ))
}

/// `_versions/{version}.manifest` — Lance's V1 naming, read for tables
/// created with it.
pub fn v1_manifest_path(version: u64) -> RelativePath {
    // Digits, a dot and a fixed directory: always valid.
    RelativePath(format!("{VERSIONS_DIR}/{version}.manifest"))
}

/// The version a manifest file name in `_versions/` stands for: Lance's V2
/// naming (20 digits, `u64::MAX - version`) or V1 naming (`{version}`, fewer
/// digits). Other names are not manifests.
pub fn parse_manifest_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".manifest")?;
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let number: u64 = digits.parse().ok()?;
    let version = if digits.len() == 20 {
        u64::MAX - number
    } else {
        number
    };
    (version > 0).then_some(version)
}

/// `_transactions/<file_name>`; `file_name` must be a single valid segment.
///
/// # Errors
/// [`Error::PathEscape`] when `file_name` is not a single valid segment.
pub fn transaction_file_path(file_name: &str) -> Result<RelativePath> {
    single_segment_path(TRANSACTIONS_DIR, file_name)
}

/// `data/<file_name>`; `file_name` must be a single valid segment.
///
/// # Errors
/// [`Error::PathEscape`] when `file_name` is empty, holds a `/` or is not a
/// valid segment.
pub fn data_file_path(file_name: &str) -> Result<RelativePath> {
    single_segment_path(DATA_DIR, file_name)
}

/// `_deletions/<file_name>`; `file_name` must be a single valid segment.
///
/// # Errors
/// [`Error::PathEscape`] when `file_name` is empty, holds a `/` or is not a
/// valid segment.
pub fn deletion_file_path(file_name: &str) -> Result<RelativePath> {
    single_segment_path(DELETIONS_DIR, file_name)
}

/// `_indices/<uuid>/` — the directory of one index segment.
pub fn index_dir(uuid: &Uuid) -> RelativePath {
    // A hyphenated uuid is a valid segment.
    RelativePath(format!("{INDICES_DIR}/{}/", uuid.hyphenated()))
}

/// `_fri/<map_id>/` — the directory of one stable-partition row map.
pub fn row_map_dir(map_id: &Uuid) -> RelativePath {
    // A hyphenated uuid is a valid segment.
    RelativePath(format!("{FRI_DIR}/{}/", map_id.hyphenated()))
}

/// `_fri/<map_id>/stable_partition.lance` — the row-map file of `map_id`.
pub fn row_map_path(map_id: &Uuid) -> RelativePath {
    // A hyphenated uuid and a constant file name are valid segments.
    RelativePath(format!("{FRI_DIR}/{}/{ROW_MAP_FILE}", map_id.hyphenated()))
}

fn single_segment_path(dir: &str, file_name: &str) -> Result<RelativePath> {
    if file_name.is_empty() || file_name.contains('/') {
        return Err(escape(file_name));
    }
    RelativePath::parse(&format!("{dir}/{file_name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::parent("..")]
    #[case::parent_inside("data/../x")]
    #[case::trailing_parent("data/..")]
    #[case::dot("./data/x")]
    #[case::absolute("/etc/passwd")]
    #[case::scheme("s3://bucket/key")]
    #[case::file_scheme("file:///tmp/x")]
    #[case::empty("")]
    #[case::only_slash("/")]
    #[case::empty_segment("data//x")]
    #[case::double_trailing("data/x//")]
    #[case::backslash("data\\x")]
    #[case::windows_parent("..\\x")]
    #[case::nul("data/x\0")]
    #[case::drive("C:/x")]
    #[case::encoded_parent("data/%2e%2e/x")]
    #[case::encoded_parent_upper("%2E%2E/x")]
    #[case::half_encoded_parent("data/.%2e")]
    #[case::encoded_dot("%2e/x")]
    #[case::encoded_slash("data%2f..%2fx")]
    #[case::encoded_backslash("data/..%5cx")]
    #[case::encoded_nul("data/x%00")]
    #[case::encoded_drive("C%3a/x")]
    fn parse_rejects_escapes(#[case] raw: &str) {
        match RelativePath::parse(raw) {
            Err(Error::PathEscape { path }) => assert_eq!(path, raw),
            other => panic!("{raw:?} should be a PathEscape, got {other:?}"),
        }
    }

    #[rstest]
    #[case("data/a.lance")]
    #[case("_versions/00000000000000000001.manifest")]
    #[case("_indices/abc/")]
    #[case("x")]
    #[case("a..b/c.d")]
    #[case("data/100%25.lance")]
    #[case("data/%zz")]
    fn parse_accepts_relative_paths(#[case] raw: &str) {
        let path = RelativePath::parse(raw).unwrap();
        assert_eq!(path.as_str(), raw);
        assert_eq!(path.to_string(), raw);
    }

    #[test]
    fn typed_helpers_build_expected_layout() {
        assert_eq!(
            manifest_path(42).as_str(),
            "_versions/18446744073709551573.manifest"
        );
        assert_eq!(
            parse_manifest_name("18446744073709551573.manifest"),
            Some(42)
        );
        assert_eq!(parse_manifest_name("42.manifest"), Some(42));
        assert_eq!(parse_manifest_name("18446744073709551615.manifest"), None);
        assert_eq!(parse_manifest_name("x.manifest"), None);
        assert_eq!(data_file_path("f.lance").unwrap().as_str(), "data/f.lance");
        assert_eq!(
            deletion_file_path("1-a.bin").unwrap().as_str(),
            "_deletions/1-a.bin"
        );
        let uuid = Uuid::nil();
        let dir = index_dir(&uuid);
        assert_eq!(
            dir.as_str(),
            "_indices/00000000-0000-0000-0000-000000000000/"
        );
        assert_eq!(
            dir.join("index.lance").unwrap().as_str(),
            "_indices/00000000-0000-0000-0000-000000000000/index.lance"
        );
        assert_eq!(
            dir.to_object_path().as_ref(),
            "_indices/00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(dir.top_level_dir(), "_indices");
        assert_eq!(data_file_path("f.lance").unwrap().file_name(), "f.lance");
    }

    #[rstest]
    #[case("../x")]
    #[case("a/b")]
    #[case("")]
    fn file_helpers_reject_non_segments(#[case] name: &str) {
        assert!(matches!(
            data_file_path(name),
            Err(Error::PathEscape { .. })
        ));
        assert!(matches!(
            deletion_file_path(name),
            Err(Error::PathEscape { .. })
        ));
    }

    #[rstest]
    #[case("../x")]
    #[case("/etc/x")]
    #[case("s3://other-bucket/x")]
    #[case("data/%2e%2e/%2e%2e/x")]
    fn recorded_paths_leaving_the_root_are_corrupt(#[case] raw: &str) {
        match RelativePath::parse_recorded(raw, "manifest") {
            Err(Error::Corrupt { what, message }) => {
                assert_eq!(what, "manifest");
                assert_eq!(
                    message,
                    format!("file path {raw:?} leaves the dataset root")
                );
            }
            other => panic!("{raw:?} should be Corrupt, got {other:?}"),
        }
        assert_eq!(
            RelativePath::parse_recorded("data/a.lance", "manifest")
                .unwrap()
                .as_str(),
            "data/a.lance"
        );
    }

    #[test]
    fn join_rejects_escapes() {
        let dir = RelativePath::parse("data").unwrap();
        assert!(matches!(dir.join(".."), Err(Error::PathEscape { .. })));
        assert!(matches!(dir.join("/abs"), Err(Error::PathEscape { .. })));
        assert_eq!(dir.join("a/b").unwrap().as_str(), "data/a/b");
    }

    #[test]
    fn serde_round_trips_and_validates() {
        let path = data_file_path("x.lance").unwrap();
        let json = serde_json::to_string(&path).unwrap();
        assert_eq!(json, "\"data/x.lance\"");
        let back: RelativePath = serde_json::from_str(&json).unwrap();
        assert_eq!(back, path);
        assert!(serde_json::from_str::<RelativePath>("\"../x\"").is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsed_paths_never_escape(raw in "[a-z./\\\\:]{0,12}") {
            if let Ok(path) = RelativePath::parse(&raw) {
                let s = path.as_str();
                proptest::prop_assert!(!s.starts_with('/'));
                proptest::prop_assert!(!s.contains('\\'));
                proptest::prop_assert!(s.split('/').all(|seg| seg != ".." && seg != "."));
            }
        }
    }
}
