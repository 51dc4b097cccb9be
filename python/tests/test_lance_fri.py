"""The fragment reuse index as Lance's `__lance_frag_reuse`: pylance's readers
translate through the history Refract records, and Refract reads and extends
the history pylance records, on local disk and on the test S3 server."""

import lance
import pytest

import refract
from conftest import lance_opts, numbered, pylance

FRI = "__lance_frag_reuse"


def four_fragments(uri, options, rows=100):
    for i in range(4):
        lance.write_dataset(
            numbered(i * rows, (i + 1) * rows),
            uri,
            mode="append" if i else "create",
            **lance_opts(options),
        )


def pylance_indexed_table(uri, options, modulus, remainder):
    """`four_fragments` with pylance's BTREE on `id`, then pylance deletes
    `id % modulus = remainder`: the live ids, in order."""
    four_fragments(uri, options)
    pylance(uri, options).create_scalar_index("id", "BTREE")
    pylance(uri, options).delete(f"id % {modulus} = {remainder}")
    return [i for i in range(400) if i % modulus != remainder]


def indexed_ids(ds, filter):
    """`id`s matching `filter` through pylance's scalar index (asserted used)."""
    plan = ds.scanner(filter=filter, columns=["id"]).explain_plan()
    assert "ScalarIndexQuery" in plan, plan
    return ds.to_table(filter=filter, columns=["id"]).column("id").to_pylist()


def fri_entries(ds):
    return [i for i in ds.describe_indices() if i.name == FRI]


FILTERS = {
    "id = 55": lambda i: i == 55,
    "id >= 390": lambda i: i >= 390,
    "id < 12": lambda i: i < 12,
    "id IN (100, 199, 200, 301)": lambda i: i in (100, 199, 200, 301),
}


def expected(ids, filter):
    return [i for i in ids if FILTERS[filter](i)]


def test_pylance_queries_its_index_through_refract_deferred_compaction(location):
    uri, options = location
    live = pylance_indexed_table(uri, options, 10, 3)

    ours = refract.dataset(uri, storage_options=options)
    ours.optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    assert ours.optimize.compact_files(target_rows_per_fragment=1000).committed_version is None

    theirs = pylance(uri, options)
    theirs.validate()
    assert [f.fragment_id for f in theirs.get_fragments()] == [4]
    assert len(fri_entries(theirs)) == 1
    # The user index still covers the old fragments: pylance translates its
    # row addresses through Refract's history.
    for f in FILTERS:
        assert indexed_ids(theirs, f) == expected(live, f), f
    # pylance keeps writing on top; Refract reads it back.
    lance.write_dataset(numbered(400, 410), uri, mode="append", **lance_opts(options))
    theirs = pylance(uri, options)
    assert indexed_ids(theirs, "id = 55") == [55]
    assert theirs.to_table().column("id").to_pylist() == live + list(range(400, 410))
    assert (
        refract.dataset(uri, storage_options=options).to_table().column("id").to_pylist()
        == live + list(range(400, 410))
    )


def test_refract_reads_and_extends_pylance_history(location):
    uri, options = location
    live = pylance_indexed_table(uri, options, 10, 0)
    # pylance's deferred compaction writes a version-0 history.
    pylance(uri, options).optimize.compact_files(
        target_rows_per_fragment=1000, defer_index_remap=True
    )
    theirs = pylance(uri, options)
    assert len(fri_entries(theirs)) == 1

    ours = refract.dataset(uri, storage_options=options)
    assert ours.to_table().column("id").to_pylist() == live
    described = ours.describe_fri()
    assert [t["legacy"] for t in described["transitions"]] == [True]
    assert described["transitions"][0]["sources"][0]["num_deleted_rows"] == 10

    # A delete makes the compacted fragment deletion-heavy; a Refract
    # deferred compaction on top keeps the legacy history as it is and
    # appends a tagged transition.
    pylance(uri, options).delete("id % 5 = 1")
    ours = refract.dataset(uri, storage_options=options)
    ours.optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    described = ours.describe_fri()
    assert [t["legacy"] for t in described["transitions"]] == [True, False]
    assert described["index_version"] == 1

    live = [i for i in live if i % 5 != 1]
    theirs = pylance(uri, options)
    theirs.validate()
    assert theirs.to_table().column("id").to_pylist() == live
    for f in FILTERS:
        assert indexed_ids(theirs, f) == expected(live, f), f
    # pylance rebuilds its index over current addresses; nothing breaks.
    theirs.optimize.optimize_indices()
    assert indexed_ids(pylance(uri, options), "id < 12") == [i for i in live if i < 12]


def test_pylance_queries_through_a_refract_stable_partition(location):
    uri, options = location
    live = pylance_indexed_table(uri, options, 7, 1)

    ours = refract.dataset(uri, storage_options=options)
    ours.partition_fragments("id", boundaries=[150, 300])
    theirs = pylance(uri, options)
    theirs.validate()
    rows = theirs.to_table().column("id").to_pylist()
    assert sorted(rows) == live
    # Ranges by id: each destination holds one range, in source order.
    assert rows == [i for i in live if i < 150] + [
        i for i in live if 150 <= i < 300
    ] + [i for i in live if i >= 300]
    for f in FILTERS:
        assert sorted(indexed_ids(theirs, f)) == expected(live, f), f


def test_refract_remap_and_trim_drain_the_history_pylance_sees(location):
    uri, options = location
    four_fragments(uri, options)
    ours = refract.dataset(uri, storage_options=options)
    ours.create_scalar_index("id", "BTREE")
    ours.delete("id % 9 = 4")
    ours.optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    assert len(fri_entries(pylance(uri, options))) == 1
    ours.remap_indices()
    ours.trim_fri()
    assert ours.describe_fri()["transitions"] == []
    theirs = pylance(uri, options)
    theirs.validate()
    assert theirs.to_table().column("id").to_pylist() == [i for i in range(400) if i % 9 != 4]
