//! The rewrite threads: where index segment rewrites with an in-memory
//! translator run.
//!
//! Each rewrite thread drives its own current-thread tokio runtime, so a
//! rewrite — its reads, decoding, translation, assembly and encoding, and
//! every task it spawns — runs and allocates on one thread. With glibc's
//! malloc every thread that allocates grows its own arena to about the whole
//! working set, so the same rewrite spread over a multi-threaded runtime's
//! workers held two to three times its live heap in RSS (docs/benchmarks.md,
//! "One rewrite thread").
//!
//! A rewrite goes to the least busy thread, the first one on ties: rewrites
//! in sequence share one thread (and one arena), and concurrent ones —
//! several tables maintained at once — still run in parallel. The threads
//! belong to a [`crate::runtime::MaintenanceRuntime`]; they stop when it is
//! dropped.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use refract_core::{Error, Result};
use refract_table::task::AbortOnDrop;
use tokio::runtime::Handle;

/// Name of every rewrite thread.
pub(crate) const THREAD_NAME: &str = "refract-rewrite";

/// One rewrite thread: its runtime and the rewrites running on it.
struct RewriteThread {
    handle: Handle,
    running: Arc<AtomicUsize>,
    /// Dropping it ends the thread (its runtime is dropped on it).
    _stop: tokio::sync::oneshot::Sender<()>,
    #[cfg(test)]
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A set of rewrite threads, owned by a [`crate::runtime::MaintenanceRuntime`].
pub(crate) struct RewriteThreads {
    threads: Vec<RewriteThread>,
    /// Rewrites started so far.
    started: AtomicU64,
}

impl RewriteThreads {
    /// Starts `count` threads (at least one), each driving a current-thread
    /// runtime until the set is dropped.
    pub(crate) fn start(count: usize) -> Result<Self> {
        let threads = (0..count.max(1))
            .map(|_| start_thread())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::external("starting the rewrite threads", e))?;
        Ok(Self {
            threads,
            started: AtomicU64::new(0),
        })
    }

    /// How many threads there are.
    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Rewrites running now, over all threads.
    #[cfg(test)]
    pub(crate) fn running(&self) -> usize {
        self.threads
            .iter()
            .map(|t| t.running.load(Ordering::SeqCst))
            .sum()
    }

    /// Rewrites started on these threads so far (diagnostics and tests).
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Runs `work` on the least busy thread (the first on ties) and awaits
    /// its result. Everything `work` spawns runs on that thread too.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let Some(thread) = self
            .threads
            .iter()
            .min_by_key(|t| t.running.load(Ordering::SeqCst))
        else {
            return Err(Error::invalid_input("no rewrite thread is running"));
        };
        self.started.fetch_add(1, Ordering::SeqCst);
        let running = Running::start(&thread.running);
        // Dropping the caller's future (a cancelled compaction) stops the
        // rewrite too, as when it ran on the caller's task.
        let task = AbortOnDrop::spawn_on(&thread.handle, async move {
            let _running = running;
            work.await
        });
        task.join("index segment rewrite task").await?
    }
}

/// Starts one thread driving a current-thread runtime until its stop
/// sender is dropped: tasks spawned through its handle run on it.
fn start_thread() -> std::io::Result<RewriteThread> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(THREAD_NAME.to_string())
        .spawn(move || {
            // Returns when the stop sender is dropped; the runtime, and any
            // task still on it, is dropped here, on its own thread.
            let _ = runtime.block_on(stopped);
        })?;
    #[cfg(not(test))]
    drop(thread);
    Ok(RewriteThread {
        handle,
        running: Arc::new(AtomicUsize::new(0)),
        _stop: stop,
        #[cfg(test)]
        thread: Some(thread),
    })
}

/// Counts a rewrite as running on a thread until dropped (finished,
/// failed, panicked or cancelled alike).
struct Running(Arc<AtomicUsize>);

impl Running {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RewriteThreads {
    /// The threads' join handles (tests of shutdown).
    #[cfg(test)]
    pub(crate) fn take_join_handles(&mut self) -> Vec<std::thread::JoinHandle<()>> {
        self.threads
            .iter_mut()
            .filter_map(|t| t.thread.take())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rewrites_in_sequence_share_a_thread_and_concurrent_ones_spread() {
        let pool = Arc::new(RewriteThreads::start(2).unwrap());
        assert_eq!(pool.len(), 2);
        let thread_of = |pool: Arc<RewriteThreads>| async move {
            pool.run(async { Ok(std::thread::current().id()) }).await
        };
        let first = thread_of(pool.clone()).await.unwrap();
        let second = thread_of(pool.clone()).await.unwrap();
        assert_eq!(first, second, "an idle pool reuses the first thread");
        // A rewrite that waits keeps its thread busy: the next one goes to
        // the other thread.
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.run(async move {
                    let id = std::thread::current().id();
                    released
                        .await
                        .map_err(|e| Error::external("test channel", e))?;
                    Ok(id)
                })
                .await
            }
        });
        while pool.running() == 0 {
            tokio::task::yield_now().await;
        }
        let meanwhile = thread_of(pool.clone()).await.unwrap();
        release.send(()).unwrap();
        let waited = waiting.await.unwrap().unwrap();
        assert_eq!(waited, first, "the waiting rewrite took the first thread");
        assert_ne!(meanwhile, waited, "the concurrent one ran on the other");
        assert_eq!(pool.running(), 0, "finished rewrites are not counted");
        assert_eq!(pool.started(), 4);
        // A failing rewrite is not counted either once it ends.
        let failed = pool
            .run(async { Err::<(), _>(Error::invalid_input("nope")) })
            .await;
        assert!(failed.is_err());
        assert_eq!(pool.running(), 0);
        // A cancelled caller stops its rewrite.
        struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let (_hold, never) = tokio::sync::oneshot::channel::<()>();
        let (started, has_started) = tokio::sync::oneshot::channel::<()>();
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cancelled = tokio::spawn({
            let (pool, dropped) = (pool.clone(), dropped.clone());
            async move {
                pool.run(async move {
                    let _set_on_drop = SetOnDrop(dropped);
                    let _ = started.send(());
                    let _ = never.await;
                    Ok(())
                })
                .await
            }
        });
        has_started.await.unwrap();
        cancelled.abort();
        let settled = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while !dropped.load(Ordering::SeqCst) || pool.running() != 0 {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(
            settled.is_ok(),
            "the cancelled rewrite was dropped and uncounted"
        );
    }
}
