"""Shared fixtures: dataset locations on local disk and on the test S3 server."""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

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
