"""Exceptions raised by refract, one class per Refract error kind.

Every message is the Rust error's one-line text, identical to what the
``refract`` CLI prints. Where a built-in exception means the same thing the
class also derives from it, as pylance's errors do (``InvalidInputError`` is a
``ValueError``, ``NotFoundError`` a ``FileNotFoundError``, ...), so code
written against pylance keeps catching them.
"""

from __future__ import annotations

__all__ = [
    "RefractError",
    "InvalidInputError",
    "CorruptError",
    "NotSupportedError",
    "NotFoundError",
    "ConflictError",
    "PathEscapeError",
    "OverBudgetError",
    "ExternalError",
]


class RefractError(Exception):
    """Base class of every error refract raises for the engine."""


class InvalidInputError(RefractError, ValueError):
    """A caller-supplied argument or option is invalid; the message names it."""


class CorruptError(RefractError):
    """Stored bytes are corrupt, truncated or inconsistent."""


class NotSupportedError(RefractError, NotImplementedError):
    """The operation or a stored feature is not supported by this client."""


class NotFoundError(RefractError, FileNotFoundError):
    """A dataset, version, tag, index, fragment or file does not exist."""


class ConflictError(RefractError):
    """A concurrent commit won the race.

    ``retryable`` tells whether running the operation again against the new
    latest version may succeed.
    """

    retryable: bool = False

    def __reduce__(self):  # keep ``retryable`` across pickling (process pools)
        return (_conflict, (str(self), self.retryable))


def _conflict(message: str, retryable: bool) -> ConflictError:
    error = ConflictError(message)
    error.retryable = retryable
    return error


class PathEscapeError(RefractError, ValueError):
    """A path taken from metadata or input leaves the dataset root."""


class OverBudgetError(RefractError):
    """A materialized remap would exceed its memory budget (declined before allocating)."""


class ExternalError(RefractError, OSError):
    """An I/O or library failure (object store, Lance, Arrow); the message says what was being done."""
