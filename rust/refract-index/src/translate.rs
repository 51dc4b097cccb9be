//! Address translation as seen by index remap.
//!
//! Placeholder twin of the core's `Translator` (same method shape) until
//! refract-core publishes it; then this module re-exports the core's items so
//! implementations of [`crate::types::IndexType`] do not change.

use refract_core::Result;

/// Most addresses handed to one [`Translator::translate`] call.
pub const MAX_TRANSLATION_BATCH: usize = 65_536;

/// Translates stored row addresses to current ones, in bounded batches.
pub trait Translator: Send + Sync {
    /// Clears `out` and pushes one entry per input address, in input order:
    /// `None` = the row is gone, `Some(addr)` = its current address (itself
    /// when unaffected). Inputs may be in any order and contain duplicates.
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()>;
}
