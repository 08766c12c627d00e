"""Issue #34's decoded sizes: what a file declares or expands to is bounded before it is
believed. An ``.npy`` member declaring more than it holds, a Parquet footer claiming
more rows than its pages, a dictionary page expanding to gigabytes, a JSON text larger
than is parsed at once: one line naming the file (and record), never an allocation that
follows the claim. Memory is measured in a child process under a limit of its own."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(dstore.__file__)))


def _tar(path: str, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _npy(arr: np.ndarray, shape: tuple[int, ...] | None = None) -> bytes:
    """``arr`` as ``.npy`` bytes whose header declares ``shape`` (its own if None)."""
    header = np.lib.format.header_data_from_array_1_0(arr)
    if shape is not None:
        header["shape"] = shape
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + arr.tobytes()


def _child(code: str, *args: str) -> str:
    """What ``python -c code *args`` prints (this checkout first on its path); it must
    exit 0. Risky reads run here under a memory limit of their own."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=_REPO),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


#: run first in a child: cap the address space 1 GiB above what the process holds
LIMIT_MEMORY = r"""
import os, resource
def limit_memory(extra=1 << 30):
    in_use = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (in_use + extra, resource.RLIM_INFINITY))
"""


# ------------------------------------------------------------- .npy declaring 10**12


@pytest.fixture
def npy_bomb_tar(tmp_path) -> tuple[str, list[np.ndarray]]:
    """A 10 kB tar of five ``.npy`` rows of a photo; the third declares ``(10**12,)``."""
    x, _ = photo_tiles(5, 8, seed=3)
    rows = [x[i, 0, :, 0].astype(np.float64) for i in range(5)]
    path = str(tmp_path / "rows.tar")
    _tar(
        path,
        [(f"{i:03d}.npy", _npy(r, (10**12,) if i == 2 else None)) for i, r in enumerate(rows)],
    )
    assert os.path.getsize(path) <= 10240
    return path, rows


def test_an_npy_member_declaring_more_than_it_holds_is_a_record_error(npy_bomb_tar):
    """Failed before: numpy's MemoryError (7.28 TiB asked for), which on_error="skip"
    did not skip. Now one line naming the file, sample and field, before allocating."""
    path, rows = npy_bomb_tar
    with dstore.open(path) as ds, pytest.raises(dstore.DstoreError) as raised:
        ds["data"]["npy"][2]
    line = str(raised.value)
    assert line == (
        f"{path}: sample '002', field 'npy': the .npy declares float64 (1000000000000,) "
        "(8,000,000,000,000 bytes) and holds 64 bytes of data"
    )
    pytest.importorskip("torch")
    loader = dstore.to_torch(path, split="data", on_error="skip")
    got = [r["npy"].numpy() for r in loader]
    assert len(got) == 4 and loader.skipped == 1
    for have, want in zip(got, [rows[i] for i in (0, 1, 3, 4)], strict=True):
        np.testing.assert_array_equal(have, want)


# ------------------------------------------------ Parquet footers that say what is not so

_I64, _LIST, _STRUCT = 6, 9, 12


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        byte = buf[pos]
        out, shift, pos = out | (byte & 0x7F) << shift, shift + 7, pos + 1
        if not byte & 0x80:
            return out, pos


def _put_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _thrift(buf: bytes, pos: int, kind: int) -> tuple[object, int]:
    """One Thrift compact value (a Parquet footer): structs as [[id, kind, value], ...]."""
    if kind in (1, 2):
        return kind == 1, pos
    if kind == 3:
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        n, pos = _varint(buf, pos)
        return (n >> 1) ^ -(n & 1), pos
    if kind == 7:
        return buf[pos : pos + 8], pos + 8
    if kind == 8:
        n, pos = _varint(buf, pos)
        return buf[pos : pos + n], pos + n
    if kind in (_LIST, 10):
        size, item = buf[pos] >> 4, buf[pos] & 0x0F
        pos += 1
        if size == 15:
            size, pos = _varint(buf, pos)
        items = []
        for _ in range(size):
            value, pos = _thrift(buf, pos, item)
            items.append(value)
        return [item, items], pos
    assert kind == _STRUCT, kind
    fields, last = [], 0
    while buf[pos]:
        delta, kind = buf[pos] >> 4, buf[pos] & 0x0F
        pos += 1
        assert delta, "long-form field ids are not in the footers pyarrow writes"
        value, pos = _thrift(buf, pos, kind)
        last += delta
        fields.append([last, kind, value])
    return fields, pos + 1


def _unthrift(kind: int, value) -> bytes:
    if kind in (1, 2):
        return b""
    if kind == 3:
        return bytes([value])
    if kind in (4, 5, 6):
        return _put_varint((value << 1) ^ (value >> 63))
    if kind == 7:
        return value
    if kind == 8:
        return _put_varint(len(value)) + value
    if kind in (_LIST, 10):
        item, items = value
        head = bytes([len(items) << 4 | item]) if len(items) < 15 else bytes([0xF0 | item])
        head += _put_varint(len(items)) if len(items) >= 15 else b""
        return head + b"".join(_unthrift(item, v) for v in items)
    out, last = bytearray(), 0
    for fid, kind, v in value:
        out.append((fid - last) << 4 | (kind if kind not in (1, 2) else 1 if v else 2))
        out += _unthrift(kind, v)
        last = fid
    return bytes(out) + b"\0"


def _field(fields: list, fid: int) -> list:
    return next(f for f in fields if f[0] == fid)


def _edit_footer(path: str, edit) -> None:
    """Rewrite the Thrift FileMetaData of a Parquet file after ``edit(fields)``."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[-8:-4], "little")
    meta, _ = _thrift(data[-8 - n : -8], 0, _STRUCT)
    assert _unthrift(_STRUCT, meta) == data[-8 - n : -8]  # the codec is exact
    edit(meta)
    new = _unthrift(_STRUCT, meta)
    with open(path, "wb") as f:
        f.write(data[: -8 - n] + new + len(new).to_bytes(4, "little") + b"PAR1")


def _claim_rows(rows: int, where: str):
    """A footer edit: the file (FileMetaData.num_rows), its row groups (RowGroup.num_rows)
    and/or its column chunks (ColumnMetaData.num_values) say ``rows``."""

    def edit(meta: list) -> None:
        _field(meta, 3)[2] = rows
        for group in _field(meta, 4)[2][1] if where != "file" else []:
            _field(group, 3)[2] = rows
            for chunk in _field(group, 1)[2][1] if where == "values" else []:
                _field(_field(chunk, 3)[2], 5)[2] = rows

    return edit


@pytest.mark.parametrize("where", ["file", "row group", "values"])
def test_a_footer_claiming_more_rows_than_its_pages_is_one_line_on_every_read_path(tmp_path, where):
    """A footer saying 10**8 rows over 3 stored. Failed before: convert refused with
    "yielded records 0:3", dstore.open and to_torch ended after 3 records silently.
    Now one line naming the file from each (info too where the footer alone tells)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"x": [1.5, 2.5, 3.5], "y": [1, 2, 3]}), path)
    _edit_footer(path, _claim_rows(10**8, where))
    assert pq.ParquetFile(path).metadata.num_rows == 10**8

    def read() -> None:
        with dstore.open(path) as ds:
            ds["data"].read()

    def torch() -> None:
        pytest.importorskip("torch")
        list(dstore.to_torch(path, split="data"))

    calls = [read, torch, lambda: dstore.convert(path, str(tmp_path / "out.npz"))]
    if where != "values":  # the footer contradicts itself
        calls.append(lambda: dstore.info(path))
    for call in calls:
        with pytest.raises(dstore.DstoreError) as raised:
            call()
        assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)
        assert "100,000,000" in str(raised.value)
    assert not os.path.exists(tmp_path / "out.npz")


# ------------------------------------------------------- Parquet decoded sizes

_BOMB_CHILD = (
    LIMIT_MEMORY
    + r"""
import resource, sys
import dstore
path, out = sys.argv[1], sys.argv[2]
limit_memory(3 << 30)  # Arrow's allocator reserves address space generously
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for step in ("info", "convert"):
    try:
        dstore.info(path) if step == "info" else dstore.convert(path, out)
        print(step, "ok")
    except dstore.DstoreError as e:
        print(step, "error", str(e).replace("\n", "|"))
print("peak", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
"""
)


def _bomb_lines(path: str, out: str, **env: str) -> tuple[dict[str, str], int]:
    done = subprocess.run(
        [sys.executable, "-c", _BOMB_CHILD, path, out],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=_REPO, ARROW_DEFAULT_MEMORY_POOL="system", **env),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    return lines, int(lines.pop("peak"))


@pytest.mark.parametrize("arrow_schema", [True, False])
def test_a_parquet_dictionary_bomb_is_refused_within_the_chunk_limit(tmp_path, arrow_schema):
    """525 bytes: one dictionary entry of 1 MiB repeated for 20,000 rows (20 GB decoded).
    With the chunk limit at 64 MiB, convert stops once a column has decoded 64 MiB more
    than it stores, in one line, its memory a few times that (failed before: decoded
    whole, MemoryError under the child's limit). info reads no page."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows, entry = 20_000, "x" * (1 << 20)
    column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array([entry]))
    path = str(tmp_path / "bomb.parquet")
    pq.write_table(pa.table({"text": column}), path, compression="zstd", store_schema=arrow_schema)
    assert os.path.getsize(path) < 1000
    lines, peak = _bomb_lines(path, str(tmp_path / "out.npz"), DSTORE_MAX_CHUNK_BYTES=str(64 << 20))
    assert lines["info"] == "ok"
    assert lines["convert"].startswith(f"error {path}: row group 0, column 'text' decodes to ")
    assert "more than the limit of 67,108,864 beyond them" in lines["convert"]
    assert peak < 512 << 20, f"{peak >> 20} MiB"
    assert not os.path.exists(tmp_path / "out.npz")


def test_fixed_width_values_declared_beyond_the_limit_are_refused_before_reading(tmp_path):
    """A list column whose footer declares 2**31 int64 values (16 GiB) for its one row,
    run-length pages could hold that in bytes: refused from the footer alone."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = str(tmp_path / "lists.parquet")
    pq.write_table(pa.table({"ids": pa.array([[1, 2, 3]])}), path)

    def edit(meta: list) -> None:
        for group in _field(meta, 4)[2][1]:
            for chunk in _field(group, 1)[2][1]:
                _field(_field(chunk, 3)[2], 5)[2] = 2**31

    _edit_footer(path, edit)
    with pytest.raises(dstore.DstoreError) as raised:
        dstore.convert(path, str(tmp_path / "out.npz"))
    assert str(raised.value).startswith(
        f"{path}: row group 0, column 'ids' decodes to 17,179,869,184 bytes or more"
    )


# ------------------------------------------------------------- JSON texts parsed at once

_JSON_CHILD = (
    LIMIT_MEMORY
    + r"""
import sys, tracemalloc
import dstore
path, step, warm = sys.argv[1], sys.argv[2], sys.argv[3]
limit_memory()

def run(path):
    try:
        if step == "info":
            with dstore.open(path) as ds:
                return "ok " + str({n: ds["data"][n].kind.describe() for n in ds["data"]})
        dstore.convert(path, path + ".npz")
        return "ok"
    except dstore.DstoreError as e:
        return "error " + str(e).replace("\n", "|")

run(warm)  # the modules the step imports, before memory is traced
tracemalloc.start()
print(run(path))
print(tracemalloc.get_traced_memory()[1])
"""
)

_LIMIT = 8 << 20  # DSTORE_MAX_JSON_BYTES in the children: small data, the same paths


def _json_child(path: str, step: str, small: bytes) -> tuple[str, int]:
    """What ``step`` (info, convert) gives for ``path`` in a child, and the most memory it
    traced; ``small`` is a small file of the same format, read first (imports)."""
    warm = os.path.join(os.path.dirname(path), "warm" + os.path.splitext(path)[1])
    with open(warm, "wb") as f:
        f.write(small)
    out = _child_env(_JSON_CHILD, path, step, warm, DSTORE_MAX_JSON_BYTES=str(_LIMIT))
    result, peak = out.strip().rsplit("\n", 1)
    return result, int(peak)


def _child_env(code: str, *args: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=_REPO, **env),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _long_json(size: int) -> bytes:
    """A JSON object of about ``size`` bytes: feature rows of a photo, as numbers."""
    x, _ = photo_tiles(1, 64, seed=9)
    row = ",".join(str(v) for v in x.reshape(-1)[:4096]).encode()
    return b'{"f": [' + b",".join([row] * (size // len(row) + 1)) + b"]}"


def test_a_json_lines_line_beyond_the_limit_is_refused_before_it_is_parsed(tmp_path):
    """A 40 MB line with the limit at 8 MiB: one line naming the file and line, at most
    the limit read (failed before: parsed whole, 5x its size; 1 GB cost info 5.2 GB)."""
    path = str(tmp_path / "rows.jsonl")
    with open(path, "wb") as f:
        f.write(b'{"f": [1, 2]}\n' + _long_json(40 << 20) + b"\n")
    result, peak = _json_child(path, "info", b'{"f": [1]}\n')
    assert result == (
        f"error {path}, line 2: a line of more than {_LIMIT:,} bytes, the most parsed at once "
        "(set DSTORE_MAX_JSON_BYTES or dstore.bounded_json.MAX_JSON_BYTES to raise it)"
    )
    # the buffered reader's copy of what it read: twice the limit, never the line
    assert peak < 3 * _LIMIT, f"{peak >> 20} MiB traced"


def test_a_json_document_beyond_the_limit_is_refused_before_it_is_parsed(tmp_path):
    path = str(tmp_path / "doc.json")
    with open(path, "wb") as f:
        f.write(b'{"records": [' + _long_json(40 << 20) + b"]}")
    result, peak = _json_child(path, "info", b'[{"f": [1]}]')
    assert result.startswith(f"error {path}: a JSON document of more than {_LIMIT:,} bytes")
    # the limit read (a MiB at a time) and joined once: twice it, never the document
    assert peak < 3 * _LIMIT, f"{peak >> 20} MiB traced"


def test_a_large_json_member_is_text_info_never_reads(tmp_path):
    """A 40 MB ``.json`` tar member beyond the limit is not parsed to learn its field's
    kind: the member's JSON text, a string field; info reads none of it (failed before:
    parsed, 500 MB cost info 1.9 GB), convert carries the text byte for byte."""
    member = _long_json(40 << 20)
    path = str(tmp_path / "meta.tar")
    _tar(path, [("000.json", b'{"f": [1]}'), ("001.json", member), ("002.json", b"[]")])
    small = io.BytesIO()
    with tarfile.open(fileobj=small, mode="w") as tar:
        info = tarfile.TarInfo("000.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    result, peak = _json_child(path, "info", small.getvalue())
    assert result == "ok {'json': 'string'}"
    assert peak < 1 << 20, f"{peak >> 20} MiB traced"
    result, peak = _json_child(path, "convert", small.getvalue())
    assert result == "ok" and peak < 6 * len(member), f"{peak >> 20} MiB traced"
    with dstore.open(path + ".npz") as ds:
        assert ds["data"]["json"][1].encode() == member


def test_one_long_string_among_short_ones_is_not_padded_in_npz(tmp_path):
    """npz strings are fixed-width: every record takes the widest's room, four bytes a
    character. One 12 MB caption among three short ones is stored as values + row splits
    instead of four 48 MB records (failed before: a ``<U12000000`` member of 192 MB)."""
    import zipfile

    captions = ["a cat", "a long caption " * 800_000, "", "two dogs é"]
    path = str(tmp_path / "captions.npz")
    dstore.save({"data": {"caption": captions}}, path)
    with zipfile.ZipFile(path) as z:
        members = {i.filename: i.file_size for i in z.infolist()}
    assert sorted(members) == ["caption.row_splits.npy", "caption.values.npy"]
    assert sum(members.values()) < 13 << 20
    with dstore.open(path) as ds:
        assert [ds["data"]["caption"][i] for i in range(4)] == captions
    short = str(tmp_path / "short.npz")
    dstore.save({"data": {"caption": ["a cat", "é", "", "two dogs"]}}, short)
    assert np.load(short)["caption"].tolist() == ["a cat", "é", "", "two dogs"]  # still <U
