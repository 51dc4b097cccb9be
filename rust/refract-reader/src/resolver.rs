//! `FriReader` (one snapshot's view through its FRI) and `FriResolver`, the
//! [`SegmentResolver`] that query execution uses.
//!
//! Open path:
//! * no FRI entry → direct coverage, no translation (the same as
//!   [`DirectResolver`]);
//! * a version-0 entry → the legacy path (chained compact remaps, coverage
//!   remapped group by group);
//! * a version-1 entry → the validated ledger (decoded once per FRI uuid),
//!   lineage-derived coverage and hop-by-hop translation through mapping
//!   readers bound lazily (cached by fingerprint + dataset root).
//!
//! The derived listing is cached per (manifest version, FRI uuid) in the
//! session cache, so every query on a snapshot reuses it.

use std::sync::Arc;

use async_trait::async_trait;
use refract_core::cache::{CacheKey, CacheNamespace, KeyParts};
use refract_core::{BatchTranslator, Error, Result};
use refract_index::resolver::{DirectResolver, ResolvedSegment, SegmentResolver};
use refract_ledger::Mapping;
use refract_table::{Dataset, IndexMetadata};

use crate::coverage::Disposition;
use crate::entry::fri_entry;
use crate::history::{load_history, FriHistory};
use crate::listing::{DerivedListing, ListedEntry};
use crate::mapping::MappingBinder;
use crate::rowmap::ChunkCacheMode;
use crate::translate::{LegacyTranslator, SegmentScope, SegmentTranslator};

/// One snapshot seen through its FRI.
#[derive(Clone)]
pub struct FriReader {
    dataset: Dataset,
    view: Option<(Arc<FriHistory>, Arc<DerivedListing>)>,
    binder: MappingBinder,
}

impl std::fmt::Debug for FriReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FriReader")
            .field("version", &self.dataset.version())
            .field("fri", &self.view.as_ref().map(|(h, _)| h.uuid()))
            .finish()
    }
}

impl FriReader {
    /// Opens `dataset`'s FRI view with row-map chunks cached per `mode`.
    ///
    /// # Errors
    /// NotSupported for an FRI version this client cannot read; Corrupt for a
    /// damaged ledger or several FRI entries; NotFound for a missing external
    /// file; with [`ChunkCacheMode::Prewarm`], the errors of opening row maps.
    pub async fn open(dataset: &Dataset, mode: ChunkCacheMode) -> Result<Self> {
        let cache = dataset.session().cache().clone();
        let binder = MappingBinder::new(dataset.store().clone(), cache.clone(), mode);
        let Some(entry) = fri_entry(&dataset.manifest().indices)? else {
            return Ok(Self {
                dataset: dataset.clone(),
                view: None,
                binder,
            });
        };
        let history = load_history(dataset.store(), &cache, entry).await?;
        let key = CacheKey::new(
            CacheNamespace::FriDerivedListing,
            KeyParts::VersionUuid {
                version: dataset.version(),
                uuid: entry.uuid.as_u128(),
            },
        );
        let manifest = dataset.manifest().clone();
        let source = history.clone();
        let listing = cache
            .get_or_try_insert(key, async move {
                Ok(DerivedListing::derive(&source, &manifest))
            })
            .await?;
        if mode == ChunkCacheMode::Prewarm {
            prewarm(&binder, &history).await?;
        }
        Ok(Self {
            dataset: dataset.clone(),
            view: Some((history, listing)),
            binder,
        })
    }

    /// The FRI history, when the snapshot has an FRI.
    pub fn history(&self) -> Option<&Arc<FriHistory>> {
        self.view.as_ref().map(|(history, _)| history)
    }

    /// The derived listing, when the snapshot has an FRI.
    pub fn listing(&self) -> Option<&Arc<DerivedListing>> {
        self.view.as_ref().map(|(_, listing)| listing)
    }

    /// The index listing queries plan with: the manifest's own listing
    /// without an FRI; otherwise system entries untouched and user segments
    /// with derived (in-memory) coverage, those serving nothing left out.
    pub fn query_indices(&self) -> Vec<IndexMetadata> {
        match self.listing() {
            Some(listing) => listing.query_indices(),
            None => self.dataset.manifest().indices.clone(),
        }
    }

    /// Resolves `segments` (all of one logical index), one result per input
    /// in the same order. A segment that serves nothing gets empty coverage.
    ///
    /// # Errors
    /// InvalidInput when a segment is not a user segment of this version.
    pub async fn resolve(&self, segments: &[IndexMetadata]) -> Result<Vec<ResolvedSegment>> {
        let Some((history, listing)) = &self.view else {
            return DirectResolver.resolve(&self.dataset, segments).await;
        };
        segments
            .iter()
            .map(|meta| self.resolve_one(history, listing, meta))
            .collect()
    }

    fn resolve_one(
        &self,
        history: &Arc<FriHistory>,
        listing: &DerivedListing,
        meta: &IndexMetadata,
    ) -> Result<ResolvedSegment> {
        let Some(ListedEntry::Segment {
            meta: stored,
            plan,
            claimed,
        }) = listing.entry(&meta.uuid)
        else {
            return Err(Error::invalid_input(format!(
                "index segment {} is not a user segment of version {}",
                meta.uuid,
                self.dataset.version()
            )));
        };
        let translator: Option<Arc<dyn BatchTranslator>> = match plan.disposition {
            Disposition::Identity | Disposition::Excluded(_) => None,
            Disposition::Translate => {
                let scope = SegmentScope {
                    live: listing.live().clone(),
                    claimed: claimed.clone(),
                    owned: plan.owned.clone(),
                    coverage: plan.coverage.clone(),
                    stored: stored.fragment_bitmap.clone().unwrap_or_default(),
                };
                Some(match history.legacy() {
                    Some(_) => Arc::new(LegacyTranslator::new(history.clone(), scope)),
                    None => Arc::new(SegmentTranslator::new(
                        history.clone(),
                        self.binder.clone(),
                        scope,
                    )),
                })
            }
        };
        Ok(ResolvedSegment {
            meta: stored.clone(),
            coverage: plan.coverage.clone(),
            translator,
            hops: plan.hops,
        })
    }
}

/// Binds every stable-partition mapping, which loads all its chunks.
async fn prewarm(binder: &MappingBinder, history: &FriHistory) -> Result<()> {
    for node in history.nodes() {
        if matches!(node.record.mapping(), Mapping::StablePartition { .. }) {
            binder.bind(node).await?;
        }
    }
    Ok(())
}

/// The FRI-aware [`SegmentResolver`]: plug it into a query with
/// `Query::with_resolver(Arc::new(FriResolver::default()))` (row-map chunks
/// cached lazily) or [`FriResolver::with_mode`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FriResolver {
    mode: ChunkCacheMode,
}

impl FriResolver {
    /// Chunk caching per `mode`.
    pub fn with_mode(mode: ChunkCacheMode) -> Self {
        Self { mode }
    }
}

#[async_trait]
impl SegmentResolver for FriResolver {
    async fn resolve(
        &self,
        dataset: &Dataset,
        segments: &[IndexMetadata],
    ) -> Result<Vec<ResolvedSegment>> {
        FriReader::open(dataset, self.mode)
            .await?
            .resolve(segments)
            .await
    }
}
