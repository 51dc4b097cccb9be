"""Distributed maintenance on Dask (``pip install refract[dask]``).

    from distributed import Client
    import refract.dask

    client = Client()               # or Client("tcp://scheduler:8786") on a cluster
    metrics = refract.dask.compact_files(
        "s3://bucket/table", {"target_rows_per_fragment": 1 << 20},
        storage_options={"aws_region": "us-east-1"}, commit_every=64)

The driver (this process) plans, commits and runs the index upkeep; each
compaction task is one Dask task that opens the table from object storage
and writes the task's new files. Retries, partial progress, orphan cleanup
and progress reporting are those of :mod:`refract.distributed`, whose
engine-neutral core this module runs through :class:`DaskExecutor`.

A worker that dies in the middle of a task is handled by Dask's scheduler
first: it runs the task again elsewhere (up to its
``distributed.scheduler.allowed-failures``) without telling the client, so
the driver neither counts that attempt nor cleans its files in this run;
they are orphans for the next cleanup (``refract cleanup --orphans``, or the
next run with a failed attempt). Past that limit the task fails with
``KilledWorker`` and the driver retries it as any failed attempt.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Callable, Dict, Optional, Sequence, Union

import distributed as _dask_distributed

from . import distributed as _distributed
from .dataset import Dataset
from .distributed import DistributedCompactionError, Progress, execute_task
from .optimize import CompactionMetrics, CompactionOptions

__all__ = ["DaskExecutor", "compact_files", "maintain", "DistributedCompactionError"]


class DaskExecutor:
    """The executor :func:`refract.distributed.compact_files` needs, over a
    Dask ``distributed.Client``: ``submit(fn, *args)`` is
    ``client.submit(fn, *args, pure=False)``, whose Dask future has the
    ``add_done_callback``, ``result``, ``exception`` and ``cancel`` the core
    uses.

    ``pure=False`` is why the adapter exists: the client's default
    (``pure=True``) names a task after its function and arguments, so the
    resubmission of a failed attempt would return the failed future again
    instead of running it. ``submit_options`` (``resources``, ``workers``,
    ``priority``, …) go to every ``client.submit``. ``client`` defaults to
    the current one (``distributed.get_client()``). The client is not
    closed here."""

    def __init__(self, client: Optional[Any] = None, **submit_options: Any):
        if "pure" in submit_options or "key" in submit_options:
            raise ValueError("DaskExecutor names every submission itself (pure=False)")
        self.client = client if client is not None else _dask_distributed.get_client()
        self._options = submit_options

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` as a Dask task; its Dask future."""
        return self.client.submit(fn, *args, pure=False, **self._options)


def _worker_threads(client: Any) -> int:
    return max(1, sum(client.nthreads().values()))


def compact_files(
    uri: Union[str, Dataset],
    options: Optional[CompactionOptions] = None,
    storage_options: Optional[Dict[str, str]] = None,
    num_workers: Optional[int] = None,
    commit_every: Optional[int] = None,
    *,
    client: Optional[Any] = None,
    max_attempts: int = 3,
    progress: Union[None, bool, Callable[[Progress], None]] = None,
    execute: Callable[..., Any] = execute_task,
    cleanup_orphans_older_than: Optional[_dt.timedelta] = _dt.timedelta(hours=1),
) -> CompactionMetrics:
    """Compact the table at ``uri`` with one Dask task per compaction task
    on ``client`` (default: the current client); the same result, rows and
    order as ``Dataset.optimize.compact_files`` with the same ``options``.

    At most ``num_workers`` tasks are submitted at a time (default: the
    worker threads of the cluster when the run starts). Results are
    committed on the driver every ``commit_every`` as they arrive (None:
    once at the end). A task that raised or failed with ``KilledWorker`` is
    retried up to ``max_attempts`` attempts. Other arguments and the errors
    are those of :func:`refract.distributed.compact_files`; raises
    ``ValueError`` without a client."""
    executor = DaskExecutor(client)
    return _distributed.compact_files(
        uri,
        options,
        storage_options,
        executor=executor,
        commit_every=commit_every,
        max_attempts=max_attempts,
        progress=progress,
        execute=execute,
        max_in_flight=num_workers or _worker_threads(executor.client),
        cleanup_orphans_older_than=cleanup_orphans_older_than,
    )


def maintain(
    uri: Union[str, Dataset],
    options: Optional[CompactionOptions] = None,
    storage_options: Optional[Dict[str, str]] = None,
    num_workers: Optional[int] = None,
    commit_every: Optional[int] = None,
    *,
    index_names: Optional[Sequence[str]] = None,
    budget_bytes: Optional[int] = None,
    **compact_kwargs: Any,
) -> Dict[str, Any]:
    """Distributed compaction on Dask (:func:`compact_files`), then
    ``remap_indices`` and ``trim_fri`` on the driver: see
    :func:`refract.distributed.maintain` (the same options, report and
    errors); ``compact_kwargs`` (``client``, …) go to :func:`compact_files`."""
    return _distributed.maintain(
        uri,
        options,
        storage_options,
        index_names=index_names,
        budget_bytes=budget_bytes,
        compact=compact_files,
        num_workers=num_workers,
        commit_every=commit_every,
        **compact_kwargs,
    )
