//! The registry of index types: built-ins plus plugins, looked up by stored name.

use std::collections::BTreeMap;
use std::sync::Arc;

use refract_core::{Error, Result};

use crate::types::{IndexType, LegacyIndexPlugin};

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

    /// The built-in types: btree, bitmap, ngram, ivf_flat.
    pub fn with_builtins() -> Self {
        let mut registry = Self::empty();
        registry.register(Arc::new(crate::types::btree::BTreeIndexType));
        registry.register(Arc::new(crate::types::bitmap::BitmapIndexType));
        registry.register(Arc::new(crate::types::ngram::NgramIndex));
        registry.register(Arc::new(crate::types::ivf_flat::IvfFlatIndex));
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

    /// The type stored as `name`; NotSupported when unknown.
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
    /// Opens a segment of this type.
    pub async fn open(
        &self,
        ctx: &crate::types::IndexContext,
        dir: &refract_table::io::RelativePath,
        details: &[u8],
    ) -> Result<Arc<dyn crate::types::IndexSegmentReader>> {
        match self {
            RegisteredType::Streaming(t) => t.open(ctx, dir, details).await,
            RegisteredType::Legacy(t) => t.open(ctx, dir, details).await,
        }
    }

    /// The on-disk layout version this type writes.
    pub fn index_version(&self) -> u32 {
        match self {
            RegisteredType::Streaming(t) => t.index_version(),
            RegisteredType::Legacy(t) => t.index_version(),
        }
    }
}
