//! Translating one segment's stored addresses to current ones, hop by hop.
//!
//! Per address: its starting fragment must be one the segment claims (else
//! another, newer segment holds those rows and the address is dropped). A
//! live fragment ends the walk; otherwise the fragment's consumer transition
//! moves the address on, and a deleted row (or a fragment that nobody
//! consumed and is not live) ends as `None`. After *every* hop a path that
//! enters a claimed fragment is dropped: its claimant returns those rows
//! itself, and branches of the lineage can reconverge there. Finally only
//! addresses inside the segment's coverage are kept, so a row is never
//! returned by two segments, nor by a segment and the scan of an uncovered
//! fragment.
//!
//! Transitions are visited in lineage order, each once per batch with all the
//! addresses waiting for it (at most [`MAX_TRANSLATION_BATCH`]). Input order
//! and duplicates are preserved.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use refract_core::{BatchTranslator, Error, Result, RowAddress, MAX_TRANSLATION_BATCH};
use refract_ledger::Mapping;
use roaring::RoaringBitmap;

use crate::history::FriHistory;
use crate::mapping::MappingBinder;

mod prepared;
pub use prepared::{PreparedTranslator, RESIDENT_LABEL_BUDGET_BYTES};

/// What a segment's translator checks besides the lineage.
#[derive(Debug, Clone)]
pub struct SegmentScope {
    /// Live fragments of the snapshot.
    pub live: Arc<RoaringBitmap>,
    /// Fragments claimed by any segment of the index.
    pub claimed: Arc<RoaringBitmap>,
    /// Fragments this segment claims.
    pub owned: RoaringBitmap,
    /// Live fragments this segment serves.
    pub coverage: RoaringBitmap,
    /// Stored fragments of the segment.
    pub stored: RoaringBitmap,
}

/// [`BatchTranslator::prepare`] binds the row maps of the first hop when
/// there are at most this many: more, and a query that touches one of them
/// would pay for opening the rest.
const PREPARED_ROW_MAPS: usize = 4;

/// The translator of one segment over a version-1 history.
pub struct SegmentTranslator {
    history: Arc<FriHistory>,
    binder: MappingBinder,
    scope: SegmentScope,
}

impl SegmentTranslator {
    /// A translator for a segment with `scope`.
    pub fn new(history: Arc<FriHistory>, binder: MappingBinder, scope: SegmentScope) -> Self {
        Self {
            history,
            binder,
            scope,
        }
    }

    /// What happens to the addresses of a stored `fragment` at the start:
    /// `Err` for a fragment the segment cannot hold.
    fn start_fate(&self, fragment: u32, address: u64) -> Result<Fate> {
        if !self.scope.stored.contains(fragment) {
            return Err(self.outside_coverage(address));
        }
        if !self.scope.owned.contains(fragment) {
            return Ok(Fate::Drop);
        }
        Ok(self.settle_fate(fragment))
    }

    /// What happens to an address arriving in `fragment`: kept (live and
    /// served), dropped (live but not served, or dead) or waiting for the
    /// fragment's consumer. Depends on the fragment only.
    fn settle_fate(&self, fragment: u32) -> Fate {
        if self.scope.live.contains(fragment) {
            return if self.scope.coverage.contains(fragment) {
                Fate::Keep
            } else {
                Fate::Drop
            };
        }
        match self.history.consumer_of(u64::from(fragment)) {
            Some(transition) => Fate::Wait(transition),
            None => Fate::Drop,
        }
    }

    /// [`Self::settle_fate`] after a hop, where a claimed fragment drops the
    /// address (its claimant returns those rows itself).
    fn hop_fate(&self, fragment: u32) -> Fate {
        if self.scope.claimed.contains(fragment) {
            Fate::Drop
        } else {
            self.settle_fate(fragment)
        }
    }

    fn outside_coverage(&self, address: u64) -> Error {
        if self.history.has_unsupported_transitions() {
            Error::not_supported(format!(
                "row address {} lies outside the segment's recorded coverage and the FRI history \
                 holds transitions this client cannot read; upgrade to a newer version of Refract",
                RowAddress(address)
            ))
        } else {
            Error::corrupt(
                "index segment",
                format!(
                    "row address {} lies outside the segment's recorded fragment coverage",
                    RowAddress(address)
                ),
            )
        }
    }
}

/// What happens to the addresses of one fragment at a step of the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Done: the address as it is.
    Keep,
    /// Done: no result.
    Drop,
    /// Waiting for this transition.
    Wait(usize),
}

/// Slots of [`FateCache`] (a power of two).
const FATE_SLOTS: usize = 64;

/// A direct-mapped memo of per-fragment fates within one batch, so the
/// scope's bitmaps are probed once per fragment rather than once per address.
struct FateCache {
    slots: [(u32, Option<Fate>); FATE_SLOTS],
}

impl FateCache {
    fn new() -> Self {
        Self {
            slots: [(0, None); FATE_SLOTS],
        }
    }

    /// The fate of `fragment`, computed by `compute` on a miss.
    #[inline]
    fn get(&mut self, fragment: u32, compute: impl FnOnce() -> Fate) -> Fate {
        let slot = &mut self.slots[fragment as usize & (FATE_SLOTS - 1)];
        match *slot {
            (id, Some(fate)) if id == fragment => fate,
            _ => {
                let fate = compute();
                *slot = (fragment, Some(fate));
                fate
            }
        }
    }
}

#[async_trait::async_trait]
impl BatchTranslator for SegmentTranslator {
    /// Binds the stable partitions that consume the segment's fragments
    /// (their row maps are read from storage; ordered compactions are in the
    /// ledger already), when there are at most four of them.
    async fn prepare(&self) -> Result<()> {
        let mut first_hops = BTreeSet::new();
        for fragment in &self.scope.owned {
            if self.scope.live.contains(fragment) {
                continue;
            }
            let Some(transition) = self.history.consumer_of(u64::from(fragment)) else {
                continue;
            };
            let reads_row_map = self.history.node(transition).is_some_and(|node| {
                matches!(node.record.mapping(), Mapping::StablePartition { .. })
            });
            if reads_row_map {
                first_hops.insert(transition);
                if first_hops.len() > PREPARED_ROW_MAPS {
                    return Ok(());
                }
            }
        }
        let mut binds = Vec::with_capacity(first_hops.len());
        for transition in first_hops {
            if let Some(node) = self.history.node(transition) {
                binds.push(self.binder.bind(node));
            }
        }
        futures::future::try_join_all(binds).await?;
        Ok(())
    }

    async fn translate_batch(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        if batch.len() > MAX_TRANSLATION_BATCH {
            return Err(Error::invalid_input(format!(
                "translation batch of {} addresses exceeds the maximum of {MAX_TRANSLATION_BATCH}",
                batch.len()
            )));
        }
        out.clear();
        out.resize(batch.len(), None);
        // Positions waiting per transition, visited in lineage order: a hop
        // always leads to a later transition, so one pass suffices.
        let mut waiting: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut current: Vec<u64> = batch.to_vec();
        self.start_batch(batch, out, &mut waiting)?;
        let mut fates = FateCache::new();
        let mut addresses = Vec::new();
        let mut results = Vec::new();
        while let Some((transition, slots)) = waiting.pop_first() {
            let node = self.history.node(transition).ok_or_else(|| {
                Error::corrupt("FRI ledger", format!("transition {transition} is missing"))
            })?;
            let reader = self.binder.bind(node).await?;
            addresses.clear();
            // Slots index `current`, which has the batch's length.
            addresses.extend(slots.iter().map(|slot| current[*slot]));
            reader.translate(&addresses, &mut results).await?;
            if results.len() != addresses.len() {
                return Err(Error::corrupt(
                    "FRI mapping",
                    "mapping reader changed the translation batch length",
                ));
            }
            for (slot, result) in slots.iter().zip(&results) {
                let Some(next) = *result else {
                    continue; // deleted at this transition; out[slot] stays None
                };
                let fragment = RowAddress(next).fragment_id();
                match fates.get(fragment, || self.hop_fate(fragment)) {
                    Fate::Keep => out[*slot] = Some(next),
                    Fate::Drop => {}
                    Fate::Wait(t) if t > transition => {
                        current[*slot] = next;
                        waiting.entry(t).or_default().push(*slot);
                    }
                    Fate::Wait(_) => {
                        return Err(Error::corrupt(
                            "FRI ledger",
                            "a translated address went back in lineage order",
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}

impl SegmentTranslator {
    /// The first step of every address of `batch`, one fate per run of
    /// addresses in the same fragment: results of finished addresses go to
    /// `out`, the others wait for their fragment's consumer.
    fn start_batch(
        &self,
        batch: &[u64],
        out: &mut [Option<u64>],
        waiting: &mut BTreeMap<usize, Vec<usize>>,
    ) -> Result<()> {
        let mut slot = 0;
        while let Some(&first) = batch.get(slot) {
            let fragment = RowAddress(first).fragment_id();
            let run = batch[slot..]
                .iter()
                .take_while(|a| RowAddress(**a).fragment_id() == fragment)
                .count();
            let run_slots = slot..slot + run;
            match self.start_fate(fragment, first)? {
                // `run_slots` lies inside `batch`; `out` has its length.
                Fate::Keep => {
                    for s in run_slots {
                        out[s] = Some(batch[s]);
                    }
                }
                Fate::Drop => {}
                Fate::Wait(t) => waiting.entry(t).or_default().extend(run_slots),
            }
            slot += run;
        }
        Ok(())
    }
}

/// The translator of one segment over a version-0 history: the legacy chain,
/// then the coverage check (a chained address that lands in a fragment the
/// segment does not serve is dropped; that fragment's server or the scan
/// returns it).
pub struct LegacyTranslator {
    history: Arc<FriHistory>,
    scope: SegmentScope,
}

impl LegacyTranslator {
    /// A legacy translator for a segment with `scope`.
    pub fn new(history: Arc<FriHistory>, scope: SegmentScope) -> Self {
        Self { history, scope }
    }
}

#[async_trait::async_trait]
impl BatchTranslator for LegacyTranslator {
    async fn translate_batch(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        if batch.len() > MAX_TRANSLATION_BATCH {
            return Err(Error::invalid_input(format!(
                "translation batch of {} addresses exceeds the maximum of {MAX_TRANSLATION_BATCH}",
                batch.len()
            )));
        }
        let Some(legacy) = self.history.legacy() else {
            return Err(Error::invalid_input("not a version-0 FRI history"));
        };
        let mut states = Vec::with_capacity(batch.len());
        legacy.chain.get_batch(batch, &mut states);
        out.clear();
        for (address, state) in batch.iter().zip(states) {
            let result = match state {
                None => Some(*address),
                Some(moved) => moved,
            };
            out.push(result.filter(|a| {
                let f = RowAddress(*a).fragment_id();
                self.scope.live.contains(f) && self.scope.coverage.contains(f)
            }));
        }
        Ok(())
    }
}
