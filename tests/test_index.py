"""Record indexes: ``dstore index`` for TFRecord files dstore did not write, read by
dstore, DALI's format and the ``tfrecord`` package (in a child process: it must never
share one with TensorFlow). The index beside every plain shard dstore writes (listed,
tiling the shard, read at random, named when damaged) is tested for every format that
keeps one by the sharded suite (``dstore.testing.ShardedCodecSuite``)."""

from __future__ import annotations

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
from dstore.cli import main
from dstore.errors import CodecIOError

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
    first_frame = int(np.loadtxt(shard + ".idx", dtype=np.int64, ndmin=2)[0, 1])
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
    assert main(["index", path]) == 0
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
