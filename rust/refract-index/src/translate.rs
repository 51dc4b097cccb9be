//! Address translation as seen by index remap and queries: the core's bounded
//! translators, re-exported so index types depend on one path.

pub use refract_core::translate::{
    translate_all, translate_all_async, BatchTranslator, Translator, MAX_TRANSLATION_BATCH,
};
