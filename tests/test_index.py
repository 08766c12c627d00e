"""Record indexes: ``dstore index`` for TFRecord files dstore did not write, read by
dstore; DALI's format (``--out``) read by the ``tfrecord`` package (in a child process: it
must never share one with TensorFlow). No index sits where a ``<split>-*`` or
``*.tfrecord*`` glob finds it. The ``.dstore-index/<shard>.idx`` of every plain shard
dstore writes (listed, tiling the shard, read at random, named when damaged) is tested
for every format that keeps one by the sharded suite (``dstore.testing.ShardedCodecSuite``)."""

from __future__ import annotations

import fnmatch
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dstore
import dstore.testing
from dstore.cli import main
from dstore.errors import CodecIOError
from dstore.registry import codecs_with, default_extension, get_codec_class

pytest.importorskip("imagecodecs")


@pytest.fixture
def written(tmp_path, tiles):
    """A dstore TFRecord folder of several shards: tiles, labels and a record number."""
    x, y = tiles
    data = {"train": {"x": x, "y": y, "k": np.arange(len(x), dtype=np.int64)}}
    path = str(tmp_path / "o.tfrecords")
    dstore.save(data, path, shard_mb="0.05")
    return path, data["train"]


def _foreign(tmp_path, written) -> str:
    """The same shards without dstore's manifest or indexes: files dstore did not write."""
    path, _ = written
    folder = tmp_path / "foreign"
    folder.mkdir()
    for name in os.listdir(path):
        if name.endswith(".tfrecord"):
            shutil.copy(os.path.join(path, name), folder / name)
    return str(folder)


def _manifest(path: str) -> dict:
    with open(os.path.join(path, "dstore.json")) as f:
        return json.load(f)


def test_dstore_index_makes_foreign_files_random_access(tmp_path, written, capsys):
    _, data = written
    folder = _foreign(tmp_path, written)
    before = dstore.api.open_reader(folder, format="tfrecord")
    assert before.sequential_reason  # read in order without an index
    assert main(["index", folder]) == 0
    assert "index file(s) written" in capsys.readouterr().out
    reader = dstore.api.open_reader(folder, format="tfrecord")
    assert reader.sequential_reason is None
    with dstore.open(folder, format="tfrecord") as ds:
        i = len(data["k"]) - 2
        np.testing.assert_array_equal(ds["train"]["x"][i], data["x"][i])
    # a sidecar that no longer matches its file (a record was appended) is refused by name
    shard = os.path.join(
        folder, sorted(p for p in os.listdir(folder) if p.endswith(".tfrecord"))[-1]
    )
    sidecar = os.path.join(folder, ".dstore-index", os.path.basename(shard) + ".idx")
    first_frame = int(np.loadtxt(sidecar, dtype=np.int64, ndmin=2)[0, 1])
    with open(shard, "rb") as f:
        frame = f.read(first_frame)
    with open(shard, "ab") as f:
        f.write(frame)
    with pytest.raises(CodecIOError, match=r"\.idx.*rebuild it with 'dstore index'"):
        dstore.open(folder, format="tfrecord")["train"]["k"][len(data["k"]) - 1]


def test_index_into_another_folder_and_gzip_refused(tmp_path, written, capsys):
    folder = _foreign(tmp_path, written)
    out = tmp_path / "indexes"
    out.mkdir()
    assert main(["index", os.path.join(folder, "*.tfrecord"), "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == sorted(p + ".idx" for p in os.listdir(folder))
    gz = str(tmp_path / "z.tfrecords.gz")
    dstore.save({"x": np.arange(5)}, gz)
    gz_shard = next(os.path.join(gz, p) for p in os.listdir(gz) if p.endswith(".tfrecord"))
    assert main(["index", gz_shard]) == 2
    err = capsys.readouterr().err
    assert "GZIP TFRecord file cannot be indexed" in err and err.count("\n") == 1
    assert not [p for p in os.listdir(gz) if p.endswith(".idx")]


def test_two_runs_indexing_the_same_file_at_once(tmp_path, written):
    folder = _foreign(tmp_path, written)
    cmd = [sys.executable, "-m", "dstore.cli", "index", folder]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert not [p for p in os.listdir(folder) if p.endswith(".part")]
    assert dstore.api.open_reader(folder, format="tfrecord").indexed()


@pytest.mark.tf
def test_index_of_a_tensorflow_file_read_by_the_tfrecord_package(tmp_path):
    """A file TensorFlow wrote, indexed by dstore, read by the ``tfrecord`` package with
    that index (its sharded reader seeks by it) in a process without TensorFlow."""
    if importlib.util.find_spec("tfrecord") is None:  # never imported beside TensorFlow
        pytest.skip("the tfrecord package is not installed")
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(50):
            feats = {"k": tf.train.Feature(int64_list=tf.train.Int64List(value=[i] * (i % 4 + 1)))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    assert main(["index", path, "--out", str(tmp_path)]) == 0  # DALI's files, beside it
    code = textwrap.dedent(
        """
        import sys
        from tfrecord.reader import tfrecord_loader
        path = sys.argv[1]
        got = []
        for shard in range(3):  # the package splits by index lines, each seeked to
            for rec in tfrecord_loader(path, path + ".idx", {"k": "int"}, shard=(shard, 3)):
                got.append(int(rec["k"][0]))
        print(sorted(got))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == str(list(range(50)))
    with dstore.open(path) as ds:
        assert ds["data"]["k"][37].tolist() == [37] * (37 % 4 + 1)


# ------------------------------------------- where indexes live (issue #34, new user)


def _two_split_output(tmp_path, tiles, fmt: str) -> str:
    x, onehot = tiles
    y = onehot.argmax(axis=1).astype(np.int64)
    half = len(x) // 2
    data = {
        "train": {"x": x[:half], "y": y[:half]},
        "test": {"x": x[half:], "y": y[half:]},
    }
    path = str(tmp_path / f"out{default_extension(fmt)}")
    dstore.save(data, path, shard_mb="0.05")
    return path


@pytest.mark.parametrize("fmt", codecs_with(lambda c: c.sharded))
def test_no_file_in_an_outputs_root_is_taken_for_a_shard_by_a_glob(tmp_path, tiles, fmt):
    """``glob("out/train-*")`` (TFDS, tf.data examples) and ``*.tfrecord*`` match the
    shards and nothing else; the root holds shards, JSON metadata (the manifest,
    croissant.json) and, for a format the Hub reads as it is, its README.md card only."""
    path = _two_split_output(tmp_path, tiles, fmt)
    manifest = _manifest(path)
    shards = {s["file"] for info in manifest["splits"].values() for s in info["shards"]}
    root = set(os.listdir(path))
    for pattern in [f"{split}-*" for split in manifest["splits"]] + ["*.tfrecord*"]:
        matched = {n for n in root if fnmatch.fnmatchcase(n, pattern)}
        assert matched <= shards, (pattern, sorted(matched - shards))
    others = {n for n in root - shards if not n.startswith(".")}
    cards = {"README.md"} if get_codec_class(fmt).hub_card else set()
    assert all(n.endswith(".json") or n in cards for n in others), sorted(others)


@pytest.mark.tf
def test_tensorflow_reads_every_record_through_a_shard_glob(tmp_path, tiles):
    """An output with record indexes read as TFDS and tf.data examples list shards; the
    indexes once matched ``train-*`` (DataLossError: corrupted record at 0)."""
    tf = pytest.importorskip("tensorflow")
    path = _two_split_output(tmp_path, tiles, "tfrecord")
    assert any("index" in s for s in _manifest(path)["splits"]["train"]["shards"])
    spec = {"y": tf.io.FixedLenFeature([], tf.int64)}
    x, onehot = tiles
    want = onehot.argmax(axis=1).astype(np.int64)
    half = len(x) // 2
    for files, expected in (
        (sorted(glob.glob(os.path.join(path, "train-*"))), want[:half]),
        (sorted(glob.glob(os.path.join(path, "*.tfrecord*"))), None),
        # "every file of the folder but its JSON metadata" (dstore.json, croissant.json)
        (
            sorted(
                os.path.join(path, n)
                for n in os.listdir(path)
                if not n.endswith(".json") and os.path.isfile(os.path.join(path, n))
            ),
            None,
        ),
    ):
        got = [
            int(tf.io.parse_single_example(r, spec)["y"]) for r in tf.data.TFRecordDataset(files)
        ]
        if expected is not None:
            assert got == expected.tolist()
        else:
            assert sorted(got) == sorted(want.tolist())


def test_outputs_with_indexes_beside_their_shards_still_read(tmp_path, written):
    """Outputs written before the indexes moved into .dstore-index/ list them beside
    the shards: read, random access and checked as before."""
    path, data = written
    manifest = _manifest(path)
    for s in manifest["splits"]["train"]["shards"]:
        old = s["index"]["file"].split("/", 1)[1]
        os.rename(os.path.join(path, s["index"]["file"]), os.path.join(path, old))
        s["index"]["file"] = old
    os.rmdir(os.path.join(path, ".dstore-index"))
    with open(os.path.join(path, "dstore.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    assert dstore.api.open_reader(path).indexed()
    with dstore.open(path) as ds:
        assert int(ds["train"]["k"][len(data["k"]) - 3]) == len(data["k"]) - 3
    assert dstore.api.check(path).ok


def test_dstore_index_writes_into_the_index_folder_by_default(tmp_path, written):
    folder = _foreign(tmp_path, written)
    before = set(os.listdir(folder))
    report = dstore.api.index([folder])
    assert set(os.listdir(folder)) == before | {".dstore-index"}  # the root is unchanged
    assert sorted(os.path.basename(p) for p, _ in report.written) == sorted(
        n + ".idx" for n in before
    )
    assert dstore.api.open_reader(folder, format="tfrecord").indexed()


def test_a_copy_without_its_index_folder_reads_in_order(tmp_path, written):
    """``cp out/* copy/`` leaves dot-folders behind: the shards read in order, ``dstore
    verify`` reports the indexes missing, ``dstore index`` puts them back."""
    path, data = written
    copy = tmp_path / "copy.tfrecords"
    copy.mkdir()
    for name in os.listdir(path):
        if not name.startswith("."):
            shutil.copy(os.path.join(path, name), copy / name)
    reader = dstore.api.open_reader(str(copy))
    assert not reader.indexed() and reader.sequential_reason
    got = dstore.testing.read_all(str(copy))["train"]
    np.testing.assert_array_equal(got["k"], data["k"])
    report = dstore.api.check(str(copy))
    assert not report.ok and any(".idx: missing" in ln for ln in report.lines())
    dstore.api.index([str(copy)])
    assert dstore.api.open_reader(str(copy)).indexed() and dstore.api.check(str(copy)).ok
