//! Test support shared by the tests of every crate: a fault-injection rig around
//! an in-memory dataset, exact row snapshots, and the *fault matrix* driver that
//! runs one operation once per (call kind, call index, fault mode) and checks
//! that nothing is lost, duplicated, resurrected or reordered.
//!
//! Nothing here is used by the engine itself; it lives in the library (not under
//! `tests/`) so that refract-optimize, refract-index and refract-cli tests can
//! drive their own operations through the same checks.

// Test scaffolding (behind the `testing` feature): its callers are tests,
// where any error fails the test.
#![allow(clippy::missing_errors_doc)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::future::{BoxFuture, LocalBoxFuture};
use futures::{FutureExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::ObjectStore;
use refract_core::{Error, Result};

use crate::cleanup::cleanup_orphans;
use crate::dataset::{Dataset, OpenOptions};
use crate::io::{is_injected_fault, CallKind, DatasetStore, FaultInjectingStore, FaultMode};
use crate::session::Session;

/// A two-column schema (`id` Int64 not null, `name` Utf8 nullable) for tests.
pub fn sample_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// Rows `start..start + n` of [`sample_schema`]: `name` is `"r<id>"`, null when `id % 5 == 0`.
pub fn sample_rows(start: i64, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let names: StringArray = ids
        .iter()
        .map(|id| (id % 5 != 0).then(|| format!("r{id}")))
        .collect();
    let columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids)), Arc::new(names)];
    // Invariant: both columns have n rows and match sample_schema's types.
    RecordBatch::try_new(sample_schema(), columns).expect("sample rows match the sample schema")
}

/// Every live row of `dataset` in scan order, as one batch (all columns).
pub async fn snapshot(dataset: &Dataset) -> Result<RecordBatch> {
    let schema = dataset.schema();
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .try_into_stream()
        .await?
        .try_collect()
        .await?;
    arrow_select::concat::concat_batches(&schema, &batches)
        .map_err(|e| Error::external("concatenating a snapshot", e))
}

/// One in-memory dataset root seen through a [`FaultInjectingStore`].
#[derive(Clone)]
pub struct FaultRig {
    /// The fault injector every faulty handle goes through.
    pub fault: Arc<FaultInjectingStore>,
    uri: String,
    _dir: Option<Arc<TempRoot>>,
}

/// Where a rig keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RigBackend {
    /// `object_store`'s in-memory store.
    Memory,
    /// A fresh directory under the system temp dir, removed when the last rig clone drops.
    Local,
    /// A fresh prefix in `bucket` of the S3-compatible server at `endpoint`
    /// (tests: `http://127.0.0.1:PORT` of a local server, dummy credentials).
    S3 {
        /// Server URL.
        endpoint: &'static str,
        /// An existing bucket.
        bucket: &'static str,
    },
    /// A fresh prefix in `container` of the Azure Blob service at `endpoint`
    /// (tests: Azurite's `http://127.0.0.1:PORT/devstoreaccount1`, with its
    /// well-known development account).
    Azure {
        /// Account URL.
        endpoint: &'static str,
        /// An existing container.
        container: &'static str,
    },
}

/// A temporary dataset directory, removed on drop.
#[derive(Debug)]
struct TempRoot(std::path::PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        // Best effort: a leftover temp dir is harmless.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::fmt::Debug for FaultRig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultRig").field("uri", &self.uri).finish()
    }
}

impl Default for FaultRig {
    fn default() -> Self {
        Self::memory()
    }
}

impl FaultRig {
    /// A fresh, empty in-memory root with no faults armed.
    pub fn memory() -> FaultRig {
        Self::over(Arc::new(InMemory::new()))
    }

    /// A fresh, empty root on `backend`.
    pub fn new(backend: RigBackend) -> Result<FaultRig> {
        match backend {
            RigBackend::Memory => Ok(Self::memory()),
            RigBackend::Local => Self::local(),
            RigBackend::S3 { endpoint, bucket } => Self::s3(endpoint, bucket),
            RigBackend::Azure {
                endpoint,
                container,
            } => Self::azure(endpoint, container),
        }
    }

    /// A fresh prefix in a container of an Azure Blob service (Azurite).
    pub fn azure(endpoint: &str, container: &str) -> Result<FaultRig> {
        let uri = format!("az://{container}/rig-{}", uuid::Uuid::new_v4());
        let options = azure_test_options(endpoint);
        let (store, _) = crate::io::cloud::open_cloud(crate::io::Cloud::Azure, &uri, &options)?;
        Ok(Self::over(store))
    }

    /// A fresh prefix on an S3-compatible server.
    pub fn s3(endpoint: &str, bucket: &str) -> Result<FaultRig> {
        let uri = format!("s3://{bucket}/rig-{}", uuid::Uuid::new_v4());
        let options = s3_test_options(endpoint);
        let (store, _) = crate::io::cloud::open_cloud(crate::io::Cloud::S3, &uri, &options)?;
        Ok(Self::over(store))
    }

    /// A fresh, empty directory under the system temp dir.
    pub fn local() -> Result<FaultRig> {
        let dir = std::env::temp_dir().join(format!("refract-rig-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::external(format!("creating {}", dir.display()), e))?;
        let guard = Arc::new(TempRoot(dir.clone()));
        // The store a local dataset opens with (no-follow listings and deletes).
        let local = crate::io::DirectLocalStore::new(&dir)
            .map_err(|e| Error::external(format!("opening {}", dir.display()), e))?;
        let mut rig = Self::over(Arc::new(local));
        rig._dir = Some(guard);
        Ok(rig)
    }

    /// A rig over any store (e.g. a local directory), rooted at the dataset root.
    pub fn over(inner: Arc<dyn ObjectStore>) -> FaultRig {
        FaultRig {
            fault: Arc::new(FaultInjectingStore::new(inner)),
            uri: format!("fault-rig://{}", uuid::Uuid::new_v4()),
            _dir: None,
        }
    }

    /// The URI handles of this rig are opened with (also their cache-key root).
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// A store whose every request passes through the fault injector.
    pub fn faulty_store(&self) -> DatasetStore {
        let store: Arc<dyn ObjectStore> = self.fault.clone();
        DatasetStore::from_object_store(store, &self.uri)
    }

    /// A store that bypasses the fault injector (for setup and verification).
    pub fn clean_store(&self) -> DatasetStore {
        DatasetStore::from_object_store(self.fault.inner().clone(), &self.uri)
    }

    /// Options opening through the faulty store with a fresh session.
    pub fn faulty_options(&self) -> OpenOptions {
        OpenOptions {
            store: Some(self.faulty_store()),
            session: Some(Session::shared()),
            ..OpenOptions::default()
        }
    }

    /// Options opening through the clean store with a fresh session (so no
    /// cached manifest or deletion vector can hide what is on storage).
    pub fn clean_options(&self) -> OpenOptions {
        OpenOptions {
            store: Some(self.clean_store()),
            session: Some(Session::shared()),
            ..OpenOptions::default()
        }
    }

    /// Creates an empty [`sample_schema`] dataset (no faults involved).
    pub async fn create_sample(&self) -> Result<Dataset> {
        Dataset::create(&self.uri, sample_schema(), self.clean_options()).await
    }

    /// The latest version as stored, read without faults and without caches.
    pub async fn open_clean(&self) -> Result<Dataset> {
        Dataset::open_with(&self.uri, self.clean_options()).await
    }

    /// A handle through the faulty store on the latest version; the call
    /// counters are zeroed after opening, so fault indices count the operation only.
    pub async fn open_faulty(&self) -> Result<Dataset> {
        let dataset = Dataset::open_with(&self.uri, self.faulty_options()).await?;
        self.fault.reset();
        Ok(dataset)
    }

    /// Scans every committed version (clean, uncached); returns how many rows were read.
    pub async fn check_every_version_readable(&self) -> Result<u64> {
        let latest = self.open_clean().await?;
        let mut rows = 0u64;
        for info in latest.versions().await? {
            let dataset = Dataset::open_with(
                &self.uri,
                OpenOptions {
                    version: Some(info.version),
                    ..self.clean_options()
                },
            )
            .await?;
            rows += snapshot(&dataset).await?.num_rows() as u64;
        }
        Ok(rows)
    }
}

/// One injected fault: the `index`-th call of `kind` fails in `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FaultPoint {
    /// The kind of call.
    pub kind: CallKind,
    /// Its 0-based index among the operation's calls of that kind.
    pub index: u64,
    /// Clean or ambiguous.
    pub mode: FaultMode,
}

/// Brings a fresh rig to the state before the operation (runs without faults).
/// The future need not be `Send`.
pub type SetupFn = Arc<dyn Fn(FaultRig) -> LocalBoxFuture<'static, Result<()>>>;
/// The operation under test, given a handle on the latest version; returns the
/// new version. The future need not be `Send` (the driver awaits it in place).
pub type OperationFn = Arc<dyn Fn(Dataset) -> LocalBoxFuture<'static, Result<Dataset>>>;

/// An extra check of a committed state (e.g. index queries equal a scan);
/// returns how many rows it compared.
pub type VerifyFn = Arc<dyn Fn(Dataset) -> BoxFuture<'static, Result<u64>> + Send + Sync>;

/// Figures of one fault matrix run (for docs/reliability.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultMatrixReport {
    /// The operation's name.
    pub operation: String,
    /// Calls the fault-free operation made, per kind (the indices looped over).
    pub calls: BTreeMap<CallKind, u64>,
    /// Fault runs made (one per call index and mode).
    pub runs: u64,
    /// Runs in which the armed fault actually fired.
    pub faults_fired: u64,
    /// Runs in which the operation returned an error.
    pub failed: u64,
    /// Runs in which the operation still succeeded (e.g. a detected ambiguous
    /// commit, or a read retried by the Lance reader).
    pub succeeded: u64,
    /// Orphaned files removed by `cleanup_orphans` across all runs.
    pub orphans_cleaned: u64,
    /// Rows compared against the expected before/after states.
    pub rows_checked: u64,
}

impl std::fmt::Display for FaultMatrixReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|(kind, n)| format!("{kind:?}={n}"))
            .collect();
        write!(
            f,
            "fault matrix {}: calls [{}], runs {}, fired {}, failed {}, succeeded {}, orphans cleaned {}, rows checked {}",
            self.operation,
            calls.join(" "),
            self.runs,
            self.faults_fired,
            self.failed,
            self.succeeded,
            self.orphans_cleaned,
            self.rows_checked
        )
    }
}

/// Which call indices a matrix covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Every call index of every kind, both modes.
    Full,
    /// At most this many indices per kind (spread evenly, always including the
    /// first and the last call), both modes.
    Sampled(u64),
}

impl Coverage {
    /// `Full` when `REFRACT_FAULT_FULL=1`, otherwise `Sampled(default_per_kind)`.
    pub fn from_env(default_per_kind: u64) -> Coverage {
        match std::env::var("REFRACT_FAULT_FULL").as_deref() {
            Ok("1") => Coverage::Full,
            _ => Coverage::Sampled(default_per_kind),
        }
    }

    fn indices(self, calls: u64) -> Vec<u64> {
        match self {
            Coverage::Full => (0..calls).collect(),
            Coverage::Sampled(limit) if calls <= limit || limit < 2 => {
                (0..calls.min(limit.max(1))).collect()
            }
            Coverage::Sampled(limit) => {
                let mut picked: Vec<u64> =
                    (0..limit).map(|i| i * (calls - 1) / (limit - 1)).collect();
                picked.dedup();
                picked
            }
        }
    }
}

/// Runs `operation` once without faults to learn its calls and its result,
/// then once per fault point, on a fresh copy of the `setup` state each time,
/// and checks after every run:
///
/// 1. the dataset opens at a valid version and every version is readable;
/// 2. an error leaves exactly the rows before; a success leaves exactly the
///    rows after (never a mix, never applied twice);
/// 3. an error is the injected fault (not a misreport such as Corrupt);
/// 4. `cleanup_orphans(0)` removes only unreferenced files: the rows and every
///    version stay readable afterwards;
/// 5. a retry of the operation (no faults) after an error succeeds and leaves
///    exactly the rows after.
///
/// Panics (it is a test driver) with the failing fault point on any violation.
pub async fn run_fault_matrix(
    name: &str,
    backend: RigBackend,
    setup: SetupFn,
    operation: OperationFn,
    coverage: Coverage,
) -> FaultMatrixReport {
    let verify: VerifyFn = Arc::new(|_| async { Ok(0) }.boxed());
    run_fault_matrix_verified(name, backend, setup, operation, verify, coverage).await
}

/// [`run_fault_matrix`] plus `verify` on the latest version after every run and
/// after every retry (the dataset is opened clean, without caches).
pub async fn run_fault_matrix_verified(
    name: &str,
    backend: RigBackend,
    setup: SetupFn,
    operation: OperationFn,
    verify: VerifyFn,
    coverage: Coverage,
) -> FaultMatrixReport {
    let mut report = FaultMatrixReport {
        operation: name.to_string(),
        ..FaultMatrixReport::default()
    };
    let (before, after, calls) = reference_run(name, backend, &setup, &operation).await;
    report.calls = calls.clone();
    for (kind, count) in calls {
        for index in coverage.indices(count) {
            for mode in [FaultMode::Clean, FaultMode::Ambiguous] {
                let point = FaultPoint { kind, index, mode };
                let outcome =
                    fault_run(backend, &setup, &operation, &verify, point, &before, &after).await;
                report.runs += 1;
                report.faults_fired += u64::from(outcome.fired);
                report.failed += u64::from(!outcome.succeeded);
                report.succeeded += u64::from(outcome.succeeded);
                report.orphans_cleaned += outcome.orphans_cleaned;
                report.rows_checked += outcome.rows_checked;
            }
        }
    }
    report
}

async fn reference_run(
    name: &str,
    backend: RigBackend,
    setup: &SetupFn,
    operation: &OperationFn,
) -> (RecordBatch, RecordBatch, BTreeMap<CallKind, u64>) {
    let rig = FaultRig::new(backend).expect("rig");
    setup(rig.clone())
        .await
        .unwrap_or_else(|e| panic!("{name}: setup failed: {e}"));
    let before = snapshot(&rig.open_clean().await.expect("open before"))
        .await
        .expect("snapshot before");
    let handle = rig.open_faulty().await.expect("open faulty");
    operation(handle)
        .await
        .unwrap_or_else(|e| panic!("{name}: fault-free run failed: {e}"));
    let calls: BTreeMap<CallKind, u64> = CallKind::ALL
        .into_iter()
        .map(|kind| (kind, rig.fault.calls(kind)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let after = snapshot(&rig.open_clean().await.expect("open after"))
        .await
        .expect("snapshot after");
    (before, after, calls)
}

struct RunOutcome {
    fired: bool,
    succeeded: bool,
    orphans_cleaned: u64,
    rows_checked: u64,
}

async fn fault_run(
    backend: RigBackend,
    setup: &SetupFn,
    operation: &OperationFn,
    verify: &VerifyFn,
    point: FaultPoint,
    before: &RecordBatch,
    after: &RecordBatch,
) -> RunOutcome {
    let rig = FaultRig::new(backend).expect("rig");
    setup(rig.clone()).await.expect("setup");
    let handle = rig.open_faulty().await.expect("open faulty");
    rig.fault.fail_nth(point.kind, point.index, point.mode);
    let result = operation(handle).await;
    let fired = !rig.fault.fired().is_empty();
    rig.fault.reset();

    let mut rows_checked = 0u64;
    let state =
        snapshot(&rig.open_clean().await.unwrap_or_else(|e| {
            panic!("{point:?}: the dataset does not open after the fault: {e}")
        }))
        .await
        .unwrap_or_else(|e| panic!("{point:?}: the latest version is unreadable: {e}"));
    let succeeded = result.is_ok();
    match &result {
        Ok(_) => assert!(
            state == *after,
            "{point:?}: the operation succeeded but the rows are not the after state"
        ),
        Err(err) => {
            assert!(
                state == *before,
                "{point:?}: the operation failed ({err}) but the rows changed"
            );
            assert!(
                is_injected_fault(err as &(dyn std::error::Error + 'static)),
                "{point:?}: the error does not carry the injected fault: {err:?}"
            );
        }
    }
    rows_checked += state.num_rows() as u64;
    rows_checked += verify(rig.open_clean().await.expect("open for verify"))
        .await
        .unwrap_or_else(|e| panic!("{point:?}: verification failed: {e}"));

    let latest = rig.open_clean().await.expect("open for cleanup");
    let cleaned = cleanup_orphans(&latest, Duration::ZERO)
        .await
        .unwrap_or_else(|e| panic!("{point:?}: cleanup failed: {e}"));
    rows_checked += rig
        .check_every_version_readable()
        .await
        .unwrap_or_else(|e| panic!("{point:?}: a version is unreadable after cleanup: {e}"));

    if !succeeded {
        let retry = rig.open_faulty().await.expect("open for retry");
        operation(retry)
            .await
            .unwrap_or_else(|e| panic!("{point:?}: the retry failed: {e}"));
        let state = snapshot(&rig.open_clean().await.expect("open after retry"))
            .await
            .expect("snapshot after retry");
        assert!(
            state == *after,
            "{point:?}: after the retry the rows are not the after state"
        );
        rows_checked += state.num_rows() as u64;
        rows_checked += verify(rig.open_clean().await.expect("open for verify"))
            .await
            .unwrap_or_else(|e| panic!("{point:?}: verification after the retry failed: {e}"));
    }
    RunOutcome {
        fired,
        succeeded,
        orphans_cleaned: cleaned.deleted.len() as u64,
        rows_checked,
    }
}

/// `inner` behind object_store's `ThrottledStore`: every GET, PUT, LIST and
/// DELETE waits `wait` first, a remote store's latency simulated in memory
/// (round-trip tests and the latency benchmark). Open it with
/// [`DatasetStore::from_remote_object_store`].
pub fn with_latency(inner: Arc<dyn ObjectStore>, wait: Duration) -> Arc<dyn ObjectStore> {
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    Arc::new(ThrottledStore::new(
        inner,
        ThrottleConfig {
            wait_get_per_call: wait,
            wait_put_per_call: wait,
            wait_list_per_call: wait,
            wait_delete_per_call: wait,
            ..ThrottleConfig::default()
        },
    ))
}

/// Storage options that reach a local S3 test server at `endpoint` (moto
/// checks no signature, but requests are signed with dummy keys anyway:
/// unsigned conditional writes are refused).
pub fn s3_test_options(endpoint: &str) -> crate::io::StorageOptions {
    [
        ("aws_endpoint", endpoint),
        ("aws_region", "us-east-1"),
        ("allow_http", "true"),
        ("aws_access_key_id", "test"),
        ("aws_secret_access_key", "test"),
    ]
    .into_iter()
    .collect()
}

/// A fresh dataset URI under `name` on the test S3 server named by
/// `REFRACT_TEST_S3_ENDPOINT` (bucket `REFRACT_TEST_S3_BUCKET`, default
/// `refract-test`; `ci/test.sh` starts the server), with its options. `None`,
/// said loudly on stderr, when no server is configured; panics instead when
/// `REFRACT_TEST_S3_REQUIRED` is set (CI), so S3 tests never skip there.
pub fn s3_test_location(name: &str) -> Option<(String, crate::io::StorageOptions)> {
    let Ok(endpoint) = std::env::var("REFRACT_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var_os("REFRACT_TEST_S3_REQUIRED").is_none(),
            "REFRACT_TEST_S3_REQUIRED is set but REFRACT_TEST_S3_ENDPOINT is not"
        );
        eprintln!(
            "SKIPPED {name}: no S3 server (REFRACT_TEST_S3_ENDPOINT unset; ci/test.sh starts one)"
        );
        return None;
    };
    let bucket =
        std::env::var("REFRACT_TEST_S3_BUCKET").unwrap_or_else(|_| "refract-test".to_string());
    let uri = format!("s3://{bucket}/{name}-{}", uuid::Uuid::new_v4());
    Some((uri, s3_test_options(&endpoint)))
}

/// The account Azurite (and the legacy Azure Storage Emulator) serves.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";

/// The published, well-known key of [`AZURITE_ACCOUNT`] (not a secret:
/// <https://learn.microsoft.com/azure/storage/common/storage-use-azurite#well-known-storage-account-and-key>).
pub const AZURITE_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Storage options that reach Azurite's development account at `endpoint`
/// (its account URL, `http://127.0.0.1:PORT/devstoreaccount1`) with Shared
/// Key auth: the explicit account, key and endpoint keys a real account with a
/// custom endpoint uses, so nothing depends on `AZURITE_BLOB_STORAGE_URL`.
pub fn azure_test_options(endpoint: &str) -> crate::io::StorageOptions {
    [
        ("azure_storage_account_name", AZURITE_ACCOUNT),
        ("azure_storage_account_key", AZURITE_ACCOUNT_KEY),
        ("azure_storage_endpoint", endpoint),
        ("allow_http", "true"),
    ]
    .into_iter()
    .collect()
}

/// A fresh `az://` dataset URI under `name` on the Azurite blob service named
/// by `REFRACT_TEST_AZURE_ENDPOINT` (container `REFRACT_TEST_AZURE_CONTAINER`,
/// default `refract-test`; `ci/test.sh` starts the emulator), with its
/// options. `None`, said loudly on stderr, when no emulator is configured;
/// panics instead when `REFRACT_TEST_AZURE_REQUIRED` is set (CI).
pub fn azure_test_location(name: &str) -> Option<(String, crate::io::StorageOptions)> {
    let Ok(endpoint) = std::env::var("REFRACT_TEST_AZURE_ENDPOINT") else {
        assert!(
            std::env::var_os("REFRACT_TEST_AZURE_REQUIRED").is_none(),
            "REFRACT_TEST_AZURE_REQUIRED is set but REFRACT_TEST_AZURE_ENDPOINT is not"
        );
        eprintln!(
            "SKIPPED {name}: no Azure emulator (REFRACT_TEST_AZURE_ENDPOINT unset; ci/test.sh starts Azurite)"
        );
        return None;
    };
    let container = std::env::var("REFRACT_TEST_AZURE_CONTAINER")
        .unwrap_or_else(|_| "refract-test".to_string());
    let uri = format!("az://{container}/{name}-{}", uuid::Uuid::new_v4());
    Some((uri, azure_test_options(&endpoint)))
}

/// Lance's protobuf messages, for tests that forge stored versions.
pub use lance_table::format::pb;

/// The messages of a stored manifest, opened for a test to damage and
/// [`ManifestParts::seal`] again (with a valid Refract checksum, so what the
/// test changed is what the reader meets).
#[derive(Debug, Clone)]
pub struct ManifestParts {
    /// The manifest message.
    pub manifest: pb::Manifest,
    /// The index section.
    pub indices: Vec<pb::IndexMetadata>,
    /// The inline transaction.
    pub transaction: Option<pb::Transaction>,
    sidecar: crate::format::sidecar::Sidecar,
}

/// Opens stored manifest bytes (Refract's or another Lance writer's).
pub fn open_manifest(bytes: &[u8]) -> Result<ManifestParts> {
    let (sidecar, base) = crate::format::sidecar::open(bytes)?;
    let sections = crate::format::framing::unframe(bytes, base)?;
    Ok(ManifestParts {
        manifest: sections.manifest,
        indices: sections.indices,
        transaction: sections.transaction,
        sidecar: sidecar.unwrap_or_default(),
    })
}

impl ManifestParts {
    /// The stored bytes of these parts, with Refract's sidecar.
    pub fn seal(&self) -> bytes::Bytes {
        use prost::Message;
        let sidecar = self.sidecar.encode_to_vec();
        let lance = crate::format::framing::frame(
            crate::format::sidecar::sidecar_prefix_len(sidecar.len()),
            self.manifest.clone(),
            self.indices.clone(),
            self.transaction.as_ref(),
        );
        bytes::Bytes::from(crate::format::sidecar::seal(&sidecar, &lance))
    }

    /// The stored bytes of these parts as another Lance writer stores them:
    /// no sidecar, so no checksums.
    pub fn seal_without_sidecar(&self) -> bytes::Bytes {
        bytes::Bytes::from(crate::format::framing::frame(
            0,
            self.manifest.clone(),
            self.indices.clone(),
            self.transaction.as_ref(),
        ))
    }
}
