//! Lance encoding hints for index columns.
//!
//! Lance's writer tries a dictionary encoding on every page of a 64- or
//! 128-bit column (and of vectors): it samples up to 4,096 values into a hash
//! set to estimate their cardinality. Index columns whose values are unique
//! or sorted never gain from a dictionary (sorted duplicates are runs, which
//! run-length encoding covers), so for them the hint skips the attempt.

use std::collections::HashMap;

use arrow_schema::Field;
use lance_encoding::constants::{DICT_DIVISOR_META_KEY, RLE_THRESHOLD_META_KEY};

/// `field` with Lance's dictionary encoding switched off.
pub(crate) fn without_dictionary(field: Field) -> Field {
    with_hints(field, &[(DICT_DIVISOR_META_KEY, u64::MAX.to_string())])
}

/// `field` with Lance's dictionary and run-length encodings switched off,
/// for (nearly) unique values: bit-packing still applies.
pub(crate) fn without_dictionary_or_runs(field: Field) -> Field {
    with_hints(
        field,
        &[
            (DICT_DIVISOR_META_KEY, u64::MAX.to_string()),
            (RLE_THRESHOLD_META_KEY, "0".to_string()),
        ],
    )
}

fn with_hints(field: Field, hints: &[(&str, String)]) -> Field {
    let mut metadata: HashMap<String, String> = field.metadata().clone();
    for (key, value) in hints {
        metadata.insert((*key).to_string(), value.clone());
    }
    field.with_metadata(metadata)
}
