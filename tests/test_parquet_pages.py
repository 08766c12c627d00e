"""Rows at positions of a Parquet shard read from the pages that hold their images
(dstore/codecs/parquet/direct.py, rows.py): the values are pyarrow's, byte for byte,
for dstore's layout (a page per large image, several small ones a page) and an older
one (a page per row group); anything that is not plain, uncompressed and complete
goes to pyarrow; a damaged page is an error naming its file, row group and page."""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import shutil

import numpy as np
import pytest

import dstore
from dstore.codecs.parquet.direct import _levels_all, _page_header, chunk_pages
from dstore.codecs.parquet.rows import PageRows, paged_table
from dstore.demo import photo_tiles
from dstore.errors import CodecIOError
from dstore.registry import get_codec

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")


def _png_pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def _write(tmp_path, n: int, size: int, **options) -> tuple[np.ndarray, str]:
    x, _ = photo_tiles(n, size, seed=7)
    path = str(tmp_path / f"tiles{size}.parquet")
    dstore.save({"train": {"x": x, "k": np.arange(n, dtype=np.int64)}}, path, **options)
    return x, path


def _shard(path: str) -> str:
    return sorted(glob.glob(os.path.join(path, "*.parquet")))[0]


def _relist(path: str, file: str) -> None:
    """The manifest of ``path`` made to list ``file`` (rewritten) as it now is."""
    with open(os.path.join(path, "dstore.json")) as f:
        manifest = json.load(f)
    for entry in manifest["splits"]["train"]["shards"]:
        if entry["file"] == os.path.basename(file):
            with open(file, "rb") as f:
                entry["sha256"] = hashlib.sha256(f.read()).hexdigest()
            entry["bytes"] = os.path.getsize(file)
    with open(os.path.join(path, "dstore.json"), "w") as f:
        json.dump(manifest, f)


def _bounds(pf) -> np.ndarray:
    sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
    return np.cumsum([0, *sizes]).astype(np.int64)


def _paged_equals_pyarrow(file: str, at: np.ndarray) -> int:
    """PageRows' rows at ``at`` against pyarrow's read of the whole file; the pages read."""
    pf = pq.ParquetFile(file)
    rows = PageRows()
    try:
        records = rows.rows(pf, file, _bounds(pf), ["x", "k"], at)
        assert records is not None, "the rows were not read by page"
        got = paged_table(records)
        want = pf.read(columns=["x", "k"]).take(pa.array(at))
        assert got.column("k").to_pylist() == want.column("k").to_pylist()
        assert got.column("x").to_pylist() == want.column("x").to_pylist()
        return sum(len(v[0]) for v in rows._shards[(file, ("x", "k"))].pages.values() if v)
    finally:
        rows.close()


@pytest.mark.parametrize("size", [256, 16])
def test_rows_read_by_page_are_pyarrows_and_decode_to_the_tiles(tmp_path, size):
    """256x256 tiles (~40-100 kB) get a page each; 16x16 ones (under 1 kB) share 8 KiB pages."""
    x, path = _write(tmp_path, 24, size, row_group_mb=0.25)
    file = _shard(path)
    pf = pq.ParquetFile(file)
    fd = os.open(file, os.O_RDONLY)
    try:
        pages = [
            chunk_pages(fd, pf.metadata.row_group(g).column(0))
            for g in range(pf.metadata.num_row_groups)
        ]
    finally:
        os.close(fd)
    assert all(p is not None for p in pages)
    per_page = {p.values for group in pages for p in group}
    assert per_page == {1} if size == 256 else max(per_page) > 1
    at = np.sort(np.random.default_rng(0).choice(24, 13, replace=False))
    assert _paged_equals_pyarrow(file, at) >= 1
    ds = dstore.to_torch(path, "train", map_style=True)
    for i in at.tolist():
        rec = ds[i]
        assert int(rec["k"]) == i
        np.testing.assert_array_equal(rec["x"].numpy(), x[i])
    shuffled = list(dstore.to_torch(path, "train", shuffle="global", seed=3))
    assert sorted(int(r["k"]) for r in shuffled) == list(range(24))
    for r in shuffled:
        np.testing.assert_array_equal(r["x"].numpy(), x[int(r["k"])])


def test_an_older_layout_of_one_page_per_row_group_reads_by_page(tmp_path):
    """A file as dstore wrote them before (pyarrow's 1 MiB pages): the page holding a row
    holds its row group's other images too; the row's value is still pyarrow's."""
    _, path = _write(tmp_path, 12, 64)
    table = pq.read_table(_shard(path))
    old = str(tmp_path / "old.parquet")
    pq.write_table(
        table,
        old,
        compression={"x.bytes": "none", "x.path": "zstd", "k": "zstd"},
        use_dictionary=["x.path", "k"],
        write_page_checksum=True,
        row_group_size=6,
    )
    fd = os.open(old, os.O_RDONLY)
    try:
        pages = chunk_pages(fd, pq.ParquetFile(old).metadata.row_group(0).column(0))
    finally:
        os.close(fd)
    assert pages is not None and len(pages) == 1 and pages[0].values == 6
    _paged_equals_pyarrow(old, np.array([0, 4, 7, 11]))


@pytest.mark.parametrize(
    "how",
    [
        {"compression": "zstd"},
        {"compression": "none", "use_dictionary": True},
        {"compression": "none", "data_page_version": "2.0"},
    ],
    ids=["compressed", "dictionary", "v2-pages"],
)
def test_pages_not_plain_and_whole_are_left_to_pyarrow(tmp_path, how):
    """Compressed, dictionary-encoded or v2 pages: PageRows declines, pyarrow reads, and
    the records read back whole through dstore either way."""
    x, path = _write(tmp_path, 10, 64)
    file = _shard(path)
    table = pq.read_table(file)
    os.remove(file)
    pq.write_table(table, file, write_page_checksum=True, **how)
    _relist(path, file)
    pf = pq.ParquetFile(file)
    fd = os.open(file, os.O_RDONLY)
    try:
        assert chunk_pages(fd, pf.metadata.row_group(0).column(0)) is None
    finally:
        os.close(fd)
    rows = PageRows()
    assert rows.rows(pf, file, _bounds(pf), ["x", "k"], np.array([1, 5])) is None
    rows.close()
    reader = get_codec("parquet").open_reader(file)
    reader.split("train")
    for rec in dstore.to_torch(file, "train", shuffle="global", seed=1):
        np.testing.assert_array_equal(rec["x"].numpy(), x[int(rec["k"])])
    reader.close()


def test_a_null_image_sends_its_page_to_pyarrow(tmp_path):
    """A page whose definition levels hold a null is not read by page; pyarrow's read
    of it names the record and what it lacks."""
    _, path = _write(tmp_path, 6, 64)
    table = pq.read_table(_shard(path))
    xs = table.column("x").to_pylist()
    xs[2] = {"bytes": None, "path": None}
    table = table.set_column(0, "x", pa.array(xs, table.schema.field("x").type))
    file = str(tmp_path / "null.parquet")
    pq.write_table(table, file, compression="none", use_dictionary=False, write_page_checksum=True)
    pf = pq.ParquetFile(file)
    rows = PageRows()
    assert rows.rows(pf, file, _bounds(pf), ["x", "k"], np.array([2])) is None
    rows.close()
    with pytest.raises(CodecIOError, match=r"record 2: an Image with neither bytes nor a path"):
        dstore.to_torch(file, "data", map_style=True)[2]
    xs[2] = {"bytes": None, "path": "tile2.png"}
    table = table.set_column(0, "x", pa.array(xs, table.schema.field("x").type))
    pq.write_table(table, file, compression="none", use_dictionary=False)
    with pytest.raises(CodecIOError, match=r"record 2: an Image with a path and no bytes"):
        dstore.to_torch(file, "data", map_style=True)[2]


def test_a_damaged_image_is_an_error_naming_its_page(tmp_path):
    """A flipped byte inside one image: reading that record is one error naming the file,
    the row group, the column and the page (the page's CRC); its neighbours still read."""
    _, path = _write(tmp_path, 8, 256, row_group_mb=0.5)
    file = _shard(path)
    pf = pq.ParquetFile(file)
    fd = os.open(file, os.O_RDONLY)
    try:
        pages = chunk_pages(fd, pf.metadata.row_group(0).column(0))
    finally:
        os.close(fd)
    assert pages is not None and len(pages) >= 2
    spot = pages[1].body + pages[1].size // 2
    with open(file, "r+b") as f:
        f.seek(spot)
        byte = f.read(1)
        f.seek(spot)
        f.write(bytes([byte[0] ^ 0x10]))
    rows = PageRows()
    with pytest.raises(CodecIOError) as err:
        rows.rows(pf, file, _bounds(pf), ["x", "k"], np.array([1]))
    message = str(err.value)
    assert file in message and "row group 0" in message and "page 1" in message
    assert "CRC" in message and "\n" not in message
    ok = rows.rows(pf, file, _bounds(pf), ["x", "k"], np.array([0, 2]))
    assert ok is not None and paged_table(ok).column("k").to_pylist() == [0, 2]
    rows.close()


def _rle(count: int, value: int, width: int) -> bytes:
    return bytes([count << 1]) + value.to_bytes((width + 7) // 8, "little")


def _packed(values: list[int], width: int) -> bytes:
    padded = values + [0] * (-len(values) % 8)
    bits = np.array([(v >> b) & 1 for v in padded for b in range(width)], np.uint8)
    return bytes([(len(padded) // 8) << 1 | 1]) + np.packbits(bits, bitorder="little").tobytes()


@pytest.mark.parametrize(
    ("runs", "count", "ok"),
    [
        (_rle(10, 2, 2), 10, True),
        (_rle(4, 2, 2) + _packed([2] * 6, 2), 10, True),
        (_packed([2, 2, 2], 2), 3, True),  # the padding past the count is not a level
        (_packed([2, 1, 2], 2), 3, False),
        (_rle(5, 2, 2) + _rle(5, 0, 2), 10, False),
        (_rle(5, 2, 2), 10, False),  # fewer levels than values
    ],
)
def test_definition_levels_all_present(runs, count, ok):
    data = memoryview(len(runs).to_bytes(4, "little") + runs + b"values")
    got = _levels_all(data, count, 2)
    assert (got == 4 + len(runs)) if ok else got is None


def test_a_header_that_does_not_parse_is_none(tmp_path):
    file = tmp_path / "junk"
    file.write_bytes(b"\x15" + b"\xff" * 40)  # a varint that never ends
    fd = os.open(file, os.O_RDONLY)
    try:
        assert _page_header(fd, 0, 41) is None
        file.write_bytes(b"\x15\x00\x15")  # cut short
        assert _page_header(fd, 0, 3) is None
    finally:
        os.close(fd)


def test_a_window_over_a_paged_and_an_unpaged_shard_reads_both(tmp_path):
    """Two shards of one split read by inspection (a foreign folder: the Image bytes
    come back encoded), one in dstore's layout (read by page) and one compressed (read
    by row group): a shuffled epoch and map-style batches mix both, every record its
    own tile."""
    x, path = _write(tmp_path, 16, 64, shard_mb=0.05)
    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    assert len(files) >= 2
    folder = tmp_path / "mixed"
    folder.mkdir()
    for i, file in enumerate(files):
        target = folder / f"train-{i:05d}-of-{len(files):05d}.parquet"
        if i == 0:
            shutil.copyfile(file, target)  # dstore's layout, as it is
        else:
            pq.write_table(pq.read_table(file), target, compression="zstd")
    seen = []
    for rec in dstore.to_torch(str(folder), "train", shuffle="global", seed=2):
        np.testing.assert_array_equal(_png_pixels(rec["x"]), x[int(rec["k"])])
        seen.append(int(rec["k"]))
    assert sorted(seen) == list(range(16))
    ds = dstore.to_torch(str(folder), "train", map_style=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
    for batch in loader:
        for img, k in zip(batch["x"], batch["k"], strict=True):
            np.testing.assert_array_equal(_png_pixels(img), x[int(k)])


@pytest.mark.parametrize(
    "header",
    [
        # field 5 a list of 2**62 bools: each a byte of its own, so it runs out of bytes
        b"\x19\xf1" + b"\x80" * 8 + b"\x40",
        # lists nested in lists, deeper than any page header
        b"\x19" + b"\x19" * 200,
        # a map of 2**40 entries of bools
        b"\x1b" + b"\x80\x80\x80\x80\x80\x20" + b"\x11",
    ],
    ids=["endless-bools", "nested-lists", "endless-map"],
)
def test_a_forged_header_is_none_at_once(tmp_path, header):
    """A header built to loop or recurse forever parses to None (pyarrow then reads)."""
    file = tmp_path / "forged"
    file.write_bytes(header + b"\x00" * 64)
    fd = os.open(file, os.O_RDONLY)
    try:
        assert _page_header(fd, 0, len(header) + 64) is None
    finally:
        os.close(fd)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _zz(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _page(body: bytes, crc: bytes, size: int | None = None) -> bytes:
    """A v1 data page header (Thrift compact) of one PLAIN value, then ``body``; ``crc``
    the bytes of field 4, type nibble included."""
    size = len(body) if size is None else size
    data = b"\x15" + _zz(1) + b"\x15" + _zz(0) + b"\x15" + _zz(3) + b"\x15" + _zz(3) + b"\x00"
    data_field = b"\x1c" if crc else b"\x2c"  # field 5: a delta of 1 after field 4, else 2
    head = b"\x15" + _zz(0) + b"\x15" + _zz(size) + b"\x15" + _zz(size) + crc + data_field + data
    return head + b"\x00" + body


def _chunk(offset: int, size: int, values: int = 1):
    from types import SimpleNamespace

    return SimpleNamespace(
        compression="UNCOMPRESSED",
        has_dictionary_page=False,
        physical_type="BYTE_ARRAY",
        encodings=("PLAIN", "RLE"),
        data_page_offset=offset,
        total_compressed_size=size,
        num_values=values,
    )


@pytest.mark.parametrize(
    ("crc", "size", "offset", "pages"),
    [
        (b"\x15" + _zz(7), None, 0, 1),  # an i32 CRC: a page
        (b"", None, 0, 1),  # no CRC: a page
        (b"\x18\x04abcd", None, 0, None),  # the CRC as a byte string
        (b"\x19\x35" + _zz(1) + _zz(2) + _zz(3), None, 0, None),  # ... as a list
        (b"\x11", None, 0, None),  # ... as a bool
        (b"\x15" + _zz(7), 1 << 40, 0, None),  # a size past the i32 range
        (b"\x15" + _zz(7), (1 << 31) - 1, 0, None),  # a size past the file
        (b"\x15" + _zz(7), None, -1000, None),  # a chunk before the file
        (b"\x15" + _zz(7), None, (1 << 63) - 1, None),  # ... far past it
    ],
    ids=[
        "crc",
        "no-crc",
        "crc-bytes",
        "crc-list",
        "crc-bool",
        "size-2p40",
        "size-2g",
        "negative",
        "max",
    ],
)
def test_page_headers_of_other_types_or_past_the_file_are_none(tmp_path, crc, size, offset, pages):
    """Every header field the page path uses must be the i32 Parquet declares, and the
    chunk and each page inside the file: else None (pyarrow reads, and refuses), never a
    TypeError, an OSError or a read of gigabytes."""
    body = b"\x00" * 4
    page = _page(body, crc, size)
    file = tmp_path / "pages"
    file.write_bytes(page)
    chunk_size = len(page) - len(body) + (len(body) if size is None else size)  # as it says
    fd = os.open(file, os.O_RDONLY)
    try:
        found = chunk_pages(fd, _chunk(offset, chunk_size))
    finally:
        os.close(fd)
    assert (found is None) if pages is None else (found is not None and len(found) == pages)


def test_a_foreign_file_whose_first_image_does_not_read_is_one_line(tmp_path):
    """A file read by inspection looks at its first image to learn its encoding: a page
    there that pyarrow cannot read is one error naming the file and column."""
    _, path = _write(tmp_path, 6, 64)
    file = str(tmp_path / "foreign.parquet")
    pq.write_table(pq.read_table(_shard(path)), file, compression="none", use_dictionary=False)
    start = pq.ParquetFile(file).metadata.row_group(0).column(0).data_page_offset
    with open(file, "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * 12)
    with pytest.raises(CodecIOError) as err:
        dstore.to_torch(file, "train")
    assert file in str(err.value) and "'x'" in str(err.value) and "\n" not in str(err.value)


def test_a_global_shuffle_is_a_permutation_where_records_read_by_page(tmp_path):
    """dstore's layout reads a record at its own cost: no units, so `"global"` is a plain
    permutation; a file of a page per row group keeps its row groups as units."""
    _, path = _write(tmp_path, 24, 64, row_group_mb=0.05)
    reader = get_codec("parquet").open_reader(path)
    assert reader.record_units("train") is None
    reader.close()
    old = tmp_path / "old"
    old.mkdir()
    table = pq.read_table(_shard(path))
    file = old / "train-00000-of-00001.parquet"
    pq.write_table(table, file, compression="none", use_dictionary=False, row_group_size=6)
    reader = get_codec("parquet").open_reader(str(old))
    assert reader.record_units("train").tolist() == [0, 6, 12, 18, 24]
    reader.close()
    order = [int(r["k"]) for r in dstore.to_torch(str(old), "train", shuffle="global", seed=4)]
    assert sorted(order) == list(range(24))
