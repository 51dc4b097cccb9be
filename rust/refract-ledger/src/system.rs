//! The FRI as a system index entry: its reserved name and type, and the
//! legacy-writer append of a version-0 reuse version.
//!
//! The entry itself (`IndexMetadata`) is a table-engine type; these constants
//! let every crate recognise it without depending on the engine.

use prost::Message;
use refract_core::{Error, Result};

use crate::decode::FRI_INDEX_VERSION_LEGACY;
use crate::ledger::Ledger;
use crate::model::{Mapping, TransitionRecord};
use crate::proto;

/// Reserved name of the FRI system entry, Lance's. Names starting with `__`
/// are system entries that index listings pass through untouched.
pub const FRI_INDEX_NAME: &str = lance_table::system_index::frag_reuse::FRAG_REUSE_INDEX_NAME;

/// Index type recorded in the FRI entry: the type URL of its details.
pub const FRI_INDEX_TYPE: &str = crate::proto::DETAILS_TYPE_URL;

/// True when an index entry named `name` with type (details type URL)
/// `index_type` is the FRI. Like Lance, both must match: a user index that
/// borrows the name is not the FRI.
pub fn is_fri_entry_of(name: &str, index_type: &str) -> bool {
    name == FRI_INDEX_NAME
        && index_type
            .rsplit_once('/')
            .is_some_and(|(_, type_name)| type_name.eq_ignore_ascii_case(FRI_TYPE_NAME))
}

/// Fully qualified name of the details message.
const FRI_TYPE_NAME: &str = "lance.table.FragmentReuseIndexDetails";

/// Appends a legacy (version 0) reuse version — the groups of one deferred
/// compaction, each an ordered-compaction record — to a version-0 ledger, as a
/// legacy writer does. The result is re-decoded, so it is fully validated
/// (lineage included).
///
/// # Errors
/// NotSupported when `ledger` is tagged (version 1): a legacy version may not
/// be added to a tagged history; InvalidInput when a group is not an ordered
/// compaction or breaks lineage.
pub fn append_legacy_version(
    ledger: &Ledger,
    dataset_version: u64,
    groups: &[TransitionRecord],
) -> Result<Ledger> {
    if ledger.index_version() != FRI_INDEX_VERSION_LEGACY {
        return Err(Error::not_supported(
            "a legacy (version 0) FRI version cannot be appended to a tagged (version 1) \
             history; upgrade to a writer supporting tagged histories",
        ));
    }
    let mut content = proto::InlineContent::decode(ledger.encode_content()?.as_slice())
        .map_err(|e| Error::corrupt("FRI ledger", format!("re-decoding own encoding: {e}")))?;
    let groups = groups
        .iter()
        .map(|group| match group.mapping() {
            Mapping::OrderedCompaction { surviving } => {
                let mut bytes = Vec::with_capacity(surviving.serialized_size());
                // Serializing into a Vec cannot fail.
                let _ = surviving.serialize_into(&mut bytes);
                Ok(proto::Group {
                    changed_row_addrs: bytes,
                    old_fragments: group.sources().to_vec(),
                    new_fragments: group.destinations().to_vec(),
                })
            }
            Mapping::StablePartition { .. } => Err(Error::invalid_input(
                "a legacy FRI version can only hold ordered compactions",
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    content.legacy_versions.push(proto::Version {
        dataset_version,
        groups,
    });
    Ledger::from_content_bytes(&content.encode_to_vec(), FRI_INDEX_VERSION_LEGACY).map_err(|e| {
        match e {
            Error::Corrupt { message, .. } => Error::invalid_input(message),
            other => other,
        }
    })
}
