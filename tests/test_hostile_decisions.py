"""Issue #26, "worth a decision": what dstore does with valid but unusual foreign input.

Each test is one decision recorded in docs/reliability.md: an empty
``tf.train.Feature{}``, foreign names ending in dstore's ragged suffixes, names
that differ only in case, and ``info`` agreeing with ``convert``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.registry import codecs_with
from dstore.testing import read_all


def _dstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dstore.cli", *args], capture_output=True, text=True, check=False
    )


# ----------------------------------------------------------- empty tf.train.Feature{}


def _examples_with_empty_features(path: str, empty_in: dict[str, list[int]]) -> dict[str, list]:
    """Six Examples of photo rows written by TensorFlow: ``row`` (floats), ``label`` (an
    int) and ``blank`` (never a value); ``empty_in[name]`` lists the records where
    that feature is an empty ``tf.train.Feature()``. Returns the values written."""
    tf = pytest.importorskip("tensorflow")
    x, y = photo_tiles(6, 8, seed=3)
    rows = [x[i, 0, :, 0].astype(np.float32) / 255 for i in range(6)]
    labels = [int(np.argmax(y[i])) for i in range(6)]
    written: dict[str, list] = {"row": [], "label": []}
    with tf.io.TFRecordWriter(path) as w:
        for i in range(6):
            feats = {
                "row": tf.train.Feature(float_list=tf.train.FloatList(value=rows[i])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[labels[i]])),
                "blank": tf.train.Feature(),
            }
            for name, where in empty_in.items():
                if i in where:
                    feats[name] = tf.train.Feature()
            written["row"].append(rows[i] if i not in empty_in.get("row", []) else rows[i][:0])
            written["label"].append(labels[i])
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            w.write(ex.SerializeToString())
    return written


def test_an_empty_feature_reads_as_a_missing_one(tmp_path):
    """An empty Feature{} in record 2 was refused for the whole file ("holds no list"):
    now it is that record's empty list, as TensorFlow's RaggedFeature parses it; a
    feature that is empty in every record is left out with a note."""
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "e.tfrecord")
    written = _examples_with_empty_features(path, {"row": [2]})
    got = read_all(path)["data"]
    assert sorted(got) == ["label", "row"]
    np.testing.assert_array_equal(got["label"], written["label"])
    rows = got["row"]
    for i, want in enumerate(written["row"]):
        np.testing.assert_array_equal(rows.values[rows.offsets[i] : rows.offsets[i + 1]], want)
    # TensorFlow reads the same file the same way
    spec = {"row": tf.io.RaggedFeature(tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}
    for i, rec in enumerate(tf.data.TFRecordDataset(path)):
        ex = tf.io.parse_single_example(rec, spec)
        np.testing.assert_array_equal(ex["row"].numpy(), written["row"][i])
    out = str(tmp_path / "e.npz")
    proc = _dstore("convert", path, out)
    assert proc.returncode == 0, proc.stderr
    assert "feature 'blank' is an empty tf.train.Feature in every record" in proc.stdout
    assert read_all(out)["data"].keys() == got.keys()


def test_an_empty_one_value_number_feature_is_an_empty_list(tmp_path):
    """A one-int feature empty in record 4 becomes a ragged list (the rule for a number
    feature some records lack); the record reads as an empty list, not a refusal."""
    path = str(tmp_path / "e.tfrecord")
    written = _examples_with_empty_features(path, {"label": [4]})
    got = read_all(path)["data"]["label"]
    lists = [got.values[got.offsets[i] : got.offsets[i + 1]].tolist() for i in range(6)]
    assert lists == [[v] if i != 4 else [] for i, v in enumerate(written["label"])]


# ------------------------------------------- foreign names ending in .values / .row_splits


def _photo_rows(n: int) -> np.ndarray:
    x, _ = photo_tiles(n, 8, seed=4)
    return x[:, 0, :, 0].astype(np.float64) / 255  # (n, 8) rows of a photo


def test_foreign_members_named_like_the_ragged_layout_stay_plain_fields(tmp_path):
    """Decision: the values + row splits reading is dstore's layout, taken (without a
    dstore schema) only when the members are that layout: integer row splits, and in
    zarr a group holding nothing else. Members that merely share the names are plain
    fields under their own names. Before, the npz and HDF5 files were refused
    ("must be a 1-d integer array") and the zarr group's third array was dropped
    without a word."""
    import h5py
    import zarr

    rows = _photo_rows(4)
    words = np.array(["sea", "reef", "sand", "coral"])
    npz = tmp_path / "f.npz"
    np.savez(npz, **{"a.values": rows[:, 0], "a.row_splits": rows[:, 1], "x.values": rows[:, 2]})
    got = read_all(str(npz))["data"]
    assert sorted(got) == ["a.row_splits", "a.values", "x.values"]
    np.testing.assert_array_equal(got["a.row_splits"], rows[:, 1])
    np.testing.assert_array_equal(got["x.values"], rows[:, 2])

    h5 = tmp_path / "f.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("names", data=words.tolist(), dtype=h5py.string_dtype())
        f["names.row_splits"] = rows[:, 3]  # floats: not offsets
    got = read_all(str(h5))["data"]
    assert got["names"].to_str_list("") == words.tolist()
    np.testing.assert_array_equal(got["names.row_splits"], rows[:, 3])

    store = str(tmp_path / "f.zarr")
    group = zarr.open_group(store, mode="w").create_group("g")
    group.create_array("values", data=rows[:, 4])
    group.create_array("row_splits", data=np.arange(4, dtype=np.int64))
    group.create_array("other", data=rows[:, 5])
    got = read_all(store)["g"]
    assert sorted(got) == ["other", "row_splits", "values"]
    np.testing.assert_array_equal(got["other"], rows[:, 5])
    np.testing.assert_array_equal(got["row_splits"], np.arange(4))


def test_row_splits_must_end_at_the_last_value(tmp_path):
    """The foreign layout read as ragged must cover every value: row splits ending
    before the last value dropped the rest silently (zarr, HDF5). Now refused when
    opened, so that `info` refuses what `convert` would (it printed the field)."""
    import h5py
    import zarr

    rows = _photo_rows(3)
    store = str(tmp_path / "r.zarr")
    group = zarr.open_group(store, mode="w").create_group("lens")
    group.create_array("values", data=rows.reshape(-1))  # 24 values
    group.create_array("row_splits", data=np.array([0, 8, 16, 20]))
    with pytest.raises(dstore.DstoreError, match=r"field 'lens': row splits run from 0 to 20, not"):
        read_all(store)
    proc = _dstore("info", store)
    assert proc.returncode == 2 and "from 0 to 20, not from 0 to 24" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    h5 = str(tmp_path / "r.h5")
    with h5py.File(h5, "w") as f:
        f.create_dataset("w", data=["sea", "reef", "sand"], dtype=h5py.string_dtype())
        f["w.row_splits"] = np.array([0, 1, 2])
    with pytest.raises(dstore.DstoreError, match=r"'w.row_splits': row splits run from 0 to 2"):
        read_all(h5)
    assert _dstore("info", h5).returncode == 2
    # the layout itself still reads, from every format
    group["row_splits"][...] = np.array([0, 8, 16, 24])
    lens = read_all(store)["data"]["lens"]
    np.testing.assert_array_equal(lens.values, rows.reshape(-1))
    np.testing.assert_array_equal(lens.offsets, [0, 8, 16, 24])


# ------------------------------------------------- names equal but for case, CON, a:b

SHARDED = codecs_with(lambda c: c.sharded)  # the usable sharded formats


@pytest.mark.parametrize("codec", SHARDED)
def test_splits_equal_but_for_case_are_refused_by_sharded_formats(tmp_path, codec):
    """Split names become shard file names: 'Train' and 'train' wrote two shard sets
    that replace each other on macOS and Windows (and lose a split when the folder is
    copied there). Refused by name, nothing written."""
    from dstore.registry import default_extension

    rows = _photo_rows(4)
    data = {"Train": {"x": rows[:2]}, "train": {"x": rows[2:]}}
    with pytest.raises(dstore.DstoreError, match=r"splits Train and train .*case does not count"):
        dstore.save(data, tmp_path / f"o{default_extension(codec)}", format=codec)
    assert os.listdir(tmp_path) == []


def test_webdataset_fields_equal_but_for_case_are_refused(tmp_path):
    """The webdataset library lowercases member suffixes: fields 'x' and 'X' made a tar
    it refuses ("duplicate file name in tar file"); refused by name when writing."""
    rows = _photo_rows(3)
    with pytest.raises(dstore.DstoreError, match=r"fields x and X .*lowercases"):
        dstore.save({"train": {"x": rows, "X": rows[::-1]}}, tmp_path / "w.tar")
    assert os.listdir(tmp_path) == []


def test_windows_reserved_names_are_kept(tmp_path):
    """Decision: names are not escaped further for Windows (the escape rule is part of
    the file formats): a field 'CON' or 'a:b' round-trips where the file system allows
    it, in every format."""
    rows = _photo_rows(3)
    data = {"train": {"CON": rows, "a:b": rows[:, :2]}}
    for codec in dstore.available_codecs():
        from dstore.registry import default_extension

        if dstore.available_codecs()[codec] is not None:
            continue
        out = tmp_path / f"r-{codec}{default_extension(codec)}"
        dstore.save(data, out, format=codec)
        got = read_all(str(out))["train"]
        for name, arr in data["train"].items():
            np.testing.assert_array_equal(got[name], arr)


def test_per_source_outputs_that_would_share_a_name_are_refused(tmp_path):
    """--per-source writes a file per source: sources 'a.1' and 'a.2' (a folder read
    with --from json) both became 'a.json' (refused with a temporary path and an
    --overwrite hint that would not help), 'x.json' and 'X.json' wrote x.npz and X.npz,
    which replace each other on macOS and Windows. Both refused by name."""
    rows = _photo_rows(3)
    for files, fmt, want in (
        (("a.1", "a.2"), "json", r"sources a\.1 and a\.2 would both be stored as 'a\.json'"),
        (("X.json", "x.json"), "npz", r"sources X\.json and x\.json .*case does not count"),
    ):
        src = tmp_path / f"src-{fmt}"
        src.mkdir()
        for i, name in enumerate(files):
            (src / name).write_text(
                f'[{{"v": {float(rows[i, 0])!r}}}, {{"v": {float(rows[i, 1])!r}}}]'
            )
        merged = str(tmp_path / f"m-{fmt}.npz")
        assert _dstore("convert", str(src), merged, "--from", "json").returncode == 0
        out = tmp_path / f"out-{fmt}"
        proc = _dstore("convert", merged, str(out), "--per-source", "--to", fmt)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert re.search(want, proc.stderr), proc.stderr
        assert not out.exists()
