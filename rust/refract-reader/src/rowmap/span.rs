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

use bytes::Bytes;
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
    pub fn new(spans: Vec<Span>, fallback: Arc<dyn Reader>) -> Self {
        Self {
            spans: spans.into(),
            fallback,
        }
    }

    fn find(&self, range: &Range<u64>) -> Option<Bytes> {
        self.spans.iter().find_map(|span| span.slice(range))
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
}
