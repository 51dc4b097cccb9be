//! `RowAddrRemap`: the old-address → new-address map of one compaction commit.
//!
//! Answers exactly like `HashMap<u64, Option<u64>>::get(&addr).copied()`:
//! `None` = unaffected, `Some(None)` = deleted, `Some(Some(new))` = moved — without
//! storing one entry per row.
//!
//! The compact form relies on the ordering contract of compaction: old fragments
//! are read in the listed order, offsets ascending, and the surviving rows are
//! written to the new fragments in the listed order without reordering. The k-th
//! surviving old row of a group is therefore the k-th row written, so a lookup is:
//! rank of the offset among its fragment's survivors, plus the survivors of the
//! fragments read before it, gives k; the new fragment range holding k gives the
//! new address.

use std::collections::{HashMap, HashSet};
use std::mem::size_of;

use roaring::{RoaringBitmap, RoaringTreemap};
use serde::{Deserialize, Serialize};

use crate::address::row_address;
use crate::cache::DeepSize;
use crate::error::{Error, Result};
use crate::materialize::estimate_hashmap_bytes;
use crate::ranked::{last_le_by, RankedLayout, RankedOffsets};
use crate::translate::AddressSink;

/// A fragment id and its physical row count (deleted rows included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FragmentRows {
    /// Fragment id.
    pub id: u64,
    /// Physical rows, including deleted ones.
    pub physical_rows: u64,
}

impl FragmentRows {
    /// Builds a `FragmentRows`.
    pub const fn new(id: u64, physical_rows: u64) -> Self {
        Self { id, physical_rows }
    }
}

/// What one compaction task captured: which old rows survived and where they went.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteGroupInput {
    /// Old fragments, in the order they were read.
    pub old_fragments: Vec<FragmentRows>,
    /// New fragments, in the order they were written.
    pub new_fragments: Vec<FragmentRows>,
    /// Addresses of the old rows that survived (were written to the new fragments).
    pub surviving: RoaringTreemap,
}

/// One old fragment of a rewrite group.
#[derive(Debug, Clone, PartialEq)]
struct OldFragment {
    id: u32,
    physical_rows: u32,
    /// Survivors of the fragments read before this one in the group.
    rows_before: u64,
    survivors: RankedOffsets,
}

/// One non-empty new fragment: rows `rows_before .. rows_before + physical_rows` of the
/// group's output stream.
#[derive(Debug, Clone, Copy, PartialEq)]
struct NewRange {
    id: u32,
    physical_rows: u32,
    rows_before: u64,
}

/// The layout of one rewrite group.
#[derive(Debug, Clone, PartialEq)]
struct GroupLayout {
    old: Vec<OldFragment>,
    /// Non-empty new fragments in write order (zero-row ones hold no k).
    ranges: Vec<NewRange>,
    /// Every new fragment id in write order, zero-row ones included.
    destinations: Vec<u64>,
}

/// Where an old fragment lives in the layout: `(fragment id, group, slot)`, sorted
/// by fragment id. One entry per fragment, never per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexEntry {
    fragment_id: u32,
    group: u32,
    slot: u32,
}

/// The compact remap: per-group ranked survivors and new-fragment ranges.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactRemap {
    groups: Vec<GroupLayout>,
    index: Vec<IndexEntry>,
    /// O(1) fragment lookup when the old ids are dense enough: `(first id, slots)`
    /// where `slots[id - first]` is the position in `index` plus one (0 = absent).
    direct_index: Option<(u32, Box<[u32]>)>,
}

/// The direct fragment table is built when its span is at most this many times the
/// number of old fragments (plus [`DIRECT_INDEX_SLACK`]): 4 bytes per spanned id.
const DIRECT_INDEX_SPAN_FACTOR: u64 = 4;
const DIRECT_INDEX_SLACK: u64 = 1024;

/// Builds the direct fragment table for a sorted index, if the ids are dense enough.
fn build_direct_index(index: &[IndexEntry]) -> Option<(u32, Box<[u32]>)> {
    let (first, last) = (index.first()?.fragment_id, index.last()?.fragment_id);
    let span = u64::from(last - first) + 1;
    if span > DIRECT_INDEX_SPAN_FACTOR * index.len() as u64 + DIRECT_INDEX_SLACK {
        return None;
    }
    let mut slots = vec![0u32; span as usize];
    for (i, e) in index.iter().enumerate() {
        // first <= id <= last, so id - first < span.
        slots[(e.fragment_id - first) as usize] = u32::try_from(i + 1).ok()?;
    }
    Some((first, slots.into_boxed_slice()))
}

/// Search state carried between lookups of one batch, so sorted input walks the
/// fragments, ranks and ranges incrementally instead of searching from scratch.
#[derive(Debug, Clone, Default)]
pub(crate) struct LookupCursor {
    /// Fragment id of the previous lookup (`None` before the first).
    fragment: Option<u64>,
    /// Index entry of `fragment`, if it is rewritten.
    entry: Option<IndexEntry>,
    index_hint: usize,
    rank_hint: usize,
    range_hint: usize,
}

/// Search state of [`CompactRemap::lookup`], for one walk over ascending
/// addresses (a fresh cursor per batch; any order stays correct, only slower).
#[derive(Debug, Clone, Default)]
pub struct RemapCursor(LookupCursor);

impl LookupCursor {
    /// A cursor for one isolated lookup: no hints, so searches are plain binary
    /// searches instead of gallops from the start.
    pub(crate) fn point() -> Self {
        Self {
            index_hint: usize::MAX,
            rank_hint: usize::MAX,
            range_hint: usize::MAX,
            ..Self::default()
        }
    }
}

fn to_u32(value: u64, what: &str) -> Result<u32> {
    u32::try_from(value)
        .map_err(|_| Error::invalid_input(format!("{what} {value} does not fit in u32")))
}

impl CompactRemap {
    /// Builds and validates the compact layout; see [`RowAddrRemap::compact`].
    pub fn new(groups: Vec<RewriteGroupInput>) -> Result<Self> {
        let mut seen_old: HashSet<u64> = HashSet::new();
        let mut seen_new: HashSet<u64> = HashSet::new();
        let mut layouts = Vec::with_capacity(groups.len());
        let mut index = Vec::new();
        for (g, group) in groups.into_iter().enumerate() {
            let group_idx = to_u32(g as u64, "group index")?;
            let layout = build_group(&group, &mut seen_old, &mut seen_new)?;
            for (slot, old) in layout.old.iter().enumerate() {
                index.push(IndexEntry {
                    fragment_id: old.id,
                    group: group_idx,
                    slot: to_u32(slot as u64, "fragment slot")?,
                });
            }
            layouts.push(layout);
        }
        if let Some(id) = seen_new.iter().find(|id| seen_old.contains(id)) {
            return Err(Error::invalid_input(format!(
                "fragment {id} is both an old and a new fragment of the remap"
            )));
        }
        index.sort_unstable_by_key(|e| e.fragment_id);
        index.shrink_to_fit();
        let direct_index = build_direct_index(&index);
        Ok(Self {
            groups: layouts,
            index,
            direct_index,
        })
    }

    /// True if no fragment was rewritten.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// `HashMap::get` semantics for one address.
    #[inline]
    pub fn get(&self, addr: u64) -> Option<Option<u64>> {
        self.get_with(addr, &mut LookupCursor::point())
    }

    /// The index entry of old fragment `fragment`, if it was rewritten.
    #[inline]
    fn find_entry(&self, fragment: u64, hint: &mut usize) -> Option<IndexEntry> {
        if let Some((first, slots)) = &self.direct_index {
            let at = fragment.checked_sub(u64::from(*first))?;
            let slot = *slots.get(usize::try_from(at).ok()?)?;
            // Non-zero slots hold an index position plus one.
            return slot.checked_sub(1).map(|i| self.index[i as usize]);
        }
        let i = last_le_by(&self.index, |e| u64::from(e.fragment_id), fragment, *hint)?;
        *hint = i;
        // last_le_by returns an in-bounds index.
        let e = self.index[i];
        (u64::from(e.fragment_id) == fragment).then_some(e)
    }

    /// [`Self::get`] reusing search state from previous lookups of the same batch.
    #[inline]
    pub(crate) fn get_with(&self, addr: u64, cursor: &mut LookupCursor) -> Option<Option<u64>> {
        let fragment = addr >> 32;
        let offset = addr as u32; // the low half is the offset
        if cursor.fragment != Some(fragment) {
            cursor.fragment = Some(fragment);
            cursor.entry = self.find_entry(fragment, &mut cursor.index_hint);
            if cursor.rank_hint != usize::MAX {
                // Sorted input enters a new fragment at its smallest offsets.
                cursor.rank_hint = 0;
            }
        }
        let entry = cursor.entry?;
        // Index entries are built from the layout, so group and slot exist.
        let group = &self.groups[entry.group as usize];
        let old = &group.old[entry.slot as usize];
        if offset >= old.physical_rows {
            // Not a row of the rewritten fragment: a direct map has no entry for it.
            return None;
        }
        let Some(rank) = old.survivors.rank(offset, &mut cursor.rank_hint) else {
            return Some(None);
        };
        let k = old.rows_before + rank;
        // Validation guarantees survivors == new rows, so some range holds k.
        let r = last_le_by(&group.ranges, |r| r.rows_before, k, cursor.range_hint)?;
        cursor.range_hint = r;
        let range = group.ranges[r];
        Some(Some(row_address(range.id, (k - range.rows_before) as u32)))
    }

    /// Streams the translation of the offsets `part` of fragment `fragment` to
    /// `sink`, with [`crate::Translator`] semantics (an address the remap does not
    /// know maps to itself, a deleted row is skipped), walking ranks and ranges
    /// incrementally like [`RowAddrRemap::get_batch`], with no result buffer.
    pub fn translate_part(&self, fragment: u32, part: &RoaringBitmap, sink: &mut dyn AddressSink) {
        if let Some(entry) = self.find_entry(u64::from(fragment), &mut 0) {
            // Index entries are built from the layout, so group and slot exist.
            let group = &self.groups[entry.group as usize];
            let old = &group.old[entry.slot as usize];
            if let Some(base) = shift_base(group, old, part) {
                // Every row of the part survived and lands in one new fragment:
                // the whole part moves by one constant.
                for offset in part {
                    sink.push(base.wrapping_add(u64::from(offset)));
                }
                return;
            }
        }
        // The general walk; the cursor keeps the fragment's entry and hints.
        let mut cursor = LookupCursor::default();
        for offset in part {
            let address = row_address(fragment, offset);
            match self.get_with(address, &mut cursor) {
                Some(Some(new)) => sink.push(new),
                Some(None) => {} // deleted
                None => sink.push(address),
            }
        }
    }

    /// [`Self::get`] reusing the search state in `cursor`, so ascending
    /// lookups walk fragments, ranks and ranges incrementally (same results).
    #[inline]
    pub fn lookup(&self, addr: u64, cursor: &mut RemapCursor) -> Option<Option<u64>> {
        self.get_with(addr, &mut cursor.0)
    }

    /// When every row at offsets `min..=max` of old fragment `fragment`
    /// survived and all of them land in one new fragment, the value `b` such
    /// that offset `o` of that range moves to `b + o` (wrapping arithmetic);
    /// `None` otherwise (a fragment the remap does not rewrite, deleted rows,
    /// offsets beyond the fragment or several destinations): callers then
    /// translate row by row.
    pub fn shift_of_range(&self, fragment: u32, min: u32, max: u32) -> Option<u64> {
        let entry = self.find_entry(u64::from(fragment), &mut 0)?;
        // Index entries are built from the layout, so group and slot exist.
        let group = &self.groups[entry.group as usize];
        let old = &group.old[entry.slot as usize];
        if let Some(base) = shift_base_range(group, old, min, max) {
            return Some(base);
        }
        if min > max || max >= old.physical_rows {
            return None;
        }
        // Both ends survived and their ranks are `max - min` apart: every
        // offset between them survived too, numbered consecutively.
        // A hint past the end makes `rank` a plain binary search.
        let (mut hint_min, mut hint_max) = (usize::MAX, usize::MAX);
        let first = old.survivors.rank(min, &mut hint_min)?;
        let last = old.survivors.rank(max, &mut hint_max)?;
        if last - first != u64::from(max - min) {
            return None;
        }
        let (k_first, k_last) = (old.rows_before + first, old.rows_before + last);
        let r = last_le_by(&group.ranges, |r| r.rows_before, k_first, usize::MAX)?;
        let range = group.ranges[r];
        if k_last >= range.rows_before + u64::from(range.physical_rows) {
            return None;
        }
        // Offset o lands at k_first + (o - min) - range.rows_before.
        Some(
            (u64::from(range.id) << 32)
                .wrapping_add(k_first)
                .wrapping_sub(range.rows_before)
                .wrapping_sub(u64::from(min)),
        )
    }

    /// Ids of every rewritten (old) fragment, ascending.
    pub fn old_fragments(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.iter().map(|e| u64::from(e.fragment_id))
    }

    /// Old fragments none of whose rows survived.
    pub fn fully_deleted_fragments(&self) -> RoaringBitmap {
        self.groups
            .iter()
            .flat_map(|g| g.old.iter())
            .filter(|o| o.survivors.len() == 0)
            .map(|o| o.id)
            .collect()
    }

    /// Every new fragment id (zero-row ones included).
    pub fn new_fragments(&self) -> RoaringBitmap {
        self.groups
            .iter()
            .flat_map(|g| g.destinations.iter())
            // Validated to fit u32 at build time.
            .map(|id| *id as u32)
            .collect()
    }

    /// Number of rewrite groups.
    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    /// Old fragment ids of group `group` in read order, or `None` past the end.
    pub fn group_sources(&self, group: usize) -> Option<Vec<u64>> {
        self.groups
            .get(group)
            .map(|g| g.old.iter().map(|o| u64::from(o.id)).collect())
    }

    /// New fragment ids of group `group` in write order, or `None` past the end.
    pub fn group_destinations(&self, group: usize) -> Option<&[u64]> {
        self.groups.get(group).map(|g| g.destinations.as_slice())
    }

    /// Layout chosen for each old fragment, as `(fragment id, layout)`; for reports.
    pub fn layouts(&self) -> Vec<(u64, RankedLayout)> {
        self.groups
            .iter()
            .flat_map(|g| g.old.iter())
            .map(|o| (u64::from(o.id), o.survivors.layout()))
            .collect()
    }

    /// Bytes held, heap included.
    pub fn deep_size_bytes(&self) -> u64 {
        let mut bytes = size_of::<Self>() + self.index.capacity() * size_of::<IndexEntry>();
        bytes += self.direct_index.as_ref().map_or(0, |(_, s)| s.len() * 4);
        bytes += self.groups.capacity() * size_of::<GroupLayout>();
        for g in &self.groups {
            bytes += g.old.capacity() * size_of::<OldFragment>();
            bytes += g.ranges.capacity() * size_of::<NewRange>();
            bytes += g.destinations.capacity() * size_of::<u64>();
            bytes += g
                .old
                .iter()
                .map(|o| o.survivors.heap_bytes())
                .sum::<usize>();
        }
        bytes as u64
    }
}

/// When fragment `old` lost no row and the offsets of `part` all land in one
/// new range, the value `b` such that offset `o` moves to `b + o` (wrapping
/// arithmetic; every result is a valid address of that range).
fn shift_base(group: &GroupLayout, old: &OldFragment, part: &RoaringBitmap) -> Option<u64> {
    shift_base_range(group, old, part.min()?, part.max()?)
}

/// [`shift_base`] for every offset in `min..=max`.
fn shift_base_range(group: &GroupLayout, old: &OldFragment, min: u32, max: u32) -> Option<u64> {
    if old.survivors.len() != u64::from(old.physical_rows) || min > max {
        return None;
    }
    if max >= old.physical_rows {
        return None;
    }
    // No deletions: the rank of an offset is the offset itself.
    let (first, last) = (
        old.rows_before + u64::from(min),
        old.rows_before + u64::from(max),
    );
    let r = last_le_by(&group.ranges, |r| r.rows_before, first, usize::MAX)?;
    let range = group.ranges[r];
    if last >= range.rows_before + u64::from(range.physical_rows) {
        return None;
    }
    // new = (id << 32) + rows_before + o - range.rows_before, and
    // rows_before + o >= range.rows_before for every o >= min.
    Some(
        (u64::from(range.id) << 32)
            .wrapping_add(old.rows_before)
            .wrapping_sub(range.rows_before),
    )
}

/// Validates one group and builds its layout.
fn build_group(
    group: &RewriteGroupInput,
    seen_old: &mut HashSet<u64>,
    seen_new: &mut HashSet<u64>,
) -> Result<GroupLayout> {
    let surviving: Vec<(u32, &RoaringBitmap)> = group
        .surviving
        .bitmaps()
        .filter(|(_, b)| !b.is_empty())
        .collect();
    let empty = RoaringBitmap::new();
    let mut old = Vec::with_capacity(group.old_fragments.len());
    let mut rows_before = 0u64;
    for frag in &group.old_fragments {
        let id = to_u32(frag.id, "old fragment id")?;
        let physical_rows = to_u32(frag.physical_rows, "physical rows of old fragment")?;
        if !seen_old.insert(frag.id) {
            return Err(Error::invalid_input(format!(
                "old fragment {} is listed twice in the remap",
                frag.id
            )));
        }
        let survivors = match surviving.binary_search_by_key(&id, |(k, _)| *k) {
            Ok(i) => surviving[i].1,
            Err(_) => &empty,
        };
        if let Some(max) = survivors.max() {
            if max >= physical_rows {
                return Err(Error::invalid_input(format!(
                    "surviving offset {max} of old fragment {id} >= its {physical_rows} physical rows"
                )));
            }
        }
        let ranked = RankedOffsets::build(survivors);
        let count = ranked.len();
        old.push(OldFragment {
            id,
            physical_rows,
            rows_before,
            survivors: ranked,
        });
        rows_before += count;
    }
    let mut listed: Vec<u32> = old.iter().map(|o| o.id).collect();
    listed.sort_unstable();
    if let Some((frag, _)) = surviving
        .iter()
        .find(|(k, _)| listed.binary_search(k).is_err())
    {
        return Err(Error::invalid_input(format!(
            "surviving addresses in fragment {frag}, which is not an old fragment of its group"
        )));
    }
    let mut ranges = Vec::with_capacity(group.new_fragments.len());
    let mut destinations = Vec::with_capacity(group.new_fragments.len());
    let mut written = 0u64;
    for frag in &group.new_fragments {
        let id = to_u32(frag.id, "new fragment id")?;
        let physical_rows = to_u32(frag.physical_rows, "physical rows of new fragment")?;
        if !seen_new.insert(frag.id) {
            return Err(Error::invalid_input(format!(
                "new fragment {} is listed twice in the remap",
                frag.id
            )));
        }
        destinations.push(frag.id);
        if physical_rows > 0 {
            ranges.push(NewRange {
                id,
                physical_rows,
                rows_before: written,
            });
        }
        written += u64::from(physical_rows);
    }
    if written != rows_before {
        return Err(Error::invalid_input(format!(
            "rewrote {rows_before} surviving old rows but the new fragments hold {written} rows"
        )));
    }
    Ok(GroupLayout {
        old,
        ranges,
        destinations,
    })
}

/// Old-address → new-address map of one commit, with `HashMap::get` semantics.
#[derive(Debug, Clone, PartialEq)]
pub enum RowAddrRemap {
    /// Ranked survivors and new-fragment ranges per rewrite group.
    Compact(CompactRemap),
    /// An explicit map, for mappings the compact form cannot express.
    Direct(HashMap<u64, Option<u64>>),
}

impl Default for RowAddrRemap {
    fn default() -> Self {
        Self::empty()
    }
}

impl DeepSize for RowAddrRemap {
    fn deep_size_bytes(&self) -> usize {
        usize::try_from(RowAddrRemap::deep_size_bytes(self)).unwrap_or(usize::MAX)
    }
}

impl RowAddrRemap {
    /// A remap that changes nothing.
    pub fn empty() -> Self {
        RowAddrRemap::Direct(HashMap::new())
    }

    /// Builds a compact remap from the compaction capture.
    ///
    /// Errors with [`Error::InvalidInput`] if an old fragment is listed twice (in one
    /// group or in two), a new fragment is listed twice or is also an old fragment, a
    /// surviving offset is `>=` its fragment's physical rows, surviving addresses lie
    /// outside the group's old fragments, a group's survivor count differs from its
    /// new rows, or an id or row count does not fit `u32`.
    pub fn compact(groups: Vec<RewriteGroupInput>) -> Result<Self> {
        CompactRemap::new(groups).map(RowAddrRemap::Compact)
    }

    /// Wraps an explicit map.
    pub fn direct(map: HashMap<u64, Option<u64>>) -> Self {
        RowAddrRemap::Direct(map)
    }

    /// True if the remap changes no address.
    pub fn is_empty(&self) -> bool {
        match self {
            RowAddrRemap::Compact(c) => c.is_empty(),
            RowAddrRemap::Direct(m) => m.is_empty(),
        }
    }

    /// `HashMap::get(&addr).copied()`: `None` unaffected, `Some(None)` deleted,
    /// `Some(Some(new))` moved.
    #[inline]
    pub fn get(&self, addr: u64) -> Option<Option<u64>> {
        match self {
            RowAddrRemap::Compact(c) => c.get(addr),
            RowAddrRemap::Direct(m) => m.get(&addr).copied(),
        }
    }

    #[inline]
    pub(crate) fn get_with(&self, addr: u64, cursor: &mut LookupCursor) -> Option<Option<u64>> {
        match self {
            RowAddrRemap::Compact(c) => c.get_with(addr, cursor),
            RowAddrRemap::Direct(m) => m.get(&addr).copied(),
        }
    }

    /// Looks up every address of `input`, in order, into `out` (cleared first).
    /// Accepts any order and duplicates; sorted input is walked incrementally.
    pub fn get_batch(&self, input: &[u64], out: &mut Vec<Option<Option<u64>>>) {
        out.clear();
        out.reserve(input.len());
        let mut cursor = LookupCursor::default();
        out.extend(input.iter().map(|a| self.get_with(*a, &mut cursor)));
    }

    /// Fragments whose addresses the remap may change, ascending.
    pub fn affected_fragments(&self) -> RoaringBitmap {
        match self {
            // Compact ids were validated to fit u32.
            RowAddrRemap::Compact(c) => c.old_fragments().map(|id| id as u32).collect(),
            RowAddrRemap::Direct(m) => m.keys().map(|a| (a >> 32) as u32).collect(),
        }
    }

    /// Fragments all of whose rows are deleted, when that can be proven: a compact
    /// remap knows its fragments' row counts; a non-empty direct map does not.
    pub fn fully_deleted_fragments(&self) -> Option<RoaringBitmap> {
        match self {
            RowAddrRemap::Compact(c) => Some(c.fully_deleted_fragments()),
            RowAddrRemap::Direct(m) if m.is_empty() => Some(RoaringBitmap::new()),
            RowAddrRemap::Direct(_) => None,
        }
    }

    /// Fragments the remap moves rows into. A direct map only knows fragments that
    /// received at least one row.
    pub fn new_fragments(&self) -> RoaringBitmap {
        match self {
            RowAddrRemap::Compact(c) => c.new_fragments(),
            RowAddrRemap::Direct(m) => m.values().flatten().map(|a| (a >> 32) as u32).collect(),
        }
    }

    /// Bytes held, heap included (the direct map is modelled like hashbrown allocates).
    pub fn deep_size_bytes(&self) -> u64 {
        match self {
            RowAddrRemap::Compact(c) => c.deep_size_bytes(),
            RowAddrRemap::Direct(m) => {
                size_of::<Self>() as u64 + estimate_hashmap_bytes(m.capacity() as u64)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::address::row_address as ra;
    use rstest::rstest;

    pub(crate) fn fr(id: u64, rows: u64) -> FragmentRows {
        FragmentRows::new(id, rows)
    }

    pub(crate) fn tm(addrs: &[(u32, u32)]) -> RoaringTreemap {
        addrs.iter().map(|(f, o)| ra(*f, *o)).collect()
    }

    /// Group A of the reference scenario F.29.
    pub(crate) fn group_a() -> RewriteGroupInput {
        RewriteGroupInput {
            old_fragments: vec![fr(4, 5), fr(3, 2)],
            new_fragments: vec![fr(10, 2), fr(11, 0), fr(12, 3)],
            surviving: tm(&[(4, 0), (4, 2), (4, 4), (3, 0), (3, 1)]),
        }
    }

    /// Group B: fragment 7 fully deleted.
    pub(crate) fn group_b() -> RewriteGroupInput {
        RewriteGroupInput {
            old_fragments: vec![fr(7, 3)],
            new_fragments: vec![],
            surviving: RoaringTreemap::new(),
        }
    }

    /// The direct map a naive transposer would build for the same groups.
    pub(crate) fn direct_of(groups: &[RewriteGroupInput]) -> HashMap<u64, Option<u64>> {
        let mut map = HashMap::new();
        for g in groups {
            let mut new_addrs = g
                .new_fragments
                .iter()
                .flat_map(|f| (0..f.physical_rows).map(move |o| ra(f.id as u32, o as u32)));
            for f in &g.old_fragments {
                for o in 0..f.physical_rows {
                    let a = ra(f.id as u32, o as u32);
                    let v = if g.surviving.contains(a) {
                        new_addrs.next()
                    } else {
                        None
                    };
                    map.insert(a, v);
                }
            }
        }
        map
    }

    #[rstest]
    #[case((4, 0), Some(Some(ra(10, 0))))]
    #[case((4, 2), Some(Some(ra(10, 1))))]
    #[case((4, 4), Some(Some(ra(12, 0))))]
    #[case((3, 0), Some(Some(ra(12, 1))))]
    #[case((3, 1), Some(Some(ra(12, 2))))]
    #[case((4, 1), Some(None))]
    #[case((4, 3), Some(None))]
    #[case((4, 5), None)]
    #[case((3, 2), None)]
    #[case((7, 0), Some(None))]
    #[case((7, 2), Some(None))]
    #[case((9, 0), None)]
    #[case((10, 0), None)]
    fn reference_groups_a_and_b(#[case] addr: (u32, u32), #[case] want: Option<Option<u64>>) {
        let groups = vec![group_a(), group_b()];
        let compact = RowAddrRemap::compact(groups.clone()).unwrap();
        let direct = RowAddrRemap::direct(direct_of(&groups));
        let a = ra(addr.0, addr.1);
        assert_eq!(compact.get(a), want);
        assert_eq!(direct.get(a), want);
    }

    #[test]
    fn reports_fragments() {
        let remap = RowAddrRemap::compact(vec![group_a(), group_b()]).unwrap();
        assert_eq!(
            remap.affected_fragments().iter().collect::<Vec<_>>(),
            vec![3, 4, 7]
        );
        assert_eq!(
            remap
                .fully_deleted_fragments()
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            vec![7]
        );
        assert_eq!(
            remap.new_fragments().iter().collect::<Vec<_>>(),
            vec![10, 11, 12]
        );
        assert!(!remap.is_empty());
        let direct = RowAddrRemap::direct(direct_of(&[group_a()]));
        assert_eq!(direct.fully_deleted_fragments(), None);
        assert_eq!(
            direct.new_fragments().iter().collect::<Vec<_>>(),
            vec![10, 12]
        );
        assert_eq!(
            RowAddrRemap::empty().fully_deleted_fragments(),
            Some(RoaringBitmap::new())
        );
    }

    #[test]
    fn sparse_fragment_ids_use_the_searched_index() {
        let g = RewriteGroupInput {
            old_fragments: vec![fr(3_000_000, 2), fr(5, 2), fr(900_000, 1)],
            new_fragments: vec![fr(4_000_000, 4)],
            surviving: tm(&[(3_000_000, 1), (5, 0), (5, 1), (900_000, 0)]),
        };
        let remap = RowAddrRemap::compact(vec![g]).unwrap();
        let RowAddrRemap::Compact(c) = &remap else {
            panic!("compact expected");
        };
        assert!(c.direct_index.is_none());
        let input = [
            ra(900_000, 0),
            ra(5, 1),
            ra(3_000_000, 0),
            ra(6, 0),
            ra(5, 0),
            ra(3_000_000, 1),
            ra(3_000_001, 0),
            ra(4, 0),
        ];
        let want = vec![
            Some(Some(ra(4_000_000, 3))),
            Some(Some(ra(4_000_000, 2))),
            Some(None),
            None,
            Some(Some(ra(4_000_000, 1))),
            Some(Some(ra(4_000_000, 0))),
            None,
            None,
        ];
        let mut out = Vec::new();
        remap.get_batch(&input, &mut out);
        assert_eq!(out, want);
        let singles: Vec<_> = input.iter().map(|a| remap.get(*a)).collect();
        assert_eq!(singles, want);
        let dense = RowAddrRemap::compact(vec![group_a()]).unwrap();
        let RowAddrRemap::Compact(c) = &dense else {
            panic!("compact expected");
        };
        assert!(c.direct_index.is_some());
    }

    #[test]
    fn explicit_fragment_order_is_respected() {
        // Fragment 12 is read before fragment 11.
        let g = RewriteGroupInput {
            old_fragments: vec![fr(12, 1), fr(11, 1)],
            new_fragments: vec![fr(20, 2)],
            surviving: tm(&[(11, 0), (12, 0)]),
        };
        let remap = RowAddrRemap::compact(vec![g]).unwrap();
        assert_eq!(remap.get(ra(12, 0)), Some(Some(ra(20, 0))));
        assert_eq!(remap.get(ra(11, 0)), Some(Some(ra(20, 1))));
    }

    #[test]
    fn zero_row_new_fragments_are_skipped_by_lookup() {
        let g = RewriteGroupInput {
            old_fragments: vec![fr(1, 4)],
            new_fragments: vec![fr(5, 0), fr(6, 2), fr(7, 0), fr(8, 0), fr(9, 2), fr(10, 0)],
            surviving: tm(&[(1, 0), (1, 1), (1, 2), (1, 3)]),
        };
        let remap = RowAddrRemap::compact(vec![g]).unwrap();
        let mut out = Vec::new();
        remap.get_batch(
            &[ra(1, 3), ra(1, 0), ra(1, 2), ra(1, 1), ra(1, 3)],
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                Some(Some(ra(9, 1))),
                Some(Some(ra(6, 0))),
                Some(Some(ra(9, 0))),
                Some(Some(ra(6, 1))),
                Some(Some(ra(9, 1))),
            ]
        );
        assert_eq!(
            remap.new_fragments().iter().collect::<Vec<_>>(),
            vec![5, 6, 7, 8, 9, 10]
        );
    }

    fn invalid(groups: Vec<RewriteGroupInput>) -> String {
        match RowAddrRemap::compact(groups) {
            Err(Error::InvalidInput { message }) => message,
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    #[test]
    fn rejects_old_fragment_listed_twice_in_a_group() {
        let mut g = group_a();
        g.old_fragments.push(fr(4, 5));
        assert!(invalid(vec![g]).contains("old fragment 4 is listed twice"));
    }

    #[test]
    fn rejects_old_fragment_in_two_groups() {
        let other = RewriteGroupInput {
            old_fragments: vec![fr(3, 2)],
            new_fragments: vec![],
            surviving: RoaringTreemap::new(),
        };
        assert!(invalid(vec![group_a(), other]).contains("old fragment 3 is listed twice"));
    }

    #[test]
    fn rejects_offset_beyond_physical_rows() {
        let mut g = group_a();
        g.old_fragments[1] = fr(3, 1); // offset 1 survives but only 1 physical row
        assert!(invalid(vec![g]).contains("surviving offset 1 of old fragment 3"));
    }

    #[test]
    fn rejects_survivors_outside_old_fragments() {
        let mut g = group_a();
        g.surviving.insert(ra(8, 0));
        g.new_fragments.push(fr(13, 1));
        assert!(invalid(vec![g]).contains("fragment 8, which is not an old fragment"));
    }

    #[test]
    fn rejects_survivor_count_mismatch() {
        let mut g = group_a();
        g.new_fragments.push(fr(13, 1));
        assert!(
            invalid(vec![g]).contains("rewrote 5 surviving old rows but the new fragments hold 6")
        );
    }

    #[rstest]
    #[case::old_id(fr(1 << 32, 1), fr(10, 1), "old fragment id 4294967296")]
    #[case::old_rows(fr(1, 1 << 32), fr(10, 1), "physical rows of old fragment 4294967296")]
    #[case::new_id(fr(1, 1), fr(1 << 32, 1), "new fragment id 4294967296")]
    #[case::new_rows(fr(1, 1), fr(10, 1 << 32), "physical rows of new fragment")]
    fn rejects_values_beyond_u32(
        #[case] old: FragmentRows,
        #[case] new: FragmentRows,
        #[case] msg: &str,
    ) {
        let g = RewriteGroupInput {
            old_fragments: vec![old],
            new_fragments: vec![new],
            surviving: tm(&[(1, 0)]),
        };
        assert!(invalid(vec![g]).contains(msg));
    }

    #[test]
    fn rejects_new_fragment_listed_twice_or_reusing_an_old_id() {
        let mut g = group_a();
        g.new_fragments.push(fr(10, 0));
        assert!(invalid(vec![g]).contains("new fragment 10 is listed twice"));
        let mut g = group_a();
        g.new_fragments.push(fr(3, 0));
        assert!(invalid(vec![g]).contains("fragment 3 is both an old and a new fragment"));
    }

    #[test]
    fn no_deletions_cost_a_few_bytes_per_fragment() {
        let g = RewriteGroupInput {
            old_fragments: vec![fr(1, 1_000_000), fr(2, 1_000_000)],
            new_fragments: vec![fr(3, 2_000_000)],
            surviving: (ra(1, 0)..ra(1, 1_000_000))
                .chain(ra(2, 0)..ra(2, 1_000_000))
                .collect(),
        };
        let remap = RowAddrRemap::compact(vec![g]).unwrap();
        assert!(
            remap.deep_size_bytes() < 1024,
            "{}",
            remap.deep_size_bytes()
        );
        assert_eq!(remap.get(ra(2, 999_999)), Some(Some(ra(3, 1_999_999))));
    }

    #[test]
    fn shift_of_range_and_lookup_agree_with_get() {
        // Fragment 1 loses offset 4 of 10, then fragment 2 (8 rows, none
        // deleted) follows; destinations of 5 and 12 rows split fragment 1.
        let surviving = (0..10u32)
            .filter(|o| *o != 4)
            .map(|o| (1, o))
            .chain((0..8).map(|o| (2, o)))
            .collect::<Vec<_>>();
        let remap = CompactRemap::new(vec![
            RewriteGroupInput {
                old_fragments: vec![fr(1, 10), fr(2, 8)],
                new_fragments: vec![fr(20, 5), fr(21, 12)],
                surviving: tm(&surviving),
            },
            group_a(),
            group_b(),
        ])
        .unwrap();
        let mut cursor = RemapCursor::default();
        for fragment in [1u32, 2, 3, 4, 7, 9] {
            for min in 0..12u32 {
                assert_eq!(
                    remap.lookup(ra(fragment, min), &mut cursor),
                    remap.get(ra(fragment, min))
                );
                for max in min..12u32 {
                    let results: Vec<Option<Option<u64>>> =
                        (min..=max).map(|o| remap.get(ra(fragment, o))).collect();
                    let holds = match results[0] {
                        Some(Some(a)) => results
                            .iter()
                            .zip(0u64..)
                            .all(|(r, i)| *r == Some(Some(a + i)) && (a + i) >> 32 == a >> 32),
                        _ => false,
                    };
                    let got = remap.shift_of_range(fragment, min, max);
                    assert_eq!(got.is_some(), holds, "{fragment}:{min}..={max}");
                    if let Some(base) = got {
                        assert_eq!(results[0], Some(Some(base.wrapping_add(u64::from(min)))));
                    }
                }
            }
        }
        // 1:5..=9 survived and lands at 20:4 (one row) and 21:0.. — split.
        assert_eq!(remap.shift_of_range(1, 5, 9), None);
        assert_eq!(
            remap.shift_of_range(1, 6, 9),
            Some(ra(21, 0).wrapping_sub(6))
        );
        assert_eq!(remap.shift_of_range(1, 3, 3), Some(ra(20, 0)));
        assert_eq!(remap.shift_of_range(1, 9, 8), None);
    }
}
