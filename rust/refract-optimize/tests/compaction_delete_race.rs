//! Deletes racing real compactions (`compact_files`) on tokio tasks, both from
//! the same read version: every delete commits without a conflict, whichever
//! commits first, the table equals a model after every round, and compaction
//! afterwards runs until it commits nothing.

mod support;
use support::compaction as common;

use common::{batch, dataset_with_fragments, fragment_sizes};
use refract_core::Error;
use refract_optimize::compaction::{compact_files, plan_compaction, CompactionOptions};
use refract_table::{Dataset, DeleteResult, Operation, WriteOptions};
use support::scan_ids;

const ROUNDS: u64 = 30;
const MAX_NOOP_ROUNDS: usize = 50;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_racing_compactions_never_conflict_and_match_the_model() {
    let mut dataset = dataset_with_fragments(&[7; 6]).await;
    let mut model: Vec<i64> = (0..42).collect();
    let mut next = 42i64;
    let mut rng = Rng(17);
    let (mut rewrite_first, mut delete_first, mut compaction_conflicts) = (0, 0, 0);
    for round in 0..ROUNDS {
        // Fresh small fragments, so every round has something to compact.
        let small = WriteOptions {
            max_rows_per_file: 3,
            ..WriteOptions::default()
        };
        dataset.append(vec![batch(next, 9)], &small).await.unwrap();
        model.extend(next..next + 9);
        next += 9;

        let modulus = 2 + rng.below(5) as i64;
        let residue = rng.below(modulus as u64) as i64;
        let predicate = format!("id % {modulus} = {residue}");
        let options = CompactionOptions {
            target_rows_per_fragment: 10 + rng.below(40),
            ..CompactionOptions::default()
        };
        let (mut compactor, mut deleter) = (dataset.clone(), dataset.clone());
        let compaction = tokio::spawn(async move {
            compact_files(&mut compactor, &options, None)
                .await
                .map(|metrics| metrics.committed_version)
        });
        // Both read the same version; a head start on odd rounds lets the
        // compaction commit first more often (the delete is then rebased).
        let head_start = std::time::Duration::from_millis((round % 2) * rng.below(20));
        let delete = tokio::spawn(async move {
            tokio::time::sleep(head_start).await;
            let result = deleter.delete(&predicate).await?;
            Ok::<(DeleteResult, u64), Error>((result, deleter.version()))
        });
        let (result, delete_version) = delete
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("round {round}: the delete failed: {err}"));
        match compaction.await.unwrap() {
            Ok(Some(version)) if version < delete_version => rewrite_first += 1,
            Ok(Some(_)) => delete_first += 1,
            Ok(None) => {}
            // A rewrite whose whole group was deleted meanwhile may conflict.
            Err(err) if err.is_retryable_conflict() => compaction_conflicts += 1,
            Err(err) => panic!("round {round}: compaction failed: {err}"),
        }

        let matched = model.iter().filter(|id| *id % modulus == residue).count();
        assert_eq!(result.rows_deleted, matched as u64, "round {round}");
        model.retain(|id| id % modulus != residue);
        dataset = dataset.checkout_latest().await.unwrap();
        if result.rows_deleted > 0 {
            let committed = dataset.checkout_version(delete_version).await.unwrap();
            let operation = &committed.manifest().transaction.as_ref().unwrap().operation;
            assert!(
                matches!(operation, Operation::Delete { .. }),
                "round {round}"
            );
        }
        assert_eq!(scan_ids(&dataset).await, model, "round {round}");
        assert_eq!(
            dataset.count_rows(None).await.unwrap(),
            model.len() as u64,
            "round {round}: deletion counts"
        );
    }
    println!(
        "rewrite first {rewrite_first}, delete first {delete_first}, compaction conflicts {compaction_conflicts}"
    );
    // The path this test exists for: a delete committed over a compaction of its rows.
    assert!(rewrite_first > 0, "no delete was rebased over a compaction");

    let options = CompactionOptions {
        target_rows_per_fragment: 40,
        ..CompactionOptions::default()
    };
    for round in 0..MAX_NOOP_ROUNDS {
        let metrics = compact_files(&mut dataset, &options, None).await.unwrap();
        assert_eq!(scan_ids(&dataset).await, model, "until-noop round {round}");
        if metrics.committed_version.is_none() {
            assert!(plan_compaction(&dataset, &options).unwrap().is_empty());
            let reopened = Dataset::open(dataset.uri()).await.unwrap();
            assert_eq!(scan_ids(&reopened).await, model);
            return;
        }
    }
    panic!(
        "compaction did not converge in {MAX_NOOP_ROUNDS} rounds: {:?}",
        fragment_sizes(&dataset)
    );
}
