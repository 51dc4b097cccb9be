//! Posting codec, assembler, translation and memo.

use roaring::{RoaringBitmap, RoaringTreemap};

use super::*;
use proptest::prelude::*;
use refract_core::{row_address, FragmentRows, RemapChain, RewriteGroupInput, RowAddrRemap};
use refract_core::{
    AddressSink, Error, Result, Translator, TranslatorFastPaths, MAX_TRANSLATION_BATCH,
};
use std::collections::HashMap;
use std::sync::Mutex;

/// Wraps a translator, recording every batch it is given.
struct Recording<T> {
    inner: T,
    batches: Mutex<Vec<Vec<u64>>>,
}

impl<T: Translator> Recording<T> {
    fn new(inner: T) -> Self {
        Self {
            inner,
            batches: Mutex::new(Vec::new()),
        }
    }

    fn batches(&self) -> Vec<Vec<u64>> {
        self.batches.lock().unwrap().clone()
    }
}

impl<T: Translator> Translator for Recording<T> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        self.batches.lock().unwrap().push(batch.to_vec());
        self.inner.translate(batch, out)
    }
}

/// Applies `translator` to every address of `posting` one by one.
pub(super) fn brute_force(posting: &RoaringTreemap, translator: &dyn Translator) -> RoaringTreemap {
    let mut out = Vec::new();
    posting
        .iter()
        .filter_map(|a| {
            translator.translate(&[a], &mut out).unwrap();
            out[0]
        })
        .collect()
}

/// Fragments 1..=3 of `rows` rows each, compacted in read order into
/// fragments 10 and 11; every row whose offset is a multiple of 7 is deleted.
pub(super) fn compaction(rows: u64) -> RowAddrRemap {
    compaction_where(rows as u32, |_, o| o.is_multiple_of(7))
}

/// A stable partition of fragments 10 and 11 (rows of `compaction(rows)`)
/// into fragments 20..=23 by offset and fragment parity, as a direct map.
fn partition_after(rows: u64) -> RowAddrRemap {
    let mut next = [0u32; 4];
    let mut map = HashMap::new();
    let live = 3 * rows - 3 * rows.div_ceil(7);
    for fragment in [10u32, 11] {
        let count = if fragment == 10 {
            live / 2
        } else {
            live - live / 2
        };
        for offset in 0..count as u32 {
            let label = (offset % 3 + fragment % 2) as usize;
            let old = row_address(fragment, offset);
            // Offsets that are multiples of 11 are deleted by the partition.
            let new = (offset % 11 != 0).then(|| {
                next[label] += 1;
                row_address(20 + label as u32, next[label] - 1)
            });
            map.insert(old, new);
        }
    }
    RowAddrRemap::direct(map)
}

#[test]
fn assembler_matches_collect_for_any_order() {
    let addrs = [
        row_address(5, 9),
        row_address(2, 1),
        row_address(5, 3),
        7,
        7,
        3,
    ];
    let mut assembler = TreemapAssembler::new();
    for a in addrs {
        assembler.push(a);
    }
    assert_eq!(
        assembler.finish(),
        addrs.into_iter().collect::<RoaringTreemap>()
    );
    assert!(assembler.finish().is_empty(), "finish leaves it empty");
}

#[test]
fn translation_is_exact_after_compaction_with_deletions() {
    let remap = compaction(50_000);
    // Every fifth row of the three fragments: 30,000 addresses.
    let posting: RoaringTreemap = (1..=3u32)
        .flat_map(|f| (0..50_000u32).step_by(5).map(move |o| row_address(f, o)))
        .collect();
    let recording = Recording::new(&remap);
    let mut scratch = TranslateScratch::default();
    let new = translate_encoded(&encode(&posting), "test", &recording, &mut scratch).unwrap();
    assert_eq!(new, brute_force(&posting, &remap));
    // Offsets that are multiples of 35 were deleted.
    assert_eq!(new.len(), 30_000 - 3 * 50_000u64.div_ceil(35));
    let first = new.min().unwrap();
    assert_eq!(first >> 32, 10, "survivors start in fragment 10");
    assert_eq!(recording.batches().len(), 1);
    // The remap itself streams each fragment's part: same postings, no batches.
    let chain = RemapChain::from(remap.clone());
    for streaming in [&remap as &dyn Translator, &chain] {
        let again = translate_encoded(&encode(&posting), "test", streaming, &mut scratch).unwrap();
        assert_eq!(again, new);
    }
}

#[test]
fn translation_slices_cross_the_batch_boundary() {
    let posting: RoaringTreemap = (0..2 * MAX_TRANSLATION_BATCH as u64 + 3).collect();
    let recording = Recording::new(RowAddrRemap::empty());
    let mut scratch = TranslateScratch::default();
    let new = translate_encoded(&encode(&posting), "test", &recording, &mut scratch).unwrap();
    assert_eq!(new, posting);
    let sizes: Vec<usize> = recording.batches().iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![MAX_TRANSLATION_BATCH, MAX_TRANSLATION_BATCH, 3]);
    for batch in recording.batches() {
        assert!(batch.windows(2).all(|w| w[0] < w[1]), "ascending batches");
    }
}

#[test]
fn memo_translates_each_address_once_across_postings() {
    let rows = 60_000u64;
    let compact = compaction(rows);
    let chain = RemapChain::from_remaps([compact, partition_after(rows)]);
    // Three overlapping postings over 180,000 rows: the first two need two
    // batches each, the last one none.
    let postings: Vec<RoaringTreemap> = [2u32, 1, 3]
        .iter()
        .map(|step| {
            (1..=3u32)
                .flat_map(|f| (0..rows as u32).map(move |o| row_address(f, o)))
                .filter(|a| ((a & 0xffff_ffff) as u32).is_multiple_of(*step))
                .collect()
        })
        .collect();
    let recording = Recording::new(&chain);
    let mut memo = TranslationMemo::new();
    for posting in &postings {
        let new = memo.remap(posting, &recording).unwrap();
        assert_eq!(new, brute_force(posting, &chain));
    }
    let batches = recording.batches();
    let translated: Vec<u64> = batches.iter().flatten().copied().collect();
    assert_eq!(translated.len() as u64, 3 * rows, "each stored row once");
    assert_eq!(memo.translated(), 3 * rows);
    let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![65_536, 24_464, 65_536, 24_464]);
    for batch in &batches {
        assert!(batch.windows(2).all(|w| w[0] < w[1]), "ascending batches");
    }
}

#[test]
fn memo_shifts_whole_parts_and_memoizes_only_the_rest() {
    // Fragment 2 loses rows, so only its addresses need the memo;
    // fragments 1 and 3 move by one constant each.
    let rows = 50_000;
    let remap = compaction_where(rows, |f, o| f == 2 && o % 7 == 0);
    let postings = [
        mixed_posting(rows),
        (1..=3u32)
            .flat_map(|f| (0..rows).step_by(5).map(move |o| row_address(f, o)))
            .collect(),
    ];
    let mut memo = TranslationMemo::new();
    for posting in &postings {
        assert_eq!(
            memo.remap(posting, &remap).unwrap(),
            brute_force(posting, &remap)
        );
    }
    // Fragment 2's stored addresses of both postings, each translated once.
    let fragment_two: RoaringTreemap = postings
        .iter()
        .flat_map(|p| p.iter())
        .filter(|a| a >> 32 == 2)
        .collect();
    assert_eq!(memo.translated(), fragment_two.len());
}

#[test]
fn a_translator_not_worth_memoizing_streams_parts_without_a_table() {
    let rows = 50_000;
    let remap = compaction_where(rows, |f, o| f == 2 && o % 7 == 0);
    let streaming = crate::types::test_support::InMemory::new(remap.clone());
    let posting = mixed_posting(rows);
    let mut memo = TranslationMemo::new();
    for _ in 0..2 {
        assert_eq!(
            memo.remap(&posting, &streaming).unwrap(),
            brute_force(&posting, &remap)
        );
    }
    assert_eq!(memo.translated(), 0, "nothing held");
    assert!(memo.tables.is_empty());
    assert!(streaming.parts() > 0, "fragment 2's parts were streamed");
}

#[test]
fn a_large_posting_streams_on_two_threads_with_exact_results() {
    let rows = 200_000;
    let remap = compaction_where(rows, |f, o| f != 1 && o % 5 == 0);
    let posting = mixed_posting(rows);
    assert!(posting.len() >= PARALLEL_MIN_ADDRESSES);
    let streaming = crate::types::test_support::InMemory::new(remap.clone());
    let mut memo = TranslationMemo::new();
    let expected = brute_force(&posting, &remap);
    for _ in 0..2 {
        assert_eq!(memo.remap(&posting, &streaming).unwrap(), expected);
    }
    assert_eq!(memo.translated(), 0, "nothing held");
    // Fragment 1 moved whole (shifted); fragment 2 was streamed on this
    // thread and fragment 3 on the other.
    assert_eq!(streaming.parts(), 2 * 2);
    assert_eq!(streaming.threads(), 1 + 2, "this thread and one per remap");
}

#[test]
fn a_large_posting_is_shared_even_when_its_last_part_holds_the_half() {
    let rows = 200_000;
    let remap = compaction_where(rows, |_, o| o % 5 == 0);
    // Fragment 1 is small, fragment 2 holds most addresses: the split
    // point falls after the last part, and the last part still goes to
    // the other thread.
    let posting: RoaringTreemap = (1..=2u32)
        .flat_map(|f| (0..rows).map(move |o| (f, o)))
        .filter(|(f, o)| if *f == 1 { o % 13 == 0 } else { o % 3 != 0 })
        .map(|(f, o)| row_address(f, o))
        .collect();
    assert!(posting.len() >= PARALLEL_MIN_ADDRESSES);
    let streaming = crate::types::test_support::InMemory::new(remap.clone());
    let remapped = TranslationMemo::new().remap(&posting, &streaming).unwrap();
    assert_eq!(remapped, brute_force(&posting, &remap));
    assert_eq!((streaming.parts(), streaming.threads()), (2, 2));
    // A posting of one part stays on this thread.
    let single: RoaringTreemap = (0..rows)
        .filter(|o| o % 3 != 0)
        .map(|o| row_address(2, o))
        .collect();
    let streaming = crate::types::test_support::InMemory::new(remap.clone());
    let remapped = TranslationMemo::new().remap(&single, &streaming).unwrap();
    assert_eq!(remapped, brute_force(&single, &remap));
    assert_eq!((streaming.parts(), streaming.threads()), (1, 1));
}

#[test]
fn a_large_posting_without_a_streaming_path_falls_back_to_the_memo() {
    /// Not worth memoizing, but with no `translate_part`.
    struct NoParts(RowAddrRemap);
    impl Translator for NoParts {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            self.0.translate(batch, out)
        }

        fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
            Some(self)
        }
    }

    impl TranslatorFastPaths for NoParts {
        fn translate_part(
            &self,
            _: u32,
            _: &roaring::RoaringBitmap,
            _: &mut dyn refract_core::AddressSink,
        ) -> refract_core::Result<bool> {
            Ok(false)
        }

        fn shift_of_range(&self, _: u32, _: u32, _: u32) -> refract_core::Result<Option<u64>> {
            Ok(None)
        }

        fn worth_memoizing(&self) -> bool {
            false
        }
    }
    let rows = 200_000;
    let remap = compaction_where(rows, |_, o| o % 5 == 0);
    let posting = mixed_posting(rows);
    let mut memo = TranslationMemo::new();
    let remapped = memo.remap(&posting, &NoParts(remap.clone())).unwrap();
    assert_eq!(remapped, brute_force(&posting, &remap));
    assert_eq!(memo.translated(), posting.len(), "the memo served it");
    // The half results were discarded: the next posting starts clean.
    let small: RoaringTreemap = [row_address(1, 1)].into_iter().collect();
    assert_eq!(
        memo.remap(&small, &NoParts(remap.clone())).unwrap(),
        brute_force(&small, &remap)
    );
}

#[test]
fn a_shift_that_crosses_a_fragment_is_rejected_on_every_path() {
    // Claims fragment 1 moves by a constant that carries its larger
    // offsets into the next fragment: a broken `shift_of_range` promise.
    struct Crossing;
    impl Translator for Crossing {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            out.clear();
            out.extend(batch.iter().map(|a| Some(*a)));
            Ok(())
        }

        fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
            Some(self)
        }
    }

    impl TranslatorFastPaths for Crossing {
        fn translate_part(
            &self,
            _: u32,
            _: &roaring::RoaringBitmap,
            _: &mut dyn refract_core::AddressSink,
        ) -> refract_core::Result<bool> {
            Ok(false)
        }

        fn shift_of_range(&self, _: u32, _: u32, _: u32) -> Result<Option<u64>> {
            Ok(Some(row_address(5, u32::MAX - 10)))
        }

        fn worth_memoizing(&self) -> bool {
            true
        }
    }
    let posting: RoaringTreemap = (0..100u32).map(|o| row_address(1, o)).collect();
    let err = TranslationMemo::new()
        .remap(&posting, &Crossing)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let mut scratch = TranslateScratch::default();
    let err = translate_encoded(&encode(&posting), "test", &Crossing, &mut scratch).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    // The scratch is clean for the next posting.
    let fine = translate_encoded(
        &encode(&posting),
        "test",
        &RowAddrRemap::empty(),
        &mut scratch,
    )
    .unwrap();
    assert_eq!(fine, posting);
}

#[test]
fn memo_rejects_a_translator_that_drops_results() {
    struct Short;
    impl Translator for Short {
        fn translate(&self, _: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            out.clear();
            Ok(())
        }
    }
    let posting: RoaringTreemap = [1u64, 2].into_iter().collect();
    let err = TranslationMemo::new().remap(&posting, &Short).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let mut scratch = TranslateScratch::default();
    let err = translate_encoded(&encode(&posting), "test", &Short, &mut scratch).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

#[test]
fn memo_rejects_reserved_translated_addresses() {
    let map = HashMap::from([(5u64, Some(u64::MAX - 1))]);
    let posting: RoaringTreemap = [5u64].into_iter().collect();
    let err = TranslationMemo::new()
        .remap(&posting, &RowAddrRemap::direct(map))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

/// A remap compacting fragments 1..=3 of `rows` rows each, in order,
/// into fragments 10 and 11; `deleted(fragment, offset)` picks deletions.
pub(super) fn compaction_where(rows: u32, deleted: impl Fn(u32, u32) -> bool) -> RowAddrRemap {
    let surviving: RoaringTreemap = (1..=3u32)
        .flat_map(|f| (0..rows).map(move |o| (f, o)))
        .filter(|(f, o)| !deleted(*f, *o))
        .map(|(f, o)| row_address(f, o))
        .collect();
    let live = surviving.len();
    RowAddrRemap::compact(vec![RewriteGroupInput {
        old_fragments: (1..=3).map(|f| FragmentRows::new(f, rows.into())).collect(),
        new_fragments: vec![
            FragmentRows::new(10, live / 2),
            FragmentRows::new(11, live - live / 2),
        ],
        surviving,
    }])
    .unwrap()
}

/// A posting over fragments 1..=3 with array, bitmap and run containers.
pub(super) fn mixed_posting(rows: u32) -> RoaringTreemap {
    let mut posting: RoaringTreemap = (1..=3u32)
        .flat_map(|f| (0..rows).map(move |o| (f, o)))
        .filter(|(f, o)| match f {
            1 => o % 13 == 0,
            2 => o % 3 != 0,
            _ => (o / 1_000) % 2 == 0,
        })
        .map(|(f, o)| row_address(f, o))
        .collect();
    let mut parts: Vec<(u32, RoaringBitmap)> =
        posting.bitmaps().map(|(h, b)| (h, b.clone())).collect();
    for (_, part) in &mut parts {
        part.optimize(); // fragment 3 becomes run containers
    }
    posting = RoaringTreemap::from_bitmaps(parts);
    posting
}

/// Forwards to a translator, counting the parts each path served.
#[derive(Default)]
struct Paths {
    shifted: std::sync::atomic::AtomicUsize,
    streamed: std::sync::atomic::AtomicUsize,
}

struct Counting<'a, T> {
    inner: T,
    paths: &'a Paths,
}

impl<T: Translator> Translator for Counting<'_, T> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        self.inner.translate(batch, out)
    }

    fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
        Some(self)
    }
}

impl<T: Translator> TranslatorFastPaths for Counting<'_, T> {
    fn translate_part(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        sink: &mut dyn AddressSink,
    ) -> Result<bool> {
        use std::sync::atomic::Ordering::Relaxed;
        self.paths.streamed.fetch_add(1, Relaxed);
        (&self.inner as &dyn Translator).translate_part(fragment, part, sink)
    }

    fn shift_of_range(&self, fragment: u32, min: u32, max: u32) -> Result<Option<u64>> {
        use std::sync::atomic::Ordering::Relaxed;
        let shift = (&self.inner as &dyn Translator).shift_of_range(fragment, min, max)?;
        if shift.is_some() {
            self.paths.shifted.fetch_add(1, Relaxed);
        }
        Ok(shift)
    }

    fn worth_memoizing(&self) -> bool {
        true
    }
}

/// `translate_encoded` of `posting` through `remap`, with the number of
/// parts that took the shift path and the streaming path.
fn translate_counting_paths(
    posting: &RoaringTreemap,
    remap: &RowAddrRemap,
) -> (RoaringTreemap, usize, usize) {
    use std::sync::atomic::Ordering::Relaxed;
    let paths = Paths::default();
    let counting = Counting {
        inner: remap,
        paths: &paths,
    };
    let mut scratch = TranslateScratch::default();
    let got = translate_encoded(&encode(posting), "test", &counting, &mut scratch).unwrap();
    (
        got,
        paths.shifted.load(Relaxed),
        paths.streamed.load(Relaxed),
    )
}

#[test]
fn encoded_translation_shifts_whole_parts_exactly() {
    // No deletions: fragments 1 and 3 each land in one new fragment and
    // move by a constant; fragment 2 straddles fragments 10 and 11.
    let rows = 200_000;
    let remap = compaction_where(rows, |_, _| false);
    let posting = mixed_posting(rows);
    let want = brute_force(&posting, &remap);
    let (got, shifted, streamed) = translate_counting_paths(&posting, &remap);
    assert_eq!(got, want);
    assert_eq!(encode(&got), encode(&want), "same containers");
    assert_eq!(shifted, 2, "fragments 1 and 3");
    assert_eq!(streamed, 1, "fragment 2");
    let mut scratch = TranslateScratch::default();
    // An untouched fragment maps to itself through the shift as well.
    let other: RoaringTreemap = (0..5_000u32).map(|o| row_address(7, o * 3)).collect();
    let got = translate_encoded(&encode(&other), "test", &remap, &mut scratch).unwrap();
    assert_eq!(got, other);
    let empty = translate_encoded(&[], "test", &remap, &mut scratch).unwrap();
    assert!(empty.is_empty());
}

#[test]
fn encoded_translation_with_deletions_is_exact() {
    // Fragment 2 loses rows (row by row), 1 and 3 do not (shifted).
    let rows = 100_000;
    let remap = compaction_where(rows, |f, o| f == 2 && o % 10 < 3);
    let posting = mixed_posting(rows);
    let (got, shifted, streamed) = translate_counting_paths(&posting, &remap);
    let want = brute_force(&posting, &remap);
    assert_eq!(got, want);
    assert_eq!(encode(&got), encode(&want), "same containers");
    assert_eq!(shifted, 2);
    assert_eq!(streamed, 1);
    let mut scratch = TranslateScratch::default();
    // Through ascending batches only, the same result.
    let batches = Recording::new(remap.clone());
    let again = translate_encoded(&encode(&posting), "test", &batches, &mut scratch).unwrap();
    assert_eq!(again, want);
    assert!(batches
        .batches()
        .iter()
        .all(|b| b.len() <= MAX_TRANSLATION_BATCH));
}

/// Replaces `at..at + with.len()` of the only part of `posting`'s encoding.
fn tampered(posting: &RoaringTreemap, at: usize, with: &[u8]) -> Vec<u8> {
    let mut bytes = encode(posting);
    // 8 header bytes precede the part.
    bytes[8 + at..8 + at + with.len()].copy_from_slice(with);
    bytes
}

#[test]
fn damaged_parts_on_the_shift_path_are_corrupt() {
    let remap = compaction_where(70_000, |_, _| false);
    let mut scratch = TranslateScratch::default();
    let mut check =
        |bytes: &[u8], case: &str| match translate_encoded(bytes, "test", &remap, &mut scratch) {
            Ok(posting) => panic!("{case}: accepted as {posting:?}"),
            Err(err) => assert!(matches!(err, Error::Corrupt { .. }), "{case}: {err}"),
        };
    // Array container [5, 9, 12]: cookie, size, key, card-1, offset, data.
    let array: RoaringTreemap = [5u32, 9, 12].iter().map(|o| row_address(1, *o)).collect();
    check(&tampered(&array, 16, &[12, 0]), "unsorted array");
    check(&tampered(&array, 0, &[1, 2]), "bad cookie");
    check(&tampered(&array, 4, &[2, 0]), "size beyond the data");
    // A bitmap container (5,000 offsets) announcing 5,001.
    let dense: RoaringTreemap = (0..5_000u32).map(|o| row_address(1, o * 2)).collect();
    check(&tampered(&dense, 10, &[0x88, 0x13]), "cardinality mismatch");
    // Two containers with the same key.
    let two: RoaringTreemap = [1u32, 65_537].iter().map(|o| row_address(1, *o)).collect();
    check(&tampered(&two, 12, &[0, 0]), "keys not ascending");
    // Run container [0..=99, 200..=299]: runs overlapping or touching.
    let mut runs = RoaringBitmap::new();
    runs.insert_range(0..100);
    runs.insert_range(200..300);
    runs.optimize();
    let runs = RoaringTreemap::from_bitmaps([(1, runs)]);
    // Run cookie, flags (1), key, card-1, run count, runs.
    check(&tampered(&runs, 15, &[50, 0]), "overlapping runs");
    check(&tampered(&runs, 15, &[100, 0]), "touching runs");
    check(&tampered(&runs, 13, &[50, 0]), "run cardinality mismatch");
    check(
        &tampered(&runs, 15, &[0xff, 0xff]),
        "run past the container",
    );
    check(&tampered(&runs, 9, &[0, 0]), "no runs");
    // Truncated anywhere, or with a trailing byte inside the part.
    for posting in [&array, &dense, &runs] {
        let bytes = encode(posting);
        for cut in 1..bytes.len() {
            check(&bytes[..cut], "truncated");
        }
        let mut longer = bytes.clone();
        let len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) + 1;
        longer[4..8].copy_from_slice(&len.to_le_bytes());
        longer.push(0);
        check(&longer, "trailing byte");
    }
    // The undamaged ones translate.
    for posting in [&array, &dense, &runs] {
        let got = translate_encoded(&encode(posting), "test", &remap, &mut scratch).unwrap();
        assert_eq!(got, brute_force(posting, &remap));
    }
}

#[test]
fn assembler_builds_roaring_containers_at_every_density() {
    // Per container of fragment 4: 4,095, 4,096 (roaring's array limit)
    // and 4,097 offsets through the bitset, 1,023 and 1,024 around the
    // list limit, one offset, then a full container; then offsets of
    // earlier containers, duplicates and a descending tail.
    let counts = [4_095u32, 4_096, 4_097, 1_023, 1_024, 1, 65_536];
    let mut addrs = Vec::new();
    for (key, count) in counts.iter().enumerate() {
        let step = 65_536 / count;
        addrs.extend((0..*count).map(|i| row_address(4, (key as u32) << 16 | (i * step))));
    }
    addrs.extend([
        row_address(4, 3),
        row_address(4, 65_537),
        row_address(4, 65_537),
    ]);
    addrs.extend(
        (0..3_000u32)
            .rev()
            .map(|i| row_address(4, (8 << 16) | (i * 5))),
    );
    addrs.extend((0..2_000u32).map(|i| row_address(4, (8 << 16) | (i * 7))));
    let mut assembler = TreemapAssembler::new();
    for a in &addrs {
        assembler.push(*a);
    }
    let got = assembler.finish();
    let want: RoaringTreemap = addrs.iter().copied().collect();
    assert_eq!(got, want);
    assert_eq!(encode(&got), encode(&want), "same container kinds");
    assert_eq!(decode(&encode(&got), "test").unwrap(), want);
    // Reused: spare bitsets come back zeroed.
    assembler.push(row_address(4, 1));
    let one: RoaringTreemap = [row_address(4, 1)].into_iter().collect();
    assert_eq!(assembler.finish(), one);
}

proptest! {
    #[test]
    fn round_trips(addrs in proptest::collection::vec(any::<u64>(), 0..200)) {
        let posting: RoaringTreemap = addrs.into_iter().collect();
        let bytes = encode(&posting);
        prop_assert_eq!(decode(&bytes, "test").unwrap(), posting);
    }

    #[test]
    fn assembler_equals_collect(
        runs in proptest::collection::vec((0u64..3, 0u64..5_000, 1u64..3_000), 0..8),
    ) {
        // Ascending runs per part, interleaved and overlapping: every path
        // of the assembler (append, buffer drain, out-of-order insert).
        let addrs: Vec<u64> = runs
            .iter()
            .flat_map(|(high, start, len)| (*start..start + len).map(move |o| (high << 32) | o))
            .collect();
        let mut assembler = TreemapAssembler::new();
        for a in &addrs {
            assembler.push(*a);
        }
        prop_assert_eq!(assembler.finish(), addrs.iter().copied().collect::<RoaringTreemap>());
    }

    #[test]
    fn memo_equals_elementwise_translation(
        postings in proptest::collection::vec(
            proptest::collection::btree_set((0u64..4, 0u64..3_000), 0..300), 1..6),
        modulus in 2u64..7,
    ) {
        // A reordering, colliding, deleting map over fragments 0..4.
        let map: HashMap<u64, Option<u64>> = (0..4u64)
            .flat_map(|f| (0..3_000u64).map(move |o| (f << 32) | o))
            .map(|a| (a, (!a.is_multiple_of(modulus)).then_some((9 << 32) | (10_000 - (a & 0xffff) / 2))))
            .collect();
        let remap = RowAddrRemap::direct(map);
        let mut memo = TranslationMemo::new();
        for set in postings {
            let posting: RoaringTreemap = set.iter().map(|(f, o)| (f << 32) | o).collect();
            let new = memo.remap(&posting, &remap).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(new, brute_force(&posting, &remap));
        }
    }

    #[test]
    fn runs_assemble_like_single_pushes(
        runs in proptest::collection::vec(
            (0u32..4, 0u32..200_000, 1u32..5_000, 1u32..30, any::<bool>()), 0..12),
    ) {
        // Ascending runs of destinations interleaved as a partition hands
        // them over, some as runs and some address by address.
        let mut assembler = TreemapAssembler::new();
        let mut want = RoaringTreemap::new();
        for (fragment, start, len, step, as_run) in &runs {
            let lows: Vec<u32> = (0..*len).map(|i| start + i * step).collect();
            want.extend(lows.iter().map(|low| row_address(*fragment, *low)));
            if *as_run {
                AddressSink::push_run(&mut assembler, *fragment, &lows);
            } else {
                lows.iter().for_each(|low| AddressSink::push(&mut assembler, row_address(*fragment, *low)));
            }
        }
        let got = assembler.finish();
        prop_assert_eq!(encode(&got), encode(&want));
    }

    #[test]
    fn assembler_equals_collect_across_containers(
        runs in proptest::collection::vec(
            (0u64..3, 0u64..300_000, 1u64..9_000, 1u64..40), 0..10),
    ) {
        // Strided runs of several containers, dense and sparse, in any order.
        let addrs: Vec<u64> = runs
            .iter()
            .flat_map(|(high, start, len, step)| {
                (0..*len).map(move |i| (high << 32) | (start + i * step))
            })
            .collect();
        let mut assembler = TreemapAssembler::new();
        for a in &addrs {
            assembler.push(*a);
        }
        let got = assembler.finish();
        let want: RoaringTreemap = addrs.iter().copied().collect();
        prop_assert_eq!(encode(&got), encode(&want));
        prop_assert_eq!(got, want);
    }

    #[test]
    fn encoded_translation_equals_brute_force(
        offsets in proptest::collection::vec((1u32..4, 0u32..140_000, 1u32..6_000, 1u32..9), 1..8),
        deleting in proptest::collection::vec(any::<bool>(), 3),
        modulus in 2u32..50,
        optimize in any::<bool>(),
    ) {
        let posting: RoaringTreemap = offsets
            .iter()
            .flat_map(|(f, start, len, step)| {
                (0..*len).map(move |i| row_address(*f, (start + i * step).min(139_999)))
            })
            .collect();
        let posting = if optimize {
            RoaringTreemap::from_bitmaps(posting.bitmaps().map(|(h, b)| {
                let mut b = b.clone();
                b.optimize();
                (h, b)
            }))
        } else {
            posting
        };
        let remap = compaction_where(140_000, |f, o| {
            deleting[(f - 1) as usize] && o % modulus == 0
        });
        let mut scratch = TranslateScratch::default();
        let got = translate_encoded(&encode(&posting), "test", &remap, &mut scratch)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got, brute_force(&posting, &remap));
    }

    #[test]
    fn encoded_garbage_is_an_error_not_a_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let remap = compaction_where(1_000, |_, _| false);
        let mut scratch = TranslateScratch::default();
        let _ = translate_encoded(&bytes, "test", &remap, &mut scratch);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode(&bytes, "test");
    }
}

#[test]
fn truncation_inside_a_part_is_corrupt() {
    let posting: RoaringTreemap = [5u64 << 32, (5 << 32) + 9].into_iter().collect();
    let bytes = encode(&posting);
    for cut in 1..bytes.len() {
        let err = decode(&bytes[..cut], "test").unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "cut {cut}: {err}");
    }
}

#[test]
fn parts_out_of_order_are_corrupt() {
    let high: RoaringTreemap = [7u64 << 32].into_iter().collect();
    let low: RoaringTreemap = [1u64].into_iter().collect();
    let mut bytes = encode(&high);
    bytes.extend(encode(&low));
    assert!(matches!(decode(&bytes, "test"), Err(Error::Corrupt { .. })));
}
