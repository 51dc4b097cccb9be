//! The on-disk format model: manifests, fragments, data files and index
//! metadata, converted to and from Lance 14.0.2's messages (see docs/format.md).

pub mod fragment;
pub(crate) mod framing;
pub mod index;
pub mod manifest;
pub mod schema;
pub(crate) mod sidecar;

pub use crate::io::deletion_file::{DeletionFileKind, DeletionFileRef};
pub use fragment::{DataFile, FileLayout, Fragment, MAX_FRAGMENT_ID, MAX_PHYSICAL_ROWS};
pub use index::{IndexMetadata, LanceIndexFields, SYSTEM_INDEX_PREFIX};
pub use manifest::{FragmentIndex, LanceManifestFields, Manifest};
pub use schema::TableSchema;
