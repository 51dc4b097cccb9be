//! # refract-ledger
//!
//! The fragment-reuse-index (FRI) ledger: Lance's `FragmentReuseIndexDetails`
//! messages (from `lance-table`), decoding with full validation (digests, row conservation, lineage), canonical
//! encoding and fingerprints, and the feature flags plus write gate that fence
//! tables carrying a version-1 history.
//!
//! Reading: [`parse_details`] (version gate and external-reference checks, no
//! I/O) then [`Ledger::from_content_bytes`]; or [`Ledger::decode`] with a
//! synchronous reader. Writing: [`TransitionRecord::new`],
//! [`Ledger::push_transition`], [`Ledger::remove_transitions`],
//! [`Ledger::encode_details`]. See `docs/fri.md`.
//!
//! ```
//! use refract_ledger::{FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord};
//! use roaring::RoaringTreemap;
//!
//! // Fragments 1 and 2 (10 rows each, none deleted) compacted into fragment 3.
//! let surviving: RoaringTreemap = (1..=2u64)
//!     .flat_map(|fragment| (0..10u64).map(move |offset| fragment << 32 | offset))
//!     .collect();
//! let record = TransitionRecord::new(
//!     vec![FragmentDigest::new(1, 10, 0), FragmentDigest::new(2, 10, 0)],
//!     vec![FragmentDigest::new(3, 20, 0)],
//!     Mapping::OrderedCompaction { surviving })?;
//! let mut ledger = Ledger::new();
//! ledger.push_transition(record)?;
//! let stored = ledger.encode_content()?;
//! let decoded = Ledger::from_content_bytes(&stored, ledger.index_version())?;
//! assert_eq!(decoded.transitions(), ledger.transitions());
//! # Ok::<(), refract_core::Error>(())
//! ```

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod flags;

mod bitmap;
mod decode;
mod encode;
mod external;
mod fingerprint;
mod ledger;
mod lineage;
mod model;
pub mod proto;
pub mod system;
mod validate;
mod violation;
mod wire;

pub use decode::{
    check_index_version, parse_details, ContentLocation, FRI_INDEX_VERSION_LEGACY,
    FRI_INDEX_VERSION_TAGGED, MAX_SUPPORTED_FRI_INDEX_VERSION,
};
pub use encode::{external_path, EncodedDetails, EXTERNAL_FILE_NAME, MAX_INLINE_BYTES};
pub use external::{fri_directory, ExternalContent, MAX_EXTERNAL_BYTES};
pub use fingerprint::{fingerprint_hex, Fingerprint};
pub use ledger::Ledger;
pub use lineage::Lineage;
pub use model::{
    lift_legacy, FragmentDigest, FragmentDigestExt, LegacyVersion, Mapping, TransitionRecord,
};
pub use system::{append_legacy_version, is_fri_entry_of, FRI_INDEX_NAME, FRI_INDEX_TYPE};
pub use validate::{MAX_FRAGMENT_ID_EXCLUSIVE, MAX_PARTITION_DESTINATIONS, MAX_PHYSICAL_ROWS};

#[cfg(test)]
mod tests;
