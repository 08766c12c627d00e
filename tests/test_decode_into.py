"""Issue #40: training reads decode each PNG straight into its batch, and parse small
int64 lists without numpy's per-call cost; the records must be exactly what they were.

``dstore.images.png.decode(data, out=row)`` writes the pixels into ``row`` when the PNG
holds exactly that (and returns ``row``), and leaves ``row`` alone otherwise; a
TFRecord's records at positions are decoded from every shard into one batch. Each is
checked against the pixels written, through every PNG path (dstore's UP rows, libpng's
filters), and through the readers users train with.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

import dstore
from dstore.codecs.example import wire
from dstore.demo import photo_tiles
from dstore.images import png as _png

pytest.importorskip("imagecodecs")


def _images() -> dict[str, np.ndarray]:
    x, _ = photo_tiles(2, 64, seed=43)
    rgb = x[0]
    return {
        "rgb": rgb,
        "rgba": np.concatenate([rgb, x[1][..., :1]], -1),
        "gray": np.ascontiguousarray(rgb[..., 1]),
        "gray_alpha": np.ascontiguousarray(np.stack([rgb[..., 0], x[1][..., 2]], -1)),
        "rgb16": rgb.astype(np.uint16) * 257 + x[1].astype(np.uint16),
        "gray16": (rgb[..., 2].astype(np.uint16) << 8) | x[1][..., 0],
        "one_row": np.ascontiguousarray(rgb[:1]),
        "three_rows": np.ascontiguousarray(rgb[:3]),
    }


def _pngs(img: np.ndarray) -> dict[str, bytes]:
    """``img`` as dstore's levels write it (UP rows: dstore's own decoder) and as PIL
    writes it (any filter: libpng decodes)."""
    out = {level: _png.png_encoder(level)(img) for level in ("fast", "balanced", "6")}
    if img.dtype == np.uint8:
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        out["pil"] = buf.getvalue()
    return out


@pytest.mark.parametrize("kind", list(_images()))
def test_decode_into_a_row_that_holds_the_png(kind: str) -> None:
    img = _images()[kind]
    for how, data in _pngs(img).items():
        row = np.full(img.shape, 7, img.dtype)
        assert _png.decode(data, out=row) is row, how
        np.testing.assert_array_equal(row, img, err_msg=how)
        if img.ndim == 2:  # a grey PNG into a field with a 1-channel axis
            row1 = np.zeros((*img.shape, 1), img.dtype)
            assert _png.decode(data, out=row1) is row1
            np.testing.assert_array_equal(row1[..., 0], img, err_msg=how)


@pytest.mark.parametrize("kind", ["rgb", "gray16"])
def test_decode_leaves_a_row_that_does_not_hold_the_png_alone(kind: str) -> None:
    img = _images()[kind]
    taller = np.zeros((img.shape[0] + 1, *img.shape[1:]), img.dtype)
    other_dtype = np.zeros(img.shape, np.float32)
    strided = np.zeros((img.shape[0], img.shape[1] * 2, *img.shape[2:]), img.dtype)[:, ::2]
    for how, data in _pngs(img).items():
        for row in (taller, other_dtype, strided):
            got = _png.decode(data, out=row)
            assert got is not row, how
            np.testing.assert_array_equal(got, img, err_msg=how)
            assert not row.any(), how


def test_small_varint_lists_parse_as_the_numpy_path_does() -> None:
    rng = np.random.default_rng(40)
    for n in (0, 1, 3, 6):
        for values in (
            rng.integers(0, 2, n),
            rng.integers(0, 5000, n),
            rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64),
        ):
            packed = wire.encode_varints(np.asarray(values, np.int64))
            assert len(packed) <= wire._LOOP_VARINT_BYTES
            got = wire._decode_varints(memoryview(packed))
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, values)
    long = np.arange(-20, 20, dtype=np.int64)  # past the loop's size: numpy's passes
    np.testing.assert_array_equal(wire._decode_varints(wire.encode_varints(long)), long)
    for bad, message in (
        (b"\x05\x85", "end mid-value"),
        (b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    ):
        with pytest.raises(ValueError, match=message):
            wire._decode_varints(bad)


@pytest.mark.parametrize("fmt", ["tfrecord", "arrayrecord", "parquet", "webdataset"])
def test_records_at_positions_across_shards_are_the_written_ones(tmp_path, fmt: str) -> None:
    """Positions from both shards of a split, out of order: each record's pixels, label
    and position are the ones written (decoded into one batch across shards)."""
    x, y = photo_tiles(40, 48, seed=7)
    k = np.arange(40, dtype=np.int64)
    src = tmp_path / "src.npz"
    np.savez(src, x_train=x, y_train=y, k_train=k)
    out = tmp_path / fmt
    dstore.convert(str(src), str(out), to=fmt, options={"shard_mb": 0.08})
    assert len(list(out.glob("*train*"))) >= 2  # positions from several shards
    ds = dstore.to_torch(out, "train", shuffle="global", seed=3)
    got = {int(r["k"]): r for r in ds}
    assert sorted(got) == list(range(40))
    for i, r in got.items():
        np.testing.assert_array_equal(r["x"].numpy(), x[i])
        np.testing.assert_array_equal(r["y"].numpy(), y[i])
