"""Compaction fanned out over any executor: plan on the driver, execute each
task on a worker, commit the results on the driver as they arrive.

The orchestration is engine-neutral. An *executor* is anything with
``submit(fn, *args) -> future`` whose futures have ``add_done_callback``,
``result()`` and ``exception()``: ``concurrent.futures`` executors, Dask's
:class:`refract.dask.DaskExecutor` over a Dask ``distributed.Client``, or
:class:`refract.ray.RayExecutor`::

    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing, refract.distributed as rd

    metrics = rd.compact_files(
        "s3://bucket/table", {"target_rows_per_fragment": 1 << 20},
        storage_options={"aws_region": "us-east-1"},
        executor=ProcessPoolExecutor(8, mp_context=multiprocessing.get_context("spawn")),
        commit_every=64,
    )

What runs where: the driver plans (one manifest read), submits one picklable
call per task, commits; a worker opens the table from storage at the plan's
read version and writes the task's new data files (nothing is published
there). Results are small (ids, file paths, the surviving-rows bitmap).

Failures: a task whose call fails (it raised, its worker died, its result was
lost) is submitted again, up to ``max_attempts`` calls in all. The files a
failed attempt wrote before dying are not named anywhere the driver can see
(data files have random names), so they are left to
:meth:`cleanup_orphans`'s age rule: after a run in which an attempt failed,
the driver deletes the unreferenced files older than
``cleanup_orphans_older_than`` (one hour by default), which removes the
leftovers of earlier runs and, at the latest on the next run, this run's.
A task that fails ``max_attempts`` times does not stop the others: their
results are committed and then :class:`DistributedCompactionError` says which
tasks were not committed. A commit that fails stops the run (what earlier
batches committed stays).
"""

from __future__ import annotations

import datetime as _dt
import logging
import multiprocessing
import os
import queue
import sys
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Optional,
    Sequence,
    Union,
)

from .dataset import Dataset, dataset
from .errors import ConflictError, RefractError
from .optimize import (
    Compaction,
    CompactionMetrics,
    CompactionOptions,
    CompactionTask,
    RewriteResult,
)

__all__ = [
    "DistributedCompactionError",
    "Progress",
    "TextProgress",
    "cleanup_orphans",
    "compact_files",
    "execute_task",
    "maintain",
]

_log = logging.getLogger("refract.distributed")

#: What an attempt of one task calls on a worker: ``(uri, storage_options,
#: task) -> RewriteResult``. Must pickle (a module-level function does).
ExecuteFn = Callable[[str, Optional[Dict[str, str]], CompactionTask], RewriteResult]

#: How many times a retryable commit conflict is retried before giving up.
COMMIT_CONFLICT_RETRIES = 5


def execute_task(
    uri: str, storage_options: Optional[Dict[str, str]], task: CompactionTask
) -> RewriteResult:
    """Run one compaction task on this process: open the table at the task's
    read version from storage and write its new files (nothing is
    committed). The default callable the workers run."""
    return task.execute(dataset(uri, version=task.read_version, storage_options=storage_options))


def cleanup_orphans(ds: Dataset, older_than: _dt.timedelta) -> List[str]:
    """Delete the files under ``data/``, ``_deletions/``, ``_indices/`` and
    ``_fri/`` that no committed version references and that are older than
    ``older_than`` (``refract cleanup --orphans``); returns their paths.

    Younger files may belong to a write still in flight (an append, another
    compaction's workers): keep ``older_than`` above the longest write."""
    return list(ds._native.cleanup_orphans(older_than.total_seconds()))


@dataclass(frozen=True)
class Progress:
    """A snapshot of a distributed run, given to the ``progress`` callback."""

    #: Tasks in the plan.
    total: int
    #: Tasks whose result arrived.
    done: int
    #: Tasks whose result is committed.
    committed: int
    #: Rows read by the finished tasks.
    rows: int
    #: Failed attempts so far (each retried, or counted in ``failed``).
    failed_attempts: int
    #: Tasks given up after ``max_attempts``.
    failed: int
    #: Seconds since the first task was submitted.
    elapsed: float

    @property
    def rows_per_second(self) -> float:
        """Rows read per second of wall time."""
        return self.rows / self.elapsed if self.elapsed > 0 else 0.0


class TextProgress:
    """A one-line progress display on a text stream (stderr by default):
    ``compact 12/200 tasks, 3 committed, 1.2e+05 rows/s``. Redraws in place
    on a terminal; elsewhere prints at most one line per ``interval``
    seconds, and the last one."""

    def __init__(self, stream: Any = None, interval: float = 1.0):
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = interval
        # None until the first line: it always prints, however long the
        # machine has been up (the monotonic clock may start near zero).
        self._last: Optional[float] = None

    def __call__(self, p: Progress) -> None:
        final = p.done + p.failed >= p.total and p.committed + p.failed >= p.total
        now = time.monotonic()
        throttled = self._last is not None and now - self._last < self._interval
        if throttled and not final and not self._tty:
            return
        self._last = now
        line = (
            f"compact {p.done}/{p.total} tasks, {p.committed} committed, "
            f"{p.rows_per_second:,.0f} rows/s"
        )
        if p.failed_attempts:
            line += f", {p.failed_attempts} failed attempts"
        if p.failed:
            line += f", {p.failed} tasks failed"
        if self._tty:
            self._stream.write("\r" + line + ("\n" if final else ""))
        else:
            self._stream.write(line + "\n")
        self._stream.flush()


class DistributedCompactionError(RefractError):
    """A distributed compaction that did not commit every task.

    What was committed stays committed. ``uncommitted_tasks`` lists the task
    indices that were not; ``results`` holds those whose execution succeeded
    (commit them later with ``Compaction.commit``, or leave their files to
    the orphan cleanup); ``errors`` the last error of each failed task (or of
    the commit); ``metrics`` what was committed."""

    def __init__(
        self,
        message: str,
        *,
        committed_tasks: Sequence[int],
        uncommitted_tasks: Sequence[int],
        results: Sequence[RewriteResult],
        errors: Dict[int, BaseException],
        metrics: CompactionMetrics,
    ):
        super().__init__(message)
        self.committed_tasks: List[int] = sorted(committed_tasks)
        self.uncommitted_tasks: List[int] = sorted(uncommitted_tasks)
        self.results: List[RewriteResult] = list(results)
        self.errors: Dict[int, BaseException] = dict(errors)
        self.metrics: CompactionMetrics = metrics

    def __reduce__(self):
        return (
            _rebuild_error,
            (
                self.args[0],
                self.committed_tasks,
                self.uncommitted_tasks,
                self.results,
                {k: RefractError(repr(v)) for k, v in self.errors.items()},
                self.metrics,
            ),
        )


def _rebuild_error(message, committed, uncommitted, results, errors, metrics):
    return DistributedCompactionError(
        message,
        committed_tasks=committed,
        uncommitted_tasks=uncommitted,
        results=results,
        errors=errors,
        metrics=metrics,
    )


def _spawn_pool() -> Executor:
    """The default executor: one spawned process per CPU."""
    return ProcessPoolExecutor(os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn"))


@dataclass
class _Run:
    """Mutable state of one run (driver side only)."""

    total: int
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    committed: int = 0
    rows: int = 0
    failed_attempts: int = 0
    failed: int = 0

    def snapshot(self) -> Progress:
        return Progress(
            self.total,
            self.done,
            self.committed,
            self.rows,
            self.failed_attempts,
            self.failed,
            time.monotonic() - self.started,
        )


def _add(a: CompactionMetrics, b: CompactionMetrics) -> CompactionMetrics:
    return CompactionMetrics(
        a.fragments_removed + b.fragments_removed,
        a.fragments_added + b.fragments_added,
        a.files_removed + b.files_removed,
        a.files_added + b.files_added,
        b.committed_version if b.committed_version is not None else a.committed_version,
    )


def _commit(read: Dataset, batch: List[RewriteResult]) -> CompactionMetrics:
    """Commit one batch from a handle at the plan's read version (so the
    engine checks every result against the version it read without
    reloading it per result); retryable conflicts are retried. The batch is
    committed in plan order, so new fragments get the ids a single-process
    run gives them."""
    batch = sorted(batch, key=lambda r: r.task_index)
    for attempt in range(COMMIT_CONFLICT_RETRIES + 1):
        handle = Dataset(read._native, read._storage_options)
        try:
            return Compaction.commit(handle, batch)
        except ConflictError as err:
            if not err.retryable or attempt == COMMIT_CONFLICT_RETRIES:
                raise
            _log.info("commit conflict (%s); retrying", err)
    raise AssertionError("unreachable")


def compact_files(
    uri: Union[str, Dataset],
    options: Optional[CompactionOptions] = None,
    storage_options: Optional[Dict[str, str]] = None,
    executor: Union[Any, Callable[[], Any], None] = None,
    commit_every: Optional[int] = None,
    max_attempts: int = 3,
    progress: Union[None, bool, Callable[[Progress], None]] = None,
    *,
    execute: ExecuteFn = execute_task,
    max_in_flight: Optional[int] = None,
    cleanup_orphans_older_than: Optional[_dt.timedelta] = _dt.timedelta(hours=1),
) -> CompactionMetrics:
    """Compact the table at ``uri`` with its tasks executed by ``executor``;
    the same result, rows and order as ``Dataset.optimize.compact_files``
    with the same ``options`` (``refract.optimize.OPTION_NAMES``).

    ``executor`` is an executor (``submit(fn, *args)``; see the module
    docs) or a zero-argument factory of one. With a factory (the default is
    one spawned process per CPU) an executor that breaks, as a
    ``ProcessPoolExecutor`` does when a worker dies, is replaced and the
    lost tasks resubmitted; a given executor is used as is and not shut down.

    Results are committed on the driver, every ``commit_every`` results as
    they arrive (None: once, when all have arrived); each commit is verified
    by the engine as ``Compaction.commit`` does. A task is attempted at most
    ``max_attempts`` times. ``progress``: a callable given a
    :class:`Progress` after every arrival and commit, True for a
    :class:`TextProgress` on stderr, None for one only when stderr is a
    terminal, False for none. ``execute`` is what a worker calls per task
    (default :func:`execute_task`; it must pickle). ``max_in_flight`` caps
    the tasks submitted at a time. After a run with a failed attempt,
    unreferenced files older than ``cleanup_orphans_older_than`` are deleted
    (None: never).

    Returns the summed metrics of the commits (``committed_version`` the
    last). Raises :class:`DistributedCompactionError` when a task or a
    commit failed; what was committed stays.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if commit_every is not None and commit_every < 1:
        raise ValueError("commit_every must be at least 1 (or None)")
    if isinstance(uri, Dataset):
        storage_options = storage_options or uri._storage_options
        uri = uri.uri
    read = dataset(uri, storage_options=storage_options)
    plan = Compaction.plan(read, options)
    if not plan.tasks:
        return CompactionMetrics(0, 0, 0, 0, None)
    if read.version != plan.read_version:
        read = dataset(uri, version=plan.read_version, storage_options=storage_options)
    if progress is None:
        progress = TextProgress() if sys.stderr.isatty() else False
    elif progress is True:
        progress = TextProgress()
    report: Callable[[Progress], None] = progress if progress else (lambda _p: None)

    factory: Optional[Callable[[], Any]]
    if executor is None:
        factory, pool = _spawn_pool, _spawn_pool()
    elif hasattr(executor, "submit") and not isinstance(executor, type):
        factory, pool = None, executor
    else:
        factory, pool = executor, executor()

    tasks = {t.task_index: t for t in plan.tasks}
    waiting = list(reversed(plan.tasks))  # pop() gives plan order
    attempts: Dict[int, int] = {i: 0 for i in tasks}
    in_flight: Dict[int, Any] = {}  # task index -> future of its current attempt
    generation = 0  # bumped whenever the executor is replaced
    arrived: "queue.Queue[tuple]" = queue.Queue()
    ready: List[RewriteResult] = []
    committed: List[int] = []
    failed: Dict[int, BaseException] = {}
    metrics = CompactionMetrics(0, 0, 0, 0, None)
    run = _Run(len(tasks))
    limit = max_in_flight or len(tasks)

    def submit(task: CompactionTask) -> None:
        attempts[task.task_index] += 1
        try:
            future = pool.submit(execute, uri, storage_options, task)
        except (BrokenProcessPool, RuntimeError):
            if factory is None:
                raise
            _replace_pool()
            future = pool.submit(execute, uri, storage_options, task)
        in_flight[task.task_index] = future
        index, made_by = task.task_index, generation
        future.add_done_callback(lambda f, i=index, g=made_by: arrived.put((i, g, f)))

    def _replace_pool() -> None:
        nonlocal pool, generation
        _log.warning("the executor broke; starting a new one")
        generation += 1
        try:
            pool.shutdown(wait=False, cancel_futures=True)
        except TypeError:  # Python < 3.9 signature, or another executor
            pool.shutdown(wait=False)
        pool = factory()

    def fill() -> None:
        while waiting and len(in_flight) < limit:
            submit(waiting.pop())

    def commit_ready() -> None:
        nonlocal metrics
        batch = list(ready)
        metrics = _add(metrics, _commit(read, batch))
        ready.clear()
        committed.extend(r.task_index for r in batch)
        run.committed += len(batch)
        report(run.snapshot())

    try:
        fill()
        while in_flight:
            index, made_by, future = arrived.get()
            if in_flight.get(index) is not future:
                continue  # a stale attempt (already resubmitted)
            del in_flight[index]
            error = future.exception()
            if error is None:
                result = future.result()
                ready.append(result)
                run.done += 1
                run.rows += result.rows_read
                report(run.snapshot())
                if commit_every is not None and len(ready) >= commit_every:
                    commit_ready()
            else:
                run.failed_attempts += 1
                _log.warning(
                    "task %d attempt %d/%d failed: %s",
                    index,
                    attempts[index],
                    max_attempts,
                    _brief(error),
                )
                if (
                    isinstance(error, BrokenProcessPool)
                    and factory is not None
                    and made_by == generation
                ):
                    # Every task in flight on the broken pool is lost with it
                    # (and arrives here as a failed attempt).
                    _replace_pool()
                if attempts[index] < max_attempts:
                    submit(tasks[index])
                else:
                    failed[index] = error
                    run.failed += 1
                    report(run.snapshot())
            fill()
        if ready:
            commit_ready()
    except BaseException as error:
        for future in in_flight.values():
            future.cancel()
        not_committed = sorted(set(tasks) - set(committed))
        executed = list(ready)
        errors = dict(failed)
        for r in executed:
            errors.setdefault(r.task_index, error)
        raise DistributedCompactionError(
            f"distributed compaction stopped after committing {len(committed)} of "
            f"{len(tasks)} tasks: {_brief(error)}; not committed: tasks {_ranges(not_committed)}",
            committed_tasks=committed,
            uncommitted_tasks=not_committed,
            results=executed,
            errors=errors,
            metrics=metrics,
        ) from error
    finally:
        if factory is not None:
            pool.shutdown(wait=True)
        if run.failed_attempts and cleanup_orphans_older_than is not None:
            try:
                removed = cleanup_orphans(read, cleanup_orphans_older_than)
                _log.info("removed %d orphaned files", len(removed))
            except RefractError as err:  # never mask the run's outcome
                _log.warning("orphan cleanup failed: %s", err)
    if failed:
        not_committed = sorted(failed)
        raise DistributedCompactionError(
            f"distributed compaction committed {len(committed)} of {len(tasks)} tasks; "
            f"tasks {_ranges(not_committed)} failed {max_attempts} times "
            f"(last error of task {not_committed[0]}: {_brief(failed[not_committed[0]])})",
            committed_tasks=committed,
            uncommitted_tasks=not_committed,
            results=[],
            errors=failed,
            metrics=metrics,
        )
    return metrics


def maintain(
    uri: Union[str, Dataset],
    options: Optional[CompactionOptions] = None,
    storage_options: Optional[Dict[str, str]] = None,
    *,
    index_names: Optional[Sequence[str]] = None,
    budget_bytes: Optional[int] = None,
    compact: Callable[..., CompactionMetrics] = compact_files,
    **compact_kwargs: Any,
) -> Dict[str, Any]:
    """Distributed compaction, then ``remap_indices`` and ``trim_fri`` on the
    driver (they read and write little and must not run concurrently on one
    table).

    ``compact(uri, options, storage_options, **compact_kwargs)`` runs the
    compaction: :func:`compact_files` by default, or the Ray or Dask one.
    ``options`` default to ``defer_index_remap=True``, so the commits only
    record the rewrites in the fragment reuse index and the remap rewrites
    each index segment once at the end. Returns ``{"compaction":
    CompactionMetrics, "remap": report, "trim": report, "final_version":
    int}``.

    Raises what ``compact`` raises (:class:`DistributedCompactionError`),
    then what the remap and the trim raise (:class:`RefractError`)."""
    options = dict(options or {})
    options.setdefault("defer_index_remap", True)
    if isinstance(uri, Dataset):
        storage_options = storage_options or uri._storage_options
        uri = uri.uri
    metrics = compact(uri, options, storage_options, **compact_kwargs)
    ds = dataset(uri, storage_options=storage_options)
    remap = ds.remap_indices(index_names, budget_bytes=budget_bytes)
    trim = ds.trim_fri()
    return {"compaction": metrics, "remap": remap, "trim": trim, "final_version": ds.version}


def _ranges(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2, 5"``."""
    parts: List[str] = []
    start = prev = None
    for i in sorted(indices):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
        start = prev = i
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ", ".join(parts) or "none"


def _brief(error: BaseException, limit: int = 500) -> str:
    """``Type: first line of the message`` (remote errors carry whole tracebacks)."""
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0] if text else ''}"
    return line if len(line) <= limit else line[: limit - 1] + "…"
