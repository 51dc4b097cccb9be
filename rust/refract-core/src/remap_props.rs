//! Property tests: the compact remap, the direct map and chains agree with a
//! simulation that moves row identities through random rewrites.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use roaring::RoaringTreemap;

use crate::address::row_address as ra;
use crate::chain::RemapChain;
use crate::remap::tests::direct_of;
use crate::remap::{FragmentRows, RewriteGroupInput, RowAddrRemap};
use crate::translate::Translator;

/// Deterministic generator so one proptest seed drives a whole scenario.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// A row: its identity and whether it is deleted.
type Row = (u64, bool);

/// The simulated table: fragment id → rows, plus where every identity was first seen.
struct Sim {
    fragments: BTreeMap<u32, Vec<Row>>,
    /// Every address that ever existed → the identity stored there.
    history: HashMap<u64, u64>,
    /// Identity → current address, or `None` once a rewrite dropped it.
    location: HashMap<u64, Option<u64>>,
    next_fragment: u32,
}

impl Sim {
    fn new(rng: &mut Rng) -> Self {
        let mut sim = Sim {
            fragments: BTreeMap::new(),
            history: HashMap::new(),
            location: HashMap::new(),
            next_fragment: 0,
        };
        let n = 1 + rng.below(8);
        let mut ident = 0u64;
        for _ in 0..n {
            let rows = rng.below(60) as u32;
            let id = sim.next_fragment;
            // Gaps in the id sequence; a large one sometimes, so both the direct and
            // the searched fragment index are exercised.
            sim.next_fragment += if rng.below(8) == 0 {
                5_000
            } else {
                1 + rng.below(3) as u32
            };
            let rows: Vec<Row> = (0..rows)
                .map(|_| {
                    ident += 1;
                    (ident, false)
                })
                .collect();
            sim.add_fragment(id, rows);
        }
        sim
    }

    fn add_fragment(&mut self, id: u32, rows: Vec<Row>) {
        for (o, (ident, _)) in rows.iter().enumerate() {
            self.history.insert(ra(id, o as u32), *ident);
            self.location.insert(*ident, Some(ra(id, o as u32)));
        }
        self.fragments.insert(id, rows);
    }

    fn delete_randomly(&mut self, rng: &mut Rng) {
        for rows in self.fragments.values_mut() {
            let density = [0, 0, 10, 50, 100][rng.below(5) as usize];
            for row in rows.iter_mut() {
                if rng.below(100) < density {
                    row.1 = true;
                }
            }
        }
    }

    /// Rewrites a random subset of fragments in random groups, read in random order.
    fn rewrite(&mut self, rng: &mut Rng) -> Vec<RewriteGroupInput> {
        let mut chosen: Vec<u32> = self
            .fragments
            .keys()
            .copied()
            .filter(|_| rng.below(4) != 0)
            .collect();
        rng.shuffle(&mut chosen);
        let mut groups = Vec::new();
        while !chosen.is_empty() {
            let take = 1 + rng.below(chosen.len() as u64) as usize;
            let members: Vec<u32> = chosen.drain(..take).collect();
            groups.push(self.rewrite_group(&members, rng));
        }
        groups
    }

    fn rewrite_group(&mut self, members: &[u32], rng: &mut Rng) -> RewriteGroupInput {
        let mut old_fragments = Vec::new();
        let mut surviving = RoaringTreemap::new();
        let mut stream = Vec::new();
        for id in members {
            let rows = self.fragments.remove(id).unwrap_or_default();
            old_fragments.push(FragmentRows::new(u64::from(*id), rows.len() as u64));
            for (o, (ident, deleted)) in rows.into_iter().enumerate() {
                if deleted {
                    self.location.insert(ident, None);
                } else {
                    surviving.insert(ra(*id, o as u32));
                    stream.push((ident, false));
                }
            }
        }
        let mut new_fragments = Vec::new();
        let mut rest = stream.as_slice();
        loop {
            // Random sizes, zero-row fragments included; the last takes the rest.
            let size = if rng.below(4) == 0 {
                rest.len()
            } else {
                rng.below(rest.len() as u64 + 1) as usize
            };
            let (head, tail) = rest.split_at(size);
            let id = self.next_fragment;
            self.next_fragment += 1;
            new_fragments.push(FragmentRows::new(u64::from(id), head.len() as u64));
            self.add_fragment(id, head.to_vec());
            rest = tail;
            if rest.is_empty() && rng.below(3) != 0 {
                break;
            }
        }
        RewriteGroupInput {
            old_fragments,
            new_fragments,
            surviving,
        }
    }

    /// What a perfect composed map answers for `addr`.
    fn expected(&self, addr: u64) -> Option<Option<u64>> {
        let ident = self.history.get(&addr)?;
        match self.location.get(ident).copied().flatten() {
            None => Some(None),
            Some(now) if now == addr => None,
            Some(now) => Some(Some(now)),
        }
    }

    /// Query addresses: every address ever seen, some beyond the rows, some in
    /// fragments that never existed, with duplicates, in random order.
    fn queries(&self, rng: &mut Rng) -> Vec<u64> {
        let mut q: Vec<u64> = self.history.keys().copied().collect();
        for _ in 0..20 {
            let frag = rng.below(u64::from(self.next_fragment) + 3) as u32;
            q.push(ra(frag, rng.below(70) as u32));
        }
        let dups: Vec<u64> = (0..10)
            .filter_map(|_| q.get(rng.below(q.len() as u64) as usize).copied())
            .collect();
        q.extend(dups);
        rng.shuffle(&mut q);
        q
    }
}

fn check_all_paths(
    remap_like: &dyn Fn(u64) -> Option<Option<u64>>,
    translator: &dyn Translator,
    queries: &[u64],
    expected: &dyn Fn(u64) -> Option<Option<u64>>,
) -> Result<(), TestCaseError> {
    let mut sorted = queries.to_vec();
    sorted.sort_unstable();
    for input in [queries, sorted.as_slice()] {
        let mut out = Vec::new();
        translator.translate(input, &mut out).unwrap();
        prop_assert_eq!(out.len(), input.len());
        for (a, got) in input.iter().zip(&out) {
            let want = expected(*a);
            prop_assert_eq!(remap_like(*a), want, "address {}", crate::RowAddress(*a));
            prop_assert_eq!(*got, want.unwrap_or(Some(*a)));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn compact_equals_direct_and_simulation(seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let mut sim = Sim::new(&mut rng);
        sim.delete_randomly(&mut rng);
        let groups = sim.rewrite(&mut rng);
        let compact = RowAddrRemap::compact(groups.clone()).unwrap();
        let direct = RowAddrRemap::direct(direct_of(&groups));
        let queries = sim.queries(&mut rng);
        for remap in [&compact, &direct] {
            check_all_paths(&|a| remap.get(a), remap, &queries, &|a| sim.expected(a))?;
            let mut batch = Vec::new();
            remap.get_batch(&queries, &mut batch);
            let singles: Vec<_> = queries.iter().map(|a| remap.get(*a)).collect();
            prop_assert_eq!(batch, singles);
        }
        // A direct map cannot mention an old fragment that had no rows.
        let old = |nonempty: bool| -> roaring::RoaringBitmap {
            groups
                .iter()
                .flat_map(|g| g.old_fragments.iter())
                .filter(|f| !nonempty || f.physical_rows > 0)
                .map(|f| f.id as u32)
                .collect()
        };
        prop_assert_eq!(compact.affected_fragments(), old(false));
        prop_assert_eq!(direct.affected_fragments(), old(true));
    }

    #[test]
    fn chains_equal_simulation(seed in any::<u64>(), steps in 1usize..4) {
        let mut rng = Rng(seed);
        let mut sim = Sim::new(&mut rng);
        let mut chain = RemapChain::new();
        for _ in 0..steps {
            sim.delete_randomly(&mut rng);
            chain.push(RowAddrRemap::compact(sim.rewrite(&mut rng)).unwrap());
        }
        let queries = sim.queries(&mut rng);
        check_all_paths(&|a| chain.get(a), &chain, &queries, &|a| sim.expected(a))?;
        let mut tri = Vec::new();
        chain.get_batch(&queries, &mut tri);
        let singles: Vec<_> = queries.iter().map(|a| chain.get(*a)).collect();
        prop_assert_eq!(tri, singles);
    }
}
