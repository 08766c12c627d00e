"""Names from data never become paths outside the destination, and survive round trips.

Hostile split and field names (``..``, a leading ``/``, ``\\``, NUL, 300
characters, combining marks, emoji, names that differ only by case or that
look like another name's escape) go through ``dstore.save``/``dstore.convert``
in all four formats; the folders around the output are snapshotted before and
after, and ``dstore.open`` must give back exactly the original names and values.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from typing import Self

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dstore
from dstore.errors import DstoreError, SchemaError, UnsafePathError
from dstore.model.keys import split_key
from dstore.model.names import MAX_BYTES, escape, is_plain, safe_join, split_parts, unescape
from dstore.sharding import open_for_write as _open_for_write
from dstore.testing import usable_formats

EXT = usable_formats()  # name -> extension, from the registry
FORMATS = list(EXT)

#: names that broke something once, or could: paths, separators, escapes, length, Unicode
HOSTILE = [
    "..",
    ".",
    "../x",
    "../../evil",
    "/abs",
    "/",
    "//",
    "a/b",
    "a/b/c",
    "/a/b",
    "a/",
    "a\\b",
    "\\",
    "..\\x",
    "x\x00y",
    "\x00",
    "",
    " ",
    "%",
    "%2F",
    "a%2Fb",
    "~",
    "a~0123456789abcdef",
    "zarr.json",
    "dstore.json",
    ".hidden",
    ".zarray",
    "x" * 300,
    "é" * 150,
    "e\u0301",
    "\u0301",
    "🙂" * 60,
    "🙂",
    "X",
    "x",
    "train",
    "x_train",
    "image/object/bbox/xmin",
    "c",
    "\n",
    "a\tb",
    "CON",
    "nul",
]
NAMES = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=10),
    st.text(alphabet=st.sampled_from("./\\%~\x00aAé🙂\u0301"), max_size=8),
    st.text(alphabet=st.sampled_from("xé/"), min_size=190, max_size=320),
)


def _tree(root: str, skip: set[str]) -> set[tuple[str, int]]:
    """Every path under ``root`` (with its size for files), except those in ``skip`` and what they hold."""
    found = set()
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in skip]
        for f in files:
            p = os.path.join(dirpath, f)
            if p not in skip:
                found.add((os.path.relpath(p, root), os.path.getsize(p)))
        for d in dirs:
            found.add((os.path.relpath(os.path.join(dirpath, d), root) + "/", 0))
    return found


class Outside:
    """Snapshots of everything a stray name could reach: the top folder, the cwd and ``/``."""

    def __init__(self, top: str, dsts: list[str]) -> None:
        self.top, self.dsts = top, dsts

    def _state(self) -> tuple[object, ...]:
        here = sorted(
            n for n in os.listdir(os.getcwd()) if n != ".hypothesis"
        )  # its example database
        return (_tree(self.top, set(self.dsts)), here, sorted(os.listdir("/")))

    def __enter__(self) -> Self:
        self.before = self._state()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert self._state() == self.before, "something was created outside the destination"


def _dataset(draw: st.DrawFn) -> dict[str, dict[str, np.ndarray]]:
    splits = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    data = {}
    for i, split in enumerate(splits):
        fields = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
        n = draw(st.integers(0, 4))
        data[split] = {
            f: (np.arange(n * 2, dtype=np.int16).reshape(n, 2) * (j + 1) + i)
            for j, f in enumerate(fields)
        }
    return data


datasets = st.composite(_dataset)


def _nested_conflict(data: dict[str, dict[str, np.ndarray]]) -> bool:
    """A field of one split that is another split's group (``train``/``x`` beside ``train/x``)."""
    groups = {tuple(split_parts(s)[:n]) for s in data for n in range(1, len(split_parts(s)) + 1)}
    return any((*split_parts(s), escape(f)) in groups for s, fields in data.items() for f in fields)


def _case_conflict(data: dict[str, dict[str, np.ndarray]], fmt: str) -> bool:
    """Names a format would store as file names of one folder (a sharded format's split
    names) or as WebDataset member suffixes (which its library lowercases), equal where
    case does not count: refused by name (tests/test_hostile_decisions.py)."""
    from dstore.model.names import escape_dotless as member_part
    from dstore.model.names import fold
    from dstore.registry import get_codec_class

    if not get_codec_class(fmt).sharded:
        return False
    splits = [fold(escape(s)) for s, fields in data.items() if len(next(iter(fields.values())))]
    if len(set(splits)) < len(splits):
        return True
    if fmt == "webdataset":
        return any(len({fold(member_part(f)) for f in fs}) < len(fs) for fs in data.values())
    return False


def _read_back(path: str) -> dict[str, dict[str, np.ndarray]]:
    with dstore.open(path) as ds:
        return {s: {f: ds[s][f][:] for f in ds[s]} for s in ds}


def _assert_same(
    want: dict[str, dict[str, np.ndarray]], got: dict[str, dict[str, np.ndarray]]
) -> None:
    assert list(got) == list(want)
    for split, fields in want.items():
        assert list(got[split]) == list(fields), split
        for name, arr in fields.items():
            assert got[split][name].dtype == arr.dtype and got[split][name].shape == arr.shape
            np.testing.assert_array_equal(got[split][name], arr)


# ------------------------------------------------------------------------ the escape


@given(st.text(max_size=40) | st.sampled_from(HOSTILE))
@settings(max_examples=300, deadline=None)
def test_escape_is_one_safe_component_and_reverses(name):
    e = escape(name)
    assert e and e not in (".", "..") and not e.startswith(".")
    assert not any(c in e for c in "/\\\x00") and all(ord(c) >= 0x20 for c in e)
    assert len(e.encode()) <= MAX_BYTES and e != "zarr.json"
    if "~" not in e:
        assert unescape(e) == name
    assert escape(e) == e or not is_plain(name)  # plain names are fixed points


@given(
    st.text(max_size=30) | st.sampled_from(HOSTILE), st.text(max_size=30) | st.sampled_from(HOSTILE)
)
@settings(max_examples=300, deadline=None)
def test_escape_never_maps_two_names_to_one(a, b):
    if a != b:
        assert escape(a) != escape(b)


def test_cut_names_do_not_collide_with_their_own_shape():
    long = "x" * 300
    cut = escape(long)
    assert cut.endswith(cut[-16:]) and "~" in cut and len(cut.encode()) <= MAX_BYTES
    assert escape(cut) != cut  # the cut name itself, as a name, escapes its "~"
    assert escape(long + "y") != cut and escape("é" * 300) != escape("é" * 301)


def test_ordinary_names_are_stored_as_they_are():
    for name in (
        "train",
        "test",
        "x",
        "y",
        "x_train",
        "image",
        "label",
        "a b",
        "é",
        "v1.2",
        "data-1",
    ):
        assert escape(name) == name
    assert split_parts("a/b/c") == ["a", "b", "c"]
    assert split_parts("../evil") == ["%2E.%2Fevil"] and split_parts("/abs") == ["%2Fabs"]


# -------------------------------------------------------------- all four formats


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=datasets())
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_hostile_names_saved_stay_inside_and_come_back(fmt, data):
    with tempfile.TemporaryDirectory() as top:
        work = os.path.join(top, "a", "b", "c")
        os.makedirs(work)
        dst = os.path.join(work, "out" + EXT[fmt])
        with Outside(top, [dst]):
            if fmt in ("zarr", "hdf5") and _nested_conflict(data):
                with pytest.raises(SchemaError, match="would both be stored at"):
                    dstore.save(data, dst)
                assert not os.path.lexists(dst)
                return
            if _case_conflict(data, fmt):
                with pytest.raises(SchemaError, match="case does not count"):
                    dstore.save(data, dst)
                assert not os.path.lexists(dst)
                return
            dstore.save(data, dst)
        assert os.listdir(work) == [os.path.basename(dst)]
        _assert_same(data, _read_back(dst))


@given(data=datasets())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_hostile_names_convert_through_every_format(data):
    """npz -> zarr -> hdf5 -> tfrecord -> npz: each step reads escaped names back and writes them again."""
    chain = FORMATS[1:] + FORMATS[:1] if not _nested_conflict(data) else ["tfrecord", "npz"]
    chain = [fmt for fmt in chain if not _case_conflict(data, fmt)]
    with tempfile.TemporaryDirectory() as top:
        work = os.path.join(top, "w")
        os.makedirs(work)
        src = os.path.join(work, "src.npz")
        dstore.save(data, src)
        dsts = [os.path.join(work, f"{i}{EXT[fmt]}") for i, fmt in enumerate(chain)]
        with Outside(top, [src, *dsts]):
            for dst in dsts:
                dstore.convert(src, dst)
                _assert_same(data, _read_back(dst))
                src = dst
        assert sorted(os.listdir(work)) == sorted(
            os.path.basename(p) for p in [os.path.join(work, "src.npz"), *dsts]
        )


# --------------------------------------------------------------- the reproductions


#: the CLI in a subprocess runs this checkout's dstore
_ENV = {
    **os.environ,
    "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(dstore.__file__))),
}


def _npz(path: str, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", ["../evil/x", "/abs/x", "../../x", "..\\evil/x", "/x"])
def test_npz_keys_that_look_like_paths(tmp_path, fmt, key):
    src = _npz(str(tmp_path / "k.npz"), **{key: np.arange(3)})
    work = tmp_path / "w"
    work.mkdir()
    dst = str(work / ("o" + EXT[fmt]))
    with Outside(str(tmp_path), [dst]):
        dstore.convert(src, dst)
    assert os.listdir(work) == [os.path.basename(dst)]
    split, field = split_key(key)
    _assert_same({split: {field: np.arange(3)}}, _read_back(dst))
    if fmt == "tfrecord":
        manifest = json.loads((work / "o.tfrecords" / "dstore.json").read_text())
        entries = manifest["splits"][split]["shards"]
        files = [s["file"] for s in entries]
        assert all("/" not in f and not f.startswith(".") for f in files)
        # record indexes in the one dot-folder dstore names, never where a glob finds them
        assert [s["index"]["file"] for s in entries] == [f".dstore-index/{f}.idx" for f in files]
        assert sorted(os.listdir(dst)) == sorted(
            [*files, ".dstore-index", "croissant.json", "dstore.json"]
        )
        assert sorted(os.listdir(os.path.join(dst, ".dstore-index"))) == [f + ".idx" for f in files]
    if fmt == "npz":  # what unzip would write stays inside its folder too
        members = zipfile.ZipFile(dst).namelist()
        assert all(not m.startswith("/") and ".." not in m.split("/") for m in members)


def test_cli_convert_of_the_evil_key(tmp_path):
    src = _npz(str(tmp_path / "k.npz"), **{"../evil/x": np.arange(3)})
    work = tmp_path / "w"
    work.mkdir()
    with Outside(str(tmp_path), [str(work / "o.tfrecords")]):
        done = subprocess.run(
            [sys.executable, "-m", "dstore.cli", "convert", src, "o.tfrecords"],
            cwd=work,
            capture_output=True,
            text=True,
            env=_ENV,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert os.listdir(work) == ["o.tfrecords"]
    assert sorted(os.listdir(work / "o.tfrecords")) == [
        "%2E.%2Fevil-00000-of-00001.tfrecord",
        ".dstore-index",
        "croissant.json",
        "dstore.json",
    ]
    assert os.listdir(work / "o.tfrecords" / ".dstore-index") == [
        "%2E.%2Fevil-00000-of-00001.tfrecord.idx"
    ]
    _assert_same({"../evil": {"x": np.arange(3)}}, _read_back(str(work / "o.tfrecords")))


@pytest.mark.parametrize("fmt", FORMATS)
def test_split_prefix_of_another_split_works(tmp_path, fmt):
    """npz keys ``train/x/y`` beside ``train/z``: splits ``train/x`` and ``train``."""
    src = _npz(str(tmp_path / "p.npz"), **{"train/x/y": np.arange(3), "train/z": np.arange(4)})
    dst = str(tmp_path / ("o" + EXT[fmt]))
    dstore.convert(src, dst)
    _assert_same({"train/x": {"y": np.arange(3)}, "train": {"z": np.arange(4)}}, _read_back(dst))


def _nested_h5(path: str) -> str:
    with h5py.File(path, "w") as f:
        f["a/b/z"] = np.arange(5)
        f["a/b/c/x"] = np.arange(6).reshape(3, 2)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_foreign_nested_hdf5_converts_everywhere(tmp_path, fmt):
    """``/a/b/z`` beside ``/a/b/c/x`` (h5py): read as before, written by every format."""
    src = _nested_h5(str(tmp_path / "n.h5"))
    want = {
        "a/b/c": {"x": np.arange(6).reshape(3, 2)},
        "a/b": {"z": np.arange(5)},
    }  # h5py's name order
    _assert_same(want, _read_back(src))
    dst = str(tmp_path / ("o" + EXT[fmt]))
    dstore.convert(src, dst)
    _assert_same(want, _read_back(dst))
    if fmt == "hdf5":  # the group tree h5py users see is the same
        with h5py.File(dst) as f:
            assert "a/b/z" in f and "a/b/c/x" in f and isinstance(f["a/b/c"], h5py.Group)
    if fmt == "zarr":
        g = zarr.open_group(dst, mode="r")
        np.testing.assert_array_equal(g["a/b/c/x"][:], np.arange(6).reshape(3, 2))


def test_foreign_nested_zarr_reads_as_before(tmp_path):
    """A zarr tree written by zarr itself: groups are splits, arrays fields, ``%`` in a name kept as is."""
    g = zarr.open_group(str(tmp_path / "f.zarr"), mode="w")
    g.create_array("a/b/z", data=np.arange(5))
    g.create_array("a/b/c/x", data=np.arange(6).reshape(3, 2))
    g.create_array("a/b/c/p%2Fq", data=np.arange(3))
    want = {
        "a/b/c": {"p%2Fq": np.arange(3), "x": np.arange(6).reshape(3, 2)},
        "a/b": {"z": np.arange(5)},
    }
    _assert_same(want, _read_back(str(tmp_path / "f.zarr")))
    dstore.convert(str(tmp_path / "f.zarr"), str(tmp_path / "o.zarr"))
    _assert_same(want, _read_back(str(tmp_path / "o.zarr")))


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_field_that_is_another_splits_group_is_one_clear_error(tmp_path, fmt):
    src = _npz(str(tmp_path / "c.npz"), **{"train/x": np.arange(3), "train/x/y": np.arange(3)})
    dst = tmp_path / ("o" + EXT[fmt])
    with pytest.raises(SchemaError) as err:
        dstore.convert(src, str(dst))
    assert "'x' of split 'train'" in str(err.value) and "split 'train/x'" in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["c.npz"]
    done = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", src, str(dst)],
        capture_output=True,
        text=True,
        env=_ENV,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "would both be stored" in done.stderr


@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "npz"])
def test_field_names_with_slashes_read_back(tmp_path, fmt):
    data = {
        "data": {"image/object/bbox/xmin": np.arange(4.0), "a/b": np.arange(4)},
        "s/t": {"/": np.ones(2)},
    }
    dst = str(tmp_path / ("o" + EXT[fmt]))
    dstore.save(data, dst)
    _assert_same(data, _read_back(dst))


def test_object_detection_tfrecord_to_hdf5_and_back(tmp_path, tiles):
    """TensorFlow writes OD-API style features; they survive h5 and come back under the same keys."""
    tf = pytest.importorskip("tensorflow")
    x = tiles[0][:6]
    src = str(tmp_path / "od.tfrecord")
    keys = [
        "image/encoded",
        "image/height",
        "image/object/bbox/xmin",
        "image/object/bbox/ymax",
        "image/object/class/label",
    ]
    with tf.io.TFRecordWriter(src) as w:
        for i, img in enumerate(x):
            feats = {
                "image/encoded": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[tf.io.encode_png(img).numpy()])
                ),
                "image/height": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[img.shape[0]])
                ),
                "image/object/bbox/xmin": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[0.1 * i, 0.5])
                ),
                "image/object/bbox/ymax": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[0.9, 0.25 * i])
                ),
                "image/object/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[i, i + 1])
                ),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    h5 = str(tmp_path / "o.h5")
    dstore.convert(src, h5)
    with h5py.File(h5) as f:  # one dataset per feature, not a tree of half-names
        assert sorted(f["data"]) == sorted(escape(k) for k in keys)
    got = _read_back(h5)["data"]
    assert sorted(got) == sorted(keys)
    np.testing.assert_array_equal(got["image/encoded"], x)
    back = str(tmp_path / "back.tfrecords")
    dstore.convert(h5, back)
    shards = [os.path.join(back, f) for f in os.listdir(back) if f.endswith(".tfrecord")]
    for i, rec in enumerate(tf.data.TFRecordDataset(shards)):
        ex = tf.train.Example.FromString(rec.numpy())
        assert sorted(ex.features.feature) == sorted(keys)
        np.testing.assert_allclose(
            ex.features.feature["image/object/bbox/xmin"].float_list.value,
            [0.1 * i, 0.5],
            rtol=1e-6,
        )
        assert list(ex.features.feature["image/object/class/label"].int64_list.value) == [i, i + 1]
        np.testing.assert_array_equal(
            tf.io.decode_png(ex.features.feature["image/encoded"].bytes_list.value[0]), x[i]
        )


def test_ordinary_names_keep_todays_layout(tmp_path):
    data = {
        "train": {"x": np.zeros((3, 2), np.uint8), "y": np.arange(3)},
        "test": {"x": np.ones((2, 2), np.uint8), "y": np.arange(2)},
    }
    for fmt in FORMATS:
        dstore.save(data, str(tmp_path / ("o" + EXT[fmt])))
    assert sorted(np.load(tmp_path / "o.npz").files) == ["x_test", "x_train", "y_test", "y_train"]
    assert sorted(os.listdir(tmp_path / "o.tfrecords")) == [
        ".dstore-index",
        "croissant.json",
        "dstore.json",
        "test-00000-of-00001.tfrecord",
        "train-00000-of-00001.tfrecord",
    ]
    assert sorted(os.listdir(tmp_path / "o.tfrecords" / ".dstore-index")) == [
        "test-00000-of-00001.tfrecord.idx",
        "train-00000-of-00001.tfrecord.idx",
    ]
    with h5py.File(tmp_path / "o.h5") as f:
        assert sorted(f) == ["test", "train"] and sorted(f["train"]) == ["x", "y"]
    g = zarr.open_group(str(tmp_path / "o.zarr"), mode="r")
    assert sorted(g.group_keys()) == ["test", "train"] and sorted(g["train"].array_keys()) == [
        "x",
        "y",
    ]


# ------------------------------------------------------------------ defence in depth


def test_writers_refuse_paths_outside_their_root(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    for bad in ["..", "../x", "/etc/passwd", "a/../../x", "", ".", "x\x00"]:
        with pytest.raises(UnsafePathError):
            safe_join(str(root), bad)
        with pytest.raises(DstoreError), _open_for_write(str(root), bad):
            pass
    (root / "link").symlink_to(tmp_path)  # a symlink planted inside the output
    with pytest.raises(UnsafePathError, match="outside"):
        safe_join(str(root), "link", "x")
    assert sorted(os.listdir(tmp_path)) == ["out"] and os.listdir(root) == ["link"]


def test_a_manifest_cannot_send_the_reader_outside(tmp_path):
    dst = tmp_path / "o.tfrecords"
    dstore.save({"train": {"x": np.arange(3)}}, str(dst))
    manifest = json.loads((dst / "dstore.json").read_text())
    manifest["splits"]["train"]["shards"][0]["file"] = "../secret-00000-of-00001.tfrecord"
    (dst / "dstore.json").write_text(json.dumps(manifest))
    with pytest.raises(DstoreError, match="not a plain name"):
        dstore.open(str(dst))


@pytest.mark.parametrize("fmt", FORMATS)
def test_lone_surrogates_in_names(tmp_path, fmt):
    """Not text, but Python allows them: stored escaped where names are free; a format
    whose names must be text (protobuf keys, Arrow names) refuses them by field in one
    line, nothing written. No list of formats: each is held to one of the two."""
    data = {"s\ud800": {"x": np.arange(3)}, "t": {"f\udcff": np.arange(2)}}
    dst = str(tmp_path / ("o" + EXT[fmt]))
    try:
        dstore.save(data, dst)
    except SchemaError as e:
        assert re.search(r"field '.*': .*name .* not valid Unicode text", str(e)), e
        assert os.listdir(tmp_path) == []
        return
    _assert_same(data, _read_back(dst))


def test_npz_refuses_escaped_names_it_could_not_restore(tmp_path):
    """Past 64 KiB the schema cannot ride in the zip comment; escaped names would come back changed."""
    many = {f"f{i:03d}_" + "n" * 100: np.arange(2) for i in range(300)}
    plain = str(tmp_path / "plain.npz")
    dstore.save({"train": many}, plain)  # plain names are inferred back from the keys
    assert len(zipfile.ZipFile(plain).comment) == 0
    _assert_same({"train": many}, _read_back(plain))
    with pytest.raises(SchemaError, match=r"does not fit in the 64 KiB zip comment.*'train/a/b'"):
        dstore.save({"train": {**many, "a/b": np.arange(2)}}, str(tmp_path / "escaped.npz"))
    assert sorted(os.listdir(tmp_path)) == ["plain.npz"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_names_that_look_alike_after_escaping_stay_apart(tmp_path, fmt):
    """A name, its escape, the escape of its escape, a cut name and the name that looks like it, case twins."""
    long = "é" * 150
    names = [
        "a/b",
        "a%2Fb",
        "a%252Fb",
        long,
        long + "x",
        escape(long),
        "X",
        "x",
        ".x",
        "%2Ex",
        "",
        "%",
    ]
    splits = [
        *names[:3],
        long,
        long + "x",
        escape(long),
        "x",
        "X",
        "",
    ]  # and every name as a field of each
    data = {
        s: {f: np.full((2, 1), i * 100 + j, np.int32) for j, f in enumerate(names)}
        for i, s in enumerate(splits)
    }
    if _case_conflict(data, fmt):  # refused (tests/test_hostile_decisions.py): the rest stay apart
        data = {s: {f: a for f, a in d.items() if f != "X"} for s, d in data.items() if s != "X"}
    dst = str(tmp_path / ("o" + EXT[fmt]))
    with Outside(str(tmp_path), [dst]):
        dstore.save(data, dst)
    _assert_same(data, _read_back(dst))
