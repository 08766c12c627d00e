"""zarr arrays whose chunks are bare blosc frames read straight from their chunk files
(dstore.codecs.zarr.direct): the same records as zarr-python reads, element by element,
through map-style, global and ordered reads; every other array read by zarr; damaged
chunks refused in one line naming the file, array, chunk and records."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import pytest

import dstore
from dstore.codecs.zarr import ZarrReader
from dstore.codecs.zarr import direct as _direct
from dstore.demo import photo_tiles
from dstore.errors import CodecIOError

zarr = pytest.importorskip("zarr")


@pytest.fixture(scope="module")
def photos() -> tuple[np.ndarray, np.ndarray]:
    return photo_tiles(60, 96, seed=11)  # 27 kB a tile


def _dstore_store(tmp_path: Any, x: np.ndarray, y: np.ndarray, chunk_mb: str = "0.25") -> str:
    path = str(tmp_path / "d.zarr")
    # 0.25: 9 tiles a chunk (248 kB) in blosc blocks of 128 kB; 1: 37 tiles, 8 blocks
    dstore.save({"train": {"x": x, "y": y, "k": np.arange(len(x))}}, path, chunk_mb=chunk_mb)
    return path


def _read_at(
    path: str, indexes: list[int], split: str = "data"
) -> tuple[dict[str, Any], ZarrReader]:
    reader = ZarrReader(path)
    try:
        return reader.read_records(split, indexes), reader
    finally:
        reader.close()


def test_map_style_global_and_ordered_reads_of_a_dstore_store(tmp_path, photos):
    pytest.importorskip("torch")
    x, y = photos
    path = _dstore_store(tmp_path, x, y)
    assert zarr.open_array(f"{path}/train/x").chunks[0] == 9
    mapped = dstore.to_torch(path, "train", map_style=True)
    order = np.random.default_rng(0).permutation(len(x)).tolist()
    for at in range(0, len(x), 16):  # a DataLoader's batches of shuffled indexes
        batch = order[at : at + 16] + order[at : at + 1]  # and one index twice
        recs = mapped.__getitems__(batch)
        assert [int(r["k"]) for r in recs] == batch
        for i, r in zip(batch, recs, strict=True):
            np.testing.assert_array_equal(r["x"].numpy(), x[i])
            np.testing.assert_array_equal(r["y"].numpy(), y[i])
    reader = mapped.source.reader()
    assert all(reader._direct[f"train/{f}"] is not None for f in ("x", "y", "k"))
    seen = {int(r["k"]): r["x"].numpy() for r in dstore.to_torch(path, "train", shuffle="global")}
    assert sorted(seen) == list(range(len(x)))
    for i, got in seen.items():
        np.testing.assert_array_equal(got, x[i])
    ordered = [r["x"].numpy() for r in dstore.to_torch(path, "train")]
    np.testing.assert_array_equal(np.stack(ordered), x)
    batches = list(ZarrReader(path).iter_batches("train", batch_rows=7, verify=False))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), x)


def test_only_the_blocks_of_the_records_asked_are_decoded(tmp_path, photos, monkeypatch):
    """A record of a chunk is decoded by blosc_getitem (its blocks), not the whole chunk."""
    x, y = photos
    path = _dstore_store(tmp_path, x, y, chunk_mb="1")
    calls: list[tuple[int, int]] = []
    getitem = _direct._blosc_getitem()
    assert getitem is not None  # numcodecs' c-blosc 1.x here

    def counting(data: bytes, start: int, items: int, dest: int) -> int:
        calls.append((start, items))
        return int(getitem(data, start, items, dest))

    monkeypatch.setattr(_direct, "_blosc_getitem", lambda: counting)
    batch, _ = _read_at(path, [4, 40, 41], "train")
    np.testing.assert_array_equal(batch["x"], x[[4, 40, 41]])
    tile = x[0].nbytes
    assert (4 * tile, tile) in calls and (3 * tile, 2 * tile) in calls  # 4; 40, 41 (of 37..73)


def test_without_blosc_getitem_whole_chunks_are_decoded(tmp_path, photos, monkeypatch):
    x, y = photos
    path = _dstore_store(tmp_path, x, y)
    monkeypatch.setattr(_direct, "_blosc_getitem", lambda: None)
    order = [59, 3, 0, 44, 45, 46]
    batch, _ = _read_at(path, order, "train")
    np.testing.assert_array_equal(batch["x"], x[order])
    np.testing.assert_array_equal(batch["k"], order)


def _by_hand(path: str, data: np.ndarray, zarr_format: int, **kwargs: Any) -> Any:
    arr = zarr.create_array(
        path, name="x", shape=data.shape, dtype=data.dtype, zarr_format=zarr_format, **kwargs
    )
    arr[:] = data
    return arr


def _blosc(zarr_format: int, crc: bool = False, **config: Any) -> dict[str, Any]:
    import numcodecs

    if zarr_format == 2:
        return {"compressors": numcodecs.Blosc(**config)}
    blosc = zarr.codecs.BloscCodec(**config)
    return {"compressors": (blosc, zarr.codecs.Crc32cCodec()) if crc else blosc}


_FOREIGN = [
    # zarr format, dtype, records a chunk, blosc configuration, crc32c after it; blocks
    # smaller than a record: a record is decoded by its blocks (else the whole chunk)
    (3, "uint8", 4, {}, False),
    (3, "uint8", 5, {"blocksize": 16384}, True),
    (3, "float32", 3, {"cname": "lz4", "shuffle": "shuffle", "blocksize": 32768}, True),
    (3, "int16", 7, {"cname": "zstd", "shuffle": "bitshuffle"}, False),
    (3, "float64", 2, {"clevel": 0}, True),  # stored as they are ("memcpyed")
    (2, "uint8", 6, {"cname": "zstd", "clevel": 5, "blocksize": 65536}, False),
    (2, "float32", 4, {"cname": "blosclz", "shuffle": 2, "blocksize": 32768}, False),
    (2, "int16", 3, {"clevel": 0}, False),
]


@pytest.mark.parametrize(("zarr_format", "dtype", "rows", "config", "crc"), _FOREIGN)
def test_arrays_written_by_zarr_python_read_the_same(
    tmp_path, photos, zarr_format, dtype, rows, config, crc
):
    x, _ = photos
    data = (x[:50].astype(dtype) * (1.5 if dtype.startswith("float") else 1)).astype(dtype)
    path = str(tmp_path / "hand.zarr")
    arr = _by_hand(
        path,
        data,
        zarr_format,
        chunks=(rows, *data.shape[1:]),
        **_blosc(zarr_format, crc, **config),
    )
    order = [49, 0, 7, 8, 9, 10, 23, 48, 2]
    batch, reader = _read_at(path, order)
    assert reader._direct["x"] is not None
    np.testing.assert_array_equal(batch["x"], arr[:][order])
    np.testing.assert_array_equal(batch["x"], data[order])
    ranges = list(ZarrReader(path).iter_batches("data", batch_rows=rows + 2, verify=False))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in ranges]), data)


@pytest.mark.parametrize(
    "layout",
    ["sharded", "zstd", "chunks across a record", "big-endian", "missing chunk"],
)
def test_other_arrays_read_through_zarr(tmp_path, photos, layout):
    x, _ = photos
    data = x[:40]
    path = str(tmp_path / "other.zarr")
    kwargs: dict[str, Any] = {"chunks": (4, *data.shape[1:])} | _blosc(3)
    if layout == "sharded":
        kwargs["shards"] = (8, *data.shape[1:])
    elif layout == "zstd":
        kwargs["compressors"] = zarr.codecs.ZstdCodec()
    elif layout == "chunks across a record":
        kwargs["chunks"] = (4, 16, 32, 3)
    elif layout == "big-endian":
        data = data.astype(">i4")
        kwargs["serializer"] = zarr.codecs.BytesCodec(endian="big")
    arr = _by_hand(path, data, 3, **kwargs)
    if layout == "missing chunk":
        os.remove(os.path.join(path, "x", "c", "3", "0", "0", "0"))  # records 12..15
        data = data.copy()
        data[12:16] = 0  # the fill value, as zarr reads it
    order = [39, 13, 1, 2, 20]
    batch, reader = _read_at(path, order)
    assert (reader._direct["x"] is None) == (layout != "missing chunk")
    np.testing.assert_array_equal(batch["x"], data[order])
    np.testing.assert_array_equal(batch["x"], arr[:][order])


def _damage(chunk: str, how: str, crc: bool) -> None:
    with open(chunk, "rb") as f:
        data = bytearray(f.read())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped byte":
        data[len(data) // 2] ^= 0x10
    else:  # a blosc header declaring a chunk twice its size, under a CRC of its own
        frame = data[:-4] if crc else data
        frame[4:8] = (2 * int.from_bytes(frame[4:8], "little")).to_bytes(4, "little")
        data = bytearray(_with_crc(bytes(frame)) if crc else frame)
    with open(chunk, "wb") as f:
        f.write(bytes(data))


def _with_crc(frame: bytes) -> bytes:
    import google_crc32c

    return frame + int(google_crc32c.value(frame)).to_bytes(4, "little")


_REASONS = {
    (True, "truncated"): "CRC32C",
    (True, "flipped byte"): "CRC32C",
    (True, "wrong blosc header"): "blosc header",
    (False, "truncated"): "blosc frame declares",
    (False, "flipped byte"): "blosc",
    (False, "wrong blosc header"): "blosc header",
}


@pytest.mark.parametrize("crc", [True, False], ids=["crc32c", "blosc only"])
@pytest.mark.parametrize("how", ["truncated", "flipped byte", "wrong blosc header"])
def test_a_damaged_chunk_is_named_on_the_direct_path(tmp_path, photos, crc, how):
    pytest.importorskip("torch")
    x, _ = photos
    path = str(tmp_path / "hand.zarr")
    _by_hand(path, x[:30], 3, chunks=(5, *x.shape[1:]), **_blosc(3, crc))
    chunk = os.path.join(path, "x", "c", "2", "0", "0", "0")  # records 10..14
    if how == "flipped byte" and not crc:
        # a flip in compressed bytes need not fail to decode (zstd's frames here carry no
        # checksum): the flip goes in the frame's first block offset
        with open(chunk, "r+b") as f:
            f.seek(16)
            f.write((1 << 30).to_bytes(4, "little"))
    else:
        _damage(chunk, how, crc)
    for order in ([12], [3, 12, 20], list(range(8, 16))):
        with pytest.raises(CodecIOError) as err:
            _read_at(path, order)
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(f"{path}: split 'data', field 'x', ")
        assert "array 'x', chunk 'c/2/0/0/0' (records 10..14): unreadable: " in msg, msg
        assert _REASONS[(crc, how)] in msg, msg
    batch, _ = _read_at(path, [0, 9, 15, 29])  # the other chunks read
    np.testing.assert_array_equal(batch["x"], x[[0, 9, 15, 29]])
    mapped = dstore.to_torch(path, "data", map_style=True)
    with pytest.raises(CodecIOError, match=re.escape("chunk 'c/2/0/0/0' (records 10..14)")):
        mapped.__getitems__([1, 11])
