//! # refract-index
//!
//! Built-in index types (btree, bitmap, ngram, ivf_flat) stored as Lance files
//! under `_indices/<uuid>/`, the plugin trait for third-party types, streaming
//! remap through bounded translators, and index-aware query execution.
