//! `RemapChain`: several commits' remaps applied oldest to newest.
//!
//! An address moved by one remap is looked up again in the next; a deleted row stays
//! deleted. The result keeps `HashMap::get` semantics: `None` only if no step touched
//! the address.

use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::cache::DeepSize;
use crate::error::Result;
use crate::remap::{LookupCursor, RowAddrRemap};
use crate::translate::Translator;

/// Remaps applied in order, oldest first. Empty remaps are dropped.
#[derive(Debug, Clone, Default)]
pub struct RemapChain {
    steps: Vec<Arc<RowAddrRemap>>,
}

impl RemapChain {
    /// An empty chain (changes nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a chain from remaps ordered oldest to newest, dropping empty ones.
    pub fn from_remaps<I, R>(remaps: I) -> Self
    where
        I: IntoIterator<Item = R>,
        R: Into<Arc<RowAddrRemap>>,
    {
        let mut chain = Self::new();
        for r in remaps {
            chain.push(r);
        }
        chain
    }

    /// Appends a newer remap (dropped if empty).
    pub fn push(&mut self, remap: impl Into<Arc<RowAddrRemap>>) {
        let remap = remap.into();
        if !remap.is_empty() {
            self.steps.push(remap);
        }
    }

    /// The non-empty steps, oldest first.
    pub fn steps(&self) -> &[Arc<RowAddrRemap>] {
        &self.steps
    }

    /// True if the chain changes nothing.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// `HashMap::get` semantics of the composed map.
    pub fn get(&self, addr: u64) -> Option<Option<u64>> {
        let mut state = None;
        for step in &self.steps {
            state = apply_step(step, addr, state, &mut LookupCursor::point());
            if state == Some(None) {
                break;
            }
        }
        state
    }

    /// Translates `input` into `out` (cleared first), one result per input position.
    /// Any order and duplicates are accepted; each step walks the batch once with its
    /// own search cursor, so sorted input is translated incrementally.
    pub fn get_batch(&self, input: &[u64], out: &mut Vec<Option<Option<u64>>>) {
        out.clear();
        out.resize(input.len(), None);
        for step in &self.steps {
            let mut cursor = LookupCursor::default();
            for (addr, state) in input.iter().zip(out.iter_mut()) {
                if *state != Some(None) {
                    *state = apply_step(step, *addr, *state, &mut cursor);
                }
            }
        }
    }

    /// Fragments whose addresses some step may change (the union over steps).
    pub fn affected_fragments(&self) -> RoaringBitmap {
        let mut all = RoaringBitmap::new();
        for step in &self.steps {
            all |= step.affected_fragments();
        }
        all
    }

    /// Fragments fully deleted by some step, when every step can prove its own;
    /// `None` if a step cannot (a non-empty direct map).
    pub fn fully_deleted_fragments(&self) -> Option<RoaringBitmap> {
        let mut all = RoaringBitmap::new();
        for step in &self.steps {
            all |= step.fully_deleted_fragments()?;
        }
        Some(all)
    }

    /// Fragments created by some step that a later step did not rewrite again.
    pub fn new_fragments(&self) -> RoaringBitmap {
        let mut all = RoaringBitmap::new();
        for step in &self.steps {
            all -= step.affected_fragments();
            all |= step.new_fragments();
        }
        all
    }

    /// Bytes held by every step (steps shared with other chains are counted fully).
    pub fn deep_size_bytes(&self) -> u64 {
        let own = std::mem::size_of::<Self>() + self.steps.capacity() * 8;
        own as u64 + self.steps.iter().map(|s| s.deep_size_bytes()).sum::<u64>()
    }
}

impl DeepSize for RemapChain {
    fn deep_size_bytes(&self) -> usize {
        usize::try_from(RemapChain::deep_size_bytes(self)).unwrap_or(usize::MAX)
    }
}

impl From<RowAddrRemap> for RemapChain {
    fn from(remap: RowAddrRemap) -> Self {
        Self::from_remaps([remap])
    }
}

/// Applies one step to an address whose state after the previous steps is `state`
/// (`None` = untouched so far, `Some(Some(a))` = currently at `a`).
#[inline]
fn apply_step(
    step: &RowAddrRemap,
    original: u64,
    state: Option<Option<u64>>,
    cursor: &mut LookupCursor,
) -> Option<Option<u64>> {
    let current = match state {
        None => original,
        Some(Some(a)) => a,
        Some(None) => return Some(None),
    };
    match step.get_with(current, cursor) {
        None => state,
        hit => hit,
    }
}

impl Translator for RemapChain {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        // An untouched address maps to itself, so `out` alone carries the state
        // between steps: each step rewrites the live entries in place.
        out.clear();
        out.extend(batch.iter().map(|a| Some(*a)));
        for step in self.steps() {
            let mut cursor = LookupCursor::default();
            for slot in out.iter_mut() {
                if let Some(current) = *slot {
                    if let Some(next) = step.get_with(current, &mut cursor) {
                        *slot = next;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::row_address as ra;
    use crate::remap::tests::{fr, group_a, group_b, tm};
    use crate::remap::RewriteGroupInput;
    use std::collections::HashMap;

    /// Reference F.29 chain: (0,2) → (10,1) → (20,0); (0,0) deleted.
    fn two_step_chain() -> RemapChain {
        let first = RowAddrRemap::compact(vec![RewriteGroupInput {
            old_fragments: vec![fr(0, 3)],
            new_fragments: vec![fr(10, 2)],
            surviving: tm(&[(0, 1), (0, 2)]),
        }])
        .unwrap();
        let second = RowAddrRemap::compact(vec![RewriteGroupInput {
            old_fragments: vec![fr(10, 2)],
            new_fragments: vec![fr(20, 1)],
            surviving: tm(&[(10, 1)]),
        }])
        .unwrap();
        RemapChain::from_remaps([RowAddrRemap::empty(), first, RowAddrRemap::empty(), second])
    }

    #[test]
    fn chain_composes_and_drops_empty_steps() {
        let chain = two_step_chain();
        assert_eq!(chain.steps().len(), 2);
        assert_eq!(chain.get(ra(0, 2)), Some(Some(ra(20, 0))));
        assert_eq!(chain.get(ra(0, 0)), Some(None));
        // (0,1) moved to (10,0), which the second step deletes.
        assert_eq!(chain.get(ra(0, 1)), Some(None));
        assert_eq!(chain.get(ra(10, 1)), Some(Some(ra(20, 0))));
        assert_eq!(chain.get(ra(5, 5)), None);
        assert_eq!(
            chain.affected_fragments().iter().collect::<Vec<_>>(),
            vec![0, 10]
        );
        assert_eq!(chain.new_fragments().iter().collect::<Vec<_>>(), vec![20]);
        assert_eq!(chain.fully_deleted_fragments().map(|b| b.len()), Some(0));
    }

    #[test]
    fn batch_keeps_positions_and_duplicates() {
        let chain = two_step_chain();
        let input = [ra(5, 5), ra(0, 2), ra(0, 0), ra(0, 2), ra(0, 1), ra(10, 1)];
        let mut out = vec![Some(Some(42)); 1];
        chain.get_batch(&input, &mut out);
        let singles: Vec<_> = input.iter().map(|a| chain.get(*a)).collect();
        assert_eq!(out, singles);
        assert_eq!(
            out,
            vec![
                None,
                Some(Some(ra(20, 0))),
                Some(None),
                Some(Some(ra(20, 0))),
                Some(None),
                Some(Some(ra(20, 0))),
            ]
        );
    }

    #[test]
    fn direct_steps_compose_with_compact_steps() {
        let compact = RowAddrRemap::compact(vec![group_a(), group_b()]).unwrap();
        let direct = RowAddrRemap::direct(HashMap::from([
            (ra(12, 0), Some(ra(30, 0))),
            (ra(10, 1), None),
        ]));
        let chain = RemapChain::from_remaps([compact, direct]);
        assert_eq!(chain.get(ra(4, 4)), Some(Some(ra(30, 0))));
        assert_eq!(chain.get(ra(4, 2)), Some(None));
        assert_eq!(chain.get(ra(4, 0)), Some(Some(ra(10, 0))));
        assert_eq!(chain.fully_deleted_fragments(), None);
    }
}
