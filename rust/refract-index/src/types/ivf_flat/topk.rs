//! Bounded best-k selection by distance.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One scored row: a stored row address and its distance.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scored {
    distance: f32,
    addr: u64,
}

impl Eq for Scored {}

impl Ord for Scored {
    /// Total order: distance (NaN last via `total_cmp`), then address, so ties
    /// are broken deterministically towards the lower address.
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.addr.cmp(&other.addr))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Keeps the `k` smallest (distance, address) pairs seen; O(k) memory.
#[derive(Debug)]
pub struct TopK {
    k: usize,
    // Max-heap: the root is the worst of the current best k.
    heap: BinaryHeap<Scored>,
}

impl TopK {
    /// A selector for the best `k` rows.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.min(1 << 16) + 1),
        }
    }

    /// Offers one row.
    pub fn push(&mut self, addr: u64, distance: f32) {
        if self.k == 0 {
            return;
        }
        let candidate = Scored { distance, addr };
        if self.heap.len() < self.k {
            self.heap.push(candidate);
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if candidate < *worst {
                *worst = candidate;
            }
        }
    }

    /// The kept rows, best first.
    pub fn into_sorted(self) -> Vec<(u64, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|s| (s.addr, s.distance))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keeps_best_k_with_address_tiebreak() {
        let mut top = TopK::new(3);
        for (addr, d) in [(5, 1.0), (1, 3.0), (2, 0.5), (9, 1.0), (3, 1.0), (4, 7.0)] {
            top.push(addr, d);
        }
        assert_eq!(top.into_sorted(), vec![(2, 0.5), (3, 1.0), (5, 1.0)]);
    }

    #[test]
    fn zero_k_keeps_nothing() {
        let mut top = TopK::new(0);
        top.push(1, 0.0);
        assert!(top.into_sorted().is_empty());
    }

    proptest! {
        #[test]
        fn equals_full_sort_prefix(dists in proptest::collection::vec(0u16..100, 0..200), k in 0usize..20) {
            let mut top = TopK::new(k);
            for (i, d) in dists.iter().enumerate() {
                top.push(i as u64, f32::from(*d));
            }
            let mut all: Vec<(u64, f32)> = dists.iter().enumerate().map(|(i, d)| (i as u64, f32::from(*d))).collect();
            all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            all.truncate(k);
            prop_assert_eq!(top.into_sorted(), all);
        }
    }
}
