//! Spawned tasks that never outlive their owner.

use refract_core::{Error, Result};
use tokio::task::JoinHandle;

/// A spawned task that is aborted when its handle is dropped, so work started
/// for a consumer stops when the consumer gives up (an error elsewhere, a
/// dropped stream) instead of running on unobserved.
#[derive(Debug)]
pub struct AbortOnDrop<T>(JoinHandle<T>);

impl<T: Send + 'static> AbortOnDrop<T> {
    /// Spawns `future` on the current tokio runtime.
    pub fn spawn(future: impl std::future::Future<Output = T> + Send + 'static) -> Self {
        AbortOnDrop(tokio::spawn(future))
    }

    /// Spawns `future` on the runtime of `handle`.
    pub fn spawn_on(
        handle: &tokio::runtime::Handle,
        future: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Self {
        AbortOnDrop(handle.spawn(future))
    }

    /// Waits for the task and returns its outcome as tokio reports it (a
    /// panic is a `JoinError` whose `is_panic` is true).
    ///
    /// # Errors
    /// The `JoinError` when the task panicked or was cancelled.
    pub async fn wait(mut self) -> std::result::Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }

    /// Waits for the task.
    ///
    /// # Errors
    /// External, described by `what`, when the task panicked or was cancelled.
    pub async fn join(mut self, what: &str) -> Result<T> {
        (&mut self.0)
            .await
            .map_err(|join| Error::external(what.to_string(), join))
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn join_returns_the_output() {
        let task = AbortOnDrop::spawn(async { 41 + 1 });
        assert_eq!(task.join("adding").await.unwrap(), 42);
    }

    #[tokio::test]
    async fn a_panic_is_an_external_error_naming_the_work() {
        let task = AbortOnDrop::spawn(async { panic!("boom") });
        let err = task.join("reading a fragment").await.unwrap_err();
        assert!(matches!(err, Error::External { .. }), "{err}");
        assert!(err.to_string().contains("reading a fragment"), "{err}");
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_task() {
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        let task = AbortOnDrop::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        drop(task);
        tokio::time::sleep(std::time::Duration::from_millis(120)).await;
        assert!(!finished.load(Ordering::SeqCst));
    }
}
