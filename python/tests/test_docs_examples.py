"""The documented examples run as written: each is cut out of its Markdown
file and run in a fresh interpreter, so a change to the API that breaks the
docs fails here."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO, s3_location


def python_block(markdown, heading, index=0):
    """The `index`-th ```python block after `heading` in `markdown` (a path
    relative to the repository)."""
    text = (REPO / markdown).read_text()
    start = text.index(heading)
    blocks = re.findall(r"```python\n(.*?)```", text[start:], re.S)
    return blocks[index]


def run_example(source, env, timeout):
    """Runs `source` in a fresh interpreter; returns its stdout, failing the
    test with its stderr when it exits non-zero."""
    done = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=REPO,
    )
    assert done.returncode == 0, f"example failed:\n{done.stderr[-4000:]}"
    return done.stdout


def test_cluster_example_runs_as_written_against_s3():
    pytest.importorskip("ray")
    s3_location("cluster-example")  # skips (or fails in CI) without the S3 server
    source = python_block("docs/operations.md", "## On a cluster")
    env = dict(os.environ)
    # Ray's own settings for an offline local cluster; the example itself is
    # unchanged (its ray.init starts a cluster in the child process).
    # Ray's socket paths must stay short: not under pytest's tmp_path.
    ray_tmp = tempfile.mkdtemp(prefix="ray-doc")
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", RAY_TMPDIR=ray_tmp)
    env.pop("RAY_ADDRESS", None)
    try:
        out = run_example(source, env, timeout=600)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert "fragments_removed=200, fragments_added=4" in out, out
    # The four fragments, then the query's one row: id 42.
    assert re.search(r"^4 pyarrow\.Table$", out, re.M), out
    assert re.search(r"^id: \[\[42\]\]$", out, re.M), out


def test_readme_python_example_runs(tmp_path):
    source = python_block("README.md", "## Python")
    # The one change: the example's table goes to a fresh directory.
    assert source.count('"/tmp/demo"') == 1
    source = source.replace('"/tmp/demo"', repr(str(tmp_path / "demo")))
    out = run_example(source, dict(os.environ), timeout=300)
    # The indexed query finds id 42 through the FRI's one transition: ten
    # fragments of 10 rows, one deleted from each, into one of 90.
    assert re.search(r"^id: \[\[42\]\]$", out, re.M), out
    assert out.count("'kind': 'ordered_compaction'") == 1, out
    assert "'destinations': [{'id': 11, 'physical_rows': 90, 'num_deleted_rows': 0}]" in out, out
