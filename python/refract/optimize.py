"""Compaction, shaped like ``lance.optimize``: one call
(``ds.optimize.compact_files``) or distributed (``Compaction.plan`` →
``task.execute`` anywhere → ``Compaction.commit``).

Tasks and results are plain JSON underneath — the very form ``refract
compact-plan`` and ``refract compact-exec`` write — so they pickle, cross
process and machine boundaries, and mix with the CLI's files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence

from . import _refract
from .errors import InvalidInputError

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = [
    "CompactionOptions",
    "CompactionMetrics",
    "CompactionPlan",
    "CompactionTask",
    "RewriteResult",
    "Compaction",
    "DatasetOptimizer",
]

#: Option names ``compact_files`` and ``Compaction.plan`` accept: pylance's
#: (``target_rows_per_fragment`` … ``defer_index_remap``), then Refract's
#: source budgets, exclusions and page copying.
OPTION_NAMES = (
    "target_rows_per_fragment",
    "max_rows_per_group",
    "max_bytes_per_file",
    "materialize_deletions",
    "materialize_deletions_threshold",
    "num_threads",
    "batch_size",
    "defer_index_remap",
    "max_source_fragments",
    "max_source_rows",
    "max_source_bytes",
    "excluded_fragment_ids",
    "binary_copy",
    "binary_copy_min_source_rows",
)

#: The options as a dict (every key optional); see ``OPTION_NAMES``.
CompactionOptions = Dict[str, Any]


def _options_json(options: Optional[Dict[str, Any]]) -> str:
    """Validated-by-name options as the JSON the engine reads (unset: defaults)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise InvalidInputError(
            f"invalid input: unknown compaction option(s) {', '.join(unknown)}; "
            f"known: {', '.join(OPTION_NAMES)}"
        )
    if options.get("excluded_fragment_ids") is not None:
        options["excluded_fragment_ids"] = list(options["excluded_fragment_ids"])
    return json.dumps({k: v for k, v in options.items() if v is not None})


@dataclass(frozen=True)
class CompactionMetrics:
    """What a compaction commit changed (pylance's fields, plus the version)."""

    #: Fragments replaced.
    fragments_removed: int
    #: Fragments written.
    fragments_added: int
    #: Data files replaced.
    files_removed: int
    #: Data files written.
    files_added: int
    #: The version committed; None when nothing was.
    committed_version: Optional[int]

    @staticmethod
    def _from_json(text: str) -> "CompactionMetrics":
        m = json.loads(text)
        return CompactionMetrics(
            m["fragments_removed"],
            m["fragments_added"],
            m["files_removed"],
            m["files_added"],
            m["committed_version"],
        )


class RewriteResult:
    """The outcome of one executed task: new files written, not yet committed.

    Picklable; ``json()`` is the form ``refract compact-exec`` prints and
    ``refract compact-commit`` reads.
    """

    def __init__(self, result_json: str):
        task_index, read_version, old_ids, new_files, rows_read = _refract.describe_result_py(
            result_json
        )
        self._json = result_json
        #: The task's position in its plan.
        self.task_index: int = task_index
        #: The version the task read.
        self.read_version: int = read_version
        #: The fragments the result replaces, in order.
        self.original_fragment_ids: List[int] = old_ids
        #: Fragments written.
        self.num_new_fragments: int = new_files
        #: Rows read.
        self.rows_read: int = rows_read

    def json(self) -> str:
        """The result as JSON."""
        return self._json

    @staticmethod
    def from_json(text: str) -> "RewriteResult":
        """A result from its JSON (e.g. a ``refract compact-exec`` output)."""
        return RewriteResult(text)

    def __reduce__(self):
        return (RewriteResult, (self._json,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RewriteResult) and other._json == self._json

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return (
            f"RewriteResult(task_index={self.task_index}, read_version={self.read_version}, "
            f"original_fragment_ids={self.original_fragment_ids})"
        )


class CompactionTask:
    """One unit of work of a plan: rewrite one contiguous run of fragments.

    Picklable and serializable; ``execute`` may run in any process or machine
    that can reach the dataset's storage.
    """

    def __init__(self, task_json: str):
        task_index, read_version, fragment_ids = _refract.describe_task_py(task_json)
        self._json = task_json
        #: Position in the plan.
        self.task_index: int = task_index
        #: The version the fragments are read at.
        self.read_version: int = read_version
        #: The fragment ids rewritten, in order.
        self.fragments: List[int] = fragment_ids

    def execute(self, dataset: "Dataset") -> RewriteResult:
        """Read the task's fragments at its read version and write the new
        files; nothing is committed. ``dataset`` is any handle on the table."""
        return RewriteResult(_refract.execute_task_py(dataset._native, self._json))

    def json(self) -> str:
        """The task as JSON (an element of ``refract compact-plan``'s ``tasks``)."""
        return self._json

    @staticmethod
    def from_json(text: str) -> "CompactionTask":
        """A task from its JSON."""
        return CompactionTask(text)

    def __reduce__(self):
        return (CompactionTask, (self._json,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompactionTask) and other._json == self._json

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return f"CompactionTask(task_index={self.task_index}, fragments={self.fragments})"


class CompactionPlan:
    """What ``Compaction.plan`` returns: independent tasks at one read version."""

    def __init__(self, read_version: int, options: Dict[str, Any], tasks: List[CompactionTask]):
        #: The version every task reads.
        self.read_version = read_version
        #: The options the plan was made with (all fields, defaults filled).
        self.options = options
        #: The tasks, in plan order.
        self.tasks = tasks

    def num_tasks(self) -> int:
        """Number of tasks (0: nothing to compact)."""
        return len(self.tasks)

    def json(self) -> str:
        """The plan in ``refract compact-plan``'s form."""
        return json.dumps(
            {
                "read_version": self.read_version,
                "options": self.options,
                "tasks": [json.loads(t.json()) for t in self.tasks],
            }
        )

    def __repr__(self) -> str:
        return f"CompactionPlan(read_version={self.read_version}, tasks={len(self.tasks)})"


class Compaction:
    """Distributed compaction: plan, execute the tasks anywhere, commit."""

    @staticmethod
    def plan(dataset: "Dataset", options: Optional[CompactionOptions] = None) -> CompactionPlan:
        """Plan a compaction of ``dataset``'s version with ``options``
        (see ``OPTION_NAMES``). Order is always kept: each task replaces its
        run in place."""
        read_version, options_json, tasks = _refract.plan_compaction_py(
            dataset._native, _options_json(options)
        )
        return CompactionPlan(
            read_version, json.loads(options_json), [CompactionTask(t) for t in tasks]
        )

    @staticmethod
    def commit(dataset: "Dataset", rewrites: Iterable[RewriteResult]) -> CompactionMetrics:
        """Commit results of one plan — in any order, all at once or in
        batches — as one rewrite; ``dataset`` moves to the new version.
        Results that already landed commit nothing and report the version
        they landed in. A concurrent rewrite of the same fragments raises a
        retryable ``ConflictError``."""
        results = [r.json() for r in rewrites]
        native, metrics = _refract.commit_compaction_py(dataset._native, results)
        dataset._native = native
        return CompactionMetrics._from_json(metrics)


class DatasetOptimizer:
    """``Dataset.optimize``: compaction and index upkeep on one dataset."""

    def __init__(self, dataset: "Dataset"):
        self._dataset = dataset

    def compact_files(
        self,
        *,
        target_rows_per_fragment: int = 1024 * 1024,
        max_rows_per_group: int = 1024,
        max_bytes_per_file: Optional[int] = None,
        materialize_deletions: bool = True,
        materialize_deletions_threshold: float = 0.1,
        num_threads: Optional[int] = None,
        batch_size: Optional[int] = None,
        defer_index_remap: bool = False,
        max_source_fragments: Optional[int] = None,
        max_source_rows: Optional[int] = None,
        max_source_bytes: Optional[int] = None,
        excluded_fragment_ids: Optional[Sequence[int]] = None,
        binary_copy: bool = True,
    ) -> CompactionMetrics:
        """Plan, execute (in parallel) and commit one compaction run; the
        dataset moves to the new version. Unlike pylance's, rows keep their
        order. ``defer_index_remap`` records the rewrite in the fragment
        reuse index instead of rewriting index segments inline; the
        ``max_source_*`` budgets cap one run (repeated runs still converge);
        ``excluded_fragment_ids`` are never rewritten."""
        options = {
            "target_rows_per_fragment": target_rows_per_fragment,
            "max_rows_per_group": max_rows_per_group,
            "max_bytes_per_file": max_bytes_per_file,
            "materialize_deletions": materialize_deletions,
            "materialize_deletions_threshold": materialize_deletions_threshold,
            "num_threads": num_threads,
            "batch_size": batch_size,
            "defer_index_remap": defer_index_remap,
            "max_source_fragments": max_source_fragments,
            "max_source_rows": max_source_rows,
            "max_source_bytes": max_source_bytes,
            "excluded_fragment_ids": excluded_fragment_ids,
            "binary_copy": binary_copy,
        }
        native, metrics = _refract.compact_files_py(self._dataset._native, _options_json(options))
        self._dataset._native = native
        return CompactionMetrics._from_json(metrics)

    def optimize_indices(self, index_names: Optional[Sequence[str]] = None) -> None:
        """Give each named index (all by default) a segment for the
        fragments none of its segments covers yet (e.g. appended data)."""
        self._dataset._native = _refract.optimize_indices_py(
            self._dataset._native, list(index_names) if index_names is not None else None
        )
