"""Lossy image encodings (issue #14 §1): TFRecord image_codec=, zarr image_codec=, HDF5 refusal,
decode on read, verify's error statistics, and the bad inputs, on real photographs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.images.imagecodec import LossyImage

imagecodecs = pytest.importorskip("imagecodecs")
skdata = pytest.importorskip("skimage.data")

FORMATS = ("jpeg", "webp", "jxl")
#: channels each format takes (0 = a 2-d record) and refuses
TAKES = {"jpeg": (0, 1, 3), "webp": (3, 4), "jxl": (0, 1, 2, 3, 4)}


def _photos(n: int, size: int = 64, channels: int = 3, dtype: type = np.uint8) -> np.ndarray:
    """``n`` crops of scikit-image's sample photographs, shaped ``(n, size, size[, C])``."""
    rgb = np.concatenate([skdata.astronaut()[:256, :256], skdata.coffee()[:256, :256]], axis=1)
    crops = [
        rgb[(i * 37) % (257 - size) :][:size, (i * 53) % (513 - size) :][:, :size] for i in range(n)
    ]
    x = np.stack(crops)
    if channels in (0, 1):
        x = x.mean(axis=3).astype(np.uint8)
        x = x if channels == 0 else x[..., None]
    elif channels == 2:
        x = x[..., :2]
    elif channels == 4:
        x = np.concatenate([x, x[..., :1]], axis=3)
    if dtype == np.uint16:
        x = x.astype(np.uint16) * 257
    return np.ascontiguousarray(x)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dstore.cli", *args], capture_output=True, text=True, check=False
    )


def _readme_zarr_recipe() -> str:
    """The "Lossy images in zarr without dstore" snippet of docs/formats/zarr.md, as printed."""
    page = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "formats", "zarr.md")
    with open(page) as f:
        (code,) = re.findall(r"^```py\n(.*?)^```$", f.read(), flags=re.DOTALL | re.MULTILINE)
    return code


_WITHOUT_DSTORE = """\
import importlib.metadata as _md, sys
sys.modules["dstore"] = None
_md.entry_points = lambda **kw: _md.EntryPoints(
    e for d in _md.distributions() for e in d.entry_points if not e.value.startswith("dstore")
).select(**kw)
"""


def _psnr(a: np.ndarray, b: np.ndarray, peak: float) -> float:
    mse = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return np.inf if mse == 0 else 10 * np.log10(peak**2 / mse)


@pytest.mark.slow  # encodes and decodes every tile per codec (~15 s)
@pytest.mark.parametrize("fmt", FORMATS)
def test_tfrecord_lossy_decodes_to_pixels_within_the_declared_bound(tmp_path, fmt):
    for channels in TAKES[fmt]:
        for quality in (20, 90):
            x = _photos(12, channels=channels)
            y = np.arange(len(x), dtype=np.int64)
            src = str(tmp_path / f"src{channels}.npz")
            np.savez(src, x_train=x, y_train=y)
            out = str(tmp_path / f"{fmt}{channels}q{quality}.tfrecords")
            dstore.convert(
                src, out, options={"image_codec": fmt, "quality": quality, "images": "x"}
            )
            with dstore.open(out) as ds:
                back = np.stack([ds["train"]["x"][i] for i in range(len(x))])
                assert np.array_equal(ds["train"]["y"][:], y)
            assert back.shape == x.shape and back.dtype == x.dtype  # (H, W, 1) kept
            psnr = _psnr(x, back, 255)
            assert psnr >= LossyImage(fmt, quality).psnr_floor(), (fmt, channels, quality, psnr)
            assert psnr < np.inf  # lossy: WebP and JPEG XL are told lossy explicitly
            with open(os.path.join(out, "dstore.json")) as f:
                manifest = json.load(f)
            assert manifest["fields"]["train"]["x"] == {
                "feature": "x",
                "encoding": fmt,
                "quality": quality,
            }
            assert manifest["libraries"][fmt].endswith(f"quality {quality}")
            r = _cli("verify", src, out)
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"ok  train/x: 12 records {fmt}: max abs error" in r.stdout
            assert "PSNR" in r.stdout and f"{fmt} quality {quality} declares" in r.stdout


def test_tfrecord_jpeg_bytes_are_libjpeg_turbo_and_smaller_than_png(tmp_path):
    from dstore.codecs.example.wire import decode_example
    from dstore.codecs.tfrecord.io import RecordFile

    x = _photos(8, size=128)
    png = str(tmp_path / "png.tfrecords")
    jpg = str(tmp_path / "jpg.tfrecords")
    dstore.save({"train": {"x": x}}, png)
    dstore.save({"train": {"x": x}}, jpg, image_codec="jpeg", quality=90)
    shard = os.path.join(jpg, "train-00000-of-00001.tfrecord")
    with RecordFile(shard) as rf:
        for i in range(len(x)):
            stored = decode_example(rf.next_record(), "test")["x"][1][0]
            assert stored == imagecodecs.jpeg8_encode(
                x[i], level=90
            )  # the bytes libjpeg-turbo writes
    size = sum(os.path.getsize(os.path.join(d, f)) for d in (jpg,) for f in os.listdir(d))
    size_png = sum(os.path.getsize(os.path.join(png, f)) for f in os.listdir(png))
    assert size < size_png / 2


def test_images_of_varying_size_stored_lossy(tmp_path):
    from dstore.model import Image

    rng = np.random.default_rng(0)
    photo = skdata.astronaut()
    imgs = [photo[: int(h), : int(w)].copy() for h, w in rng.integers(16, 80, (9, 2))]
    out = str(tmp_path / "v.tfrecords")
    dstore.save(
        {"train": {"img": imgs}},
        out,
        kinds={("train", "img"): Image(np.dtype(np.uint8), 3)},
        image_codec="jpeg",
    )
    with dstore.open(out) as ds:
        for i, img in enumerate(imgs):
            back = ds["train"]["img"][i]
            assert back.shape == img.shape
            assert _psnr(img, back, 255) > 29


@pytest.mark.slow  # a child Python per codec (~8 s)
def test_zarr_image_codec_opens_with_zarr_and_imagecodecs_alone(tmp_path):
    zarr = pytest.importorskip("zarr")
    for fmt in FORMATS:
        channels = 3
        x = _photos(10, channels=channels)
        src = str(tmp_path / "src.npz")
        np.savez(src, x_train=x, y_train=np.arange(10))
        out = str(tmp_path / f"{fmt}.zarr")
        r = _cli("convert", src, out, "-o", f"image_codec={fmt}", "-o", "quality=85")
        assert r.returncode == 0, r.stderr
        with dstore.open(out) as ds:  # registers dstore's zarr classes for these codecs
            back = ds["train"]["x"][:]
        arr = zarr.open_array(os.path.join(out, "train", "x"), mode="r")
        assert arr.chunks == (1, 64, 64, 3)  # one image per chunk
        assert np.array_equal(arr[:], back)
        assert back.shape == x.shape and _psnr(x, back, 255) >= 28.5
        # what a zarr user does: zarr + imagecodecs, no dstore (docs/formats/zarr.md)
        # as if dstore were not installed: not importable, and its zarr.codecs entry
        # points (which make zarr import dstore's codec classes) not there
        script = _WITHOUT_DSTORE + _readme_zarr_recipe().replace('"small.zarr"', repr(out))
        script += "\nimport sys, numpy as np\nnp.save(sys.stdout.buffer, x[:])\n"
        script += "assert sys.modules['dstore'] is None\n"  # blocked, never imported
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", script],
            capture_output=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        import io

        assert np.array_equal(np.load(io.BytesIO(done.stdout)), back)
        r = _cli("verify", src, out)
        assert r.returncode == 0 and f"{fmt} quality 85 declares" in r.stdout, r.stdout


def test_zarr_grayscale_jpeg_keeps_its_channel_axis(tmp_path):
    x = _photos(5, channels=1)
    out = str(tmp_path / "g.zarr")
    dstore.save({"train": {"x": x}}, out, image_codec="jpeg")
    with dstore.open(out) as ds:
        assert ds["train"]["x"][2].shape == (64, 64, 1)


def test_hdf5_refuses_lossy_image_codecs_by_field(tmp_path):
    pytest.importorskip("h5py")
    src = str(tmp_path / "s.npz")
    np.savez(src, x_train=_photos(3), y_train=np.arange(3))
    for fmt in FORMATS:
        out = tmp_path / "o.h5"
        r = _cli("convert", src, str(out), "-o", f"image_codec={fmt}")
        assert r.returncode == 2
        line = r.stderr.strip()
        assert (
            "\n" not in line and "field 'x'" in line and f"no HDF5 filter plugin for {fmt}" in line
        )
        assert f"image_codec={fmt}" in line  # what to use instead
        assert not out.exists() and os.listdir(tmp_path) == ["s.npz"]


@pytest.mark.slow  # every format x lossy codec (~14 s)
def test_refused_encodings_name_the_field_and_write_nothing(tmp_path):
    """Every (format, dtype, channels) a format cannot take, through both codecs."""
    cases = 0
    for fmt in FORMATS:
        for dtype in (np.uint8, np.uint16):
            for channels in (0, 1, 2, 3, 4):
                dtypes = ("uint8", "uint16") if fmt == "jxl" else ("uint8",)
                if np.dtype(dtype).name in dtypes and channels in TAKES[fmt]:
                    continue
                src = str(tmp_path / "s.npz")
                np.savez(src, img_train=_photos(2, size=16, channels=channels, dtype=dtype))
                for out, opts in (
                    ("o.tfrecords", ["-o", f"image_codec={fmt}", "-o", "images=img"]),
                    ("o.zarr", ["-o", f"image_codec={fmt}"]),
                ):
                    if out == "o.zarr" and channels == 2:
                        continue  # not image-like: zarr's image_codec leaves it lossless
                    r = _cli("convert", src, str(tmp_path / out), *opts)
                    assert r.returncode == 2, (fmt, dtype, channels, out, r.stdout)
                    line = r.stderr.strip()
                    assert "\n" not in line and "field 'img'" in line, line
                    assert f"{fmt} takes" in line, line
                    assert sorted(os.listdir(tmp_path)) == ["s.npz"]
                    cases += 1
    assert cases == 26  # 2 dtypes x 5 channel layouts x 3 formats, less accepted and non-images


@pytest.mark.slow  # ~5 s of refused conversions
def test_bad_quality_and_format_refused(tmp_path):
    src = str(tmp_path / "s.npz")
    np.savez(src, x_train=_photos(2))
    for opts in (
        ["-o", "image_codec=jpeg", "-o", "quality=0"],
        ["-o", "image_codec=webp", "-o", "quality=101"],
        ["-o", "image_codec=jxl", "-o", "quality=-5"],
        ["-o", "image_codec=jpeg", "-o", "quality=9.5"],
        ["-o", "image_codec=jpeg", "-o", "quality=high"],
        ["-o", "image_codec=gif"],
    ):
        r = _cli("convert", src, str(tmp_path / "o.tfrecords"), *opts)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "quality" in r.stderr or "image_codec" in r.stderr
        assert sorted(os.listdir(tmp_path)) == ["s.npz"]
    for opts in (["-o", "image_codec=jpeg", "-o", "quality=200"], ["-o", "image_codec=png"]):
        r = _cli("convert", src, str(tmp_path / "o.zarr"), *opts)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert sorted(os.listdir(tmp_path)) == ["s.npz"]


def test_missing_codec_library_names_the_field_and_the_extra(tmp_path):
    """imagecodecs absent (import blocked in the child): one line, nothing written."""
    src = str(tmp_path / "s.npz")
    np.savez(src, x_train=_photos(2))
    out = str(tmp_path / "o.zarr")
    script = (
        "import sys; sys.modules['imagecodecs'] = None\n"
        "from dstore.cli import main\n"
        f"sys.exit(main(['convert', {src!r}, {out!r}, '-o', 'image_codec=jpeg']))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "field 'x'" in line and "dstore-ml[" in line, line
    assert sorted(os.listdir(tmp_path)) == ["s.npz"]


def test_verify_fails_lossy_data_below_the_declared_psnr(tmp_path):
    """Noise does not survive JPEG's chroma subsampling: verify says so, with numbers."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    src = str(tmp_path / "n.npz")
    np.savez(src, x_train=x)
    out = str(tmp_path / "n.tfrecords")
    dstore.convert(src, out, options={"image_codec": "jpeg", "quality": 90})
    r = _cli("verify", src, out)
    assert r.returncode == 1
    assert "MISMATCH  train/x: 6 records jpeg: max abs error" in r.stdout
    assert "below the PSNR >= 29.0 dB jpeg quality 90 declares" in r.stdout


@pytest.mark.tf
def test_tensorflow_snippet_decodes_lossy_images_as_dstore_does(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from dstore.codecs.tfrecord import TFRecordReader

    for fmt, channels in (
        ("jpeg", 3),
        ("jpeg", 1),
        ("jpeg", 0),
        ("webp", 3),
        ("jxl", 3),
        ("jxl", 1),
    ):
        x = _photos(6, channels=channels)
        out = str(tmp_path / f"{fmt}{channels}.tfrecords")
        dstore.save({"train": {"x": x, "y": np.arange(6)}}, out, image_codec=fmt, quality=80)
        namespace = {"tf": tf}
        exec("\n".join(TFRecordReader(out).feature_description("train")), namespace)  # noqa: S102
        got = [{k: v.numpy() for k, v in ex.items()} for ex in namespace["dataset"]]
        with dstore.open(out) as ds:
            ours = ds["train"]["x"][:]
        tf_pixels = np.stack([g["x"] for g in got])
        # TensorFlow keeps a channel axis on greyscale; dstore gives the field's shape
        assert tf_pixels.reshape(ours.shape).shape == ours.shape
        # same libjpeg-turbo (TensorFlow's decode_jpeg, imagecodecs' jpeg8_decode), libwebp
        assert np.array_equal(tf_pixels.reshape(ours.shape), ours), fmt
        assert [int(g["y"]) for g in got] == list(range(6))
        # dstore.to_tf_dataset decodes them the same way
        tfds = dstore.to_tf_dataset(out, split="train", ordered=True)  # storage order
        via = [ex["x"] for ex in tfds.as_numpy_iterator()]
        assert np.array_equal(np.stack(via), ours), fmt
