//! Fixtures shared by the index types' unit tests.

use refract_core::{ByteWeightedCache, TranslatorFastPaths};
use refract_table::io::{DatasetStore, RelativePath};

use super::{IndexContext, Translator};

/// A local store (so copies are hard links) under a temporary directory; the
/// directory must outlive the context.
pub(crate) async fn context() -> (IndexContext, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = IndexContext {
        store: DatasetStore::open(dir.path().to_str().unwrap(), true)
            .await
            .unwrap(),
        cache: ByteWeightedCache::new(16 << 20),
    };
    (ctx, dir)
}

/// The segment directory `_indices/<name>`.
pub(crate) fn seg(name: &str) -> RelativePath {
    RelativePath::parse(&format!("_indices/{name}")).unwrap()
}

/// Forwards every path of `inner` but says it is not worth memoizing (an
/// in-memory translator), counting the parts it streams and the threads
/// that streamed them.
pub(crate) struct InMemory<T> {
    pub inner: T,
    pub parts: std::sync::atomic::AtomicUsize,
    threads: std::sync::Mutex<std::collections::HashSet<std::thread::ThreadId>>,
}

impl<T> InMemory<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self {
            inner,
            parts: Default::default(),
            threads: Default::default(),
        }
    }

    /// Distinct threads that streamed parts so far.
    pub(crate) fn threads(&self) -> usize {
        self.threads.lock().unwrap().len()
    }

    /// Parts streamed through [`TranslatorFastPaths::translate_part`](refract_core::TranslatorFastPaths::translate_part) so far.
    pub(crate) fn parts(&self) -> usize {
        self.parts.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<T: Translator> Translator for InMemory<T> {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> refract_core::Result<()> {
        self.inner.translate(batch, out)
    }

    fn fast_paths(&self) -> Option<&dyn TranslatorFastPaths> {
        Some(self)
    }
}

impl<T: Translator> TranslatorFastPaths for InMemory<T> {
    fn translate_part(
        &self,
        fragment: u32,
        part: &roaring::RoaringBitmap,
        sink: &mut dyn refract_core::AddressSink,
    ) -> refract_core::Result<bool> {
        self.parts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.threads
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        (&self.inner as &dyn Translator).translate_part(fragment, part, sink)
    }

    fn shift_of_range(
        &self,
        fragment: u32,
        min: u32,
        max: u32,
    ) -> refract_core::Result<Option<u64>> {
        (&self.inner as &dyn Translator).shift_of_range(fragment, min, max)
    }

    fn worth_memoizing(&self) -> bool {
        false
    }
}
