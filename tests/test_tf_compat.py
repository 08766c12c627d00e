"""Proof that TensorFlow reads what dstore writes, and dstore reads what TensorFlow writes.

Runs with real TensorFlow (the ``tf`` extra, installed in CI by ``.ci/run``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import dstore
from dstore.testing import read_all

tf = pytest.importorskip("tensorflow")
# TensorFlow-heavy: TensorFlow writes and parses every kind (slow: not in `-m "not slow"`)
pytestmark = [pytest.mark.tf, pytest.mark.slow]


def _feature_description(path: str, split: str) -> dict:
    """Execute the lines ``dstore info`` prints, as a TF user would paste them."""
    from dstore.codecs.tfrecord import TFRecordReader

    lines = TFRecordReader(path).feature_description(split)
    namespace = {"tf": tf}
    exec("\n".join(ln for ln in lines if not ln.startswith("#")), namespace)  # noqa: S102
    return namespace["feature_description"]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_tensorflow_reads_dstore_shards(tmp_path, tiles, compression):
    x, y = tiles
    ints = np.arange(len(x), dtype=np.int16) - 30
    out = str(tmp_path / "d.tfrecords")
    dstore.save(
        {"train": {"x": x, "y": y, "k": ints}},
        out,
        compression=compression,
        shard_mb="0.1",
    )
    with dstore.open(out) as ds:
        files = [os.path.join(out, f) for f in sorted(os.listdir(out)) if f.endswith(".tfrecord")]
        assert len(files) > 1 and ds["train"].count == len(x)
    desc = _feature_description(out, "train")
    ctype = "GZIP" if compression == "gzip" else ""
    records = list(tf.data.TFRecordDataset(files, compression_type=ctype))
    assert len(records) == len(x)
    for i, rec in enumerate(records):
        ex = tf.io.parse_single_example(rec, desc)
        img = tf.io.decode_png(ex["x"], channels=3, dtype=tf.uint8).numpy()
        np.testing.assert_array_equal(img, x[i])
        np.testing.assert_array_equal(ex["y"].numpy(), y[i].astype(np.int64))
        assert int(ex["k"].numpy()) == ints[i]


@pytest.mark.parametrize(
    ("png_level", "png_decoder"),
    [("fast", "auto"), ("fastest", "auto"), ("fast", "tensorflow"), ("6", "auto")],
)
def test_to_tf_dataset_restores_dtypes_and_shapes(tmp_path, tiles, png_level, png_decoder):
    x, y = tiles
    f16 = np.linspace(-3, 3, len(x) * 4).astype(np.float16).reshape(len(x), 2, 2)
    gray = x[..., 0].copy()
    deep = x[..., :3].astype(np.uint16) * 257 + 3
    rgba = np.concatenate([x, x[..., :1]], axis=-1)
    out = str(tmp_path / "d.tfrecords")
    data = {"x": x, "y": y, "h": f16, "g": gray, "d": deep, "a": rgba}
    dstore.save({"train": data}, out, png_level=png_level)
    ds = dstore.to_tf_dataset(out, split="train", ordered=True, png_decoder=png_decoder)
    # dstore's PNG decoder (a numpy_function in the graph) only where fpng's level wrote
    own = png_decoder == "auto" and png_level in ("fast", "fastest")
    assert (b"PyFunc" in ds._as_serialized_graph().numpy()) == own
    got = {k: [] for k in data}
    for ex in ds:
        for k, values in got.items():
            values.append(ex[k].numpy())
    for k, ref in data.items():
        arr = np.stack(got[k])
        assert arr.dtype == ref.dtype, k
        np.testing.assert_array_equal(arr, ref)


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize(
    "reading",
    [{"batch_size": 5}, {"shuffle": 16, "seed": 2}, {"shuffle": 16, "batch_size": 4}],
)
def test_to_tf_dataset_png_decoders_agree_in_parallel_pipelines(
    tmp_path, tiles, compression, reading
):
    """Shards read side by side (gzip too), shuffled and batched: dstore's decoder runs in
    tf.data's parallel map on several threads at once, and every record comes once with
    the pixels of the source and of tf.io.decode_png."""
    x, _ = tiles
    data = {"x": x, "a": np.concatenate([x, x[..., :1]], -1), "d": x[..., 0] * np.uint16(257)}
    out = str(tmp_path / "d.tfrecords")
    index = np.arange(len(x), dtype=np.int64)
    dstore.save({"train": {**data, "i": index}}, out, compression=compression, shard_mb="0.05")
    assert len(list((tmp_path / "d.tfrecords").glob("train-*"))) > 2
    for decoder in ("auto", "tensorflow"):
        got: dict = {k: [] for k in (*data, "i")}
        for ex in dstore.to_tf_dataset(out, split="train", png_decoder=decoder, **reading):
            for k, values in got.items():
                value = ex[k].numpy()
                values.extend(value if "batch_size" in reading else [value])
        order = np.argsort(got["i"])
        np.testing.assert_array_equal(np.asarray(got["i"])[order], index)
        for k, ref in data.items():
            np.testing.assert_array_equal(np.stack(got[k])[order], ref, f"{decoder} {k}")


def _with_first_record(tmp_path, tiles, pngs: dict[str, bytes]) -> tuple[str, dict]:
    """A dstore directory (png_level fast) of RGB, gray and uint16 tiles whose first
    record's PNGs are replaced by ``pngs`` (field -> bytes), written back by TensorFlow."""
    x, y = tiles
    data = {"x": x[:4], "g": x[:4, ..., 0].copy(), "d": x[:4].astype(np.uint16) * 257}
    out = tmp_path / "d.tfrecords"
    dstore.save({"train": {**data, "y": y[:4]}}, str(out), png_level="fast")
    (shard,) = out.glob("train-*.tfrecord")
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    example = tf.train.Example.FromString(records[0])
    for name, png in pngs.items():
        example.features.feature[name].bytes_list.value[0] = png
    records[0] = example.SerializeToString()
    _tf_write(str(shard), records)
    _relist(out, shard)  # a forger's manifest: only the records themselves can tell
    return str(out), data


def _relist(out, shard) -> None:
    """The manifest entry of the rewritten ``shard`` made to match it (size and sha256),
    its record index dropped (read in order)."""
    import hashlib

    manifest = json.loads((out / "dstore.json").read_text())
    for info in manifest["splits"].values():
        for entry in info["shards"]:
            if entry["file"] == shard.name:
                data = shard.read_bytes()
                entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
                (out / entry.pop("index")["file"]).unlink()
    (out / "dstore.json").write_text(json.dumps(manifest))


def _png_declaring(width: int, height: int, depth: int, color: int) -> bytes:
    """A PNG whose IHDR declares this size, with a few bytes of image data."""
    import struct
    import zlib

    from dstore.images.png import _IEND, _SIGNATURE, _chunk

    header = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    idat = zlib.compress(b"\0" * 100)
    return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _IEND


def _hostile_png(case: str, tile: np.ndarray) -> bytes:
    from dstore.images import png as _png

    good = _png.encode_fast(tile)
    return {
        "32x32": lambda: _png.encode_fast(np.ascontiguousarray(tile[:32, :32])),
        "empty": lambda: b"",
        "not a PNG": lambda: b"GIF89a, not a PNG at all",
        "truncated": lambda: good[: len(good) // 2],
        # as many values as the declared (64, 64, 3), in another shape
        "128x32x3": lambda: _png.encode_fast(np.concatenate([tile, tile])[:, :32].copy()),
        "48x64x4": lambda: _png.encode_fast(np.concatenate([tile, tile[..., :1]], -1)[:48]),
        "uint16": lambda: _png.encode_fast(tile.astype(np.uint16) * 257),
        "gray": lambda: _png.encode_fast(tile[..., 0].copy()),
        # 69 bytes declaring 16384 x 16384 RGBA uint16 (2 GiB): refused from its header
        "bomb": lambda: _png_declaring(16384, 16384, 16, 6),
    }[case]()


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("32x32", r"a PNG of 32 rows of 32 pixels, not the uint8 \(64, 64, 3\)"),
        ("empty", r"0 bytes that are not a PNG, not the uint8 \(64, 64, 3\) PNG"),
        ("not a PNG", r"24 bytes that are not a PNG"),
        ("truncated", r"a PNG that does not decode \(.+\)"),
        ("128x32x3", r"a PNG of 128 rows of 32 pixels, not the uint8 \(64, 64, 3\)"),
        ("48x64x4", r"a PNG of 48 rows of 64 pixels"),
        ("uint16", r"a PNG of uint16 \(64, 64, 3\), not the uint8 \(64, 64, 3\)"),
        ("gray", r"a PNG of uint8 \(64, 64\), not the uint8 \(64, 64, 3\)"),
    ],
)
@pytest.mark.parametrize("batch_size", [None, 2])
def test_to_tf_dataset_png_decoder_refuses_a_png_unlike_its_manifest(
    tmp_path, tiles, case, reason, batch_size
):
    """A record whose PNG is not what the manifest declares fails in one line naming the
    field and what the PNG is instead, read a record or a batch at a time. Failed before:
    a PNG of as many values in another shape (128x32x3, 48x64x4) came out as scrambled
    pixels; a truncated PNG raised UnknownError with libpng's words only; every error
    carried TensorFlow's Python traceback of the numpy_function."""
    out, _ = _with_first_record(tmp_path, tiles, {"x": _hostile_png(case, tiles[0][0])})
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(dstore.to_tf_dataset(out, split="train", ordered=True, batch_size=batch_size))
    message = raised.value.message
    # the Assert's line: TensorFlow escapes the quotes of the string it prints
    record = ", record 0 of a batch" if batch_size else ""
    field = f"{out}: split \\'train\\', field \\'x\\'{record}: "
    assert re.search(rf"assertion failed: \[{re.escape(field)}{reason}[^\n]*\]\n", message), message
    assert "Traceback" not in message


def test_to_tf_dataset_png_decoder_refuses_a_declared_bomb_before_decoding(tmp_path, tiles):
    """A 69-byte PNG declaring 16384 x 16384 RGBA uint16 in a 64x64x3 field is refused
    from its header (failed before: decoded into a 2 GiB buffer, then libpng's 'Not
    enough image data' as UnknownError). In a child under a memory limit 1 GiB above
    what it holds, so a regression cannot take the test run down."""
    out, _ = _with_first_record(tmp_path, tiles, {"x": _hostile_png("bomb", tiles[0][0])})
    child = r"""
import os, resource, sys
import tensorflow as tf
import dstore
ds = dstore.to_tf_dataset(sys.argv[1], split="train", ordered=True)
in_use = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (in_use + 2**30, resource.RLIM_INFINITY))
try:
    list(ds)
except tf.errors.InvalidArgumentError as e:
    print(e.message.splitlines()[0])
"""
    stdout = _child_stdout(child, out, TF_CPP_MIN_LOG_LEVEL="2")
    assert stdout.strip().endswith(
        r"field \'x\': a PNG of 16384 rows of 16384 pixels, not the uint8 (64, 64, 3) "
        "its manifest declares]"
    ), stdout


@pytest.mark.parametrize("case", ["128x32x3", "48x64x4"])
def test_to_tf_dataset_tensorflow_png_decoder_refuses_a_png_of_another_shape(tmp_path, tiles, case):
    """tf.io.decode_png's pixels are checked for the declared height and width, not
    reshaped to them (failed before: a 128x32x3 PNG in a 64x64x3 field came out as
    scrambled pixels)."""
    out, _ = _with_first_record(tmp_path, tiles, {"x": _hostile_png(case, tiles[0][0])})
    with pytest.raises(tf.errors.InvalidArgumentError, match="not compatible with expected"):
        list(dstore.to_tf_dataset(out, split="train", ordered=True, png_decoder="tensorflow"))


def _row_filters(png: bytes) -> list[int]:
    """The filter byte of each row of a non-interlaced 8-bit RGB PNG."""
    import struct
    import zlib

    width, height = struct.unpack(">II", png[16:24])
    pos, idat = 33, b""
    while pos < len(png):  # the chunks after IHDR
        length = int.from_bytes(png[pos : pos + 4], "big")
        if png[pos + 4 : pos + 8] == b"IDAT":
            idat += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    rows = zlib.decompress(idat)
    return list(rows[:: width * 3 + 1][:height])


def _adam7_png(img: np.ndarray) -> bytes:
    """An interlaced (Adam7) 8-bit PNG of ``img``, rows unfiltered."""
    import struct
    import zlib

    from dstore.images.png import _COLOR_TYPE, _IEND, _SIGNATURE, _chunk

    h, w = img.shape[:2]
    channels = img.shape[2] if img.ndim == 3 else 1
    passes = [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4)]
    passes += [(2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]
    raw = bytearray()
    for y0, x0, dy, dx in passes:
        sub = img[y0::dy, x0::dx].reshape(len(range(y0, h, dy)), -1)
        if sub.size:
            raw += np.hstack([np.zeros((len(sub), 1), np.uint8), sub]).tobytes()
    header = struct.pack(">IIBBBBB", w, h, 8, _COLOR_TYPE[channels], 0, 0, 1)
    idat = zlib.compress(bytes(raw))
    return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _IEND


def test_to_tf_dataset_png_decoders_agree_on_pngs_other_writers_made(tmp_path, tiles):
    """Records whose PNGs dstore did not write -- Pillow's (Paeth and other filters, a
    palette image) and an interlaced one -- decode to the same pixels with dstore's
    decoder (libpng's path) as with TensorFlow's, in a directory at png_level fast."""
    import io

    from PIL import Image

    def pillow(img: Any, **kw: Any) -> bytes:
        buf = io.BytesIO()
        (img if isinstance(img, Image.Image) else Image.fromarray(img)).save(buf, "PNG", **kw)
        return buf.getvalue()

    x = tiles[0]
    mixed = pillow(x[0], optimize=True)
    assert set(_row_filters(mixed)) >= {1, 2, 4}  # Sub, Up, Paeth: libpng's path
    palette = Image.fromarray(x[1]).convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    cases = {  # a case's PNGs, and the pixels the first record then has
        "pillow": ({"x": mixed, "g": pillow(x[0][..., 0])}, {"x": x[0], "g": x[0][..., 0]}),
        "palette": ({"x": pillow(palette)}, {"x": np.asarray(palette.convert("RGB"))}),
        "interlaced": (
            {"x": _adam7_png(x[2]), "g": _adam7_png(x[2][..., 0].copy())},
            {"x": x[2], "g": x[2][..., 0]},
        ),
    }
    for case, (pngs, want) in cases.items():
        (tmp_path / case).mkdir()
        out, _ = _with_first_record(tmp_path / case, tiles, pngs)
        for decoder in ("auto", "tensorflow"):
            ds = dstore.to_tf_dataset(out, split="train", ordered=True, png_decoder=decoder)
            first = next(iter(ds))
            for name, pixels in want.items():
                np.testing.assert_array_equal(first[name].numpy(), pixels, f"{case} {name}")


def test_png_fast_path_inflates_no_more_than_the_rows(tmp_path):
    """A 64x64 RGB PNG whose IDAT inflates to 256 MiB (a deflate bomb of 256 KB under an
    honest header) decodes with at most its rows inflated: the fast path stops one byte
    past them and leaves the rest to libpng, which stops at the last row (failed before:
    ISA-L inflated all of it, 512 MiB traced). In a child under a memory limit."""
    child = r"""
import os, resource, struct, tracemalloc, zlib
import numpy as np
from dstore.images import png as _png
deflate = zlib.compressobj(9)
idat = deflate.compress(b"\x02")  # the first row's filter byte: UP
idat += b"".join(deflate.compress(bytes(1 << 20)) for _ in range(256)) + deflate.flush()
header = struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0)
png = _png._SIGNATURE + _png._chunk(b"IHDR", header) + _png._chunk(b"IDAT", idat) + _png._IEND
in_use = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (in_use + 2**30, resource.RLIM_INFINITY))
tracemalloc.start()
img = _png.decode(png)
print(len(png), img.shape, int(img.max()), tracemalloc.get_traced_memory()[1])
"""
    stdout = _child_stdout(child)
    size, *shape, top, peak = stdout.replace("(", " ").replace(")", " ").replace(",", " ").split()
    assert int(size) < 300_000 and shape == ["64", "64", "3"] and top == "0"
    assert int(peak) < 8 * 2**20, f"{int(peak) >> 20} MiB traced"


@pytest.mark.parametrize(
    "edit",
    [
        {"png_level": None},  # no png_level
        {"png_level": "6"},  # a zlib level
        {"png_level": ["fast"]},
        {"options": None},  # no options
        {"options": ["fast"]},
    ],
)
def test_to_tf_dataset_reads_with_tensorflows_png_op_unless_the_manifest_says_fast(
    tmp_path, tiles, edit
):
    """A manifest without png_level fast/fastest -- missing, a zlib level, or edited to
    another JSON type -- reads with tf.io.decode_png, the same pixels (failed before:
    options or png_level as a list raised AttributeError / TypeError)."""
    import json

    x, y = tiles
    out = tmp_path / "d.tfrecords"
    dstore.save({"train": {"x": x[:8], "y": y[:8]}}, str(out), png_level="fast")
    manifest = json.loads((out / "dstore.json").read_text())
    if "options" in edit:
        manifest["options"] = edit["options"]
    elif edit["png_level"] is None:
        del manifest["options"]["png_level"]
    else:
        manifest["options"]["png_level"] = edit["png_level"]
    (out / "dstore.json").write_text(json.dumps(manifest))
    ds = dstore.to_tf_dataset(str(out), split="train", ordered=True)
    assert b"PyFunc" not in ds._as_serialized_graph().numpy()
    np.testing.assert_array_equal(np.stack([ex["x"].numpy() for ex in ds]), x[:8])


def test_to_tf_dataset_refuses_an_unknown_png_decoder(tmp_path, tiles):
    x, y = tiles
    out = str(tmp_path / "d.tfrecords")
    dstore.save({"train": {"x": x[:2], "y": y[:2]}}, out)
    with pytest.raises(ValueError, match="png_decoder must be one of auto, tensorflow"):
        dstore.to_tf_dataset(out, png_decoder="libpng")


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_dstore_reads_tensorflow_written_files(tmp_path, tiles, compression):
    x, y = tiles
    label = y.argmax(1)
    path = str(tmp_path / "train.tfrecord")
    opts = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(path, opts) as w:
        for img, lab, vec in zip(x, label, y, strict=True):
            ex = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[tf.io.encode_png(img).numpy()])
                        ),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(lab)])),
                        "onehot": tf.train.Feature(
                            float_list=tf.train.FloatList(value=vec.tolist())
                        ),
                    }
                )
            )
            w.write(ex.SerializeToString())
    got = read_all(path)
    assert list(got) == ["train"]
    np.testing.assert_array_equal(got["train"]["image"], x)
    np.testing.assert_array_equal(got["train"]["label"], label)
    np.testing.assert_array_equal(got["train"]["onehot"], y.astype(np.float32))
    # and onwards to another format, bit-exact
    back = str(tmp_path / "tf.npz")
    dstore.convert(path, back)
    assert dstore.verify(path, back).ok


# ------------------------------------------------ the snippet `dstore info` prints, run by TensorFlow


def _child_stdout(code: str, *args: str, **env: str) -> str:
    """What ``python -c code *args`` prints, run with this checkout on its path (a risky
    load under a memory limit of its own cannot take the test run down); it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=os.getcwd(), **env),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _run_snippet(path: str, split: str) -> list[dict[str, np.ndarray]]:
    """Execute every line ``dstore info`` prints for ``split`` and read its ``dataset``."""
    from dstore.codecs.tfrecord import TFRecordReader

    namespace = {"tf": tf}
    exec("\n".join(TFRecordReader(path).feature_description(split)), namespace)  # noqa: S102
    return [{k: v.numpy() for k, v in ex.items()} for ex in namespace["dataset"]]


def _example(**features) -> bytes:
    feats = {}
    for name, value in features.items():
        if isinstance(value, bytes):
            feats[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        elif isinstance(value, list):  # several byte strings: the OD API's class text
            feats[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
        elif np.asarray(value).dtype.kind == "f":
            feats[name] = tf.train.Feature(
                float_list=tf.train.FloatList(value=np.ravel(value).tolist())
            )
        else:
            feats[name] = tf.train.Feature(
                int64_list=tf.train.Int64List(value=np.ravel(value).tolist())
            )
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def _tf_write(path: str, records: list[bytes], compression: str = "") -> None:
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=compression)) as w:
        for rec in records:
            w.write(rec)


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB", "mixed"])
def test_snippet_and_reader_on_files_tensorflow_wrote(tmp_path, tiles, capsys, compression):
    x, y = tiles
    gray = x[..., :1]  # (64, 64, 1): tf.io.encode_png needs the channel axis
    boxes = np.linspace(0, 1, len(x) * 4, dtype=np.float32).reshape(len(x), 4)
    ids = (np.arange(len(x) * 3).reshape(len(x), 3) - 50) * 1_000_000_007
    folder = tmp_path / "tf.tfrecords"  # shards TensorFlow wrote: no dstore manifest
    folder.mkdir()
    half = len(x) // 2
    for i, part in enumerate((slice(0, half), slice(half, None))):
        recs = [
            _example(
                **{
                    "image/encoded": tf.io.encode_png(g).numpy(),
                    "label": int(lab),
                    "bbox": b,
                    "ids": k,
                }
            )
            for g, lab, b, k in zip(
                gray[part], y[part].argmax(1), boxes[part], ids[part], strict=True
            )
        ]
        ctype = ("GZIP", "ZLIB")[i] if compression == "mixed" else compression
        _tf_write(str(folder / f"train-{i:05d}-of-00002.tfrecord"), recs, ctype)
    path = str(folder)

    got = read_all(path)["train"]
    np.testing.assert_array_equal(got["image/encoded"], gray[..., 0])
    np.testing.assert_array_equal(got["label"], y.argmax(1))
    np.testing.assert_array_equal(got["bbox"], boxes)
    np.testing.assert_array_equal(got["ids"], ids)

    from dstore.cli import main

    assert main(["info", path]) == 0
    shown = (
        "compression_types = ['GZIP', 'ZLIB']"
        if compression == "mixed"
        else f"compression_type={compression!r}"
    )
    assert shown in capsys.readouterr().out
    ran = _run_snippet(path, "train")
    assert len(ran) == len(x)
    for i, ex in enumerate(ran):
        assert ex["image/encoded"].shape == (64, 64, 1)  # what decode_png(channels=1) gives
        np.testing.assert_array_equal(ex["image/encoded"], gray[i])
        assert ex["label"] == y[i].argmax() and ex["label"].shape == ()
        np.testing.assert_array_equal(ex["bbox"], boxes[i])
        np.testing.assert_array_equal(ex["ids"], ids[i])

    piped = list(
        dstore.to_tf_dataset(path, split="train", ordered=True)
    )  # the files' compression too
    assert len(piped) == len(x)
    for i, ex in enumerate(piped):
        np.testing.assert_array_equal(ex["image/encoded"].numpy(), gray[i, ..., 0])
        np.testing.assert_array_equal(ex["bbox"].numpy(), boxes[i])

    back = str(tmp_path / "back.npz")
    dstore.convert(path, back)
    assert dstore.verify(path, back).ok


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_snippet_restores_every_dtype_dstore_writes(tmp_path, tiles, compression):
    x, _ = tiles
    n = len(x)
    rng = np.random.default_rng(3)
    data = {
        "rgb": x,
        "gray": x[..., 1].copy(),
        "deep": x.astype(np.uint16) * 257,
        "f64": rng.standard_normal((n, 2, 3)),
        "f16": rng.standard_normal((n, 5)).astype(np.float16),
        "f32": rng.standard_normal((n, 2, 2)).astype(np.float32),
        "big": rng.standard_normal(n).astype(">f8"),
        "bigi": np.arange(n, dtype=">i4") - 7,
        "u64": np.arange(n, dtype=np.uint64) * np.uint64(2**61),
        "flag": np.arange(n) % 3 == 0,
        "i16": (np.arange(n * 2, dtype=np.int16) - 300).reshape(n, 2),
        "c64": (rng.standard_normal(n) + 1j).astype(np.complex64),
    }
    out = str(tmp_path / "d.tfrecords")
    dstore.save({"train": data}, out, compression=compression)
    ran = _run_snippet(out, "train")
    assert len(ran) == n
    for name, ref in data.items():
        got = np.stack([ex[name] for ex in ran])
        if name == "gray":  # decode_png(channels=1) keeps the channel axis dstore drops
            assert got.shape == (*ref.shape, 1)
            got = got[..., 0]
        assert got.dtype == ref.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(got, ref, err_msg=name)


@pytest.mark.parametrize(
    "dtype",
    [
        "float16",
        "float64",
        ">f8",
        "complex64",
        "complex128",
        "longdouble",
        "clongdouble",
        "int8",
        "uint32",
    ],
)
def test_snippet_never_names_a_dtype_tensorflow_lacks(tmp_path, dtype):
    """Whatever dstore writes, the snippet names only TensorFlow dtypes that exist (no tf.float128)."""
    import re

    from dstore.codecs.tfrecord import TFRecordReader

    values = (np.arange(8) / 3).reshape(4, 2).astype(dtype)
    out = str(tmp_path / "d.tfrecords")
    try:
        dstore.save({"train": {"v": values}}, out)
    except dstore.DstoreError:  # refused on write (longdouble): nothing to describe
        assert not os.path.exists(out)
        return
    text = "\n".join(TFRecordReader(out).feature_description("train"))
    for name in re.findall(r"\btf\.([a-z]+[0-9]*)\b", text):
        assert hasattr(tf, name), (name, text)
    got = np.stack([ex["v"] for ex in _run_snippet(out, "train")])
    if got.dtype == object:  # raw bytes TensorFlow has no dtype for: read as the comment says
        assert "TensorFlow has no" in text
        got = np.stack([np.frombuffer(b, values.dtype) for b in got])
    np.testing.assert_array_equal(got, values)


def _late(i: int) -> bytes:
    return _example(label=i, **({"score": [0.5]} if i >= 3 else {}))


def _varlen(i: int) -> bytes:
    return _example(
        label=i, **{"image/object/bbox/xmin": np.full(3 if i != 5 else 0, 0.25, np.float32)}
    )


def _resized(i: int) -> bytes:
    return _example(image=tf.io.encode_png(np.zeros((16, 16 + (i == 4), 3), np.uint8)).numpy())


def _sequence(i: int) -> bytes:
    frame = tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 2.0]))
    return tf.train.SequenceExample(
        context=tf.train.Features(
            feature={"len": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
        ),
        feature_lists=tf.train.FeatureLists(
            feature_list={
                "x": tf.train.FeatureList(feature=[frame, frame]),
                "y": tf.train.FeatureList(feature=[frame]),
            }
        ),
    ).SerializeToString()


def test_sequence_example_with_uneven_steps_is_refused_by_name(tmp_path, capsys):
    """A feature list whose steps change size has no inner shape: one line naming the record."""

    def uneven(i: int) -> bytes:
        k = 3 if i == 5 else 2
        step = tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * k))
        return tf.train.SequenceExample(
            feature_lists=tf.train.FeatureLists(
                feature_list={"x": tf.train.FeatureList(feature=[step, step])}
            )
        ).SerializeToString()

    _refused(
        tmp_path,
        capsys,
        uneven,
        "record 5: feature list 'x' has steps of 2 and 3 values: a ragged field's inner shape "
        "cannot change between steps or records",
        "",
    )


def _sequence_records(n: int) -> list[bytes]:
    """SequenceExamples written by TensorFlow: context features and feature lists of
    int64 (1 per step), float (3 per step) and bytes, of 0..4 steps, one list absent."""

    def steps(make, k: int) -> tf.train.FeatureList:
        return tf.train.FeatureList(feature=[make(j) for j in range(k)])

    recs = []
    for i in range(n):
        lists = {
            "tokens": steps(
                lambda j, i=i: tf.train.Feature(int64_list=tf.train.Int64List(value=[j * i - 7])),
                i % 4,
            ),
            "frames": steps(
                lambda j, i=i: tf.train.Feature(float_list=tf.train.FloatList(value=[j, i, 0.5])),
                i % 3,
            ),
            "words": steps(
                lambda j: tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[f"w{j}é".encode()])
                ),
                i % 5,
            ),
        }
        if i == 4:
            del lists["frames"]  # absent from one record: no steps
        context = {
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            "file": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"f%d" % i])),
        }
        recs.append(
            tf.train.SequenceExample(
                context=tf.train.Features(feature=context),
                feature_lists=tf.train.FeatureLists(feature_list=lists),
            ).SerializeToString()
        )
    return recs


def test_sequence_examples_tensorflow_wrote_read_as_ragged_fields(tmp_path):
    """Feature lists are ragged fields (strings: lists of strings); the info snippet runs in
    TensorFlow with parse_single_sequence_example and gives the same values; TFRecord ->
    npz/zarr/HDF5 -> TFRecord gives SequenceExamples TensorFlow parses to the same values."""
    from dstore.model import Ragged, StringList

    n = 10
    recs = _sequence_records(n)
    path = str(tmp_path / "train.tfrecord")
    _tf_write(path, recs)
    with dstore.open(path) as ds:
        f = ds["train"]
        assert f["tokens"].kind == Ragged(np.dtype(np.int64), ())
        assert f["frames"].kind == Ragged(np.dtype(np.float32), (3,))
        assert f["words"].kind == StringList()
        for i in range(n):
            np.testing.assert_array_equal(f["tokens"][i], np.arange(i % 4) * i - 7)
            frames = [[j, i, 0.5] for j in range(i % 3 if i != 4 else 0)]
            np.testing.assert_array_equal(
                f["frames"][i], np.array(frames, np.float32).reshape(-1, 3)
            )
            assert f["words"][i] == [f"w{j}é" for j in range(i % 5)]
            assert f["file"][i] == f"f{i}" and f["label"][i] == i
        mine = {k: [f[k][i] for i in range(n)] for k in f}
    ran = _run_snippet(path, "train")
    for i, ex in enumerate(ran):
        for k, v in ex.items():
            want = mine[k][i]
            if isinstance(want, list):
                assert [b.decode() for b in v] == want, (i, k)
            elif isinstance(want, str):
                assert v.decode() == want, (i, k)
            else:
                np.testing.assert_array_equal(v, want)
                assert v.shape == want.shape, (i, k)
    namespace = {"tf": tf}
    from dstore.codecs.tfrecord import TFRecordReader

    exec("\n".join(TFRecordReader(path).feature_description("train")), namespace)  # noqa: S102
    context, sequence = namespace["feature_description"], namespace["sequence_features"]

    def parsed(rec: bytes) -> dict:
        ctx, seq = tf.io.parse_single_sequence_example(rec, context, sequence)
        return {k: np.asarray(v.numpy()).tolist() for k, v in {**ctx, **seq}.items()}

    for mid in ("m.npz", "m.zarr", "m.h5"):
        a, b = str(tmp_path / mid), str(tmp_path / (mid + ".tfrecords"))
        dstore.convert(path, a)
        dstore.convert(a, b)
        assert dstore.verify(path, b).ok
        back = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(b + "/*.tfrecord")))
        for i, rec in enumerate(back):
            assert parsed(rec.numpy()) == parsed(recs[i]), (mid, i)
            got = tf.train.SequenceExample.FromString(rec.numpy())
            want = tf.train.SequenceExample.FromString(recs[i])
            assert got.context == want.context, (mid, i)
            for k, fl in want.feature_lists.feature_list.items():
                assert got.feature_lists.feature_list[k] == fl, (mid, i, k)


@pytest.mark.parametrize("compression", ["", "ZLIB", "GZIP"])
@pytest.mark.parametrize("dest", ["npz", "h5", "zarr", "tfrecords"])
def test_late_varying_and_resized_features_read_by_inspection(tmp_path, compression, dest):
    """Written by TensorFlow: a late feature and a varying list read as Ragged (empty where
    absent), PNGs of varying size as an encoded Image; every value survives a conversion."""
    from dstore.model import Image, Ragged

    n = 8
    recs = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    **(
                        {
                            "score": tf.train.Feature(
                                float_list=tf.train.FloatList(value=[0.5] * (i - 2))
                            )
                        }
                        if i >= 3
                        else {}
                    ),
                    "xmin": tf.train.Feature(
                        float_list=tf.train.FloatList(value=[i / 10] * (i % 4))
                    ),
                    "image": tf.train.Feature(
                        bytes_list=tf.train.BytesList(
                            value=[tf.io.encode_png(np.full((16, 16 + i, 3), i, np.uint8)).numpy()]
                        )
                    ),
                }
            )
        ).SerializeToString()
        for i in range(n)
    ]
    path = str(tmp_path / "train.tfrecord")
    _tf_write(path, recs, compression)
    with dstore.open(path) as ds:
        f = ds["train"]
        assert f["score"].kind == Ragged(np.dtype(np.float32), ())
        assert f["xmin"].kind == Ragged(np.dtype(np.float32), ())
        assert f["image"].kind == Image(np.dtype(np.uint8), 3, None, None, "png")
        for i in range(n):
            np.testing.assert_array_equal(f["score"][i], np.full(max(0, i - 2), 0.5, np.float32))
            np.testing.assert_array_equal(f["xmin"][i], np.full(i % 4, i / 10, np.float32))
            assert (
                f["image"][i]
                == tf.train.Example.FromString(recs[i])
                .features.feature["image"]
                .bytes_list.value[0]
            )
    out = str(tmp_path / f"o.{dest}")
    dstore.convert(path, out)
    assert dstore.verify(path, out).ok
    with dstore.open(out) as ds:
        for i in range(n):
            np.testing.assert_array_equal(
                ds["train"]["xmin"][i], np.full(i % 4, i / 10, np.float32)
            )


def _refused(tmp_path, capsys, make, message, compression):
    from dstore.cli import main

    path = str(tmp_path / "train.tfrecord")
    _tf_write(path, [make(i) for i in range(8)], compression)
    out = str(tmp_path / "o.npz")
    for argv in (["info", path], ["convert", path, out], ["verify", path, out], ["verify", path]):
        assert main(argv) == 2, argv
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and err[0].startswith(f"SchemaError: {path}: {message}"), err
        assert not os.path.exists(out)


_CLASSES = ["cat", "dog", "bird", "café", "自転車"]


def _od_records(n: int, tiles: np.ndarray) -> tuple[list[bytes], list[int]]:
    """Object Detection API records written by TensorFlow: JPEG tiles, 0..20 boxes each."""
    rng = np.random.default_rng(3)
    recs, counts = [], []
    for i in range(n):
        k = int(rng.integers(0, 21)) if i else 0
        box = np.sort(rng.random((2, k)).astype(np.float32), axis=0)
        recs.append(
            _example(
                **{
                    "image/encoded": tf.io.encode_jpeg(tiles[i % len(tiles)]).numpy(),
                    "image/format": b"jpeg",
                    "image/filename": f"tile_{i}.jpg".encode(),
                    "image/source_id": str(i).encode(),
                    "image/object/bbox/xmin": box[0],
                    "image/object/bbox/xmax": box[1],
                    "image/object/bbox/ymin": box[0] / 2,
                    "image/object/bbox/ymax": box[1] / 2,
                    "image/object/class/label": np.arange(k, dtype=np.int64) % 5 + 1,
                    "image/object/class/text": [_CLASSES[j % 5].encode() for j in range(k)],
                }
            )
        )
        counts.append(k)
    return recs, counts


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_object_detection_records_tensorflow_wrote(tmp_path, tiles, compression):
    """OD API layout (JPEG, 0..20 boxes): read by inspection, the info snippet runs in
    TensorFlow and decodes the same values, and TFRecord -> npz/hdf5 -> TFRecord gives
    back the same feature names and values, parsed by TensorFlow with the OD API spec."""
    from dstore.model import Image, Ragged, String, StringList

    x, _ = tiles
    recs, counts = _od_records(24, x)
    path = str(tmp_path / "train.tfrecord")
    _tf_write(path, recs, compression)
    with dstore.open(path) as ds:
        f = ds["train"]
        assert f["image/encoded"].kind == Image(np.dtype(np.uint8), None, None, None, "jpeg")
        assert f["image/filename"].kind == String()
        assert f["image/object/bbox/xmin"].kind == Ragged(np.dtype(np.float32), ())
        assert [len(f["image/object/bbox/xmin"][i]) for i in range(len(recs))] == counts
        assert f["image/object/class/text"].kind == StringList()
        texts = [[_CLASSES[j % 5] for j in range(k)] for k in counts]
        assert [f["image/object/class/text"][i] for i in range(len(recs))] == texts
        assert f["image/object/class/text"][2:5] == texts[2:5]
    ran = _run_snippet(path, "train")
    od_spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/class/text": tf.io.VarLenFeature(tf.string),
    }
    for i, ex in enumerate(ran):
        want = tf.io.parse_single_example(recs[i], od_spec)
        np.testing.assert_array_equal(
            ex["image/encoded"], tf.io.decode_jpeg(want["image/encoded"]).numpy()
        )
        np.testing.assert_array_equal(
            ex["image/object/bbox/xmin"], want["image/object/bbox/xmin"].values.numpy()
        )
        assert ex["image/filename"] == want["image/filename"].numpy()
        assert (
            ex["image/object/class/text"].tolist()
            == want["image/object/class/text"].values.numpy().tolist()
        )
    for mid in ("m.npz", "m.h5", "m.zarr"):
        a, b = str(tmp_path / mid), str(tmp_path / (mid + ".tfrecords"))
        dstore.convert(path, a, keep_encoded=True)  # the JPEGs as they are, not their pixels
        dstore.convert(a, b)
        assert dstore.verify(path, b).ok
        with dstore.open(a) as ds:  # the middle format holds the lists of class names too
            assert [ds["train"]["image/object/class/text"][i] for i in range(len(recs))] == texts
        back = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(b + "/*.tfrecord")))
        for i, rec in enumerate(back):
            got = tf.train.Example.FromString(rec.numpy()).features.feature
            want = tf.train.Example.FromString(recs[i]).features.feature
            assert dict(got) == dict(want), i  # same names, kinds and values, nothing added


@pytest.mark.parametrize("varying", [False, True])
def test_label_maker_serialize_tensor_records(tmp_path, tiles, varying):
    """label-maker's writer: tf.io.serialize_tensor images and labels in bytes_lists ->
    Tensor fields (Ragged when the first axis varies); the snippet's parse_tensor agrees."""
    from dstore.model import Ragged

    x, _ = tiles
    n = 12
    imgs = [x[i][: 32 + (i if varying else 0)] for i in range(n)]
    labels = [np.eye(4, dtype=np.float32)[i % 4] for i in range(n)]
    recs = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    "image": tf.train.Feature(
                        bytes_list=tf.train.BytesList(
                            value=[tf.io.serialize_tensor(imgs[i]).numpy()]
                        )
                    ),
                    "label": tf.train.Feature(
                        bytes_list=tf.train.BytesList(
                            value=[tf.io.serialize_tensor(labels[i]).numpy()]
                        )
                    ),
                }
            )
        ).SerializeToString()
        for i in range(n)
    ]
    path = str(tmp_path / "train.tfrecords.gz")
    _tf_write(path, recs, "GZIP")
    with dstore.open(path) as ds:
        f = ds["train"]
        if varying:
            assert f["image"].kind == Ragged(np.dtype(np.uint8), (64, 3))
        else:
            assert f["image"].shape[1:] == (32, 64, 3)
        for i in range(n):
            np.testing.assert_array_equal(f["image"][i], imgs[i])
            np.testing.assert_array_equal(f["label"][i], labels[i])
    for i, ex in enumerate(_run_snippet(path, "train")):
        np.testing.assert_array_equal(ex["image"], imgs[i])
    out = str(tmp_path / "o.npz")
    dstore.convert(path, out)
    assert dstore.verify(path, out).ok


@pytest.fixture(scope="module")
def mixed(tiles):
    x, y = tiles
    n = len(x)
    return {
        "x": x,
        "y": y,
        "k": np.arange(n, dtype=">i4") * 3 - 7,  # big-endian comes back native
        "h": np.linspace(-2, 2, n * 6).astype(np.float16).reshape(n, 2, 3),
        "d": (x[:, :4, :4, 0].astype(np.uint16) * 257),
        "b": (np.arange(n) % 3 == 0),
    }


@pytest.mark.parametrize(
    "name,opts",
    [
        ("d.tfrecords", {"shard_mb": "0.1"}),
        ("d.zarr", {"chunk_mb": "0.03"}),
        ("d.h5", {"chunk_mb": "0.03"}),
        ("d.npz", {"compress": "false"}),
        ("z.npz", {}),
    ],
)
def test_to_tf_dataset_reads_every_format(tmp_path, mixed, name, opts):
    out = str(tmp_path / name)
    dstore.save({"train": mixed, "test": {k: v[:3] for k, v in mixed.items()}}, out, **opts)
    ds = dstore.to_tf_dataset(out, split="train", batch_size=16, ordered=True)
    got = {k: [] for k in mixed}
    for batch in ds:
        assert batch["x"].shape[0] <= 16
        for k, parts in got.items():
            parts.append(batch[k].numpy())
    for k, ref in mixed.items():
        arr = np.concatenate(got[k])
        assert arr.dtype == ref.dtype.newbyteorder("="), k
        np.testing.assert_array_equal(arr, ref)  # storage order without shuffle
    unordered = [int(r["k"]) for r in dstore.to_tf_dataset(out, split="train", fields=["k"])]
    assert sorted(unordered) == sorted(mixed["k"].tolist())

    # shuffled: every record once per epoch, another order each epoch, reproducible from the seed
    def epochs(seed: int) -> list[list[int]]:
        sds = dstore.to_tf_dataset(out, split="train", fields=["k"], shuffle=20, seed=seed)
        return [[int(r["k"]) for r in sds] for _ in range(2)]

    first = epochs(1)
    assert all(sorted(e) == sorted(mixed["k"].tolist()) for e in first)
    assert first[0] != first[1] and first[0] != mixed["k"].tolist()
    assert epochs(1) == first
    with pytest.raises(dstore.SchemaError) as e:
        dstore.to_tf_dataset(out, split="nope")
    assert "\n" not in str(e.value) and "splits: train, test" in str(e.value)
    with pytest.raises(dstore.SchemaError) as e:
        dstore.to_tf_dataset(out, split="train", fields=["x", "q"])
    assert "'q'" in str(e.value) and "fields: x, y, k, h, d, b" in str(e.value)


def test_to_tf_dataset_reads_ragged_and_string_fields(tmp_path):
    rng = np.random.default_rng(3)
    n = 30
    boxes = [rng.random((int(k), 4)).astype(np.float32) for k in rng.integers(0, 5, n)]
    names = [f"tile-{i:03d}-é" for i in range(n)]
    path = str(tmp_path / "kinds.npz")
    dstore.save({"train": {"boxes": boxes, "name": names, "k": np.arange(n)}}, path)
    got = 0
    for batch in dstore.to_tf_dataset(path, split="train", batch_size=8):
        assert isinstance(batch["boxes"], tf.RaggedTensor) and batch["name"].dtype == tf.string
        for j, k in enumerate(batch["k"].numpy().tolist()):
            np.testing.assert_array_equal(batch["boxes"][j].numpy(), boxes[k])
            assert batch["name"][j].numpy().decode() == names[k]
            got += 1
    assert got == n


def _kinds_data(tiles: np.ndarray, n: int = 24) -> tuple[dict, dict]:
    """Every field kind, with values that differ per record: ragged float boxes (n_i, 4),
    ragged int16 and uint64 lists, UTF-8 strings, opaque bytes, raw images of varying size
    (colour and 2-d greyscale), 16-bit PNGs passed through, and TensorFlow-encoded JPEGs."""
    from dstore.model import Image

    rng = np.random.default_rng(5)
    x = tiles
    data = {
        "boxes": [rng.random((int(k), 4)).astype(np.float32) for k in rng.integers(0, 6, n)],
        "tokens": [rng.integers(-300, 300, int(k)).astype(np.int16) for k in rng.integers(0, 9, n)],
        "ids": [np.array([2**64 - 1 - i] * (i % 3), np.uint64) for i in range(n)],
        "name": [f"tile-{i:03d}-é" for i in range(n)],
        "blob": [bytes([i, 0, 255]) * (i % 4) for i in range(n)],
        "img": [x[i % len(x)][: 20 + i, : 30 + 2 * i].copy() for i in range(n)],
        "grey": [x[i % len(x)][: 10 + i, :17, 0].copy() for i in range(n)],
        "png16": [
            tf.io.encode_png(x[i % len(x)][:12, : 8 + i].astype(np.uint16) * 257).numpy()
            for i in range(n)
        ],
        "jpg": [tf.io.encode_jpeg(x[i % len(x)][: 32 + i]).numpy() for i in range(n)],
        "k": np.arange(n, dtype=np.int64),
    }
    kinds = {
        ("train", "img"): Image(np.dtype(np.uint8), 3, None, None, "raw"),
        ("train", "grey"): Image(np.dtype(np.uint8), 0, None, 17, "raw"),
        ("train", "png16"): Image(np.dtype(np.uint16), 3, 12, None, "png"),
        ("train", "jpg"): Image(np.dtype(np.uint8), 3, None, None, "jpeg"),
    }
    return data, kinds


def _expected_record(data: dict, name: str, i: int):
    """What to_tf_dataset gives for record ``i`` of field ``name``: encoded images decoded
    (JPEG by TensorFlow's own decoder, the reference a TF user has), strings as UTF-8 bytes."""
    v = data[name][i]
    if name == "png16":
        return tf.io.decode_png(v, channels=3, dtype=tf.uint16).numpy()
    if name == "jpg":
        return tf.io.decode_jpeg(v, channels=3).numpy()
    if name == "name":
        return v.encode()
    return v


def _check_kinds(ds, data: dict, batched: bool) -> None:
    seen = []
    for item in ds:
        rows = range(len(item["k"])) if batched else [None]
        for j in rows:
            k = int(item["k"][j] if batched else item["k"])
            seen.append(k)
            for name in data:
                if name == "k":
                    continue
                value = item[name][j] if batched else item[name]
                got = value.numpy()
                want = _expected_record(data, name, k)
                if isinstance(want, bytes):
                    assert value.dtype == tf.string and got == want, (name, k)
                else:
                    assert got.dtype == want.dtype and got.shape == want.shape, (name, k)
                    np.testing.assert_array_equal(got, want)
        if batched:
            for name in ("boxes", "tokens", "ids", "img", "grey"):
                assert isinstance(item[name], tf.RaggedTensor), name
            assert item["name"].dtype == tf.string and item["blob"].dtype == tf.string
    assert seen == sorted(seen) == list(range(len(data["k"])))


@pytest.mark.parametrize(
    "name,opts",
    [
        ("d.tfrecords", {"shard_mb": "0.02"}),
        ("d.zarr", {}),
        ("d.h5", {}),
        ("d.npz", {}),
    ],
)
def test_to_tf_dataset_reads_every_kind_dstore_wrote(tmp_path, tiles, name, opts):
    """Ragged as tf.RaggedTensor once batched, strings and bytes as tf.string, every image
    decoded to pixels of its dtype (16-bit PNG, JPEG, raw images of varying size), on every
    format: record by record and in batches, in storage order."""
    data, kinds = _kinds_data(tiles[0])
    path = str(tmp_path / name)
    dstore.save({"train": data}, path, kinds=kinds, **opts)
    if name.endswith(".tfrecords"):
        assert len([f for f in os.listdir(path) if f.startswith("train-")]) > 1
    _check_kinds(dstore.to_tf_dataset(path, split="train", ordered=True), data, False)
    _check_kinds(dstore.to_tf_dataset(path, split="train", ordered=True, batch_size=5), data, True)


def test_to_tf_dataset_reads_object_detection_records_tensorflow_wrote(tmp_path, tiles):
    """OD API records (TensorFlow's JPEGs, 0..20 boxes, some with none) read natively:
    images decoded as decode_jpeg does, boxes and labels ragged, file names tf.string."""
    x, _ = tiles
    recs, counts = _od_records(30, x)
    folder = tmp_path / "od.tfrecords"
    folder.mkdir()
    _tf_write(str(folder / "train-00000-of-00002.tfrecord"), recs[:13])
    _tf_write(str(folder / "train-00001-of-00002.tfrecord"), recs[13:])
    od_spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    }
    want = [tf.io.parse_single_example(r, od_spec) for r in recs]
    ds = dstore.to_tf_dataset(str(folder), split="train", batch_size=8, ordered=True)
    i = 0
    for batch in ds:
        assert isinstance(batch["image/object/bbox/xmin"], tf.RaggedTensor)
        assert isinstance(batch["image/encoded"], tf.RaggedTensor)  # JPEGs of their own size
        for j in range(len(batch["image/filename"])):
            w = want[i]
            np.testing.assert_array_equal(
                batch["image/encoded"][j].numpy(), tf.io.decode_jpeg(w["image/encoded"]).numpy()
            )
            assert batch["image/filename"][j].numpy() == w["image/filename"].numpy()
            np.testing.assert_array_equal(
                batch["image/object/bbox/xmin"][j].numpy(),
                w["image/object/bbox/xmin"].values.numpy(),
            )
            assert batch["image/object/class/label"][j].dtype == tf.int64
            np.testing.assert_array_equal(
                batch["image/object/class/label"][j].numpy(),
                w["image/object/class/label"].values.numpy(),
            )
            assert len(batch["image/object/bbox/xmin"][j]) == counts[i]
            i += 1
    assert i == len(recs)
    unordered = dstore.to_tf_dataset(str(folder), split="train", fields=["image/source_id"])
    assert sorted(int(r["image/source_id"].numpy()) for r in unordered) == list(range(len(recs)))


@pytest.mark.parametrize("varying", [False, True])
def test_to_tf_dataset_reads_serialize_tensor_and_varying_png_records(tmp_path, tiles, varying):
    """Records TensorFlow wrote with serialize_tensor (label-maker: a Tensor, or Ragged when
    the first axis varies), PNGs of varying size, and a float list some records lack
    (an empty list there)."""
    x, _ = tiles
    n = 12
    imgs = [x[i][: 32 + (i if varying else 0)] for i in range(n)]
    labels = [np.eye(4, dtype=np.float32)[i % 4] for i in range(n)]
    pngs = [np.ascontiguousarray(x[i][: 16 + i, :20]) for i in range(n)]
    recs = []
    for i in range(n):
        feats = {
            "image": tf.io.serialize_tensor(imgs[i]).numpy(),
            "label": tf.io.serialize_tensor(labels[i]).numpy(),
            "photo": tf.io.encode_png(pngs[i]).numpy(),
            "k": np.array([i]),
        }
        if i % 3:
            feats["score"] = np.full(i % 5, i / 4, np.float32)
        recs.append(_example(**feats))
    path = str(tmp_path / "train.tfrecords.gz")
    _tf_write(path, recs, "GZIP")
    for batch_size in (None, 5):
        ds = dstore.to_tf_dataset(path, split="train", batch_size=batch_size, ordered=True)
        got = [b for b in ds]
        if batch_size:
            assert isinstance(got[0]["photo"], tf.RaggedTensor)
            assert isinstance(got[0]["image"], tf.RaggedTensor) == varying
            got = [{k: v[j] for k, v in b.items()} for b in got for j in range(len(b["k"]))]
        assert [int(r["k"]) for r in got] == list(range(n))
        for i, r in enumerate(got):
            np.testing.assert_array_equal(r["image"].numpy(), imgs[i])
            np.testing.assert_array_equal(r["label"].numpy(), labels[i])
            np.testing.assert_array_equal(r["photo"].numpy(), pngs[i])
            score = np.full(i % 5, i / 4, np.float32) if i % 3 else np.zeros(0, np.float32)
            np.testing.assert_array_equal(r["score"].numpy(), score)


def test_to_tf_dataset_refuses_an_encoding_tensorflow_cannot_decode(tmp_path):
    from dstore.model import Image

    imagecodecs = pytest.importorskip("imagecodecs")
    if not imagecodecs.TIFF.available:
        pytest.skip("imagecodecs without TIFF")
    imgs = [imagecodecs.tiff_encode(np.full((4, 5, 3), i, np.uint8)) for i in range(3)]
    path = str(tmp_path / "t.tfrecords")
    kinds = {("train", "tif"): Image(np.dtype(np.uint8), 3, None, None, "tiff")}
    dstore.save({"train": {"tif": imgs, "k": np.arange(3)}}, path, kinds=kinds)
    with pytest.raises(dstore.SchemaError) as e:
        dstore.to_tf_dataset(path, split="train")
    msg = str(e.value)
    assert "\n" not in msg and "'tif'" in msg and "tiff" in msg and "fields=" in msg
    ks = dstore.to_tf_dataset(path, split="train", fields=["k"], ordered=True)
    assert [int(r["k"]) for r in ks] == [0, 1, 2]


@pytest.mark.parametrize("encoding", ["webp", "jxl", "bmp", "gif"])
def test_to_tf_dataset_decodes_other_image_encodings(tmp_path, tiles, encoding):
    """Lossless WebP, JPEG XL, BMP and GIF images of varying size (encoded by imagecodecs)
    come out of a TFRecord as the pixels that went in."""
    from dstore.model import Image

    ic = pytest.importorskip("imagecodecs")
    x, _ = tiles
    if encoding == "gif":  # a palette format: grey pixels survive exactly as RGB
        imgs = [np.repeat(x[i][: 8 + i, : 9 + i, :1], 3, axis=2) for i in range(5)]
    else:
        imgs = [np.ascontiguousarray(x[i][: 8 + i, : 9 + i]) for i in range(5)]
    encode = {
        "webp": lambda a: ic.webp_encode(a, lossless=True),
        "jxl": lambda a: ic.jpegxl_encode(a, lossless=True),
        "bmp": ic.bmp_encode,
        "gif": lambda a: ic.gif_encode(a[..., 0]),
    }[encoding]
    blobs = [encode(a) for a in imgs]
    path = str(tmp_path / "e.tfrecords")
    kinds = {("train", "img"): Image(np.dtype(np.uint8), 3, None, None, encoding)}
    dstore.save({"train": {"img": blobs, "k": np.arange(5)}}, path, kinds=kinds)
    got = list(dstore.to_tf_dataset(path, split="train", ordered=True))
    assert [int(r["k"]) for r in got] == list(range(5))
    for r, want in zip(got, imgs, strict=True):
        np.testing.assert_array_equal(r["img"].numpy(), want)


def _partial(i: int) -> bytes:
    """Written by TensorFlow: every kind of list feature, each absent from some records."""
    feats: dict = {"label": i}
    if i % 3:
        feats["boxes"] = np.full(i % 4, i / 8, np.float32)
    if i % 2:
        feats["ids"] = np.arange(i, dtype=np.int64)
    if i % 4:
        feats["names"] = [b"n%d" % j for j in range(i % 3)]
    return _example(**feats)


@pytest.mark.parametrize("dest", ["npz", "h5", "zarr", "tfrecords"])
def test_features_in_only_some_records_read_as_empty_lists(tmp_path, dest):
    """The documented rule: a list feature a record lacks reads as an empty list, and every
    other value survives a conversion and comes back to TensorFlow the same."""
    from dstore.model import Ragged, StringList

    recs = [_partial(i) for i in range(12)]
    path = str(tmp_path / "train.tfrecord")
    _tf_write(path, recs)
    out = str(tmp_path / f"o.{dest}")
    dstore.convert(path, out)
    with dstore.open(out) as ds:
        f = ds["train"]
        assert f["boxes"].kind == Ragged(np.dtype(np.float32), ())
        assert f["ids"].kind == Ragged(np.dtype(np.int64), ())
        assert f["names"].kind == StringList()
        for i in range(12):
            np.testing.assert_array_equal(
                f["boxes"][i], np.full(i % 4 if i % 3 else 0, i / 8, np.float32)
            )
            np.testing.assert_array_equal(f["ids"][i], np.arange(i if i % 2 else 0))
            assert f["names"][i] == ([f"n{j}" for j in range(i % 3)] if i % 4 else [])
    spec = {
        "boxes": tf.io.VarLenFeature(tf.float32),
        "ids": tf.io.VarLenFeature(tf.int64),
        "names": tf.io.VarLenFeature(tf.string),
    }
    back = str(tmp_path / "back.tfrecords")
    dstore.convert(out, back)
    files = sorted(tf.io.gfile.glob(back + "/*.tfrecord"))
    for i, rec in enumerate(tf.data.TFRecordDataset(files)):
        got, want = tf.io.parse_single_example(rec, spec), tf.io.parse_single_example(recs[i], spec)
        for k in spec:  # TensorFlow reads an absent list and an empty one the same
            assert got[k].values.numpy().tolist() == want[k].values.numpy().tolist(), (i, k)


def _single_then_absent(i: int) -> bytes:
    return _example(label=i, **({"filename": f"f{i}.jpg".encode()} if i != 5 else {}))


def test_single_value_feature_absent_from_a_record_is_refused_by_name(tmp_path, capsys):
    _refused(
        tmp_path,
        capsys,
        _single_then_absent,
        "feature 'filename' has no value in record 5 (first seen in record 0)",
        "",
    )


def _image_records(encoding: str, tiles: np.ndarray, n: int = 12) -> list[bytes]:
    """One photo tile per record, encoded by TensorFlow (PNGs of varying size, so the
    field is an encoded Image, not a fixed-size tensor)."""
    recs = []
    for i in range(n):
        tile = tiles[i % len(tiles), : 40 + i, : 48 - i]
        data = tf.io.encode_jpeg(tile) if encoding == "jpeg" else tf.io.encode_png(tile)
        recs.append(_example(image=data.numpy(), label=i))
    return recs


@pytest.mark.parametrize("encoding", ["jpeg", "png"])
@pytest.mark.parametrize("dest", ["npz", "h5", "zarr"])
def test_encoded_images_decoded_or_kept_outside_tfrecord(tmp_path, tiles, encoding, dest):
    """Default: npz/zarr/HDF5 get the pixels TensorFlow decodes; keep_encoded: the bytes
    TensorFlow wrote, byte for byte, and back to TFRecord unchanged."""
    from dstore.model import Image

    recs = _image_records(encoding, tiles[0])
    blobs = [
        tf.train.Example.FromString(r).features.feature["image"].bytes_list.value[0] for r in recs
    ]
    path = str(tmp_path / "train.tfrecord")
    _tf_write(path, recs)
    decoded = str(tmp_path / f"pixels.{dest}")
    dstore.convert(path, decoded)
    with dstore.open(decoded) as ds:
        f = ds["train"]["image"]
        # decoded pixels have their channels, whatever the encoding said
        assert f.kind == Image(np.dtype(np.uint8), 3, None, None, "raw")
        for i, blob in enumerate(blobs):
            want = (  # libjpeg's standard (ISLOW) DCT; TensorFlow's default is the fast one
                tf.io.decode_jpeg(blob, channels=3, dct_method="INTEGER_ACCURATE")
                if encoding == "jpeg"
                else tf.io.decode_png(blob, channels=3)
            ).numpy()
            assert f[i].shape == want.shape and np.array_equal(f[i], want), i
    assert dstore.verify(path, decoded).ok  # the source's images decoded, then compared
    kept = str(tmp_path / f"kept.{dest}")
    dstore.convert(path, kept, keep_encoded=True)
    with dstore.open(kept) as ds:
        f = ds["train"]["image"]
        assert f.kind == Image(
            np.dtype(np.uint8), None if encoding == "jpeg" else 3, None, None, encoding
        )
        assert [f[i] for i in range(len(blobs))] == blobs
    back = str(tmp_path / "back.tfrecords")
    dstore.convert(kept, back)
    for i, rec in enumerate(
        tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(back + "/*.tfrecord")))
    ):
        got = tf.train.Example.FromString(rec.numpy()).features.feature["image"]
        assert got.bytes_list.value[0] == blobs[i], i  # passed through byte for byte


def test_encoded_images_pass_through_to_tfrecord_byte_for_byte(tmp_path, tiles):
    recs = _image_records("jpeg", tiles[0])
    path = str(tmp_path / "train.tfrecord")
    _tf_write(path, recs)
    out = str(tmp_path / "o.tfrecords")
    dstore.convert(path, out)
    back = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(out + "/*.tfrecord")))
    assert [r.numpy() for r in back] == recs  # the whole records: nothing decoded or added


@pytest.mark.parametrize("png_decoder", ["auto", "tensorflow"])
def test_to_tf_dataset_iterator_checkpoint_resumes_mid_epoch(tmp_path, tiles, png_decoder):
    """tf.train.Checkpoint of the iterator (Keras' BackupAndRestore, a training loop's
    mid-epoch save) restores to the next batch, with dstore's PNG decoder (a
    numpy_function in the map) as with TensorFlow's."""
    import tensorflow as tf

    x, y = tiles
    out = str(tmp_path / "d.tfrecords")
    dstore.save({"train": {"x": x, "y": y}}, out)
    ds = dstore.to_tf_dataset(out, ordered=True, batch_size=8, png_decoder=png_decoder)
    it = iter(ds)
    next(it)
    saved = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "ckpt" / "c"))
    rest = [b["x"].numpy() for b in it]
    again = iter(ds)
    tf.train.Checkpoint(iterator=again).restore(saved)
    resumed = [b["x"].numpy() for b in again]
    assert len(resumed) == len(rest) == -(-len(x) // 8) - 1
    for got, want in zip(resumed, rest, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.concatenate(resumed), x[8:])
