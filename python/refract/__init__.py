"""refract: Refract datasets from Python, shaped like pylance.

    >>> import pyarrow as pa, refract
    >>> ds = refract.write_dataset(pa.table({"id": [1, 2, 3]}), "/tmp/t")
    >>> ds.optimize.compact_files()
    >>> ds.to_table(filter="id > 1")

See ``docs/python.md`` for the API and its mapping to pylance's names.
"""

from __future__ import annotations

from . import _refract, optimize
from .dataset import (
    CleanupStats,
    Dataset,
    Fragment,
    LanceDataset,
    Scanner,
    Tags,
    dataset,
    write_dataset,
)
from .errors import (
    ConflictError,
    CorruptError,
    ExternalError,
    InvalidInputError,
    NotFoundError,
    NotSupportedError,
    OverBudgetError,
    PathEscapeError,
    RefractError,
)

__version__: str = _refract.__version__

__all__ = [
    "CleanupStats",
    "ConflictError",
    "CorruptError",
    "Dataset",
    "ExternalError",
    "Fragment",
    "InvalidInputError",
    "LanceDataset",
    "NotFoundError",
    "NotSupportedError",
    "OverBudgetError",
    "PathEscapeError",
    "RefractError",
    "Scanner",
    "Tags",
    "dataset",
    "optimize",
    "write_dataset",
]
