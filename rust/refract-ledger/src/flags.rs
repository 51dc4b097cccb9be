//! Reader and writer feature flags.
//!
//! A manifest carries two bit sets. A client refuses to *read* a table whose
//! reader flags contain a bit it does not support, and refuses to *write* one
//! whose writer flags do. The FRI flag is a pair: the first version-1 ledger
//! commit sets it in both sets, and it is sticky (restore keeps it, draining the
//! history keeps it).

use refract_core::{Error, Result};

// The bits are Lance 14.0.2's (`lance_table::feature_flags`; refract-table
// tests that they agree).

/// Deletion files are present (fragments may carry `_deletions/…`).
pub const FLAG_DELETION_FILES: u64 = 1 << 0;
/// Lance's deprecated "v2 format" writer bit: carries no meaning any more.
pub const FLAG_USE_V2_FORMAT_DEPRECATED: u64 = 1 << 2;
/// The manifest has table config entries (writer flag).
pub const FLAG_TABLE_CONFIG: u64 = 1 << 3;
/// Data files may be in different Lance file versions; each file's own
/// version is authoritative.
pub const FLAG_MIXED_DATA_FILE_VERSIONS: u64 = 1 << 8;
/// The table carries (or once carried) a version-1 FRI history. Set in both the
/// reader and the writer set, never in only one.
pub const FLAG_FRAGMENT_REUSE_INDEX: u64 = 1 << 10;
/// The first bit Lance 14.0.2 does not define. Every bit at or above it is
/// unknown to every client; tests use it as a genuinely unsupported flag.
pub const FLAG_UNKNOWN: u64 = 1 << 18;

/// Every flag this build supports; every other bit Lance defines (stable row
/// ids, base paths, overlays, fragment trees, ...) is refused.
pub const SUPPORTED_FLAGS: u64 = FLAG_DELETION_FILES
    | FLAG_USE_V2_FORMAT_DEPRECATED
    | FLAG_TABLE_CONFIG
    | FLAG_MIXED_DATA_FILE_VERSIONS
    | FLAG_FRAGMENT_REUSE_INDEX;

/// The feature bits a client supports, for reading and for writing.
///
/// Production code uses [`ClientFeatures::current`]; tests build a reduced set
/// (for example [`ClientFeatures::before_fri`]) to stand for an older release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFeatures {
    /// Reader bits this client understands.
    pub reader: u64,
    /// Writer bits this client understands.
    pub writer: u64,
}

impl Default for ClientFeatures {
    fn default() -> Self {
        Self::current()
    }
}

impl ClientFeatures {
    /// The full set of this build.
    pub const fn current() -> Self {
        Self {
            reader: SUPPORTED_FLAGS,
            writer: SUPPORTED_FLAGS,
        }
    }

    /// A client from before version-1 FRI histories existed.
    pub const fn before_fri() -> Self {
        Self {
            reader: SUPPORTED_FLAGS & !FLAG_FRAGMENT_REUSE_INDEX,
            writer: SUPPORTED_FLAGS & !FLAG_FRAGMENT_REUSE_INDEX,
        }
    }

    /// Refuses to read a table with reader flags outside this client's set.
    ///
    /// # Errors
    /// NotSupported when `reader_flags` holds a bit this client does not read.
    pub fn check_read(&self, reader_flags: u64) -> Result<()> {
        let unknown = reader_flags & !self.reader;
        if unknown != 0 {
            return Err(Error::not_supported(format!(
                "table requires reader features 0x{unknown:x} that this client does not support; please upgrade"
            )));
        }
        Ok(())
    }

    /// Refuses to write a table with writer flags outside this client's set.
    ///
    /// # Errors
    /// NotSupported when `writer_flags` holds a bit this client does not write.
    pub fn check_write(&self, writer_flags: u64) -> Result<()> {
        let unknown = writer_flags & !self.writer;
        if unknown != 0 {
            return Err(Error::not_supported(format!(
                "table requires writer features 0x{unknown:x} that this client does not support; please upgrade"
            )));
        }
        Ok(())
    }
}

/// Checks the FRI pairing rule: both bits or neither.
///
/// # Errors
/// Corrupt (of the manifest) when the FRI flag is set in only one of the two sets.
pub fn check_fri_flag_pair(reader_flags: u64, writer_flags: u64) -> Result<()> {
    let in_reader = reader_flags & FLAG_FRAGMENT_REUSE_INDEX != 0;
    let in_writer = writer_flags & FLAG_FRAGMENT_REUSE_INDEX != 0;
    if in_reader != in_writer {
        return Err(Error::corrupt(
            "manifest",
            "the FRI feature flag must be set in both the reader and the writer flags",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_bit_is_refused_for_read_and_write() {
        let client = ClientFeatures::current();
        assert!(client.check_read(FLAG_DELETION_FILES).is_ok());
        assert!(matches!(
            client.check_read(FLAG_UNKNOWN),
            Err(Error::NotSupported { .. })
        ));
        assert!(matches!(
            client.check_write(FLAG_UNKNOWN << 3),
            Err(Error::NotSupported { .. })
        ));
    }

    #[test]
    fn pre_fri_client_refuses_tagged_tables() {
        let old = ClientFeatures::before_fri();
        assert!(old.check_read(FLAG_FRAGMENT_REUSE_INDEX).is_err());
        assert!(old.check_write(FLAG_FRAGMENT_REUSE_INDEX).is_err());
    }

    #[test]
    fn one_sided_fri_pair_is_corrupt() {
        assert!(check_fri_flag_pair(FLAG_FRAGMENT_REUSE_INDEX, 0).is_err());
        assert!(check_fri_flag_pair(0, FLAG_FRAGMENT_REUSE_INDEX).is_err());
        assert!(check_fri_flag_pair(FLAG_FRAGMENT_REUSE_INDEX, FLAG_FRAGMENT_REUSE_INDEX).is_ok());
    }
}
