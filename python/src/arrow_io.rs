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

/// Batches pulled from an async scan stream by blocking on the runtime (the
/// consumer — pyarrow — calls in without the GIL).
pub struct BlockingReader {
    schema: SchemaRef,
    stream: BoxStream<'static, refract_core::Result<RecordBatch>>,
    runtime: Arc<Runtime>,
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
        }
    }
}

impl Iterator for BlockingReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.runtime
            .block_on(self.stream.next())
            .map(|batch| batch.map_err(|err| ArrowError::ExternalError(Box::new(err))))
    }
}

impl RecordBatchReader for BlockingReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// A one-shot Arrow stream for Python: `pyarrow.RecordBatchReader.from_stream(s)`
/// or `pyarrow.table(s)` consume it through `__arrow_c_stream__`.
#[pyclass(module = "refract._refract", name = "ArrowStream", frozen)]
pub struct ArrowStream {
    schema: SchemaRef,
    reader: Mutex<Option<Box<dyn RecordBatchReader + Send>>>,
}

impl ArrowStream {
    /// A stream over `reader`.
    pub fn new(reader: Box<dyn RecordBatchReader + Send>) -> Self {
        Self {
            schema: reader.schema(),
            reader: Mutex::new(Some(reader)),
        }
    }

    /// A stream over batches already in memory.
    pub fn from_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
        Self::new(Box::new(reader))
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
        let reader = self
            .reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
