"""refract.dask: distributed compaction and maintenance on a local Dask
cluster (two worker processes), against the S3 server."""

import datetime as dt
import logging
import os
import sys
from pathlib import Path

import pytest

try:
    from distributed import Client, LocalCluster
    from distributed.core import Status
except ImportError:  # pragma: no cover - CI installs dask (ci/python.sh)
    sys.stderr.write(
        "\n*** test_dask.py SKIPPED: distributed is not importable; "
        "pip install 'dask==2026.8.0' 'distributed==2026.8.0' (ci/python.sh does) ***\n"
    )
    pytest.skip("distributed is not importable (pip install distributed)", allow_module_level=True)

import refract
import refract.dask
from refract import distributed
from refract.optimize import Compaction
from conftest import (
    DISTRIBUTED_OPTIONS,
    assert_pylance_reads,
    indexed_equals_scans,
    layout,
    pylance_fragmented_table,
    s3_location,
)


@pytest.fixture(scope="module")
def dask_client():
    """A local Dask cluster of two single-threaded worker processes for the
    module (no dashboard); closed at the end."""
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()
    assert client.status == "closed"
    assert cluster.status == Status.closed


def test_dask_equals_single_process(dask_client, table, single_process_reference):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    tasks = Compaction.plan(refract.dataset(uri, storage_options=options), DISTRIBUTED_OPTIONS).num_tasks()
    assert tasks >= 8
    seen = []
    metrics = refract.dask.compact_files(
        uri, DISTRIBUTED_OPTIONS, options, client=dask_client, progress=seen.append
    )
    ds = refract.dataset(uri, storage_options=options)
    # One commit of every result: the very version, layout and metrics.
    assert metrics == want_metrics
    assert layout(ds) == want_layout
    assert ds.to_table() == want_rows
    indexed_equals_scans(ds)
    assert (seen[-1].done, seen[-1].committed, seen[-1].failed_attempts) == (tasks, tasks, 0)


def test_dask_failed_attempt_is_retried_in_random_batches(
    dask_client, table, single_process_reference, tmp_path, caplog
):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    marker = str(tmp_path / "failed")

    # Defined here so cloudpickle ships it by value to the workers.
    def fail_once(uri, options, task):
        result = distributed.execute_task(uri, options, task)
        if task.task_index == 2 and not os.path.exists(marker):
            Path(marker).touch()
            raise RuntimeError("injected failure after writing")  # its file is an orphan
        return result

    caplog.set_level(logging.INFO, logger="refract.distributed")
    seen = []
    # The client's default (pure=True) would hand the failed future back on
    # resubmission; DaskExecutor's pure=False runs the attempt again.
    metrics = refract.dask.compact_files(
        uri,
        DISTRIBUTED_OPTIONS,
        options,
        commit_every=3,
        client=dask_client,
        progress=seen.append,
        execute=fail_once,
        cleanup_orphans_older_than=dt.timedelta(0),
    )
    assert os.path.exists(marker)
    assert (seen[-1].failed_attempts, seen[-1].failed) == (1, 0)
    ds = refract.dataset(uri, storage_options=options)
    # Batches of 3 in arrival order: other fragment ids, the same layout and rows.
    assert metrics.committed_version == ds.version > 5
    assert [row[1:] for row in layout(ds)] == [row[1:] for row in want_layout]
    assert ds.to_table() == want_rows
    assert metrics.fragments_removed == want_metrics.fragments_removed
    indexed_equals_scans(ds)
    assert "removed 1 orphaned files" in [r.getMessage() for r in caplog.records]
    assert distributed.cleanup_orphans(ds, dt.timedelta(0)) == []


def test_dask_killed_worker_is_rescheduled_by_dask(
    dask_client, table, single_process_reference, tmp_path
):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    marker = str(tmp_path / "killed")

    def kill_once(uri, options, task):
        result = distributed.execute_task(uri, options, task)
        if task.task_index == 4 and not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)  # the worker process dies with the task's file written
        return result

    seen = []
    metrics = refract.dask.compact_files(
        uri, DISTRIBUTED_OPTIONS, options, client=dask_client, progress=seen.append,
        execute=kill_once,
    )
    assert os.path.exists(marker)
    # Dask's scheduler ran the task again on its own: the driver saw no failure.
    assert (seen[-1].failed_attempts, seen[-1].failed) == (0, 0)
    ds = refract.dataset(uri, storage_options=options)
    assert metrics == want_metrics
    assert layout(ds) == want_layout
    assert ds.to_table() == want_rows  # nothing lost, nothing twice
    indexed_equals_scans(ds)
    # So the dead attempt's file is left to the next orphan cleanup, with the
    # first files of any task whose finished result the dead worker still
    # held (Dask recomputes those elsewhere too).
    orphans = distributed.cleanup_orphans(ds, dt.timedelta(0))
    assert orphans and all(o.startswith("data/") for o in orphans), orphans
    ds = refract.dataset(uri, storage_options=options)
    assert ds.to_table() == want_rows  # the cleanup removed no live file
    assert distributed.cleanup_orphans(ds, dt.timedelta(0)) == []


def test_dask_maintain_remaps_and_trims(dask_client, table, single_process_reference):
    uri, options = table
    _, want_rows, _ = single_process_reference
    report = refract.dask.maintain(
        uri, {"target_rows_per_fragment": 50}, options, num_workers=2, client=dask_client
    )
    ds = refract.dataset(uri, storage_options=options)
    assert report["compaction"].fragments_removed == 200
    assert report["final_version"] == ds.version
    assert ds.fri()["transitions"] == []  # remapped, then trimmed
    assert ds.to_table() == want_rows
    indexed_equals_scans(ds)


def test_dask_executor_names_its_tasks(dask_client):
    with pytest.raises(ValueError, match="pure=False"):
        refract.dask.DaskExecutor(dask_client, pure=True)
    executor = refract.dask.DaskExecutor()  # the current client
    assert executor.client is dask_client
    first, second = executor.submit(abs, -3), executor.submit(abs, -3)
    assert first.key != second.key and (first.result(), second.result()) == (3, 3)


def test_dask_compacts_a_table_pylance_wrote(dask_client):
    uri, options = s3_location("dask-pylance")
    ids = pylance_fragmented_table(uri, options)
    metrics = refract.dask.compact_files(
        uri, {"target_rows_per_fragment": 50}, options, client=dask_client
    )
    assert metrics.fragments_removed == 100
    assert_pylance_reads(uri, options, ids)
    ds = refract.dataset(uri, storage_options=options)
    assert ds.optimize.compact_files(target_rows_per_fragment=50).committed_version is None
