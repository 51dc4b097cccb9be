//! A Lance [`Reader`] that serves reads from byte spans fetched ahead of time.
//!
//! The row-map reader knows, from the file's footer and column metadata, which
//! bytes a step needs (the metadata at open, the page buffers of a label
//! chunk), fetches them with one ranged GET and hands Lance this reader, so
//! Lance's own reads (the miniblock chunk table, then the values) cost no
//! further requests. A read outside every span goes to the fallback reader —
//! i.e. to the store, counted like any other request — so a wrong prediction
//! costs a request, never a wrong answer.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::FutureExt;
use lance_core::deepsize::{Context, DeepSizeOf};
use lance_io::traits::Reader;
use object_store::path::Path;

/// Bytes of the file starting at `start`.
#[derive(Debug, Clone)]
pub struct Span {
    /// File offset of the first byte.
    pub start: u64,
    /// The bytes.
    pub bytes: Bytes,
}

impl Span {
    /// The bytes of `range` when the span holds all of them.
    pub(super) fn slice(&self, range: &Range<u64>) -> Option<Bytes> {
        let from = range.start.checked_sub(self.start)?;
        let to = range.end.checked_sub(self.start)?;
        if from > to || to > self.bytes.len() as u64 {
            return None;
        }
        // Both bounds are at most `bytes.len()`, a usize.
        Some(self.bytes.slice(from as usize..to as usize))
    }
}

/// Serves reads from [`Span`]s, falling back to `fallback` for anything else.
#[derive(Debug, Clone)]
pub struct SpanReader {
    spans: Arc<[Span]>,
    fallback: Arc<dyn Reader>,
}

impl SpanReader {
    /// A reader serving `spans` before `fallback`.
    pub fn new(mut spans: Vec<Span>, fallback: Arc<dyn Reader>) -> Self {
        spans.sort_by_key(|span| span.start);
        Self {
            spans: spans.into(),
            fallback,
        }
    }

    /// The bytes of `range` from one span, or copied from adjacent spans
    /// that together hold it (a buffer straddling the opening tail's start).
    fn find(&self, range: &Range<u64>) -> Option<Bytes> {
        if let Some(bytes) = self.spans.iter().find_map(|span| span.slice(range)) {
            return Some(bytes);
        }
        let mut out = BytesMut::new();
        let mut at = range.start;
        for span in self.spans.iter() {
            let end = span.start + span.bytes.len() as u64;
            if at >= range.end || span.start > at || end <= at {
                continue;
            }
            out.extend_from_slice(&span.slice(&(at..end.min(range.end)))?);
            at = end.min(range.end);
        }
        (at >= range.end && range.start < range.end).then(|| out.freeze())
    }
}

impl DeepSizeOf for SpanReader {
    fn deep_size_of_children(&self, _context: &mut Context) -> usize {
        self.spans.iter().map(|span| span.bytes.len()).sum()
    }
}

impl Reader for SpanReader {
    fn path(&self) -> &Path {
        self.fallback.path()
    }

    fn block_size(&self) -> usize {
        self.fallback.block_size()
    }

    fn io_parallelism(&self) -> usize {
        self.fallback.io_parallelism()
    }

    fn size(&self) -> BoxFuture<'_, object_store::Result<usize>> {
        self.fallback.size()
    }

    fn get_range(&self, range: Range<usize>) -> BoxFuture<'static, object_store::Result<Bytes>> {
        let wanted = range.start as u64..range.end as u64;
        match self.find(&wanted) {
            Some(bytes) => futures::future::ready(Ok(bytes)).boxed(),
            None => self.fallback.get_range(range),
        }
    }

    fn get_all(&self) -> BoxFuture<'_, object_store::Result<Bytes>> {
        self.fallback.get_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_only_inside_the_span() {
        let span = Span {
            start: 100,
            bytes: Bytes::from_static(b"abcdef"),
        };
        assert_eq!(span.slice(&(100..103)).as_deref(), Some(&b"abc"[..]));
        assert_eq!(span.slice(&(104..106)).as_deref(), Some(&b"ef"[..]));
        assert_eq!(span.slice(&(106..106)).as_deref(), Some(&b""[..]));
        assert_eq!(span.slice(&(99..101)), None);
        assert_eq!(span.slice(&(105..107)), None);
    }

    #[derive(Debug)]
    struct NoFallback;

    impl DeepSizeOf for NoFallback {
        fn deep_size_of_children(&self, _context: &mut Context) -> usize {
            0
        }
    }

    fn reader(spans: Vec<Span>) -> SpanReader {
        let fallback: Arc<dyn Reader> = Arc::new(NoFallback);
        SpanReader::new(spans, fallback)
    }

    impl Reader for NoFallback {
        fn path(&self) -> &Path {
            unreachable!("never asked")
        }
        fn block_size(&self) -> usize {
            4_096
        }
        fn io_parallelism(&self) -> usize {
            1
        }
        fn size(&self) -> BoxFuture<'_, object_store::Result<usize>> {
            futures::future::ready(Ok(0)).boxed()
        }
        fn get_range(&self, _: Range<usize>) -> BoxFuture<'static, object_store::Result<Bytes>> {
            unreachable!("the spans should have served this read")
        }
        fn get_all(&self) -> BoxFuture<'_, object_store::Result<Bytes>> {
            unreachable!("never asked")
        }
    }

    #[test]
    fn a_range_across_adjacent_spans_is_assembled() {
        let r = reader(vec![
            Span {
                start: 10,
                bytes: Bytes::from_static(b"klmn"),
            },
            Span {
                start: 4,
                bytes: Bytes::from_static(b"efghij"),
            },
        ]);
        assert_eq!(r.find(&(5..12)).as_deref(), Some(&b"fghijkl"[..]));
        assert_eq!(r.find(&(4..14)).as_deref(), Some(&b"efghijklmn"[..]));
        assert_eq!(r.find(&(11..13)).as_deref(), Some(&b"lm"[..]));
        assert_eq!(r.find(&(3..6)), None, "starts before every span");
        assert_eq!(r.find(&(12..15)), None, "ends after every span");
    }

    #[test]
    fn a_gap_between_spans_is_not_papered_over() {
        let r = reader(vec![
            Span {
                start: 0,
                bytes: Bytes::from_static(b"ab"),
            },
            Span {
                start: 3,
                bytes: Bytes::from_static(b"de"),
            },
        ]);
        assert_eq!(r.find(&(1..4)), None);
    }
}
