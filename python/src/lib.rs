//! # refract-python
//!
//! The native module `refract._refract` behind the `refract` Python package:
//! datasets, scans, indices and every maintenance operation of Refract, with
//! Arrow data crossing zero-copy through the Arrow PyCapsule interface. The
//! pylance-shaped API (`refract.dataset`, `refract.write_dataset`,
//! `refract.optimize.Compaction`, ...) is the Python layer in
//! `python/refract/`; `docs/python.md` documents it.
//!
//! Every call that waits on storage releases the GIL; the async runtime is
//! per process (see [`runtime`]).

#![warn(missing_docs)]

pub mod arrow_io;
pub mod dataset;
pub mod errors;
pub mod index;
pub mod optimize;
pub mod runtime;

use pyo3::prelude::*;

/// The process id the async runtime was created in (None before first use).
#[pyfunction]
fn runtime_pid() -> Option<u32> {
    runtime::runtime_pid()
}

/// The `refract._refract` extension module.
#[pymodule]
fn _refract(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<dataset::PyDataset>()?;
    module.add_class::<arrow_io::ArrowStream>()?;
    module.add_class::<arrow_io::ArrowSchema>()?;
    module.add_function(wrap_pyfunction!(runtime_pid, module)?)?;
    module.add_function(wrap_pyfunction!(index::create_index_py, module)?)?;
    module.add_function(wrap_pyfunction!(index::optimize_indices_py, module)?)?;
    module.add_function(wrap_pyfunction!(index::drop_index_py, module)?)?;
    module.add_function(wrap_pyfunction!(index::list_indices_py, module)?)?;
    module.add_function(wrap_pyfunction!(index::query_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::compact_files_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::plan_compaction_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::describe_task_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::execute_task_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::describe_result_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::commit_compaction_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::remap_indices_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::trim_fri_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::describe_fri_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::partition_fragments_py, module)?)?;
    module.add_function(wrap_pyfunction!(optimize::maintain_py, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
