//! Serialized posting lists (sets of row addresses).
//!
//! A posting is a `RoaringTreemap`, stored as a sequence of
//! `(high u32 LE, byte length u32 LE, portable 32-bit roaring bitmap)` parts
//! with strictly increasing `high` keys. Each part is decoded through the core's
//! framing-checked decoder, so hostile bytes are rejected before roaring
//! allocates anything.
//!
//! Remapping postings (shared by the bitmap and ngram types):
//! * [`translate_encoded`] walks one stored posting, shifting parts that move
//!   by one constant in bulk and translating the others in ascending slices of
//!   at most [`MAX_TRANSLATION_BATCH`](refract_core::MAX_TRANSLATION_BATCH) addresses, and assembles the survivors
//!   without per-element treemap inserts ([`TreemapAssembler`]);
//! * [`TranslationMemo`] is for types whose postings share rows (ngram: a row
//!   sits in one posting per trigram): parts that move by one constant are
//!   shifted in bulk; in the others each stored address is translated once,
//!   in ascending batches of at most [`MAX_TRANSLATION_BATCH`](refract_core::MAX_TRANSLATION_BATCH), and its result
//!   kept in a dense per-fragment table (8 bytes per stored row, indexed by
//!   offset; no hash map), so later postings only look results up.
//!
//! Files: [`codec`] (the stored form), `assembler` (building treemaps
//! container by container), `raw` (a stored part read in place, framed by
//! `refract_core::roaring_format`), [`translate`] (one posting through a
//! translator) and [`memo`] (postings that share rows).

mod assembler;
pub mod codec;
pub mod memo;
mod raw;
#[cfg(test)]
mod serialized_tests;
#[cfg(test)]
mod tests;
pub mod translate;

pub use assembler::TreemapAssembler;
pub use codec::{decode, encode};
pub use memo::{TranslationMemo, PARALLEL_MIN_ADDRESSES};
pub use translate::{translate_encoded, translate_many, TranslateScratch};
