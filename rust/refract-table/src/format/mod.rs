//! The on-disk format model: manifests, fragments, data files and index
//! metadata, converted to and from `protos/table.proto` (see docs/format.md).

pub mod fragment;
pub mod index;
pub mod manifest;
pub mod proto;

pub use crate::io::deletion_file::DeletionFileRef;
pub use fragment::{DataFile, Fragment, MAX_FRAGMENT_ID, MAX_PHYSICAL_ROWS};
pub use index::{IndexMetadata, SYSTEM_INDEX_PREFIX};
pub use manifest::{FragmentIndex, Manifest};
