//! Per-index views shared by retention and pruning: segments grouped by
//! logical index, claims (newest segment first, as the reader does) and each
//! segment's walk through the lineage.

use refract_reader::history::FriHistory;
use refract_table::{IndexMetadata, Manifest};
use roaring::RoaringBitmap;

use crate::remap::lineage_reach::{bitmap_of, recover_provenance, walk, Reach};

/// The user segments of one logical index, in manifest order.
pub(crate) fn index_groups(indices: &[IndexMetadata]) -> Vec<Vec<&IndexMetadata>> {
    let mut groups: Vec<Vec<&IndexMetadata>> = Vec::new();
    for meta in indices.iter().filter(|m| !m.is_system()) {
        match groups
            .iter_mut()
            .find(|g| g.first().is_some_and(|first| first.name == meta.name))
        {
            Some(group) => group.push(meta),
            None => groups.push(vec![meta]),
        }
    }
    groups
}

/// Positions of `segments`, newest first (higher `dataset_version`, then
/// later in the manifest) — the reader's claim order.
pub(crate) fn newest_first(segments: &[&IndexMetadata]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|i| {
        let version = segments.get(*i).map_or(0, |m| m.dataset_version);
        (std::cmp::Reverse(version), std::cmp::Reverse(*i))
    });
    order
}

/// Live fragment ids of `manifest`.
pub fn live(manifest: &Manifest) -> RoaringBitmap {
    bitmap_of(manifest.fragments.iter().map(|f| f.id))
}

/// One segment's walk, with what it covers *directly* (stored fragments its
/// files hold addresses of: a legacy projected destination is not direct).
pub(crate) struct SegmentWalk {
    /// The walk (provenance and crossed transitions).
    pub reach: Reach,
    /// Stored fragments held directly.
    pub direct: RoaringBitmap,
}

/// Walks `meta` (which must have a bitmap) with `others_claimed` cutting paths.
pub(crate) fn segment_walk(
    history: Option<&FriHistory>,
    meta: &IndexMetadata,
    stored: &RoaringBitmap,
    others_claimed: &RoaringBitmap,
) -> SegmentWalk {
    let Some(history) = history else {
        return SegmentWalk {
            reach: Reach {
                reached: stored.clone(),
                ..Reach::default()
            },
            direct: stored.clone(),
        };
    };
    let provenance = recover_provenance(history, stored, meta.dataset_version);
    let reach = walk(history, &provenance, others_claimed);
    let mut produced = RoaringBitmap::new();
    for node in reach.crossed.iter().filter_map(|i| history.node(*i)) {
        produced |= bitmap_of(node.destinations.iter().copied());
    }
    SegmentWalk {
        direct: stored - &produced,
        reach,
    }
}
