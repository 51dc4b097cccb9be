//! Segment resolution: which live fragments each segment serves, and how its
//! stored addresses become current ones.
//!
//! The default [`DirectResolver`] serves a segment's stored fragments that are
//! still live, without translation. The FRI reader (refract-reader) plugs in a
//! resolver that derives coverage through rewrite lineage and translates.

use std::sync::Arc;

use async_trait::async_trait;
use refract_core::Result;
use refract_table::{Dataset, IndexMetadata};
use roaring::RoaringBitmap;

use crate::translate::BatchTranslator;

/// A segment ready for querying.
#[derive(Clone)]
pub struct ResolvedSegment {
    /// The manifest entry.
    pub meta: IndexMetadata,
    /// Live fragments this segment serves (no other segment of the index serves them).
    pub coverage: RoaringBitmap,
    /// Translates stored addresses to current ones; `None` = stored addresses are current.
    pub translator: Option<Arc<dyn BatchTranslator>>,
    /// Rewrite hops between the stored addresses and the current version.
    pub hops: usize,
}

impl std::fmt::Debug for ResolvedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedSegment")
            .field("uuid", &self.meta.uuid)
            .field("coverage", &self.coverage)
            .field("translated", &self.translator.is_some())
            .field("hops", &self.hops)
            .finish()
    }
}

/// Decides coverage and translation for the segments of one index.
#[async_trait]
pub trait SegmentResolver: Send + Sync {
    /// Resolves `segments` (all of one logical index) against `dataset`.
    async fn resolve(
        &self,
        dataset: &Dataset,
        segments: &[IndexMetadata],
    ) -> Result<Vec<ResolvedSegment>>;
}

/// Coverage = stored bitmap ∩ live fragments; no translation. When segments
/// overlap, the newer one (higher `dataset_version`, then later in the
/// manifest) serves the shared fragments.
#[derive(Debug, Clone, Copy, Default)]
pub struct DirectResolver;

#[async_trait]
impl SegmentResolver for DirectResolver {
    async fn resolve(
        &self,
        dataset: &Dataset,
        segments: &[IndexMetadata],
    ) -> Result<Vec<ResolvedSegment>> {
        let live: RoaringBitmap = dataset
            .fragments()
            .iter()
            .filter_map(|f| u32::try_from(f.id).ok())
            .collect();
        Ok(direct_coverage(&live, segments)
            .into_iter()
            .zip(segments)
            .map(|(coverage, meta)| ResolvedSegment {
                meta: meta.clone(),
                coverage,
                translator: None,
                hops: 0,
            })
            .collect())
    }
}

/// Per segment (same order): stored ∩ live, newer segments first claiming shared fragments.
pub fn direct_coverage(live: &RoaringBitmap, segments: &[IndexMetadata]) -> Vec<RoaringBitmap> {
    let mut order: Vec<usize> = (0..segments.len()).collect();
    // Newest first: higher dataset_version, then later manifest position.
    order.sort_by_key(|i| {
        let version = segments.get(*i).map_or(0, |m| m.dataset_version);
        (std::cmp::Reverse(version), std::cmp::Reverse(*i))
    });
    let mut claimed = RoaringBitmap::new();
    let mut out = vec![RoaringBitmap::new(); segments.len()];
    for i in order {
        let (Some(meta), Some(slot)) = (segments.get(i), out.get_mut(i)) else {
            continue;
        };
        let Some(stored) = &meta.fragment_bitmap else {
            continue;
        };
        let coverage = (stored & live) - &claimed;
        claimed |= &coverage;
        *slot = coverage;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn seg(version: u64, frags: &[u32]) -> IndexMetadata {
        IndexMetadata {
            uuid: Uuid::new_v4(),
            name: "idx".into(),
            fields: vec!["x".into()],
            fragment_bitmap: Some(frags.iter().copied().collect()),
            index_type: "btree".into(),
            details: Vec::new(),
            index_version: 1,
            dataset_version: version,
            files: Vec::new(),
            lance: Default::default(),
        }
    }

    #[test]
    fn newer_segment_wins_shared_fragments_and_dead_fragments_drop() {
        let live: RoaringBitmap = [0u32, 1, 2, 4].into_iter().collect();
        let old = seg(2, &[0, 1, 2, 3]);
        let new = seg(5, &[2, 4]);
        let mut unknown = seg(9, &[]);
        unknown.fragment_bitmap = None;
        let cov = direct_coverage(&live, &[old, new, unknown]);
        assert_eq!(cov[0].iter().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(cov[1].iter().collect::<Vec<_>>(), vec![2, 4]);
        assert!(cov[2].is_empty());
    }
}
