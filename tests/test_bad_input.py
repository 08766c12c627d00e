"""The issue's four bad inputs, in every format where each can arise: one line naming the
file, split, field and record, exit status 2, and nothing left behind."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
import zarr

import dstore
from dstore.cli import main
from dstore.errors import DstoreError
from dstore.model import Image, String, VarColumn
from dstore.testing import usable_formats

#: every binary format's extension, from the registry: each destination refuses bad input alike
FORMATS = [e.lstrip(".") for e in usable_formats().values()]
DESTINATIONS = FORMATS


def _refused(capsys, tmp_path, src: str, dst_ext: str, record: int, field: str = "f") -> str:
    """``dstore convert src`` fails with one line naming everything; no output appears."""
    before = sorted(os.listdir(tmp_path))
    dst = str(tmp_path / f"out.{dst_ext}")
    assert main(["convert", src, dst]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    line = err[0]
    for part in (src, "split 'train'", f"field {field!r}", f"record {record}"):
        assert part in line, (part, line)
    assert sorted(os.listdir(tmp_path)) == before, line  # nothing left behind
    return line


# ------------------------------------------------------------------ values handed to save


BAD_MEMORY = {
    "invalid UTF-8": (
        VarColumn(np.frombuffer(b"ok\xff\xfe", np.uint8), np.array([0, 2, 4])),
        String(),
        "invalid UTF-8",
    ),
    "offsets that do not match": (
        VarColumn(np.frombuffer(b"okab", np.uint8), np.array([0, 2, 7])),
        String(),
        "offsets",
    ),
    "inner shape changes": ([np.zeros((2, 4)), np.zeros((1, 3))], None, "inner shape"),
}


@pytest.mark.parametrize("case", list(BAD_MEMORY))
@pytest.mark.parametrize("ext", FORMATS)
def test_bad_values_handed_to_save_are_refused_before_writing(tmp_path, case, ext):
    data, kind, why = BAD_MEMORY[case]
    kinds = {("train", "f"): kind} if kind is not None else None
    with pytest.raises(DstoreError) as e:
        dstore.save({"train": {"f": data}}, tmp_path / f"o.{ext}", kinds=kinds)
    msg = str(e.value)
    assert "\n" not in msg and why in msg
    assert "split 'train', field 'f', record 1" in msg, msg
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------- files on disk


def _utf8_h5(tmp_path) -> str:
    path = str(tmp_path / "in.h5")
    with h5py.File(path, "w") as f:  # h5py stores the bytes it is given, checked or not
        ds = f.create_dataset("train/f", shape=(3,), dtype=h5py.string_dtype("utf-8"))
        ds[0], ds[1], ds[2] = b"fine", b"caf\xe9", b"also fine"
    return path


def _utf8_zarr(tmp_path) -> str:
    path = str(tmp_path / "in.zarr")
    g = zarr.open_group(path, mode="w")
    sub = g.create_group("train/f", attributes={"dstore_kind": String().to_json()})
    sub.create_array("values", data=np.frombuffer(b"okcaf\xe9", np.uint8))
    sub.create_array("row_splits", data=np.array([0, 2, 6], np.int64))
    return path


@pytest.mark.parametrize("make", [_utf8_h5, _utf8_zarr])
@pytest.mark.parametrize("dst", ["npz", "tfrecords"])
def test_invalid_utf8_in_a_string_field(tmp_path, capsys, make, dst):
    line = _refused(capsys, tmp_path, make(tmp_path), dst, record=1)
    assert "UTF-8" in line


def _offsets_npz(tmp_path) -> str:
    path = str(tmp_path / "in.npz")
    np.savez(
        path,
        **{"f_train.values": np.arange(6, dtype=np.int32), "f_train.row_splits": [0, 2, 1, 6]},
    )
    return path


def _offsets_zarr(tmp_path) -> str:
    path = str(tmp_path / "in.zarr")
    g = zarr.open_group(path, mode="w")
    sub = g.create_group("train/f")
    sub.create_array("values", data=np.arange(6, dtype=np.int32))
    sub.create_array("row_splits", data=np.array([0, 2, 1, 6], np.int64))
    return path


def _offsets_h5(tmp_path) -> str:
    path = str(tmp_path / "in.h5")
    with h5py.File(path, "w") as f:  # a list-of-strings field: strings + row splits
        f.create_dataset("train/f", data=["a", "b", "c"], dtype=h5py.string_dtype())
        f["train/f.row_splits"] = np.array([0, 2, 1, 3], np.int64)
    return path


@pytest.mark.parametrize("make", [_offsets_npz, _offsets_zarr, _offsets_h5])
@pytest.mark.parametrize("dst", DESTINATIONS)
def test_offsets_that_do_not_match_the_values(tmp_path, capsys, make, dst):
    src = make(tmp_path)
    if src.endswith(dst):
        return  # the same format both sides: covered by the others
    line = _refused(capsys, tmp_path, src, dst, record=1)
    assert "row splits" in line


def _inner_h5(tmp_path) -> str:
    path = str(tmp_path / "in.h5")
    with h5py.File(path, "w") as f:  # boxes of 4 values per row; record 1 has 6 values
        ds = f.create_dataset("train/f", shape=(3,), dtype=h5py.vlen_dtype(np.float32))
        ds[0], ds[1], ds[2] = np.zeros(8), np.zeros(6), np.zeros(4)
        ds.attrs["dstore_inner_shape"] = [4]
    return path


@pytest.mark.parametrize("dst", DESTINATIONS)
def test_ragged_inner_shape_that_changes(tmp_path, capsys, dst):
    line = _refused(capsys, tmp_path, _inner_h5(tmp_path), dst, record=1)
    assert "inner shape" in line


def _bad_jpeg_tfrecord(tmp_path) -> str:
    """An OD-style record whose JPEG is cut short (TensorFlow wrote the records)."""
    tf = pytest.importorskip("tensorflow")
    from dstore.demo import photo_tiles

    x, _ = photo_tiles(3, 32)
    path = str(tmp_path / "train.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i, tile in enumerate(x):
            jpeg = tf.io.encode_jpeg(tile).numpy()
            if i == 2:
                jpeg = jpeg[:3] + b"\x00" * 40  # the JPEG signature, then no image
            feats = {"f": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return path


def _bad_png_npz(tmp_path) -> str:
    path = str(tmp_path / "in.npz")
    good = dstore.testing._png(np.zeros((4, 5, 3), np.uint8))
    blobs = [good, good, good[:20]]  # record 2: a PNG header and nothing more
    kinds = {("train", "f"): Image(np.dtype(np.uint8), 3, None, None, "png")}
    dstore.save({"train": {"f": blobs}}, path, kinds=kinds)
    return path


@pytest.mark.parametrize("make", [_bad_jpeg_tfrecord, _bad_png_npz])
@pytest.mark.parametrize("dst", DESTINATIONS)
def test_image_that_does_not_decode(tmp_path, capsys, make, dst):
    """A destination that stores pixels refuses an image that does not decode; one that
    keeps encoded images (Codec.keeps_encoded_images) carries its bytes over unchanged."""
    src = make(tmp_path)
    if src.endswith(dst):
        return
    name = next(n for n, e in usable_formats().items() if e == f".{dst}")
    if not dstore.get_codec_class(name).keeps_encoded_images:
        line = _refused(capsys, tmp_path, src, dst, record=2)
        assert "not a decodable" in line and "--keep-encoded" in line
        return
    out = str(tmp_path / f"out.{dst}")
    assert main(["convert", src, out]) == 0
    with dstore.open(src) as a, dstore.open(out) as b:
        (split,) = list(a)
        fa, fb = a[split]["f"], b[split]["f"]
        assert [bytes(fb[i]) for i in range(len(fb))] == [bytes(fa[i]) for i in range(len(fa))]
