//! Lance encoding hints for index columns.
//!
//! Lance's writer tries a dictionary encoding on every page of a 64- or
//! 128-bit column (and of vectors): it samples up to 4,096 values into a hash
//! set to estimate their cardinality. Index columns whose values are unique
//! or sorted never gain from a dictionary (sorted duplicates are runs, which
//! run-length encoding covers), so for them the hint skips the attempt.
//! Serialized postings are compressed bitmaps already: a general-purpose
//! compressor at its default level costs more time than the bytes it saves.

use std::collections::HashMap;

use arrow_schema::Field;
use lance_encoding::constants::{
    COMPRESSION_LEVEL_META_KEY, COMPRESSION_META_KEY, DICT_DIVISOR_META_KEY, RLE_THRESHOLD_META_KEY,
};

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

/// `field` (binary) compressed with zstd at level 1 instead of Lance's
/// default level 3: the values are compressed bitmaps already, and level 3
/// cost an ngram remap about a third of its time for files 15 % smaller
/// (level 1 files were no larger after a compaction).
pub(crate) fn lightly_compressed(field: Field) -> Field {
    with_hints(
        field,
        &[
            (COMPRESSION_META_KEY, "zstd".to_string()),
            (COMPRESSION_LEVEL_META_KEY, "1".to_string()),
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
