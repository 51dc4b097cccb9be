"""pylance's own indices through Refract's maintenance, on local disk and on
the test S3 server: pylance builds an index, Refract maintains the table, and
pylance's indexed queries still equal its scans, `validate()` passes and
`list_indices()` keeps names and fields.

BTREE, BITMAP, LABEL_LIST and NGRAM are remapped inline (Refract rewrites
their files in pylance's layout: no fragment-reuse history is left behind);
INVERTED is not rewritten, so a compaction records the transition in Lance's
fragment reuse index and pylance translates through it.
"""

import os

import lance
import pyarrow as pa
import pytest

import refract
from conftest import lance_opts, pylance

FRI = "__lance_frag_reuse"
ROWS_PER_FRAGMENT = 250
FRAGMENTS = 6


def rows(start, stop):
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "category": pa.array([i % 7 for i in ids], pa.int32()),
            "name": pa.array([f"w{i % 13} v{i}" for i in ids], pa.string()),
            "tags": pa.array(
                [None if i % 17 == 4 else [f"t{i % 5}", f"u{i % 3}"] for i in ids],
                pa.list_(pa.string()),
            ),
        }
    )


# index type -> (column, filters answered through it, what each matches)
INDEXED = {
    "BTREE": ("id", {
        "id = 377": lambda r: r["id"] == 377,
        "id >= 1400": lambda r: r["id"] >= 1400,
        "id < 40": lambda r: r["id"] < 40,
        "id IN (3, 250, 251, 999)": lambda r: r["id"] in (3, 250, 251, 999),
    }),
    "BITMAP": ("category", {
        "category = 3": lambda r: r["category"] == 3,
        "category IN (0, 6)": lambda r: r["category"] in (0, 6),
        "category > 4": lambda r: r["category"] > 4,
    }),
    "NGRAM": ("name", {
        "contains(name, 'w11')": lambda r: "w11" in r["name"],
    }),
    "LABEL_LIST": ("tags", {
        "array_has_any(tags, ['t2'])": lambda r: r["tags"] is not None and "t2" in r["tags"],
    }),
    "INVERTED": ("name", {}),
}
REMAPPED_INLINE = {"BTREE", "BITMAP", "LABEL_LIST", "NGRAM"}


def pylance_table(uri, options, index_type):
    """pylance writes FRAGMENTS fragments, builds `index_type`, deletes every
    id % 9 = 2: the live rows, in order."""
    for i in range(FRAGMENTS):
        lance.write_dataset(
            rows(i * ROWS_PER_FRAGMENT, (i + 1) * ROWS_PER_FRAGMENT),
            uri,
            mode="append" if i else "create",
            **lance_opts(options),
        )
    column = INDEXED[index_type][0]
    pylance(uri, options).create_scalar_index(column, index_type)
    pylance(uri, options).delete("id % 9 = 2")
    return [r for r in rows(0, FRAGMENTS * ROWS_PER_FRAGMENT).to_pylist() if r["id"] % 9 != 2]


def user_indices(ds):
    return sorted(
        (i["name"], tuple(i["fields"]), i["type"]) for i in ds.list_indices() if i["name"] != FRI
    )


def fri_entries(ds):
    return [i for i in ds.describe_indices() if i.name == FRI]


def check_pylance_answers(uri, options, index_type, live, indices_before):
    """pylance validates the table, keeps its index entries, and answers
    every filter through its index with exactly the live matching rows."""
    theirs = pylance(uri, options)
    theirs.validate()
    assert theirs.to_table(columns=["id"]).column("id").to_pylist() == [r["id"] for r in live]
    assert user_indices(theirs) == indices_before
    for filter, matches in INDEXED[index_type][1].items():
        plan = theirs.scanner(filter=filter, columns=["id"]).explain_plan()
        assert "ScalarIndexQuery" in plan, (filter, plan)
        got = sorted(theirs.to_table(filter=filter, columns=["id"]).column("id").to_pylist())
        assert got == [r["id"] for r in live if matches(r)], filter
        scanned = theirs.to_table(filter=filter, columns=["id"], use_scalar_index=False)
        assert sorted(scanned.column("id").to_pylist()) == got, filter
    if index_type == "INVERTED":
        found = theirs.to_table(full_text_query="w11", columns=["id"]).column("id").to_pylist()
        assert sorted(found) == [r["id"] for r in live if r["name"].startswith("w11 ")]
    return theirs


def indexed_fragments(ds):
    return sorted({f for i in ds.list_indices() if i["name"] != FRI for f in i["fragment_ids"]})


@pytest.mark.parametrize("index_type", sorted(INDEXED))
def test_inline_compaction_keeps_pylance_indices_exact(location, index_type):
    uri, options = location
    live = pylance_table(uri, options, index_type)
    before = user_indices(pylance(uri, options))

    ours = refract.dataset(uri, storage_options=options)
    ours.optimize.compact_files(target_rows_per_fragment=700)
    assert ours.optimize.compact_files(target_rows_per_fragment=700).committed_version is None
    theirs = check_pylance_answers(uri, options, index_type, live, before)
    fragments = [f.fragment_id for f in theirs.get_fragments()]
    assert len(fragments) < FRAGMENTS
    if index_type in REMAPPED_INLINE:
        # Rewritten in place: the index covers the new fragments, no history.
        assert fri_entries(theirs) == []
        assert indexed_fragments(theirs) == sorted(fragments)
    else:
        # Not rewritten: the transition is in Lance's fragment reuse index.
        assert len(fri_entries(theirs)) == 1
    # pylance keeps writing and optimizing on top; nothing breaks.
    lance.write_dataset(rows(5000, 5010), uri, mode="append", **lance_opts(options))
    if index_type in REMAPPED_INLINE:
        pylance(uri, options).optimize.optimize_indices()
    live += rows(5000, 5010).to_pylist()
    check_pylance_answers(uri, options, index_type, live, before)


@pytest.mark.parametrize("index_type", sorted(INDEXED))
def test_deferred_compaction_then_remap_drains_pylance_history(location, index_type):
    uri, options = location
    live = pylance_table(uri, options, index_type)
    before = user_indices(pylance(uri, options))

    ours = refract.dataset(uri, storage_options=options)
    ours.optimize.compact_files(target_rows_per_fragment=700, defer_index_remap=True)
    assert len(fri_entries(pylance(uri, options))) == 1
    check_pylance_answers(uri, options, index_type, live, before)

    report = ours.remap_indices()
    if index_type not in REMAPPED_INLINE:
        # Not rewritten: it keeps translating through the history.
        assert [s["status"] for s in report["segments"]] == ["skipped"], report
        check_pylance_answers(uri, options, index_type, live, before)
        return
    assert [s["status"] for s in report["segments"]] == ["remapped"], report
    ours.trim_fri()
    assert ours.describe_fri()["transitions"] == []
    theirs = check_pylance_answers(uri, options, index_type, live, before)
    assert indexed_fragments(theirs) == sorted(f.fragment_id for f in theirs.get_fragments())
    # pylance's optimize_indices afterwards neither fails nor undoes it.
    theirs.optimize.optimize_indices()
    check_pylance_answers(uri, options, index_type, live, before)


@pytest.mark.parametrize("index_type", sorted(INDEXED))
def test_budgeted_compaction_until_noop_keeps_pylance_indices_exact(location, index_type):
    uri, options = location
    live = pylance_table(uri, options, index_type)
    before = user_indices(pylance(uri, options))

    ours = refract.dataset(uri, storage_options=options)
    rounds = 0
    while ours.optimize.compact_files(
        target_rows_per_fragment=1000, max_source_fragments=2
    ).committed_version is not None:
        rounds += 1
        assert rounds < 20
    assert rounds >= 2
    theirs = check_pylance_answers(uri, options, index_type, live, before)
    assert len(fri_entries(theirs)) == (0 if index_type in REMAPPED_INLINE else 1)
    assert len(theirs.get_fragments()) < FRAGMENTS


@pytest.mark.parametrize("index_type", sorted(INDEXED))
def test_partition_then_remap_keeps_pylance_indices_exact(location, index_type):
    uri, options = location
    live = pylance_table(uri, options, index_type)
    before = user_indices(pylance(uri, options))

    ours = refract.dataset(uri, storage_options=options)
    ours.partition_fragments("id", boundaries=[500, 1000])
    # Rows now run by id range; pylance translates through the partition.
    by_range = [r for lo, hi in ((0, 500), (500, 1000), (1000, 10**9)) for r in live if lo <= r["id"] < hi]
    check_pylance_answers(uri, options, index_type, by_range, before)
    ours.remap_indices()
    if index_type not in REMAPPED_INLINE:
        check_pylance_answers(uri, options, index_type, by_range, before)
        return
    ours.trim_fri()
    assert ours.describe_fri()["transitions"] == []
    theirs = check_pylance_answers(uri, options, index_type, by_range, before)
    assert indexed_fragments(theirs) == sorted(f.fragment_id for f in theirs.get_fragments())


@pytest.mark.parametrize("index_type", sorted(REMAPPED_INLINE))
def test_a_damaged_pylance_index_file_is_refused_and_nothing_commits(tmp_path, index_type):
    uri = str(tmp_path / "ds")
    live = pylance_table(uri, None, index_type)
    theirs = pylance(uri, None)
    version = theirs.version
    index_dir = os.path.join(uri, "_indices", str(theirs.describe_indices()[0].segments[0].uuid))
    name = {
        "BTREE": "page_lookup.lance",
        "BITMAP": "bitmap_page_lookup.lance",
        "LABEL_LIST": "bitmap_page_lookup.lance",
        "NGRAM": "ngram_postings.lance",
    }[index_type]
    path = os.path.join(index_dir, name)
    # pylance records no checksum: a truncated file (its footer gone) must
    # still be refused, not rewritten into a new version.
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-7])

    ours = refract.dataset(uri)
    with pytest.raises(refract.CorruptError):
        ours.optimize.compact_files(target_rows_per_fragment=700)
    assert refract.dataset(uri).version == version
    assert refract.dataset(uri).to_table(columns=["id"]).column("id").to_pylist() == [
        r["id"] for r in live
    ]


def vector_table(uri, options, index_type):
    """FRAGMENTS fragments of 8-dim vectors with pylance's `index_type` on
    `vec` (4 partitions): the vectors, by id."""
    import numpy as np

    n = FRAGMENTS * ROWS_PER_FRAGMENT
    vectors = np.random.default_rng(3).standard_normal((n, 8), dtype=np.float32)
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8),
    })
    for i in range(FRAGMENTS):
        lance.write_dataset(
            table.slice(i * ROWS_PER_FRAGMENT, ROWS_PER_FRAGMENT),
            uri,
            mode="append" if i else "create",
            **lance_opts(options),
        )
    params = {"num_sub_vectors": 2} if index_type == "IVF_PQ" else {}
    pylance(uri, options).create_index("vec", index_type, num_partitions=4, **params)
    return vectors


def nearest_ids(ds, vectors):
    """The ids of the 5 nearest rows of 6 fixed queries, at 1 and 4 probes."""
    out = []
    for q in vectors[[1, 77, 300, 808, 1111, 1499]]:
        for nprobes in (1, 4):
            table = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 5, "nprobes": nprobes})
            out.append(table.column("id").to_pylist())
    return out


@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_PQ"])
def test_compaction_keeps_pylance_vector_answers(location, index_type):
    uri, options = location
    vectors = vector_table(uri, options, index_type)
    theirs = pylance(uri, options)
    before = nearest_ids(theirs, vectors)
    indices = user_indices(theirs)

    # No row dropped: the row ids are rewritten in place, no history.
    ours = refract.dataset(uri, storage_options=options)
    ours.optimize.compact_files(target_rows_per_fragment=1000)
    theirs = pylance(uri, options)
    theirs.validate()
    assert user_indices(theirs) == indices
    assert fri_entries(theirs) == []
    assert indexed_fragments(theirs) == sorted(f.fragment_id for f in theirs.get_fragments())
    assert nearest_ids(theirs, vectors) == before

    # Rows dropped: the partitions would shrink, so the compaction records
    # the transition in the FRI and pylance drops the rows as it translates.
    pylance(uri, options).delete("id % 5 = 1")
    ours = refract.dataset(uri, storage_options=options)
    ours.optimize.compact_files(target_rows_per_fragment=5000)
    theirs = pylance(uri, options)
    theirs.validate()
    assert user_indices(theirs) == indices
    assert len(fri_entries(theirs)) == 1
    after = nearest_ids(theirs, vectors)
    gone = {i for i in range(len(vectors)) if i % 5 == 1}
    for old, new in zip(before, after):
        kept = [i for i in old if i not in gone]
        assert new[: len(kept)] == kept


@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_PQ"])
@pytest.mark.parametrize("operation", ["deferred", "partition"])
def test_remap_indices_catches_pylance_vector_indices_up(location, index_type, operation):
    uri, options = location
    vectors = vector_table(uri, options, index_type)
    before = nearest_ids(pylance(uri, options), vectors)
    ours = refract.dataset(uri, storage_options=options)
    if operation == "deferred":
        ours.optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    else:
        ours.partition_fragments("id", boundaries=[400, 900])
    # Through the history pylance translates as it loads each partition.
    assert nearest_ids(pylance(uri, options), vectors) == before
    report = ours.remap_indices()
    assert [s["status"] for s in report["segments"]] == ["remapped"], report
    ours.trim_fri()
    assert ours.describe_fri()["transitions"] == []
    theirs = pylance(uri, options)
    theirs.validate()
    assert indexed_fragments(theirs) == sorted(f.fragment_id for f in theirs.get_fragments())
    assert nearest_ids(theirs, vectors) == before


@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_PQ"])
def test_a_damaged_pylance_vector_index_is_refused_and_nothing_commits(tmp_path, index_type):
    uri = str(tmp_path / "ds")
    vector_table(uri, None, index_type)
    theirs = pylance(uri, None)
    version = theirs.version
    segment = theirs.describe_indices()[0].segments[0]
    path = os.path.join(uri, "_indices", str(segment.uuid), "auxiliary.idx")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-7])

    with pytest.raises(refract.CorruptError):
        refract.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    assert refract.dataset(uri).version == version
    assert len(refract.dataset(uri).get_fragments()) == FRAGMENTS
