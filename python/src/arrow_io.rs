//! Arrow data across the boundary through the Arrow PyCapsule interface
//! (`__arrow_c_stream__`, `__arrow_c_schema__`): zero-copy in both
//! directions, and no dependency on a pyarrow build.

use std::ffi::CString;
use std::sync::{Arc, Mutex};

use arrow::error::ArrowError;
use arrow::ffi::FFI_ArrowSchema;
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow::record_batch::{RecordBatchIterator, RecordBatchReader};
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use futures::StreamExt;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use tokio::runtime::Runtime;

const STREAM_CAPSULE: &str = "arrow_array_stream";
const SCHEMA_CAPSULE: &str = "arrow_schema";

fn capsule_name(name: &str) -> PyResult<CString> {
    CString::new(name).map_err(|err| PyValueError::new_err(err.to_string()))
}

/// Reads the Arrow stream `data` exports through `__arrow_c_stream__`.
///
/// The stream is moved out of the capsule (the capsule's copy is marked
/// released), so the reader owns it.
pub fn import_stream(data: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    if !data.hasattr("__arrow_c_stream__")? {
        return Err(PyTypeError::new_err(format!(
            "expected an object with __arrow_c_stream__ (a pyarrow Table, RecordBatch or RecordBatchReader), got {}",
            data.get_type().name()?
        )));
    }
    let capsule = data.call_method0("__arrow_c_stream__")?;
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__arrow_c_stream__ did not return a PyCapsule"))?;
    let name = capsule_name(STREAM_CAPSULE)?;
    let pointer = capsule.pointer_checked(Some(name.as_c_str()))?;
    // SAFETY: the capsule is named "arrow_array_stream", so by the Arrow
    // PyCapsule interface it points to a valid FFI_ArrowArrayStream; `from_raw`
    // moves it out and leaves a released stream behind, which the capsule's
    // destructor then ignores.
    let stream = unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr().cast()) };
    ArrowArrayStreamReader::try_new(stream)
        .map_err(|err| PyValueError::new_err(format!("cannot read the Arrow stream: {err}")))
}

/// Where a streaming reader leaves the Refract error that ended it: the C
/// stream interface carries only a message, so `ArrowStream::take_error`
/// hands the typed error to Python afterwards.
pub type FailureSlot = Arc<Mutex<Option<refract_core::Error>>>;

/// Batches pulled from an async scan stream by blocking on the runtime (the
/// consumer — pyarrow — calls in without the GIL).
pub struct BlockingReader {
    schema: SchemaRef,
    stream: BoxStream<'static, refract_core::Result<RecordBatch>>,
    runtime: Arc<Runtime>,
    failure: FailureSlot,
}

impl BlockingReader {
    /// A reader of `stream`, whose batches have `schema`.
    pub fn new(
        schema: SchemaRef,
        stream: BoxStream<'static, refract_core::Result<RecordBatch>>,
        runtime: Arc<Runtime>,
    ) -> Self {
        Self {
            schema,
            stream,
            runtime,
            failure: FailureSlot::default(),
        }
    }
}

impl Iterator for BlockingReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.runtime.block_on(self.stream.next())? {
            Ok(batch) => Some(Ok(batch)),
            Err(error) => {
                // The consumer sees the CLI's one-line message; the typed
                // error waits in the slot.
                let message = ArrowError::ExternalError(error.to_string().into());
                *lock(&self.failure) = Some(error);
                Some(Err(message))
            }
        }
    }
}

impl RecordBatchReader for BlockingReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves the data whole (a plain store).
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A one-shot Arrow stream for Python: `pyarrow.RecordBatchReader.from_stream(s)`
/// or `pyarrow.table(s)` consume it through `__arrow_c_stream__`.
#[pyclass(module = "refract._refract", name = "ArrowStream", frozen)]
pub struct ArrowStream {
    schema: SchemaRef,
    reader: Mutex<Option<Box<dyn RecordBatchReader + Send>>>,
    failure: FailureSlot,
}

impl ArrowStream {
    /// A stream that reads `reader` as the consumer pulls, keeping the error
    /// that ends it for `take_error`.
    pub fn streaming(reader: BlockingReader) -> Self {
        let failure = reader.failure.clone();
        Self {
            schema: reader.schema(),
            reader: Mutex::new(Some(Box::new(reader))),
            failure,
        }
    }

    /// A stream over batches already in memory.
    pub fn from_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema.clone());
        Self {
            schema,
            reader: Mutex::new(Some(Box::new(reader))),
            failure: FailureSlot::default(),
        }
    }
}

#[pymethods]
impl ArrowStream {
    /// Exports the stream (once) as an "arrow_array_stream" capsule.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // Schema requests are optional in the protocol; the stream keeps its own.
        let _ = requested_schema;
        let reader = lock(&self.reader)
            .take()
            .ok_or_else(|| PyValueError::new_err("the Arrow stream was already consumed"))?;
        let stream = FFI_ArrowArrayStream::new(reader);
        // Dropping an unconsumed FFI_ArrowArrayStream releases it.
        PyCapsule::new(py, stream, Some(capsule_name(STREAM_CAPSULE)?))
    }

    /// The stream's schema as an "arrow_schema" capsule.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        export_schema(py, &self.schema)
    }

    /// The typed exception (`refract.errors`) of the error that ended the
    /// stream, once; `None` when it has not failed.
    fn take_error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let error = lock(&self.failure).take()?;
        let exception = crate::errors::to_py_err(py, error);
        Some(exception.value(py).clone().into_any().unbind())
    }
}

/// A schema for Python: `pyarrow.schema(s)` reads it through `__arrow_c_schema__`.
#[pyclass(module = "refract._refract", name = "ArrowSchema", frozen)]
pub struct ArrowSchema {
    schema: SchemaRef,
}

impl ArrowSchema {
    /// Wraps `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        Self { schema }
    }
}

#[pymethods]
impl ArrowSchema {
    /// The schema as an "arrow_schema" capsule.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        export_schema(py, &self.schema)
    }
}

fn export_schema<'py>(py: Python<'py>, schema: &SchemaRef) -> PyResult<Bound<'py, PyCapsule>> {
    let ffi = FFI_ArrowSchema::try_from(schema.as_ref())
        .map_err(|err| PyValueError::new_err(format!("cannot export the schema: {err}")))?;
    // Dropping an unconsumed FFI_ArrowSchema releases it.
    PyCapsule::new(py, ffi, Some(capsule_name(SCHEMA_CAPSULE)?))
}
