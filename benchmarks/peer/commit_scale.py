"""Committing N compaction results at once: time and peak memory (issue 25).

For each N: a local table of 2N one-row fragments, planned with
``target_rows_per_fragment=2`` (N tasks of two fragments), every task
executed in this process (real results: the commit verifies each new file
as ``commit_compaction`` does), then ONE ``Compaction.commit`` of all N
results in a fresh child process, which reports the commit's wall time and
its peak RSS before and after. Prints one JSON line per N.

    python benchmarks/peer/commit_scale.py 1000 10000

Needs the ``refract`` package (``bash ci/python.sh`` stages it under
target/python-package; run with target/ci-venv/bin/python). Everything is
written under a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List


def _rss_mib() -> float:
    """Peak RSS of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def commit_child(uri: str, results_path: str) -> None:
    """Child mode: commit every result in ``results_path`` at once; print the figures."""
    import refract
    from refract.optimize import Compaction, RewriteResult

    with open(results_path) as f:
        results = [RewriteResult.from_json(line) for line in f]
    read_version = results[0].read_version
    read = refract.dataset(uri, version=read_version)
    before = _rss_mib()
    start = time.perf_counter()
    metrics = Compaction.commit(read, results)
    seconds = time.perf_counter() - start
    after = refract.dataset(uri)
    print(
        json.dumps(
            {
                "commit_seconds": round(seconds, 3),
                "peak_rss_mib_before_commit": round(before, 1),
                "peak_rss_mib_after_commit": round(_rss_mib(), 1),
                "fragments_removed": metrics.fragments_removed,
                "fragments_added": metrics.fragments_added,
                "versions_committed": after.version - read_version,
                "rows": after.count_rows(),
            }
        )
    )


def measure(tasks: int, root: str) -> Dict[str, object]:
    """Build, execute and commit ``tasks`` tasks under ``root``."""
    import pyarrow as pa
    import refract
    from refract.optimize import Compaction

    uri = os.path.join(root, f"t{tasks}")
    start = time.perf_counter()
    ds = refract.write_dataset(
        pa.table({"id": pa.array(range(2 * tasks), pa.int64())}), uri, max_rows_per_file=1
    )
    write_seconds = time.perf_counter() - start
    plan = Compaction.plan(ds, {"target_rows_per_fragment": 2})
    assert plan.num_tasks() == tasks, plan.num_tasks()
    start = time.perf_counter()
    results_path = os.path.join(root, f"results{tasks}.jsonl")
    result_bytes = 0
    with open(results_path, "w") as f:
        for task in plan.tasks:
            line = task.execute(ds).json()
            result_bytes += len(line)
            f.write(line + "\n")
    execute_seconds = time.perf_counter() - start
    child = subprocess.run(
        [sys.executable, __file__, "--commit", uri, results_path],
        check=True,
        capture_output=True,
        text=True,
    )
    figures = json.loads(child.stdout.strip().splitlines()[-1])
    assert figures["rows"] == 2 * tasks and figures["versions_committed"] == 1, figures
    return {
        "tasks": tasks,
        "write_seconds": round(write_seconds, 2),
        "execute_seconds_in_process": round(execute_seconds, 2),
        "result_json_bytes_per_task": result_bytes // tasks,
        **figures,
    }


def main(argv: List[str]) -> None:
    if argv[:1] == ["--commit"]:
        commit_child(argv[1], argv[2])
        return
    sizes = [int(a) for a in argv] or [1000, 10000]
    root = tempfile.mkdtemp(prefix="refract-commit-scale-")
    try:
        for tasks in sizes:
            print(json.dumps(measure(tasks, root)), flush=True)
            shutil.rmtree(os.path.join(root, f"t{tasks}"), ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
