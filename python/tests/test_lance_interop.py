"""One table, two engines: pylance 14.0.2 and Refract read and write the same
Lance datasets, on local disk and on the test S3 server."""

import lance
import pyarrow as pa
import pytest

import refract
from conftest import lance_opts, numbered, pylance, run_cli


def assert_verifies(cli, uri, options):
    """`refract verify` passes (local tables: the CLI takes S3 options from the environment)."""
    if options is None:
        status, out, err = run_cli(cli, "verify", uri)
        assert status == 0, out + err


def assert_same_rows(uri, options, version=None):
    """Both engines return the same rows in the same order at `version`."""
    theirs = pylance(uri, options, version=version).to_table()
    ours = refract.dataset(uri, version=version, storage_options=options).to_table()
    assert ours.to_pylist() == theirs.to_pylist()
    return ours


@pytest.mark.parametrize("storage_version", ["2.0", "2.1", "2.2"])
def test_refract_reads_every_version_pylance_writes(location, storage_version, refract_cli):
    uri, options = location
    lance.write_dataset(
        numbered(0, 100), uri, max_rows_per_file=30,
        data_storage_version=storage_version, **lance_opts(options),
    )
    ds = pylance(uri, options)
    ds.delete("id % 9 = 0")
    lance.write_dataset(numbered(100, 130), uri, mode="append", **lance_opts(options))
    ds = pylance(uri, options)
    ds.update({"name": "'changed'"}, where="id < 5")
    ds = pylance(uri, options)
    new = numbered(120, 140)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(new)
    ds = pylance(uri, options)
    ds.tags.create("before-overwrite", ds.version)
    lance.write_dataset(numbered(500, 510), uri, mode="overwrite", **lance_opts(options))
    latest = pylance(uri, options)
    ours = refract.dataset(uri, storage_options=options)
    assert ours.version == latest.version
    assert [v["version"] for v in ours.versions()] == [v["version"] for v in latest.versions()]
    for version in range(1, latest.version + 1):
        assert_same_rows(uri, options, version)
    assert ours.tags.get_version("before-overwrite") == latest.tags.get_version("before-overwrite")
    assert_verifies(refract_cli, uri, options)


def test_pylance_reads_every_version_refract_writes(location):
    uri, options = location
    ds = refract.write_dataset(numbered(0, 60), uri, max_rows_per_file=10, storage_options=options)
    ds.delete("id % 7 = 0")
    ds.insert(numbered(60, 80))
    ds.optimize.compact_files(target_rows_per_fragment=25)
    ds.tags.create("compacted", ds.version)
    for version in range(1, ds.version + 1):
        assert_same_rows(uri, options, version)
    theirs = pylance(uri, options)
    theirs.validate()
    assert theirs.tags.list()["compacted"]["version"] == ds.version
    assert theirs.to_table(filter="id >= 70").num_rows == 10


def test_pylance_keeps_writing_after_refract(location):
    uri, options = location
    ds = refract.write_dataset(numbered(0, 40), uri, max_rows_per_file=10, storage_options=options)
    ds.delete("id < 3")
    lance.write_dataset(numbered(40, 50), uri, mode="append", **lance_opts(options))
    theirs = pylance(uri, options)
    theirs.delete("id = 45")
    theirs.optimize.compact_files(target_rows_per_fragment=100)
    theirs = pylance(uri, options)
    theirs.create_scalar_index("id", "BTREE")
    theirs = pylance(uri, options)
    theirs.validate()
    expected = [i for i in range(3, 50) if i != 45]
    ours = refract.dataset(uri, storage_options=options)
    assert ours.version == theirs.version
    assert ours.to_table().column("id").to_pylist() == expected
    # Refract writes on top of pylance's compaction and index.
    ours.insert(numbered(50, 55))
    ours.delete("id = 50")
    final = pylance(uri, options)
    final.validate()
    assert final.to_table().column("id").to_pylist() == expected + [51, 52, 53, 54]
    assert final.to_table(filter="id = 52").column("id").to_pylist() == [52]


def test_refract_maintains_a_pylance_table(location, refract_cli):
    uri, options = location
    lance.write_dataset(numbered(0, 200), uri, max_rows_per_file=20, **lance_opts(options))
    pylance(uri, options).delete("id % 5 = 0")
    before = pylance(uri, options).to_table()
    ours = refract.dataset(uri, storage_options=options)
    ours.optimize.compact_files(target_rows_per_fragment=64)
    assert ours.optimize.compact_files(target_rows_per_fragment=64).committed_version is None
    theirs = pylance(uri, options)
    theirs.validate()
    assert theirs.version == ours.version
    assert theirs.to_table().to_pylist() == before.to_pylist()
    assert [f.count_rows() for f in theirs.get_fragments()] == [80, 80]
    assert_verifies(refract_cli, uri, options)


def test_refuses_stable_row_ids(uri):
    lance.write_dataset(numbered(0, 10), uri, enable_stable_row_ids=True)
    with pytest.raises(refract.errors.NotSupportedError) as err:
        refract.dataset(uri).to_table()
    assert "\n" not in str(err.value)


def _pylance_append(uri, options, start):
    lance.write_dataset(numbered(start, start + 10), uri, mode="append", **lance_opts(options))
    return "appended"


def _refract_compact(uri, options):
    ds = refract.dataset(uri, storage_options=options)
    try:
        ds.optimize.compact_files(target_rows_per_fragment=1000)
    except refract.errors.ConflictError as err:
        assert err.retryable, err
        return "conflict"
    return "compacted"


def test_pylance_append_races_refract_compaction(location):
    """Two engines, two processes, one table: nothing is lost, nothing resurrected."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    uri, options = location
    outcomes = []
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        for trial in range(20):
            trial_uri = f"{uri}-{trial}"
            lance.write_dataset(numbered(0, 50), trial_uri, max_rows_per_file=10, **lance_opts(options))
            pylance(trial_uri, options).delete("id % 4 = 0")
            append = pool.submit(_pylance_append, trial_uri, options, 1000)
            compact = pool.submit(_refract_compact, trial_uri, options)
            outcomes.append((append.result(), compact.result()))
            expected = sorted([i for i in range(50) if i % 4] + list(range(1000, 1010)))
            theirs = pylance(trial_uri, options)
            assert sorted(theirs.to_table().column("id").to_pylist()) == expected, outcomes[-1]
            theirs.validate()
            ours = refract.dataset(trial_uri, storage_options=options)
            assert sorted(ours.to_table().column("id").to_pylist()) == expected
            # A table in either state compacts to completion afterwards.
            assert _refract_compact(trial_uri, options) == "compacted"
            assert pylance(trial_uri, options).to_table().column("id").to_pylist() == ours.checkout_latest().to_table().column("id").to_pylist()
    assert all(append == "appended" for append, _ in outcomes)


def test_partial_compaction_passes_pylance_validate(uri):
    lance.write_dataset(numbered(0, 10), uri)
    lance.write_dataset(numbered(10, 20), uri, mode="append")
    lance.write_dataset(numbered(20, 2000), uri, mode="append")
    refract.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    theirs = pylance(uri, None)
    assert theirs.to_table().column("id").to_pylist() == list(range(2000))
    theirs.validate()


def test_partition_before_the_tail_keeps_ids_sorted_for_pylance(location):
    """A stable partition of a run that is not the tail relabels the fragments
    after it: pylance validates every version and its commits move no row."""
    uri, options = location
    for start in (0, 100, 200, 300):
        mode = "create" if start == 0 else "append"
        lance.write_dataset(numbered(start, start + 100), uri, mode=mode, **lance_opts(options))
    pylance(uri, options).delete("id = 250 OR id = 350")
    ours = refract.dataset(uri, storage_options=options)
    first, second = [f.fragment_id for f in pylance(uri, options).get_fragments()][1:3]
    ours.partition_fragments("id", boundaries=[150], fragments=[first, second])
    theirs = pylance(uri, options)
    ids = [fragment.fragment_id for fragment in theirs.get_fragments()]
    assert ids == sorted(ids) and len(ids) == 4
    theirs.validate()
    want = [i for i in range(400) if i not in (250, 350)]
    assert theirs.to_table().column("id").to_pylist() == want
    lance.write_dataset(numbered(400, 410), uri, mode="append", **lance_opts(options))
    want += list(range(400, 410))
    assert pylance(uri, options).to_table().column("id").to_pylist() == want
    assert refract.dataset(uri, storage_options=options).to_table().column("id").to_pylist() == want
    pylance(uri, options).validate()


def test_partial_compaction_keeps_order_through_pylance_commits(location):
    """The fragment after the compacted run is relabelled (deletion file and
    all), so pylance's next commit, which sorts by id, moves no row."""
    uri, options = location
    lance.write_dataset(numbered(0, 10), uri, **lance_opts(options))
    lance.write_dataset(numbered(10, 20), uri, mode="append", **lance_opts(options))
    lance.write_dataset(numbered(20, 2000), uri, mode="append", **lance_opts(options))
    pylance(uri, options).delete("id = 1500")
    refract.dataset(uri, storage_options=options).optimize.compact_files(target_rows_per_fragment=1000)
    theirs = pylance(uri, options)
    ids = [fragment.fragment_id for fragment in theirs.get_fragments()]
    assert len(ids) == 2 and ids == sorted(ids)
    theirs.validate()
    lance.write_dataset(numbered(2000, 2010), uri, mode="append", **lance_opts(options))
    want = [i for i in range(2010) if i != 1500]
    assert pylance(uri, options).to_table().column("id").to_pylist() == want
    assert refract.dataset(uri, storage_options=options).to_table().column("id").to_pylist() == want
    pylance(uri, options).validate()


def test_the_demo_ends_with_a_table_pylance_reads_the_same(tmp_path, refract_cli):
    """`refract demo` runs on the Lance format; pylance opens its final
    dataset with the same rows, order and filter results, and validates it."""
    directory = tmp_path / "demo"
    status, out, err = run_cli(refract_cli, "demo", "--dir", str(directory))
    assert status == 0, err
    assert "query checks passed" in out
    theirs = lance.dataset(str(directory))
    theirs.validate()
    ours = refract.dataset(str(directory))
    assert theirs.version == ours.version
    columns = ["id", "category", "text"]
    assert theirs.to_table(columns=columns) == ours.to_table(columns=columns)
    for predicate in ("category = 3", "id >= 1000 AND id < 5000", "category IN (1, 7)"):
        want = theirs.to_table(columns=["id"], filter=predicate).column("id").to_pylist()
        got = ours.to_table(columns=["id"], filter=predicate).column("id").to_pylist()
        assert got == want and want, predicate
