"""Compaction (one call and distributed), indices, FRI maintenance, GIL and fork."""

import json
import multiprocessing
import os
import pickle
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pyarrow as pa
import pytest

import refract
from refract.optimize import Compaction, CompactionMetrics, CompactionTask, RewriteResult
from conftest import numbered, run_cli


def small_fragments(uri, options=None, rows=40, per_file=4):
    ds = refract.write_dataset(numbered(0, rows), uri, max_rows_per_file=per_file, storage_options=options)
    return ds


def test_compact_files_keeps_order(location):
    uri, options = location
    ds = small_fragments(uri, options)
    ds.delete("id % 7 = 0")
    before = ds.to_table()
    metrics = ds.optimize.compact_files(target_rows_per_fragment=16)
    assert metrics == CompactionMetrics(10, 2, 10, 2, 4)
    assert ds.version == 4
    assert ds.to_table() == before
    # 34 live rows, balanced into two outputs near the target.
    assert [f.physical_rows for f in ds.get_fragments()] == [17, 17]
    assert ds.optimize.compact_files(target_rows_per_fragment=16).committed_version is None


def _execute(task, uri, options):
    # Runs in a spawned worker process: open the dataset by URI there.
    return task.execute(refract.dataset(uri, storage_options=options))


def test_plan_execute_commit_across_spawned_processes(location):
    uri, options = location
    ds = small_fragments(uri, options)
    before = ds.to_table()
    plan = Compaction.plan(ds, {"target_rows_per_fragment": 8, "max_rows_per_group": 4})
    assert plan.read_version == 2
    assert [t.fragments for t in plan.tasks] == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_execute, plan.tasks, [uri] * 5, [options] * 5))
    assert [r.task_index for r in results] == [0, 1, 2, 3, 4]
    assert results[3].original_fragment_ids == [7, 8]
    # Commit in two batches, in reverse order.
    first = Compaction.commit(ds, [results[4], results[1]])
    assert (first.fragments_removed, first.fragments_added, first.committed_version) == (4, 2, 3)
    second = Compaction.commit(ds, [results[3], results[2], results[0]])
    assert (second.fragments_removed, second.fragments_added, second.committed_version) == (6, 3, 4)
    assert ds.version == 4
    assert refract.dataset(uri, storage_options=options).to_table() == before
    # Committing the same results again reports where they landed.
    again = Compaction.commit(ds, [results[0], results[2], results[3]])
    assert again.committed_version == 4


def test_tasks_and_results_pickle_and_match_the_cli(uri, tmp_path, refract_cli):
    ds = small_fragments(uri)
    plan = Compaction.plan(ds, {"target_rows_per_fragment": 20})
    task = plan.tasks[0]
    copy = pickle.loads(pickle.dumps(task))
    assert copy == task and copy.fragments == task.fragments == [1, 2, 3, 4, 5]
    assert CompactionTask.from_json(task.json()) == task
    # The Python plan is the CLI's plan.
    status, stdout, _ = run_cli(refract_cli, "compact-plan", uri, "--target-rows", "20")
    assert status == 0
    assert json.loads(stdout) == json.loads(plan.json())
    result = copy.execute(ds)
    assert pickle.loads(pickle.dumps(result)) == result
    # A result executed from Python commits with the CLI.
    path = tmp_path / "result_0.json"
    path.write_text(result.json())
    status, stdout, stderr = run_cli(refract_cli, "compact-commit", uri, str(path), "--json")
    assert status == 0, stderr
    assert json.loads(stdout)["committed_version"] == 3
    assert refract.dataset(uri).to_table() == numbered(0, 40)
    with pytest.raises(refract.InvalidInputError):
        CompactionTask.from_json("{}")
    with pytest.raises(refract.InvalidInputError):
        RewriteResult.from_json("[]")


def test_indices_queries_and_fri_maintenance(location):
    uri, options = location
    ds = small_fragments(uri, options, rows=60, per_file=6)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("category", "BITMAP", name="cat")
    indices = ds.list_indices()
    assert [(i["name"], i["type"], i["fields"]) for i in indices] == [
        ("id_idx", "btree", ["id"]),
        ("cat", "bitmap", ["category"]),
    ]
    assert indices[0]["fragment_ids"] == set(range(1, 11))
    expected = ds.to_table(filter="category = 4")
    table, explain = ds.query(filter="category = 4", columns=["id", "name"], explain=True)
    assert table.column("id").to_pylist() == expected.column("id").to_pylist()
    assert explain["index"] == "cat"
    # Deferred compaction: segments keep old addresses, the FRI translates.
    metrics = ds.optimize.compact_files(target_rows_per_fragment=30, defer_index_remap=True)
    assert metrics.fragments_removed == 10
    fri = ds.fri()
    # One ordered-compaction transition per task (10 fragments of 6 rows, target 30).
    assert fri["fri_flag"]
    assert [t["kind"] for t in fri["transitions"]] == ["ordered_compaction"] * 2
    after = ds.query(filter="category = 4", columns=["id", "name"])
    assert after.column("id").to_pylist() == expected.column("id").to_pylist()
    point, explain = ds.query(filter="id = 17", columns=["id"], explain=True)
    assert point.column("id").to_pylist() == [17]
    assert explain["index"] == "id_idx"
    assert [(s["translated"], s["hops"]) for s in explain["segments"]] == [(True, 1)]
    remap = ds.remap_indices()
    assert remap["committed_version"] == ds.version
    trim = ds.trim_fri()
    assert trim["committed_version"] == ds.version
    assert ds.fri()["transitions"] == []
    again = ds.query(filter="category = 4", columns=["id", "name"])
    assert again.column("id").to_pylist() == expected.column("id").to_pylist()
    point, explain = ds.query(filter="id = 17", columns=["id"], explain=True)
    assert point.column("id").to_pylist() == [17]
    assert [s["translated"] for s in explain["segments"]] == [False]
    # New data, then optimize_indices covers it.
    ds.insert(numbered(60, 66), max_rows_per_file=6)
    ds.optimize.optimize_indices()
    assert all(max(i["fragment_ids"]) == max(f.fragment_id for f in ds.get_fragments()) for i in ds.list_indices())
    ds.drop_index("cat")
    assert [i["name"] for i in ds.list_indices()] == ["id_idx"]


def test_vector_index_nearest(uri):
    rows = 64
    vectors = [[float(i), float(i % 8)] for i in range(rows)]
    table = pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "vec": pa.array(vectors, pa.list_(pa.float32(), 2)),
    })
    ds = refract.write_dataset(table, uri, max_rows_per_file=16)
    ds.create_index("vec", "IVF_FLAT", num_partitions=4)
    assert ds.list_indices()[0]["type"] == "ivf_flat"
    nearest = {"column": "vec", "q": [10.2, 2.0], "k": 3, "nprobes": 4}
    result = ds.query(nearest=nearest, columns=["id"])
    brute = ds.query(nearest=nearest, columns=["id"], use_index=False)
    assert result.column("id").to_pylist() == brute.column("id").to_pylist() == [10, 11, 9]
    assert "_distance" in result.column_names


def test_partition_and_maintain_until_noop(location):
    uri, options = location
    ds = small_fragments(uri, options)
    ds.create_scalar_index("id", "BTREE")
    metrics = ds.partition_fragments("category", 2, fragments=[1, 2, 3])
    assert metrics["fragments_removed"] == 3 and metrics["transition_recorded"]
    rows = sorted(ds.to_table().column("id").to_pylist())
    assert rows == list(range(40))
    report = ds.maintain({"target_rows_per_fragment": 40}, until_noop=True, keep_last=1)
    assert report["converged"]
    assert report["final_version"] == ds.version
    assert report["retention"]["retained_versions"] == [ds.version]
    assert [v["version"] for v in ds.versions()] == [ds.version]
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(40))
    assert ds.query(filter="id = 33", columns=["id"]).column("id").to_pylist() == [33]
    assert ds.fri()["transitions"] == []


def test_compaction_releases_the_gil(uri):
    ds = refract.write_dataset(numbered(0, 60_000), uri, max_rows_per_file=300)
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    try:
        started = time.perf_counter()
        before = ticks[0]
        ds.optimize.compact_files(binary_copy=False, num_threads=1)
        elapsed = time.perf_counter() - started
        during = ticks[0] - before
    finally:
        stop.set()
        thread.join()
    assert elapsed > 0.05
    # With the GIL held for the whole call the counter would barely move.
    assert during > 10_000, (during, elapsed)


def _fork_child(uri, queue):
    queue.put((refract.dataset(uri).count_rows(), refract._refract.runtime_pid() == os.getpid()))


def test_runtime_is_recreated_after_fork(uri):
    ds = refract.write_dataset(numbered(0, 5), uri)
    assert ds.count_rows() == 5
    assert refract._refract.runtime_pid() == os.getpid()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_fork_child, args=(uri, queue))
    child.start()
    result = queue.get(timeout=60)
    child.join(60)
    assert result == (5, True)
    assert child.exitcode == 0


def test_compact_files_matches_pylance_rows_in_original_order(tmp_path):
    lance = pytest.importorskip("lance")
    table = numbered(0, 200)
    theirs = lance.write_dataset(table, str(tmp_path / "lance"), max_rows_per_file=10)
    theirs.delete("id % 3 = 0")
    theirs.optimize.compact_files(target_rows_per_fragment=64)
    ours = refract.write_dataset(table, str(tmp_path / "refract"), max_rows_per_file=10)
    ours.delete("id % 3 = 0")
    ours.optimize.compact_files(target_rows_per_fragment=64)
    mine = ours.to_table()
    assert mine.column("id").to_pylist() == [i for i in range(200) if i % 3]
    assert sorted(theirs.to_table().to_pylist(), key=lambda r: r["id"]) == mine.to_pylist()
