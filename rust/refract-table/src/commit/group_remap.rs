//! The compact remap of one rewrite group, shared by both rebase directions: a
//! Rewrite translating concurrent deletes onto its new fragments
//! (`rewrite_rebase`) and a Delete translating its rows through a Rewrite that
//! committed first (`delete_rebase`).

use std::collections::BTreeMap;

use refract_core::{Error, FragmentRows, Result, RewriteGroupInput, RowAddrRemap, RowAddress};
use roaring::{RoaringBitmap, RoaringTreemap};

use crate::format::Manifest;

/// Addresses looked up per `get_batch` call (bounds the scratch vectors).
const TRANSLATE_BATCH: usize = 65_536;

/// Decodes a group's `surviving_old_addresses` capture.
pub(super) fn decode_survivors(bytes: &[u8]) -> Result<RoaringTreemap> {
    RoaringTreemap::deserialize_from(bytes)
        .map_err(|e| Error::corrupt("rewrite transaction", format!("surviving addresses: {e}")))
}

/// The group's old fragments `ids` (in write order) with their row counts in `manifest`.
pub(super) fn old_fragment_rows(manifest: &Manifest, ids: &[u64]) -> Result<Vec<FragmentRows>> {
    ids.iter()
        .map(|id| {
            let fragment = manifest.fragment(*id).ok_or_else(|| {
                Error::not_found(format!(
                    "fragment {id} of a rewrite group at version {}",
                    manifest.version
                ))
            })?;
            Ok(FragmentRows {
                id: *id,
                physical_rows: fragment.physical_rows,
            })
        })
        .collect()
}

/// The compact remap of one group: survivors of `old` (in write order) fill the
/// `new` fragments (`(id, physical rows)`, in write order) consecutively.
pub(super) fn group_remap(
    old: Vec<FragmentRows>,
    new: impl IntoIterator<Item = (u64, u64)>,
    survivors: RoaringTreemap,
) -> Result<RowAddrRemap> {
    let new_fragments = new
        .into_iter()
        .map(|(id, physical_rows)| FragmentRows { id, physical_rows })
        .collect();
    RowAddrRemap::compact(vec![RewriteGroupInput {
        old_fragments: old,
        new_fragments,
        surviving: survivors,
    }])
}

/// Old addresses translated through a group's remap.
#[derive(Debug, Default)]
pub(super) struct Translated {
    /// New offsets per new fragment id.
    pub moved: BTreeMap<u64, RoaringBitmap>,
    /// Addresses the rewrite did not carry over (deleted before its capture).
    pub dropped: RoaringTreemap,
}

/// Maps every address of `addresses` through `remap`. An address the remap does
/// not cover at all is corrupt input: callers only pass rows of its old fragments.
pub(super) fn translate(remap: &RowAddrRemap, addresses: &RoaringTreemap) -> Result<Translated> {
    let mut translated = Translated::default();
    let mut batch = Vec::with_capacity(TRANSLATE_BATCH.min(addresses.len() as usize));
    let mut out = Vec::new();
    let mut flush = |batch: &mut Vec<u64>, out: &mut Vec<Option<Option<u64>>>| -> Result<()> {
        // Sorted input: `get_batch` walks fragments and ranks incrementally.
        remap.get_batch(batch, out);
        for (old, new) in batch.iter().zip(out.iter()) {
            match new {
                Some(Some(new)) => {
                    let new = RowAddress::from(*new);
                    translated
                        .moved
                        .entry(u64::from(new.fragment_id()))
                        .or_default()
                        .insert(new.offset());
                }
                Some(None) => {
                    translated.dropped.insert(*old);
                }
                None => {
                    return Err(Error::corrupt(
                        "rewrite transaction",
                        format!(
                            "row {} is not in the rewrite group being translated",
                            RowAddress::from(*old)
                        ),
                    ))
                }
            }
        }
        batch.clear();
        Ok(())
    };
    for address in addresses.iter() {
        batch.push(address);
        if batch.len() == TRANSLATE_BATCH {
            flush(&mut batch, &mut out)?;
        }
    }
    flush(&mut batch, &mut out)?;
    Ok(translated)
}
