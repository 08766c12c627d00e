"""Attributes and fill values: read into the schema, restored by HDF5 and zarr, kept in
dstore's schema by npz and TFRecord, and every one that cannot be carried named."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dstore
from dstore.cli import main
from dstore.model.attrs import decode, encode

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")


def _same(a, b) -> bool:
    """Equal as the library returns them: type, dtype, shape and bits (NaN included)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and ((a.dtype == object and a.tolist() == b.tolist()) or a.tobytes() == b.tobytes())
        )
    if isinstance(a, np.generic) or isinstance(b, np.generic):
        return type(a) is type(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def _h5_attrs(obj) -> dict:
    return {k: obj.attrs[k] for k in obj.attrs if k != "dstore_schema"}


def _write_h5(path: str) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "tiles from camera 3"
        f.attrs["version"] = np.int32(3)
        f.attrs["created"] = np.float64(1.7e9)
        g = f.create_group("train")
        g.attrs["source"] = "camera"
        g.attrs["scale"] = np.array([1.5, 2.5], np.float32)
        g.attrs["flags"] = np.array([True, False])
        x = g.create_dataset(
            "x",
            data=np.arange(24, dtype=np.float32).reshape(6, 4),
            fillvalue=np.float32(-1.5),
            chunks=(3, 4),
        )
        x.attrs["units"] = "m"
        x.attrs["nan"] = np.float64("nan")
        x.attrs["opaque"] = np.void(b"\x00\x01\xff")
        x.attrs["names"] = ["a", "bb", "ccc"]
        x.attrs["matrix"] = np.arange(6, dtype=">i2").reshape(2, 3)
        x.attrs["fixed"] = np.bytes_(b"abc")
        y = g.create_dataset("y", data=np.arange(6, dtype=np.int16), fillvalue=np.int16(7))
        y.attrs["classes"] = np.int64(10)
        t = f.create_group("test")
        t.create_dataset("x", data=np.zeros((2, 4), np.float32))
        t.create_dataset("y", data=np.zeros(2, np.int16))


def _assert_same_h5(a: str, b: str) -> None:
    with h5py.File(a) as fa, h5py.File(b) as fb:
        pairs = [(fa, fb)] + [
            (fa[n], fb[n]) for n in ("train", "test", "train/x", "train/y", "test/x", "test/y")
        ]
        for oa, ob in pairs:
            ga, gb = _h5_attrs(oa), _h5_attrs(ob)
            assert sorted(ga) == sorted(gb), oa.name
            for k in ga:
                assert _same(ga[k], gb[k]), (oa.name, k, ga[k], gb[k])
        for n in ("train/x", "train/y", "test/x"):
            assert _same(fa[n].fillvalue, fb[n].fillvalue), n
            assert (
                fa[n].id.get_create_plist().fill_value_defined()
                == fb[n].id.get_create_plist().fill_value_defined()
            ), n


@pytest.mark.parametrize("middle", ["zarr", "npz", "tfrecords", "h5"])
def test_hdf5_attributes_and_fill_values_survive_a_round_trip(tmp_path, middle):
    src = str(tmp_path / "a.h5")
    _write_h5(src)
    mid = str(tmp_path / f"m.{middle}")
    report = dstore.convert(src, mid)
    back = str(tmp_path / "back.h5")
    dstore.convert(mid, back)
    _assert_same_h5(src, back)
    assert dstore.verify(src, back).ok
    notes = "\n".join(report.notes)
    if middle in ("npz", "tfrecords"):
        assert (
            "no attributes or fill values: 13 attribute(s) and 2 fill value(s) are kept only "
            "in dstore's schema" in notes
        )
    elif middle == "zarr":
        for what in (
            "the root 'version' (int32 scalar stored as JSON)",
            "split 'train' 'scale' (float32 array stored as JSON)",
            "train/x 'nan' (float64 value(s) JSON cannot hold, not stored)",
            "train/x 'opaque' (bytes: not a JSON value, not stored)",
        ):
            assert what in notes
    else:
        assert report.notes == []


def test_zarr_sees_the_attributes_and_fill_values(tmp_path):
    src = str(tmp_path / "a.h5")
    _write_h5(src)
    out = str(tmp_path / "m.zarr")
    dstore.convert(src, out)
    z = zarr.open_group(out, mode="r")
    assert {k: v for k, v in z.attrs.items() if k != "dstore_schema"} == {
        "title": "tiles from camera 3",
        "version": 3,
        "created": 1.7e9,
    }
    assert dict(z["train"].attrs) == {
        "source": "camera",
        "scale": [1.5, 2.5],
        "flags": [True, False],
    }
    assert dict(z["train/x"].attrs) == {
        "units": "m",
        "names": ["a", "bb", "ccc"],
        "matrix": [[0, 1, 2], [3, 4, 5]],
    }
    assert z["train/x"].fill_value == np.float32(-1.5) and z["train/y"].fill_value == 7
    assert z["test/x"].fill_value == 0
    np.testing.assert_array_equal(z["train/x"][:], np.arange(24, dtype=np.float32).reshape(6, 4))


def test_zarr_attributes_and_fill_values_round_trip_through_hdf5(tmp_path):
    src = str(tmp_path / "a.zarr")
    root = zarr.open_group(src, mode="w", zarr_format=3)
    root.attrs.update({"meta": {"k": [1, "two", None]}, "n": 4, "big": 2**70, "nul": "a\x00b"})
    g = root.create_group("val", attributes={"origin": "lab", "ratio": 0.25})
    arr = g.create_array(
        "x",
        shape=(5, 3),
        chunks=(2, 3),
        dtype="float64",
        fill_value=float("nan"),
        attributes={"long_name": "feature", "range": [0, 1], "nested": {"a": {"b": 1}}},
    )
    arr[:] = np.arange(15.0).reshape(5, 3)
    g.create_array("y", shape=(5,), chunks=(5,), dtype="uint8", fill_value=255)[:] = np.arange(5)
    h5 = str(tmp_path / "m.h5")
    report = dstore.convert(src, h5)
    for what in (
        "'nested' (stored as a JSON string)",
        "'big' (stored as a JSON string)",
        "'nul' (stored as a JSON string)",
    ):
        assert any(what in n for n in report.notes), report.notes
    with h5py.File(h5) as f:
        assert f["val"].attrs["origin"] == "lab" and f["val/x"].attrs["long_name"] == "feature"
        assert json.loads(f["val/x"].attrs["nested"]) == {"a": {"b": 1}}
        assert np.isnan(f["val/x"].fillvalue) and f["val/y"].fillvalue == 255
    back = str(tmp_path / "back.zarr")
    dstore.convert(h5, back)
    zb = zarr.open_group(back, mode="r")
    assert {k: v for k, v in zb.attrs.items() if k != "dstore_schema"} == {
        "meta": {"k": [1, "two", None]},
        "n": 4,
        "big": 2**70,
        "nul": "a\x00b",
    }
    assert dict(zb["val"].attrs) == {"origin": "lab", "ratio": 0.25}
    assert dict(zb["val/x"].attrs) == {
        "long_name": "feature",
        "range": [0, 1],
        "nested": {"a": {"b": 1}},
    }
    assert np.isnan(zb["val/x"].fill_value) and zb["val/y"].fill_value == 255
    assert dstore.verify(src, back).ok


def test_attributes_that_cannot_be_carried_are_named(tmp_path, capsys):
    src = str(tmp_path / "r.h5")
    with h5py.File(src, "w") as f:
        d = f.create_dataset("x", data=np.arange(4))
        d.attrs["ref"] = f.ref
        d.attrs["pair"] = np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])
        d.attrs["ok"] = 1
    assert main(["convert", src, str(tmp_path / "o.h5")]) == 0
    out = capsys.readouterr().out
    assert "dataset '/x': attribute 'ref' (a Reference) is not carried" in out
    assert "dataset '/x': attribute 'pair'" in out and "is not carried" in out
    with h5py.File(tmp_path / "o.h5") as f:
        assert _h5_attrs(f["x"]) == {"ok": 1}


def test_fill_value_follows_a_dtype_cast(tmp_path):
    src = str(tmp_path / "a.h5")
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.linspace(0, 1, 8), fillvalue=0.1)
    out = str(tmp_path / "o.h5")
    dstore.convert(src, out, dtype="float16")
    with h5py.File(out) as f:
        assert f["x"].dtype == np.float16 and f["x"].fillvalue == np.float16(0.1)


_ATTR_DTYPES = st.sampled_from(
    ["<f2", ">f4", "<f8", "<c8", ">c16", "|i1", "<u2", ">i8", "|b1", "|S4"]
)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        hnp.arrays(_ATTR_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)),
        _ATTR_DTYPES.flatmap(lambda d: hnp.from_dtype(np.dtype(d))).map(lambda v: v),
        st.binary(max_size=20),
        st.lists(st.text(max_size=5), max_size=4).map(lambda v: np.array(v, dtype=object)),
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.text(max_size=6)
            | st.floats(allow_nan=False, allow_infinity=False),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
            max_leaves=8,
        ),
    )
)
def test_encoding_is_reversible_through_json(value):
    enc = json.loads(json.dumps(encode(value), allow_nan=False))
    back = decode(enc)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.ndarray) and value.dtype == object:
        assert back.tolist() == value.tolist() and back.shape == value.shape
    elif (
        isinstance(value, (np.ndarray, np.generic))
        and value.dtype.kind == "S"
        and np.ndim(value) == 0
    ):
        assert back == value and type(back) is type(value)  # a bytes scalar has no fixed width
    elif isinstance(value, (np.ndarray, np.generic)):
        assert np.asarray(back).dtype == value.dtype and np.asarray(back).shape == np.shape(value)
        assert np.asarray(back).tobytes() == np.asarray(value).tobytes()
        assert type(back) is type(value)
    else:
        assert back == value and type(back) is type(value)


def test_info_of_a_foreign_file_still_works_with_attributes(tmp_path, capsys):
    src = str(tmp_path / "a.h5")
    _write_h5(src)
    assert main(["info", src]) == 0
    assert "split train: 6 records" in capsys.readouterr().out
    assert os.path.exists(src)
