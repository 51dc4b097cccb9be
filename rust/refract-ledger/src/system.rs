//! The FRI as a system index entry: its reserved name and type.
//!
//! The entry itself (`IndexMetadata`) is a table-engine type; these constants
//! let every crate recognise it without depending on the engine.

/// Reserved name of the FRI system entry. Names starting with `__` are system
/// entries that index listings pass through untouched.
pub const FRI_INDEX_NAME: &str = "__refract_fri";

/// Index type string recorded in the FRI entry.
pub const FRI_INDEX_TYPE: &str = "fragment_reuse";

/// True when an index entry named `name` is the FRI.
pub fn is_fri_name(name: &str) -> bool {
    name == FRI_INDEX_NAME
}
