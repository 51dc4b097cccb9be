"""refract.ray: distributed compaction and maintenance on a local Ray
cluster, against the S3 server."""

import datetime as dt
import logging
import os
import sys
import tempfile
from pathlib import Path

import pytest

try:
    import ray
except ImportError:  # pragma: no cover - CI installs ray (ci/python.sh)
    sys.stderr.write(
        "\n*** test_ray.py SKIPPED: ray is not importable; "
        "pip install 'ray==2.60.0' (ci/python.sh does) ***\n"
    )
    pytest.skip("ray is not importable (pip install 'ray==2.60.0')", allow_module_level=True)

import refract
import refract.ray
from refract import distributed
from refract.optimize import Compaction
from conftest import (
    DISTRIBUTED_OPTIONS,
    assert_pylance_reads,
    indexed_equals_scans,
    layout,
    numbered,
    pylance_fragmented_table,
    s3_location,
)


@pytest.fixture(scope="module")
def ray_cluster():
    """A local two-CPU Ray cluster for the module; shut down at the end."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    made = None
    if "RAY_TMPDIR" not in os.environ:
        made = tempfile.mkdtemp(prefix="ray")
        os.environ["RAY_TMPDIR"] = made
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=256 << 20,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    yield
    ray.shutdown()
    assert not ray.is_initialized()
    if made is not None:
        del os.environ["RAY_TMPDIR"]
        import shutil

        shutil.rmtree(made, ignore_errors=True)


# Every test runs on the cluster (and `table` from conftest is made after it starts).
pytestmark = pytest.mark.usefixtures("ray_cluster")


def test_ray_equals_single_process(table, single_process_reference):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    tasks = Compaction.plan(refract.dataset(uri, storage_options=options), DISTRIBUTED_OPTIONS).num_tasks()
    assert tasks >= 8
    seen = []
    metrics = refract.ray.compact_files(uri, DISTRIBUTED_OPTIONS, options, progress=seen.append)
    ds = refract.dataset(uri, storage_options=options)
    assert metrics == want_metrics
    assert layout(ds) == want_layout
    assert ds.to_table() == want_rows
    indexed_equals_scans(ds)
    assert (seen[-1].done, seen[-1].committed, seen[-1].failed_attempts) == (tasks, tasks, 0)


def test_ray_random_batches(table, single_process_reference):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    # Two tasks run at a time and finish in whatever order Ray returns them;
    # batches of 3 commit as they fill.
    metrics = refract.ray.compact_files(uri, DISTRIBUTED_OPTIONS, options, commit_every=3)
    ds = refract.dataset(uri, storage_options=options)
    assert metrics.committed_version == ds.version > 5
    assert [row[1:] for row in layout(ds)] == [row[1:] for row in want_layout]
    assert ds.to_table() == want_rows
    assert metrics.fragments_removed == want_metrics.fragments_removed
    indexed_equals_scans(ds)


def test_ray_killed_worker_is_retried(table, single_process_reference, tmp_path, caplog):
    uri, options = table
    want_layout, want_rows, want_metrics = single_process_reference
    marker = str(tmp_path / "killed")

    # Defined here so cloudpickle ships it by value to the Ray workers.
    def kill_once(uri, options, task):
        result = distributed.execute_task(uri, options, task)
        if task.task_index == 4 and not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)  # the worker process dies with the task's files written
        return result

    caplog.set_level(logging.INFO, logger="refract.distributed")
    seen = []
    metrics = refract.ray.compact_files(
        uri,
        DISTRIBUTED_OPTIONS,
        options,
        progress=seen.append,
        execute=kill_once,
        cleanup_orphans_older_than=dt.timedelta(0),
    )
    assert os.path.exists(marker)
    assert seen[-1].failed_attempts == 1 and seen[-1].failed == 0
    failures = [r.getMessage() for r in caplog.records if "attempt 1/3 failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].startswith("task 4 "), failures
    ds = refract.dataset(uri, storage_options=options)
    assert metrics == want_metrics
    assert layout(ds) == want_layout
    assert ds.to_table() == want_rows  # nothing lost, nothing twice
    indexed_equals_scans(ds)
    assert "removed 1 orphaned files" in [r.getMessage() for r in caplog.records]
    assert distributed.cleanup_orphans(ds, dt.timedelta(0)) == []


def test_ray_concurrent_append_lands(table, single_process_reference):
    uri, options = table
    want_layout, want_rows, _ = single_process_reference

    appended = numbered(5000, 5025)  # shipped with the function, by value

    def append_first(uri, options, task):
        # Another process (a Ray worker) appends after the plan, before the commit.
        if task.task_index == 0:
            refract.write_dataset(appended, uri, mode="append", storage_options=options)
        return distributed.execute_task(uri, options, task)

    metrics = refract.ray.compact_files(uri, DISTRIBUTED_OPTIONS, options, execute=append_first)
    ds = refract.dataset(uri, storage_options=options)
    assert metrics.committed_version == ds.version == 6
    import pyarrow as pa

    assert ds.to_table() == pa.concat_tables([want_rows, appended]).combine_chunks()
    got = layout(ds)
    assert [row[1:] for row in got[:-1]] == [row[1:] for row in want_layout]
    assert got[-1][1:] == (25, 0, 1)
    indexed_equals_scans(ds)


def test_ray_maintain_remaps_and_trims(table, single_process_reference):
    uri, options = table
    _, want_rows, _ = single_process_reference
    report = refract.ray.maintain(uri, {"target_rows_per_fragment": 50}, options, num_workers=2)
    ds = refract.dataset(uri, storage_options=options)
    assert report["compaction"].fragments_removed == 200
    assert report["final_version"] == ds.version
    assert ds.fri()["transitions"] == []  # remapped, then trimmed
    assert ds.to_table() == want_rows
    indexed_equals_scans(ds)
    point, explain = ds.query(filter="id = 18", columns=["id"], explain=True)
    assert point.column("id").to_pylist() == [18]
    assert [s["translated"] for s in explain["segments"]] == [False]


def test_ray_compacts_a_table_pylance_wrote():
    uri, options = s3_location("ray-pylance")
    ids = pylance_fragmented_table(uri, options)
    metrics = refract.ray.compact_files(uri, {"target_rows_per_fragment": 50}, options)
    assert metrics.fragments_removed == 100
    assert_pylance_reads(uri, options, ids)
    ds = refract.dataset(uri, storage_options=options)
    assert ds.optimize.compact_files(target_rows_per_fragment=50).committed_version is None
