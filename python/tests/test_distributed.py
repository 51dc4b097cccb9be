"""refract.distributed: compaction fanned out over an executor (spawned
ProcessPoolExecutor workers, or in-test executors), against the S3 server."""

import datetime as dt
import io
import json
import logging
import multiprocessing
import os
import random
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import pytest

import refract
from refract import distributed
from refract.distributed import DistributedCompactionError, Progress, TextProgress
from refract.optimize import Compaction, RewriteResult
from conftest import (
    DISTRIBUTED_OPTIONS,
    indexed_equals_scans,
    layout,
    numbered,
)

SPAWN = multiprocessing.get_context("spawn")


def spawn_pool():
    return ProcessPoolExecutor(2, mp_context=SPAWN)


def test_process_pool_equals_single_process(table, single_process_reference):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    plan = Compaction.plan(refract.dataset(uri, storage_options=options), DISTRIBUTED_OPTIONS)
    assert plan.num_tasks() >= 8
    seen = []
    with spawn_pool() as pool:
        metrics = distributed.compact_files(
            uri, DISTRIBUTED_OPTIONS, options, executor=pool, progress=seen.append
        )
    ds = refract.dataset(uri, storage_options=options)
    # One commit of every result: the very version, layout and metrics.
    assert metrics == want_metrics
    assert layout(ds) == want_layout
    assert ds.to_table() == want_rows
    indexed_equals_scans(ds)
    assert seen[-1].done == seen[-1].total == seen[-1].committed >= 8
    assert seen[-1].rows == want_rows.num_rows  # every fragment was rewritten once
    assert [p.done for p in seen if p.committed == 0] == list(range(1, seen[-1].total + 1))


class RandomOrderExecutor:
    """Runs each submission on its own thread, finishing them one at a time
    in a random permutation of the plan (events, not sleeps, order them)."""

    def __init__(self, tasks, seed):
        order = list(range(tasks))
        random.Random(seed).shuffle(order)
        self.rank = {task: position for position, task in enumerate(order)}
        self.turn = [threading.Event() for _ in range(tasks + 1)]
        self.turn[0].set()
        self.finished = []

    def submit(self, fn, uri, options, task):
        future = Future()
        position = self.rank[task.task_index]

        def run():
            self.turn[position].wait()
            try:
                future.set_result(fn(uri, options, task))
            except BaseException as error:
                future.set_exception(error)
            finally:
                self.finished.append(task.task_index)
                self.turn[position + 1].set()

        threading.Thread(target=run, daemon=True).start()
        return future


@pytest.mark.parametrize("seed,commit_every", [(1, 3)])
def test_random_batches_equal_single_process(table, single_process_reference, seed, commit_every):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    tasks = Compaction.plan(refract.dataset(uri, storage_options=options), DISTRIBUTED_OPTIONS).num_tasks()
    executor = RandomOrderExecutor(tasks, seed)
    metrics = distributed.compact_files(
        uri, DISTRIBUTED_OPTIONS, options, executor=executor, commit_every=commit_every
    )
    assert executor.finished != sorted(executor.finished)  # really out of order
    ds = refract.dataset(uri, storage_options=options)
    # Batches commit one version each; the fragments get other ids, but
    # the layout is the same run for run, and so are the rows and their order.
    assert ds.version == 4 + -(-tasks // commit_every)
    assert [row[1:] for row in layout(ds)] == [row[1:] for row in want_layout]
    assert ds.to_table() == want_rows
    assert (metrics.fragments_removed, metrics.fragments_added) == (
        want_metrics.fragments_removed,
        want_metrics.fragments_added,
    )
    assert metrics.committed_version == ds.version
    indexed_equals_scans(ds)


class KillOnce:
    """Executes the task, then kills its worker process before the result
    can return, on the first attempt of task `victim` only (a marker file
    remembers the attempt across processes). The files it wrote are orphans."""

    def __init__(self, marker_dir, victim):
        self.marker = os.path.join(marker_dir, f"killed-{victim}")
        self.victim = victim

    def __call__(self, uri, options, task):
        result = distributed.execute_task(uri, options, task)
        if task.task_index == self.victim and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os._exit(1)
        return result


def test_killed_worker_is_retried_and_its_orphans_cleaned(
    table, single_process_reference, tmp_path, caplog
):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    caplog.set_level(logging.INFO, logger="refract.distributed")
    seen = []
    metrics = distributed.compact_files(
        uri,
        DISTRIBUTED_OPTIONS,
        options,
        executor=spawn_pool,  # a factory: the broken pool is replaced
        progress=seen.append,
        execute=KillOnce(str(tmp_path), victim=3),
        cleanup_orphans_older_than=dt.timedelta(0),
    )
    assert (tmp_path / "killed-3").exists()
    assert seen[-1].failed_attempts >= 1 and seen[-1].failed == 0
    ds = refract.dataset(uri, storage_options=options)
    assert metrics == want_metrics
    assert layout(ds) == want_layout
    assert ds.to_table() == want_rows  # nothing lost, nothing twice
    indexed_equals_scans(ds)
    removed = [r.getMessage() for r in caplog.records if "orphaned files" in r.getMessage()]
    assert removed and removed[0] != "removed 0 orphaned files", removed
    assert distributed.cleanup_orphans(ds, dt.timedelta(0)) == []


class AppendFirst:
    """Task 0's worker appends rows to the table (another process, after
    the plan and before the commit), then executes its task."""

    def __call__(self, uri, options, task):
        if task.task_index == 0:
            refract.write_dataset(numbered(5000, 5025), uri, mode="append", storage_options=options)
        return distributed.execute_task(uri, options, task)


def test_concurrent_append_lands(table, single_process_reference):
    uri, options = table
    want_layout, want_rows, _ = single_process_reference
    with spawn_pool() as pool:
        metrics = distributed.compact_files(
            uri, DISTRIBUTED_OPTIONS, options, executor=pool, execute=AppendFirst()
        )
    ds = refract.dataset(uri, storage_options=options)
    assert metrics.committed_version == ds.version == 6  # append 5, compaction 6
    appended = numbered(5000, 5025)
    assert ds.to_table() == refract_concat(want_rows, appended)
    got = layout(ds)
    assert [row[1:] for row in got[:-1]] == [row[1:] for row in want_layout]
    assert got[-1][1:] == (25, 0, 1)
    indexed_equals_scans(ds)


def refract_concat(*tables):
    import pyarrow as pa

    return pa.concat_tables(tables).combine_chunks()


class FailTask:
    """Always fails task `victim`."""

    def __init__(self, victim):
        self.victim = victim

    def __call__(self, uri, options, task):
        if task.task_index == self.victim:
            raise RuntimeError(f"injected failure of task {task.task_index}")
        return distributed.execute_task(uri, options, task)


def test_failed_task_keeps_the_others_and_says_which(table, single_process_reference):
    uri, options = table
    _, want_rows, _ = single_process_reference
    before = refract.dataset(uri, storage_options=options).to_table()
    with spawn_pool() as pool:
        with pytest.raises(DistributedCompactionError) as caught:
            distributed.compact_files(
                uri, DISTRIBUTED_OPTIONS, options, executor=pool, max_attempts=2,
                execute=FailTask(2), cleanup_orphans_older_than=None,
            )
    err = caught.value
    assert err.uncommitted_tasks == [2]
    assert 2 not in err.committed_tasks and len(err.committed_tasks) >= 7
    assert "tasks 2 failed 2 times" in str(err) and "injected failure of task 2" in str(err)
    assert err.metrics.committed_version == 5
    ds = refract.dataset(uri, storage_options=options)
    assert ds.to_table() == before
    # A second run finishes the job.
    distributed.compact_files(uri, DISTRIBUTED_OPTIONS, options, executor=ThreadExecutor())
    ds = refract.dataset(uri, storage_options=options)
    assert ds.to_table() == want_rows
    indexed_equals_scans(ds)


class ThreadExecutor:
    """Runs each submission inline on the caller's thread (in plan order)."""

    def submit(self, fn, *args):
        future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as error:
            future.set_exception(error)
        return future


class CorruptTask:
    """Task `victim`'s result claims a wrong row count for a source fragment:
    the engine's verification refuses its commit."""

    def __init__(self, victim):
        self.victim = victim

    def __call__(self, uri, options, task):
        result = distributed.execute_task(uri, options, task)
        if task.task_index != self.victim:
            return result
        raw = json.loads(result.json())
        raw["old_physical_rows"][0] += 1
        return RewriteResult.from_json(json.dumps(raw))


def test_failed_commit_keeps_earlier_batches(table):
    uri, options = table
    before = refract.dataset(uri, storage_options=options).to_table()
    with pytest.raises(DistributedCompactionError) as caught:
        distributed.compact_files(
            uri, DISTRIBUTED_OPTIONS, options, executor=ThreadExecutor(), commit_every=2,
            execute=CorruptTask(4),
        )
    err = caught.value
    # Batches {0,1} and {2,3} landed; the batch {4,5} was refused.
    assert err.committed_tasks == [0, 1, 2, 3]
    assert err.uncommitted_tasks[:2] == [4, 5]
    assert [r.task_index for r in err.results] == [4, 5]
    assert "not committed: tasks 4-" in str(err)
    assert "compaction result of task 4" in str(err)
    ds = refract.dataset(uri, storage_options=options)
    assert ds.version == 6 == err.metrics.committed_version
    assert ds.to_table() == before
    # The good result of the refused batch still commits on its own.
    assert Compaction.commit(ds, [err.results[1]]).committed_version == 7
    assert ds.to_table() == before


def test_nothing_to_compact_commits_nothing(tmp_path):
    ds = refract.write_dataset(numbered(0, 10), str(tmp_path / "one"))
    metrics = distributed.compact_files(ds.uri, executor=ThreadExecutor())
    assert metrics.committed_version is None and metrics.fragments_removed == 0


@pytest.mark.parametrize("uptime", [5.0, 1e6])
def test_text_progress(monkeypatch, uptime):
    # The first line prints however recently the machine booted (the
    # monotonic clock starts near zero at boot).
    clock = iter([uptime, uptime + 1, uptime + 2])
    monkeypatch.setattr(distributed.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    bar = TextProgress(out, interval=3600)
    bar(Progress(10, 1, 0, 100, 0, 0, 1.0))
    bar(Progress(10, 2, 0, 200, 0, 0, 1.0))  # throttled
    bar(Progress(10, 10, 10, 1000, 1, 0, 2.0))  # the last one always prints
    assert out.getvalue().splitlines() == [
        "compact 1/10 tasks, 0 committed, 100 rows/s",
        "compact 10/10 tasks, 10 committed, 500 rows/s, 1 failed attempts",
    ]
