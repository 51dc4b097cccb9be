//! A fault-injecting object store for tests of every crate.

use std::sync::Arc;

use object_store::ObjectStore;

/// The kind of object-store call a fault targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKind {
    /// Unconditional put (single or multipart).
    Put,
    /// Put with `PutMode::Create` or `PutMode::Update`.
    ConditionalPut,
    /// Whole-object GET.
    Get,
    /// Ranged GET.
    GetRange,
    /// HEAD.
    Head,
    /// LIST.
    List,
    /// DELETE.
    Delete,
}

/// How an injected fault behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMode {
    /// Return an error without performing the call (nothing written).
    Clean,
    /// Perform the call, then return an error (the caller cannot tell whether it happened).
    Ambiguous,
}

/// Wraps any object store and fails chosen calls.
#[derive(Debug)]
pub struct FaultInjectingStore {
    inner: Arc<dyn ObjectStore>,
}

impl FaultInjectingStore {
    /// Wraps `inner` with no faults configured.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultInjectingStore { inner }
    }

    /// Fails the `n`-th (0-based, counted from now on for this kind) call of `kind` with `mode`.
    pub fn fail_nth(&self, kind: CallKind, n: u64, mode: FaultMode) {
        let _ = (kind, n, mode, &self.inner);
        todo!()
    }

    /// Number of calls of `kind` seen so far.
    pub fn calls(&self, kind: CallKind) -> u64 {
        let _ = kind;
        todo!()
    }
}
