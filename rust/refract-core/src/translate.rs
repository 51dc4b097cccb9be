//! Translators: how index rewrites turn old row addresses into new ones.
//!
//! A translator answers a batch of addresses with one result per input position:
//! `Some(new)` (an unaffected address maps to itself) or `None` (the row is gone).
//! Callers never hand a translator more than [`MAX_TRANSLATION_BATCH`] addresses at
//! once — bitmap compression can hide millions of rows behind a few bytes, and the
//! drivers here keep the working set of a rewrite bounded whatever the input size.
//!
//! The traits depend on no implementation: `RowAddrRemap` (`remap`) and
//! `RemapChain` (`chain`) implement [`Translator`] where they are defined.

use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::address::row_address;
use crate::error::Result;

/// The most addresses a translator is given in one call.
pub const MAX_TRANSLATION_BATCH: usize = 65_536;

/// Where [`TranslatorFastPaths::translate_part`] delivers translated addresses.
///
/// Closures `FnMut(u64)` are sinks that take one address at a time; a sink
/// that can append whole runs cheaply (a bitmap builder) also implements
/// [`AddressSink::push_run`].
pub trait AddressSink {
    /// Adds one translated address.
    fn push(&mut self, address: u64);

    /// Adds `fragment << 32 | low` for every `low` of `lows`, which ascend
    /// strictly. The default pushes them one at a time.
    fn push_run(&mut self, fragment: u32, lows: &[u32]) {
        for low in lows {
            self.push(row_address(fragment, *low));
        }
    }
}

impl<F: FnMut(u64)> AddressSink for F {
    #[inline]
    fn push(&mut self, address: u64) {
        self(address)
    }
}

/// Synchronous address translation: the one method every translator has.
///
/// A translator that can do better than batches (stream one fragment's
/// offsets, move whole runs at once) says so through
/// [`Translator::fast_paths`]; callers holding a `&dyn Translator` use the
/// same names on it (`translate_part`, `shift_of_range`, `worth_memoizing`),
/// which answer "no such path" for translators without fast paths.
pub trait Translator: Send + Sync {
    /// Clears `out` and pushes one result per address of `batch`, in order: the new
    /// address (the same one if unaffected) or `None` if the row is gone.
    ///
    /// # Errors
    /// Whatever the implementation meets reading its mapping (e.g. `Corrupt`
    /// row-map bytes); an address outside the mapping is not an error.
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()>;

    /// This translator's fast paths, when it has any (`None` by default).
    fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
        None
    }
}

/// The performance paths a [`Translator`] may offer beyond
/// [`Translator::translate`]; each must agree with it.
pub trait TranslatorFastPaths: Send + Sync {
    /// Streaming path for one fragment's addresses: translates the offsets
    /// `part` of fragment `fragment` (addresses `fragment << 32 | offset`),
    /// giving `sink` the new address of every row that is not gone, each once.
    /// The results equal [`Translator::translate`]'s as a set; they come one
    /// at a time in the order of `part`, or — when the rows scatter over
    /// several destinations — as ascending runs of one destination
    /// ([`AddressSink::push_run`]) grouped by destination, with at most
    /// [`MAX_TRANSLATION_BATCH`] rows buffered. Returns `Ok(false)` without
    /// calling `sink` when there is no such path for this part; callers then
    /// fall back to [`Translator::translate`] in batches of at most
    /// [`MAX_TRANSLATION_BATCH`].
    ///
    /// # Errors
    /// As [`Translator::translate`].
    fn translate_part(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        sink: &mut dyn AddressSink,
    ) -> Result<bool>;

    /// Bulk path: `Some(base)` when every offset `o` in `min..=max` of
    /// fragment `fragment` is a live row whose new address is `base + o`
    /// (wrapping arithmetic), all of them in one fragment, so a caller can move
    /// a whole run of offsets at once. `None` means "unknown": callers then
    /// use [`TranslatorFastPaths::translate_part`] or
    /// [`Translator::translate`]. Never `Some` for a range with a gone row.
    ///
    /// # Errors
    /// As [`Translator::translate`].
    fn shift_of_range(&self, fragment: u32, min: u32, max: u32) -> Result<Option<u64>>;

    /// Whether a caller that meets the same address many times (a trigram
    /// index holds a row in one posting per trigram) gains from memoizing
    /// results. An in-memory translator whose
    /// [`TranslatorFastPaths::translate_part`] costs about one table read
    /// per address says `false`, and callers then stream parts through it
    /// instead of holding a per-row memo.
    fn worth_memoizing(&self) -> bool;
}

/// The fast paths as a caller sees them: a translator without them answers
/// "no streaming path", "unknown shift" and "worth memoizing".
impl dyn Translator + '_ {
    /// [`TranslatorFastPaths::translate_part`], or `Ok(false)` without fast paths.
    ///
    /// # Errors
    /// As [`Translator::translate`].
    pub fn translate_part(
        &self,
        fragment: u32,
        part: &RoaringBitmap,
        sink: &mut dyn AddressSink,
    ) -> Result<bool> {
        match self.fast_paths() {
            Some(fast) => fast.translate_part(fragment, part, sink),
            None => Ok(false),
        }
    }

    /// [`TranslatorFastPaths::shift_of_range`], or `Ok(None)` without fast paths.
    ///
    /// # Errors
    /// As [`Translator::translate`].
    pub fn shift_of_range(&self, fragment: u32, min: u32, max: u32) -> Result<Option<u64>> {
        match self.fast_paths() {
            Some(fast) => fast.shift_of_range(fragment, min, max),
            None => Ok(None),
        }
    }

    /// [`TranslatorFastPaths::worth_memoizing`], or `true` without fast paths.
    pub fn worth_memoizing(&self) -> bool {
        self.fast_paths()
            .is_none_or(TranslatorFastPaths::worth_memoizing)
    }
}

/// Asynchronous address translation, for translators that read row maps from storage.
#[async_trait::async_trait]
pub trait BatchTranslator: Send + Sync {
    /// Same contract as [`Translator::translate`].
    ///
    /// # Errors
    /// As [`Translator::translate`], plus the errors of reading the mapping
    /// from storage (NotFound, Corrupt, External).
    async fn translate_batch(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()>;

    /// Starts loading what translating will certainly need (say, the
    /// metadata of a row map), so a caller can overlap it with its own reads
    /// before the first batch: on a remote store that saves a round trip.
    /// Optional: [`BatchTranslator::translate_batch`] loads whatever was not
    /// prepared. Does nothing by default.
    ///
    /// # Errors
    /// Those of loading the mapping, as [`BatchTranslator::translate_batch`]
    /// would meet them.
    async fn prepare(&self) -> Result<()> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl<T: Translator + ?Sized> BatchTranslator for T {
    async fn translate_batch(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        self.translate(batch, out)
    }
}

impl<T: Translator + ?Sized> Translator for Arc<T> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        (**self).translate(batch, out)
    }

    fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
        (**self).fast_paths()
    }
}

impl<T: Translator + ?Sized> Translator for &T {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        (**self).translate(batch, out)
    }

    fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
        (**self).fast_paths()
    }
}

/// Translates `input` in batches of at most [`MAX_TRANSLATION_BATCH`], appending one
/// result per input address to `out` (which is not cleared).
///
/// # Errors
/// Those of [`Translator::translate`], at the first batch that fails (`out` then
/// holds the results of the batches before it).
pub fn translate_all<T: Translator + ?Sized>(
    translator: &T,
    input: &[u64],
    out: &mut Vec<Option<u64>>,
) -> Result<()> {
    let mut buf = Vec::with_capacity(input.len().min(MAX_TRANSLATION_BATCH));
    for chunk in input.chunks(MAX_TRANSLATION_BATCH) {
        translator.translate(chunk, &mut buf)?;
        out.extend_from_slice(&buf);
    }
    Ok(())
}

/// Streams `input` through `translator` in batches of at most
/// [`MAX_TRANSLATION_BATCH`]; `sink` receives each batch's addresses and results.
/// Memory is bounded by one batch whatever the length of `input`.
///
/// # Errors
/// Those of [`Translator::translate`], and any error `sink` returns; the first
/// one stops the stream.
pub fn translate_stream<T, I, F>(translator: &T, input: I, mut sink: F) -> Result<()>
where
    T: Translator + ?Sized,
    I: IntoIterator<Item = u64>,
    F: FnMut(&[u64], &[Option<u64>]) -> Result<()>,
{
    let mut iter = input.into_iter();
    let mut batch = Vec::new();
    let mut out = Vec::new();
    while fill_batch(&mut iter, &mut batch) {
        translator.translate(&batch, &mut out)?;
        sink(&batch, &out)?;
    }
    Ok(())
}

/// Async [`translate_all`].
///
/// # Errors
/// Those of [`BatchTranslator::translate_batch`], at the first batch that fails.
pub async fn translate_all_async<T: BatchTranslator + ?Sized>(
    translator: &T,
    input: &[u64],
    out: &mut Vec<Option<u64>>,
) -> Result<()> {
    let mut buf = Vec::with_capacity(input.len().min(MAX_TRANSLATION_BATCH));
    for chunk in input.chunks(MAX_TRANSLATION_BATCH) {
        translator.translate_batch(chunk, &mut buf).await?;
        out.extend_from_slice(&buf);
    }
    Ok(())
}

/// Async [`translate_stream`].
///
/// # Errors
/// Those of [`BatchTranslator::translate_batch`], and any error `sink` returns;
/// the first one stops the stream.
pub async fn translate_stream_async<T, I, F>(translator: &T, input: I, mut sink: F) -> Result<()>
where
    T: BatchTranslator + ?Sized,
    I: IntoIterator<Item = u64>,
    F: FnMut(&[u64], &[Option<u64>]) -> Result<()>,
{
    let mut iter = input.into_iter();
    let mut batch = Vec::new();
    let mut out = Vec::new();
    while fill_batch(&mut iter, &mut batch) {
        translator.translate_batch(&batch, &mut out).await?;
        sink(&batch, &out)?;
    }
    Ok(())
}

/// Refills `batch` with up to [`MAX_TRANSLATION_BATCH`] addresses; false when empty.
fn fill_batch(iter: &mut impl Iterator<Item = u64>, batch: &mut Vec<u64>) -> bool {
    batch.clear();
    batch.extend(iter.by_ref().take(MAX_TRANSLATION_BATCH));
    !batch.is_empty()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::address::row_address as ra;
    use crate::chain::RemapChain;
    use crate::remap::tests::{group_a, group_b};
    use crate::remap::RowAddrRemap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// Maps every address to itself and records each call's batch length.
    #[derive(Default)]
    pub(crate) struct CountingTranslator {
        pub(crate) calls: AtomicUsize,
        pub(crate) sizes: Mutex<Vec<usize>>,
    }

    impl Translator for CountingTranslator {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.sizes.lock().unwrap().push(batch.len());
            out.clear();
            out.extend(batch.iter().map(|a| Some(*a)));
            Ok(())
        }
    }

    const N: usize = 2 * MAX_TRANSLATION_BATCH + 1;

    /// Answers every optional path (shifts everything by one fragment).
    struct Direct;

    impl Translator for Direct {
        fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            out.clear();
            out.extend(batch.iter().map(|a| Some(a + (1 << 32))));
            Ok(())
        }

        fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
            Some(self)
        }
    }

    impl TranslatorFastPaths for Direct {
        fn translate_part(
            &self,
            fragment: u32,
            part: &RoaringBitmap,
            sink: &mut dyn AddressSink,
        ) -> Result<bool> {
            part.iter().for_each(|o| sink.push(ra(fragment + 1, o)));
            Ok(true)
        }

        fn shift_of_range(&self, fragment: u32, _: u32, _: u32) -> Result<Option<u64>> {
            Ok(Some(ra(fragment + 1, 0)))
        }

        fn worth_memoizing(&self) -> bool {
            false
        }
    }

    #[test]
    fn arcs_and_references_forward_every_optional_path() {
        let arc: Arc<dyn Translator> = Arc::new(Direct);
        let by_ref: &dyn Translator = &Direct;
        let part: RoaringBitmap = [1, 5].into_iter().collect();
        for translator in [&arc as &dyn Translator, &by_ref] {
            assert!(!translator.worth_memoizing());
            assert_eq!(translator.shift_of_range(3, 0, 9).unwrap(), Some(ra(4, 0)));
            let mut got = Vec::new();
            assert!(translator
                .translate_part(3, &part, &mut |a| got.push(a))
                .unwrap());
            assert_eq!(got, vec![ra(4, 1), ra(4, 5)]);
        }
        assert!((&CountingTranslator::default() as &dyn Translator).worth_memoizing());
    }

    #[test]
    fn translate_all_uses_three_bounded_calls() {
        let t = CountingTranslator::default();
        let input: Vec<u64> = (0..N as u64).collect();
        let mut out = Vec::new();
        translate_all(&t, &input, &mut out).unwrap();
        assert_eq!(t.calls.load(Ordering::SeqCst), 3);
        assert_eq!(*t.sizes.lock().unwrap(), vec![65_536, 65_536, 1]);
        assert_eq!(out.len(), N);
        assert!(out.iter().zip(&input).all(|(o, i)| *o == Some(*i)));
    }

    #[test]
    fn translate_stream_uses_three_bounded_calls() {
        let t = CountingTranslator::default();
        let mut seen = 0usize;
        translate_stream(&t, 0..N as u64, |batch, out| {
            assert_eq!(batch.len(), out.len());
            seen += batch.len();
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, N);
        assert_eq!(*t.sizes.lock().unwrap(), vec![65_536, 65_536, 1]);
    }

    #[tokio::test]
    async fn async_drivers_use_three_bounded_calls() {
        let t = CountingTranslator::default();
        let input: Vec<u64> = (0..N as u64).collect();
        let mut out = Vec::new();
        translate_all_async(&t, &input, &mut out).await.unwrap();
        let mut seen = 0usize;
        translate_stream_async(&t, input.iter().copied(), |b, _| {
            seen += b.len();
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(out.len(), N);
        assert_eq!(seen, N);
        assert_eq!(
            *t.sizes.lock().unwrap(),
            vec![65_536, 65_536, 1, 65_536, 65_536, 1]
        );
    }

    #[test]
    fn translate_part_equals_translate() {
        let compact = RowAddrRemap::compact(vec![group_a(), group_b()]).unwrap();
        let direct = RowAddrRemap::direct(crate::remap::tests::direct_of(&[group_a(), group_b()]));
        let part: RoaringBitmap = (0..8u32).collect();
        for remap in [&compact, &direct] {
            // 4: survivors and an offset past its rows; 3: all survive; 7: all
            // deleted; 9: untouched.
            for fragment in [4u32, 3, 7, 9] {
                let batch: Vec<u64> = part.iter().map(|o| ra(fragment, o)).collect();
                let mut out = Vec::new();
                remap.translate(&batch, &mut out).unwrap();
                let want: Vec<u64> = out.into_iter().flatten().collect();
                let mut got = Vec::new();
                let shared: Arc<dyn Translator> = Arc::new(remap.clone());
                assert!(shared
                    .translate_part(fragment, &part, &mut |a| got.push(a))
                    .unwrap());
                assert_eq!(got, want, "fragment {fragment}");
            }
        }
        let mut got = Vec::new();
        let chain = RemapChain::from(compact);
        assert!(!(&chain as &dyn Translator)
            .translate_part(4, &part, &mut |a| got.push(a))
            .unwrap());
        assert!(got.is_empty(), "no path, no results");
    }

    #[test]
    fn translate_part_shifts_fragments_without_deletions() {
        use crate::remap::{FragmentRows, RewriteGroupInput};
        // Fragment 1 (10 rows, none deleted) after fragment 2 (3 rows, one
        // deleted), into fragments 20 (5 rows) and 21 (7 rows).
        let surviving = [ra(2, 0), ra(2, 2)]
            .into_iter()
            .chain((0..10).map(|o| ra(1, o)))
            .collect();
        let remap = RowAddrRemap::compact(vec![RewriteGroupInput {
            old_fragments: vec![FragmentRows::new(2, 3), FragmentRows::new(1, 10)],
            new_fragments: vec![FragmentRows::new(20, 5), FragmentRows::new(21, 7)],
            surviving,
        }])
        .unwrap();
        let cases: [&[u32]; 4] = [&[0, 1, 2], &[3, 5, 9], &[1, 2, 3, 4], &[8, 9, 10, 12]];
        for offsets in cases {
            let part: RoaringBitmap = offsets.iter().copied().collect();
            let batch: Vec<u64> = part.iter().map(|o| ra(1, o)).collect();
            let mut out = Vec::new();
            remap.translate(&batch, &mut out).unwrap();
            let want: Vec<u64> = out.into_iter().flatten().collect();
            let mut got = Vec::new();
            assert!(remap
                .translate_part(1, &part, &mut |a| got.push(a))
                .unwrap());
            assert_eq!(got, want, "offsets {offsets:?}");
        }
        // Within one range: 0..=2 land at 20:2..=4; 3, 5, 9 at 21:0, 2, 6.
        let mut got = Vec::new();
        let part: RoaringBitmap = [3u32, 5, 9].into_iter().collect();
        remap
            .translate_part(1, &part, &mut |a| got.push(a))
            .unwrap();
        assert_eq!(got, vec![ra(21, 0), ra(21, 2), ra(21, 6)]);
    }

    #[test]
    fn shift_of_range_is_exactly_the_constant_shift_property() {
        use crate::remap::{FragmentRows, RewriteGroupInput};
        // Fragment 1 (10 rows, none deleted) after fragment 2 (3 rows, one
        // deleted), into fragments 20 (5 rows) and 21 (7 rows); groups A and B
        // add deletions, an empty destination and a fully deleted fragment.
        let surviving = [ra(2, 0), ra(2, 2)]
            .into_iter()
            .chain((0..10).map(|o| ra(1, o)))
            .collect();
        let shifted = RowAddrRemap::compact(vec![RewriteGroupInput {
            old_fragments: vec![FragmentRows::new(2, 3), FragmentRows::new(1, 10)],
            new_fragments: vec![FragmentRows::new(20, 5), FragmentRows::new(21, 7)],
            surviving,
        }])
        .unwrap();
        let mixed = RowAddrRemap::compact(vec![group_a(), group_b()]).unwrap();
        let direct = RowAddrRemap::direct(crate::remap::tests::direct_of(&[group_a(), group_b()]));
        let mut found = 0;
        for remap in [&shifted, &mixed] {
            for fragment in [1u32, 2, 3, 4, 7, 9] {
                for min in 0..14u32 {
                    for max in min..14u32 {
                        let batch: Vec<u64> = (min..=max).map(|o| ra(fragment, o)).collect();
                        let mut out = Vec::new();
                        remap.translate(&batch, &mut out).unwrap();
                        let first = out[0];
                        let holds = first.is_some_and(|a| {
                            out.iter().zip(0u64..).all(|(r, i)| {
                                *r == Some(a + i) && r.is_some_and(|b| b >> 32 == a >> 32)
                            })
                        });
                        let got = remap.shift_of_range(fragment, min, max).unwrap();
                        assert_eq!(got.is_some(), holds, "{fragment}:{min}..={max}");
                        if let (Some(base), Some(a)) = (got, first) {
                            assert_eq!(base.wrapping_add(u64::from(min)), a);
                            found += 1;
                        }
                        let shared: Arc<dyn Translator> = Arc::new(remap.clone());
                        assert_eq!(shared.shift_of_range(fragment, min, max).unwrap(), got);
                        assert_eq!(direct.shift_of_range(fragment, min, max).unwrap(), None);
                    }
                }
            }
        }
        assert!(found > 100, "the shift is found where it holds ({found})");
        // 1:0..=2 land at 20:2..=4; an untouched fragment maps to itself.
        assert_eq!(shifted.shift_of_range(1, 0, 2).unwrap(), Some(ra(20, 2)));
        assert_eq!(shifted.shift_of_range(9, 3, 5).unwrap(), Some(ra(9, 0)));
        assert_eq!(shifted.shift_of_range(1, 4, 3).unwrap(), None);
    }

    #[test]
    fn remap_translator_maps_unaffected_to_themselves() {
        let remap = RowAddrRemap::compact(vec![group_a(), group_b()]).unwrap();
        let chain = RemapChain::from(remap.clone());
        let input = [ra(9, 0), ra(4, 4), ra(4, 1), ra(7, 0), ra(4, 4), ra(4, 9)];
        let want = vec![
            Some(ra(9, 0)),
            Some(ra(12, 0)),
            None,
            None,
            Some(ra(12, 0)),
            Some(ra(4, 9)),
        ];
        let mut out = vec![Some(1)];
        remap.translate(&input, &mut out).unwrap();
        assert_eq!(out, want);
        chain.translate(&input, &mut out).unwrap();
        assert_eq!(out, want);
        let shared: Arc<dyn Translator> = Arc::new(chain);
        shared.translate(&input, &mut out).unwrap();
        assert_eq!(out, want);
    }
}
