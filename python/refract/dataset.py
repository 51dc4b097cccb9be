"""Datasets: writing, opening, scanning, deleting, versions, tags, indices
and maintenance, shaped like pylance's ``LanceDataset``."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import pyarrow as pa

from . import _refract
from .errors import InvalidInputError

__all__ = [
    "Dataset",
    "LanceDataset",
    "Scanner",
    "Fragment",
    "Tags",
    "CleanupStats",
    "dataset",
    "write_dataset",
]

#: Rows per data file (and so per fragment) written by default.
DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
#: Rows per row group handed to the Lance writer by default.
DEFAULT_MAX_ROWS_PER_GROUP = 65536


def _stream_source(data: Any, schema: Optional[pa.Schema]) -> Any:
    """An object with ``__arrow_c_stream__`` holding ``data``'s rows."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif type(data).__module__.split(".")[0] == "pandas":
        data = pa.Table.from_pandas(data, preserve_index=False)
    elif not hasattr(data, "__arrow_c_stream__"):
        if hasattr(data, "__arrow_c_array__"):
            data = pa.Table.from_batches([pa.record_batch(data)])
        elif schema is not None and hasattr(data, "__iter__"):
            data = pa.RecordBatchReader.from_batches(schema, iter(data))
        else:
            raise TypeError(
                "data must be a pyarrow Table, RecordBatch or RecordBatchReader, a pandas "
                "DataFrame, an object with __arrow_c_stream__, or an iterable of "
                f"RecordBatches with a schema; got {type(data).__name__}"
            )
    if schema is not None:
        if isinstance(data, pa.Table):
            data = data.cast(schema)
        elif isinstance(data, pa.RecordBatchReader):
            if not data.schema.equals(schema):
                data = data.cast(schema)
        else:
            data = pa.table(data).cast(schema)
    return data


def write_dataset(
    data: Any,
    uri: str,
    schema: Optional[pa.Schema] = None,
    mode: str = "create",
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP,
    storage_options: Optional[Dict[str, str]] = None,
) -> "Dataset":
    """Write ``data`` to a Refract dataset at ``uri`` and return it.

    ``data`` is a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``,
    a pandas DataFrame, any object with ``__arrow_c_stream__`` (polars frames,
    DuckDB results, ...), or an iterable of ``RecordBatch`` given with
    ``schema``. Batches stream through without being collected first.

    ``mode="create"`` makes a new dataset (an existing one is an
    ``InvalidInputError``): version 1 holds the schema, version 2 the rows.
    ``mode="append"`` adds the rows as new fragments at the end, creating the
    dataset when absent; the schema must match the table's. A new data file
    (fragment) is cut every ``max_rows_per_file`` rows.

    ``storage_options`` configure a cloud store (object_store's lowercase
    keys, e.g. ``aws_endpoint``, ``aws_region``, ``allow_http``); ``AWS_*``,
    ``AZURE_*`` and ``GOOGLE_*`` environment variables fill the keys left out.
    """
    source = _stream_source(data, schema)
    native = _refract.Dataset.write(
        source,
        str(uri),
        mode,
        max_rows_per_file,
        max_rows_per_group,
        storage_options,
    )
    return Dataset(native, storage_options)


def dataset(
    uri: str,
    version: Optional[Union[int, str]] = None,
    storage_options: Optional[Dict[str, str]] = None,
) -> "Dataset":
    """Open the dataset at ``uri``: the latest version, or ``version`` (a
    version number or a tag name).

    A missing dataset, version or tag raises ``NotFoundError``.
    ``storage_options`` as for :func:`write_dataset`.
    """
    if isinstance(version, str):
        native = _refract.Dataset.open(str(uri), None, storage_options).checkout_tag(version)
    else:
        native = _refract.Dataset.open(str(uri), version, storage_options)
    return Dataset(native, storage_options)


class CleanupStats:
    """What :meth:`Dataset.cleanup_old_versions` removed (or, in a dry run, would remove)."""

    def __init__(self, report: Dict[str, Any]):
        #: Bytes of the removed files.
        self.bytes_removed: int = report["bytes_freed"]
        #: Number of versions expired.
        self.old_versions: int = len(report["expired_versions"])
        #: The expired versions, ascending.
        self.expired_versions: List[int] = report["expired_versions"]
        #: The versions kept, ascending.
        self.retained_versions: List[int] = report["retained_versions"]
        #: Removed files: dicts with ``path``, ``kind`` and ``size_bytes``.
        self.removed_files: List[Dict[str, Any]] = report["removed"]
        #: True when nothing was deleted.
        self.dry_run: bool = report["dry_run"]

    def __repr__(self) -> str:
        return (
            f"CleanupStats(bytes_removed={self.bytes_removed}, old_versions={self.old_versions}, "
            f"dry_run={self.dry_run})"
        )


class Tags:
    """Named versions of a dataset (``Dataset.tags``); cleanup never expires a tagged version."""

    def __init__(self, ds: "Dataset"):
        self._ds = ds

    def create(self, tag: str, version: Optional[int] = None) -> None:
        """Name ``version`` (default: the latest) ``tag``; an existing tag is an error."""
        native = self._ds._native
        if version is None:
            version = native.latest_version()
        native.create_tag(tag, version)

    def delete(self, tag: str) -> None:
        """Remove ``tag`` (the version stays)."""
        self._ds._native.delete_tag(tag)

    def list(self) -> Dict[str, Dict[str, int]]:
        """Every tag: ``{name: {"version": n}}``."""
        return {name: {"version": v} for name, v in self._ds._native.list_tags().items()}

    def get_version(self, tag: str) -> int:
        """The version ``tag`` names (``NotFoundError`` when absent)."""
        return self._ds._native.checkout_tag(tag).version


class Fragment:
    """One fragment of a dataset version (``Dataset.get_fragments()``)."""

    def __init__(self, ds: "Dataset", info: tuple):
        fragment_id, physical_rows, deleted_rows, files = info
        self._ds = ds
        #: The fragment id.
        self.fragment_id: int = fragment_id
        #: Rows stored in the data file, deleted ones included.
        self.physical_rows: int = physical_rows
        #: Rows marked deleted.
        self.num_deletions: int = deleted_rows
        #: Data files: dicts with ``path``, ``size_bytes`` and ``num_rows``.
        self.files: List[Dict[str, Any]] = [
            {"path": p, "size_bytes": s, "num_rows": n} for p, s, n in files
        ]

    def count_rows(self, filter: Optional[str] = None) -> int:
        """Live rows of this fragment, optionally only those matching ``filter``."""
        if filter is None:
            return self.physical_rows - self.num_deletions
        return self._ds.scanner(filter=filter, fragments=[self.fragment_id]).count_rows()

    def to_table(self, **kwargs: Any) -> pa.Table:
        """This fragment's rows; the arguments of :meth:`Dataset.to_table`."""
        return self._ds.to_table(fragments=[self.fragment_id], **kwargs)

    def __repr__(self) -> str:
        return (
            f"Fragment(id={self.fragment_id}, physical_rows={self.physical_rows}, "
            f"num_deletions={self.num_deletions})"
        )


def _typed_errors(reader: pa.RecordBatchReader, stream: Any) -> Iterator[pa.RecordBatch]:
    """``reader``'s batches; the C stream interface carries only a message,
    so an error that ends ``stream`` is re-raised as its typed exception."""
    try:
        yield from reader
    except pa.ArrowException:
        typed = stream.take_error()
        if typed is None:
            raise
        raise typed from None


class Scanner:
    """A configured scan of one dataset version (``Dataset.scanner(...)``).

    Rows come in positional (scan) order; a filter keeps matching rows, a
    limit stops after that many.
    """

    def __init__(self, ds: "Dataset", **options: Any):
        self._ds = ds
        self._options = options

    def _stream(self, stream: bool) -> Any:
        o = self._options
        fragments = o.get("fragments")
        if fragments is not None:
            fragments = [f.fragment_id if isinstance(f, Fragment) else int(f) for f in fragments]
        return self._ds._native.scan(
            o.get("columns"),
            o.get("filter"),
            o.get("limit"),
            bool(o.get("with_row_address", False)),
            o.get("batch_size"),
            fragments,
            stream,
        )

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the batches this scan yields."""
        return self.to_reader().schema

    def to_table(self) -> pa.Table:
        """Every matching row as one table (read with the GIL released)."""
        return pa.table(self._stream(False))

    def to_reader(self) -> pa.RecordBatchReader:
        """A streaming reader: batches are read as they are pulled."""
        return pa.RecordBatchReader.from_stream(self._stream(True))

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Iterate the matching rows batch by batch (streaming). A failure
        part-way raises its typed ``refract`` error, as ``to_table`` does."""
        stream = self._stream(True)
        reader = pa.RecordBatchReader.from_stream(stream)
        return _typed_errors(reader, stream)

    def count_rows(self) -> int:
        """Matching rows (metadata only without a filter or fragments)."""
        o = self._options
        if o.get("fragments") is None and o.get("limit") is None:
            return self._ds._native.count_rows(o.get("filter"))
        return sum(batch.num_rows for batch in self.to_batches())


class Dataset:
    """One version of a Refract dataset; pylance's ``LanceDataset`` shape.

    Read methods read this handle's version. Writes (``delete``,
    ``restore``, index builds, ``optimize.compact_files``, maintenance)
    commit a new version and move the handle to it, as in pylance.
    """

    def __init__(self, native: Any, storage_options: Optional[Dict[str, str]] = None):
        self._native = native
        self._storage_options = dict(storage_options) if storage_options else None

    # -- identity and pickling ------------------------------------------------

    @property
    def uri(self) -> str:
        """The URI the dataset was opened with."""
        return self._native.uri

    @property
    def version(self) -> int:
        """This handle's version."""
        return self._native.version

    @property
    def latest_version(self) -> int:
        """The highest committed version (listed from storage)."""
        return self._native.latest_version()

    def __reduce__(self):
        return (dataset, (self.uri, self.version, self._storage_options))

    def __repr__(self) -> str:
        return f"Dataset(uri={self.uri!r}, version={self.version})"

    # -- reading ---------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The table schema."""
        return pa.schema(self._native.schema())

    def scanner(
        self,
        columns: Optional[Sequence[str]] = None,
        filter: Optional[str] = None,
        limit: Optional[int] = None,
        with_row_address: bool = False,
        batch_size: Optional[int] = None,
        fragments: Optional[Sequence[Union[int, Fragment]]] = None,
    ) -> Scanner:
        """A scan of this version.

        ``columns`` selects and orders the output columns; ``filter`` is a
        Refract predicate (comparisons, ``%`` on integers, ``IN``, ``IS [NOT]
        NULL``, ``contains(col, 'x')``, ``AND``/``OR``/``NOT``);
        ``with_row_address`` adds the UInt64 column ``_rowaddr``
        (``fragment_id << 32 | offset``) last; ``fragments`` restricts the
        scan to those fragments (still in manifest order).
        """
        return Scanner(
            self,
            columns=list(columns) if columns is not None else None,
            filter=filter,
            limit=limit,
            with_row_address=with_row_address,
            batch_size=batch_size,
            fragments=fragments,
        )

    def to_table(
        self,
        columns: Optional[Sequence[str]] = None,
        filter: Optional[str] = None,
        limit: Optional[int] = None,
        with_row_address: bool = False,
        batch_size: Optional[int] = None,
        fragments: Optional[Sequence[Union[int, Fragment]]] = None,
    ) -> pa.Table:
        """The matching rows of this version as a ``pyarrow.Table``, in scan order."""
        return self.scanner(columns, filter, limit, with_row_address, batch_size, fragments).to_table()

    def to_batches(
        self,
        columns: Optional[Sequence[str]] = None,
        filter: Optional[str] = None,
        limit: Optional[int] = None,
        with_row_address: bool = False,
        batch_size: Optional[int] = None,
        fragments: Optional[Sequence[Union[int, Fragment]]] = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the matching rows batch by batch."""
        return self.scanner(columns, filter, limit, with_row_address, batch_size, fragments).to_batches()

    def head(self, num_rows: int, columns: Optional[Sequence[str]] = None) -> pa.Table:
        """The first ``num_rows`` rows."""
        return self.to_table(columns=columns, limit=num_rows)

    def count_rows(self, filter: Optional[str] = None) -> int:
        """Live rows, optionally only those matching ``filter`` (metadata only without one)."""
        return self._native.count_rows(filter)

    def get_fragments(self) -> List[Fragment]:
        """The fragments of this version, in scan order."""
        return [Fragment(self, info) for info in self._native.fragments()]

    def get_fragment(self, fragment_id: int) -> Optional[Fragment]:
        """The fragment ``fragment_id``, or None."""
        for fragment in self.get_fragments():
            if fragment.fragment_id == fragment_id:
                return fragment
        return None

    # -- writing ----------------------------------------------------------------

    def delete(self, predicate: str) -> Dict[str, int]:
        """Delete the rows matching ``predicate`` (deletion files); the handle
        moves to the new version. Returns ``{"num_deleted_rows": n}``."""
        self._native, deleted = self._native.delete(predicate)
        return {"num_deleted_rows": deleted}

    def insert(self, data: Any, **kwargs: Any) -> None:
        """Append ``data`` (see :func:`write_dataset`); the handle moves to the new version."""
        written = write_dataset(
            data, self.uri, mode="append", storage_options=self._storage_options, **kwargs
        )
        self._native = written._native

    # -- versions -----------------------------------------------------------------

    def versions(self) -> List[Dict[str, Any]]:
        """Every committed version, ascending: dicts with ``version``,
        ``timestamp`` (a timezone-aware ``datetime``), ``operation`` and
        ``metadata``."""
        return [
            {
                "version": version,
                "timestamp": _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc),
                "operation": operation,
                "metadata": {},
            }
            for version, ms, operation in self._native.versions()
        ]

    def checkout_version(self, version: Union[int, str]) -> "Dataset":
        """A new handle on ``version`` (a number or a tag name)."""
        if isinstance(version, str):
            native = self._native.checkout_tag(version)
        else:
            native = self._native.checkout_version(version)
        return Dataset(native, self._storage_options)

    def checkout_latest(self) -> "Dataset":
        """A new handle on the latest version."""
        return Dataset(self._native.checkout_latest(), self._storage_options)

    def restore(self) -> None:
        """Commit a new version equal to this (older) one; the handle moves to it."""
        self._native = self._native.restore()

    @property
    def tags(self) -> Tags:
        """Named versions: ``create``, ``delete``, ``list``."""
        return Tags(self)

    def cleanup_old_versions(
        self,
        older_than: Optional[_dt.timedelta] = None,
        *,
        keep_last: Optional[int] = None,
        dry_run: bool = False,
    ) -> CleanupStats:
        """Expire versions older than ``older_than`` and beyond the newest
        ``keep_last``, then delete the files only they referenced. The
        latest and every tagged version are always kept. With neither bound,
        two weeks of versions are kept (the CLI's default). ``dry_run`` lists
        without deleting."""
        if older_than is None and keep_last is None:
            older_than = _dt.timedelta(days=14)
        seconds = older_than.total_seconds() if older_than is not None else None
        report = self._native.cleanup_old_versions(seconds, keep_last, True, dry_run)
        return CleanupStats(json.loads(report))

    # -- indices -------------------------------------------------------------------

    def create_scalar_index(
        self,
        column: str,
        index_type: str,
        name: Optional[str] = None,
        *,
        replace: bool = False,
        page_rows: Optional[int] = None,
    ) -> "Dataset":
        """Build a scalar index (``"BTREE"``, ``"BITMAP"`` or ``"NGRAM"``) on
        ``column`` over every fragment; the name defaults to
        ``f"{column}_idx"``. ``replace`` drops an existing index of that name
        first. Returns this dataset, moved to the new version."""
        return self._create_index(column, index_type, name, replace, page_rows=page_rows)

    def create_index(
        self,
        column: str,
        index_type: str = "IVF_FLAT",
        name: Optional[str] = None,
        *,
        metric: str = "L2",
        num_partitions: Optional[int] = None,
        sample_rate: Optional[int] = None,
        max_iterations: Optional[int] = None,
        replace: bool = False,
    ) -> "Dataset":
        """Build a vector index (``"IVF_FLAT"``; scalar types work too) on
        ``column``: ``num_partitions`` k-means partitions trained on
        ``sample_rate`` rows per partition for ``max_iterations``, distance
        ``metric`` ``"L2"``, ``"cosine"`` or ``"dot"``. Returns this dataset,
        moved to the new version."""
        return self._create_index(
            column,
            index_type,
            name,
            replace,
            partitions=num_partitions,
            sample_rate=sample_rate,
            max_iterations=max_iterations,
            metric=metric,
        )

    def _create_index(
        self,
        column: str,
        index_type: str,
        name: Optional[str],
        replace: bool,
        partitions: Optional[int] = None,
        sample_rate: Optional[int] = None,
        max_iterations: Optional[int] = None,
        metric: Optional[str] = None,
        page_rows: Optional[int] = None,
    ) -> "Dataset":
        name = name if name is not None else f"{column}_idx"
        if replace and any(index["name"] == name for index in self.list_indices()):
            self._native = _refract.drop_index_py(self._native, name)
        self._native = _refract.create_index_py(
            self._native,
            name,
            column,
            index_type.lower(),
            partitions,
            sample_rate,
            max_iterations,
            metric,
            page_rows,
        )
        return self

    def drop_index(self, name: str) -> None:
        """Remove every segment of the index ``name`` (files stay until cleanup)."""
        self._native = _refract.drop_index_py(self._native, name)

    def list_indices(self) -> List[Dict[str, Any]]:
        """The user indices: dicts with ``name``, ``type``, ``fields``,
        ``fragment_ids`` (the union over segments), ``version`` (newest
        segment) and ``segments`` (``uuid``, ``fragments``,
        ``dataset_version``, ``index_version``)."""
        out = []
        for index in json.loads(_refract.list_indices_py(self._native)):
            fragment_ids = set()
            for segment in index["segments"]:
                fragment_ids.update(segment["fragments"] or [])
            out.append(
                {
                    "name": index["name"],
                    "type": index["index_type"],
                    "fields": index["fields"],
                    "uuid": index["segments"][0]["uuid"],
                    "version": max(s["dataset_version"] for s in index["segments"]),
                    "fragment_ids": fragment_ids,
                    "segments": index["segments"],
                }
            )
        return out

    def query(
        self,
        filter: Optional[str] = None,
        nearest: Optional[Dict[str, Any]] = None,
        columns: Optional[Sequence[str]] = None,
        *,
        use_index: bool = True,
        explain: bool = False,
    ) -> Any:
        """An index-aware query: the rows matching ``filter`` and/or the
        nearest neighbours ``nearest = {"column": c, "q": vector, "k": 10,
        "nprobes": 1, "metric": "L2"}`` (pylance's form). The result has the
        projected columns, then ``_rowaddr`` (and ``_distance`` for kNN).
        Indices whose segments predate a deferred compaction are read through
        the fragment reuse index. ``explain=True`` returns ``(table,
        explain_dict)``."""
        near = None
        metric = None
        if nearest is not None:
            vector = nearest["q"]
            if hasattr(vector, "tolist"):
                vector = vector.tolist()
            near = (
                nearest["column"],
                [float(x) for x in vector],
                int(nearest.get("k", 10)),
                int(nearest.get("nprobes", 1)),
            )
            metric = nearest.get("metric")
        stream, explain_json = _refract.query_py(
            self._native,
            filter,
            list(columns) if columns is not None else None,
            near,
            metric,
            use_index,
        )
        table = pa.table(stream)
        if explain:
            return table, json.loads(explain_json)
        return table

    # -- maintenance -------------------------------------------------------------------

    @property
    def optimize(self) -> "Any":
        """Compaction and index maintenance: ``compact_files``, ``optimize_indices``."""
        from .optimize import DatasetOptimizer

        return DatasetOptimizer(self)

    def partition_fragments(
        self,
        column: str,
        destinations: Optional[int] = None,
        *,
        boundaries: Optional[Sequence[int]] = None,
        fragments: Optional[Sequence[int]] = None,
    ) -> Dict[str, Any]:
        """Stable-partition rewrite of a contiguous run of fragments (all
        by default) by ``column``: hashed into ``destinations`` fragments, or
        by ascending range ``boundaries``. Rows keep their relative order in
        each destination; the rewrite is recorded in the fragment reuse index
        when indices need it. Returns the metrics."""
        self._native, report = _refract.partition_fragments_py(
            self._native,
            column,
            destinations,
            list(boundaries) if boundaries is not None else None,
            list(fragments) if fragments is not None else None,
        )
        return json.loads(report)

    def remap_indices(
        self,
        index_names: Optional[Sequence[str]] = None,
        *,
        budget_bytes: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Rewrite every eligible index segment onto current row addresses
        (so queries stop translating through the fragment reuse index).
        Returns the report: ``committed_version`` and one entry per segment."""
        self._native, report = _refract.remap_indices_py(
            self._native,
            list(index_names) if index_names is not None else None,
            budget_bytes,
        )
        return json.loads(report)

    def trim_fri(self) -> Dict[str, Any]:
        """Prune superseded index segments and drop the fragment-reuse-index
        history no segment needs. Returns the report."""
        self._native, report = _refract.trim_fri_py(self._native)
        return json.loads(report)

    def describe_fri(self) -> Dict[str, Any]:
        """The fragment reuse index (Lance's ``__lance_frag_reuse``) of this
        version: ``fri_uuid``, ``index_version``, ``storage``, ``fri_flag``
        and ``transitions`` (``kind``, ``legacy``, ``dataset_version``,
        ``sources``, ``destinations``, ``fingerprint``, ``map_id``), oldest
        first; no ``fri_uuid`` and no transitions without one."""
        return json.loads(_refract.describe_fri_py(self._native))

    def maintain(
        self,
        compaction: Optional[Dict[str, Any]] = None,
        *,
        compact: bool = True,
        reindex: bool = False,
        until_noop: bool = False,
        max_rounds: Optional[int] = None,
        index_names: Optional[Sequence[str]] = None,
        budget_bytes: Optional[int] = None,
        keep_last: Optional[int] = None,
        older_than: Optional[_dt.timedelta] = None,
    ) -> Dict[str, Any]:
        """Compaction (``compaction`` options; none with ``compact=False``),
        then ``remap_indices``, then ``trim_fri``; with ``until_noop`` rounds
        repeat until one commits nothing (at most ``max_rounds``, default 16).
        ``reindex`` indexes live fragments no segment stores. With
        ``keep_last``/``older_than`` old versions then expire as in
        :meth:`cleanup_old_versions`. Returns the report (``rounds``,
        ``converged``, ``final_version``, ``retention``)."""
        from .optimize import _options_json

        options = _options_json(compaction or {}) if compact else None
        self._native, report = _refract.maintain_py(
            self._native,
            options,
            reindex,
            until_noop,
            max_rounds,
            list(index_names) if index_names is not None else None,
            budget_bytes,
            keep_last,
            older_than.total_seconds() if older_than is not None else None,
        )
        return json.loads(report)

    def fri(self) -> Dict[str, Any]:
        """The fragment reuse index of this version (flags, storage, transitions)."""
        return json.loads(self._native.fri())


#: pylance's name for the dataset class.
LanceDataset = Dataset
