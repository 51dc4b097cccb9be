//! Binding one mapping reader per supported transition.
//!
//! Ordered compactions are served by the core's `OrderedCompactionMapping`;
//! stable partitions by a [`StablePartitionMapping`] over the row map, which
//! reads only the counts when opened and label chunks when translation
//! reaches them. Bound readers are cached by transition fingerprint + storage
//! binding (the dataset root), so a new FRI uuid holding the same transition
//! (every history update mints one) reuses the reader, and two datasets never
//! share a reader bound to the other's files. Binding is lazy: a transition
//! no query translates through is never opened.

use std::sync::Arc;

use refract_core::cache::{ByteWeightedCache, CacheKey, CacheNamespace, DeepSize, KeyParts};
use refract_core::{MappingReader, OrderedCompactionMapping, Result};
use refract_ledger::Mapping;
use refract_table::io::DatasetStore;
use roaring::RoaringBitmap;

use crate::history::{rows_of, TransitionNode};
use crate::rowmap::{ChunkCacheMode, RowMapReader, RowMapSource};

/// A stable-partition transition's mapping reader.
#[derive(Debug)]
pub struct StablePartitionMapping {
    reader: Arc<RowMapReader>,
    sources: Vec<u64>,
    destinations: Vec<u64>,
}

impl StablePartitionMapping {
    /// Opens the row map of `node` (which must be a stable partition).
    ///
    /// # Errors
    /// InvalidInput when `node` is not a stable partition; the errors of
    /// [`RowMapReader::open`].
    pub async fn open(
        store: &DatasetStore,
        cache: &ByteWeightedCache,
        node: &TransitionNode,
        mode: ChunkCacheMode,
    ) -> Result<Self> {
        let Mapping::StablePartition {
            map_id,
            map_size_bytes,
            map_checksum,
        } = node.record.mapping()
        else {
            return Err(refract_core::Error::invalid_input(
                "not a stable-partition transition",
            ));
        };
        let sources: Vec<RowMapSource> = node
            .record
            .sources()
            .iter()
            .map(|d| RowMapSource {
                fragment_id: d.id,
                physical_rows: d.physical_rows,
            })
            .collect();
        let destinations: Vec<(u64, u64)> = node
            .record
            .destinations()
            .iter()
            .map(|d| (d.id, d.physical_rows))
            .collect();
        let reader = RowMapReader::open(
            store,
            map_id,
            *map_size_bytes,
            map_checksum.as_ref(),
            *node.fingerprint(),
            &sources,
            &destinations,
            cache,
            mode,
        )
        .await?;
        Ok(Self {
            reader: Arc::new(reader),
            sources: node.sources.clone(),
            destinations: node.destinations.clone(),
        })
    }

    /// The row map reader.
    pub fn row_map(&self) -> &RowMapReader {
        &self.reader
    }

    /// The row map reader, shared.
    pub fn shared_row_map(&self) -> Arc<RowMapReader> {
        self.reader.clone()
    }
}

#[async_trait::async_trait]
impl MappingReader for StablePartitionMapping {
    fn sources(&self) -> &[u64] {
        &self.sources
    }

    fn destinations(&self) -> &[u64] {
        &self.destinations
    }

    /// Any destination may hold rows of every source: complete only when all
    /// sources are covered.
    fn coverage(&self, covered_sources: &RoaringBitmap) -> Vec<u64> {
        let all = self
            .sources
            .iter()
            .all(|s| u32::try_from(*s).is_ok_and(|id| covered_sources.contains(id)));
        if all {
            self.destinations.clone()
        } else {
            Vec::new()
        }
    }

    async fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        self.reader.translate(batch, out).await
    }

    fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        Some(self)
    }
}

/// A bound mapping reader as a cache value.
pub struct BoundMapping {
    /// The reader.
    pub reader: Arc<dyn MappingReader>,
    weight: usize,
}

impl DeepSize for BoundMapping {
    fn deep_size_bytes(&self) -> usize {
        self.weight
    }
}

/// Binds mapping readers of one storage binding (dataset root).
#[derive(Debug, Clone)]
pub struct MappingBinder {
    store: DatasetStore,
    cache: ByteWeightedCache,
    mode: ChunkCacheMode,
}

impl MappingBinder {
    /// A binder over `store` caching in `cache`, row-map chunks per `mode`.
    pub fn new(store: DatasetStore, cache: ByteWeightedCache, mode: ChunkCacheMode) -> Self {
        Self { store, cache, mode }
    }

    /// The chunk cache mode.
    pub fn mode(&self) -> ChunkCacheMode {
        self.mode
    }

    /// The reader of `node`, bound on first use and cached by fingerprint +
    /// dataset root.
    ///
    /// # Errors
    /// InvalidInput for an ordered compaction whose survivors do not fit its
    /// fragments; for a stable partition, those of [`StablePartitionMapping::open`].
    pub async fn bind(&self, node: &TransitionNode) -> Result<Arc<dyn MappingReader>> {
        let key = CacheKey::new(
            CacheNamespace::MappingReader,
            KeyParts::FingerprintBinding {
                fingerprint: *node.fingerprint(),
                binding: self.binding(),
            },
        );
        let bound = self.cache.get_or_try_insert(key, self.open(node)).await?;
        Ok(bound.reader.clone())
    }

    /// The storage binding: the dataset root, plus the chunk mode so a
    /// diagnostic run with the cache disabled never reuses a caching reader.
    fn binding(&self) -> String {
        format!("{}#{:?}", self.store.uri(), self.mode)
    }

    async fn open(&self, node: &TransitionNode) -> Result<BoundMapping> {
        match node.record.mapping() {
            Mapping::OrderedCompaction { surviving } => {
                let mapping = OrderedCompactionMapping::new(
                    rows_of(node.record.sources()),
                    rows_of(node.record.destinations()),
                    surviving.clone(),
                )?;
                let weight = mapping.deep_size_bytes() as usize;
                Ok(BoundMapping {
                    reader: Arc::new(mapping),
                    weight,
                })
            }
            Mapping::StablePartition { .. } => {
                let mapping =
                    StablePartitionMapping::open(&self.store, &self.cache, node, self.mode).await?;
                let weight = mapping.reader.deep_size_bytes();
                Ok(BoundMapping {
                    reader: Arc::new(mapping),
                    weight,
                })
            }
        }
    }
}
