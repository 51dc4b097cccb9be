"""Writing, reading, versions, tags, retention and errors."""

import datetime as dt
import decimal
import pickle

import pyarrow as pa
import pytest
from pathlib import Path

import refract
from conftest import numbered


def test_write_then_read_round_trip(location):
    uri, options = location
    table = numbered(0, 10)
    ds = refract.write_dataset(table, uri, storage_options=options)
    assert ds.version == 2  # version 1 holds the schema, version 2 the rows
    assert ds.to_table() == table
    reopened = refract.dataset(uri, storage_options=options)
    assert reopened.version == 2
    assert reopened.to_table().equals(table)
    assert reopened.schema == table.schema
    assert reopened.count_rows() == 10
    assert [v["operation"] for v in reopened.versions()] == ["Create", "Append"]
    assert reopened.checkout_version(1).count_rows() == 0


ROUND_TRIP_TYPES = [
    ("bool", pa.array([True, None, False], pa.bool_())),
    ("int8", pa.array([-128, None, 127], pa.int8())),
    ("int16", pa.array([-3, None, 32767], pa.int16())),
    ("int32", pa.array([-3, None, 2**31 - 1], pa.int32())),
    ("int64", pa.array([-(2**63), None, 2**63 - 1], pa.int64())),
    ("uint8", pa.array([0, None, 255], pa.uint8())),
    ("uint16", pa.array([0, None, 65535], pa.uint16())),
    ("uint32", pa.array([0, None, 2**32 - 1], pa.uint32())),
    ("uint64", pa.array([0, None, 2**64 - 1], pa.uint64())),
    ("float32", pa.array([1.5, None, -2.25], pa.float32())),
    ("float64", pa.array([1.5, None, float("inf")], pa.float64())),
    ("utf8", pa.array(["a", None, "ünïcode"], pa.string())),
    ("large_utf8", pa.array(["a", None, "b" * 1000], pa.large_string())),
    ("binary", pa.array([b"\x00\x01", None, b""], pa.binary())),
    ("large_binary", pa.array([b"x", None, b"yz"], pa.large_binary())),
    ("fixed_binary", pa.array([b"ab", None, b"cd"], pa.binary(2))),
    ("date32", pa.array([dt.date(2024, 1, 2), None, dt.date(1970, 1, 1)], pa.date32())),
    ("date64", pa.array([dt.date(2024, 1, 2), None, dt.date(1970, 1, 1)], pa.date64())),
    ("timestamp_us", pa.array([1, None, 1_700_000_000_000_000], pa.timestamp("us"))),
    ("timestamp_tz", pa.array([1, None, 2], pa.timestamp("ms", tz="UTC"))),
    ("time64", pa.array([1, None, 86_399_999_999], pa.time64("us"))),
    ("duration", pa.array([1, None, -5], pa.duration("s"))),
    ("decimal128", pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-3.50")], pa.decimal128(10, 2))),
    ("list_int", pa.array([[1, 2], None, []], pa.list_(pa.int64()))),
    ("large_list", pa.array([[1.0], None, [2.0, 3.0]], pa.large_list(pa.float64()))),
    ("vector", pa.array([[1.0, 2.0], None, [3.0, 4.0]], pa.list_(pa.float32(), 2))),
    ("struct", pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": "z"}], pa.struct([("a", pa.int32()), ("b", pa.string())]))),
]


@pytest.mark.parametrize("name,array", ROUND_TRIP_TYPES, ids=[t[0] for t in ROUND_TRIP_TYPES])
def test_every_arrow_type_round_trips(uri, name, array):
    table = pa.table({"id": pa.array([0, 1, 2], pa.int64()), name: array})
    ds = refract.write_dataset(table, uri)
    assert ds.to_table().equals(table)
    assert ds.to_table(filter="id >= 1", columns=[name]).equals(table.slice(1).select([name]))


def test_input_kinds(tmp_path):
    table = numbered(0, 6)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=2))
    batches = iter(table.to_batches(max_chunksize=4))
    inputs = {
        "table": table,
        "batch": table.combine_chunks().to_batches()[0],
        "reader": reader,
        "iterable": batches,
    }
    for kind, data in inputs.items():
        schema = table.schema if kind == "iterable" else None
        ds = refract.write_dataset(data, str(tmp_path / kind), schema=schema)
        assert ds.to_table() == table, kind
    pd = pytest.importorskip("pandas")
    ds = refract.write_dataset(table.to_pandas(), str(tmp_path / "pandas"))
    assert ds.to_table().to_pydict() == table.to_pydict()


def test_append_cuts_fragments_and_scans_in_order(uri):
    refract.write_dataset(numbered(0, 5), uri, max_rows_per_file=2)
    ds = refract.write_dataset(numbered(5, 8), uri, mode="append", max_rows_per_file=2)
    assert ds.version == 3
    fragments = ds.get_fragments()
    assert [(f.fragment_id, f.physical_rows) for f in fragments] == [
        (1, 2), (2, 2), (3, 1), (4, 2), (5, 1)
    ]
    assert fragments[2].to_table().column("id").to_pylist() == [4]
    assert ds.to_table().column("id").to_pylist() == list(range(8))
    # append creates a missing dataset
    other = refract.write_dataset(numbered(0, 2), uri + "-new", mode="append")
    assert other.to_table() == numbered(0, 2)


def test_scanner_options_and_streaming(uri):
    ds = refract.write_dataset(numbered(0, 20), uri, max_rows_per_file=8)
    table = ds.to_table(columns=["name", "id"], filter="category = 3 OR id < 2", with_row_address=True)
    assert table.column_names == ["name", "id", "_rowaddr"]
    assert table.column("id").to_pylist() == [0, 1, 3, 13]
    assert table.column("_rowaddr").to_pylist() == [(1 << 32) | 0, (1 << 32) | 1, (1 << 32) | 3, (2 << 32) | 5]
    assert ds.to_table(limit=3).column("id").to_pylist() == [0, 1, 2]
    batches = list(ds.to_batches(batch_size=5, columns=["id"]))
    assert all(b.num_rows <= 5 for b in batches)
    assert [i for b in batches for i in b.column(0).to_pylist()] == list(range(20))
    scanner = ds.scanner(filter="id % 2 = 0", columns=["id"])
    assert scanner.projected_schema.names == ["id"]
    assert scanner.count_rows() == 10
    reader = scanner.to_reader()
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.read_all().column("id").to_pylist() == list(range(0, 20, 2))
    assert ds.head(2).column("id").to_pylist() == [0, 1]


def test_delete_versions_checkout_restore(location):
    uri, options = location
    ds = refract.write_dataset(numbered(0, 10), uri, storage_options=options)
    assert ds.delete("id < 3 OR id = 9") == {"num_deleted_rows": 4}
    assert ds.version == 3
    assert ds.count_rows() == 6
    assert ds.count_rows("category >= 5") == 4
    assert ds.get_fragments()[0].num_deletions == 4
    old = ds.checkout_version(2)
    assert old.count_rows() == 10
    old.restore()
    assert old.version == 4
    assert refract.dataset(uri, storage_options=options).count_rows() == 10
    assert [v["version"] for v in old.versions()] == [1, 2, 3, 4]
    assert [v["operation"] for v in old.versions()][-1] == "Restore"
    assert isinstance(old.versions()[0]["timestamp"], dt.datetime)


def test_tags_and_cleanup(location):
    uri, options = location
    ds = refract.write_dataset(numbered(0, 4), uri, storage_options=options)
    ds.tags.create("first", 2)
    ds.delete("id = 0")
    ds.delete("id = 1")
    assert ds.tags.list() == {"first": {"version": 2}}
    assert refract.dataset(uri, version="first", storage_options=options).count_rows() == 4
    assert ds.checkout_version("first").version == 2
    dry = ds.cleanup_old_versions(keep_last=1, dry_run=True)
    assert dry.dry_run and dry.expired_versions == [1, 3]
    stats = ds.cleanup_old_versions(keep_last=1)
    assert stats.expired_versions == [1, 3]
    assert stats.retained_versions == [2, 4]
    assert stats.old_versions == 2
    assert stats.bytes_removed > 0
    assert [v["version"] for v in ds.versions()] == [2, 4]
    ds.tags.delete("first")
    assert ds.tags.list() == {}
    assert ds.cleanup_old_versions(keep_last=1).expired_versions == [2]


def test_errors_are_typed_with_the_engine_messages(uri, tmp_path):
    with pytest.raises(refract.NotFoundError) as err:
        refract.dataset(str(tmp_path / "missing"))
    assert str(err.value) == f"not found: dataset directory {tmp_path / 'missing'} does not exist"
    assert isinstance(err.value, FileNotFoundError)
    ds = refract.write_dataset(numbered(0, 3), uri)
    with pytest.raises(refract.InvalidInputError) as err:
        refract.write_dataset(numbered(0, 3), uri)
    assert str(err.value) == f"invalid input: a dataset already exists at {uri}"
    assert isinstance(err.value, ValueError)
    with pytest.raises(refract.InvalidInputError) as err:
        refract.write_dataset(numbered(0, 3), uri, mode="overwrite")
    assert str(err.value) == 'invalid input: mode must be "create" or "append", got "overwrite"'
    with pytest.raises(refract.NotFoundError) as err:
        ds.checkout_version(99)
    assert "version 99" in str(err.value)
    with pytest.raises(refract.NotFoundError):
        ds.checkout_version("no-such-tag")
    with pytest.raises(refract.InvalidInputError):
        refract.write_dataset(pa.table({"other": [1]}), uri, mode="append")
    with pytest.raises(refract.InvalidInputError) as err:
        ds.optimize.compact_files(target_rows_per_fragment=0)
    assert str(err.value) == (
        "invalid input: CompactionOptions::target_rows_per_fragment must be greater than 0 "
        "(use None for no limit)"
    )
    with pytest.raises(refract.InvalidInputError) as err:
        refract.optimize.Compaction.plan(ds, {"target_rows": 5})
    assert "unknown compaction option(s) target_rows" in str(err.value)
    with pytest.raises(TypeError):
        refract.write_dataset(object(), uri + "-x")


def test_error_part_way_through_a_stream_is_typed(uri):
    ds = refract.write_dataset(numbered(0, 20), uri, max_rows_per_file=10)
    # The second fragment's data file goes missing after the dataset opened.
    second = ds.get_fragments()[1]
    missing = Path(uri, second.files[0]["path"])
    missing.unlink()
    seen = []
    with pytest.raises(refract.NotFoundError) as err:
        for batch in ds.to_batches(batch_size=5, columns=["id"]):
            seen.extend(batch.column(0).to_pylist())
    assert seen == list(range(10))
    assert missing.name in str(err.value)
    assert str(err.value).startswith("not found: ")
    # to_table reads the whole result first: the same typed error.
    with pytest.raises(refract.NotFoundError) as whole:
        ds.to_table()
    assert str(whole.value) == str(err.value)


def test_error_messages_match_the_cli(uri, refract_cli):
    from conftest import run_cli

    ds = refract.write_dataset(numbered(0, 3), uri)
    status, _, stderr = run_cli(refract_cli, "scan", uri, "--filter", "nope = 1")
    assert status != 0
    with pytest.raises(refract.InvalidInputError) as err:
        ds.to_table(filter="nope = 1")
    assert str(err.value) in stderr
    status, _, stderr = run_cli(refract_cli, "scan", uri, "--version", "42")
    with pytest.raises(refract.NotFoundError) as err:
        ds.checkout_version(42)
    assert str(err.value) in stderr


def test_conflict_error_keeps_retryable_through_pickle():
    error = refract.ConflictError("commit conflict (retryable: true): x")
    error.retryable = True
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, refract.ConflictError)
    assert copy.retryable is True
    assert str(copy) == str(error)


def test_dataset_pickles_by_uri_and_version(uri):
    ds = refract.write_dataset(numbered(0, 3), uri)
    ds.delete("id = 0")
    old = pickle.loads(pickle.dumps(ds.checkout_version(2)))
    assert (old.uri, old.version, old.count_rows()) == (uri, 2, 3)
