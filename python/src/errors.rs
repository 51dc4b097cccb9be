//! Refract errors as Python exceptions.
//!
//! The exception classes live in the pure-Python module `refract.errors`
//! (so they can also derive from the matching built-in exceptions, as
//! pylance's do); this module picks the class for an error kind and raises it
//! with the error's one-line `Display`, the same text the CLI prints.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use refract_core::Error;

/// The name in `refract.errors` of the exception class for `error`.
pub fn class_name(error: &Error) -> &'static str {
    match error {
        Error::InvalidInput { .. } => "InvalidInputError",
        Error::Corrupt { .. } => "CorruptError",
        Error::NotSupported { .. } => "NotSupportedError",
        Error::NotFound { .. } => "NotFoundError",
        Error::Conflict { .. } => "ConflictError",
        Error::PathEscape { .. } => "PathEscapeError",
        Error::OverBudget { .. } => "OverBudgetError",
        Error::External { .. } => "ExternalError",
        _ => "RefractError",
    }
}

/// `error` as an instance of its `refract.errors` class. A `ConflictError`
/// carries `retryable`.
pub fn to_py_err(py: Python<'_>, error: Error) -> PyErr {
    let message = error.to_string();
    let build = || -> PyResult<PyErr> {
        let module = py.import("refract.errors")?;
        let class = module.getattr(class_name(&error))?;
        let instance = class.call1((message.clone(),))?;
        if let Error::Conflict { retryable, .. } = &error {
            instance.setattr("retryable", *retryable)?;
        }
        Ok(PyErr::from_value(instance))
    };
    // Without the package around the extension (never in an installed
    // wheel) the message still reaches the caller.
    build().unwrap_or_else(|_| PyRuntimeError::new_err(message))
}

/// Converts a Refract result, raising its error as a Python exception.
pub trait IntoPyResult<T> {
    /// The value, or the error as its Python exception.
    fn py_result(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for refract_core::Result<T> {
    fn py_result(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|error| to_py_err(py, error))
    }
}
