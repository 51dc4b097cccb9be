//! Running a segment rewrite off the caller's runtime.
//!
//! Index types call their translator synchronously (`refract_core::Translator`).
//! A rewrite whose translator answers from memory (a compaction's remap, a
//! prepared segment translator) runs on a rewrite thread, all on one thread.
//!
//! A translator that reads row maps from storage is called synchronously but
//! must await I/O, so that rewrite runs as a task on a small dedicated
//! multi-threaded runtime (the remap runtime), where each translation batch
//! (at most 65,536 addresses) is driven to completion with `block_in_place`.
//!
//! Either way the caller's runtime is never blocked — it just awaits the task
//! — so this works under current-thread and multi-threaded runtimes alike, and
//! I/O objects opened on either side stay usable (both belong to the current
//! [`crate::runtime::MaintenanceRuntime`], which outlives the rewrite).

use std::sync::Arc;

use refract_core::{BatchTranslator, Error, Result, Translator};
use refract_index::{remap_segment, IndexContext, IndexRegistry, RemapOptions, RemapOutcome};
use refract_table::task::AbortOnDrop;
use refract_table::IndexMetadata;
use roaring::RoaringBitmap;
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::runtime::{current, on_rewrite_thread};

/// A synchronous view of an async translator, valid only on a worker of a
/// multi-threaded runtime (checked, never a panic).
struct BlockingTranslator {
    inner: Arc<dyn BatchTranslator>,
}

impl Translator for BlockingTranslator {
    fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        let handle = Handle::try_current().map_err(|_| {
            Error::invalid_input("a blocking translator was called outside a tokio runtime")
        })?;
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            return Err(Error::invalid_input(
                "a blocking translator needs a multi-threaded runtime",
            ));
        }
        tokio::task::block_in_place(|| handle.block_on(self.inner.translate_batch(batch, out)))
    }
}

/// The translator of one segment rewrite.
pub(crate) enum JobTranslator {
    /// Answers from memory: called directly, no runtime hop per batch.
    InMemory(Arc<dyn Translator>),
    /// May read row maps: each batch is driven by [`BlockingTranslator`].
    Blocking(Arc<dyn BatchTranslator>),
}

/// The inputs of one segment rewrite, owned so the task can outlive the borrow.
pub(crate) struct RewriteJob {
    pub ctx: IndexContext,
    pub registry: IndexRegistry,
    pub meta: IndexMetadata,
    pub translator: JobTranslator,
    pub coverage: RoaringBitmap,
    pub options: RemapOptions,
}

/// Runs `remap_segment` for `job` — on the rewrite thread when its
/// translator answers from memory, else on the blocking-translator runtime —
/// and awaits it.
pub(crate) async fn rewrite_segment(job: RewriteJob) -> Result<RemapOutcome> {
    let RewriteJob {
        ctx,
        registry,
        meta,
        translator,
        coverage,
        options,
    } = job;
    let rewrite = |translator: Arc<dyn Translator>| async move {
        remap_segment(&ctx, &registry, &meta, &translator, coverage, &options).await
    };
    match translator {
        JobTranslator::InMemory(translator) => on_rewrite_thread(rewrite(translator)).await,
        JobTranslator::Blocking(inner) => {
            let translator = Arc::new(BlockingTranslator { inner });
            // Held until the rewrite ends: its runtime runs the task.
            let runtime = current()?;
            AbortOnDrop::spawn_on(runtime.remap_handle()?, rewrite(translator))
                .join("index segment rewrite task")
                .await?
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Doubler(AtomicUsize);

    #[async_trait::async_trait]
    impl BatchTranslator for Doubler {
        async fn translate_batch(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            out.clear();
            out.extend(batch.iter().map(|a| Some(a * 2)));
            Ok(())
        }
    }

    #[tokio::test]
    async fn blocking_translator_runs_on_the_rewrite_runtime() {
        let inner = Arc::new(Doubler(AtomicUsize::new(0)));
        let translator = BlockingTranslator {
            inner: inner.clone(),
        };
        let runtime = current().unwrap();
        let out = runtime
            .remap_handle()
            .unwrap()
            .spawn(async move {
                let mut out = Vec::new();
                translator.translate(&[1, 2, 3], &mut out).map(|_| out)
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(out, vec![Some(2), Some(4), Some(6)]);
        assert_eq!(inner.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn blocking_translator_refuses_a_current_thread_runtime() {
        let translator = BlockingTranslator {
            inner: Arc::new(Doubler(AtomicUsize::new(0))),
        };
        let mut out = Vec::new();
        let err = translator.translate(&[1], &mut out).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }
}
