"""npz specifics: streaming reads of compressed and stored members, key layouts, np.load compatibility."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

import dstore
from dstore.errors import CodecIOError
from dstore.testing import assert_datasets_equal, read_all


def _load(path: str) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("writer", [np.savez, np.savez_compressed])
def test_reads_numpy_written_files_in_small_batches(tmp_path, tiles, writer):
    x, y = tiles
    src = str(tmp_path / "data.npz")
    writer(src, x_train=x[:50], y_train=y[:50], x_val=x[50:], y_val=y[50:])
    with dstore.open(src) as ds:
        assert set(ds) == {"train", "val"}
        batches = list(ds["train"].iter_batches(batch_rows=7))
        assert [len(b["x"]) for b in batches] == [7] * 7 + [1]
        np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), x[:50])
        np.testing.assert_array_equal(ds["val"]["y"][3:], y[53:])


def test_written_npz_is_plain_numpy_and_compressed(tmp_path, tiles):
    x, y = tiles
    out = str(tmp_path / "out.npz")
    dstore.save({"x_train": x, "y_train": y}, out)
    loaded = _load(out)
    np.testing.assert_array_equal(loaded["x_train"], x)
    np.testing.assert_array_equal(loaded["y_train"], y)
    with zipfile.ZipFile(out) as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
        assert sum(i.compress_size for i in z.infolist()) < x.nbytes


def test_parallel_deflate_output_equals_input_at_every_level(tmp_path, tiles):
    x, _ = tiles
    for level in (1, 6, 9):
        out = str(tmp_path / f"l{level}.npz")
        dstore.save({"x": x}, out, level=level, workers=2)
        np.testing.assert_array_equal(_load(out)["x"], x)
        with zipfile.ZipFile(out) as z:
            assert z.testzip() is None


def test_key_layouts(tmp_path):
    src = str(tmp_path / "k.npz")
    np.savez(
        src,
        **{
            "train/a": np.arange(3),
            "train/b": np.ones(3),
            "test/a": np.arange(2),
            "test/b": np.ones(2),
        },
    )
    with dstore.open(src) as ds:
        assert set(ds) == {"train", "test"} and set(ds["train"]) == {"a", "b"}
    out = str(tmp_path / "k2.npz")
    dstore.convert(src, out)
    assert set(_load(out)) == {"train/a", "train/b", "test/a", "test/b"}

    plain = str(tmp_path / "plain.npz")
    np.savez(plain, features=np.ones((4, 3)), row=np.arange(4))
    with dstore.open(plain) as ds:
        assert list(ds) == ["data"] and set(ds["data"]) == {"features", "row"}


def test_fortran_order_member(tmp_path):
    arr = np.asfortranarray(np.arange(60, dtype=np.float32).reshape(10, 6))
    src = str(tmp_path / "f.npz")
    np.savez(src, x=arr)
    assert_datasets_equal({"data": {"x": np.ascontiguousarray(arr)}}, read_all(src))


def test_crc_error_in_member_is_reported(tmp_path):
    src = str(tmp_path / "c.npz")
    np.savez(src, x=np.arange(1000, dtype=np.int64))
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    pos = raw.index(np.arange(1000, dtype=np.int64)[500:501].tobytes())
    raw[pos] ^= 0xFF
    with open(src, "wb") as f:
        f.write(raw)
    with dstore.open(src) as ds, pytest.raises(CodecIOError, match="CRC"):
        ds["data"].read()


def test_non_npy_member_refused(tmp_path):
    src = str(tmp_path / "odd.npz")
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("notes.txt", "hello")
    with pytest.raises(dstore.SchemaError, match=r"notes\.txt"):
        dstore.open(src)


def test_hdf5_paths_become_npz_keys(tmp_path):
    src = str(tmp_path / "a.h5")
    h5py = pytest.importorskip("h5py")
    with h5py.File(src, "w") as f:
        f["train/x"] = np.arange(5)
    out = str(tmp_path / "a.npz")
    dstore.convert(src, out)
    assert set(_load(out)) == {"train/x"}
