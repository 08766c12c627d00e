"""Versions of a dataset that grows (issue #37): every reader and read command takes a
version, a reader state pins the one it started on, ``log`` lists them, ``compact``
rewrites small shards as a new version and ``prune`` removes what only older ones need;
a hand-written glob of a folder's root reads exactly the latest version's records."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.errors import VersionError
from dstore.registry import get_codec_class
from dstore.testing import parts_options, usable_formats

SHARDED = [n for n in usable_formats() if get_codec_class(n).sharded]
GROWN = [*SHARDED, *(n for n in usable_formats() if get_codec_class(n).appends_in_place)]
EXT = usable_formats()


def _grown(tmp_path, fmt: str, x: np.ndarray, parts: int = 3, **options) -> str:
    """A dataset of ``fmt`` made of ``parts`` versions: x split in equal runs, a label each."""
    dst = str(tmp_path / f"d{EXT[fmt]}")
    runs = np.array_split(np.arange(len(x)), parts)
    for i, run in enumerate(runs):
        src = str(tmp_path / f"part{i}.npz")
        dstore.save({"train": {"x": x[run], "k": run.astype(np.int64)}}, src)
        if i == 0:
            dstore.convert(
                src,
                dst,
                to=fmt,
                options={**parts_options(fmt, shard_mb=0.02, chunk_mb=0.01), **options},
            )
        else:
            dstore.convert(src, dst, append=True)
    return dst


@pytest.mark.parametrize("fmt", GROWN)
def test_every_reader_reads_the_version_it_is_given(tmp_path, tiles, fmt, capsys):
    pytest.importorskip("torch")
    x, _ = tiles
    dst = _grown(tmp_path, fmt, x[:30])
    first = 10
    with dstore.open(dst, version=1) as ds:
        np.testing.assert_array_equal(ds["train"]["x"][:], x[:first])
    ks = [int(r["k"]) for r in dstore.to_torch(dst, "train", fields=["k"], version=1)]
    assert ks == list(range(first))
    ks = [int(r["k"]) for r in dstore.to_torch(dst, "train", fields=["k"], version=2)]
    assert ks == list(range(20))
    # the command line: convert, info and verify of version 1
    out = str(tmp_path / "v1.npz")
    assert main(["convert", dst, out, "--version", "1"]) == 0
    with dstore.open(out) as ds:
        np.testing.assert_array_equal(ds["train"]["x"][:], x[:first])
    capsys.readouterr()
    assert main(["info", dst, "--version", "1"]) == 0
    assert "10 records" in capsys.readouterr().out
    assert main(["verify", out, dst, "--version", "1"]) == 0
    assert main(["verify", dst]) == 0
    assert "all passed" in capsys.readouterr().out
    assert main(["info", dst, "--version", "9"]) == 2
    err = capsys.readouterr().err
    assert "VersionError" in err and "no version 9" in err and len(err.strip().splitlines()) == 1


def test_to_tf_dataset_reads_a_version(tmp_path, tiles):
    pytest.importorskip("tensorflow")
    x, _ = tiles
    dst = _grown(tmp_path, "tfrecord", x[:30])
    ds = dstore.to_tf_dataset(dst, "train", ordered=True, version=2)
    ks = [int(r["k"]) for r in ds.as_numpy_iterator()]
    assert ks == list(range(20))
    ds = dstore.to_tf_dataset(dst, "train", ordered=True)
    assert [int(r["k"]) for r in ds.as_numpy_iterator()] == list(range(30))


@pytest.mark.parametrize("fmt", GROWN)
def test_a_reader_state_pins_the_version_it_started_on(tmp_path, tiles, fmt):
    """A run saved mid-epoch, resumed after an append: it reads the records it had left
    of the version it started on, not the new ones."""
    pytest.importorskip("torch")
    x, _ = tiles
    dst = _grown(tmp_path, fmt, x[:20], parts=2)
    ds = dstore.to_torch(dst, "train", fields=["k"])
    it = iter(ds)
    head = [int(next(it)["k"]) for _ in range(7)]
    state = json.loads(json.dumps(ds.state_dict()))
    assert state["dataset"]["version"] == 2
    more = str(tmp_path / "more.npz")
    dstore.save({"train": {"x": x[20:30], "k": np.arange(20, 30, dtype=np.int64)}}, more)
    dstore.convert(more, dst, append=True)
    resumed = dstore.to_torch(dst, "train", fields=["k"])
    assert resumed.count == 30  # a new reader reads the latest
    resumed.load_state_dict(state)
    rest = [int(r["k"]) for r in resumed]
    assert head + rest == list(range(20))


@pytest.mark.parametrize("fmt", GROWN)
def test_a_reader_opened_before_an_append_reads_on_as_it_was(tmp_path, tiles, fmt):
    x, _ = tiles
    dst = _grown(tmp_path, fmt, x[:20], parts=2)
    with dstore.open(dst) as ds:
        before = ds["train"]["x"][:5]
        more = str(tmp_path / "more.npz")
        dstore.save({"train": {"x": x[20:40], "k": np.arange(20, 40, dtype=np.int64)}}, more)
        dstore.convert(more, dst, append=True)
        np.testing.assert_array_equal(before, x[:5])
        np.testing.assert_array_equal(ds["train"]["x"][:], x[:20])
        np.testing.assert_array_equal(ds["train"]["k"][:], np.arange(20))
    with dstore.open(dst) as ds:
        np.testing.assert_array_equal(ds["train"]["k"][:], np.arange(40))


def test_log_lists_every_version(tmp_path, tiles, capsys):
    x, _ = tiles
    dst = _grown(tmp_path, "webdataset", x[:30])
    capsys.readouterr()
    assert main(["log", dst, "--json"]) == 0
    versions = json.loads(capsys.readouterr().out)
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert [v["records"] for v in versions] == [{"train": 10}, {"train": 20}, {"train": 30}]
    assert [v["operation"] for v in versions] == ["convert", "append", "append"]
    assert versions[2]["added"] == {"train": 10} and versions[2]["source"].endswith("part2.npz")
    assert all(v["state"] == "kept" and v["time"].endswith("Z") for v in versions)
    assert main(["log", dst]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].endswith("3 version(s)") and table[-1].split()[:3] == [
        "3",
        versions[2]["time"],
        "append",
    ]


def test_log_names_each_source_as_the_first_one(tmp_path, tiles, monkeypatch):
    """A source given relative to the working directory is logged absolute, as version 1's."""
    x, _ = tiles
    monkeypatch.chdir(tmp_path)
    dstore.save({"train": {"x": x[:5], "k": np.arange(5)}}, "day1.npz")
    dstore.save({"train": {"x": x[5:9], "k": np.arange(5, 9)}}, "day2.npz")
    assert main(["convert", "day1.npz", "d.tfrecords"]) == 0
    assert main(["convert", "day2.npz", "d.tfrecords", "--append"]) == 0
    sources = [v["source"] for v in dstore.log("d.tfrecords").to_json()]
    assert sources == [str(tmp_path / "day1.npz"), str(tmp_path / "day2.npz")]


def _root_shards(dst: str, split: str = "train") -> list[str]:
    found = glob.glob(os.path.join(dst, f"{split}-*")) + glob.glob(
        os.path.join(dst, f"*-{split}.*")
    )
    return sorted(found)


@pytest.mark.parametrize("fmt", SHARDED)
def test_compact_and_prune(tmp_path, tiles, fmt, capsys):
    x, _ = tiles
    dst = _grown(tmp_path, fmt, x[:40], parts=8)
    many = _root_shards(dst)
    assert len(many) >= 8
    assert main(["compact", dst, "-o", "shard_mb=64"]) == 0
    out = capsys.readouterr().out
    assert "version 9" in out
    # the shards read and written are counted (was: "0 B in, 0 B out (raw/out inf)")
    assert " 0 B in" not in out and "0 B out" not in out and "raw/out inf" not in out, out
    after = _root_shards(dst)
    assert len(after) == 1 and not set(after) & set(many)
    with dstore.open(dst) as ds:
        np.testing.assert_array_equal(ds["train"]["x"][:], x[:40])
        np.testing.assert_array_equal(ds["train"]["k"][:], np.arange(40))
    with dstore.open(dst, version=3) as ds:  # its shards were superseded, not deleted
        np.testing.assert_array_equal(ds["train"]["k"][:], np.arange(15))
    assert main(["verify", dst]) == 0
    assert main(["prune", dst, "--keep", "1"]) == 0
    assert "versions 1..8 pruned, 9 kept" in capsys.readouterr().out
    with pytest.raises(VersionError, match="version 3 was pruned"):
        dstore.open(dst, version=3)
    superseded = os.path.join(dst, ".dstore-versions", "superseded")
    assert not os.path.isdir(superseded) or not any(files for _, _, files in os.walk(superseded))
    assert main(["verify", dst]) == 0
    capsys.readouterr()
    assert main(["log", dst, "--json"]) == 0
    states = [v["state"] for v in json.loads(capsys.readouterr().out)]
    assert states == ["pruned"] * 8 + ["kept"]


def test_compact_refuses_formats_that_need_none(tmp_path, tiles, capsys):
    x, _ = tiles
    dst = str(tmp_path / "d.zarr")
    dstore.save({"train": {"x": x[:5]}}, dst)
    assert main(["compact", dst]) == 2
    assert "needs no compaction" in capsys.readouterr().err


# the webdataset library leaves its tar files for the garbage collector to close
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_glob_of_the_root_reads_exactly_the_latest_version(tmp_path, tiles):
    """TensorFlow, pyarrow and webdataset reading the files a glob finds get the latest
    version's records once each, after appends and after a compaction."""
    tf = pytest.importorskip("tensorflow")
    pq = pytest.importorskip("pyarrow.parquet")
    wds = pytest.importorskip("webdataset")
    x, _ = tiles
    for fmt in ("tfrecord", "parquet", "webdataset"):
        for compacted in (False, True):
            where = tmp_path / f"{fmt}{compacted}"
            where.mkdir()
            dst = _grown(where, fmt, x[:24], parts=4)
            if compacted:
                dstore.compact(dst)
            files = sorted(glob.glob(os.path.join(dst, "train-*")))
            if fmt == "tfrecord":
                n = sum(1 for _ in tf.data.TFRecordDataset(files))
            elif fmt == "parquet":
                ks = pq.ParquetDataset(files).read().column("k").to_pylist()
                assert ks == list(range(24))
                n = len(ks)
            else:
                keys = [s["__key__"] for s in wds.WebDataset(files, shardshuffle=False)]
                assert len(set(keys)) == len(keys)
                n = len(keys)
            assert n == 24, (fmt, compacted, files)
            assert not glob.glob(os.path.join(dst, "*.tfrecord*")) or fmt == "tfrecord"


def test_the_coralnet_example_of_the_docs_runs_and_prints_what_they_say(tmp_path):
    """docs/versions.md's example, run as written: its blocks succeed, and the log and the
    refusal it quotes are what dstore prints (times and folders aside)."""
    import pathlib
    import re
    import subprocess
    import sys

    page = (pathlib.Path(__file__).parents[1] / "docs" / "versions.md").read_text()
    # the dstore command of this interpreter first on PATH
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    for lang, code in re.findall(r"^```(python|bash)\n(.*?)^```$", page, re.S | re.M):
        argv = [sys.executable, "-c", code] if lang == "python" else ["bash", "-e", "-c", code]
        subprocess.run(
            argv,
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": path},
        )

    def quoted(command: str) -> str:
        return re.search(rf"```console\n\$ {command}\n(.*?)```", page, re.S).group(1)

    def run(command: str) -> str:
        argv = [sys.executable, "-m", "dstore.cli", *command.split()[1:]]
        out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
        return out.stdout + out.stderr

    def plain(text: str) -> str:  # times and the folder of the sources are the run's own
        text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", text)
        return text.replace(str(tmp_path), "/data")

    log = "dstore log features.parquet"
    assert plain(run(log)) == plain(quoted(log))
    again = "dstore convert day2.npz features.parquet --append"
    assert plain(run(again)) == plain(quoted(again))
