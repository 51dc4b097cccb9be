//! The derived index listing of one snapshot: every index entry of the
//! manifest with, for user segments, the in-memory coverage the FRI derives.
//!
//! It depends only on the manifest (live fragments, segments) and the FRI
//! history, so it is computed once per (manifest version, FRI uuid) and
//! cached; every query on that snapshot reuses it. System entries (the FRI
//! itself, and any other `__` entry such as a write-ahead-log marker) pass
//! through untouched: they have no fragment bitmap and are never planned.

use std::collections::HashMap;
use std::sync::Arc;

use refract_core::DeepSize;
use refract_table::{IndexMetadata, Manifest};
use roaring::RoaringBitmap;
use uuid::Uuid;

use crate::coverage::{plan_index, Disposition, Exclusion, SegmentPlan};
use crate::history::FriHistory;

/// One entry of the derived listing.
#[derive(Debug, Clone, PartialEq)]
pub enum ListedEntry {
    /// A system entry, exactly as stored.
    System(IndexMetadata),
    /// A user segment with its plan.
    Segment {
        /// The stored metadata (never modified).
        meta: IndexMetadata,
        /// Derived coverage, disposition and hops.
        plan: SegmentPlan,
        /// Fragments claimed by any segment of the same index.
        claimed: Arc<RoaringBitmap>,
    },
}

/// The derived listing of one snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedListing {
    manifest_version: u64,
    fri_uuid: Uuid,
    live: Arc<RoaringBitmap>,
    entries: Vec<ListedEntry>,
    by_uuid: HashMap<Uuid, usize>,
}

impl DerivedListing {
    /// Derives the listing of `manifest` through `history`.
    pub fn derive(history: &FriHistory, manifest: &Manifest) -> Self {
        let live: RoaringBitmap = manifest
            .fragments
            .iter()
            .filter_map(|f| u32::try_from(f.id).ok())
            .collect();
        let mut entries: Vec<Option<ListedEntry>> = vec![None; manifest.indices.len()];
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (position, meta) in manifest.indices.iter().enumerate() {
            if meta.is_system() {
                if let Some(slot) = entries.get_mut(position) {
                    *slot = Some(ListedEntry::System(meta.clone()));
                }
                continue;
            }
            match groups.iter_mut().find(|(name, _)| *name == meta.name) {
                Some((_, members)) => members.push(position),
                None => groups.push((meta.name.clone(), vec![position])),
            }
        }
        for (_, members) in groups {
            let segments: Vec<IndexMetadata> = members
                .iter()
                .filter_map(|p| manifest.indices.get(*p).cloned())
                .collect();
            let (plans, claimed) = match history.legacy() {
                Some(_) => legacy_plans(history, &live, &segments),
                None => {
                    let plan = plan_index(history, &live, &segments);
                    (plan.segments, plan.claimed)
                }
            };
            let claimed = Arc::new(claimed);
            for ((position, meta), plan) in members.iter().zip(segments).zip(plans) {
                if let Some(slot) = entries.get_mut(*position) {
                    *slot = Some(ListedEntry::Segment {
                        meta,
                        plan,
                        claimed: claimed.clone(),
                    });
                }
            }
        }
        // Every position was filled by one of the two loops above.
        let entries: Vec<ListedEntry> = entries.into_iter().flatten().collect();
        let by_uuid = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (entry_meta(e).uuid, i))
            .collect();
        Self {
            manifest_version: manifest.version,
            fri_uuid: history.uuid(),
            live: Arc::new(live),
            entries,
            by_uuid,
        }
    }

    /// The snapshot version.
    pub fn manifest_version(&self) -> u64 {
        self.manifest_version
    }

    /// The FRI uuid the listing was derived through.
    pub fn fri_uuid(&self) -> Uuid {
        self.fri_uuid
    }

    /// Live fragments of the snapshot.
    pub fn live(&self) -> &Arc<RoaringBitmap> {
        &self.live
    }

    /// Every entry, in manifest order.
    pub fn entries(&self) -> &[ListedEntry] {
        &self.entries
    }

    /// The entry of segment `uuid`.
    pub fn entry(&self, uuid: &Uuid) -> Option<&ListedEntry> {
        self.by_uuid.get(uuid).and_then(|i| self.entries.get(*i))
    }

    /// The listing queries plan with: system entries untouched; user segments
    /// that serve something, with their derived coverage as an in-memory
    /// fragment bitmap (never to be persisted); segments serving nothing are
    /// left out so their fragments are scanned.
    pub fn query_indices(&self) -> Vec<IndexMetadata> {
        self.entries
            .iter()
            .filter_map(|entry| match entry {
                ListedEntry::System(meta) => Some(meta.clone()),
                ListedEntry::Segment { meta, plan, .. } => match plan.disposition {
                    Disposition::Excluded(_) => None,
                    _ => Some(IndexMetadata {
                        fragment_bitmap: Some(plan.coverage.clone()),
                        ..meta.clone()
                    }),
                },
            })
            .collect()
    }
}

fn entry_meta(entry: &ListedEntry) -> &IndexMetadata {
    match entry {
        ListedEntry::System(meta) | ListedEntry::Segment { meta, .. } => meta,
    }
}

impl DeepSize for DerivedListing {
    fn deep_size_bytes(&self) -> usize {
        let entries: usize = self
            .entries
            .iter()
            .map(|entry| {
                let meta = entry_meta(entry);
                let stored = meta
                    .fragment_bitmap
                    .as_ref()
                    .map_or(0, |b| b.serialized_size());
                let plan = match entry {
                    ListedEntry::Segment { plan, claimed, .. } => {
                        plan.coverage.serialized_size()
                            + plan.owned.serialized_size()
                            + claimed.serialized_size()
                    }
                    ListedEntry::System(_) => 0,
                };
                std::mem::size_of::<ListedEntry>() + 64 + meta.details.len() + stored + plan
            })
            .sum();
        std::mem::size_of::<Self>()
            + self.live.serialized_size()
            + entries
            + self.by_uuid.len() * 40
    }
}

/// Version-0 coverage: each segment's stored bitmap remapped group by group
/// (a group whose old fragments are all covered hands its new fragments on; a
/// partially covered group is dropped, so its new fragments are scanned),
/// restricted to live fragments, newest segment first on overlaps. Segments
/// without a bitmap are excluded. `owned` is the whole stored bitmap: the
/// legacy path never drops a starting address, only results outside the
/// segment's coverage.
fn legacy_plans(
    history: &FriHistory,
    live: &RoaringBitmap,
    segments: &[IndexMetadata],
) -> (Vec<SegmentPlan>, RoaringBitmap) {
    let groups = history
        .legacy()
        .map(|l| l.groups.as_slice())
        .unwrap_or_default();
    let remapped: Vec<Option<RoaringBitmap>> = segments
        .iter()
        .map(|meta| {
            meta.fragment_bitmap
                .as_ref()
                .map(|stored| remap_bitmap(stored, groups) & live)
        })
        .collect();
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|i| {
        let version = segments.get(*i).map_or(0, |m| m.dataset_version);
        (std::cmp::Reverse(version), std::cmp::Reverse(*i))
    });
    // Each live fragment is served by one segment (the newest whose remapped
    // bitmap holds it), which returns every row chained into it; rows other
    // segments chain there are dropped by their coverage check.
    let mut coverage = vec![RoaringBitmap::new(); segments.len()];
    let mut taken = RoaringBitmap::new();
    for i in order {
        if let (Some(Some(bitmap)), Some(slot)) = (remapped.get(i), coverage.get_mut(i)) {
            *slot = bitmap - &taken;
            taken |= &*slot;
        }
    }
    let mut claimed = RoaringBitmap::new();
    let plans = segments
        .iter()
        .zip(coverage)
        .map(|(meta, coverage)| {
            let stored = meta.fragment_bitmap.clone().unwrap_or_default();
            claimed |= &stored;
            let disposition = match &meta.fragment_bitmap {
                None => Disposition::Excluded(Exclusion::UnknownCoverage),
                Some(_) if coverage.is_empty() => {
                    Disposition::Excluded(Exclusion::NoDerivedCoverage)
                }
                Some(stored) if *stored == coverage => Disposition::Identity,
                Some(_) => Disposition::Translate,
            };
            let served = !matches!(disposition, Disposition::Excluded(_));
            let hops = if disposition == Disposition::Translate {
                legacy_hops(&stored, groups)
            } else {
                0
            };
            SegmentPlan {
                coverage: if served {
                    coverage
                } else {
                    RoaringBitmap::new()
                },
                owned: stored,
                disposition,
                hops,
            }
        })
        .collect();
    (plans, claimed)
}

/// Applies the legacy groups, oldest first, to a stored bitmap.
fn remap_bitmap(stored: &RoaringBitmap, groups: &[(Vec<u64>, Vec<u64>)]) -> RoaringBitmap {
    let mut bitmap = stored.clone();
    for (old, new) in groups {
        let old: RoaringBitmap = old
            .iter()
            .filter_map(|id| u32::try_from(*id).ok())
            .collect();
        if old.is_subset(&bitmap) {
            bitmap -= &old;
            bitmap.extend(new.iter().filter_map(|id| u32::try_from(*id).ok()));
        } else {
            bitmap -= &old;
        }
    }
    bitmap
}

/// Groups a stored bitmap is handed through (every old fragment covered):
/// the most hops between its stored addresses and a served fragment.
fn legacy_hops(stored: &RoaringBitmap, groups: &[(Vec<u64>, Vec<u64>)]) -> usize {
    let mut bitmap = stored.clone();
    let mut hops = 0;
    for (old, new) in groups {
        let old: RoaringBitmap = old
            .iter()
            .filter_map(|id| u32::try_from(*id).ok())
            .collect();
        if !old.is_empty() && old.is_subset(&bitmap) {
            hops += 1;
            bitmap -= &old;
            bitmap.extend(new.iter().filter_map(|id| u32::try_from(*id).ok()));
        }
    }
    hops
}
