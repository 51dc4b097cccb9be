//! Synchronous, in-memory translation of a segment.
//!
//! An ordered compaction's mapping is a pure function of its rewrite group
//! (the core's [`CompactRemap`], built once per transition and cached by the
//! binder); a stable partition's is its row map, whose label units (a label
//! and an in-block rank per source row) can be held in memory. Once every
//! transition a segment's addresses can reach is bound that way, translation
//! needs no I/O. [`PreparedTranslator`] binds them up front and then answers
//! the same way as [`SegmentTranslator`] — same fates, same drops, same
//! errors — but address by address with one search cursor per transition,
//! without the per-transition queues of the async walk, and with a
//! constant-shift fast path for runs of one fragment that move together (a
//! compacted fragment that lost no row, a fragment a partition sent whole to
//! one destination).
//!
//! Stable partitions hold four bytes per source row in memory, so a segment
//! whose reachable row maps exceed [`RESIDENT_LABEL_BUDGET_BYTES`] is not
//! prepared: the async walk serves it, reading label chunks through the
//! shared cache.

use std::sync::{Arc, Mutex, PoisonError};

use refract_core::{
    row_address, AddressSink, CompactRemap, Error, MappingReader, RemapCursor, Result, RowAddress,
    Translator, TranslatorFastPaths, MAX_TRANSLATION_BATCH,
};
use refract_ledger::Mapping;
use roaring::RoaringBitmap;

use super::{Fate, FateCache, SegmentTranslator};
use crate::mapping::StablePartitionMapping;
use crate::rowmap::{ResidentPartition, RouteBuffer, SourceCursor};

/// Most label bytes a prepared translator holds for its stable partitions
/// (about 33M source rows); beyond that the async walk serves the segment.
pub const RESIDENT_LABEL_BUDGET_BYTES: u64 = 128 << 20;

/// One transition, bound for synchronous translation.
enum Hop {
    /// An ordered compaction (its reader holds the compact remap).
    Ordered(Arc<dyn MappingReader>),
    /// A stable partition with its row map in memory.
    Partition(ResidentPartition),
}

/// A [`SegmentTranslator`] whose every reachable transition is bound in
/// memory: a synchronous [`Translator`] with the
/// [`TranslatorFastPaths::translate_part`](refract_core::TranslatorFastPaths::translate_part) streaming path.
pub struct PreparedTranslator {
    segment: SegmentTranslator,
    /// Bound transitions by transition index (`None` for one no address of
    /// the segment can reach).
    hops: Vec<Option<Hop>>,
    /// Idle route buffers of [`TranslatorFastPaths::translate_part`](refract_core::TranslatorFastPaths::translate_part) through a stable
    /// partition: one per thread translating at once, reused across parts.
    routes: Mutex<Vec<RouteBuffer>>,
}

impl std::fmt::Debug for PreparedTranslator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bound = |partition: bool| {
            self.hops
                .iter()
                .flatten()
                .filter(|h| matches!(h, Hop::Partition(_)) == partition)
                .count()
        };
        f.debug_struct("PreparedTranslator")
            .field("ordered_compactions", &bound(false))
            .field("stable_partitions", &bound(true))
            .finish()
    }
}

impl SegmentTranslator {
    /// The in-memory form of this translator: every transition the segment's
    /// stored addresses can reach is bound, stable partitions with their
    /// labels loaded. `None` when the reachable row maps exceed
    /// [`RESIDENT_LABEL_BUDGET_BYTES`] or a transition cannot be bound (the
    /// async walk then reports the error if an address reaches it).
    pub async fn prepared(&self) -> Option<PreparedTranslator> {
        self.prepared_within(RESIDENT_LABEL_BUDGET_BYTES).await
    }

    /// [`Self::prepared`] with at most `resident_budget_bytes` of labels held.
    pub async fn prepared_within(&self, resident_budget_bytes: u64) -> Option<PreparedTranslator> {
        let reachable = self.reachable_transitions()?;
        let mut hops: Vec<Option<Hop>> = Vec::new();
        hops.resize_with(self.history.nodes().len(), || None);
        let mut resident_bytes = 0u64;
        for transition in reachable {
            let node = self.history.node(transition)?;
            let reader = self.binder.bind(node).await.ok()?;
            let hop = if reader.as_ordered_compaction().is_some() {
                Hop::Ordered(reader)
            } else {
                let partition = reader.as_any()?.downcast_ref::<StablePartitionMapping>()?;
                let map = partition.shared_row_map();
                resident_bytes = resident_bytes.saturating_add(map.resident_bytes());
                if resident_bytes > resident_budget_bytes {
                    return None;
                }
                Hop::Partition(map.resident().await.ok()?)
            };
            *hops.get_mut(transition)? = Some(hop);
        }
        Some(PreparedTranslator {
            segment: SegmentTranslator {
                history: self.history.clone(),
                binder: self.binder.clone(),
                scope: self.scope.clone(),
            },
            hops,
            routes: Mutex::default(),
        })
    }

    /// Every transition reachable from the segment's owned stored fragments
    /// (a superset of those its addresses take: claimed fragments are not
    /// pruned), or `None` when one of them has a mapping this client cannot
    /// prepare.
    fn reachable_transitions(&self) -> Option<Vec<usize>> {
        let mut seen = vec![false; self.history.nodes().len()];
        let mut stack: Vec<usize> = (&self.scope.stored & &self.scope.owned)
            .iter()
            .filter_map(|f| self.history.consumer_of(u64::from(f)))
            .collect();
        let mut reachable = Vec::new();
        while let Some(transition) = stack.pop() {
            if std::mem::replace(seen.get_mut(transition)?, true) {
                continue;
            }
            let node = self.history.node(transition)?;
            if !matches!(
                node.record.mapping(),
                Mapping::OrderedCompaction { .. } | Mapping::StablePartition { .. }
            ) {
                return None;
            }
            reachable.push(transition);
            stack.extend(
                node.destinations
                    .iter()
                    .filter_map(|d| self.history.consumer_of(*d)),
            );
        }
        reachable.sort_unstable();
        Some(reachable)
    }
}

/// Per-call search state: the fates of destination fragments and, per
/// transition, one remap cursor and one source cursor (allocated on the first
/// per-row lookup).
struct Walk {
    fates: FateCache,
    cursors: Vec<RemapCursor>,
    sources: Vec<SourceCursor>,
}

impl Walk {
    fn new() -> Self {
        Self {
            fates: FateCache::new(),
            cursors: Vec::new(),
            sources: Vec::new(),
        }
    }

    /// The cursors of `transition` (of `transitions` in all).
    fn cursors_of(
        &mut self,
        transition: usize,
        transitions: usize,
    ) -> (&mut RemapCursor, &mut SourceCursor) {
        if self.cursors.len() <= transition {
            let len = transitions.max(transition + 1);
            self.cursors.resize_with(len, Default::default);
            self.sources.resize_with(len, Default::default);
        }
        (&mut self.cursors[transition], &mut self.sources[transition])
    }
}

impl PreparedTranslator {
    /// The bound hop of `transition`.
    fn hop(&self, transition: usize) -> Result<&Hop> {
        self.hops
            .get(transition)
            .and_then(Option::as_ref)
            .ok_or_else(|| unprepared(transition))
    }

    /// Moves `address` through `transition`: its next address, or `None`
    /// when the row was deleted there.
    fn step(&self, address: u64, transition: usize, walk: &mut Walk) -> Result<Option<u64>> {
        let (cursor, sources) = walk.cursors_of(transition, self.hops.len());
        match self.hop(transition)? {
            Hop::Ordered(reader) => match ordered_remap(reader)?.lookup(address, cursor) {
                Some(next) => Ok(next),
                None => Err(Error::invalid_input(format!(
                    "row address {} is not a row of a source fragment of this mapping",
                    RowAddress(address)
                ))),
            },
            Hop::Partition(map) => map.translate(address, sources),
        }
    }

    /// `Some(base)` when offsets `min..=max` of `fragment` all move through
    /// `transition` to `base + offset`.
    fn shift_of_hop(
        &self,
        transition: usize,
        fragment: u32,
        (min, max): (u32, u32),
    ) -> Result<Option<u64>> {
        match self.hop(transition)? {
            Hop::Ordered(reader) => Ok(ordered_remap(reader)?.shift_of_range(fragment, min, max)),
            Hop::Partition(map) => map.shift_of_range(fragment, (min, max)),
        }
    }

    /// The fate of an address that a hop of `transition` moved to `fragment`.
    fn after_hop(&self, transition: usize, fragment: u32, walk: &mut Walk) -> Result<Fate> {
        match walk.fates.get(fragment, || self.segment.hop_fate(fragment)) {
            Fate::Wait(next) if next <= transition => Err(Error::corrupt(
                "FRI ledger",
                "a translated address went back in lineage order",
            )),
            fate => Ok(fate),
        }
    }

    /// Walks one `address` waiting for `transition` to its result.
    fn walk_one(
        &self,
        mut address: u64,
        mut transition: usize,
        walk: &mut Walk,
    ) -> Result<Option<u64>> {
        loop {
            let Some(next) = self.step(address, transition, walk)? else {
                return Ok(None); // deleted at this transition
            };
            match self.after_hop(transition, RowAddress(next).fragment_id(), walk)? {
                Fate::Keep => return Ok(Some(next)),
                Fate::Drop => return Ok(None),
                Fate::Wait(t) => {
                    address = next;
                    transition = t;
                }
            }
        }
    }

    /// Translates a run of addresses of one `fragment` waiting for
    /// `transition`, calling `emit(position, result)` in order. A run whose
    /// rows all survived into one destination moves by one constant.
    fn walk_run(
        &self,
        fragment: u32,
        offsets: (u32, u32),
        run: impl Iterator<Item = u64>,
        transition: usize,
        walk: &mut Walk,
        emit: &mut dyn FnMut(Option<u64>),
    ) -> Result<()> {
        let Some(base) = self.shift_of_hop(transition, fragment, offsets)? else {
            if let Hop::Partition(map) = self.hop(transition)? {
                // One source search and unit lookup for the whole run.
                return map.translate_run(run, |next| {
                    let Some(next) = next else {
                        emit(None); // deleted at this transition
                        return Ok(());
                    };
                    match self.after_hop(transition, RowAddress(next).fragment_id(), walk)? {
                        Fate::Keep => emit(Some(next)),
                        Fate::Drop => emit(None),
                        Fate::Wait(t) => emit(self.walk_one(next, t, walk)?),
                    }
                    Ok(())
                });
            }
            for address in run {
                emit(self.walk_one(address, transition, walk)?);
            }
            return Ok(());
        };
        let destination = RowAddress(base.wrapping_add(u64::from(offsets.0))).fragment_id();
        match self.after_hop(transition, destination, walk)? {
            Fate::Keep => run.for_each(|a| emit(Some(base.wrapping_add(a & u64::from(u32::MAX))))),
            Fate::Drop => run.for_each(|_| emit(None)),
            Fate::Wait(next) => {
                for address in run {
                    let moved = base.wrapping_add(address & u64::from(u32::MAX));
                    emit(self.walk_one(moved, next, walk)?);
                }
            }
        }
        Ok(())
    }
}

impl Translator for PreparedTranslator {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        if batch.len() > MAX_TRANSLATION_BATCH {
            return Err(Error::invalid_input(format!(
                "translation batch of {} addresses exceeds the maximum of {MAX_TRANSLATION_BATCH}",
                batch.len()
            )));
        }
        out.clear();
        out.reserve(batch.len());
        let mut walk = Walk::new();
        let mut slot = 0;
        while let Some(&first) = batch.get(slot) {
            let fragment = RowAddress(first).fragment_id();
            let run = batch[slot..]
                .iter()
                .take_while(|a| RowAddress(**a).fragment_id() == fragment)
                .count();
            let addresses = &batch[slot..slot + run];
            match self.segment.start_fate(fragment, first)? {
                Fate::Keep => out.extend(addresses.iter().map(|a| Some(*a))),
                Fate::Drop => out.extend(addresses.iter().map(|_| None)),
                Fate::Wait(t) => {
                    // The constant shift needs the run's offset range: known
                    // when it ascends (sorted batches, the rewrite's case).
                    let offsets = ascending_offsets(addresses).unwrap_or((1, 0));
                    let mut emit = |result| out.push(result);
                    self.walk_run(
                        fragment,
                        offsets,
                        addresses.iter().copied(),
                        t,
                        &mut walk,
                        &mut emit,
                    )?;
                }
            }
            slot += run;
        }
        Ok(())
    }

    fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
        Some(self)
    }
}

impl TranslatorFastPaths for PreparedTranslator {
    fn translate_part(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        sink: &mut dyn AddressSink,
    ) -> Result<bool> {
        let (Some(min), Some(max)) = (part.min(), part.max()) else {
            return Ok(true);
        };
        let first = row_address(fragment, min);
        match self.segment.start_fate(fragment, first)? {
            Fate::Keep => part
                .iter()
                .for_each(|o| sink.push(row_address(fragment, o))),
            Fate::Drop => {}
            Fate::Wait(t) => {
                let mut walk = Walk::new();
                if let Hop::Partition(map) = self.hop(t)? {
                    if map.shift_of_range(fragment, (min, max))?.is_none() {
                        self.route_part(map, fragment, part, t, &mut walk, sink)?;
                        return Ok(true);
                    }
                }
                let mut emit = |result: Option<u64>| {
                    if let Some(new) = result {
                        sink.push(new);
                    }
                };
                let run = part.iter().map(|o| row_address(fragment, o));
                self.walk_run(fragment, (min, max), run, t, &mut walk, &mut emit)?;
            }
        }
        Ok(true)
    }

    fn shift_of_range(&self, fragment: u32, min: u32, max: u32) -> Result<Option<u64>> {
        if min > max {
            return Ok(None);
        }
        match self
            .segment
            .start_fate(fragment, row_address(fragment, min))?
        {
            Fate::Keep => Ok(Some(row_address(fragment, 0))),
            Fate::Drop => Ok(None),
            Fate::Wait(t) => self.shift_through(fragment, (min, max), t),
        }
    }

    /// Every hop is a table read (ordered compactions search with a cursor,
    /// partitions read an entry and a base): memoizing would only add a
    /// per-row table.
    fn worth_memoizing(&self) -> bool {
        false
    }
}

impl PreparedTranslator {
    /// Streams the rows `part` of `fragment`, waiting for the stable
    /// partition `map` of `transition`, to `sink` as one ascending run per
    /// destination (see [`ResidentPartition::route_part`]); a destination
    /// that waits for a later transition walks its rows one by one.
    fn route_part(
        &self,
        map: &ResidentPartition,
        fragment: u32,
        part: &RoaringBitmap,
        transition: usize,
        walk: &mut Walk,
        sink: &mut dyn AddressSink,
    ) -> Result<()> {
        let mut buffer = self.take_route_buffer();
        let routed = map.route_part(fragment, part, &mut buffer, |destination, lows| {
            match self.after_hop(transition, destination, walk)? {
                Fate::Keep => sink.push_run(destination, lows),
                Fate::Drop => {}
                Fate::Wait(next) => {
                    for low in lows {
                        let moved = row_address(destination, *low);
                        if let Some(new) = self.walk_one(moved, next, walk)? {
                            sink.push(new);
                        }
                    }
                }
            }
            Ok(())
        });
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buffer);
        routed
    }

    /// An idle route buffer, or a new one.
    fn take_route_buffer(&self) -> RouteBuffer {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default()
    }

    /// [`TranslatorFastPaths::shift_of_range`](refract_core::TranslatorFastPaths::shift_of_range) of offsets `min..=max` of `fragment`
    /// waiting for `transition`: the shifts of every hop, composed.
    fn shift_through(
        &self,
        fragment: u32,
        (min, max): (u32, u32),
        mut transition: usize,
    ) -> Result<Option<u64>> {
        let mut walk = Walk::new();
        // `base + o` is the current address of offset `o` of the range.
        let mut base = row_address(fragment, 0);
        let mut at = fragment;
        loop {
            let first = RowAddress(base.wrapping_add(u64::from(min))).offset();
            let last = RowAddress(base.wrapping_add(u64::from(max))).offset();
            let Some(hop) = self.shift_of_hop(transition, at, (first, last))? else {
                return Ok(None);
            };
            // Offset o sits at `first + (o - min)` of `at`, then moves to
            // `hop + first + (o - min)`.
            base = hop
                .wrapping_add(u64::from(first))
                .wrapping_sub(u64::from(min));
            at = RowAddress(hop.wrapping_add(u64::from(first))).fragment_id();
            match self.after_hop(transition, at, &mut walk)? {
                Fate::Keep => return Ok(Some(base)),
                Fate::Drop => return Ok(None),
                Fate::Wait(next) => transition = next,
            }
        }
    }
}

/// The compact remap of an ordered-compaction reader.
fn ordered_remap(reader: &Arc<dyn MappingReader>) -> Result<&CompactRemap> {
    reader
        .as_ordered_compaction()
        .map(|m| m.remap())
        .ok_or_else(|| Error::corrupt("FRI ledger", "an ordered compaction lost its remap"))
}

fn unprepared(transition: usize) -> Error {
    Error::corrupt(
        "FRI ledger",
        format!("transition {transition} was not prepared for translation"),
    )
}

/// `(first offset, last offset)` of a run of one fragment's addresses when
/// they ascend; `None` otherwise.
fn ascending_offsets(run: &[u64]) -> Option<(u32, u32)> {
    let (first, last) = (run.first()?, run.last()?);
    run.windows(2)
        .all(|w| w[0] <= w[1])
        .then(|| (RowAddress(*first).offset(), RowAddress(*last).offset()))
}
