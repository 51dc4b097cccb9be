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
use crate::hashmap_size::estimate_hashmap_bytes;
use crate::ranked::{last_le_by, RankedLayout, RankedOffsets};
use crate::translate::{AddressSink, Translator, TranslatorFastPaths};

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
    ///
    /// # Errors
    /// InvalidInput for an inconsistent capture, as listed in [`RowAddrRemap::compact`].
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
    /// # Errors
    /// InvalidInput if an old fragment is listed twice (in one group or in two), a
    /// new fragment is listed twice or is also an old fragment, a surviving offset
    /// is `>=` its fragment's physical rows, surviving addresses lie outside the
    /// group's old fragments, a group's survivor count differs from its new rows,
    /// or an id, row count or group index does not fit `u32`.
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

/// A remap translates as its lookup answers: an unaffected address maps to
/// itself.
impl Translator for RowAddrRemap {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        out.clear();
        out.reserve(batch.len());
        let mut cursor = LookupCursor::default();
        out.extend(
            batch
                .iter()
                .map(|a| self.get_with(*a, &mut cursor).unwrap_or(Some(*a))),
        );
        Ok(())
    }

    fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
        Some(self)
    }
}

impl TranslatorFastPaths for RowAddrRemap {
    fn translate_part(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        sink: &mut dyn AddressSink,
    ) -> Result<bool> {
        match self {
            RowAddrRemap::Compact(compact) => compact.translate_part(fragment, part, sink),
            RowAddrRemap::Direct(map) => {
                for offset in part {
                    let address = row_address(fragment, offset);
                    if let Some(new) = map.get(&address).copied().unwrap_or(Some(address)) {
                        sink.push(new);
                    }
                }
            }
        }
        Ok(true)
    }

    fn shift_of_range(&self, fragment: u32, min: u32, max: u32) -> Result<Option<u64>> {
        let RowAddrRemap::Compact(compact) = self else {
            // A direct map may send neighbouring rows anywhere.
            return Ok(None);
        };
        if min > max {
            return Ok(None);
        }
        let (first, last) = (row_address(fragment, min), row_address(fragment, max));
        Ok(match (compact.get(first), compact.get(last)) {
            // Not rows of a rewritten fragment: every offset maps to itself.
            (None, None) => Some(row_address(fragment, 0)),
            // Compaction keeps the order of survivors and numbers them
            // consecutively within each new fragment (one range per id), so
            // two ends in one fragment exactly `max - min` apart mean that
            // every row between them survived and moved by the same amount.
            (Some(Some(a)), Some(Some(b)))
                if a >> 32 == b >> 32 && b.wrapping_sub(a) == u64::from(max - min) =>
            {
                Some(a.wrapping_sub(u64::from(min)))
            }
            _ => None,
        })
    }

    fn worth_memoizing(&self) -> bool {
        true
    }
}

#[cfg(test)]
pub(crate) mod tests;
