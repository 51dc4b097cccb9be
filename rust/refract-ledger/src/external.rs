//! External ledger content: a validated reference to a byte range of a file
//! under the FRI's own index directory.
//!
//! Lance records the path relative to the FRI's index directory
//! (`details.binpb`). Everything here runs before any I/O: the path must stay
//! inside `_indices/<fri uuid>/`, and `offset + size` must neither overflow nor exceed
//! [`MAX_EXTERNAL_BYTES`]. After the read, [`ExternalContent::verify_received`]
//! checks the length.

use std::ops::Range;

use refract_core::{Error, Result};
use uuid::Uuid;

use crate::proto;
use crate::violation::WHAT;

/// Upper bound on external ledger content (4 GiB). A larger `size` is corrupt;
/// the bound stops a damaged entry from asking the reader for an absurd range.
pub const MAX_EXTERNAL_BYTES: u64 = 1 << 32;

/// A validated reference to external ledger content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalContent {
    path: String,
    offset: u64,
    size: u64,
}

impl ExternalContent {
    /// Validates a stored reference of FRI `fri_uuid`.
    ///
    /// Errors: `Corrupt` for a path that is absolute or contains `..`, `.`,
    /// empty components, backslashes or NUL (stored bytes naming a file
    /// outside `_indices/<fri uuid>/` are damaged or forged), and for an
    /// overflowing or oversized range.
    pub(crate) fn from_proto(file: proto::ExternalFile, fri_uuid: &Uuid) -> Result<Self> {
        check_path(&file.path, fri_uuid)?;
        let path = format!("{}{}", fri_directory(fri_uuid), file.path);
        let end = file.offset.checked_add(file.size).ok_or_else(|| {
            Error::corrupt(
                WHAT,
                format!(
                    "external content offset {} + size {} overflows",
                    file.offset, file.size
                ),
            )
        })?;
        if file.size > MAX_EXTERNAL_BYTES || usize::try_from(end).is_err() {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "external content size {} exceeds the limit of {MAX_EXTERNAL_BYTES} bytes",
                    file.size
                ),
            ));
        }
        Ok(Self {
            path,
            offset: file.offset,
            size: file.size,
        })
    }

    /// Dataset-relative path of the file (`_indices/<fri uuid>/…`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Offset of the content in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Exact content length.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The byte range to read; computed without overflow (checked at parse).
    pub fn byte_range(&self) -> Range<u64> {
        self.offset..self.offset + self.size
    }

    /// Checks that the bytes read have exactly the recorded size.
    ///
    /// # Errors
    /// Corrupt when `bytes` is not exactly [`Self::size`] bytes long.
    pub fn verify_received(&self, bytes: &[u8]) -> Result<()> {
        if bytes.len() as u64 != self.size {
            return Err(Error::corrupt(
                WHAT,
                format!(
                    "external content {} returned {} bytes but {} were recorded",
                    self.path,
                    bytes.len(),
                    self.size
                ),
            ));
        }
        Ok(())
    }
}

/// The directory every external file of FRI `fri_uuid` must live in.
pub fn fri_directory(fri_uuid: &Uuid) -> String {
    format!("_indices/{}/", fri_uuid.hyphenated())
}

fn check_path(path: &str, fri_uuid: &Uuid) -> Result<()> {
    let escape = || {
        Error::corrupt(
            WHAT,
            format!(
                "external content path {path:?} leaves {}",
                fri_directory(fri_uuid)
            ),
        )
    };
    if path.contains(['\\', '\0', ':']) {
        return Err(escape());
    }
    let bad_component = |c: &str| c.is_empty() || c == "." || c == "..";
    if path.split('/').any(bad_component) {
        return Err(escape());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const FRI: Uuid = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);

    fn file(path: &str, offset: u64, size: u64) -> proto::ExternalFile {
        proto::ExternalFile {
            path: path.to_string(),
            offset,
            size,
        }
    }

    #[rstest]
    #[case::absolute("/details.binpb")]
    #[case::parent("../x/details.binpb")]
    #[case::other_fri("../00000000-0000-0000-0000-000000000000/details.binpb")]
    #[case::up_to_root("../../data/x.lance")]
    #[case::dot("./details.binpb")]
    #[case::empty_component("sub//details.binpb")]
    #[case::directory_only("sub/")]
    #[case::empty("")]
    #[case::backslash("..\\x")]
    #[case::windows_absolute("C:/details.binpb")]
    fn escaping_paths_are_rejected(#[case] path: &str) {
        let err = ExternalContent::from_proto(file(path, 0, 1), &FRI).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { message, .. } if message.contains(&format!("{path:?}"))),
            "{err}"
        );
    }

    #[test]
    fn valid_reference_gives_range() {
        let ext = ExternalContent::from_proto(file("details.binpb", 10, 20), &FRI).unwrap();
        assert_eq!(
            ext.path(),
            "_indices/12345678-9abc-def0-1234-56789abcdef0/details.binpb"
        );
        assert_eq!(ext.byte_range(), 10..30);
        assert!(ext.verify_received(&[0; 20]).is_ok());
        assert!(matches!(
            ext.verify_received(&[0; 19]),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(
            ext.verify_received(&[0; 21]),
            Err(Error::Corrupt { .. })
        ));
    }

    #[rstest]
    #[case::overflow(u64::MAX, 1)]
    #[case::overflow_both(u64::MAX / 2 + 1, u64::MAX / 2 + 1)]
    #[case::too_large(0, MAX_EXTERNAL_BYTES + 1)]
    fn bad_ranges_are_corrupt(#[case] offset: u64, #[case] size: u64) {
        let err =
            ExternalContent::from_proto(file("details.binpb", offset, size), &FRI).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }
}
