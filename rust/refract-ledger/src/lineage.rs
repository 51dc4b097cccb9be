//! Fragment lineage: who produced and who consumed each fragment, and a
//! topological order of the records.
//!
//! Rules: a fragment has at most one producer (as a destination) and at most
//! one consumer (as a source); a fragment produced by one record and consumed
//! by another has the same `physical_rows` on both sides (its deletion count
//! may grow in between); the graph is acyclic (a self-cycle included). The
//! order is Kahn's algorithm choosing the earliest serialized record among
//! those ready, so independent records keep their serialized order and only
//! dependencies move records.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::model::{LegacyVersion, TransitionRecord};
use crate::violation::{Checked, Violation};

/// Where a record lives in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RecordRef {
    /// Group `group` of legacy version `version`.
    Legacy { version: usize, group: usize },
    /// Position in the (ordered) transitions.
    Transition(usize),
}

/// The lineage of a ledger: record order and per-fragment producer/consumer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LineageIndex {
    order: Vec<RecordRef>,
    producers: HashMap<u64, RecordRef>,
    consumers: HashMap<u64, RecordRef>,
}

/// Validates the lineage of `records` (in serialized order) and returns the
/// topological order as indices into `records` plus producer and consumer
/// maps keyed by fragment id.
pub(crate) fn order_records(records: &[&TransitionRecord]) -> Checked<FlatLineage> {
    let mut producers: HashMap<u64, usize> = HashMap::new();
    let mut consumers: HashMap<u64, usize> = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        for d in record.destinations() {
            if producers.insert(d.id, i).is_some() {
                return Err(Violation::invalid(format!(
                    "fragment {} is produced by more than one transition",
                    d.id
                )));
            }
        }
        for s in record.sources() {
            if consumers.insert(s.id, i).is_some() {
                return Err(Violation::invalid(format!(
                    "fragment {} is consumed by more than one transition",
                    s.id
                )));
            }
        }
    }
    let mut successors: Vec<Vec<usize>> = vec![Vec::new(); records.len()];
    let mut indegree = vec![0usize; records.len()];
    for (i, record) in records.iter().enumerate() {
        for s in record.sources() {
            let Some(&producer) = producers.get(&s.id) else {
                continue;
            };
            if producer == i {
                return Err(Violation::invalid(format!(
                    "lineage cycle: a transition both produces and consumes fragment {}",
                    s.id
                )));
            }
            check_edge_rows(records, producer, s.id, s.physical_rows)?;
            // `producer` and `i` are indices into `records`, the length of both vectors.
            successors[producer].push(i);
            indegree[i] += 1;
        }
    }
    let order = kahn(&successors, indegree)?;
    Ok(FlatLineage {
        order,
        producers,
        consumers,
    })
}

/// A fragment carries the same physical rows out of its producer and into its
/// consumer.
fn check_edge_rows(
    records: &[&TransitionRecord],
    producer: usize,
    fragment: u64,
    consumed_rows: u64,
) -> Checked {
    let produced_rows = records
        .get(producer)
        .and_then(|r| r.destinations().iter().find(|d| d.id == fragment))
        .map(|d| d.physical_rows);
    if produced_rows != Some(consumed_rows) {
        return Err(Violation::invalid(format!(
            "inconsistent physical_rows for fragment {fragment}: produced with {produced_rows:?}, consumed with {consumed_rows}"
        )));
    }
    Ok(())
}

/// Kahn's algorithm, preferring the smallest serialized index among ready
/// records.
fn kahn(successors: &[Vec<usize>], mut indegree: Vec<usize>) -> Checked<Vec<usize>> {
    let mut ready: BinaryHeap<Reverse<usize>> = indegree
        .iter()
        .enumerate()
        .filter(|(_, d)| **d == 0)
        .map(|(i, _)| Reverse(i))
        .collect();
    let mut order = Vec::with_capacity(indegree.len());
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &next in successors.get(i).map(Vec::as_slice).unwrap_or_default() {
            if let Some(d) = indegree.get_mut(next) {
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse(next));
                }
            }
        }
    }
    if order.len() != indegree.len() {
        return Err(Violation::invalid(format!(
            "lineage cycle among {} transitions",
            indegree.len() - order.len()
        )));
    }
    Ok(order)
}

/// Lineage over a flat record list (see [`order_records`]).
pub(crate) struct FlatLineage {
    pub order: Vec<usize>,
    pub producers: HashMap<u64, usize>,
    pub consumers: HashMap<u64, usize>,
}

impl LineageIndex {
    /// True when the index holds no record.
    pub(crate) fn is_empty_index(&self) -> bool {
        self.order.is_empty()
    }

    /// Builds the index from a flat lineage and a map of flat index to record.
    pub(crate) fn from_flat(flat: FlatLineage, refs: &[RecordRef]) -> Self {
        // Flat indices come from `order_records` over exactly `refs.len()` records.
        let at = |i: usize| refs[i];
        Self {
            order: flat.order.iter().map(|&i| at(i)).collect(),
            producers: flat
                .producers
                .into_iter()
                .map(|(f, i)| (f, at(i)))
                .collect(),
            consumers: flat
                .consumers
                .into_iter()
                .map(|(f, i)| (f, at(i)))
                .collect(),
        }
    }
}

/// Read-only lineage queries over a ledger (legacy groups included).
#[derive(Debug, Clone, Copy)]
pub struct Lineage<'a> {
    index: &'a LineageIndex,
    legacy_versions: &'a [LegacyVersion],
    transitions: &'a [TransitionRecord],
}

impl<'a> Lineage<'a> {
    pub(crate) fn new(
        index: &'a LineageIndex,
        legacy_versions: &'a [LegacyVersion],
        transitions: &'a [TransitionRecord],
    ) -> Self {
        Self {
            index,
            legacy_versions,
            transitions,
        }
    }

    fn resolve(&self, r: RecordRef) -> Option<&'a TransitionRecord> {
        match r {
            RecordRef::Legacy { version, group } => self
                .legacy_versions
                .get(version)
                .and_then(|v| v.groups().get(group)),
            RecordRef::Transition(i) => self.transitions.get(i),
        }
    }

    /// The record that wrote `fragment_id`, if any.
    pub fn producer_of(&self, fragment_id: u64) -> Option<&'a TransitionRecord> {
        self.index
            .producers
            .get(&fragment_id)
            .and_then(|r| self.resolve(*r))
    }

    /// The record that rewrote `fragment_id`, if any.
    pub fn consumer_of(&self, fragment_id: u64) -> Option<&'a TransitionRecord> {
        self.index
            .consumers
            .get(&fragment_id)
            .and_then(|r| self.resolve(*r))
    }

    /// True when some record produces or consumes `fragment_id`.
    pub fn contains_fragment(&self, fragment_id: u64) -> bool {
        self.index.producers.contains_key(&fragment_id)
            || self.index.consumers.contains_key(&fragment_id)
    }

    /// Number of records (legacy groups and transitions).
    pub fn len(&self) -> usize {
        self.index.order.len()
    }

    /// True when there are no records.
    pub fn is_empty(&self) -> bool {
        self.index.order.is_empty()
    }

    /// All records in topological order: a record comes after the producer of
    /// each of its sources; otherwise serialized order (legacy groups first).
    pub fn iter(&self) -> impl Iterator<Item = &'a TransitionRecord> + 'a {
        let this = *self;
        this.index
            .order
            .iter()
            .filter_map(move |r| this.resolve(*r))
    }
}
