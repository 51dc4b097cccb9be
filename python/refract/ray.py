"""Distributed maintenance on Ray (``pip install refract[ray]``).

    import ray, refract.ray

    ray.init()                      # or ray.init(address="auto") on a cluster
    metrics = refract.ray.compact_files(
        "s3://bucket/table", {"target_rows_per_fragment": 1 << 20},
        storage_options={"aws_region": "us-east-1"}, commit_every=64)

The driver (this process) plans, commits and runs the index upkeep; each
compaction task is one Ray task (one CPU) that opens the table from object
storage and writes the task's new files. Retries, partial progress, orphan
cleanup and progress reporting are those of :mod:`refract.distributed`, whose
engine-neutral core this module runs through :class:`RayExecutor`.
"""

from __future__ import annotations

import datetime as _dt
import threading
from concurrent.futures import Future
from typing import Any, Callable, Dict, Optional, Sequence, Union

import ray as _ray

from . import distributed as _distributed
from .dataset import Dataset
from .distributed import DistributedCompactionError, Progress, execute_task
from .optimize import CompactionMetrics, CompactionOptions

__all__ = ["RayExecutor", "compact_files", "maintain", "DistributedCompactionError"]


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """The Ray task every submission runs: ``fn(*args)`` on a worker."""
    return fn(*args)


class RayExecutor:
    """A ``concurrent.futures``-shaped executor over Ray remote tasks:
    ``submit(fn, *args)`` starts a Ray task and returns a
    ``concurrent.futures.Future`` that one driver thread completes as the
    tasks finish (``ray.wait``).

    ``max_retries`` is Ray's own retry of a task whose worker died (0 by
    default: :func:`refract.distributed.compact_files` retries on the driver,
    where it counts failed attempts and cleans their orphans). Other
    ``remote_options`` (``num_cpus``, ``memory``, ``resources``,
    ``scheduling_strategy``, …) go to ``.options(...)``."""

    def __init__(self, max_retries: int = 0, num_cpus: float = 1, **remote_options: Any):
        if not _ray.is_initialized():
            _ray.init()
        self._remote = _ray.remote(_call).options(
            max_retries=max_retries, retry_exceptions=False, num_cpus=num_cpus, **remote_options
        )
        self._pending: Dict[Any, Future] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._poll, name="refract-ray-wait", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` as a Ray task; its future."""
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot submit to a shut-down RayExecutor")
            ref = self._remote.remote(fn, *args)
            future: Future = Future()
            self._pending[ref] = future
            self._cond.notify()
        return future

    def _poll(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                refs = list(self._pending)
            # The timeout only bounds how late refs submitted meanwhile join the wait.
            ready, _ = _ray.wait(refs, num_returns=1, timeout=1.0)
            for ref in ready:
                with self._cond:
                    future = self._pending.pop(ref)
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(_ray.get(ref))
                except BaseException as error:  # a Ray or task error, as the future's
                    future.set_exception(error)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting tasks; ``cancel_futures`` cancels the ones not
        finished; ``wait`` waits for the rest."""
        with self._cond:
            self._closed = True
            if cancel_futures or not wait:
                for ref, future in list(self._pending.items()):
                    if future.cancel():
                        _ray.cancel(ref, force=False)
                        del self._pending[ref]
            else:
                for ref, future in list(self._pending.items()):
                    if future.cancelled():
                        _ray.cancel(ref, force=False)
                        del self._pending[ref]
            self._cond.notify()
        if wait:
            self._thread.join()

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _cluster_cpus() -> int:
    return max(1, int(_ray.cluster_resources().get("CPU", 1)))


def compact_files(
    uri: Union[str, Dataset],
    options: Optional[CompactionOptions] = None,
    storage_options: Optional[Dict[str, str]] = None,
    num_workers: Optional[int] = None,
    commit_every: Optional[int] = None,
    *,
    max_attempts: int = 3,
    progress: Union[None, bool, Callable[[Progress], None]] = None,
    execute: Callable[..., Any] = execute_task,
    cleanup_orphans_older_than: Optional[_dt.timedelta] = _dt.timedelta(hours=1),
) -> CompactionMetrics:
    """Compact the table at ``uri`` with one Ray task per compaction task;
    the same result, rows and order as ``Dataset.optimize.compact_files``
    with the same ``options``.

    At most ``num_workers`` tasks run at a time (default: the cluster's
    CPUs). Results are committed on the driver every ``commit_every`` as
    they arrive (None: once at the end). A task whose Ray task raised, whose
    worker died or whose result was lost is retried up to ``max_attempts``
    attempts. Connects with ``ray.init()`` when Ray is not initialized.
    Other arguments and the errors are those of
    :func:`refract.distributed.compact_files`."""
    if not _ray.is_initialized():
        _ray.init()
    return _distributed.compact_files(
        uri,
        options,
        storage_options,
        executor=RayExecutor,
        commit_every=commit_every,
        max_attempts=max_attempts,
        progress=progress,
        execute=execute,
        max_in_flight=num_workers or _cluster_cpus(),
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
    """Distributed compaction on Ray (:func:`compact_files`), then
    ``remap_indices`` and ``trim_fri`` on the driver: see
    :func:`refract.distributed.maintain` (the same options, report and
    errors); ``compact_kwargs`` go to :func:`compact_files`."""
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
