"""HDF5 chunking: a chunk per large record (random reads decode only their record),
``chunk_mb`` chunks for small ones, and files chunked either way read record by record."""

from __future__ import annotations

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.errors import OptionError

h5py = pytest.importorskip("h5py")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def big_tiles():
    """Photo tiles of 256x256x3 uint8 (192 KiB a record) and their positions."""
    x, _ = photo_tiles(12, 256, seed=3)
    return x, np.arange(len(x), dtype=np.int64)


def _write(tmp_path, big_tiles, name, **options):
    x, k = big_tiles
    src = str(tmp_path / "src.npz")
    np.savez(src, x_train=x, k_train=k)
    out = str(tmp_path / name)
    dstore.convert(src, out, options={k: str(v) for k, v in options.items()})
    return out


def test_large_records_get_a_chunk_each_and_h5py_reads_them(tmp_path, big_tiles):
    x, k = big_tiles
    out = _write(tmp_path, big_tiles, "one.h5")
    with h5py.File(out, "r") as f:
        assert f["train/x"].chunks == (1, 256, 256, 3)
        assert f["train/k"].chunks[0] == len(k)  # 8-byte records: one chunk of them all
        assert f["train/x"].compression == "gzip"
        np.testing.assert_array_equal(f["train/x"][:], x)
        for i in (0, 5, 11):
            np.testing.assert_array_equal(f["train/x"][i], x[i])


def test_record_chunk_kb_zero_or_above_the_record_keeps_chunk_mb(tmp_path, big_tiles):
    for name, options in (
        ("zero.h5", {"record_chunk_kb": 0}),
        ("above.h5", {"record_chunk_kb": 200}),
    ):
        out = _write(tmp_path, big_tiles, name, **options)
        with h5py.File(out, "r") as f:
            assert f["train/x"].chunks == (5, 256, 256, 3)  # about 1 MiB: 5 tiles
    with pytest.raises(OptionError, match="record_chunk_kb must be >= 0"):
        _write(tmp_path, big_tiles, "bad.h5", record_chunk_kb=-1)


@pytest.mark.parametrize("record_chunk_kb", [0, 64])
def test_either_chunking_reads_every_record_shuffled_and_by_index(
    tmp_path, big_tiles, record_chunk_kb
):
    """Files of several records a chunk (written before a chunk per record was the
    default, or with record_chunk_kb=0) and of a chunk a record read the same records."""
    x, k = big_tiles
    out = _write(tmp_path, big_tiles, "f.h5", record_chunk_kb=record_chunk_kb)
    ds = dstore.to_torch(out, "train", shuffle="global", seed=4)
    seen = {int(r["k"]): r["x"].numpy() for r in ds}
    assert sorted(seen) == k.tolist()
    for i, got in seen.items():
        np.testing.assert_array_equal(got, x[i])
    mapped = dstore.to_torch(out, "train", map_style=True)
    order = [7, 0, 11, 3, 3]
    records = mapped.__getitems__(order)
    assert [int(r["k"]) for r in records] == order
    for i, r in zip(order, records, strict=True):
        np.testing.assert_array_equal(r["x"].numpy(), x[i])
