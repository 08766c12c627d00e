"""Hostile zarr stores (issue #26): declared-size and chunk bombs, damaged chunks of
dstore-written stores, asyncio noise after a failed read, fixed-width text arrays."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dstore
from dstore.codecs.arraytree import chunked as _chunked
from dstore.codecs.zarr import ZarrReader
from dstore.errors import CodecIOError, SchemaError

zarr = pytest.importorskip("zarr")


def _records_read(path: str, split: str, **kwargs: Any) -> list[dict[str, Any]]:
    reader = ZarrReader(path)
    try:
        return list(reader.iter_batches(split, **kwargs))
    finally:
        reader.close()


# ------------------------------------------------------------ declared-size bombs


def test_an_array_declaring_a_petabyte_it_does_not_store_is_refused_not_walked(tmp_path):
    """(10**15,) uint8 with no chunk written: `info` is fine, reading walked the fill
    value for ever; now one line naming the array and the declared vs stored sizes."""
    path = str(tmp_path / "bomb.zarr")
    zarr.open_group(path, mode="w", zarr_format=3).create_array(
        "x", shape=(10**15,), dtype="uint8", chunks=(10**6,)
    )
    with dstore.open(path) as ds:  # describing it costs nothing
        assert ds["data"].count == 10**15
    with pytest.raises(CodecIOError) as err:
        _records_read(path, "data", stop=10)
    msg = str(err.value)
    assert "\n" not in msg and "'x'" in msg and path in msg
    assert "1000.0 TB" in msg and "stores 0 of them" in msg and "DSTORE_MAX_FILL_BYTES" in msg


def test_missing_chunks_below_the_fill_limit_read_as_the_fill_value(tmp_path, monkeypatch):
    """A sparse array is data: its missing chunks read as the fill value up to the limit."""
    path = str(tmp_path / "sparse.zarr")
    arr = zarr.open_group(path, mode="w", zarr_format=3).create_array(
        "x", shape=(1000,), dtype="int16", chunks=(100,), fill_value=7
    )
    arr[:100] = np.arange(100, dtype=np.int16)
    got = _records_read(path, "data")
    values = np.concatenate([b["x"] for b in got])
    np.testing.assert_array_equal(values[:100], np.arange(100))
    assert (values[100:] == 7).all()
    monkeypatch.setenv("DSTORE_MAX_FILL_BYTES", "1000")  # 900 records x 2 bytes missing
    with pytest.raises(CodecIOError, match="stores 1 of them"):
        _records_read(path, "data")


# ------------------------------------------------------------------- chunk bombs


def _one_big_chunk(path: str, rows: int = 4000) -> np.ndarray:
    from dstore.demo import photo_tiles

    x, _ = photo_tiles(8, 16, seed=3)
    data = np.resize(x, (rows, *x.shape[1:]))  # a photo repeated: compresses very well
    arr = zarr.open_group(path, mode="w", zarr_format=3).create_array(
        "x", shape=data.shape, dtype=data.dtype, chunks=data.shape
    )
    arr[:] = data
    return data


def test_a_chunk_larger_than_a_batch_is_decoded_once_per_pass(tmp_path, monkeypatch):
    """One chunk of 4000 records read 100 records a batch was decoded 40 times
    (time = records x chunk size); now once, and the records are the same."""
    path = str(tmp_path / "one.zarr")
    data = _one_big_chunk(path)
    reads: list[Any] = []
    original = zarr.Array.__getitem__

    def counting(self: Any, key: Any) -> Any:
        reads.append(key)
        return original(self, key)

    monkeypatch.setattr(zarr.Array, "__getitem__", counting)
    got = _records_read(path, "data", batch_rows=100)
    assert len(got) == 40
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), data)
    assert len(reads) == 1, reads


def test_a_chunk_over_the_per_chunk_limit_is_refused_by_name(tmp_path, monkeypatch):
    path = str(tmp_path / "one.zarr")
    _one_big_chunk(path)  # 4000 x 16 x 16 x 3 = 3 MB in one chunk
    monkeypatch.setenv("DSTORE_MAX_CHUNK_BYTES", str(1 << 20))
    with pytest.raises(CodecIOError) as err:
        _records_read(path, "data", batch_rows=100)
    msg = str(err.value)
    assert "'x'" in msg and "3.1 MB" in msg and "DSTORE_MAX_CHUNK_BYTES" in msg
    monkeypatch.setenv("DSTORE_MAX_CHUNK_BYTES", "4000000")  # raised: it reads
    assert sum(len(b["x"]) for b in _records_read(path, "data", batch_rows=1000)) == 4000


def test_a_memory_error_has_a_named_reason(tmp_path, monkeypatch):
    """The error line of a chunk that did not fit in memory ended in an empty reason."""
    path = str(tmp_path / "one.zarr")
    _one_big_chunk(path, rows=100)

    def out_of_memory(self: Any, key: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(zarr.Array, "__getitem__", out_of_memory)
    with pytest.raises(CodecIOError) as err:
        _records_read(path, "data")
    assert str(err.value).rstrip().endswith("out of memory (MemoryError)"), str(err.value)
    assert _chunked.error_reason(ValueError()) == "ValueError"


# ---------------------------------------------------------------- damaged chunks


def _dstore_store(tmp_path: Any) -> tuple[str, np.ndarray]:
    from dstore.demo import photo_tiles

    x, y = photo_tiles(600, 16, seed=5)
    path = str(tmp_path / "d.zarr")
    dstore.save({"train": {"x": x, "y": y}}, path, chunk_mb="0.05")  # 68 records a chunk
    return path, x


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_chunk_of_a_dstore_store_fails_a_range_read(tmp_path, damage):
    """A chunk cut to 20 bytes decoded to its declared size (blosc) and range reads
    returned wrong records without an error; dstore's chunks now carry a CRC32C."""
    path, x = _dstore_store(tmp_path)
    chunk = os.path.join(path, "train", "x", "c.2.0.0.0")  # records 136..203
    with open(chunk, "rb") as f:
        data = bytearray(f.read())
    if damage == "truncate":
        data = data[:20]
    else:
        data[len(data) // 2] ^= 0x10
    with open(chunk, "wb") as f:
        f.write(bytes(data))
    assert [c["name"] for c in zarr.open_array(path + "/train/x").metadata.to_dict()["codecs"]][
        -1
    ] == "crc32c"
    with pytest.raises(CodecIOError) as err:
        _records_read(path, "train", start=100, stop=300, verify=False)
    msg = str(err.value)
    assert "\n" not in msg and path in msg and "'x'" in msg
    assert "chunk 'c.2.0.0.0' (records 136..203)" in msg and "CRC32C" in msg
    # records of undamaged chunks still read, the same as written
    got = _records_read(path, "train", start=0, stop=136, verify=False)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), x[:136])
    pytest.importorskip("torch")
    with pytest.raises(CodecIOError, match=r"chunk 'c\.2\.0\.0\.0'"):
        for _ in dstore.to_torch(path, split="train", on_error="raise"):
            pass


def test_a_store_written_without_crc32c_still_reads(tmp_path):
    """Stores written before the CRC (blosc only) read as ever."""
    from zarr.codecs import BloscCodec

    path, x = _dstore_store(tmp_path)
    old = str(tmp_path / "old.zarr")
    root = zarr.open_group(old, mode="w", zarr_format=3)
    root.attrs.update(dict(zarr.open_group(path, mode="r").attrs))
    group = root.create_group("train")
    for name in ("x", "y"):
        src = zarr.open_array(f"{path}/train/{name}", mode="r")
        arr = group.create_array(
            name, shape=src.shape, dtype=src.dtype, chunks=src.chunks, compressors=BloscCodec()
        )
        arr[:] = src[:]
    with dstore.open(old) as ds:
        np.testing.assert_array_equal(ds["train"]["x"][:], x)


# ------------------------------------------------------------ one line, no asyncio noise

_LINKED_CHUNKS = r"""
import os, sys
import numpy as np
import zarr
path = sys.argv[1]
arr = zarr.open_group(path, mode="w", zarr_format=3).create_array(
    "x", shape=(40000,), dtype="int64", chunks=(10,)
)
arr[:] = np.arange(40000)
for i in range(0, 4000, 7):  # chunk files that link to themselves
    p = os.path.join(path, "x", "c", str(i))
    os.remove(p)
    os.symlink(str(i), p)
"""


_CLI = "import sys; from dstore.cli import main; sys.exit(main())"


def test_a_failed_zarr_read_is_one_line_on_stderr(tmp_path):
    """Chunk files looping on themselves: the error line was followed by thousands of
    lines of asyncio "Task was destroyed but it is pending!" and tracebacks."""
    path = str(tmp_path / "loop.zarr")
    subprocess.run([sys.executable, "-c", _LINKED_CHUNKS, path], check=True)
    done = subprocess.run(
        [sys.executable, "-c", _CLI, "convert", path, str(tmp_path / "out.npz")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[:2000]
    assert "Too many levels of symbolic links" in lines[0]
    assert not glob.glob(str(tmp_path / "out*"))


# ------------------------------------------------------------------ fixed-width text


def test_fixed_width_text_and_bytes_arrays_read_as_strings_and_bytes(tmp_path):
    """zarr `<U`/`S` arrays were refused while npz and HDF5 read them."""
    path = str(tmp_path / "text.zarr")
    words = np.array(["camera", "astronaut", "coffee", ""], dtype="<U9")
    tags = np.array([b"ab", b"c\x00d", b"", b"xyz"], dtype="S3")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    with pytest.warns(Warning):  # zarr: no v3 specification for these data types yet
        group.create_array("words", data=words)
        group.create_array("tags", data=tags)
    with dstore.open(path) as ds:
        assert ds["data"]["words"][:] == ["camera", "astronaut", "coffee", ""]
        assert ds["data"]["tags"][:] == [b"ab", b"c\x00d", b"", b"xyz"]
    out = str(tmp_path / "text.npz")
    dstore.convert(path, out)
    with dstore.open(out) as ds:
        assert ds["data"]["words"][:] == ["camera", "astronaut", "coffee", ""]


# ---------------------------------------------------------- names that differ in case


def test_names_differing_only_in_case_are_refused_on_a_case_insensitive_disk(tmp_path, monkeypatch):
    """Fields `x` and `X` of one split are two folders of the store: on macOS or
    Windows the second was written into the first (one field lost, no error)."""
    import dstore.codecs.zarr as zarr_codec

    x = np.arange(6, dtype=np.int16)
    assert not zarr_codec._case_insensitive(str(tmp_path / "o.zarr"))  # Linux: two folders
    monkeypatch.setattr(zarr_codec, "_case_insensitive", lambda path: True)
    path = tmp_path / "case.zarr"
    with pytest.raises(SchemaError) as err:
        dstore.save({"train": {"x": x, "X": x + 1}}, path)
    assert "'train/X'" in str(err.value) and "'train/x'" in str(err.value)
    assert sorted(os.listdir(tmp_path)) == []  # nothing written, no probe left
    with pytest.raises(SchemaError, match="differ only in case"):
        dstore.save({"train": {"x": x}, "Train": {"x": x}}, tmp_path / "case2.zarr")
    # other unusual names are stored (escaped where they must be) and come back
    dstore.save({"train": {"CON": x, "a:b": x + 1}}, tmp_path / "ok.zarr")
    with dstore.open(tmp_path / "ok.zarr") as ds:
        np.testing.assert_array_equal(ds["train"]["a:b"][:], x + 1)


# ------------------------------------------ the classes, generated (property tests)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunk=st.integers(0, 8),
    cut=st.one_of(st.integers(0, 40), st.none()),
    flip_at=st.floats(0, 0.999),
    start=st.integers(0, 599),
    length=st.integers(1, 200),
)
def test_any_damaged_chunk_fails_every_range_read_that_covers_it(
    damaged_store, chunk, cut, flip_at, start, length
):
    """Any one chunk of a dstore store truncated (to 0..40 bytes) or with one bit
    flipped: a range read covering it fails naming that chunk, one that does not
    returns the records written."""
    path, x, rows = damaged_store
    name = os.path.join(path, "train", "x", f"c.{chunk}.0.0.0")
    with open(name, "rb") as f:
        good = f.read()
    bad = bytearray(good[:cut] if cut is not None else good)
    if cut is None:
        bad[int(flip_at * len(bad))] ^= 0x01
    stop = min(600, start + length)
    try:
        with open(name, "wb") as f:
            f.write(bytes(bad))
        lo, hi = chunk * rows, min(600, (chunk + 1) * rows)
        if start < hi and lo < stop:
            with pytest.raises(CodecIOError, match=rf"chunk 'c\.{chunk}\.0\.0\.0'"):
                _records_read(path, "train", fields=["x"], start=start, stop=stop, verify=False)
        else:
            got = _records_read(path, "train", fields=["x"], start=start, stop=stop, verify=False)
            np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), x[start:stop])
    finally:
        with open(name, "wb") as f:
            f.write(good)


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory):
    path, x = _dstore_store(tmp_path_factory.mktemp("damage"))
    return path, x, int(zarr.open_array(path + "/train/x", mode="r").chunks[0])


@settings(max_examples=25, deadline=None)
@given(
    exponent=st.integers(3, 15),
    chunk_exponent=st.integers(0, 6),
    written=st.integers(0, 3),
)
def test_any_declared_shape_reads_its_data_or_is_refused(exponent, chunk_exponent, written):
    """Arrays of 10**3..10**15 records, chunks of 1..10**6, 0..3 chunks written:
    either the records read back (stored ones as written, the rest the fill value)
    or one CodecIOError; never a walk through terabytes of fill value."""
    import tempfile

    count, rows = 10**exponent, min(10**exponent, 10**chunk_exponent)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.zarr")
        arr = zarr.open_group(path, mode="w", zarr_format=3).create_array(
            "x", shape=(count,), dtype="int64", chunks=(rows,), fill_value=-1
        )
        stored = min(count, written * rows)
        if stored:
            arr[:stored] = np.arange(stored)
        unstored_bytes = (count - stored) * 8
        reader = ZarrReader(path)
        try:
            stop = min(count, 2 * rows + 5)
            if unstored_bytes > _chunked.max_fill_bytes() and count * 8 > _chunked.max_fill_bytes():
                with pytest.raises(CodecIOError, match="fill value"):
                    list(reader.iter_batches("data", stop=stop))
            else:
                got = np.concatenate([b["x"] for b in reader.iter_batches("data", stop=stop)])
                want = np.where(np.arange(stop) < stored, np.arange(stop), -1)
                np.testing.assert_array_equal(got, want)
        finally:
            reader.close()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_truncated_blosc_chunk_of_a_foreign_store_is_named(tmp_path, tiles, zarr_format):
    """A store written by zarr itself without crc32c (v2 or v3, blosc): a chunk cut short
    decodes in blosc to its declared size, so the check is the frame's declared size
    against the file's; a range read naming the chunk fails, the other chunks read."""
    import numcodecs
    import zarr

    from dstore.errors import CodecIOError

    x, _ = tiles
    x = x[:40]
    path = str(tmp_path / f"v{zarr_format}.zarr")
    # clevel 0: blosc stores the bytes as they are (its "memcpyed" frames), and decodes a
    # frame cut short to its declared size without an error
    compressors = (
        numcodecs.Blosc(clevel=0) if zarr_format == 2 else zarr.codecs.BloscCodec(clevel=0)
    )
    arr = zarr.create_array(
        path,
        name="x",
        shape=x.shape,
        chunks=(8, *x.shape[1:]),
        dtype=x.dtype,
        zarr_format=zarr_format,
        compressors=compressors,
    )
    arr[:] = x
    key = arr.metadata.encode_chunk_key((2, 0, 0, 0))
    chunk = os.path.join(path, "x", *key.split("/"))
    with open(chunk, "rb") as f:
        data = f.read()
    with open(chunk, "wb") as f:
        f.write(data[:20])  # the frame header and 4 bytes: blosc "decodes" it
    with dstore.open(path) as ds:
        (split,) = list(ds)
        view = ds[split]["x"]
        np.testing.assert_array_equal(np.stack([view[i] for i in range(8)]), x[:8])
        with pytest.raises(CodecIOError, match=rf"chunk '{re.escape(key)}' \(records 16\.\.23\)"):
            view[17]
