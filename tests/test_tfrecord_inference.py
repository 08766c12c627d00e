"""Foreign TFRecords are inferred from every record, never from record 0 alone.

Records are written by hand here (dstore's own Example encoder, checked against
TensorFlow in test_tf_compat.py), so hypothesis can generate hundreds of files:
a feature that is late, missing, of varying length or kind, or a PNG of varying
size, anywhere in any shard, must stop ``info``, ``convert`` and ``verify``
with one line naming the file, the feature and the record -- and a file
without such a difference must read back exactly.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dstore
from dstore.cli import main
from dstore.testing import assert_datasets_equal, read_all

imagecodecs = pytest.importorskip("imagecodecs")
import itertools

from dstore.codecs.example.wire import BYTES, FLOAT, INT64, encode_example, encode_feature
from dstore.codecs.tfrecord import io as rio

BOX = "image/object/bbox/xmin"  # Object Detection API names carry slashes


def _image(i: int, shape: tuple[int, ...] = (8, 8)) -> np.ndarray:
    return ((np.arange(int(np.prod(shape))) * (i + 3)) % 251).astype(np.uint8).reshape(shape)


def _features(i: int) -> dict[str, tuple[int, object]]:
    """Record ``i`` of a consistent file: every feature, same kinds and lengths."""
    return {
        "label": (INT64, np.array([i - 2])),
        BOX: (FLOAT, np.linspace(0, 1, 3, dtype=np.float32) + i),
        "vec": (INT64, np.arange(4) * (i + 1)),
        "img": (BYTES, imagecodecs.png_encode(_image(i))),
    }


def _encode(features: dict[str, tuple[int, object]]) -> bytes:
    return encode_example({k: encode_feature(kind, v) for k, (kind, v) in features.items()})


def _write(path: str, records: list[bytes], compression: str | None = None) -> None:
    data = b"".join(rio.frame(r) for r in records)
    if compression == "gzip":
        data = gzip.compress(data)
    elif compression == "zlib":
        data = zlib.compress(data)
    with open(path, "wb") as f:
        f.write(data)


def _shards(folder: str, records: list[bytes], cuts: list[int]) -> list[tuple[str, int, int]]:
    """Write ``records`` as shards cut at ``cuts``; (path, first record, stop) of each."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(records)}), len(records)]
    out = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        path = os.path.join(folder, f"train-{i:05d}-of-{len(bounds) - 1:05d}.tfrecord")
        _write(path, records[a:b])
        out.append((path, a, b))
    return out


def _locate(shards: list[tuple[str, int, int]], k: int) -> tuple[str, int]:
    return next((p, k - a) for p, a, b in shards if a <= k < b)


CHANGES = ["drop", "late", "length", "kind", "png size", "not png"]


@st.composite
def damaged(draw):
    n = draw(st.integers(2, 24))
    k = draw(st.integers(1, n - 1))
    change = draw(st.sampled_from(CHANGES))
    name = draw(st.sampled_from(["label", BOX, "vec"]))
    cuts = draw(st.lists(st.integers(1, n - 1), max_size=3))
    length = draw(st.integers(0, 6))
    return n, k, change, name, cuts, length


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=damaged())
def test_any_difference_in_any_record_is_read_or_refused_by_name(capsys, case):
    """A late, missing or varying-length number list reads as Ragged (empty where absent),
    PNGs of varying size as an encoded Image, a PNG among other bytes as Bytes -- every
    value back, in any shard; a feature whose kind changes stops with one line naming it."""
    n, k, change, name, cuts, length = case
    records = [_features(i) for i in range(n)]
    feats = records[k]
    if change == "drop":
        del feats[name]
    elif change == "late":  # absent from record 0 and the ones before k, present from k on
        for r in records[k:]:
            r["late"] = (FLOAT, np.array([1.5], np.float32))
        name = "late"
    elif change == "length":
        kind, values = feats[name]
        base = len(values)  # type: ignore[arg-type]
        length = length if length != base else base + 1
        feats[name] = (kind, np.arange(length).astype(np.float32 if kind == FLOAT else np.int64))
    elif change == "kind":
        kind, values = feats[name]
        other = INT64 if kind == FLOAT else FLOAT
        feats[name] = (other, np.asarray(values).astype(np.float32 if other == FLOAT else np.int64))
        expected = (
            f"feature {name!r} is a {'float_list' if kind == FLOAT else 'int64_list'} in record 0"
        )
        tail = "a feature must keep one kind"
    elif change == "png size":
        name = "img"
        feats["img"] = (BYTES, imagecodecs.png_encode(_image(k, (8, 9))))
    else:
        name = "img"
        feats["img"] = (BYTES, b"\xff\xd8\xff not a PNG")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "in.tfrecords")  # a folder of foreign shards, no manifest
        os.mkdir(src)
        shards = _shards(src, [_encode(r) for r in records], cuts)
        path, index = _locate(shards, k)
        out = os.path.join(tmp, "o.npz")
        if change != "kind":
            with dstore.open(src, format="tfrecord") as ds:
                field = ds["train"][name]
                for i, r in enumerate(records):
                    want = r.get(name, (FLOAT, np.empty(0, np.float32)))[1]
                    got = field[i]
                    if isinstance(got, bytes):
                        assert got == want, (i, change)
                    else:
                        np.testing.assert_array_equal(got.reshape(-1), np.asarray(want).reshape(-1))
            return
        for argv in (["info", src], ["convert", src, out], ["verify", src, out], ["verify", src]):
            assert main(argv) == 2
            err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
            assert len(err) == 1, err
            line = err[0]
            assert line.startswith(f"SchemaError: {path}: {expected}"), (line, path, expected)
            assert f" record {index}: {tail}" in line, line
            if path != shards[0][0]:  # the reference record is in another file: named too
                assert f"record 0 of {shards[0][0]}" in line
            assert not os.path.exists(out)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 20), cuts=st.lists(st.integers(1, 19), max_size=3), empty=st.booleans())
def test_consistent_records_read_back_exactly(n, cuts, empty):
    records = [_features(i) for i in range(n)]
    for r in records:
        if empty:  # an empty list in every record is a consistent (0,) field
            r["none"] = (FLOAT, np.empty(0, np.float32))
    with tempfile.TemporaryDirectory() as tmp:
        _shards(tmp, [_encode(r) for r in records], cuts)
        with dstore.open(tmp, format="tfrecord") as ds:
            got = {s: ds[s].read() for s in ds}
    expected = {
        "label": np.arange(n) - 2,
        BOX: np.stack([np.linspace(0, 1, 3, dtype=np.float32) + i for i in range(n)]),
        "vec": np.stack([np.arange(4) * (i + 1) for i in range(n)]),
        "img": np.stack([_image(i) for i in range(n)]),
    }
    if empty:
        expected["none"] = np.empty((n, 0), np.float32)
    assert_datasets_equal({"train": expected}, got)


def _sequence_example(
    context: dict[str, tuple[int, object]], lists: dict[str, list[bytes]]
) -> bytes:
    """A tf.train.SequenceExample: context = 1 (a Features, like an Example's), feature_lists = 2."""

    def field(tag: int, payload: bytes) -> bytes:
        out, n = bytearray([tag]), len(payload)
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out) + payload

    entries = b"".join(
        field(
            0x0A, field(0x0A, name.encode()) + field(0x12, b"".join(field(0x0A, f) for f in feats))
        )
        for name, feats in lists.items()
    )
    return _encode(context) + field(0x12, entries)


def test_sequence_example_feature_lists_are_fields(tmp_path):
    """Hand-encoded SequenceExamples (packed and unpacked steps alike): feature lists are ragged
    fields beside the context, a list absent or with no steps is an empty record."""
    from dstore.model import Ragged

    def step(k: int) -> bytes:
        return encode_feature(FLOAT, np.full(2, k, np.float32))

    recs = [
        _sequence_example(
            {"len": (INT64, np.array([i]))},
            {"frames": [step(j) for j in range(i)], **({"tokens": [step(7)]} if i != 1 else {})},
        )
        for i in range(4)
    ]
    path = str(tmp_path / "train.tfrecord")
    _write(path, recs)
    with dstore.open(path) as ds:
        f = ds["train"]
        assert f["frames"].kind == Ragged(np.dtype(np.float32), (2,))
        for i in range(4):
            np.testing.assert_array_equal(
                f["frames"][i], np.repeat(np.arange(i, dtype=np.float32), 2).reshape(i, 2)
            )
            assert f["tokens"][i].shape == ((0, 2) if i == 1 else (1, 2))
            assert f["len"][i] == i


def test_name_both_context_and_feature_list_is_refused(tmp_path, capsys):
    step = encode_feature(FLOAT, np.ones(2, np.float32))
    path = str(tmp_path / "seq.tfrecord")
    _write(path, [_sequence_example({"x": (INT64, np.array([2]))}, {"x": [step]})] * 2)
    out = str(tmp_path / "o.npz")
    for argv in (["info", path], ["convert", path, out], ["verify", path]):
        assert main(argv) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and "'x' is both a context feature and a feature list" in err[0]
    assert not os.path.exists(out)


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_compressed_files_read_and_are_named_in_the_snippet(tmp_path, compression):
    records = [_features(i) for i in range(7)]
    path = str(tmp_path / "train.tfrecord")
    _write(path, [_encode(r) for r in records], compression)
    assert rio.detect_compression(path) == compression
    got = read_all(path)["train"]
    np.testing.assert_array_equal(got["vec"], np.stack([np.arange(4) * (i + 1) for i in range(7)]))
    np.testing.assert_array_equal(got["img"], np.stack([_image(i) for i in range(7)]))
    text = "\n".join(dstore.info(path).lines())
    ctype = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}[compression]
    assert f"compression_type={ctype!r}" in text


def test_plain_record_whose_length_looks_like_a_zlib_header(tmp_path):
    """Length 0x9c78 starts the file with 78 9c, a zlib header: the length CRC decides."""
    target = 0x9C78

    def record(k: int) -> bytes:  # k one-byte varints: the length moves in steps of one
        return _encode({"b": (INT64, np.arange(1)), "p": (INT64, np.ones(k, np.int64))})

    k = next(k for k in range(target - 40, target) if len(record(k)) == target)
    rec = record(k)
    path = str(tmp_path / "x.tfrecord")
    _write(path, [rec, rec])
    with open(path, "rb") as f:
        assert f.read(2) == b"\x78\x9c"
    assert rio.detect_compression(path) is None
    got = read_all(path)["data"]
    assert got["b"].tolist() == [0, 0]
    np.testing.assert_array_equal(got["p"], np.ones((2, k), np.int64))


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_corrupt_or_cut_compressed_streams_name_the_record(tmp_path, capsys, compression):
    path = str(tmp_path / "c.tfrecord")
    _write(path, [_encode(_features(i)) for i in range(20)], compression)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    rc = main(["convert", path, str(tmp_path / "o.npz")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"CodecIOError: {path}: record "), err
    assert not (tmp_path / "o.npz").exists()


def test_empty_gzip_file_is_an_empty_split(tmp_path):
    path = str(tmp_path / "val.tfrecord.gz")
    _write(path, [], "gzip")
    with dstore.open(path) as ds:
        assert list(ds) == ["val"] and ds["val"].count == 0


# ------------------------------------------------------------------ paths and names


@pytest.fixture
def dstore_dir(tmp_path, tiles):
    x, y = tiles
    out = str(tmp_path / "d.tfrecords")
    data = {
        "train": {
            "x": x,
            "y": y,
            "h": np.linspace(-2, 2, len(x) * 3).astype(np.float16).reshape(-1, 3),
        }
    }
    dstore.save(data, out, shard_mb="0.05")
    return out, data


@pytest.mark.parametrize("name", ["d.tfrecords.gz", "d.TFRECORD.GZ", "nested/d.tfrecords.gz"])
def test_gz_destination_means_gzip(tmp_path, label_maker_npz, name):
    out = str(tmp_path / name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    assert main(["convert", label_maker_npz, out]) == 0
    shards = [f for f in os.listdir(out) if f.endswith(".tfrecord")]
    assert shards and all(rio.detect_compression(os.path.join(out, f)) == "gzip" for f in shards)
    assert dstore.verify(label_maker_npz, out).ok
    # an explicit option still wins over the name
    plain = str(tmp_path / "p.tfrecords.gz")
    assert main(["convert", label_maker_npz, plain, "-o", "compression=none"]) == 0
    assert all(
        rio.detect_compression(os.path.join(plain, f)) is None
        for f in os.listdir(plain)
        if f.endswith(".tfrecord")
    )


@pytest.mark.parametrize("name", ["out", "out.data", "2024-run"])
def test_manifest_folder_is_recognised_whatever_its_name(tmp_path, dstore_dir, capsys, name):
    src, data = dstore_dir
    renamed = str(tmp_path / name)
    os.rename(src, renamed)
    with dstore.open(renamed) as ds:
        assert repr(ds).startswith(f"<dstore.Dataset tfrecord {renamed} ")
        assert_datasets_equal(data, {s: ds[s].read() for s in ds})
    assert main(["info", renamed]) == 0
    assert capsys.readouterr().out.startswith(f"{renamed}: tfrecord,")
    back = str(tmp_path / "back.npz")
    assert main(["convert", renamed, back]) == 0
    assert main(["verify", renamed, back]) == 0
    assert main(["verify", renamed]) == 0


def test_folder_without_manifest_or_extension_is_still_unknown(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("hello")
    assert main(["info", str(tmp_path / "plain")]) == 2
    assert "no format claims" in capsys.readouterr().err


def test_one_shard_inside_its_folder_is_that_shard(dstore_dir, capsys):
    out, data = dstore_dir
    shards = sorted(f for f in os.listdir(out) if f.endswith(".tfrecord"))
    assert len(shards) > 2
    start = 0
    for name in shards:
        path = os.path.join(out, name)
        with dstore.open(path) as ds:
            n = ds["train"].count
            got = ds["train"].read()
        for field, arr in data["train"].items():
            assert got[field].dtype == arr.dtype
            np.testing.assert_array_equal(got[field], arr[start : start + n])
        start += n
        assert main(["info", path]) == 0
        text = capsys.readouterr()
        assert "incomplete" not in text.err + text.out
        assert f"split train: {n} records" in text.out
        assert main(["verify", path]) == 0
        assert "sha256 matches" in capsys.readouterr().out
    assert start == len(data["train"]["x"])


def test_one_foreign_shard_is_not_called_incomplete(tmp_path, capsys):
    folder = tmp_path / "tfds"
    folder.mkdir()
    for i in range(3):
        _write(
            str(folder / f"mnist-train.tfrecord-{i:05d}-of-00004"),
            [_encode(_features(j)) for j in range(i, i + 2)],
        )
    one = str(folder / "mnist-train.tfrecord-00001-of-00004")
    assert main(["info", one]) == 0
    assert "split train: 2 records" in capsys.readouterr().out
    # the folder (or a glob) is the set: a missing shard is still an error there
    assert main(["info", str(folder), "--format", "tfrecord"]) == 2
    assert "incomplete: 3 of 4 shards present" in capsys.readouterr().err


def test_a_foreign_file_beside_a_manifest_is_read_by_inspection(dstore_dir):
    out, _ = dstore_dir
    stray = os.path.join(out, "extra.tfrecord")
    _write(stray, [_encode(_features(i)) for i in range(3)])
    with dstore.open(stray) as ds:
        assert list(ds) == ["data"] and ds["data"].count == 3
        got = ds["data"].read()
    np.testing.assert_array_equal(got["vec"], np.stack([np.arange(4) * (i + 1) for i in range(3)]))


def test_a_single_foreign_file_is_the_split_data_and_says_so(tmp_path, capsys):
    """One TFRecord file whose name names no split is the split 'data': `dstore info`
    says what that name is, and asking for another split lists the splits there are."""
    path = str(tmp_path / "images.tfrecord")
    _write(path, [_encode(_features(i)) for i in range(5)])
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "  split data: 5 records" in out
    assert "('data' is dstore's name for data that names no split)" in out
    with dstore.open(path) as ds:
        assert list(ds) == ["data"]
        with pytest.raises(dstore.errors.SchemaError) as e:
            ds["train"]
    assert str(e.value) == (
        f"{path}: no split 'train'; splits: data ('data' is dstore's name for data that "
        "names no split)"
    )
    # a name that names its split is that split
    named = str(tmp_path / "train-00000-of-00001.tfrecord")
    _write(named, [_encode(_features(i)) for i in range(3)])
    with dstore.open(named) as ds:
        assert list(ds) == ["train"]
