"""TFRecord without TensorFlow: layout, manifest, foreign names, and every bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.testing import assert_datasets_equal, read_all

pytest.importorskip("imagecodecs")
from dstore.codecs.example.wire import BYTES, INT64, encode_example, encode_feature
from dstore.codecs.tfrecord import io as rio


def _write_records(path: str, records: list[bytes]) -> None:
    with open(path, "wb") as f:
        f.writelines(rio.frame(r) for r in records)


def _example(**features: tuple[int, object]) -> bytes:
    return encode_example({k: encode_feature(kind, v) for k, (kind, v) in features.items()})


def test_layout_and_manifest(tmp_path, label_maker_npz):
    out = str(tmp_path / "data.tfrecords")
    dstore.convert(label_maker_npz, out, options={"shard_mb": "0.1"})
    files = sorted(os.listdir(out))
    assert "dstore.json" in files
    with open(os.path.join(out, "dstore.json")) as f:
        manifest = json.load(f)
    train = manifest["splits"]["train"]["shards"]
    assert len(train) > 1, "0.1 MiB shards must split 40 tiles"
    assert [s["file"] for s in train] == [
        f"train-{i:05d}-of-{len(train):05d}.tfrecord" for i in range(len(train))
    ]
    assert sum(s["records"] for s in train) == 40
    assert manifest["fields"]["train"]["x"]["encoding"] == "png"
    assert manifest["fields"]["train"]["y"]["encoding"] == "int64"
    import hashlib

    for s in train:
        with open(os.path.join(out, s["file"]), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == s["sha256"]
    back = str(tmp_path / "back.npz")
    dstore.convert(out, back)
    assert dstore.verify(label_maker_npz, back).ok


def test_rename_and_gzip(tmp_path, tiles):
    x, y = tiles
    out = str(tmp_path / "d.tfrecords")
    dstore.save({"train": {"x": x, "y": y}}, out, rename="x=image,y=label", compression="gzip")
    shard = os.path.join(out, "train-00000-of-00001.tfrecord")
    assert rio.is_gzip(shard)
    with rio.RecordFile(shard) as rf:
        feats = dstore.codecs.example.wire.decode_example(rf.next_record())
    assert set(feats) == {"image", "label"}
    assert_datasets_equal({"train": {"x": x, "y": y}}, read_all(out))


@pytest.mark.parametrize("level", ["fast", "6", "0"])
def test_png_levels_uint16_and_gray(tmp_path, level):
    rng = np.random.default_rng(0)
    gray = (np.arange(20 * 16 * 16).reshape(20, 16, 16) % 251).astype(np.uint8)
    deep = rng.integers(0, 65535, (20, 12, 10, 3), dtype=np.uint16)
    one = gray[..., None].copy()
    out = str(tmp_path / "d.tfrecords")
    dstore.save({"g": gray, "d": deep, "o": one}, out, png_level=level)
    with open(os.path.join(out, "dstore.json")) as f:
        fields = json.load(f)["fields"]["data"]
    assert {fields[k]["encoding"] for k in "gdo"} == {"png"}
    assert_datasets_equal({"data": {"g": gray, "d": deep, "o": one}}, read_all(out))


def test_foreign_single_file_and_tfds_names(tmp_path):
    recs = [_example(label=(INT64, np.array([i])), vec=(INT64, np.arange(3) + i)) for i in range(5)]
    single = str(tmp_path / "x.tfrecord")
    _write_records(single, recs)
    got = read_all(single)["data"]
    np.testing.assert_array_equal(got["label"], np.arange(5))
    assert got["vec"].shape == (5, 3)

    folder = tmp_path / "tfds"
    folder.mkdir()
    for split, n in (("train", 2), ("test", 1)):
        for i in range(n):
            _write_records(str(folder / f"mnist-{split}.tfrecord-{i:05d}-of-{n:05d}"), recs)
    with dstore.open(str(folder), format="tfrecord") as ds:
        assert set(ds) == {"train", "test"}
        assert ds["train"].count == 10 and ds["test"].count == 5
    with dstore.open(str(folder / "mnist-train.tfrecord-*"), format="tfrecord") as ds:
        assert ds["train"].count == 10


def test_writing_needs_no_tensorflow(tmp_path, label_maker_npz):
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "import dstore\n"
        f"dstore.convert({label_maker_npz!r}, {str(tmp_path / 'o.tfrecords')!r})\n"
        f"r = dstore.verify({label_maker_npz!r}, {str(tmp_path / 'o.tfrecords')!r})\n"
        "assert r.ok\n"
        "assert 'tensorflow' not in sys.modules or sys.modules['tensorflow'] is None\n"
        "print('ok')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


# ------------------------------------------------------------------ bad inputs


def _fails(capsys, argv, contains):
    rc = main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc != 0
    assert len(err) == 1 and contains in err[0], err
    return err[0]


@pytest.fixture
def good_shard(tmp_path, tiles):
    x, y = tiles
    out = str(tmp_path / "good.tfrecords")
    dstore.save({"train": {"x": x[:5], "y": y[:5]}}, out)
    return os.path.join(out, "train-00000-of-00001.tfrecord")


def test_flipped_byte_is_a_crc_error(tmp_path, capsys, good_shard):
    with open(good_shard, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0x01
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    line = _fails(capsys, ["convert", str(bad), str(tmp_path / "o.npz")], "CRC")
    assert "bad.tfrecord: record" in line and "at byte" in line
    assert not (tmp_path / "o.npz").exists()


def test_truncated_last_record(tmp_path, capsys, good_shard):
    with open(good_shard, "rb") as f:
        data = f.read()
    bad = tmp_path / "cut.tfrecord"
    bad.write_bytes(data[:-100])
    line = _fails(capsys, ["convert", str(bad), str(tmp_path / "o.npz")], "truncated")
    assert "record 4" in line
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("dst", ["o.npz", "o.tfrecords", "o.h5", "o.zarr"])
def test_zero_length_file_is_an_empty_split(tmp_path, capsys, dst):
    empty = tmp_path / "test.tfrecord"
    empty.write_bytes(b"")
    assert main(["info", str(empty)]) == 0
    assert "split test: 0 records" in capsys.readouterr().out
    out = str(tmp_path / dst)
    assert main(["convert", str(empty), out]) == 0
    with dstore.open(out) as ds:
        assert list(ds) == ["test"] and ds["test"].count == 0 and list(ds["test"]) == []
    assert dstore.verify(str(empty), out).ok


def test_not_a_tfrecord(tmp_path, capsys):
    bad = tmp_path / "text.tfrecord"
    bad.write_bytes(b"hello, this is plain text and not a TFRecord at all\n" * 3)
    _fails(capsys, ["info", str(bad)], "not a TFRecord")


def test_example_missing_a_field(tmp_path, capsys):
    """A number list some records lack reads as Ragged, empty there; a byte string
    some records lack has no empty value: refused naming the record."""
    recs = [_example(a=(INT64, np.array([1])), b=(INT64, np.array([2])))] * 3
    recs.append(_example(a=(INT64, np.array([1]))))
    src = str(tmp_path / "m.tfrecord")
    _write_records(src, recs)
    with dstore.open(src) as ds:
        assert [ds["data"]["b"][i].tolist() for i in range(4)] == [[2], [2], [2], []]
    recs = [_example(a=(INT64, np.array([1])), s=(BYTES, b"x"))] * 3
    recs.append(_example(a=(INT64, np.array([1]))))
    bad = str(tmp_path / "s.tfrecord")
    _write_records(bad, recs)
    line = _fails(
        capsys, ["convert", bad, str(tmp_path / "o.npz")], "feature 's' has no value in record 3"
    )
    assert line.startswith(f"SchemaError: {bad}:")
    assert not (tmp_path / "o.npz").exists()


def test_images_of_varying_size_read_as_encoded_png(tmp_path):
    import imagecodecs

    imgs = [np.zeros((16, 16, 3), np.uint8), np.ones((16, 20, 3), np.uint8)]
    pngs = [imagecodecs.png_encode(im) for im in imgs]
    src = str(tmp_path / "v.tfrecord")
    _write_records(src, [_example(image=(BYTES, p)) for p in pngs])
    out = str(tmp_path / "o.npz")
    assert main(["convert", src, out]) == 0  # npz gets the pixels (the default)
    assert dstore.verify(src, out).ok
    with dstore.open(out) as ds:
        for i, im in enumerate(imgs):
            np.testing.assert_array_equal(ds["data"]["image"][i], im)
    kept = str(tmp_path / "k.npz")
    assert main(["convert", src, kept, "--keep-encoded"]) == 0  # or the PNGs as they came
    assert dstore.verify(src, kept).ok
    with dstore.open(kept) as ds:
        assert [ds["data"]["image"][i] for i in range(2)] == pngs


def test_float_images_refused_with_hint(tmp_path, capsys):
    src = str(tmp_path / "f.npz")
    np.savez(src, x=np.random.default_rng(0).random((4, 16, 16, 3)).astype(np.float32))
    out = str(tmp_path / "o.tfrecords")
    line = _fails(capsys, ["convert", src, out, "-o", "images=x"], "uint8 or uint16")
    assert "never rescales" in line
    assert not os.path.exists(out)
    # Without asking for PNG, float images are stored exactly as float_list.
    assert main(["convert", src, out]) == 0
    assert dstore.verify(src, out).ok


@pytest.mark.parametrize("kind", ["rgb", "gray", "gray1", "rgba", "uint16"])
def test_fast_png_is_standard_png(tiles, kind):
    """What the fast encoder writes, libpng decodes; dstore's fast decoder agrees with libpng."""
    import imagecodecs

    from dstore.images import png as _png

    x = tiles[0][0]
    img = {
        "rgb": x,
        "gray": x[..., 0],
        "gray1": x[..., :1],
        "rgba": np.concatenate([x, x[..., :1]], -1),
        "uint16": x.astype(np.uint16) * 257 + 1,
    }[kind]
    for level in ("fast", "6"):
        data = _png.png_encoder(level)(img)
        ref = imagecodecs.png_decode(data)
        np.testing.assert_array_equal(ref.reshape(img.shape), img)
        got = _png.decode(data)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_verify_path_alone(tmp_path, capsys, label_maker_npz):
    out = str(tmp_path / "d.tfrecords")
    dstore.convert(label_maker_npz, out, options={"shard_mb": "0.1"})
    assert main(["verify", out]) == 0
    text = capsys.readouterr().out
    assert "sha256 matches" in text and "40 of 40 records decoded" in text
    shard = sorted(f for f in os.listdir(out) if f.startswith("train") and f.endswith(".tfrecord"))[
        1
    ]
    with open(os.path.join(out, shard), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0x10]))
    assert main(["verify", out]) == 1
    text = capsys.readouterr().out
    assert f"MISMATCH  */manifest: {shard}: size or sha256 differs" in text
    # byte 100 is in the shard's first record: the first record of the split it holds
    first = int(
        re.search(r"MISMATCH  train/\*: record (\d+) fails \((\d+) of 40 records", text).group(1)
    )
    assert 0 < first < 40 and f"{first} of 40 records decoded before it" in text and "CRC" in text


@pytest.mark.parametrize("workers", ["1", "3"])
def test_progress_advances_per_record_chunk(tmp_path, tiles, workers):
    """Issue #11: a single-shard split must not sit at 0% and jump to 100%."""
    x, y = tiles
    src = str(tmp_path / "one-shard.npz")
    np.savez(src, x_train=np.tile(x, (3, 1, 1, 1)), y_train=np.tile(y, (3, 1)))  # 180 records
    seen: list[tuple[int, int]] = []
    dstore.convert(
        src,
        tmp_path / "out.tfrecords",
        options={"workers": workers},
        progress=lambda n, total: seen.append((n, total)),
    )
    manifest = json.loads((tmp_path / "out.tfrecords" / "dstore.json").read_text())
    assert len(manifest["splits"]["train"]["shards"]) == 1
    assert {t for _, t in seen} == {180} and sum(n for n, _ in seen) == 180
    assert len(seen) >= 180 // 16 and max(n for n, _ in seen) <= 16  # one step per encoded chunk


def test_shard_writer_refuses_other_compressor_versions(tmp_path, label_maker_npz):
    """A Dask worker whose libdeflate/zlib differ from the planning process's would write
    other bytes: it refuses the shard, naming it, instead."""
    from dstore.codecs.tfrecord import TFRecordCodec

    with dstore.api.open_reader(label_maker_npz) as reader:
        codec = TFRecordCodec()
        plan = codec.plan_shards(
            reader.schema, lambda split, n: next(reader.iter_batches(split, stop=n))
        )
        writer = codec.shard_writer(reader.schema, plan)
        assert writer.fingerprint()["png"].startswith("fpng ")
        writer.libraries = {
            **writer.libraries,
            "png": "fpng 0.0 for 8-bit RGB/RGBA, libdeflate 0.0 level 1 for other images",
        }  # as planned elsewhere
        shard = plan[0]
        batches = reader.iter_batches(shard.split, start=shard.start, stop=shard.stop)
        with pytest.raises(
            dstore.CodecIOError, match=f"shard {shard.file}: this process encodes with"
        ):
            writer.write_shard(str(tmp_path), shard, batches)
    assert os.listdir(tmp_path) == ["data.npz"]


def test_shard_sha256_is_hashed_off_the_writing_thread(tmp_path, label_maker_npz, monkeypatch):
    """Issue #24: the shard's sha256 runs on its own thread, overlapping the writes and the
    encoders, and still equals the sha256 of the bytes on disk. (Before, the writing
    thread hashed every group itself.)"""
    import hashlib
    import threading
    import types

    from dstore.sharding import hashing

    threads: set[str] = set()

    class RecordingSha:
        def __init__(self, *args):
            self.h = hashlib.sha256(*args)

        def update(self, data):
            threads.add(threading.current_thread().name)
            self.h.update(data)

        def hexdigest(self):
            return self.h.hexdigest()

    monkeypatch.setattr(hashing, "hashlib", types.SimpleNamespace(sha256=RecordingSha))
    dst = str(tmp_path / "out.tfrecords")
    dstore.convert(label_maker_npz, dst, options={"shard_mb": "0.05"})
    monkeypatch.undo()
    assert threads and all(t.startswith("dstore-sha256") for t in threads), threads
    from dstore.sharding.manifest import load_manifest

    def hashed_files(node):  # every {"file", "sha256"} entry: shards and their indexes
        if isinstance(node, dict):
            if "file" in node and "sha256" in node:
                yield node
            for v in node.values():
                yield from hashed_files(v)
        elif isinstance(node, list):
            for v in node:
                yield from hashed_files(v)

    entries = list(hashed_files(load_manifest(os.path.join(dst, "dstore.json"))))
    assert len([e for e in entries if e["file"].endswith(".tfrecord")]) > 3
    for e in entries:
        with open(os.path.join(dst, e["file"]), "rb") as f:
            data = f.read()
        assert e["sha256"] == hashlib.sha256(data).hexdigest()
        assert e["bytes"] == len(data)
