//! The in-memory `PreparedTranslator` answers exactly like the async
//! `SegmentTranslator` it was prepared from: same results (moved, deleted,
//! dropped for a claimed or unserved fragment) and same errors, for sorted
//! batches crossing fragment boundaries, shuffled batches with duplicates,
//! and the per-fragment `translate_part` path — through ordered compactions,
//! stable partitions and chains of both.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use refract_core::{
    AddressSink, BatchTranslator, Error, RowAddress, Translator, TranslatorFastPaths,
    MAX_TRANSLATION_BATCH,
};
use refract_reader::translate::{PreparedTranslator, SegmentScope, SegmentTranslator};
use refract_reader::{ChunkCacheMode, Disposition, FriReader, ListedEntry, MappingBinder};
use refract_table::Dataset;
use roaring::RoaringBitmap;

/// A translating segment: its async translator, the prepared one (if any)
/// and the physical rows of each stored fragment.
struct Case {
    slow: SegmentTranslator,
    fast: Option<PreparedTranslator>,
    stored: BTreeMap<u32, u64>,
}

/// Physical rows of every fragment the history or the snapshot knows.
fn physical_rows(reader: &FriReader, ds: &Dataset) -> BTreeMap<u32, u64> {
    let mut rows = BTreeMap::new();
    for node in reader.history().unwrap().nodes() {
        for d in node
            .record
            .sources()
            .iter()
            .chain(node.record.destinations())
        {
            rows.insert(d.id as u32, d.physical_rows);
        }
    }
    for f in ds.fragments() {
        rows.insert(f.id as u32, f.physical_rows);
    }
    rows
}

/// The async translator of every translating segment of `name`, as the
/// resolver scopes it, with the segment's stored fragments.
async fn translators(ds: &Dataset, name: &str) -> Vec<(SegmentTranslator, RoaringBitmap)> {
    let reader = FriReader::open(ds, ChunkCacheMode::Lazy).await.unwrap();
    let history = reader.history().unwrap().clone();
    let listing = reader.listing().unwrap().clone();
    let mut out = Vec::new();
    for meta in segments(ds, name) {
        let Some(ListedEntry::Segment {
            meta,
            plan,
            claimed,
        }) = listing.entry(&meta.uuid)
        else {
            panic!("not a user segment");
        };
        if plan.disposition != Disposition::Translate {
            continue;
        }
        let stored = meta.fragment_bitmap.clone().unwrap_or_default();
        let scope = SegmentScope {
            live: listing.live().clone(),
            claimed: claimed.clone(),
            owned: plan.owned.clone(),
            coverage: plan.coverage.clone(),
            stored: stored.clone(),
        };
        let binder = MappingBinder::new(
            ds.store().clone(),
            ds.session().cache().clone(),
            ChunkCacheMode::Lazy,
        );
        out.push((
            SegmentTranslator::new(history.clone(), binder, scope),
            stored,
        ));
    }
    out
}

/// Every translating segment of `name`: both translators and the physical
/// rows of each stored fragment.
async fn cases(ds: &Dataset, name: &str) -> Vec<Case> {
    let reader = FriReader::open(ds, ChunkCacheMode::Lazy).await.unwrap();
    let rows = physical_rows(&reader, ds);
    let mut out = Vec::new();
    for (slow, stored_bitmap) in translators(ds, name).await {
        let fast = slow.prepared().await;
        let stored = stored_bitmap.iter().map(|f| (f, rows[&f])).collect();
        out.push(Case { slow, fast, stored });
    }
    out
}

/// Every stored address of `case`, ascending.
fn stored_addresses(case: &Case) -> Vec<u64> {
    case.stored
        .iter()
        .flat_map(|(f, rows)| (0..*rows as u32).map(move |o| RowAddress::new(*f, o).0))
        .collect()
}

/// Both translators on `batch`: equal results, or errors of the same kind
/// and message.
async fn assert_same(case: &Case, batch: &[u64]) -> Vec<Option<u64>> {
    let fast = case.fast.as_ref().expect("prepared");
    let (mut slow_out, mut fast_out) = (Vec::new(), Vec::new());
    let slow = case.slow.translate_batch(batch, &mut slow_out).await;
    let quick = fast.translate(batch, &mut fast_out);
    match (slow, quick) {
        (Ok(()), Ok(())) => {
            assert_eq!(fast_out, slow_out);
            slow_out
        }
        (Err(a), Err(b)) => {
            assert_eq!(std::mem::discriminant(&a), std::mem::discriminant(&b));
            assert_eq!(a.to_string(), b.to_string());
            Vec::new()
        }
        (a, b) => panic!("slow {a:?} vs prepared {b:?}"),
    }
}

/// A deterministic permutation of `batch` with some duplicates.
fn shuffled(batch: &[u64]) -> Vec<u64> {
    let mut out = batch.to_vec();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..out.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let dups: Vec<u64> = out.iter().step_by(7).copied().collect();
    out.extend(dups);
    out
}

/// Checks every translating segment of every index of `t`: whole sorted
/// batch, sorted slices crossing fragment boundaries, a shuffled batch, and
/// `translate_part` on whole and partial fragments against `translate`.
/// Returns how many segments were checked and how many runs
/// `translate_part` delivered.
async fn check_equal(ds: &Dataset) -> (usize, usize) {
    let (mut checked, mut runs) = (0, 0);
    for name in ["id_idx", "grp_idx", "name_idx"] {
        for case in cases(ds, name).await {
            let all = stored_addresses(&case);
            let expected = assert_same(&case, &all).await;
            assert_eq!(expected.len(), all.len());
            for width in [1, 7, 37, 100] {
                for slice in all.chunks(width) {
                    assert_same(&case, slice).await;
                }
            }
            assert_same(&case, &shuffled(&all)).await;
            runs += check_parts(&case, &all, &expected);
            assert!(check_shifts(&case, &all, &expected) > 0 || all.is_empty());
            checked += 1;
        }
    }
    (checked, runs)
}

/// Records what `translate_part` delivers: single addresses and runs.
#[derive(Default)]
struct Delivered {
    addresses: Vec<u64>,
    runs: usize,
}

impl AddressSink for Delivered {
    fn push(&mut self, address: u64) {
        self.addresses.push(address);
    }

    fn push_run(&mut self, fragment: u32, lows: &[u32]) {
        assert!(
            lows.windows(2).all(|w| w[0] < w[1]),
            "a run ascends: {lows:?}"
        );
        self.runs += 1;
        self.addresses
            .extend(lows.iter().map(|low| RowAddress::new(fragment, *low).0));
    }
}

/// `translate_part` of whole fragments, halves and every third offset keeps
/// exactly the `Some` results of `translate`, each once; runs ascend within
/// one destination. Returns how many runs were delivered.
fn check_parts(case: &Case, all: &[u64], expected: &[Option<u64>]) -> usize {
    let fast = case.fast.as_ref().expect("prepared");
    let mut runs = 0;
    let by_address: BTreeMap<u64, Option<u64>> =
        all.iter().copied().zip(expected.iter().copied()).collect();
    for (fragment, rows) in &case.stored {
        let rows = *rows as u32;
        let parts: Vec<RoaringBitmap> = vec![
            (0..rows).collect(),
            (0..rows / 2).collect(),
            (rows / 2..rows).collect(),
            (0..rows).step_by(3).collect(),
            RoaringBitmap::new(),
        ];
        for part in parts {
            let mut got = Delivered::default();
            assert!(fast.translate_part(*fragment, &part, &mut got).unwrap());
            runs += got.runs;
            let mut want: Vec<u64> = part
                .iter()
                .filter_map(|o| by_address[&RowAddress::new(*fragment, o).0])
                .collect();
            want.sort_unstable();
            got.addresses.sort_unstable();
            assert_eq!(got.addresses, want, "fragment {fragment} part {part:?}");
        }
    }
    runs
}

/// `shift_of_range` is `Some(b)` exactly when every offset `o` of the range
/// translates to `b + o`, all in one fragment (checked on every range of
/// every stored fragment, in steps that keep the test fast).
fn check_shifts(case: &Case, all: &[u64], expected: &[Option<u64>]) -> usize {
    let fast = case.fast.as_ref().expect("prepared");
    let by_address: BTreeMap<u64, Option<u64>> =
        all.iter().copied().zip(expected.iter().copied()).collect();
    let mut shifted = 0;
    for (fragment, rows) in &case.stored {
        let rows = *rows as u32;
        for min in (0..rows).step_by(3) {
            for max in (min..rows).step_by(5) {
                let results: Vec<Option<u64>> = (min..=max)
                    .map(|o| by_address[&RowAddress::new(*fragment, o).0])
                    .collect();
                let holds = results[0].is_some_and(|a| {
                    results
                        .iter()
                        .zip(0u64..)
                        .all(|(r, i)| *r == Some(a + i) && r.is_some_and(|b| b >> 32 == a >> 32))
                });
                // `None` means "unknown" (a range split by a middle hop and
                // rejoined later is not recognised); `Some` must be exact.
                let got = fast.shift_of_range(*fragment, min, max).unwrap();
                if let Some(base) = got {
                    assert!(holds, "{fragment}:{min}..={max}");
                    assert_eq!(results[0], Some(base.wrapping_add(u64::from(min))));
                    shifted += 1;
                } else if holds && min == max {
                    panic!("a single live row {fragment}:{min} has a shift");
                }
            }
        }
        assert_eq!(fast.shift_of_range(*fragment, 5, 4).unwrap(), None);
    }
    shifted
}

#[tokio::test]
async fn multi_hop_compactions_with_deletions() {
    let mut t = Table::new(5, 60).await;
    t.index_all().await;
    t.delete("id % 10 = 3").await;
    // 2 and 3 split across two destinations (fragment 3 straddles them).
    // 4 and 5 follow, relabelled 8 and 9.
    assert_eq!(t.compact(&[2, 3], 70).await, vec![6, 7]);
    t.delete("id = 100 OR id = 200 OR id >= 250").await;
    // 8 and 9 follow again, relabelled 11 and 12.
    assert_eq!(t.compact(&[1, 6, 7], 1_000).await, vec![10]);
    t.delete("id = 31").await;
    assert_eq!(t.compact(&[10, 11], 90).await, vec![13, 14, 15]);
    let cases = cases(&t.ds, "id_idx").await;
    assert_eq!(cases.len(), 1);
    assert!(cases[0].fast.is_some());
    // Fragment 5 is live and served; deleted rows translate to None.
    let all = stored_addresses(&cases[0]);
    let out = assert_same(&cases[0], &all).await;
    assert_eq!(out[3], None, "id 3 was deleted before the first compaction");
    assert_eq!(
        out[31], None,
        "id 31 was deleted between the second and third"
    );
    assert_eq!(out[0], Some(RowAddress::new(13, 0).0));
    assert_eq!(check_equal(&t.ds).await.0, 3);
    check_all(&t.ds).await;
}

#[tokio::test]
async fn insert_only_fragments_shift_and_split() {
    // No deletions: whole runs move by a constant, except where a source
    // straddles two destinations.
    let mut t = Table::new(4, 60).await;
    t.index_all().await;
    // 4 is relabelled 7, then 12.
    assert_eq!(t.compact(&[1, 2, 3], 100).await, vec![5, 6]);
    assert_eq!(t.compact(&[5, 6], 45).await, vec![8, 9, 10, 11]);
    let cases = cases(&t.ds, "id_idx").await;
    let all = stored_addresses(&cases[0]);
    let out = assert_same(&cases[0], &all).await;
    // Row k of the stream (k < 180) lands at 8.. in blocks of 45.
    for (k, result) in out.iter().enumerate().take(180) {
        let expected = RowAddress::new(8 + (k / 45) as u32, (k % 45) as u32).0;
        assert_eq!(*result, Some(expected), "row {k}");
    }
    assert_eq!(out[180], Some(RowAddress::new(12, 0).0));
    assert_eq!(check_equal(&t.ds).await.0, 3);
}

#[tokio::test]
async fn claimed_intermediates_drop_their_rows() {
    let mut t = Table::new(3, 50).await;
    t.index_all().await; // S1 covers 1, 2, 3
    assert_eq!(t.compact(&[1, 2], 500).await, vec![4]); // 3 relabelled 5
    t.index_fragments(&[4]).await; // S2 claims 4 directly
    assert_eq!(t.compact(&[4, 5], 60).await, vec![6, 7, 8]);
    let cases = cases(&t.ds, "id_idx").await;
    for case in &cases {
        assert!(case.fast.is_some());
        let all = stored_addresses(case);
        let out = assert_same(case, &all).await;
        if case.stored.contains_key(&1) {
            // S1: rows of 1 and 2 went through 4, which S2 claims: dropped.
            // Rows of 3 follow the 100 rows of 4 in 60-row destinations.
            assert!(out[..100].iter().all(Option::is_none));
            for (i, result) in out[100..].iter().enumerate() {
                let k = 100 + i as u32;
                assert_eq!(*result, Some(RowAddress::new(6 + k / 60, k % 60).0));
            }
        } else {
            assert_eq!(out[0], Some(RowAddress::new(6, 0).0));
        }
    }
    assert_eq!(cases.len(), 2);
    check_equal(&t.ds).await;
    check_all(&t.ds).await;
}

#[tokio::test]
async fn partitions_after_compactions_are_prepared() {
    let mut t = Table::new(3, 40).await;
    t.index_all().await;
    t.delete("id % 9 = 4").await;
    // The tail: nothing to relabel, so fragment 1 reaches the partition directly.
    assert_eq!(t.compact(&[2, 3], 500).await, vec![4]);
    t.delete("id = 100").await;
    assert_eq!(
        t.partition(&[1, 4], 2, |id| (id % 2) as u16).await,
        vec![5, 6]
    );
    let cases = cases(&t.ds, "id_idx").await;
    assert!(cases.iter().all(|c| c.fast.is_some()));
    let all = stored_addresses(&cases[0]);
    let out = assert_same(&cases[0], &all).await;
    // Even ids go to 5, odd ones to 6, in source order, deleted rows skipped.
    let live: Vec<i64> = (0..120).filter(|id| id % 9 != 4 && *id != 100).collect();
    for (id, result) in (0..120).zip(&out) {
        let rank = live.iter().filter(|l| **l < id && *l % 2 == id % 2).count() as u32;
        let expected = live
            .contains(&id)
            .then(|| RowAddress::new(5 + (id % 2) as u32, rank).0);
        assert_eq!(*result, expected, "id {id}");
    }
    // Beyond a source's rows: the same InvalidInput from both translators.
    assert_same(&cases[0], &[RowAddress::new(3, 40).0]).await;
    let mut out = Vec::new();
    let fast = cases[0].fast.as_ref().unwrap();
    let err = fast
        .translate(&[RowAddress::new(3, 40).0], &mut out)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let part: RoaringBitmap = [0, 1, 40].into_iter().collect();
    let err = fast.translate_part(3, &part, &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    // The partitioned fragments stream as runs, one per destination.
    let (segments, runs) = check_equal(&t.ds).await;
    assert_eq!(segments, 3);
    assert!(runs > 0, "partitioned parts are delivered as runs");
    check_all(&t.ds).await;
}

#[tokio::test]
async fn a_range_partition_moves_whole_runs_by_a_constant() {
    let mut t = Table::new(3, 40).await;
    t.index_all().await;
    // Ids below 60 go to the first destination: fragment 1 and the first
    // half of fragment 2 move together, as does the rest.
    assert_eq!(
        t.partition(&[1, 2, 3], 2, |id| u16::from(id >= 60)).await,
        vec![4, 5]
    );
    let cases = cases(&t.ds, "id_idx").await;
    let fast = cases[0].fast.as_ref().expect("prepared");
    let base = |fragment: u32, offset: u32, min: u32| {
        RowAddress::new(fragment, offset)
            .0
            .wrapping_sub(u64::from(min))
    };
    assert_eq!(fast.shift_of_range(1, 0, 39).unwrap(), Some(base(4, 0, 0)));
    assert_eq!(fast.shift_of_range(2, 0, 19).unwrap(), Some(base(4, 40, 0)));
    assert_eq!(
        fast.shift_of_range(2, 20, 39).unwrap(),
        Some(base(5, 0, 20))
    );
    assert_eq!(fast.shift_of_range(3, 5, 30).unwrap(), Some(base(5, 25, 5)));
    // Straddles the two destinations.
    assert_eq!(fast.shift_of_range(2, 10, 25).unwrap(), None);
    assert_eq!(check_equal(&t.ds).await.0, 3);
    check_all(&t.ds).await;
}

/// Routed runs whose destination moves on (a later compaction) or is
/// claimed by a newer segment: the rows of a destination that waits walk on
/// one by one, those of a claimed one are dropped, and everything matches
/// the async walk.
#[tokio::test]
async fn routed_destinations_that_move_on_or_are_claimed() {
    let mut t = Table::new(3, 40).await;
    t.index_all().await; // S1 covers 1, 2, 3
    t.delete("id % 7 = 3").await;
    assert_eq!(
        t.partition(&[1, 2, 3], 3, |id| (id % 3) as u16).await,
        vec![4, 5, 6]
    );
    assert_eq!(t.compact(&[4, 5], 500).await, vec![7]); // 6 relabelled 8
    t.index_fragments(&[8]).await; // S2 claims 6 (now 8) directly
    let cases = cases(&t.ds, "id_idx").await;
    let s1 = cases
        .iter()
        .find(|c| c.stored.contains_key(&1))
        .expect("the first segment");
    let fast = s1.fast.as_ref().expect("prepared");
    let part: RoaringBitmap = (0..40).collect();
    let mut got = Delivered::default();
    assert!(fast.translate_part(2, &part, &mut got).unwrap());
    got.addresses.sort_unstable();
    // Fragment 2 holds ids 40..80. Ids ≡ 0, 1 (mod 3) went to 4 and 5, then
    // on to 7 (4's rows first); ids ≡ 2 (mod 3) went to 6, which S2 claims.
    let live = |id: &i64| id % 7 != 3;
    let before_in =
        |label: i64, id: i64| (0..id).filter(|i| i % 3 == label && live(i)).count() as u32;
    let rows_of_4 = (0..120).filter(|i| i % 3 == 0 && live(i)).count() as u32;
    let mut want: Vec<u64> = (40..80)
        .filter(|id| live(id) && id % 3 != 2)
        .map(|id| {
            let offset = match id % 3 {
                0 => before_in(0, id),
                _ => rows_of_4 + before_in(1, id),
            };
            RowAddress::new(7, offset).0
        })
        .collect();
    want.sort_unstable();
    assert_eq!(got.addresses, want);
    // Both segments of each of the three indices.
    let (segments, runs) = check_equal(&t.ds).await;
    assert_eq!(segments, 6);
    // No destination of the partition is final, so nothing came as a run.
    assert_eq!(runs, 0);
    check_all(&t.ds).await;
}

#[tokio::test]
async fn a_partition_over_the_resident_budget_is_left_to_the_async_walk() {
    let mut t = Table::new(3, 40).await;
    t.index_all().await;
    assert_eq!(t.compact(&[1, 2], 500).await, vec![4]); // 3 relabelled 5
    assert_eq!(
        t.partition(&[4, 5], 2, |id| (id % 2) as u16).await,
        vec![6, 7]
    );
    let (slow, _) = translators(&t.ds, "id_idx").await.remove(0);
    // 120 source rows hold 480 bytes of labels and ranks.
    assert!(slow.prepared_within(479).await.is_none());
    assert!(slow.prepared_within(480).await.is_some());
}

#[tokio::test]
async fn errors_match_the_async_walk() {
    let mut t = Table::new(2, 50).await;
    t.index_all().await;
    t.delete("id = 7").await;
    assert_eq!(t.compact(&[1], 500).await, vec![3]);
    let cases = cases(&t.ds, "id_idx").await;
    let case = &cases[0];
    // Beyond the source's physical rows, and outside the stored coverage.
    assert_same(case, &[RowAddress::new(1, 50).0]).await;
    assert_same(case, &[RowAddress::new(1, 3).0, RowAddress::new(1, 60).0]).await;
    assert_same(case, &[RowAddress::new(77, 0).0]).await;
    let fast = case.fast.as_ref().unwrap();
    let mut out = Vec::new();
    let err = fast
        .translate(&[RowAddress::new(1, 50).0], &mut out)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let part: RoaringBitmap = [0, 50].into_iter().collect();
    let err = fast.translate_part(1, &part, &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let err = fast
        .translate(
            &vec![RowAddress::new(1, 0).0; MAX_TRANSLATION_BATCH + 1],
            &mut out,
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    // Exactly the maximum is fine.
    fast.translate(
        &vec![RowAddress::new(1, 0).0; MAX_TRANSLATION_BATCH],
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), MAX_TRANSLATION_BATCH);
    assert!(out.iter().all(|r| *r == Some(RowAddress::new(3, 0).0)));
    let _: Arc<dyn Translator> = Arc::new(cases.into_iter().next().unwrap().fast.unwrap());
}
