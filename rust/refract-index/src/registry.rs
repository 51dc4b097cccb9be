//! The registry of index types: built-ins plus plugins, looked up by stored name.

use std::collections::BTreeMap;
use std::sync::Arc;

use refract_core::{Error, Result};

use async_trait::async_trait;
use refract_table::io::{index_dir, RelativePath};
use refract_table::IndexMetadata;
use roaring::RoaringTreemap;

use crate::types::{IndexQuery, IndexSegmentReader, IndexType, LegacyIndexPlugin, SearchResult};

/// A registered type: one that remaps by streaming, or a legacy plugin served
/// by the materialized fallback.
#[derive(Clone)]
pub enum RegisteredType {
    /// Implements streaming remap.
    Streaming(Arc<dyn IndexType>),
    /// Only implements the legacy `HashMap` remap.
    Legacy(Arc<dyn LegacyIndexPlugin>),
}

impl RegisteredType {
    /// The stored type name.
    pub fn name(&self) -> &'static str {
        match self {
            RegisteredType::Streaming(t) => t.name(),
            RegisteredType::Legacy(t) => t.name(),
        }
    }
}

impl std::fmt::Debug for RegisteredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisteredType::Streaming(t) => write!(f, "Streaming({})", t.name()),
            RegisteredType::Legacy(t) => write!(f, "Legacy({})", t.name()),
        }
    }
}

/// Index types by stored name.
#[derive(Clone, Debug, Default)]
pub struct IndexRegistry {
    types: BTreeMap<String, RegisteredType>,
}

impl IndexRegistry {
    /// An empty registry (no built-ins).
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in types: btree, bitmap, ngram, ivf_flat, and the remap of
    /// pylance's BTREE, BITMAP, LABEL_LIST, NGRAM and IVF indices
    /// ([`crate::types::lance`]).
    pub fn with_builtins() -> Self {
        let mut registry = Self::empty();
        registry.register(Arc::new(crate::types::btree::BTreeIndexType));
        registry.register(Arc::new(crate::types::bitmap::BitmapIndexType));
        registry.register(Arc::new(crate::types::ngram::NgramIndex));
        registry.register(Arc::new(crate::types::ivf_flat::IvfFlatIndex));
        registry.register(Arc::new(crate::types::lance::LanceBTreeIndex::new()));
        registry.register(Arc::new(crate::types::lance::LanceBitmapIndex::new()));
        registry.register(Arc::new(crate::types::lance::LanceNgramIndex::new()));
        registry.register(Arc::new(crate::types::lance::LanceLabelListIndex::new()));
        registry.register(Arc::new(crate::types::lance::LanceIvfIndex::new()));
        registry
    }

    /// Registers (or replaces) a streaming type under its name.
    pub fn register(&mut self, index_type: Arc<dyn IndexType>) {
        self.types.insert(
            index_type.name().to_string(),
            RegisteredType::Streaming(index_type),
        );
    }

    /// Registers (or replaces) a legacy plugin under its name.
    pub fn register_legacy(&mut self, plugin: Arc<dyn LegacyIndexPlugin>) {
        self.types
            .insert(plugin.name().to_string(), RegisteredType::Legacy(plugin));
    }

    /// The type stored as `name`.
    ///
    /// # Errors
    /// NotSupported when no type is registered as `name`.
    pub fn get(&self, name: &str) -> Result<&RegisteredType> {
        self.types.get(name).ok_or_else(|| {
            Error::not_supported(format!(
                "index type '{name}' is not registered (known: {})",
                self.names().join(", ")
            ))
        })
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.types.keys().map(String::as_str).collect()
    }
}

impl RegisteredType {
    /// Opens `segment`, of this type. Every read of a file its metadata
    /// records is verified against its checksum; its Corrupt errors, opening
    /// and searching, name the segment's directory (see `name_segment`).
    ///
    /// # Errors
    /// The type's open errors: Corrupt for bad details or damaged files,
    /// NotFound for missing files, External for store failures.
    pub async fn open(
        &self,
        ctx: &crate::types::IndexContext,
        segment: &IndexMetadata,
    ) -> Result<Arc<dyn IndexSegmentReader>> {
        let dir = &index_dir(&segment.uuid);
        let details = segment.details.as_slice();
        let ctx = &ctx.for_segment(segment);
        let opened = match self {
            RegisteredType::Streaming(t) => t.open(ctx, dir, details).await,
            RegisteredType::Legacy(t) => t.open(ctx, dir, details).await,
        };
        let inner = opened.map_err(|err| name_segment(self.name(), dir, err))?;
        Ok(Arc::new(NamedSegment {
            inner,
            type_name: self.name(),
            dir: dir.clone(),
        }))
    }

    /// The on-disk layout version this type writes.
    pub fn index_version(&self) -> u32 {
        match self {
            RegisteredType::Streaming(t) => t.index_version(),
            RegisteredType::Legacy(t) => t.index_version(),
        }
    }

    /// The index version a remap of a segment stored at `stored` records
    /// (see [`IndexType::remapped_index_version`]).
    pub fn remapped_index_version(&self, stored: u32) -> u32 {
        match self {
            RegisteredType::Streaming(t) => t.remapped_index_version(stored),
            RegisteredType::Legacy(t) => t.index_version(),
        }
    }
}

/// Names the segment directory `dir` (`_indices/<uuid>/`) in a Corrupt error
/// that the checks of index type `type_name` raised about its own files
/// (their `what` starts with the type name: "btree values", "bitmap index",
/// "ngram postings file", "ivf_flat index file") and that names no file yet.
/// The one place index errors gain their location; errors of other origins
/// (a row map, the FRI ledger, the store, the details the manifest holds)
/// pass unchanged.
pub(crate) fn name_segment(type_name: &str, dir: &RelativePath, err: Error) -> Error {
    match err {
        Error::Corrupt { what, message }
            if what.split(' ').next() == Some(type_name)
                && !what.ends_with("details")
                && !what.contains(dir.as_str())
                && !message.contains(dir.as_str()) =>
        {
            Error::corrupt(format!("{what} in {dir}"), message)
        }
        other => other,
    }
}

/// An opened segment whose errors name its directory.
struct NamedSegment {
    inner: Arc<dyn IndexSegmentReader>,
    type_name: &'static str,
    dir: RelativePath,
}

#[async_trait]
impl IndexSegmentReader for NamedSegment {
    fn can_answer(&self, query: &IndexQuery) -> bool {
        self.inner.can_answer(query)
    }

    fn estimate_rows(&self, query: &IndexQuery) -> Option<u64> {
        self.inner.estimate_rows(query)
    }

    fn estimate_work(&self, query: &IndexQuery) -> Option<crate::query::cost::Work> {
        self.inner.estimate_work(query)
    }

    async fn search(&self, query: &IndexQuery) -> Result<SearchResult> {
        self.inner
            .search(query)
            .await
            .map_err(|err| name_segment(self.type_name, &self.dir, err))
    }

    async fn stored_addresses(&self) -> Result<RoaringTreemap> {
        self.inner
            .stored_addresses()
            .await
            .map_err(|err| name_segment(self.type_name, &self.dir, err))
    }

    async fn visit_entries(&self, sink: &mut dyn crate::types::EntrySink) -> Result<bool> {
        self.inner
            .visit_entries(sink)
            .await
            .map_err(|err| name_segment(self.type_name, &self.dir, err))
    }

    fn expected_entries(
        &self,
        rows: &arrow_array::RecordBatch,
    ) -> Result<Option<crate::types::IndexEntries>> {
        self.inner.expected_entries(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_types_own_unnamed_corruption_gains_the_segment_dir() {
        let dir = refract_table::io::index_dir(&uuid::Uuid::nil());
        let named = |err: Error| name_segment("btree", &dir, err).to_string();
        assert_eq!(
            named(Error::corrupt("btree page lookup", "pages overlap")),
            format!("corrupt btree page lookup in {dir}: pages overlap")
        );
        // Already named, another type's, the manifest's details, another
        // origin, another kind: unchanged.
        for err in [
            Error::corrupt(
                "btree values",
                format!("{dir}values.lance holds a null value"),
            ),
            Error::corrupt("bitmap index", "null posting"),
            Error::corrupt("btree details", "page_rows is 0"),
            Error::corrupt("row map _fri/x/stable_partition.lance", "label 9"),
            Error::invalid_input("btree cannot answer"),
        ] {
            let before = err.to_string();
            assert_eq!(named(err), before);
        }
    }
}
