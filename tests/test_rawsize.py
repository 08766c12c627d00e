"""Raw (decoded) sizes of fields whose records are encoded (issue #27 §3.7): a conversion's
"raw" bytes count pixels, never the encoded bytes' container shape."""

from __future__ import annotations

import numpy as np
import pytest

import dstore
from dstore.engine.rawsize import encoded_image_bytes
from dstore.model import Image


def _npz(tmp_path, tiles) -> str:
    x, y = tiles
    path = str(tmp_path / "data.npz")
    np.savez(path, x_train=x[:40], y_train=y[:40], x_test=x[40:], y_test=y[40:])
    return path


def test_png_images_of_a_fixed_shape_count_their_pixels(tmp_path, tiles):
    x, y = tiles
    out = str(tmp_path / "out.tfrecords")
    report = dstore.convert(_npz(tmp_path, tiles), out, layout="tf-classification")
    assert report.raw_bytes == x.nbytes + y.nbytes
    assert "raw/out 0.00" not in report.summary()
    assert dstore.info(out).lines()[0].split(", ")[2] == f"{(x.nbytes + y.nbytes) / 1e3:.1f} kB raw"


def test_tensor_encoded_images_are_measured_as_they_pass(tmp_path, tiles):
    """label-maker's own encoding: one serialized TensorProto per record, a byte string
    the schema cannot size; the conversion measures it (its header adds a few bytes)."""
    x, y = tiles
    out = str(tmp_path / "out.tfrecords")
    report = dstore.convert(
        _npz(tmp_path, tiles),
        out,
        layout="tf-classification",
        options={"image_encoding": "tensor"},
    )
    assert x.nbytes + y.nbytes <= report.raw_bytes <= x.nbytes * 1.01 + y.nbytes
    # info reads no record: it says which fields its raw size leaves out
    first = dstore.info(out).lines()[0]
    assert "raw + image (size varies, not read)" in first, first


def test_sharded_planning_sample_is_not_counted_twice(tmp_path, tiles):
    """TFRecord plans its shards from a first read of a few records, then reads them all:
    each record of a varying field counts once."""
    x, y = tiles
    text = np.array([f"tile {i}" * (i % 5 + 1) for i in range(len(x))])
    src = str(tmp_path / "s.npz")
    np.savez(src, y_train=y, name_train=text)
    report = dstore.convert(src, str(tmp_path / "o.tfrecords"))
    assert report.raw_bytes == y.nbytes + sum(len(t.encode()) for t in text)


@pytest.mark.parametrize("codec", ["png", "jpeg"])
def test_encoded_image_size_from_its_header(tiles, codec):
    imagecodecs = pytest.importorskip("imagecodecs")
    x, _ = tiles
    for tile in (x[0], np.ascontiguousarray(x[1, :40, :24]), np.ascontiguousarray(x[2, :, :, 0])):
        data = bytes(getattr(imagecodecs, f"{codec}_encode")(tile))
        h, w = tile.shape[:2]
        channels = tile.shape[2] if tile.ndim == 3 else 1
        assert encoded_image_bytes(data, Image(channels=None, encoding=codec)) == h * w * channels
        # decoded to the schema's channels when it names them
        assert encoded_image_bytes(data, Image(channels=4, encoding=codec)) == h * w * 4
    assert encoded_image_bytes(b"not an image", Image(encoding="png")) is None
