//! A fault-injecting object store for tests of every crate.
//!
//! Wrap any store, then ask for the `n`-th call of a kind to fail, either
//! *cleanly* (the call is not performed) or *ambiguously* (the call is performed,
//! then an error is returned — the caller cannot tell whether it happened, as after
//! a network timeout). Per-kind call counters let a test first run an operation to
//! learn how many calls it makes, then loop over every call index.
//!
//! Multipart uploads: the upload becomes visible at `complete`, so `complete` is the
//! faultable `Put` call; starting an upload and uploading parts are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    RenameTargetMode, UploadPart,
};

/// The kind of object-store call a fault targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKind {
    /// Unconditional put (single put, or the completion of a multipart upload).
    Put,
    /// Put with `PutMode::Create` / `PutMode::Update` (and non-overwriting copy/rename).
    ConditionalPut,
    /// Whole-object GET.
    Get,
    /// Ranged GET (each `get_ranges` call counts once).
    GetRange,
    /// HEAD.
    Head,
    /// LIST (recursive, delimited or with offset).
    List,
    /// DELETE (one call per path).
    Delete,
}

impl CallKind {
    /// Every kind, for tests that loop over all of them.
    pub const ALL: [CallKind; 7] = [
        CallKind::Put,
        CallKind::ConditionalPut,
        CallKind::Get,
        CallKind::GetRange,
        CallKind::Head,
        CallKind::List,
        CallKind::Delete,
    ];
}

/// How an injected fault behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultMode {
    /// Return an error without performing the call (nothing written).
    Clean,
    /// Perform the call, then return an error (the caller cannot tell whether it happened).
    Ambiguous,
}

/// The error source carried by every injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedFault {
    /// The kind of call that failed.
    pub kind: CallKind,
    /// Its 0-based index among calls of that kind.
    pub index: u64,
    /// Whether the call was performed.
    pub mode: FaultMode,
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "injected {:?} fault on {:?} call #{}",
            self.mode, self.kind, self.index
        )
    }
}

impl std::error::Error for InjectedFault {}

impl InjectedFault {
    fn into_store_error(self) -> object_store::Error {
        object_store::Error::Generic {
            store: "FaultInjectingStore",
            source: Box::new(self),
        }
    }
}

/// True if `err` or any of its sources is an [`InjectedFault`].
pub fn is_injected_fault(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if e.is::<InjectedFault>() {
            return true;
        }
        current = e.source();
    }
    false
}

#[derive(Debug, Default)]
struct FaultState {
    calls: BTreeMap<CallKind, u64>,
    pending: BTreeSet<(CallKind, u64, FaultMode)>,
    fired: Vec<InjectedFault>,
}

#[derive(Debug, Default)]
struct SharedState(Mutex<FaultState>);

impl SharedState {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        // A panicking test thread must not disable fault injection for the others.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one call of `kind` and returns the fault to inject into it, if any.
    fn next_call(&self, kind: CallKind) -> Option<InjectedFault> {
        let mut state = self.lock();
        let counter = state.calls.entry(kind).or_insert(0);
        let index = *counter;
        *counter += 1;
        let mode = [FaultMode::Clean, FaultMode::Ambiguous]
            .into_iter()
            .find(|mode| state.pending.contains(&(kind, index, *mode)))?;
        state.pending.remove(&(kind, index, mode));
        let fault = InjectedFault { kind, index, mode };
        state.fired.push(fault);
        Some(fault)
    }
}

/// Wraps any object store and fails chosen calls.
#[derive(Debug)]
pub struct FaultInjectingStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<SharedState>,
}

impl FaultInjectingStore {
    /// Wraps `inner` with no faults configured.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultInjectingStore {
            inner,
            state: Arc::new(SharedState::default()),
        }
    }

    /// The wrapped store (calls made through it bypass fault injection).
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// Fails call number `n` (0-based, counted since construction or the last
    /// [`Self::reset`]) of `kind` with `mode`. Several faults may be armed at once.
    pub fn fail_nth(&self, kind: CallKind, n: u64, mode: FaultMode) {
        self.state.lock().pending.insert((kind, n, mode));
    }

    /// Number of calls of `kind` seen since construction or the last reset.
    pub fn calls(&self, kind: CallKind) -> u64 {
        self.state.lock().calls.get(&kind).copied().unwrap_or(0)
    }

    /// Faults that have fired so far, in firing order.
    pub fn fired(&self) -> Vec<InjectedFault> {
        self.state.lock().fired.clone()
    }

    /// Zeroes the call counters and disarms every pending fault.
    pub fn reset(&self) {
        *self.state.lock() = FaultState::default();
    }

    /// Runs `call` unless a clean fault fires; turns an ambiguous fault into an
    /// error after the call succeeded.
    async fn guarded<T, F>(&self, kind: CallKind, call: F) -> object_store::Result<T>
    where
        F: std::future::Future<Output = object_store::Result<T>>,
    {
        match self.state.next_call(kind) {
            None => call.await,
            Some(fault) if fault.mode == FaultMode::Clean => Err(fault.into_store_error()),
            Some(fault) => {
                call.await?;
                Err(fault.into_store_error())
            }
        }
    }

    fn list_guarded(
        &self,
        inner: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.state.next_call(CallKind::List) {
            None => inner,
            Some(fault) if fault.mode == FaultMode::Clean => {
                stream::once(async move { Err(fault.into_store_error()) }).boxed()
            }
            // Ambiguous: the listing is delivered, then the error.
            Some(fault) => inner
                .chain(stream::once(async move { Err(fault.into_store_error()) }))
                .boxed(),
        }
    }
}

impl fmt::Display for FaultInjectingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultInjectingStore({})", self.inner)
    }
}

fn put_kind(mode: &PutMode) -> CallKind {
    match mode {
        PutMode::Overwrite => CallKind::Put,
        PutMode::Create | PutMode::Update(_) => CallKind::ConditionalPut,
    }
}

fn get_kind(options: &GetOptions) -> CallKind {
    if options.head {
        CallKind::Head
    } else if options.range.is_some() {
        CallKind::GetRange
    } else {
        CallKind::Get
    }
}

#[async_trait]
impl ObjectStore for FaultInjectingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let kind = put_kind(&opts.mode);
        self.guarded(kind, self.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultingUpload {
            inner: upload,
            state: self.state.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let kind = get_kind(&options);
        self.guarded(kind, self.inner.get_opts(location, options))
            .await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.guarded(CallKind::GetRange, self.inner.get_ranges(location, ranges))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = self.inner.clone();
        let state = self.state.clone();
        // One inner delete per path so each path is a separately faultable call.
        locations
            .and_then(move |path| {
                let inner = inner.clone();
                let state = state.clone();
                async move {
                    let fault = state.next_call(CallKind::Delete);
                    if let Some(fault) = fault.filter(|f| f.mode == FaultMode::Clean) {
                        return Err(fault.into_store_error());
                    }
                    let single = stream::once(std::future::ready(Ok(path.clone()))).boxed();
                    let deleted = match inner.delete_stream(single).next().await {
                        Some(result) => result?,
                        None => path,
                    };
                    match fault {
                        Some(fault) => Err(fault.into_store_error()),
                        None => Ok(deleted),
                    }
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.list_guarded(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.list_guarded(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.guarded(CallKind::List, self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let kind = match options.mode {
            CopyMode::Create => CallKind::ConditionalPut,
            CopyMode::Overwrite => CallKind::Put,
        };
        self.guarded(kind, self.inner.copy_opts(from, to, options))
            .await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let kind = match options.target_mode {
            RenameTargetMode::Create => CallKind::ConditionalPut,
            RenameTargetMode::Overwrite => CallKind::Put,
        };
        self.guarded(kind, self.inner.rename_opts(from, to, options))
            .await
    }
}

/// A multipart upload whose completion is a faultable `Put` call.
#[derive(Debug)]
struct FaultingUpload {
    inner: Box<dyn MultipartUpload>,
    state: Arc<SharedState>,
}

#[async_trait]
impl MultipartUpload for FaultingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        match self.state.next_call(CallKind::Put) {
            None => self.inner.complete().await,
            Some(fault) if fault.mode == FaultMode::Clean => {
                // Nothing becomes visible; the abort outcome does not change that.
                let _ = self.inner.abort().await;
                Err(fault.into_store_error())
            }
            Some(fault) => {
                self.inner.complete().await?;
                Err(fault.into_store_error())
            }
        }
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    fn store() -> (Arc<FaultInjectingStore>, Arc<dyn ObjectStore>) {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        (Arc::new(FaultInjectingStore::new(inner.clone())), inner)
    }

    fn assert_injected(err: object_store::Error, kind: CallKind, index: u64, mode: FaultMode) {
        let source = std::error::Error::source(&err).expect("generic error has a source");
        let fault = source
            .downcast_ref::<InjectedFault>()
            .expect("source is the injected fault");
        assert_eq!(*fault, InjectedFault { kind, index, mode });
        assert!(is_injected_fault(&err));
    }

    #[tokio::test]
    async fn clean_put_writes_nothing_and_ambiguous_put_writes() {
        let (fault, inner) = store();
        let a = Path::from("a");
        fault.fail_nth(CallKind::Put, 0, FaultMode::Clean);
        fault.fail_nth(CallKind::Put, 1, FaultMode::Ambiguous);

        let err = fault
            .put(&a, PutPayload::from_static(b"1"))
            .await
            .unwrap_err();
        assert_injected(err, CallKind::Put, 0, FaultMode::Clean);
        assert!(matches!(
            inner.head(&a).await,
            Err(object_store::Error::NotFound { .. })
        ));

        let err = fault
            .put(&a, PutPayload::from_static(b"2"))
            .await
            .unwrap_err();
        assert_injected(err, CallKind::Put, 1, FaultMode::Ambiguous);
        let stored = inner.get(&a).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored.as_ref(), b"2");

        // Unarmed call index: passes through.
        fault.put(&a, PutPayload::from_static(b"3")).await.unwrap();
        assert_eq!(fault.calls(CallKind::Put), 3);
        assert_eq!(fault.fired().len(), 2);
    }

    #[tokio::test]
    async fn conditional_puts_are_their_own_kind() {
        let (fault, inner) = store();
        let a = Path::from("a");
        let create = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        fault.fail_nth(CallKind::ConditionalPut, 0, FaultMode::Ambiguous);
        let err = fault
            .put_opts(&a, PutPayload::from_static(b"x"), create.clone())
            .await
            .unwrap_err();
        assert_injected(err, CallKind::ConditionalPut, 0, FaultMode::Ambiguous);
        assert!(inner.head(&a).await.is_ok());
        // The retry sees the ambiguous write: AlreadyExists, not an injected error.
        let err = fault
            .put_opts(&a, PutPayload::from_static(b"x"), create)
            .await
            .unwrap_err();
        assert!(matches!(err, object_store::Error::AlreadyExists { .. }));
        assert_eq!(fault.calls(CallKind::ConditionalPut), 2);
        assert_eq!(fault.calls(CallKind::Put), 0);
    }

    #[tokio::test]
    async fn reads_heads_and_ranges_are_counted_and_faulted_separately() {
        let (fault, inner) = store();
        let a = Path::from("a");
        inner
            .put(&a, PutPayload::from_static(b"hello"))
            .await
            .unwrap();
        fault.fail_nth(CallKind::Get, 1, FaultMode::Clean);
        fault.fail_nth(CallKind::GetRange, 0, FaultMode::Ambiguous);
        fault.fail_nth(CallKind::Head, 0, FaultMode::Clean);

        assert_eq!(
            fault.get(&a).await.unwrap().bytes().await.unwrap().as_ref(),
            b"hello"
        );
        assert_injected(
            fault.get(&a).await.unwrap_err(),
            CallKind::Get,
            1,
            FaultMode::Clean,
        );
        assert_injected(
            fault.get_range(&a, 1..3).await.unwrap_err(),
            CallKind::GetRange,
            0,
            FaultMode::Ambiguous,
        );
        assert_eq!(fault.get_range(&a, 1..3).await.unwrap().as_ref(), b"el");
        assert_injected(
            fault.head(&a).await.unwrap_err(),
            CallKind::Head,
            0,
            FaultMode::Clean,
        );
        assert_eq!(fault.head(&a).await.unwrap().size, 5);
        assert_eq!(fault.calls(CallKind::Get), 2);
        assert_eq!(fault.calls(CallKind::GetRange), 2);
        assert_eq!(fault.calls(CallKind::Head), 2);
    }

    #[tokio::test]
    async fn deletes_fault_per_path() {
        let (fault, inner) = store();
        for name in ["a", "b"] {
            inner
                .put(&Path::from(name), PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
        fault.fail_nth(CallKind::Delete, 0, FaultMode::Clean);
        fault.fail_nth(CallKind::Delete, 1, FaultMode::Ambiguous);
        assert_injected(
            fault.delete(&Path::from("a")).await.unwrap_err(),
            CallKind::Delete,
            0,
            FaultMode::Clean,
        );
        assert!(inner.head(&Path::from("a")).await.is_ok());
        assert_injected(
            fault.delete(&Path::from("b")).await.unwrap_err(),
            CallKind::Delete,
            1,
            FaultMode::Ambiguous,
        );
        assert!(inner.head(&Path::from("b")).await.is_err());
        fault.delete(&Path::from("a")).await.unwrap();
        assert!(inner.head(&Path::from("a")).await.is_err());
        assert_eq!(fault.calls(CallKind::Delete), 3);
    }

    #[tokio::test]
    async fn lists_fault_before_or_after_the_listing() {
        let (fault, inner) = store();
        inner
            .put(&Path::from("d/a"), PutPayload::from_static(b"x"))
            .await
            .unwrap();
        fault.fail_nth(CallKind::List, 0, FaultMode::Clean);
        fault.fail_nth(CallKind::List, 1, FaultMode::Ambiguous);
        let clean: Vec<_> = fault.list(None).collect().await;
        assert_eq!(clean.len(), 1);
        assert!(clean[0].is_err());
        let ambiguous: Vec<_> = fault.list(None).collect().await;
        assert_eq!(ambiguous.len(), 2);
        assert_eq!(ambiguous[0].as_ref().unwrap().location, Path::from("d/a"));
        assert!(ambiguous[1].is_err());
        let ok: Vec<_> = fault.list(None).try_collect().await.unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(fault.calls(CallKind::List), 3);
    }

    #[tokio::test]
    async fn multipart_completion_is_a_faultable_put() {
        let (fault, inner) = store();
        let a = Path::from("big");
        fault.fail_nth(CallKind::Put, 0, FaultMode::Clean);
        let mut upload = fault.put_multipart(&a).await.unwrap();
        upload
            .put_part(PutPayload::from_static(b"part"))
            .await
            .unwrap();
        assert_injected(
            upload.complete().await.unwrap_err(),
            CallKind::Put,
            0,
            FaultMode::Clean,
        );
        assert!(inner.head(&a).await.is_err());

        fault.fail_nth(CallKind::Put, 1, FaultMode::Ambiguous);
        let mut upload = fault.put_multipart(&a).await.unwrap();
        upload
            .put_part(PutPayload::from_static(b"part"))
            .await
            .unwrap();
        assert_injected(
            upload.complete().await.unwrap_err(),
            CallKind::Put,
            1,
            FaultMode::Ambiguous,
        );
        assert_eq!(
            inner.get(&a).await.unwrap().bytes().await.unwrap().as_ref(),
            b"part"
        );
    }

    #[tokio::test]
    async fn reset_disarms_and_zeroes() {
        let (fault, _inner) = store();
        fault.fail_nth(CallKind::Head, 0, FaultMode::Clean);
        assert!(fault.head(&Path::from("x")).await.is_err());
        fault.fail_nth(CallKind::Head, 5, FaultMode::Clean);
        fault.reset();
        assert_eq!(fault.calls(CallKind::Head), 0);
        assert!(fault.fired().is_empty());
        for _ in 0..7 {
            // NotFound, never an injected fault.
            let err = fault.head(&Path::from("x")).await.unwrap_err();
            assert!(matches!(err, object_store::Error::NotFound { .. }));
        }
    }
}
