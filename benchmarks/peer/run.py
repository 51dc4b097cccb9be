#!/usr/bin/env python3
"""Side-by-side benchmarks: Refract against its peer, Lance 14.0.2 (pylance).

    python3 benchmarks/peer/run.py [--quick] [--repeats N] [--only W1,W2] [--out FILE]

The script creates its own virtualenv (target/peer-venv, pylance==14.0.2 and
pyarrow from PyPI) and re-runs itself inside it. The Refract side is
target/release/side_by_side (built on demand with cargo).

Both engines work on copies of one base dataset: `side_by_side load` writes
synthetic rows in fragments of a fixed row count as a Lance table, which the
runner opens with pylance (same fragments, same rows) before any measurement.
There is no second writer and no conversion. Index builds are kept per engine
(each engine's own index over the same table) as the bases of the remap
workloads.

Every measurement runs in a fresh process on a fresh copy of a base dataset;
engines alternate (Refract, peer, Refract, peer, ...). A child's peak RSS is
its own `VmHWM`, read by the child just before it exits; `ms` is the step alone, timed inside
the child after the dataset is opened; `wall_ms` is the whole child process.
Every measurement is one JSON line on stdout; medians and the Refract/peer
ratio follow per workload, then a text table.

The `s3` workloads run both engines against a local S3 server (moto, started
by the runner from ci/moto_server.py and stopped at the end): every repeat
uploads a fresh copy of the base dataset under its own prefix, runs one child,
and counts the requests that child sent from the server's request log
(`requests`; Refract's own count is `refract_counted_requests`).
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PEER_VERSION = "14.0.2"
REPO = Path(__file__).resolve().parents[2]
VENV = REPO / "target" / "peer-venv"
VENV_PYTHON = VENV / "bin" / "python"
REFRACT_BIN = REPO / "target" / "release" / "side_by_side"
MOTO_SERVER = REPO / "ci" / "moto_server.py"
MOTO_REQUIREMENTS = ["moto[s3]==5.2.5", "flask", "flask-cors"]
S3_BUCKET = "peer-bench"
INDEX_TYPES = ["btree", "bitmap", "ngram", "ivf_flat"]
INDEX_COLUMNS = {"btree": "id", "bitmap": "category", "ngram": "text", "ivf_flat": "vec"}
PEER_INDEX_TYPES = {"btree": "BTREE", "bitmap": "BITMAP", "ngram": "NGRAM", "ivf_flat": "IVF_FLAT"}
IVF_MAX_ITERATIONS = 20
MAX_ROUNDS = 200
# The directory of a base dataset both engines start from (see engine_base).
SHARED = "shared"

# Sizes: (rows of the 1,000-row-fragment table, rows of the 100,000-row-fragment
# table, ivf_flat partitions, repeats).
FULL = {"rows": 2_000_000, "rows_100k": 2_000_000, "ivf_partitions": 256, "repeats": 5}
QUICK = {"rows": 200_000, "rows_100k": 1_000_000, "ivf_partitions": 64, "repeats": 3}
# Budgeted execute-until-noop grid: one irregular table, targets x budgets.
GRID_RUNS = ["20000:1000", "9000:300", "20000:2500"]
GRID_TARGETS = [5_000, 12_000]
GRID_BUDGETS = [2, 3, 8, None]


# ---------------------------------------------------------------- environment


def ensure_venv():
    """Creates target/peer-venv with pylance, pyarrow and moto unless it has them."""
    check = [str(VENV_PYTHON), "-c", "import lance, pyarrow, moto; print(lance.__version__)"]
    if VENV_PYTHON.exists():
        found = subprocess.run(check, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == PEER_VERSION:
            return
    print(f"creating {VENV} with pylance=={PEER_VERSION}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(VENV_PYTHON), "-m", "pip", "install", "-q", f"pylance=={PEER_VERSION}", "pyarrow",
         *MOTO_REQUIREMENTS],
        check=True,
    )


def ensure_refract_bin():
    subprocess.run(
        ["cargo", "build", "--release", "--locked", "-p", "refract-benchmarks", "--bin", "side_by_side"],
        cwd=REPO,
        check=True,
    )


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


# ---------------------------------------------------------------- child processes


def run_child(command):
    """Runs one child; returns its last JSON line plus wall time and peak RSS."""
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr)
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            stderr.seek(0)
            raise RuntimeError(f"{command} failed ({child.returncode}): {stderr.read().decode()[-2000:]}")
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    record = json.loads(lines[-1])
    record["wall_ms"] = wall * 1e3
    # The child's own VmHWM (read by the child just before it exits) is its
    # peak. wait4's ru_maxrss is kept for reference only: Linux carries the
    # forking runner's RSS over exec into it, so it is never below the runner's.
    record["ru_maxrss_bytes"] = usage.ru_maxrss * 1024
    return record


def refract(step, directory, *args):
    return run_child([str(REFRACT_BIN), step, "--dir", str(directory), *map(str, args)])


def refract_s3(s3, step, location, *args):
    options = [arg for key, value in s3.storage_options.items() for arg in ("--storage-option", f"{key}={value}")]
    return run_child([str(REFRACT_BIN), step, "--uri", location, *options, *map(str, args)])


def peer(step, directory, **params):
    spec = json.dumps({"step": step, "dir": str(directory), **params})
    return run_child([str(VENV_PYTHON), str(Path(__file__).resolve()), "--child", spec])


# ---------------------------------------------------------------- the peer's side (child mode)


def proc_status_bytes(field):
    """A `/proc/self/status` memory field (VmHWM, VmRSS), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def fragment_rows_of(ds):
    return [f.count_rows() for f in ds.get_fragments()]


def peer_child(spec):
    """Runs one peer step in this process and prints one JSON line."""
    import lance

    step, uri = spec["step"], spec["dir"]
    storage_options = spec.get("storage_options")
    record = {"step": step, "rss_before_bytes": proc_status_bytes("VmRSS")}
    if step == "query":
        # Cold: the dataset is opened inside the clock.
        started = time.perf_counter()
        ds = lance.dataset(uri, storage_options=storage_options)
        record["rows"] = ds.to_table(filter=spec["filter"]).num_rows
        record["ms"] = (time.perf_counter() - started) * 1e3
        record["peak_rss_bytes"] = proc_status_bytes("VmHWM")
        print(json.dumps(record), flush=True)
        return
    ds = lance.dataset(uri, storage_options=storage_options)
    started = time.perf_counter()
    if step in ("index", "rebuild"):
        # `rebuild` replaces the index of the same name (after a deferred
        # compaction: the peer's optimize_indices leaves the segments on the
        # fragment-reuse index, same uuid, so a rebuild is what takes them off it).
        kind = spec["index_type"]
        if kind == "ivf_flat":
            ds.create_index(
                "vec", "IVF_FLAT", name=kind, num_partitions=spec["partitions"],
                max_iters=IVF_MAX_ITERATIONS, replace=True,
            )
        else:
            ds.create_scalar_index(INDEX_COLUMNS[kind], PEER_INDEX_TYPES[kind], name=kind, replace=True)
    elif step == "compact":
        options = {"defer_index_remap": spec.get("defer_index_remap", False)}
        if spec.get("target_rows"):
            options["target_rows_per_fragment"] = spec["target_rows"]
        if spec.get("max_source_fragments"):
            options["max_source_fragments"] = spec["max_source_fragments"]
        rounds, converged, removed = 0, spec.get("until_noop") is None, 0
        for _ in range(spec.get("until_noop") or 1):
            metrics = ds.optimize.compact_files(**options)
            if metrics.fragments_removed == 0 and metrics.fragments_added == 0:
                converged = True
                break
            rounds += 1
            removed += metrics.fragments_removed
        record.update(rounds=rounds, converged=converged, fragments_removed=removed)
    elif step == "remap":
        ds.optimize.optimize_indices()
    elif step == "answers":
        record["answers"] = index_answers(ds, spec["index_type"])
    elif step == "rewrite":
        # pylance writes the same rows as a table of its own.
        lance.write_dataset(ds.to_batches(), spec["dest"], schema=ds.schema,
                            max_rows_per_file=spec["fragment_rows"],
                            data_storage_version=ds.data_storage_version)
        record["fragments"] = len(lance.dataset(spec["dest"]).get_fragments())
    else:
        raise ValueError(f"unknown step {step}")
    record["ms"] = (time.perf_counter() - started) * 1e3
    if step == "compact":
        record["fragment_rows"] = fragment_rows_of(lance.dataset(uri, storage_options=storage_options))
    record["peak_rss_bytes"] = proc_status_bytes("VmHWM")
    print(json.dumps(record), flush=True)


def answer_filters(kind):
    """Filters pylance answers through an index of `kind` (on the synthetic
    table: `id` int64, `category` = id % 10, `text` two words, `vec`)."""
    return {
        "btree": ["id = 777", "id >= 1999000", "id < 300", "id IN (5, 1000, 123456)"],
        "bitmap": ["category = 3", "category IN (0, 9)"],
        "ngram": ["contains(text, 'obsid')", "contains(text, 'lumen') AND id < 400000"],
    }.get(kind, [])


def index_answers(ds, kind):
    """pylance's answers through its index of `kind`, as `id` values (row
    addresses change with a compaction, ids do not): per filter the sorted ids
    (checked to go through the index), for ivf_flat the ids of the 10 nearest
    rows of fixed queries at nprobes 1 and at every partition."""
    import numpy as np

    answers = {}
    for expr in answer_filters(kind):
        plan = ds.scanner(filter=expr, columns=["id"]).explain_plan()
        if "ScalarIndexQuery" not in plan:
            raise RuntimeError(f"pylance does not use its {kind} index for {expr}: {plan}")
        answers[expr] = sorted(ds.to_table(filter=expr, columns=["id"]).column("id").to_pylist())
    if kind == "ivf_flat":
        rng = np.random.default_rng(7)
        for q, query in enumerate(rng.standard_normal((4, 32), dtype=np.float32)):
            for nprobes in (1, 10_000):
                table = ds.to_table(
                    columns=["id"],
                    nearest={"column": "vec", "q": query, "k": 10, "nprobes": nprobes},
                )
                answers[f"q{q} nprobes {nprobes}"] = table.column("id").to_pylist()
    return answers


def check_peer_reads(loaded, directory):
    """pylance opens the base dataset with the fragments Refract wrote."""
    import lance

    ds = lance.dataset(str(directory))
    got = fragment_rows_of(ds)
    if got != loaded["fragment_rows"]:
        raise RuntimeError(f"pylance reads fragments {got[:5]}... where Refract wrote {loaded['fragment_rows'][:5]}...")
    if ds.count_rows() != loaded["rows"]:
        raise RuntimeError(f"pylance counts {ds.count_rows()} rows where Refract wrote {loaded['rows']}")
    return {"data_storage_version": ds.data_storage_version, "fragments": len(got)}


# ---------------------------------------------------------------- the local S3 server


class S3Server:
    """A local S3 server (moto) with one bucket; requests are counted from its log."""

    def __init__(self, root):
        import pyarrow.fs

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "moto.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [str(VENV_PYTHON), str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        for _ in range(300):
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError(f"moto did not start on {self.endpoint}; see {self.log_path}")
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{S3_BUCKET}", method="PUT"), timeout=10)
        self.storage_options = {
            "aws_endpoint": self.endpoint, "aws_region": "us-east-1", "aws_access_key_id": "bench",
            "aws_secret_access_key": "bench", "allow_http": "true",
        }
        self.fs = pyarrow.fs.S3FileSystem(
            access_key="bench", secret_key="bench", region="us-east-1", scheme="http",
            endpoint_override=f"127.0.0.1:{port}",
        )

    def fresh_copy(self, local, prefix):
        """Uploads the dataset directory `local` under `prefix`; returns its URI."""
        import pyarrow.fs

        pyarrow.fs.copy_files(str(local), f"{S3_BUCKET}/{prefix}",
                              source_filesystem=pyarrow.fs.LocalFileSystem(), destination_filesystem=self.fs)
        return f"s3://{S3_BUCKET}/{prefix}"

    def remove(self, location):
        self.fs.delete_dir(location.removeprefix("s3://"))

    def log_offset(self):
        return self.log_path.stat().st_size

    def requests_since(self, offset):
        """Requests logged after `offset` (the server logs each one as it answers it)."""
        time.sleep(0.5)
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return sum(1 for line in f if b" HTTP/1.1" in line)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


# ---------------------------------------------------------------- the suite


class Suite:
    def __init__(self, args):
        self.args = args
        self.sizes = dict(QUICK if args.quick else FULL)
        for key in ("rows", "rows_100k", "ivf_partitions"):
            if getattr(args, key) is not None:
                self.sizes[key] = getattr(args, key)
        self.repeats = args.repeats or self.sizes["repeats"]
        self.root = Path(args.dir or REPO / "target" / "peer-bench")
        self.results = {}  # workload -> {"runs": ..., "summary": ...}
        self.grid_rows = []
        self.built = set()  # base datasets built by this run
        self.s3 = None

    def emit(self, record):
        line = json.dumps(record)
        print(line, flush=True)
        if self.args.out:
            with open(self.args.out, "a") as f:
                f.write(line + "\n")

    def base(self, name):
        return self.root / "base" / name

    def build(self, name, runs):
        """Base dataset `name` for both engines from `ROWS:FRAGMENT_ROWS` runs."""
        target = self.base(name)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        loaded = refract("load", target / SHARED, "--runs", ",".join(runs))
        detail = check_peer_reads(loaded, target / SHARED)
        self.emit({
            "benchmark": "load", "dataset": name, "runs": runs, "rows": loaded["rows"],
            "fragments": loaded["fragments"], "refract_load_ms": loaded["ms"], **detail,
        })
        self.built.add(name)

    def fresh_copy(self, base, engine):
        work = self.root / "work" / engine
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(engine_base(base, engine), work)
        os.sync()
        return work

    def measure(self, workload, base, refract_steps, peer_steps, keep_as=None, on_s3=False, **extra):
        """Alternates the engines `repeats` times on fresh copies of `base`.

        Each *_steps is a list of callables taking the work directory (with
        `on_s3`, the URI of a fresh upload to the local S3 server) and
        returning a child record; a repeat's `ms` and peak RSS are the sum and
        the maximum over its steps. With `keep_as`, the last copies are kept
        as a new base dataset of that name.
        """
        runs = {"refract": [], "peer": []}
        for repeat in range(self.repeats):
            for engine, steps in (("refract", refract_steps), ("peer", peer_steps)):
                if on_s3:
                    work = self.s3.fresh_copy(engine_base(base, engine), f"{workload}/{engine}-{repeat}")
                    offset = self.s3.log_offset()
                else:
                    work = self.fresh_copy(base, engine)
                records = [step(work) for step in steps]
                if on_s3:
                    extra_counts = {"requests": self.s3.requests_since(offset)}
                    if engine == "refract":
                        extra_counts["refract_counted_requests"] = sum(r.get("requests", 0) for r in records)
                    self.s3.remove(work)
                else:
                    extra_counts = {}
                record = {
                    "benchmark": workload, "engine": engine, "repeat": repeat,
                    "ms": sum(r["ms"] for r in records),
                    "step_ms": [round(r["ms"], 1) for r in records],
                    "wall_ms": sum(r["wall_ms"] for r in records),
                    "peak_rss_bytes": max(r["peak_rss_bytes"] for r in records),
                    "extra_rss_bytes": max(r["peak_rss_bytes"] - r.get("rss_before_bytes", 0) for r in records),
                    "load_average": load_average(), **extra_counts, **extra,
                }
                for key in ("rounds", "converged", "fragment_rows", "rows"):
                    if key in records[-1]:
                        record[key] = records[-1][key]
                self.emit(record)
                runs[engine].append(record)
                if keep_as and repeat == self.repeats - 1:
                    kept = self.base(keep_as) / engine
                    if kept.exists():
                        shutil.rmtree(kept)
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(work), kept)
        self.summarize(workload, runs, extra)
        return runs

    def summarize(self, workload, runs, extra):
        summary = {"benchmark": workload, "summary": True, **extra}
        for engine, records in runs.items():
            summary[f"{engine}_ms"] = statistics.median(r["ms"] for r in records)
            summary[f"{engine}_wall_ms"] = statistics.median(r["wall_ms"] for r in records)
            summary[f"{engine}_peak_rss_bytes"] = statistics.median(r["peak_rss_bytes"] for r in records)
            summary[f"{engine}_extra_rss_bytes"] = statistics.median(r["extra_rss_bytes"] for r in records)
            if "requests" in records[0]:
                summary[f"{engine}_requests"] = statistics.median(r["requests"] for r in records)
        summary["ratio"] = summary["refract_ms"] / summary["peer_ms"]
        if "refract_requests" in summary:
            summary["requests_ratio"] = summary["refract_requests"] / summary["peer_requests"]
        summary["rss_ratio"] = summary["refract_peak_rss_bytes"] / summary["peer_peak_rss_bytes"]
        summary["load_average"] = load_average()
        self.emit(summary)
        self.results[workload] = {"runs": runs, "summary": summary}

    # -------------------------------------------------------- workloads

    def compaction(self):
        rows = self.sizes["rows"]
        self.build("frag1k", [f"{rows}:1000"])
        self.measure("compaction_1k_sources", self.base("frag1k"),
                     [lambda d: refract("compact", d)], [lambda d: peer("compact", d)], rows=rows)
        rows = self.sizes["rows_100k"]
        self.build("frag100k", [f"{rows}:100000"])
        self.measure("compaction_100k_sources", self.base("frag100k"),
                     [lambda d: refract("compact", d)], [lambda d: peer("compact", d)], rows=rows)

    def index_build(self, kind):
        partitions = self.sizes["ivf_partitions"]
        r_args = ["--type", kind]
        p_args = {"index_type": kind, "partitions": partitions}
        if kind == "ivf_flat":
            r_args += ["--partitions", partitions, "--max-iterations", IVF_MAX_ITERATIONS]
        self.measure(f"index_build_{kind}", self.base("frag1k"),
                     [lambda d: refract("index", d, *r_args)], [lambda d: peer("index", d, **p_args)],
                     keep_as=f"indexed_{kind}", rows=self.sizes["rows"])
        self.built.add(f"indexed_{kind}")

    def inline_remap(self, kind):
        self.measure(f"compaction_inline_{kind}", self.base(f"indexed_{kind}"),
                     [lambda d: refract("compact", d)], [lambda d: peer("compact", d)],
                     rows=self.sizes["rows"])

    def deferred(self, kind):
        """Deferred compaction, then the index taken off the fragment-reuse
        index: Refract remaps; the peer's optimize_indices is a no-op there
        (same segment uuid), so the peer rebuilds the index (replace=True)."""
        p_args = {"index_type": kind, "partitions": self.sizes["ivf_partitions"]}
        self.measure(f"deferred_then_remap_{kind}", self.base(f"indexed_{kind}"),
                     [lambda d: refract("compact", d, "--defer-index-remap"), lambda d: refract("remap", d)],
                     [lambda d: peer("compact", d, defer_index_remap=True), lambda d: peer("remap", d),
                      lambda d: peer("rebuild", d, **p_args)],
                     rows=self.sizes["rows"])

    def pylance_written(self):
        """The base table's rows written again by pylance (1,000-row files):
        the table pylance's users have."""
        base = self.base("pylance_frag1k")
        if base.exists():
            shutil.rmtree(base)
        base.mkdir(parents=True)
        written = peer("rewrite", self.base("frag1k") / SHARED, dest=str(base / SHARED), fragment_rows=1000)
        expected = self.sizes["rows"] // 1000
        if written["fragments"] != expected:
            raise RuntimeError(f"pylance wrote {written['fragments']} fragments, expected {expected}")
        self.built.add("pylance_frag1k")

    def pylance_indices(self, kind):
        """Compaction of a pylance-written table with pylance's own index of
        `kind` (built once by pylance), by each engine with the index remapped
        inline; then pylance's answers through the index on both results must
        equal its answers before the compaction."""
        if "pylance_frag1k" not in self.built:
            self.pylance_written()
        name = f"pylance_indexed_{kind}"
        base = self.base(name)
        if base.exists():
            shutil.rmtree(base)
        base.mkdir(parents=True)
        shutil.copytree(self.base("pylance_frag1k") / SHARED, base / SHARED)
        built = peer("index", base / SHARED, index_type=kind, partitions=self.sizes["ivf_partitions"])
        before = peer("answers", base / SHARED, index_type=kind)["answers"]
        self.emit({"benchmark": "pylance_index_build", "index_type": kind, "peer_ms": built["ms"]})
        # The same compaction without the index, right before: the remap cost
        # is a difference of two medians, which drift with the machine's load.
        self.measure(f"pylance_index_baseline_{kind}", self.base("pylance_frag1k"),
                     [lambda d: refract("compact", d)], [lambda d: peer("compact", d)],
                     rows=self.sizes["rows"])
        self.measure(f"pylance_index_inline_{kind}", base,
                     [lambda d: refract("compact", d)], [lambda d: peer("compact", d)],
                     keep_as=f"pylance_compacted_{kind}", rows=self.sizes["rows"])
        kept = self.base(f"pylance_compacted_{kind}")
        for engine in ("refract", "peer"):
            after = peer("answers", kept / engine, index_type=kind)["answers"]
            same = after == before
            self.emit({"benchmark": "pylance_index_answers", "index_type": kind, "engine": engine,
                       "queries": len(before), "identical": same})
            if not same:
                diff = [q for q in before if before[q] != after.get(q)]
                raise RuntimeError(f"pylance answers differently after {engine}'s compaction of its "
                                   f"{kind} index: {diff[:3]}")

    def s3_workloads(self):
        """Compaction of the 1,000-row-fragment table and a cold btree point
        query, on the local S3 server; requests counted by the server."""
        rows = self.sizes["rows"]
        if "frag1k" not in self.built:
            self.build("frag1k", [f"{rows}:1000"])
        if "indexed_btree" not in self.built:
            self.index_build("btree")
        self.s3 = S3Server(self.root / "s3")
        try:
            options = self.s3.storage_options
            self.measure("s3_compaction_1k_sources", self.base("frag1k"),
                         [lambda u: refract_s3(self.s3, "compact", u)],
                         [lambda u: peer("compact", u, storage_options=options)],
                         on_s3=True, rows=rows)
            point = f"id = {rows // 2 + 7}"
            self.measure("s3_cold_query_btree", self.base("indexed_btree"),
                         [lambda u: refract_s3(self.s3, "query", u, "--filter", point)],
                         [lambda u: peer("query", u, storage_options=options, filter=point)],
                         on_s3=True, rows=rows, filter=point)
        finally:
            self.s3.stop()

    def grid(self):
        self.build("grid", GRID_RUNS)
        for target in GRID_TARGETS:
            for budget in GRID_BUDGETS:
                r_args = ["--target-rows", target, "--until-noop", MAX_ROUNDS]
                p_args = {"target_rows": target, "until_noop": MAX_ROUNDS}
                if budget:
                    r_args += ["--max-source-fragments", budget]
                    p_args["max_source_fragments"] = budget
                runs = self.measure(
                    f"grid_t{target}_b{budget or 'none'}", self.base("grid"),
                    [lambda d, a=list(r_args): refract("compact", d, *a)],
                    [lambda d, p=dict(p_args): peer("compact", d, **p)],
                    target=target, budget=budget,
                )
                for engine, records in runs.items():
                    sizes = records[-1]["fragment_rows"]
                    row = {
                        "benchmark": "grid_fixed_point", "engine": engine, "target": target,
                        "budget": budget, "rounds": records[-1]["rounds"],
                        "converged": records[-1]["converged"], "fragments": len(sizes),
                        "sub_target": sum(1 for s in sizes if s < target),
                        "stalled": stalled(sizes, target),
                        "ms": statistics.median(r["ms"] for r in records),
                    }
                    self.emit(row)
                    self.grid_rows.append(row)

    def run(self):
        wanted = set(self.args.only.split(",")) if self.args.only else None

        def on(name):
            return wanted is None or name in wanted

        self.emit({"benchmark": "suite", "quick": self.args.quick, **self.sizes, "repeats": self.repeats,
                   "peer": f"pylance {PEER_VERSION}", "cpus": os.cpu_count(),
                   "load_average": load_average()})
        if on("compaction") or on("index") or on("inline") or on("deferred"):
            self.compaction()
        for kind in INDEX_TYPES:
            if on("index") or on("inline") or on("deferred"):
                self.index_build(kind)
            if on("inline"):
                self.inline_remap(kind)
            if on("deferred"):
                self.deferred(kind)
        if on("pylance"):
            if "frag1k" not in self.built:
                self.compaction()
            for kind in INDEX_TYPES:
                self.pylance_indices(kind)
        if on("grid"):
            self.grid()
        if on("s3"):
            self.s3_workloads()
        self.print_table()

    # -------------------------------------------------------- the ratio table

    def summary(self, workload):
        return self.results.get(workload, {}).get("summary")

    def cost_table(self, lines, title, benchmark, rows_of):
        """Remap cost per index type: `(kind, with index, without)` summaries;
        cost = the difference of the medians, extra RSS per rewritten row."""
        rows_of = [(kind, s, base) for kind, s, base in rows_of if s and base]
        if not rows_of:
            return
        rows = self.sizes["rows"]
        lines.append("")
        lines.append(f"{title:<34} {'refract ms':>11} {'peer ms':>10} "
                     f"{'ratio':>7} {'refract B/row':>13} {'peer B/row':>10}")
        for kind, s, base in rows_of:
            r_cost = s["refract_ms"] - base["refract_ms"]
            p_cost = s["peer_ms"] - base["peer_ms"]
            r_rss = (s["refract_extra_rss_bytes"] - base["refract_extra_rss_bytes"]) / rows
            p_rss = (s["peer_extra_rss_bytes"] - base["peer_extra_rss_bytes"]) / rows
            ratio = r_cost / p_cost if p_cost > 0 else float("nan")
            lines.append(f"{kind:<34} {r_cost:>11.0f} {p_cost:>10.0f} {ratio:>7.2f} "
                         f"{r_rss:>13.1f} {p_rss:>10.1f}")
            self.emit({"benchmark": benchmark, "index_type": kind, "refract_ms": r_cost,
                       "peer_ms": p_cost, "ratio": ratio, "refract_extra_rss_per_row": r_rss,
                       "peer_extra_rss_per_row": p_rss})

    def print_table(self):
        lines = [f"{'workload':<34} {'refract ms':>11} {'peer ms':>10} {'ratio':>7} "
                 f"{'refract MB':>11} {'peer MB':>8} {'rss ratio':>9} {'refract +MB':>11} {'peer +MB':>8}"]
        for workload, result in self.results.items():
            if workload.startswith("grid_"):
                continue
            s = result["summary"]
            lines.append(
                f"{workload:<34} {s['refract_ms']:>11.0f} {s['peer_ms']:>10.0f} {s['ratio']:>7.2f} "
                f"{s['refract_peak_rss_bytes'] / 2**20:>11.0f} {s['peer_peak_rss_bytes'] / 2**20:>8.0f} "
                f"{s['rss_ratio']:>9.2f} {s['refract_extra_rss_bytes'] / 2**20:>11.0f} "
                f"{s['peer_extra_rss_bytes'] / 2**20:>8.0f}")
        base = self.results.get("compaction_1k_sources", {}).get("summary")
        self.cost_table(lines, "inline remap cost (with - without)", "inline_remap_cost",
                        [(kind, self.summary(f"compaction_inline_{kind}"), base) for kind in INDEX_TYPES])
        self.cost_table(lines, "pylance-built index, remap cost", "pylance_index_remap_cost",
                        [(kind, self.summary(f"pylance_index_inline_{kind}"),
                          self.summary(f"pylance_index_baseline_{kind}")) for kind in INDEX_TYPES])
        s3_rows = [(w, r["summary"]) for w, r in self.results.items() if "requests_ratio" in r["summary"]]
        if s3_rows:
            lines.append("")
            lines.append(f"{'on the local S3 server':<34} {'refract req':>11} {'peer req':>10} {'ratio':>7}")
            for workload, s in s3_rows:
                lines.append(f"{workload:<34} {s['refract_requests']:>11.0f} {s['peer_requests']:>10.0f} "
                             f"{s['requests_ratio']:>7.2f}")
        if self.grid_rows:
            lines.append("")
            lines.append(f"{'grid: target, source-fragment budget':<38} {'engine':<8} {'rounds':>6} "
                         f"{'fragments':>9} {'sub-target':>10} {'stalled':>7} {'ms':>8}")
            for row in self.grid_rows:
                lines.append(f"{'t=' + str(row['target']) + ' b=' + str(row['budget']):<38} {row['engine']:<8} "
                             f"{row['rounds']:>6} {row['fragments']:>9} {row['sub_target']:>10} "
                             f"{str(row['stalled']):>7} {row['ms']:>8.0f}")
        lines.append("")
        lines.append(f"load average at the end: {' '.join(map(str, load_average()))}; ratio = refract / peer "
                     "(medians; below 1 means Refract is faster or smaller); MB = peak RSS of the process, "
                     "+MB = peak minus RSS when the step started")
        print("\n".join(lines), file=sys.stderr if self.args.table_to_stderr else sys.stdout, flush=True)


def engine_base(base, engine):
    """The copy of `base` an engine starts from: its own (an index it built)
    or the one both engines share."""
    own = base / engine
    return own if own.exists() else base / SHARED


def stalled(sizes, target):
    """True when the fixed point still has two adjacent sub-target fragments."""
    return any(a < target and b < target for a, b in zip(sizes, sizes[1:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller tables and 3 repeats (< 5 min on 2 cores)")
    parser.add_argument("--repeats", type=int, help="repeats per workload and engine")
    parser.add_argument("--rows", type=int, help="rows of the 1,000-row-fragment table")
    parser.add_argument("--rows-100k", type=int, help="rows of the 100,000-row-fragment table")
    parser.add_argument("--ivf-partitions", type=int, help="ivf_flat partitions (both engines)")
    parser.add_argument("--only", help="comma-separated: compaction,index,inline,deferred,pylance,grid,s3")
    parser.add_argument("--dir", help="working directory (default target/peer-bench)")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    parser.add_argument("--no-build", action="store_true", help="do not run cargo build first")
    parser.add_argument("--table-to-stderr", action="store_true", help="print the ratio table on stderr")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        peer_child(json.loads(args.child))
        return
    if Path(sys.prefix).resolve() != VENV.resolve():
        ensure_venv()
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])
    if not args.no_build:
        ensure_refract_bin()
    suite = Suite(args)
    suite.run()
    shutil.rmtree(suite.root / "work", ignore_errors=True)


if __name__ == "__main__":
    main()
