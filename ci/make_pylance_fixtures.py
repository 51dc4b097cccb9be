#!/usr/bin/env python3
"""Generate small Lance tables written by pylance, used by refract-table's interop tests.

Usage:
    target/ci-venv/bin/python ci/make_pylance_fixtures.py [OUT_DIR]

OUT_DIR defaults to rust/refract-table/tests/fixtures/pylance (relative to the repo
root). The script deletes and rewrites only its own subdirectories of OUT_DIR
(``sv2_0``, ``sv2_1``, ``sv2_2``). It needs pylance 14.0.2 and pyarrow (the CI venv);
it uses no other package: the manifest is decoded with the tiny protobuf wire reader
below.

What is written, for each data_storage_version SV in 2.0, 2.1, 2.2:

    OUT_DIR/svX_Y/table/          the Lance table (V2 manifest naming, pylance defaults)
    OUT_DIR/svX_Y/expected.json   what pylance reports for every version of that table

The history of every table (version: operation):

    1  write 10 rows (id int64, name string with nulls and non-ASCII text, score float64)
       with max_rows_per_file=4          -> fragments 0 (4 rows), 1 (4), 2 (2)
    2  delete "id IN (1, 2)"             -> fragment 0 gets an Arrow deletion file
    3  append 5001 rows, one fragment    -> fragment 3 (ids 1000..6000, name null, score 0.5)
    4  delete "id >= 1000 AND id < 6000" -> 5000 rows of fragment 3 deleted: pylance
       switches to a roaring-bitmap (.bin) deletion file at >= 5000 deleted rows in
       a fragment (BITMAP_THRESDHOLD in lance-core/src/utils/deletion.rs); below that
       it writes Arrow IPC (.arrow)
    5  append 3 rows                     -> fragment 4
    sv2_2 only:
    6  update score = score + 100 where id = 3   (deletes the row in fragment 0, adds a
       new fragment holding the rewritten row)
    7  merge_insert on id: update id 10, insert id 20
    last: overwrite with 4 rows (new version, new fragments)
    tag "v2" -> version 2

expected.json holds, per version: the rows of ``to_table()`` in scan order as lists
[id, name, score] (for versions with more than MAX_INLINE_ROWS live rows: only the
first and last rows plus num_rows and id_sum), the fragments (id, physical rows, data
files, deletion file type/path/count and deleted row offsets as [start, end) ranges),
the manifest file name, its footer, and the feature flags, writer version and data
format read from the manifest. The deleted offsets come from the deletion files
themselves (Arrow IPC read with pyarrow, roaring bitmaps with the small parser below)
and are checked against the row addresses pylance scans.

Determinism: the logical content (rows, versions, fragment ids, deletion types and
offsets, tags) is the same on every run. File names (data file names, UUIDs, deletion
file ids), timestamps and therefore byte contents differ per run; expected.json is
written by the same run as its table, so the two always agree.
"""

import json
import os
import shutil
import struct
import sys

import lance
import pyarrow as pa
import pyarrow.ipc as ipc

STORAGE_VERSIONS = ["2.0", "2.1", "2.2"]
MAX_INLINE_ROWS = 100
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
    ]
)


def tbl(ids, names, scores):
    return pa.table(
        [pa.array(ids, pa.int64()), pa.array(names, pa.string()), pa.array(scores, pa.float64())],
        schema=SCHEMA,
    )


INITIAL = tbl(
    list(range(10)),
    ["alpha", None, "Grüße", "日本語", "", None, "emoji 🦀", "x", "tab\tsep", "last"],
    [i * 0.5 for i in range(10)],
)
BIG_N = 5001
BIG = tbl(list(range(1000, 1000 + BIG_N)), [None] * BIG_N, [0.5] * BIG_N)
SMALL_APPEND = tbl([10, 11, 12], ["ten", None, "zwölf"], [10.25, -1.0, 1e-3])
MERGE_SOURCE = tbl([10, 20], ["ten-merged", "twenty"], [100.0, 20.0])
OVERWRITE = tbl([100, 101, 102, 103], ["o0", None, "ø2", "o3"], [1.0, 2.0, 3.0, 4.0])


# --- minimal protobuf wire reader (enough for top-level Manifest fields) ---------------

def _varint(b, i):
    shift = 0
    val = 0
    while True:
        c = b[i]
        i += 1
        val |= (c & 0x7F) << shift
        if c < 0x80:
            return val, i
        shift += 7


def pb_fields(b):
    """Yield (field_number, wire_type, value) for one serialized message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        fno, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v = b[i : i + 8]
            i += 8
        elif wt == 2:
            ln, i = _varint(b, i)
            v = b[i : i + ln]
            i += ln
        elif wt == 5:
            v = b[i : i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        yield fno, wt, v


def read_manifest_summary(path):
    """Footer: [.. sections ..][u32 len][Manifest pb][i64 pos][i16 major][i16 minor]b"LANC"."""
    b = open(path, "rb").read()
    assert b[-4:] == b"LANC", path
    pos, major, minor = struct.unpack("<qhh", b[-16:-4])
    (ln,) = struct.unpack("<I", b[pos : pos + 4])
    assert pos + 4 + ln == len(b) - 16, path
    body = b[pos + 4 : pos + 4 + ln]
    out = {
        "file_size": len(b),
        "manifest_pos": pos,
        "manifest_len": ln,
        "footer_major": major,
        "footer_minor": minor,
        "version": 0,
        "reader_feature_flags": 0,
        "writer_feature_flags": 0,
        "max_fragment_id": None,
        "transaction_file": "",
        "index_section": None,
        "transaction_section": None,
        "next_row_id": 0,
        "data_format": None,
        "writer_version": None,
    }
    for fno, _, v in pb_fields(body):
        if fno == 4:
            out["version"] = v
        elif fno == 9:
            out["reader_feature_flags"] = v
        elif fno == 10:
            out["writer_feature_flags"] = v
        elif fno == 11:
            out["max_fragment_id"] = v
        elif fno == 12:
            out["transaction_file"] = v.decode()
        elif fno == 6:
            out["index_section"] = v
        elif fno == 23:
            out["transaction_section"] = v
        elif fno == 14:
            out["next_row_id"] = v
        elif fno in (13, 15):
            sub = {f: x.decode() for f, _, x in pb_fields(v) if isinstance(x, bytes)}
            if fno == 15:
                out["data_format"] = {"file_format": sub.get(1, ""), "version": sub.get(2, "")}
            else:
                out["writer_version"] = {"library": sub.get(1, ""), "version": sub.get(2, "")}
    return out


# --- deletion files ---------------------------------------------------------------------

def parse_portable_roaring(b):
    """Parse the portable (CRoaring/roaring-rs) serialization into a sorted list."""
    cookie = struct.unpack_from("<I", b, 0)[0]
    out = []
    if cookie & 0xFFFF == 12347:  # SERIAL_COOKIE: has run containers
        n = (cookie >> 16) + 1
        i = 4
        nbytes = (n + 7) // 8
        run_bitmap = b[i : i + nbytes]
        i += nbytes
        has_offsets = n >= 4
    elif cookie == 12346:  # SERIAL_COOKIE_NO_RUNCONTAINER
        n = struct.unpack_from("<I", b, 4)[0]
        i = 8
        run_bitmap = bytes((n + 7) // 8)
        has_offsets = True
    else:
        raise ValueError(f"bad roaring cookie {cookie}")
    hdr = [struct.unpack_from("<HH", b, i + 4 * k) for k in range(n)]
    i += 4 * n
    if has_offsets:
        i += 4 * n  # offsets are implied by sequential reading
    for k, (key, card_m1) in enumerate(hdr):
        card = card_m1 + 1
        hi = key << 16
        if run_bitmap[k // 8] >> (k % 8) & 1:
            (nruns,) = struct.unpack_from("<H", b, i)
            i += 2
            for _ in range(nruns):
                start, length = struct.unpack_from("<HH", b, i)
                i += 4
                out.extend(hi | v for v in range(start, start + length + 1))
        elif card <= 4096:
            out.extend(hi | v for v in struct.unpack_from(f"<{card}H", b, i))
            i += 2 * card
        else:
            words = struct.unpack_from("<1024Q", b, i)
            i += 8192
            for w_idx, w in enumerate(words):
                while w:
                    t = w & -w
                    out.append(hi | (w_idx * 64 + t.bit_length() - 1))
                    w ^= t
    return sorted(out)


def read_deletion_file(table_dir, rel_path):
    full = os.path.join(table_dir, rel_path)
    if rel_path.endswith(".arrow"):
        reader = ipc.open_file(full)
        schema = reader.schema
        assert schema.names == ["row_id"] and schema.field(0).type == pa.uint32(), schema
        assert not schema.field(0).nullable
        assert reader.num_record_batches == 1
        return sorted(reader.read_all().column(0).to_pylist())
    return parse_portable_roaring(open(full, "rb").read())


def to_ranges(sorted_vals):
    ranges = []
    for v in sorted_vals:
        if ranges and ranges[-1][1] == v:
            ranges[-1][1] = v + 1
        else:
            ranges.append([v, v + 1])
    return ranges


# --- describing one version ------------------------------------------------------------

def manifest_name(version):
    return f"{(2**64 - 1) - version:020}.manifest"


def describe_version(table_dir, ds, version, operation):
    d = ds.checkout_version(version)
    t = d.to_table(with_row_address=True)
    addrs = t.column("_rowaddr").to_pylist()
    rows = [list(r) for r in zip(*(t.column(c).to_pylist() for c in ["id", "name", "score"]))]
    live = {}
    for a in addrs:
        live.setdefault(a >> 32, set()).add(a & 0xFFFFFFFF)
    frags = []
    for frag in d.get_fragments():
        md = frag.metadata
        entry = {
            "id": md.id,
            "physical_rows": md.physical_rows,
            "data_files": [
                {
                    "path": f.path,
                    "fields": list(f.fields),
                    "column_indices": list(f.column_indices),
                    "file_major_version": f.file_major_version,
                    "file_minor_version": f.file_minor_version,
                    "file_size_bytes": f.file_size_bytes,
                }
                for f in md.files
            ],
            "deletion_file": None,
        }
        expected_deleted = sorted(set(range(md.physical_rows)) - live.get(md.id, set()))
        df = md.deletion_file
        if df is not None:
            rel = df.path(md.id)
            deleted = read_deletion_file(table_dir, rel)
            assert deleted == expected_deleted, (version, md.id)
            assert len(deleted) == df.num_deleted_rows
            entry["deletion_file"] = {
                "type": df.file_type,  # "array" (.arrow) or "bitmap" (.bin)
                "path": rel,
                "read_version": df.read_version,
                "id": str(df.id),  # u64, as a string to survive JSON doubles
                "num_deleted_rows": df.num_deleted_rows,
                "deleted_ranges": to_ranges(deleted),
            }
        else:
            assert expected_deleted == [], (version, md.id)
        frags.append(entry)
    mpath = os.path.join(table_dir, "_versions", manifest_name(version))
    out = {
        "version": version,
        "operation": operation,
        "manifest": "_versions/" + manifest_name(version),
        "manifest_summary": read_manifest_summary(mpath),
        "num_rows": len(rows),
        "id_sum": sum(r[0] for r in rows),
        "fragment_ids": [f["id"] for f in frags],
        "fragments": frags,
    }
    if len(rows) <= MAX_INLINE_ROWS:
        out["rows"] = rows
    else:
        out["rows"] = None
        out["rows_head"] = rows[:5]
        out["rows_tail"] = rows[-5:]
    return out


def build(table_dir, sv):
    ops = []  # (version, operation) in commit order
    ds = lance.write_dataset(INITIAL, table_dir, max_rows_per_file=4, data_storage_version=sv)
    ops.append((ds.version, "write 10 rows, max_rows_per_file=4"))
    ds.delete("id IN (1, 2)")
    ops.append((ds.version, "delete id IN (1, 2)"))
    ds = lance.write_dataset(BIG, ds, mode="append", max_rows_per_file=10000, data_storage_version=sv)
    ops.append((ds.version, f"append {BIG_N} rows in one fragment"))
    ds.delete("id >= 1000 AND id < 6000")
    ops.append((ds.version, "delete id >= 1000 AND id < 6000 (5000 rows of one fragment)"))
    ds = lance.write_dataset(SMALL_APPEND, ds, mode="append", max_rows_per_file=4, data_storage_version=sv)
    ops.append((ds.version, "append 3 rows"))
    if sv == "2.2":
        ds.update({"score": "score + 100"}, where="id = 3")
        ops.append((ds.version, "update score = score + 100 where id = 3"))
        (
            ds.merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(MERGE_SOURCE)
        )
        ds = lance.dataset(table_dir)
        ops.append((ds.version, "merge_insert on id: update id 10, insert id 20"))
    ds.tags.create("v2", 2)
    ds = lance.write_dataset(OVERWRITE, ds, mode="overwrite", max_rows_per_file=4, data_storage_version=sv)
    ops.append((ds.version, "overwrite with 4 rows"))
    return lance.dataset(table_dir), ops


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "rust", "refract-table", "tests", "fixtures", "pylance")
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else default_out)
    os.makedirs(out_dir, exist_ok=True)
    for sv in STORAGE_VERSIONS:
        fx = os.path.join(out_dir, "sv" + sv.replace(".", "_"))
        shutil.rmtree(fx, ignore_errors=True)
        table_dir = os.path.join(fx, "table")
        ds, ops = build(table_dir, sv)
        versions = [v["version"] for v in ds.versions()]
        assert versions == [v for v, _ in ops], (versions, ops)
        expected = {
            "generator": "ci/make_pylance_fixtures.py",
            "pylance_version": lance.__version__,
            "data_storage_version": sv,
            "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in SCHEMA],
            "latest_version": ds.version,
            "tags": {name: info["version"] for name, info in sorted(ds.tags.list().items())},
            "version_hint": json.load(open(os.path.join(table_dir, "_versions", "latest_version_hint.json"))),
            "versions": [describe_version(table_dir, ds, v, op) for v, op in ops],
        }
        with open(os.path.join(fx, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(expected, f, indent=1, ensure_ascii=False)
            f.write("\n")
    total = 0
    for dp, _, fns in os.walk(out_dir):
        total += sum(os.path.getsize(os.path.join(dp, fn)) for fn in fns)
    print(f"wrote {out_dir}: {total} bytes")


if __name__ == "__main__":
    main()
