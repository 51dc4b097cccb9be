//! The FRI system entry and the metadata-only lookups on it.
//!
//! Everything here reads only the manifest's index section: no ledger is
//! decoded, no file is read and no cache is touched. Bookkeeping callers (is
//! there an FRI, which uuid, what does it look like) therefore never build the
//! full reader and keep working when the ledger itself is corrupt.

use refract_core::{Error, Result};
use refract_ledger::{parse_details, ContentLocation};
use refract_table::{IndexMetadata, Manifest};
use uuid::Uuid;

pub use refract_ledger::{FRI_INDEX_NAME, FRI_INDEX_TYPE};

/// True when `meta` is the FRI entry.
pub fn is_fri_entry(meta: &IndexMetadata) -> bool {
    meta.name == FRI_INDEX_NAME
}

/// The FRI entry of an index section. Corrupt when there are several.
pub fn fri_entry(indices: &[IndexMetadata]) -> Result<Option<&IndexMetadata>> {
    let mut found = indices.iter().filter(|meta| is_fri_entry(meta));
    let first = found.next();
    if found.next().is_some() {
        return Err(Error::corrupt(
            "manifest",
            format!("more than one {FRI_INDEX_NAME} entry"),
        ));
    }
    Ok(first)
}

/// The uuid of the manifest's FRI entry (the first one), without decoding it.
pub fn fri_uuid(manifest: &Manifest) -> Option<Uuid> {
    manifest
        .indices
        .iter()
        .find(|meta| is_fri_entry(meta))
        .map(|meta| meta.uuid)
}

/// True when the manifest carries an FRI entry.
pub fn has_fri(manifest: &Manifest) -> bool {
    fri_uuid(manifest).is_some()
}

/// Where an FRI entry's ledger content lives, as far as the details say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FriContent {
    /// Inline in the entry's details.
    Inline {
        /// Encoded content length.
        bytes: u64,
    },
    /// In a file under the entry's index directory.
    External {
        /// Dataset-relative path.
        path: String,
        /// Content length.
        bytes: u64,
    },
    /// The details cannot be interpreted by this client (unknown version or
    /// corrupt envelope); the reason is the decoder's message.
    Unreadable {
        /// Why.
        reason: String,
    },
}

/// Statistics of the FRI entry, from metadata only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FriStatistics {
    /// Entry uuid.
    pub uuid: Uuid,
    /// Stored `index_version` (0 legacy, 1 tagged).
    pub index_version: u32,
    /// Dataset version the entry was written at.
    pub dataset_version: u64,
    /// Size of the entry's details.
    pub details_bytes: u64,
    /// Where the content lives.
    pub content: FriContent,
}

/// Statistics of the manifest's FRI entry; `None` without one. Never decodes
/// the ledger content, so a corrupt ledger still has statistics.
pub fn fri_statistics(manifest: &Manifest) -> Option<FriStatistics> {
    let meta = manifest.indices.iter().find(|meta| is_fri_entry(meta))?;
    let content = match parse_details(&meta.details, meta.index_version, &meta.uuid) {
        Ok(ContentLocation::Inline(bytes)) => FriContent::Inline {
            bytes: bytes.len() as u64,
        },
        Ok(ContentLocation::External(external)) => FriContent::External {
            path: external.path().to_string(),
            bytes: external.size(),
        },
        Err(err) => FriContent::Unreadable {
            reason: err.to_string(),
        },
    };
    Some(FriStatistics {
        uuid: meta.uuid,
        index_version: meta.index_version,
        dataset_version: meta.dataset_version,
        details_bytes: meta.details.len() as u64,
        content,
    })
}
