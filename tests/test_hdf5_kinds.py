"""HDF5 field kinds: h5py users get one string or array per record, and foreign
variable-length strings, bytes and vlen numbers read as kinds."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import dstore
from dstore.errors import DstoreError
from dstore.model import Bytes, Ragged, String

h5py = pytest.importorskip("h5py")


def test_h5py_reads_what_dstore_writes(tmp_path: Any) -> None:
    rng = np.random.default_rng(0)
    names = ["a.png", "", "é/x", "日本"]
    blobs = [b"\x00\x01", b"", b"\xff", b"a\x00"]
    boxes = [rng.random((k, 4)).astype(np.float32) for k in (2, 0, 3, 1)]
    tokens = [np.arange(k) for k in (1, 4, 0, 2)]
    path = tmp_path / "k.h5"
    dstore.save({"train": {"names": names, "blobs": blobs, "boxes": boxes, "tokens": tokens}}, path)
    with h5py.File(path, "r") as f:
        assert [s.decode() for s in f["train/names"][:]] == names
        assert [bytes(b) for b in f["train/blobs"][:]] == blobs
        for i, b in enumerate(boxes):
            np.testing.assert_array_equal(f["train/boxes"][i].reshape(-1, 4), b)
        assert list(f["train/boxes"].attrs["dstore_inner_shape"]) == [4]
        assert [t.tolist() for t in f["train/tokens"][:]] == [t.tolist() for t in tokens]
    with dstore.open(path) as ds:
        assert ds["train"]["names"][:] == names
        assert ds["train"]["blobs"][3] == b"a\x00"
        np.testing.assert_array_equal(ds["train"]["boxes"][2], boxes[2])


def test_foreign_hdf5_strings_and_vlen(tmp_path: Any) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "text", data=np.array(["x", "yé", ""], dtype=object), dtype=h5py.string_dtype()
        )
        f.create_dataset(
            "ascii",
            data=np.array([b"a", b"bc", b""], dtype=object),
            dtype=h5py.string_dtype("ascii"),
        )
        f.create_dataset("fixed", data=np.array([b"ab", b"c", b""], dtype="S2"))
        v = f.create_dataset("ints", shape=(3,), dtype=h5py.vlen_dtype(np.int32))
        v[0], v[1], v[2] = np.arange(3), np.arange(0), np.arange(5)
    with dstore.open(path) as ds:
        d = ds["data"]
        assert d["text"].kind == String() and d["text"][:] == ["x", "yé", ""]
        assert d["ascii"].kind == Bytes() and d["ascii"][:] == [b"a", b"bc", b""]
        assert d["fixed"].kind == Bytes() and d["fixed"][:] == [b"ab", b"c", b""]
        assert d["ints"].kind == Ragged(np.dtype("int32"), ())
        assert [x.tolist() for x in d["ints"][:]] == [[0, 1, 2], [], [0, 1, 2, 3, 4]]
    out = tmp_path / "o.npz"
    dstore.convert(path, out)
    assert dstore.verify(path, out).ok


def test_pytables_strings(tmp_path: Any) -> None:
    tables = pytest.importorskip("tables")
    path = str(tmp_path / "pt.h5")
    with tables.open_file(path, "w") as f:
        f.create_array("/", "names", np.array([b"alpha", b"be", b""]))
        vl = f.create_vlarray("/", "lens", tables.Int64Atom())
        for row in ([1, 2], [], [3]):
            vl.append(row)
    with dstore.open(path) as ds:
        assert ds["data"]["names"][:] == [b"alpha", b"be", b""]
        assert [x.tolist() for x in ds["data"]["lens"][:]] == [[1, 2], [], [3]]


def test_bad_hdf5_kinds_are_one_clear_error(tmp_path: Any) -> None:
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        s = f.create_dataset("s", shape=(2,), dtype=h5py.string_dtype())
        s[0] = "ok"
        s[1] = b"\xff\xfe"  # h5py stores the bytes as they are: not UTF-8
    with dstore.open(path) as ds, pytest.raises(DstoreError, match=r"record 1"):
        ds["data"]["s"][:]
    with h5py.File(path, "w") as f:
        v = f.create_dataset("b", shape=(2,), dtype=h5py.vlen_dtype(np.float32))
        v[0], v[1] = np.zeros(8, np.float32), np.zeros(5, np.float32)
        v.attrs["dstore_inner_shape"] = [4]
    with dstore.open(path) as ds, pytest.raises(DstoreError, match=r"record 1: 5 values"):
        ds["data"]["b"][:]


def test_nul_in_hdf5_strings_is_refused_clearly(tmp_path: Any) -> None:
    with pytest.raises(DstoreError, match=r"record 1: HDF5 variable-length strings end at NUL"):
        dstore.save({"s": ["fine", "a\x00b"]}, tmp_path / "n.h5")
    assert os.listdir(tmp_path) == []
