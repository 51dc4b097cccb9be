//! The threads maintenance runs index rewrites on, owned by a value.
//!
//! Index segment rewrites (inline remap during compaction, `remap_indices`,
//! `maintain`) do not run on the caller's tokio runtime:
//!
//! - a rewrite whose translator answers from memory runs on a *rewrite
//!   thread*, a current-thread runtime of its own, so its allocations stay in
//!   one malloc arena (see `rewrite_threads.rs`);
//! - a rewrite whose translator reads row maps from storage runs on a small
//!   multi-threaded *remap runtime*, where each translation batch is driven
//!   with `block_in_place`.
//!
//! Both belong to a [`MaintenanceRuntime`]. A host engine creates one sized
//! for its machine and runs maintenance inside [`MaintenanceRuntime::scope`];
//! dropping it stops its threads. Work outside any scope uses the process's
//! shared runtime ([`MaintenanceRuntime::shared`]), started on first use
//! with one rewrite thread per core (at most [`MAX_REWRITE_THREADS`]).
//! Either way the caller's runtime is never blocked: it only awaits.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use refract_core::{Error, Result};
use tokio::runtime::{Handle, Runtime};

use crate::rewrite_threads::RewriteThreads;

/// Most rewrite threads the shared runtime starts, whatever the machine.
pub const MAX_REWRITE_THREADS: usize = 8;

/// Worker threads of the remap runtime by default (a blocked worker hands its
/// core on, so two are enough on any machine).
pub const DEFAULT_REMAP_WORKERS: usize = 2;

/// How many threads a [`MaintenanceRuntime`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceRuntimeOptions {
    /// Rewrite threads (at least 1): how many in-memory segment rewrites run
    /// at once.
    pub rewrite_threads: usize,
    /// Worker threads of the remap runtime (at least 1).
    pub remap_workers: usize,
}

impl Default for MaintenanceRuntimeOptions {
    /// One rewrite thread per available core (at most
    /// [`MAX_REWRITE_THREADS`]) and [`DEFAULT_REMAP_WORKERS`].
    fn default() -> Self {
        Self {
            rewrite_threads: std::thread::available_parallelism()
                .map_or(1, usize::from)
                .clamp(1, MAX_REWRITE_THREADS),
            remap_workers: DEFAULT_REMAP_WORKERS,
        }
    }
}

/// The rewrite threads and the remap runtime of index maintenance. Dropping
/// it stops them (rewrites still running on them are cancelled).
///
/// ```
/// use std::sync::Arc;
/// use refract_optimize::runtime::{MaintenanceRuntime, MaintenanceRuntimeOptions};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let runtime = Arc::new(MaintenanceRuntime::new(MaintenanceRuntimeOptions {
///     rewrite_threads: 1,
///     remap_workers: 1,
/// })?);
/// // compact_files, remap_indices and maintain called inside the scope
/// // rewrite index segments on these threads.
/// let answer = runtime.scope(async { 42 }).await;
/// assert_eq!(answer, 42);
/// assert_eq!(runtime.rewrites_started(), 0);
/// drop(runtime); // the threads stop
/// # Ok::<(), refract_core::Error>(())
/// # }).unwrap();
/// ```
pub struct MaintenanceRuntime {
    rewrite_threads: RewriteThreads,
    /// Always `Some` until dropped (taken to shut down without blocking).
    remap: Option<Runtime>,
}

impl std::fmt::Debug for MaintenanceRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaintenanceRuntime")
            .field("rewrite_threads", &self.rewrite_threads.len())
            .field("rewrites_started", &self.rewrite_threads.started())
            .finish()
    }
}

tokio::task_local! {
    static CURRENT: Arc<MaintenanceRuntime>;
}

static SHARED: OnceLock<std::result::Result<Arc<MaintenanceRuntime>, String>> = OnceLock::new();

impl MaintenanceRuntime {
    /// Starts the threads `options` ask for.
    ///
    /// # Errors
    /// InvalidInput for zero threads of either kind; External when the
    /// operating system refuses a thread.
    pub fn new(options: MaintenanceRuntimeOptions) -> Result<Self> {
        if options.rewrite_threads == 0 || options.remap_workers == 0 {
            return Err(Error::invalid_input(format!(
                "a maintenance runtime needs at least one rewrite thread and one remap worker, got {} and {}",
                options.rewrite_threads, options.remap_workers
            )));
        }
        let rewrite_threads = RewriteThreads::start(options.rewrite_threads)?;
        let remap = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.remap_workers)
            .thread_name("refract-remap")
            .enable_all()
            .build()
            .map_err(|e| Error::external("starting the remap runtime", e))?;
        Ok(Self {
            rewrite_threads,
            remap: Some(remap),
        })
    }

    /// The process's shared runtime (default options), started on first use
    /// and kept for the life of the process. Maintenance outside any
    /// [`Self::scope`] runs on it.
    ///
    /// # Errors
    /// External when its threads could not be started (then and on every
    /// later call).
    pub fn shared() -> Result<Arc<Self>> {
        SHARED
            .get_or_init(|| {
                Self::new(MaintenanceRuntimeOptions::default())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| {
                Error::external("starting the maintenance runtime", std::io::Error::other(e))
            })
    }

    /// Runs `work` with this runtime as the one its index rewrites use.
    pub async fn scope<F: Future>(self: &Arc<Self>, work: F) -> F::Output {
        CURRENT.scope(self.clone(), work).await
    }

    /// How many rewrite threads it has.
    pub fn rewrite_threads(&self) -> usize {
        self.rewrite_threads.len()
    }

    /// Segment rewrites started on its rewrite threads so far.
    pub fn rewrites_started(&self) -> u64 {
        self.rewrite_threads.started()
    }

    /// The remap runtime's handle.
    pub(crate) fn remap_handle(&self) -> Result<&Handle> {
        self.remap
            .as_ref()
            .map(Runtime::handle)
            .ok_or_else(|| Error::invalid_input("the remap runtime was shut down"))
    }

    /// Runs `work` on the least busy rewrite thread and awaits its result.
    /// Everything `work` spawns runs on that thread too.
    pub(crate) async fn on_rewrite_thread<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        self.rewrite_threads.run(work).await
    }
}

impl Drop for MaintenanceRuntime {
    fn drop(&mut self) {
        // Dropping a runtime blocks until its workers stop, which panics
        // inside an async context; this one may be dropped anywhere.
        if let Some(remap) = self.remap.take() {
            remap.shutdown_background();
        }
    }
}

/// The runtime of the enclosing [`MaintenanceRuntime::scope`], else the
/// shared one.
pub(crate) fn current() -> Result<Arc<MaintenanceRuntime>> {
    CURRENT
        .try_with(Arc::clone)
        .or_else(|_| MaintenanceRuntime::shared())
}

/// Runs `work` on a rewrite thread of the current runtime (see [`current`]).
pub(crate) async fn on_rewrite_thread<T, F>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    current()?.on_rewrite_thread(work).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite_threads::THREAD_NAME;

    #[tokio::test]
    async fn work_and_what_it_spawns_run_on_one_rewrite_thread() {
        let names = on_rewrite_thread(async {
            let here = std::thread::current().id();
            let spawned = tokio::spawn(async { std::thread::current().id() })
                .await
                .map_err(|e| Error::external("test task", e))?;
            let name = std::thread::current().name().map(str::to_string);
            Ok((here == spawned, name))
        })
        .await
        .unwrap();
        assert_eq!(names, (true, Some(THREAD_NAME.to_string())));
        // Errors come back as they are.
        let err = on_rewrite_thread(async { Err::<(), _>(Error::invalid_input("nope")) })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        let count = MaintenanceRuntime::shared().unwrap().rewrite_threads();
        assert!(
            (1..=MAX_REWRITE_THREADS).contains(&count),
            "{count} threads"
        );
    }

    #[tokio::test]
    async fn a_scope_routes_rewrites_to_its_runtime() {
        let options = MaintenanceRuntimeOptions {
            rewrite_threads: 1,
            remap_workers: 1,
        };
        let runtime = Arc::new(MaintenanceRuntime::new(options).unwrap());
        let inside = runtime
            .scope(async {
                on_rewrite_thread(async { Ok(()) }).await.unwrap();
                on_rewrite_thread(async { Ok(()) }).await.unwrap();
                Arc::ptr_eq(&current().unwrap(), &runtime)
            })
            .await;
        assert!(inside);
        assert_eq!(runtime.rewrites_started(), 2);
        // Outside the scope: the shared runtime, not this one.
        on_rewrite_thread(async { Ok(()) }).await.unwrap();
        assert_eq!(runtime.rewrites_started(), 2);
        assert!(!Arc::ptr_eq(&current().unwrap(), &runtime));
    }

    #[test]
    fn zero_threads_are_refused() {
        for (rewrite_threads, remap_workers) in [(0, 1), (1, 0)] {
            let err = MaintenanceRuntime::new(MaintenanceRuntimeOptions {
                rewrite_threads,
                remap_workers,
            })
            .unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        }
    }

    #[test]
    fn dropping_the_runtime_stops_its_threads() {
        let mut runtime = MaintenanceRuntime::new(MaintenanceRuntimeOptions {
            rewrite_threads: 2,
            remap_workers: 1,
        })
        .unwrap();
        let host = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ran = host
            .block_on(runtime.on_rewrite_thread(async { Ok(std::thread::current().id()) }))
            .unwrap();
        let threads = runtime.rewrite_threads.take_join_handles();
        assert_eq!(threads.len(), 2);
        assert!(threads.iter().any(|t| t.thread().id() == ran));
        // Dropped inside an async context too: no panic, no blocking.
        host.block_on(async move { drop(runtime) });
        for thread in threads {
            thread.join().unwrap();
        }
    }
}
