//! Metadata-only lookups on the FRI system entry (what its details say about
//! the ledger's size and location). Recognising and finding the entry live in
//! `refract_table::commit::fri_entry`; they are re-exported here.
//!
//! Everything here reads only the manifest's index section: no ledger is
//! decoded, no file is read and no cache is touched. Bookkeeping callers (is
//! there an FRI, which uuid, what does it look like) therefore never build the
//! full reader and keep working when the ledger itself is corrupt.

use refract_ledger::{parse_details, ContentLocation};
use refract_table::Manifest;
use uuid::Uuid;

pub use refract_ledger::{FRI_INDEX_NAME, FRI_INDEX_TYPE};
pub use refract_table::commit::fri_entry::{
    fri_entry_in as fri_entry, fri_uuid, has_fri, is_fri_entry,
};

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
