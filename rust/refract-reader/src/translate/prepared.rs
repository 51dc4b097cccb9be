//! Synchronous, in-memory translation of a segment whose lineage is made of
//! ordered compactions only.
//!
//! An ordered compaction's mapping is a pure function of its rewrite group
//! (the core's [`CompactRemap`], built once per transition and cached by the
//! binder), so once every transition a segment's addresses can reach is
//! bound, translation needs no I/O. [`PreparedTranslator`] binds them up
//! front and then answers the same way as [`SegmentTranslator`] — same fates,
//! same drops, same errors — but address by address with one search cursor
//! per transition, without the per-transition queues of the async walk, and
//! with a constant-shift fast path for runs of one fragment that lost no row
//! (the common case after compacting insert-only fragments).
//!
//! Stable partitions read row-map labels from storage, so a segment that can
//! reach one is not prepared (the async walk serves it).

use std::sync::Arc;

use refract_core::{
    row_address, CompactRemap, Error, MappingReader, RemapCursor, Result, RowAddress, Translator,
    MAX_TRANSLATION_BATCH,
};
use refract_ledger::Mapping;
use roaring::RoaringBitmap;

use super::{Fate, FateCache, SegmentTranslator};

/// A [`SegmentTranslator`] whose every reachable transition is an ordered
/// compaction, bound in memory: a synchronous [`Translator`] with the
/// [`Translator::translate_part`] streaming path.
pub struct PreparedTranslator {
    segment: SegmentTranslator,
    /// Bound ordered-compaction readers by transition index (`None` for a
    /// transition no address of the segment can reach).
    readers: Vec<Option<Arc<dyn MappingReader>>>,
}

impl std::fmt::Debug for PreparedTranslator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedTranslator")
            .field("transitions", &self.readers.iter().flatten().count())
            .finish()
    }
}

impl SegmentTranslator {
    /// The in-memory form of this translator, when every transition the
    /// segment's stored addresses can reach is an ordered compaction; `None`
    /// when one is a stable partition (its labels need I/O) or cannot be bound
    /// (the async walk then reports the error if an address reaches it).
    pub async fn prepared(&self) -> Option<PreparedTranslator> {
        let reachable = self.reachable_transitions()?;
        let mut readers: Vec<Option<Arc<dyn MappingReader>>> = Vec::new();
        readers.resize_with(self.history.nodes().len(), || None);
        for transition in reachable {
            let node = self.history.node(transition)?;
            let reader = self.binder.bind(node).await.ok()?;
            reader.as_ordered_compaction()?;
            *readers.get_mut(transition)? = Some(reader);
        }
        Some(PreparedTranslator {
            segment: SegmentTranslator {
                history: self.history.clone(),
                binder: self.binder.clone(),
                scope: self.scope.clone(),
            },
            readers,
        })
    }

    /// Every transition reachable from the segment's owned stored fragments
    /// (a superset of those its addresses take: claimed fragments are not
    /// pruned), or `None` when one of them is not an ordered compaction.
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
            if !matches!(node.record.mapping(), Mapping::OrderedCompaction { .. }) {
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

/// Per-call search state: the fates of destination fragments and one cursor
/// per transition (allocated on the first per-row lookup).
struct Walk {
    fates: FateCache,
    cursors: Vec<RemapCursor>,
}

impl Walk {
    fn new() -> Self {
        Self {
            fates: FateCache::new(),
            cursors: Vec::new(),
        }
    }
}

impl PreparedTranslator {
    /// The compact remap of `transition`.
    fn remap(&self, transition: usize) -> Result<&CompactRemap> {
        self.readers
            .get(transition)
            .and_then(|r| r.as_deref())
            .and_then(|r| r.as_ordered_compaction())
            .map(|m| m.remap())
            .ok_or_else(|| {
                Error::corrupt(
                    "FRI ledger",
                    format!("transition {transition} was not prepared for translation"),
                )
            })
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
            let remap = self.remap(transition)?;
            if walk.cursors.len() <= transition {
                walk.cursors
                    .resize_with(self.readers.len().max(transition + 1), Default::default);
            }
            let next = match remap.lookup(address, &mut walk.cursors[transition]) {
                Some(Some(next)) => next,
                Some(None) => return Ok(None), // deleted at this transition
                None => {
                    return Err(Error::invalid_input(format!(
                        "row address {} is not a row of a source fragment of this mapping",
                        RowAddress(address)
                    )))
                }
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
        let shift = self
            .remap(transition)?
            .shift_of_range(fragment, offsets.0, offsets.1);
        let Some(base) = shift else {
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

    fn translate_part(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        sink: &mut dyn FnMut(u64),
    ) -> Result<bool> {
        let (Some(min), Some(max)) = (part.min(), part.max()) else {
            return Ok(true);
        };
        let first = row_address(fragment, min);
        match self.segment.start_fate(fragment, first)? {
            Fate::Keep => part.iter().for_each(|o| sink(row_address(fragment, o))),
            Fate::Drop => {}
            Fate::Wait(t) => {
                let mut walk = Walk::new();
                let mut emit = |result: Option<u64>| {
                    if let Some(new) = result {
                        sink(new);
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
}

impl PreparedTranslator {
    /// [`Translator::shift_of_range`] of offsets `min..=max` of `fragment`
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
            let Some(hop) = self.remap(transition)?.shift_of_range(at, first, last) else {
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

/// `(first offset, last offset)` of a run of one fragment's addresses when
/// they ascend; `None` otherwise.
fn ascending_offsets(run: &[u64]) -> Option<(u32, u32)> {
    let (first, last) = (run.first()?, run.last()?);
    run.windows(2)
        .all(|w| w[0] <= w[1])
        .then(|| (RowAddress(*first).offset(), RowAddress(*last).offset()))
}
