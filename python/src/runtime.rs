//! The tokio runtime the bindings run Refract's async API on.
//!
//! Created lazily on first use and re-created when the process id changes: a
//! child made by `fork` inherits the parent's runtime object but none of its
//! worker threads, and blocking on it would hang forever. Every call that
//! waits releases the GIL first, so other Python threads run meanwhile.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// The runtime of this process and the process it was built in.
static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// The runtime of the current process, creating it when absent or inherited
/// through `fork`.
pub fn runtime() -> PyResult<Arc<Runtime>> {
    let pid = std::process::id();
    // A poisoned lock only means another thread panicked while building a
    // runtime; the slot itself is still a valid `Option`.
    let mut slot = RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, runtime)) = slot.as_ref() {
        if *owner == pid {
            return Ok(runtime.clone());
        }
    }
    if let Some((_, inherited)) = slot.take() {
        // The parent's worker threads do not exist here: dropping the runtime
        // would wait for them. Leak it instead (once per fork).
        std::mem::forget(inherited);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("refract-worker")
        .build()
        .map_err(|err| PyRuntimeError::new_err(format!("cannot start the async runtime: {err}")))?;
    let runtime = Arc::new(runtime);
    *slot = Some((pid, runtime.clone()));
    Ok(runtime)
}

/// Runs `future` to completion on the runtime with the GIL released.
pub fn block_on<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    Ok(py.detach(|| runtime.block_on(future)))
}

/// The process id the current runtime was built in (tests: fork safety).
pub fn runtime_pid() -> Option<u32> {
    RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_ref()
        .map(|(pid, _)| *pid)
}
