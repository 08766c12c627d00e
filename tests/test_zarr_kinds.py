"""zarr field kinds: zarr users open what dstore writes; zarr string arrays written by zarr read as strings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dstore
from dstore.errors import DstoreError
from dstore.model import Ragged, String

zarr = pytest.importorskip("zarr")


def test_zarr_reads_what_dstore_writes(tmp_path: Any) -> None:
    rng = np.random.default_rng(1)
    names = ["a.png", "", "é/x", "日本", "nul\x00inside"]
    blobs = [b"\x00", b"", b"\xff\x00", b"abc", b"z"]
    boxes = [rng.random((k, 4)).astype(np.float32) for k in (2, 0, 3, 1, 4)]
    path = tmp_path / "k.zarr"
    dstore.save({"train": {"names": names, "blobs": blobs, "boxes": boxes}}, path)
    g = zarr.open_group(str(path), mode="r")
    assert [str(s) for s in g["train/names"][:]] == names
    blob_group = g["train/blobs"]
    splits, values = blob_group["row_splits"][:], blob_group["values"][:]
    assert [values[splits[i] : splits[i + 1]].tobytes() for i in range(5)] == blobs
    box_group = g["train/boxes"]
    assert box_group.attrs["dstore_kind"]["kind"] == "ragged"
    splits, values = box_group["row_splits"][:], box_group["values"][:]
    for i, b in enumerate(boxes):
        np.testing.assert_array_equal(values[splits[i] : splits[i + 1]], b)
    with dstore.open(path) as ds:
        assert ds["train"]["names"][:] == names
        assert ds["train"]["blobs"][1:3] == blobs[1:3]
        np.testing.assert_array_equal(ds["train"]["boxes"][4], boxes[4])


def test_foreign_zarr_strings_and_ragged_layout(tmp_path: Any) -> None:
    path = str(tmp_path / "f.zarr")
    g = zarr.open_group(path, mode="w", zarr_format=3)
    s = g.create_array("words", shape=(3,), dtype=str, chunks=(2,))
    s[:] = np.array(["x", "yé", ""], dtype=object)
    r = g.create_group("lens")  # the values + row_splits layout, made by hand
    r.create_array("values", data=np.arange(6, dtype=np.int32))
    r.create_array("row_splits", data=np.array([0, 1, 1, 6]))
    with dstore.open(path) as ds:
        assert ds["data"]["words"].kind == String() and ds["data"]["words"][:] == ["x", "yé", ""]
        assert ds["data"]["lens"].kind == Ragged(np.dtype("int32"), ())
        assert [x.tolist() for x in ds["data"]["lens"][:]] == [[0], [], [1, 2, 3, 4, 5]]


def test_bad_row_splits_name_the_record(tmp_path: Any) -> None:
    path = str(tmp_path / "b.zarr")
    g = zarr.open_group(path, mode="w", zarr_format=3)
    r = g.create_group("lens")
    r.create_array("values", data=np.arange(6.0))
    r.create_array("row_splits", data=np.array([0, 4, 2, 6]))
    with dstore.open(path) as ds, pytest.raises(DstoreError, match=r"field 'lens'.*record 1"):
        ds["data"]["lens"][:]
