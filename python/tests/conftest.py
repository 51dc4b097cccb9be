"""Shared fixtures: dataset locations on local disk and on the test S3 server."""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import refract

REPO = Path(__file__).resolve().parents[2]


def s3_location(name):
    """A fresh S3 URI and storage options on the server ci/s3.sh starts, or
    None (a skip) without one; fails when REFRACT_TEST_S3_REQUIRED is set."""
    endpoint = os.environ.get("REFRACT_TEST_S3_ENDPOINT")
    if not endpoint:
        if os.environ.get("REFRACT_TEST_S3_REQUIRED"):
            pytest.fail("REFRACT_TEST_S3_REQUIRED is set but REFRACT_TEST_S3_ENDPOINT is not")
        pytest.skip("no S3 server (REFRACT_TEST_S3_ENDPOINT unset; ci/test.sh starts one)")
    bucket = os.environ.get("REFRACT_TEST_S3_BUCKET", "refract-test")
    options = {
        "aws_endpoint": endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    return f"s3://{bucket}/py-{name}-{uuid.uuid4()}", options


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path):
    """`(uri, storage_options)` on local disk, then on S3."""
    if request.param == "local":
        return str(tmp_path / "ds"), None
    return s3_location(request.node.name.split("[")[0])


@pytest.fixture
def uri(tmp_path):
    """A local dataset path."""
    return str(tmp_path / "ds")


def numbered(start, stop):
    """Rows id = start..stop, category = id % 10, name = f"n{id}"."""
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "category": pa.array([i % 10 for i in ids], pa.int32()),
            "name": pa.array([f"n{i}" for i in ids], pa.string()),
        }
    )


@pytest.fixture(scope="session")
def refract_cli():
    """The `refract` binary of this checkout's build (None when absent)."""
    for profile in ("debug", "release"):
        path = REPO / "target" / profile / "refract"
        if path.exists():
            return str(path)
    found = shutil.which("refract")
    if found is None:
        pytest.skip("the refract CLI is not built")
    return found


def run_cli(cli, *args):
    """Runs the CLI; returns (exit status, stdout, stderr)."""
    done = subprocess.run([cli, *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


# -- distributed compaction (test_distributed.py, test_ray.py, test_dask.py) --

#: Compaction options of the distributed tests: the 200 fragments of 10 rows
#: of `fragmented_table` make a plan of >= 8 tasks (14 today).
DISTRIBUTED_OPTIONS = {
    "target_rows_per_fragment": 50,
    "max_rows_per_group": 32,
    "defer_index_remap": True,
}

#: Filters whose indexed results must equal a scan's.
INDEXED_FILTERS = ["id = 42", "id = 1500", "id >= 990 AND id < 1030", "id < 0"]


def fragmented_table(uri, storage_options, fragments=200):
    """`fragments` fragments of 10 rows (ids 0.., in order), every seventh row
    deleted and a BTREE index on `id`: version 4."""
    ds = refract.write_dataset(
        numbered(0, 10 * fragments), uri, max_rows_per_file=10, storage_options=storage_options
    )
    ds.delete("id % 7 = 3")
    ds.create_scalar_index("id", "BTREE")
    return ds


def lance_opts(options):
    """pylance's keyword for storage options (none for a local table)."""
    return {"storage_options": options} if options else {}


def pylance(uri, options, **kwargs):
    """pylance 14.0.2's view of the table at `uri`."""
    import lance

    return lance.dataset(uri, **lance_opts(options), **kwargs)


def pylance_fragmented_table(uri, storage_options, fragments=100):
    """Like `fragmented_table`, written by pylance 14.0.2 (no index): the ids
    that survive, in order."""
    import lance

    lance.write_dataset(
        numbered(0, 10 * fragments), uri, max_rows_per_file=10, storage_options=storage_options
    )
    lance.dataset(uri, storage_options=storage_options).delete("id % 7 = 3")
    return [i for i in range(10 * fragments) if i % 7 != 3]


def assert_pylance_reads(uri, storage_options, ids):
    """pylance validates the table and reads exactly `ids`, in order."""
    import lance

    theirs = lance.dataset(uri, storage_options=storage_options)
    theirs.validate()
    assert theirs.to_table().column("id").to_pylist() == ids


def layout(ds):
    """The table's layout: `(fragment id, physical rows, deleted rows, files)` in order."""
    return [(f.fragment_id, f.physical_rows, f.num_deletions, len(f.files)) for f in ds.get_fragments()]


def indexed_equals_scans(ds):
    """Every `INDEXED_FILTERS` query through the index equals a scan."""
    for predicate in INDEXED_FILTERS:
        indexed, explain = ds.query(filter=predicate, explain=True)
        assert explain["index"] == "id_idx", (predicate, explain)
        scanned = ds.query(filter=predicate, use_index=False)
        assert indexed.sort_by("_rowaddr") == scanned.sort_by("_rowaddr"), predicate
        plain = ds.to_table(filter=predicate, with_row_address=True)
        assert indexed.sort_by("_rowaddr") == plain, predicate


@pytest.fixture
def table(request):
    """A fresh `fragmented_table` on S3: `(uri, storage_options)`."""
    uri, options = s3_location(request.node.name)
    fragmented_table(uri, options)
    return uri, options


@pytest.fixture(scope="session")
def single_process_reference():
    """`(layout, rows, metrics)` of a single-process `compact_files` of the
    `fragmented_table` on S3 with `DISTRIBUTED_OPTIONS`."""
    uri, options = s3_location("reference")
    ds = fragmented_table(uri, options)
    metrics = ds.optimize.compact_files(**DISTRIBUTED_OPTIONS)
    return layout(ds), ds.to_table(), metrics
