//! Random histories: sequences of compactions, stable partitions, deletions,
//! appends and new index segments. After every step every query through the
//! FRI resolver equals a brute-force scan, and old snapshots keep answering.

mod common;

use arrow_array::Int64Array;
use common::*;
use rstest::rstest;

/// xorshift64*: deterministic per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Live ids of `fragments`.
async fn live_ids(t: &Table, fragments: &[u64]) -> Vec<i64> {
    let batch =
        t.ds.scan()
            .project(&["id"])
            .fragments(fragments)
            .try_into_batch()
            .await
            .unwrap();
    batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

/// A random contiguous run of 1..=max fragments.
fn run(rng: &mut Rng, t: &Table, max: usize) -> Vec<u64> {
    let ids: Vec<u64> = t.ds.fragments().iter().map(|f| f.id).collect();
    let len = 1 + rng.below(max.min(ids.len()) as u64) as usize;
    let start = rng.below((ids.len() - len + 1) as u64) as usize;
    ids[start..start + len].to_vec()
}

#[rstest]
#[case(1)]
#[case(2)]
#[case(3)]
#[case(4)]
#[case(5)]
#[case(6)]
#[case(7)]
#[case(8)]
#[case(9)]
#[case(10)]
#[tokio::test]
async fn random_histories_always_match_a_scan(#[case] seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut t = Table::new(5, 40).await;
    t.storage = if seed.is_multiple_of(2) {
        Storage::External
    } else {
        Storage::Inline
    };
    t.index_all().await;
    let mut next_id = 200i64;
    let mut snapshots = Vec::new();
    for step in 0..12 {
        if t.ds.fragments().is_empty() {
            break;
        }
        match rng.below(6) {
            0 | 1 => {
                let sources = run(&mut rng, &t, 3);
                if !live_ids(&t, &sources).await.is_empty() {
                    let rows = 20 + rng.below(100);
                    t.compact(&sources, rows).await;
                }
            }
            2 => {
                let sources = run(&mut rng, &t, 2);
                let k = 2 + rng.below(2) as i64;
                let ids = live_ids(&t, &sources).await;
                if (0..k).all(|d| ids.iter().any(|id| id % k == d)) {
                    t.partition(&sources, k as u16, move |id| (id % k) as u16)
                        .await;
                }
            }
            3 => {
                let m = 3 + rng.below(5);
                let r = rng.below(m);
                t.delete(&format!(
                    "id % {m} = {r} AND id < {}",
                    rng.below(next_id as u64)
                ))
                .await;
            }
            4 => {
                let n = 10 + rng.below(30) as i64;
                t.append(next_id, n).await;
                next_id += n;
            }
            _ => {
                let fragments = run(&mut rng, &t, 2);
                t.index_fragments(&fragments).await;
            }
        }
        for filter in FILTERS {
            check(&t.ds, filter, refract_reader::ChunkCacheMode::Lazy).await;
        }
        let all = check(&t.ds, "id >= 0", refract_reader::ChunkCacheMode::Lazy).await;
        assert_eq!(
            ids_of(&all).len() as u64,
            t.ds.count_rows(None).await.unwrap(),
            "seed {seed} step {step}"
        );
        snapshots.push(t.ds.clone());
    }
    assert!(
        !t.ledger.transitions().is_empty(),
        "seed {seed} recorded no rewrite"
    );
    for old in &snapshots {
        check(old, "id >= 0", refract_reader::ChunkCacheMode::Disabled).await;
    }
}
